// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The trailer of a v0.2 datagram (docs/spec.md section 9): a CRC32C in
// integrity mode, an AES-128-GCM tag in the authenticate and encrypt modes
// (aes_gcm.h), and the keys behind the tag (hkdf.h). Nothing here does
// I/O.
//
// Keys (section 9.3): metaroced derives, from the cluster secret, one
// 32-byte key per pair of endpoints (IP address and home port at each end)
// and hands it to the two providers concerned; the providers never see the
// secret. Each direction and pair of incarnations then has its own traffic
// key, HKDF-Expand(pair key, "metaroce v2 traffic" | sender role |
// sender epoch | receiver epoch): a restarted endpoint, or one that learns
// its peer's epoch, starts a fresh key and packet numbering, so that no
// (key, nonce) pair ever repeats.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "aes_gcm.h"
#include "hkdf.h"
#include "metaroce/wire.h"

namespace metaroce::transport {

inline constexpr size_t kPairKeyBytes = 32;
using PairKey = std::array<uint8_t, kPairKeyBytes>;

// Writes the integrity trailer (CRC32C of datagram[0, head) then `payload`,
// big-endian) at datagram[head]; the caller has made room for it. A payload
// is given apart when it stays in application memory
// (EndpointConfig::gather_payload).
void seal_integrity(std::span<uint8_t> datagram, size_t head, std::span<const uint8_t> payload = {});
// True when the last 4 bytes are the CRC32C of the rest.
bool check_integrity(std::span<const uint8_t> datagram);

// One direction's AES-128-GCM key with its nonce salt.
class TrafficKey {
 public:
  // HKDF-Expand(pair_key, info) as above. `sender_role` is 0 for the
  // endpoint of the pair that sorts first (metaroced says which), else 1.
  TrafficKey(const PairKey& pair_key, uint8_t sender_role, uint32_t sender_epoch, uint32_t receiver_epoch);
  TrafficKey(const TrafficKey&) = delete;
  TrafficKey& operator=(const TrafficKey&) = delete;

  bool valid() const { return material_ok_ && cipher_.valid(); }
  uint32_t sender_epoch() const { return sender_epoch_; }
  uint32_t receiver_epoch() const { return receiver_epoch_; }

  // Protects datagram[0, length) in place and appends the tag: authenticate
  // mode authenticates every byte; encrypt mode also encrypts the bytes
  // after the common header. Returns false on a library failure.
  bool seal(wire::Security security, std::span<uint8_t> datagram, size_t length, uint64_t packet_number);
  // Checks the tag of `datagram` (trailer included); false when it is not
  // genuine. Encrypt mode writes the datagram without its trailer, decrypted,
  // to `plain` (which must hold datagram.size() - kAuthTagBytes bytes);
  // authenticate mode leaves `plain` alone (decode the datagram itself).
  bool open(wire::Security security, std::span<const uint8_t> datagram, uint64_t packet_number,
            std::span<uint8_t> plain);

 private:
  // HKDF output: the AES key, then the nonce salt.
  struct Material {
    std::array<uint8_t, Aes128Gcm::kKeyBytes + 4> bytes{};
    bool ok = false;  // HKDF succeeded
    ~Material();
  };
  static Material derive(const PairKey& pair_key, uint8_t sender_role, uint32_t sender_epoch, uint32_t receiver_epoch);
  TrafficKey(const Material& material, uint32_t sender_epoch, uint32_t receiver_epoch);
  std::array<uint8_t, Aes128Gcm::kNonceBytes> nonce(uint64_t packet_number) const;

  bool material_ok_;
  Aes128Gcm cipher_;
  std::array<uint8_t, 4> salt_{};
  uint32_t sender_epoch_ = 0;
  uint32_t receiver_epoch_ = 0;
};

}  // namespace metaroce::transport
