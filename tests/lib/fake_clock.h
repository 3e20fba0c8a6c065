// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A Clock (metaroce/clock.h) that moves only when a test moves it.
#pragma once

#include <atomic>
#include <cstdint>

#include "metaroce/clock.h"

namespace metaroce::test {

class FakeClock final : public Clock {
 public:
  // Starts away from zero: 0 is the engine's "due now" deadline.
  explicit FakeClock(uint64_t start_ns = 1'000'000'000) : now_(start_ns) {}
  uint64_t now() const override { return now_.load(std::memory_order_acquire); }
  void advance(uint64_t ns) { now_.fetch_add(ns, std::memory_order_acq_rel); }
  // Moves to `ns` if that is later (a clock never goes back).
  void advance_to(uint64_t ns) {
    uint64_t current = now_.load(std::memory_order_acquire);
    while (current < ns && !now_.compare_exchange_weak(current, ns, std::memory_order_acq_rel)) {}
  }

 private:
  std::atomic<uint64_t> now_;
};

}  // namespace metaroce::test
