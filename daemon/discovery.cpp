// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "discovery.h"

#include <arpa/inet.h>
#include <linux/errqueue.h>
#include <netinet/ip.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

namespace metaroce::daemon {
namespace {

constexpr uint8_t kMagic[4] = {'M', 'R', 'P', 'D'};
constexpr uint8_t kIcmpTimeExceeded = 11;
constexpr uint8_t kIcmpDestUnreachable = 3;
// A destination that listens on the probed port never answers; once every
// port has met the same number of routers and nothing new has come for this
// long, the routers beyond have been heard from.
constexpr auto kQuietPeriod = std::chrono::milliseconds(30);

struct Prober {
  int fd = -1;
  uint16_t port = 0;
  std::vector<std::string> hops;  // index ttl-1; "" = no answer yet
  uint32_t dest_ttl = 0;          // ttl at which the destination answered; 0 = not yet
  ~Prober() {
    if (fd >= 0) ::close(fd);
  }
  Prober() = default;
  Prober(Prober&& o) noexcept : fd(o.fd), port(o.port), hops(std::move(o.hops)), dest_ttl(o.dest_ttl) { o.fd = -1; }
  Prober& operator=(Prober&&) = delete;

  // Answered TTLs form 1..n with nothing beyond: n, else 0.
  uint32_t answered_prefix() const {
    uint32_t n = 0;
    while (n < hops.size() && !hops[n].empty()) ++n;
    for (uint32_t t = n; t < hops.size(); ++t)
      if (!hops[t].empty()) return 0;
    return n;
  }

  bool complete() const {
    if (dest_ttl == 0) return false;
    for (uint32_t t = 1; t < dest_ttl; ++t)
      if (hops[t - 1].empty()) return false;
    return true;
  }
};

std::string ip_text(const in_addr& a) {
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a, buf, sizeof buf);
  return buf;
}

// Reads every queued error of one probe socket.
void drain_errors(Prober& p, const in_addr& dest, uint32_t& answers) {
  for (;;) {
    uint8_t payload[64];
    alignas(cmsghdr) uint8_t control[512];
    sockaddr_in from{};
    iovec iov{payload, sizeof payload};
    msghdr msg{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof from;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(p.fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT);
    if (n < 0) return;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != IPPROTO_IP || c->cmsg_type != IP_RECVERR) continue;
      const auto* ee = reinterpret_cast<const sock_extended_err*>(CMSG_DATA(c));
      if (ee->ee_origin != SO_EE_ORIGIN_ICMP) continue;
      // The quoted probe tells which TTL this answers.
      if (n < 7 || std::memcmp(payload, kMagic, 4) != 0) continue;
      const uint32_t ttl = payload[4];
      if (ttl == 0 || ttl > p.hops.size()) continue;
      const auto* offender = reinterpret_cast<const sockaddr_in*>(SO_EE_OFFENDER(ee));
      if (offender->sin_family != AF_INET) continue;
      ++answers;
      if (ee->ee_type == kIcmpTimeExceeded && offender->sin_addr.s_addr != dest.s_addr) {
        p.hops[ttl - 1] = ip_text(offender->sin_addr);
      } else if (ee->ee_type == kIcmpDestUnreachable || offender->sin_addr.s_addr == dest.s_addr) {
        if (p.dest_ttl == 0 || ttl < p.dest_ttl) p.dest_ttl = ttl;
      }
    }
  }
}

}  // namespace

