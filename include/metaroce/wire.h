// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// MetaRoCE wire format, version 0.2 (wire version byte 2). docs/spec.md is the
// normative description; this header is its C++ rendering.
//
// Every datagram is a UDP payload made of a CommonHeader, a body that depends
// on the packet type, and a trailer that protects both: a CRC32C in integrity
// mode, an AES-GCM tag in the authenticate and encrypt modes (the trailer is
// packet_protection.h's business; decode() and the encoders here see the
// datagram without it). All multi-byte fields are big-endian (network order)
// on the wire. The packed `*Wire` structs pin the exact byte layout; the plain
// structs are the decoded, host-order form the engine uses. decode() checks
// every length and count before it reads a byte, so it never reads past the
// datagram it is given.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace metaroce::wire {

inline constexpr uint8_t kVersion = 2;

// Home ports: a context's QP numbers are (slot << kQpnIndexBits) | index, and
// its home port is kHomePortBase + slot, so a peer finds the home port from
// a QP number alone (abi.h numbers kernel devices' QPs by the same rule).
inline constexpr uint16_t kHomePortBase = 4792;
inline constexpr uint16_t kHomePortCount = 4096;
inline constexpr unsigned kQpnIndexBits = 12;

// Paths a connection may use; path ids are 0..kMaxPaths-1.
inline constexpr uint16_t kMaxPaths = 64;
// An ACK carries at most this many per-path blocks and per-stream entries, so
// that it always fits in a 1024-byte MTU.
inline constexpr uint8_t kMaxAckPathBlocks = 16;
inline constexpr uint8_t kMaxAckStreams = 32;
// Width of the per-path selective-ACK bitvector.
inline constexpr uint32_t kSackBits = 256;

// How a datagram is protected (CommonHeader::security; docs/spec.md section 9).
enum class Security : uint8_t {
  Integrity = 0,     // CRC32C trailer: catches corruption, not forgery
  Authenticate = 1,  // AES-128-GCM tag over the whole datagram, nothing hidden
  Encrypt = 2,       // AES-128-GCM: the body after the common header is encrypted too
};
inline constexpr uint8_t kSecurityCount = 3;
const char* to_string(Security security);

// Trailer sizes: after the body, covering everything before them.
inline constexpr size_t kIntegrityTrailerBytes = 4;  // CRC32C
inline constexpr size_t kAuthTagBytes = 16;          // AES-GCM tag
inline constexpr size_t kMaxTrailerBytes = kAuthTagBytes;
constexpr size_t trailer_bytes(Security security) {
  return security == Security::Integrity ? kIntegrityTrailerBytes : kAuthTagBytes;
}

enum class PacketType : uint8_t {
  Data = 1,        // carries (part of) a request or a response
  Ack = 2,         // per-path selective ACKs, per-stream cumulative points, ECN echo, rate hint
  Nak = 3,         // negative acknowledgement of one message
  Probe = 4,       // path probe / keepalive
  ProbeReply = 5,  // answer to a probe, on the same path index
  UdSend = 6,      // an unreliable datagram (UD QP) message, whole in one datagram
};

enum class Opcode : uint8_t {
  Send = 0,
  SendImm = 1,
  Write = 2,
  WriteImm = 3,
  ReadRequest = 4,
  ReadResponse = 5,
  FetchAdd = 6,
  CompareSwap = 7,
  AtomicResponse = 8,
};
inline constexpr uint8_t kOpcodeCount = 9;

// DataHeader::flags
inline constexpr uint8_t kFlagAckRequest = 0x01;  // receiver should ACK without delay
inline constexpr uint8_t kFlagRetransmit = 0x02;  // payload was sent before under another path_seq
inline constexpr uint8_t kDataFlagsMask = 0x03;

enum class NakKind : uint8_t {
  ReceiverNotReady = 1,   // SEND found no posted receive; retry after rnr_delay_ns
  RemoteAccess = 2,       // bad rkey, bounds or access rights
  InvalidRequest = 3,     // malformed or unsupported request for this QP
  Sequence = 4,           // rocev2 profile only: first gap in the path's sequence
  RemoteOperational = 5,  // the responder could not use the receive WQE (e.g. a bad lkey)
};

// ---------------------------------------------------------------------------
// Exact wire layouts. Fields hold network-order values.

struct [[gnu::packed]] CommonHeaderWire {
  uint8_t version;         // kVersion
  uint8_t type;            // PacketType
  uint8_t security;        // Security: how the trailer protects this datagram
  uint8_t path_id;         // sender's path index (its UDP source-port slot), < kMaxPaths
  uint16_t home_port;      // sender's home UDP port: with the source IP it names the
                           // sending endpoint, whatever source port the path uses
  uint16_t heard_paths;    // bit i: the sender recently received packets that the
                           // receiver sent from its path i (i < 16); 0 = no news
  uint32_t src_epoch;      // the sending endpoint's incarnation: random, never 0
  uint32_t dst_epoch;      // the receiving endpoint's incarnation as the sender
                           // last heard it; 0 = not heard yet
  uint32_t packet_number;  // low 32 bits of the sender's per-peer packet counter
                           // (every datagram to that peer takes the next one)
};
static_assert(sizeof(CommonHeaderWire) == 20);

