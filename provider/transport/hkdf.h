// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// HKDF-SHA256 (RFC 5869) through OpenSSL's libcrypto: metaroced derives the
// pair keys with it and the providers their traffic keys
// (packet_protection.h). A file of its own so that metaroced, which needs
// nothing else of the engine's crypto, links libcrypto alone.
#pragma once

#include <cstdint>
#include <span>

namespace metaroce::transport {

// Extract(salt, ikm) then Expand(info) into `out`. False on a library
// failure.
bool hkdf_sha256(std::span<const uint8_t> salt, std::span<const uint8_t> ikm, std::span<const uint8_t> info,
                 std::span<uint8_t> out);
// Expand only, with `prk` used as the pseudorandom key as it is.
bool hkdf_sha256_expand(std::span<const uint8_t> prk, std::span<const uint8_t> info, std::span<uint8_t> out);

}  // namespace metaroce::transport
