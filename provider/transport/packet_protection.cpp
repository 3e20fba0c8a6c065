// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "packet_protection.h"

#include <endian.h>
#include <openssl/core_names.h>
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

TrafficKey::TrafficKey(const PairKey& pair_key, uint8_t sender_role, uint32_t sender_epoch, uint32_t receiver_epoch)
    : sender_epoch_(sender_epoch), receiver_epoch_(receiver_epoch) {
  uint8_t info[sizeof kTrafficInfo - 1 + 1 + 4 + 4];
  std::memcpy(info, kTrafficInfo, sizeof kTrafficInfo - 1);
  size_t at = sizeof kTrafficInfo - 1;
  info[at++] = sender_role;
  const uint32_t se = htobe32(sender_epoch), re = htobe32(receiver_epoch);
  std::memcpy(info + at, &se, 4);
  std::memcpy(info + at + 4, &re, 4);
  uint8_t material[16 + 4];
  if (!hkdf_sha256_expand(pair_key, info, material)) return;
  std::memcpy(salt_.data(), material + 16, salt_.size());
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  if (ctx && EVP_CipherInit_ex(ctx, EVP_aes_128_gcm(), nullptr, material, nullptr, -1) == 1) {
    ctx_ = ctx;
  } else {
    EVP_CIPHER_CTX_free(ctx);
  }
  OPENSSL_cleanse(material, sizeof material);
}

TrafficKey::~TrafficKey() { EVP_CIPHER_CTX_free(ctx_); }

void TrafficKey::nonce(uint64_t packet_number, uint8_t out[12]) const {
  std::memcpy(out, salt_.data(), 4);
  const uint64_t be = htobe64(packet_number);
  std::memcpy(out + 4, &be, 8);
}

bool TrafficKey::seal(wire::Security security, std::span<uint8_t> datagram, size_t length, uint64_t packet_number) {
  if (!ctx_ || datagram.size() < length + wire::kAuthTagBytes) return false;
  uint8_t iv[12];
  nonce(packet_number, iv);
  const size_t aad = security == wire::Security::Encrypt ? wire::kCommonHeaderBytes : length;
  int n = 0;
  if (EVP_EncryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv) != 1) return false;
  if (EVP_EncryptUpdate(ctx_, nullptr, &n, datagram.data(), static_cast<int>(aad)) != 1) return false;
  if (aad < length &&
      EVP_EncryptUpdate(ctx_, datagram.data() + aad, &n, datagram.data() + aad, static_cast<int>(length - aad)) != 1)
    return false;
  if (EVP_EncryptFinal_ex(ctx_, datagram.data() + length, &n) != 1) return false;
  return EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, wire::kAuthTagBytes, datagram.data() + length) == 1;
}

bool TrafficKey::open(wire::Security security, std::span<const uint8_t> datagram, uint64_t packet_number,
                      std::span<uint8_t> plain) {
  if (!ctx_ || datagram.size() < wire::kCommonHeaderBytes + wire::kAuthTagBytes) return false;
  const size_t length = datagram.size() - wire::kAuthTagBytes;
  if (security == wire::Security::Encrypt && plain.size() < length) return false;
  uint8_t iv[12];
  nonce(packet_number, iv);
  const size_t aad = security == wire::Security::Encrypt ? wire::kCommonHeaderBytes : length;
  int n = 0;
  if (EVP_DecryptInit_ex(ctx_, nullptr, nullptr, nullptr, iv) != 1) return false;
  if (EVP_DecryptUpdate(ctx_, nullptr, &n, datagram.data(), static_cast<int>(aad)) != 1) return false;
  if (aad < length &&
      EVP_DecryptUpdate(ctx_, plain.data() + aad, &n, datagram.data() + aad, static_cast<int>(length - aad)) != 1)
    return false;
  uint8_t tag[wire::kAuthTagBytes];
  std::memcpy(tag, datagram.data() + length, sizeof tag);
  if (EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, sizeof tag, tag) != 1) return false;
  uint8_t none[16];
  if (EVP_DecryptFinal_ex(ctx_, none, &n) != 1) return false;
  // The header of an encrypted datagram travels in the clear.
  if (security == wire::Security::Encrypt) std::memcpy(plain.data(), datagram.data(), aad);
  return true;
}

}  // namespace metaroce::transport
