// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The multiplane leaf-spine fabric: routes between every pair of servers in
// every plane, with the hop count and latency of a two-tier Clos; ECMP at
// the leaves per 5-tuple; spine links at the rate oversubscription asks for;
// a host's NICs in the planes it names; link and plane failures; and a PFC
// fabric that refuses thresholds it could not keep lossless.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "leaf_spine.h"
#include "script_hosts.h"

namespace metaroce::sim {
namespace {

using testing::ScriptHost;
using testing::seq_of;

constexpr uint64_t k400G = 400'000'000'000;

LeafSpineSpec small_spec(uint16_t planes = 2) {
  LeafSpineSpec spec;
  spec.leaves = 3;
  spec.hosts_per_leaf = 2;
  spec.spines = 4;
  spec.planes = planes;
  return spec;
}

struct Cluster {
  explicit Cluster(const LeafSpineSpec& spec) : sim(7), fabric(sim, spec) {
    std::vector<uint16_t> all(spec.planes);
    for (uint16_t p = 0; p < spec.planes; ++p) all[p] = p;
    for (uint32_t s = 0; s < fabric.servers(); ++s) {
      hosts.push_back(std::make_unique<ScriptHost>());
      nodes.push_back(fabric.attach(*hosts.back(), s, all));
    }
  }
  Simulator sim;
  LeafSpineFabric fabric;
  std::vector<std::unique_ptr<ScriptHost>> hosts;
  std::vector<NodeId> nodes;
};

TEST(LeafSpine, EveryServerReachesEveryOtherInEveryPlaneWithClosLatency) {
  Cluster c(small_spec());
  const uint32_t n = c.fabric.servers();
  // One packet per (source, destination, plane), 1 ms apart so that none
  // queues behind another: routes are followed hop by hop, and the packets'
  // arrival times are the Clos latency.
  uint32_t seq = 0;
  for (uint32_t a = 0; a < n; ++a) {
    for (uint32_t b = 0; b < n; ++b) {
      if (a == b) continue;
      for (uint16_t plane = 0; plane < 2; ++plane) {
        Datagram d;
        d.src = c.nodes[a];
        d.dst = c.nodes[b];
        d.src_port = static_cast<uint16_t>(1000 + seq);
        d.dst_port = 4792;
        d.egress = plane;
        NodeId at = c.nodes[a];
        int hops = 0;
        while (at != c.nodes[b] && hops < 8) {
          const LinkId l = c.sim.next_hop(at, d);
          ASSERT_NE(l, kNoLink) << a << "->" << b << " plane " << plane << " at node " << at;
          at = c.sim.link_to(l);
          ++hops;
        }
        EXPECT_EQ(hops, c.fabric.leaf_of(a) == c.fabric.leaf_of(b) ? 2 : 4) << a << "->" << b;
        c.hosts[a]->send_at(1'000'000 * Time{seq}, c.nodes[b], d.src_port, 4792, 1'000, seq, plane);
        ++seq;
      }
    }
  }
  c.sim.run_until(kNever);
  EXPECT_EQ(c.sim.unroutable(), 0u);
  // 2 hosts x 400G per leaf over 4 spines at 1:1: 200G spine links. A
  // packet is serialized once per hop (1000 B + 66 B of overhead) and
  // spends 1 us on each link.
  const uint64_t spine_rate = c.fabric.spine_link_rate_bps();
  EXPECT_EQ(spine_rate, 2 * k400G / 4);
  const double ser_host = 1'066 * 8e9 / k400G, ser_spine = 1'066 * 8e9 / static_cast<double>(spine_rate);
  size_t delivered = 0;
  for (uint32_t b = 0; b < n; ++b) {
    for (const auto& r : c.hosts[b]->inbox) {
      const Time sent = 1'000'000 * Time{seq_of(r.d)};
      uint32_t a = 0;
      while (c.nodes[a] != r.d.src) ++a;
      const bool same_leaf = c.fabric.leaf_of(a) == c.fabric.leaf_of(b);
      const double expect = same_leaf ? 2 * ser_host + 2'000 : 2 * ser_host + 2 * ser_spine + 4'000;
      EXPECT_NEAR(static_cast<double>(r.t - sent), expect, 4.0) << a << "->" << b;
      ++delivered;
    }
  }
  EXPECT_EQ(delivered, size_t{seq});
  // Half the packets crossed each plane: every NIC uplink carried some.
  for (NodeId node : c.nodes) {
    for (LinkId nic : c.sim.links_from(node)) EXPECT_EQ(c.sim.stats(nic).packets_in, size_t{2 * (n - 1)} / 2);
  }
}

TEST(LeafSpine, LeavesHashFlowsOverEverySpineAndKeepEachFlowOnOne) {
  Cluster c(small_spec(1));
  std::set<NodeId> spines_used;
  Datagram d;
  d.src = c.nodes[0];
  d.dst = c.nodes[5];  // another leaf
  d.dst_port = 4792;
  std::vector<int> per_spine(4, 0);
  for (uint16_t port = 49152; port < 49152 + 400; ++port) {
    d.src_port = port;
    const LinkId nic = c.sim.next_hop(d.src, d);
    const LinkId up = c.sim.next_hop(c.sim.link_to(nic), d);
    const NodeId spine = c.sim.link_to(up);
    for (uint32_t s = 0; s < 4; ++s)
      if (up == c.fabric.spine_uplink(0, 0, s)) ++per_spine[s];
    EXPECT_EQ(c.sim.next_hop(c.sim.link_to(nic), d), up);  // per flow: the same link every time
    spines_used.insert(spine);
  }
  EXPECT_EQ(spines_used.size(), 4u);
  for (int count : per_spine) {
    EXPECT_GT(count, 70);
    EXPECT_LT(count, 130);
  }
}

TEST(LeafSpine, OversubscriptionSetsTheSpineLinkRate) {
  LeafSpineSpec spec = small_spec(1);
  spec.hosts_per_leaf = 8;
  spec.spines = 4;
  spec.oversubscription = 2;
  Simulator sim(1);
  LeafSpineFabric fabric(sim, spec);
  // 8 x 400G host-facing over 4 spines at 2:1 = 400G per spine link.
  EXPECT_EQ(fabric.spine_link_rate_bps(), k400G);
  EXPECT_EQ(sim.link(fabric.spine_uplink(0, 1, 3)).rate_bps, k400G);
  EXPECT_EQ(sim.link(fabric.spine_downlink(0, 3, 1)).rate_bps, k400G);
}

TEST(LeafSpine, AHostsNicsAreInThePlanesItNames) {
  LeafSpineSpec spec = small_spec(4);
  Simulator sim(1);
  LeafSpineFabric fabric(sim, spec);
  ScriptHost a, b;
  const NodeId na = fabric.attach(a, 0, {3, 1});
  const NodeId nb = fabric.attach(b, 5, {1, 3});
  Datagram d;
  d.src = na;
  d.dst = nb;
  d.egress = 0;  // plane 3
  const LinkId nic0 = sim.next_hop(na, d);
  d.egress = 1;  // plane 1
  const LinkId nic1 = sim.next_hop(na, d);
  d.egress = 2;  // no third NIC
  EXPECT_EQ(sim.next_hop(na, d), kNoLink);
  // The NIC's leaf is leaf 0 of that plane: its spine links are plane 3's and plane 1's.
  auto plane_of_leaf = [&](NodeId leaf) {
    for (uint16_t p = 0; p < 4; ++p)
      if (sim.link_from(fabric.spine_uplink(p, 0, 0)) == leaf) return static_cast<int>(p);
    return -1;
  };
  EXPECT_EQ(plane_of_leaf(sim.link_to(nic0)), 3);
  EXPECT_EQ(plane_of_leaf(sim.link_to(nic1)), 1);
  EXPECT_EQ(sim.link(nic0).rate_bps, k400G);
}

TEST(LeafSpine, FailedSpineLinkAndPlaneDropExactlyTheirTraffic) {
  Cluster c(small_spec());
  // Flows from server 0 (leaf 0) to server 4 (leaf 2) over every spine of
  // plane 0, one packet per flow every microsecond, for 100 us; spine link
  // (leaf 0, spine 1) fails during [20, 40) us, plane 1 during [0, 100) us
  // (nothing is sent in it, so it costs nothing here but its links' state).
  c.fabric.fail_spine_link(0, 0, 1, 20'000, 40'000);
  c.fabric.fail_plane(1, 0, 100'000);
  for (uint32_t i = 0; i < 100; ++i)
    for (uint16_t f = 0; f < 16; ++f)
      c.hosts[0]->send_at(i * 1'000, c.nodes[4], static_cast<uint16_t>(50000 + f), 4792, 500, i);
  c.sim.run_until(kNever);
  const LinkStats& failed = c.sim.stats(c.fabric.spine_uplink(0, 0, 1));
  ASSERT_GT(failed.packets_in, 0u);
  // About 20% of that link's packets left it during the failure.
  EXPECT_GT(failed.dropped_blackhole, failed.packets_in / 10);
  EXPECT_LT(failed.dropped_blackhole, failed.packets_in * 3 / 10);
  EXPECT_EQ(c.hosts[4]->inbox.size() + failed.dropped_blackhole, 1'600u);
  for (uint32_t s : {0u, 2u, 3u}) EXPECT_EQ(c.sim.stats(c.fabric.spine_uplink(0, 0, s)).dropped_blackhole, 0u);
  EXPECT_EQ(c.fabric.totals().dropped_blackhole, failed.dropped_blackhole);
  uint32_t busiest = 0;
  for (uint32_t s = 1; s < 4; ++s)
    if (c.sim.stats(c.fabric.spine_uplink(0, 0, s)).bytes_in >
        c.sim.stats(c.fabric.spine_uplink(0, 0, busiest)).bytes_in)
      busiest = s;
  EXPECT_EQ(c.fabric.busiest_spine(0, 0), busiest);
  EXPECT_GT(c.sim.stats(c.fabric.spine_uplink(0, 0, busiest)).bytes_in, 0u);
}

TEST(LeafSpine, PfcFabricRefusesThresholdsItCannotKeepLossless) {
  LeafSpineSpec spec = small_spec(1);
  spec.pfc = true;
  spec.buffer_bytes = 1 << 20;
  spec.pfc_params.xoff_bytes = 1 << 20;  // no headroom left
  Simulator sim(1);
  EXPECT_THROW(LeafSpineFabric(sim, spec), std::invalid_argument);
  spec.pfc_params = PfcParams{};
  Simulator sim2(1);
  EXPECT_NO_THROW(LeafSpineFabric(sim2, spec));
}

}  // namespace
}  // namespace metaroce::sim
