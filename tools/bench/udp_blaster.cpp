// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// udp-blaster: raw UDP at the highest rate the kernel will carry, the
// "physical limit" of a fabric path against which the transports are judged.
//
//   udp-blaster recv --bind IP:PORT --seconds S
//       UDP_GRO socket; counts payload bytes and wire packets; one JSON line.
//   udp-blaster send --to IP:PORT --seconds S --ports N --payload 1400 [--gso on|off]
//       N sockets on N source ports (= N ECMP flows), UDP_SEGMENT batches of up
//       to 64 KB handed to sendmmsg; one JSON line.
//
// Both sides stop at the first of: the time limit, the byte cap, the packet
// cap (and the receiver also after --idle seconds without traffic once
// traffic has started).
#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <unordered_map>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "cpu_time.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif
#ifndef SOL_UDP
#define SOL_UDP 17
#endif

namespace {

using Clock = std::chrono::steady_clock;
using metaroce::bench::cpu_seconds;

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

constexpr std::size_t kMaxUdpPayload = 65507;  // 65535 - IPv4 header - UDP header
constexpr std::size_t kMaxGsoSegments = 64;
constexpr double kMaxSeconds = 3600.0;

// Every wire packet (GSO segment) starts with this header when the payload is
// large enough: the receiver counts losses and reordering per flow from it.
struct SegmentHeader {
  uint32_t magic;  // kMagic, network byte order
  uint32_t flow;   // sender's flow (source port) index
  uint64_t seq;    // per-flow packet sequence number, host byte order
};
constexpr uint32_t kMagic = 0x4d52424c;  // "MRBL"
static_assert(sizeof(SegmentHeader) == 16);

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "udp-blaster: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void fail_errno(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

sockaddr_in parse_endpoint(const std::string& text, bool port_required) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  std::string host = text;
  std::string port;
  if (auto colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  if (host.empty()) host = "0.0.0.0";
  if (inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) fail("not an IPv4 address: " + host);
  if (port.empty()) {
    if (port_required) fail("missing :PORT in " + text);
  } else {
    char* end = nullptr;
    unsigned long p = std::strtoul(port.c_str(), &end, 10);
    if (*end != '\0' || p > 65535) fail("bad port in " + text);
    sa.sin_port = htons(static_cast<uint16_t>(p));
  }
  return sa;
}

std::string endpoint_string(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
}

void set_buffer(int fd, int force_opt, int opt, int bytes) {
  // SO_*BUFFORCE ignores net.core.*mem_max when we have CAP_NET_ADMIN.
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) != 0) {
    setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
  }
}

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

bool parse_on_off(const std::string& v) {
  if (v == "on" || v == "1" || v == "true" || v == "yes") return true;
  if (v == "off" || v == "0" || v == "false" || v == "no") return false;
  fail("expected on or off, got " + v);
}

// ------------------------------------------------------------------ recv ---

struct RecvOptions {
  std::string bind;
  double seconds = 10;
  double idle = 2;
  double skip = 0;  // warm-up excluded from goodput, from the first packet
  uint64_t max_bytes = 1'000'000'000'000ULL;
  uint64_t max_packets = 1'000'000'000ULL;
  std::string gro = "on";
  int rcvbuf = 64 << 20;
};

