// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "peer_session.h"

#include <algorithm>

namespace metaroce::transport {

uint64_t ReplayWindow::expand(uint32_t low) const {
  if (!any_) return low;
  constexpr uint64_t kWrap = uint64_t{1} << 32;
  const uint64_t candidate = (highest_ & ~(kWrap - 1)) | low;
  if (candidate > highest_ + kWrap / 2 && candidate >= kWrap) return candidate - kWrap;
  if (candidate + kWrap / 2 < highest_) return candidate + kWrap;
  return candidate;
}

ReplayWindow::Check ReplayWindow::check(uint64_t number) const {
  if (!any_) return Check::Fresh;
  if (number > highest_) return number - highest_ > kMaxJump ? Check::TooFar : Check::Fresh;
  if (highest_ - number >= kBits) return Check::TooOld;
  return (bits_[(number % kBits) / 64] >> (number % 64)) & 1 ? Check::Replay : Check::Fresh;
}

void ReplayWindow::accept(uint64_t number) {
  if (!any_ || number > highest_) {
    if (!any_ || number - highest_ >= kBits) {
      bits_.fill(0);
    } else {
      for (uint64_t n = highest_ + 1; n < number; ++n) bits_[(n % kBits) / 64] &= ~(uint64_t{1} << (n % 64));
    }
    highest_ = number;
    any_ = true;
  }
  bits_[(number % kBits) / 64] |= uint64_t{1} << (number % 64);
}

PeerSession::EpochVerdict PeerSession::classify(uint32_t src_epoch, Time now, Time quiet) const {
  if (src_epoch == peer_epoch_ && peer_epoch_ != 0) return EpochVerdict::Current;
  if (src_epoch == 0) return EpochVerdict::Stale;
  if (std::find(retired_.begin(), retired_.end(), src_epoch) != retired_.end()) return EpochVerdict::Stale;
  if (peer_epoch_ != 0 && now - last_heard_ < quiet) return EpochVerdict::Stale;
  return EpochVerdict::New;
}

void PeerSession::adopt(uint32_t epoch) {
  if (peer_epoch_ != 0) {
    retired_[retired_next_] = peer_epoch_;
    retired_next_ = (retired_next_ + 1) % retired_.size();
  }
  peer_epoch_ = epoch;
  for (ReplayWindow& w : windows_) w.reset();
  for (auto& k : rx_keys_) k.reset();
}

uint64_t PeerSession::next_packet_number(uint32_t dst_epoch) {
  if (dst_epoch != tx_dst_epoch_) {
    tx_dst_epoch_ = dst_epoch;
    tx_packet_number_ = 0;
    tx_key_.reset();
  }
  return ++tx_packet_number_;
}

void PeerSession::set_pair_key(const PairKey& key, uint8_t role) {
  pair_key_ = key;
  role_ = role & 1;
  keyed_ = true;
  tx_key_.reset();
  for (auto& k : rx_keys_) k.reset();
}

TrafficKey* PeerSession::tx_key(uint32_t our_epoch, uint32_t dst_epoch) {
  if (!keyed_) return nullptr;
  if (!tx_key_ || tx_key_->sender_epoch() != our_epoch || tx_key_->receiver_epoch() != dst_epoch)
    tx_key_ = std::make_unique<TrafficKey>(pair_key_, role_, our_epoch, dst_epoch);
  return tx_key_->valid() ? tx_key_.get() : nullptr;
}

TrafficKey* PeerSession::rx_key(uint32_t src_epoch, uint32_t dst_epoch) {
  if (!keyed_ || src_epoch != peer_epoch_) return nullptr;
  std::unique_ptr<TrafficKey>& key = rx_keys_[dst_epoch != 0 ? 1 : 0];
  if (!key || key->receiver_epoch() != dst_epoch) key = candidate_key(src_epoch, dst_epoch);
  return key->valid() ? key.get() : nullptr;
}

std::unique_ptr<TrafficKey> PeerSession::candidate_key(uint32_t src_epoch, uint32_t dst_epoch) const {
  return std::make_unique<TrafficKey>(pair_key_, static_cast<uint8_t>(role_ ^ 1), src_epoch, dst_epoch);
}

}  // namespace metaroce::transport
