// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Deterministic discrete-event network simulator.
//
// Endpoints are `Host` objects (the sans-I/O transport engine behind an
// adapter, or a scripted test host); the network is made of one-way links
// (FIFO egress queue + serialization at a fixed rate + propagation delay,
// with optional jitter, loss, duplication, ECN marking and blackhole windows)
// and switches that forward by a per-destination route table with ECMP.
//
// Everything runs in virtual time (nanoseconds). A run is a pure function of
// the seed and the scenario: events at equal times run in insertion order, all
// random draws come from one seeded std::mt19937_64 (whose output sequence the
// C++ standard pins down) in event order, and no decision depends on wall
// clock, pointer values or unordered-container iteration order.
//
// Cost model: a packet crossing a link costs one heap event (its arrival at
// the far end); the queueing, serialization and loss decisions are computed
// arithmetically when it enters the link. A packet dropped by loss or a
// blackhole costs one small event at its leave time so that the drop counters
// change at the virtual time the drop happens.
//
// Links that can be held back — every link into or out of a switch with
// priority flow control (PFC), and the uplinks of a host with a transmit ring
// — keep an explicit FIFO instead and cost a second event per packet (the end
// of its serialization), because a paused port's queue cannot be computed in
// advance. Without pauses the two models give the same times: a test pins
// that down.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <queue>
#include <random>
#include <utility>
#include <vector>

