// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Fuzz target for the kernel's UD datagram decoder (kmod/ud_wire.c, built
// against the mock kernel of tests/kmod/mock/). Any input must decode
// without reading past its end; an input that decodes OK must re-encode to
// the same bytes, but for the fields the decoder ignores (sent as zero:
// heard_paths, dst_epoch, packet_number, reserved bytes, an immediate
// without its flag) and so the trailer, and the re-encoding must decode OK.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
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
  size_t off = 0, len = 0;
  const mroce_ud_verdict v = mroce_ud_decode(data, size, &hdr, &off, &len);
  if (v >= MROCE_UD_VERDICTS) fail("verdict out of range");
  if (v != MROCE_UD_OK) return 0;
  if (off > size || len > size - off) fail("payload beyond the datagram");
  if (mroce_gsi_check(&hdr, len) >= MROCE_UD_VERDICTS) fail("GSI verdict out of range");
  std::vector<uint8_t> again(size);
  const int n = mroce_ud_encode(again.data(), again.size(), &hdr, data + off, len);
  if (hdr.src_epoch == 0) {
    if (n != -EINVAL) fail("a zero epoch was encoded");
    return 0;
  }
  if (n != static_cast<int>(size)) fail("a decoded datagram does not re-encode to its length");
  std::vector<uint8_t> want(data, data + size - MROCE_CRC_LEN);
  for (size_t i : {6u, 7u, 37u, 38u, 39u}) want[i] = 0;
  std::memset(want.data() + 12, 0, 8);
  if (!(hdr.flags & MROCE_UD_FLAG_IMM)) std::memset(want.data() + 32, 0, 4);
  if (!std::equal(want.begin(), want.end(), again.begin())) fail("re-encoded bytes differ");
  mroce_ud_hdr back{};
  if (mroce_ud_decode(again.data(), again.size(), &back, &off, &len) != MROCE_UD_OK)
    fail("a re-encoded datagram does not decode");
  return 0;
}
