// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "rig.h"

#include <stdexcept>

namespace metaroce::sim {

TwoHostRig::TwoHostRig(const RigSpec& spec) : sim_(spec.seed) {
  a_ = std::make_unique<EngineHost>(spec.endpoint);
  b_ = std::make_unique<EngineHost>(spec.endpoint);
  node_a_ = sim_.add_host(*a_);
  node_b_ = sim_.add_host(*b_);
  std::vector<LinkParams> per_link(spec.links);
  for (size_t i = 0; i < per_link.size(); ++i) {
    LinkParams& p = per_link[i];
    p.rate_bps = spec.link_rate_bps;
    p.delay_ns = spec.one_way_delay_ns + (i < spec.extra_delay_ns.size() ? spec.extra_delay_ns[i] : 0);
    p.jitter_ns = spec.jitter_ns;
    p.reorder = spec.reorder_within_link;
    p.queue_bytes = spec.queue_bytes;
    p.ecn_threshold_bytes = spec.ecn_threshold_bytes;
    p.overhead_bytes = spec.overhead_bytes;
    p.loss = spec.loss;
    p.duplicate = spec.duplicate;
  }
  links_ = sim_.connect_parallel(node_a_, node_b_, per_link);
}

QpPair connect_qps(EngineHost& a, NodeId node_a, EngineHost& b, NodeId node_b, const transport::QpConfig& config,
                   uint32_t pd, uint32_t cq_depth) {
  QpPair pair;
  transport::Endpoint& ea = a.endpoint();
  transport::Endpoint& eb = b.endpoint();
  pair.cq_a = ea.create_cq(cq_depth);
  pair.cq_b = eb.create_cq(cq_depth);
  pair.qp_a = ea.create_qp(pd, pair.cq_a, pair.cq_a, config);
  pair.qp_b = eb.create_qp(pd, pair.cq_b, pair.cq_b, config);
  using transport::PostResult;
  const bool ok = ea.connect_qp(pair.qp_a, node_b, pair.qp_b, config) == PostResult::Ok &&
                  eb.connect_qp(pair.qp_b, node_a, pair.qp_a, config) == PostResult::Ok;
  if (!ok) throw std::runtime_error("connect_qps: QP state transition failed");
  return pair;
}

QpPair TwoHostRig::connect_qps(const transport::QpConfig& config, uint32_t pd) {
  return sim::connect_qps(*a_, node_a_, *b_, node_b_, config, pd);
}

void TwoHostRig::blackhole(size_t index, Time start, Time end) {
  for (LinkId link : {links_.forward.at(index), links_.reverse.at(index)}) {
    LinkParams p = sim_.link(link);
    p.blackholes.emplace_back(start, end);
    sim_.set_link(link, p);
  }
}

}  // namespace metaroce::sim
