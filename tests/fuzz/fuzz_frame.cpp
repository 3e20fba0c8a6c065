// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// libFuzzer target: the v0.2 framing (docs/spec.md section 9) — the common
// header, the integrity trailer, the AES-GCM open of both modes and the
// replay window — on arbitrary bytes. Nothing may crash or read past the
// input, nothing but a genuine datagram may pass, and whatever passes must
// decode as it did before it was sealed. The input also serves as a body:
// sealed in each mode it must open again, and not once a byte is changed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "metaroce/wire.h"
#include "packet_protection.h"
#include "peer_session.h"

namespace {

using namespace metaroce;
using transport::PairKey;
using transport::TrafficKey;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_frame: %s\n", what);
  std::abort();
}

PairKey fixed_key() {
  PairKey k;
  for (size_t i = 0; i < k.size(); ++i) k[i] = static_cast<uint8_t>(0xA0 + i);
  return k;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static TrafficKey key(fixed_key(), 0, 0x01020304, 0x05060708);
  const std::span<const uint8_t> in(data, size);

  // As received.
  wire::CommonHeader common;
  const wire::DecodeStatus cs = wire::decode_common(in, common);
  if (static_cast<uint8_t>(cs) >= wire::kDecodeStatusCount) fail("common status out of range");
  if (transport::check_integrity(in)) {
    wire::Packet p;
    (void)wire::decode(in.first(in.size() - wire::kIntegrityTrailerBytes), p);
  }
  std::vector<uint8_t> plain(size);
  const uint64_t number = size >= 8 ? (uint64_t{data[0]} << 8 | data[1]) : 1;
  for (const wire::Security mode : {wire::Security::Authenticate, wire::Security::Encrypt})
    if (key.open(mode, in, number, plain)) fail("arbitrary bytes passed as a genuine datagram");

  // As a body to seal.
  if (size >= wire::kCommonHeaderBytes && size < 65536) {
    for (const wire::Security mode :
         {wire::Security::Integrity, wire::Security::Authenticate, wire::Security::Encrypt}) {
      std::vector<uint8_t> d(in.begin(), in.end());
      d.resize(size + wire::trailer_bytes(mode));
      wire::stamp_common(d, mode, 0x01020304, 0x05060708, static_cast<uint32_t>(number));
      const std::vector<uint8_t> stamped(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(size));
      if (mode == wire::Security::Integrity) {
        transport::seal_integrity(d, size);
        if (!transport::check_integrity(d)) fail("sealed datagram fails its CRC");
        d[data[size / 2] % d.size()] ^= 0x10;
        if (transport::check_integrity(d)) fail("a changed datagram passes its CRC");
        continue;
      }
      if (!key.seal(mode, d, size, number)) fail("seal failed");
      std::vector<uint8_t> out(size);
      if (!key.open(mode, d, number, out)) fail("sealed datagram does not open");
      if (mode == wire::Security::Encrypt && out != stamped) fail("decryption changed the datagram");
      d[data[size / 2] % d.size()] ^= 0x10;
      if (key.open(mode, d, number, out)) fail("a changed datagram opens");
    }
  }

  // The replay window fed with numbers from the input.
  transport::ReplayWindow w;
  for (size_t i = 0; i + 4 <= size && i < 256; i += 4) {
    uint32_t low;
    std::memcpy(&low, data + i, 4);
    const uint64_t n = w.expand(low);
    if (w.check(n) == transport::ReplayWindow::Check::Fresh) {
      w.accept(n);
      if (w.check(n) != transport::ReplayWindow::Check::Replay) fail("an accepted number is not a replay");
    }
  }
  return 0;
}
