// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A provided-buffer ring (io_uring buffer group) for multishot recvmsg: the
// kernel picks a free buffer per received (GRO super-)datagram and names it
// in the completion; the progress thread hands it back once the engine has
// consumed the data. Each buffer holds an io_uring_recvmsg_out header, the
// source address, the control data and the payload, in that order.
#pragma once

#include <liburing.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "rx_slots.h"

namespace metaroce::io {

class ProvidedBuffers {
 public:
  // `count` is rounded up to a power of two; `payload_bytes` per buffer.
  ProvidedBuffers(uint32_t count, uint32_t payload_bytes);
  ~ProvidedBuffers();
  ProvidedBuffers(const ProvidedBuffers&) = delete;
  ProvidedBuffers& operator=(const ProvidedBuffers&) = delete;

  // Registers the ring as buffer group `group` and provides every buffer.
  // Returns 0 or a negative errno.
  int register_with(io_uring& ring, uint16_t group);
  void unregister(io_uring& ring);

  // The msghdr template multishot recvmsg requests point at (name and
  // control sizes only; the kernel never writes it).
  msghdr* message_template() { return &template_; }

  // The message in buffer `id` after a completion of `result` bytes; false
  // if the completion is malformed. The buffer stays taken until give_back().
  bool parse(uint16_t id, int result, RxMessage& out);
  // Queues buffer `id` for return; publish() makes the returns visible.
  void give_back(uint16_t id);
  void publish();

 private:
  uint8_t* buffer(uint16_t id) const { return data_.get() + size_t{id} * buffer_bytes_; }

  uint32_t count_ = 0;
  uint32_t buffer_bytes_ = 0;
  std::unique_ptr<uint8_t[]> data_;
  io_uring_buf_ring* ring_ = nullptr;
  uint16_t group_ = 0;
  bool registered_ = false;
  int pending_returns_ = 0;
  msghdr template_{};
};

}  // namespace metaroce::io
