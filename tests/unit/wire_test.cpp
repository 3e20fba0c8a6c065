// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Unit tests of the v0.2 wire encoder/decoder (include/metaroce/wire.h).
#include "metaroce/wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "metaroce/splitmix64.h"

namespace metaroce::wire {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();

const Opcode kAllOpcodes[] = {
    Opcode::Send,         Opcode::SendImm,  Opcode::Write,       Opcode::WriteImm,       Opcode::ReadRequest,
    Opcode::ReadResponse, Opcode::FetchAdd, Opcode::CompareSwap, Opcode::AtomicResponse,
};

// Decodes a heap copy of exactly the first `len` bytes of `bytes`, so that
// AddressSanitizer reports any read past the end of the datagram. The copy
// stays alive until the next call, so `out.payload` may be inspected.
DecodeStatus decode_prefix(const Bytes& bytes, size_t len, Packet& out) {
  static std::unique_ptr<uint8_t[]> copy;
  copy.reset();
  if (len == 0) return decode(std::span<const uint8_t>{}, out);  // nothing to touch
  copy.reset(new uint8_t[len]);
  std::memcpy(copy.get(), bytes.data(), len);
  return decode(std::span<const uint8_t>(copy.get(), len), out);
}

DecodeStatus decode_all(const Bytes& bytes, Packet& out) { return decode_prefix(bytes, bytes.size(), out); }

Bytes make_data(Origin path_id, const DataHeader& h, const ReadRequest* read, const AtomicRequest* atomic,
                const uint64_t* original, const Bytes& payload) {
  Bytes out(data_header_bytes(h.opcode) + payload.size(), 0xAA);
  const size_t hdr = encode_data(out, path_id, h, read, atomic, original, payload.size());
  EXPECT_EQ(hdr, data_header_bytes(h.opcode));
  std::copy(payload.begin(), payload.end(), out.begin() + static_cast<std::ptrdiff_t>(hdr));
  return out;
}

Bytes make_ack(uint16_t path_id, const Ack& ack) {
  Bytes out(kMaxAckBytes + 16, 0xAA);
  const size_t n = encode_ack(out, path_id, ack);
  EXPECT_NE(n, 0u);
  out.resize(n);
  return out;
}

Bytes make_nak(uint16_t path_id, const Nak& nak) {
  Bytes out(64, 0xAA);
  const size_t n = encode_nak(out, path_id, nak);
  EXPECT_EQ(n, kCommonHeaderBytes + sizeof(NakWire));
  out.resize(n);
  return out;
}

Bytes make_probe(uint16_t path_id, PacketType type, const Probe& probe) {
  Bytes out(64, 0xAA);
  const size_t n = encode_probe(out, path_id, type, probe);
  EXPECT_EQ(n, kCommonHeaderBytes + sizeof(ProbeWire));
  out.resize(n);
  return out;
}

void expect_data_eq(const DataHeader& a, const DataHeader& b) {
  EXPECT_EQ(a.path_seq, b.path_seq);
  EXPECT_EQ(a.opcode, b.opcode);
  EXPECT_EQ(a.flags, b.flags);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.dst_qpn, b.dst_qpn);
  EXPECT_EQ(a.src_qpn, b.src_qpn);
  EXPECT_EQ(a.msn, b.msn);
  EXPECT_EQ(a.recv_index, b.recv_index);
  EXPECT_EQ(a.msg_length, b.msg_length);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.remote_addr, b.remote_addr);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.imm, b.imm);
}

void expect_ack_eq(const Ack& a, const Ack& b) {
  EXPECT_EQ(a.rate_hint_mbps, b.rate_hint_mbps);
  EXPECT_EQ(a.ack_delay_ns, b.ack_delay_ns);
  ASSERT_EQ(a.path_count, b.path_count);
  ASSERT_EQ(a.stream_count, b.stream_count);
  for (size_t i = 0; i < a.path_count; ++i) {
    SCOPED_TRACE("path block " + std::to_string(i));
    EXPECT_EQ(a.paths[i].path_id, b.paths[i].path_id);
    EXPECT_EQ(a.paths[i].holding_ns, b.paths[i].holding_ns);
    EXPECT_EQ(a.paths[i].ce_count, b.paths[i].ce_count);
    EXPECT_EQ(a.paths[i].highest_seq, b.paths[i].highest_seq);
    EXPECT_EQ(a.paths[i].bits, b.paths[i].bits);
  }
  for (size_t i = 0; i < a.stream_count; ++i) {
    SCOPED_TRACE("stream entry " + std::to_string(i));
    EXPECT_EQ(a.streams[i].qpn, b.streams[i].qpn);
    EXPECT_EQ(a.streams[i].completed_msn, b.streams[i].completed_msn);
  }
}

void expect_nak_eq(const Nak& a, const Nak& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.attempt, b.attempt);
  EXPECT_EQ(a.data_path_id, b.data_path_id);
  EXPECT_EQ(a.qpn, b.qpn);
  EXPECT_EQ(a.msn, b.msn);
  EXPECT_EQ(a.expected_seq, b.expected_seq);
  EXPECT_EQ(a.rnr_delay_ns, b.rnr_delay_ns);
}

// A header that satisfies the validity rules of its opcode; `extreme` selects
// all-ones values for every free field instead of zeros.
DataHeader valid_header(Opcode op, bool extreme, size_t payload_len) {
  DataHeader h;
  h.opcode = op;
  h.path_seq = extreme ? kMax32 : 0;
  h.flags = extreme ? kDataFlagsMask : 0;
  h.attempt = extreme ? 0xFF : 0;
  h.dst_qpn = extreme ? kMax32 : 0;
  h.src_qpn = extreme ? kMax32 : 0;
  h.msn = extreme ? kMax32 : 0;
  h.recv_index = extreme ? kMax32 : 0;
  h.remote_addr = extreme ? kMax64 : 0;
  h.rkey = extreme ? kMax32 : 0;
  h.imm = extreme ? kMax32 : 0;
  if (carries_payload(op)) {
    h.msg_length = extreme ? kMax32 : static_cast<uint32_t>(payload_len);
    h.offset = extreme ? kMax32 - static_cast<uint32_t>(payload_len) : 0;
  } else if (op == Opcode::ReadRequest) {
    h.msg_length = extreme ? kMax32 : 0;
    h.offset = 0;
  } else {
    h.msg_length = 8;
    h.offset = 0;
  }
  return h;
}

struct DataCase {
  uint16_t path_id;
  DataHeader header;
  ReadRequest read;
  AtomicRequest atomic;
  uint64_t original;
  Bytes payload;
};

DataCase data_case(Opcode op, bool extreme, size_t payload_len) {
  DataCase c;
  c.path_id = extreme ? kMaxPaths - 1 : 0;
  if (!carries_payload(op)) payload_len = 0;
  c.header = valid_header(op, extreme, payload_len);
  c.read = {extreme ? kMax64 : 0, extreme ? kMax32 : 0};
  c.atomic = {extreme ? kMax64 : 0, extreme ? kMax64 : 0};
  c.original = extreme ? kMax64 : 0;
  for (size_t i = 0; i < payload_len; ++i) c.payload.push_back(static_cast<uint8_t>(i * 7 + 1));
  return c;
}

