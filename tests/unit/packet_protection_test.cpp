// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The v0.2 trailer (crc32c.h, packet_protection.h) and the per-peer framing
// state (peer_session.h): round trips, every single-bit flip rejected,
// truncation and extension rejected, replays and stale numbers refused.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "byte_pattern.h"
#include "crc32c.h"
#include "metaroce/wire.h"
#include "packet_protection.h"
#include "peer_session.h"

namespace metaroce::transport {
namespace {

using Bytes = std::vector<uint8_t>;

using metaroce::test::byte_pattern;

// A WRITE of `payload_len` bytes as the wire encoders write it, with room
// for the largest trailer behind it.
Bytes write_datagram(size_t payload_len, size_t& length) {
  wire::DataHeader h;
  h.opcode = wire::Opcode::Write;
  h.path_seq = 77;
  h.dst_qpn = 0x1001;
  h.src_qpn = 0x2001;
  h.msn = 5;
  h.msg_length = static_cast<uint32_t>(payload_len);
  h.remote_addr = 0x10000;
  h.rkey = 0xabc00001;
  Bytes out(wire::kDataHeaderBytes + payload_len + wire::kMaxTrailerBytes);
  const size_t header = wire::encode_data(out, {2, wire::kHomePortBase}, h, nullptr, nullptr, nullptr, payload_len);
  const Bytes payload = byte_pattern(payload_len, 9);
  std::memcpy(out.data() + header, payload.data(), payload_len);
  length = header + payload_len;
  wire::stamp_common(out, wire::Security::Integrity, 0x11111111, 0x22222222, 3);
  return out;
}

PairKey test_key(uint8_t fill) {
  PairKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(fill + i);
  return k;
}

// The definition, bit by bit, as the kernel's or any peer's may compute it.
uint32_t crc32c_bitwise(std::span<const uint8_t> data) {
  uint32_t reg = 0xFFFFFFFFu;
  for (const uint8_t byte : data) {
    reg ^= byte;
    for (int k = 0; k < 8; ++k) reg = (reg & 1) ? (reg >> 1) ^ 0x82F63B78u : reg >> 1;
  }
  return ~reg;
}

TEST(Crc32c, StandardCheckValue) {
  const std::string check = "123456789";
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(check.data()), check.size());
  EXPECT_EQ(crc32c(bytes), 0xE3069283u);
  EXPECT_EQ(crc32c({}), 0u);
}

TEST(Crc32c, AgreesWithTheDefinitionAtEveryLengthAndAlignment) {
  const Bytes data = byte_pattern(5000, 3);
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t n = 0; n + offset <= 2100; n += (n < 400 ? 1 : 37))
      ASSERT_EQ(crc32c({data.data() + offset, n}), crc32c_bitwise({data.data() + offset, n}))
          << "offset " << offset << " length " << n;
  EXPECT_EQ(crc32c(data), crc32c_bitwise(data));
}

TEST(IntegrityTrailer, RoundTripAndEverySingleBitFlipRejected) {
  size_t length = 0;
  Bytes d = write_datagram(300, length);
  seal_integrity(d, length);
  d.resize(length + wire::kIntegrityTrailerBytes);
  ASSERT_TRUE(check_integrity(d));
  for (size_t bit = 0; bit < d.size() * 8; ++bit) {
    Bytes flipped = d;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_FALSE(check_integrity(flipped)) << "bit " << bit;
  }
}

TEST(IntegrityTrailer, TruncationAndExtensionRejected) {
  size_t length = 0;
  Bytes d = write_datagram(200, length);
  seal_integrity(d, length);
  d.resize(length + wire::kIntegrityTrailerBytes);
  for (size_t n = 0; n < d.size(); ++n) ASSERT_FALSE(check_integrity({d.data(), n})) << n;
  for (uint8_t extra : {0x00, 0x5a, 0xff}) {
    Bytes longer = d;
    longer.push_back(extra);
    EXPECT_FALSE(check_integrity(longer));
  }
}

class AuthModes : public ::testing::TestWithParam<wire::Security> {};

