// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "endpoint.h"

#include <algorithm>
#include <deque>

#include "connection.h"
#include "metaroce/wire.h"
#include "queue_pair.h"

namespace metaroce::transport {

struct Endpoint::CompletionQueue {
  uint32_t capacity = 0;
  std::deque<Completion> entries;
};

Endpoint::Endpoint(const EndpointConfig& config) : config_(config) {
  config_.mtu = std::clamp<uint32_t>(config_.mtu, 256, 65536 - 128);
  if (config_.profile == Profile::RoCEv2) config_.paths = 1;
  config_.paths = std::clamp<uint16_t>(config_.paths, 1, wire::kMaxPaths);
  config_.planes = std::clamp<uint16_t>(config_.planes, 1, config_.paths);
  config_.ack_every_packets = std::max<uint32_t>(config_.ack_every_packets, 1);
  config_.max_outstanding_messages = std::max<uint32_t>(config_.max_outstanding_messages, 1);
  // A burst longer than a fraction of the RTO would look like a stall.
  config_.pacing_burst_ns = std::min(config_.pacing_burst_ns, min_rto() / 4);
}

Endpoint::~Endpoint() = default;

// --- resolved configuration ---------------------------------------------------

CongestionParams Endpoint::congestion_params() const {
  const CongestionConfig& cc = config_.cc;
  CongestionParams p;
  p.ecn_gain = cc.ecn_gain;
  p.additive_increase_bytes = cc.additive_increase_bytes ? cc.additive_increase_bytes : config_.mtu;
  p.target_queue_delay_ns = cc.target_queue_delay_ns ? cc.target_queue_delay_ns : config_.base_rtt_ns;
  p.delay_backoff = cc.delay_backoff;
  p.min_window_bytes = cc.min_window_bytes ? cc.min_window_bytes : config_.mtu;
  const uint64_t bdp = config_.path_rate_bps / 8 * config_.base_rtt_ns / 1'000'000'000;
  p.initial_window_bytes = cc.initial_window_bytes
                               ? cc.initial_window_bytes
                               : static_cast<uint32_t>(std::clamp<uint64_t>(bdp, 2 * config_.mtu, 1u << 30));
  p.max_window_bytes = cc.max_window_bytes ? cc.max_window_bytes : 4 * p.initial_window_bytes;
  p.max_window_bytes = std::max(p.max_window_bytes, p.initial_window_bytes);
  p.min_window_bytes = std::min(p.min_window_bytes, p.initial_window_bytes);
  return p;
}

Time Endpoint::min_rto() const { return config_.min_rto_ns ? config_.min_rto_ns : 4 * config_.base_rtt_ns; }
Time Endpoint::ack_delay() const { return config_.ack_delay_ns ? config_.ack_delay_ns : config_.base_rtt_ns / 4; }
Time Endpoint::probe_interval() const { return config_.probe_interval_ns ? config_.probe_interval_ns : min_rto(); }

uint64_t Endpoint::inbound_capacity_bps() const {
  return config_.inbound_capacity_bps ? config_.inbound_capacity_bps : config_.paths * config_.path_rate_bps;
}

size_t Endpoint::active_senders(Time now) const {
  size_t count = 0;
  for (const auto& [peer, connection] : connections_)
    if (connection->sending_to_us(now)) ++count;
  return count;
}

uint64_t Endpoint::rate_hint_bps(Time now) const {
  const double capacity = static_cast<double>(inbound_capacity_bps());
  const size_t senders = std::max<size_t>(1, active_senders(now));
  const double equal = capacity / static_cast<double>(senders);
  double light_bps = 0;
  size_t light = 0;
  for (const auto& [peer, connection] : connections_) {
    if (!connection->sending_to_us(now)) continue;
    const double rate = connection->recent_rx_rate_bps(now);
    if (rate < equal / 2) {
      light_bps += rate;
      ++light;
    }
  }
  const size_t heavy = senders - light;
  const double utilization = heavy > 1 || (heavy == 0 && senders > 1) ? config_.rate_hint_utilization : 1.0;
  if (heavy == 0) return static_cast<uint64_t>(utilization * equal);
  return static_cast<uint64_t>(std::max(0.0, utilization * capacity - light_bps) / static_cast<double>(heavy));
}

void Endpoint::set_plane_up(Time now, uint16_t plane, bool up) {
  if (plane >= config_.planes || up == plane_up(plane)) return;
  if (up) planes_down_ &= ~(uint64_t{1} << plane);
  else planes_down_ |= uint64_t{1} << plane;
  for (auto& [peer, connection] : connections_) connection->on_plane_change(now, plane, up);
}

void Endpoint::set_congestion(const CongestionConfig& cc) {
  config_.cc = cc;
  const CongestionParams params = congestion_params();
  for (auto& [peer, connection] : connections_) connection->set_congestion(params);
}

// --- completion queues ----------------------------------------------------------

uint32_t Endpoint::create_cq(uint32_t capacity) {
  const uint32_t id = next_cq_++;
  auto cq = std::make_unique<CompletionQueue>();
  cq->capacity = capacity;
  cqs_.emplace(id, std::move(cq));
  return id;
}

PostResult Endpoint::destroy_cq(uint32_t cq) {
  // As in verbs, a CQ that a QP still uses cannot be destroyed.
  for (const auto& [qpn, qp] : qps_)
    if (qp->send_cq() == cq || qp->recv_cq() == cq) return PostResult::BadState;
  return cqs_.erase(cq) ? PostResult::Ok : PostResult::NoSuchObject;
}

size_t Endpoint::poll_cq(uint32_t cq, std::span<Completion> out) {
  auto it = cqs_.find(cq);
  if (it == cqs_.end()) return 0;
  auto& entries = it->second->entries;
  const size_t n = std::min(out.size(), entries.size());
  std::copy_n(entries.begin(), n, out.begin());
  entries.erase(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

size_t Endpoint::cq_depth(uint32_t cq) const {
  auto it = cqs_.find(cq);
  return it == cqs_.end() ? 0 : it->second->entries.size();
}

void Endpoint::push_completion(uint32_t cq, const Completion& completion) {
  auto it = cqs_.find(cq);
  if (it == cqs_.end()) return;
  it->second->entries.push_back(completion);
  if (completion_observer_) completion_observer_(cq);
}

// --- queue pairs --------------------------------------------------------------

uint32_t Endpoint::create_qp(uint32_t pd, uint32_t send_cq, uint32_t recv_cq, const QpConfig& config) {
  if (!cqs_.count(send_cq) || !cqs_.count(recv_cq)) return 0;
  QpConfig resolved = config;
  resolved.max_send_wr = std::min(resolved.max_send_wr, config_.max_outstanding_messages);
  if (next_qpn_index_ >= config_.max_qps) return 0;
  const uint32_t qpn = config_.qpn_base + next_qpn_index_++;
  qps_.emplace(qpn, std::make_unique<QueuePair>(*this, qpn, pd, send_cq, recv_cq, resolved));
  return qpn;
}

uint32_t Endpoint::create_qp_numbered(uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq,
                                      const QpConfig& config) {
  if (qpn == 0 || qps_.count(qpn) || !cqs_.count(send_cq) || !cqs_.count(recv_cq)) return 0;
  QpConfig resolved = config;
  resolved.max_send_wr = std::min(resolved.max_send_wr, config_.max_outstanding_messages);
  qps_.emplace(qpn, std::make_unique<QueuePair>(*this, qpn, pd, send_cq, recv_cq, resolved));
  return qpn;
}

PostResult Endpoint::destroy_qp(uint32_t qpn) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  if (qp->connection()) qp->connection()->detach(qp);
  qps_.erase(qpn);
  return PostResult::Ok;
}

QueuePair* Endpoint::find_qp(uint32_t qpn) const {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : it->second.get();
}

PostResult Endpoint::modify_qp_to_init(uint32_t qpn) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  if (qp->state() != QpState::Reset) return PostResult::BadState;
  qp->to_init();
  return PostResult::Ok;
}

PostResult Endpoint::modify_qp_to_rtr(uint32_t qpn, PeerId peer, uint32_t remote_qpn, const QpConfig& config) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  if (qp->state() != QpState::Init) return PostResult::BadState;
  QpConfig resolved = config;
  resolved.max_send_wr = std::min(qp->config().max_send_wr, config_.max_outstanding_messages);
  resolved.max_recv_wr = qp->config().max_recv_wr;
  Connection* connection = connection_for(peer, true);
  if (qp->connection() && qp->connection() != connection) qp->connection()->detach(qp);
  qp->to_rtr(connection, remote_qpn, resolved);
  connection->attach(qp);
  return PostResult::Ok;
}

