// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Encoder and decoder of the MetaRoCE v0.2 wire format (include/metaroce/wire.h,
// docs/spec.md). Every read and write goes through memcpy into or out of the
// packed *Wire structs; the datagram pointer is never cast to a struct.
#include "metaroce/wire.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

namespace metaroce::wire {
namespace {

// Host <-> big-endian conversions, named so that call sites read in one
// direction (to the wire / from the wire).
inline uint16_t to_be(uint16_t v) { return htobe16(v); }
inline uint32_t to_be(uint32_t v) { return htobe32(v); }
inline uint64_t to_be(uint64_t v) { return htobe64(v); }
inline uint16_t from_be16(uint16_t v) { return be16toh(v); }
inline uint32_t from_be32(uint32_t v) { return be32toh(v); }
inline uint64_t from_be64(uint64_t v) { return be64toh(v); }

// Copies a packed struct out of `in` at `at`. The caller has checked that
// at + sizeof(T) <= in.size().
template <typename T>
T load(std::span<const uint8_t> in, size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof(T));
  return value;
}

// Copies a packed struct into `out` at `at`. The caller has checked the room.
template <typename T>
void store(std::span<uint8_t> out, size_t at, const T& value) {
  std::memcpy(out.data() + at, &value, sizeof(T));
}

void store_common(std::span<uint8_t> out, PacketType type, Origin origin) {
  CommonHeaderWire w{};
  w.version = kVersion;
  w.type = static_cast<uint8_t>(type);
  w.path_id = static_cast<uint8_t>(origin.path_id);
  w.home_port = to_be(origin.home_port);
  w.heard_paths = to_be(origin.heard_paths);
  store(out, 0, w);
}

// Size of the opcode-specific extension between the data header and the payload.
size_t extension_bytes(Opcode op) {
  switch (op) {
    case Opcode::ReadRequest: return sizeof(ReadRequestWire);
    case Opcode::FetchAdd:
    case Opcode::CompareSwap: return sizeof(AtomicRequestWire);
    case Opcode::AtomicResponse: return sizeof(AtomicResponseWire);
    default: return 0;
  }
}

bool has_atomic_body(Opcode op) {
  return op == Opcode::FetchAdd || op == Opcode::CompareSwap || op == Opcode::AtomicResponse;
}

DecodeStatus decode_data(std::span<const uint8_t> in, Packet& out) {
  if (in.size() < kDataHeaderBytes) return DecodeStatus::Truncated;
  const auto w = load<DataHeaderWire>(in, kCommonHeaderBytes);
  if (w.opcode >= kOpcodeCount) return DecodeStatus::BadOpcode;
  if ((w.flags & ~kDataFlagsMask) != 0) return DecodeStatus::BadFlags;

  DataHeader& h = out.data;
  h.path_seq = from_be32(w.path_seq);
  h.opcode = static_cast<Opcode>(w.opcode);
  h.flags = w.flags;
  h.attempt = from_be16(w.attempt);
  h.dst_qpn = from_be32(w.dst_qpn);
  h.src_qpn = from_be32(w.src_qpn);
  h.msn = from_be32(w.msn);
  h.recv_index = from_be32(w.recv_index);
  h.msg_length = from_be32(w.msg_length);
  h.offset = from_be32(w.offset);
  h.remote_addr = from_be64(w.remote_addr);
  h.rkey = from_be32(w.rkey);
  h.imm = from_be32(w.imm);

  out.read = ReadRequest{};
  out.atomic = AtomicRequest{};
  out.atomic_original = 0;
  out.payload = {};

  const Opcode op = h.opcode;
  const size_t ext = extension_bytes(op);
  if (in.size() - kDataHeaderBytes < ext) return DecodeStatus::Truncated;
  const size_t body = kDataHeaderBytes + ext;
  const size_t rest = in.size() - body;

  if (!carries_payload(op) && rest != 0) return DecodeStatus::TrailingBytes;

  switch (op) {
    case Opcode::ReadRequest: {
      const auto r = load<ReadRequestWire>(in, kDataHeaderBytes);
      out.read.sink_addr = from_be64(r.sink_addr);
      out.read.sink_key = from_be32(r.sink_key);
      if (h.offset != 0) return DecodeStatus::BadLength;
      break;
    }
    case Opcode::FetchAdd:
    case Opcode::CompareSwap: {
      const auto a = load<AtomicRequestWire>(in, kDataHeaderBytes);
      out.atomic.compare_add = from_be64(a.compare_add);
      out.atomic.swap = from_be64(a.swap);
      break;
    }
    case Opcode::AtomicResponse: {
      const auto a = load<AtomicResponseWire>(in, kDataHeaderBytes);
      out.atomic_original = from_be64(a.original);
      break;
    }
    default: break;
  }

  if (has_atomic_body(op) && (h.msg_length != 8 || h.offset != 0)) return DecodeStatus::BadLength;

  if (carries_payload(op)) {
    // 64-bit arithmetic so that offset + payload length cannot wrap.
    const uint64_t end = uint64_t{h.offset} + uint64_t{rest};
    if (end > uint64_t{h.msg_length}) return DecodeStatus::BadLength;
    if (rest == 0 && (h.msg_length != 0 || h.offset != 0)) return DecodeStatus::BadLength;
    out.payload = in.subspan(body, rest);
  }
  return DecodeStatus::Ok;
}

DecodeStatus decode_ack(std::span<const uint8_t> in, Packet& out) {
  constexpr size_t kFixed = kCommonHeaderBytes + sizeof(AckHeaderWire);
  if (in.size() < kFixed) return DecodeStatus::Truncated;
  const auto h = load<AckHeaderWire>(in, kCommonHeaderBytes);
  if (h.path_blocks > kMaxAckPathBlocks || h.stream_entries > kMaxAckStreams) {
    return DecodeStatus::BadCount;
  }
  const uint64_t want = uint64_t{kFixed} + uint64_t{h.path_blocks} * sizeof(PathSackWire) +
                        uint64_t{h.stream_entries} * sizeof(StreamAckWire);
  if (uint64_t{in.size()} < want) return DecodeStatus::Truncated;
  if (uint64_t{in.size()} > want) return DecodeStatus::TrailingBytes;

  Ack& ack = out.ack;
  ack.rate_hint_mbps = from_be32(h.rate_hint_mbps);
  ack.ack_delay_ns = from_be32(h.ack_delay_ns);
  ack.path_count = h.path_blocks;
  ack.stream_count = h.stream_entries;

  size_t at = kFixed;
  for (size_t i = 0; i < h.path_blocks; ++i, at += sizeof(PathSackWire)) {
    const auto w = load<PathSackWire>(in, at);
    PathSack& p = ack.paths[i];
    p.path_id = from_be16(w.path_id);
    if (p.path_id >= kMaxPaths) return DecodeStatus::BadPath;
    p.holding_ns = uint32_t{from_be16(w.holding)} * kHoldingUnitNs;
    p.ce_count = from_be32(w.ce_count);
    p.highest_seq = from_be32(w.highest_seq);
    // Bit i is byte i/8, bit i%8: each 64-bit word is 8 bytes little-endian.
    for (size_t word = 0; word < p.bits.size(); ++word) {
      uint64_t le;
      std::memcpy(&le, &w.bitmap[8 * word], sizeof le);
      p.bits[word] = le64toh(le);
    }
  }
  for (size_t i = 0; i < h.stream_entries; ++i, at += sizeof(StreamAckWire)) {
    const auto w = load<StreamAckWire>(in, at);
    ack.streams[i].qpn = from_be32(w.qpn);
    ack.streams[i].completed_msn = from_be32(w.completed_msn);
  }
  return DecodeStatus::Ok;
}

DecodeStatus decode_nak(std::span<const uint8_t> in, Packet& out) {
  constexpr size_t kSize = kCommonHeaderBytes + sizeof(NakWire);
  if (in.size() < kSize) return DecodeStatus::Truncated;
  if (in.size() > kSize) return DecodeStatus::TrailingBytes;
  const auto w = load<NakWire>(in, kCommonHeaderBytes);
  if (w.kind < static_cast<uint8_t>(NakKind::ReceiverNotReady) ||
      w.kind > static_cast<uint8_t>(NakKind::RemoteOperational)) {
    return DecodeStatus::BadNakKind;
  }
  Nak& n = out.nak;
  n.kind = static_cast<NakKind>(w.kind);
  n.attempt = from_be16(w.attempt);
  n.data_path_id = w.data_path_id;
  if (n.data_path_id >= kMaxPaths) return DecodeStatus::BadPath;
  n.qpn = from_be32(w.qpn);
  n.msn = from_be32(w.msn);
  n.expected_seq = from_be32(w.expected_seq);
  n.rnr_delay_ns = from_be32(w.rnr_delay_ns);
  return DecodeStatus::Ok;
}

DecodeStatus decode_probe(std::span<const uint8_t> in, Packet& out) {
  constexpr size_t kSize = kCommonHeaderBytes + sizeof(ProbeWire);
  if (in.size() < kSize) return DecodeStatus::Truncated;
  if (in.size() > kSize) return DecodeStatus::TrailingBytes;
  const auto w = load<ProbeWire>(in, kCommonHeaderBytes);
  out.probe.probe_seq = from_be32(w.probe_seq);
  out.probe.timestamp = from_be64(w.timestamp);
  return DecodeStatus::Ok;
}

DecodeStatus decode_ud(std::span<const uint8_t> in, Packet& out) {
  if (in.size() < kUdHeaderBytes) return DecodeStatus::Truncated;
  const auto w = load<UdHeaderWire>(in, kCommonHeaderBytes);
  if (w.flags & ~kUdFlagsMask) return DecodeStatus::BadFlags;
  UdHeader& u = out.ud;
  u.dst_qpn = from_be32(w.dst_qpn);
  u.src_qpn = from_be32(w.src_qpn);
  u.qkey = from_be32(w.qkey);
  u.has_imm = (w.flags & kUdFlagImmediate) != 0;
  u.imm = u.has_imm ? from_be32(w.imm) : 0;
  out.payload = in.subspan(kUdHeaderBytes);
  return DecodeStatus::Ok;
}

}  // namespace

