// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "connection.h"

#include <algorithm>

#include "endpoint.h"
#include "queue_pair.h"
#include "sequence_number.h"

namespace metaroce::transport {
namespace {

// Ethernet + IPv4 + UDP headers, FCS, preamble and inter-frame gap: what a
// datagram costs on the wire beyond its UDP payload. Used for pacing only.
constexpr uint32_t kWireOverheadBytes = 66;
// A path's timeout doubles at most this many times (docs/spec.md 8.7): 16x
// its base RTO. Only the stall kind backs off, with one packet in flight, so
// a longer wait saves nothing; in an incast, a sender whose first window was
// dropped whole hears nothing back, and 1024x kept it out for milliseconds
// after the receiver's port had drained.
constexpr uint32_t kMaxBackoffShift = 4;
// A path of the peer counts as heard while it sent one of the last this
// many packets from the peer per path the peer uses: a reply rotation
// visits each path about once per path count.
constexpr uint64_t kHeardWindowPerPath = 4;
// Every this many replies, one goes on a path the peer does not hear, so
// that a path that comes back is found again.
constexpr uint32_t kRediscoverEvery = 32;
// A receiver rate hint below this is not believed: no receiver divides its
// capacity that finely, and a forged one would throttle the connection.
constexpr uint32_t kMinRateHintMbps = 10;
// NAKs and probe replies waiting to be sent, at most.
constexpr size_t kMaxControlPackets = 256;
// A QP's turn at a connection shared by several (docs/spec.md 8.6): as much
// as a TSO or GSO send of one TCP flow, the unit in which Linux interleaves
// flows. A message up to this size leaves back to back and completes after
// its own bytes, not after every other QP's; a longer one holds the others
// back by at most one turn at a time.
constexpr uint64_t kQpTurnBytes = 64 << 10;

// rocev2 profile: a data packet to this QP number (IB's reserved QP0, never
// an RC QP) only fills its PSN. The sender resends one in go-back-N where
// the packet first sent there can no longer be built (its QP was destroyed,
// its READ response is gone): without it the PSN would stay a hole that
// stops every QP of the connection.
constexpr uint32_t kPsnFillerQpn = 0;

// std::ceil for the non-negative times here, without the libm call that
// baseline x86-64 code makes for it (twice per packet sent).
Time ceil_ns(double ns) {
  if (ns <= 0) return 0;
  const auto whole = static_cast<Time>(ns);
  return static_cast<double>(whole) < ns ? whole + 1 : whole;
}

}  // namespace

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
    // The initial state (8.15): a path whose plane is down starts failed.
    if (!endpoint.plane_up(paths_.back().stats.plane)) paths_.back().health = PathHealth::Failed;
  }
  update_retry_base();
}

void Connection::on_plane_change(Time now, uint16_t plane, bool up) {
  for (SendPath& path : paths_)
    if (path.stats.plane == plane) set_health(now, path, up ? HealthEvent::PlaneUp : HealthEvent::PlaneDown);
}

namespace {

struct HealthTransition {
  PathHealth from;
  Connection::HealthEvent event;
  PathHealth to;
};

// The path health state machine of docs/spec.md 8.8 (and 8.15 for planes).
constexpr HealthTransition kHealthTransitions[] = {
    {PathHealth::Suspect, Connection::HealthEvent::NewDataAcked, PathHealth::Active},
    {PathHealth::Suspect, Connection::HealthEvent::ProbeAnswered, PathHealth::Active},
    {PathHealth::Failed, Connection::HealthEvent::ProbeAnswered, PathHealth::Active},
    {PathHealth::Active, Connection::HealthEvent::BlamedSuspect, PathHealth::Suspect},
    {PathHealth::Active, Connection::HealthEvent::BlamedFail, PathHealth::Failed},
    {PathHealth::Suspect, Connection::HealthEvent::BlamedFail, PathHealth::Failed},
    {PathHealth::Active, Connection::HealthEvent::PlaneDown, PathHealth::Failed},
    {PathHealth::Suspect, Connection::HealthEvent::PlaneDown, PathHealth::Failed},
    {PathHealth::Failed, Connection::HealthEvent::PlaneDown, PathHealth::Failed},
    {PathHealth::Active, Connection::HealthEvent::PlaneUp, PathHealth::Failed},
    {PathHealth::Suspect, Connection::HealthEvent::PlaneUp, PathHealth::Failed},
    {PathHealth::Failed, Connection::HealthEvent::PlaneUp, PathHealth::Failed},
};

}  // namespace

