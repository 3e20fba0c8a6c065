// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// packet-injector: an adversary on a sending host. It sniffs the host's own
// outgoing MetaRoCE datagrams (AF_PACKET, so it sees what the transfer
// really sends) and sends mutated copies of some of them to the same
// destination address and port from its own sockets, i.e. from other source
// ports: bit flips, truncations, extensions, 4- and 8-byte field overwrites,
// exact replays and garbage. Bounded in time and count; prints what it sent
// as one JSON object when it ends.
//
//   packet-injector --dest IPV4 [--ports FIRST-LAST] [--every N] [--max N]
//                   [--seconds S] [--seed N]
//
// Needs CAP_NET_RAW (the netns tests run it as root in the host namespace).
#include <arpa/inet.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/udp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "metaroce/wire.h"

namespace {

enum Kind { kBitFlip, kTruncate, kExtend, kOverwrite4, kOverwrite8, kReplay, kGarbage, kKinds };
constexpr const char* kKindNames[kKinds] = {"bit_flip",   "truncate", "extend", "overwrite4",
                                            "overwrite8", "replay",   "garbage"};
constexpr size_t kSenders = 4;  // own sockets, i.e. other source ports than the transfer's

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

struct Args {
  in_addr dest{};
  uint16_t port_first = metaroce::wire::kHomePortBase;  // MetaRoCE home ports
  uint16_t port_last = metaroce::wire::kHomePortBase + metaroce::wire::kHomePortCount - 1;
  uint32_t every = 16;  // inject after every N-th captured datagram (on average)
  uint64_t max = 20000;
  double seconds = 30;
  uint64_t seed = 1;
};

bool parse(int argc, char** argv, Args& a) {
  bool have_dest = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* v = argv[i + 1];
    if (flag == "--dest") have_dest = inet_pton(AF_INET, v, &a.dest) == 1;
    else if (flag == "--ports") {
      unsigned f = 0, l = 0;
      if (std::sscanf(v, "%u-%u", &f, &l) != 2 || f == 0 || l > 65535 || f > l) return false;
      a.port_first = static_cast<uint16_t>(f);
      a.port_last = static_cast<uint16_t>(l);
    } else if (flag == "--every") a.every = static_cast<uint32_t>(std::max(1L, std::atol(v)));
    else if (flag == "--max") a.max = std::strtoull(v, nullptr, 10);
    else if (flag == "--seconds") a.seconds = std::atof(v);
    else if (flag == "--seed") a.seed = std::strtoull(v, nullptr, 10);
    else return false;
  }
  return have_dest && a.seconds > 0 && a.seconds <= 600;
}

