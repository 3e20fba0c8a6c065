// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// One path's congestion window. It reacts to congestion signals only: the
// fraction of ECN-marked packets (DCTCP-style EWMA) and queueing delay above a
// target. Loss is handled by retransmission and never shrinks the window.
#pragma once

#include <cstdint>

#include "types.h"

namespace metaroce::transport {

struct CongestionParams {
  double ecn_gain = 1.0 / 16;
  uint32_t additive_increase_bytes = 4096;
  Time target_queue_delay_ns = 8'000;
  double delay_backoff = 0.8;
  uint32_t min_window_bytes = 4096;
  uint32_t max_window_bytes = 1 << 20;
  uint32_t initial_window_bytes = 100'000;
};

class PathCongestion {
 public:
  explicit PathCongestion(const CongestionParams& params);

  // acked_*: newly acknowledged by one ACK; marked_packets: CE marks the
  // receiver reported since the previous ACK of this path.
  void on_ack(Time now, uint32_t acked_bytes, uint32_t acked_packets, uint32_t marked_packets, Time rtt_sample,
              Time min_rtt, Time srtt);
  void reset();
  void set_params(const CongestionParams& params);
  // Takes over `bytes` of window from a path that stopped carrying data
  // (up to the maximum window).
  void absorb(double bytes);

  uint32_t window() const { return static_cast<uint32_t>(window_); }
  double alpha() const { return alpha_; }
  uint64_t decreases() const { return decreases_; }

 private:
  void shrink(Time now, double factor);

  CongestionParams params_;
  double window_ = 0;
  double alpha_ = 0;
  Time observation_end_ = 0;
  uint32_t observed_packets_ = 0;
  uint32_t observed_marks_ = 0;
  Time last_decrease_ = 0;
  bool decreased_once_ = false;
  uint64_t decreases_ = 0;
};

}  // namespace metaroce::transport
