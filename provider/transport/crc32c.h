// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// CRC32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and
// final XOR 0xFFFFFFFF), the CRC of iSCSI and ext4 and Linux's crc32c():
// crc32c(data) == ~crc32c(~0, data, len) in the kernel. Computed by Intel's
// ISA-L (libisal, Debian's isa-l), which picks PCLMULQDQ/VPCLMULQDQ folding
// or the SSE4.2 instruction at run time; Debian 12 has no other CRC32C
// library (Google's crc32c is not in bookworm).
#pragma once

#include <cstdint>
#include <span>

namespace metaroce::transport {

uint32_t crc32c(std::span<const uint8_t> data);
// The CRC32C of `first` followed by `second`.
uint32_t crc32c(std::span<const uint8_t> first, std::span<const uint8_t> second);

}  // namespace metaroce::transport
