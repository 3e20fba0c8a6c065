// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "scheduler_slice.h"

#include <linux/sched.h>
#include <linux/sched/types.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace metaroce::io {

bool request_scheduler_slice(uint64_t slice_ns) {
  sched_attr attr{};
  if (syscall(SYS_sched_getattr, 0, &attr, sizeof attr, 0) != 0) return false;
  if (attr.sched_policy != SCHED_NORMAL && attr.sched_policy != SCHED_BATCH) return true;
  sched_attr request{};
  request.size = sizeof request;
  request.sched_policy = attr.sched_policy;
  request.sched_nice = attr.sched_nice;  // a lower nice value would need privilege
  // Only reset-on-fork is carried over: the utilisation-clamp flags would
  // ask to set clamps again.
  request.sched_flags = attr.sched_flags & SCHED_FLAG_RESET_ON_FORK;
  request.sched_runtime = slice_ns;
  return syscall(SYS_sched_setattr, 0, &request, 0) == 0;
}

uint64_t scheduler_slice_of(pid_t tid) {
  sched_attr attr{};
  if (syscall(SYS_sched_getattr, tid, &attr, sizeof attr, 0) != 0) return 0;
  return attr.sched_runtime;
}

}  // namespace metaroce::io
