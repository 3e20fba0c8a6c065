// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Aes128Gcm over OpenSSL's EVP interface (aes_gcm.h), for builds without
// ipsec-mb.
#include <openssl/evp.h>

#include <algorithm>

#include "aes_gcm.h"

namespace metaroce::transport {

struct Aes128Gcm::State {
  EVP_CIPHER_CTX* encrypt = nullptr;
  EVP_CIPHER_CTX* decrypt = nullptr;
  ~State() {
    EVP_CIPHER_CTX_free(encrypt);
    EVP_CIPHER_CTX_free(decrypt);
  }
};

Aes128Gcm::Aes128Gcm(std::span<const uint8_t, kKeyBytes> key) {
  auto state = std::make_unique<State>();
  state->encrypt = EVP_CIPHER_CTX_new();
  state->decrypt = EVP_CIPHER_CTX_new();
  if (!state->encrypt || !state->decrypt ||
      EVP_EncryptInit_ex(state->encrypt, EVP_aes_128_gcm(), nullptr, key.data(), nullptr) != 1 ||
      EVP_DecryptInit_ex(state->decrypt, EVP_aes_128_gcm(), nullptr, key.data(), nullptr) != 1)
    return;
  state_ = std::move(state);
}

Aes128Gcm::~Aes128Gcm() = default;

bool Aes128Gcm::seal(std::span<const uint8_t, kNonceBytes> nonce, std::span<const uint8_t> aad, std::span<uint8_t> text,
                     std::span<uint8_t, kTagBytes> tag) {
  if (!state_) return false;
  EVP_CIPHER_CTX* ctx = state_->encrypt;
  int n = 0;
  if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) != 1) return false;
  if (!aad.empty() && EVP_EncryptUpdate(ctx, nullptr, &n, aad.data(), static_cast<int>(aad.size())) != 1) return false;
  if (!text.empty() && EVP_EncryptUpdate(ctx, text.data(), &n, text.data(), static_cast<int>(text.size())) != 1)
    return false;
  uint8_t none[16];
  if (EVP_EncryptFinal_ex(ctx, none, &n) != 1) return false;
  return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag.size()), tag.data()) == 1;
}

bool Aes128Gcm::open(std::span<const uint8_t, kNonceBytes> nonce, std::span<const uint8_t> aad,
                     std::span<const uint8_t> text, std::span<uint8_t> plain, std::span<const uint8_t, kTagBytes> tag) {
  if (!state_ || plain.size() < text.size()) return false;
  EVP_CIPHER_CTX* ctx = state_->decrypt;
  int n = 0;
  if (EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) != 1) return false;
  if (!aad.empty() && EVP_DecryptUpdate(ctx, nullptr, &n, aad.data(), static_cast<int>(aad.size())) != 1) return false;
  if (!text.empty() && EVP_DecryptUpdate(ctx, plain.data(), &n, text.data(), static_cast<int>(text.size())) != 1)
    return false;
  uint8_t expected[kTagBytes];
  std::copy(tag.begin(), tag.end(), expected);
  if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, sizeof expected, expected) != 1) return false;
  uint8_t none[16];
  return EVP_DecryptFinal_ex(ctx, none, &n) == 1;
}

}  // namespace metaroce::transport
