// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The engine on a multiplane fabric: a connection's paths alternate planes,
// so every plane's NIC carries its share; a plane that goes down (the
// driver's set_plane_up) is drained at once, with nothing sent on it and no
// path left to fail by timeouts; a plane that comes back is probed and used
// again.
#include <gtest/gtest.h>

#include <vector>

#include "collective.h"

namespace metaroce::sim {
namespace {

// Two servers on one leaf per plane, with a NIC in both planes of a 2-plane
// fabric; server 1 writes `bytes` to server 0 (an incast of one sender).
// (One leaf: what is tested is the planes, not ECMP over the spines.)
CollectiveSpec two_plane_write(uint64_t bytes) {
  CollectiveSpec spec;
  spec.cluster.fabric.leaves = 1;
  spec.cluster.fabric.hosts_per_leaf = 2;
  spec.cluster.fabric.spines = 1;
  spec.cluster.fabric.planes = 2;
  spec.cluster.nodes = 2;
  spec.workload = Workload::Incast;
  spec.bytes = bytes;
  return spec;
}

// Bytes that entered each of the sender's NICs (its uplink in each plane).
std::vector<uint64_t> sender_nic_bytes(Cluster& cluster) {
  std::vector<uint64_t> out;
  for (LinkId nic : cluster.sim().links_from(cluster.node_id(1, 0))) out.push_back(cluster.sim().stats(nic).bytes_in);
  return out;
}

// What the runtime does when netlink reports a plane's NIC down or up.
void set_plane(Cluster& cluster, uint16_t plane, bool up) {
  for (uint32_t node = 0; node < cluster.nodes(); ++node) {
    cluster.host(node, 0).endpoint().set_plane_up(cluster.sim().now(), plane, up);
    cluster.sim().wake(cluster.node_id(node, 0));
  }
}

TEST(Multiplane, PathsAlternatePlanesAndEachNicCarriesItsShare) {
  CollectiveSpec spec = two_plane_write(16 << 20);
  std::vector<uint64_t> nics;
  std::vector<transport::PathSnapshot> paths;
  spec.after = [&](Cluster& cluster) {
    nics = sender_nic_bytes(cluster);
    paths = cluster.host(1, 0).endpoint().path_snapshots(cluster.node_id(0, 0));
    EXPECT_EQ(cluster.host(1, 0).endpoint().config().planes, 2u);
  };
  const CollectiveResult r = run_collective(spec);
  ASSERT_TRUE(r.completed && r.data_intact);
  ASSERT_EQ(paths.size(), 8u);  // 4 paths per plane
  for (const auto& p : paths) EXPECT_EQ(p.plane, p.path_id % 2) << "path " << p.path_id;
  ASSERT_EQ(nics.size(), 2u);
  EXPECT_GT(nics[0], (16u << 20) * 45 / 100);
  EXPECT_GT(nics[1], (16u << 20) * 45 / 100);
  // Both planes at once: about twice one NIC's line rate (800G less headers).
  EXPECT_GT(r.busbw_gbps, 0.9 * 800 * 4096 / (4096 + 56 + 66));
}

TEST(Multiplane, APlaneThatGoesDownIsDrainedAtOnce) {
  // Plane 0 dies 100 us into a 32 MiB write (every link in it) and the
  // driver says so; plane 1 carries the rest. Without the driver's word the
  // engine finds out by timeouts, path by path, sending into the dead plane
  // meanwhile.
  constexpr Time kDown = 100'000;
  auto run = [&](bool tell_engine) {
    CollectiveSpec spec = two_plane_write(32 << 20);
    struct Seen {
      uint64_t plane0_at_down = 0, plane0_at_end = 0;
      uint64_t plane_drains = 0, path_failures = 0;
    } seen;
    spec.setup = [&](Cluster& cluster) {
      cluster.fabric().fail_plane(0, kDown, kNever);
      cluster.sim().at(kDown, [&cluster, &seen, tell_engine] {
        seen.plane0_at_down = sender_nic_bytes(cluster)[0];
        if (tell_engine) set_plane(cluster, 0, false);
      });
    };
    spec.after = [&](Cluster& cluster) {
      seen.plane0_at_end = sender_nic_bytes(cluster)[0];
      seen.plane_drains = cluster.host(1, 0).endpoint().counters().plane_drains;
      seen.path_failures = cluster.host(1, 0).endpoint().counters().path_failures;
    };
    const CollectiveResult r = run_collective(spec);
    EXPECT_TRUE(r.completed && r.data_intact);
    return std::make_pair(r, seen);
  };
  const auto [told, told_seen] = run(true);
  const auto [found, found_seen] = run(false);
  EXPECT_EQ(told_seen.plane_drains, 4u);  // the sender's 4 paths on plane 0
  EXPECT_EQ(told_seen.path_failures, 0u);
  // Not one datagram more into the dead plane, ACKs included.
  EXPECT_EQ(told_seen.plane0_at_end, told_seen.plane0_at_down);
  EXPECT_GT(found_seen.path_failures, 0u);
  EXPECT_GT(found_seen.plane0_at_end, found_seen.plane0_at_down);
  // After the failure one plane's line rate remains: the transfer ends
  // about (32 MiB - what was sent in 100 us at 2 planes) / 1 plane later.
  const double one_plane_gbps = 400.0 * 4096 / (4096 + 56 + 66);
  const double ideal_us = 100 + ((32u << 20) * 8 / 1e3 - 100 * 2 * one_plane_gbps) / one_plane_gbps;
  EXPECT_LT(told.completion_ns / 1e3, 1.05 * ideal_us);
  // Found by timeouts, the dead plane also swallowed what was sent into it
  // until its paths failed, and that was sent again.
  EXPECT_LT(told.retransmits, found.retransmits);
}

TEST(Multiplane, APlaneThatComesBackIsProbedAndUsedAgain) {
  constexpr Time kDown = 50'000, kUp = 150'000;
  CollectiveSpec spec = two_plane_write(64 << 20);
  uint64_t plane0_at_up = 0, plane0_at_end = 0, recoveries = 0;
  std::vector<transport::PathSnapshot> paths;
  spec.setup = [&](Cluster& cluster) {
    cluster.fabric().fail_plane(0, kDown, kUp);
    cluster.sim().at(kDown, [&cluster] { set_plane(cluster, 0, false); });
    cluster.sim().at(kUp, [&cluster, &plane0_at_up] {
      plane0_at_up = sender_nic_bytes(cluster)[0];
      set_plane(cluster, 0, true);
    });
  };
  spec.after = [&](Cluster& cluster) {
    plane0_at_end = sender_nic_bytes(cluster)[0];
    recoveries = cluster.host(1, 0).endpoint().counters().path_recoveries;
    paths = cluster.host(1, 0).endpoint().path_snapshots(cluster.node_id(0, 0));
  };
  const CollectiveResult r = run_collective(spec);
  ASSERT_TRUE(r.completed && r.data_intact);
  EXPECT_EQ(recoveries, 4u);
  for (const auto& p : paths) EXPECT_EQ(p.health, transport::PathHealth::Active) << "path " << p.path_id;
  // The 64 MiB take ~700 us at two planes: plane 0 carried a real share of
  // what was left after it came back.
  EXPECT_GT(plane0_at_end - plane0_at_up, 8u << 20);
}

}  // namespace
}  // namespace metaroce::sim
