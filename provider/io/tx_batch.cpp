// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "tx_batch.h"

#include <algorithm>
#include <cstring>

namespace metaroce::io {

TxBatch::TxBatch(uint32_t capacity, uint32_t slot_bytes)
    : capacity_(std::max<uint32_t>(capacity, 1)),
      slot_bytes_((slot_bytes + 63) & ~uint32_t{63}),
      data_(new uint8_t[size_t{capacity_} * slot_bytes_]),
      entries_(new Entry[capacity_]),
      order_(new uint32_t[capacity_]),
      iovecs_(new iovec[size_t{3} * capacity_]),
      messages_(new mmsghdr[capacity_]()),
      destinations_(new sockaddr_storage[capacity_]()),
      controls_(new Control[capacity_]()),
      info_(new MessageInfo[capacity_]) {}

void TxBatch::add_iovecs(uint32_t index, size_t& iov) {
  const Entry& e = entries_[index];
  if (e.payload_length == 0) {
    iovecs_[iov++] = {slot(index), e.length};
    return;
  }
  iovecs_[iov++] = {slot(index), e.head};
  iovecs_[iov++] = {const_cast<uint8_t*>(e.payload), e.payload_length};
  iovecs_[iov++] = {slot(index) + e.head, e.length - e.head - e.payload_length};
}

namespace {

uint32_t pages_spanned(const void* start, size_t bytes) {
  if (bytes == 0) return 0;
  const auto first = reinterpret_cast<uintptr_t>(start);
  return static_cast<uint32_t>((first + bytes - 1) / 4096 - first / 4096 + 1);
}

}  // namespace

uint32_t TxBatch::pages_of(uint32_t index) {
  const Entry& e = entries_[index];
  return pages_spanned(slot(index), e.head) + pages_spanned(e.payload, e.payload_length) +
         pages_spanned(slot(index) + e.head, e.length - e.head - e.payload_length);
}

void TxBatch::build(const PeerTable::View& peers, uint16_t default_sockets, uint16_t socket_count, bool gso,
                    bool zerocopy, uint64_t& unroutable) {
  message_count_ = 0;
  const size_t n = count_;
  if (n == 0) return;
  socket_count = std::max<uint16_t>(socket_count, 1);

  // Stable counting sort of the datagrams by socket, starting at the first
  // socket with datagrams at or after the one the last batch started with
  // (sockets this batch does not use take no turn: a peer whose paths use
  // sockets 4..7 of 8 would otherwise go first with socket 4 five times in 8).
  socket_datagrams_.assign(socket_count, 0);
  for (size_t i = 0; i < n; ++i) {
    Entry& e = entries_[i];
    e.socket = peers.socket(e.peer, e.path, default_sockets);
    if (e.socket >= socket_count) e.socket = static_cast<uint16_t>(e.path % std::max<uint16_t>(default_sockets, 1));
    ++socket_datagrams_[e.socket];
  }
  uint16_t first = first_socket_ % socket_count;
  while (socket_datagrams_[first] == 0) first = static_cast<uint16_t>((first + 1) % socket_count);
  first_socket_ = static_cast<uint16_t>(first + 1);
  const auto position = [&](uint16_t socket) { return (socket + socket_count - first) % socket_count; };
  bucket_.assign(size_t{socket_count} + 1, 0);
  for (uint16_t socket = 0; socket < socket_count; ++socket) bucket_[position(socket) + 1] = socket_datagrams_[socket];
  for (size_t s = 1; s <= socket_count; ++s) bucket_[s] += bucket_[s - 1];
  for (size_t i = 0; i < n; ++i) order_[bucket_[position(entries_[i].socket)]++] = static_cast<uint32_t>(i);

  size_t iov = 0;
  size_t k = 0;
  while (k < n) {
    const uint32_t head_index = order_[k];
    const Entry& head = entries_[head_index];
    const uint16_t socket = head.socket;
    socklen_t length = 0;
    const sockaddr_storage* destination = peers.destination(head.peer, head.path, length);
    if (destination == nullptr) {
      ++unroutable;
      ++k;
      continue;
    }
    const size_t first_iov = iov;
    add_iovecs(head_index, iov);
    uint32_t segments = 1;
    uint32_t bytes = head.length;
    uint32_t pages = zerocopy && head.payload_length >= kZeroCopyMinPayload ? pages_of(head_index) : 0;
    const bool copyless = pages > 0 && pages <= kMaxZeroCopyFrags;
    size_t j = k + 1;
    if (gso) {
      while (j < n) {
        const Entry& e = entries_[order_[j]];
        if (e.socket != socket || e.peer != head.peer || e.length > head.length) break;
        if (segments == kMaxGsoSegments || bytes + e.length > kMaxGsoBytes) break;
        if (copyless) {
          if (e.payload_length < kZeroCopyMinPayload) break;
          const uint32_t more = pages_of(order_[j]);
          if (pages + more > kMaxZeroCopyFrags) break;
          pages += more;
        }
        add_iovecs(order_[j], iov);
        ++segments;
        bytes += e.length;
        ++j;
        if (e.length < head.length) break;  // a short datagram ends the run
      }
    }
    const size_t m = message_count_++;
    std::memcpy(&destinations_[m], destination, length);
    msghdr& h = messages_[m].msg_hdr;
    h.msg_name = &destinations_[m];
    h.msg_namelen = length;
    h.msg_iov = &iovecs_[first_iov];
    h.msg_iovlen = iov - first_iov;
    if (segments > 1) {
      h.msg_control = controls_[m].bytes;
      h.msg_controllen = write_gso_control(controls_[m].bytes, static_cast<uint16_t>(head.length));
    } else {
      h.msg_control = nullptr;
      h.msg_controllen = 0;
    }
    h.msg_flags = 0;
    messages_[m].msg_len = 0;
    info_[m] = {socket, static_cast<uint16_t>(segments), head.length, copyless};
    k = j;
  }
}

}  // namespace metaroce::io
