// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "leaf_spine.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace metaroce::sim {

namespace {
constexpr uint64_t kJumboFrameBytes = 9'216;
}  // namespace

LeafSpineFabric::LeafSpineFabric(Simulator& sim, const LeafSpineSpec& spec) : sim_(sim), spec_(spec) {
  if (spec.leaves == 0 || spec.hosts_per_leaf == 0 || spec.spines == 0 || spec.planes == 0)
    throw std::invalid_argument("leaf-spine: leaves, hosts per leaf, spines and planes must be > 0");
  if (!(spec.oversubscription > 0)) throw std::invalid_argument("leaf-spine: oversubscription must be > 0");
  spine_rate_bps_ = static_cast<uint64_t>(
      std::llround(static_cast<double>(spec.hosts_per_leaf) * static_cast<double>(spec.link_rate_bps) /
                   (spec.spines * spec.oversubscription)));
  if (spec.pfc) {
    const uint64_t headroom = std::max(pfc_headroom_bytes(spec.link_rate_bps, spec.host_link_delay_ns),
                                       pfc_headroom_bytes(spine_rate_bps_, spec.spine_link_delay_ns));
    if (spec.pfc_params.xoff_bytes + headroom > spec.buffer_bytes)
      throw std::invalid_argument("leaf-spine: PFC XOFF plus headroom exceed the port buffer: not lossless");
  }
  planes_.resize(spec.planes);
  for (Plane& plane : planes_) {
    for (uint32_t i = 0; i < spec.leaves; ++i) plane.leaves.push_back(sim_.add_switch());
    for (uint32_t i = 0; i < spec.spines; ++i) plane.spines.push_back(sim_.add_switch());
    if (spec.pfc) {
      for (NodeId sw : plane.leaves) sim_.enable_pfc(sw, spec.pfc_params);
      for (NodeId sw : plane.spines) sim_.enable_pfc(sw, spec.pfc_params);
    }
    plane.up.assign(spec.leaves, std::vector<LinkId>(spec.spines));
    plane.down.assign(spec.spines, std::vector<LinkId>(spec.leaves));
    const uint32_t leaf_ports = spec.hosts_per_leaf + spec.spines;
    for (uint32_t l = 0; l < spec.leaves; ++l) {
      for (uint32_t s = 0; s < spec.spines; ++s) {
        plane.up[l][s] = sim_.add_link(plane.leaves[l], plane.spines[s],
                                       port(spine_rate_bps_, spec.spine_link_delay_ns, leaf_ports));
        plane.down[s][l] = sim_.add_link(plane.spines[s], plane.leaves[l],
                                         port(spine_rate_bps_, spec.spine_link_delay_ns, spec.leaves));
        switch_links_.push_back(plane.up[l][s]);
        switch_links_.push_back(plane.down[s][l]);
      }
    }
  }
}

uint64_t LeafSpineFabric::pfc_headroom_bytes(uint64_t rate_bps, Time delay_ns) {
  const auto in_flight = static_cast<uint64_t>(static_cast<double>(rate_bps) / 8e9 * static_cast<double>(delay_ns));
  return 2 * in_flight + 2 * kJumboFrameBytes;
}

LinkParams LeafSpineFabric::port(uint64_t rate_bps, Time delay_ns, uint32_t ports) const {
  LinkParams p;
  p.rate_bps = rate_bps;
  p.delay_ns = delay_ns;
  p.overhead_bytes = spec_.overhead_bytes;
  p.ecn_threshold_bytes = spec_.ecn_threshold_bytes;
  p.queue_bytes = spec_.pfc ? spec_.buffer_bytes * ports : spec_.buffer_bytes;
  return p;
}