Bytes encode_case(const DataCase& c) {
  return make_data(c.path_id, c.header, &c.read, &c.atomic, &c.original, c.payload);
}

void check_data_round_trip(const DataCase& c) {
  const Bytes bytes = encode_case(c);
  Packet p;
  // Decode in place too, to check that the payload span points into the input.
  ASSERT_EQ(decode(bytes, p), DecodeStatus::Ok);
  const size_t hdr = data_header_bytes(c.header.opcode);
  if (carries_payload(c.header.opcode)) {
    EXPECT_EQ(p.payload.data(), bytes.data() + hdr);
  }
  ASSERT_EQ(decode_all(bytes, p), DecodeStatus::Ok);
  EXPECT_EQ(p.common.type, PacketType::Data);
  EXPECT_EQ(p.common.path_id, c.path_id);
  expect_data_eq(p.data, c.header);
  EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), c.payload);
  switch (c.header.opcode) {
    case Opcode::ReadRequest:
      EXPECT_EQ(p.read.sink_addr, c.read.sink_addr);
      EXPECT_EQ(p.read.sink_key, c.read.sink_key);
      break;
    case Opcode::FetchAdd:
    case Opcode::CompareSwap:
      EXPECT_EQ(p.atomic.compare_add, c.atomic.compare_add);
      EXPECT_EQ(p.atomic.swap, c.atomic.swap);
      break;
    case Opcode::AtomicResponse: EXPECT_EQ(p.atomic_original, c.original); break;
    default: break;
  }
}

// ---------------------------------------------------------------------------
// Sizes and names.

TEST(WireLayout, HeaderSizes) {
  EXPECT_EQ(kCommonHeaderBytes, 20u);
  EXPECT_EQ(kDataHeaderBytes, 68u);
  EXPECT_EQ(data_header_bytes(Opcode::Send), 68u);
  EXPECT_EQ(data_header_bytes(Opcode::SendImm), 68u);
  EXPECT_EQ(data_header_bytes(Opcode::Write), 68u);
  EXPECT_EQ(data_header_bytes(Opcode::WriteImm), 68u);
  EXPECT_EQ(data_header_bytes(Opcode::ReadRequest), 84u);
  EXPECT_EQ(data_header_bytes(Opcode::ReadResponse), 68u);
  EXPECT_EQ(data_header_bytes(Opcode::FetchAdd), 84u);
  EXPECT_EQ(data_header_bytes(Opcode::CompareSwap), 84u);
  EXPECT_EQ(data_header_bytes(Opcode::AtomicResponse), 76u);
  EXPECT_EQ(kMaxAckBytes, 20u + 16u + 16u * 44u + 32u * 8u);
  // A 1400-byte payload with the integrity trailer fills a 1500-byte
  // Ethernet frame's IPv4/UDP payload exactly.
  EXPECT_EQ(kDataHeaderBytes + 1400 + trailer_bytes(Security::Integrity), 1500u - 20u - 8u);
}

TEST(WireNames, DecodeStatusNamesAreDistinct) {
  std::set<std::string> names;
  for (uint8_t s = 0; s < kDecodeStatusCount; ++s) {
    const char* name = to_string(static_cast<DecodeStatus>(s));
    ASSERT_NE(name, nullptr);
    EXPECT_TRUE(names.insert(name).second) << name;
  }
  EXPECT_STREQ(to_string(DecodeStatus::Ok), "Ok");
  EXPECT_STREQ(to_string(DecodeStatus::TrailingBytes), "TrailingBytes");
}

TEST(WireNames, OpcodeNamesAreDistinct) {
  std::set<std::string> names;
  for (Opcode op : kAllOpcodes) {
    const char* name = to_string(op);
    ASSERT_NE(name, nullptr);
    EXPECT_TRUE(names.insert(name).second) << name;
  }
  EXPECT_EQ(names.size(), size_t{kOpcodeCount});
  EXPECT_STREQ(to_string(Opcode::ReadRequest), "READ_REQ");
  EXPECT_STREQ(to_string(static_cast<Opcode>(200)), "UNKNOWN");
}

// ---------------------------------------------------------------------------
// Round trips.

TEST(WireRoundTrip, DataEveryOpcodeZeroAndExtremeValues) {
  for (Opcode op : kAllOpcodes) {
    for (bool extreme : {false, true}) {
      for (size_t payload_len : {size_t{0}, size_t{1}, size_t{1500}}) {
        SCOPED_TRACE(std::string(to_string(op)) + (extreme ? " extreme" : " zero") + " payload " +
                     std::to_string(payload_len));
        if (carries_payload(op) && payload_len == 0 && extreme) continue;  // invalid by rule
        check_data_round_trip(data_case(op, extreme, payload_len));
      }
    }
  }
}

TEST(WireRoundTrip, DataMixedValues) {
  SplitMix64 rng{42};
  for (int iter = 0; iter < 200; ++iter) {
    for (Opcode op : kAllOpcodes) {
      DataCase c = data_case(op, false, carries_payload(op) ? 1 + rng.next() % 64 : 0);
      c.path_id = static_cast<uint16_t>(rng.next() % kMaxPaths);
      DataHeader& h = c.header;
      h.path_seq = static_cast<uint32_t>(rng.next());
      h.flags = static_cast<uint8_t>(rng.next() & kDataFlagsMask);
      h.attempt = static_cast<uint8_t>(rng.next());
      h.dst_qpn = static_cast<uint32_t>(rng.next());
      h.src_qpn = static_cast<uint32_t>(rng.next());
      h.msn = static_cast<uint32_t>(rng.next());
      h.recv_index = static_cast<uint32_t>(rng.next());
      h.remote_addr = rng.next();
      h.rkey = static_cast<uint32_t>(rng.next());
      h.imm = static_cast<uint32_t>(rng.next());
      if (carries_payload(op)) {
        const uint32_t len = static_cast<uint32_t>(c.payload.size());
        h.offset = static_cast<uint32_t>(rng.next() % (kMax32 - len));
        h.msg_length = h.offset + len + static_cast<uint32_t>(rng.next() % 1000);
      } else if (op == Opcode::ReadRequest) {
        h.msg_length = static_cast<uint32_t>(rng.next());
      }
      c.read = {rng.next(), static_cast<uint32_t>(rng.next())};
      c.atomic = {rng.next(), rng.next()};
      c.original = rng.next();
      SCOPED_TRACE(std::string(to_string(op)) + " iteration " + std::to_string(iter));
      check_data_round_trip(c);
    }
  }
}

TEST(WireRoundTrip, DataMissingExtensionEncodesZeros) {
  for (Opcode op : {Opcode::ReadRequest, Opcode::FetchAdd, Opcode::CompareSwap, Opcode::AtomicResponse}) {
    DataHeader h = valid_header(op, true, 0);
    const Bytes bytes = make_data(5, h, nullptr, nullptr, nullptr, {});
    for (size_t i = kDataHeaderBytes; i < bytes.size(); ++i) EXPECT_EQ(bytes[i], 0) << i;
    Packet p;
    ASSERT_EQ(decode_all(bytes, p), DecodeStatus::Ok) << to_string(op);
  }
}

