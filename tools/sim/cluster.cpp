// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "cluster.h"

#include <stdexcept>

namespace metaroce::sim {

namespace {

constexpr struct {
  ClusterTransport transport;
  const char* name;
} kTransportNames[] = {
    {ClusterTransport::MetaRoCE, "metaroce"},
    {ClusterTransport::RoCEv2, "rocev2"},
    {ClusterTransport::RoCEv2Pfc, "rocev2+pfc"},
};

}  // namespace

const char* to_string(ClusterTransport transport) {
  for (const auto& entry : kTransportNames)
    if (entry.transport == transport) return entry.name;
  return "?";
}

std::optional<ClusterTransport> parse_cluster_transport(std::string_view name) {
  for (const auto& entry : kTransportNames)
    if (name == entry.name) return entry.transport;
  return std::nullopt;
}

Cluster::Cluster(const ClusterSpec& spec) : spec_(spec), sim_(spec.seed) {
  spec_.fabric.pfc = spec.transport == ClusterTransport::RoCEv2Pfc;
  fabric_ = std::make_unique<LeafSpineFabric>(sim_, spec_.fabric);
  if (spec_.nodes < 2 || spec_.nodes > fabric_->servers())
    throw std::invalid_argument("cluster: needs 2 nodes or more, and no more than the fabric's servers");
  const uint16_t planes = spec_.fabric.planes;
  transport::EndpointConfig config = spec_.endpoint;
  std::vector<std::vector<uint16_t>> rail_planes;
  if (spec_.transport == ClusterTransport::MetaRoCE) {
    if (spec_.paths_per_plane == 0 || uint32_t{spec_.paths_per_plane} * planes > wire::kMaxPaths)
      throw std::invalid_argument("cluster: paths per plane times planes must be in 1..64");
    config.profile = transport::Profile::MetaRoCE;
    config.paths = static_cast<uint16_t>(spec_.paths_per_plane * planes);
    config.planes = planes;
    // A path (a source port) may use its whole NIC, so that paths whose
    // spine links are free can take up what a congested spine refuses; a
    // plane starts with one bandwidth-delay product over all its paths, and
    // the receiver grants what its NICs can take.
    config.path_rate_bps = spec_.fabric.link_rate_bps;
    config.inbound_capacity_bps = spec_.fabric.link_rate_bps * planes;
    if (config.cc.initial_window_bytes == 0) {
      const uint64_t bdp = spec_.fabric.link_rate_bps / 8 * config.base_rtt_ns / 1'000'000'000;
      config.cc.initial_window_bytes = static_cast<uint32_t>(bdp / spec_.paths_per_plane);
    }
    rails_ = 1;
    rail_planes.emplace_back();
    for (uint16_t p = 0; p < planes; ++p) rail_planes[0].push_back(p);
  } else {
    config.profile = transport::Profile::RoCEv2;
    config.paths = 1;
    config.planes = 1;
    config.path_rate_bps = spec_.fabric.link_rate_bps;
    rails_ = planes;
    for (uint16_t p = 0; p < planes; ++p) rail_planes.push_back({p});
  }
  for (uint32_t node = 0; node < spec_.nodes; ++node) {
    for (uint16_t rail = 0; rail < rails_; ++rail) {
      hosts_.push_back(std::make_unique<EngineHost>(config));
      node_ids_.push_back(fabric_->attach(*hosts_.back(), node, rail_planes[rail]));
      // Peers are node ids here, which every host orders alike, as the
      // runtime's address keys are.
      hosts_.back()->endpoint().set_transmit_order(node_ids_.back(), nullptr);
      cqs_.push_back(hosts_.back()->endpoint().create_cq(1u << 20));
    }
  }
}

// NCCL's QP attributes: NCCL_IB_TIMEOUT 20 (4.096 us x 2^20, 4.3 s) and
// NCCL_IB_RETRY_CNT 7 (the QpConfig default), as its net_ib.cc sets them.
constexpr Time kNcclQpTimeoutNs = Time{4096} << 20;

Cluster::QpPair Cluster::connect(uint32_t a, uint32_t b, uint16_t rail, uint32_t pd) {
  transport::Endpoint& ea = host(a, rail).endpoint();
  transport::Endpoint& eb = host(b, rail).endpoint();
  transport::QpConfig config;
  config.timeout_ns = kNcclQpTimeoutNs;
  QpPair pair;
  pair.qp_a = ea.create_qp(pd, cq(a, rail), cq(a, rail), config);
  pair.qp_b = eb.create_qp(pd, cq(b, rail), cq(b, rail), config);
  using transport::PostResult;
  const bool ok = pair.qp_a != 0 && pair.qp_b != 0 &&
                  ea.connect_qp(pair.qp_a, node_id(b, rail), pair.qp_b, config) == PostResult::Ok &&
                  eb.connect_qp(pair.qp_b, node_id(a, rail), pair.qp_a, config) == PostResult::Ok;
  if (!ok) throw std::runtime_error("cluster: QP state transition failed");
  return pair;
}

size_t Cluster::connections() const {
  size_t total = 0;
  for (const auto& h : hosts_) total += h->endpoint().peers().size();
  return total;
}

uint64_t Cluster::total(uint64_t transport::EndpointCounters::*counter) const {
  uint64_t sum = 0;
  for (const auto& h : hosts_) sum += h->endpoint().counters().*counter;
  return sum;
}

}  // namespace metaroce::sim
