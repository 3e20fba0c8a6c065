// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What an endpoint keeps per peer to frame its datagrams (docs/spec.md
// section 9): the peer's incarnation (epoch) and the ones it retired, the
// packet numbering of each direction with the receive side's replay window,
// and, in the authenticate and encrypt modes, the keys.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "packet_protection.h"
#include "types.h"

namespace metaroce::transport {

// Packet numbers seen from one sender under one key: a sliding window of
// kBits below the highest. Datagrams carry the low 32 bits; expand() puts
// back the high ones, as the number nearest the highest seen.
class ReplayWindow {
 public:
  static constexpr uint64_t kBits = 4096;
  // A genuine sender's numbers only jump by what the network lost; further
  // than this is not believed.
  static constexpr uint64_t kMaxJump = uint64_t{1} << 24;
  enum class Check : uint8_t { Fresh, Replay, TooOld, TooFar };

  uint64_t expand(uint32_t low) const;
  Check check(uint64_t number) const;
  void accept(uint64_t number);
  void reset() { *this = ReplayWindow{}; }

 private:
  std::array<uint64_t, kBits / 64> bits_{};  // bit number % kBits
  uint64_t highest_ = 0;
  bool any_ = false;
};

class PeerSession {
 public:
  enum class EpochVerdict : uint8_t {
    Current,  // the incarnation we know
    New,      // a first or a later incarnation: adopt once the datagram proves genuine
    Stale,    // a retired incarnation, or a new one while the current still talks
  };
  static constexpr size_t kRetiredEpochs = 8;

  uint32_t peer_epoch() const { return peer_epoch_; }
  // `quiet`: how long the current incarnation must have been silent before
  // another is believed to have replaced it.
  EpochVerdict classify(uint32_t src_epoch, Time now, Time quiet) const;
  // Makes `epoch` the peer's incarnation: the old one is retired, receive
  // windows and keys start afresh.
  void adopt(uint32_t epoch);
  void heard(Time now) { last_heard_ = now; }

  // Receive window for datagrams that named our epoch (true) or none (false).
  ReplayWindow& window(bool named_us) { return windows_[named_us ? 1 : 0]; }

  // The packet number of the next datagram to the peer; numbering starts
  // again whenever the destination epoch we write changes (a new key).
  uint64_t next_packet_number(uint32_t dst_epoch);

  // --- keys (authenticate and encrypt modes) ---
  void set_pair_key(const PairKey& key, uint8_t role);
  bool keyed() const { return keyed_; }
  // Our key towards the peer for (our epoch, dst_epoch); null without a pair key.
  TrafficKey* tx_key(uint32_t our_epoch, uint32_t dst_epoch);
  // The peer's key for (src_epoch, dst_epoch) when src_epoch is its current
  // incarnation; null without a pair key.
  TrafficKey* rx_key(uint32_t src_epoch, uint32_t dst_epoch);
  // A key for an incarnation not adopted yet (not kept).
  std::unique_ptr<TrafficKey> candidate_key(uint32_t src_epoch, uint32_t dst_epoch) const;

 private:
  uint32_t peer_epoch_ = 0;
  Time last_heard_ = 0;
  std::array<uint32_t, kRetiredEpochs> retired_{};
  size_t retired_next_ = 0;
  std::array<ReplayWindow, 2> windows_{};
  uint32_t tx_dst_epoch_ = 0;
  uint64_t tx_packet_number_ = 0;

  bool keyed_ = false;
  PairKey pair_key_{};
  uint8_t role_ = 0;
  std::unique_ptr<TrafficKey> tx_key_;
  std::array<std::unique_ptr<TrafficKey>, 2> rx_keys_;
};

}  // namespace metaroce::transport
