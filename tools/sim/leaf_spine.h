// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A two-tier leaf-spine fabric with P independent planes, as multiplane AI
// clusters are built: every plane is its own set of leaf and spine switches,
// a server has one NIC in each plane, and the planes meet only in the
// servers. Leaves hash the 5-tuple (ECMP) over their spine links; spines have
// one link down to each leaf. Hosts attach to a server slot with a NIC in
// some or all planes: one engine spanning every plane (MetaRoCE's multiplane
// device) or one engine per NIC (a RoCEv2 NIC per plane, as NCCL uses them).
#pragma once

#include <cstdint>
#include <vector>

#include "netsim.h"

namespace metaroce::sim {

struct LeafSpineSpec {
  uint32_t leaves = 8;
  uint32_t hosts_per_leaf = 8;
  uint32_t spines = 8;
  uint16_t planes = 1;
  // A leaf's host-facing capacity over its spine-facing capacity: the leaf
  // has one link to every spine of its plane, at
  // hosts_per_leaf * link_rate_bps / (spines * oversubscription).
  double oversubscription = 1;
  uint64_t link_rate_bps = 400'000'000'000;  // a NIC, and its leaf port
  Time host_link_delay_ns = 1'000;           // one way, NIC <-> leaf
  Time spine_link_delay_ns = 1'000;          // one way, leaf <-> spine
  uint32_t overhead_bytes = 66;              // Ethernet + IPv4 + UDP, FCS, preamble, gap
  // A switch port's buffer. Without PFC it is the port's drop-tail limit.
  // With PFC it is what the port may hold as an ingress: the pause threshold
  // plus the headroom for what arrives while the pause travels must fit in
  // it (the constructor refuses a fabric where it does not), and egress
  // queues draw on the switch's whole buffer (ports times this), so that
  // pauses, not drops, bound them.
  uint64_t buffer_bytes = 1 << 20;
  uint64_t ecn_threshold_bytes = 100'000;  // CE mark above this egress backlog
  bool pfc = false;
  PfcParams pfc_params;
  uint64_t nic_tx_ring_bytes = 64 << 10;  // per NIC, see Simulator::set_tx_ring
  double loss = 0;                        // random loss on every leaf -> NIC link
};

class LeafSpineFabric {
 public:
  LeafSpineFabric(Simulator& sim, const LeafSpineSpec& spec);

  const LeafSpineSpec& spec() const { return spec_; }
  uint32_t servers() const { return spec_.leaves * spec_.hosts_per_leaf; }
  uint32_t leaf_of(uint32_t server) const { return server / spec_.hosts_per_leaf; }
  uint64_t spine_link_rate_bps() const { return spine_rate_bps_; }
  // Bytes a PFC ingress port may still receive after it crossed XOFF: what
  // is already on the wire and what is sent while the pause travels back
  // (one propagation delay each) and a jumbo frame at each end.
  static uint64_t pfc_headroom_bytes(uint64_t rate_bps, Time delay_ns);

  // Registers `host` as server `server` with one NIC in each of `planes`:
  // a datagram with egress i leaves on the NIC in planes[i].
  NodeId attach(Host& host, uint32_t server, const std::vector<uint16_t>& planes);

  // Every packet leaving the link (both directions) in [start, end) is lost.
  void fail_spine_link(uint16_t plane, uint32_t leaf, uint32_t spine, Time start, Time end);
  // The same for every link of the plane, NICs' links included.
  void fail_plane(uint16_t plane, Time start, Time end);
  // The spine whose link from `leaf` has carried the most bytes so far.
  uint32_t busiest_spine(uint16_t plane, uint32_t leaf) const;

  struct Totals {
    // Over every link of the simulator (a fabric owns its simulator's links).
    uint64_t pause_frames = 0;       // XOFF frames sent
    uint64_t dropped_queue = 0;      // drop-tail
    uint64_t dropped_loss = 0;       // random loss
    uint64_t dropped_blackhole = 0;  // failed links
    uint64_t ce_marked = 0;
    uint64_t max_switch_queue_bytes = 0;  // deepest switch egress queue seen
  };
  Totals totals() const;

  LinkId spine_uplink(uint16_t plane, uint32_t leaf, uint32_t spine) const;
  LinkId spine_downlink(uint16_t plane, uint32_t spine, uint32_t leaf) const;

 private:
  struct Plane {
    std::vector<NodeId> leaves, spines;
    std::vector<std::vector<LinkId>> up;    // [leaf][spine]
    std::vector<std::vector<LinkId>> down;  // [spine][leaf]
  };
  void blackhole(LinkId link, Time start, Time end);
  LinkParams port(uint64_t rate_bps, Time delay_ns, uint32_t ports) const;

  Simulator& sim_;
  LeafSpineSpec spec_;
  uint64_t spine_rate_bps_ = 0;
  std::vector<Plane> planes_;
  std::vector<LinkId> switch_links_;  // every link that leaves a switch
};

}  // namespace metaroce::sim
