// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "endpoint.h"

#include <algorithm>

#include "connection.h"
#include "metaroce/qp_rules.h"
#include "metaroce/wire.h"
#include "queue_pair.h"
#include "shared_receive_queue.h"
#include "metaroce/splitmix64.h"
#include "ud_queue_pair.h"
#include "ring_queue.h"

namespace metaroce::transport {

namespace {

uint64_t seed_of(const EndpointConfig& config) {
  if (config.random_seed != 0) return config.random_seed;
  return splitmix64_mix((uint64_t{config.home_port} << 32) ^ config.qpn_base);
}

uint32_t epoch_of(const EndpointConfig& config) {
  if (config.epoch != 0) return config.epoch;
  uint64_t x = seed_of(config);
  uint32_t epoch = 0;
  while (epoch == 0) epoch = static_cast<uint32_t>(x = splitmix64_mix(x));
  return epoch;
}

}  // namespace

int qp_rules_state(QpState state) {
  switch (state) {
    case QpState::Reset: return METAROCE_QPS_RESET;
    case QpState::Init: return METAROCE_QPS_INIT;
    case QpState::ReadyToReceive: return METAROCE_QPS_RTR;
    case QpState::ReadyToSend: return METAROCE_QPS_RTS;
    case QpState::Error: return METAROCE_QPS_ERR;
  }
  return -1;
}

struct Endpoint::CompletionQueue {
  uint32_t capacity = 0;
  RingQueue<Completion> entries;
};

Endpoint::Endpoint(const EndpointConfig& config, std::shared_ptr<MemoryRegistry> memory)
    : config_(config),
      epoch_(epoch_of(config)),
      memory_(memory ? std::move(memory)
                     : std::make_shared<MemoryRegistry>(splitmix64_mix(seed_of(config) ^ 0x6b657973))) {
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
  for (const TransmitSlot& slot : awake_)
    if (slot.peer->connection->sending_to_us(now)) ++count;
  return count;
}

uint64_t Endpoint::rate_hint_bps(Time now) const {
  const double capacity = static_cast<double>(inbound_capacity_bps());
  const size_t senders = std::max<size_t>(1, active_senders(now));
  const double equal = capacity / static_cast<double>(senders);
  double light_bps = 0;
  size_t light = 0;
  for (const TransmitSlot& slot : awake_) {
    const Connection& connection = *slot.peer->connection;
    if (!connection.sending_to_us(now)) continue;
    const double rate = connection.recent_rx_rate_bps(now);
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
  awaken_all();
  for (auto& [id, peer] : connections_) peer.connection->on_plane_change(now, plane, up);
}

void Endpoint::set_congestion(const CongestionConfig& cc) {
  config_.cc = cc;
  const CongestionParams params = congestion_params();
  awaken_all();
  for (auto& [id, peer] : connections_) peer.connection->set_congestion(params);
}

// --- completion queues ----------------------------------------------------------

uint32_t Endpoint::create_cq(uint32_t capacity) {
  const uint32_t id = next_cq_++;
  auto cq = std::make_unique<CompletionQueue>();
  cq->capacity = capacity;
  cqs_.emplace(id, std::move(cq));
  return id;
}

bool Endpoint::cq_in_use(uint32_t cq) const {
  for (const auto& [qpn, qp] : qps_)
    if (qp->send_cq() == cq || qp->recv_cq() == cq) return true;
  for (const auto& [qpn, qp] : ud_qps_)
    if (qp->send_cq() == cq || qp->recv_cq() == cq) return true;
  return false;
}

PostResult Endpoint::destroy_cq(uint32_t cq) {
  // As in verbs, a CQ that a QP still uses cannot be destroyed.
  if (cq_in_use(cq)) return PostResult::BadState;
  return cqs_.erase(cq) ? PostResult::Ok : PostResult::NoSuchObject;
}

size_t Endpoint::poll_cq(uint32_t cq, std::span<Completion> out) {
  auto it = cqs_.find(cq);
  if (it == cqs_.end()) return 0;
  auto& entries = it->second->entries;
  const size_t n = std::min(out.size(), entries.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = entries.front();
    entries.pop_front();
  }
  return n;
}

size_t Endpoint::cq_depth(uint32_t cq) const {
  auto it = cqs_.find(cq);
  return it == cqs_.end() ? 0 : it->second->entries.size();
}

void Endpoint::push_flushed_receive(uint32_t cq, uint32_t qpn, uint64_t wr_id) {
  Completion c;
  c.wr_id = wr_id;
  c.status = WcStatus::WorkRequestFlushed;
  c.opcode = WcOpcode::Recv;
  c.qp_num = qpn;
  push_completion(cq, c);
}

void Endpoint::push_completion(uint32_t cq, const Completion& completion, bool owes_ack) {
  // A completion that data arriving here caused becomes visible only once
  // the ACK covering that data has been handed to the driver (when
  // poll_transmit has nothing more due), as an RDMA NIC acknowledges what
  // it placed before the application can see it: an application that
  // exits at its last completion leaves no peer waiting. Later completions
  // queue behind a held one, so a CQ keeps its order.
  if (owes_ack || !held_completions_.empty()) {
    if (owes_ack) completions_releasable_ = false;  // its ACK is not handed out yet
    held_completions_.emplace_back(cq, completion);
    return;
  }
  deliver_completion(cq, completion);
}

void Endpoint::deliver_completion(uint32_t cq, const Completion& completion) {
  auto it = cqs_.find(cq);
  if (it == cqs_.end()) return;
  it->second->entries.push_back(completion);
  if (completion_observer_) completion_observer_(cq);
}

void Endpoint::release_completions() {
  completions_releasable_ = false;
  if (held_completions_.empty()) return;
  for (const auto& [cq, completion] : held_completions_) deliver_completion(cq, completion);
  held_completions_.clear();
  completions_released_ = true;
}

void Endpoint::flush_owed(Time now) {
  awaken_all();
  for (auto& [peer, state] : connections_) state.connection->ack_everything_now();
  (void)now;
}

// --- shared receive queues -------------------------------------------------------

uint32_t Endpoint::create_srq(uint32_t pd, uint32_t max_wr) {
  const uint32_t id = next_srq_++;
  srqs_.emplace(id, std::make_unique<SharedReceiveQueue>(id, pd, std::max<uint32_t>(max_wr, 1)));
  return id;
}

PostResult Endpoint::destroy_srq(uint32_t srq) {
  auto it = srqs_.find(srq);
  if (it == srqs_.end()) return PostResult::NoSuchObject;
  if (it->second->users != 0) return PostResult::BadState;
  srqs_.erase(it);
  return PostResult::Ok;
}

PostResult Endpoint::post_srq_recv(uint32_t srq, const RecvWr& wr) {
  auto it = srqs_.find(srq);
  return it == srqs_.end() ? PostResult::NoSuchObject : it->second->post(wr);
}

PostResult Endpoint::modify_srq(uint32_t srq, std::optional<uint32_t> max_wr, std::optional<uint32_t> limit) {
  auto it = srqs_.find(srq);
  return it == srqs_.end() ? PostResult::NoSuchObject : it->second->modify(max_wr, limit);
}

std::optional<SrqAttributes> Endpoint::query_srq(uint32_t srq) const {
  auto it = srqs_.find(srq);
  if (it == srqs_.end()) return std::nullopt;
  return SrqAttributes{it->second->max_wr(), it->second->limit(), it->second->depth()};
}

// --- queue pairs --------------------------------------------------------------

bool Endpoint::qpn_taken(uint32_t qpn) const { return qps_.count(qpn) || ud_qps_.count(qpn); }

uint32_t Endpoint::create_qp(uint32_t pd, uint32_t send_cq, uint32_t recv_cq, const QpConfig& config, uint32_t srq) {
  if (next_qpn_index_ >= config_.max_qps) return 0;
  return create_qp_numbered(config_.qpn_base + next_qpn_index_++, pd, send_cq, recv_cq, config, srq);
}

uint32_t Endpoint::create_qp_numbered(uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq,
                                      const QpConfig& config, uint32_t srq) {
  if (qpn == 0 || qpn_taken(qpn) || !cqs_.count(send_cq) || !cqs_.count(recv_cq)) return 0;
  SharedReceiveQueue* shared = nullptr;
  if (srq) {
    auto it = srqs_.find(srq);
    if (it == srqs_.end()) return 0;
    shared = it->second.get();
  }
  QpConfig resolved = config;
  resolved.max_send_wr = std::min(resolved.max_send_wr, config_.max_outstanding_messages);
  qps_.emplace(qpn, std::make_unique<QueuePair>(*this, qpn, pd, send_cq, recv_cq, resolved, shared));
  if (shared) ++shared->users;
  return qpn;
}

uint32_t Endpoint::create_ud_qp(uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq, uint32_t srq,
                                const QpConfig& config, uint32_t max_message) {
  if (qpn == 0) {
    if (next_qpn_index_ >= config_.max_qps) return 0;
    qpn = config_.qpn_base + next_qpn_index_++;
  }
  if (qpn_taken(qpn) || !cqs_.count(send_cq) || !cqs_.count(recv_cq)) return 0;
  SharedReceiveQueue* shared = nullptr;
  if (srq) {
    auto it = srqs_.find(srq);
    if (it == srqs_.end()) return 0;
    shared = it->second.get();
  }
  const uint32_t message = std::min(max_message, config_.mtu);
  ud_qps_.emplace(qpn, std::make_unique<UdQueuePair>(*this, qpn, pd, send_cq, recv_cq, shared, config, message));
  if (shared) ++shared->users;
  return qpn;
}

PostResult Endpoint::post_send_ud(uint32_t qpn, const UdSendWr& wr) {
  UdQueuePair* qp = find_ud_qp(qpn);
  return qp ? qp->post_send(wr) : PostResult::NoSuchObject;
}

PostResult Endpoint::destroy_qp(uint32_t qpn) {
  if (QueuePair* qp = find_qp(qpn)) {
    awaken_qp_connection(qp);
    if (Connection* connection = qp->connection()) {
      // The peer may still wait for this QP's last stream ACK.
      connection->farewell(*qp);
      connection->detach(qp);
    }
    if (qp->srq()) --qp->srq()->users;
    qps_.erase(qpn);
    return PostResult::Ok;
  }
  if (UdQueuePair* ud = find_ud_qp(qpn)) {
    if (ud->srq()) --ud->srq()->users;
    ud_qps_.erase(qpn);
    return PostResult::Ok;
  }
  return PostResult::NoSuchObject;
}

QueuePair* Endpoint::find_qp(uint32_t qpn) const {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : it->second.get();
}

UdQueuePair* Endpoint::find_ud_qp(uint32_t qpn) const {
  auto it = ud_qps_.find(qpn);
  return it == ud_qps_.end() ? nullptr : it->second.get();
}

PostResult Endpoint::modify_qp(uint32_t qpn, const QpModify& modify) {
  QueuePair* qp = find_qp(qpn);
  UdQueuePair* ud = qp ? nullptr : find_ud_qp(qpn);
  if (!qp && !ud) return PostResult::NoSuchObject;
  const QpState from = qp ? qp->state() : ud->state();
  if (!metaroce_qp_transition_exists(ud != nullptr, qp_rules_state(from), qp_rules_state(modify.next)))
    return PostResult::BadState;
  if (ud) {
    ud->modify(modify.next, modify.qkey);
    return PostResult::Ok;
  }
  if (modify.next == from && from != QpState::Error && from != QpState::Reset) return PostResult::Ok;
  awaken_qp_connection(qp);
  switch (modify.next) {
    case QpState::Init: qp->to_init(); break;
    case QpState::ReadyToReceive: {
      QpConfig resolved = modify.config.value_or(QpConfig{});
      resolved.max_send_wr = std::min(qp->config().max_send_wr, config_.max_outstanding_messages);
      resolved.max_recv_wr = qp->config().max_recv_wr;
      Connection* connection = connection_for(modify.peer, true);
      if (qp->connection() && qp->connection() != connection) qp->connection()->detach(qp);
      qp->to_rtr(connection, modify.remote_qpn, resolved);
      connection->attach(qp);
      awaken_qp_connection(qp);
      break;
    }
    case QpState::ReadyToSend:
      if (modify.config) qp->set_requester_config(*modify.config);
      qp->to_rts();
      break;
    case QpState::Error: qp->to_error(/*requested=*/true); break;
    case QpState::Reset:
      if (qp->connection()) qp->connection()->detach(qp);
      qp->to_reset();
      break;
  }
  return PostResult::Ok;
}

PostResult Endpoint::connect_qp(uint32_t qpn, PeerId peer, uint32_t remote_qpn, const QpConfig& config) {
  for (const QpModify& step :
       {QpModify{.next = QpState::Init},
        QpModify{.next = QpState::ReadyToReceive, .peer = peer, .remote_qpn = remote_qpn, .config = config},
        QpModify{.next = QpState::ReadyToSend}})
    if (const PostResult r = modify_qp(qpn, step); r != PostResult::Ok) return r;
  return PostResult::Ok;
}

std::optional<QpState> Endpoint::qp_state(uint32_t qpn) const {
  if (const QueuePair* qp = find_qp(qpn)) return qp->state();
  if (const UdQueuePair* ud = find_ud_qp(qpn)) return ud->state();
  return std::nullopt;
}

const RetryExhaustion* Endpoint::retry_exhaustion(uint32_t qpn) const {
  const QueuePair* qp = find_qp(qpn);
  return qp ? qp->retry_exhaustion() : nullptr;
}

PostResult Endpoint::post_send(uint32_t qpn, const SendWr& wr) {
  QueuePair* qp = find_qp(qpn);
  if (!qp) return PostResult::NoSuchObject;
  awaken_qp_connection(qp);
  return qp->post_send(wr);
}

PostResult Endpoint::post_recv(uint32_t qpn, const RecvWr& wr) {
  if (QueuePair* qp = find_qp(qpn)) {
    awaken_qp_connection(qp);
    return qp->post_recv(wr);
  }
  if (UdQueuePair* ud = find_ud_qp(qpn)) return ud->post_recv(wr);
  return PostResult::NoSuchObject;
}

// --- connections and I/O ---------------------------------------------------------

Endpoint::Peer* Endpoint::peer_for(PeerId peer, bool create) {
  auto it = connections_.find(peer);
  if (it != connections_.end()) return &it->second;
  if (!create) return nullptr;
  Peer& fresh = connections_[peer];
  fresh.connection = std::make_unique<Connection>(*this, peer);
  fresh.distance = transmit_distance(peer);
  awake_.reserve(connections_.size());
  return &fresh;
}

uint64_t Endpoint::transmit_distance(PeerId peer) const {
  const uint64_t key = transmit_key_of_ ? transmit_key_of_(peer) : peer;
  // Modulo 2^64: the keys after the own key come first, a key equal to it last.
  return key - transmit_own_key_ - 1;
}

void Endpoint::awaken(PeerId id, Peer& peer) {
  if (peer.awake) return;
  peer.awake = true;
  const TransmitSlot slot{peer.distance, id, &peer};
  awake_.insert(std::upper_bound(awake_.begin(), awake_.end(), slot), slot);
}

void Endpoint::awaken_all() {
  for (auto& [id, peer] : connections_) awaken(id, peer);
}

void Endpoint::awaken_qp_connection(const QueuePair* qp) {
  if (!qp->connection()) return;
  auto it = connections_.find(qp->connection()->peer());
  if (it != connections_.end()) awaken(it->first, it->second);
}

void Endpoint::set_transmit_order(uint64_t own_key, std::function<uint64_t(PeerId)> key_of) {
  transmit_own_key_ = own_key;
  transmit_key_of_ = std::move(key_of);
  awake_.clear();
  tx_last_.reset();
  for (auto& [id, peer] : connections_) {
    peer.distance = transmit_distance(id);
    if (peer.awake) awake_.push_back(TransmitSlot{peer.distance, id, &peer});
  }
  std::sort(awake_.begin(), awake_.end());
}

Connection* Endpoint::connection_for(PeerId peer, bool create) {
  Peer* p = peer_for(peer, create);
  return p ? p->connection.get() : nullptr;
}

void Endpoint::set_peer_key(PeerId peer, const PairKey& key, uint8_t role) {
  peer_for(peer, true)->session.set_pair_key(key, role);
}

void Endpoint::on_datagram(Time now, PeerId from, std::span<const uint8_t> datagram, bool ce_marked, Time arrival) {
  ++counters_.rx_datagrams;
  // Nothing is looked up or allocated for a datagram that is malformed or
  // fails its integrity check; nothing changes for one that fails any check.
  wire::Packet& packet = rx_packet_;
  wire::CommonHeader& common = packet.common;
  if (wire::decode_common(datagram, common) != wire::DecodeStatus::Ok ||
      datagram.size() < wire::kCommonHeaderBytes + wire::trailer_bytes(common.security)) {
    ++counters_.rx_drop_malformed;
    return;
  }
  // UD datagrams belong to no connection (on_ud_datagram).
  if (common.type == wire::PacketType::UdSend) {
    ++counters_.rx_drop_malformed;
    return;
  }
  if (common.security != config_.security) {
    ++counters_.rx_drop_security_mode;
    return;
  }
  const bool integrity_only = common.security == wire::Security::Integrity;
  std::span<const uint8_t> inner = datagram.first(datagram.size() - wire::trailer_bytes(common.security));
  if (integrity_only) {
    if (!check_integrity(datagram)) {
      ++counters_.rx_drop_integrity;
      return;
    }
    // Without keys the body can be decoded before anything is looked up.
    if (wire::decode(inner, packet) != wire::DecodeStatus::Ok) {
      ++counters_.rx_drop_malformed;
      return;
    }
  }
  Peer* peer = peer_for(from, false);
  if (!peer) {
    ++counters_.rx_drop_unknown_peer;
    return;
  }
  if (common.dst_epoch != 0 && common.dst_epoch != epoch_) {
    ++counters_.rx_drop_stale_epoch;
    return;
  }
  PeerSession& session = peer->session;
  const PeerSession::EpochVerdict verdict = session.classify(common.src_epoch, now, min_rto());
  if (verdict == PeerSession::EpochVerdict::Stale) {
    ++counters_.rx_drop_stale_epoch;
    return;
  }
  const bool fresh_epoch = verdict == PeerSession::EpochVerdict::New;
  latest_now_ = std::max(latest_now_, now);
  awaken(from, *peer);
  // A new incarnation's numbering starts from nothing.
  static const ReplayWindow unseen;
  const ReplayWindow& window = fresh_epoch ? unseen : session.window(common.dst_epoch != 0);
  const uint64_t number = window.expand(common.packet_number);
  if (window.check(number) != ReplayWindow::Check::Fresh) {
    ++counters_.rx_drop_replay;
    return;
  }
  std::unique_ptr<TrafficKey> candidate;
  if (!integrity_only) {
    if (!session.keyed()) {
      ++counters_.rx_drop_no_key;
      return;
    }
    TrafficKey* key = nullptr;
    if (fresh_epoch) {
      candidate = session.candidate_key(common.src_epoch, common.dst_epoch);
      key = candidate.get();
    } else {
      key = session.rx_key(common.src_epoch, common.dst_epoch);
    }
    if (common.security == wire::Security::Encrypt) rx_plain_.resize(inner.size());
    if (!key || !key->open(common.security, datagram, number, rx_plain_)) {
      ++counters_.rx_drop_integrity;
      return;
    }
    if (common.security == wire::Security::Encrypt) inner = rx_plain_;
    if (wire::decode(inner, packet) != wire::DecodeStatus::Ok) {
      ++counters_.rx_drop_malformed;
      return;
    }
  }
  if (fresh_epoch) {
    const bool restart = session.peer_epoch() != 0;
    session.adopt(common.src_epoch);
    if (restart) {
      ++counters_.peer_restarts;
      peer->connection->on_peer_restart();
    }
  }
  // A QP incarnation talks to one peer incarnation: data for a QP that
  // bound itself to an earlier one of the peer is stale.
  if (packet.common.type == wire::PacketType::Data) {
    QueuePair* qp = find_qp(packet.data.dst_qpn);
    if (qp && qp->connection() == peer->connection.get() && !qp->bind_peer_epoch(common.src_epoch)) {
      ++counters_.rx_drop_stale_epoch;
      return;
    }
  }
  session.window(common.dst_epoch != 0).accept(number);
  session.heard(now);
  peer->connection->on_packet(now, packet, ce_marked, arrival != 0 && arrival <= now ? arrival : now);
}

size_t Endpoint::seal_datagram(PeerId peer, std::span<uint8_t> buf, size_t length) {
  Peer* p = peer_for(peer, false);
  if (!p || length < wire::kCommonHeaderBytes || buf.size() < length + wire::trailer_bytes(config_.security)) return 0;
  return frame(*p, buf, length);
}

size_t Endpoint::frame(Peer& peer, std::span<uint8_t> buf, size_t length, std::span<const uint8_t> gathered) {
  PeerSession& session = peer.session;
  const uint32_t dst_epoch = session.peer_epoch();
  const uint64_t number = session.next_packet_number(dst_epoch);
  wire::stamp_common(buf, config_.security, epoch_, dst_epoch, static_cast<uint32_t>(number));
  if (config_.security == wire::Security::Integrity) {
    seal_integrity(buf, length - gathered.size(), gathered);
    return length + wire::kIntegrityTrailerBytes;
  }
  TrafficKey* key = session.tx_key(epoch_, dst_epoch);
  if (!key || !key->seal(config_.security, buf, length, number)) {
    ++counters_.tx_drop_no_key;
    return 0;
  }
  return length + wire::kAuthTagBytes;
}

void Endpoint::on_ud_datagram(const UdAddresses& addresses, std::span<const uint8_t> datagram) {
  ++counters_.rx_datagrams;
  // UD datagrams come from anyone and belong to no connection: they carry
  // the integrity trailer in every security mode, and the Q_Key is their
  // access control, as in InfiniBand (docs/spec.md 6a).
  wire::Packet& packet = rx_packet_;
  if (wire::decode_common(datagram, packet.common) != wire::DecodeStatus::Ok ||
      packet.common.type != wire::PacketType::UdSend ||
      datagram.size() < wire::kCommonHeaderBytes + wire::kIntegrityTrailerBytes) {
    ++counters_.rx_drop_malformed;
    return;
  }
  if (packet.common.security != wire::Security::Integrity) {
    ++counters_.rx_drop_security_mode;
    return;
  }
  if (!check_integrity(datagram)) {
    ++counters_.rx_drop_integrity;
    return;
  }
  if (wire::decode(datagram.first(datagram.size() - wire::kIntegrityTrailerBytes), packet) != wire::DecodeStatus::Ok) {
    ++counters_.rx_drop_malformed;
    return;
  }
  UdQueuePair* qp = find_ud_qp(packet.ud.dst_qpn);
  if (!qp) {
    ++counters_.rx_drop_ud_unknown_qp;
    return;
  }
  qp->on_datagram(packet, addresses, counters_);
}

void Endpoint::on_timer(Time now) {
  latest_now_ = std::max(latest_now_, now);
  for (const TransmitSlot& slot : awake_) slot.peer->connection->on_timer(now);
}

std::optional<TxDatagram> Endpoint::poll_transmit(Time now, std::span<uint8_t> buf) {
  // UD sends first: each is one datagram, sent once, under no window.
  if (!ud_qps_.empty()) {
    auto it = ud_qps_.upper_bound(ud_tx_cursor_);
    for (size_t i = 0; i < ud_qps_.size(); ++i, ++it) {
      if (it == ud_qps_.end()) it = ud_qps_.begin();
      while (it->second->has_pending()) {
        if (buf.size() <= wire::kIntegrityTrailerBytes) return std::nullopt;
        PeerId peer = 0;
        size_t length = it->second->build_next(buf.first(buf.size() - wire::kIntegrityTrailerBytes), peer);
        if (length == 0) continue;
        wire::stamp_common(buf, wire::Security::Integrity, epoch_, 0, 0);
        seal_integrity(buf, length);
        length += wire::kIntegrityTrailerBytes;
        ud_tx_cursor_ = it->first;
        ++counters_.tx_ud_datagrams;
        return TxDatagram{peer, 0, 0, static_cast<uint32_t>(length)};  // path 0's slot and plane
      }
    }
  }
  if (connections_.empty()) return std::nullopt;
  if (buf.size() <= wire::kMaxTrailerBytes) return std::nullopt;
  const std::span<uint8_t> body = buf.first(buf.size() - wire::kMaxTrailerBytes);
  const bool gather = config_.gather_payload && config_.security == wire::Security::Integrity;
  // Round-robin over the listed connections in transmit order, from the one
  // after the connection served last.
  latest_now_ = std::max(latest_now_, now);
  auto it = tx_last_ ? std::upper_bound(awake_.begin(), awake_.end(), *tx_last_) : awake_.begin();
  for (size_t i = 0; i < awake_.size(); ++i) {
    if (it == awake_.end()) it = awake_.begin();
    const TransmitSlot slot = *it;
    uint16_t path_id = 0;
    std::span<const uint8_t> gathered;
    size_t length = slot.peer->connection->poll_transmit(now, body, path_id, gather ? &gathered : nullptr);
    if (length > 0) length = frame(*slot.peer, buf, length, gathered);
    if (length > 0) {
      tx_last_ = slot;
      const auto head =
          static_cast<uint32_t>(gathered.empty() ? 0 : length - wire::kIntegrityTrailerBytes - gathered.size());
      return TxDatagram{slot.id, path_id, plane_of_path(path_id), static_cast<uint32_t>(length), head, gathered};
    }
    ++it;
  }
  if (config_.driver_releases_completions) completions_releasable_ = !held_completions_.empty();
  else release_completions();
  return std::nullopt;
}

size_t Endpoint::max_datagram_bytes() const {
  return std::max<size_t>(config_.mtu + wire::kDataHeaderBytes + 16, wire::kMaxAckBytes) + wire::kMaxTrailerBytes;
}

Time Endpoint::next_wakeup() const {
  if (!held_completions_.empty()) return 0;
  for (const auto& [qpn, qp] : ud_qps_)
    if (qp->has_pending()) return 0;
  Time wake = kNever;
  for (auto it = awake_.begin(); it != awake_.end();) {
    const Time at = it->peer->connection->next_wakeup();
    if (at == kNever && !it->peer->connection->sending_to_us(latest_now_)) {
      it->peer->awake = false;
      it = awake_.erase(it);
      continue;
    }
    wake = std::min(wake, at);
    ++it;
  }
  return wake;
}

std::vector<PeerId> Endpoint::peers() const {
  std::vector<PeerId> out;
  out.reserve(connections_.size());
  for (const auto& [id, peer] : connections_) out.push_back(id);
  return out;
}

std::vector<PathSnapshot> Endpoint::path_snapshots(PeerId peer) const {
  auto it = connections_.find(peer);
  if (it == connections_.end()) return {};
  return it->second.connection->snapshots();
}

}  // namespace metaroce::transport
