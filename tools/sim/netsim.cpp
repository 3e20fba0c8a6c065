// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "netsim.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "metaroce/splitmix64.h"

namespace metaroce::sim {

namespace {

__extension__ typedef unsigned __int128 u128;

constexpr uint64_t kPsPerNs = 1000;
constexpr uint64_t kPsPerSecond = 1'000'000'000'000;
// One byte is 8 bits; (ps * bit/s) / kPsBitsPerByte = bytes.
constexpr uint64_t kPsBitsPerByte = 8 * kPsPerSecond;

uint64_t flow_hash(uint64_t node_seed, const Datagram& d) {
  uint64_t h = splitmix64_mix(node_seed ^ ((uint64_t{d.src} << 32) | d.dst));
  h = splitmix64_mix(h ^ ((uint64_t{d.src_port} << 16) | d.dst_port));
  return h;
}

// num / den and num % den, with a 64-bit fast path (the common case).
inline uint64_t div_u128(u128 num, uint64_t den, uint64_t* rem) {
  if ((num >> 64) == 0) {
    const auto n64 = static_cast<uint64_t>(num);
    *rem = n64 % den;
    return n64 / den;
  }
  *rem = static_cast<uint64_t>(num % den);
  return static_cast<uint64_t>(num / den);
}

Time saturating_add(Time a, Time b) { return a > kNever - b ? kNever : a + b; }

constexpr Time kHeldHostTimerNs = 500;

// The first whole nanosecond at or after busy_ps + busy_frac / rate.
Time ceil_ns(uint64_t busy_ps, uint64_t busy_frac) {
  return busy_ps / kPsPerNs + ((busy_ps % kPsPerNs != 0 || busy_frac != 0) ? 1 : 0);
}

}  // namespace

Simulator::Simulator(uint64_t seed) : seed_(seed), rng_(seed) {
  std::vector<Event> storage;
  storage.reserve(1024);
  queue_ = std::priority_queue<Event, std::vector<Event>, Later>(Later{}, std::move(storage));
}

// ---------------------------------------------------------------- topology

NodeId Simulator::add_host(Host& host) {
  const auto id = static_cast<NodeId>(nodes_.size());
  Node n;
  n.host = &host;
  n.hash_seed = splitmix64_mix(seed_ ^ splitmix64_mix(0x5851f42d4c957f2dULL * (uint64_t{id} + 1)));
  nodes_.push_back(std::move(n));
  wake(id);
  return id;
}

NodeId Simulator::add_switch() {
  const auto id = static_cast<NodeId>(nodes_.size());
  Node n;
  n.hash_seed = splitmix64_mix(seed_ ^ splitmix64_mix(0x5851f42d4c957f2dULL * (uint64_t{id} + 1)));
  nodes_.push_back(std::move(n));
  return id;
}

void Simulator::validate(const LinkParams& p) const {
  if (p.rate_bps == 0) throw std::invalid_argument("netsim: link rate_bps must be > 0");
  if (!(p.loss >= 0 && p.loss <= 1)) throw std::invalid_argument("netsim: loss must be in [0, 1]");
  if (!(p.duplicate >= 0 && p.duplicate <= 1)) throw std::invalid_argument("netsim: duplicate must be in [0, 1]");
}

LinkId Simulator::add_link(NodeId from, NodeId to, const LinkParams& params) {
  if (from >= nodes_.size() || to >= nodes_.size()) throw std::invalid_argument("netsim: add_link with unknown node");
  validate(params);
  Link l;
  l.from = from;
  l.to = to;
  l.params = params;
  l.queued = nodes_[from].pfc || nodes_[to].pfc || nodes_[from].tx_ring_bytes != 0;
  links_.push_back(std::move(l));
  const auto id = static_cast<LinkId>(links_.size() - 1);
  nodes_[from].out_links.push_back(id);
  return id;
}

void Simulator::enable_pfc(NodeId sw, const PfcParams& params) {
  if (sw >= nodes_.size() || nodes_[sw].host != nullptr)
    throw std::invalid_argument("netsim: enable_pfc on a node that is not a switch");
  if (params.xon_bytes > params.xoff_bytes)
    throw std::invalid_argument("netsim: PFC xon_bytes must not exceed xoff_bytes");
  nodes_[sw].pfc = true;
  nodes_[sw].pfc_params = params;
  for (Link& l : links_)
    if (l.from == sw || l.to == sw) l.queued = true;
}

void Simulator::set_tx_ring(NodeId host, uint64_t bytes) {
  Node& n = host_node(host);
  n.tx_ring_bytes = bytes;
  if (bytes != 0)
    for (LinkId l : n.out_links) links_[l].queued = true;
}

void Simulator::add_route(NodeId at, NodeId dst, std::vector<LinkId> links, Select select) {
  if (at >= nodes_.size() || dst >= nodes_.size()) throw std::invalid_argument("netsim: add_route with unknown node");
  for (LinkId l : links)
    if (link_ref(l).from != at)
      throw std::invalid_argument("netsim: add_route link " + std::to_string(l) + " does not start at node " +
                                  std::to_string(at));
  auto& routes = nodes_[at].routes;
  if (routes.size() <= dst) routes.resize(size_t{dst} + 1);
  routes[dst] = Route{std::move(links), select};
}

void Simulator::set_default_route(NodeId at, std::vector<LinkId> links, Select select) {
  if (at >= nodes_.size()) throw std::invalid_argument("netsim: set_default_route with unknown node");
  for (LinkId l : links)
    if (link_ref(l).from != at)
      throw std::invalid_argument("netsim: set_default_route link does not start at the node");
  nodes_[at].default_route = Route{std::move(links), select};
}

Simulator::ParallelPaths Simulator::connect_parallel(NodeId a, NodeId b, const std::vector<LinkParams>& per_path) {
  ParallelPaths paths;
  paths.forward.reserve(per_path.size());
  paths.reverse.reserve(per_path.size());
  for (const auto& p : per_path) {
    paths.forward.push_back(add_link(a, b, p));
    paths.reverse.push_back(add_link(b, a, p));
  }
  if (!per_path.empty()) {
    add_route(a, b, paths.forward, Select::PortModulo);
    add_route(b, a, paths.reverse, Select::PortModulo);
  }
  return paths;
}

Simulator::Link& Simulator::link_ref(LinkId link) {
  if (link >= links_.size()) throw std::out_of_range("netsim: unknown link");
  return links_[link];
}

const Simulator::Link& Simulator::link_ref(LinkId link) const {
  if (link >= links_.size()) throw std::out_of_range("netsim: unknown link");
  return links_[link];
}

void Simulator::set_link(LinkId link, const LinkParams& params) {
  validate(params);
  Link& l = link_ref(link);
  if (params.rate_bps != l.params.rate_bps && l.busy_frac != 0) {
    // The fraction is in units of 1/old_rate ps; round the busy time up to a
    // whole picosecond so the new rate starts from a clean state.
    ++l.busy_ps;
    l.busy_frac = 0;
  }
  l.params = params;
}

const LinkParams& Simulator::link(LinkId link) const { return link_ref(link).params; }
const LinkStats& Simulator::stats(LinkId link) const { return link_ref(link).stats; }
NodeId Simulator::link_from(LinkId link) const { return link_ref(link).from; }
NodeId Simulator::link_to(LinkId link) const { return link_ref(link).to; }

const std::vector<LinkId>& Simulator::links_from(NodeId node) const {
  if (node >= nodes_.size()) throw std::out_of_range("netsim: unknown node");
  return nodes_[node].out_links;
}

uint64_t Simulator::backlog_bytes(LinkId link) const { return backlog_at(link_ref(link), now_ * kPsPerNs); }

const Simulator::Route* Simulator::find_route(NodeId at, NodeId dst) const {
  const Node& n = nodes_[at];
  if (dst < n.routes.size() && !n.routes[dst].links.empty()) return &n.routes[dst];
  if (!n.default_route.links.empty()) return &n.default_route;
  return nullptr;
}

LinkId Simulator::next_hop(NodeId at, const Datagram& d) const {
  if (at >= nodes_.size()) return kNoLink;
  const Route* r = find_route(at, d.dst);
  if (r == nullptr) return kNoLink;
  const size_t n = r->links.size();
  if (n == 1 && r->select != Select::Egress) return r->links[0];
  switch (r->select) {
    case Select::PortModulo: return r->links[d.src_port % n];
    case Select::Egress: return d.egress < n ? r->links[d.egress] : kNoLink;
    case Select::Hash: break;
  }
  return r->links[flow_hash(nodes_[at].hash_seed, d) % n];
}

// ---------------------------------------------------------------- scheduling

void Simulator::push(Time t, EventKind kind, uint32_t id, uint64_t arg) {
  queue_.push(Event{t, seq_++, arg, id, kind});
}

void Simulator::at(Time t, std::function<void()> action) {
  if (t < now_) throw std::invalid_argument("netsim: at() in the past");
  uint32_t idx;
  if (!free_actions_.empty()) {
    idx = free_actions_.back();
    free_actions_.pop_back();
    actions_[idx] = std::move(action);
  } else {
    idx = static_cast<uint32_t>(actions_.size());
    actions_.push_back(std::move(action));
  }
  push(t, EventKind::Action, 0, idx);
}

Simulator::Node& Simulator::host_node(NodeId node) {
  if (node >= nodes_.size() || nodes_[node].host == nullptr) throw std::invalid_argument("netsim: node is not a host");
  return nodes_[node];
}

void Simulator::wake(NodeId host) {
  Node& n = host_node(host);
  if (n.poll_pending) return;
  n.poll_pending = true;
  push(now_, EventKind::Poll, host, 0);
}

bool Simulator::step() {
  if (queue_.empty()) return false;
  const Event ev = queue_.top();
  queue_.pop();
  now_ = ev.time;
  ++events_processed_;
  dispatch(ev);
  return true;
}

Time Simulator::run_until(Time until) {
  while (!queue_.empty() && queue_.top().time <= until) step();
  if (until != kNever && now_ < until) now_ = until;
  return now_;
}

bool Simulator::run_until(const std::function<bool()>& done, Time limit) {
  if (done()) return true;
  while (!queue_.empty() && queue_.top().time <= limit) {
    step();
    if (done()) return true;
  }
  if (limit != kNever && now_ < limit) now_ = limit;
  return false;
}

void Simulator::dispatch(const Event& ev) {
  switch (ev.kind) {
    case EventKind::Arrival: on_arrival(ev.id, ev.arg); break;
    case EventKind::Timer: on_timer_event(ev.id, ev.arg); break;
    case EventKind::Poll:
      nodes_[ev.id].poll_pending = false;
      poll(ev.id);
      break;
    case EventKind::Action: {
      // Move the action out first: it may call at(), which can grow actions_.
      const auto idx = static_cast<uint32_t>(ev.arg);
      std::function<void()> fn = std::move(actions_[idx]);
      actions_[idx] = nullptr;
      free_actions_.push_back(idx);
      if (fn) fn();
      break;
    }
    case EventKind::LossDrop: ++links_[ev.id].stats.dropped_loss; break;
    case EventKind::BlackholeDrop: ++links_[ev.id].stats.dropped_blackhole; break;
    case EventKind::TxDone: on_tx_done(ev.id); break;
    case EventKind::PfcFrame: on_pfc_frame(ev.id, ev.arg); break;
  }
}

// ---------------------------------------------------------------- hosts

bool Simulator::tx_ring_full(const Node& n) const {
  if (n.tx_ring_bytes == 0 || n.out_links.empty()) return false;
  const uint64_t t_ps = now_ * kPsPerNs;
  for (LinkId l : n.out_links)
    if (backlog_at(links_[l], t_ps) < n.tx_ring_bytes) return false;
  return true;
}

void Simulator::poll(NodeId node) {
  Node& n = nodes_[node];
  Host& h = *n.host;
  for (;;) {
    if (tx_ring_full(n)) {
      n.tx_blocked = true;
      break;
    }
    const uint32_t slot = alloc_slot();
    Datagram& d = pool_[slot];
    if (!h.transmit(now_, d)) {
      free_slot(slot);
      break;
    }
    d.src = node;
    route_and_send(node, slot, kNoLink);
  }
  schedule_timer(node, h.next_wakeup());
}

void Simulator::schedule_timer(NodeId node, Time wakeup) {
  if (wakeup == kNever) return;  // a live earlier event re-checks when it fires
  Node& n = nodes_[node];
  // A host held by its full ring is polled when the ring drains; its
  // overdue timers (retransmission, probes) run at most every
  // kHeldHostTimerNs meanwhile, rather than in a loop at one instant.
  if (n.tx_blocked && wakeup <= now_) wakeup = now_ + kHeldHostTimerNs;
  Time target = wakeup;
  if (wakeup <= now_) {
    // "Poll again now" — but at most one on_timer per host per ns, so a host
    // that keeps asking for a time <= now without progress cannot stall time.
    target = n.last_on_timer == now_ ? now_ + 1 : now_;
  }
  if (n.timer_at <= target) return;  // the live event fires no later; it re-checks then
  n.timer_at = target;
  push(target, EventKind::Timer, node, ++n.timer_gen);
}

void Simulator::on_timer_event(NodeId node, uint64_t gen) {
  Node& n = nodes_[node];
  if (gen != n.timer_gen || n.timer_at != now_) return;  // stale
  n.timer_at = kNever;
  const Time wakeup = n.host->next_wakeup();
  if (wakeup == kNever) return;
  if (wakeup > now_) {
    schedule_timer(node, wakeup);  // the host moved its deadline later
    return;
  }
  if (n.last_on_timer == now_) {
    schedule_timer(node, wakeup);  // already fired this ns: defer to now + 1
    return;
  }
  n.last_on_timer = now_;
  n.host->on_timer(now_);
  poll(node);
}

// ---------------------------------------------------------------- packets

uint32_t Simulator::alloc_slot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    Datagram& d = pool_[slot];
    d.src = d.dst = 0;
    d.src_port = d.dst_port = 0;
    d.egress = 0;
    d.ce = false;
    d.payload.clear();
    return slot;
  }
  pool_.emplace_back();
  return static_cast<uint32_t>(pool_.size() - 1);
}

