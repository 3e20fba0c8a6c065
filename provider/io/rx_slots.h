// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Preallocated receive buffers with their message headers (source address,
// control data), as an mmsghdr array that recvmmsg fills directly and whose
// entries io_uring recvmsg requests point at.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include "udp_socket.h"

namespace metaroce::io {

// One received UDP payload, possibly a UDP_GRO super-datagram of `segment`
// sized datagrams (the last may be shorter). Valid until the backend reuses
// the slot.
struct RxMessage {
  const uint8_t* data = nullptr;
  uint32_t length = 0;
  uint16_t segment = 0;  // 0: one datagram
  bool ce = false;
  bool truncated = false;
  int64_t arrival_realtime_ns = 0;  // the kernel's receive timestamp (CLOCK_REALTIME); 0 = none
  const sockaddr_storage* from = nullptr;
};

class RxSlots {
 public:
  RxSlots(uint32_t count, uint32_t buffer_bytes);

  uint32_t count() const { return count_; }
  // Resets slot i's header for the next receive and returns it.
  msghdr& arm(uint32_t i);
  // Arms slots [0, n) and returns the contiguous array for recvmmsg.
  mmsghdr* arm_all(uint32_t n);
  // The message slot i holds after a receive of `bytes` bytes.
  RxMessage message(uint32_t i, uint32_t bytes) const;

 private:
  struct alignas(8) Control {
    uint8_t bytes[kRxControlBytes];
  };

  const uint32_t count_;
  const uint32_t buffer_bytes_;
  std::unique_ptr<uint8_t[]> data_;
  std::unique_ptr<iovec[]> iovecs_;
  std::unique_ptr<mmsghdr[]> headers_;
  std::unique_ptr<sockaddr_storage[]> sources_;
  std::unique_ptr<Control[]> controls_;
};

}  // namespace metaroce::io