bool Connection::set_health(Time now, SendPath& path, HealthEvent event) {
  const auto row = std::find_if(std::begin(kHealthTransitions), std::end(kHealthTransitions),
                                [&](const HealthTransition& t) { return t.from == path.health && t.event == event; });
  if (row == std::end(kHealthTransitions)) return false;
  const PathHealth from = path.health;
  path.health = row->to;
  switch (event) {
    case HealthEvent::NewDataAcked:
      path.probe_at = kNever;
      path.probe_sent = kNever;
      break;
    case HealthEvent::ProbeAnswered:
      // A failed path comes back with a fresh window; a suspect one lost
      // only what timed out and keeps its window.
      if (from == PathHealth::Failed) path.cc.reset();
      path.blamed_timeouts = 0;
      path.backoff = 0;
      path.probe_at = kNever;
      path.probe_sent = kNever;
      ++endpoint_.counters_.path_recoveries;
      break;
    case HealthEvent::BlamedSuspect:
      // A suspect path carries no data: a probe tells at once whether it
      // works, at no risk to a message.
      path.probe_at = now;
      hand_over_window(path);
      break;
    case HealthEvent::BlamedFail:
      path.probe_interval = endpoint_.probe_interval();
      path.probe_at = now + path.probe_interval;
      ++endpoint_.counters_.path_failures;
      break;
    case HealthEvent::PlaneDown:
      for (TxRecord& record : path.records)
        if (record.state == TxRecord::State::InFlight) declare_lost(path, record);
      path.probe_at = kNever;  // until the plane is up
      path.probe_sent = kNever;
      path.rto_deadline = kNever;
      path.rewinding = false;
      ++endpoint_.counters_.plane_drains;
      break;
    case HealthEvent::PlaneUp:
      // Probed at once: the NIC is back, the fabric behind it may not be.
      path.probe_interval = endpoint_.probe_interval();
      path.probe_at = now;
      break;
  }
  return true;
}

void Connection::attach(QueuePair* qp) {
  if (std::find(qps_.begin(), qps_.end(), qp) == qps_.end()) qps_.push_back(qp);
}

void Connection::detach(QueuePair* qp) {
  qps_.erase(std::remove(qps_.begin(), qps_.end(), qp), qps_.end());
  qp_cursor_ = 0;
  qp_turn_bytes_ = 0;
}

void Connection::set_congestion(const CongestionParams& params) {
  for (SendPath& path : paths_) path.cc.set_params(params);
}

QueuePair* Connection::attached_qp(uint32_t qpn) const {
  for (QueuePair* qp : qps_)
    if (qp->qpn() == qpn) return qp;
  return nullptr;
}

Time Connection::base_rto(const SendPath& path) const {
  return path.rtt.rto(endpoint_.min_rto(), endpoint_.config().max_rto_ns, peer_ack_delay());
}

Time Connection::peer_ack_delay() const { return std::max(endpoint_.ack_delay(), peer_holding_); }

void Connection::note_peer_holding(Time holding) {
  peer_holding_ = holding >= peer_holding_ ? holding : (7 * peer_holding_ + holding) / 8;
}

Time Connection::rto(const SendPath& path) const {
  const EndpointConfig& c = endpoint_.config();
  const Time base = base_rto(path);
  return std::min<Time>(base << std::min(path.backoff, kMaxBackoffShift), c.max_rto_ns);
}

wire::Origin Connection::origin(uint16_t path_id) const {
  return {path_id, endpoint_.config().home_port, heard_paths()};
}

uint16_t Connection::heard_paths() const {
  if (heard_cache_valid_) return heard_cache_;
  const uint64_t window = kHeardWindowPerPath * std::max<uint16_t>(rx_path_count_, 2);
  uint16_t heard = 0;
  for (uint16_t i = 0; i < wire::kHeardPathBits; ++i)
    if (heard_at_[i] != 0 && rx_packets_ + 1 - heard_at_[i] < window) heard |= uint16_t(1u << i);
  heard_cache_ = heard;
  heard_cache_valid_ = true;
  return heard;
}

uint16_t Connection::reply_path(Time now) {
  if (rocev2()) return 0;
  // Replies rotate over the paths the peer uses: the reverse direction of a
  // path is hashed independently and may be dead while its forward
  // direction works. A path we replied on that the peer has not reported
  // hearing for the RTO floor is left out of the rotation but for one
  // reply in kRediscoverEvery, so a dead reverse direction costs that
  // fraction of the replies rather than its share of all of them (a lost
  // ACK at the end of a burst costs the sender an RTO). Only evidence
  // excludes a path: one not used lately is not presumed dead.
  // Paths on a plane that is down are left out altogether (unless every
  // plane is down, when nothing gets through anyway).
  const uint16_t count = std::max<uint16_t>(rx_path_count_, 1);
  uint64_t all = count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
  uint64_t planes_down = 0;
  for (uint16_t i = 0; i < 64 && i < count; ++i)
    if (!endpoint_.plane_up(endpoint_.plane_of_path(i))) planes_down |= uint64_t{1} << i;
  if (planes_down != all) all &= ~planes_down;
  uint64_t dead = 0;
  for (uint16_t i = 0; i < wire::kHeardPathBits && i < count; ++i)
    if (unheard_since_[i] != kNever && now - unheard_since_[i] > endpoint_.min_rto()) dead |= uint64_t{1} << i;
  dead &= all;
  uint64_t pool = all;
  if (dead != 0 && dead != all) pool = ++replies_ % kRediscoverEvery == 0 ? dead : all & ~dead;
  // The next path of the pool after the last reply's.
  const uint64_t after = reply_cursor_ + 1 >= 64 ? 0 : pool & ~((uint64_t{1} << (reply_cursor_ + 1)) - 1);
  reply_cursor_ = static_cast<uint16_t>(__builtin_ctzll(after != 0 ? after : pool));
  if (reply_cursor_ < wire::kHeardPathBits && unheard_since_[reply_cursor_] == kNever)
    unheard_since_[reply_cursor_] = now;
  return reply_cursor_;
}