PostResult Endpoint::modify_qp_to_rts(uint32_t qpn) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  if (qp->state() != QpState::ReadyToReceive) return PostResult::BadState;
  qp->to_rts();
  return PostResult::Ok;
}

PostResult Endpoint::modify_qp_to_rts(uint32_t qpn, const QpConfig& config) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  if (qp->state() != QpState::ReadyToReceive) return PostResult::BadState;
  qp->set_requester_config(config);
  qp->to_rts();
  return PostResult::Ok;
}

PostResult Endpoint::modify_qp_to_error(uint32_t qpn) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  qp->to_error();
  return PostResult::Ok;
}

PostResult Endpoint::modify_qp_to_reset(uint32_t qpn) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  if (qp->connection()) qp->connection()->detach(qp);
  qp->to_reset();
  return PostResult::Ok;
}

std::optional<QpState> Endpoint::qp_state(uint32_t qpn) const {
  const QueuePair* qp = find_qp(qpn);
  if (!qp) return std::nullopt;
  return qp->state();
}

PostResult Endpoint::post_send(uint32_t qpn, const SendWr& wr) {
  QueuePair* qp = find_qp(qpn);
  return qp ? qp->post_send(wr) : PostResult::NoSuchObject;
}

PostResult Endpoint::post_recv(uint32_t qpn, const RecvWr& wr) {
  QueuePair* qp = find_qp(qpn);
  return qp ? qp->post_recv(wr) : PostResult::NoSuchObject;
}

