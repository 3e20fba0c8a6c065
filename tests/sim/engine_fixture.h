// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What the simulator's engine tests share: the protection domain and access
// flags they register memory with, a buffer's address as the engine takes it,
// and a fixture of two engine hosts on a TwoHostRig with a connected QP pair
// and a registered buffer on each side.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "rig.h"

namespace metaroce::sim::testing {

inline constexpr uint32_t kPd = 1;
inline constexpr uint32_t kAllAccess = transport::kAccessLocalWrite | transport::kAccessRemoteWrite |
                                       transport::kAccessRemoteRead | transport::kAccessRemoteAtomic;

inline uint64_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

class TwoHostTest : public ::testing::Test {
 protected:
  // The rig of `spec`, a QP pair connected with `config`, and a buffer of
  // `bytes` zeros on each host (abuf_ on A, bbuf_ on B), registered with
  // every access.
  void make_rig(const RigSpec& spec, size_t bytes, const transport::QpConfig& config = {}) {
    rig_ = std::make_unique<TwoHostRig>(spec);
    qp_ = rig_->connect_qps(config, kPd);
    abuf_.assign(bytes, 0);
    bbuf_.assign(bytes, 0);
    akey_ = *a().memory().register_region(kPd, addr(abuf_.data()), abuf_.size(), kAllAccess);
    bkey_ = *b().memory().register_region(kPd, addr(bbuf_.data()), bbuf_.size(), kAllAccess);
  }

  transport::Endpoint& a() { return rig_->a().endpoint(); }
  transport::Endpoint& b() { return rig_->b().endpoint(); }

  std::unique_ptr<TwoHostRig> rig_;
  QpPair qp_;
  std::vector<uint8_t> abuf_, bbuf_;
  uint32_t akey_ = 0, bkey_ = 0;
};

}  // namespace metaroce::sim::testing
