// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The engine on multi-node topologies: ECMP switches that hash the UDP source
// port spread one connection's paths over a two-tier fabric, and an incast of
// several senders into one receiver settles on the receiver's rate hint.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <set>

#include "engine_fixture.h"
#include "engine_host.h"
#include "netsim.h"
#include "rig.h"

namespace metaroce::sim {
namespace {

using transport::Completion;
using transport::EndpointConfig;
using transport::PostResult;
using transport::SendWr;
using transport::WcStatus;
using transport::WrOpcode;

using testing::addr;
using testing::kPd;

LinkParams link_params(uint64_t rate_bps = 100'000'000'000) {
  LinkParams p;
  p.rate_bps = rate_bps;
  p.delay_ns = 1'000;
  p.ecn_threshold_bytes = 100'000;
  p.queue_bytes = 4 << 20;
  p.overhead_bytes = 66;
  return p;
}

TEST(Topology, EcmpSwitchesSpreadOneConnectionOverATwoTierFabric) {
  // host A - leaf 1 = 4 spine links = leaf 2 - host B. The leaves hash the
  // 5-tuple; the engine's 16 paths are 16 source ports.
  Simulator sim(3);
  EndpointConfig config;
  config.paths = 16;
  config.path_rate_bps = 25'000'000'000;  // 16 paths share 4 x 100G spine links
  EngineHost a(config), b(config);
  const NodeId na = sim.add_host(a), nb = sim.add_host(b);
  const NodeId leaf1 = sim.add_switch(), leaf2 = sim.add_switch();
  const LinkId a_up = sim.add_link(na, leaf1, link_params(400'000'000'000));
  const LinkId a_down = sim.add_link(leaf1, na, link_params(400'000'000'000));
  const LinkId b_up = sim.add_link(nb, leaf2, link_params(400'000'000'000));
  const LinkId b_down = sim.add_link(leaf2, nb, link_params(400'000'000'000));
  std::vector<LinkId> spine_fwd, spine_rev;
  for (int i = 0; i < 4; ++i) {
    spine_fwd.push_back(sim.add_link(leaf1, leaf2, link_params()));
    spine_rev.push_back(sim.add_link(leaf2, leaf1, link_params()));
  }
  sim.set_default_route(na, {a_up});
  sim.set_default_route(nb, {b_up});
  sim.add_route(leaf1, nb, spine_fwd, Select::Hash);
  sim.add_route(leaf1, na, {a_down});
  sim.add_route(leaf2, na, spine_rev, Select::Hash);
  sim.add_route(leaf2, nb, {b_down});

  const QpPair p = connect_qps(a, na, b, nb, {}, kPd);
  std::vector<uint8_t> source(32 << 20), sink(32 << 20, 0);
  std::mt19937_64 rng(1);
  for (auto& byte : source) byte = static_cast<uint8_t>(rng());
  const uint32_t lkey =
      *a.endpoint().memory().register_region(kPd, addr(source.data()), source.size(), transport::kAccessLocalWrite);
  const uint32_t rkey = *b.endpoint().memory().register_region(
      kPd, addr(sink.data()), sink.size(), transport::kAccessLocalWrite | transport::kAccessRemoteWrite);
  for (uint64_t i = 0; i < 32; ++i) {
    SendWr wr;
    wr.wr_id = i;
    wr.opcode = WrOpcode::RdmaWrite;
    wr.num_sge = 1;
    wr.sg[0] = {addr(source.data()) + (i << 20), 1u << 20, lkey};
    wr.remote_addr = addr(sink.data()) + (i << 20);
    wr.rkey = rkey;
    ASSERT_EQ(a.endpoint().post_send(p.qp_a, wr), PostResult::Ok);
  }
  sim.wake(na);
  ASSERT_TRUE(sim.run_until([&] { return a.endpoint().cq_depth(p.cq_a) == 32; }, 100'000'000));
  EXPECT_EQ(source, sink);
  EXPECT_EQ(sim.unroutable(), 0u);

  // Every spine link carried a real share of the data (16 ports hashed onto 4 links).
  uint64_t total = 0;
  for (LinkId link : spine_fwd) total += sim.stats(link).bytes_in;
  for (LinkId link : spine_fwd) {
    EXPECT_GT(sim.stats(link).bytes_in, total / 4 / 3) << "spine link " << link;
  }
  // And the ports-to-links map is what the hash says, so each path's packets
  // stayed on one link: no path saw reordering, hence no spurious loss.
  EXPECT_EQ(a.endpoint().counters().spurious_retransmits, 0u);
  EXPECT_EQ(a.endpoint().counters().tx_retransmits, 0u);
}

struct IncastResult {
  std::vector<Time> finish;
  LinkStats bottleneck;
  std::vector<std::vector<uint64_t>> sent;  // per sender, bytes sent at each sample
  Time sample_interval = 0;
};

// N senders, each on its own 100G link to a switch, WRITE 4 MiB each into one
// receiver behind a single 100G link.
IncastResult run_incast(size_t senders, uint64_t receiver_capacity_bps) {
  Simulator sim(5);
  // Each host has one 100G NIC: its 4 paths get a quarter of it each.
  EndpointConfig host_config;
  host_config.path_rate_bps = 25'000'000'000;
  host_config.base_rtt_ns = 5'000;
  EndpointConfig receiver_config = host_config;
  receiver_config.inbound_capacity_bps = receiver_capacity_bps;
  EngineHost receiver(receiver_config);
  const NodeId nr = sim.add_host(receiver);
  const NodeId sw = sim.add_switch();
  IncastResult result;
  const LinkId r_up = sim.add_link(nr, sw, link_params());
  const LinkId r_down = sim.add_link(sw, nr, link_params());
  sim.set_default_route(nr, {r_up});
  sim.add_route(sw, nr, {r_down});

  std::vector<std::unique_ptr<EngineHost>> hosts;
  std::vector<NodeId> nodes;
  std::vector<QpPair> pairs;
  constexpr size_t kBytes = 4 << 20;
  std::vector<uint8_t> source(kBytes, 0x5c);
  std::vector<std::vector<uint8_t>> sinks(senders, std::vector<uint8_t>(kBytes, 0));
  for (size_t i = 0; i < senders; ++i) {
    hosts.push_back(std::make_unique<EngineHost>(host_config));
    const NodeId n = sim.add_host(*hosts.back());
    nodes.push_back(n);
    const LinkId up = sim.add_link(n, sw, link_params());
    const LinkId down = sim.add_link(sw, n, link_params());
    sim.set_default_route(n, {up});
    sim.add_route(sw, n, {down});
    pairs.push_back(connect_qps(*hosts.back(), n, receiver, nr, {}, kPd));
    transport::Endpoint& e = hosts.back()->endpoint();
    const uint32_t lkey = *e.memory().register_region(kPd, addr(source.data()), kBytes, transport::kAccessLocalWrite);
    const uint32_t rkey = *receiver.endpoint().memory().register_region(
        kPd, addr(sinks[i].data()), kBytes, transport::kAccessLocalWrite | transport::kAccessRemoteWrite);
    for (uint64_t m = 0; m < 4; ++m) {
      SendWr wr;
      wr.wr_id = m;
      wr.opcode = WrOpcode::RdmaWrite;
      wr.num_sge = 1;
      wr.sg[0] = {addr(source.data()) + (m << 20), 1u << 20, lkey};
      wr.remote_addr = addr(sinks[i].data()) + (m << 20);
      wr.rkey = rkey;
      EXPECT_EQ(e.post_send(pairs[i].qp_a, wr), PostResult::Ok);
    }
    sim.wake(n);
  }
  result.finish.assign(senders, 0);
  result.sent.assign(senders, {});
  result.sample_interval = 2'000;
  std::function<void()> sample = [&] {
    bool all_done = true;
    for (size_t i = 0; i < senders; ++i) {
      result.sent[i].push_back(hosts[i]->endpoint().counters().tx_data_bytes);
      if (result.finish[i] == 0 && hosts[i]->endpoint().cq_depth(pairs[i].cq_a) == 4) result.finish[i] = sim.now();
      all_done &= result.finish[i] != 0;
    }
    if (!all_done) sim.at(sim.now() + result.sample_interval, sample);
  };
  sim.at(0, sample);
  sim.run_until(
      [&] {
        for (Time t : result.finish)
          if (t == 0) return false;
        return true;
      },
      100'000'000);
  for (size_t i = 0; i < senders; ++i) EXPECT_EQ(sinks[i], source) << "sender " << i;
  result.bottleneck = sim.stats(r_down);
  return result;
}

TEST(Topology, IncastSettlesOnTheReceiversRateHint) {
  constexpr size_t kSenders = 4;
  const IncastResult hinted = run_incast(kSenders, 100'000'000'000);
  const IncastResult unhinted = run_incast(kSenders, 100'000'000'000'000);  // hint far above the link
  for (Time t : hinted.finish) ASSERT_GT(t, 0u);
  for (Time t : unhinted.finish) ASSERT_GT(t, 0u);

  // With the hint each sender is paced at a quarter of 95% of the receiver's link:
  // from two RTTs in (RTT ~4.5 us here) every sender's rate stays near its
  // share, and the bottleneck queue stays far below the unhinted one.
  const double share_gbps = 95.0 / kSenders;
  const size_t settle = 5;  // samples of 2 us = 10 us, about two RTTs
  const size_t window = 5;
  size_t checked = 0;
  for (size_t s = settle; s + window < hinted.sent[0].size(); s += window) {
    bool all_running = true;
    for (size_t i = 0; i < kSenders; ++i) all_running &= hinted.finish[i] > (s + window) * hinted.sample_interval;
    if (!all_running) break;
    for (size_t i = 0; i < kSenders; ++i) {
      const double gbps = (hinted.sent[i][s + window] - hinted.sent[i][s]) * 8.0 / (window * hinted.sample_interval);
      EXPECT_GT(gbps, 0.7 * share_gbps) << "sender " << i << " at " << s * 2 << " us";
      EXPECT_LT(gbps, 1.3 * share_gbps) << "sender " << i << " at " << s * 2 << " us";
    }
    ++checked;
  }
  EXPECT_GT(checked, 10u);
  EXPECT_EQ(hinted.bottleneck.dropped_queue, 0u);
  // The first RTT's burst is the same either way; what the hint removes is the
  // standing queue after it, which the switch reports as ECN marks.
  EXPECT_LT(4 * hinted.bottleneck.ce_marked, unhinted.bottleneck.ce_marked);
  // Fair: the senders finish within 10% of each other.
  const auto [first, last] = std::minmax_element(hinted.finish.begin(), hinted.finish.end());
  EXPECT_LT(static_cast<double>(*last), 1.1 * static_cast<double>(*first));
}

TEST(Topology, RateHintAlsoBoundsTheConnectionsDataInFlight) {
  // A receiver that grants 1 Gb/s in total: once its hint arrives, the sender
  // keeps at most two hint-rate RTTs (at least two packets) in flight over all
  // paths together, however large the paths' own windows are.
  RigSpec spec;
  spec.endpoint.inbound_capacity_bps = 1'000'000'000;
  TwoHostRig rig(spec);
  const QpPair qp = rig.connect_qps({}, kPd);
  std::vector<uint8_t> source(8 << 20, 1), sink(8 << 20, 0);
  transport::Endpoint& a = rig.a().endpoint();
  const uint32_t lkey =
      *a.memory().register_region(kPd, addr(source.data()), source.size(), transport::kAccessLocalWrite);
  const uint32_t rkey = *rig.b().endpoint().memory().register_region(
      kPd, addr(sink.data()), sink.size(), transport::kAccessLocalWrite | transport::kAccessRemoteWrite);
  SendWr wr;
  wr.opcode = WrOpcode::RdmaWrite;
  wr.num_sge = 1;
  wr.sg[0] = {addr(source.data()), 1u << 20, lkey};
  wr.remote_addr = addr(sink.data());
  wr.rkey = rkey;
  ASSERT_EQ(a.post_send(qp.qp_a, wr), PostResult::Ok);
  rig.sim().wake(rig.node_a());
  uint64_t max_inflight = 0;
  std::function<void()> sample = [&] {
    uint64_t inflight = 0;
    for (const auto& path : a.path_snapshots(rig.node_b())) inflight += path.inflight_bytes;
    max_inflight = std::max(max_inflight, inflight);
    if (a.cq_depth(qp.cq_a) == 0) rig.sim().at(rig.sim().now() + 1'000, sample);
  };
  rig.sim().at(40'000, sample);  // after the first ACKs brought the hint
  ASSERT_TRUE(rig.sim().run_until([&] { return a.cq_depth(qp.cq_a) == 1; }, 100'000'000));
  EXPECT_EQ(std::memcmp(source.data(), sink.data(), 1 << 20), 0);
  EXPECT_GT(max_inflight, 0u);
  EXPECT_LE(max_inflight, 3u * (4096 + 56));
  // Before the hint the paths' initial windows (4 x 100 kB) leave at line
  // rate; the remaining ~650 kB at 0.95 Gb/s take about 5.5 ms.
  EXPECT_GT(rig.sim().now(), 5'000'000u);
}

}  // namespace
}  // namespace metaroce::sim
