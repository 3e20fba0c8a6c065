// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Unit tests of the memory-region table and the scatter/gather helpers
// (provider/transport/memory.h).
#include "memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <span>
#include <vector>

namespace metaroce::transport {
namespace {

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kAllAccess = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

uint64_t addr_of(const uint8_t* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

// ---------------------------------------------------------------------------
// Registration, lookup, deregistration, keys.

TEST(MemoryRegistry, RegisterFindDeregister) {
  MemoryRegistry reg;
  EXPECT_EQ(reg.size(), 0u);

  const auto a = reg.register_region(3, 0x1000, 4096, kAccessLocalWrite | kAccessRemoteRead);
  const auto b = reg.register_region(4, 0x9000, 100, 0);
  ASSERT_TRUE(a.has_value());
  ASSERT_TRUE(b.has_value());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(reg.size(), 2u);

  const MemoryRegion* ra = reg.find(*a);
  ASSERT_NE(ra, nullptr);
  EXPECT_EQ(ra->addr, 0x1000u);
  EXPECT_EQ(ra->length, 4096u);
  EXPECT_EQ(ra->key, *a);
  EXPECT_EQ(ra->access, kAccessLocalWrite | kAccessRemoteRead);
  EXPECT_EQ(ra->pd, 3u);

  const MemoryRegion* rb = reg.find(*b);
  ASSERT_NE(rb, nullptr);
  EXPECT_EQ(rb->addr, 0x9000u);
  EXPECT_EQ(rb->length, 100u);
  EXPECT_EQ(rb->access, 0u);
  EXPECT_EQ(rb->pd, 4u);

  EXPECT_TRUE(reg.deregister(*a));
  EXPECT_EQ(reg.size(), 1u);
  EXPECT_EQ(reg.find(*a), nullptr);
  EXPECT_NE(reg.find(*b), nullptr) << "deregistering one region must not affect another";
  EXPECT_FALSE(reg.deregister(*a)) << "double deregister must fail";
  EXPECT_EQ(reg.size(), 1u);

  EXPECT_TRUE(reg.deregister(*b));
  EXPECT_EQ(reg.size(), 0u);
  EXPECT_EQ(reg.find(*b), nullptr);
}

// A check that passed may be reused while the epoch stays (queue_pair.h,
// source_readable): only a deregistration can make it fail.
TEST(MemoryRegistry, TheEpochAdvancesWithEveryDeregistrationAndNothingElse) {
  MemoryRegistry reg;
  const uint64_t start = reg.epoch();
  const auto a = reg.register_region(1, 0x1000, 64, kAllAccess);
  const auto b = reg.register_region(1, 0x2000, 64, kAllAccess);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(reg.epoch(), start) << "a registration only adds access";
  EXPECT_FALSE(reg.deregister(*a ^ 1));
  EXPECT_EQ(reg.epoch(), start) << "a deregistration that fails changes nothing";
  ASSERT_TRUE(reg.deregister(*a));
  EXPECT_EQ(reg.epoch(), start + 1);
  ASSERT_TRUE(reg.deregister(*b));
  EXPECT_EQ(reg.epoch(), start + 2);
}

TEST(MemoryRegistry, KeyZeroIsNeverValid) {
  MemoryRegistry reg;
  std::set<uint32_t> keys;
  for (int i = 0; i < 1000; ++i) {
    const auto key = reg.register_region(1, 0x1000, 64, kAllAccess);
    ASSERT_TRUE(key.has_value());
    EXPECT_NE(*key, 0u);
    EXPECT_TRUE(keys.insert(*key).second) << "keys of live regions must be distinct";
  }
  EXPECT_EQ(reg.size(), 1000u);
  EXPECT_EQ(reg.find(0), nullptr);
  EXPECT_FALSE(reg.deregister(0));
  EXPECT_EQ(reg.check_remote(0, 1, 0x1000, 8, kAccessRemoteRead), AccessCheck::NoSuchKey);
  EXPECT_EQ(reg.check_local(0, 1, 0x1000, 8, false), AccessCheck::NoSuchKey);
  EXPECT_EQ(reg.size(), 1000u);
}

TEST(MemoryRegistry, UnknownKeysAreRejected) {
  MemoryRegistry reg;
  const auto key = reg.register_region(1, 0x1000, 64, kAllAccess);
  ASSERT_TRUE(key.has_value());
  for (uint32_t probe : {*key + 1, *key - 1, *key ^ 0x100u, *key + 0x10000u, 0xFFFFFFFFu}) {
    EXPECT_EQ(reg.find(probe), nullptr) << probe;
    EXPECT_EQ(reg.check_remote(probe, 1, 0x1000, 8, kAccessRemoteRead), AccessCheck::NoSuchKey) << probe;
  }
}

TEST(MemoryRegistry, StaleKeyOfReusedSlotIsRejected) {
  MemoryRegistry reg;
  // A neighbour keeps the table non-trivial.
  const auto other = reg.register_region(1, 0x8000, 64, kAllAccess);
  ASSERT_TRUE(other.has_value());

  const auto first = reg.register_region(1, 0x1000, 4096, kAllAccess);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(reg.deregister(*first));
  const auto second = reg.register_region(1, 0x1000, 4096, kAllAccess);
  ASSERT_TRUE(second.has_value());

  ASSERT_NE(*first, *second);

  EXPECT_EQ(reg.find(*first), nullptr);
  EXPECT_EQ(reg.check_remote(*first, 1, 0x1000, 8, kAccessRemoteRead), AccessCheck::NoSuchKey);
  EXPECT_EQ(reg.check_local(*first, 1, 0x1000, 8, true), AccessCheck::NoSuchKey);
  EXPECT_FALSE(reg.deregister(*first)) << "a stale key must not remove the new region";
  ASSERT_NE(reg.find(*second), nullptr);
  EXPECT_EQ(reg.check_remote(*second, 1, 0x1000, 8, kAccessRemoteRead), AccessCheck::Ok);
  EXPECT_EQ(reg.size(), 2u);
}

TEST(MemoryRegistry, RepeatedReuseNeverRevivesAnOldKey) {
  MemoryRegistry reg;
  std::vector<uint32_t> old_keys;
  // A slot's tag takes 4096 values and a freed slot waits for 64 others, so
  // no key comes back within this many cycles.
  for (int cycle = 0; cycle < 3000; ++cycle) {
    const auto key = reg.register_region(2, 0x4000, 256, kAccessLocalWrite);
    ASSERT_TRUE(key.has_value());
    for (uint32_t stale : old_keys) {
      ASSERT_NE(stale, *key) << "cycle " << cycle;
      ASSERT_EQ(reg.find(stale), nullptr) << "cycle " << cycle;
    }
    ASSERT_NE(reg.find(*key), nullptr);
    ASSERT_TRUE(reg.deregister(*key));
    old_keys.push_back(*key);
  }
  EXPECT_EQ(reg.size(), 0u);
}

TEST(MemoryRegistry, RefusesWrappingRanges) {
  MemoryRegistry reg;
  EXPECT_FALSE(reg.register_region(1, kMax64, 2, kAllAccess).has_value());
  EXPECT_FALSE(reg.register_region(1, kMax64 - 4, 16, kAllAccess).has_value());
  EXPECT_FALSE(reg.register_region(1, 0x1000, kMax64, kAllAccess).has_value());
  EXPECT_EQ(reg.size(), 0u);
  // Ending exactly at the top of the address space (exclusive end kMax64) is fine.
  const auto top = reg.register_region(1, kMax64 - 16, 16, kAllAccess);
  ASSERT_TRUE(top.has_value());
  EXPECT_EQ(reg.size(), 1u);
}

TEST(MemoryRegistry, RefusesUnknownAccessBits) {
  MemoryRegistry reg;
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, 16).has_value());
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, kAllAccess | 16).has_value());
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, kAccessLocalWrite | 0x80000000u).has_value());
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, 0xFFFFFFFFu).has_value());
  EXPECT_EQ(reg.size(), 0u);
  // Every combination of the known bits that obeys the verbs rule is accepted.
  for (uint32_t access = 0; access <= kAllAccess; ++access) {
    const bool needs_local_write = (access & (kAccessRemoteWrite | kAccessRemoteAtomic)) != 0;
    const bool valid = !needs_local_write || (access & kAccessLocalWrite) != 0;
    EXPECT_EQ(reg.register_region(1, 0x1000, 64, access).has_value(), valid) << access;
  }
}