void Simulator::free_slot(uint32_t slot) { free_slots_.push_back(slot); }

void Simulator::route_and_send(NodeId at, uint32_t slot, LinkId ingress) {
  const LinkId l = next_hop(at, pool_[slot]);
  if (l == kNoLink) {
    ++unroutable_;
    free_slot(slot);
    return;
  }
  enqueue(l, slot, ingress);
}

uint64_t Simulator::backlog_at(const Link& l, uint64_t t_ps) const {
  // Bytes still to be serialized, derived from the time the queue (or, in
  // the explicit model, the current frame) drains: exact, since busy time is
  // kept in ps plus a fraction of 1/rate ps.
  const bool busy = l.busy_ps > t_ps || (l.busy_ps == t_ps && l.busy_frac != 0);
  uint64_t backlog = 0;
  if (busy) {
    const u128 num = u128(l.busy_ps - t_ps) * l.params.rate_bps + l.busy_frac;  // ps * bit/s
    uint64_t rem = 0;
    backlog = div_u128(num, kPsBitsPerByte, &rem);
    if (rem != 0) ++backlog;  // a partly serialized byte is still waiting
  }
  return backlog + l.fifo_bytes;
}

void Simulator::enqueue(LinkId link, uint32_t slot, LinkId ingress) {
  Link& l = links_[link];
  const LinkParams& p = l.params;
  LinkStats& st = l.stats;
  Datagram& d = pool_[slot];
  const uint64_t size = d.payload.size();
  const uint64_t wire = size + p.overhead_bytes;
  ++st.packets_in;
  st.bytes_in += size;

  const uint64_t t_ps = now_ * kPsPerNs;
  const uint64_t backlog = backlog_at(l, t_ps);
  if (wire > p.queue_bytes || backlog > p.queue_bytes - wire) {
    ++st.dropped_queue;
    free_slot(slot);
    return;
  }
  if (backlog > p.ecn_threshold_bytes) {
    d.ce = true;
    ++st.ce_marked;
  }
  st.max_backlog_bytes = std::max(st.max_backlog_bytes, backlog + wire);

  if (l.queued) {
    // The fate is drawn now, in the order packets enter links, as in the
    // arithmetic model below; blackholes are judged when the frame leaves.
    QueuedPacket q;
    q.slot = slot;
    q.wire = static_cast<uint32_t>(wire);
    q.ingress = ingress;
    q.enqueued_ps = t_ps;
    q.lost = p.loss > 0 && uniform() < p.loss;
    if (!q.lost && p.jitter_ns > 0) q.jitter = uniform_upto(p.jitter_ns);
    q.duplicate = !q.lost && p.duplicate > 0 && uniform() < p.duplicate;
    l.fifo.push_back(q);
    l.fifo_bytes += wire;
    if (ingress != kNoLink && nodes_[l.from].pfc) {
      Link& in = links_[ingress];
      in.held_downstream += wire;
      if (!in.xoff_sent && in.held_downstream > nodes_[l.from].pfc_params.xoff_bytes) send_pfc_frame(ingress, true);
    }
    start_transmission(link);
    return;
  }

  const bool busy = l.busy_ps > t_ps || (l.busy_ps == t_ps && l.busy_frac != 0);
  if (!busy) {
    l.busy_ps = t_ps;
    l.busy_frac = 0;
  }
  const u128 total = u128(wire) * kPsBitsPerByte + l.busy_frac;
  l.busy_ps += div_u128(total, p.rate_bps, &l.busy_frac);
  const Time leave = ceil_ns(l.busy_ps, l.busy_frac);

  for (const auto& [start, end] : p.blackholes) {
    if (leave >= start && leave < end) {
      push(leave, EventKind::BlackholeDrop, link, 0);
      free_slot(slot);
      return;
    }
  }
  if (p.loss > 0 && uniform() < p.loss) {
    push(leave, EventKind::LossDrop, link, 0);
    free_slot(slot);
    return;
  }
  Time arrival = saturating_add(leave, p.delay_ns);
  if (p.jitter_ns > 0) arrival = saturating_add(arrival, uniform_upto(p.jitter_ns));
  if (!p.reorder) arrival = std::max(arrival, l.last_arrival);
  l.last_arrival = std::max(l.last_arrival, arrival);
  push(arrival, EventKind::Arrival, link, slot);

  if (p.duplicate > 0 && uniform() < p.duplicate) {
    const uint32_t copy = alloc_slot();
    pool_[copy] = pool_[slot];  // deque: both references stay valid
    push(saturating_add(arrival, 1), EventKind::Arrival, link, copy | kDupFlag);
  }
}