// Turns `d` into a copy of kind `kind`; false when the result would equal
// the original (then it is not sent).
bool mutate(Kind kind, std::vector<uint8_t>& d, std::mt19937_64& rng) {
  const std::vector<uint8_t> original = d;
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  switch (kind) {
    case kBitFlip: d[pick(d.size())] ^= static_cast<uint8_t>(1u << pick(8)); break;
    case kTruncate: d.resize(pick(d.size())); break;
    case kExtend: {
      const size_t extra = 1 + pick(16);
      for (size_t i = 0; i < extra; ++i) d.push_back(static_cast<uint8_t>(rng()));
      break;
    }
    case kOverwrite4:
    case kOverwrite8: {
      const size_t width = kind == kOverwrite4 ? 4 : 8;
      if (d.size() < width) return false;
      const size_t at = pick(d.size() - width + 1);
      for (size_t i = 0; i < width; ++i) d[at + i] = static_cast<uint8_t>(rng());
      break;
    }
    case kReplay: return true;
    case kGarbage: {
      d.resize(1 + pick(1400));
      for (uint8_t& b : d) b = static_cast<uint8_t>(rng());
      break;
    }
    case kKinds: return false;
  }
  return d != original;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, args)) {
    std::fprintf(stderr,
                 "usage: packet-injector --dest IPV4 [--ports FIRST-LAST] [--every N] [--max N] [--seconds S] "
                 "[--seed N]\n");
    return 2;
  }
  // ETH_P_ALL: a socket bound to one protocol sees received packets only;
  // outgoing ones are shown to ETH_P_ALL taps.
  const int sniffer = ::socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, htons(ETH_P_ALL));
  if (sniffer < 0) {
    std::perror("packet-injector: AF_PACKET socket (needs CAP_NET_RAW)");
    return 1;
  }
  std::array<int, kSenders> senders{};
  std::array<uint16_t, kSenders> sender_ports{};
  for (size_t i = 0; i < kSenders; ++i) {
    senders[i] = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    socklen_t len = sizeof any;
    if (senders[i] < 0 || ::bind(senders[i], reinterpret_cast<sockaddr*>(&any), sizeof any) != 0 ||
        ::getsockname(senders[i], reinterpret_cast<sockaddr*>(&any), &len) != 0) {
      std::perror("packet-injector: UDP socket");
      return 1;
    }
    sender_ports[i] = ntohs(any.sin_port);
  }
  ::signal(SIGTERM, on_signal);
  ::signal(SIGINT, on_signal);

  std::mt19937_64 rng(args.seed);
  std::array<uint64_t, kKinds> sent{};
  uint64_t captured = 0, total = 0, send_errors = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(args.seconds);
  std::vector<uint8_t> frame(65536);
  while (!g_stop && total < args.max && std::chrono::steady_clock::now() < deadline) {
    pollfd p{sniffer, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    sockaddr_ll from{};
    socklen_t from_len = sizeof from;
    const ssize_t n =
        ::recvfrom(sniffer, frame.data(), frame.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&from), &from_len);
    if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(udphdr)) || from.sll_pkttype != PACKET_OUTGOING ||
        from.sll_protocol != htons(ETH_P_IP))
      continue;
    iphdr ip;
    std::memcpy(&ip, frame.data(), sizeof ip);
    const size_t ihl = size_t{ip.ihl} * 4;
    if (ip.version != 4 || ip.protocol != IPPROTO_UDP || ip.daddr != args.dest.s_addr || ihl < sizeof ip ||
        (ntohs(ip.frag_off) & 0x3fff) != 0 || static_cast<size_t>(n) < ihl + sizeof(udphdr))
      continue;
    udphdr udp;
    std::memcpy(&udp, frame.data() + ihl, sizeof udp);
    const uint16_t dport = ntohs(udp.dest), sport = ntohs(udp.source);
    if (dport < args.port_first || dport > args.port_last) continue;
    bool own = false;
    for (const uint16_t port : sender_ports) own |= port == sport;
    if (own) continue;
    ++captured;
    if (rng() % args.every != 0) continue;
    const size_t udp_len = std::min<size_t>(ntohs(udp.len), static_cast<size_t>(n) - ihl);
    if (udp_len <= sizeof udp) continue;
    std::vector<uint8_t> d(frame.begin() + static_cast<std::ptrdiff_t>(ihl + sizeof udp),
                           frame.begin() + static_cast<std::ptrdiff_t>(ihl + udp_len));
    const Kind kind = static_cast<Kind>(rng() % kKinds);
    if (!mutate(kind, d, rng)) continue;
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr = args.dest;
    to.sin_port = htons(dport);
    const int fd = senders[rng() % kSenders];
    if (::sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) !=
        static_cast<ssize_t>(d.size())) {
      ++send_errors;
      continue;
    }
    ++sent[kind];
    ++total;
  }
  std::printf("{\"injector\":{\"captured\":%llu,\"injected\":%llu,\"send_errors\":%llu", (unsigned long long)captured,
              (unsigned long long)total, (unsigned long long)send_errors);
  for (size_t k = 0; k < kKinds; ++k) std::printf(",\"%s\":%llu", kKindNames[k], (unsigned long long)sent[k]);
  std::printf("}}\n");
  return 0;
}