// --- connections and I/O ---------------------------------------------------------

Connection* Endpoint::connection_for(PeerId peer, bool create) {
  auto it = connections_.find(peer);
  if (it != connections_.end()) return it->second.get();
  if (!create) return nullptr;
  auto connection = std::make_unique<Connection>(*this, peer);
  Connection* raw = connection.get();
  connections_.emplace(peer, std::move(connection));
  return raw;
}

void Endpoint::on_datagram(Time now, PeerId from, std::span<const uint8_t> datagram, bool ce_marked) {
  ++counters_.rx_datagrams;
  // Decoding first: nothing is looked up or allocated for a malformed datagram.
  wire::Packet& packet = rx_packet_;
  if (wire::decode(datagram, packet) != wire::DecodeStatus::Ok) {
    ++counters_.rx_drop_malformed;
    return;
  }
  Connection* connection = connection_for(from, false);
  if (!connection) {
    ++counters_.rx_drop_unknown_peer;
    return;
  }
  connection->on_packet(now, packet, ce_marked);
}

void Endpoint::on_timer(Time now) {
  for (auto& [peer, connection] : connections_) connection->on_timer(now);
}

std::optional<TxDatagram> Endpoint::poll_transmit(Time now, std::span<uint8_t> buf) {
  if (connections_.empty()) return std::nullopt;
  // Round-robin over connections, starting after the one served last.
  auto start = connections_.upper_bound(tx_cursor_);
  for (size_t i = 0; i < connections_.size(); ++i) {
    if (start == connections_.end()) start = connections_.begin();
    uint16_t path_id = 0;
    const size_t length = start->second->poll_transmit(now, buf, path_id);
    if (length > 0) {
      tx_cursor_ = start->first;
      return TxDatagram{start->first, path_id, plane_of_path(path_id), static_cast<uint32_t>(length)};
    }
    ++start;
  }
  return std::nullopt;
}

size_t Endpoint::max_datagram_bytes() const {
  return std::max<size_t>(config_.mtu + wire::kDataHeaderBytes + 16, wire::kMaxAckBytes);
}

Time Endpoint::next_wakeup() const {
  Time wake = kNever;
  for (const auto& [peer, connection] : connections_) wake = std::min(wake, connection->next_wakeup());
  return wake;
}

std::vector<PeerId> Endpoint::peers() const {
  std::vector<PeerId> out;
  out.reserve(connections_.size());
  for (const auto& [peer, connection] : connections_) out.push_back(peer);
  return out;
}

std::vector<PathSnapshot> Endpoint::path_snapshots(PeerId peer) const {
  auto it = connections_.find(peer);
  if (it == connections_.end()) return {};
  return it->second->snapshots();
}

}  // namespace metaroce::transport
