// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The side channel between the compliance suite and the program that drives
// the endpoint under test (the "target"): one JSON object per line over TCP,
// a request from the suite, one reply from the target. It is how the suite
// sets up what verbs would set up out of band (memory regions, QPs connected
// to the suite's endpoint, posted work), and how it reads memory effects,
// completions and counters. tests/compliance/README.md documents every
// request for someone writing a target for another implementation.
//
// Requests are parsed here (parse_request: every field type- and range-
// checked, anything else refused with a reason) so that the target and the
// fuzz target share one parser; replies are read by the suite with the
// checked accessors below, since a target of another implementation is as
// untrusted as its datagrams.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace metaroce::compliance::control {

enum class Op : uint8_t {
  Hello,    // -> address, home_port, mtu, paths, security
  Connect,  // a CQ and a QP, moved to RTS towards the suite's QP -> qpn
  DestroyQp,
  QpState,   // -> state
  Register,  // a zeroed, registered buffer -> addr, key
  Deregister,
  Read,  // bytes of a buffer Register returned -> hex
  Write,
  PostRecv,
  PostSend,
  Poll,      // completions of a QP's CQ, waiting up to wait_ms for count of them
  Counters,  // -> counters: {name: value}
};

// ibv_access_flags bits, by the names requests use.
inline constexpr uint32_t kLocalWrite = 1;
inline constexpr uint32_t kRemoteWrite = 2;
inline constexpr uint32_t kRemoteRead = 4;
inline constexpr uint32_t kRemoteAtomic = 8;

// ibv_wr_opcode values, by name.
enum class SendOpcode : uint8_t {
  Write = 0,
  WriteImm = 1,
  Send = 2,
  SendImm = 3,
  Read = 4,
  CompareSwap = 5,
  FetchAdd = 6,
};

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t key = 0;
  bool operator==(const Sge&) const = default;
};

inline constexpr size_t kMaxSge = 4;
inline constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 24;  // 16 MiB
// Longest request line: a Write of a whole region in hexadecimal.
inline constexpr size_t kMaxLineBytes = 2 * kMaxRegionBytes + 4096;
inline constexpr uint32_t kMaxPollCount = 1024;
inline constexpr uint32_t kMaxWaitMs = 60'000;

// One request; only the fields of `op` are meaningful.
struct Request {
  Op op = Op::Hello;
  // Connect
  std::string peer_address;
  uint16_t peer_home_port = 0;
  uint32_t peer_qpn = 0;
  uint32_t sq_psn = 0;
  uint32_t rq_psn = 0;
  // DestroyQp, QpState, PostRecv, PostSend, Poll
  uint32_t qpn = 0;
  // Register
  uint64_t length = 0;
  uint32_t access = 0;
  // Deregister
  uint32_t key = 0;
  // Read, Write
  uint64_t addr = 0;
  std::vector<uint8_t> bytes;  // Write
  // PostRecv, PostSend
  uint64_t wr_id = 0;
  std::vector<Sge> sge;
  // PostSend
  SendOpcode opcode = SendOpcode::Write;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // Poll
  uint32_t count = 0;
  uint32_t wait_ms = 0;

  bool operator==(const Request&) const = default;
};

// The counters a Counters reply carries: the drop counters of docs/spec.md
// 9.6 and 8.14 (every rejected datagram increments exactly one of them) and
// the two duplicate counters, which are not drops.
inline constexpr const char* kDropCounters[] = {
    "rx_drop_malformed",    "rx_drop_security_mode", "rx_drop_integrity",       "rx_drop_no_key",
    "rx_drop_unknown_peer", "rx_drop_stale_epoch",   "rx_drop_replay",          "rx_drop_unknown_qp",
    "rx_drop_qp_state",     "rx_drop_out_of_window", "rx_drop_invalid_request", "rx_drop_access",
    "rx_drop_rnr",          "rx_drop_out_of_order",  "rx_drop_stale_response",
};
inline constexpr const char* kDuplicateCounters[] = {"rx_duplicate_completed", "rx_duplicate_chunk"};

// Parses one request line. On failure returns nothing and sets `error`.
std::optional<Request> parse_request(std::string_view line, std::string& error);
// The line for a request (without the newline); parse_request reads it back.
std::string encode_request(const Request& request);

// Names of ibv_wc_status and ibv_wc_opcode values as replies spell them
// (the libibverbs enumerator without its prefix, lower case).
const char* wc_status_name(uint32_t status);
const char* wc_opcode_name(uint32_t opcode);

// Hexadecimal text of bytes and back (nothing on odd length or a non-hex digit).
std::string to_hex(const std::vector<uint8_t>& bytes);
std::optional<std::vector<uint8_t>> from_hex(std::string_view text);

// Checked reads of a reply's members: nothing when absent or of another type.
std::optional<uint64_t> get_u64(const nlohmann::json& object, const char* name);
std::optional<std::string> get_string(const nlohmann::json& object, const char* name);

}  // namespace metaroce::compliance::control