Ack full_ack(bool extreme, uint64_t seed) {
  SplitMix64 rng{seed};
  Ack ack;
  ack.rate_hint_mbps = extreme ? kMax32 : 0;
  ack.ack_delay_ns = extreme ? kMax32 : 0;
  ack.path_count = kMaxAckPathBlocks;
  ack.stream_count = kMaxAckStreams;
  for (size_t i = 0; i < kMaxAckPathBlocks; ++i) {
    PathSack& p = ack.paths[i];
    p.path_id = static_cast<uint16_t>(extreme ? kMaxPaths - 1 - i : i);
    p.holding_ns = extreme ? kMaxHoldingNs : static_cast<uint32_t>(i) * kHoldingUnitNs;
    p.ce_count = extreme ? kMax32 - static_cast<uint32_t>(i) : static_cast<uint32_t>(i);
    p.highest_seq = extreme ? kMax32 : static_cast<uint32_t>(i);
    for (auto& w : p.bits) w = extreme ? kMax64 : rng.next();
  }
  for (size_t i = 0; i < kMaxAckStreams; ++i) {
    ack.streams[i].qpn = extreme ? kMax32 : static_cast<uint32_t>(rng.next());
    ack.streams[i].completed_msn = extreme ? kMax32 - static_cast<uint32_t>(i) : 0;
  }
  return ack;
}

TEST(WireRoundTrip, AckMaxCounts) {
  for (bool extreme : {false, true}) {
    const Ack ack = full_ack(extreme, 7);
    const Bytes bytes = make_ack(extreme ? kMaxPaths - 1 : 0, ack);
    EXPECT_EQ(bytes.size(), kMaxAckBytes);
    Packet p;
    ASSERT_EQ(decode_all(bytes, p), DecodeStatus::Ok);
    EXPECT_EQ(p.common.type, PacketType::Ack);
    EXPECT_EQ(p.common.path_id, extreme ? kMaxPaths - 1 : 0);
    expect_ack_eq(p.ack, ack);
  }
}

TEST(WireRoundTrip, AckHoldingIsQuantizedAndSaturates) {
  struct Case {
    uint32_t sent_ns, decoded_ns;
  };
  for (const Case c : {Case{0, 0}, Case{255, 0}, Case{256, 256}, Case{1000, 768}, Case{kMaxHoldingNs, kMaxHoldingNs},
                       Case{kMaxHoldingNs + 256, kMaxHoldingNs}, Case{kMax32, kMaxHoldingNs}}) {
    Ack ack;
    ack.path_count = 1;
    ack.paths[0].highest_seq = 5;
    ack.paths[0].holding_ns = c.sent_ns;
    Packet p;
    ASSERT_EQ(decode_all(make_ack(0, ack), p), DecodeStatus::Ok);
    EXPECT_EQ(p.ack.paths[0].holding_ns, c.decoded_ns) << "sent " << c.sent_ns;
  }
}

TEST(WireRoundTrip, AckEveryCountCombination) {
  for (uint8_t paths = 0; paths <= kMaxAckPathBlocks; ++paths) {
    for (uint8_t streams = 0; streams <= kMaxAckStreams; ++streams) {
      Ack ack = full_ack(false, uint64_t{paths} * 100 + streams);
      ack.rate_hint_mbps = 100000;
      ack.ack_delay_ns = 1234;
      ack.path_count = paths;
      ack.stream_count = streams;
      const Bytes bytes = make_ack(3, ack);
      EXPECT_EQ(bytes.size(), 36u + 44u * paths + 8u * streams);
      Packet p;
      ASSERT_EQ(decode_all(bytes, p), DecodeStatus::Ok);
      expect_ack_eq(p.ack, ack);
    }
  }
}

TEST(WireRoundTrip, NakEveryKind) {
  for (NakKind kind : {NakKind::ReceiverNotReady, NakKind::RemoteAccess, NakKind::InvalidRequest, NakKind::Sequence,
                       NakKind::RemoteOperational}) {
    for (bool extreme : {false, true}) {
      Nak nak;
      nak.kind = kind;
      nak.attempt = extreme ? 0xFF : 0;
      nak.data_path_id = extreme ? kMaxPaths - 1 : 0;
      nak.qpn = extreme ? kMax32 : 0;
      nak.msn = extreme ? kMax32 : 0;
      nak.expected_seq = extreme ? kMax32 : 0;
      nak.rnr_delay_ns = extreme ? kMax32 : 0;
      const Bytes bytes = make_nak(extreme ? kMaxPaths - 1 : 0, nak);
      Packet p;
      ASSERT_EQ(decode_all(bytes, p), DecodeStatus::Ok);
      EXPECT_EQ(p.common.type, PacketType::Nak);
      EXPECT_EQ(p.common.path_id, extreme ? kMaxPaths - 1 : 0);
      expect_nak_eq(p.nak, nak);
    }
  }
}

TEST(WireRoundTrip, ProbeAndReply) {
  for (PacketType type : {PacketType::Probe, PacketType::ProbeReply}) {
    for (bool extreme : {false, true}) {
      Probe probe{extreme ? kMax32 : 0, extreme ? kMax64 : 0};
      const Bytes bytes = make_probe(extreme ? kMaxPaths - 1 : 0, type, probe);
      Packet p;
      ASSERT_EQ(decode_all(bytes, p), DecodeStatus::Ok);
      EXPECT_EQ(p.common.type, type);
      EXPECT_EQ(p.common.path_id, extreme ? kMaxPaths - 1 : 0);
      EXPECT_EQ(p.probe.probe_seq, probe.probe_seq);
      EXPECT_EQ(p.probe.timestamp, probe.timestamp);
    }
  }
}

// ---------------------------------------------------------------------------
// Golden byte images: every offset and the big-endian order, by hand.

