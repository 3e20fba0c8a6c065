// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A connection to one remote endpoint: the paths (each its own sequence
// space, RTT, window, ECN state and health), the receive scoreboards that
// ACKs report, loss detection and selective retransmission, and the
// scheduler that sprays the streams' chunks over the paths.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "counters.h"
#include "message.h"
#include "metaroce/wire.h"
#include "path_congestion.h"
#include "receive_scoreboard.h"
#include "rtt_estimator.h"
#include "types.h"
#include "ring_queue.h"

namespace metaroce::transport {

template <size_t N>
constexpr std::array<Time, N> filled(Time value) {
  std::array<Time, N> a{};
  a.fill(value);
  return a;
}

class Endpoint;
class QueuePair;

class Connection {
 public:
  Connection(Endpoint& endpoint, PeerId peer);

  PeerId peer() const { return peer_; }
  void attach(QueuePair* qp);
  void detach(QueuePair* qp);

  // `arrival` (<= now): when the packet reached the host (Endpoint::on_datagram).
  void on_packet(Time now, const wire::Packet& packet, bool ce_marked, Time arrival);
  // The peer came back as a new incarnation (docs/spec.md 9.4): what we
  // recorded of its paths, and what it reported of ours, starts again.
  void on_peer_restart();
  void on_timer(Time now);
  // Writes the next datagram due now; returns its length (0 = nothing due).
  // `gathered`: as QueuePair::build_packet's (null: every byte is written).
  size_t poll_transmit(Time now, std::span<uint8_t> out, uint16_t& path_id, std::span<const uint8_t>* gathered);
  Time next_wakeup() const;

  void queue_nak(uint16_t path_id, const wire::Nak& nak);
  // What changes a path's health (docs/spec.md 8.8; planes 8.15).
  enum class HealthEvent : uint8_t {
    NewDataAcked,   // an ACK of new data on the path
    ProbeAnswered,  // a ProbeReply to its newest Probe
    BlamedSuspect,  // path_suspect_timeouts blamed timeouts
    BlamedFail,     // path_fail_timeouts blamed timeouts
    PlaneDown,      // its plane's NIC went down: not probed until it is up
    PlaneUp,        // its plane's NIC came back: probed at once
  };
  void on_plane_change(Time now, uint16_t plane, bool up);
  void on_message_completed() { ack_now_ = true; }
  // The driver is about to stop: an ACK of whatever arrived is due now.
  void ack_everything_now();
  // `qp` is being destroyed: its last completed_msn goes out in the next
  // few ACKs, since the peer's requester may still wait for it.
  void farewell(const QueuePair& qp);
  void set_congestion(const CongestionParams& params);
  // The paths' largest RTO: the shortest transport timeout of a QP.
  Time retry_base() const { return retry_base_; }

  // For the receiver's rate hint: did this peer send us data recently, and
  // at what rate (data packets' bytes over the last one to two windows)?
  bool sending_to_us(Time now) const;
  double recent_rx_rate_bps(Time now) const;
  std::vector<PathSnapshot> snapshots() const;
  // When anything (data or an ACK) last arrived from the peer; 0: never.
  Time last_heard() const { return std::max(last_ack_rx_, any_data_rx_ ? last_data_rx_ : 0); }

 private:
  struct TxRecord {
    enum class State : uint8_t { InFlight, Acked, Lost };
    ChunkRef ref;
    Time sent = 0;
    uint32_t bytes = 0;
    State state = State::InFlight;
  };

  struct SendPath {
    explicit SendPath(uint16_t path_id, Time initial_rtt, const CongestionParams& params)
        : id(path_id), rtt(initial_rtt), cc(params) {}
    uint16_t id;
    PathHealth health = PathHealth::Active;
    uint32_t next_seq = 0;
    RingQueue<TxRecord> records;  // records[i] has path_seq first_seq + i
    uint32_t first_seq = 0;
    uint32_t inflight_bytes = 0;
    bool any_acked = false;
    uint32_t highest_acked = 0;
    RttEstimator rtt;
    PathCongestion cc;
    double next_tx_ns = 0;  // pacing
    Time paced_ns = 0;      // ceil(next_tx_ns), kept beside it for the scheduler
    Time rto_deadline = kNever;
    // Consecutive timeouts that the path itself is to blame for (the peer
    // acknowledged packets sent after the one that timed out): they move the
    // path to suspect and failed. The backoff counts timeouts while nothing
    // sent later was acknowledged anywhere (a stall), which double the RTO.
    uint32_t blamed_timeouts = 0;
    uint32_t backoff = 0;
    Time probe_at = kNever;
    Time probe_interval = 0;
    Time probe_sent = kNever;  // newest probe not yet answered
    uint32_t probe_seq = 0;
    uint32_t last_ce_count = 0;
    // rocev2 go-back-N: resend records from rewind_seq up to next_seq.
    bool rewinding = false;
    uint32_t rewind_seq = 0;
    // It declared a packet of this path lost, and the path had nothing
    // acknowledged since: the RTO blames the path as for a loss of its own.
    bool lost_by_time_unanswered = false;
    PathSnapshot stats;
  };

