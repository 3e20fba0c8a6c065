// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Collectives on a scaled-down cluster (16 servers: 4 leaves of 4, 4 spines
// per plane, 400G NICs), every transport: the data must be right, and the
// figures metaroce-sim collective reports at 64 nodes must show here in
// miniature. Budgets are in virtual time.
//
// The CollectiveBudget tests are the long runs whose point is a figure. The
// Collective tests take their code paths (each transport and workload, loss,
// two planes) in runs short enough to repeat under the sanitizers, and
// leaf_spine_test and multiplane_test fail links and planes.
#include <gtest/gtest.h>

#include "collective.h"

namespace metaroce::sim {
namespace {

constexpr double kPayloadFraction = 4096.0 / (4096 + 56 + 66);  // of a 400G NIC's wire rate
constexpr double kPayloadLineGbps = 400 * kPayloadFraction;

CollectiveSpec small(ClusterTransport transport, Workload workload, uint64_t bytes, uint16_t planes = 1,
                     double loss = 0) {
  CollectiveSpec spec;
  spec.cluster.fabric.leaves = 4;
  spec.cluster.fabric.hosts_per_leaf = 4;
  spec.cluster.fabric.spines = 4;
  spec.cluster.fabric.planes = planes;
  spec.cluster.fabric.loss = loss;
  spec.cluster.nodes = 16;
  spec.cluster.transport = transport;
  spec.workload = workload;
  spec.bytes = bytes;
  return spec;
}

TEST(Collective, EveryTransportReducesAndCopiesEveryByte) {
  for (ClusterTransport t : {ClusterTransport::MetaRoCE, ClusterTransport::RoCEv2, ClusterTransport::RoCEv2Pfc}) {
    for (Workload w : {Workload::AllReduce, Workload::AllToAll, Workload::Incast}) {
      const CollectiveResult r = run_collective(small(t, w, w == Workload::Incast ? 256 << 10 : 1 << 20, 2));
      EXPECT_TRUE(r.completed) << to_string(t) << " " << to_string(w);
      EXPECT_TRUE(r.data_intact) << to_string(t) << " " << to_string(w);
      EXPECT_EQ(r.fabric.dropped_queue != 0 && t == ClusterTransport::RoCEv2Pfc, false) << "PFC dropped";
      if (w == Workload::AllToAll) {
        // One connection per ordered pair and endpoint: for rocev2 one endpoint per NIC.
        EXPECT_EQ(r.connections, (t == ClusterTransport::MetaRoCE ? 1u : 2u) * 16 * 15) << to_string(t);
      }
    }
  }
}

TEST(CollectiveBudget, RingAllReduceRunsAtLineRateWithItsCreditsFlowingBack) {
  // Every rank receives slices from its predecessor and slot credits from
  // its successor: the credits must not halve the data's rate hint.
  const CollectiveResult r = run_collective(small(ClusterTransport::MetaRoCE, Workload::AllReduce, 16 << 20));
  ASSERT_TRUE(r.completed && r.data_intact);
  EXPECT_GT(r.busbw_gbps, 0.85 * kPayloadLineGbps);
}

TEST(CollectiveBudget, AllReduceUnderOnePercentLossStaysNearItsLosslessTime) {
  const uint64_t bytes = 32 << 20;
  const CollectiveResult clean = run_collective(small(ClusterTransport::MetaRoCE, Workload::AllReduce, bytes));
  const CollectiveResult lossy = run_collective(small(ClusterTransport::MetaRoCE, Workload::AllReduce, bytes, 1, 0.01));
  const CollectiveResult roce = run_collective(small(ClusterTransport::RoCEv2, Workload::AllReduce, bytes, 1, 0.01));
  ASSERT_TRUE(clean.data_intact && lossy.data_intact && roce.data_intact);
  EXPECT_GT(lossy.retransmits, 0u);
  EXPECT_LT(lossy.completion_ns, 1.1 * clean.completion_ns);
  EXPECT_GT(roce.completion_ns, 1.8 * lossy.completion_ns);
}

TEST(Collective, AllToAllSprayingBeatsEcmpOnALosslessFabric) {
  const uint64_t bytes = 4 << 20;
  const CollectiveResult meta = run_collective(small(ClusterTransport::MetaRoCE, Workload::AllToAll, bytes));
  const CollectiveResult pfc = run_collective(small(ClusterTransport::RoCEv2Pfc, Workload::AllToAll, bytes));
  ASSERT_TRUE(meta.data_intact && pfc.data_intact);
  EXPECT_LT(meta.completion_ns, 0.8 * pfc.completion_ns);
  EXPECT_GT(pfc.fabric.pause_frames, 0u);
  EXPECT_EQ(pfc.fabric.dropped_queue, 0u);
  EXPECT_EQ(pfc.retransmits, 0u);
  EXPECT_EQ(meta.fabric.pause_frames, 0u);
}

TEST(CollectiveBudget, AllToAllKeepsItsQueuesShort) {
  // 32 servers (4 leaves of 8, 8 spines per plane), 4 planes, 256 KiB to
  // each peer: every receiver's rate hint divides its NICs among the peers
  // sending to it now, so the queues stay near the ECN threshold (100 kB).
  // A receiver that counts a peer as sending for four base RTTs instead of
  // two lets queues of 300 kB and more build here.
  CollectiveSpec spec = small(ClusterTransport::MetaRoCE, Workload::AllToAll, 8 << 20, 4);
  spec.cluster.fabric.hosts_per_leaf = 8;
  spec.cluster.fabric.spines = 8;
  spec.cluster.nodes = 32;
  const CollectiveResult r = run_collective(spec);
  ASSERT_TRUE(r.completed && r.data_intact);
  EXPECT_LT(r.fabric.max_switch_queue_bytes, 200'000u);
}

TEST(Collective, IncastThatOverflowsTheLastHopRecoversPromptly) {
  // 15 senders' first windows (4 paths x one BDP each) overflow the
  // receiver's 1 MiB port; what was lost must be resent at once, not after
  // backed-off timeouts.
  const uint64_t bytes = 4 << 20;
  const CollectiveResult r = run_collective(small(ClusterTransport::MetaRoCE, Workload::Incast, bytes));
  ASSERT_TRUE(r.completed && r.data_intact);
  EXPECT_GT(r.fabric.dropped_queue, 0u);
  const double ideal_ns = 15.0 * bytes * 8 / kPayloadLineGbps;
  EXPECT_LT(r.completion_ns, 1.15 * ideal_ns);
}

TEST(CollectiveBudget, AnIncastOf63SendersEndsNearItsIdealTime) {
  // The default 64-node cluster, one plane: some senders lose their whole
  // first window at the receiver's port and hear nothing back, so their
  // timeouts back off (docs/spec.md 8.7); capped at 16 times the base RTO,
  // they resume soon after the others' data has drained, not milliseconds
  // later.
  CollectiveSpec spec;
  spec.workload = Workload::Incast;
  spec.bytes = 4 << 20;
  const CollectiveResult r = run_collective(spec);
  ASSERT_TRUE(r.completed && r.data_intact);
  EXPECT_GT(r.fabric.dropped_queue, 0u);
  const double ideal_ns = 63.0 * static_cast<double>(spec.bytes) * 8 / kPayloadLineGbps;
  EXPECT_LT(static_cast<double>(r.completion_ns), 1.15 * ideal_ns);
}

TEST(CollectiveBudget, AllReduceBandwidthGrowsWithPlanes) {
  CollectiveSpec one = small(ClusterTransport::MetaRoCE, Workload::AllReduce, 32 << 20, 1);
  CollectiveSpec four = small(ClusterTransport::MetaRoCE, Workload::AllReduce, 32 << 20, 4);
  one.cluster.nodes = four.cluster.nodes = 8;
  const CollectiveResult r1 = run_collective(one);
  const CollectiveResult r4 = run_collective(four);
  ASSERT_TRUE(r1.data_intact && r4.data_intact);
  EXPECT_GT(r4.busbw_gbps, 3.6 * r1.busbw_gbps);
}

TEST(CollectiveBudget, ASpineLinkFailingMidAllReduceCostsLittle) {
  const uint64_t bytes = 16 << 20;
  const CollectiveResult clean = run_collective(small(ClusterTransport::MetaRoCE, Workload::AllReduce, bytes));
  CollectiveSpec spec = small(ClusterTransport::MetaRoCE, Workload::AllReduce, bytes);
  // A third of the way in (the clean run takes about 670 us).
  spec.setup = [&](Cluster& cluster) { cluster.fabric().fail_spine_link(0, 0, 0, 250'000, kNever); };
  const CollectiveResult failed = run_collective(spec);
  ASSERT_TRUE(failed.completed && failed.data_intact);
  EXPECT_GT(failed.fabric.dropped_blackhole, 0u);
  // Leaf 0 keeps 3 of its 4 spine links, more than its one ring flow needs,
  // but ECMP put 3 of one connection's 4 paths on the failed link's spine:
  // the fourth must take over their window at once, or the ring crawls at
  // its additive increase.
  EXPECT_LT(failed.completion_ns, 1.25 * clean.completion_ns);
}

TEST(Collective, ResultsAreAFunctionOfTheSeed) {
  auto run = [](uint64_t seed) {
    CollectiveSpec spec = small(ClusterTransport::MetaRoCE, Workload::AllToAll, 1 << 20, 2, 0.01);
    spec.cluster.seed = seed;
    const CollectiveResult r = run_collective(spec);
    EXPECT_TRUE(r.data_intact);
    return std::make_tuple(r.completion_ns, r.retransmits, r.events, r.fct_ns);
  };
  EXPECT_EQ(run(3), run(3));
  EXPECT_NE(run(3), run(4));
}

}  // namespace
}  // namespace metaroce::sim
