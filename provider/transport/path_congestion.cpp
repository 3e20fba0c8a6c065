// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "path_congestion.h"

#include <algorithm>

namespace metaroce::transport {

PathCongestion::PathCongestion(const CongestionParams& params) : params_(params) { reset(); }

void PathCongestion::reset() {
  window_ = params_.initial_window_bytes;
  alpha_ = 0;
  observation_end_ = 0;
  observed_packets_ = 0;
  observed_marks_ = 0;
  decreased_once_ = false;
}

void PathCongestion::set_params(const CongestionParams& params) {
  params_ = params;
  window_ = std::clamp<double>(window_, params_.min_window_bytes, params_.max_window_bytes);
}

void PathCongestion::absorb(double bytes) {
  window_ = std::clamp<double>(window_ + bytes, params_.min_window_bytes, params_.max_window_bytes);
}

void PathCongestion::shrink(Time now, double factor) {
  window_ = std::max<double>(window_ * factor, params_.min_window_bytes);
  last_decrease_ = now;
  decreased_once_ = true;
  ++decreases_;
}

void PathCongestion::on_ack(Time now, uint32_t acked_bytes, uint32_t acked_packets, uint32_t marked_packets,
                            Time rtt_sample, Time min_rtt, Time srtt) {
  observed_packets_ += acked_packets;
  observed_marks_ += std::min(marked_packets, acked_packets);
  const bool once_per_rtt_ok = !decreased_once_ || now - last_decrease_ >= srtt;

  if (now >= observation_end_ && observed_packets_ > 0) {
    const double fraction = static_cast<double>(observed_marks_) / observed_packets_;
    alpha_ = (1 - params_.ecn_gain) * alpha_ + params_.ecn_gain * fraction;
    if (observed_marks_ > 0 && once_per_rtt_ok) shrink(now, 1 - alpha_ / 2);
    observed_packets_ = 0;
    observed_marks_ = 0;
    observation_end_ = now + srtt;
  }

  const bool delayed = rtt_sample != 0 && min_rtt != kNever && rtt_sample > min_rtt + params_.target_queue_delay_ns;
  if (delayed && (!decreased_once_ || now - last_decrease_ >= srtt)) {
    shrink(now, params_.delay_backoff);
  } else if (marked_packets == 0 && !delayed && window_ > 0) {
    window_ += static_cast<double>(params_.additive_increase_bytes) * acked_bytes / window_;
  }
  window_ = std::clamp<double>(window_, params_.min_window_bytes, params_.max_window_bytes);
}

}  // namespace metaroce::transport