struct [[gnu::packed]] DataHeaderWire {
  uint32_t path_seq;     // sequence number in the sender's space for path_id
  uint8_t opcode;        // Opcode
  uint8_t flags;         // kFlag*
  uint16_t attempt;      // attempt number of this message (starts at 0, wraps)
  uint32_t dst_qpn;      // receiving QP (stream) number
  uint32_t src_qpn;      // sending QP number
  uint32_t msn;          // message sequence number in the requester's stream (1-based);
                         // responses carry the msn of their request
  uint32_t recv_index;   // SEND/SEND_IMM/WRITE_IMM: 0-based ordinal of the receive
                         // WQE the message consumes; 0 otherwise
  uint32_t msg_length;   // total length of the message's payload in bytes
  uint32_t offset;       // offset of this packet's payload within the message
  uint64_t remote_addr;  // WRITE*/READ_REQ/atomics: target address of the message's
                         // first byte; READ_RESP: requester's sink address
  uint32_t rkey;         // key for remote_addr (READ_RESP: the requester's sink key)
  uint32_t imm;          // immediate data for *_IMM, else 0
};
static_assert(sizeof(DataHeaderWire) == 48);

struct [[gnu::packed]] ReadRequestWire {
  uint64_t sink_addr;  // where the requester wants the response bytes
  uint32_t sink_key;   // requester's lkey for sink_addr, echoed in READ_RESP.rkey
  uint32_t reserved;
};
static_assert(sizeof(ReadRequestWire) == 16);

struct [[gnu::packed]] AtomicRequestWire {
  uint64_t compare_add;  // FETCH_ADD: addend; COMPARE_SWAP: compare value
  uint64_t swap;         // COMPARE_SWAP: swap value; FETCH_ADD: 0
};
static_assert(sizeof(AtomicRequestWire) == 16);

struct [[gnu::packed]] AtomicResponseWire {
  uint64_t original;  // value at the target before the atomic executed
};
static_assert(sizeof(AtomicResponseWire) == 8);

struct [[gnu::packed]] AckHeaderWire {
  uint8_t path_blocks;     // number of PathSackWire that follow (<= kMaxAckPathBlocks)
  uint8_t stream_entries;  // number of StreamAckWire after them (<= kMaxAckStreams)
  uint16_t reserved;
  uint32_t rate_hint_mbps;  // receiver's inbound share for this sender, Mb/s; 0 = no hint
  uint32_t ack_delay_ns;    // time the receiver held the newest ACKed packet
  uint32_t reserved2;
};
static_assert(sizeof(AckHeaderWire) == 16);

inline constexpr uint32_t kHoldingUnitNs = 256;
inline constexpr uint32_t kMaxHoldingNs = 0xffff * kHoldingUnitNs;

struct [[gnu::packed]] PathSackWire {
  uint16_t path_id;      // the data sender's path index
  uint16_t holding;      // time highest_seq waited for this ACK, in 256 ns units (saturating); 0 = unknown
  uint32_t ce_count;     // cumulative count of CE-marked packets received on the path
  uint32_t highest_seq;  // highest path_seq received on the path
  uint8_t bitmap[32];    // bit i (byte i/8, bit i%8, LSB first) => highest_seq - i received
};
static_assert(sizeof(PathSackWire) == 44);

struct [[gnu::packed]] StreamAckWire {
  uint32_t qpn;            // the requester's QP (the ACK receiver's stream)
  uint32_t completed_msn;  // every message with msn <= this has completed at the responder
};
static_assert(sizeof(StreamAckWire) == 8);

struct [[gnu::packed]] NakWire {
  uint8_t kind;           // NakKind
  uint8_t data_path_id;   // path of the rejected packet (Sequence: the path with the gap)
  uint16_t attempt;       // echo of DataHeader::attempt of the rejected packet
  uint32_t qpn;           // requester's QP
  uint32_t msn;           // the rejected message
  uint32_t expected_seq;  // Sequence: next path_seq the receiver expects; else 0
  uint32_t rnr_delay_ns;  // ReceiverNotReady: time to wait before resending; else 0
};
static_assert(sizeof(NakWire) == 20);

struct [[gnu::packed]] ProbeWire {
  uint32_t probe_seq;  // sender's probe counter
  uint32_t reserved;
  uint64_t timestamp;  // sender's clock, echoed unchanged in the reply
};
static_assert(sizeof(ProbeWire) == 16);

