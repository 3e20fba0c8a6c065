// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Smoothed RTT and retransmission timeout in the manner of RFC 6298, plus the
// minimum RTT seen, which the delay signal of congestion control compares to.
#pragma once

#include <algorithm>

#include "types.h"

namespace metaroce::transport {

class RttEstimator {
 public:
  explicit RttEstimator(Time initial_rtt) { reset(initial_rtt); }

  void reset(Time initial_rtt) {
    srtt_ = initial_rtt;
    rttvar_ = initial_rtt / 2;
    min_rtt_ = kNever;
    has_sample_ = false;
  }

  void on_sample(Time rtt) {
    if (rtt == 0) rtt = 1;
    min_rtt_ = std::min(min_rtt_, rtt);
    if (!has_sample_) {
      srtt_ = rtt;
      rttvar_ = rtt / 2;
      has_sample_ = true;
      return;
    }
    const Time delta = srtt_ > rtt ? srtt_ - rtt : rtt - srtt_;
    rttvar_ = (3 * rttvar_ + delta) / 4;
    srtt_ = (7 * srtt_ + rtt) / 8;
  }

  Time srtt() const { return srtt_; }
  Time rttvar() const { return rttvar_; }
  // kNever until the first sample.
  Time min_rtt() const { return min_rtt_; }
  bool has_sample() const { return has_sample_; }
  // RFC 6298's srtt + 4 rttvar, plus the peer's ACK delay that the samples
  // leave out, within [min_rto, max_rto].
  Time rto(Time min_rto, Time max_rto, Time ack_delay = 0) const {
    return std::clamp(srtt_ + 4 * rttvar_ + ack_delay, min_rto, max_rto);
  }

 private:
  Time srtt_ = 0;
  Time rttvar_ = 0;
  Time min_rtt_ = kNever;
  bool has_sample_ = false;
};

}  // namespace metaroce::transport
