// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Deterministic test bytes: a different sequence for every seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace metaroce::test {

inline std::vector<uint8_t> byte_pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> b(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& v : b) {
    x = x * 1103515245u + 12345u;
    v = static_cast<uint8_t>(x >> 16);
  }
  return b;
}

}  // namespace metaroce::test