bool discover(const std::string& dest, uint16_t dport, const std::string& source,
              const std::vector<uint16_t>& source_ports, const DiscoveryConfig& config, Discovery& out,
              std::string& error) {
  in_addr dst{}, src{};
  if (inet_pton(AF_INET, dest.c_str(), &dst) != 1) {
    error = "destination '" + dest + "' is not an IPv4 address";
    return false;
  }
  if (!source.empty() && inet_pton(AF_INET, source.c_str(), &src) != 1) {
    error = "source '" + source + "' is not an IPv4 address";
    return false;
  }
  out = Discovery{};
  out.dest = dest;
  out.dport = dport;
  out.source = source;
  const uint32_t max_ttl = std::max<uint32_t>(config.max_ttl, 1);
  const auto start = std::chrono::steady_clock::now();

  std::vector<Prober> probers;
  for (uint16_t port : source_ports) {
    Prober p;
    p.port = port;
    p.hops.assign(max_ttl, "");
    p.fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (p.fd < 0) {
      error = std::string("socket: ") + std::strerror(errno);
      return false;
    }
    const int on = 1;
    sockaddr_in local{};
    local.sin_family = AF_INET;
    local.sin_port = htons(port);
    local.sin_addr = src;
    if (::setsockopt(p.fd, IPPROTO_IP, IP_RECVERR, &on, sizeof on) != 0 ||
        ::bind(p.fd, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0)
      continue;  // in use: another port will do
    probers.push_back(std::move(p));
  }
  if (probers.empty()) {
    error = "could not bind any probe source port";
    return false;
  }

  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(dport);
  to.sin_addr = dst;
  for (uint32_t ttl = 1; ttl <= max_ttl; ++ttl) {
    for (Prober& p : probers) {
      const int t = static_cast<int>(ttl);
      uint8_t payload[7] = {kMagic[0],
                            kMagic[1],
                            kMagic[2],
                            kMagic[3],
                            static_cast<uint8_t>(ttl),
                            static_cast<uint8_t>(p.port >> 8),
                            static_cast<uint8_t>(p.port)};
      if (::setsockopt(p.fd, IPPROTO_IP, IP_TTL, &t, sizeof t) != 0) continue;
      // A send may report an earlier probe's ICMP error instead of sending: retry once.
      for (int attempt = 0; attempt < 2; ++attempt) {
        if (::sendto(p.fd, payload, sizeof payload, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to) ==
            static_cast<ssize_t>(sizeof payload)) {
          ++out.probes_sent;
          break;
        }
      }
    }
  }
  if (out.probes_sent == 0) {
    error = std::string("no probe could be sent to ") + dest + ": " + std::strerror(errno);
    return false;
  }

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config.timeout_ms);
  std::vector<pollfd> fds(probers.size());
  for (size_t i = 0; i < probers.size(); ++i) fds[i] = {probers[i].fd, 0, 0};
  auto last_answer = std::chrono::steady_clock::now();
  for (;;) {
    bool all = true;
    for (const Prober& p : probers) all = all && p.complete();
    if (all) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) break;
    const uint32_t prefix = probers.front().answered_prefix();
    bool settled = prefix > 0;
    for (const Prober& p : probers) settled = settled && !p.dest_ttl && p.answered_prefix() == prefix;
    if (settled && now - last_answer >= kQuietPeriod) break;
    auto until = deadline;
    if (settled) until = std::min(deadline, last_answer + kQuietPeriod);
    const int wait_ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1;
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno != EINTR) break;
    const uint32_t before = out.answers;
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents & POLLERR) drain_errors(probers[i], dst, out.answers);
    if (out.answers != before) last_answer = std::chrono::steady_clock::now();
  }

  // The routers before the destination: as far as the nearest answer from it
  // reaches, or as far as any router answered.
  uint32_t length = 0;
  for (const Prober& p : probers)
    if (p.dest_ttl) length = length ? std::min(length, p.dest_ttl - 1) : p.dest_ttl - 1;
  out.reached = length != 0 || std::any_of(probers.begin(), probers.end(), [](const Prober& p) { return p.dest_ttl; });
  if (!out.reached) {
    for (const Prober& p : probers)
      for (uint32_t t = 0; t < max_ttl; ++t)
        if (!p.hops[t].empty()) length = std::max(length, t + 1);
  }

  // Ports with every hop known define the paths; a port with gaps joins the
  // one path it is compatible with, if exactly one.
  std::map<std::vector<std::string>, std::vector<uint16_t>> groups;
  std::vector<const Prober*> partial;
  for (const Prober& p : probers) {
    std::vector<std::string> sig(p.hops.begin(), p.hops.begin() + length);
    const size_t known = static_cast<size_t>(std::count_if(sig.begin(), sig.end(), [](auto& h) { return !h.empty(); }));
    if (length != 0 && known == length) groups[sig].push_back(p.port);
    else if (known > 0) partial.push_back(&p);
    else out.unresolved_ports.push_back(p.port);
  }
  for (const Prober* p : partial) {
    std::vector<uint16_t>* match = nullptr;
    int matches = 0;
    for (auto& [sig, ports] : groups) {
      bool ok = true;
      for (uint32_t t = 0; t < length; ++t) ok = ok && (p->hops[t].empty() || p->hops[t] == sig[t]);
      if (ok) ++matches, match = &ports;
    }
    if (matches == 1) match->push_back(p->port);
    else out.unresolved_ports.push_back(p->port);
  }
  for (auto& [sig, ports] : groups) {
    DiscoveredPath path;
    path.hops = sig;
    path.source_ports = ports;
    std::sort(path.source_ports.begin(), path.source_ports.end());
    out.paths.push_back(std::move(path));
  }
  out.fallback = out.paths.empty();
  out.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return true;
}

std::vector<uint16_t> spread_ports(const Discovery& d, size_t count) {
  std::vector<uint16_t> out;
  if (d.paths.empty()) return out;
  std::vector<size_t> next(d.paths.size(), 0);
  for (size_t round = 0; out.size() < count; ++round) {
    bool any = false;
    for (size_t i = 0; i < d.paths.size() && out.size() < count; ++i) {
      if (next[i] < d.paths[i].source_ports.size()) {
        out.push_back(d.paths[i].source_ports[next[i]++]);
        any = true;
      }
    }
    if (!any) break;
  }
  return out;
}

nlohmann::json to_json(const Discovery& d) {
  nlohmann::json j;
  j["dest"] = d.dest;
  j["dport"] = d.dport;
  j["source"] = d.source;
  j["fallback"] = d.fallback;
  j["reached"] = d.reached;
  j["probes_sent"] = d.probes_sent;
  j["answers"] = d.answers;
  j["elapsed_ms"] = d.elapsed_ms;
  j["paths"] = nlohmann::json::array();
  for (size_t i = 0; i < d.paths.size(); ++i) {
    nlohmann::json p;
    p["path"] = i;
    p["hops"] = d.paths[i].hops;
    p["source_ports"] = d.paths[i].source_ports;
    j["paths"].push_back(std::move(p));
  }
  j["unresolved_ports"] = d.unresolved_ports;
  return j;
}

const Discovery* PathCache::find(const std::string& key, std::chrono::steady_clock::time_point now,
                                 uint32_t max_age_s) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || now - it->second.when > std::chrono::seconds(max_age_s)) return nullptr;
  return &it->second;
}

void PathCache::expire(std::chrono::steady_clock::time_point now, uint32_t expiry_s) {
  std::erase_if(entries_, [&](const auto& e) { return now - e.second.when > std::chrono::seconds(expiry_s); });
}

}  // namespace metaroce::daemon
