// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A reliable-connected queue pair: one ordered stream in each direction of a
// Connection. As requester it turns work requests into outbound messages and
// completes them in posting order; as responder it places inbound chunks
// directly at their final address, completes messages in msn order, executes
// READs and atomics in that order and owes their responses. As in rxe, the
// work is split by role: requester.cpp, completer.cpp, responder.cpp;
// queue_pair.cpp holds the life cycle.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "config.h"
#include "counters.h"
#include "message.h"
#include "metaroce/wire.h"
#include "queue_pair_common.h"
#include "types.h"
#include "ring_queue.h"

namespace metaroce::transport {

class Connection;
class Endpoint;
class SharedReceiveQueue;

// What the responder (or the requester, for a response) decided about one
// data packet. The connection turns it into counters, ACK state and NAKs.
enum class Verdict : uint8_t {
  Placed,             // new chunk accepted
  DuplicateChunk,     // chunk already placed: ACK, discard
  DuplicateComplete,  // message already completed: ACK, discard
  OutOfWindow,        // msn beyond the window: drop, no ACK
  QpNotReady,         // QP state does not accept it: drop, no ACK
  ReceiverNotReady,   // NAK RNR
  AccessError,        // NAK RemoteAccess
  InvalidRequest,     // NAK InvalidRequest
  StaleResponse,      // response to nothing outstanding: drop
};
const char* to_string(Verdict verdict);  // "placed", "duplicate-chunk", ...

inline Verdict verdict_of(const RequestFailure& failure) {
  return failure.nak == wire::NakKind::RemoteAccess ? Verdict::AccessError : Verdict::InvalidRequest;
}

class QueuePair final : public QueuePairCommon {
 public:
  // With `srq`, receives come from that shared receive queue, not post_recv.
  QueuePair(Endpoint& endpoint, uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq, const QpConfig& config,
            SharedReceiveQueue* srq = nullptr);

  const QpConfig& config() const { return config_; }
  uint32_t remote_qpn() const { return remote_qpn_; }
  Connection* connection() const { return connection_; }

  void to_init() { state_ = QpState::Init; }
  void to_rtr(Connection* connection, uint32_t remote_qpn, const QpConfig& config);
  void to_rts() { state_ = QpState::ReadyToSend; }
  void set_requester_config(const QpConfig& config) {
    config_.retry_cnt = config.retry_cnt;
    config_.rnr_retry = config.rnr_retry;
    config_.timeout_ns = config.timeout_ns;
    config_.max_rd_atomic = config.max_rd_atomic;
    config_.sq_psn = config.sq_psn;
    next_msn_ = config.sq_psn;
  }
  // Flushes every outstanding work request and stops the stream. A QP that
  // fails by itself (not `requested` through modify_qp) reports QpFatal; an
  // SRQ-attached one then reports QpLastWqeReached.
  void to_reset();

  PostResult post_send(const SendWr& wr);
  PostResult post_recv(const RecvWr& wr);

  // --- transmit side ---
  // Next chunk never sent before (responses first), if the stream may send.
  bool next_new_chunk(ChunkRef& ref);
  bool has_new_chunks() const;
  // Still worth sending (message alive, same attempt, not yet acknowledged)?
  bool chunk_needed(const ChunkRef& ref) const;
  // Writes the data packet for ref; returns its length or 0, and sets
  // `payload_bytes` (when given) to the payload it carries. With `gathered`
  // given, a payload of new data in one piece of application memory is not
  // written: *gathered is set to it, and `out` holds the header alone
  // (EndpointConfig::gather_payload).
  size_t build_packet(const ChunkRef& ref, wire::Origin origin, uint32_t path_seq, uint8_t flags,
                      std::span<uint8_t> out, uint32_t* payload_bytes = nullptr,
                      std::span<const uint8_t>* gathered = nullptr) const;
  // Returns true when the chunk was not yet acknowledged in this attempt.
  bool on_chunk_acked(Time now, const ChunkRef& ref);
  bool has_outstanding_work() const;
  // The transport timer (verbs' timeout and retry_cnt), kept per QP as on an
  // RDMA NIC: it runs while a request of this QP is outstanding, restarts
  // on the QP's own progress (a chunk acknowledged for the first time, a
  // response, a completion, a NAK), and after retry_cnt expiries in a row
  // the oldest request fails with RETRY_EXC_ERR.
  Time retry_at() const { return retry_at_; }
  void on_request_sent(Time now);
  // The timer expired. When a chunk should be resent as a probe (the
  // oldest incomplete message has every chunk acknowledged yet has not
  // completed: its completion or an RNR NAK was lost), sets `ref` and
  // returns true; the second time the whole message is sent again as a new
  // attempt, since a chunk may have been refused for RNR.
  bool on_retry_timer(Time now, ChunkRef& ref);
  // Set when the timer failed this QP.
  const RetryExhaustion* retry_exhaustion() const { return retry_exhaustion_.get(); }
  // Every chunk's source memory is checked again before each send: the
  // application may have deregistered (and freed) it since the work
  // request was posted or the READ arrived. Once a message's whole source
  // passed, its chunks pass until the next deregistration
  // (MemoryRegistry::epoch).
  bool source_readable(const ChunkRef& ref);
  // The source is gone: a READ response is dropped and the requester
  // NAKed; a request fails with LOC_PROT_ERR.
  void abandon_source(const ChunkRef& ref);
  // Earliest RNR resend time of this QP, kNever if none.
  Time next_rnr_resend() const;
  void on_timer(Time now);

  // --- receive side ---
  Verdict on_request(const wire::Packet& packet);
  Verdict on_response(Time now, const wire::Packet& packet);
  void on_stream_ack(Time now, uint32_t completed_msn);
  // A NAK for one of our requests; stale ones are ignored.
  void on_nak(Time now, const wire::Nak& nak);
  // Retry exhaustion from the connection.
  void fail_with(WcStatus status);

