// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace metaroce::transport {
namespace {

constexpr uint32_t kPoly = 0x82F63B78;  // reflected Castagnoli polynomial

// Everything below works on the raw CRC register (no initial or final
// inversion); crc32c() adds those.

constexpr std::array<uint32_t, 256> make_byte_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint32_t, 256> kByteTable = make_byte_table();

uint32_t update_portable(uint32_t reg, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) reg = kByteTable[(reg ^ p[i]) & 0xff] ^ (reg >> 8);
  return reg;
}

#if defined(__x86_64__)

// The hardware path runs three independent streams over consecutive blocks
// of kStride bytes and joins them: the register after a block of zeros is a
// linear function of the register before it, so
//   crc(a | b) = shift(crc(a), |b|) ^ crc_from_zero(b),
// and shift() by a fixed length is four table lookups (a GF(2) matrix applied
// byte by byte, as zlib's crc32_combine builds it).
constexpr size_t kStride = 128;

using Matrix = std::array<uint32_t, 32>;  // column n = image of bit n

constexpr uint32_t apply(const Matrix& m, uint32_t v) {
  uint32_t sum = 0;
  for (int i = 0; v != 0; ++i, v >>= 1)
    if (v & 1) sum ^= m[static_cast<size_t>(i)];
  return sum;
}

constexpr Matrix compose(const Matrix& a, const Matrix& b) {  // a after b
  Matrix out{};
  for (size_t n = 0; n < 32; ++n) out[n] = apply(a, b[n]);
  return out;
}

// The register after `bytes` zero bytes, as a function of the register before.
constexpr Matrix zeros_operator(size_t bytes) {
  Matrix bit{};  // one zero bit
  bit[0] = kPoly;
  for (size_t n = 1; n < 32; ++n) bit[n] = uint32_t{1} << (n - 1);
  Matrix op = compose(bit, bit);  // 2 bits
  op = compose(op, op);           // 4 bits
  op = compose(op, op);           // one byte
  Matrix result{};
  for (size_t n = 0; n < 32; ++n) result[n] = uint32_t{1} << n;
  for (; bytes != 0; bytes >>= 1) {
    if (bytes & 1) result = compose(op, result);
    op = compose(op, op);
  }
  return result;
}

using ShiftTables = std::array<std::array<uint32_t, 256>, 4>;

constexpr ShiftTables make_shift_tables(size_t bytes) {
  const Matrix m = zeros_operator(bytes);
  ShiftTables t{};
  for (size_t k = 0; k < 4; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = apply(m, b << (8 * k));
  return t;
}
constexpr ShiftTables kShiftStride = make_shift_tables(kStride);

inline uint32_t shift_stride(uint32_t reg) {
  return kShiftStride[0][reg & 0xff] ^ kShiftStride[1][(reg >> 8) & 0xff] ^ kShiftStride[2][(reg >> 16) & 0xff] ^
         kShiftStride[3][reg >> 24];
}

inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

[[gnu::target("sse4.2")]] uint32_t update_hardware(uint32_t reg, const uint8_t* p, size_t n) {
  while (n >= 3 * kStride) {
    uint64_t c0 = reg, c1 = 0, c2 = 0;
    for (size_t i = 0; i < kStride; i += 8) {
      c0 = _mm_crc32_u64(c0, load64(p + i));
      c1 = _mm_crc32_u64(c1, load64(p + kStride + i));
      c2 = _mm_crc32_u64(c2, load64(p + 2 * kStride + i));
    }
    reg = shift_stride(static_cast<uint32_t>(c0)) ^ static_cast<uint32_t>(c1);
    reg = shift_stride(reg) ^ static_cast<uint32_t>(c2);
    p += 3 * kStride;
    n -= 3 * kStride;
  }
  uint64_t c = reg;
  for (; n >= 8; p += 8, n -= 8) c = _mm_crc32_u64(c, load64(p));
  reg = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) reg = _mm_crc32_u8(reg, *p);
  return reg;
}

const bool kHaveHardware = __builtin_cpu_supports("sse4.2");

#else

const bool kHaveHardware = false;
uint32_t update_hardware(uint32_t reg, const uint8_t* p, size_t n) { return update_portable(reg, p, n); }

#endif

}  // namespace

uint32_t crc32c(std::span<const uint8_t> data) {
  const uint32_t reg = kHaveHardware ? update_hardware(~0u, data.data(), data.size())
                                     : update_portable(~0u, data.data(), data.size());
  return ~reg;
}

uint32_t crc32c_portable(std::span<const uint8_t> data) { return ~update_portable(~0u, data.data(), data.size()); }

bool crc32c_hardware() { return kHaveHardware; }

}  // namespace metaroce::transport
