// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include <gtest/gtest.h>

#include <set>

#include "port_allocator.h"

namespace metaroce::daemon {
namespace {

PortsConfig small_pools() {
  PortsConfig c;
  c.home_first = wire::kHomePortBase;
  c.home_count = 8;
  c.source_first = 20000;
  c.source_count = 64 * 6;
  c.block_size = 64;
  return c;
}

// Every port of every lease, with its owner; fails on a port leased twice.
void expect_disjoint(const std::vector<PortLease>& leases, const PortsConfig& c) {
  std::set<uint32_t> homes, sources;
  for (const PortLease& l : leases) {
    EXPECT_TRUE(homes.insert(l.home_port).second) << "home port " << l.home_port << " leased twice";
    EXPECT_GE(l.home_port, c.home_first);
    EXPECT_LT(l.home_port, c.home_first + c.home_count);
    for (uint32_t p = l.block_first; p < uint32_t{l.block_first} + l.block_size; ++p)
      EXPECT_TRUE(sources.insert(p).second) << "source port " << p << " leased twice";
    EXPECT_GE(l.block_first, c.source_first);
    EXPECT_LE(uint32_t{l.block_first} + l.block_size, uint32_t{c.source_first} + c.source_count);
  }
}

TEST(PortAllocator, LeasesNeverOverlapAndExhaustCleanly) {
  const PortsConfig c = small_pools();
  PortAllocator a(c);
  std::vector<PortLease> got;
  std::string error;
  for (uint64_t owner = 1; owner <= 6; ++owner) {
    auto l = a.allocate(owner, error);
    ASSERT_TRUE(l) << error;
    EXPECT_EQ(l->owner, owner);
    EXPECT_EQ(l->block_size, 64);
    got.push_back(*l);
  }
  expect_disjoint(got, c);
  expect_disjoint(a.leases(), c);
  EXPECT_EQ(a.leases().size(), 6u);
  // Six blocks only: the seventh lease fails and takes no home port with it.
  EXPECT_FALSE(a.allocate(7, error));
  EXPECT_NE(error.find("source-port block"), std::string::npos);
  EXPECT_EQ(a.free_home_ports(), 2u);
  EXPECT_EQ(a.free_blocks(), 0u);
}

TEST(PortAllocator, HomePortsExhaust) {
  PortsConfig c = small_pools();
  c.home_count = 2;
  PortAllocator a(c);
  std::string error;
  ASSERT_TRUE(a.allocate(1, error));
  ASSERT_TRUE(a.allocate(2, error));
  EXPECT_FALSE(a.allocate(3, error));
  EXPECT_NE(error.find("home port"), std::string::npos);
  EXPECT_EQ(a.free_blocks(), 4u);
}

TEST(PortAllocator, ReleaseReturnsEveryLeaseOfTheOwnerOnly) {
  const PortsConfig c = small_pools();
  PortAllocator a(c);
  std::string error;
  ASSERT_TRUE(a.allocate(1, error));
  ASSERT_TRUE(a.allocate(2, error));
  ASSERT_TRUE(a.allocate(1, error));
  EXPECT_EQ(a.release_owner(1), 2u);
  EXPECT_EQ(a.release_owner(1), 0u);
  const auto left = a.leases();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].owner, 2u);
  EXPECT_EQ(a.free_home_ports(), 7u);
  EXPECT_EQ(a.free_blocks(), 5u);
}

TEST(PortAllocator, ReleasedPortsAreHandedOutLast) {
  const PortsConfig c = small_pools();
  PortAllocator a(c);
  std::string error;
  const auto first = a.allocate(1, error);
  ASSERT_TRUE(first);
  a.release_owner(1);
  const auto second = a.allocate(2, error);
  ASSERT_TRUE(second);
  EXPECT_NE(second->home_port, first->home_port);
  EXPECT_NE(second->block_first, first->block_first);
}

TEST(PortAllocator, ChurnKeepsLeasesDisjoint) {
  const PortsConfig c = small_pools();
  PortAllocator a(c);
  std::string error;
  uint64_t x = 12345;
  for (int i = 0; i < 2000; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t owner = 1 + (x >> 60) % 9;
    if ((x >> 40) % 3 == 0) a.release_owner(owner);
    else (void)a.allocate(owner, error);
    expect_disjoint(a.leases(), c);
    ASSERT_EQ(a.free_home_ports() + a.leases().size(), c.home_count);
  }
}

TEST(PortAllocator, AKernelChosenHomePortIsReservedOnceAndSkippedByLaterLeases) {
  const PortsConfig c = small_pools();
  PortAllocator a(c);
  std::string error;
  const uint16_t kernel_port = static_cast<uint16_t>(c.home_first + 1);
  const auto pinned = a.allocate(1, error, kernel_port);
  ASSERT_TRUE(pinned) << error;
  EXPECT_EQ(pinned->home_port, kernel_port);
  EXPECT_FALSE(a.allocate(2, error, kernel_port));
  EXPECT_NE(error.find("leased to another context"), std::string::npos) << error;
  EXPECT_FALSE(a.allocate(2, error, static_cast<uint16_t>(c.home_first + c.home_count)));
  EXPECT_NE(error.find("outside the home ports"), std::string::npos) << error;
  EXPECT_FALSE(a.allocate(2, error, static_cast<uint16_t>(c.home_first - 1)));
  // Free leases go around it.
  std::vector<PortLease> all{*pinned};
  while (const auto l = a.allocate(3, error)) all.push_back(*l);
  EXPECT_EQ(all.size(), std::min<size_t>(c.home_count, c.source_count / c.block_size));
  expect_disjoint(all, c);
  a.release_owner(1);
  EXPECT_TRUE(a.allocate(4, error, kernel_port)) << error;
}

TEST(PortAllocator, ARestartedContextGetsItsOwnBlockBackOnlyIfItIsAFreeBlockOfThePool) {
  const PortsConfig c = small_pools();
  PortAllocator a(c);
  std::string error;
  const uint16_t second_block = static_cast<uint16_t>(c.source_first + c.block_size);
  const auto l = a.allocate(1, error, static_cast<uint16_t>(c.home_first + 3), second_block);
  ASSERT_TRUE(l) << error;
  EXPECT_EQ(l->block_first, second_block);
  EXPECT_EQ(l->home_port, c.home_first + 3);
  EXPECT_FALSE(a.allocate(2, error, std::nullopt, second_block));
  EXPECT_NE(error.find("leased to another context"), std::string::npos) << error;
  EXPECT_FALSE(a.allocate(2, error, std::nullopt, static_cast<uint16_t>(second_block + 1)));
  EXPECT_NE(error.find("not a block"), std::string::npos) << error;
  EXPECT_FALSE(a.allocate(2, error, std::nullopt, static_cast<uint16_t>(c.source_first - c.block_size)));
  EXPECT_FALSE(a.allocate(2, error, std::nullopt, static_cast<uint16_t>(c.source_first + c.source_count)));
  // A refused block leaves no home port taken.
  EXPECT_EQ(a.free_home_ports(), size_t{c.home_count} - 1);
  // Others are handed out around it.
  std::vector<PortLease> all{*l};
  while (const auto next = a.allocate(3, error)) all.push_back(*next);
  expect_disjoint(all, c);
}

TEST(PortAllocator, OwnerZeroIsRefused) {
  PortAllocator a(small_pools());
  std::string error;
  EXPECT_FALSE(a.allocate(0, error));
}

}  // namespace
}  // namespace metaroce::daemon