TEST(WireGolden, WriteImmDataPacket) {
  DataHeader h;
  h.path_seq = 0x03040506;
  h.opcode = Opcode::WriteImm;
  h.flags = kFlagAckRequest | kFlagRetransmit;
  h.attempt = 0x0607;
  h.dst_qpn = 0x08090A0B;
  h.src_qpn = 0x0C0D0E0F;
  h.msn = 0x10111213;
  h.recv_index = 0x14151617;
  h.msg_length = 0x20212223;
  h.offset = 0x1C1D1E1F;
  h.remote_addr = 0x2425262728292A2Bull;
  h.rkey = 0x2C2D2E2F;
  h.imm = 0x30313233;
  const Bytes payload = {0xDE, 0xAD, 0xBE};
  const Bytes got = make_data({0x0025, 0x12B8, 0xA05C}, h, nullptr, nullptr, nullptr, payload);

  const Bytes want = {
      // common header
      0x02,                    //  0 version
      0x01,                    //  1 type = Data
      0x00,                    //  2 security (stamped later)
      0x25,                    //  3 path_id
      0x12, 0xB8,              //  4 home_port (4792)
      0xA0, 0x5C,              //  6 heard_paths
      0x00, 0x00, 0x00, 0x00,  //  8 src_epoch (stamped later)
      0x00, 0x00, 0x00, 0x00,  // 12 dst_epoch (stamped later)
      0x00, 0x00, 0x00, 0x00,  // 16 packet_number (stamped later)
      // data header
      0x03, 0x04, 0x05, 0x06,                          // 20 path_seq
      0x03,                                            // 24 opcode = WRITE_IMM
      0x03,                                            // 25 flags
      0x06, 0x07,                                      // 26 attempt
      0x08, 0x09, 0x0A, 0x0B,                          // 28 dst_qpn
      0x0C, 0x0D, 0x0E, 0x0F,                          // 32 src_qpn
      0x10, 0x11, 0x12, 0x13,                          // 36 msn
      0x14, 0x15, 0x16, 0x17,                          // 40 recv_index
      0x20, 0x21, 0x22, 0x23,                          // 44 msg_length
      0x1C, 0x1D, 0x1E, 0x1F,                          // 48 offset
      0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B,  // 52 remote_addr
      0x2C, 0x2D, 0x2E, 0x2F,                          // 60 rkey
      0x30, 0x31, 0x32, 0x33,                          // 64 imm
      0xDE, 0xAD, 0xBE,                                // 68 payload
  };
  EXPECT_EQ(got, want);

  // stamp_common fills in what the framing adds.
  Bytes stamped = got;
  stamp_common(stamped, Security::Encrypt, 0xA1A2A3A4, 0xB1B2B3B4, 0xC1C2C3C4);
  const Bytes want_common = {0x02, 0x01, 0x02, 0x25, 0x12, 0xB8, 0xA0, 0x5C, 0xA1, 0xA2,
                             0xA3, 0xA4, 0xB1, 0xB2, 0xB3, 0xB4, 0xC1, 0xC2, 0xC3, 0xC4};
  EXPECT_EQ(Bytes(stamped.begin(), stamped.begin() + 20), want_common);
  CommonHeader c;
  ASSERT_EQ(decode_common(stamped, c), DecodeStatus::Ok);
  EXPECT_EQ(c.security, Security::Encrypt);
  EXPECT_EQ(c.src_epoch, 0xA1A2A3A4u);
  EXPECT_EQ(c.dst_epoch, 0xB1B2B3B4u);
  EXPECT_EQ(c.packet_number, 0xC1C2C3C4u);

  Packet p;
  ASSERT_EQ(decode_all(want, p), DecodeStatus::Ok);
  expect_data_eq(p.data, h);
  EXPECT_EQ(p.common.path_id, 0x25);
  EXPECT_EQ(p.common.home_port, 4792);
  EXPECT_EQ(p.common.heard_paths, 0xA05C);
  EXPECT_EQ(peek_home_port(want), std::optional<uint16_t>(4792));
  EXPECT_EQ(peek_home_port(Bytes(want.begin(), want.begin() + 7)), std::nullopt);
  EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), payload);
}

TEST(WireGolden, CompareSwapExtension) {
  DataHeader h;
  h.opcode = Opcode::CompareSwap;
  h.msg_length = 8;
  const AtomicRequest atomic{0x0102030405060708ull, 0x1112131415161718ull};
  const Bytes got = make_data(1, h, nullptr, &atomic, nullptr, {});
  ASSERT_EQ(got.size(), 84u);
  const Bytes ext(got.begin() + 68, got.end());
  const Bytes want = {0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,   // 68 compare_add
                      0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};  // 76 swap
  EXPECT_EQ(ext, want);
  EXPECT_EQ(got[24], 7);                                                      // opcode
  EXPECT_EQ(Bytes(got.begin() + 44, got.begin() + 48), (Bytes{0, 0, 0, 8}));  // msg_length
}

TEST(WireGolden, ReadRequestExtension) {
  DataHeader h;
  h.opcode = Opcode::ReadRequest;
  h.msg_length = 0x00010000;
  const ReadRequest read{0xA1A2A3A4A5A6A7A8ull, 0xB1B2B3B4};
  const Bytes got = make_data(1, h, &read, nullptr, nullptr, {});
  ASSERT_EQ(got.size(), 84u);
  const Bytes want = {0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xA6, 0xA7, 0xA8,  // 68 sink_addr
                      0xB1, 0xB2, 0xB3, 0xB4,                          // 76 sink_key
                      0x00, 0x00, 0x00, 0x00};                         // 80 reserved
  EXPECT_EQ(Bytes(got.begin() + 68, got.end()), want);
}

TEST(WireGolden, AckPacket) {
  Ack ack;
  ack.rate_hint_mbps = 0x01020304;
  ack.ack_delay_ns = 0x05060708;
  ack.path_count = 1;
  ack.stream_count = 1;
  ack.paths[0].path_id = 0x0009;
  ack.paths[0].holding_ns = 0x0E0F * kHoldingUnitNs;
  ack.paths[0].ce_count = 0x0A0B0C0D;
  ack.paths[0].highest_seq = 0x11223344;
  ack.paths[0].mark(0x11223344);        // bit 0
  ack.paths[0].mark(0x11223344 - 9);    // bit 9
  ack.paths[0].mark(0x11223344 - 70);   // bit 70
  ack.paths[0].mark(0x11223344 - 255);  // bit 255
  ack.streams[0] = {0x55667788, 0x99AABBCC};
  const Bytes got = make_ack(0x0003, ack);

  Bytes want = {
      // common header
      0x02, 0x02, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
      // ack header
      0x01,                    // 20 path_blocks
      0x01,                    // 21 stream_entries
      0x00, 0x00,              // 22 reserved
      0x01, 0x02, 0x03, 0x04,  // 24 rate_hint_mbps
      0x05, 0x06, 0x07, 0x08,  // 28 ack_delay_ns
      0x00, 0x00, 0x00, 0x00,  // 32 reserved2
      // path block 0
      0x00, 0x09,              // 36 path_id
      0x0E, 0x0F,              // 38 holding (256 ns units)
      0x0A, 0x0B, 0x0C, 0x0D,  // 40 ce_count
      0x11, 0x22, 0x33, 0x44,  // 44 highest_seq
  };
  // 48 bitmap: bit 0 -> byte 0 bit 0; bit 9 -> byte 1 bit 1; bit 70 -> byte 8
  // bit 6; bit 255 -> byte 31 bit 7.
  Bytes bitmap(32, 0);
  bitmap[0] = 0x01;
  bitmap[1] = 0x02;
  bitmap[8] = 0x40;
  bitmap[31] = 0x80;
  want.insert(want.end(), bitmap.begin(), bitmap.end());
  // 80 stream entry 0
  const Bytes stream = {0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC};
  want.insert(want.end(), stream.begin(), stream.end());
  ASSERT_EQ(want.size(), 88u);
  EXPECT_EQ(got, want);

  Packet p;
  ASSERT_EQ(decode_all(want, p), DecodeStatus::Ok);
  expect_ack_eq(p.ack, ack);
  EXPECT_EQ(p.ack.paths[0].bits[0], (uint64_t{1} << 0) | (uint64_t{1} << 9));
  EXPECT_EQ(p.ack.paths[0].bits[1], uint64_t{1} << 6);
  EXPECT_EQ(p.ack.paths[0].bits[2], 0u);
  EXPECT_EQ(p.ack.paths[0].bits[3], uint64_t{1} << 63);
}