namespace metaroce::sim {

using Time = uint64_t;  // nanoseconds, virtual
inline constexpr Time kNever = UINT64_MAX;
using NodeId = uint32_t;
using LinkId = uint32_t;
inline constexpr LinkId kNoLink = UINT32_MAX;

struct Datagram {
  NodeId src = 0, dst = 0;
  uint16_t src_port = 0, dst_port = 0;
  uint16_t egress = 0;           // the sending host's uplink (its NIC) for Select::Egress routes
  bool ce = false;               // ECN Congestion Experienced, set by a link
  std::vector<uint8_t> payload;  // the UDP payload
};

// Implemented by whatever runs at an endpoint (the transport engine adapter,
// or a test host). Callbacks may call Simulator::wake() and Simulator::at(),
// but must not run the simulator re-entrantly.
class Host {
 public:
  virtual ~Host() = default;
  virtual void receive(Time now, Datagram&& d) = 0;
  // Called when now >= next_wakeup().
  virtual void on_timer(Time now) = 0;
  // Next datagram ready at `now`; false when none. The host fills
  // src_port/dst_port/dst/payload (and egress if it has several uplinks);
  // the simulator sets src. `out` arrives reset (empty payload, possibly
  // with spare capacity, egress 0, ce == false).
  virtual bool transmit(Time now, Datagram& out) = 0;
  virtual Time next_wakeup() const = 0;  // kNever when idle
};

struct LinkParams {
  uint64_t rate_bps = 100'000'000'000;
  Time delay_ns = 4'000;  // one-way propagation
  Time jitter_ns = 0;     // extra uniform [0, jitter] delay per packet
  bool reorder = false;   // false: jitter never reorders packets on this link
  // Queue sizes are in wire bytes (payload + overhead_bytes): the backlog is
  // derived from the time the queue needs to drain, which includes overhead.
  uint64_t queue_bytes = 4 << 20;             // drop-tail: drop if backlog + wire size > this
  uint64_t ecn_threshold_bytes = UINT64_MAX;  // mark CE when backlog found at enqueue exceeds this
  uint32_t overhead_bytes = 0;                // per-packet bytes added on the wire (headers); not in bytes_in
  double loss = 0;                            // probability a packet is lost (after it used the link)
  double duplicate = 0;                       // probability a delivered packet is delivered twice
  // [start, end): every packet that would leave the link then is dropped.
  std::vector<std::pair<Time, Time>> blackholes;
};

// bytes_in counts payload bytes of every packet offered (dropped or not).
// dropped_loss / dropped_blackhole change at the packet's leave time;
// duplicated and delivered when the copy reaches the next node.
// max_backlog_bytes: peak queue occupancy (backlog found + the admitted
// packet's wire bytes). pause_frames: PFC XOFF frames the link's far end
// sent to hold this link; paused_ns: time the link spent held (up to the
// latest resume).
// injected: datagrams Simulator::inject() delivered at the link's far end
// (not in delivered).
struct LinkStats {
  uint64_t packets_in = 0, bytes_in = 0, delivered = 0, dropped_loss = 0, dropped_queue = 0, dropped_blackhole = 0,
           duplicated = 0, ce_marked = 0, max_backlog_bytes = 0, pause_frames = 0, paused_ns = 0, injected = 0;
};

// An observer of the fabric (an attacker node in the tests): it sees every
// datagram that reaches the far end of a link, genuine or injected, before
// the node there gets it, and is told when a host has taken one. It may call
// Simulator::inject() and Simulator::at(), but must not run the simulator.
class Tap {
 public:
  virtual ~Tap() = default;
  virtual void on_arrival(Time now, LinkId link, const Datagram& d, bool injected) = 0;
  // The host at the far end of `link` returned from receive() for the
  // datagram on_arrival() showed last.
  virtual void on_delivered(Time now, LinkId link, bool injected) = 0;
};

// Next-hop choice among several links: ECMP hash of the 5-tuple, the source
// port modulo the number of links, or the datagram's egress (a host's NIC).
enum class Select { Hash, PortModulo, Egress };

// Priority flow control (IEEE 802.1Qbb) at a switch, with one lossless
// class that carries all traffic. The switch counts, per ingress link, the
// wire bytes that arrived on it and have not yet left the switch; above
// xoff_bytes it sends the link's upstream an XOFF, at or below xon_bytes an
// XON. A pause frame takes the link's propagation delay to arrive (it is a
// MAC control frame, not queued behind data; refresh frames of a held pause
// are not modelled: a pause lasts until its XON). A held port finishes the
// frame it is sending and then sends nothing until resumed.
struct PfcParams {
  uint64_t xoff_bytes = 256 << 10;
  uint64_t xon_bytes = 248 << 10;
};

class Simulator {
 public:
  explicit Simulator(uint64_t seed);
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Registers an endpoint (not owned; it must outlive the simulator's use of
  // it). The host is polled once at the current time, so a host that already
  // has work or a timer gets going without an explicit wake().
  NodeId add_host(Host& host);
  // A switch forwards by its route table; its ECMP hash is seeded from the
  // simulator seed and the switch's id.
  NodeId add_switch();
  LinkId add_link(NodeId from, NodeId to, const LinkParams& params);  // one direction

  // Forwarding at node `at` for destination host `dst`; every link must start
  // at `at`. With several links: Hash = a hash of (src, dst, src_port,
  // dst_port) mixed with the node's seed, mod n; PortModulo = links[src_port % n];
  // Egress = links[egress] (unroutable when egress >= n).
  // Replaces an earlier route for the same (at, dst).
  void add_route(NodeId at, NodeId dst, std::vector<LinkId> links, Select select = Select::Hash);
  // Used at `at` for destinations without a specific route (e.g. a host's
  // uplink). An empty `links` removes it.
  void set_default_route(NodeId at, std::vector<LinkId> links, Select select = Select::Hash);

  struct ParallelPaths {
    std::vector<LinkId> forward, reverse;
  };
  // n = per_path.size() parallel links a->b and b->a with the same params per
  // index, and PortModulo routes both ways (a->b for dst b, b->a for dst a).
  ParallelPaths connect_parallel(NodeId a, NodeId b, const std::vector<LinkParams>& per_path);

  // PFC at switch `sw` (see PfcParams); links into and out of it become
  // explicit FIFOs. Call before traffic flows.
  void enable_pfc(NodeId sw, const PfcParams& params);
  // A host's NIC transmit rings: the host is not asked for datagrams while
  // every one of its uplinks holds `bytes` or more (queued or being
  // serialized), as a NIC stops taking work when its ring is full, and is
  // polled again when one drains below it. With several NICs (planes) a full
  // one does not hold the others: what the host gives it waits in its queue,
  // as a runtime with a socket per path holds what one NIC cannot take yet.
  // 0 (the default) = unlimited. Call before traffic flows.
  void set_tx_ring(NodeId host, uint64_t bytes);

  // Takes effect for packets entering the link afterwards (packets already in
  // the link keep the times and fates computed when they entered).
  void set_link(LinkId link, const LinkParams& params);
  const LinkParams& link(LinkId link) const;
  const LinkStats& stats(LinkId link) const;
  NodeId link_from(LinkId link) const;
  NodeId link_to(LinkId link) const;
  size_t link_count() const { return links_.size(); }
  size_t node_count() const { return nodes_.size(); }
  const std::vector<LinkId>& links_from(NodeId node) const;
  // Bytes waiting in the link's queue now, including the rest of the frame
  // being serialized.
  uint64_t backlog_bytes(LinkId link) const;

  // The link node `at` would send `d` on (d.src must be set), or kNoLink if
  // it has no route for d.dst. Pure; consumes no randomness.
  LinkId next_hop(NodeId at, const Datagram& d) const;

  // At most one tap (nullptr removes it); not owned. Without one, arrivals
  // cost nothing more.
  void set_tap(Tap* tap) { tap_ = tap; }
  // Delivers `d` at the far end of `link` at virtual time t (>= now(), else
  // std::invalid_argument), as if it had crossed the link but without its
  // queue, loss or duplication: an injection on the wire right before that
  // node. d.src is kept as given (the sender's address can be spoofed). At a
  // switch it is forwarded as any arrival.
  void inject(LinkId link, Time t, Datagram d);

  // Scenario action at virtual time t (t >= now(), else std::invalid_argument).
  void at(Time t, std::function<void()> action);
  // The host has new work: poll it at now() (coalesced per host).
  void wake(NodeId host);

  Time now() const { return now_; }
  // Processes events with time <= until (or until none are left). Afterwards
  // now() == until unless until == kNever (then it is the last event's time).
  Time run_until(Time until);
  // Checks done() first and after every event; returns true as soon as it is
  // true. Otherwise processes events with time <= limit and returns false
  // (now() then advances to limit, as above).
  bool run_until(const std::function<bool()>& done, Time limit);
  // Processes the next event if there is one; false when the queue is empty.
  bool step();

  uint64_t events_processed() const { return events_processed_; }
  size_t pending_events() const { return queue_.size(); }
  // Datagrams that reached a node without a route for their destination.
  uint64_t unroutable() const { return unroutable_; }
  uint64_t seed() const { return seed_; }

 private:
  enum class EventKind : uint8_t { Arrival, Timer, Poll, Action, LossDrop, BlackholeDrop, TxDone, PfcFrame };
  struct Event {
    Time time;
    uint64_t seq;
    // Arrival: slot | dup flag | inject flag; Timer: generation; Action: action index;
    // PfcFrame: frame number << 1 | 1 for XOFF, 0 for XON.
    uint64_t arg;
    uint32_t id;  // link id or node id
    EventKind kind;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.time != b.time ? a.time > b.time : a.seq > b.seq; }
  };
  struct Route {
    std::vector<LinkId> links;
    Select select = Select::Hash;
  };
  struct Node {
    Host* host = nullptr;  // nullptr for a switch
    uint64_t hash_seed = 0;
    std::vector<Route> routes;  // indexed by destination node id
    Route default_route;
    std::vector<LinkId> out_links;
    bool pfc = false;
    PfcParams pfc_params;
    uint64_t tx_ring_bytes = 0;  // 0 = unlimited
    bool tx_blocked = false;     // a full ring stopped polling; a draining uplink resumes it
    // Host timer state.
    uint64_t timer_gen = 0;
    Time timer_at = kNever;       // time of the live timer event, kNever if none
    Time last_on_timer = kNever;  // virtual time of the latest on_timer call
    bool poll_pending = false;
  };
  // A packet in an explicit link queue, with the fate drawn when it entered.
  struct QueuedPacket {
    uint32_t slot = 0;
    uint32_t wire = 0;         // wire bytes on this link
    LinkId ingress = kNoLink;  // the link it arrived on at this node (PFC accounting)
    uint64_t enqueued_ps = 0;
    bool lost = false;
    bool duplicate = false;
    Time jitter = 0;
  };
  struct Link {
    NodeId from = 0, to = 0;
    LinkParams params;
    LinkStats stats;
    // Arithmetic model: time at which the egress queue is empty. Explicit
    // model: time at which the frame being serialized is done. Both in
    // picoseconds plus a fraction busy_frac / rate_bps of a picosecond
    // (exact arithmetic).
    uint64_t busy_ps = 0;
    uint64_t busy_frac = 0;
    Time last_arrival = 0;  // latest arrival scheduled on this link
    // Explicit model.
    bool queued = false;
    std::deque<QueuedPacket> fifo;
    uint64_t fifo_bytes = 0;
    bool transmitting = false;
    QueuedPacket in_tx;
    bool paused = false;  // an XOFF from the far end holds this link
    Time paused_since = 0;
    uint64_t resume_ps = 0;  // no frame starts before this (the latest XON's arrival)
    uint64_t pfc_frames_applied = 0;
    // PFC at the far end: bytes that came over this link and are still
    // held there, whether the far end has sent XOFF, and frames it sent.
    uint64_t held_downstream = 0;
    bool xoff_sent = false;
    uint64_t pfc_frames_sent = 0;
  };