  struct Retransmit {
    ChunkRef ref;
    uint16_t lost_on = 0;
    bool tail_probe = false;  // resend although acknowledged, to elicit an ACK
    // Sent even when the windows are full: the one packet that an RTO, a
    // tail probe or a QP's retry timer resends, as TCP always sends its RTO
    // retransmission. Otherwise a connection whose windows are full of
    // packets whose ACKs were lost sends nothing, hears nothing back, and
    // its QPs' retry counters run out. Queued at the front, so that it is
    // next whatever waits behind the windows.
    bool forced = false;
  };

  struct Control {
    wire::PacketType type = wire::PacketType::Nak;
    uint16_t path_id = 0;
    wire::Nak nak;
    wire::Probe probe;
  };
  // Bounded: a full queue drops (and counts) what comes next.
  void queue_control(const Control& c);

  bool rocev2() const { return profile_ == Profile::RoCEv2; }
  wire::Origin origin(uint16_t path_id) const;
  // The path an ACK or ProbeReply leaves on (see send_ack).
  uint16_t reply_path(Time now);
  // Which of the peer's paths (< wire::kHeardPathBits) sent us something
  // among the last few packets from the peer.
  uint16_t heard_paths() const;
  QueuePair* attached_qp(uint32_t qpn) const;
  void on_data(Time now, const wire::Packet& packet, bool ce_marked, Time arrival);
  void on_ack(Time now, const wire::Ack& ack, Time arrival);
  void on_path_sack(Time now, SendPath& path, const wire::PathSack& block, Time ack_delay, Time arrival);
  void on_nak(Time now, const wire::Nak& nak);
  void on_probe_reply(Time now, const wire::Packet& packet);
  void declare_lost(SendPath& path, TxRecord& record, bool forced = false);
  // Loss detection across paths by time (RACK, RFC 8985, with the
  // connection's other paths as the reordering): see connection.cpp.
  void detect_losses_by_time(Time now);
  void probe_tail(Time now);  // its tail loss probe; called by detect_losses_by_time
  Time tail_probe_time(const SendPath& path, Time sent) const;
  void trim(SendPath& path);
  void path_timeout(Time now, SendPath& path);
  // Every change of a path's health goes through here, along the table in
  // connection.cpp, with the actions of entering the new state. An event
  // with no row for the path's state changes nothing (false).
  bool set_health(Time now, SendPath& path, HealthEvent event);
  // A path stopped carrying data: the active paths of its plane take over
  // its window, so that the connection keeps its rate.
  void hand_over_window(const SendPath& leaving);
  // The path lost a packet or a probe while the peer acknowledged traffic
  // sent after it: counts toward suspect and failed.
  void blame_path(Time now, SendPath& path);
  void probe_path(Time now, SendPath& path);
  void on_path_probe_timer(Time now, SendPath& path);
  // Did the peer acknowledge something sent after `sent`, on any path?
  bool delivered_after(Time sent) const { return any_delivered_ && latest_delivered_sent_ > sent; }
  // Is `path` the only active one?
  bool last_active(const SendPath& path) const;

  Time rto(const SendPath& path) const;
  // srtt + 4 rttvar + the peer's ACK delay, within [min_rto, max_rto]: the
  // RTO before backoff.
  Time base_rto(const SendPath& path) const;
  // The holding time the peer reports for the packets it acknowledges (its
  // ACK delay, and any wait in its socket buffer for its progress thread),
  // at least our own ACK delay: RTT samples leave it out, so timers add it
  // (QUIC's max_ack_delay, RFC 9002 section 6.2.1). It follows a longer
  // holding at once and a shorter one slowly.
  Time peer_ack_delay() const;
  void note_peer_holding(Time holding);

