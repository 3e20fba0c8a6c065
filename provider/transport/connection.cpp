// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "connection.h"

#include <algorithm>
#include <cmath>

#include "endpoint.h"
#include "queue_pair.h"

namespace metaroce::transport {
namespace {

// Ethernet + IPv4 + UDP headers, FCS, preamble and inter-frame gap: what a
// datagram costs on the wire beyond its UDP payload. Used for pacing only.
constexpr uint32_t kWireOverheadBytes = 66;
constexpr uint32_t kMaxBackoffShift = 10;

bool seq_after(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

Time ceil_ns(double ns) { return ns <= 0 ? 0 : static_cast<Time>(std::ceil(ns)); }

}  // namespace

const char* to_string(PathHealth health) {
  switch (health) {
    case PathHealth::Active: return "active";
    case PathHealth::Suspect: return "suspect";
    case PathHealth::Failed: return "failed";
  }
  return "?";
}

Connection::Connection(Endpoint& endpoint, PeerId peer)
    : endpoint_(endpoint), peer_(peer), profile_(endpoint.config().profile) {
  const EndpointConfig& config = endpoint.config();
  const uint16_t count = rocev2() ? 1 : std::clamp<uint16_t>(config.paths, 1, wire::kMaxPaths);
  const CongestionParams params = endpoint.congestion_params();
  paths_.reserve(count);
  for (uint16_t i = 0; i < count; ++i) {
    paths_.emplace_back(i, config.base_rtt_ns, params);
    paths_.back().stats.path_id = i;
    paths_.back().stats.plane = endpoint.plane_of_path(i);
    if (!endpoint.plane_up(paths_.back().stats.plane)) paths_.back().health = PathHealth::Failed;
  }
}

void Connection::on_plane_change(Time now, uint16_t plane, bool up) {
  for (SendPath& path : paths_) {
    if (path.stats.plane != plane) continue;
    if (up) {
      // Probed at once: the NIC is back, the fabric behind it may not be.
      path.health = PathHealth::Failed;
      path.probe_interval = endpoint_.probe_interval();
      path.probe_at = now;
      continue;
    }
    for (TxRecord& record : path.records)
      if (record.state == TxRecord::State::InFlight) declare_lost(path, record);
    path.health = PathHealth::Failed;
    path.probe_at = kNever;  // until the plane is up
    path.rto_deadline = kNever;
    path.rewinding = false;
    ++endpoint_.counters_.plane_drains;
  }
}

void Connection::attach(QueuePair* qp) {
  if (std::find(qps_.begin(), qps_.end(), qp) == qps_.end()) qps_.push_back(qp);
}

void Connection::detach(QueuePair* qp) {
  qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end());
  qp_cursor_ = 0;
}

void Connection::set_congestion(const CongestionParams& params) {
  for (SendPath& path : paths_) path.cc.set_params(params);
}

QueuePair* Connection::attached_qp(uint32_t qpn) const {
  for (QueuePair* qp : qps_)
    if (qp->qpn() == qpn) return qp;
  return nullptr;
}

Time Connection::rto(const SendPath& path) const {
  const EndpointConfig& c = endpoint_.config();
  const Time base = path.rtt.rto(endpoint_.min_rto(), c.max_rto_ns);
  return std::min<Time>(base << std::min(path.consecutive_rtos, kMaxBackoffShift), c.max_rto_ns);
}

wire::Origin Connection::origin(uint16_t path_id) const { return {path_id, endpoint_.config().home_port}; }

Time Connection::activity_window() const { return 4 * endpoint_.config().base_rtt_ns + endpoint_.ack_delay(); }

bool Connection::sending_to_us(Time now) const { return any_data_rx_ && now - last_data_rx_ <= activity_window(); }

void Connection::count_rx_bytes(Time now, uint64_t bytes) {
  const Time window = activity_window();
  if (now - rx_window_start_ >= window) {
    rx_prev_window_bytes_ = now - rx_window_start_ < 2 * window ? rx_window_bytes_ : 0;
    rx_window_bytes_ = 0;
    rx_window_start_ = now;
  }
  rx_window_bytes_ += bytes;
}

double Connection::recent_rx_rate_bps(Time now) const {
  const Time window = activity_window();
  const Time elapsed = now - rx_window_start_;
  if (elapsed >= 2 * window) return 0;
  if (elapsed >= window) return static_cast<double>(rx_window_bytes_) * 8e9 / static_cast<double>(elapsed);
  return static_cast<double>(rx_prev_window_bytes_ + rx_window_bytes_) * 8e9 / static_cast<double>(window + elapsed);
}

// --- receive ---------------------------------------------------------------

void Connection::on_packet(Time now, const wire::Packet& packet, bool ce_marked) {
  last_peer_rx_ = now;
  any_peer_rx_ = true;
  switch (packet.common.type) {
    case wire::PacketType::Data: on_data(now, packet, ce_marked); break;
    case wire::PacketType::Ack: on_ack(now, packet.ack); break;
    case wire::PacketType::Nak: on_nak(now, packet.nak); break;
    case wire::PacketType::Probe: {
      Control reply;
      reply.type = wire::PacketType::ProbeReply;
      reply.path_id = packet.common.path_id;
      reply.probe = packet.probe;
      rx_path_count_ = std::max<uint16_t>(rx_path_count_, static_cast<uint16_t>(packet.common.path_id + 1));
      control_.push_back(reply);
      break;
    }
    case wire::PacketType::ProbeReply: on_probe_reply(now, packet); break;
  }
}

void Connection::on_data(Time now, const wire::Packet& p, bool ce_marked) {
  EndpointCounters& counters = endpoint_.counters_;
  const wire::DataHeader& h = p.data;
  QueuePair* qp = attached_qp(h.dst_qpn);
  if (!qp || qp->remote_qpn() != h.src_qpn) {
    ++counters.rx_drop_unknown_qp;
    return;
  }
  const uint16_t path_id = p.common.path_id;
  if (rocev2()) {
    if (path_id != 0) {
      ++counters.rx_drop_bad_request;
      return;
    }
    switch (in_order_.classify(h.path_seq)) {
      case InOrderReceiver::Arrival::Expected: break;
      case InOrderReceiver::Arrival::Duplicate:
        ++counters.rx_duplicate_completed;
        dirty_paths_ |= 1;
        ack_now_ = true;
        unacked_packets_ = std::max<uint32_t>(unacked_packets_, 1);
        return;
      case InOrderReceiver::Arrival::OutOfOrder:
        ++counters.rx_drop_out_of_order;
        if (in_order_.take_nak_due()) {
          wire::Nak nak;
          nak.kind = wire::NakKind::Sequence;
          nak.data_path_id = 0;
          nak.qpn = qp->remote_qpn();
          nak.msn = h.msn;
          nak.expected_seq = in_order_.expected();
          queue_nak(0, nak);
        }
        return;
    }
  }

  const Verdict verdict = wire::is_request(h.opcode) ? qp->on_request(p) : qp->on_response(p);
  // The rocev2 PSN advances only for a packet the QP did not refuse outright.
  if (rocev2() && verdict != Verdict::OutOfWindow && verdict != Verdict::QpNotReady) in_order_.record(h.path_seq);
  switch (verdict) {
    case Verdict::Placed: break;
    case Verdict::DuplicateChunk: ++counters.rx_duplicate_chunk; break;
    case Verdict::DuplicateComplete: ++counters.rx_duplicate_completed; ack_now_ = true; break;
    case Verdict::OutOfWindow: ++counters.rx_drop_out_of_window; return;
    case Verdict::QpNotReady: ++counters.rx_drop_qp_state; return;
    case Verdict::ReceiverNotReady: ++counters.rx_drop_rnr; break;
    case Verdict::AccessError: ++counters.rx_drop_access; break;
    case Verdict::InvalidRequest: ++counters.rx_drop_bad_request; break;
    case Verdict::StaleResponse: ++counters.rx_drop_stale_response; break;
  }
  ++counters.rx_data_packets;
  if (verdict == Verdict::Placed && !wire::is_request(h.opcode)) note_progress(now);

  // The path saw this packet whatever the message layer decided: path
  // reliability is about the network, message problems travel in NAKs.
  if (!rocev2()) {
    bool gap = false;
    ReceiveScoreboard& board = scoreboards_[path_id];
    const uint32_t highest_before = board.highest();
    const bool first = board.empty();
    board.record(h.path_seq, gap);
    if (first || board.highest() != highest_before) highest_rx_time_[path_id] = now;
    if (gap) ack_now_ = true;
    if (ce_marked) scoreboards_[path_id].count_ce();
  } else if (ce_marked) {
    in_order_.count_ce();
  }
  if (ce_marked) ++counters.rx_ce_marked;
  dirty_paths_ |= uint64_t{1} << path_id;
  if (unacked_packets_++ == 0) oldest_unacked_ = now;
  if (h.flags & wire::kFlagAckRequest) ack_now_ = true;
  rx_path_count_ = std::max<uint16_t>(rx_path_count_, static_cast<uint16_t>(path_id + 1));
  last_data_rx_ = now;
  any_data_rx_ = true;
  count_rx_bytes(now, wire::kDataHeaderBytes + p.payload.size());
}

void Connection::on_ack(Time now, const wire::Ack& ack) {
  ++endpoint_.counters_.rx_acks;
  rate_hint_bps_ = uint64_t{ack.rate_hint_mbps} * 1'000'000;
  for (uint8_t i = 0; i < ack.path_count; ++i) {
    const wire::PathSack& block = ack.paths[i];
    const Time holding = block.holding_ns != 0 ? block.holding_ns : ack.ack_delay_ns;
    if (block.path_id < paths_.size()) on_path_sack(now, paths_[block.path_id], block, holding);
  }
  for (uint8_t i = 0; i < ack.stream_count; ++i) {
    QueuePair* qp = attached_qp(ack.streams[i].qpn);
    if (qp && qp->on_stream_ack(ack.streams[i].completed_msn)) note_progress(now);
  }
}

void Connection::on_path_sack(Time now, SendPath& path, const wire::PathSack& block, Time ack_delay) {
  if (path.records.empty()) return;
  const uint32_t highest = block.highest_seq;
  // Sequence numbers the ACK can speak about: first_seq .. highest.
  if (seq_after(path.first_seq, highest)) return;
  const uint64_t upto = std::min<uint64_t>(uint64_t{highest - path.first_seq} + 1, path.records.size());
  uint32_t acked_bytes = 0;
  uint32_t acked_packets = 0;
  Time rtt_sample = 0;
  for (uint64_t i = 0; i < upto; ++i) {
    TxRecord& record = path.records[i];
    const uint32_t seq = path.first_seq + static_cast<uint32_t>(i);
    const bool covered = rocev2() || block.covers(seq);
    if (covered) {
      if (record.state == TxRecord::State::Acked) continue;
      if (record.state == TxRecord::State::Lost) {
        ++endpoint_.counters_.spurious_retransmits;
      } else {
        path.inflight_bytes -= record.bytes;
        acked_bytes += record.bytes;
        ++acked_packets;
        if (seq == highest && now > record.sent + ack_delay) rtt_sample = now - record.sent - ack_delay;
      }
      record.state = TxRecord::State::Acked;
      // Progress means a chunk acknowledged for the first time, not a probe
      // of one already acknowledged.
      QueuePair* qp = attached_qp(record.ref.qpn);
      if (qp && qp->on_chunk_acked(record.ref)) note_progress(now);
    } else if (record.state == TxRecord::State::InFlight) {
      // Paths are FIFO: a later packet arrived, so this one was lost.
      declare_lost(path, record);
    }
  }
  if (!path.any_acked || seq_after(highest, path.highest_acked)) path.highest_acked = highest;
  path.any_acked = true;
  if (rtt_sample) path.rtt.on_sample(rtt_sample);
  const uint32_t marks = block.ce_count - path.last_ce_count;
  path.last_ce_count = block.ce_count;
  path.stats.ecn_marks += marks;
  if (acked_packets > 0) {
    path.cc.on_ack(now, acked_bytes, acked_packets, marks, rtt_sample, path.rtt.min_rtt(), path.rtt.srtt());
    path.consecutive_rtos = 0;
    if (path.health == PathHealth::Suspect) path.health = PathHealth::Active;
  }
  // Anything this far below the highest ACKed can no longer be reported.
  for (uint64_t i = 0; i < path.records.size(); ++i) {
    const uint32_t seq = path.first_seq + static_cast<uint32_t>(i);
    if (path.highest_acked - seq < wire::kSackBits) break;
    if (path.records[i].state == TxRecord::State::InFlight) declare_lost(path, path.records[i]);
  }
  trim(path);
  path.rto_deadline = path.inflight_bytes > 0 ? now + rto(path) : kNever;
}

void Connection::declare_lost(SendPath& path, TxRecord& record) {
  record.state = TxRecord::State::Lost;
  path.inflight_bytes -= record.bytes;
  ++path.stats.lost;
  retransmits_.push_back({record.ref, path.id, false});
}

void Connection::trim(SendPath& path) {
  while (!path.records.empty()) {
    const TxRecord& front = path.records.front();
    const bool forgettable =
        front.state == TxRecord::State::Acked ||
        (front.state == TxRecord::State::Lost && path.highest_acked - path.first_seq >= wire::kSackBits);
    if (!forgettable) break;
    path.records.pop_front();
    ++path.first_seq;
  }
}

void Connection::on_nak(Time now, const wire::Nak& nak) {
  ++endpoint_.counters_.rx_naks;
  if (nak.kind == wire::NakKind::Sequence) {
    if (!rocev2() || paths_.empty()) return;
    SendPath& path = paths_[0];
    // Everything before expected_seq arrived: a cumulative ACK up to it.
    wire::PathSack block;
    block.highest_seq = nak.expected_seq - 1;
    block.ce_count = path.last_ce_count;
    on_path_sack(now, path, block, 0);
    if (!seq_after(nak.expected_seq, path.next_seq) && !path.records.empty()) {
      path.rewinding = true;
      path.rewind_seq = nak.expected_seq;
      ++endpoint_.counters_.go_back_n;
    }
    return;
  }
  QueuePair* qp = attached_qp(nak.qpn);
  if (qp && qp->on_nak(now, nak)) note_progress(now);
}

void Connection::on_probe_reply(Time now, const wire::Packet& packet) {
  const uint16_t id = packet.common.path_id;
  if (id >= paths_.size()) return;
  SendPath& path = paths_[id];
  if (path.health == PathHealth::Active || packet.probe.probe_seq != path.probe_seq ||
      !endpoint_.plane_up(path.stats.plane))
    return;
  if (path.health == PathHealth::Failed) {
    path.cc.reset();
    ++endpoint_.counters_.path_recoveries;
  }
  path.health = PathHealth::Active;
  path.consecutive_rtos = 0;
  path.probe_at = kNever;
  path.probe_unanswered = false;
  if (packet.probe.timestamp <= now) path.rtt.on_sample(now - packet.probe.timestamp);
}

void Connection::note_progress(Time now) {
  last_progress_ = now;
  retry_count_ = 0;
}

void Connection::queue_nak(uint16_t path_id, const wire::Nak& nak) {
  Control c;
  c.type = wire::PacketType::Nak;
  c.path_id = path_id;
  c.nak = nak;
  control_.push_back(c);
}

// --- timers ------------------------------------------------------------------

bool Connection::has_outstanding_work() const {
  for (const QueuePair* qp : qps_)
    if (qp->has_outstanding_work()) return true;
  return false;
}

Time Connection::retry_deadline() const {
  if (!has_outstanding_work()) return kNever;
  Time base = endpoint_.min_rto();
  for (const SendPath& path : paths_) base = std::max(base, path.rtt.rto(endpoint_.min_rto(), endpoint_.config().max_rto_ns));
  Time qp_timeout = 0;
  for (const QueuePair* qp : qps_) qp_timeout = std::max(qp_timeout, qp->config().timeout_ns);
  // A verbs timeout is a fixed interval, so that retry_cnt + 1 of them bound
  // how long a dead peer takes to notice, as on an RDMA NIC. Without one the
  // engine's RTO doubles per expiry.
  if (qp_timeout > 0) return last_progress_ + std::max(base, qp_timeout);
  return last_progress_ + (base << std::min(retry_count_, kMaxBackoffShift));
}

void Connection::path_timeout(Time now, SendPath& path) {
  ++endpoint_.counters_.rto_expirations;
  ++path.consecutive_rtos;
  if (rocev2()) {
    // Go back to the oldest unacknowledged packet and resend from there.
    path.rewinding = true;
    path.rewind_seq = path.first_seq;
    ++endpoint_.counters_.go_back_n;
  } else if (!peer_answered_after_oldest_inflight(path)) {
    // Nothing at all came back from the peer since this path's oldest packet
    // in flight left: the peer or this host stalled (a busy CPU, a long
    // scheduling delay) or every path is down, which no choice of path
    // repairs. Resend the oldest packet, as TCP does on a timeout, to learn
    // which, and leave the path's health and the rest of its flight alone:
    // an ACK then resumes at full speed, and a dead peer is the retry
    // timer's to find.
    for (TxRecord& record : path.records) {
      if (record.state != TxRecord::State::InFlight) continue;
      declare_lost(path, record);
      break;
    }
  } else {
    // The peer answered after this path's packets left: they were lost (an
    // incast that overflowed a queue, a dead path), and a timeout that only
    // resent the oldest would leave the rest holding the connection window.
    for (TxRecord& record : path.records)
      if (record.state == TxRecord::State::InFlight) declare_lost(path, record);
    const EndpointConfig& config = endpoint_.config();
    if (path.consecutive_rtos >= config.path_fail_timeouts) {
      if (path.health != PathHealth::Failed) {
        path.health = PathHealth::Failed;
        path.probe_interval = endpoint_.probe_interval();
        path.probe_at = now + path.probe_interval;
        ++endpoint_.counters_.path_failures;
      }
    } else if (path.consecutive_rtos >= config.path_suspect_timeouts && path.health != PathHealth::Suspect) {
      // Probed at once, and again at the path's RTO: a data packet sent
      // to find out would hold its message until that RTO if lost.
      path.health = PathHealth::Suspect;
      path.probe_interval = rto(path);
      path.probe_at = now;
      path.probe_unanswered = false;
      hand_over_window(path);
    }
  }
  path.rto_deadline = path.inflight_bytes > 0 || path.rewinding ? now + rto(path) : kNever;
}

void Connection::hand_over_window(const SendPath& leaving) {
  std::vector<SendPath*> heirs;
  for (SendPath& path : paths_)
    if (&path != &leaving && path.health == PathHealth::Active && path.stats.plane == leaving.stats.plane)
      heirs.push_back(&path);
  for (SendPath* heir : heirs) heir->cc.absorb(static_cast<double>(leaving.cc.window()) / static_cast<double>(heirs.size()));
}

bool Connection::peer_answered_after_oldest_inflight(const SendPath& path) const {
  if (!any_peer_rx_) return false;
  for (const TxRecord& record : path.records)
    if (record.state == TxRecord::State::InFlight) return last_peer_rx_ > record.sent;
  return false;
}

void Connection::retry_timeout(Time now) {
  ++retry_count_;
  last_progress_ = now;
  for (QueuePair* qp : std::vector<QueuePair*>(qps_)) {
    if (!qp->has_outstanding_work()) continue;
    if (retry_count_ > qp->config().retry_cnt) {
      qp->fail_with(WcStatus::RetryExceeded);
      continue;
    }
    ChunkRef ref;
    if (qp->recover_stalled(ref)) retransmits_.push_back({ref, 0, true});
  }
}

void Connection::on_timer(Time now) {
  for (SendPath& path : paths_) {
    if (path.rto_deadline <= now) path_timeout(now, path);
    if (path.health != PathHealth::Active && path.probe_at <= now && endpoint_.plane_up(path.stats.plane)) {
      if (path.health == PathHealth::Suspect && path.probe_unanswered && any_peer_rx_ &&
          last_peer_rx_ > path.probe_sent_at) {
        // The previous probe went unanswered for the path's RTO while the
        // peer answered on other paths: a timeout of this path. (Silence
        // on every path is a stall that no choice of path repairs.)
        ++endpoint_.counters_.rto_expirations;
        if (++path.consecutive_rtos >= endpoint_.config().path_fail_timeouts) {
          path.health = PathHealth::Failed;
          path.probe_interval = endpoint_.probe_interval();
          ++endpoint_.counters_.path_failures;
        }
      }
      path.probe_unanswered = true;
      path.probe_sent_at = now;
      Control probe;
      probe.type = wire::PacketType::Probe;
      probe.path_id = path.id;
      probe.probe.probe_seq = ++path.probe_seq;
      probe.probe.timestamp = now;
      control_.push_back(probe);
      ++endpoint_.counters_.tx_probes;
      path.probe_interval = std::min<Time>(path.probe_interval * 2, endpoint_.config().max_rto_ns);
      path.probe_at = now + path.probe_interval;
    }
  }
  for (QueuePair* qp : qps_) qp->on_timer(now);
  if (retry_deadline() <= now) retry_timeout(now);
}

// --- transmit ----------------------------------------------------------------

bool Connection::ack_due(Time now) const {
  if (unacked_packets_ == 0 || dirty_paths_ == 0) return false;
  return ack_now_ || unacked_packets_ >= endpoint_.config().ack_every_packets ||
         now >= oldest_unacked_ + endpoint_.ack_delay();
}

uint32_t Connection::rate_hint_mbps(Time now) const {
  return static_cast<uint32_t>(std::min<uint64_t>(endpoint_.rate_hint_bps(now) / 1'000'000, UINT32_MAX));
}

size_t Connection::send_ack(Time now, std::span<uint8_t> out, uint16_t& path_id) {
  wire::Ack ack;
  ack.rate_hint_mbps = rate_hint_mbps(now);
  // How long the newest packet waited for this ACK (the sender samples RTT
  // on the newest packet it sees acknowledged).
  ack.ack_delay_ns = static_cast<uint32_t>(std::min<Time>(now - last_data_rx_, UINT32_MAX));
  uint64_t remaining = dirty_paths_;
  while (remaining != 0 && ack.path_count < wire::kMaxAckPathBlocks) {
    const uint16_t id = static_cast<uint16_t>(__builtin_ctzll(remaining));
    remaining &= remaining - 1;
    wire::PathSack& block = ack.paths[ack.path_count++];
    if (rocev2()) {
      in_order_.fill(id, block);
    } else {
      scoreboards_[id].fill(id, block);
      // Each path's own holding time: its newest packet may have arrived
      // well before the ACK's newest (another path's), and the sender's RTT
      // sample for the path would otherwise include the difference.
      block.holding_ns = static_cast<uint32_t>(std::min<Time>(now - highest_rx_time_[id], wire::kMaxHoldingNs));
    }
  }
  // Streams with news first; then the others' cumulative points again, so
  // that one lost ACK does not leave a requester waiting for its timer.
  for (QueuePair* qp : qps_) {
    if (ack.stream_count == wire::kMaxAckStreams) break;
    if (qp->take_ack_dirty()) ack.streams[ack.stream_count++] = {qp->remote_qpn(), qp->completed_msn()};
  }
  for (size_t i = 0; i < qps_.size() && ack.stream_count < wire::kMaxAckStreams; ++i) {
    QueuePair* qp = qps_[(ack_stream_cursor_ + i) % qps_.size()];
    if (qp->completed_msn() == 0) continue;
    bool listed = false;
    for (uint8_t j = 0; j < ack.stream_count; ++j) listed |= ack.streams[j].qpn == qp->remote_qpn();
    if (!listed) ack.streams[ack.stream_count++] = {qp->remote_qpn(), qp->completed_msn()};
  }
  if (!qps_.empty()) ack_stream_cursor_ = (ack_stream_cursor_ + 1) % qps_.size();
  // ACKs rotate over the paths the peer uses: the reverse direction of a
  // path is hashed independently and may be dead while its forward direction
  // works, and every ACK repeats the cumulative state, so a dead reverse path
  // then costs a fraction of the ACKs rather than all ACKs of a busy path.
  const uint16_t ack_path = rocev2() ? 0 : next_ack_path();
  const size_t length = wire::encode_ack(out, origin(ack_path), ack);
  if (length == 0) return 0;
  dirty_paths_ = remaining;
  if (remaining == 0) {
    unacked_packets_ = 0;
    oldest_unacked_ = kNever;
    ack_now_ = false;
  }
  path_id = ack_path;
  ++endpoint_.counters_.tx_acks;
  return length;
}

uint16_t Connection::next_ack_path() {
  const uint16_t count = std::max<uint16_t>(rx_path_count_, 1);
  for (uint16_t tried = 0; tried < count; ++tried) {
    const auto id = static_cast<uint16_t>(ack_path_cursor_++ % count);
    if (endpoint_.plane_up(endpoint_.plane_of_path(id))) return id;
  }
  return static_cast<uint16_t>(ack_path_cursor_++ % count);  // every plane down: nothing gets through anyway
}

bool Connection::path_has_room(const SendPath& path, uint32_t bytes) const {
  switch (path.health) {
    case PathHealth::Failed: return false;
    case PathHealth::Suspect: return false;  // probed, not trusted with data
    case PathHealth::Active: break;
  }
  return path.inflight_bytes == 0 || path.inflight_bytes + bytes <= path.cc.window();
}

Time Connection::path_ready_time(const SendPath& path) const {
  const Time paced = std::max(ceil_ns(path.next_tx_ns), ceil_ns(conn_next_tx_ns_));
  const Time burst = endpoint_.config().pacing_burst_ns;
  return paced > burst ? paced - burst : 0;
}

Time Connection::path_wakeup_time(const SendPath& path) const {
  return path_ready_time(path) + endpoint_.config().pacing_burst_ns / 2;
}

uint64_t Connection::connection_window() const {
  // Without a hint the paths' windows are the only limit. With one, the whole
  // connection keeps at most two hint-rate RTTs in flight, so a receiver that
  // divides its capacity among many senders also bounds their bursts.
  if (rate_hint_bps_ == 0) return UINT64_MAX;
  Time rtt = 0;
  for (const SendPath& path : paths_) rtt = std::max(rtt, path.rtt.srtt());
  const uint64_t floor = 2 * (uint64_t{endpoint_.config().mtu} + wire::kDataHeaderBytes);
  return std::max<uint64_t>(floor, 2 * rate_hint_bps_ / 8 * rtt / 1'000'000'000);
}

uint64_t Connection::inflight_bytes() const {
  uint64_t total = 0;
  for (const SendPath& path : paths_) total += path.inflight_bytes;
  return total;
}

Connection::SendPath* Connection::pick_path(Time now, uint32_t bytes, int avoid) {
  if (inflight_bytes() + bytes > connection_window()) return nullptr;
  SendPath* best = nullptr;
  SendPath* fallback = nullptr;
  for (SendPath& path : paths_) {
    if (!path_has_room(path, bytes) || path_ready_time(path) > now) continue;
    if (path.id == avoid) {
      fallback = &path;
      continue;
    }
    if (!best || path.next_tx_ns < best->next_tx_ns ||
        (path.next_tx_ns == best->next_tx_ns && path.inflight_bytes < best->inflight_bytes))
      best = &path;
  }
  return best ? best : fallback;
}

void Connection::after_send(Time now, SendPath& path, uint32_t bytes) {
  const EndpointConfig& config = endpoint_.config();
  const double wire_bits = 8.0 * (bytes + kWireOverheadBytes);
  const double window_rate = 1.25 * 8e9 * path.cc.window() / std::max<Time>(path.rtt.srtt(), 1);
  const double path_rate = std::min<double>(static_cast<double>(config.path_rate_bps), window_rate);
  path.next_tx_ns = std::max<double>(path.next_tx_ns, static_cast<double>(now)) + wire_bits * 1e9 / path_rate;
  if (rate_hint_bps_ > 0)
    conn_next_tx_ns_ = std::max<double>(conn_next_tx_ns_, static_cast<double>(now)) +
                       wire_bits * 1e9 / static_cast<double>(rate_hint_bps_);
  if (path.rto_deadline == kNever) path.rto_deadline = now + rto(path);
  ++path.stats.packets_sent;
  path.stats.bytes_sent += bytes;
}

size_t Connection::send_rewind(Time now, SendPath& path, std::span<uint8_t> out) {
  while (path.rewinding) {
    if (seq_after(path.first_seq, path.rewind_seq)) path.rewind_seq = path.first_seq;
    const uint32_t index = path.rewind_seq - path.first_seq;
    if (index >= path.records.size()) {
      path.rewinding = false;
      break;
    }
    TxRecord& record = path.records[index];
    ++path.rewind_seq;
    QueuePair* qp = attached_qp(record.ref.qpn);
    if (qp && !qp->source_readable(record.ref)) qp->abandon_response(record.ref);
    const size_t length = qp ? qp->build_packet(record.ref, 0, path.rewind_seq - 1, wire::kFlagRetransmit, out) : 0;
    if (length == 0) continue;
    record.sent = now;
    if (record.state != TxRecord::State::InFlight) {
      record.state = TxRecord::State::InFlight;
      path.inflight_bytes += record.bytes;
    }
    ++endpoint_.counters_.tx_retransmits;
    ++path.stats.retransmits;
    after_send(now, path, static_cast<uint32_t>(length));
    return length;
  }
  return 0;
}

bool Connection::has_data_to_send() const {
  if (!retransmits_.empty()) return true;
  for (const SendPath& path : paths_)
    if (path.rewinding) return true;
  for (const QueuePair* qp : qps_)
    if (qp->has_new_chunks()) return true;
  return false;
}

size_t Connection::send_data(Time now, std::span<uint8_t> out, uint16_t& path_id) {
  const uint32_t mtu_bytes = endpoint_.config().mtu + static_cast<uint32_t>(wire::kDataHeaderBytes);
  if (rocev2() && paths_[0].rewinding) {
    if (path_ready_time(paths_[0]) > now) return 0;
    const size_t length = send_rewind(now, paths_[0], out);
    if (length > 0) {
      path_id = 0;
      return length;
    }
  }
  // Drop retransmissions that are no longer needed before choosing a path.
  while (!retransmits_.empty()) {
    const Retransmit& r = retransmits_.front();
    QueuePair* qp = attached_qp(r.ref.qpn);
    const bool needed = qp && (r.tail_probe ? qp->has_outstanding_work() : qp->chunk_needed(r.ref));
    if (needed) break;
    retransmits_.pop_front();
  }
  const bool retransmit = !retransmits_.empty();
  SendPath* path = pick_path(now, mtu_bytes, retransmit ? retransmits_.front().lost_on : -1);
  if (!path) return 0;

  ChunkRef ref;
  uint8_t flags = 0;
  if (retransmit) {
    ref = retransmits_.front().ref;
    if (retransmits_.front().tail_probe) flags |= wire::kFlagAckRequest;
    retransmits_.pop_front();
    flags |= wire::kFlagRetransmit;
  } else {
    bool found = false;
    for (size_t tried = 0; tried < qps_.size() && !found; ++tried) {
      QueuePair* qp = qps_[qp_cursor_ % qps_.size()];
      qp_cursor_ = (qp_cursor_ + 1) % qps_.size();
      found = qp->next_new_chunk(ref);
    }
    if (!found) return 0;
  }
  QueuePair* qp = attached_qp(ref.qpn);
  if (!qp) return 0;
  if (!qp->source_readable(ref)) {
    qp->abandon_response(ref);
    return 0;
  }
  const size_t length = qp->build_packet(ref, path->id, path->next_seq, flags, out);
  if (length == 0) return 0;
  path->records.push_back({ref, now, static_cast<uint32_t>(length), TxRecord::State::InFlight});
  ++path->next_seq;
  path->inflight_bytes += static_cast<uint32_t>(length);
  EndpointCounters& counters = endpoint_.counters_;
  ++counters.tx_data_packets;
  counters.tx_data_bytes += qp->chunk_payload_bytes(ref);
  if (retransmit) {
    ++counters.tx_retransmits;
    ++path->stats.retransmits;
  }
  after_send(now, *path, static_cast<uint32_t>(length));
  path_id = path->id;
  return length;
}

size_t Connection::poll_transmit(Time now, std::span<uint8_t> out, uint16_t& path_id) {
  if (!control_.empty()) {
    const Control c = control_.front();
    control_.pop_front();
    path_id = c.path_id;
    if (c.type == wire::PacketType::Nak) {
      ++endpoint_.counters_.tx_naks;
      return wire::encode_nak(out, origin(c.path_id), c.nak);
    }
    if (c.type == wire::PacketType::ProbeReply && !rocev2()) {
      // The reply names the probed path in its header but leaves from the
      // next slot in the ACK rotation: the probe proved the forward
      // direction; the probed slot's reverse direction may be the dead one.
      path_id = next_ack_path();
    }
    return wire::encode_probe(out, origin(c.path_id), c.type, c.probe);
  }
  if (ack_due(now)) return send_ack(now, out, path_id);
  return send_data(now, out, path_id);
}

Time Connection::next_wakeup() const {
  if (!control_.empty()) return 0;
  Time wake = kNever;
  if (unacked_packets_ > 0 && dirty_paths_ != 0) {
    if (ack_now_ || unacked_packets_ >= endpoint_.config().ack_every_packets) return 0;
    wake = oldest_unacked_ + endpoint_.ack_delay();
  }
  if (has_data_to_send()) {
    const uint32_t mtu_bytes = endpoint_.config().mtu + static_cast<uint32_t>(wire::kDataHeaderBytes);
    const bool connection_full = inflight_bytes() + mtu_bytes > connection_window();
    for (const SendPath& path : paths_) {
      if (rocev2() && path.rewinding) {
        wake = std::min(wake, path_wakeup_time(path));
      } else if (!connection_full && path_has_room(path, mtu_bytes)) {
        wake = std::min(wake, path_wakeup_time(path));
      }
    }
  }
  for (const SendPath& path : paths_) {
    wake = std::min(wake, path.rto_deadline);
    if (path.health != PathHealth::Active) wake = std::min(wake, path.probe_at);
  }
  for (const QueuePair* qp : qps_) wake = std::min(wake, qp->next_rnr_resend());
  return std::min(wake, retry_deadline());
}

std::vector<PathSnapshot> Connection::snapshots() const {
  std::vector<PathSnapshot> out;
  out.reserve(paths_.size());
  for (const SendPath& path : paths_) {
    PathSnapshot s = path.stats;
    s.health = path.health;
    s.window_bytes = path.cc.window();
    s.inflight_bytes = path.inflight_bytes;
    s.srtt_ns = path.rtt.srtt();
    s.min_rtt_ns = path.rtt.min_rtt() == kNever ? 0 : path.rtt.min_rtt();
    s.ecn_alpha = path.cc.alpha();
    out.push_back(s);
  }
  return out;
}

}  // namespace metaroce::transport
