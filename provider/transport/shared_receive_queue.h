// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A shared receive queue (verbs SRQ): receive WQEs that several QPs take
// from in FIFO order. An RC responder binds a WQE to each receive ordinal of
// its stream when a message with that ordinal first arrives (the sender's
// recv_index is dense per stream, so ordinals are bound in order); a UD QP
// takes one per datagram. The limit, once armed, fires one event when the
// queue falls below it and disarms, as in verbs.
#pragma once

#include <cstdint>
#include <optional>

#include "types.h"
#include "ring_queue.h"

namespace metaroce::transport {

class SharedReceiveQueue {
 public:
  SharedReceiveQueue(uint32_t id, uint32_t pd, uint32_t max_wr) : id_(id), pd_(pd), max_wr_(max_wr) {}

  uint32_t id() const { return id_; }
  uint32_t pd() const { return pd_; }
  uint32_t max_wr() const { return max_wr_; }
  uint32_t limit() const { return limit_; }
  uint32_t depth() const { return static_cast<uint32_t>(wqes_.size()); }

  PostResult post(const RecvWr& wr);
  // The oldest WQE, removed; nothing when the queue is empty. `limit_reached`
  // is set when this take fired the armed limit.
  std::optional<RecvWr> take(bool& limit_reached);
  // ibv_modify_srq: a new capacity (not below the WQEs waiting) and/or a
  // limit to arm (0 disarms; not above the capacity).
  PostResult modify(std::optional<uint32_t> max_wr, std::optional<uint32_t> limit);

  // QPs that take from this queue: it cannot be destroyed while any does.
  uint32_t users = 0;

 private:
  const uint32_t id_;
  const uint32_t pd_;
  uint32_t max_wr_;
  uint32_t limit_ = 0;
  RingQueue<RecvWr> wqes_;
};

}  // namespace metaroce::transport