// UdHeaderWire::flags
inline constexpr uint8_t kUdFlagImmediate = 0x01;  // imm carries immediate data
inline constexpr uint8_t kUdFlagsMask = 0x01;

struct [[gnu::packed]] UdHeaderWire {
  uint32_t dst_qpn;  // receiving UD QP
  uint32_t src_qpn;  // sending UD QP (its home port is 4792 + (src_qpn >> 12))
  uint32_t qkey;     // must equal the receiving QP's Q_Key
  uint32_t imm;      // immediate data when kUdFlagImmediate, else 0
  uint8_t flags;     // kUdFlag*
  uint8_t reserved[3];
};
static_assert(sizeof(UdHeaderWire) == 20);

inline constexpr size_t kCommonHeaderBytes = sizeof(CommonHeaderWire);
// What a UD datagram adds to its message (at most the port's active MTU).
inline constexpr size_t kUdHeaderBytes = kCommonHeaderBytes + sizeof(UdHeaderWire);
inline constexpr size_t kDataHeaderBytes = kCommonHeaderBytes + sizeof(DataHeaderWire);
// What a payload-carrying data packet adds to its payload: the figure from
// which the payload that fits a link's MTU is derived (include/metaroce/abi.h).
// The largest trailer counts, so that one payload size fits in every
// security mode (1388 bytes on a 1500-byte Ethernet).
inline constexpr size_t kDataOverheadBytes = kDataHeaderBytes + kMaxTrailerBytes;
inline constexpr size_t kMaxAckBytes = kCommonHeaderBytes + sizeof(AckHeaderWire) +
                                       kMaxAckPathBlocks * sizeof(PathSackWire) +
                                       kMaxAckStreams * sizeof(StreamAckWire);
static_assert(kMaxAckBytes + kMaxTrailerBytes <= 1024);

// ---------------------------------------------------------------------------
// Decoded, host-order forms.

// Paths whose reverse direction heard_paths can report.
inline constexpr uint16_t kHeardPathBits = 16;

struct CommonHeader {
  PacketType type = PacketType::Data;
  Security security = Security::Integrity;
  uint16_t path_id = 0;
  uint16_t home_port = 0;
  uint32_t src_epoch = 0;
  uint32_t dst_epoch = 0;
  uint32_t packet_number = 0;
  uint16_t heard_paths = 0;
};

// Who sends a datagram: the path it leaves on, the sender's home port, and
// which of the receiver's paths the sender hears.
struct Origin {
  Origin(uint16_t path, uint16_t port = 0, uint16_t heard = 0)  // NOLINT: implicit by design
      : path_id(path), home_port(port), heard_paths(heard) {}
  uint16_t path_id;
  uint16_t home_port;
  uint16_t heard_paths;
};

struct DataHeader {
  uint32_t path_seq = 0;
  Opcode opcode = Opcode::Send;
  uint8_t flags = 0;
  uint16_t attempt = 0;
  uint32_t dst_qpn = 0;
  uint32_t src_qpn = 0;
  uint32_t msn = 0;
  uint32_t recv_index = 0;
  uint32_t msg_length = 0;
  uint32_t offset = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
};

struct ReadRequest {
  uint64_t sink_addr = 0;
  uint32_t sink_key = 0;
};

struct AtomicRequest {
  uint64_t compare_add = 0;
  uint64_t swap = 0;
};

struct PathSack {
  uint16_t path_id = 0;
  // How long the receiver held highest_seq before this ACK; a multiple of
  // kHoldingUnitNs on the wire, 0 = unknown (use the ACK's ack_delay_ns).
  uint32_t holding_ns = 0;
  uint32_t ce_count = 0;
  uint32_t highest_seq = 0;
  std::array<uint64_t, kSackBits / 64> bits{};  // bit i => highest_seq - i received

  // True when the block reports `seq` received; false when it is outside the
  // window or missing.
  bool covers(uint32_t seq) const;
  void mark(uint32_t seq);  // requires highest_seq - seq < kSackBits
};

struct StreamAck {
  uint32_t qpn = 0;
  uint32_t completed_msn = 0;
};

struct Ack {
  uint32_t rate_hint_mbps = 0;
  uint32_t ack_delay_ns = 0;
  uint8_t path_count = 0;
  uint8_t stream_count = 0;
  std::array<PathSack, kMaxAckPathBlocks> paths{};
  std::array<StreamAck, kMaxAckStreams> streams{};
};

struct Nak {
  NakKind kind = NakKind::InvalidRequest;
  uint16_t attempt = 0;
  uint16_t data_path_id = 0;
  uint32_t qpn = 0;
  uint32_t msn = 0;
  uint32_t expected_seq = 0;
  uint32_t rnr_delay_ns = 0;
};