TEST(MemoryRegistry, RemoteWriteOrAtomicRequiresLocalWrite) {
  MemoryRegistry reg;
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, kAccessRemoteWrite).has_value());
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, kAccessRemoteAtomic).has_value());
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, kAccessRemoteWrite | kAccessRemoteRead).has_value());
  EXPECT_FALSE(reg.register_region(1, 0x1000, 64, kAccessRemoteAtomic | kAccessRemoteRead).has_value());
  EXPECT_EQ(reg.size(), 0u);

  EXPECT_TRUE(reg.register_region(1, 0x1000, 64, kAccessRemoteWrite | kAccessLocalWrite).has_value());
  EXPECT_TRUE(reg.register_region(1, 0x1000, 64, kAccessRemoteAtomic | kAccessLocalWrite).has_value());
  EXPECT_TRUE(reg.register_region(1, 0x1000, 64, kAccessRemoteRead).has_value());
  EXPECT_TRUE(reg.register_region(1, 0x1000, 64, 0).has_value());
  EXPECT_EQ(reg.size(), 4u);
}

// ---------------------------------------------------------------------------
// check_remote / check_local / check_sges.

class RemoteCheck : public ::testing::Test {
 protected:
  static constexpr uint32_t kPd = 7;
  static constexpr uint64_t kBase = 0x10000;  // 8-byte aligned
  static constexpr uint64_t kLen = 4096;

