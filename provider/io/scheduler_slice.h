// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The progress thread's request for a short scheduler slice.
//
// Since Linux 6.12 (EEVDF) a thread of the normal or batch policy may ask for
// its own slice, 0.1 to 100 ms (sched_attr.sched_runtime). A woken thread
// whose slice is shorter than the running thread's gets the earlier deadline
// and runs at once; with equal slices it may wait until the running thread
// has used its own. The progress thread sleeps until a datagram arrives and
// then needs the CPU for microseconds, while the application's threads often
// spin: perftest's latency tests spin on their memory, MPI ranks in their
// progress loops. With the default slice, a WRITE that lands while both
// cores run such spinners waits up to a slice for the thread that places it.
// A shorter slice changes when the thread runs, not how much CPU it gets.
// Kernels before 6.12 accept the request and ignore it.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace metaroce::io {

// The range the kernel accepts (it clamps a request into it).
inline constexpr uint64_t kMinSchedulerSliceNs = 100'000;
inline constexpr uint64_t kMaxSchedulerSliceNs = 100'000'000;
// The progress thread's: the shortest.
inline constexpr uint64_t kProgressSliceNs = kMinSchedulerSliceNs;

// Asks for a slice of `slice_ns` for the calling thread, keeping its policy
// and nice value. A thread of a realtime or idle policy is left alone (true).
// False, with errno, when the kernel refuses.
bool request_scheduler_slice(uint64_t slice_ns);
// The slice the kernel reports for thread `tid` of a normal or batch policy;
// 0 from a kernel before 6.12, or when the thread cannot be queried.
uint64_t scheduler_slice_of(pid_t tid);

}  // namespace metaroce::io
