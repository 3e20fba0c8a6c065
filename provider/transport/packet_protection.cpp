// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "packet_protection.h"

#include <endian.h>
#include <openssl/crypto.h>

#include <cstring>

#include "crc32c.h"
#include "hkdf.h"

namespace metaroce::transport {
namespace {

constexpr char kTrafficInfo[] = "metaroce v2 traffic";

}  // namespace

void seal_integrity(std::span<uint8_t> datagram, size_t head, std::span<const uint8_t> payload) {
  const uint32_t crc = htobe32(crc32c(datagram.first(head), payload));
  std::memcpy(datagram.data() + head, &crc, sizeof crc);
}

bool check_integrity(std::span<const uint8_t> datagram) {
  if (datagram.size() < wire::kIntegrityTrailerBytes) return false;
  const size_t length = datagram.size() - wire::kIntegrityTrailerBytes;
  uint32_t carried;
  std::memcpy(&carried, datagram.data() + length, sizeof carried);
  return be32toh(carried) == crc32c(datagram.first(length));
}

TrafficKey::Material::~Material() { OPENSSL_cleanse(bytes.data(), bytes.size()); }

TrafficKey::Material TrafficKey::derive(const PairKey& pair_key, uint8_t sender_role, uint32_t sender_epoch,
                                        uint32_t receiver_epoch) {
  uint8_t info[sizeof kTrafficInfo - 1 + 1 + 4 + 4];
  std::memcpy(info, kTrafficInfo, sizeof kTrafficInfo - 1);
  size_t at = sizeof kTrafficInfo - 1;
  info[at++] = sender_role;
  const uint32_t se = htobe32(sender_epoch), re = htobe32(receiver_epoch);
  std::memcpy(info + at, &se, 4);
  std::memcpy(info + at + 4, &re, 4);
  Material material;
  material.ok = hkdf_sha256_expand(pair_key, info, material.bytes);
  return material;
}

TrafficKey::TrafficKey(const PairKey& pair_key, uint8_t sender_role, uint32_t sender_epoch, uint32_t receiver_epoch)
    : TrafficKey(derive(pair_key, sender_role, sender_epoch, receiver_epoch), sender_epoch, receiver_epoch) {}

TrafficKey::TrafficKey(const Material& material, uint32_t sender_epoch, uint32_t receiver_epoch)
    : material_ok_(material.ok),
      cipher_(std::span(material.bytes).first<Aes128Gcm::kKeyBytes>()),
      sender_epoch_(sender_epoch),
      receiver_epoch_(receiver_epoch) {
  std::memcpy(salt_.data(), material.bytes.data() + Aes128Gcm::kKeyBytes, salt_.size());
}

std::array<uint8_t, Aes128Gcm::kNonceBytes> TrafficKey::nonce(uint64_t packet_number) const {
  std::array<uint8_t, Aes128Gcm::kNonceBytes> out;
  std::memcpy(out.data(), salt_.data(), salt_.size());
  const uint64_t be = htobe64(packet_number);
  std::memcpy(out.data() + salt_.size(), &be, sizeof be);
  return out;
}

bool TrafficKey::seal(wire::Security security, std::span<uint8_t> datagram, size_t length, uint64_t packet_number) {
  if (!valid() || datagram.size() < length + wire::kAuthTagBytes) return false;
  const size_t aad = security == wire::Security::Encrypt ? wire::kCommonHeaderBytes : length;
  return cipher_.seal(nonce(packet_number), datagram.first(aad), datagram.subspan(aad, length - aad),
                      datagram.subspan(length).first<wire::kAuthTagBytes>());
}

bool TrafficKey::open(wire::Security security, std::span<const uint8_t> datagram, uint64_t packet_number,
                      std::span<uint8_t> plain) {
  if (!valid() || datagram.size() < wire::kCommonHeaderBytes + wire::kAuthTagBytes) return false;
  const size_t length = datagram.size() - wire::kAuthTagBytes;
  const std::span<const uint8_t, wire::kAuthTagBytes> tag = datagram.subspan(length).first<wire::kAuthTagBytes>();
  if (security != wire::Security::Encrypt)
    return cipher_.open(nonce(packet_number), datagram.first(length), {}, {}, tag);
  if (plain.size() < length) return false;
  const size_t aad = wire::kCommonHeaderBytes;
  if (!cipher_.open(nonce(packet_number), datagram.first(aad), datagram.subspan(aad, length - aad),
                    plain.subspan(aad, length - aad), tag))
    return false;
  // The header of an encrypted datagram travels in the clear.
  std::memcpy(plain.data(), datagram.data(), aad);
  return true;
}

}  // namespace metaroce::transport
