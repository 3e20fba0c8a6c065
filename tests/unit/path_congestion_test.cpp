// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Unit tests of the per-path congestion window (path_congestion.h): ECN
// (DCTCP-like) and delay responses, additive increase, bounds. Loss is not a
// congestion signal and has no entry point here.
#include "path_congestion.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

namespace metaroce::transport {
namespace {

constexpr Time kSrtt = 20'000;
constexpr Time kMinRtt = 10'000;

CongestionParams params() {
  CongestionParams p;
  p.ecn_gain = 1.0 / 16;
  p.additive_increase_bytes = 4096;
  p.target_queue_delay_ns = 8'000;
  p.delay_backoff = 0.8;
  p.min_window_bytes = 4096;
  p.max_window_bytes = 1 << 20;
  p.initial_window_bytes = 100'000;
  return p;
}

// An ACK with no congestion signal: no marks, RTT at the minimum.
void clean_ack(PathCongestion& cc, Time now, uint32_t bytes, uint32_t packets = 1) {
  cc.on_ack(now, bytes, packets, 0, kMinRtt, kMinRtt, kSrtt);
}

// window() truncates the internal double.
void expect_window(const PathCongestion& cc, double want) { EXPECT_NEAR(static_cast<double>(cc.window()), want, 1.0); }

TEST(PathCongestion, StartsAtTheInitialWindow) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  EXPECT_EQ(cc.window(), p.initial_window_bytes);
  EXPECT_EQ(cc.alpha(), 0.0);
  EXPECT_EQ(cc.decreases(), 0u);
}

TEST(PathCongestion, AbsorbsAnotherPathsWindowUpToTheMaximum) {
  PathCongestion cc(params());
  cc.absorb(300'000);
  expect_window(cc, 400'000);
  cc.absorb(1 << 20);
  expect_window(cc, 1 << 20);
}

TEST(PathCongestion, OneWindowInOneAckAddsExactlyTheIncrement) {
  // Increase per ACK is AI * acked / W; acking W bytes at once adds AI.
  const CongestionParams p = params();
  PathCongestion cc(p);
  clean_ack(cc, 0, p.initial_window_bytes, 70);
  EXPECT_EQ(cc.window(), p.initial_window_bytes + p.additive_increase_bytes);
  EXPECT_EQ(cc.decreases(), 0u);
}

TEST(PathCongestion, OneWindowInSmallAcksAddsAboutTheIncrement) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  const double w0 = p.initial_window_bytes;
  const double ai = p.additive_increase_bytes;
  Time now = 0;
  for (uint32_t acked = 0; acked < p.initial_window_bytes; acked += 1000) {
    clean_ack(cc, now, 1000);
    now += 100;
  }
  const double growth = cc.window() - w0;
  // Every step adds AI * 1000 / W with W in [w0, w0 + AI], so the total lies in
  // [AI * w0 / (w0 + AI), AI].
  EXPECT_LE(growth, ai);
  EXPECT_GE(growth, ai * w0 / (w0 + ai) - 1);
  // Continuous limit: dW/db = AI/W  =>  W = sqrt(w0^2 + 2 AI b) for b = w0.
  EXPECT_NEAR(cc.window(), std::sqrt(w0 * w0 + 2 * ai * w0), 5.0);
}

TEST(PathCongestion, AcksWithoutMarksNeverShrinkTheWindow) {
  // Random loss has no API; whatever the pattern of clean ACKs (including
  // ones that acknowledge nothing, as after a loss), the window only grows.
  std::mt19937 rng(99);
  PathCongestion cc(params());
  uint32_t last = cc.window();
  Time now = 0;
  for (int i = 0; i < 60'000; ++i) {
    now += rng() % 5000;
    const uint32_t packets = rng() % 8;
    const uint32_t bytes = packets * (rng() % 4097);
    // Sometimes a delay sample that is high but still within the target.
    const Time rtt = kMinRtt + (rng() % 2 ? 8'000 : rng() % 8'000);
    const Time srtt = 5'000 + rng() % 50'000;
    cc.on_ack(now, bytes, packets, 0, rtt, kMinRtt, srtt);
    ASSERT_GE(cc.window(), last) << i;
    last = cc.window();
  }
  EXPECT_EQ(cc.decreases(), 0u);
  EXPECT_EQ(cc.alpha(), 0.0);
  EXPECT_EQ(cc.window(), params().max_window_bytes) << "60k clean ACKs (~2e8 bytes) reach the ceiling";
}

TEST(PathCongestion, FullyMarkedWindowShrinksByHalfAlpha) {
  const CongestionParams p = params();
  const double g = p.ecn_gain;
  PathCongestion cc(p);
  // The first ACK closes the first observation window: all 10 packets marked.
  cc.on_ack(0, 10 * 1000, 10, 10, kMinRtt, kMinRtt, kSrtt);
  double alpha = g * 1.0;  // from 0: (1 - g) * 0 + g * 1
  double window = p.initial_window_bytes * (1 - alpha / 2);
  EXPECT_DOUBLE_EQ(cc.alpha(), alpha);
  expect_window(cc, window);
  EXPECT_EQ(cc.decreases(), 1u);

  // A second fully marked observation window, one srtt later.
  cc.on_ack(kSrtt, 10 * 1000, 10, 10, kMinRtt, kMinRtt, kSrtt);
  alpha = (1 - g) * alpha + g * 1.0;
  window *= 1 - alpha / 2;
  EXPECT_DOUBLE_EQ(cc.alpha(), alpha);
  expect_window(cc, window);
  EXPECT_EQ(cc.decreases(), 2u);
}

TEST(PathCongestion, PartiallyMarkedWindowUsesTheFraction) {
  const CongestionParams p = params();
  const double g = p.ecn_gain;
  PathCongestion cc(p);
  cc.on_ack(0, 16 * 1000, 16, 4, kMinRtt, kMinRtt, kSrtt);
  const double alpha = g * 4.0 / 16.0;
  EXPECT_DOUBLE_EQ(cc.alpha(), alpha);
  expect_window(cc, p.initial_window_bytes * (1 - alpha / 2));
}

TEST(PathCongestion, MarksBeyondAckedPacketsAreCapped) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  cc.on_ack(0, 2000, 2, 5, kMinRtt, kMinRtt, kSrtt);
  EXPECT_DOUBLE_EQ(cc.alpha(), p.ecn_gain) << "fraction is at most 1";
  expect_window(cc, p.initial_window_bytes * (1 - p.ecn_gain / 2));
}

TEST(PathCongestion, MarksAccumulateOverTheObservationWindow) {
  const CongestionParams p = params();
  const double g = p.ecn_gain;
  PathCongestion cc(p);
  // t=0 closes an empty-of-marks window: alpha stays 0, next window ends at kSrtt.
  clean_ack(cc, 0, 0, 10);
  EXPECT_EQ(cc.alpha(), 0.0);
  const uint32_t w0 = cc.window();
  // Inside the window: marks are only counted, nothing shrinks.
  cc.on_ack(kSrtt / 4, 0, 10, 0, kMinRtt, kMinRtt, kSrtt);
  cc.on_ack(kSrtt / 2, 0, 10, 10, kMinRtt, kMinRtt, kSrtt);
  EXPECT_EQ(cc.window(), w0);
  EXPECT_EQ(cc.alpha(), 0.0);
  EXPECT_EQ(cc.decreases(), 0u);
  // Closing ACK: 30 packets seen, 20 marked.
  cc.on_ack(kSrtt, 0, 10, 10, kMinRtt, kMinRtt, kSrtt);
  const double alpha = g * 20.0 / 30.0;
  EXPECT_DOUBLE_EQ(cc.alpha(), alpha);
  expect_window(cc, w0 * (1 - alpha / 2));
  EXPECT_EQ(cc.decreases(), 1u);
}

TEST(PathCongestion, AtMostOneEcnDecreasePerSrtt) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  // Decrease at t=0 with a short srtt: the next observation window closes at 1000.
  cc.on_ack(0, 1000, 10, 10, kMinRtt, kMinRtt, 1000);
  ASSERT_EQ(cc.decreases(), 1u);
  const uint32_t w1 = cc.window();
  // The window closes at t=1000, but srtt has grown to 5000: too soon.
  cc.on_ack(1000, 1000, 10, 10, kMinRtt, kMinRtt, 5000);
  EXPECT_EQ(cc.decreases(), 1u);
  EXPECT_EQ(cc.window(), w1);
  EXPECT_GT(cc.alpha(), p.ecn_gain) << "alpha is still updated";
  // Next window ends at 6000; the last decrease (t=0) is 6000 >= 5000 ago.
  cc.on_ack(6000, 1000, 10, 10, kMinRtt, kMinRtt, 5000);
  EXPECT_EQ(cc.decreases(), 2u);
  EXPECT_LT(cc.window(), w1);
}

