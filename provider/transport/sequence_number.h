// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Order of the 32-bit numbers that wrap (path sequence numbers, message
// sequence numbers): a is after b when it lies less than 2^31 ahead of it
// (serial-number arithmetic, RFC 1982).
#pragma once

#include <cstdint>

namespace metaroce::transport {

constexpr bool seq_after(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

}  // namespace metaroce::transport