struct Probe {
  uint32_t probe_seq = 0;
  uint64_t timestamp = 0;
};

struct UdHeader {
  uint32_t dst_qpn = 0;
  uint32_t src_qpn = 0;
  uint32_t qkey = 0;
  uint32_t imm = 0;
  bool has_imm = false;
};

// One decoded datagram. Only the members that belong to common.type (and, for
// Data, to data.opcode) are meaningful. payload points into the datagram.
struct Packet {
  CommonHeader common;
  DataHeader data;
  ReadRequest read;                  // Data/ReadRequest
  AtomicRequest atomic;              // Data/FetchAdd, Data/CompareSwap
  uint64_t atomic_original = 0;      // Data/AtomicResponse
  std::span<const uint8_t> payload;  // Data: SEND/WRITE/READ_RESP bytes; UdSend: the message
  UdHeader ud;                       // UdSend
  Ack ack;
  Nak nak;
  Probe probe;
};

enum class DecodeStatus : uint8_t {
  Ok = 0,
  Truncated,  // shorter than the headers its type needs
  BadVersion,
  BadType,
  BadOpcode,
  BadFlags,   // unknown flag bits set
  BadCount,   // ACK counts above the maximum
  BadLength,  // payload/extension length inconsistent with the opcode or message
  BadPath,    // path id >= kMaxPaths
  BadNakKind,
  TrailingBytes,  // bytes left over after a fixed-size body
  BadSecurity,    // unknown security mode
};
inline constexpr uint8_t kDecodeStatusCount = 12;
const char* to_string(DecodeStatus status);
const char* to_string(Opcode opcode);

// The sender's home port, read from the common header without decoding the
// rest; nothing if the datagram is too short or not of this version.
std::optional<uint16_t> peek_home_port(std::span<const uint8_t> datagram);

// The common header alone (version, type, security, path id checked); the
// body is not looked at.
DecodeStatus decode_common(std::span<const uint8_t> datagram, CommonHeader& out);

// The packet type byte of a datagram of this version, without decoding the
// rest; nothing if it is too short or of another version.
std::optional<PacketType> peek_type(std::span<const uint8_t> datagram);

// Parses one datagram without its trailer. On anything but Ok, `out` is
// unspecified.
DecodeStatus decode(std::span<const uint8_t> datagram, Packet& out);

// Fills in the fields of an encoded datagram's common header that the
// encoders below leave zero: the security mode, both epochs and the packet
// number. Requires datagram.size() >= kCommonHeaderBytes.
void stamp_common(std::span<uint8_t> datagram, Security security, uint32_t src_epoch, uint32_t dst_epoch,
                  uint32_t packet_number);

// Size of the headers (and extension) that precede the payload of a data
// packet with this opcode.
size_t data_header_bytes(Opcode opcode);

// Writes the headers of a data packet (common + data header + the opcode's
// extension) to `out`; the caller writes `payload` bytes right after them
// (data_header_bytes(opcode) bytes in). Returns the header byte count, or 0 if
// `out` is too small for headers plus payload_bytes.
size_t encode_data(std::span<uint8_t> out, Origin origin, const DataHeader& header, const ReadRequest* read,
                   const AtomicRequest* atomic, const uint64_t* atomic_original, size_t payload_bytes);

// Each returns the datagram length (without trailer), or 0 if `out` is too
// small.
size_t encode_ack(std::span<uint8_t> out, Origin origin, const Ack& ack);
size_t encode_nak(std::span<uint8_t> out, Origin origin, const Nak& nak);
size_t encode_probe(std::span<uint8_t> out, Origin origin, PacketType type, const Probe& probe);
// A UD datagram: headers, then `payload_bytes` the caller writes
// kUdHeaderBytes in. Returns the header byte count, or 0 if `out` is too
// small for headers plus payload.
size_t encode_ud(std::span<uint8_t> out, Origin origin, const UdHeader& header, size_t payload_bytes);

// Payload-bearing opcodes carry bytes after their headers.
constexpr bool carries_payload(Opcode op) {
  return op == Opcode::Send || op == Opcode::SendImm || op == Opcode::Write || op == Opcode::WriteImm ||
         op == Opcode::ReadResponse;
}
// Opcodes that consume a posted receive at the responder.
constexpr bool consumes_receive(Opcode op) {
  return op == Opcode::Send || op == Opcode::SendImm || op == Opcode::WriteImm;
}
constexpr bool is_atomic(Opcode op) { return op == Opcode::FetchAdd || op == Opcode::CompareSwap; }
// Requests answered with data: they count against max_rd_atomic.
constexpr bool needs_response(Opcode op) { return op == Opcode::ReadRequest || is_atomic(op); }
constexpr bool is_request(Opcode op) { return op != Opcode::ReadResponse && op != Opcode::AtomicResponse; }

}  // namespace metaroce::wire