TEST(WireGolden, NakAndProbe) {
  Nak nak;
  nak.kind = NakKind::ReceiverNotReady;
  nak.attempt = 0x0102;
  nak.data_path_id = 0x0011;
  nak.qpn = 0x01020304;
  nak.msn = 0x05060708;
  nak.expected_seq = 0;
  nak.rnr_delay_ns = 0x0A0B0C0D;
  const Bytes want_nak = {0x02, 0x03, 0x00, 0x02, 0, 0, 0, 0, 0,    0,    0,    0,
                          0,    0,    0,    0,    0, 0, 0, 0, 0x01, 0x11, 0x01, 0x02,  // 20 kind, data_path_id, attempt
                          0x01, 0x02, 0x03, 0x04,                                      // 24 qpn
                          0x05, 0x06, 0x07, 0x08,                                      // 28 msn
                          0x00, 0x00, 0x00, 0x00,                                      // 32 expected_seq
                          0x0A, 0x0B, 0x0C, 0x0D};                                     // 36 rnr_delay_ns
  EXPECT_EQ(make_nak(2, nak), want_nak);

  const Probe probe{0x01020304, 0x1122334455667788ull};
  const Bytes want_probe = {0x02, 0x05, 0x00, 0x3F, 0,    0,    0,    0,   0,    0,    0,    0,
                            0,    0,    0,    0,    0,    0,    0,    0,   0x01, 0x02, 0x03, 0x04,  // 20 probe_seq
                            0x00, 0x00, 0x00, 0x00,                                                 // 24 reserved
                            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};                        // 28 timestamp
  EXPECT_EQ(make_probe(63, PacketType::ProbeReply, probe), want_probe);
}

TEST(WireDecode, ReservedFieldsIgnoredOnReceive) {
  Bytes data = encode_case(data_case(Opcode::ReadRequest, true, 0));
  for (size_t i : {80, 81, 82, 83}) data[i] = 0x5A;
  Packet p;
  EXPECT_EQ(decode_all(data, p), DecodeStatus::Ok);

  Bytes ack = make_ack(0, full_ack(false, 1));
  for (size_t i : {22, 23, 32, 33, 34, 35}) ack[i] = 0xFF;
  EXPECT_EQ(decode_all(ack, p), DecodeStatus::Ok);

  Bytes probe = make_probe(0, PacketType::Probe, {1, 2});
  for (size_t i = 24; i < 28; ++i) probe[i] = 0xEE;
  EXPECT_EQ(decode_all(probe, p), DecodeStatus::Ok);
}

// ---------------------------------------------------------------------------
// Truncation: every prefix of a valid datagram, decoded from an exact-size heap
// copy.

TEST(WireTruncation, DataEveryOpcode) {
  for (Opcode op : kAllOpcodes) {
    for (bool extreme : {false, true}) {
      const DataCase c = data_case(op, extreme, 40);
      const Bytes bytes = encode_case(c);
      const size_t hdr = data_header_bytes(op);
      for (size_t len = 0; len < bytes.size(); ++len) {
        SCOPED_TRACE(std::string(to_string(op)) + " len " + std::to_string(len));
        Packet p;
        const DecodeStatus s = decode_prefix(bytes, len, p);
        if (len < hdr) {
          EXPECT_EQ(s, DecodeStatus::Truncated);
        } else {
          // Only payload opcodes get here: the datagram length defines the
          // payload length, so a shorter payload is still a well-formed
          // packet (it covers fewer bytes of the message), except that a
          // non-empty message may not have an empty payload.
          ASSERT_TRUE(carries_payload(op));
          if (len == hdr) {
            EXPECT_EQ(s, DecodeStatus::BadLength);
          } else {
            ASSERT_EQ(s, DecodeStatus::Ok);
            EXPECT_EQ(p.payload.size(), len - hdr);
          }
        }
      }
    }
  }
}

TEST(WireTruncation, AckEveryLength) {
  for (bool extreme : {false, true}) {
    const Bytes bytes = make_ack(1, full_ack(extreme, 3));
    for (size_t len = 0; len < bytes.size(); ++len) {
      Packet p;
      EXPECT_EQ(decode_prefix(bytes, len, p), DecodeStatus::Truncated) << len;
    }
  }
  Ack small;
  small.path_count = 1;
  small.stream_count = 1;
  const Bytes bytes = make_ack(1, small);
  for (size_t len = 0; len < bytes.size(); ++len) {
    Packet p;
    EXPECT_EQ(decode_prefix(bytes, len, p), DecodeStatus::Truncated) << len;
  }
}

TEST(WireTruncation, NakAndProbeEveryLength) {
  Nak nak;
  nak.kind = NakKind::Sequence;
  std::vector<Bytes> datagrams = {make_nak(0, nak), make_probe(0, PacketType::Probe, {1, 2}),
                                  make_probe(0, PacketType::ProbeReply, {kMax32, kMax64})};
  for (const Bytes& bytes : datagrams) {
    for (size_t len = 0; len < bytes.size(); ++len) {
      Packet p;
      EXPECT_EQ(decode_prefix(bytes, len, p), DecodeStatus::Truncated) << len;
    }
  }
}

// ---------------------------------------------------------------------------
// Every DecodeStatus from a crafted input.

Bytes valid_write() { return encode_case(data_case(Opcode::Write, false, 16)); }

TEST(WireErrors, Truncated) {
  Packet p;
  EXPECT_EQ(decode(std::span<const uint8_t>{}, p), DecodeStatus::Truncated);
  Bytes common(kCommonHeaderBytes - 1, 0);
  common[0] = kVersion;
  common[1] = 1;
  EXPECT_EQ(decode_all(common, p), DecodeStatus::Truncated);
  Bytes just_common(kCommonHeaderBytes, 0);
  just_common[0] = kVersion;
  for (uint8_t type = 1; type <= 5; ++type) {
    just_common[1] = type;
    EXPECT_EQ(decode_all(just_common, p), DecodeStatus::Truncated) << int{type};
  }
}

TEST(WireErrors, BadVersion) {
  Packet p;
  for (uint8_t v : {0, 1, 3, 0xFF}) {
    Bytes b = valid_write();
    b[0] = v;
    EXPECT_EQ(decode_all(b, p), DecodeStatus::BadVersion) << int{v};
  }
  // Version is checked before anything else in the common header.
  Bytes bad(kCommonHeaderBytes, 0xFF);
  bad[0] = 1;
  EXPECT_EQ(decode_all(bad, p), DecodeStatus::BadVersion);
}

TEST(WireErrors, BadType) {
  Packet p;
  for (uint8_t t : {0, 7, 0x7F, 0xFF}) {
    Bytes b = valid_write();
    b[1] = t;
    EXPECT_EQ(decode_all(b, p), DecodeStatus::BadType) << int{t};
  }
}