void Simulator::start_transmission(LinkId link) {
  Link& l = links_[link];
  if (l.transmitting || l.paused || l.fifo.empty()) return;
  l.in_tx = l.fifo.front();
  l.fifo.pop_front();
  l.fifo_bytes -= l.in_tx.wire;
  l.transmitting = true;
  // The frame starts when the previous one ended, when it entered the
  // queue, or when the latest XON released the link, whichever is latest:
  // back-to-back frames keep the exact times of the arithmetic model.
  for (const uint64_t ps : {l.in_tx.enqueued_ps, l.resume_ps}) {
    if (ps > l.busy_ps) {
      l.busy_ps = ps;
      l.busy_frac = 0;
    }
  }
  const u128 total = u128(l.in_tx.wire) * kPsBitsPerByte + l.busy_frac;
  l.busy_ps += div_u128(total, l.params.rate_bps, &l.busy_frac);
  push(std::max(now_, ceil_ns(l.busy_ps, l.busy_frac)), EventKind::TxDone, link, 0);
}

void Simulator::on_tx_done(LinkId link) {
  Link& l = links_[link];
  const QueuedPacket q = l.in_tx;
  l.transmitting = false;
  Node& from = nodes_[l.from];
  if (q.ingress != kNoLink && from.pfc) {
    Link& in = links_[q.ingress];
    in.held_downstream -= q.wire;
    if (in.xoff_sent && in.held_downstream <= from.pfc_params.xon_bytes) send_pfc_frame(q.ingress, false);
  }
  const LinkParams& p = l.params;
  bool blackholed = false;
  for (const auto& [start, end] : p.blackholes) blackholed |= now_ >= start && now_ < end;
  if (blackholed) {
    ++l.stats.dropped_blackhole;
    free_slot(q.slot);
  } else if (q.lost) {
    ++l.stats.dropped_loss;
    free_slot(q.slot);
  } else {
    Time arrival = saturating_add(saturating_add(now_, p.delay_ns), q.jitter);
    if (!p.reorder) arrival = std::max(arrival, l.last_arrival);
    l.last_arrival = std::max(l.last_arrival, arrival);
    push(arrival, EventKind::Arrival, link, q.slot);
    if (q.duplicate) {
      const uint32_t copy = alloc_slot();
      pool_[copy] = pool_[q.slot];
      push(saturating_add(arrival, 1), EventKind::Arrival, link, copy | kDupFlag);
    }
  }
  start_transmission(link);
  if (from.tx_blocked && !tx_ring_full(from)) {
    from.tx_blocked = false;
    wake(l.from);
  }
}

