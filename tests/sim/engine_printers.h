// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// GoogleTest prints the engine's states and verdicts by name in a failed
// assertion (found by argument-dependent lookup), not as byte dumps.
#pragma once

#include <ostream>

#include "counters.h"
#include "queue_pair.h"
#include "types.h"

namespace metaroce::transport {

inline void PrintTo(QpState state, std::ostream* os) { *os << to_string(state); }
inline void PrintTo(Verdict verdict, std::ostream* os) { *os << to_string(verdict); }
inline void PrintTo(PathHealth health, std::ostream* os) { *os << to_string(health); }

}  // namespace metaroce::transport
