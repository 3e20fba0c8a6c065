// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Aes128Gcm (aes_gcm.h), built on either library (aes_gcm_test and
// aes_gcm_openssl_test), against AES-128-GCM as OpenSSL's EVP interface
// computes it: the same ciphertext and tag at every length the wire can
// carry, and no tag accepted after any change to what it covers.
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <vector>

#include "byte_pattern.h"
#include "aes_gcm.h"

namespace metaroce::transport {
namespace {

using Bytes = std::vector<uint8_t>;

using metaroce::test::byte_pattern;

struct Sealed {
  Bytes text;
  Bytes tag;
};

Sealed openssl_seal(const Bytes& key, const Bytes& nonce, const Bytes& aad, const Bytes& plain) {
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  Sealed out{Bytes(plain.size()), Bytes(Aes128Gcm::kTagBytes)};
  int n = 0;
  EXPECT_EQ(EVP_EncryptInit_ex(ctx.get(), EVP_aes_128_gcm(), nullptr, key.data(), nonce.data()), 1);
  if (!aad.empty()) {
    EXPECT_EQ(EVP_EncryptUpdate(ctx.get(), nullptr, &n, aad.data(), static_cast<int>(aad.size())), 1);
  }
  if (!plain.empty()) {
    EXPECT_EQ(EVP_EncryptUpdate(ctx.get(), out.text.data(), &n, plain.data(), static_cast<int>(plain.size())), 1);
  }
  uint8_t none[16];
  EXPECT_EQ(EVP_EncryptFinal_ex(ctx.get(), none, &n), 1);
  EXPECT_EQ(EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, 16, out.tag.data()), 1);
  return out;
}

// The lengths around every block and unroll boundary a GCM implementation
// may have, up to past the largest datagram (a 4,096-byte payload).
const std::vector<size_t> kLengths = {0,   1,   15,  16,  17,  31,  32,  33,  63,   64,   65,   127,  128,
                                      129, 255, 256, 257, 511, 512, 513, 767, 1024, 1400, 1428, 4096, 4200};

TEST(Aes128Gcm, SameCiphertextAndTagAsOpenSsl) {
  const Bytes key = byte_pattern(Aes128Gcm::kKeyBytes, 1);
  Aes128Gcm gcm(std::span<const uint8_t, 16>(key.data(), 16));
  ASSERT_TRUE(gcm.valid());
  uint32_t seed = 10;
  for (const size_t aad_len : kLengths) {
    for (const size_t text_len : {size_t{0}, size_t{1}, size_t{16}, size_t{100}, size_t{1400}, size_t{4096}}) {
      const Bytes nonce = byte_pattern(Aes128Gcm::kNonceBytes, ++seed);
      const Bytes aad = byte_pattern(aad_len, ++seed);
      const Bytes plain = byte_pattern(text_len, ++seed);
      const Sealed want = openssl_seal(key, nonce, aad, plain);
      Bytes text = plain, tag(Aes128Gcm::kTagBytes);
      ASSERT_TRUE(
          gcm.seal(std::span<const uint8_t, 12>(nonce.data(), 12), aad, text, std::span<uint8_t, 16>(tag.data(), 16)));
      ASSERT_EQ(text, want.text) << "aad " << aad_len << " text " << text_len;
      ASSERT_EQ(tag, want.tag) << "aad " << aad_len << " text " << text_len;
      Bytes back(text_len);
      ASSERT_TRUE(gcm.open(std::span<const uint8_t, 12>(nonce.data(), 12), aad, text, back,
                           std::span<const uint8_t, 16>(tag.data(), 16)));
      ASSERT_EQ(back, plain);
    }
  }
}

TEST(Aes128Gcm, OpenRefusesAnyChangeToNonceAadTextOrTag) {
  const Bytes key = byte_pattern(16, 2), nonce = byte_pattern(12, 3), aad = byte_pattern(28, 4),
              plain = byte_pattern(300, 5);
  Aes128Gcm gcm(std::span<const uint8_t, 16>(key.data(), 16));
  Bytes text = plain, tag(16), back(plain.size());
  ASSERT_TRUE(
      gcm.seal(std::span<const uint8_t, 12>(nonce.data(), 12), aad, text, std::span<uint8_t, 16>(tag.data(), 16)));
  const auto opens = [&](const Bytes& n, const Bytes& a, const Bytes& t, const Bytes& g) {
    return gcm.open(std::span<const uint8_t, 12>(n.data(), 12), a, t, back, std::span<const uint8_t, 16>(g.data(), 16));
  };
  ASSERT_TRUE(opens(nonce, aad, text, tag));
  for (const Bytes* field : {&nonce, &aad, static_cast<const Bytes*>(&text), static_cast<const Bytes*>(&tag)}) {
    for (size_t bit = 0; bit < field->size() * 8; bit += 7) {
      Bytes flipped = *field;
      flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      ASSERT_FALSE(opens(field == &nonce ? flipped : nonce, field == &aad ? flipped : aad,
                         field == &text ? flipped : text, field == &tag ? flipped : tag))
          << "bit " << bit;
    }
  }
  const Bytes other_key = byte_pattern(16, 6);
  Aes128Gcm other(std::span<const uint8_t, 16>(other_key.data(), 16));
  EXPECT_FALSE(other.open(std::span<const uint8_t, 12>(nonce.data(), 12), aad, text, back,
                          std::span<const uint8_t, 16>(tag.data(), 16)));
}

}  // namespace
}  // namespace metaroce::transport