// Short, so that the rate hint follows peers that start or stop sending
// within about two RTTs: with four base RTTs the simulator's 64-node
// all-to-all built queues twice as deep and took 3% longer (docs/scale.md).
Time Connection::activity_window() const { return 2 * endpoint_.config().base_rtt_ns + endpoint_.ack_delay(); }

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

void Connection::on_peer_restart() {
  scoreboards_ = {};
  highest_rx_time_ = {};
  in_order_ = InOrderReceiver{};
  dirty_paths_ = 0;
  unacked_packets_ = 0;
  oldest_unacked_ = kNever;
  ack_now_ = false;
  rx_path_count_ = 0;
  heard_cache_valid_ = false;
  any_data_rx_ = false;
  for (SendPath& path : paths_) path.last_ce_count = 0;
}

void Connection::on_packet(Time now, const wire::Packet& packet, bool ce_marked, Time arrival) {
  ++rx_packets_;
  heard_cache_valid_ = false;
  if (packet.common.path_id < wire::kHeardPathBits) heard_at_[packet.common.path_id] = rx_packets_;
  for (uint16_t heard = packet.common.heard_paths; heard != 0; heard &= static_cast<uint16_t>(heard - 1))
    unheard_since_[__builtin_ctz(heard)] = kNever;
  switch (packet.common.type) {
    case wire::PacketType::Data: on_data(now, packet, ce_marked, arrival); break;
    case wire::PacketType::Ack: on_ack(now, packet.ack, arrival); break;
    case wire::PacketType::Nak: on_nak(now, packet.nak); break;
    case wire::PacketType::Probe: {
      rx_path_count_ = std::max<uint16_t>(rx_path_count_, static_cast<uint16_t>(packet.common.path_id + 1));
      // One reply per path is owed at a time: the newest probe's.
      for (Control& queued : control_) {
        if (queued.type == wire::PacketType::ProbeReply && queued.path_id == packet.common.path_id) {
          queued.probe = packet.probe;
          return;
        }
      }
      Control reply;
      reply.type = wire::PacketType::ProbeReply;
      reply.path_id = packet.common.path_id;
      reply.probe = packet.probe;
      queue_control(reply);
      break;
    }
    case wire::PacketType::ProbeReply: on_probe_reply(now, packet); break;
    case wire::PacketType::UdSend: break;  // never part of a connection (Endpoint::on_ud_datagram)
  }
}

void Connection::on_data(Time now, const wire::Packet& p, bool ce_marked, Time arrival) {
  EndpointCounters& counters = endpoint_.counters_;
  const wire::DataHeader& h = p.data;
  const bool psn_filler = rocev2() && h.dst_qpn == kPsnFillerQpn;
  QueuePair* qp = psn_filler ? nullptr : attached_qp(h.dst_qpn);
  if (!psn_filler && (!qp || qp->remote_qpn() != h.src_qpn)) {
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
          nak.qpn = qp ? qp->remote_qpn() : kPsnFillerQpn;
          nak.msn = h.msn;
          nak.expected_seq = in_order_.expected();
          queue_nak(0, nak);
        }
        return;
    }
  }

  if (!rocev2() && scoreboards_[path_id].beyond_window(h.path_seq)) {
    ++counters.rx_drop_path_jump;
    return;
  }
  const Verdict verdict = psn_filler                   ? Verdict::Placed
                          : wire::is_request(h.opcode) ? qp->on_request(p)
                                                       : qp->on_response(now, p);
  // The rocev2 PSN advances only for a packet the QP did not refuse outright.
  if (rocev2() && verdict != Verdict::OutOfWindow && verdict != Verdict::QpNotReady) in_order_.record(h.path_seq);
  switch (verdict) {
    case Verdict::Placed: break;
    case Verdict::DuplicateChunk: ++counters.rx_duplicate_chunk; break;
    case Verdict::DuplicateComplete:
      ++counters.rx_duplicate_completed;
      ack_now_ = true;
      break;
    case Verdict::OutOfWindow: ++counters.rx_drop_out_of_window; return;
    case Verdict::QpNotReady: ++counters.rx_drop_qp_state; return;
    case Verdict::ReceiverNotReady: ++counters.rx_drop_rnr; break;
    case Verdict::AccessError: ++counters.rx_drop_access; break;
    case Verdict::InvalidRequest: ++counters.rx_drop_bad_request; break;
    case Verdict::StaleResponse: ++counters.rx_drop_stale_response; break;
  }
  ++counters.rx_data_packets;

  // The path saw this packet whatever the message layer decided: path
  // reliability is about the network, message problems travel in NAKs.
  if (!rocev2()) {
    bool gap = false;
    ReceiveScoreboard& board = scoreboards_[path_id];
    const uint32_t highest_before = board.highest();
    const bool first = board.empty();
    board.record(h.path_seq, gap);
    if (first || board.highest() != highest_before) highest_rx_time_[path_id] = arrival;
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
  last_data_rx_ = arrival;
  any_data_rx_ = true;
  count_rx_bytes(now, wire::kDataHeaderBytes + p.payload.size());
}

