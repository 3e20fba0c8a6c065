// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "receive_scoreboard.h"
#include "sequence_number.h"

namespace metaroce::transport {
namespace {

constexpr size_t kWords = wire::kSackBits / 64;

void shift_up(std::array<uint64_t, kWords>& bits, uint32_t by) {
  if (by >= wire::kSackBits) {
    bits.fill(0);
    return;
  }
  const uint32_t words = by / 64;
  const uint32_t rest = by % 64;
  for (size_t i = kWords; i-- > 0;) {
    uint64_t value = 0;
    if (i >= words) {
      value = bits[i - words] << rest;
      if (rest != 0 && i >= words + 1) value |= bits[i - words - 1] >> (64 - rest);
    }
    bits[i] = value;
  }
}

}  // namespace

ReceiveScoreboard::Arrival ReceiveScoreboard::record(uint32_t seq, bool& gap) {
  gap = false;
  if (!any_) {
    any_ = true;
    highest_ = seq;
    bits_.fill(0);
    bits_[0] = 1;
    gap = seq != 0;
    return Arrival::New;
  }
  if (seq_after(seq, highest_)) {
    const uint32_t by = seq - highest_;
    gap = by > 1;
    shift_up(bits_, by);
    bits_[0] |= 1;
    highest_ = seq;
    return Arrival::New;
  }
  const uint32_t distance = highest_ - seq;
  if (distance >= wire::kSackBits) return Arrival::TooOld;
  uint64_t& word = bits_[distance / 64];
  const uint64_t bit = uint64_t{1} << (distance % 64);
  if (word & bit) return Arrival::Duplicate;
  word |= bit;
  return Arrival::New;
}

bool ReceiveScoreboard::received(uint32_t seq) const {
  if (!any_) return false;
  const uint32_t distance = highest_ - seq;
  if (distance >= wire::kSackBits) return false;
  return (bits_[distance / 64] >> (distance % 64)) & 1;
}

void ReceiveScoreboard::fill(uint16_t path_id, wire::PathSack& block) const {
  block.path_id = path_id;
  block.ce_count = ce_count_;
  block.highest_seq = highest_;
  block.bits = bits_;
}

InOrderReceiver::Arrival InOrderReceiver::classify(uint32_t seq) {
  if (seq == expected_) return Arrival::Expected;
  return record(seq);
}

InOrderReceiver::Arrival InOrderReceiver::record(uint32_t seq) {
  if (seq == expected_) {
    ++expected_;
    nak_sent_ = false;
    return Arrival::Expected;
  }
  if (seq_after(expected_, seq)) return Arrival::Duplicate;
  if (!nak_sent_) {
    nak_sent_ = true;
    nak_due_ = true;
  }
  return Arrival::OutOfOrder;
}

bool InOrderReceiver::take_nak_due() {
  const bool due = nak_due_;
  nak_due_ = false;
  return due;
}

void InOrderReceiver::fill(uint16_t path_id, wire::PathSack& block) const {
  // Nothing received yet: report nothing rather than a wrapped-around window.
  if (expected_ == 0) {
    block = {};
    block.path_id = path_id;
    block.ce_count = ce_count_;
    block.highest_seq = 0;
    return;
  }
  block.path_id = path_id;
  block.ce_count = ce_count_;
  block.highest_seq = expected_ - 1;
  block.bits.fill(~uint64_t{0});
}

}  // namespace metaroce::transport
