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

extern "C" {
#include "mroce_logic.h"
}

namespace {

constexpr size_t kHeaders = MROCE_COMMON_HDR_LEN + MROCE_UD_HDR_LEN;

mroce_ud_hdr example_header() {
  mroce_ud_hdr h{};
  h.home_port = 0x12b4;  // 4788
  h.dst_qpn = 0x000001;
  h.src_qpn = 0x0a0b0c;
  h.qkey = 0x80010000;
  h.imm = 0x11223344;
  h.flags = MROCE_UD_FLAG_IMM;
  return h;
}

TEST(UdWire, ConstantsAgreeWithTheUserSpaceWireFormat) {
  EXPECT_EQ(MROCE_WIRE_VERSION, metaroce::wire::kVersion);
  EXPECT_EQ(MROCE_COMMON_HDR_LEN, sizeof(metaroce::wire::CommonHeaderWire));
  EXPECT_EQ(MROCE_GSI_DATAGRAM_LEN, 284);
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
  ASSERT_EQ(mroce_ud_encode(out, sizeof out, &h, payload, sizeof payload), 31);
  const std::vector<uint8_t> want = {
      0x01, 0x06, 0x00, 0x00, 0x12, 0xb4, 0x00, 0x00,  // common header
      0x00, 0x00, 0x00, 0x01, 0x00, 0x0a, 0x0b, 0x0c,  // dst_qpn, src_qpn
      0x80, 0x01, 0x00, 0x00, 0x11, 0x22, 0x33, 0x44,  // qkey, imm
      0x01, 0x00, 0x00, 0x00, 0xde, 0xad, 0xbe};       // flags, reserved, payload
  EXPECT_EQ(std::vector<uint8_t>(out, out + 31), want);
}

TEST(UdWire, RoundTripsAMad) {
  mroce_ud_hdr h = example_header();
  h.flags = 0;
  uint8_t mad[MROCE_MAD_SIZE];
  for (size_t i = 0; i < sizeof mad; i++) mad[i] = static_cast<uint8_t>(i * 7);
  uint8_t out[MROCE_GSI_DATAGRAM_LEN];
  ASSERT_EQ(mroce_ud_encode(out, sizeof out, &h, mad, sizeof mad), MROCE_GSI_DATAGRAM_LEN);
  mroce_ud_hdr got{};
  size_t off = 0;
  ASSERT_EQ(mroce_ud_decode(out, sizeof out, &got, &off), MROCE_UD_OK);
  EXPECT_EQ(off, kHeaders);
  EXPECT_EQ(got.home_port, h.home_port);
  EXPECT_EQ(got.dst_qpn, h.dst_qpn);
  EXPECT_EQ(got.src_qpn, h.src_qpn);
  EXPECT_EQ(got.qkey, h.qkey);
  EXPECT_EQ(got.flags, 0);
  EXPECT_EQ(got.imm, 0u);
  EXPECT_EQ(std::memcmp(out + off, mad, sizeof mad), 0);
  EXPECT_EQ(mroce_gsi_check(&got, sizeof out - off), MROCE_UD_OK);
}

TEST(UdWire, ImmediateTravelsOnlyWithItsFlag) {
  mroce_ud_hdr h = example_header();
  h.flags = 0;
  uint8_t out[kHeaders];
  ASSERT_EQ(mroce_ud_encode(out, sizeof out, &h, nullptr, 0), static_cast<int>(kHeaders));
  EXPECT_EQ(get_unaligned_be32(out + 20), 0u) << "imm is sent as 0 without the flag";
  out[20] = 0x55;  // a sender that put something there anyway
  mroce_ud_hdr got{};
  size_t off = 0;
  ASSERT_EQ(mroce_ud_decode(out, sizeof out, &got, &off), MROCE_UD_OK);
  EXPECT_EQ(got.imm, 0u);
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
  EXPECT_EQ(mroce_ud_encode(out, sizeof out - 1, &h, mad, sizeof mad), -ENOSPC);
  EXPECT_EQ(mroce_ud_encode(out, kHeaders - 1, &h, nullptr, 0), -ENOSPC);
}

// Each datagram in a heap block of exactly its length, so that a read past
// the end is caught by the sanitizer build.
mroce_ud_verdict decode_exact(const std::vector<uint8_t>& bytes) {
  std::unique_ptr<uint8_t[]> copy(new uint8_t[bytes.size() ? bytes.size() : 1]);
  if (!bytes.empty()) std::memcpy(copy.get(), bytes.data(), bytes.size());
  mroce_ud_hdr h{};
  size_t off = 0;
  return mroce_ud_decode(copy.get(), bytes.size(), &h, &off);
}

std::vector<uint8_t> good_datagram() {
  const mroce_ud_hdr h = example_header();
  std::vector<uint8_t> out(MROCE_GSI_DATAGRAM_LEN);
  const uint8_t mad[MROCE_MAD_SIZE] = {};
  EXPECT_EQ(mroce_ud_encode(out.data(), out.size(), &h, mad, sizeof mad), MROCE_GSI_DATAGRAM_LEN);
  return out;
}

TEST(UdWire, EveryShortDatagramIsTruncated) {
  const std::vector<uint8_t> good = good_datagram();
  for (size_t len = 0; len < kHeaders; len++)
    EXPECT_EQ(decode_exact({good.begin(), good.begin() + static_cast<long>(len)}), MROCE_UD_TRUNCATED) << len;
  EXPECT_EQ(decode_exact({good.begin(), good.begin() + kHeaders}), MROCE_UD_OK);
}

TEST(UdWire, EachBrokenRuleHasItsVerdict) {
  struct Case {
    size_t offset;
    uint8_t value;
    mroce_ud_verdict verdict;
  };
  const Case cases[] = {
      {0, 2, MROCE_UD_BAD_VERSION}, {0, 0, MROCE_UD_BAD_VERSION},  // version
      {1, 1, MROCE_UD_BAD_TYPE},    {1, 7, MROCE_UD_BAD_TYPE},     // a data packet, an unknown type
      {3, 1, MROCE_UD_BAD_PATH},    {2, 0x80, MROCE_UD_BAD_PATH},  // path_id
      {24, 0x02, MROCE_UD_BAD_FLAGS}, {24, 0x81, MROCE_UD_BAD_FLAGS},
      {8, 0x01, MROCE_UD_BAD_QPN},  {12, 0xff, MROCE_UD_BAD_QPN},  // 25-bit QP numbers
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> d = good_datagram();
    d[c.offset] = c.value;
    EXPECT_EQ(decode_exact(d), c.verdict) << "byte " << c.offset << " = " << int(c.value);
  }
}

TEST(UdWire, ReservedBytesAreIgnored) {
  std::vector<uint8_t> d = good_datagram();
  d[6] = d[7] = 0xff;               // common header reserved
  d[25] = d[26] = d[27] = 0xff;     // UD header reserved
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
