// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "context_options.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "metaroce/ctl.h"
#include "provider.h"

namespace metaroce::verbs {
namespace {

bool parse_unsigned(const char* text, unsigned long min, unsigned long max, unsigned long& out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (errno || *end || v < min || v > max) return false;
  out = v;
  return true;
}

bool bad_env(const char* name, const char* value) {
  std::fprintf(stderr, "metaroce: invalid %s='%s'\n", name, value);
  errno = EINVAL;
  return false;
}

}  // namespace

uint32_t default_progress_threads() {
  cpu_set_t cpus;
  const int cores = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return static_cast<uint32_t>(std::clamp(cores / 8, 1, 4));
}

bool options_from_env(Options& o) {
  unsigned long v = 0;
  if (const char* s = std::getenv("METAROCE_PATHS")) {
    if (!parse_unsigned(s, 1, 64, v)) return bad_env("METAROCE_PATHS", s);
    o.paths = static_cast<uint16_t>(v);
    o.paths_explicit = true;
  }
  if (const char* s = std::getenv("METAROCE_MTU")) {
    if (!parse_unsigned(s, 256, 65000, v)) return bad_env("METAROCE_MTU", s);
    o.mtu = static_cast<uint32_t>(v);
  }
  if (const char* s = std::getenv("METAROCE_PROFILE")) {
    if (strcasecmp(s, "metaroce") == 0) o.profile = transport::Profile::MetaRoCE;
    else if (strcasecmp(s, "rocev2") == 0) o.profile = transport::Profile::RoCEv2;
    else return bad_env("METAROCE_PROFILE", s);
  }
  if (const char* s = std::getenv("METAROCE_TEST_LOSS")) {
    char* end = nullptr;
    const double p = std::strtod(s, &end);
    if (!*s || *end || !(p >= 0 && p <= 1)) return bad_env("METAROCE_TEST_LOSS", s);
    o.test_loss = p;
  }
  if (const char* s = std::getenv("METAROCE_TEST_SEED")) {
    if (!parse_unsigned(s, 1, ~0ul, v)) return bad_env("METAROCE_TEST_SEED", s);
    o.test_seed = v;
  }
  if (const char* s = std::getenv("METAROCE_IO_URING")) o.io_uring = std::strcmp(s, "0") != 0;
  if (const char* s = std::getenv("METAROCE_INLINE_TRANSMIT")) o.inline_transmit = std::strcmp(s, "0") != 0;
  if (const char* s = std::getenv("METAROCE_ZEROCOPY")) {
    if (strcasecmp(s, "auto") == 0) o.zerocopy = ZeroCopy::Auto;
    else if (std::strcmp(s, "0") == 0) o.zerocopy = ZeroCopy::Off;
    else if (std::strcmp(s, "1") == 0) o.zerocopy = ZeroCopy::On;
    else return bad_env("METAROCE_ZEROCOPY", s);
  }
  if (const char* s = std::getenv("METAROCE_BUSY_POLL_US")) {
    if (!parse_unsigned(s, 0, ctl::kMaxBusyPollUs, v)) return bad_env("METAROCE_BUSY_POLL_US", s);
    o.busy_poll_ns = v * 1000;
    o.busy_poll_explicit = true;
  }
  if (const char* s = std::getenv("METAROCE_PROGRESS_THREADS")) {
    if (!parse_unsigned(s, 1, ctl::kMaxProgressThreads, v)) return bad_env("METAROCE_PROGRESS_THREADS", s);
    o.progress_threads = static_cast<uint32_t>(v);
  }
  if (const char* s = std::getenv("METAROCE_PROGRESS_SLICE_US")) {
    constexpr unsigned long kMin = io::kMinSchedulerSliceNs / 1000, kMax = io::kMaxSchedulerSliceNs / 1000;
    if (std::strcmp(s, "0") != 0 && !parse_unsigned(s, kMin, kMax, v)) return bad_env("METAROCE_PROGRESS_SLICE_US", s);
    o.progress_slice_ns = std::strcmp(s, "0") == 0 ? 0 : v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_BASE_RTT_US")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_BASE_RTT_US", s);
    o.base_rtt_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_CC_TARGET_DELAY_US")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_CC_TARGET_DELAY_US", s);
    o.target_delay_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_MIN_RTO_US")) {
    if (!parse_unsigned(s, 10, 10'000'000, v)) return bad_env("METAROCE_MIN_RTO_US", s);
    o.min_rto_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_ACK_DELAY_US")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_ACK_DELAY_US", s);
    o.ack_delay_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_LINK_MBPS")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_LINK_MBPS", s);
    o.link_bps = uint64_t{v} * 1'000'000;
  }
  if (const char* s = std::getenv("METAROCE_DAEMON")) o.use_daemon = std::strcmp(s, "0") != 0;
  if (const char* s = std::getenv("METAROCE_TRAFFIC_CLASS")) {
    if (!*s || std::strlen(s) > 64) return bad_env("METAROCE_TRAFFIC_CLASS", s);
    o.traffic_class = s;
  }
  if (const char* s = std::getenv("METAROCE_POLL_YIELD")) {
    if (!parse_unsigned(s, 0, 1'000'000'000, v)) return bad_env("METAROCE_POLL_YIELD", s);
    o.poll_yield_every = static_cast<uint32_t>(v);
  }
  return true;
}

bool apply_dv_options(Options& o, const metaroce_dv_options* dv) {
  if (!dv) return true;
  constexpr uint64_t kKnown = METAROCE_DV_OPT_PATHS | METAROCE_DV_OPT_PROFILE | METAROCE_DV_OPT_MTU |
                              METAROCE_DV_OPT_TEST_LOSS | METAROCE_DV_OPT_HOME_PORT;
  if (dv->comp_mask & ~kKnown) return false;
  if (dv->comp_mask & METAROCE_DV_OPT_PATHS) {
    if (dv->paths < 1 || dv->paths > 64) return false;
    o.paths = static_cast<uint16_t>(dv->paths);
    o.paths_explicit = true;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_MTU) {
    if (dv->mtu < 256 || dv->mtu > 65000) return false;
    o.mtu = dv->mtu;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_PROFILE) {
    if (dv->profile == METAROCE_DV_PROFILE_METAROCE) o.profile = transport::Profile::MetaRoCE;
    else if (dv->profile == METAROCE_DV_PROFILE_ROCEV2) o.profile = transport::Profile::RoCEv2;
    else return false;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_TEST_LOSS) {
    if (!(dv->test_loss >= 0 && dv->test_loss <= 1)) return false;
    o.test_loss = dv->test_loss;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_HOME_PORT) {
    if (dv->home_port != 0 && (dv->home_port < kHomePortBase || dv->home_port >= kHomePortBase + kHomePortCount))
      return false;
    o.home_port = dv->home_port;
  }
  return true;
}

}  // namespace metaroce::verbs
