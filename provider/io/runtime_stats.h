// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What the runtime reports of its I/O (Runtime::stats()). Its counters are
// one list, like the engine's (counters.h): RuntimeStats, the runtime's
// shared copy of them, kRuntimeCounterInfo, METAROCE_STATS and the daemon
// report are made from it. Dumps put them beside the engine's counters, so
// no name is in both lists.
#pragma once

#include <cstdint>

#include "counters.h"

namespace metaroce::io {

#define METAROCE_RUNTIME_COUNTERS(X)                                                                                \
  X(datagrams_sent, "datagrams", "datagrams the kernel accepted for sending")                                       \
  X(datagrams_received, "datagrams", "datagrams read from the sockets, dropped ones included")                      \
  X(send_syscalls, "syscalls", "sendmmsg calls, or io_uring submissions that carried sends")                        \
  X(receive_syscalls, "syscalls", "recvmmsg calls, or io_uring_enter calls")                                        \
  X(test_drops, "datagrams", "dropped on receipt by METAROCE_TEST_LOSS")                                            \
  X(unknown_sender_drops, "datagrams", "from an (address, home port) that maps to no peer")                         \
  X(send_errors, "datagrams", "not sent: the kernel refused them or their peer has no usable address")              \
  X(progress_wakeups, "events", "times the progress thread slept")                                                  \
  X(gso_sends, "messages", "sends that carried several datagrams (UDP_SEGMENT)")                                    \
  X(gro_receives, "messages", "receives that delivered several datagrams (UDP_GRO)")                                \
  X(truncated_drops, "datagrams", "larger than the receive buffer (never the engine's)")                            \
  X(oversize_drops, "datagrams", "refused as larger than the path MTU, never fragmented (also in send_errors)")     \
  X(inline_datagrams, "datagrams", "sent by the thread that posted them (inline_transmit; also in datagrams_sent)") \
  X(receive_restarts, "events", "io_uring: the multishot receive ended (-ENOBUFS) and was armed again")             \
  X(zerocopy_sends, "messages", "io_uring: sends the kernel took from application memory without copying")

struct RuntimeStats {
  bool io_uring = false;  // false: the sendmmsg/recvmmsg fallback is in use
  bool gso = false;
  bool gro = false;
#define METAROCE_RUNTIME_COUNTER_FIELD(name, unit, meaning) uint64_t name = 0;
  METAROCE_RUNTIME_COUNTERS(METAROCE_RUNTIME_COUNTER_FIELD)
#undef METAROCE_RUNTIME_COUNTER_FIELD
};

inline constexpr transport::CounterInfo<RuntimeStats> kRuntimeCounterInfo[] = {
#define METAROCE_RUNTIME_COUNTER_INFO(name, unit, meaning) {#name, unit, meaning, &RuntimeStats::name},
    METAROCE_RUNTIME_COUNTERS(METAROCE_RUNTIME_COUNTER_INFO)
#undef METAROCE_RUNTIME_COUNTER_INFO
};

// Calls f(name, value) for every counter, in the list's order.
template <class F>
void for_each_counter(const RuntimeStats& s, F&& f) {
  for (const auto& info : kRuntimeCounterInfo) f(info.name, s.*info.value);
}

}  // namespace metaroce::io
