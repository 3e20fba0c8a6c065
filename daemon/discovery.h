// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Path discovery, paris-traceroute style: for one destination, send UDP
// probes from many source ports with TTL 1..max_ttl (the 5-tuple of each probe
// is the one a connection from that port would have, so ECMP routers hash it
// the same way), read the routers' ICMP time-exceeded answers from the
// sockets' error queues (IP_RECVERR, no privilege needed), and group the
// source ports by the sequence of routers they met: one group per distinct
// path. When no router answers, the result says so (fallback) and callers
// spread ports by hashing alone.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config.h"

namespace metaroce::daemon {

struct DiscoveredPath {
  std::vector<std::string> hops;       // router addresses, "*" for no answer
  std::vector<uint16_t> source_ports;  // ports whose probes took this path
};

struct Discovery {
  std::string dest;
  uint16_t dport = 0;
  std::string source;  // local address probed from ("" = routing's choice)
  std::vector<DiscoveredPath> paths;
  std::vector<uint16_t> unresolved_ports;  // no answer from any router
  bool fallback = false;                   // no router answered: hash spread only
  bool reached = false;                    // the destination answered (port unreachable)
  uint32_t probes_sent = 0;
  uint32_t answers = 0;
  double elapsed_ms = 0;
  // When it was found, on the daemon's clock: set by the server when the
  // result comes back (PathCache expiry counts from it).
  std::chrono::steady_clock::time_point when{};
};

// Probes `dest`:`dport` from `source_ports` (bound on `source`, may be empty).
// Ports that cannot be bound (in use) are skipped. False with `error` when the
// destination is not an IPv4 literal or nothing could be sent.
bool discover(const std::string& dest, uint16_t dport, const std::string& source,
              const std::vector<uint16_t>& source_ports, const DiscoveryConfig& config, Discovery& out,
              std::string& error);

// `count` source ports chosen from a discovery so that every path gets its
// share (round-robin over paths, ports taken in order); nullopt-like empty
// result when the discovery has no paths.
std::vector<uint16_t> spread_ports(const Discovery& d, size_t count);

nlohmann::json to_json(const Discovery& d);

// Results per (destination, port, source), with expiry.
class PathCache {
 public:
  const Discovery* find(const std::string& key, std::chrono::steady_clock::time_point now, uint32_t max_age_s) const;
  void put(const std::string& key, Discovery d) { entries_[key] = std::move(d); }
  void clear() { entries_.clear(); }
  template <typename Pred>
  size_t drop_if(Pred pred) {
    return std::erase_if(entries_, [&](const auto& e) { return pred(e.second); });
  }
  void expire(std::chrono::steady_clock::time_point now, uint32_t expiry_s);
  size_t size() const { return entries_.size(); }
  static std::string key(const std::string& dest, uint16_t dport, const std::string& source) {
    return dest + ":" + std::to_string(dport) + "@" + source;
  }

 private:
  std::map<std::string, Discovery> entries_;
};

}  // namespace metaroce::daemon
