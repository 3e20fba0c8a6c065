// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Aes128Gcm over Intel's ipsec-mb (aes_gcm.h). Its direct GCM functions keep
// no state in the manager, so one manager, set up once for the CPU it runs
// on, serves every thread.
#include <intel-ipsec-mb.h>
#include <openssl/crypto.h>

#include "aes_gcm.h"

namespace metaroce::transport {
namespace {

IMB_MGR* manager() {
  static IMB_MGR* const mgr = [] {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (!m) return m;
    IMB_ARCH arch;
    init_mb_mgr_auto(m, &arch);
    if (imb_get_errno(m) != 0) {
      free_mb_mgr(m);
      return static_cast<IMB_MGR*>(nullptr);
    }
    return m;
  }();
  return mgr;
}

}  // namespace

struct Aes128Gcm::State {
  IMB_MGR* mgr;
  // The header aligns the key only when LINUX is defined; its code needs
  // 16-byte alignment at least and prefers a cache line.
  alignas(64) gcm_key_data key;
};

Aes128Gcm::Aes128Gcm(std::span<const uint8_t, kKeyBytes> key) {
  IMB_MGR* mgr = manager();
  if (!mgr) return;
  state_ = std::make_unique<State>();
  state_->mgr = mgr;
  IMB_AES128_GCM_PRE(mgr, key.data(), &state_->key);
}

Aes128Gcm::~Aes128Gcm() {
  if (state_) OPENSSL_cleanse(&state_->key, sizeof state_->key);
}

bool Aes128Gcm::seal(std::span<const uint8_t, kNonceBytes> nonce, std::span<const uint8_t> aad, std::span<uint8_t> text,
                     std::span<uint8_t, kTagBytes> tag) {
  if (!state_) return false;
  gcm_context_data ctx;
  IMB_AES128_GCM_ENC(state_->mgr, &state_->key, &ctx, text.data(), text.data(), text.size(), nonce.data(), aad.data(),
                     aad.size(), tag.data(), tag.size());
  return true;
}

bool Aes128Gcm::open(std::span<const uint8_t, kNonceBytes> nonce, std::span<const uint8_t> aad,
                     std::span<const uint8_t> text, std::span<uint8_t> plain, std::span<const uint8_t, kTagBytes> tag) {
  if (!state_ || plain.size() < text.size()) return false;
  gcm_context_data ctx;
  uint8_t computed[kTagBytes];
  IMB_AES128_GCM_DEC(state_->mgr, &state_->key, &ctx, plain.data(), text.data(), text.size(), nonce.data(), aad.data(),
                     aad.size(), computed, sizeof computed);
  return CRYPTO_memcmp(computed, tag.data(), kTagBytes) == 0;
}

}  // namespace metaroce::transport
