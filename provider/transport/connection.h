// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A connection to one remote endpoint: the paths (each its own sequence
// space, RTT, window, ECN state and health), the receive scoreboards that
// ACKs report, loss detection and selective retransmission, and the
// scheduler that sprays the streams' chunks over the paths.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "counters.h"
#include "message.h"
#include "metaroce/wire.h"
#include "path_congestion.h"
#include "receive_scoreboard.h"
#include "rtt_estimator.h"
#include "types.h"

namespace metaroce::transport {

class Endpoint;
class QueuePair;

class Connection {
 public:
  Connection(Endpoint& endpoint, PeerId peer);

  PeerId peer() const { return peer_; }
  void attach(QueuePair* qp);
  void detach(QueuePair* qp);

  void on_packet(Time now, const wire::Packet& packet, bool ce_marked);
  void on_timer(Time now);
  // Writes the next datagram due now; returns its length (0 = nothing due).
  size_t poll_transmit(Time now, std::span<uint8_t> out, uint16_t& path_id);
  Time next_wakeup() const;

  void queue_nak(uint16_t path_id, const wire::Nak& nak);
  void on_plane_change(Time now, uint16_t plane, bool up);
  void on_message_completed() { ack_now_ = true; }
  void set_congestion(const CongestionParams& params);

  // For the receiver's rate hint: did this peer send us data recently, and
  // at what rate (data packets' bytes over the last one to two windows)?
  bool sending_to_us(Time now) const;
  double recent_rx_rate_bps(Time now) const;
  std::vector<PathSnapshot> snapshots() const;

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
    std::deque<TxRecord> records;  // records[i] has path_seq first_seq + i
    uint32_t first_seq = 0;
    uint32_t inflight_bytes = 0;
    bool any_acked = false;
    uint32_t highest_acked = 0;
    RttEstimator rtt;
    PathCongestion cc;
    double next_tx_ns = 0;  // pacing
    Time rto_deadline = kNever;
    uint32_t consecutive_rtos = 0;
    Time probe_at = kNever;
    Time probe_interval = 0;
    uint32_t probe_seq = 0;
    bool probe_unanswered = false;  // the newest probe has had no reply
    Time probe_sent_at = 0;
    uint32_t last_ce_count = 0;
    // rocev2 go-back-N: resend records from rewind_seq up to next_seq.
    bool rewinding = false;
    uint32_t rewind_seq = 0;
    PathSnapshot stats;
  };

  struct Retransmit {
    ChunkRef ref;
    uint16_t lost_on = 0;
    bool tail_probe = false;  // resend although acknowledged, to elicit an ACK
  };

  struct Control {
    wire::PacketType type = wire::PacketType::Nak;
    uint16_t path_id = 0;
    wire::Nak nak;
    wire::Probe probe;
  };

  bool rocev2() const { return profile_ == Profile::RoCEv2; }
  wire::Origin origin(uint16_t path_id) const;
  QueuePair* attached_qp(uint32_t qpn) const;
  void on_data(Time now, const wire::Packet& packet, bool ce_marked);
  void on_ack(Time now, const wire::Ack& ack);
  void on_path_sack(Time now, SendPath& path, const wire::PathSack& block, Time ack_delay);
  void on_nak(Time now, const wire::Nak& nak);
  void on_probe_reply(Time now, const wire::Packet& packet);
  void declare_lost(SendPath& path, TxRecord& record);
  void trim(SendPath& path);
  void path_timeout(Time now, SendPath& path);
  bool peer_answered_after_oldest_inflight(const SendPath& path) const;
  // A path stopped carrying data: the active paths of its plane take over
  // its window, so that the connection keeps its rate.
  void hand_over_window(const SendPath& leaving);
  void retry_timeout(Time now);
  void note_progress(Time now);
  Time rto(const SendPath& path) const;
  Time retry_deadline() const;
  bool has_outstanding_work() const;
  bool has_data_to_send() const;
  bool path_has_room(const SendPath& path, uint32_t bytes) const;
  uint64_t connection_window() const;
  uint64_t inflight_bytes() const;
  SendPath* pick_path(Time now, uint32_t bytes, int avoid) ;
  // When poll_transmit may next send on the path (its paced time less the
  // burst allowance), and when next_wakeup() reports that.
  Time path_ready_time(const SendPath& path) const;
  Time path_wakeup_time(const SendPath& path) const;
  void after_send(Time now, SendPath& path, uint32_t bytes);
  size_t send_data(Time now, std::span<uint8_t> out, uint16_t& path_id);
  size_t send_rewind(Time now, SendPath& path, std::span<uint8_t> out);
  size_t send_ack(Time now, std::span<uint8_t> out, uint16_t& path_id);
  bool ack_due(Time now) const;
  Time activity_window() const;  // 4 base RTTs + ACK delay
  void count_rx_bytes(Time now, uint64_t bytes);
  // The next path in the ACK rotation whose plane is up.
  uint16_t next_ack_path();
  uint32_t rate_hint_mbps(Time now) const;

  Endpoint& endpoint_;
  const PeerId peer_;
  const Profile profile_;
  std::vector<QueuePair*> qps_;
  size_t qp_cursor_ = 0;

  // Sender.
  std::vector<SendPath> paths_;
  std::deque<Retransmit> retransmits_;
  double conn_next_tx_ns_ = 0;  // pacing at the peer's rate hint
  uint64_t rate_hint_bps_ = 0;  // 0 = none received
  Time last_progress_ = 0;
  uint32_t retry_count_ = 0;
  Time last_peer_rx_ = 0;  // any packet from the peer, on any path
  bool any_peer_rx_ = false;

  // Receiver.
  std::array<ReceiveScoreboard, wire::kMaxPaths> scoreboards_{};
  std::array<Time, wire::kMaxPaths> highest_rx_time_{};  // arrival of each path's highest_seq
  InOrderReceiver in_order_;
  uint64_t dirty_paths_ = 0;  // bit per path id with news for the next ACK
  uint32_t unacked_packets_ = 0;
  Time oldest_unacked_ = kNever;
  bool ack_now_ = false;
  size_t ack_stream_cursor_ = 0;
  uint16_t rx_path_count_ = 0;   // highest path id the peer sent data on, + 1
  uint32_t ack_path_cursor_ = 0;
  Time last_data_rx_ = 0;
  bool any_data_rx_ = false;
  Time rx_window_start_ = 0;
  uint64_t rx_window_bytes_ = 0, rx_prev_window_bytes_ = 0;

  std::deque<Control> control_;
};

}  // namespace metaroce::transport