void Connection::on_ack(Time now, const wire::Ack& ack, Time arrival) {
  ++endpoint_.counters_.rx_acks;
  last_ack_rx_ = now;
  if (ack.rate_hint_mbps != 0 && ack.rate_hint_mbps < kMinRateHintMbps) ++endpoint_.counters_.rx_ignored_rate_hint;
  else rate_hint_bps_ = uint64_t{ack.rate_hint_mbps} * 1'000'000;
  for (uint8_t i = 0; i < ack.path_count; ++i) {
    const wire::PathSack& block = ack.paths[i];
    const Time holding = block.holding_ns != 0 ? block.holding_ns : ack.ack_delay_ns;
    if (block.path_id < paths_.size()) on_path_sack(now, paths_[block.path_id], block, holding, arrival);
  }
  for (uint8_t i = 0; i < ack.stream_count; ++i) {
    QueuePair* qp = attached_qp(ack.streams[i].qpn);
    if (qp) qp->on_stream_ack(now, ack.streams[i].completed_msn);
  }
  detect_losses_by_time(now);
}

// A path's SACK finds a loss once a later packet on the same path arrives,
// and its RTO (at least min_rto) is the backstop. A path's newest packet has
// no such successor: a lone zero-length SEND, or the last packet of a burst,
// would wait for that timer although the peer meanwhile acknowledged
// packets sent after it on other paths. So a path's newest packet, still in
// flight once something sent after it was delivered on any path, and older
// than its own path's RTT plus the ACK delay plus a reordering window, is
// lost (RACK, RFC 8985, with the connection's other paths as the
// reordering). The window, a quarter of the path's minimum RTT or twice its
// RTT variation if larger, covers the queueing differences between paths,
// each path being judged by its own RTT. Older packets of the path are left
// to its SACKs: judging them by time too would turn every lost ACK into
// spurious retransmissions while the path's window is full. Blaming the path
// stays the RTO's: it still fires, and blames the path if nothing it carried
// was acknowledged since (path_timeout).
void Connection::detect_losses_by_time(Time now) {
  timed_loss_at_ = kNever;
  if (rocev2() || !any_delivered_) return;
  for (SendPath& path : paths_) {
    if (path.records.empty() || !path.rtt.has_sample()) continue;
    TxRecord& newest = path.records.back();
    if (newest.state != TxRecord::State::InFlight || newest.sent >= latest_delivered_sent_) continue;
    const Time reorder = std::max(path.rtt.min_rtt() / 4, 2 * path.rtt.rttvar());
    const Time lost_at = newest.sent + path.rtt.srtt() + peer_ack_delay() + reorder;
    if (now < lost_at) {
      // No later ACK may come (the sender waits for this very packet).
      timed_loss_at_ = std::min(timed_loss_at_, lost_at);
      continue;
    }
    declare_lost(path, newest);
    path.lost_by_time_unanswered = true;
    ++endpoint_.counters_.lost_by_time;
  }
  probe_tail(now);
}

// The rule above needs a later packet to be acknowledged. The connection's
// newest packet in flight has none: when it is lost (the last packet before
// the sender waits for a reply, a lone credit), or its ACK is, only the RTO,
// at least min_rto, would resend it. So it is resent once it is older than
// twice its path's RTT plus the ACK delay, counted from the later of its
// sending and the last ACK, with nothing sent at or after it acknowledged
// (RACK's tail loss probe, RFC 8985 section 7). Once per tail: the next
// probe waits for an ACK of new data. The path is not blamed (nothing says
// it lost anything); its RTO still runs. after_send arms the timer.
void Connection::probe_tail(Time now) {
  if (tail_probed_) return;
  SendPath* tail_path = nullptr;
  for (SendPath& path : paths_) {
    if (path.records.empty() || path.records.back().state != TxRecord::State::InFlight) continue;
    if (!tail_path || path.records.back().sent > tail_path->records.back().sent) tail_path = &path;
  }
  if (!tail_path || !tail_path->rtt.has_sample()) return;
  TxRecord& tail = tail_path->records.back();
  if (latest_delivered_sent_ >= tail.sent) return;  // the rule above judges it
  const Time probe_at = tail_probe_time(*tail_path, tail.sent);
  if (now < probe_at) {
    timed_loss_at_ = std::min(timed_loss_at_, probe_at);
    return;
  }
  declare_lost(*tail_path, tail, /*forced=*/true);
  tail_probed_ = true;
  ++endpoint_.counters_.tail_probes;
}

