// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The sender half of the spec's MUSTs, checked on every datagram the target
// sends to the suite for the whole run: field by field from the bytes
// (raw_layout.h, not the engine's decoder), so that what is checked is the
// layout docs/spec.md describes. Each finding is filed under the id of the
// case that reports it; the cases of those MUSTs run last and fail when
// anything was filed, or when the run never made the target send the kind
// of packet the MUST is about.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "wire_peer.h"

namespace metaroce::compliance {

class Observer {
 public:
  struct Expectations {
    uint16_t target_home_port = 0;
    uint32_t suite_epoch = 0;
    uint8_t security = 0;            // the mode the target announced
    size_t max_udp_payload = 65507;  // path MTU less the IP and UDP headers
  };
  void expect(const Expectations& e) { expect_ = e; }

  // Checks one datagram from the target.
  void inspect(const Datagram& d);

  // Findings filed under a case id (at most kKeptFindings kept, all counted).
  std::vector<std::string> findings(const std::string& case_id) const;
  size_t finding_count(const std::string& case_id) const;

  // What the target was seen to send.
  struct Seen {
    uint64_t datagrams = 0;
    std::array<uint64_t, 7> types{};      // by common.type (1..6)
    std::array<uint64_t, 9> opcodes{};    // data packets by opcode
    std::array<uint64_t, 6> nak_kinds{};  // by kind (1..5)
    uint64_t retransmits = 0;             // data packets flagged RETRANSMIT
    uint64_t repeated_chunks = 0;         // data packets whose chunk was seen before
    uint64_t multi_packet_messages = 0;   // messages seen with more than one offset
    uint64_t reserved_fields = 0;         // reserved fields checked
    uint64_t ecn_reported = 0;            // datagrams whose ECN field the kernel reported
    size_t largest = 0;                   // the largest payload of a data packet
  };
  const Seen& seen() const { return seen_; }
  // The lowest packet number seen under each dst_epoch: 1 when the suite
  // received the target's first datagram under that key.
  std::map<uint32_t, uint32_t> lowest_packet_numbers() const;

  static constexpr size_t kKeptFindings = 8;

 private:
  void file(const char* case_id, std::string what);
  void check_common(const Datagram& d, std::span<const uint8_t> body);
  void check_data(const Datagram& d, std::span<const uint8_t> body);
  void check_ack(std::span<const uint8_t> body);
  void check_nak(std::span<const uint8_t> body);
  void check_probe(std::span<const uint8_t> body);
  void check_reserved(std::span<const uint8_t> body, size_t at, size_t bytes, const char* what);
  void check_slot(uint8_t path_id, uint16_t source_port, const char* what);

  Expectations expect_;
  Seen seen_;
  struct Filed {
    size_t count = 0;
    std::vector<std::string> kept;
  };
  std::map<std::string, Filed> filed_;

  uint32_t target_epoch_ = 0;
  // Packet numbers seen per dst_epoch (the latest kRemembered of them):
  // datagrams of different paths may arrive out of order, but a number
  // never comes twice under one key (spec 9.5).
  struct Numbers {
    std::set<uint32_t> seen;
    std::deque<uint32_t> order;
    uint32_t lowest = 0;
  };
  std::map<uint32_t, Numbers> numbers_;
  std::map<uint8_t, uint16_t> port_of_slot_;  // Data/Probe path_id -> source port
  std::map<uint16_t, uint8_t> slot_of_port_;

  // Per message (request or response, dst_qpn, msn): its first packet's
  // fields, and a digest of every chunk's payload by offset; the oldest are
  // forgotten beyond kRemembered.
  using MessageKey = std::tuple<bool, uint32_t, uint32_t>;
  struct MessageFields {
    uint8_t opcode = 0;
    uint32_t src_qpn = 0, msg_length = 0, recv_index = 0, rkey = 0, imm = 0;
    uint64_t remote_addr = 0;
    std::map<uint32_t, std::pair<size_t, uint64_t>> chunks;  // offset -> (length, digest)
  };
  std::map<MessageKey, MessageFields> messages_;
  std::deque<MessageKey> message_order_;
  static constexpr size_t kRemembered = 4096;
  static constexpr size_t kChunksPerMessage = 4096;
};

}  // namespace metaroce::compliance