  void SetUp() override {
    const auto key = reg_.register_region(kPd, kBase, kLen, kAllAccess);
    ASSERT_TRUE(key.has_value());
    key_ = *key;
  }

  AccessCheck remote(uint64_t addr, uint64_t length, uint32_t required) const {
    return reg_.check_remote(key_, kPd, addr, length, required);
  }

  MemoryRegistry reg_;
  uint32_t key_ = 0;
};

TEST_F(RemoteCheck, WrongProtectionDomain) {
  EXPECT_EQ(reg_.check_remote(key_, kPd + 1, kBase, 8, kAccessRemoteRead), AccessCheck::WrongProtectionDomain);
  EXPECT_EQ(reg_.check_remote(key_, 0, kBase, 8, kAccessRemoteWrite), AccessCheck::WrongProtectionDomain);
  EXPECT_EQ(reg_.check_local(key_, kPd + 1, kBase, 8, false), AccessCheck::WrongProtectionDomain);
  EXPECT_EQ(remote(kBase, 8, kAccessRemoteRead), AccessCheck::Ok);
}

TEST_F(RemoteCheck, MissingPermissionPerKind) {
  struct Case {
    uint32_t access;
    bool write, read, atomic;
  };
  const Case cases[] = {
      {kAccessLocalWrite, false, false, false},
      {kAccessLocalWrite | kAccessRemoteWrite, true, false, false},
      {kAccessRemoteRead, false, true, false},
      {kAccessLocalWrite | kAccessRemoteRead, false, true, false},
      {kAccessLocalWrite | kAccessRemoteAtomic, false, false, true},
      {kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead, true, true, false},
      {kAllAccess, true, true, true},
  };
  for (const Case& c : cases) {
    MemoryRegistry reg;
    const auto key = reg.register_region(kPd, kBase, kLen, c.access);
    ASSERT_TRUE(key.has_value()) << c.access;
    auto expect = [](bool allowed) { return allowed ? AccessCheck::Ok : AccessCheck::NoPermission; };
    EXPECT_EQ(reg.check_remote(*key, kPd, kBase, 8, kAccessRemoteWrite), expect(c.write)) << c.access;
    EXPECT_EQ(reg.check_remote(*key, kPd, kBase, 8, kAccessRemoteRead), expect(c.read)) << c.access;
    EXPECT_EQ(reg.check_remote(*key, kPd, kBase, 8, kAccessRemoteAtomic), expect(c.atomic)) << c.access;
    // Asking for two permissions needs both.
    EXPECT_EQ(reg.check_remote(*key, kPd, kBase, 8, kAccessRemoteWrite | kAccessRemoteRead), expect(c.write && c.read))
        << c.access;
  }
}

