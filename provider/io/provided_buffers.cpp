// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "provided_buffers.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace metaroce::io {
namespace {

constexpr size_t kHeaderBytes = sizeof(io_uring_recvmsg_out) + sizeof(sockaddr_storage) + kRxControlBytes;

uint32_t round_up_power_of_two(uint32_t n) {
  uint32_t p = 1;
  while (p < n && p < 32768) p <<= 1;
  return p;
}

}  // namespace

ProvidedBuffers::ProvidedBuffers(uint32_t count, uint32_t payload_bytes)
    : count_(round_up_power_of_two(count)),
      buffer_bytes_(static_cast<uint32_t>((kHeaderBytes + payload_bytes + 63) & ~size_t{63})),
      data_(new uint8_t[size_t{count_} * buffer_bytes_]) {
  template_.msg_namelen = sizeof(sockaddr_storage);
  template_.msg_controllen = kRxControlBytes;
}

ProvidedBuffers::~ProvidedBuffers() { std::free(ring_); }

int ProvidedBuffers::register_with(io_uring& ring, uint16_t group) {
  const size_t ring_bytes = size_t{count_} * sizeof(io_uring_buf);
  void* memory = nullptr;
  if (posix_memalign(&memory, 4096, (ring_bytes + 4095) & ~size_t{4095}) != 0) return -ENOMEM;
  std::memset(memory, 0, ring_bytes);
  ring_ = static_cast<io_uring_buf_ring*>(memory);
  io_uring_buf_reg reg;
  std::memset(&reg, 0, sizeof reg);
  reg.ring_addr = reinterpret_cast<uintptr_t>(ring_);
  reg.ring_entries = count_;
  reg.bgid = group;
  const int result = io_uring_register_buf_ring(&ring, &reg, 0);
  if (result != 0) return result;
  registered_ = true;
  group_ = group;
  io_uring_buf_ring_init(ring_);
  const int mask = io_uring_buf_ring_mask(count_);
  for (uint32_t i = 0; i < count_; ++i)
    io_uring_buf_ring_add(ring_, buffer(static_cast<uint16_t>(i)), buffer_bytes_, static_cast<uint16_t>(i), mask,
                          static_cast<int>(i));
  io_uring_buf_ring_advance(ring_, static_cast<int>(count_));
  return 0;
}

void ProvidedBuffers::unregister(io_uring& ring) {
  if (registered_) (void)io_uring_unregister_buf_ring(&ring, group_);
  registered_ = false;
}

bool ProvidedBuffers::parse(uint16_t id, int result, RxMessage& out) {
  if (id >= count_ || result < 0 || static_cast<uint32_t>(result) > buffer_bytes_) return false;
  uint8_t* base = buffer(id);
  io_uring_recvmsg_out* header = io_uring_recvmsg_validate(base, result, &template_);
  if (header == nullptr) return false;
  // The control data sits after the (full-size) name area; read it through
  // a msghdr so that the usual CMSG walk applies.
  msghdr control{};
  control.msg_control = static_cast<uint8_t*>(io_uring_recvmsg_name(header)) + template_.msg_namelen;
  control.msg_controllen = header->controllen;
  const RxMeta meta = parse_rx_control(control);
  out.data = static_cast<const uint8_t*>(io_uring_recvmsg_payload(header, &template_));
  out.length = io_uring_recvmsg_payload_length(header, result, &template_);
  out.segment = meta.gro_segment;
  out.ce = meta.ce;
  out.arrival_realtime_ns = meta.arrival_realtime_ns;
  out.truncated = (header->flags & MSG_TRUNC) != 0;
  out.from = reinterpret_cast<const sockaddr_storage*>(io_uring_recvmsg_name(header));
  return true;
}

void ProvidedBuffers::give_back(uint16_t id) {
  io_uring_buf_ring_add(ring_, buffer(id), buffer_bytes_, id, io_uring_buf_ring_mask(count_), pending_returns_++);
}

void ProvidedBuffers::publish() {
  if (pending_returns_ == 0) return;
  io_uring_buf_ring_advance(ring_, pending_returns_);
  pending_returns_ = 0;
}

}  // namespace metaroce::io
