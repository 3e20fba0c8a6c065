// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Two engine hosts joined by N parallel paths in the simulator, with helpers
// to make connected queue pairs. The base for simulator tests and benchmarks.
#pragma once

#include <memory>
#include <vector>

#include "engine_host.h"
#include "netsim.h"

namespace metaroce::sim {

struct RigSpec {
  transport::EndpointConfig endpoint;  // profile, paths, mtu, rates and timers
  uint16_t links = 4;                  // parallel paths in the fabric
  uint64_t link_rate_bps = 100'000'000'000;
  Time one_way_delay_ns = 4'000;
  std::vector<Time> extra_delay_ns;  // per link, added to one_way_delay_ns
  Time jitter_ns = 0;
  bool reorder_within_link = false;
  double loss = 0;  // every link, both directions
  double duplicate = 0;
  uint64_t ecn_threshold_bytes = 100'000;
  uint64_t queue_bytes = 2 << 20;
  uint32_t overhead_bytes = 66;
  uint64_t seed = 1;
};

struct QpPair {
  uint32_t cq_a = 0, cq_b = 0;
  uint32_t qp_a = 0, qp_b = 0;
};

// Creates a CQ of `cq_depth` and an RC QP on each host and moves both to RTS,
// each QP's peer the other.
QpPair connect_qps(EngineHost& a, NodeId node_a, EngineHost& b, NodeId node_b, const transport::QpConfig& config = {},
                   uint32_t pd = 1, uint32_t cq_depth = 1 << 16);

class TwoHostRig {
 public:
  explicit TwoHostRig(const RigSpec& spec);

  Simulator& sim() { return sim_; }
  EngineHost& a() { return *a_; }
  EngineHost& b() { return *b_; }
  NodeId node_a() const { return node_a_; }
  NodeId node_b() const { return node_b_; }
  const Simulator::ParallelPaths& links() const { return links_; }

  // Creates a CQ and an RC QP on each side and moves both to RTS.
  QpPair connect_qps(const transport::QpConfig& config = {}, uint32_t pd = 1);
  // Every packet entering link `index` (both directions) in [start, end) is dropped.
  void blackhole(size_t index, Time start, Time end);

 private:
  Simulator sim_;
  std::unique_ptr<EngineHost> a_, b_;
  NodeId node_a_ = 0, node_b_ = 0;
  Simulator::ParallelPaths links_;
};

}  // namespace metaroce::sim
