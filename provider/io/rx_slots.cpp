// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "rx_slots.h"

#include <algorithm>

namespace metaroce::io {

RxSlots::RxSlots(uint32_t count, uint32_t buffer_bytes)
    : count_(std::max<uint32_t>(count, 1)),
      buffer_bytes_((buffer_bytes + 63) & ~uint32_t{63}),
      data_(new uint8_t[size_t{count_} * buffer_bytes_]),
      iovecs_(new iovec[count_]),
      headers_(new mmsghdr[count_]()),
      sources_(new sockaddr_storage[count_]()),
      controls_(new Control[count_]()) {
  for (uint32_t i = 0; i < count_; ++i) {
    iovecs_[i] = {data_.get() + size_t{i} * buffer_bytes_, buffer_bytes_};
    arm(i);
  }
}

msghdr& RxSlots::arm(uint32_t i) {
  msghdr& h = headers_[i].msg_hdr;
  h.msg_name = &sources_[i];
  h.msg_namelen = sizeof(sockaddr_storage);
  h.msg_iov = &iovecs_[i];
  h.msg_iovlen = 1;
  h.msg_control = controls_[i].bytes;
  h.msg_controllen = kRxControlBytes;
  h.msg_flags = 0;
  headers_[i].msg_len = 0;
  return h;
}

mmsghdr* RxSlots::arm_all(uint32_t n) {
  for (uint32_t i = 0; i < std::min(n, count_); ++i) arm(i);
  return headers_.get();
}

RxMessage RxSlots::message(uint32_t i, uint32_t bytes) const {
  const msghdr& h = headers_[i].msg_hdr;
  RxMessage m;
  m.data = data_.get() + size_t{i} * buffer_bytes_;
  m.length = std::min(bytes, buffer_bytes_);
  const RxMeta meta = parse_rx_control(h);
  m.segment = meta.gro_segment;
  m.ce = meta.ce;
  m.arrival_realtime_ns = meta.arrival_realtime_ns;
  m.truncated = (h.msg_flags & MSG_TRUNC) != 0;
  m.from = &sources_[i];
  return m;
}

}  // namespace metaroce::io
