// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The reference workload: host A RDMA-WRITEs `total_bytes` of a seeded
// pattern into a registered buffer on host B, as messages of message_bytes,
// keeping `outstanding` messages posted per QP over `qps` QPs. When every
// completion is in, B's buffer is compared with A's.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "rig.h"

namespace metaroce::sim {

struct WriteTransferSpec {
  RigSpec rig;
  uint64_t total_bytes = 64ull << 20;
  uint32_t message_bytes = 1u << 20;
  uint32_t outstanding = 16;
  uint32_t qps = 1;
  transport::QpConfig qp;               // every QP's attributes (verbs timeout, retry counts)
  Time time_limit_ns = 10'000'000'000;  // virtual
  Time sample_interval_ns = 0;          // record B's placed bytes this often; 0 = never
  // Called once the rig exists, before traffic starts (blackholes, link changes).
  std::function<void(TwoHostRig&)> setup;
  // Called when the transfer has ended, while the rig still exists (link statistics).
  std::function<void(TwoHostRig&)> on_finish;
};

struct WriteTransferResult {
  bool completed = false;    // every message completed before the time limit
  bool data_intact = false;  // B's buffer equals A's
  uint64_t error_completions = 0;
  Time duration_ns = 0;  // first post to last completion
  double goodput_gbps = 0;
  std::vector<Time> fct_ns;                         // per message: post to completion
  std::vector<std::pair<Time, uint64_t>> timeline;  // (time, bytes placed at B)
  transport::EndpointCounters sender, receiver;
  std::vector<transport::PathSnapshot> sender_paths;
  uint64_t events = 0;
};

WriteTransferResult run_write_transfer(const WriteTransferSpec& spec);

// p in [0, 1]; nearest-rank percentile of values (sorted copy).
Time percentile(std::vector<Time> values, double p);

}  // namespace metaroce::sim
