// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "ip_capture.h"
#include "local_address.h"

#include <arpa/inet.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace metaroce::compliance {
namespace {

constexpr uint8_t kUdp = 17;
constexpr uint8_t kIpv6Fragment = 44;

uint16_t be16_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

// A classic BPF program that keeps UDP datagrams to `port` and the first
// fragments of such datagrams, so that a busy loopback does not fill the
// socket with others' traffic. Offsets are from the network header (a
// cooked packet socket); the protocol comes from the packet's metadata.
std::vector<sock_filter> port_filter(uint16_t port) {
  const uint32_t p = port;
  constexpr uint32_t kAccept = 0xffff;
  return {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_AD_OFF + SKF_AD_PROTOCOL)),  // 0
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, 0, 7),                                      // 1: IPv4, else 9
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),                                                    // 2: protocol
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kUdp, 0, 18),                                         // 3: else reject
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),                     // 4: flags, fragment offset
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, 16, 0),       // 5: a later fragment: reject
      BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),                    // 6: X = IPv4 header length
      BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),                     // 7: UDP destination port
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, p, 12, 13),            // 8
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 0, 12),    // 9: IPv6, else reject
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 6),                     // 10: next header
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kUdp, 0, 2),           // 11: else 14
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 42),                    // 12: UDP destination port
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, p, 7, 8),              // 13
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kIpv6Fragment, 0, 7),  // 14: a fragment header, else reject
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 40),                    // 15: its next header
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kUdp, 0, 5),           // 16
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 42),                    // 17: fragment offset
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0xfff8, 3, 0),        // 18: a later fragment: reject
      BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 50),                    // 19: UDP destination port
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, p, 0, 1),              // 20
      BPF_STMT(BPF_RET | BPF_K, kAccept),                        // 21
      BPF_STMT(BPF_RET | BPF_K, 0),                              // 22
  };
}

}  // namespace

std::unique_ptr<IpCapture> IpCapture::open(const std::string& local_ip, uint16_t port, std::string& why) {
  const unsigned index = interface_of(local_ip);
  if (index == 0) {
    why = "no interface holds " + local_ip;
    return nullptr;
  }
  // Protocol 0: nothing is queued until the filter is on and bind() names
  // the protocol.
  const int fd = ::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::string("AF_PACKET socket: ") + std::strerror(errno) + " (needs CAP_NET_RAW)";
    return nullptr;
  }
  std::vector<sock_filter> code = port_filter(port);
  const sock_fprog program{static_cast<unsigned short>(code.size()), code.data()};
  const int buffer = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer, sizeof buffer);
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof program) != 0) {
    why = std::string("SO_ATTACH_FILTER: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  sockaddr_ll link{};
  link.sll_family = AF_PACKET;
  link.sll_protocol = htons(ETH_P_ALL);
  link.sll_ifindex = static_cast<int>(index);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&link), sizeof link) != 0) {
    why = std::string("AF_PACKET bind: ") + std::strerror(errno);
    ::close(fd);
    return nullptr;
  }
  return std::unique_ptr<IpCapture>(new IpCapture(fd, port));
}

IpCapture::~IpCapture() { ::close(fd_); }

std::vector<CapturedIp> IpCapture::collect(Clock::time_point deadline) {
  std::vector<CapturedIp> out;
  std::vector<uint8_t> frame(65536 + 256);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return out;
    sockaddr_ll from{};
    socklen_t from_length = sizeof from;
    const ssize_t n =
        ::recvfrom(fd_, frame.data(), frame.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &from_length);
    if (n <= 0) continue;
    // Loopback shows every packet twice, leaving and arriving.
    if (from.sll_pkttype == PACKET_OUTGOING) continue;
    const uint8_t* ip = frame.data();
    const size_t length = static_cast<size_t>(n);
    CapturedIp c;
    size_t udp_at = 0;
    if (ntohs(from.sll_protocol) == ETH_P_IP && length >= 20 && (ip[0] >> 4) == 4) {
      const size_t header = size_t{ip[0] & 15u} * 4;
      if (ip[9] != kUdp || length < header + 8) continue;
      const uint16_t flags_offset = be16_at(ip + 6);
      // A later fragment has no UDP header to tell whose it is; the first
      // fragment of every fragmented datagram has one, and MF set.
      if ((flags_offset & 0x1fff) != 0) continue;
      c.dont_fragment = (flags_offset & 0x4000) != 0;
      c.fragment = (flags_offset & 0x2000) != 0;
      c.ip_bytes = be16_at(ip + 2);
      udp_at = header;
    } else if (ntohs(from.sll_protocol) == ETH_P_IPV6 && length >= 48 && (ip[0] >> 4) == 6) {
      c.ipv6 = true;
      c.fragment = ip[6] == kIpv6Fragment;
      // As for IPv4: only the first fragment (offset 0) carries the UDP header.
      if (c.fragment && (ip[40] != kUdp || (be16_at(ip + 42) & 0xfff8) != 0)) continue;
      if (ip[6] != kUdp && !c.fragment) continue;
      c.ip_bytes = 40 + be16_at(ip + 4);
      udp_at = c.fragment ? 48 : 40;
      if (length < udp_at + 8) continue;
    } else {
      continue;
    }
    if (be16_at(ip + udp_at + 2) != port_) continue;
    c.source_port = be16_at(ip + udp_at);
    out.push_back(c);
  }
}

}  // namespace metaroce::compliance