// docs/spec.md 6a: common header, then {dst_qpn, src_qpn, qkey, imm, flags,
// reserved[3]} big-endian, then the message.
TEST(WireGolden, UdSend) {
  UdHeader h;
  h.dst_qpn = 0x00012001;
  h.src_qpn = 0x00034002;
  h.qkey = 0x11111111;
  h.imm = 0xA1B2C3D4;
  h.has_imm = true;
  Bytes out(kUdHeaderBytes + 3, 0xAA);
  ASSERT_EQ(encode_ud(out, {0, 0x12BB}, h, 3), kUdHeaderBytes);
  out[kUdHeaderBytes] = 1;
  out[kUdHeaderBytes + 1] = 2;
  out[kUdHeaderBytes + 2] = 3;
  const Bytes want = {
      2,    6,    0,    0,    0x12, 0xBB, 0,    0,  // common: version, type, security, path, home port, heard
      0,    0,    0,    0,    0,    0,    0,    0, 0, 0, 0, 0,  //   epochs and packet number (stamped at framing)
      0,    1,    0x20, 1,    0,    3,    0x40, 2,              // dst_qpn, src_qpn
      0x11, 0x11, 0x11, 0x11,                                   // qkey
      0xA1, 0xB2, 0xC3, 0xD4, 1,    0,    0,    0,              // imm, flags, reserved
      1,    2,    3};
  EXPECT_EQ(out, want);
  Packet p;
  ASSERT_EQ(decode_all(want, p), DecodeStatus::Ok);
  EXPECT_EQ(p.common.type, PacketType::UdSend);
  EXPECT_EQ(p.common.home_port, 0x12BB);
  EXPECT_EQ(p.ud.dst_qpn, h.dst_qpn);
  EXPECT_EQ(p.ud.src_qpn, h.src_qpn);
  EXPECT_EQ(p.ud.qkey, h.qkey);
  EXPECT_TRUE(p.ud.has_imm);
  EXPECT_EQ(p.ud.imm, h.imm);
  EXPECT_EQ(Bytes(p.payload.begin(), p.payload.end()), (Bytes{1, 2, 3}));
}

TEST(WireErrors, UdSendTruncatedFlagsAndEmptyMessage) {
  UdHeader h;
  h.dst_qpn = 5;
  Bytes out(kUdHeaderBytes, 0);
  ASSERT_EQ(encode_ud(out, {0, 4792}, h, 0), kUdHeaderBytes);
  Packet p;
  ASSERT_EQ(decode_all(out, p), DecodeStatus::Ok);  // an empty message is a message
  EXPECT_TRUE(p.payload.empty());
  EXPECT_FALSE(p.ud.has_imm);
  for (size_t len = kCommonHeaderBytes; len < kUdHeaderBytes; ++len)
    EXPECT_EQ(decode_prefix(out, len, p), DecodeStatus::Truncated) << len;
  Bytes flagged = out;
  flagged[36] = 0x02;
  EXPECT_EQ(decode_all(flagged, p), DecodeStatus::BadFlags);
  // imm without the flag is not immediate data.
  Bytes stray = out;
  stray[32] = 0xFF;
  ASSERT_EQ(decode_all(stray, p), DecodeStatus::Ok);
  EXPECT_FALSE(p.ud.has_imm);
  EXPECT_EQ(p.ud.imm, 0u);
  EXPECT_EQ(encode_ud(std::span<uint8_t>(out.data(), kUdHeaderBytes - 1), {0, 4792}, h, 0), 0u);
  EXPECT_EQ(encode_ud(out, {0, 4792}, h, 1), 0u);
}

TEST(WireErrors, BadPathInCommonHeader) {
  Packet p;
  for (uint8_t id : {uint8_t{kMaxPaths}, uint8_t{0x80}, uint8_t{0xFF}}) {
    Bytes b = valid_write();
    b[3] = id;
    EXPECT_EQ(decode_all(b, p), DecodeStatus::BadPath) << int{id};
  }
  // Also for a datagram that is only a common header.
  Bytes only(kCommonHeaderBytes, 0);
  only[0] = kVersion;
  only[1] = 4;
  only[3] = 0x40;
  EXPECT_EQ(decode_all(only, p), DecodeStatus::BadPath);
}

TEST(WireErrors, BadPathInAckBlockAndNak) {
  Packet p;
  Ack ack = full_ack(false, 9);
  ack.paths[kMaxAckPathBlocks - 1].path_id = kMaxPaths;
  EXPECT_EQ(decode_all(make_ack(0, ack), p), DecodeStatus::BadPath);
  ack.paths[kMaxAckPathBlocks - 1].path_id = 0xFFFF;
  EXPECT_EQ(decode_all(make_ack(0, ack), p), DecodeStatus::BadPath);

  Nak nak;
  nak.data_path_id = kMaxPaths;
  EXPECT_EQ(decode_all(make_nak(0, nak), p), DecodeStatus::BadPath);
}

TEST(WireErrors, BadOpcode) {
  Packet p;
  for (uint8_t op : {kOpcodeCount, uint8_t{0x7F}, uint8_t{0xFF}}) {
    Bytes b = valid_write();
    b[24] = op;
    EXPECT_EQ(decode_all(b, p), DecodeStatus::BadOpcode) << int{op};
  }
}

TEST(WireErrors, BadFlags) {
  Packet p;
  for (uint8_t f : {0x04, 0x08, 0x80, 0xFF}) {
    Bytes b = valid_write();
    b[25] = f;
    EXPECT_EQ(decode_all(b, p), DecodeStatus::BadFlags) << int{f};
  }
}

TEST(WireErrors, BadCount) {
  Packet p;
  Bytes b = make_ack(0, full_ack(false, 2));
  b[20] = kMaxAckPathBlocks + 1;
  EXPECT_EQ(decode_all(b, p), DecodeStatus::BadCount);
  b[20] = kMaxAckPathBlocks;
  b[21] = kMaxAckStreams + 1;
  EXPECT_EQ(decode_all(b, p), DecodeStatus::BadCount);
  b[20] = 0xFF;
  b[21] = 0xFF;
  EXPECT_EQ(decode_all(b, p), DecodeStatus::BadCount);
  // Counts are checked before the length: a bare 36-byte ACK with big counts.
  b.resize(36);
  EXPECT_EQ(decode_all(b, p), DecodeStatus::BadCount);
}

TEST(WireErrors, BadLengthPayload) {
  Packet p;
  auto with = [](Opcode op, uint32_t msg_length, uint32_t offset, size_t payload_len) {
    DataCase c = data_case(op, false, payload_len);
    c.payload.assign(payload_len, 0x11);
    c.header.msg_length = msg_length;
    c.header.offset = offset;
    return encode_case(c);
  };
  for (Opcode op : {Opcode::Send, Opcode::SendImm, Opcode::Write, Opcode::WriteImm, Opcode::ReadResponse}) {
    SCOPED_TRACE(to_string(op));
    EXPECT_EQ(decode_all(with(op, 10, 0, 11), p), DecodeStatus::BadLength);
    EXPECT_EQ(decode_all(with(op, 10, 1, 10), p), DecodeStatus::BadLength);
    EXPECT_EQ(decode_all(with(op, 10, 10, 1), p), DecodeStatus::BadLength);
    // offset + payload_len overflows 32 bits.
    EXPECT_EQ(decode_all(with(op, kMax32, kMax32, 1), p), DecodeStatus::BadLength);
    EXPECT_EQ(decode_all(with(op, kMax32, kMax32 - 5, 7), p), DecodeStatus::BadLength);
    // Empty payload: only for an empty message at offset 0.
    EXPECT_EQ(decode_all(with(op, 1, 0, 0), p), DecodeStatus::BadLength);
    EXPECT_EQ(decode_all(with(op, 10, 10, 0), p), DecodeStatus::BadLength);
    EXPECT_EQ(decode_all(with(op, 0, 1, 0), p), DecodeStatus::BadLength);
    // Boundaries that are fine.
    EXPECT_EQ(decode_all(with(op, 0, 0, 0), p), DecodeStatus::Ok);
    EXPECT_EQ(decode_all(with(op, 10, 0, 10), p), DecodeStatus::Ok);
    EXPECT_EQ(decode_all(with(op, 10, 9, 1), p), DecodeStatus::Ok);
    EXPECT_EQ(decode_all(with(op, kMax32, kMax32 - 1, 1), p), DecodeStatus::Ok);
  }
}