TEST_F(RemoteCheck, ExactFitAndInteriorRangesAreOk) {
  EXPECT_EQ(remote(kBase, kLen, kAccessRemoteWrite), AccessCheck::Ok);
  EXPECT_EQ(remote(kBase, 1, kAccessRemoteRead), AccessCheck::Ok);
  EXPECT_EQ(remote(kBase + kLen - 1, 1, kAccessRemoteRead), AccessCheck::Ok);
  EXPECT_EQ(remote(kBase + 100, kLen - 100, kAccessRemoteWrite), AccessCheck::Ok);
  EXPECT_EQ(remote(kBase + kLen - 8, 8, kAccessRemoteAtomic), AccessCheck::Ok);
}

TEST_F(RemoteCheck, OneBytePastTheEnd) {
  EXPECT_EQ(remote(kBase, kLen + 1, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kBase + 1, kLen, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kBase + kLen, 1, kAccessRemoteWrite), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kBase + kLen - 7, 8, kAccessRemoteRead), AccessCheck::OutOfBounds);
}

TEST_F(RemoteCheck, AddressBelowTheStart) {
  EXPECT_EQ(remote(kBase - 1, 1, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kBase - 1, 2, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kBase - 8, 8, kAccessRemoteAtomic), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(0, kBase + kLen, kAccessRemoteWrite), AccessCheck::OutOfBounds);
}

