// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What RC (QueuePair) and UD (UdQueuePair) queue pairs share: their
// identity, their state, their own receive queue and how they enter Error.
#pragma once

#include <cstdint>

#include "types.h"
#include "ring_queue.h"

namespace metaroce::transport {

class Endpoint;
class SharedReceiveQueue;

class QueuePairCommon {
 public:
  uint32_t qpn() const { return qpn_; }
  uint32_t pd() const { return pd_; }
  uint32_t send_cq() const { return send_cq_; }
  uint32_t recv_cq() const { return recv_cq_; }
  SharedReceiveQueue* srq() const { return srq_; }
  QpState state() const { return state_; }

  // Enters Error: flushes the queues and, the first time, raises the async
  // events the IB spec gives (QP fatal unless the consumer asked for it; last
  // WQE reached for a QP on an SRQ).
  void to_error(bool requested = false);

 protected:
  QueuePairCommon(Endpoint& endpoint, uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq,
                  SharedReceiveQueue* srq)
      : endpoint_(endpoint), qpn_(qpn), pd_(pd), send_cq_(send_cq), recv_cq_(recv_cq), srq_(srq) {}
  ~QueuePairCommon() = default;

  // Posts to the QP's own receive queue, of at most `max_recv_wr` WRs; in
  // Error the WR completes at once as flushed.
  PostResult post_own_recv(const RecvWr& wr, uint32_t max_recv_wr);
  // Completes every outstanding WR as flushed.
  virtual void flush() = 0;

  Endpoint& endpoint_;
  const uint32_t qpn_;
  const uint32_t pd_;
  const uint32_t send_cq_;
  const uint32_t recv_cq_;
  SharedReceiveQueue* const srq_;
  QpState state_ = QpState::Reset;
  RingQueue<RecvWr> recv_queue_;
};

}  // namespace metaroce::transport