Time Connection::tail_probe_time(const SendPath& path, Time sent) const {
  return std::max(sent, last_ack_rx_) + 2 * path.rtt.srtt() + peer_ack_delay();
}

void Connection::on_path_sack(Time now, SendPath& path, const wire::PathSack& block, Time ack_delay, Time arrival) {
  const uint32_t highest = block.highest_seq;
  // A block that reports packets never sent on the path is not believed:
  // it would declare every packet in flight lost on every later ACK.
  if (seq_after(highest, path.next_seq - 1)) {
    ++endpoint_.counters_.rx_ignored_ack_block;
    return;
  }
  if (path.records.empty()) return;
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
      if (!any_delivered_ || record.sent > latest_delivered_sent_) latest_delivered_sent_ = record.sent;
      any_delivered_ = true;
      if (record.state == TxRecord::State::Lost) {
        ++endpoint_.counters_.spurious_retransmits;
      } else {
        remove_inflight(path, record.bytes);
        acked_bytes += record.bytes;
        ++acked_packets;
        if (seq == highest && arrival > record.sent + ack_delay) {
          rtt_sample = arrival - record.sent - ack_delay;
          note_peer_holding(ack_delay);
        }
      }
      record.state = TxRecord::State::Acked;
      // Progress means a chunk acknowledged for the first time, not a probe
      // of one already acknowledged.
      QueuePair* qp = attached_qp(record.ref.qpn);
      if (qp) qp->on_chunk_acked(now, record.ref);
    } else if (record.state == TxRecord::State::InFlight) {
      // Paths are FIFO: a later packet arrived, so this one was lost.
      declare_lost(path, record);
    }
  }
  if (!path.any_acked || seq_after(highest, path.highest_acked)) path.highest_acked = highest;
  path.any_acked = true;
  if (rtt_sample) {
    path.rtt.on_sample(rtt_sample);
    update_retry_base();
  }
  // ce_count is cumulative; an ACK overtaken by a newer one reports less.
  const int32_t new_marks = static_cast<int32_t>(block.ce_count - path.last_ce_count);
  const uint32_t marks = new_marks > 0 ? static_cast<uint32_t>(new_marks) : 0;
  if (new_marks > 0) path.last_ce_count = block.ce_count;
  path.stats.ecn_marks += marks;
  if (acked_packets > 0) {
    path.cc.on_ack(now, acked_bytes, acked_packets, marks, rtt_sample, path.rtt.min_rtt(), path.rtt.srtt());
    path.blamed_timeouts = 0;
    path.backoff = 0;
    path.lost_by_time_unanswered = false;
    tail_probed_ = false;
    set_health(now, path, HealthEvent::NewDataAcked);
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

void Connection::declare_lost(SendPath& path, TxRecord& record, bool forced) {
  record.state = TxRecord::State::Lost;
  remove_inflight(path, record.bytes);
  ++path.stats.lost;
  if (forced) {
    retransmits_.push_front({record.ref, path.id, false, true});
  } else {
    retransmits_.push_back({record.ref, path.id, false, false});
  }
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
    on_path_sack(now, path, block, 0, now);
    if (!seq_after(nak.expected_seq, path.next_seq) && !path.records.empty()) {
      path.rewinding = true;
      path.rewind_seq = nak.expected_seq;
      ++endpoint_.counters_.go_back_n;
    }
    return;
  }
  QueuePair* qp = attached_qp(nak.qpn);
  if (qp) qp->on_nak(now, nak);
}

void Connection::on_probe_reply(Time now, const wire::Packet& packet) {
  const uint16_t id = packet.common.path_id;
  if (id >= paths_.size()) return;
  SendPath& path = paths_[id];
  if (path.health == PathHealth::Active || packet.probe.probe_seq != path.probe_seq ||
      !endpoint_.plane_up(path.stats.plane))
    return;
  set_health(now, path, HealthEvent::ProbeAnswered);
  if (packet.probe.timestamp <= now) {
    path.rtt.on_sample(now - packet.probe.timestamp);
    update_retry_base();
  }
}

void Connection::queue_nak(uint16_t path_id, const wire::Nak& nak) {
  Control c;
  c.type = wire::PacketType::Nak;
  c.path_id = path_id;
  c.nak = nak;
  queue_control(c);
}

void Connection::queue_control(const Control& c) {
  if (control_.size() >= kMaxControlPackets) {
    ++endpoint_.counters_.tx_control_dropped;
    return;
  }
  control_.push_back(c);
}

// --- timers ------------------------------------------------------------------

