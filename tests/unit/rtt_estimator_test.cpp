// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Unit tests of the RFC 6298-style RTT estimator (rtt_estimator.h).
#include "rtt_estimator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

namespace metaroce::transport {
namespace {

constexpr Time kHuge = Time{1} << 40;

TEST(RttEstimator, InitialValuesBeforeASample) {
  RttEstimator e(1000);
  EXPECT_FALSE(e.has_sample());
  EXPECT_EQ(e.srtt(), 1000u);
  EXPECT_EQ(e.rttvar(), 500u);
  EXPECT_EQ(e.min_rtt(), kNever);
  // RTO = SRTT + 4 * RTTVAR = 1000 + 2000.
  EXPECT_EQ(e.rto(0, kHuge), 3000u);

  RttEstimator odd(1001);
  EXPECT_EQ(odd.srtt(), 1001u);
  EXPECT_EQ(odd.rttvar(), 500u);  // 1001 / 2, truncated
}

TEST(RttEstimator, FirstSampleSetsSrttAndHalfVariance) {
  // RFC 6298 (2.2): SRTT <- R, RTTVAR <- R/2, whatever the initial guess.
  for (Time r : {Time{1}, Time{2}, Time{400}, Time{401}, Time{123'456'789}}) {
    RttEstimator e(50'000);
    e.on_sample(r);
    EXPECT_TRUE(e.has_sample());
    EXPECT_EQ(e.srtt(), r);
    EXPECT_EQ(e.rttvar(), r / 2);
    EXPECT_EQ(e.min_rtt(), r);
    EXPECT_EQ(e.rto(0, kHuge), r + 4 * (r / 2));
  }
}

TEST(RttEstimator, SubsequentSamplesHandComputed) {
  RttEstimator e(10);
  e.on_sample(800);  // srtt 800, rttvar 400
  e.on_sample(1600);
  // RTTVAR uses the old SRTT: |800 - 1600| = 800; (3*400 + 800) / 4 = 500.
  // SRTT = (7*800 + 1600) / 8 = 900.
  EXPECT_EQ(e.rttvar(), 500u);
  EXPECT_EQ(e.srtt(), 900u);
  e.on_sample(100);
  // |900 - 100| = 800; (3*500 + 800) / 4 = 575. (7*900 + 100) / 8 = 800.
  EXPECT_EQ(e.rttvar(), 575u);
  EXPECT_EQ(e.srtt(), 800u);
  EXPECT_EQ(e.rto(0, kHuge), 800u + 4 * 575u);
  e.on_sample(803);
  // |800 - 803| = 3; (3*575 + 3) / 4 = 432 (1728/4). (7*800 + 803) / 8 = 800 (6403/8 = 800.375).
  EXPECT_EQ(e.rttvar(), 432u);
  EXPECT_EQ(e.srtt(), 800u);
}

TEST(RttEstimator, RandomSamplesFollowRfc6298) {
  std::mt19937_64 rng(6298);
  RttEstimator e(100'000);
  // Exact integer rendering of RFC 6298 with alpha = 1/8, beta = 1/4.
  Time srtt = 0, rttvar = 0;
  // Real-valued rendering: integer truncation may only drift it a few ns.
  double srtt_real = 0, rttvar_real = 0;
  bool first = true;
  for (int i = 0; i < 5000; ++i) {
    const Time r = 1000 + rng() % 200'000;
    e.on_sample(r);
    if (first) {
      srtt = r;
      rttvar = r / 2;
      srtt_real = static_cast<double>(r);
      rttvar_real = static_cast<double>(r) / 2;
      first = false;
    } else {
      const Time delta = srtt > r ? srtt - r : r - srtt;
      rttvar = (3 * rttvar + delta) / 4;
      srtt = (7 * srtt + r) / 8;
      rttvar_real = 0.75 * rttvar_real + 0.25 * std::fabs(srtt_real - static_cast<double>(r));
      srtt_real = 0.875 * srtt_real + 0.125 * static_cast<double>(r);
    }
    ASSERT_EQ(e.srtt(), srtt) << i;
    ASSERT_EQ(e.rttvar(), rttvar) << i;
    // Each truncation loses < 1; the 7/8 (3/4) contraction bounds the sum.
    ASSERT_NEAR(static_cast<double>(e.srtt()), srtt_real, 8.0) << i;
    ASSERT_NEAR(static_cast<double>(e.rttvar()), rttvar_real, 16.0) << i;
  }
}

TEST(RttEstimator, ConstantSamplesConverge) {
  RttEstimator e(1000);
  e.on_sample(100'000);
  for (int i = 0; i < 200; ++i) e.on_sample(20'000);
  // SRTT approaches R; truncation can hold it at most 7 ns off
  // (floor(R - 7k/8) == R - k for k <= 7). RTTVAR decays towards that gap.
  EXPECT_LE(e.srtt() > 20'000 ? e.srtt() - 20'000 : 20'000 - e.srtt(), 7u);
  EXPECT_LE(e.rttvar(), 8u);
  EXPECT_EQ(e.min_rtt(), 20'000u);
}

TEST(RttEstimator, MinRttTracksTheSmallestSample) {
  RttEstimator e(1000);
  e.on_sample(500);
  EXPECT_EQ(e.min_rtt(), 500u);
  e.on_sample(300);
  EXPECT_EQ(e.min_rtt(), 300u);
  e.on_sample(700);
  EXPECT_EQ(e.min_rtt(), 300u);
  e.on_sample(300);
  EXPECT_EQ(e.min_rtt(), 300u);
  e.on_sample(299);
  EXPECT_EQ(e.min_rtt(), 299u);
}

TEST(RttEstimator, ZeroSampleCountsAsOneNanosecond) {
  RttEstimator e(1000);
  e.on_sample(0);
  EXPECT_EQ(e.min_rtt(), 1u);
  EXPECT_EQ(e.srtt(), 1u);
  EXPECT_GT(e.rto(0, kHuge), 0u);
}

TEST(RttEstimator, RtoClamps) {
  RttEstimator e(1);
  e.on_sample(1000);  // srtt 1000, rttvar 500: raw RTO 3000
  EXPECT_EQ(e.rto(2000, 5000), 3000u);
  EXPECT_EQ(e.rto(3000, 3000), 3000u);
  EXPECT_EQ(e.rto(4000, 5000), 4000u) << "below the minimum: raised to it";
  EXPECT_EQ(e.rto(100, 2500), 2500u) << "above the maximum: capped";
  EXPECT_EQ(e.rto(0, 0), 0u);
}

TEST(RttEstimator, RtoAddsThePeersAckDelay) {
  // Samples leave out the time the peer held a packet before its ACK; the
  // timer must wait for it too.
  RttEstimator e(1);
  e.on_sample(1000);
  EXPECT_EQ(e.rto(0, 10'000, 700), 3700u);
  EXPECT_EQ(e.rto(4000, 10'000, 700), 4000u) << "the minimum still holds";
  EXPECT_EQ(e.rto(0, 3500, 700), 3500u) << "and the maximum";
}

TEST(RttEstimator, ResetForgetsSamples) {
  RttEstimator e(1000);
  e.on_sample(40);
  e.on_sample(90);
  e.reset(2000);
  EXPECT_FALSE(e.has_sample());
  EXPECT_EQ(e.srtt(), 2000u);
  EXPECT_EQ(e.rttvar(), 1000u);
  EXPECT_EQ(e.min_rtt(), kNever);
  e.on_sample(600);  // treated as a first sample again
  EXPECT_EQ(e.srtt(), 600u);
  EXPECT_EQ(e.rttvar(), 300u);
  EXPECT_EQ(e.min_rtt(), 600u);
}

}  // namespace
}  // namespace metaroce::transport