void Simulator::send_pfc_frame(LinkId ingress, bool xoff) {
  Link& in = links_[ingress];
  in.xoff_sent = xoff;
  ++in.pfc_frames_sent;
  push(saturating_add(now_, in.params.delay_ns), EventKind::PfcFrame, ingress,
       (in.pfc_frames_sent << 1) | (xoff ? 1 : 0));
}

void Simulator::on_pfc_frame(LinkId link, uint64_t arg) {
  Link& l = links_[link];
  const uint64_t frame = arg >> 1;
  if (frame <= l.pfc_frames_applied) return;  // overtaken by a later frame (the delay changed)
  l.pfc_frames_applied = frame;
  const bool xoff = (arg & 1) != 0;
  if (xoff) {
    ++l.stats.pause_frames;
    if (!l.paused) {
      l.paused = true;
      l.paused_since = now_;
    }
    return;
  }
  if (!l.paused) return;
  l.paused = false;
  l.stats.paused_ns += now_ - l.paused_since;
  l.resume_ps = now_ * kPsPerNs;
  start_transmission(link);
}

void Simulator::inject(LinkId link, Time t, Datagram d) {
  link_ref(link);  // throws for an unknown link
  if (t < now_) throw std::invalid_argument("netsim: inject() in the past");
  const uint32_t slot = alloc_slot();
  pool_[slot] = std::move(d);
  push(t, EventKind::Arrival, link, slot | kInjectFlag);
}