void Connection::update_retry_base() {
  retry_base_ = endpoint_.min_rto();
  for (const SendPath& path : paths_) retry_base_ = std::max(retry_base_, base_rto(path));
}

void Connection::path_timeout(Time now, SendPath& path) {
  ++endpoint_.counters_.rto_expirations;
  if (rocev2()) {
    // Go back to the oldest unacknowledged packet and resend from there.
    ++path.backoff;
    path.rewinding = true;
    path.rewind_seq = path.first_seq;
    ++endpoint_.counters_.go_back_n;
  } else {
    TxRecord* oldest = nullptr;
    for (TxRecord& record : path.records) {
      if (record.state != TxRecord::State::InFlight) continue;
      oldest = &record;
      break;
    }
    const bool lost_while_others_delivered = (oldest && delivered_after(oldest->sent)) || path.lost_by_time_unanswered;
    if (lost_while_others_delivered && !last_active(path)) {
      // The peer acknowledged packets sent after this one on other paths:
      // this path loses what it carries. Judging by what was sent after
      // the lost packet, rather than by whether anything came back at all,
      // keeps a path whose lone packet timed out after everything else was
      // acknowledged (the sender had nothing more in flight) from looking
      // like a stalled peer, so that a dead path is failed, not fed one
      // packet per backed-off RTO. The last active path is never blamed: a
      // connection with no path to carry data waits for probes, and under
      // a heavy CPU load paths that work are blamed for delays that exceed
      // an RTO.
      for (TxRecord& record : path.records)
        if (record.state == TxRecord::State::InFlight) declare_lost(path, record);
      path.lost_by_time_unanswered = false;
      blame_path(now, path);
    } else if (oldest) {
      // Nothing sent after it was acknowledged anywhere: the peer or this
      // host stalled, or every path is down, which no choice of path
      // repairs. Resend the oldest packet, as TCP does on a timeout, to learn
      // which, and leave the path's health and the rest of its flight
      // alone: an ACK then resumes at full speed, and a dead peer is the
      // retry timer's to find.
      declare_lost(path, *oldest, /*forced=*/true);
      ++path.backoff;
    }
  }
  path.rto_deadline = path.inflight_bytes > 0 || path.rewinding ? now + rto(path) : kNever;
}

void Connection::hand_over_window(const SendPath& leaving) {
  std::vector<SendPath*> heirs;
  for (SendPath& path : paths_)
    if (&path != &leaving && path.health == PathHealth::Active && path.stats.plane == leaving.stats.plane)
      heirs.push_back(&path);
  for (SendPath* heir : heirs)
    heir->cc.absorb(static_cast<double>(leaving.cc.window()) / static_cast<double>(heirs.size()));
}

bool Connection::last_active(const SendPath& path) const {
  if (path.health != PathHealth::Active) return false;
  for (const SendPath& other : paths_)
    if (&other != &path && other.health == PathHealth::Active) return false;
  return true;
}

void Connection::blame_path(Time now, SendPath& path) {
  path.backoff = 0;
  ++path.blamed_timeouts;
  const EndpointConfig& config = endpoint_.config();
  if (path.blamed_timeouts >= config.path_fail_timeouts) set_health(now, path, HealthEvent::BlamedFail);
  else if (path.blamed_timeouts >= config.path_suspect_timeouts) set_health(now, path, HealthEvent::BlamedSuspect);
}

void Connection::probe_path(Time now, SendPath& path) {
  Control probe;
  probe.type = wire::PacketType::Probe;
  probe.path_id = path.id;
  probe.probe.probe_seq = ++path.probe_seq;
  probe.probe.timestamp = now;
  control_.push_back(probe);
  ++endpoint_.counters_.tx_probes;
  path.probe_sent = now;
}

void Connection::on_path_probe_timer(Time now, SendPath& path) {
  if (path.health == PathHealth::Suspect) {
    // An unanswered probe while the peer acknowledged later traffic is
    // another timeout of the path; during a stall it proves nothing.
    if (path.probe_sent != kNever && delivered_after(path.probe_sent)) blame_path(now, path);
    if (path.health == PathHealth::Suspect) {
      probe_path(now, path);
      path.probe_at = now + rto(path);
    }
    if (path.health != PathHealth::Failed) return;
  }
  probe_path(now, path);
  path.probe_interval = std::min<Time>(path.probe_interval * 2, endpoint_.config().max_rto_ns);
  path.probe_at = now + path.probe_interval;
}

void Connection::on_timer(Time now) {
  if (timed_loss_at_ <= now) detect_losses_by_time(now);
  for (SendPath& path : paths_) {
    if (path.rto_deadline <= now) path_timeout(now, path);
    if (path.health != PathHealth::Active && path.probe_at <= now && endpoint_.plane_up(path.stats.plane))
      on_path_probe_timer(now, path);
  }
  timer_qps_.assign(qps_.begin(), qps_.end());  // a QP's timer may detach it
  for (QueuePair* qp : timer_qps_) {
    qp->on_timer(now);
    ChunkRef probe;
    if (qp->retry_at() <= now && qp->on_retry_timer(now, probe)) retransmits_.push_front({probe, 0, true, true});
  }
}

