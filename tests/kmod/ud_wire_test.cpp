// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// kmod/ud_wire.c against the mock kernel: the UD datagram's exact bytes,
// round trips, and every rule a hostile datagram can break.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <metaroce/wire.h>

#include "crc32c.h"
#include "packet_protection.h"

extern "C" {
#include "mroce_logic.h"
}

namespace {

namespace wire = metaroce::wire;

constexpr size_t kHeaders = MROCE_COMMON_HDR_LEN + MROCE_UD_HDR_LEN;
constexpr size_t kEmpty = kHeaders + MROCE_CRC_LEN;  // a datagram with no payload

mroce_ud_hdr example_header() {
  mroce_ud_hdr h{};
  h.home_port = 0x12b4;  // 4788
  h.src_epoch = 0x01020304;
  h.dst_qpn = 0x000001;
  h.src_qpn = 0x0a0b0c;
  h.qkey = 0x80010000;
  h.imm = 0x11223344;
  h.flags = MROCE_UD_FLAG_IMM;
  return h;
}

TEST(UdWire, ConstantsAgreeWithTheUserSpaceWireFormat) {
  EXPECT_EQ(MROCE_WIRE_VERSION, wire::kVersion);
  EXPECT_EQ(MROCE_PACKET_UD_SEND, static_cast<int>(wire::PacketType::UdSend));
  EXPECT_EQ(MROCE_SECURITY_INTEGRITY, static_cast<int>(wire::Security::Integrity));
  EXPECT_EQ(MROCE_COMMON_HDR_LEN, sizeof(wire::CommonHeaderWire));
  EXPECT_EQ(MROCE_COMMON_HDR_LEN + MROCE_UD_HDR_LEN, wire::kUdHeaderBytes);
  EXPECT_EQ(MROCE_CRC_LEN, wire::kIntegrityTrailerBytes);
  EXPECT_EQ(MROCE_UD_FLAG_IMM, wire::kUdFlagImmediate);
  EXPECT_EQ(MROCE_UD_FLAGS_KNOWN, wire::kUdFlagsMask);
  EXPECT_EQ(MROCE_GSI_DATAGRAM_LEN, 300);
  // The GSI port is neither a home port nor RoCE v2's.
  EXPECT_NE(METAROCE_GSI_PORT_DEFAULT, 4791);
  EXPECT_TRUE(METAROCE_GSI_PORT_DEFAULT < METAROCE_HOME_PORT_BASE ||
              METAROCE_GSI_PORT_DEFAULT > METAROCE_HOME_PORT_BASE + METAROCE_SLOT_MAX);
}

// The example of docs/spec.md, "Kernel GSI traffic".
TEST(UdWire, GoldenBytes) {
  const mroce_ud_hdr h = example_header();
  const uint8_t payload[3] = {0xde, 0xad, 0xbe};
  uint8_t out[64];
  ASSERT_EQ(mroce_ud_encode(out, sizeof out, &h, payload, sizeof payload), 47);
  const std::vector<uint8_t> want = {
      0x02, 0x06, 0x00, 0x00, 0x12, 0xb4, 0x00, 0x00,  // version, type, security, path, home port, heard
      0x01, 0x02, 0x03, 0x04, 0x00, 0x00, 0x00, 0x00,  // src_epoch, dst_epoch
      0x00, 0x00, 0x00, 0x00,                          // packet_number
      0x00, 0x00, 0x00, 0x01, 0x00, 0x0a, 0x0b, 0x0c,  // dst_qpn, src_qpn
      0x80, 0x01, 0x00, 0x00, 0x11, 0x22, 0x33, 0x44,  // qkey, imm
      0x01, 0x00, 0x00, 0x00, 0xde, 0xad, 0xbe,        // flags, reserved, payload
      0x7d, 0x15, 0xcb, 0x65};                         // CRC32C
  EXPECT_EQ(std::vector<uint8_t>(out, out + 47), want);
  EXPECT_EQ(metaroce::transport::crc32c(std::span<const uint8_t>(out, 43)), get_unaligned_be32(out + 43));
}

// What the kernel sends, the provider's UD receive path takes: the user-space
// decoder and integrity check accept it with the same fields.
TEST(UdWire, TheUserSpaceDecoderReadsWhatTheKernelWrites) {
  const mroce_ud_hdr h = example_header();
  uint8_t mad[MROCE_MAD_SIZE];
  for (size_t i = 0; i < sizeof mad; i++) mad[i] = static_cast<uint8_t>(i * 3);
  uint8_t out[MROCE_GSI_DATAGRAM_LEN];
  ASSERT_EQ(mroce_ud_encode(out, sizeof out, &h, mad, sizeof mad), MROCE_GSI_DATAGRAM_LEN);
  ASSERT_TRUE(metaroce::transport::check_integrity(std::span<const uint8_t>(out, sizeof out)));
  wire::Packet p;
  ASSERT_EQ(wire::decode(std::span<const uint8_t>(out, sizeof out - MROCE_CRC_LEN), p), wire::DecodeStatus::Ok);
  EXPECT_EQ(p.common.type, wire::PacketType::UdSend);
  EXPECT_EQ(p.common.security, wire::Security::Integrity);
  EXPECT_EQ(p.common.path_id, 0);
  EXPECT_EQ(p.common.home_port, h.home_port);
  EXPECT_EQ(p.common.src_epoch, h.src_epoch);
  EXPECT_EQ(p.common.dst_epoch, 0u);
  EXPECT_EQ(p.common.packet_number, 0u);
  EXPECT_EQ(p.ud.dst_qpn, h.dst_qpn);
  EXPECT_EQ(p.ud.src_qpn, h.src_qpn);
  EXPECT_EQ(p.ud.qkey, h.qkey);
  EXPECT_TRUE(p.ud.has_imm);
  EXPECT_EQ(p.ud.imm, h.imm);
  ASSERT_EQ(p.payload.size(), sizeof mad);
  EXPECT_EQ(std::memcmp(p.payload.data(), mad, sizeof mad), 0);
}

// And what a provider's UD QP sends to QP1 (a user-space MAD sender), the
// kernel takes.
TEST(UdWire, TheKernelDecoderReadsWhatUserSpaceWrites) {
  std::vector<uint8_t> buf(MROCE_GSI_DATAGRAM_LEN);
  wire::UdHeader uh;
  uh.dst_qpn = MROCE_GSI_QPN;
  uh.src_qpn = 0x1005;
  uh.qkey = MROCE_GSI_QKEY;
  const size_t headers = wire::encode_ud(buf, wire::Origin(0, 4793), uh, MROCE_MAD_SIZE);
  ASSERT_EQ(headers, kHeaders);
  for (size_t i = 0; i < MROCE_MAD_SIZE; i++) buf[headers + i] = static_cast<uint8_t>(i);
  wire::stamp_common(buf, wire::Security::Integrity, 0x0badcafe, 0, 0);
  metaroce::transport::seal_integrity(buf, headers + MROCE_MAD_SIZE);
  mroce_ud_hdr got{};
  size_t off = 0, len = 0;
  ASSERT_EQ(mroce_ud_decode(buf.data(), buf.size(), &got, &off, &len), MROCE_UD_OK);
  EXPECT_EQ(got.home_port, 4793);
  EXPECT_EQ(got.src_epoch, 0x0badcafeu);
  EXPECT_EQ(got.dst_qpn, 1u);
  EXPECT_EQ(got.src_qpn, 0x1005u);
  EXPECT_EQ(got.flags, 0);
  EXPECT_EQ(off, kHeaders);
  EXPECT_EQ(len, static_cast<size_t>(MROCE_MAD_SIZE));
  EXPECT_EQ(mroce_gsi_check(&got, len), MROCE_UD_OK);
}

TEST(UdWire, RoundTripsAMad) {
  mroce_ud_hdr h = example_header();
  h.flags = 0;
  uint8_t mad[MROCE_MAD_SIZE];
  for (size_t i = 0; i < sizeof mad; i++) mad[i] = static_cast<uint8_t>(i * 7);
  uint8_t out[MROCE_GSI_DATAGRAM_LEN];
  ASSERT_EQ(mroce_ud_encode(out, sizeof out, &h, mad, sizeof mad), MROCE_GSI_DATAGRAM_LEN);
  mroce_ud_hdr got{};
  size_t off = 0, len = 0;
  ASSERT_EQ(mroce_ud_decode(out, sizeof out, &got, &off, &len), MROCE_UD_OK);
  EXPECT_EQ(off, kHeaders);
  EXPECT_EQ(len, sizeof mad);
  EXPECT_EQ(got.src_epoch, h.src_epoch);
  EXPECT_EQ(got.home_port, h.home_port);
  EXPECT_EQ(got.dst_qpn, h.dst_qpn);
  EXPECT_EQ(got.src_qpn, h.src_qpn);
  EXPECT_EQ(got.qkey, h.qkey);
  EXPECT_EQ(got.flags, 0);
  EXPECT_EQ(got.imm, 0u);
  EXPECT_EQ(std::memcmp(out + off, mad, sizeof mad), 0);
  EXPECT_EQ(mroce_gsi_check(&got, len), MROCE_UD_OK);
}

// Rewrites the trailer after a test changed the bytes before it.
void reseal(uint8_t* d, size_t len) {
  metaroce::transport::seal_integrity(std::span<uint8_t>(d, len), len - MROCE_CRC_LEN);
}

TEST(UdWire, ImmediateTravelsOnlyWithItsFlag) {
  mroce_ud_hdr h = example_header();
  h.flags = 0;
  uint8_t out[kEmpty];
  ASSERT_EQ(mroce_ud_encode(out, sizeof out, &h, nullptr, 0), static_cast<int>(kEmpty));
  EXPECT_EQ(get_unaligned_be32(out + 32), 0u) << "imm is sent as 0 without the flag";
  out[32] = 0x55;  // a sender that put something there anyway
  reseal(out, sizeof out);
  mroce_ud_hdr got{};
  size_t off = 0, len = 0;
  ASSERT_EQ(mroce_ud_decode(out, sizeof out, &got, &off, &len), MROCE_UD_OK);
  EXPECT_EQ(got.imm, 0u);
  EXPECT_EQ(len, 0u);
}

TEST(UdWire, EncodeRefusesWhatTheWireCannotCarry) {
  uint8_t out[MROCE_GSI_DATAGRAM_LEN];
  uint8_t mad[MROCE_MAD_SIZE] = {};
  mroce_ud_hdr h = example_header();
  h.dst_qpn = 0x1000000;
  EXPECT_EQ(mroce_ud_encode(out, sizeof out, &h, mad, sizeof mad), -EINVAL);
  h = example_header();
  h.src_qpn = 0x1000000;
  EXPECT_EQ(mroce_ud_encode(out, sizeof out, &h, mad, sizeof mad), -EINVAL);
  h = example_header();
  h.flags = 0x80;
  EXPECT_EQ(mroce_ud_encode(out, sizeof out, &h, mad, sizeof mad), -EINVAL);
  h = example_header();
  h.src_epoch = 0;
  EXPECT_EQ(mroce_ud_encode(out, sizeof out, &h, mad, sizeof mad), -EINVAL);
  h = example_header();
  EXPECT_EQ(mroce_ud_encode(out, sizeof out - 1, &h, mad, sizeof mad), -ENOSPC);
  EXPECT_EQ(mroce_ud_encode(out, kEmpty - 1, &h, nullptr, 0), -ENOSPC);
}

// Each datagram in a heap block of exactly its length, so that a read past
// the end is caught by the sanitizer build.
mroce_ud_verdict decode_exact(const std::vector<uint8_t>& bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  mroce_ud_hdr h{};
  size_t off = 0, len = 0;
  return mroce_ud_decode(copy.get(), bytes.size(), &h, &off, &len);
}

std::vector<uint8_t> good_datagram() {
  const mroce_ud_hdr h = example_header();
  std::vector<uint8_t> out(MROCE_GSI_DATAGRAM_LEN);
  const uint8_t mad[MROCE_MAD_SIZE] = {};
  EXPECT_EQ(mroce_ud_encode(out.data(), out.size(), &h, mad, sizeof mad), MROCE_GSI_DATAGRAM_LEN);
  return out;
}

TEST(UdWire, EveryShortDatagramIsTruncated) {
  const mroce_ud_hdr h = example_header();
  std::vector<uint8_t> empty(kEmpty);
  ASSERT_EQ(mroce_ud_encode(empty.data(), empty.size(), &h, nullptr, 0), static_cast<int>(kEmpty));
  for (size_t len = 0; len < kEmpty; len++)
    EXPECT_EQ(decode_exact({empty.begin(), empty.begin() + static_cast<long>(len)}), MROCE_UD_TRUNCATED) << len;
  EXPECT_EQ(decode_exact(empty), MROCE_UD_OK);
}

TEST(UdWire, EachBrokenRuleHasItsVerdict) {
  struct Case {
    size_t offset;
    uint8_t value;
    mroce_ud_verdict verdict;
  };
  const Case cases[] = {
      {0, 1, MROCE_UD_BAD_VERSION}, {0, 0, MROCE_UD_BAD_VERSION},    // v0.1, nonsense
      {1, 1, MROCE_UD_BAD_TYPE},    {1, 7, MROCE_UD_BAD_TYPE},       // a data packet, an unknown type
      {2, 1, MROCE_UD_BAD_SECURITY}, {2, 3, MROCE_UD_BAD_SECURITY},  // authenticate, unknown
      {3, 1, MROCE_UD_BAD_PATH},    {3, 0x80, MROCE_UD_BAD_PATH},    // path_id
      {36, 0x02, MROCE_UD_BAD_FLAGS}, {36, 0x81, MROCE_UD_BAD_FLAGS},
      {20, 0x01, MROCE_UD_BAD_QPN},  {24, 0xff, MROCE_UD_BAD_QPN},   // 25-bit QP numbers
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> d = good_datagram();
    d[c.offset] = c.value;
    reseal(d.data(), d.size());
    EXPECT_EQ(decode_exact(d), c.verdict) << "byte " << c.offset << " = " << int(c.value);
  }
}

// Any flipped bit, in a header, the MAD or the trailer itself.
TEST(UdWire, ACorruptedDatagramFailsItsCrc) {
  for (size_t byte : {4u, 8u, 16u, 28u, 100u, MROCE_GSI_DATAGRAM_LEN - 5u, MROCE_GSI_DATAGRAM_LEN - 1u}) {
    std::vector<uint8_t> d = good_datagram();
    d[byte] ^= 0x10;
    EXPECT_EQ(decode_exact(d), MROCE_UD_BAD_CRC) << "byte " << byte;
  }
}

TEST(UdWire, IgnoredFieldsAreIgnored) {
  std::vector<uint8_t> d = good_datagram();
  d[6] = d[7] = 0xff;               // heard_paths
  for (size_t i = 12; i < 20; i++) d[i] = 0xee;  // dst_epoch, packet_number
  d[37] = d[38] = d[39] = 0xff;     // UD header reserved
  reseal(d.data(), d.size());
  EXPECT_EQ(decode_exact(d), MROCE_UD_OK);
}

TEST(UdWire, GsiAcceptsOnlyOneMadForQp1WithItsQkey) {
  mroce_ud_hdr h = example_header();
  EXPECT_EQ(mroce_gsi_check(&h, MROCE_MAD_SIZE), MROCE_UD_OK);
  EXPECT_EQ(mroce_gsi_check(&h, MROCE_MAD_SIZE - 1), MROCE_UD_BAD_LENGTH);
  EXPECT_EQ(mroce_gsi_check(&h, MROCE_MAD_SIZE + 1), MROCE_UD_BAD_LENGTH);
  EXPECT_EQ(mroce_gsi_check(&h, 0), MROCE_UD_BAD_LENGTH);
  h.qkey = 0x80010001;
  EXPECT_EQ(mroce_gsi_check(&h, MROCE_MAD_SIZE), MROCE_UD_BAD_QKEY);
  h = example_header();
  h.dst_qpn = 0;
  EXPECT_EQ(mroce_gsi_check(&h, MROCE_MAD_SIZE), MROCE_UD_NOT_GSI);
  h.dst_qpn = (1 << 12) | 1;
  EXPECT_EQ(mroce_gsi_check(&h, MROCE_MAD_SIZE), MROCE_UD_NOT_GSI);
}

TEST(UdWire, EveryVerdictHasItsOwnCounterName) {
  std::set<std::string> names;
  for (int v = 0; v < MROCE_UD_VERDICTS; v++) {
    ASSERT_NE(mroce_ud_verdict_names[v], nullptr) << v;
    EXPECT_EQ(std::string(mroce_ud_verdict_names[v]).rfind("gsi_", 0), 0u) << mroce_ud_verdict_names[v];
    names.insert(mroce_ud_verdict_names[v]);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(MROCE_UD_VERDICTS));
}

}  // namespace