TEST_F(RemoteCheck, LengthOverflowIsOutOfBounds) {
  // addr + length wraps round to an address inside the region: a naive
  // `addr + length <= end` comparison would let these through.
  EXPECT_EQ(remote(kBase + 8, kMax64 - 7, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kBase, kMax64, kAccessRemoteWrite), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kMax64 - 3, 8, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kMax64, kMax64, kAccessRemoteRead), AccessCheck::OutOfBounds);

  // A region near the top of the address space.
  MemoryRegistry reg;
  const uint64_t top = kMax64 - 8191;
  const auto key = reg.register_region(kPd, top, 4096, kAllAccess);
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(reg.check_remote(*key, kPd, top, 4096, kAccessRemoteRead), AccessCheck::Ok);
  EXPECT_EQ(reg.check_remote(*key, kPd, top + 4000, kMax64, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(reg.check_remote(*key, kPd, top + 4000, kMax64 - 4000, kAccessRemoteRead), AccessCheck::OutOfBounds);
  EXPECT_EQ(reg.check_local(*key, kPd, top + 1, kMax64, false), AccessCheck::OutOfBounds);
}

TEST_F(RemoteCheck, ZeroLengthAtTheEnd) {
  EXPECT_EQ(remote(kBase + kLen, 0, kAccessRemoteWrite), AccessCheck::Ok);
  EXPECT_EQ(remote(kBase, 0, kAccessRemoteRead), AccessCheck::Ok);
  EXPECT_EQ(remote(kBase + kLen + 1, 0, kAccessRemoteWrite), AccessCheck::OutOfBounds);
  EXPECT_EQ(remote(kBase - 1, 0, kAccessRemoteWrite), AccessCheck::OutOfBounds);
}

TEST_F(RemoteCheck, MisalignedAtomic) {
  for (uint64_t off = 0; off < 16; ++off) {
    const AccessCheck want = off % 8 == 0 ? AccessCheck::Ok : AccessCheck::Misaligned;
    EXPECT_EQ(remote(kBase + off, 8, kAccessRemoteAtomic), want) << off;
    // Alignment is an atomics-only rule.
    EXPECT_EQ(remote(kBase + off, 8, kAccessRemoteWrite), AccessCheck::Ok) << off;
    EXPECT_EQ(remote(kBase + off, 8, kAccessRemoteRead), AccessCheck::Ok) << off;
  }
}

TEST(MemoryRegistry, CheckLocalNeedWrite) {
  MemoryRegistry reg;
  const auto writable = reg.register_region(1, 0x1000, 256, kAccessLocalWrite);
  const auto readonly = reg.register_region(1, 0x2000, 256, kAccessRemoteRead);
  const auto plain = reg.register_region(1, 0x3000, 256, 0);
  ASSERT_TRUE(writable && readonly && plain);

  EXPECT_EQ(reg.check_local(*writable, 1, 0x1000, 256, true), AccessCheck::Ok);
  EXPECT_EQ(reg.check_local(*writable, 1, 0x1000, 256, false), AccessCheck::Ok);
  EXPECT_EQ(reg.check_local(*readonly, 1, 0x2000, 256, true), AccessCheck::NoPermission);
  EXPECT_EQ(reg.check_local(*readonly, 1, 0x2000, 256, false), AccessCheck::Ok);
  EXPECT_EQ(reg.check_local(*plain, 1, 0x3000, 16, true), AccessCheck::NoPermission);
  EXPECT_EQ(reg.check_local(*plain, 1, 0x3000, 16, false), AccessCheck::Ok);

  EXPECT_EQ(reg.check_local(*writable, 1, 0x1000, 257, true), AccessCheck::OutOfBounds);
  EXPECT_EQ(reg.check_local(*writable, 1, 0xFFF, 1, false), AccessCheck::OutOfBounds);
  EXPECT_EQ(reg.check_local(*writable, 1, 0x1100, 0, true), AccessCheck::Ok);
  EXPECT_EQ(reg.check_local(*writable, 2, 0x1000, 8, true), AccessCheck::WrongProtectionDomain);
}

TEST(MemoryRegistry, CheckSgesReportsTheBadOne) {
  MemoryRegistry reg;
  const auto a = reg.register_region(1, 0x1000, 256, kAccessLocalWrite);
  const auto b = reg.register_region(1, 0x2000, 256, kAccessLocalWrite);
  const auto ro = reg.register_region(1, 0x3000, 256, kAccessRemoteRead);
  const auto other_pd = reg.register_region(2, 0x4000, 256, kAccessLocalWrite);
  ASSERT_TRUE(a && b && ro && other_pd);

  const Sge good[] = {{0x1000, 100, *a}, {0x2000, 256, *b}, {0x1080, 128, *a}};
  EXPECT_EQ(reg.check_sges(good, 1, true), AccessCheck::Ok);
  EXPECT_EQ(reg.check_sges(good, 1, false), AccessCheck::Ok);
  EXPECT_EQ(reg.check_sges(std::span<const Sge>{}, 1, true), AccessCheck::Ok);

  const Sge bad_key[] = {{0x1000, 100, *a}, {0x2000, 16, *b + 1}, {0x1080, 128, *a}};
  EXPECT_EQ(reg.check_sges(bad_key, 1, false), AccessCheck::NoSuchKey);

  const Sge bad_bounds[] = {{0x1000, 100, *a}, {0x2000, 16, *b}, {0x1080, 129, *a}};
  EXPECT_EQ(reg.check_sges(bad_bounds, 1, false), AccessCheck::OutOfBounds);

  const Sge bad_pd[] = {{0x4000, 8, *other_pd}, {0x1000, 8, *a}};
  EXPECT_EQ(reg.check_sges(bad_pd, 1, false), AccessCheck::WrongProtectionDomain);
  const Sge bad_pd_last[] = {{0x1000, 8, *a}, {0x2000, 8, *b}, {0x4000, 8, *other_pd}};
  EXPECT_EQ(reg.check_sges(bad_pd_last, 1, false), AccessCheck::WrongProtectionDomain);

  const Sge with_readonly[] = {{0x1000, 8, *a}, {0x3000, 8, *ro}};
  EXPECT_EQ(reg.check_sges(with_readonly, 1, false), AccessCheck::Ok);
  EXPECT_EQ(reg.check_sges(with_readonly, 1, true), AccessCheck::NoPermission);

  // An empty SGE in the middle does not end the walk: the bad one after it counts.
  const Sge empty_then_bad[] = {{0x1000, 8, *a}, {0x2000, 0, *b}, {0x2100, 512, *b}};
  EXPECT_EQ(reg.check_sges(empty_then_bad, 1, false), AccessCheck::OutOfBounds);
}

// ---------------------------------------------------------------------------
// scatter_to_sges / gather_from_sges on real buffers.

// Three buffers of uneven sizes, each with guard bytes either side; the SGEs
// cover only the middle. `logical` is the flat view the SGE list describes.
class SgeBuffers : public ::testing::Test {
 protected:
  static constexpr size_t kGuard = 16;
  static constexpr uint8_t kFill = 0xEE;
  static constexpr size_t kLens[] = {5, 7, 11};
  static constexpr size_t kTotal = 5 + 7 + 11;

  void SetUp() override { reset(); }

  void reset() {
    for (size_t i = 0; i < 3; ++i) {
      bufs_[i].assign(kLens[i] + 2 * kGuard, kFill);
      sges_[i] = Sge{addr_of(bufs_[i].data() + kGuard), static_cast<uint32_t>(kLens[i]), 1};
    }
  }

  // The bytes the SGE list covers, concatenated.
  std::vector<uint8_t> logical() const {
    std::vector<uint8_t> out;
    for (size_t i = 0; i < 3; ++i)
      out.insert(out.end(), bufs_[i].begin() + kGuard, bufs_[i].begin() + kGuard + kLens[i]);
    return out;
  }

  bool guards_intact() const {
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < kGuard; ++j) {
        if (bufs_[i][j] != kFill) return false;
        if (bufs_[i][kGuard + kLens[i] + j] != kFill) return false;
      }
    }
    return true;
  }

  std::vector<uint8_t> bufs_[3];
  Sge sges_[3];
};

