// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "shared_receive_queue.h"

namespace metaroce::transport {

PostResult SharedReceiveQueue::post(const RecvWr& wr) {
  if (wr.num_sge > kMaxSge) return PostResult::InvalidArgument;
  if (wqes_.size() >= max_wr_) return PostResult::QueueFull;
  wqes_.push_back(wr);
  return PostResult::Ok;
}

std::optional<RecvWr> SharedReceiveQueue::take(bool& limit_reached) {
  limit_reached = false;
  if (wqes_.empty()) return std::nullopt;
  RecvWr wr = wqes_.front();
  wqes_.pop_front();
  if (limit_ != 0 && wqes_.size() < limit_) {
    limit_ = 0;
    limit_reached = true;
  }
  return wr;
}

PostResult SharedReceiveQueue::modify(std::optional<uint32_t> max_wr, std::optional<uint32_t> limit) {
  const uint32_t capacity = max_wr.value_or(max_wr_);
  if (capacity == 0 || capacity < wqes_.size()) return PostResult::InvalidArgument;
  if (limit && *limit > capacity) return PostResult::InvalidArgument;
  max_wr_ = capacity;
  if (limit) limit_ = *limit;
  return PostResult::Ok;
}

}  // namespace metaroce::transport
