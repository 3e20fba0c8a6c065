// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "ring_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace metaroce::transport {
namespace {

// Random pushes and pops, through every growth and wrap-around, keep the
// order and contents a std::deque has.
TEST(RingQueue, BehavesAsAFifo) {
  RingQueue<int> ring;
  std::deque<int> model;
  uint32_t x = 12345;
  for (int step = 0; step < 20000; ++step) {
    x = x * 1103515245 + 12345;
    if ((x >> 16) % 3 != 0 || model.empty()) {
      ring.push_back(step);
      model.push_back(step);
    } else {
      ASSERT_EQ(ring.front(), model.front());
      ring.pop_front();
      model.pop_front();
    }
    ASSERT_EQ(ring.size(), model.size());
    if (!model.empty()) {
      ASSERT_EQ(ring.back(), model.back());
      ASSERT_EQ(ring[model.size() / 2], model[model.size() / 2]);
    }
  }
  std::vector<int> seen(ring.begin(), ring.end());
  EXPECT_EQ(seen, std::vector<int>(model.begin(), model.end()));
  ring.clear();
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.begin(), ring.end());
}

// push_front, mixed with pushes and pops at the other end through every
// growth and wrap-around, puts each entry at the front as a deque does.
TEST(RingQueue, PushFrontJumpsTheQueue) {
  RingQueue<int> ring;
  std::deque<int> model;
  uint32_t x = 777;
  for (int step = 0; step < 20000; ++step) {
    x = x * 1103515245 + 12345;
    const uint32_t choice = (x >> 16) % 4;
    if (choice == 0) {
      ring.push_front(int{step});
      model.push_front(step);
    } else if (choice == 3 && !model.empty()) {
      ASSERT_EQ(ring.front(), model.front());
      ring.pop_front();
      model.pop_front();
    } else {
      ring.push_back(step);
      model.push_back(step);
    }
    ASSERT_EQ(ring.size(), model.size());
    if (!model.empty()) {
      ASSERT_EQ(ring.front(), model.front());
      ASSERT_EQ(ring.back(), model.back());
    }
  }
  std::vector<int> seen(ring.begin(), ring.end());
  EXPECT_EQ(seen, std::vector<int>(model.begin(), model.end()));
}

// A slot filled in place is appended only by commit_back, and a popped
// slot comes back with the storage it owned.
TEST(RingQueue, SlotsAreFilledInPlaceAndReused) {
  RingQueue<std::vector<int>> ring;
  std::vector<int>& slot = ring.back_slot();
  slot.assign(100, 7);
  EXPECT_TRUE(ring.empty());  // not committed
  ring.commit_back();
  ASSERT_EQ(ring.size(), 1u);
  const int* storage = ring.front().data();
  ring.pop_front();
  // Seven more pushes wrap the ring of eight back to that slot.
  for (int i = 0; i < 7; ++i) {
    ring.back_slot().clear();
    ring.commit_back();
    ring.pop_front();
  }
  std::vector<int>& again = ring.back_slot();
  EXPECT_EQ(again.data(), storage);
  EXPECT_GE(again.capacity(), 100u);
}

}  // namespace
}  // namespace metaroce::transport
