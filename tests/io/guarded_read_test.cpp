// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// io::guarded_read, the runtime's reader of registered memory: it copies
// mapped bytes and reports, without faulting, a range the application has
// unmapped.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "guarded_read.h"

namespace metaroce::io {
namespace {

uint64_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(GuardedRead, CopiesMappedBytes) {
  std::vector<uint8_t> src(10'000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7);
  std::vector<uint8_t> dst(src.size(), 0);
  ASSERT_TRUE(guarded_read(dst.data(), addr(src.data()), src.size()));
  EXPECT_EQ(dst, src);
}

TEST(GuardedRead, ReportsUnmappedMemoryInsteadOfFaulting) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* map = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(map);
  std::memset(bytes, 0x5a, 2 * page);
  // The second page goes: a read across the boundary, or inside it, fails.
  ASSERT_EQ(::munmap(bytes + page, page), 0);
  std::vector<uint8_t> dst(page, 0);
  EXPECT_FALSE(guarded_read(dst.data(), addr(bytes + page), 64));
  EXPECT_FALSE(guarded_read(dst.data(), addr(bytes + page - 32), 64));
  EXPECT_TRUE(guarded_read(dst.data(), addr(bytes), 64));
  EXPECT_EQ(dst[0], 0x5a);
  ::munmap(bytes, page);
}

}  // namespace
}  // namespace metaroce::io