  // The peer incarnation this QP incarnation talks to: the epoch of the
  // first data packet it accepted after RTR. False (drop) for a packet of
  // another one (docs/spec.md 9.4).
  bool bind_peer_epoch(uint32_t epoch) {
    if (peer_epoch_ == 0) peer_epoch_ = epoch;
    return peer_epoch_ == epoch;
  }

  uint32_t completed_msn() const { return completed_msn_; }
  // Has the responder completed a message since RTR (so completed_msn()
  // is worth reporting)?
  bool completed_any() const { return completed_msn_ != config_.rq_psn - 1; }
  bool take_ack_dirty() {
    const bool dirty = ack_dirty_;
    ack_dirty_ = false;
    return dirty;
  }

 private:
  OutboundMessage* find_request(uint32_t msn);
  const OutboundMessage* find_request(uint32_t msn) const;
  // The payload bytes of chunk `chunk` of `m`.
  uint32_t payload_of(const OutboundMessage& m, uint32_t chunk) const;
  const OutboundMessage* find_message(const ChunkRef& ref) const;
  OutboundMessage* find_message(const ChunkRef& ref);
  // Fills message from the first packet; ReceiverNotReady, or Placed with
  // message.failure set when the request cannot be carried out.
  uint32_t rd_atomic_outstanding() const;
  Verdict check_new_inbound(const wire::Packet& packet, InboundMessage& message);
  // The receive WQE that stream receive ordinal `index` uses: the QP's own
  // posted receives in order, or, with an SRQ, WQEs taken from it for the
  // ordinals in order. Null when none is there (RNR) or `index` is consumed.
  const RecvWr* receive_for(uint32_t index);
  void write_chunk(uint32_t msn, uint64_t dest, std::span<const uint8_t> payload);
  bool defer_tail(const wire::Packet& packet, const InboundMessage& message, uint32_t chunk) const;
  std::optional<RequestFailure> write_tail(uint32_t msn, InboundMessage& message);
  std::optional<RequestFailure> place_request_chunk(const wire::Packet& packet, InboundMessage& message,
                                                    uint32_t chunk);
  Verdict on_duplicate_request(const wire::Packet& packet);
  // `failure` is taken by value: advancing the stream may flush the QP and
  // free `message` (and the failure stored in it).
  Verdict fail_request(InboundMessage& message, RequestFailure failure, const wire::Packet& packet);
  void fail_responder(uint32_t msn, const InboundMessage& message);
  void advance_responder();
  void execute_read(uint32_t msn, const InboundMessage& message);
  bool execute_atomic(uint32_t msn, const InboundMessage& message);
  void queue_atomic_response(uint32_t msn, uint64_t original);
  void advance_requester();
  // Sends every chunk of m again as a new attempt.
  bool held(size_t index) const;
  void restart(OutboundMessage& m, size_t index);
  void release_rd_atomic(OutboundMessage& m);
  // Marks m finished with `status` (it completes in posting order).
  void finish(OutboundMessage& m, WcStatus status);
  bool recover_stalled(ChunkRef& ref);
  // A request made progress: the retry count starts again.
  void note_progress(Time now);
  Time retry_interval() const;
  void record_retry_exhaustion(Time now);
  bool requests_outstanding() const;
  void complete_send_wr(const OutboundMessage& message, WcStatus status);
  void flush() override;
  wire::Nak make_nak(wire::NakKind kind, uint32_t msn, uint16_t attempt) const;
  void nak(wire::NakKind kind, const wire::Packet& packet);
  static bool nak_due(int& naked_attempt, const wire::Packet& packet);
  uint32_t mtu() const;

  QpConfig config_;
  Connection* connection_ = nullptr;
  uint32_t remote_qpn_ = 0;
  uint32_t peer_epoch_ = 0;  // 0 until bind_peer_epoch()

  // Requester.
  RingQueue<OutboundMessage> send_queue_;  // msn order, front = oldest incomplete
  // At least the number of messages in send_queue_ with rnr_wait set (exact
  // after on_timer), so that the timer paths skip the queue in the common
  // case where no RNR NAK is pending.
  uint32_t rnr_waiting_ = 0;
  size_t send_cursor_ = 0;  // first message with unsent chunks
  uint32_t next_msn_ = 1;
  uint32_t next_recv_index_ = 0;
  uint32_t reads_atomics_in_flight_ = 0;
  Time retry_at_ = kNever;
  uint32_t retries_ = 0;                               // consecutive expiries without progress
  std::unique_ptr<RetryExhaustion> retry_exhaustion_;  // failure-only state: no cost to every QP

  // Responder. recv_queue_[i] is the WQE of receive ordinal recv_consumed_ + i.
  uint32_t recv_consumed_ = 0;  // receive WQEs completed so far
  uint32_t completed_msn_ = 0;
  std::map<uint32_t, InboundMessage> inbound_;               // msn > completed_msn_
  std::map<uint32_t, OutboundMessage> responses_;            // owed READ/atomic responses
  RingQueue<std::pair<uint32_t, uint64_t>> atomic_results_;  // (msn, original), newest last
  bool ack_dirty_ = false;
  // Last (msn, attempt) NAKed for RNR, to send one NAK per attempt.
  uint32_t rnr_nak_msn_ = 0;
  int rnr_nak_attempt_ = -1;
  // The NAK of the request that sent the QP to the error state.
  std::optional<wire::Nak> fatal_;
  int fatal_naked_attempt_ = -1;
  RingQueue<wire::Nak> abandoned_;  // READs given up, newest last
};

}  // namespace metaroce::transport