// --- transmit ----------------------------------------------------------------

void Connection::ack_everything_now() {
  if (unacked_packets_ > 0) ack_now_ = true;
  if (!farewells_.empty()) farewell_due_ = true;
}

void Connection::farewell(const QueuePair& qp) {
  if (!qp.completed_any()) return;
  constexpr uint32_t kFarewellAcks = 4;  // lost ACKs are not resent: say it a few times
  constexpr size_t kMaxFarewells = 32;
  if (farewells_.size() == kMaxFarewells) farewells_.erase(farewells_.begin());
  farewells_.push_back({{qp.remote_qpn(), qp.completed_msn()}, kFarewellAcks});
  farewell_due_ = true;
}

bool Connection::ack_due(Time now) const {
  if (farewell_due_) return true;
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
    if (!qp->completed_any()) continue;
    bool listed = false;
    for (uint8_t j = 0; j < ack.stream_count; ++j) listed |= ack.streams[j].qpn == qp->remote_qpn();
    if (!listed) ack.streams[ack.stream_count++] = {qp->remote_qpn(), qp->completed_msn()};
  }
  if (!qps_.empty()) ack_stream_cursor_ = (ack_stream_cursor_ + 1) % qps_.size();
  for (Farewell& f : farewells_) {
    if (ack.stream_count == wire::kMaxAckStreams) break;
    ack.streams[ack.stream_count++] = f.stream;
    --f.acks_left;
  }
  // Every ACK repeats the cumulative state, so a lost one costs little
  // unless it was the last of a burst.
  const uint16_t ack_path = reply_path(now);
  const size_t length = wire::encode_ack(out, origin(ack_path), ack);
  if (length == 0) return 0;
  std::erase_if(farewells_, [](const Farewell& f) { return f.acks_left == 0; });
  farewell_due_ = !farewells_.empty();
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

bool Connection::may_send_on(const SendPath& path, uint32_t bytes, bool forced) const {
  return forced ? path.health == PathHealth::Active : path_has_room(path, bytes);
}

bool Connection::path_has_room(const SendPath& path, uint32_t bytes) const {
  switch (path.health) {
    case PathHealth::Failed:
    case PathHealth::Suspect: return false;
    case PathHealth::Active: break;
  }
  return path.inflight_bytes == 0 || path.inflight_bytes + bytes <= path.cc.window();
}

