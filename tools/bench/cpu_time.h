// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The CPU time the benches report: this process's user + system seconds,
// and per GiB moved (the unit fabric-bench reports too).
#pragma once

#include <sys/resource.h>

#include <cstddef>

namespace metaroce::bench {

inline double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

inline double cpu_s_per_gib(double cpu, size_t bytes) {
  return bytes ? cpu / (static_cast<double>(bytes) / (1u << 30)) : 0.0;
}

}  // namespace metaroce::bench
