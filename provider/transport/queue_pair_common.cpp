// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "queue_pair_common.h"

#include "endpoint.h"

namespace metaroce::transport {

void QueuePairCommon::to_error(bool requested) {
  const bool was_error = state_ == QpState::Error;
  state_ = QpState::Error;
  flush();
  if (was_error) return;
  if (!requested) endpoint_.notify({AsyncEventKind::QpFatal, qpn_});
  if (srq_) endpoint_.notify({AsyncEventKind::QpLastWqeReached, qpn_});
}

PostResult QueuePairCommon::post_own_recv(const RecvWr& wr, uint32_t max_recv_wr) {
  if (srq_) return PostResult::InvalidArgument;  // its receives come from the SRQ
  if (state_ == QpState::Reset) return PostResult::BadState;
  if (wr.num_sge > kMaxSge) return PostResult::InvalidArgument;
  if (recv_queue_.size() >= max_recv_wr) return PostResult::QueueFull;
  if (state_ == QpState::Error) {
    endpoint_.push_flushed_receive(recv_cq_, qpn_, wr.wr_id);
    return PostResult::Ok;
  }
  recv_queue_.push_back(wr);
  return PostResult::Ok;
}

}  // namespace metaroce::transport
