// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Replay driver for the text-format targets (config, control messages):
// runs every file named on the command line (directories are walked), then a
// fixed number of seeded mutations of them: byte flips, insertions and
// deletions, truncations, splices of one seed into another, and repeats of a
// slice (deep nesting, long strings). Deterministic; no libFuzzer needed.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "replay_support.h"

namespace {

constexpr int kMutations = 20000;
constexpr uint64_t kSeed = 0x6D6574617263746Cull;

void collect(const std::filesystem::path& path, std::vector<replay::Bytes>& seeds) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(path, ec))
      if (e.is_regular_file()) collect(e.path(), seeds);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  seeds.emplace_back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

replay::Bytes mutate(const std::vector<replay::Bytes>& seeds, replay::SplitMix& rng) {
  replay::Bytes b = seeds[rng.below(seeds.size())];
  const int edits = 1 + static_cast<int>(rng.below(4));
  static const char* kTokens[] = {"\"", "[",      "]",  "{",          "}",    "=",         ",",
                                  ":",  "\n",     "-1", "1e308",      "null", "true",      "\\u0000",
                                  "[[", "\"\"\"", "#",  "4294967296", "\xff", "0x7fffffff"};
  for (int e = 0; e < edits; ++e) {
    const size_t at = rng.below(b.size() + 1);
    switch (rng.below(6)) {
      case 0:
        if (!b.empty()) b[rng.below(b.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1: {
        const char* t = kTokens[rng.below(std::size(kTokens))];
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), t, t + std::strlen(t));
        break;
      }
      case 2:
        if (at < b.size())
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(at),
                  b.begin() + static_cast<std::ptrdiff_t>(std::min(b.size(), at + 1 + rng.below(16))));
        break;
      case 3: b.resize(at); break;
      case 4: {
        const replay::Bytes& other = seeds[rng.below(seeds.size())];
        const size_t from = rng.below(other.size() + 1);
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), other.begin() + static_cast<std::ptrdiff_t>(from),
                 other.end());
        break;
      }
      case 5: {
        if (b.empty()) break;
        const size_t from = rng.below(b.size());
        const size_t len = 1 + rng.below(std::min<size_t>(8, b.size() - from));
        const replay::Bytes slice(b.begin() + static_cast<std::ptrdiff_t>(from),
                                  b.begin() + static_cast<std::ptrdiff_t>(from + len));
        const size_t times = 1 + rng.below(400);
        for (size_t i = 0; i < times && b.size() < 200000; ++i) b.insert(b.end(), slice.begin(), slice.end());
        break;
      }
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<replay::Bytes> seeds;
  for (int i = 1; i < argc; ++i) collect(argv[i], seeds);
  if (seeds.empty()) {
    std::fprintf(stderr, "replay: no seed files given\n");
    return 1;
  }
  for (const auto& s : seeds) replay::run_one(s);
  replay::SplitMix rng{kSeed};
  for (int i = 0; i < kMutations; ++i) replay::run_one(mutate(seeds, rng));
  std::printf("replay: %zu inputs\n", replay::inputs_run);
  return 0;
}