bool PathSack::covers(uint32_t seq) const {
  const uint32_t d = highest_seq - seq;  // wraps modulo 2^32
  if (d >= kSackBits) return false;
  return ((bits[d / 64] >> (d % 64)) & 1u) != 0;
}

void PathSack::mark(uint32_t seq) {
  const uint32_t d = highest_seq - seq;
  if (d >= kSackBits) return;
  bits[d / 64] |= uint64_t{1} << (d % 64);
}

const char* to_string(DecodeStatus status) {
  switch (status) {
    case DecodeStatus::Ok: return "Ok";
    case DecodeStatus::Truncated: return "Truncated";
    case DecodeStatus::BadVersion: return "BadVersion";
    case DecodeStatus::BadType: return "BadType";
    case DecodeStatus::BadOpcode: return "BadOpcode";
    case DecodeStatus::BadFlags: return "BadFlags";
    case DecodeStatus::BadCount: return "BadCount";
    case DecodeStatus::BadLength: return "BadLength";
    case DecodeStatus::BadPath: return "BadPath";
    case DecodeStatus::BadNakKind: return "BadNakKind";
    case DecodeStatus::TrailingBytes: return "TrailingBytes";
    case DecodeStatus::BadSecurity: return "BadSecurity";
  }
  return "Unknown";
}