TEST(WireErrors, BadLengthAtomicsAndRead) {
  Packet p;
  for (Opcode op : {Opcode::FetchAdd, Opcode::CompareSwap, Opcode::AtomicResponse}) {
    SCOPED_TRACE(to_string(op));
    const std::pair<uint32_t, uint32_t> bad[] = {{0, 0},      {7, 0}, {9, 0}, {16, 0},
                                                 {kMax32, 0}, {8, 1}, {8, 8}, {8, kMax32}};
    for (auto [len, off] : bad) {
      DataCase c = data_case(op, false, 0);
      c.header.msg_length = len;
      c.header.offset = off;
      EXPECT_EQ(decode_all(encode_case(c), p), DecodeStatus::BadLength) << len << " " << off;
    }
  }
  for (uint32_t off : {1u, 8u, kMax32}) {
    DataCase c = data_case(Opcode::ReadRequest, false, 0);
    c.header.offset = off;
    EXPECT_EQ(decode_all(encode_case(c), p), DecodeStatus::BadLength) << off;
  }
  for (uint32_t len : {0u, 1u, 8u, kMax32}) {
    DataCase c = data_case(Opcode::ReadRequest, false, 0);
    c.header.msg_length = len;
    EXPECT_EQ(decode_all(encode_case(c), p), DecodeStatus::Ok) << len;
  }
}

TEST(WireErrors, BadNakKind) {
  Packet p;
  for (uint8_t k : {0, 6, 0xFF}) {
    Bytes b = make_nak(0, Nak{});
    b[20] = k;
    EXPECT_EQ(decode_all(b, p), DecodeStatus::BadNakKind) << int{k};
  }
}

TEST(WireErrors, TrailingBytes) {
  Packet p;
  for (Opcode op : {Opcode::ReadRequest, Opcode::FetchAdd, Opcode::CompareSwap, Opcode::AtomicResponse}) {
    Bytes b = encode_case(data_case(op, true, 0));
    b.push_back(0);
    EXPECT_EQ(decode_all(b, p), DecodeStatus::TrailingBytes) << to_string(op);
  }
  std::vector<Bytes> fixed = {make_ack(0, full_ack(true, 1)), make_ack(0, Ack{}), make_nak(0, Nak{}),
                              make_probe(0, PacketType::Probe, {}), make_probe(0, PacketType::ProbeReply, {})};
  for (Bytes& b : fixed) {
    b.push_back(0);
    EXPECT_EQ(decode_all(b, p), DecodeStatus::TrailingBytes);
    b.resize(b.size() + 100, 0xFF);
    EXPECT_EQ(decode_all(b, p), DecodeStatus::TrailingBytes);
  }
}

TEST(WireErrors, EveryStatusProduced) {
  // Summary: one crafted input per status, so that a new status without a
  // test stands out.
  std::vector<std::pair<Bytes, DecodeStatus>> cases;
  cases.push_back({valid_write(), DecodeStatus::Ok});
  cases.push_back({Bytes{kVersion, 1, 0}, DecodeStatus::Truncated});
  Bytes b = valid_write();
  b[0] = 9;
  cases.push_back({b, DecodeStatus::BadVersion});
  b = valid_write();
  b[1] = 9;
  cases.push_back({b, DecodeStatus::BadType});
  b = valid_write();
  b[2] = kSecurityCount;
  cases.push_back({b, DecodeStatus::BadSecurity});
  b = valid_write();
  b[24] = 42;
  cases.push_back({b, DecodeStatus::BadOpcode});
  b = valid_write();
  b[25] = 0x10;
  cases.push_back({b, DecodeStatus::BadFlags});
  b = make_ack(0, Ack{});
  b[21] = 200;
  cases.push_back({b, DecodeStatus::BadCount});
  b = valid_write();
  b.push_back(1);  // 17 bytes of a 16-byte message
  cases.push_back({b, DecodeStatus::BadLength});
  b = valid_write();
  b[3] = 200;
  cases.push_back({b, DecodeStatus::BadPath});
  b = make_nak(0, Nak{});
  b[20] = 77;
  cases.push_back({b, DecodeStatus::BadNakKind});
  b = make_probe(0, PacketType::Probe, {});
  b.push_back(0);
  cases.push_back({b, DecodeStatus::TrailingBytes});
  ASSERT_EQ(cases.size(), size_t{kDecodeStatusCount});
  std::set<DecodeStatus> seen;
  for (const auto& [bytes, want] : cases) {
    Packet p;
    EXPECT_EQ(decode_all(bytes, p), want) << to_string(want);
    seen.insert(want);
  }
  EXPECT_EQ(seen.size(), size_t{kDecodeStatusCount});
}

// ---------------------------------------------------------------------------
// Encoders refuse buffers that are too small and write nothing then.

bool untouched(const Bytes& b) {
  return std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0xAA; });
}

TEST(WireEncode, DataTooSmall) {
  for (Opcode op : kAllOpcodes) {
    const DataCase c = data_case(op, true, 0);
    const size_t hdr = data_header_bytes(op);
    for (size_t payload : {size_t{0}, size_t{1}, size_t{100}}) {
      for (size_t size = 0; size < hdr + payload; ++size) {
        Bytes buf(size, 0xAA);
        EXPECT_EQ(encode_data(buf, 0, c.header, &c.read, &c.atomic, &c.original, payload), 0u)
            << to_string(op) << " size " << size << " payload " << payload;
        EXPECT_TRUE(untouched(buf));
      }
      Bytes buf(hdr + payload, 0xAA);
      EXPECT_EQ(encode_data(buf, 0, c.header, &c.read, &c.atomic, &c.original, payload), hdr);
    }
    // A payload size that would overflow size arithmetic.
    Bytes buf(256, 0xAA);
    EXPECT_EQ(encode_data(buf, 0, c.header, nullptr, nullptr, nullptr, std::numeric_limits<size_t>::max()), 0u);
    EXPECT_TRUE(untouched(buf));
  }
}

TEST(WireEncode, DataUnknownOpcode) {
  DataHeader h;
  h.opcode = static_cast<Opcode>(kOpcodeCount);
  Bytes buf(256, 0xAA);
  EXPECT_EQ(encode_data(buf, 0, h, nullptr, nullptr, nullptr, 0), 0u);
  EXPECT_TRUE(untouched(buf));
}