Time Connection::path_ready_time(const SendPath& path) const {
  const Time paced = std::max(path.paced_ns, conn_paced_ns_);
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

Connection::SendPath* Connection::pick_path(Time now, uint32_t bytes, int avoid, bool forced) {
  if (!forced && inflight_total_ + bytes > connection_window()) return nullptr;
  SendPath* best = nullptr;
  SendPath* fallback = nullptr;
  for (SendPath& path : paths_) {
    if (!may_send_on(path, bytes, forced) || path_ready_time(path) > now) continue;
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
  path.paced_ns = ceil_ns(path.next_tx_ns);
  earliest_paced_ns_ = path.paced_ns;
  for (const SendPath& p : paths_) earliest_paced_ns_ = std::min(earliest_paced_ns_, p.paced_ns);
  if (rate_hint_bps_ > 0) {
    conn_next_tx_ns_ = std::max<double>(conn_next_tx_ns_, static_cast<double>(now)) +
                       wire_bits * 1e9 / static_cast<double>(rate_hint_bps_);
    conn_paced_ns_ = ceil_ns(conn_next_tx_ns_);
  }
  if (path.rto_deadline == kNever) path.rto_deadline = now + rto(path);
  // This packet is the connection's tail now: arm its probe (probe_tail).
  if (!tail_probed_ && path.rtt.has_sample() && !rocev2())
    timed_loss_at_ = std::min(timed_loss_at_, tail_probe_time(path, now));
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
    if (qp && !qp->source_readable(record.ref)) qp->abandon_source(record.ref);
    size_t length = qp ? qp->build_packet(record.ref, origin(0), path.rewind_seq - 1, wire::kFlagRetransmit, out) : 0;
    if (length == 0 && qp && record.ref.response) {  // a resent READ response whose memory is gone
      ++endpoint_.counters_.tx_response_unreadable;
      qp->abandon_source(record.ref);
    }
    if (length == 0) {
      wire::DataHeader filler;
      filler.opcode = wire::Opcode::Write;
      filler.dst_qpn = kPsnFillerQpn;
      filler.path_seq = path.rewind_seq - 1;
      filler.flags = wire::kFlagRetransmit;
      length = wire::encode_data(out, origin(0), filler, nullptr, nullptr, nullptr, 0);
      if (length == 0) continue;
      ++endpoint_.counters_.tx_psn_fillers;
    } else if (!record.ref.response) {
      qp->on_request_sent(now);
    }
    record.sent = now;
    if (record.state != TxRecord::State::InFlight) {
      record.state = TxRecord::State::InFlight;
      add_inflight(path, record.bytes);
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

size_t Connection::send_data(Time now, std::span<uint8_t> out, uint16_t& path_id, std::span<const uint8_t>* gathered) {
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
  // Two cheap checks before choosing a path, where most calls end: is any
  // path's pacing due, and is there anything to send?
  const Time burst = endpoint_.config().pacing_burst_ns;
  if (std::max(earliest_paced_ns_, conn_paced_ns_) > now + burst) return 0;
  if (!retransmit && std::none_of(qps_.begin(), qps_.end(), [](const QueuePair* qp) { return qp->has_new_chunks(); }))
    return 0;
  const bool forced = retransmit && retransmits_.front().forced;
  SendPath* path = pick_path(now, mtu_bytes, retransmit ? retransmits_.front().lost_on : -1, forced);
  if (!path) return 0;

  ChunkRef ref;
  uint8_t flags = 0;
  if (retransmit) {
    ref = retransmits_.front().ref;
    if (retransmits_.front().tail_probe) flags |= wire::kFlagAckRequest;
    retransmits_.pop_front();
    flags |= wire::kFlagRetransmit;
  } else {
    // The QPs take turns (docs/spec.md 8.6): the one whose turn it is keeps
    // sending until it has sent kQpTurnBytes (as datagrams) or has nothing new.
    bool found = false;
    for (size_t tried = 0; tried <= qps_.size() && !found; ++tried) {
      if (tried > 0 || qp_turn_bytes_ >= kQpTurnBytes) {
        qp_cursor_ = (qp_cursor_ + 1) % qps_.size();
        qp_turn_bytes_ = 0;
      }
      found = qps_[qp_cursor_]->next_new_chunk(ref);
    }
    if (!found) return 0;
  }
  QueuePair* qp = attached_qp(ref.qpn);
  if (!qp) return 0;
  if (!qp->source_readable(ref)) {
    qp->abandon_source(ref);
    return 0;
  }
  uint32_t payload = 0;
  const size_t length = qp->build_packet(ref, origin(path->id), path->next_seq, flags, out, &payload, gathered);
  if (length == 0) {
    if (retransmit && ref.response) {  // a resent READ response whose memory is gone
      ++endpoint_.counters_.tx_response_unreadable;
      qp->abandon_source(ref);
    }
    return 0;
  }
  if (!ref.response) qp->on_request_sent(now);
  if (!retransmit) qp_turn_bytes_ += length;  // headers too: a READ request carries no payload
  path->records.push_back({ref, now, static_cast<uint32_t>(length), TxRecord::State::InFlight});
  ++path->next_seq;
  add_inflight(*path, static_cast<uint32_t>(length));
  EndpointCounters& counters = endpoint_.counters_;
  ++counters.tx_data_packets;
  counters.tx_data_bytes += payload;
  if (retransmit) {
    ++counters.tx_retransmits;
    ++path->stats.retransmits;
  }
  after_send(now, *path, static_cast<uint32_t>(length));
  path_id = path->id;
  return length;
}

size_t Connection::poll_transmit(Time now, std::span<uint8_t> out, uint16_t& path_id,
                                 std::span<const uint8_t>* gathered) {
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
      path_id = reply_path(now);
    }
    return wire::encode_probe(out, origin(c.path_id), c.type, c.probe);
  }
  if (ack_due(now)) return send_ack(now, out, path_id);
  return send_data(now, out, path_id, gathered);
}

Time Connection::next_wakeup() const {
  if (!control_.empty() || farewell_due_) return 0;
  Time wake = kNever;
  if (unacked_packets_ > 0 && dirty_paths_ != 0) {
    if (ack_now_ || unacked_packets_ >= endpoint_.config().ack_every_packets) return 0;
    wake = oldest_unacked_ + endpoint_.ack_delay();
  }
  if (has_data_to_send()) {
    const uint32_t mtu_bytes = endpoint_.config().mtu + static_cast<uint32_t>(wire::kDataHeaderBytes);
    const bool forced = !retransmits_.empty() && retransmits_.front().forced;
    const bool connection_full = !forced && inflight_total_ + mtu_bytes > connection_window();
    for (const SendPath& path : paths_) {
      if (rocev2() && path.rewinding) {
        wake = std::min(wake, path_wakeup_time(path));
      } else if (!connection_full && may_send_on(path, mtu_bytes, forced)) {
        wake = std::min(wake, path_wakeup_time(path));
      }
    }
  }
  wake = std::min(wake, timed_loss_at_);
  for (const SendPath& path : paths_) {
    wake = std::min(wake, path.rto_deadline);
    if (path.health != PathHealth::Active) wake = std::min(wake, path.probe_at);
  }
  for (const QueuePair* qp : qps_) wake = std::min({wake, qp->next_rnr_resend(), qp->retry_at()});
  return wake;
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