const char* to_string(Security security) {
  switch (security) {
    case Security::Integrity: return "integrity";
    case Security::Authenticate: return "authenticate";
    case Security::Encrypt: return "encrypt";
  }
  return "unknown";
}

const char* to_string(Opcode opcode) {
  switch (opcode) {
    case Opcode::Send: return "SEND";
    case Opcode::SendImm: return "SEND_IMM";
    case Opcode::Write: return "WRITE";
    case Opcode::WriteImm: return "WRITE_IMM";
    case Opcode::ReadRequest: return "READ_REQ";
    case Opcode::ReadResponse: return "READ_RESP";
    case Opcode::FetchAdd: return "FETCH_ADD";
    case Opcode::CompareSwap: return "COMPARE_SWAP";
    case Opcode::AtomicResponse: return "ATOMIC_RESP";
  }
  return "UNKNOWN";
}

std::optional<uint16_t> peek_home_port(std::span<const uint8_t> datagram) {
  if (datagram.size() < sizeof(CommonHeaderWire)) return std::nullopt;
  const auto c = load<CommonHeaderWire>(datagram, 0);
  if (c.version != kVersion) return std::nullopt;
  return from_be16(c.home_port);
}

std::optional<PacketType> peek_type(std::span<const uint8_t> datagram) {
  if (datagram.size() < sizeof(CommonHeaderWire)) return std::nullopt;
  const auto c = load<CommonHeaderWire>(datagram, 0);
  if (c.version != kVersion) return std::nullopt;
  return static_cast<PacketType>(c.type);
}

