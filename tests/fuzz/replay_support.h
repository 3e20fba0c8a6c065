// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What every replay program (a fuzz target's LLVMFuzzerTestOneInput driven
// without libFuzzer, as a test) shares: a seeded generator, running one
// input from an exact-size heap copy (so ASan sees overreads), and running
// files or directories given on the command line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <vector>

#include "metaroce/splitmix64.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace replay {

using Bytes = std::vector<uint8_t>;

// The project's SplitMix64 (the same on every platform), with the draws the
// generators use.
struct SplitMix : metaroce::SplitMix64 {
  using SplitMix64::SplitMix64;
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
  uint8_t byte() { return static_cast<uint8_t>(next()); }
};

inline size_t inputs_run = 0;

inline void run_one(const uint8_t* data, size_t size) {
  // Exact-size copy; a zero-length input is passed as a null pointer.
  std::unique_ptr<uint8_t[]> copy;
  if (size != 0) {
    copy.reset(new uint8_t[size]);
    std::memcpy(copy.get(), data, size);
  }
  LLVMFuzzerTestOneInput(copy.get(), size);
  ++inputs_run;
}

inline void run_one(const Bytes& b) { run_one(b.data(), b.size()); }

// Runs a file, or every file below a directory; false if one cannot be read.
inline bool run_path(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    bool ok = true;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path, ec)) {
      if (entry.is_regular_file()) ok = run_path(entry.path()) && ok;
    }
    return ok && !ec;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  const Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  run_one(bytes);
  return true;
}

}  // namespace replay
