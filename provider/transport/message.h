// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Per-message state. An OutboundMessage is anything this side transmits as a
// run of chunks (one chunk = one data packet's payload, `mtu` bytes except the
// last): a request of the local send queue, or a READ/atomic response the
// local responder owes the peer. An InboundMessage is a request being received.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "metaroce/qp_rules.h"
#include "metaroce/wire.h"
#include "types.h"

namespace metaroce::transport {

// A set of chunk indices.
class ChunkSet {
 public:
  void reset(uint32_t chunks) {
    bits_.assign((chunks + 63) / 64, 0);
    count_ = 0;
    size_ = chunks;
  }
  bool test(uint32_t chunk) const { return (bits_[chunk / 64] >> (chunk % 64)) & 1; }
  // Returns false if it was already set.
  bool set(uint32_t chunk) {
    uint64_t& word = bits_[chunk / 64];
    const uint64_t bit = uint64_t{1} << (chunk % 64);
    if (word & bit) return false;
    word |= bit;
    ++count_;
    return true;
  }
  uint32_t count() const { return count_; }
  uint32_t size() const { return size_; }
  bool full() const { return count_ == size_; }

 private:
  std::vector<uint64_t> bits_;
  uint32_t count_ = 0;
  uint32_t size_ = 0;
};

// The largest message, as verbs' max_msg_sz: a request claiming more is invalid.
inline constexpr uint64_t kMaxMessageBytes = METAROCE_MAX_MSG_SIZE;

inline uint32_t chunk_count(uint64_t length, uint32_t mtu) {
  return length == 0 ? 1 : static_cast<uint32_t>((length + mtu - 1) / mtu);
}

// Identifies one chunk of one outbound message, as a transmit record keeps it.
struct ChunkRef {
  uint32_t qpn = 0;
  uint32_t msn = 0;
  uint32_t chunk = 0;
  uint16_t attempt = 0;
  bool response = false;  // a READ/atomic response owed by the local responder
};

struct OutboundMessage {
  wire::Opcode opcode = wire::Opcode::Send;
  uint32_t msn = 0;
  uint32_t length = 0;
  uint32_t recv_index = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  wire::ReadRequest read{};
  wire::AtomicRequest atomic{};
  uint64_t atomic_original = 0;

  // Where the payload comes from: the work request's SGEs, or owned bytes
  // (inline data), or one contiguous local range (a READ response).
  uint32_t num_sge = 0;
  std::array<Sge, kMaxSge> sg{};
  std::vector<uint8_t> owned;
  bool uses_owned = false;
  uint64_t source_addr = 0;
  uint32_t source_rkey = 0;  // READ response: the key the request was granted with
  bool uses_source_addr = false;
  // The memory registry's epoch at which every source byte was last found
  // readable (0: not checked): each datagram needs the check only after a
  // deregistration.
  uint64_t sources_readable_at = 0;

  uint32_t chunks = 1;
  uint32_t next_chunk = 0;  // first chunk never sent in this attempt
  ChunkSet acked;           // chunks the peer's SACK confirmed in this attempt
  ChunkSet ever_acked;      // ... in any attempt: a chunk acknowledged again is no progress
  uint16_t attempt = 0;     // wraps after 65536 attempts, each at least an RNR delay apart

  // Requester only.
  uint64_t wr_id = 0;
  bool signaled = true;
  bool fence = false;
  WcOpcode wc_opcode = WcOpcode::Send;
  WcStatus status = WcStatus::Success;
  bool done = false;           // finished (successfully or not); completes in order
  ChunkSet response_received;  // READ: response chunks placed
  bool rnr_wait = false;
  bool holds_rd_atomic = false;  // counts against max_rd_atomic while outstanding
  Time rnr_resend_at = kNever;
  uint32_t rnr_naks = 0;
  uint32_t stall_probes = 0;  // tail probes sent since the last progress

  bool all_sent() const { return next_chunk >= chunks; }
  bool needs_response() const { return wire::needs_response(opcode); }

  // Back to a default message that keeps the storage of `owned` and of the
  // chunk sets, for the next message a queue slot holds (ring_queue.h).
  void reset_keeping_storage() {
    OutboundMessage fresh;
    fresh.owned.swap(owned);
    fresh.owned.clear();
    std::swap(fresh.acked, acked);
    std::swap(fresh.ever_acked, ever_acked);
    std::swap(fresh.response_received, response_received);
    *this = std::move(fresh);
  }
};

// Why a request cannot be carried out: what the requester is told, and the
// status of the receive WQE it consumes (Success: none).
struct RequestFailure {
  wire::NakKind nak = wire::NakKind::InvalidRequest;
  WcStatus recv_status = WcStatus::Success;
};

struct InboundMessage {
  wire::Opcode opcode = wire::Opcode::Send;
  uint32_t length = 0;
  uint32_t recv_index = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  uint32_t src_qpn = 0;
  wire::ReadRequest read{};
  wire::AtomicRequest atomic{};
  ChunkSet received;
  uint16_t attempt = 0;                   // of the newest packet
  std::optional<RequestFailure> failure;  // NAKed; the QP fails when the stream reaches it
  int naked_attempt = -1;                 // attempt last NAKed
  // A WRITE's final chunk that arrived before the rest of the WRITE or an
  // earlier message: placed when the message completes (write_tail).
  std::vector<uint8_t> deferred_tail;
  // A WRITE: the memory registry's epoch at which its whole target range
  // was last found writable (0: not checked), as sources_readable_at.
  uint64_t target_writable_at = 0;
};

inline std::span<const Sge> sges_of(const OutboundMessage& m) { return {m.sg.data(), m.num_sge}; }
inline std::span<const Sge> sges_of(const RecvWr& wr) { return {wr.sg.data(), wr.num_sge}; }

}  // namespace metaroce::transport