void Simulator::on_arrival(LinkId link, uint64_t arg) {
  Link& l = links_[link];
  const auto slot = static_cast<uint32_t>(arg);
  const bool injected = (arg & kInjectFlag) != 0;
  if (injected) {
    ++l.stats.injected;
  } else {
    ++l.stats.delivered;
    if ((arg & kDupFlag) != 0) ++l.stats.duplicated;
  }
  const NodeId to = l.to;
  // pool_ is a deque, so this reference survives anything the tap (which may
  // inject) or receive() may do.
  if (tap_ != nullptr) tap_->on_arrival(now_, link, pool_[slot], injected);
  Node& n = nodes_[to];
  if (n.host == nullptr) {
    route_and_send(to, slot, link);
    return;
  }
  n.host->receive(now_, std::move(pool_[slot]));
  free_slot(slot);
  if (tap_ != nullptr) tap_->on_delivered(now_, link, injected);
  poll(to);
}

// ---------------------------------------------------------------- randomness

double Simulator::uniform() {
  // 53 random bits -> [0, 1), independent of <random>'s distributions.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

uint64_t Simulator::uniform_upto(uint64_t max) {
  if (max == UINT64_MAX) return rng_();
  // Multiply-shift range reduction; bias < 2^-64 * range, irrelevant here.
  return static_cast<uint64_t>((u128(rng_()) * (max + 1)) >> 64);
}

}  // namespace metaroce::sim
