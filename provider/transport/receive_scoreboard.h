// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Receive side of one path: which path sequence numbers arrived, as the
// 256-bit window below the highest one that the ACK carries back.
#pragma once

#include <array>
#include <cstdint>

#include "metaroce/wire.h"

namespace metaroce::transport {

class ReceiveScoreboard {
 public:
  enum class Arrival : uint8_t {
    New,        // first time seen
    Duplicate,  // already recorded
    TooOld,     // more than kSackBits below the highest: cannot be reported any more
  };

  // Records seq; `gap` tells whether it jumped past a missing sequence number.
  Arrival record(uint32_t seq, bool& gap);
  // Further ahead of the highest than any sender's window could reach: a
  // forgery or garbage, which would make every genuine packet too old.
  // Before anything arrived the highest is the one before the first: a
  // path's sequence space starts at 0 (docs/spec.md §8.2), so a forged first
  // packet cannot poison the path either.
  bool beyond_window(uint32_t seq) const {
    const uint32_t highest = any_ ? highest_ : UINT32_MAX;
    return static_cast<int32_t>(seq - highest) > static_cast<int32_t>(kMaxForwardJump);
  }
  static constexpr uint32_t kMaxForwardJump = 1u << 16;
  void count_ce() { ++ce_count_; }
  bool received(uint32_t seq) const;
  bool empty() const { return !any_; }
  uint32_t highest() const { return highest_; }
  uint32_t ce_count() const { return ce_count_; }
  void fill(uint16_t path_id, wire::PathSack& block) const;

 private:
  // bits_ bit i <=> highest_ - i received.
  std::array<uint64_t, wire::kSackBits / 64> bits_{};
  uint32_t highest_ = 0;
  uint32_t ce_count_ = 0;
  bool any_ = false;
};

// The rocev2 profile's receive side: in-order only.
class InOrderReceiver {
 public:
  enum class Arrival : uint8_t { Expected, Duplicate, OutOfOrder };
  // What record(seq) would say, changing nothing but the NAK state of an
  // out-of-order arrival.
  Arrival classify(uint32_t seq);
  Arrival record(uint32_t seq);
  uint32_t expected() const { return expected_; }
  // True once per gap: the first out-of-order arrival after the expected one.
  bool take_nak_due();
  void count_ce() { ++ce_count_; }
  // Cumulative: everything below expected() is reported received.
  void fill(uint16_t path_id, wire::PathSack& block) const;
  bool empty() const { return expected_ == 0; }

 private:
  uint32_t expected_ = 0;
  uint32_t ce_count_ = 0;
  bool nak_sent_ = false;
  bool nak_due_ = false;
};

}  // namespace metaroce::transport
