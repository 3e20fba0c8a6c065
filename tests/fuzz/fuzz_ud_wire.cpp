// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Fuzz target for the kernel's UD datagram decoder (kmod/ud_wire.c, built
// against the mock kernel of tests/kmod/mock/). Any input must decode
// without reading past its end; an input that decodes OK must re-encode to
// the same bytes, but for the reserved bytes (sent as zero) and an
// immediate without its flag (sent as zero).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "mroce_logic.h"
}

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_ud_wire: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mroce_ud_hdr hdr{};
  size_t off = 0;
  const mroce_ud_verdict v = mroce_ud_decode(data, size, &hdr, &off);
  if (v >= MROCE_UD_VERDICTS) fail("verdict out of range");
  if (v != MROCE_UD_OK) return 0;
  if (off > size) fail("payload offset beyond the datagram");
  if (mroce_gsi_check(&hdr, size - off) >= MROCE_UD_VERDICTS) fail("GSI verdict out of range");
  std::vector<uint8_t> again(size);
  if (mroce_ud_encode(again.data(), again.size(), &hdr, data + off, size - off) != static_cast<int>(size))
    fail("a decoded datagram does not re-encode to its length");
  std::vector<uint8_t> want(data, data + size);
  for (size_t i : {6u, 7u, 25u, 26u, 27u}) want[i] = 0;
  if (!(hdr.flags & MROCE_UD_FLAG_IMM)) std::memset(want.data() + 20, 0, 4);
  if (again != want) fail("re-encoded bytes differ");
  return 0;
}