int run_recv(const RecvOptions& o) {
  if (!(o.seconds > 0 && o.seconds <= kMaxSeconds)) fail("--seconds must be in (0, 3600]");
  const sockaddr_in local = parse_endpoint(o.bind, true);
  const bool gro = parse_on_off(o.gro);

  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail_errno("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  set_buffer(fd, SO_RCVBUFFORCE, SO_RCVBUF, o.rcvbuf);
  bool gro_enabled = false;
  if (gro) gro_enabled = setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
  if (bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) fail_errno("bind " + o.bind);

  constexpr std::size_t kVlen = 64;
  constexpr std::size_t kBufSize = 65536;
  std::vector<char> buffers(kVlen * kBufSize);
  std::vector<iovec> iov(kVlen);
  std::vector<mmsghdr> msgs(kVlen);
  std::vector<sockaddr_in> from(kVlen);
  constexpr std::size_t kCtrlSize = CMSG_SPACE(sizeof(int));
  std::vector<char> ctrl(kVlen * kCtrlSize);

  uint64_t bytes = 0, packets = 0, datagrams = 0, errors = 0;
  struct Flow {
    uint64_t received = 0;
    uint64_t next = 0;  // highest sequence seen + 1
    uint64_t reordered = 0;
  };
  std::unordered_map<uint64_t, Flow> flows;  // by (source address, port); bounded below
  constexpr std::size_t kMaxFlows = 65536;
  uint64_t reordered = 0, sequenced = 0;
  Clock::time_point first{}, last{}, window_start{};
  bool started = false, in_window = false;
  uint64_t window_bytes = 0;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  const double cpu0 = cpu_seconds();
  std::string stop_reason = "time";

  while (!g_stop) {
    auto now = Clock::now();
    if (now >= deadline) break;
    if (started && o.idle > 0 && seconds_between(last, now) >= o.idle) {
      stop_reason = "idle";
      break;
    }
    if (bytes >= o.max_bytes) {
      stop_reason = "max-bytes";
      break;
    }
    if (packets >= o.max_packets) {
      stop_reason = "max-packets";
      break;
    }
    pollfd pfd{fd, POLLIN, 0};
    int wait_ms = static_cast<int>(std::min(100.0, std::max(1.0, seconds_between(now, deadline) * 1000)));
    int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      fail_errno("poll");
    }
    if (pr == 0) continue;
    for (int round = 0; round < 64; ++round) {
      for (std::size_t i = 0; i < kVlen; ++i) {
        iov[i] = {buffers.data() + i * kBufSize, kBufSize};
        msgs[i].msg_hdr = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = &from[i];
        msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_in);
        msgs[i].msg_hdr.msg_control = ctrl.data() + i * kCtrlSize;
        msgs[i].msg_hdr.msg_controllen = kCtrlSize;
        msgs[i].msg_len = 0;
      }
      int n = recvmmsg(fd, msgs.data(), kVlen, MSG_DONTWAIT, nullptr);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
        ++errors;
        break;
      }
      if (n == 0) break;
      auto t = Clock::now();
      if (!started) {
        started = true;
        first = t;
      }
      if (!in_window && seconds_between(first, t) >= o.skip) {
        in_window = true;
        window_start = t;
      }
      last = t;
      for (int i = 0; i < n; ++i) {
        const std::size_t len = msgs[i].msg_len;
        std::size_t seg = 0;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c != nullptr; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c)) {
          if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
            int v = 0;
            std::memcpy(&v, CMSG_DATA(c), sizeof v);
            seg = static_cast<std::size_t>(v);
          }
        }
        bytes += len;
        if (in_window) window_bytes += len;
        ++datagrams;
        const std::size_t step = (seg > 0 && len > seg) ? seg : len;
        packets += (len + step - 1) / step;
        const uint64_t key = (static_cast<uint64_t>(ntohl(from[i].sin_addr.s_addr)) << 16) | ntohs(from[i].sin_port);
        auto it = flows.find(key);
        if (it == flows.end()) {
          if (flows.size() >= kMaxFlows) continue;
          it = flows.emplace(key, Flow{}).first;
        }
        Flow& flow = it->second;
        const char* data = static_cast<const char*>(iov[i].iov_base);
        for (std::size_t off = 0; off + sizeof(SegmentHeader) <= len; off += step) {
          SegmentHeader h;
          std::memcpy(&h, data + off, sizeof h);
          if (ntohl(h.magic) != kMagic) continue;
          ++sequenced;
          ++flow.received;
          if (h.seq < flow.next) {
            ++flow.reordered;
            ++reordered;
          } else {
            flow.next = h.seq + 1;
          }
        }
      }
      if (static_cast<std::size_t>(n) < kVlen) break;
    }
  }
  const auto t_end = Clock::now();
  const double cpu = cpu_seconds() - cpu0;
  const double active = started ? seconds_between(first, last) : 0.0;
  // Goodput over the measurement window: after the warm-up, to the last packet.
  const double window = in_window ? seconds_between(window_start, last) : 0.0;
  if (o.skip <= 0) window_bytes = bytes;
  // Packets missing from each flow's sequence up to the highest seen.
  uint64_t seq_lost = 0;
  for (const auto& [key, flow] : flows) {
    if (flow.next > flow.received) seq_lost += flow.next - flow.received;
  }
  const double wall = seconds_between(t0, t_end);
  nlohmann::json out = {
      {"role", "recv"},
      {"bind", endpoint_string(local)},
      {"gro", gro_enabled},
      {"bytes", bytes},
      {"packets", packets},
      {"datagrams", datagrams},
      {"sources", flows.size()},
      {"sequenced_packets", sequenced},
      {"reordered", reordered},
      {"seq_lost", seq_lost},
      {"errors", errors},
      {"active_seconds", active},
      {"wall_seconds", wall},
      {"window_seconds", o.skip > 0 ? window : active},
      {"window_bytes", window_bytes},
      {"goodput_gbps", (o.skip > 0 ? window : active) > 0
                           ? static_cast<double>(window_bytes) * 8 / (o.skip > 0 ? window : active) / 1e9
                           : 0.0},
      {"cpu_pct", wall > 0 ? 100.0 * cpu / wall : 0.0},
      {"stop", stop_reason},
  };
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  close(fd);
  return 0;
}

