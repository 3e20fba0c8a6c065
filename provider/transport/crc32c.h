// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// CRC32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and
// final XOR 0xFFFFFFFF), the CRC of iSCSI and ext4 and Linux's crc32c():
// crc32c(data) == ~crc32c(~0, data, len) in the kernel. The SSE4.2 crc32
// instruction computes it where the CPU has one (three interleaved streams,
// so that its latency does not bound the rate); a table does it elsewhere.
// Debian 12 packages no CRC32C library (Google's crc32c is not in bookworm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace metaroce::transport {

uint32_t crc32c(std::span<const uint8_t> data);
// The same on the portable path, for tests.
uint32_t crc32c_portable(std::span<const uint8_t> data);
// Whether crc32c() uses the CPU instruction.
bool crc32c_hardware();

}  // namespace metaroce::transport
