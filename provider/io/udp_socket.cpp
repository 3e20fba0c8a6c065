// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "udp_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/udp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace metaroce::io {
namespace {

std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// Sets a buffer size, preferring the FORCE variant (root may exceed rmem_max).
void set_buffer(int fd, int force_option, int option, int bytes) {
  if (bytes <= 0) return;
  if (setsockopt(fd, SOL_SOCKET, force_option, &bytes, sizeof bytes) == 0) return;
  (void)setsockopt(fd, SOL_SOCKET, option, &bytes, sizeof bytes);
}

}  // namespace

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

socklen_t make_address(const std::string& ip, uint16_t port, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return sizeof(sockaddr_in);
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    return sizeof(sockaddr_in6);
  }
  std::memset(&out, 0, sizeof out);
  return 0;
}

socklen_t address_length(const sockaddr_storage& address) {
  switch (address.ss_family) {
    case AF_INET: return sizeof(sockaddr_in);
    case AF_INET6: return sizeof(sockaddr_in6);
    default: return 0;
  }
}

uint16_t address_port(const sockaddr_storage& address) {
  switch (address.ss_family) {
    case AF_INET: return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
    case AF_INET6: return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
    default: return 0;
  }
}

std::string format_address(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(address_port(address));
  }
  if (address.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(address_port(address));
  }
  return "?";
}

Fd open_udp_socket(const sockaddr_storage& local, int buffer_bytes, std::string& error, int& bind_errno) {
  bind_errno = 0;
  const int family = local.ss_family;
  Fd fd(::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP));
  if (!fd.valid()) {
    error = errno_text("socket", errno);
    return Fd();
  }
  set_buffer(fd.get(), SO_RCVBUFFORCE, SO_RCVBUF, buffer_bytes);
  set_buffer(fd.get(), SO_SNDBUFFORCE, SO_SNDBUF, buffer_bytes);
  const int ect0 = 2;  // ECN field 0b10: ECT(0)
  const int one = 1;
  // Never fragment (IPv4: DF set): a datagram too large for the path is
  // refused with EMSGSIZE, which the backends count.
  const int pmtudisc_do = IP_PMTUDISC_DO;
  const int pmtudisc6_do = IPV6_PMTUDISC_DO;
  if (family == AF_INET) {
    if (setsockopt(fd.get(), IPPROTO_IP, IP_TOS, &ect0, sizeof ect0) != 0 ||
        setsockopt(fd.get(), IPPROTO_IP, IP_RECVTOS, &one, sizeof one) != 0 ||
        setsockopt(fd.get(), IPPROTO_IP, IP_MTU_DISCOVER, &pmtudisc_do, sizeof pmtudisc_do) != 0) {
      error = errno_text("setsockopt IP_TOS/IP_RECVTOS/IP_MTU_DISCOVER", errno);
      return Fd();
    }
  } else {
    if (setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0 ||
        setsockopt(fd.get(), IPPROTO_IPV6, IPV6_TCLASS, &ect0, sizeof ect0) != 0 ||
        setsockopt(fd.get(), IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one) != 0 ||
        setsockopt(fd.get(), IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtudisc6_do, sizeof pmtudisc6_do) != 0) {
      error = errno_text("setsockopt IPV6_TCLASS/IPV6_RECVTCLASS/IPV6_MTU_DISCOVER", errno);
      return Fd();
    }
  }
  // Kernel receive timestamps (best effort): the engine measures RTTs from
  // a datagram's arrival, not from when the progress thread got to it.
  (void)setsockopt(fd.get(), SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&local), address_length(local)) != 0) {
    bind_errno = errno;
    error = "bind " + format_address(local) + ": " + std::strerror(bind_errno);
    return Fd();
  }
  return fd;
}

uint16_t bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  return address_port(address);
}

bool enable_udp_gro(int fd) {
  const int one = 1;
  return setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
}

bool udp_gso_supported(int fd) {
  int segment = 0;
  socklen_t length = sizeof segment;
  return getsockopt(fd, SOL_UDP, UDP_SEGMENT, &segment, &length) == 0;
}

size_t write_gso_control(void* buffer, uint16_t segment_bytes) {
  static_assert(CMSG_SPACE(sizeof(uint16_t)) <= kTxControlBytes);
  std::memset(buffer, 0, CMSG_SPACE(sizeof(uint16_t)));
  auto* cmsg = static_cast<cmsghdr*>(buffer);
  cmsg->cmsg_level = SOL_UDP;
  cmsg->cmsg_type = UDP_SEGMENT;
  cmsg->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  std::memcpy(CMSG_DATA(cmsg), &segment_bytes, sizeof segment_bytes);
  return CMSG_SPACE(sizeof(uint16_t));
}

RxMeta parse_rx_control(const msghdr& message) {
  RxMeta meta;
  if (message.msg_controllen == 0) return meta;
  for (const cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&message), const_cast<cmsghdr*>(c))) {
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
      int segment = 0;
      std::memcpy(&segment, CMSG_DATA(c), sizeof segment);
      if (segment > 0 && segment <= 0xffff) meta.gro_segment = static_cast<uint16_t>(segment);
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
      uint8_t tos = 0;
      std::memcpy(&tos, CMSG_DATA(c), sizeof tos);
      meta.ce = (tos & 3) == 3;
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      int tclass = 0;
      std::memcpy(&tclass, CMSG_DATA(c), sizeof tclass);
      meta.ce = (tclass & 3) == 3;
    } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
               c->cmsg_len >= CMSG_LEN(sizeof(timespec))) {
      timespec at{};
      std::memcpy(&at, CMSG_DATA(c), sizeof at);
      meta.arrival_realtime_ns = int64_t{at.tv_sec} * 1'000'000'000 + at.tv_nsec;
    }
  }
  return meta;
}

}  // namespace metaroce::io