TEST(PathCongestion, EcnAndDelayTogetherDecreaseOnce) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  const Time high = kMinRtt + p.target_queue_delay_ns + 1;
  cc.on_ack(0, 1000, 10, 10, high, kMinRtt, kSrtt);
  EXPECT_EQ(cc.decreases(), 1u);
  expect_window(cc, p.initial_window_bytes * (1 - p.ecn_gain / 2));
  // Delay again within srtt of the ECN decrease: no further decrease.
  cc.on_ack(kSrtt - 1, 1000, 1, 0, high, kMinRtt, kSrtt);
  EXPECT_EQ(cc.decreases(), 1u);
  expect_window(cc, p.initial_window_bytes * (1 - p.ecn_gain / 2));
}

TEST(PathCongestion, DelayAboveTargetBacksOffOncePerSrtt) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  const Time limit = kMinRtt + p.target_queue_delay_ns;

  // Exactly at min_rtt + target is not congestion: the window grows.
  cc.on_ack(0, 10'000, 10, 0, limit, kMinRtt, kSrtt);
  EXPECT_GT(cc.window(), p.initial_window_bytes);
  EXPECT_EQ(cc.decreases(), 0u);
  const double w1 = cc.window();

  // One ns above: shrink by delay_backoff.
  const Time t1 = 1000;
  cc.on_ack(t1, 10'000, 10, 0, limit + 1, kMinRtt, kSrtt);
  double want = w1 * p.delay_backoff;
  expect_window(cc, want);
  EXPECT_EQ(cc.decreases(), 1u);

  // Within srtt of it: neither shrink nor grow.
  cc.on_ack(t1 + kSrtt - 1, 10'000, 10, 0, limit + 50'000, kMinRtt, kSrtt);
  expect_window(cc, want);
  EXPECT_EQ(cc.decreases(), 1u);

  // A full srtt later: shrink again.
  cc.on_ack(t1 + kSrtt, 10'000, 10, 0, limit + 1, kMinRtt, kSrtt);
  want *= p.delay_backoff;
  expect_window(cc, want);
  EXPECT_EQ(cc.decreases(), 2u);
}

TEST(PathCongestion, NoDelaySignalWithoutAMinimumOrSample) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  cc.on_ack(0, 1000, 1, 0, 1'000'000, kNever, kSrtt);  // no min RTT yet
  cc.on_ack(10, 1000, 1, 0, 0, kMinRtt, kSrtt);        // no sample on this ACK
  EXPECT_EQ(cc.decreases(), 0u);
  EXPECT_GT(cc.window(), p.initial_window_bytes);
}

TEST(PathCongestion, WindowStaysWithinBounds) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  const Time high = kMinRtt + p.target_queue_delay_ns + 1;
  Time now = 0;
  // 0.8^n * 100000 < 4096 after 15 decreases; do many more.
  for (int i = 0; i < 60; ++i) {
    cc.on_ack(now, 1000, 1, 1, high, kMinRtt, kSrtt);
    ASSERT_GE(cc.window(), p.min_window_bytes) << i;
    now += kSrtt;
  }
  EXPECT_EQ(cc.window(), p.min_window_bytes);

  for (int i = 0; i < 5000; ++i) {
    clean_ack(cc, now, 1 << 20, 256);
    ASSERT_LE(cc.window(), p.max_window_bytes) << i;
    now += 10;
  }
  EXPECT_EQ(cc.window(), p.max_window_bytes);
}

