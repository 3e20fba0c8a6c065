// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "wire_peer.h"

#include <arpa/inet.h>
#include <netinet/ip.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "metaroce/wire.h"
#include "packet_protection.h"

namespace metaroce::compliance {
namespace {

constexpr int kBufferBytes = 8 << 20;
constexpr uint8_t kEct0 = 2;

uint16_t port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

// A UDP socket bound to `local` that sends ECT(0), as every MetaRoCE
// datagram is sent (spec 1.2), and reports the ECN field of what it receives.
int open_socket(const sockaddr_storage& local, uint16_t& port, std::string& error) {
  const int fd = ::socket(local.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  const int one = 1;
  const int ect0 = kEct0;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &kBufferBytes, sizeof kBufferBytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kBufferBytes, sizeof kBufferBytes);
  bool ok = true;
  if (local.ss_family == AF_INET) {
    ok = setsockopt(fd, IPPROTO_IP, IP_TOS, &ect0, sizeof ect0) == 0 &&
         setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof one) == 0;
  } else {
    ok = setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &ect0, sizeof ect0) == 0 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof one) == 0;
  }
  if (!ok || ::bind(fd, reinterpret_cast<const sockaddr*>(&local), address_length(local)) != 0) {
    error = std::string("socket setup: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  port = port_of(bound);
  return fd;
}

}  // namespace

std::unique_ptr<WirePeer> WirePeer::open(const std::string& local_ip, const sockaddr_storage& target, uint32_t epoch,
                                         std::string& error) {
  std::unique_ptr<WirePeer> peer(new WirePeer());
  peer->local_ip_ = local_ip;
  peer->target_ = target;
  peer->epoch_ = epoch;
  if (!make_address(local_ip, 0, peer->local_) || peer->local_.ss_family != target.ss_family) {
    error = "local address " + local_ip + " is not of the target's family";
    return nullptr;
  }
  peer->home_fd_ = open_socket(peer->local_, peer->home_port_, error);
  if (peer->home_fd_ < 0) return nullptr;
  return peer;
}

WirePeer::~WirePeer() {
  if (home_fd_ >= 0) ::close(home_fd_);
  for (const auto& [slot, socket] : slots_) ::close(socket.first);
}

uint32_t WirePeer::last_packet_number(uint32_t dst_epoch) const {
  const auto it = numbers_.find(dst_epoch);
  return it == numbers_.end() ? 0 : it->second;
}

std::vector<uint8_t> WirePeer::frame(std::vector<uint8_t> body) {
  const size_t length = body.size();
  const uint32_t dst = target_epoch_;
  wire::stamp_common(body, wire::Security::Integrity, epoch_, dst, next_packet_number(dst));
  body.resize(length + wire::kIntegrityTrailerBytes);
  transport::seal_integrity(body, length);
  return body;
}

int WirePeer::slot_socket(uint8_t slot) {
  if (const auto it = slots_.find(slot); it != slots_.end()) return it->second.first;
  std::string error;
  uint16_t port = 0;
  const int fd = open_socket(local_, port, error);
  if (fd < 0) return -1;
  slots_[slot] = {fd, port};
  return fd;
}

uint16_t WirePeer::slot_port(uint8_t slot) {
  if (slot_socket(slot) < 0) return 0;
  return slots_[slot].second;
}

bool WirePeer::send(std::span<const uint8_t> datagram, uint8_t slot) {
  const int fd = slot_socket(slot);
  if (fd < 0) return false;
  const ssize_t n = ::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<const sockaddr*>(&target_),
                             address_length(target_));
  return n == static_cast<ssize_t>(datagram.size());
}

std::optional<Datagram> WirePeer::receive(Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{home_fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    Datagram d;
    d.bytes.resize(65536);
    alignas(cmsghdr) char control[128];
    iovec iov{d.bytes.data(), d.bytes.size()};
    msghdr message{};
    message.msg_name = &d.from;
    message.msg_namelen = sizeof d.from;
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(home_fd_, &message, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return std::nullopt;
    d.bytes.resize(static_cast<size_t>(n));
    d.source_port = port_of(d.from);
    d.at = Clock::now();
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) ||
          (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS)) {
        // IP_TOS delivers one byte, IPV6_TCLASS an int.
        int value = 0;
        if (c->cmsg_level == IPPROTO_IP) {
          uint8_t tos = 0;
          std::memcpy(&tos, CMSG_DATA(c), 1);
          value = tos;
        } else {
          std::memcpy(&value, CMSG_DATA(c), sizeof value);
        }
        d.ecn = value & 3;
      }
    }
    return d;
  }
}

}  // namespace metaroce::compliance