DecodeStatus decode_common(std::span<const uint8_t> datagram, CommonHeader& out) {
  if (datagram.size() < kCommonHeaderBytes) return DecodeStatus::Truncated;
  const auto c = load<CommonHeaderWire>(datagram, 0);
  if (c.version != kVersion) return DecodeStatus::BadVersion;
  if (c.type < static_cast<uint8_t>(PacketType::Data) || c.type > static_cast<uint8_t>(PacketType::UdSend)) {
    return DecodeStatus::BadType;
  }
  if (c.security >= kSecurityCount) return DecodeStatus::BadSecurity;
  if (c.path_id >= kMaxPaths) return DecodeStatus::BadPath;
  out.type = static_cast<PacketType>(c.type);
  out.security = static_cast<Security>(c.security);
  out.path_id = c.path_id;
  out.home_port = from_be16(c.home_port);
  out.heard_paths = from_be16(c.heard_paths);
  out.src_epoch = from_be32(c.src_epoch);
  out.dst_epoch = from_be32(c.dst_epoch);
  out.packet_number = from_be32(c.packet_number);
  return DecodeStatus::Ok;
}

void stamp_common(std::span<uint8_t> datagram, Security security, uint32_t src_epoch, uint32_t dst_epoch,
                  uint32_t packet_number) {
  auto c = load<CommonHeaderWire>(datagram, 0);
  c.security = static_cast<uint8_t>(security);
  c.src_epoch = to_be(src_epoch);
  c.dst_epoch = to_be(dst_epoch);
  c.packet_number = to_be(packet_number);
  store(datagram, 0, c);
}

DecodeStatus decode(std::span<const uint8_t> datagram, Packet& out) {
  if (const DecodeStatus s = decode_common(datagram, out.common); s != DecodeStatus::Ok) return s;

  switch (out.common.type) {
    case PacketType::Data: return decode_data(datagram, out);
    case PacketType::Ack: return decode_ack(datagram, out);
    case PacketType::Nak: return decode_nak(datagram, out);
    case PacketType::Probe:
    case PacketType::ProbeReply: return decode_probe(datagram, out);
    case PacketType::UdSend: return decode_ud(datagram, out);
  }
  return DecodeStatus::BadType;
}

size_t encode_ud(std::span<uint8_t> out, Origin origin, const UdHeader& header, size_t payload_bytes) {
  if (out.size() < kUdHeaderBytes || payload_bytes > out.size() - kUdHeaderBytes) return 0;
  store_common(out, PacketType::UdSend, origin);
  UdHeaderWire w{};
  w.dst_qpn = to_be(header.dst_qpn);
  w.src_qpn = to_be(header.src_qpn);
  w.qkey = to_be(header.qkey);
  w.imm = header.has_imm ? to_be(header.imm) : 0;
  w.flags = header.has_imm ? kUdFlagImmediate : 0;
  store(out, kCommonHeaderBytes, w);
  return kUdHeaderBytes;
}

size_t data_header_bytes(Opcode opcode) { return kDataHeaderBytes + extension_bytes(opcode); }

size_t encode_data(std::span<uint8_t> out, Origin origin, const DataHeader& header, const ReadRequest* read,
                   const AtomicRequest* atomic, const uint64_t* atomic_original, size_t payload_bytes) {
  const Opcode op = header.opcode;
  if (static_cast<uint8_t>(op) >= kOpcodeCount) return 0;
  const size_t hdr = data_header_bytes(op);
  if (out.size() < hdr || payload_bytes > out.size() - hdr) return 0;

  store_common(out, PacketType::Data, origin);

  DataHeaderWire w{};
  w.path_seq = to_be(header.path_seq);
  w.opcode = static_cast<uint8_t>(op);
  w.flags = header.flags;
  w.attempt = to_be(header.attempt);
  w.dst_qpn = to_be(header.dst_qpn);
  w.src_qpn = to_be(header.src_qpn);
  w.msn = to_be(header.msn);
  w.recv_index = to_be(header.recv_index);
  w.msg_length = to_be(header.msg_length);
  w.offset = to_be(header.offset);
  w.remote_addr = to_be(header.remote_addr);
  w.rkey = to_be(header.rkey);
  w.imm = to_be(header.imm);
  store(out, kCommonHeaderBytes, w);

  // A missing extension argument is encoded as all-zero fields.
  switch (op) {
    case Opcode::ReadRequest: {
      ReadRequestWire r{};
      if (read != nullptr) {
        r.sink_addr = to_be(read->sink_addr);
        r.sink_key = to_be(read->sink_key);
      }
      r.reserved = 0;
      store(out, kDataHeaderBytes, r);
      break;
    }
    case Opcode::FetchAdd:
    case Opcode::CompareSwap: {
      AtomicRequestWire a{};
      if (atomic != nullptr) {
        a.compare_add = to_be(atomic->compare_add);
        a.swap = to_be(atomic->swap);
      }
      store(out, kDataHeaderBytes, a);
      break;
    }
    case Opcode::AtomicResponse: {
      AtomicResponseWire a{};
      if (atomic_original != nullptr) a.original = to_be(*atomic_original);
      store(out, kDataHeaderBytes, a);
      break;
    }
    default: break;
  }
  return hdr;
}

