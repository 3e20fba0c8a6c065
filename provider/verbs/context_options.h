// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A context's options: the defaults, the METAROCE_* environment and
// metaroce_dv_options (docs/verbs.md lists both).
#pragma once

#include <cstdint>
#include <string>

#include "provider.h"
#include "scheduler_slice.h"

namespace metaroce::verbs {

// METAROCE_ZEROCOPY (RuntimeOptions::zerocopy).
enum class ZeroCopy : uint8_t {
  Auto,  // on when every plane's netdev is a NIC (a device behind it in sysfs)
  Off,
  On,
};

struct Options {
  uint16_t paths = 4;
  bool paths_explicit = false;  // set by METAROCE_PATHS or the dv options, else metaroced's choice
  uint32_t mtu = 0;             // payload bytes per packet; 0 = what fits the netdev's MTU
  transport::Profile profile = transport::Profile::MetaRoCE;
  double test_loss = 0;
  uint64_t test_seed = 0;  // 0: derived from the home port
  uint16_t home_port = 0;
  // The kernel module chose home_port (the device's port slot): the daemon
  // reserves that one rather than lease another.
  bool home_port_from_kernel = false;
  bool io_uring = true;
  bool inline_transmit = true;  // RuntimeOptions::inline_transmit
  ZeroCopy zerocopy = ZeroCopy::Auto;
  uint64_t progress_slice_ns = io::kProgressSliceNs;  // RuntimeOptions::progress_slice_ns
  uint64_t busy_poll_ns = 0;                          // RuntimeOptions::busy_poll_ns
  bool busy_poll_explicit = false;                    // set by METAROCE_BUSY_POLL_US, else metaroced's [devices.NAME]
  // Progress threads (shards) of the context: METAROCE_PROGRESS_THREADS,
  // else metaroced's [devices.NAME] progress_threads, else
  // default_progress_threads(); 0 until one of them sets it.
  uint32_t progress_threads = 0;
  // The engine's defaults suit a datacenter NIC (8 us RTT). Over kernel
  // UDP the host adds tens of microseconds and, on a busy host, scheduling
  // delays of a millisecond or more that are not congestion: a larger base
  // RTT (initial window, minimum RTO) and delay target keep the congestion
  // controller from collapsing the window on them.
  uint64_t base_rtt_ns = 100'000;
  uint64_t target_delay_ns = 1'000'000;
  uint32_t poll_yield_every = 32;
  // ACK a lone packet after this long (the engine's default is base RTT / 4):
  // a latency-bound requester waits for it before its next post.
  uint64_t ack_delay_ns = 10'000;
  // RTO floor: a timeout on a busy host is usually a scheduling delay, and
  // three in a row fail a path. Gaps in a path's sequence still repair loss
  // at once; only tail loss waits for this.
  uint64_t min_rto_ns = 4'000'000;
  // The device's link rate (0 = read the netdev's speed, else the engine's
  // default): it starts each path's window at one link-rate bandwidth-delay
  // product, and the rate hint shares it among senders. A window sized for
  // 100 Gb/s on a slower link fills socket buffers with milliseconds of
  // queue, longer than the RTO.
  uint64_t link_bps = 0;
  // metaroced: whether to ask it for ports, paths and policy, and the
  // traffic class.
  bool use_daemon = true;
  std::string traffic_class;
};

// One progress thread per 8 cores this process may run on, 1 to 4: each
// thread wants a core of its own while the application's threads run on
// others, and a context that talks to few peers gains nothing from more.
uint32_t default_progress_threads();

// Reads the METAROCE_* variables into `o`; false (errno EINVAL, and one line
// on stderr naming the variable) when one is invalid.
bool options_from_env(Options& o);
// Applies what `dv` sets (nothing when null); false when a field is unknown
// or out of range.
bool apply_dv_options(Options& o, const metaroce_dv_options* dv);

}  // namespace metaroce::verbs
