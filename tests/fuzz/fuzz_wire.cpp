// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Fuzz target for the wire decoder. Any input must decode without reading
// out of bounds; every input that decodes Ok must survive encode -> decode
// with all meaningful fields unchanged and the same datagram length.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "metaroce/wire.h"

namespace {

using namespace metaroce::wire;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_wire: round-trip mismatch: %s\n", what);
  std::abort();
}

#define CHECK_EQ_FIELD(a, b, field)           \
  do {                                        \
    if ((a).field != (b).field) fail(#field); \
  } while (0)

void compare_data(const Packet& a, const Packet& b) {
  CHECK_EQ_FIELD(a, b, data.path_seq);
  CHECK_EQ_FIELD(a, b, data.opcode);
  CHECK_EQ_FIELD(a, b, data.flags);
  CHECK_EQ_FIELD(a, b, data.attempt);
  CHECK_EQ_FIELD(a, b, data.dst_qpn);
  CHECK_EQ_FIELD(a, b, data.src_qpn);
  CHECK_EQ_FIELD(a, b, data.msn);
  CHECK_EQ_FIELD(a, b, data.recv_index);
  CHECK_EQ_FIELD(a, b, data.msg_length);
  CHECK_EQ_FIELD(a, b, data.offset);
  CHECK_EQ_FIELD(a, b, data.remote_addr);
  CHECK_EQ_FIELD(a, b, data.rkey);
  CHECK_EQ_FIELD(a, b, data.imm);
  switch (a.data.opcode) {
    case Opcode::ReadRequest:
      CHECK_EQ_FIELD(a, b, read.sink_addr);
      CHECK_EQ_FIELD(a, b, read.sink_key);
      break;
    case Opcode::FetchAdd:
    case Opcode::CompareSwap:
      CHECK_EQ_FIELD(a, b, atomic.compare_add);
      CHECK_EQ_FIELD(a, b, atomic.swap);
      break;
    case Opcode::AtomicResponse: CHECK_EQ_FIELD(a, b, atomic_original); break;
    default: break;
  }
  if (a.payload.size() != b.payload.size()) fail("payload size");
  if (!a.payload.empty() && std::memcmp(a.payload.data(), b.payload.data(), a.payload.size()) != 0) {
    fail("payload bytes");
  }
}

void compare_ack(const Packet& a, const Packet& b) {
  CHECK_EQ_FIELD(a, b, ack.rate_hint_mbps);
  CHECK_EQ_FIELD(a, b, ack.ack_delay_ns);
  CHECK_EQ_FIELD(a, b, ack.path_count);
  CHECK_EQ_FIELD(a, b, ack.stream_count);
  for (size_t i = 0; i < a.ack.path_count; ++i) {
    CHECK_EQ_FIELD(a, b, ack.paths[i].path_id);
    CHECK_EQ_FIELD(a, b, ack.paths[i].ce_count);
    CHECK_EQ_FIELD(a, b, ack.paths[i].highest_seq);
    CHECK_EQ_FIELD(a, b, ack.paths[i].bits);
  }
  for (size_t i = 0; i < a.ack.stream_count; ++i) {
    CHECK_EQ_FIELD(a, b, ack.streams[i].qpn);
    CHECK_EQ_FIELD(a, b, ack.streams[i].completed_msn);
  }
}

void compare_nak(const Packet& a, const Packet& b) {
  CHECK_EQ_FIELD(a, b, nak.kind);
  CHECK_EQ_FIELD(a, b, nak.attempt);
  CHECK_EQ_FIELD(a, b, nak.data_path_id);
  CHECK_EQ_FIELD(a, b, nak.qpn);
  CHECK_EQ_FIELD(a, b, nak.msn);
  CHECK_EQ_FIELD(a, b, nak.expected_seq);
  CHECK_EQ_FIELD(a, b, nak.rnr_delay_ns);
}

void compare_probe(const Packet& a, const Packet& b) {
  CHECK_EQ_FIELD(a, b, probe.probe_seq);
  CHECK_EQ_FIELD(a, b, probe.timestamp);
}

void compare_ud(const Packet& a, const Packet& b) {
  CHECK_EQ_FIELD(a, b, ud.dst_qpn);
  CHECK_EQ_FIELD(a, b, ud.src_qpn);
  CHECK_EQ_FIELD(a, b, ud.qkey);
  CHECK_EQ_FIELD(a, b, ud.imm);
  CHECK_EQ_FIELD(a, b, ud.has_imm);
  if (a.payload.size() != b.payload.size() || std::memcmp(a.payload.data(), b.payload.data(), a.payload.size()) != 0) {
    fail("UD payload bytes");
  }
}

// Re-encodes a decoded packet into a buffer of exactly the needed size.
std::vector<uint8_t> reencode(const Packet& p) {
  std::vector<uint8_t> out;
  const Origin origin{p.common.path_id, p.common.home_port};
  switch (p.common.type) {
    case PacketType::Data: {
      const size_t hdr = data_header_bytes(p.data.opcode);
      out.resize(hdr + p.payload.size());
      const size_t n = encode_data(out, origin, p.data, &p.read, &p.atomic, &p.atomic_original, p.payload.size());
      if (n != hdr) fail("encode_data length");
      if (!p.payload.empty()) std::memcpy(out.data() + hdr, p.payload.data(), p.payload.size());
      break;
    }
    case PacketType::Ack: {
      out.resize(kMaxAckBytes);
      const size_t n = encode_ack(out, origin, p.ack);
      if (n == 0) fail("encode_ack refused a decoded ACK");
      out.resize(n);
      break;
    }
    case PacketType::Nak: {
      out.resize(kCommonHeaderBytes + sizeof(NakWire));
      if (encode_nak(out, origin, p.nak) != out.size()) fail("encode_nak length");
      break;
    }
    case PacketType::Probe:
    case PacketType::ProbeReply: {
      out.resize(kCommonHeaderBytes + sizeof(ProbeWire));
      if (encode_probe(out, origin, p.common.type, p.probe) != out.size()) {
        fail("encode_probe length");
      }
      break;
    }
    case PacketType::UdSend: {
      out.resize(kUdHeaderBytes + p.payload.size());
      if (encode_ud(out, origin, p.ud, p.payload.size()) != kUdHeaderBytes) fail("encode_ud length");
      if (!p.payload.empty()) std::memcpy(out.data() + kUdHeaderBytes, p.payload.data(), p.payload.size());
      break;
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Packet first;
  const DecodeStatus status = decode(std::span<const uint8_t>(data, size), first);
  if (static_cast<uint8_t>(status) >= kDecodeStatusCount) fail("status out of range");
  if (status != DecodeStatus::Ok) return 0;

  const std::vector<uint8_t> again = reencode(first);
  if (again.size() != size) fail("datagram length");
  Packet second;
  if (decode(again, second) != DecodeStatus::Ok) fail("re-encoded packet does not decode");

  CHECK_EQ_FIELD(first, second, common.type);
  CHECK_EQ_FIELD(first, second, common.path_id);
  CHECK_EQ_FIELD(first, second, common.home_port);
  switch (first.common.type) {
    case PacketType::Data: compare_data(first, second); break;
    case PacketType::Ack: compare_ack(first, second); break;
    case PacketType::Nak: compare_nak(first, second); break;
    case PacketType::Probe:
    case PacketType::ProbeReply: compare_probe(first, second); break;
    case PacketType::UdSend: compare_ud(first, second); break;
  }
  return 0;
}
