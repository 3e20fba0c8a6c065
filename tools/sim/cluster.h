// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A cluster of engine hosts on a multiplane leaf-spine fabric, for one of
// the transports a collective is compared over:
//   metaroce    one endpoint per server spanning every plane (a multiplane
//               device): paths_per_plane paths in each plane, sprayed;
//   rocev2      one endpoint per NIC (per plane), the engine's RoCEv2
//               profile (one path per connection, go-back-N), lossy fabric;
//   rocev2+pfc  the same on a lossless fabric: PFC at every switch.
// A server's endpoints are its rails: one for metaroce, one per plane for
// the rocev2 transports, as NCCL uses one NIC per plane and splits its
// channels over them.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "engine_host.h"
#include "leaf_spine.h"

namespace metaroce::sim {

enum class ClusterTransport { MetaRoCE, RoCEv2, RoCEv2Pfc };
const char* to_string(ClusterTransport transport);
std::optional<ClusterTransport> parse_cluster_transport(std::string_view name);

struct ClusterSpec {
  LeafSpineSpec fabric;  // pfc is set from the transport
  uint32_t nodes = 64;   // servers 0..nodes-1 take part
  ClusterTransport transport = ClusterTransport::MetaRoCE;
  uint16_t paths_per_plane = 4;        // metaroce
  transport::EndpointConfig endpoint;  // mtu, timers, congestion; profile, paths, planes and rates are set here
  uint64_t seed = 1;
};

class Cluster {
 public:
  explicit Cluster(const ClusterSpec& spec);

  Simulator& sim() { return sim_; }
  LeafSpineFabric& fabric() { return *fabric_; }
  const ClusterSpec& spec() const { return spec_; }
  uint32_t nodes() const { return spec_.nodes; }
  uint16_t rails() const { return rails_; }
  EngineHost& host(uint32_t node, uint16_t rail) { return *hosts_.at(index(node, rail)); }
  NodeId node_id(uint32_t node, uint16_t rail) const { return node_ids_.at(index(node, rail)); }
  // Every QP of an endpoint completes into this one CQ.
  uint32_t cq(uint32_t node, uint16_t rail) const { return cqs_.at(index(node, rail)); }

  struct QpPair {
    uint32_t qp_a = 0, qp_b = 0;
  };
  // An RC QP between node a and node b on a rail, both ends in RTS.
  QpPair connect(uint32_t a, uint32_t b, uint16_t rail, uint32_t pd);

  // Engine connections over every endpoint (one per endpoint and peer).
  size_t connections() const;
  // One engine counter summed over every endpoint.
  uint64_t total(uint64_t transport::EndpointCounters::*counter) const;

 private:
  size_t index(uint32_t node, uint16_t rail) const { return size_t{node} * rails_ + rail; }

  ClusterSpec spec_;
  Simulator sim_;
  std::unique_ptr<LeafSpineFabric> fabric_;
  uint16_t rails_ = 1;
  std::vector<std::unique_ptr<EngineHost>> hosts_;
  std::vector<NodeId> node_ids_;
  std::vector<uint32_t> cqs_;
};

}  // namespace metaroce::sim
