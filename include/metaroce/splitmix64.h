// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
// generators", 2014): the engine's, the runtime's, the simulator's and the
// tests' one source of cheap, seedable, non-cryptographic randomness and
// hashing. Nothing secret comes from it.
#pragma once

#include <cstdint>

namespace metaroce {

inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ULL;

// The finaliser applied to x + gamma: a bijective 64-bit mix with good
// avalanche, for hashing and for deriving one seed from another.
constexpr uint64_t splitmix64_mix(uint64_t x) {
  uint64_t z = x + kSplitMix64Gamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The generator: each value mixes the next point of a gamma-spaced sequence.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : state_(seed) {}
  constexpr uint64_t next() {
    const uint64_t value = splitmix64_mix(state_);
    state_ += kSplitMix64Gamma;
    return value;
  }

 private:
  uint64_t state_;
};

}  // namespace metaroce
