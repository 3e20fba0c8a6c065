// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The simulator's explicit link queues: they must time packets exactly as
// the arithmetic model does when nothing holds them, and they carry what the
// arithmetic model cannot: PFC pauses (lossless incast, head-of-line blocking
// and pause spreading) and a host's NIC transmit ring. Also routing a host's
// datagram to the uplink (NIC) it names.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "netsim.h"
#include "script_hosts.h"

namespace metaroce::sim {
namespace {

using testing::make_datagram;
using testing::Pair;
using testing::rate_link;
using testing::ScriptHost;
using testing::seq_of;
using testing::stats_tuple;

constexpr uint64_t k100G = 100'000'000'000;

// Arrival log of a run: (time, seq, ce) per packet at B, and A->B's stats.
struct Log {
  std::vector<std::tuple<Time, uint32_t, bool>> arrivals;
  decltype(stats_tuple(LinkStats{})) stats;
  bool operator==(const Log&) const = default;
};

Log run_pair(bool explicit_queue, const LinkParams& p) {
  Pair t(9, p);
  // A transmit ring far larger than anything queued: the uplink becomes an
  // explicit FIFO but never holds the host back.
  if (explicit_queue) t.sim.set_tx_ring(t.A, uint64_t{1} << 40);
  uint32_t seq = 0;
  // Bursts, gaps and odd sizes: fractional serialization times, back-to-back
  // frames, an idle link, drop-tail and ECN thresholds crossed.
  for (int burst = 0; burst < 150; ++burst) {
    const Time at = static_cast<Time>(burst) * 1'700;
    for (int i = 0; i < 1 + burst % 7; ++i) t.a.send_at(at, t.B, 1, 1, 333 + 97 * ((burst + i) % 11), seq++);
  }
  t.sim.run_until(kNever);
  Log log;
  for (const auto& r : t.b.inbox) log.arrivals.emplace_back(r.t, seq_of(r.d), r.d.ce);
  log.stats = stats_tuple(t.sim.stats(t.ab));
  return log;
}

TEST(NetsimQueuedLink, TimesPacketsExactlyAsTheArithmeticModel) {
  LinkParams p = rate_link(7'000'000'000, 1'000);
  p.overhead_bytes = 24;
  p.queue_bytes = 4'000;
  p.ecn_threshold_bytes = 1'500;
  p.loss = 0.05;
  p.jitter_ns = 300;
  p.duplicate = 0.02;
  const Log arithmetic = run_pair(false, p);
  const Log queued = run_pair(true, p);
  EXPECT_EQ(queued, arithmetic);
  // The scenario exercised what it should.
  EXPECT_GT(std::get<4>(arithmetic.stats), 0u);  // dropped_queue
  EXPECT_GT(std::get<7>(arithmetic.stats), 0u);  // ce_marked
  EXPECT_GT(std::get<3>(arithmetic.stats), 0u);  // dropped_loss
  EXPECT_GT(arithmetic.arrivals.size(), 100u);
}

TEST(NetsimQueuedLink, TxRingHoldsTheHostInsteadOfDroppingAtItsNic) {
  // 400 packets of 1000 B offered at once to a 100G uplink whose queue holds
  // 64 kB: without a ring the NIC drops most; with a 16 kB ring the host is
  // asked for more only as the ring drains, so nothing is lost and the link
  // stays busy.
  for (bool ring : {false, true}) {
    LinkParams p = rate_link(k100G, 1'000);
    p.queue_bytes = 64'000;
    Pair t(1, p);
    if (ring) t.sim.set_tx_ring(t.A, 16'000);
    for (uint32_t i = 0; i < 400; ++i) t.a.send_at(0, t.B, 1, 1, 1'000, i);
    t.sim.run_until(kNever);
    const LinkStats& s = t.sim.stats(t.ab);
    if (!ring) {
      EXPECT_GT(s.dropped_queue, 300u);
      continue;
    }
    EXPECT_EQ(s.dropped_queue, 0u);
    ASSERT_EQ(t.b.inbox.size(), 400u);
    for (uint32_t i = 0; i < 400; ++i) EXPECT_EQ(seq_of(t.b.inbox[i].d), i);
    EXPECT_LE(s.max_backlog_bytes, 16'000u + 1'000);
    // 400 x 80 ns back to back, plus the delay: the ring never idled the link.
    EXPECT_EQ(t.b.inbox.back().t, 400u * 80 + 1'000);
    // A held host is not polled in a loop: a few events per packet.
    EXPECT_LT(t.sim.events_processed(), 400u * 6);
  }
}

TEST(NetsimQueuedLink, AFullRingHoldsNoneOfTheHostsOtherNics) {
  // 200 frames for NIC 0, then 200 for NIC 1, offered at once: NIC 1 must
  // start as soon as its frames come, not once NIC 0's ring has drained.
  class TwoNics : public Host {
   public:
    explicit TwoNics(NodeId dst) : dst_(dst) {}
    void receive(Time, Datagram&&) override {}
    void on_timer(Time) override {}
    bool transmit(Time, Datagram& out) override {
      if (sent_ == 400) return false;
      out = make_datagram(dst_, 1, 1, 1'000, sent_);
      out.egress = sent_++ < 200 ? 0 : 1;
      return true;
    }
    Time next_wakeup() const override { return sent_ < 400 ? 0 : kNever; }

   private:
    NodeId dst_;
    uint32_t sent_ = 0;
  };
  Simulator sim(1);
  ScriptHost sink;
  const NodeId S = sim.add_host(sink);
  TwoNics host(S);
  const NodeId H = sim.add_host(host);
  LinkParams p = rate_link(k100G, 1'000);
  p.queue_bytes = uint64_t{1} << 30;
  const LinkId nic0 = sim.add_link(H, S, p), nic1 = sim.add_link(H, S, p);
  sim.set_default_route(H, {nic0, nic1}, Select::Egress);
  sim.set_tx_ring(H, 16'000);
  sim.run_until(kNever);
  ASSERT_EQ(sink.inbox.size(), 400u);
  Time last_nic1 = 0;
  for (const auto& r : sink.inbox)
    if (seq_of(r.d) >= 200) last_nic1 = std::max(last_nic1, r.t);
  // 200 frames of 80 ns and the delay: in parallel with NIC 0, not after it.
  EXPECT_LE(last_nic1, 200u * 80 + 1'000 + 100);
  EXPECT_EQ(sim.stats(nic0).packets_in, 200u);
  EXPECT_EQ(sim.stats(nic1).packets_in, 200u);
}

TEST(NetsimQueuedLink, AHostHeldByItsRingStillRunsItsTimers) {
  // A host with always more to send keeps its ring full; its overdue timers
  // (an engine's retransmission and probe timers) must still run, every
  // 500 ns at worst, and without spinning at one instant.
  class Busy : public Host {
   public:
    explicit Busy(NodeId dst) : dst_(dst) {}
    void receive(Time, Datagram&&) override {}
    void on_timer(Time now) override { timers.push_back(now); }
    bool transmit(Time, Datagram& out) override {
      out = make_datagram(dst_, 1, 1, 1'000, sent++);
      return true;
    }
    Time next_wakeup() const override { return 0; }  // always overdue
    std::vector<Time> timers;
    uint32_t sent = 0;

   private:
    NodeId dst_;
  };
  Simulator sim(1);
  ScriptHost sink;
  const NodeId S = sim.add_host(sink);
  Busy busy(S);
  const NodeId B = sim.add_host(busy);
  LinkParams p = rate_link(k100G, 1'000);
  p.queue_bytes = uint64_t{1} << 30;
  sim.add_route(B, S, {sim.add_link(B, S, p)});
  sim.set_tx_ring(B, 16'000);
  sim.run_until(100'000);
  ASSERT_GT(busy.timers.size(), 150u);
  for (size_t i = 1; i < busy.timers.size(); ++i) EXPECT_LE(busy.timers[i] - busy.timers[i - 1], 1'000u) << i;
  // 100 us at 100G is 1250 frames: a few events each, plus the timers.
  EXPECT_GT(busy.sent, 1'200u);
  EXPECT_LT(sim.events_processed(), 1'250u * 6 + 400);
}

TEST(NetsimRouting, EgressSelectsTheHostsNic) {
  Simulator sim(1);
  ScriptHost a, b;
  const NodeId A = sim.add_host(a);
  const NodeId B = sim.add_host(b);
  std::vector<LinkId> nics;
  for (int i = 0; i < 3; ++i) nics.push_back(sim.add_link(A, B, rate_link(k100G, 1'000)));
  sim.set_default_route(A, nics, Select::Egress);
  for (uint16_t egress : {2, 0, 2, 2, 3}) {
    Datagram d = make_datagram(B, 7, 7, 100, egress);
    d.src = A;
    d.egress = egress;
    EXPECT_EQ(sim.next_hop(A, d), egress < 3 ? nics[egress] : kNoLink);
  }
  // The host's egress choice reaches the simulator through transmit().
  class NicHost : public Host {
   public:
    explicit NicHost(NodeId dst) : dst_(dst) {}
    void receive(Time, Datagram&&) override {}
    void on_timer(Time) override {}
    bool transmit(Time, Datagram& out) override {
      if (next_ >= egress_.size()) return false;
      out = make_datagram(dst_, 1, 1, 100, next_);
      out.egress = egress_[next_++];
      return true;
    }
    Time next_wakeup() const override { return next_ < egress_.size() ? 0 : kNever; }

   private:
    NodeId dst_;
    std::vector<uint16_t> egress_{2, 0, 2, 2, 3, 1};
    size_t next_ = 0;
  };
  Simulator sim2(1);
  ScriptHost sink;
  const NodeId S = sim2.add_host(sink);
  NicHost host(S);
  const NodeId H = sim2.add_host(host);
  std::vector<LinkId> links;
  for (int i = 0; i < 3; ++i) links.push_back(sim2.add_link(H, S, rate_link(k100G, 1'000)));
  sim2.set_default_route(H, links, Select::Egress);
  sim2.run_until(kNever);
  EXPECT_EQ(sim2.stats(links[0]).packets_in, 1u);
  EXPECT_EQ(sim2.stats(links[1]).packets_in, 1u);
  EXPECT_EQ(sim2.stats(links[2]).packets_in, 3u);
  EXPECT_EQ(sim2.unroutable(), 1u);  // egress 3: the host has no fourth NIC
  EXPECT_EQ(sink.inbox.size(), 5u);
}

// Senders on their own 100G links into one switch, which forwards everything
// to one receiver over a 100G link: a 4:1 incast.
struct Incast {
  Incast(bool pfc, const PfcParams& params) : sim(3) {
    receiver = sim.add_host(sink);
    sw = sim.add_switch();
    if (pfc) sim.enable_pfc(sw, params);
    LinkParams down = rate_link(k100G, 1'000);
    down.queue_bytes = 200'000;
    to_receiver = sim.add_link(sw, receiver, down);
    sim.add_route(sw, receiver, {to_receiver});
    for (auto& s : senders) {
      const NodeId n = sim.add_host(s);
      LinkParams up = rate_link(k100G, 1'000);
      up.queue_bytes = uint64_t{1} << 30;  // the NIC holds what the host gave it
      uplinks.push_back(sim.add_link(n, sw, up));
      sim.add_route(n, receiver, {uplinks.back()});
      for (uint32_t i = 0; i < 500; ++i) s.send_at(0, receiver, static_cast<uint16_t>(n), 1, 1'000, i);
    }
  }
  Simulator sim;
  ScriptHost sink;
  ScriptHost senders[4];
  NodeId receiver = 0, sw = 0;
  LinkId to_receiver = 0;
  std::vector<LinkId> uplinks;
};

TEST(NetsimPfc, IncastIsLosslessAndPausesTheSenders) {
  // 2 MB offered at 400G into a 100G port with a 200 kB buffer.
  PfcParams pfc;
  pfc.xoff_bytes = 16'000;
  pfc.xon_bytes = 12'000;
  Incast lossy(false, pfc);
  lossy.sim.run_until(kNever);
  EXPECT_GT(lossy.sim.stats(lossy.to_receiver).dropped_queue, 1'000u);

  Incast lossless(true, pfc);
  lossless.sim.run_until(kNever);
  const LinkStats& down = lossless.sim.stats(lossless.to_receiver);
  EXPECT_EQ(down.dropped_queue, 0u);
  ASSERT_EQ(lossless.sink.inbox.size(), 2'000u);
  // Per sender, in order.
  std::vector<uint32_t> next(lossless.sim.node_count(), 0);
  for (const auto& r : lossless.sink.inbox) EXPECT_EQ(seq_of(r.d), next[r.d.src]++);
  // An ingress holds at most XOFF plus what was in flight when its XOFF
  // left: the pause frame's delay and the data already on the wire (1 us
  // each way at 100G = 12.5 kB each) and the frame being sent.
  const uint64_t headroom = 2 * 12'500 + 2 * 1'000;
  EXPECT_LE(down.max_backlog_bytes, 4 * (pfc.xoff_bytes + headroom));
  for (LinkId up : lossless.uplinks) {
    const LinkStats& s = lossless.sim.stats(up);
    EXPECT_GT(s.pause_frames, 10u);
    EXPECT_GT(s.paused_ns, 50'000u);
  }
  // XON keeps enough queued to cover the resume delay: the port never idles,
  // so 2 MB leave at 100G (160 us) plus the two hops' delays.
  EXPECT_LE(lossless.sink.inbox.back().t, 160'000u + 2'000 + 1'000);
}

TEST(NetsimPfc, PauseSpreadsUpstreamAndBlocksFlowsToIdlePorts) {
  // A and B on switch S1; S1 -> S2 over a 400G trunk; S2 serves C and D,
  // and E, also on S2, sends to C. B and E overload C's port; A only sends to
  // D, whose port is idle. With PFC, S2 pauses the trunk (which carries B's
  // traffic), S1 then pauses A as well as B: A's flow to D is held behind a
  // congestion it has no part in. Without PFC it runs at its own rate.
  auto run = [](bool pfc) {
    Simulator sim(4);
    ScriptHost a, b, c, d, e;
    const NodeId A = sim.add_host(a), B = sim.add_host(b), C = sim.add_host(c), D = sim.add_host(d),
                 E = sim.add_host(e);
    const NodeId S1 = sim.add_switch(), S2 = sim.add_switch();
    PfcParams params;
    params.xoff_bytes = 20'000;
    params.xon_bytes = 16'000;
    if (pfc) {
      sim.enable_pfc(S1, params);
      sim.enable_pfc(S2, params);
    }
    LinkParams host = rate_link(k100G, 1'000);
    host.queue_bytes = uint64_t{1} << 30;
    LinkParams port = rate_link(k100G, 1'000);
    port.queue_bytes = 1 << 20;
    const LinkId a_up = sim.add_link(A, S1, host), b_up = sim.add_link(B, S1, host), e_up = sim.add_link(E, S2, host);
    LinkParams trunk_params = port;
    trunk_params.rate_bps = 4 * k100G;
    const LinkId trunk = sim.add_link(S1, S2, trunk_params);
    const LinkId to_c = sim.add_link(S2, C, port), to_d = sim.add_link(S2, D, port);
    sim.set_default_route(A, {a_up});
    sim.set_default_route(B, {b_up});
    sim.set_default_route(E, {e_up});
    sim.set_default_route(S1, {trunk});
    sim.add_route(S2, C, {to_c});
    sim.add_route(S2, D, {to_d});
    for (uint32_t i = 0; i < 1'000; ++i) a.send_at(0, D, 1, 1, 1'000, i);  // 80 us at 100G to an idle port
    for (uint32_t i = 0; i < 3'000; ++i) {  // 240 us at 100G each: congestion outlasts A's flow
      b.send_at(0, C, 2, 1, 1'000, i);
      e.send_at(0, C, 3, 1, 1'000, i);
    }
    sim.run_until(kNever);
    struct Result {
      Time a_done = 0;
      uint64_t trunk_pauses = 0, a_pauses = 0, drops = 0;
    } r;
    r.a_done = d.inbox.empty() ? 0 : d.inbox.back().t;
    r.trunk_pauses = sim.stats(trunk).pause_frames;
    r.a_pauses = sim.stats(a_up).pause_frames;
    r.drops = sim.stats(to_c).dropped_queue + sim.stats(trunk).dropped_queue;
    EXPECT_EQ(d.inbox.size(), 1'000u);
    EXPECT_EQ(c.inbox.size() + r.drops, 6'000u);
    return r;
  };
  const auto lossy = run(false);
  const auto lossless = run(true);
  // Without PFC, A's flow is untouched: 1000 frames of 80 ns back to back,
  // 3 us of delay and the last frame's 20 + 80 ns on the next two links,
  // give or take B's frames ahead of it on the trunk.
  EXPECT_LE(lossy.a_done, 1'000u * 80 + 100 + 3'000 + 100);
  EXPECT_EQ(lossy.trunk_pauses + lossy.a_pauses, 0u);
  // With PFC nothing is dropped, the pause spread from S2 to S1 and on to A,
  // and A's flow finished far later than its own rate allows.
  EXPECT_EQ(lossless.drops, 0u);
  EXPECT_GT(lossless.trunk_pauses, 0u);
  EXPECT_GT(lossless.a_pauses, 0u);
  EXPECT_GT(lossless.a_done, 3 * lossy.a_done / 2);
}

TEST(NetsimPfc, RejectsXonAboveXoffAndHosts) {
  Simulator sim(1);
  ScriptHost h;
  const NodeId H = sim.add_host(h);
  const NodeId S = sim.add_switch();
  PfcParams bad;
  bad.xoff_bytes = 10;
  bad.xon_bytes = 20;
  EXPECT_THROW(sim.enable_pfc(S, bad), std::invalid_argument);
  EXPECT_THROW(sim.enable_pfc(H, PfcParams{}), std::invalid_argument);
}

}  // namespace
}  // namespace metaroce::sim