TEST_P(AuthModes, RoundTripEveryBitFlipWrongNumberAndWrongKey) {
  const wire::Security mode = GetParam();
  size_t length = 0;
  Bytes d = write_datagram(257, length);
  wire::stamp_common(d, mode, 0x11111111, 0x22222222, 3);
  const Bytes plain(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(length));
  TrafficKey tx(test_key(1), 0, 0x11111111, 0x22222222);
  TrafficKey rx(test_key(1), 0, 0x11111111, 0x22222222);
  ASSERT_TRUE(tx.valid());
  ASSERT_TRUE(tx.seal(mode, d, length, 3));
  d.resize(length + wire::kAuthTagBytes);
  // The common header travels in the clear in both modes; encrypt mode
  // hides the rest, authenticate mode leaves it as it was.
  EXPECT_TRUE(std::equal(plain.begin(), plain.begin() + wire::kCommonHeaderBytes, d.begin()));
  const bool body_visible = std::equal(plain.begin(), plain.end(), d.begin());
  EXPECT_EQ(body_visible, mode == wire::Security::Authenticate);

  Bytes out(length);
  ASSERT_TRUE(rx.open(mode, d, 3, out));
  if (mode == wire::Security::Encrypt) {
    EXPECT_EQ(out, plain);
  }

  for (size_t bit = 0; bit < d.size() * 8; ++bit) {
    Bytes flipped = d;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    ASSERT_FALSE(rx.open(mode, flipped, 3, out)) << "bit " << bit;
  }
  EXPECT_FALSE(rx.open(mode, d, 4, out)) << "another packet number is another nonce";
  for (size_t n : {size_t{0}, size_t{10}, length, d.size() - 1})
    EXPECT_FALSE(rx.open(mode, {d.data(), n}, 3, out)) << n;
  TrafficKey other_role(test_key(1), 1, 0x11111111, 0x22222222);
  TrafficKey other_epoch(test_key(1), 0, 0x11111112, 0x22222222);
  TrafficKey other_receiver(test_key(1), 0, 0x11111111, 0);
  TrafficKey other_pair(test_key(2), 0, 0x11111111, 0x22222222);
  EXPECT_FALSE(other_role.open(mode, d, 3, out));
  EXPECT_FALSE(other_epoch.open(mode, d, 3, out));
  EXPECT_FALSE(other_receiver.open(mode, d, 3, out));
  EXPECT_FALSE(other_pair.open(mode, d, 3, out));
}

TEST_P(AuthModes, ADatagramWithACorrectCrcInsteadOfATagIsRefused) {
  const wire::Security mode = GetParam();
  size_t length = 0;
  Bytes d = write_datagram(64, length);
  wire::stamp_common(d, mode, 0x11111111, 0x22222222, 3);
  seal_integrity(d, length);               // a forger without the key can compute this much
  d.resize(length + wire::kAuthTagBytes);  // and pad it to a tag's length
  TrafficKey rx(test_key(1), 0, 0x11111111, 0x22222222);
  Bytes out(length);
  EXPECT_FALSE(rx.open(mode, d, 3, out));
}

INSTANTIATE_TEST_SUITE_P(Modes, AuthModes, ::testing::Values(wire::Security::Authenticate, wire::Security::Encrypt),
                         [](const auto& param_info) { return std::string(wire::to_string(param_info.param)); });

TEST(Hkdf, Rfc5869TestCase1) {
  Bytes ikm(22, 0x0b), salt, info, okm(42);
  for (uint8_t i = 0; i <= 0x0c; ++i) salt.push_back(i);
  for (uint8_t i = 0xf0; i <= 0xf9; ++i) info.push_back(i);
  ASSERT_TRUE(hkdf_sha256(salt, ikm, info, okm));
  const Bytes want = {0x3c, 0xb2, 0x5f, 0x25, 0xfa, 0xac, 0xd5, 0x7a, 0x90, 0x43, 0x4f, 0x64, 0xd0, 0x36,
                      0x2f, 0x2a, 0x2d, 0x2d, 0x0a, 0x90, 0xcf, 0x1a, 0x5a, 0x4c, 0x5d, 0xb0, 0x2d, 0x56,
                      0xec, 0xc4, 0xc5, 0xbf, 0x34, 0x00, 0x72, 0x08, 0xd5, 0xb8, 0x87, 0x18, 0x58, 0x65};
  EXPECT_EQ(okm, want);
}