TEST_F(SgeBuffers, TotalLength) {
  EXPECT_EQ(sge_total_length(sges_), kTotal);
  EXPECT_EQ(sge_total_length(std::span<const Sge>{}), 0u);
}

TEST_F(SgeBuffers, ScatterAcrossBoundariesMatchesFlatModel) {
  // Every (offset, length) that fits, including ones starting or ending
  // exactly on an SGE boundary and ones spanning all three.
  for (size_t offset = 0; offset <= kTotal; ++offset) {
    for (size_t len = 0; offset + len <= kTotal; ++len) {
      reset();
      std::vector<uint8_t> data(len);
      for (size_t i = 0; i < len; ++i) data[i] = static_cast<uint8_t>(1 + i + 31 * offset);

      ASSERT_TRUE(scatter_to_sges(sges_, offset, data)) << offset << "+" << len;

      std::vector<uint8_t> want(kTotal, kFill);
      for (size_t i = 0; i < len; ++i) want[offset + i] = data[i];
      ASSERT_EQ(logical(), want) << offset << "+" << len;
      ASSERT_TRUE(guards_intact()) << offset << "+" << len;
    }
  }
}

TEST_F(SgeBuffers, GatherAcrossBoundariesMatchesFlatModel) {
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < kLens[i]; ++j) bufs_[i][kGuard + j] = static_cast<uint8_t>(10 * i + j);
  const std::vector<uint8_t> flat = logical();

  for (size_t offset = 0; offset <= kTotal; ++offset) {
    for (size_t len = 0; offset + len <= kTotal; ++len) {
      std::vector<uint8_t> out(len + 2 * kGuard, 0x55);
      ASSERT_TRUE(gather_from_sges(sges_, offset, std::span<uint8_t>(out).subspan(kGuard, len)))
          << offset << "+" << len;
      for (size_t k = 0; k < len; ++k) ASSERT_EQ(out[kGuard + k], flat[offset + k]) << offset;
      for (size_t k = 0; k < kGuard; ++k) {
        ASSERT_EQ(out[k], 0x55);
        ASSERT_EQ(out[kGuard + len + k], 0x55);
      }
    }
  }
  EXPECT_EQ(logical(), flat) << "gather must not modify the source";
}