TEST(WireEncode, AckTooSmallOrOverCount) {
  const Ack ack = full_ack(true, 5);
  for (size_t size = 0; size < kMaxAckBytes; ++size) {
    Bytes buf(size, 0xAA);
    EXPECT_EQ(encode_ack(buf, 0, ack), 0u) << size;
    EXPECT_TRUE(untouched(buf));
  }
  Bytes buf(kMaxAckBytes, 0xAA);
  EXPECT_EQ(encode_ack(buf, 0, ack), kMaxAckBytes);

  Ack over = ack;
  over.path_count = kMaxAckPathBlocks + 1;
  Bytes big(4096, 0xAA);
  EXPECT_EQ(encode_ack(big, 0, over), 0u);
  over = ack;
  over.stream_count = kMaxAckStreams + 1;
  EXPECT_EQ(encode_ack(big, 0, over), 0u);
  EXPECT_TRUE(untouched(big));
}

TEST(WireEncode, NakAndProbeTooSmall) {
  for (size_t size = 0; size < 28; ++size) {
    Bytes buf(size, 0xAA);
    EXPECT_EQ(encode_nak(buf, 0, Nak{}), 0u);
    EXPECT_TRUE(untouched(buf));
  }
  for (size_t size = 0; size < 24; ++size) {
    Bytes buf(size, 0xAA);
    EXPECT_EQ(encode_probe(buf, 0, PacketType::Probe, Probe{}), 0u);
    EXPECT_EQ(encode_probe(buf, 0, PacketType::ProbeReply, Probe{}), 0u);
    EXPECT_TRUE(untouched(buf));
  }
  Bytes buf(64, 0xAA);
  for (PacketType t : {PacketType::Data, PacketType::Ack, PacketType::Nak}) {
    EXPECT_EQ(encode_probe(buf, 0, t, Probe{}), 0u);
  }
  EXPECT_TRUE(untouched(buf));
}

TEST(WireEncode, ReservedBytesWrittenAsZero) {
  // Buffers start as 0xAA; the golden tests check exact images, this checks
  // the reserved fields of the largest packets.
  const Bytes data = encode_case(data_case(Opcode::ReadRequest, true, 0));
  // The encoders leave the security byte, epochs and packet number zero
  // for stamp_common().
  for (size_t i : {2, 8, 11, 12, 15, 16, 19, 80, 81, 82, 83}) EXPECT_EQ(data[i], 0) << i;
  const Bytes ack = make_ack(0, full_ack(true, 1));
  for (size_t i : {2, 22, 23, 32, 33, 34, 35}) EXPECT_EQ(ack[i], 0) << i;
  const Bytes probe = make_probe(0, PacketType::Probe, {kMax32, kMax64});
  for (size_t i = 24; i < 28; ++i) EXPECT_EQ(probe[i], 0) << i;
}

// ---------------------------------------------------------------------------
// PathSack window arithmetic.

TEST(PathSack, WindowEdges) {
  PathSack s;
  s.highest_seq = 1000;
  EXPECT_FALSE(s.covers(1000));
  s.mark(1000);
  EXPECT_TRUE(s.covers(1000));
  EXPECT_EQ(s.bits[0], 1u);
  s.mark(1000 - 255);  // last bit of the window
  EXPECT_TRUE(s.covers(1000 - 255));
  EXPECT_EQ(s.bits[3], uint64_t{1} << 63);
  const auto before = s.bits;
  s.mark(1000 - 256);  // just outside
  s.mark(1001);        // ahead of highest_seq: distance wraps to 2^32 - 1
  s.mark(0);
  EXPECT_EQ(s.bits, before);
  EXPECT_FALSE(s.covers(1000 - 256));
  EXPECT_FALSE(s.covers(1001));
  EXPECT_FALSE(s.covers(0));
  EXPECT_FALSE(s.covers(999));
  s.mark(1000 - 63);
  s.mark(1000 - 64);
  EXPECT_TRUE(s.covers(1000 - 63));
  EXPECT_TRUE(s.covers(1000 - 64));
  EXPECT_EQ(s.bits[0], 1u | (uint64_t{1} << 63));
  EXPECT_EQ(s.bits[1], 1u);
  for (uint32_t d = 0; d < kSackBits; ++d) {
    const bool want = d == 0 || d == 63 || d == 64 || d == 255;
    EXPECT_EQ(s.covers(1000 - d), want) << d;
  }
}

TEST(PathSack, WrapAround) {
  PathSack s;
  s.highest_seq = 5;    // the window is 0xFFFFFF06 .. 5
  s.mark(0xFFFFFFFEu);  // distance 7
  s.mark(0xFFFFFF06u);  // distance 255
  s.mark(0xFFFFFF05u);  // distance 256: outside
  s.mark(0);
  EXPECT_TRUE(s.covers(0xFFFFFFFEu));
  EXPECT_TRUE(s.covers(0xFFFFFF06u));
  EXPECT_FALSE(s.covers(0xFFFFFF05u));
  EXPECT_TRUE(s.covers(0));
  EXPECT_FALSE(s.covers(6));
  EXPECT_EQ(s.bits[0], (uint64_t{1} << 7) | (uint64_t{1} << 5));
  EXPECT_EQ(s.bits[3], uint64_t{1} << 63);

  PathSack top;
  top.highest_seq = kMax32;
  top.mark(kMax32);
  top.mark(kMax32 - 255);
  top.mark(0);  // one past highest: wraps, out of window
  EXPECT_TRUE(top.covers(kMax32));
  EXPECT_TRUE(top.covers(kMax32 - 255));
  EXPECT_FALSE(top.covers(0));
  EXPECT_FALSE(top.covers(kMax32 - 256));

  PathSack zero;
  zero.highest_seq = 0;
  zero.mark(0);
  zero.mark(0xFFFFFF01u);  // distance 255
  zero.mark(0xFFFFFF00u);  // distance 256
  EXPECT_TRUE(zero.covers(0xFFFFFF01u));
  EXPECT_FALSE(zero.covers(0xFFFFFF00u));
  EXPECT_EQ(zero.bits[0], 1u);
  EXPECT_EQ(zero.bits[3], uint64_t{1} << 63);
}

TEST(PathSack, SurvivesAckRoundTrip) {
  Ack ack;
  ack.path_count = 2;
  ack.paths[0].path_id = 1;
  ack.paths[0].highest_seq = 3;
  for (uint32_t seq = 0xFFFFFFF0u; seq != 4; ++seq) {
    if (seq % 3 != 0) ack.paths[0].mark(seq);
  }
  ack.paths[1].path_id = 2;
  ack.paths[1].highest_seq = 700;
  for (uint32_t seq = 445; seq <= 700; ++seq) ack.paths[1].mark(seq);
  Packet p;
  ASSERT_EQ(decode_all(make_ack(0, ack), p), DecodeStatus::Ok);
  for (uint32_t seq = 0xFFFFFF00u; seq != 10; ++seq) {
    const bool in_range = seq >= 0xFFFFFFF0u || seq <= 3;
    EXPECT_EQ(p.ack.paths[0].covers(seq), in_range && seq % 3 != 0) << seq;
  }
  for (const auto w : p.ack.paths[1].bits) EXPECT_EQ(w, kMax64);
  EXPECT_FALSE(p.ack.paths[1].covers(444));
  EXPECT_FALSE(p.ack.paths[1].covers(701));
}

}  // namespace
}  // namespace metaroce::wire
