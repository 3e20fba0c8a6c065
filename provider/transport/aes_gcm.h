// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// AES-128-GCM (NIST SP 800-38D) with a 12-byte nonce and a 16-byte tag, the
// cipher of the authenticate and encrypt modes (packet_protection.h). The
// build picks one of two implementations of the same function:
// - aes_gcm_ipsec_mb.cpp, Intel's ipsec-mb library, where Debian packages it
//   (amd64). Its VAES/VPCLMULQDQ code with one call per datagram costs about
//   75 ns for a 1,428-byte datagram on the reference machine, where OpenSSL
//   3.0's EVP interface costs 300-420 ns, mostly per-call overhead;
// - aes_gcm_openssl.cpp, OpenSSL's libcrypto, elsewhere.
// The unit tests check either against OpenSSL's EVP interface, byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace metaroce::transport {

class Aes128Gcm {
 public:
  static constexpr size_t kKeyBytes = 16;
  static constexpr size_t kNonceBytes = 12;
  static constexpr size_t kTagBytes = 16;

  explicit Aes128Gcm(std::span<const uint8_t, kKeyBytes> key);
  ~Aes128Gcm();
  Aes128Gcm(const Aes128Gcm&) = delete;
  Aes128Gcm& operator=(const Aes128Gcm&) = delete;

  // False when the library could not set the key up; seal and open then fail.
  bool valid() const { return state_ != nullptr; }

  // Authenticates `aad` and `text`, encrypting `text` in place, and writes
  // the tag. False on a library failure.
  bool seal(std::span<const uint8_t, kNonceBytes> nonce, std::span<const uint8_t> aad, std::span<uint8_t> text,
            std::span<uint8_t, kTagBytes> tag);
  // Decrypts `text` into `plain` (as long as `text`) and checks the tag over
  // `aad` and `text`. True only for a genuine tag; `plain` is then the
  // plaintext, and otherwise holds nothing to use.
  bool open(std::span<const uint8_t, kNonceBytes> nonce, std::span<const uint8_t> aad, std::span<const uint8_t> text,
            std::span<uint8_t> plain, std::span<const uint8_t, kTagBytes> tag);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace metaroce::transport