TEST_F(SgeBuffers, SpecificCrossBoundaryScatter) {
  // Offset 3 of [5,7,11]: 2 bytes in the first SGE, all 7 of the second, 3 of the third.
  const uint8_t data[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(scatter_to_sges(sges_, 3, data));
  const std::vector<uint8_t> b0(bufs_[0].begin() + kGuard, bufs_[0].begin() + kGuard + 5);
  const std::vector<uint8_t> b1(bufs_[1].begin() + kGuard, bufs_[1].begin() + kGuard + 7);
  const std::vector<uint8_t> b2(bufs_[2].begin() + kGuard, bufs_[2].begin() + kGuard + 11);
  EXPECT_EQ(b0, (std::vector<uint8_t>{kFill, kFill, kFill, 1, 2}));
  EXPECT_EQ(b1, (std::vector<uint8_t>{3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(b2, (std::vector<uint8_t>{10, 11, 12, kFill, kFill, kFill, kFill, kFill, kFill, kFill, kFill}));
  EXPECT_TRUE(guards_intact());
}

TEST_F(SgeBuffers, ScatterRefusesOversizeAndCopiesNothing) {
  const std::vector<uint8_t> pristine = logical();
  std::vector<uint8_t> data(kTotal + 1, 0x42);
  EXPECT_FALSE(scatter_to_sges(sges_, 0, data));
  EXPECT_EQ(logical(), pristine);

  data.assign(10, 0x42);
  EXPECT_FALSE(scatter_to_sges(sges_, kTotal - 9, data));  // one byte too many
  EXPECT_EQ(logical(), pristine);
  EXPECT_FALSE(scatter_to_sges(sges_, kTotal + 1, std::span<const uint8_t>{}));
  EXPECT_FALSE(scatter_to_sges(sges_, kMax64, std::span<const uint8_t>(data).first(2)));
  EXPECT_FALSE(scatter_to_sges(sges_, kMax64 - 4, data));
  EXPECT_EQ(logical(), pristine);
  EXPECT_TRUE(guards_intact());

  // Zero bytes exactly at the end fit.
  EXPECT_TRUE(scatter_to_sges(sges_, kTotal, std::span<const uint8_t>{}));
  EXPECT_EQ(logical(), pristine);
}

TEST_F(SgeBuffers, GatherRefusesOversizeAndCopiesNothing) {
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = 0; j < kLens[i]; ++j) bufs_[i][kGuard + j] = static_cast<uint8_t>(j + 1);
  std::vector<uint8_t> out(kTotal + 1, 0x77);
  EXPECT_FALSE(gather_from_sges(sges_, 0, out));
  EXPECT_EQ(out, std::vector<uint8_t>(kTotal + 1, 0x77));
  EXPECT_FALSE(gather_from_sges(sges_, 1, std::span<uint8_t>(out).first(kTotal)));
  EXPECT_FALSE(gather_from_sges(sges_, kMax64, std::span<uint8_t>(out).first(3)));
  EXPECT_EQ(out, std::vector<uint8_t>(kTotal + 1, 0x77));
}

TEST(SgeHelpers, ZeroLengthSgeInTheMiddleIsSkipped) {
  std::vector<uint8_t> a(4, 0), b(4, 0);
  const Sge sges[] = {{addr_of(a.data()), 4, 1}, {0, 0, 0}, {addr_of(b.data()), 4, 1}};
  const uint8_t data[] = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(scatter_to_sges(sges, 1, data));
  EXPECT_EQ(a, (std::vector<uint8_t>{0, 1, 2, 3}));
  EXPECT_EQ(b, (std::vector<uint8_t>{4, 5, 6, 0}));

  uint8_t out[8] = {};
  ASSERT_TRUE(gather_from_sges(sges, 0, out));
  const uint8_t want[8] = {0, 1, 2, 3, 4, 5, 6, 0};
  EXPECT_EQ(std::memcmp(out, want, sizeof(out)), 0);
}

}  // namespace
}  // namespace metaroce::transport