TEST(ReplayWindow, FreshReplayTooOldTooFar) {
  ReplayWindow w;
  EXPECT_EQ(w.check(1), ReplayWindow::Check::Fresh);
  w.accept(1);
  EXPECT_EQ(w.check(1), ReplayWindow::Check::Replay);
  EXPECT_EQ(w.check(2), ReplayWindow::Check::Fresh);
  w.accept(10);
  for (uint64_t n = 2; n < 10; ++n) EXPECT_EQ(w.check(n), ReplayWindow::Check::Fresh) << n;  // reordered
  w.accept(5);
  EXPECT_EQ(w.check(5), ReplayWindow::Check::Replay);
  w.accept(10 + ReplayWindow::kBits);
  EXPECT_EQ(w.check(10), ReplayWindow::Check::TooOld);
  EXPECT_EQ(w.check(11), ReplayWindow::Check::Fresh);
  EXPECT_EQ(w.check(10 + ReplayWindow::kBits + ReplayWindow::kMaxJump + 1), ReplayWindow::Check::TooFar);
  w.reset();
  EXPECT_EQ(w.check(10), ReplayWindow::Check::Fresh);
}

TEST(ReplayWindow, ExpandsLow32BitsAcrossTheWrap) {
  ReplayWindow w;
  EXPECT_EQ(w.expand(7), 7u);
  const uint64_t near_wrap = (uint64_t{1} << 32) - 3;
  w.accept(near_wrap);
  EXPECT_EQ(w.expand(0xfffffffe), near_wrap + 1);
  EXPECT_EQ(w.expand(2), (uint64_t{1} << 32) + 2);
  w.accept((uint64_t{1} << 32) + 2);
  EXPECT_EQ(w.expand(0xfffffffd), near_wrap);  // a late one from before the wrap
  EXPECT_EQ(w.check(w.expand(0xfffffffd)), ReplayWindow::Check::Replay);
}

TEST(PeerSession, EpochsAdoptRetireAndWaitForSilence) {
  PeerSession s;
  constexpr Time kQuiet = 1000;
  EXPECT_EQ(s.classify(0, 0, kQuiet), PeerSession::EpochVerdict::Stale);  // never a valid epoch
  EXPECT_EQ(s.classify(5, 0, kQuiet), PeerSession::EpochVerdict::New);
  s.adopt(5);
  s.heard(100);
  EXPECT_EQ(s.classify(5, 200, kQuiet), PeerSession::EpochVerdict::Current);
  EXPECT_EQ(s.classify(6, 200, kQuiet), PeerSession::EpochVerdict::Stale) << "the current one still talks";
  EXPECT_EQ(s.classify(6, 100 + kQuiet, kQuiet), PeerSession::EpochVerdict::New);
  s.window(true).accept(40);
  s.adopt(6);
  EXPECT_EQ(s.window(true).check(40), ReplayWindow::Check::Fresh) << "a new incarnation's numbering is new";
  s.heard(5000);
  EXPECT_EQ(s.classify(5, 1'000'000, kQuiet), PeerSession::EpochVerdict::Stale) << "retired";
}

TEST(PeerSession, PacketNumbersRestartWithTheDestinationEpoch) {
  PeerSession s;
  EXPECT_EQ(s.next_packet_number(0), 1u);
  EXPECT_EQ(s.next_packet_number(0), 2u);
  EXPECT_EQ(s.next_packet_number(77), 1u);
  EXPECT_EQ(s.next_packet_number(77), 2u);
}

TEST(PeerSession, KeysOnlyWithAPairKeyAndForTheCurrentEpoch) {
  PeerSession s;
  EXPECT_EQ(s.tx_key(1, 0), nullptr);
  s.set_pair_key(test_key(3), 1);
  s.adopt(9);
  TrafficKey* tx = s.tx_key(1, 9);
  ASSERT_NE(tx, nullptr);
  EXPECT_EQ(tx->sender_epoch(), 1u);
  EXPECT_EQ(s.rx_key(8, 1), nullptr) << "not the peer's current epoch";
  TrafficKey* rx = s.rx_key(9, 1);
  ASSERT_NE(rx, nullptr);
  EXPECT_EQ(rx->sender_epoch(), 9u);
}

}  // namespace
}  // namespace metaroce::transport