  static constexpr uint64_t kDupFlag = uint64_t{1} << 32;
  static constexpr uint64_t kInjectFlag = uint64_t{1} << 33;

  void push(Time t, EventKind kind, uint32_t id, uint64_t arg);
  void dispatch(const Event& ev);
  uint32_t alloc_slot();
  void free_slot(uint32_t slot);
  void route_and_send(NodeId at, uint32_t slot, LinkId ingress);
  void enqueue(LinkId link, uint32_t slot, LinkId ingress);
  uint64_t backlog_at(const Link& l, uint64_t t_ps) const;
  void start_transmission(LinkId link);
  void on_tx_done(LinkId link);
  void send_pfc_frame(LinkId ingress, bool xoff);
  void on_pfc_frame(LinkId link, uint64_t arg);
  bool tx_ring_full(const Node& n) const;
  void on_arrival(LinkId link, uint64_t arg);
  void on_timer_event(NodeId node, uint64_t gen);
  void poll(NodeId node);
  void schedule_timer(NodeId node, Time wakeup);
  double uniform();                     // [0, 1)
  uint64_t uniform_upto(uint64_t max);  // [0, max]
  Node& host_node(NodeId node);
  Link& link_ref(LinkId link);
  const Link& link_ref(LinkId link) const;
  void validate(const LinkParams& params) const;
  const Route* find_route(NodeId at, NodeId dst) const;

  uint64_t seed_;
  std::mt19937_64 rng_;
  Time now_ = 0;
  uint64_t seq_ = 0;
  uint64_t events_processed_ = 0;
  uint64_t unroutable_ = 0;
  Tap* tap_ = nullptr;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  std::vector<Node> nodes_;
  std::vector<Link> links_;
  std::deque<Datagram> pool_;  // datagrams in flight; deque keeps references stable
  std::vector<uint32_t> free_slots_;
  std::vector<std::function<void()>> actions_;
  std::vector<uint32_t> free_actions_;
};

}  // namespace metaroce::sim
