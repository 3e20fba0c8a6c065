// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "collective.h"

#include <array>

#include "collective_workload.h"

namespace metaroce::sim {

namespace {

constexpr struct {
  Workload workload;
  const char* name;
} kWorkloadNames[] = {
    {Workload::AllReduce, "allreduce"},
    {Workload::AllToAll, "alltoall"},
    {Workload::Incast, "incast"},
};

}  // namespace

const char* to_string(Workload workload) {
  for (const auto& entry : kWorkloadNames)
    if (entry.workload == workload) return entry.name;
  return "?";
}

std::optional<Workload> parse_workload(std::string_view name) {
  for (const auto& entry : kWorkloadNames)
    if (name == entry.name) return entry.workload;
  return std::nullopt;
}

CollectiveResult run_collective(const CollectiveSpec& spec) {
  Cluster cluster(spec.cluster);
  if (spec.setup) spec.setup(cluster);
  std::unique_ptr<CollectiveWorkload> workload =
      spec.workload == Workload::AllReduce ? make_ring_allreduce(cluster, spec) : make_pairwise_writes(cluster, spec);
  for (uint32_t node = 0; node < cluster.nodes(); ++node) {
    for (uint16_t rail = 0; rail < cluster.rails(); ++rail) {
      transport::Endpoint& endpoint = cluster.host(node, rail).endpoint();
      const uint32_t cq = cluster.cq(node, rail);
      CollectiveWorkload* w = workload.get();
      cluster.host(node, rail).set_application([w, &endpoint, cq, node, rail](Time now) {
        std::array<transport::Completion, 64> wc;
        size_t n;
        while ((n = endpoint.poll_cq(cq, wc)) > 0)
          for (size_t i = 0; i < n; ++i) w->on_completion(node, rail, wc[i], now);
      });
    }
  }
  Simulator& sim = cluster.sim();
  const Time start = sim.now();
  workload->start(start);
  for (uint32_t node = 0; node < cluster.nodes(); ++node)
    for (uint16_t rail = 0; rail < cluster.rails(); ++rail) sim.wake(cluster.node_id(node, rail));
  sim.run_until([&] { return workload->finished() || workload->error_completions() > 0; }, spec.time_limit_ns);

  CollectiveResult r;
  r.error_completions = workload->error_completions();
  r.completed = workload->finished() && r.error_completions == 0;
  r.data_intact = r.completed && workload->verify();
  if (r.completed) {
    r.completion_ns = workload->finish_time() - start;
    r.algbw_gbps = static_cast<double>(spec.bytes) * 8 / static_cast<double>(r.completion_ns);
    r.busbw_gbps = r.algbw_gbps * workload->bus_factor();
  }
  r.fct_ns = workload->fct_ns();
  using C = transport::EndpointCounters;
  r.retransmits = cluster.total(&C::tx_retransmits);
  r.spurious_retransmits = cluster.total(&C::spurious_retransmits);
  r.go_back_n = cluster.total(&C::go_back_n);
  r.path_failures = cluster.total(&C::path_failures);
  r.plane_drains = cluster.total(&C::plane_drains);
  r.fabric = cluster.fabric().totals();
  r.connections = cluster.connections();
  r.events = sim.events_processed();
  if (spec.after) spec.after(cluster);
  return r;
}

}  // namespace metaroce::sim
