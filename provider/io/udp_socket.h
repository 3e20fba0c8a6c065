// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// UDP socket plumbing shared by the I/O backends: owning file descriptors,
// address literals, the options every MetaRoCE socket gets (nonblocking,
// buffer sizes, ECT(0) on send, TOS/TCLASS reception), UDP GSO/GRO probing,
// and the control messages of the hot path (UDP_SEGMENT on send, UDP_GRO and
// the ECN bits on receive).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace metaroce::io {

// An owned file descriptor (closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = other.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

// Parses an IPv4 or IPv6 literal; fills `out` with it and `port`. Returns the
// address length, or 0 when `ip` is not a literal.
socklen_t make_address(const std::string& ip, uint16_t port, sockaddr_storage& out);
socklen_t address_length(const sockaddr_storage& address);
uint16_t address_port(const sockaddr_storage& address);
// "127.0.0.1:4792" / "[::1]:4792", for error messages.
std::string format_address(const sockaddr_storage& address);

// A nonblocking UDP socket of `local`'s family bound to `local`, with
// SO_RCVBUF/SO_SNDBUF = buffer_bytes (SO_*BUFFORCE first, which works as
// root), ECT(0) on every datagram sent and the TOS/TCLASS byte delivered with
// every datagram received. Returns an invalid Fd and sets `error` on failure;
// `bind_errno` receives the errno of a failed bind (0 otherwise).
Fd open_udp_socket(const sockaddr_storage& local, int buffer_bytes, std::string& error, int& bind_errno);

// The port the socket is bound to (host order), 0 on error.
uint16_t bound_port(int fd);

// Asks the kernel to coalesce received datagrams (UDP_GRO); false if unsupported.
bool enable_udp_gro(int fd);
// Whether sendmsg accepts a UDP_SEGMENT control message on this socket.
bool udp_gso_supported(int fd);

// Segment count and byte limits of one UDP_SEGMENT super-datagram.
inline constexpr uint16_t kMaxGsoSegments = 64;
inline constexpr uint32_t kMaxGsoBytes = 65'000;
// The largest super-datagram UDP_GRO delivers fits in this receive buffer.
inline constexpr uint32_t kGroBufferBytes = 65'536;

// Control buffer sizes, generous and 8-byte aligned.
inline constexpr size_t kRxControlBytes = 128;
inline constexpr size_t kTxControlBytes = 32;

// Writes a UDP_SEGMENT control message for `segment_bytes` into `buffer`
// (kTxControlBytes long); returns the msg_controllen to use.
size_t write_gso_control(void* buffer, uint16_t segment_bytes);

struct RxMeta {
  uint16_t gro_segment = 0;         // UDP_GRO segment size; 0 = a single datagram
  bool ce = false;                  // IP ECN field == CE (0b11)
  int64_t arrival_realtime_ns = 0;  // SO_TIMESTAMPNS: when the kernel received it; 0 = not given
};
// Reads UDP_GRO, IP_TOS/IPV6_TCLASS and SO_TIMESTAMPNS from a received
// message's control data.
RxMeta parse_rx_control(const msghdr& message);

}  // namespace metaroce::io