  // Recomputes retry_base_; called whenever a path's RTT estimate changes.
  void update_retry_base();
  bool has_data_to_send() const;
  bool path_has_room(const SendPath& path, uint32_t bytes) const;
  uint64_t connection_window() const;
  // A path's inflight_bytes change only through these, which keep inflight_total_.
  void add_inflight(SendPath& path, uint32_t bytes) {
    path.inflight_bytes += bytes;
    inflight_total_ += bytes;
  }
  void remove_inflight(SendPath& path, uint32_t bytes) {
    path.inflight_bytes -= bytes;
    inflight_total_ -= bytes;
  }
  SendPath* pick_path(Time now, uint32_t bytes, int avoid, bool forced);
  // Forced: any active path, whatever its window (Retransmit::forced).
  bool may_send_on(const SendPath& path, uint32_t bytes, bool forced) const;
  // When poll_transmit may next send on the path (its paced time less the
  // burst allowance), and when next_wakeup() reports that.
  Time path_ready_time(const SendPath& path) const;
  Time path_wakeup_time(const SendPath& path) const;
  void after_send(Time now, SendPath& path, uint32_t bytes);
  size_t send_data(Time now, std::span<uint8_t> out, uint16_t& path_id, std::span<const uint8_t>* gathered);
  size_t send_rewind(Time now, SendPath& path, std::span<uint8_t> out);
  size_t send_ack(Time now, std::span<uint8_t> out, uint16_t& path_id);
  bool ack_due(Time now) const;
  Time activity_window() const;  // 2 base RTTs + ACK delay
  void count_rx_bytes(Time now, uint64_t bytes);
  uint32_t rate_hint_mbps(Time now) const;

  Endpoint& endpoint_;
  const PeerId peer_;
  const Profile profile_;
  std::vector<QueuePair*> qps_;
  size_t qp_cursor_ = 0;
  uint64_t qp_turn_bytes_ = 0;

  // Sender.
  std::vector<SendPath> paths_;
  RingQueue<Retransmit> retransmits_;
  double conn_next_tx_ns_ = 0;         // pacing at the peer's rate hint
  Time conn_paced_ns_ = 0;             // ceil(conn_next_tx_ns_)
  Time earliest_paced_ns_ = 0;         // the paths' smallest paced_ns
  std::vector<QueuePair*> timer_qps_;  // on_timer's copy of qps_, kept to reuse its storage
  uint64_t rate_hint_bps_ = 0;         // 0 = none received
  uint64_t inflight_total_ = 0;        // the paths' inflight_bytes summed
  Time retry_base_ = 0;                // see retry_base()
  // Send time of the latest-sent packet that the peer acknowledged.
  Time latest_delivered_sent_ = 0;
  Time timed_loss_at_ = kNever;  // when detect_losses_by_time is next due
  bool any_delivered_ = false;
  Time last_ack_rx_ = 0;
  Time peer_holding_ = 0;     // see peer_ack_delay()
  bool tail_probed_ = false;  // probe_tail resent the tail; no new data acknowledged since

  // Receiver.
  std::array<ReceiveScoreboard, wire::kMaxPaths> scoreboards_{};
  std::array<Time, wire::kMaxPaths> highest_rx_time_{};  // arrival of each path's highest_seq
  InOrderReceiver in_order_;
  uint64_t dirty_paths_ = 0;  // bit per path id with news for the next ACK
  uint32_t unacked_packets_ = 0;
  Time oldest_unacked_ = kNever;
  bool ack_now_ = false;
  size_t ack_stream_cursor_ = 0;
  struct Farewell {
    wire::StreamAck stream;
    uint32_t acks_left = 0;
  };
  std::vector<Farewell> farewells_;
  bool farewell_due_ = false;
  uint16_t rx_path_count_ = 0;  // highest path id the peer sent data on, + 1
  uint16_t reply_cursor_ = 0;   // the path of the last reply
  uint32_t replies_ = 0;
  // Reverse-path feedback: the peer reports which of our paths it hears
  // (CommonHeader::heard_paths), and we report which of its paths we hear.
  // unheard_since_[i]: when we first replied on our path i after the peer
  // last reported hearing it (kNever: no reply since).
  std::array<Time, wire::kHeardPathBits> unheard_since_ = filled<wire::kHeardPathBits>(kNever);
  uint64_t rx_packets_ = 0;
  std::array<uint64_t, wire::kHeardPathBits> heard_at_{};  // rx_packets_ when path i was last heard, + 1
  // heard_paths() as of the last packet received: it changes only then.
  mutable uint16_t heard_cache_ = 0;
  mutable bool heard_cache_valid_ = false;
  Time last_data_rx_ = 0;
  bool any_data_rx_ = false;
  Time rx_window_start_ = 0;
  uint64_t rx_window_bytes_ = 0, rx_prev_window_bytes_ = 0;

  RingQueue<Control> control_;
};

}  // namespace metaroce::transport