TEST(PathCongestion, ResetRestoresTheInitialState) {
  const CongestionParams p = params();
  PathCongestion cc(p);
  const Time high = kMinRtt + p.target_queue_delay_ns + 1;
  cc.on_ack(0, 1000, 10, 10, high, kMinRtt, kSrtt);
  cc.on_ack(kSrtt, 1000, 10, 10, high, kMinRtt, kSrtt);
  ASSERT_NE(cc.window(), p.initial_window_bytes);
  ASSERT_GT(cc.alpha(), 0.0);

  cc.reset();
  EXPECT_EQ(cc.window(), p.initial_window_bytes);
  EXPECT_EQ(cc.alpha(), 0.0);

  // Afterwards it behaves as a fresh instance: the pre-reset decrease does not
  // suppress the next one and the observation window starts anew.
  PathCongestion fresh(p);
  const Time t = kSrtt + 1;
  cc.on_ack(t, 1000, 8, 2, high, kMinRtt, kSrtt);
  fresh.on_ack(t, 1000, 8, 2, high, kMinRtt, kSrtt);
  EXPECT_EQ(cc.window(), fresh.window());
  EXPECT_DOUBLE_EQ(cc.alpha(), fresh.alpha());
  EXPECT_DOUBLE_EQ(cc.alpha(), p.ecn_gain * 2.0 / 8.0);
  expect_window(cc, p.initial_window_bytes * (1 - cc.alpha() / 2));
}

TEST(PathCongestion, SetParamsClampsTheWindow) {
  CongestionParams p = params();
  PathCongestion cc(p);

  p.max_window_bytes = 50'000;
  cc.set_params(p);
  EXPECT_EQ(cc.window(), 50'000u);

  p.min_window_bytes = 200'000;
  p.max_window_bytes = 300'000;
  cc.set_params(p);
  EXPECT_EQ(cc.window(), 200'000u);

  p.min_window_bytes = 1000;
  p.max_window_bytes = 1 << 22;
  cc.set_params(p);
  EXPECT_EQ(cc.window(), 200'000u) << "already inside the new bounds: unchanged";

  // The new parameters take effect: a full window acked adds the new increment.
  p.additive_increase_bytes = 10'000;
  cc.set_params(p);
  clean_ack(cc, 0, 200'000);
  EXPECT_EQ(cc.window(), 210'000u);
}

}  // namespace
}  // namespace metaroce::transport
