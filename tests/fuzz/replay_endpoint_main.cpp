// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Stand-alone driver for fuzz_endpoint.cpp (replay_main.cpp's built-in corpus
// is made of single wire packets, which this target reads as something else).
// It feeds LLVMFuzzerTestOneInput with
//   (a) every file named on the command line (directories are walked), then
//   (b) a deterministic built-in set: a few hand-made inputs and kGenerated
//       inputs drawn from a fixed seed in the target's input format (a
//       configuration byte, then 48-byte records: operation, clock step,
//       fields), biased towards the valid-looking packets that reach deep.
// `--write-corpus DIR [N]` writes N generated inputs to DIR (a starting
// corpus for libFuzzer) and exits; `--files-only` skips the built-in set. Each input is passed as an exact-size heap
// copy. The target aborts on a failed check.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "replay_support.h"

namespace {

using replay::Bytes;

constexpr int kGenerated = 6000;
constexpr uint64_t kSeed = 0x456E64706F696E74ull;  // fixed: the run is reproducible
constexpr size_t kRecordBytes = 48;                // as in fuzz_endpoint.cpp
constexpr int kDeregFirst = 400;                   // inputs that start with B's deregistration
constexpr uint8_t kCfgNoPartial = 0x08;            // as in fuzz_endpoint.cpp

using replay::run_one;
using replay::run_path;
using replay::SplitMix;

// One record: operation byte, clock step byte, fields.
void add_record(Bytes& out, SplitMix& rng) {
  uint8_t op;
  const size_t kind = rng.below(100);
  if (kind < 50) op = static_cast<uint8_t>(rng.below(3));  // data packets
  else if (kind < 62) op = 3;                              // ACK
  else if (kind < 72) op = 4;                              // NAK
  else if (kind < 77) op = 5;                              // probe
  else if (kind < 85) op = 6;                              // raw
  else op = 7;                                             // local action
  if (rng.below(100) < 15) op |= 0x08;                     // to A
  if (rng.below(100) < 10) op |= 0x10;                     // CE
  const size_t sender = rng.below(100);
  if (sender >= 90) op |= 0x60;
  else if (sender >= 80) op |= 0x40;
  uint8_t step = static_cast<uint8_t>(rng.below(rng.below(3) == 0 ? 8 : 4));
  if (rng.below(100) < 10) step |= 0x08;  // burst
  if (rng.below(100) < 10) step |= 0x10;  // mutate
  out.push_back(op);
  out.push_back(step);
  for (size_t i = 2; i < kRecordBytes; ++i) {
    const size_t r = rng.below(100);
    const uint8_t field = r < 50 ? 0 : r < 80 ? static_cast<uint8_t>(rng.below(16)) : rng.byte();
    out.push_back(field);
  }
}

Bytes generate(SplitMix& rng) {
  Bytes out;
  out.push_back(rng.below(4) == 0 ? static_cast<uint8_t>(rng.below(16)) : 0);
  const size_t records = 1 + rng.below(rng.below(5) == 0 ? 48 : 12);
  for (size_t i = 0; i < records; ++i) add_record(out, rng);
  // Sometimes a truncated last record.
  // (erase, not resize: GCC 12 with ASan cannot see that resize shrinks here
  // and warns about a huge memset.)
  if (rng.below(4) == 0) {
    const size_t cut = std::min(out.size(), rng.below(kRecordBytes));
    out.erase(out.end() - static_cast<std::ptrdiff_t>(cut), out.end());
  }
  return out;
}

// B deregisters R0 (sometimes registering it again read-only, under a new
// key) before anything else; then stale keys, WRITEs and atomics to it.
Bytes generate_dereg_first(SplitMix& rng) {
  Bytes out;
  out.push_back(static_cast<uint8_t>(kCfgNoPartial | rng.below(8)));
  out.push_back(7);
  out.push_back(static_cast<uint8_t>(rng.below(8)));
  out.push_back(static_cast<uint8_t>(3 | (rng.below(2) << 4)));
  out.resize(1 + kRecordBytes, 0);
  const size_t records = 1 + rng.below(12);
  for (size_t i = 0; i < records; ++i) add_record(out, rng);
  return out;
}

std::vector<Bytes> hand_made() {
  std::vector<Bytes> seeds;
  for (uint8_t cfg = 0; cfg < 16; ++cfg) seeds.push_back({cfg});  // setup and settle alone
  seeds.push_back({});
  return seeds;
}

bool write_corpus(const char* dir, int count) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  SplitMix rng{kSeed};
  for (int i = 0; i < count; ++i) {
    const Bytes b = generate(rng);
    char name[64];
    std::snprintf(name, sizeof name, "gen-%05d", i);
    std::ofstream out(std::filesystem::path(dir) / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    if (!out) {
      std::fprintf(stderr, "replay: cannot write %s/%s\n", dir, name);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--write-corpus") == 0) {
    const int count = argc >= 4 ? std::atoi(argv[3]) : 500;
    return write_corpus(argv[2], count) ? 0 : 1;
  }
  bool ok = true;
  bool builtin = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--files-only") == 0) builtin = false;
    else ok = run_path(argv[i]) && ok;
  }
  if (builtin) {
    for (const Bytes& b : hand_made()) run_one(b);
    SplitMix rng{kSeed};
    for (int i = 0; i < kGenerated; ++i) run_one(generate(rng));
    for (int i = 0; i < kDeregFirst; ++i) run_one(generate_dereg_first(rng));
  }
  std::printf("replay: %zu inputs, no failure\n", replay::inputs_run);
  return ok ? 0 : 1;
}