NodeId LeafSpineFabric::attach(Host& host, uint32_t server, const std::vector<uint16_t>& planes) {
  if (server >= servers()) throw std::invalid_argument("leaf-spine: no such server slot");
  if (planes.empty()) throw std::invalid_argument("leaf-spine: a host needs at least one NIC");
  const NodeId node = sim_.add_host(host);
  const uint32_t home = leaf_of(server);
  std::vector<LinkId> nics;
  for (uint16_t p : planes) {
    if (p >= planes_.size()) throw std::invalid_argument("leaf-spine: no such plane");
    Plane& plane = planes_[p];
    LinkParams nic = port(spec_.link_rate_bps, spec_.host_link_delay_ns, 1);
    nic.ecn_threshold_bytes = UINT64_MAX;  // the NIC's ring is not a switch queue
    nic.queue_bytes = UINT64_MAX;          // the ring bounds it
    LinkParams down = port(spec_.link_rate_bps, spec_.host_link_delay_ns, spec_.hosts_per_leaf + spec_.spines);
    down.loss = spec_.loss;
    const LinkId up_link = sim_.add_link(node, plane.leaves[home], nic);
    const LinkId down_link = sim_.add_link(plane.leaves[home], node, down);
    nics.push_back(up_link);
    switch_links_.push_back(down_link);
    for (uint32_t l = 0; l < spec_.leaves; ++l) {
      if (l == home) sim_.add_route(plane.leaves[l], node, {down_link});
      else sim_.add_route(plane.leaves[l], node, plane.up[l], Select::Hash);
    }
    for (uint32_t s = 0; s < spec_.spines; ++s) sim_.add_route(plane.spines[s], node, {plane.down[s][home]});
  }
  sim_.set_default_route(node, nics, Select::Egress);
  sim_.set_tx_ring(node, spec_.nic_tx_ring_bytes);
  return node;
}

LinkId LeafSpineFabric::spine_uplink(uint16_t plane, uint32_t leaf, uint32_t spine) const {
  return planes_.at(plane).up.at(leaf).at(spine);
}

LinkId LeafSpineFabric::spine_downlink(uint16_t plane, uint32_t spine, uint32_t leaf) const {
  return planes_.at(plane).down.at(spine).at(leaf);
}

void LeafSpineFabric::blackhole(LinkId link, Time start, Time end) {
  LinkParams p = sim_.link(link);
  p.blackholes.emplace_back(start, end);
  sim_.set_link(link, p);
}

void LeafSpineFabric::fail_spine_link(uint16_t plane, uint32_t leaf, uint32_t spine, Time start, Time end) {
  blackhole(spine_uplink(plane, leaf, spine), start, end);
  blackhole(spine_downlink(plane, spine, leaf), start, end);
}

uint32_t LeafSpineFabric::busiest_spine(uint16_t plane, uint32_t leaf) const {
  uint32_t best = 0;
  for (uint32_t s = 1; s < spec_.spines; ++s)
    if (sim_.stats(spine_uplink(plane, leaf, s)).bytes_in > sim_.stats(spine_uplink(plane, leaf, best)).bytes_in)
      best = s;
  return best;
}

void LeafSpineFabric::fail_plane(uint16_t plane, Time start, Time end) {
  const Plane& p = planes_.at(plane);
  auto in_plane = [&](NodeId n) {
    return std::find(p.leaves.begin(), p.leaves.end(), n) != p.leaves.end() ||
           std::find(p.spines.begin(), p.spines.end(), n) != p.spines.end();
  };
  for (LinkId l = 0; l < sim_.link_count(); ++l)
    if (in_plane(sim_.link_from(l)) || in_plane(sim_.link_to(l))) blackhole(l, start, end);
}

LeafSpineFabric::Totals LeafSpineFabric::totals() const {
  Totals t;
  for (LinkId l : switch_links_)
    t.max_switch_queue_bytes = std::max(t.max_switch_queue_bytes, sim_.stats(l).max_backlog_bytes);
  for (LinkId l = 0; l < sim_.link_count(); ++l) {
    const LinkStats& s = sim_.stats(l);
    t.pause_frames += s.pause_frames;
    t.dropped_queue += s.dropped_queue;
    t.dropped_loss += s.dropped_loss;
    t.dropped_blackhole += s.dropped_blackhole;
    t.ce_marked += s.ce_marked;
  }
  return t;
}

}  // namespace metaroce::sim
