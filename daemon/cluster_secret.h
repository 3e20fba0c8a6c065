// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The cluster secret of the authenticate and encrypt modes and the pair keys
// metaroced derives from it for its providers (docs/spec.md section 9.3).
// The secret never leaves the daemon; a provider receives only the keys of
// the endpoint pairs it is one end of.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "packet_protection.h"

namespace metaroce::daemon {

inline constexpr size_t kMinSecretBytes = 32;
inline constexpr size_t kMaxSecretBytes = 64;

// Reads the secret: hex digits (whitespace ignored) for 32 to 64 bytes, in
// a regular file owned by the daemon's effective user and neither readable
// nor writable by group or others. Nothing with `error` otherwise.
std::optional<std::vector<uint8_t>> load_cluster_secret(const std::string& path, std::string& error);

struct PairKeyResult {
  transport::PairKey key{};
  uint8_t role = 0;  // of the `local` end: 0 when its name sorts first
};

// The pair key of the endpoints (local_ip, local_port) and (peer_ip,
// peer_port); IPs are IPv4 or IPv6 literals. Nothing with `error` for a bad
// address or a library failure.
std::optional<PairKeyResult> derive_pair_key(const std::vector<uint8_t>& secret, const std::string& local_ip,
                                             uint16_t local_port, const std::string& peer_ip, uint16_t peer_port,
                                             std::string& error);

std::string to_hex(const transport::PairKey& key);
// The inverse; false unless `hex` is exactly 64 hex digits.
bool from_hex(const std::string& hex, transport::PairKey& key);

}  // namespace metaroce::daemon