// ------------------------------------------------------------------ send ---

struct SendOptions {
  std::string to;
  std::string bind = "0.0.0.0";
  double seconds = 5;
  unsigned ports = 1;
  unsigned sport_base = 0;
  std::size_t payload = 1400;
  std::string gso = "on";
  double rate_mbit = 0;  // 0 = as fast as possible
  uint64_t max_bytes = 1'000'000'000'000ULL;
  uint64_t max_packets = 1'000'000'000ULL;
  unsigned batch = 0;  // messages per sendmmsg; 0 = automatic
  int sndbuf = 16 << 20;
};

int run_send(const SendOptions& o) {
  if (!(o.seconds > 0 && o.seconds <= kMaxSeconds)) fail("--seconds must be in (0, 3600]");
  if (o.ports < 1 || o.ports > 4096) fail("--ports must be 1..4096");
  if (o.payload < 1 || o.payload > 1472) fail("--payload must be 1..1472 (one wire packet)");
  if (o.sport_base != 0 && o.sport_base + o.ports - 1 > 65535) fail("--sport-base + --ports exceeds 65535");
  if (o.rate_mbit < 0) fail("--rate must be >= 0");
  const sockaddr_in dest = parse_endpoint(o.to, true);
  sockaddr_in local = parse_endpoint(o.bind, false);
  bool gso = parse_on_off(o.gso);

  std::vector<int> fds;
  std::vector<uint16_t> sports;
  for (unsigned i = 0; i < o.ports; ++i) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail_errno("socket");
    set_buffer(fd, SO_SNDBUFFORCE, SO_SNDBUF, o.sndbuf);
    local.sin_port = htons(static_cast<uint16_t>(o.sport_base == 0 ? 0 : o.sport_base + i));
    if (bind(fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0)
      fail_errno("bind source port " + std::to_string(ntohs(local.sin_port)));
    if (connect(fd, reinterpret_cast<const sockaddr*>(&dest), sizeof dest) != 0) fail_errno("connect " + o.to);
    if (gso) {
      int seg = static_cast<int>(o.payload);
      if (setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) != 0) {
        if (i == 0)
          std::fprintf(stderr, "udp-blaster: UDP_SEGMENT unavailable (%s); sending without GSO\n",
                       std::strerror(errno));
        gso = false;
      }
    }
    sockaddr_in bound{};
    socklen_t blen = sizeof bound;
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
    sports.push_back(ntohs(bound.sin_port));
    fds.push_back(fd);
  }
  if (!gso) {
    // A socket that got UDP_SEGMENT before a later one failed: turn it off again.
    int zero = 0;
    for (int fd : fds) setsockopt(fd, SOL_UDP, UDP_SEGMENT, &zero, sizeof zero);
  }

  const std::size_t segs_per_msg = gso ? std::min(kMaxGsoSegments, kMaxUdpPayload / o.payload) : 1;
  const std::size_t msg_bytes = segs_per_msg * o.payload;
  unsigned batch = o.batch;
  if (batch == 0) batch = gso ? (o.rate_mbit > 0 ? 1 : 8) : (o.rate_mbit > 0 ? 8 : 64);
  batch = std::max(1u, std::min(batch, 1024u));

  // One buffer per message of a batch: each segment carries its own header.
  const bool sequenced = o.payload >= sizeof(SegmentHeader);
  std::vector<char> payload(static_cast<std::size_t>(batch) * msg_bytes, 0);
  std::vector<iovec> iov(batch);
  for (unsigned i = 0; i < batch; ++i) iov[i] = {payload.data() + i * msg_bytes, msg_bytes};
  std::vector<mmsghdr> msgs(batch);
  std::vector<uint64_t> next_seq(fds.size(), 0);

  uint64_t bytes = 0, packets = 0, calls = 0, errors = 0, refused = 0, nobufs = 0;
  std::vector<uint64_t> per_port(fds.size(), 0);
  const double rate_bytes_per_s = o.rate_mbit * 1e6 / 8;
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  const double cpu0 = cpu_seconds();
  std::string stop_reason = "time";
  std::size_t next = 0;

  while (!g_stop) {
    auto now = Clock::now();
    if (now >= deadline) break;
    if (bytes >= o.max_bytes) {
      stop_reason = "max-bytes";
      break;
    }
    if (packets >= o.max_packets) {
      stop_reason = "max-packets";
      break;
    }
    if (rate_bytes_per_s > 0) {
      const double allowed = rate_bytes_per_s * seconds_between(t0, now);
      if (static_cast<double>(bytes) >= allowed) {
        const double ahead = (static_cast<double>(bytes) - allowed) / rate_bytes_per_s;
        std::this_thread::sleep_for(std::chrono::duration<double>(std::min(ahead, 0.01)));
        continue;
      }
    }
    // Do not overshoot the caps by more than one batch's worth.
    std::size_t want = batch;
    const uint64_t left_packets = o.max_packets - packets;
    want = std::min<std::size_t>(want, std::max<uint64_t>(1, left_packets / segs_per_msg));
    for (std::size_t i = 0; i < want; ++i) {
      msgs[i].msg_hdr = {};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_len = 0;
    }
    const std::size_t idx = next;
    next = (next + 1) % fds.size();
    if (sequenced) {
      uint64_t seq = next_seq[idx];
      for (std::size_t i = 0; i < want; ++i) {
        for (std::size_t s = 0; s < segs_per_msg; ++s) {
          SegmentHeader h{htonl(kMagic), static_cast<uint32_t>(idx), seq++};
          std::memcpy(payload.data() + i * msg_bytes + s * o.payload, &h, sizeof h);
        }
      }
    }
    int n = sendmmsg(fds[idx], msgs.data(), static_cast<unsigned>(want), 0);
    ++calls;
    if (n < 0) {
      if (errno == ECONNREFUSED) {
        ++refused;  // ICMP port unreachable from an earlier packet; keep going
      } else if (errno == ENOBUFS || errno == EAGAIN) {
        ++nobufs;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      } else if (errno != EINTR) {
        ++errors;
        if (errors > 1000) fail_errno("sendmmsg");
      }
      continue;
    }
    uint64_t sent_bytes = 0;
    for (int i = 0; i < n; ++i) sent_bytes += msgs[i].msg_len;
    bytes += sent_bytes;
    const uint64_t sent_packets = (sent_bytes + o.payload - 1) / o.payload;
    packets += sent_packets;
    per_port[idx] += sent_packets;
    next_seq[idx] += sent_packets;
  }
  const auto t_end = Clock::now();
  const double cpu = cpu_seconds() - cpu0;
  const double wall = seconds_between(t0, t_end);
  nlohmann::json out = {
      {"role", "send"},
      {"to", endpoint_string(dest)},
      {"gso", gso},
      {"segments_per_call_msg", segs_per_msg},
      {"batch", batch},
      {"payload", o.payload},
      {"ports", sports},
      {"per_port_packets", per_port},
      {"bytes", bytes},
      {"packets", packets},
      {"syscalls", calls},
      {"refused", refused},
      {"nobufs", nobufs},
      {"errors", errors},
      {"seconds", wall},
      {"gbps", wall > 0 ? static_cast<double>(bytes) * 8 / wall / 1e9 : 0.0},
      {"cpu_pct", wall > 0 ? 100.0 * cpu / wall : 0.0},
      {"stop", stop_reason},
  };
  std::printf("%s\n", out.dump().c_str());
  std::fflush(stdout);
  for (int fd : fds) close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"udp-blaster: raw UDP (GSO/GRO) load generator and sink; one JSON line per run"};
  app.require_subcommand(1);

  RecvOptions ro;
  auto* recv = app.add_subcommand("recv", "receive and count (UDP_GRO)");
  recv->add_option("--bind", ro.bind, "IP:PORT to listen on")->required();
  recv->add_option("--seconds", ro.seconds, "time limit")->capture_default_str();
  recv->add_option("--idle", ro.idle, "stop this long after the last packet (0 = never)")->capture_default_str();
  recv->add_option("--skip", ro.skip, "warm-up seconds (from the first packet) left out of goodput_gbps")
      ->capture_default_str();
  recv->add_option("--max-bytes", ro.max_bytes, "byte cap")->capture_default_str();
  recv->add_option("--max-packets", ro.max_packets, "packet cap")->capture_default_str();
  recv->add_option("--gro", ro.gro, "on|off")->capture_default_str();
  recv->add_option("--rcvbuf", ro.rcvbuf, "socket receive buffer (bytes)")->capture_default_str();

  SendOptions so;
  auto* send = app.add_subcommand("send", "blast UDP over N source ports (UDP_SEGMENT + sendmmsg)");
  send->add_option("--to", so.to, "IP:PORT to send to")->required();
  send->add_option("--bind", so.bind, "local IP to send from")->capture_default_str();
  send->add_option("--seconds", so.seconds, "time limit")->capture_default_str();
  send->add_option("--ports", so.ports, "number of source ports (ECMP flows)")->capture_default_str();
  send->add_option("--sport-base", so.sport_base, "first source port (0 = ephemeral ports)")->capture_default_str();
  send->add_option("--payload", so.payload, "UDP payload bytes per wire packet")->capture_default_str();
  send->add_option("--gso", so.gso, "on|off (UDP_SEGMENT)")->capture_default_str();
  send->add_option("--rate", so.rate_mbit, "pace to this many Mbit/s of payload (0 = unpaced)")->capture_default_str();
  send->add_option("--max-bytes", so.max_bytes, "byte cap")->capture_default_str();
  send->add_option("--max-packets", so.max_packets, "packet cap")->capture_default_str();
  send->add_option("--batch", so.batch, "messages per sendmmsg (0 = automatic)")->capture_default_str();
  send->add_option("--sndbuf", so.sndbuf, "socket send buffer (bytes)")->capture_default_str();

  CLI11_PARSE(app, argc, argv);

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  if (recv->parsed()) return run_recv(ro);
  return run_send(so);
}
