// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Unit tests of the per-path receive window (ReceiveScoreboard) and the
// rocev2 profile's in-order receiver (InOrderReceiver).
#include "receive_scoreboard.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <vector>

namespace metaroce::transport {
namespace {

using Arrival = ReceiveScoreboard::Arrival;
constexpr uint32_t kBits = wire::kSackBits;
static_assert(kBits == 256);

Arrival rec(ReceiveScoreboard& sb, uint32_t seq) {
  bool gap = true;
  return sb.record(seq, gap);
}

Arrival rec(ReceiveScoreboard& sb, uint32_t seq, bool& gap) { return sb.record(seq, gap); }

// ---------------------------------------------------------------------------
// ReceiveScoreboard

TEST(ReceiveScoreboard, EmptyInitially) {
  ReceiveScoreboard sb;
  EXPECT_TRUE(sb.empty());
  EXPECT_EQ(sb.ce_count(), 0u);
  for (uint32_t s : {0u, 1u, 255u, 0xFFFFFFFFu}) EXPECT_FALSE(sb.received(s)) << s;
}

TEST(ReceiveScoreboard, FirstArrivalAtZero) {
  ReceiveScoreboard sb;
  bool gap = true;
  EXPECT_EQ(rec(sb, 0, gap), Arrival::New);
  EXPECT_FALSE(gap);
  EXPECT_FALSE(sb.empty());
  EXPECT_EQ(sb.highest(), 0u);
  EXPECT_TRUE(sb.received(0));
  EXPECT_FALSE(sb.received(1));
  EXPECT_FALSE(sb.received(0xFFFFFFFFu));
}

TEST(ReceiveScoreboard, FirstArrivalPastZeroIsAGap) {
  ReceiveScoreboard sb;
  bool gap = false;
  EXPECT_EQ(rec(sb, 5, gap), Arrival::New);
  EXPECT_TRUE(gap) << "0..4 are missing";
  EXPECT_EQ(sb.highest(), 5u);
  EXPECT_TRUE(sb.received(5));
  for (uint32_t s = 0; s < 5; ++s) EXPECT_FALSE(sb.received(s)) << s;
}

TEST(ReceiveScoreboard, InOrderRun) {
  ReceiveScoreboard sb;
  for (uint32_t s = 0; s < 1000; ++s) {
    bool gap = true;
    ASSERT_EQ(rec(sb, s, gap), Arrival::New) << s;
    ASSERT_FALSE(gap) << s;
    ASSERT_EQ(sb.highest(), s);
  }
  for (uint32_t s = 1000 - kBits; s < 1000; ++s) EXPECT_TRUE(sb.received(s)) << s;
  EXPECT_FALSE(sb.received(1000 - kBits - 1)) << "outside the window";
  EXPECT_FALSE(sb.received(1000));
}

TEST(ReceiveScoreboard, GapSetsFlag) {
  ReceiveScoreboard sb;
  bool gap = true;
  rec(sb, 0, gap);
  EXPECT_EQ(rec(sb, 1, gap), Arrival::New);
  EXPECT_FALSE(gap);
  EXPECT_EQ(rec(sb, 3, gap), Arrival::New);
  EXPECT_TRUE(gap) << "2 was skipped";
  EXPECT_FALSE(sb.received(2));
  // Filling the hole is not a jump past anything.
  EXPECT_EQ(rec(sb, 2, gap), Arrival::New);
  EXPECT_FALSE(gap);
  EXPECT_TRUE(sb.received(2));
  EXPECT_EQ(sb.highest(), 3u);
  EXPECT_EQ(rec(sb, 4, gap), Arrival::New);
  EXPECT_FALSE(gap);
  EXPECT_EQ(rec(sb, 10, gap), Arrival::New);
  EXPECT_TRUE(gap);
  for (uint32_t s = 5; s < 10; ++s) EXPECT_FALSE(sb.received(s)) << s;
}

TEST(ReceiveScoreboard, Duplicates) {
  ReceiveScoreboard sb;
  for (uint32_t s = 0; s < 10; ++s) rec(sb, s);
  rec(sb, 20);
  bool gap = true;
  EXPECT_EQ(rec(sb, 20, gap), Arrival::Duplicate);
  EXPECT_FALSE(gap);
  EXPECT_EQ(rec(sb, 3, gap), Arrival::Duplicate);
  EXPECT_FALSE(gap);
  EXPECT_EQ(rec(sb, 0, gap), Arrival::Duplicate);
  EXPECT_EQ(sb.highest(), 20u);
  EXPECT_EQ(rec(sb, 15, gap), Arrival::New);
  EXPECT_EQ(rec(sb, 15, gap), Arrival::Duplicate);
  EXPECT_FALSE(sb.received(14));
}

TEST(ReceiveScoreboard, TooOldBelowTheWindow) {
  ReceiveScoreboard sb;
  rec(sb, 1000);
  // The window holds highest-0 .. highest-255.
  EXPECT_EQ(rec(sb, 1000 - (kBits - 1)), Arrival::New);
  EXPECT_TRUE(sb.received(1000 - (kBits - 1)));
  EXPECT_EQ(rec(sb, 1000 - (kBits - 1)), Arrival::Duplicate);
  EXPECT_EQ(rec(sb, 1000 - kBits), Arrival::TooOld);
  EXPECT_FALSE(sb.received(1000 - kBits));
  EXPECT_EQ(rec(sb, 1000 - kBits - 1), Arrival::TooOld);
  EXPECT_EQ(rec(sb, 0), Arrival::TooOld);
  EXPECT_EQ(sb.highest(), 1000u);
}

// Reference model over unwrapped 64-bit sequence numbers; the scoreboard sees
// them truncated to 32 bits, so a base near 2^32 exercises wrap-around.
void run_random_against_reference(uint32_t base, uint32_t seed) {
  std::mt19937 rng(seed);
  ReceiveScoreboard sb;
  std::set<int64_t> seen;  // unwrapped offsets from base
  int64_t highest = 0;
  auto seq_of = [&](int64_t v) { return static_cast<uint32_t>(base + static_cast<uint64_t>(v)); };

  bool gap = false;
  ASSERT_EQ(sb.record(seq_of(0), gap), Arrival::New);
  EXPECT_EQ(gap, seq_of(0) != 0);
  seen.insert(0);

  for (int i = 0; i < 5000; ++i) {
    const int kind = static_cast<int>(rng() % 10);
    int64_t v;
    if (kind < 5) v = highest + 1;
    else if (kind < 7) v = highest + 2 + static_cast<int64_t>(rng() % 9);
    else v = highest - static_cast<int64_t>(rng() % 300);
    if (v < 0) v = highest + 1;

    Arrival want;
    bool want_gap = false;
    if (v > highest) {
      want = Arrival::New;
      want_gap = v > highest + 1;
    } else if (highest - v >= kBits) {
      want = Arrival::TooOld;
    } else if (seen.count(v)) {
      want = Arrival::Duplicate;
    } else {
      want = Arrival::New;
    }

    bool got_gap = !want_gap;
    ASSERT_EQ(sb.record(seq_of(v), got_gap), want) << "i=" << i << " v=" << v;
    ASSERT_EQ(got_gap, want_gap) << "i=" << i << " v=" << v;
    if (want == Arrival::New) seen.insert(v);
    if (v > highest) highest = v;
    ASSERT_EQ(sb.highest(), seq_of(highest));

    wire::PathSack block;
    sb.fill(3, block);
    ASSERT_EQ(block.highest_seq, seq_of(highest));
    for (int64_t s = highest - 300; s <= highest + 5; ++s) {
      const bool want_rx = s >= 0 && s <= highest && highest - s < kBits && seen.count(s) != 0;
      ASSERT_EQ(sb.received(seq_of(s)), want_rx) << "i=" << i << " s=" << s;
      ASSERT_EQ(block.covers(seq_of(s)), want_rx) << "i=" << i << " s=" << s;
    }
  }
}

TEST(ReceiveScoreboard, RandomArrivalsMatchReferenceSet) {
  run_random_against_reference(0, 12345);
  run_random_against_reference(0, 777);
}

TEST(ReceiveScoreboard, RandomArrivalsAcrossUint32Wrap) {
  // Starts ~2000 below 2^32 and runs several thousand past it.
  run_random_against_reference(0xFFFFF830u, 4242);
}

TEST(ReceiveScoreboard, FillReportsPathAndCe) {
  ReceiveScoreboard sb;
  rec(sb, 7);
  rec(sb, 9);
  for (int i = 0; i < 5; ++i) sb.count_ce();
  wire::PathSack block;
  block.bits.fill(~uint64_t{0});  // fill must overwrite stale content
  sb.fill(11, block);
  EXPECT_EQ(block.path_id, 11u);
  EXPECT_EQ(block.ce_count, 5u);
  EXPECT_EQ(block.highest_seq, 9u);
  EXPECT_TRUE(block.covers(9));
  EXPECT_FALSE(block.covers(8));
  EXPECT_TRUE(block.covers(7));
  EXPECT_FALSE(block.covers(6));
  EXPECT_FALSE(block.covers(10));
}

// Pattern below an old highest, then one arrival `by` above it.
void check_shift(uint32_t by) {
  SCOPED_TRACE(by);
  constexpr uint32_t kOld = 1000;
  ReceiveScoreboard sb;
  std::set<uint32_t> seen;
  // Every seq in the window below kOld whose index has a bit pattern that
  // differs across words: s where (s * 37) % 5 != 0, plus kOld itself.
  for (uint32_t s = kOld - (kBits - 1); s < kOld; ++s) {
    if ((s * 37) % 5 != 0) {
      rec(sb, s);
      seen.insert(s);
    }
  }
  rec(sb, kOld);
  seen.insert(kOld);

  const uint32_t now = kOld + by;
  bool gap = false;
  ASSERT_EQ(rec(sb, now, gap), Arrival::New);
  EXPECT_EQ(gap, by > 1);
  seen.insert(now);
  EXPECT_EQ(sb.highest(), now);

  wire::PathSack block;
  sb.fill(0, block);
  for (uint32_t s = now - 300; s != now + 6; ++s) {
    const bool want = seen.count(s) != 0 && now - s < kBits;
    ASSERT_EQ(sb.received(s), want) << "seq " << s;
    ASSERT_EQ(block.covers(s), want) << "seq " << s;
  }
}

TEST(ReceiveScoreboard, ShiftByAssortedDistances) {
  for (uint32_t by : {1u, 2u, 63u, 64u, 65u, 127u, 128u, 129u, 192u, 255u, 256u, 257u, 1000u}) check_shift(by);
}

TEST(ReceiveScoreboard, ShiftExactWordMultiplesKeepBitsAligned) {
  // 64 and 128 move whole words; check a few explicit positions.
  for (uint32_t by : {64u, 128u}) {
    ReceiveScoreboard sb;
    rec(sb, 100);
    rec(sb, 98);
    rec(sb, 37);  // distance 63 from 100
    rec(sb, 100 + by);
    EXPECT_TRUE(sb.received(100)) << by;
    EXPECT_FALSE(sb.received(99)) << by;
    EXPECT_TRUE(sb.received(98)) << by;
    EXPECT_TRUE(sb.received(37)) << by;
    EXPECT_FALSE(sb.received(36)) << by;
    EXPECT_FALSE(sb.received(38)) << by;
    EXPECT_FALSE(sb.received(100 + by - 1)) << by;
  }
}

TEST(ReceiveScoreboard, Shift255KeepsOnlyTheOldHighest) {
  ReceiveScoreboard sb;
  for (uint32_t s = 0; s <= 300; ++s) rec(sb, s);
  rec(sb, 300 + 255);
  EXPECT_TRUE(sb.received(300)) << "old highest is now bit 255, the last one";
  EXPECT_FALSE(sb.received(299));
  for (uint32_t s = 301; s < 555; ++s) ASSERT_FALSE(sb.received(s)) << s;
  EXPECT_TRUE(sb.received(555));
  EXPECT_EQ(rec(sb, 299), Arrival::TooOld);
  EXPECT_EQ(rec(sb, 300), Arrival::Duplicate);
}

TEST(ReceiveScoreboard, Shift256AndBeyondClearsEverything) {
  for (uint32_t by : {256u, 257u, 5000u, 0x7FFFFFFFu}) {
    ReceiveScoreboard sb;
    for (uint32_t s = 0; s <= 300; ++s) rec(sb, s);
    bool gap = false;
    ASSERT_EQ(rec(sb, 300 + by, gap), Arrival::New) << by;
    EXPECT_TRUE(gap);
    EXPECT_EQ(sb.highest(), 300 + by);
    wire::PathSack block;
    sb.fill(0, block);
    EXPECT_EQ(block.bits[0], 1u) << by;
    EXPECT_EQ(block.bits[1], 0u) << by;
    EXPECT_EQ(block.bits[2], 0u) << by;
    EXPECT_EQ(block.bits[3], 0u) << by;
    for (uint32_t d = 1; d < kBits; ++d) ASSERT_FALSE(sb.received(300 + by - d)) << by << " " << d;
    EXPECT_EQ(rec(sb, 300), Arrival::TooOld) << by;
  }
}

TEST(ReceiveScoreboard, SequenceWrapAround) {
  ReceiveScoreboard sb;
  bool gap = true;
  for (uint32_t s = 0xFFFFFFF0u; s != 3; ++s) {
    ASSERT_EQ(rec(sb, s, gap), Arrival::New) << s;
    if (s != 0xFFFFFFF0u) {
      ASSERT_FALSE(gap) << "0 follows 0xFFFFFFFF without a gap; seq " << s;
    }
  }
  EXPECT_EQ(sb.highest(), 2u);
  for (uint32_t s = 0xFFFFFFF0u; s != 3; ++s) EXPECT_TRUE(sb.received(s)) << s;
  EXPECT_FALSE(sb.received(0xFFFFFFEFu));
  EXPECT_FALSE(sb.received(3));
  EXPECT_EQ(rec(sb, 0xFFFFFFFEu), Arrival::Duplicate);
  EXPECT_EQ(rec(sb, 0xFFFFFFEFu), Arrival::New) << "19 below highest, inside the window";

  wire::PathSack block;
  sb.fill(0, block);
  EXPECT_TRUE(block.covers(0xFFFFFFF5u));
  EXPECT_TRUE(block.covers(1));
  EXPECT_FALSE(block.covers(3));

  // A jump across the wrap skips 0xFFFFFFFF and 0.
  ReceiveScoreboard sb2;
  rec(sb2, 0xFFFFFFFEu);
  EXPECT_EQ(rec(sb2, 1, gap), Arrival::New);
  EXPECT_TRUE(gap);
  EXPECT_FALSE(sb2.received(0xFFFFFFFFu));
  EXPECT_FALSE(sb2.received(0));
  EXPECT_TRUE(sb2.received(0xFFFFFFFEu));

  // Too old across the wrap: 316 below highest 300.
  ReceiveScoreboard sb3;
  rec(sb3, 300);
  EXPECT_EQ(rec(sb3, 0xFFFFFFF0u), Arrival::TooOld);
  EXPECT_EQ(rec(sb3, 0xFFFFFFFFu), Arrival::TooOld);  // 301 below
  EXPECT_EQ(rec(sb3, 300 - 255), Arrival::New);
}

TEST(ReceiveScoreboard, CeCounting) {
  ReceiveScoreboard sb;
  for (int i = 0; i < 3; ++i) sb.count_ce();
  EXPECT_EQ(sb.ce_count(), 3u);
  rec(sb, 0);
  rec(sb, 1);
  EXPECT_EQ(sb.ce_count(), 3u) << "recording does not count CE";
  sb.count_ce();
  EXPECT_EQ(sb.ce_count(), 4u);
  wire::PathSack block;
  sb.fill(2, block);
  EXPECT_EQ(block.ce_count, 4u);
}

// ---------------------------------------------------------------------------
// InOrderReceiver

using InOrder = InOrderReceiver::Arrival;

TEST(InOrderReceiver, Initially) {
  InOrderReceiver r;
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.expected(), 0u);
  EXPECT_FALSE(r.take_nak_due());
}

TEST(InOrderReceiver, OnlyExpectedAccepted) {
  InOrderReceiver r;
  EXPECT_EQ(r.record(0), InOrder::Expected);
  EXPECT_FALSE(r.empty());
  EXPECT_EQ(r.expected(), 1u);
  EXPECT_EQ(r.record(2), InOrder::OutOfOrder);
  EXPECT_EQ(r.expected(), 1u) << "out-of-order arrivals are dropped, not buffered";
  EXPECT_EQ(r.record(3), InOrder::OutOfOrder);
  EXPECT_EQ(r.record(1), InOrder::Expected);
  EXPECT_EQ(r.expected(), 2u);
  EXPECT_EQ(r.record(2), InOrder::Expected) << "2 was dropped earlier and must be accepted now";
  EXPECT_EQ(r.expected(), 3u);
  for (uint32_t s = 3; s < 500; ++s) ASSERT_EQ(r.record(s), InOrder::Expected) << s;
  EXPECT_EQ(r.expected(), 500u);
}

TEST(InOrderReceiver, Duplicates) {
  InOrderReceiver r;
  for (uint32_t s = 0; s < 5; ++s) r.record(s);
  EXPECT_EQ(r.record(4), InOrder::Duplicate);
  EXPECT_EQ(r.record(3), InOrder::Duplicate);
  EXPECT_EQ(r.record(0), InOrder::Duplicate);
  EXPECT_EQ(r.expected(), 5u);
  EXPECT_FALSE(r.take_nak_due()) << "duplicates are not a gap";
}

TEST(InOrderReceiver, NakDueOncePerGap) {
  InOrderReceiver r;
  r.record(0);
  r.record(1);
  EXPECT_FALSE(r.take_nak_due());

  EXPECT_EQ(r.record(3), InOrder::OutOfOrder);  // gap at 2
  EXPECT_TRUE(r.take_nak_due());
  EXPECT_FALSE(r.take_nak_due());
  EXPECT_EQ(r.record(4), InOrder::OutOfOrder);
  EXPECT_EQ(r.record(5), InOrder::OutOfOrder);
  EXPECT_FALSE(r.take_nak_due()) << "same gap: no second NAK";

  EXPECT_EQ(r.record(2), InOrder::Expected);  // gap filled
  EXPECT_FALSE(r.take_nak_due());
  EXPECT_EQ(r.record(3), InOrder::Expected);
  EXPECT_EQ(r.record(5), InOrder::OutOfOrder);  // new gap at 4
  EXPECT_TRUE(r.take_nak_due());
  EXPECT_FALSE(r.take_nak_due());
}

TEST(InOrderReceiver, SeveralOutOfOrderBeforeTakeGiveOneNak) {
  InOrderReceiver r;
  r.record(0);
  r.record(5);
  r.record(6);
  r.record(9);
  EXPECT_TRUE(r.take_nak_due());
  EXPECT_FALSE(r.take_nak_due());
}

TEST(InOrderReceiver, FillIsCumulative) {
  for (uint32_t n : {1u, 10u, 255u, 256u, 300u, 1000u}) {
    InOrderReceiver r;
    for (uint32_t s = 0; s < n; ++s) r.record(s);
    r.record(n + 3);  // out of order: must not be reported
    r.count_ce();
    r.count_ce();
    wire::PathSack block;
    r.fill(4, block);
    EXPECT_EQ(block.path_id, 4u);
    EXPECT_EQ(block.ce_count, 2u);
    const uint32_t lowest = n > kBits ? n - kBits : 0;
    for (uint32_t s = lowest; s < n; ++s) ASSERT_TRUE(block.covers(s)) << n << " " << s;
    for (uint32_t s = n; s < n + 6; ++s) ASSERT_FALSE(block.covers(s)) << n << " " << s;
  }
}

}  // namespace
}  // namespace metaroce::transport
