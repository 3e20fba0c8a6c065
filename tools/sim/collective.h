// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Collectives on a simulated cluster, with the real engine at every server:
//   allreduce  ring all-reduce as NCCL runs it: reduce-scatter then
//              all-gather around one ring per channel, each rank's share
//              cut into slices that are pipelined through a FIFO of slots at
//              the next rank (RDMA WRITE with immediate into a slot; the
//              receiver reduces or copies it into its buffer, then returns
//              the slot with a zero-length SEND);
//   alltoall   every rank RDMA-WRITEs bytes / nodes to every other rank;
//   incast     every other rank RDMA-WRITEs `bytes` to rank 0.
// One RC QP per neighbour (or peer) per rail is one ordered stream; for
// metaroce all of a pair's QPs share the one engine connection between them.
// Data is checked at the end: reduced sums for allreduce, exact copies
// otherwise.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "cluster.h"

namespace metaroce::sim {

enum class Workload { AllReduce, AllToAll, Incast };
const char* to_string(Workload workload);
std::optional<Workload> parse_workload(std::string_view name);

// NCCL finds one ring per NIC and then duplicates every channel it found
// (ncclTopoPreset, "Duplicate channels rings/trees"): two rings per NIC.
inline constexpr uint32_t kChannelsPerPlane = 2;

struct CollectiveSpec {
  ClusterSpec cluster;
  Workload workload = Workload::AllReduce;
  uint64_t bytes = 64ull << 20;  // per rank: the buffer (allreduce), the send buffer (alltoall), per sender (incast)
  // allreduce: rings, spread over the rails; 0 = kChannelsPerPlane per plane.
  uint32_t channels = 0;
  uint32_t slot_bytes = 512u << 10;  // allreduce: one FIFO slot (NCCL: 4 MiB buffer / 8 steps)
  uint32_t slots = 8;
  uint32_t message_bytes = 1u << 20;   // alltoall, incast: largest WRITE
  Time time_limit_ns = 1'000'000'000;  // virtual
  // Called once the cluster exists, before traffic (failures, link changes),
  // and once the run is over, while the cluster still exists.
  std::function<void(Cluster&)> setup;
  std::function<void(Cluster&)> after;
};

struct CollectiveResult {
  bool completed = false;  // every rank finished before the time limit, without error completions
  bool data_intact = false;
  uint64_t error_completions = 0;
  Time completion_ns = 0;    // start to the last rank's finish
  double algbw_gbps = 0;     // bytes / completion time
  double busbw_gbps = 0;     // nccl-tests' bus bandwidth (allreduce x 2(n-1)/n, alltoall x (n-1)/n)
  std::vector<Time> fct_ns;  // per WRITE: post to completion
  uint64_t retransmits = 0, spurious_retransmits = 0, go_back_n = 0, path_failures = 0, plane_drains = 0;
  LeafSpineFabric::Totals fabric;
  size_t connections = 0;
  uint64_t events = 0;
};

CollectiveResult run_collective(const CollectiveSpec& spec);

}  // namespace metaroce::sim
