// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "crc32c.h"

#include <isa-l/crc.h>

namespace metaroce::transport {

uint32_t crc32c(std::span<const uint8_t> data) {
  // ISA-L takes and returns the raw register: the initial value goes in,
  // the final inversion is ours. Datagrams are far below INT_MAX bytes.
  return ~crc32_iscsi(const_cast<unsigned char*>(data.data()), static_cast<int>(data.size()), 0xFFFFFFFFu);
}

uint32_t crc32c(std::span<const uint8_t> first, std::span<const uint8_t> second) {
  const uint32_t partial =
      crc32_iscsi(const_cast<unsigned char*>(first.data()), static_cast<int>(first.size()), 0xFFFFFFFFu);
  return ~crc32_iscsi(const_cast<unsigned char*>(second.data()), static_cast<int>(second.size()), partial);
}

}  // namespace metaroce::transport
