// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A queue pair's life cycle (state changes, flush) and message lookups; the
// requester, completer and responder are in their own files.
#include "queue_pair.h"

#include "connection.h"
#include "endpoint.h"
#include "shared_receive_queue.h"

namespace metaroce::transport {

QueuePair::QueuePair(Endpoint& endpoint, uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq,
                     const QpConfig& config, SharedReceiveQueue* srq)
    : QueuePairCommon(endpoint, qpn, pd, send_cq, recv_cq, srq), config_(config) {}

uint32_t QueuePair::mtu() const {
  const uint32_t endpoint_mtu = endpoint_.config().mtu;
  return config_.mtu != 0 && config_.mtu < endpoint_mtu ? config_.mtu : endpoint_mtu;
}

void QueuePair::to_rtr(Connection* connection, uint32_t remote_qpn, const QpConfig& config) {
  connection_ = connection;
  remote_qpn_ = remote_qpn;
  config_ = config;
  // The responder's stream starts at rq_psn, the requester's at sq_psn
  // (verbs passes it at RTS, set_requester_config()).
  completed_msn_ = config.rq_psn - 1;
  next_msn_ = config.sq_psn;
  peer_epoch_ = 0;
  state_ = QpState::ReadyToReceive;
}

void QueuePair::to_reset() {
  send_queue_.clear();
  send_cursor_ = 0;
  recv_queue_.clear();
  inbound_.clear();
  responses_.clear();
  atomic_results_.clear();
  next_msn_ = 1;
  next_recv_index_ = 0;
  recv_consumed_ = 0;
  completed_msn_ = 0;
  reads_atomics_in_flight_ = 0;
  retry_at_ = kNever;
  retries_ = 0;
  retry_exhaustion_.reset();
  fatal_.reset();
  fatal_naked_attempt_ = -1;
  abandoned_.clear();
  peer_epoch_ = 0;
  state_ = QpState::Reset;
}

OutboundMessage* QueuePair::find_request(uint32_t msn) {
  if (send_queue_.empty()) return nullptr;
  const uint32_t index = msn - send_queue_.front().msn;
  if (index >= send_queue_.size()) return nullptr;
  return &send_queue_[index];
}

const OutboundMessage* QueuePair::find_request(uint32_t msn) const {
  return const_cast<QueuePair*>(this)->find_request(msn);
}

OutboundMessage* QueuePair::find_message(const ChunkRef& ref) {
  if (ref.response) {
    auto it = responses_.find(ref.msn);
    return it == responses_.end() ? nullptr : &it->second;
  }
  return find_request(ref.msn);
}

const OutboundMessage* QueuePair::find_message(const ChunkRef& ref) const {
  return const_cast<QueuePair*>(this)->find_message(ref);
}

void QueuePair::flush() {
  while (!send_queue_.empty()) {
    const OutboundMessage& m = send_queue_.front();  // kept until reused (ring_queue.h)
    send_queue_.pop_front();
    complete_send_wr(m, WcStatus::WorkRequestFlushed);
  }
  send_cursor_ = 0;
  reads_atomics_in_flight_ = 0;
  while (!recv_queue_.empty()) {
    endpoint_.push_flushed_receive(recv_cq_, qpn_, recv_queue_.front().wr_id);
    recv_queue_.pop_front();
  }
  inbound_.clear();
  responses_.clear();
}

}  // namespace metaroce::transport
