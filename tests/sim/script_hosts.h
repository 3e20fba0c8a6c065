// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Scripted hosts and small topologies for the simulator's own tests.
#pragma once

#include <cstdint>
#include <algorithm>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

#include "netsim.h"

namespace metaroce::sim::testing {

inline uint32_t seq_of(const Datagram& d) {
  uint32_t s = 0;
  for (size_t i = 0; i < 4 && i < d.payload.size(); ++i) s |= uint32_t{d.payload[i]} << (8 * i);
  return s;
}

inline Datagram make_datagram(NodeId dst, uint16_t sport, uint16_t dport, size_t size, uint32_t seq) {
  Datagram d;
  d.dst = dst;
  d.src_port = sport;
  d.dst_port = dport;
  d.payload.assign(std::max<size_t>(size, 4), 0);
  d.payload.resize(size);
  for (size_t i = 0; i < 4 && i < size; ++i) d.payload[i] = static_cast<uint8_t>(seq >> (8 * i));
  return d;
}

struct Received {
  Time t;
  Datagram d;
};

// Sends scripted datagrams at scripted times; records what it receives.
class ScriptHost : public Host {
 public:
  void send_at(Time t, NodeId dst, uint16_t sport, uint16_t dport, size_t size, uint32_t seq = 0, uint16_t egress = 0) {
    Datagram d = make_datagram(dst, sport, dport, size, seq);
    d.egress = egress;
    auto pos = std::upper_bound(outbox_.begin(), outbox_.end(), t, [](Time v, const auto& e) { return v < e.first; });
    outbox_.insert(pos, {t, std::move(d)});
  }
  void receive(Time now, Datagram&& d) override { inbox.push_back({now, std::move(d)}); }
  void on_timer(Time now) override { timer_calls.push_back(now); }
  bool transmit(Time now, Datagram& out) override {
    if (outbox_.empty() || outbox_.front().first > now) return false;
    out = std::move(outbox_.front().second);
    outbox_.pop_front();
    return true;
  }
  Time next_wakeup() const override { return outbox_.empty() ? kNever : outbox_.front().first; }

  std::vector<Received> inbox;
  std::vector<Time> timer_calls;

 private:
  std::deque<std::pair<Time, Datagram>> outbox_;
};

// Replies to every datagram with a datagram of `reply_size` bytes (same seq).
class EchoHost : public Host {
 public:
  explicit EchoHost(size_t reply_size = 0) : reply_size_(reply_size) {}
  void receive(Time, Datagram&& d) override {
    ++received;
    Datagram r = make_datagram(d.src, d.dst_port, d.src_port, reply_size_ ? reply_size_ : d.payload.size(), seq_of(d));
    pending_.push_back(std::move(r));
  }
  void on_timer(Time) override {}
  bool transmit(Time, Datagram& out) override {
    if (pending_.empty()) return false;
    out = std::move(pending_.front());
    pending_.pop_front();
    return true;
  }
  Time next_wakeup() const override { return kNever; }

  uint64_t received = 0;

 private:
  size_t reply_size_;
  std::deque<Datagram> pending_;
};

inline LinkParams rate_link(uint64_t rate_bps, Time delay_ns) {
  LinkParams p;
  p.rate_bps = rate_bps;
  p.delay_ns = delay_ns;
  return p;
}

// A -> B over one link (and B -> A back), both hosts ScriptHosts.
struct Pair {
  explicit Pair(uint64_t seed, const LinkParams& p) : sim(seed) {
    A = sim.add_host(a);
    B = sim.add_host(b);
    ab = sim.add_link(A, B, p);
    ba = sim.add_link(B, A, p);
    sim.add_route(A, B, {ab});
    sim.add_route(B, A, {ba});
  }
  Simulator sim;
  ScriptHost a, b;
  NodeId A = 0, B = 0;
  LinkId ab = 0, ba = 0;
};

inline auto stats_tuple(const LinkStats& s) {
  return std::make_tuple(s.packets_in, s.bytes_in, s.delivered, s.dropped_loss, s.dropped_queue, s.dropped_blackhole,
                         s.duplicated, s.ce_marked, s.max_backlog_bytes);
}

}  // namespace metaroce::sim::testing