size_t encode_ack(std::span<uint8_t> out, Origin origin, const Ack& ack) {
  if (ack.path_count > kMaxAckPathBlocks || ack.stream_count > kMaxAckStreams) return 0;
  const size_t total = kCommonHeaderBytes + sizeof(AckHeaderWire) + size_t{ack.path_count} * sizeof(PathSackWire) +
                       size_t{ack.stream_count} * sizeof(StreamAckWire);
  if (out.size() < total) return 0;

  store_common(out, PacketType::Ack, origin);

  AckHeaderWire h{};
  h.path_blocks = ack.path_count;
  h.stream_entries = ack.stream_count;
  h.reserved = 0;
  h.rate_hint_mbps = to_be(ack.rate_hint_mbps);
  h.ack_delay_ns = to_be(ack.ack_delay_ns);
  h.reserved2 = 0;
  store(out, kCommonHeaderBytes, h);

  size_t at = kCommonHeaderBytes + sizeof(AckHeaderWire);
  for (size_t i = 0; i < ack.path_count; ++i, at += sizeof(PathSackWire)) {
    const PathSack& p = ack.paths[i];
    PathSackWire w{};
    w.path_id = to_be(p.path_id);
    w.holding = to_be(static_cast<uint16_t>(std::min(p.holding_ns, kMaxHoldingNs) / kHoldingUnitNs));
    w.ce_count = to_be(p.ce_count);
    w.highest_seq = to_be(p.highest_seq);
    for (size_t word = 0; word < p.bits.size(); ++word) {
      const uint64_t le = htole64(p.bits[word]);
      std::memcpy(&w.bitmap[8 * word], &le, sizeof le);
    }
    store(out, at, w);
  }
  for (size_t i = 0; i < ack.stream_count; ++i, at += sizeof(StreamAckWire)) {
    StreamAckWire w{};
    w.qpn = to_be(ack.streams[i].qpn);
    w.completed_msn = to_be(ack.streams[i].completed_msn);
    store(out, at, w);
  }
  return total;
}

size_t encode_nak(std::span<uint8_t> out, Origin origin, const Nak& nak) {
  constexpr size_t kSize = kCommonHeaderBytes + sizeof(NakWire);
  if (out.size() < kSize) return 0;
  store_common(out, PacketType::Nak, origin);
  NakWire w{};
  w.kind = static_cast<uint8_t>(nak.kind);
  w.attempt = to_be(nak.attempt);
  w.data_path_id = static_cast<uint8_t>(nak.data_path_id);
  w.qpn = to_be(nak.qpn);
  w.msn = to_be(nak.msn);
  w.expected_seq = to_be(nak.expected_seq);
  w.rnr_delay_ns = to_be(nak.rnr_delay_ns);
  store(out, kCommonHeaderBytes, w);
  return kSize;
}

size_t encode_probe(std::span<uint8_t> out, Origin origin, PacketType type, const Probe& probe) {
  constexpr size_t kSize = kCommonHeaderBytes + sizeof(ProbeWire);
  if (type != PacketType::Probe && type != PacketType::ProbeReply) return 0;
  if (out.size() < kSize) return 0;
  store_common(out, type, origin);
  ProbeWire w{};
  w.probe_seq = to_be(probe.probe_seq);
  w.reserved = 0;
  w.timestamp = to_be(probe.timestamp);
  store(out, kCommonHeaderBytes, w);
  return kSize;
}

}  // namespace metaroce::wire
