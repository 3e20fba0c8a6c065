// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The clock the runtime (provider/io/) and the daemon read, injected rather
// than called (the pattern of quiche's QuicClock): production passes
// monotonic_clock(), tests a FakeClock (tests/lib/fake_clock.h) that they
// advance explicitly, so that no test depends on how fast the machine is.
// Time is nanoseconds on CLOCK_MONOTONIC, the engine's transport::Time.
#pragma once

#include <time.h>

#include <cstdint>

namespace metaroce {

class Clock {
 public:
  virtual ~Clock() = default;
  // Nanoseconds; never decreases. Safe to call from any thread.
  virtual uint64_t now() const = 0;
};

class MonotonicClock final : public Clock {
 public:
  uint64_t now() const override {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
  }
};

// The process's CLOCK_MONOTONIC (stateless; one instance for everybody).
inline const Clock& monotonic_clock() {
  static const MonotonicClock clock;
  return clock;
}

}  // namespace metaroce
