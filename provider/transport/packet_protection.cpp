// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "packet_protection.h"

#include <endian.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <cstring>

#include "crc32c.h"

namespace metaroce::transport {
namespace {

constexpr char kTrafficInfo[] = "metaroce v2 traffic";

bool run_hkdf(int mode, std::span<const uint8_t> salt, std::span<const uint8_t> key, std::span<const uint8_t> info,
              std::span<uint8_t> out) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (!kdf) return false;
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (!ctx) return false;
  char digest[] = "SHA256";
  OSSL_PARAM params[6];
  size_t n = 0;
  params[n++] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
  params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(key.data()), key.size());
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<uint8_t*>(info.data()), info.size());
  if (!salt.empty())
    params[n++] =
        OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<uint8_t*>(salt.data()), salt.size());
  params[n] = OSSL_PARAM_construct_end();
  const bool ok = EVP_KDF_derive(ctx, out.data(), out.size(), params) == 1;
  EVP_KDF_CTX_free(ctx);
  return ok;
}

}  // namespace

void seal_integrity(std::span<uint8_t> datagram, size_t length) {
  const uint32_t crc = htobe32(crc32c(datagram.first(length)));
  std::memcpy(datagram.data() + length, &crc, sizeof crc);
}

bool check_integrity(std::span<const uint8_t> datagram) {
  if (datagram.size() < wire::kIntegrityTrailerBytes) return false;
  const size_t length = datagram.size() - wire::kIntegrityTrailerBytes;
  uint32_t carried;
  std::memcpy(&carried, datagram.data() + length, sizeof carried);
  return be32toh(carried) == crc32c(datagram.first(length));
}

bool hkdf_sha256(std::span<const uint8_t> salt, std::span<const uint8_t> ikm, std::span<const uint8_t> info,
                 std::span<uint8_t> out) {
  return run_hkdf(EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND, salt, ikm, info, out);
}

bool hkdf_sha256_expand(std::span<const uint8_t> prk, std::span<const uint8_t> info, std::span<uint8_t> out) {
  return run_hkdf(EVP_KDF_HKDF_MODE_EXPAND_ONLY, {}, prk, info, out);
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
  // On a library failure the key is all zeroes and the nonce salt too, and
  // nothing this key seals opens at a peer that derived its key correctly.
  if (!hkdf_sha256_expand(pair_key, info, material.bytes)) material.bytes.fill(0);
  return material;
}

TrafficKey::TrafficKey(const PairKey& pair_key, uint8_t sender_role, uint32_t sender_epoch, uint32_t receiver_epoch)
    : TrafficKey(derive(pair_key, sender_role, sender_epoch, receiver_epoch), sender_epoch, receiver_epoch) {}

TrafficKey::TrafficKey(const Material& material, uint32_t sender_epoch, uint32_t receiver_epoch)
    : cipher_(std::span(material.bytes).first<Aes128Gcm::kKeyBytes>()),
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
  if (datagram.size() < length + wire::kAuthTagBytes) return false;
  const size_t aad = security == wire::Security::Encrypt ? wire::kCommonHeaderBytes : length;
  return cipher_.seal(nonce(packet_number), datagram.first(aad), datagram.subspan(aad, length - aad),
                      datagram.subspan(length).first<wire::kAuthTagBytes>());
}

bool TrafficKey::open(wire::Security security, std::span<const uint8_t> datagram, uint64_t packet_number,
                      std::span<uint8_t> plain) {
  if (datagram.size() < wire::kCommonHeaderBytes + wire::kAuthTagBytes) return false;
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
