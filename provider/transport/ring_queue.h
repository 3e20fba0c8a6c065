// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A FIFO over a ring of reused slots: the engine's work, completion and
// transmit queues. push_front lets an urgent entry jump the queue.
//
// Why not std::deque: a deque allocates a block whenever its back crosses
// into a new one and frees one whenever its front leaves one, so a queue
// that only ever holds a few entries still calls malloc and free every few
// operations, forever. The application's thread runs the engine in
// ibv_post_send, ibv_post_recv and ibv_poll_cq, and applications call those
// where malloc is not safe: perftest's duration mode (-D) reads /proc/stat
// with fopen in its SIGALRM handler, which deadlocks on the allocator's lock
// if the signal lands while the interrupted thread is inside malloc. Like a
// NIC's work queue, this ring allocates only to grow past its largest
// occupancy so far, never in a steady state.
//
// A popped slot is not destroyed: it keeps its value (and any storage it
// owns, such as a vector's buffer) until a push reuses it. push_back assigns
// into the slot; back_slot()/commit_back() let a caller fill it in place
// and keep that storage.
#pragma once

#include <cstddef>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

namespace metaroce::transport {

template <class T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  T& operator[](size_t i) { return slots_[(head_ + i) & mask()]; }
  const T& operator[](size_t i) const { return slots_[(head_ + i) & mask()]; }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  void push_back(const T& value) {
    back_slot() = value;
    ++size_;
  }
  void push_back(T&& value) {
    back_slot() = std::move(value);
    ++size_;
  }
  // The slot push_back fills next, holding whatever it held when last
  // popped (or a default T): fill it, then commit_back() to append it.
  T& back_slot() {
    if (size_ == slots_.size()) grow();
    return slots_[(head_ + size_) & mask()];
  }
  void commit_back() { ++size_; }
  void push_front(T&& value) {
    if (size_ == slots_.size()) grow();
    head_ = (head_ - 1) & mask();
    slots_[head_] = std::move(value);
    ++size_;
  }

  void pop_front() {
    head_ = (head_ + 1) & mask();
    --size_;
  }
  void clear() {
    head_ = 0;
    size_ = 0;
  }

  template <class Q, class V>
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::remove_const_t<V>;
    using difference_type = std::ptrdiff_t;
    using pointer = V*;
    using reference = V&;
    Iterator() = default;
    Iterator(Q* q, size_t i) : q_(q), i_(i) {}
    V& operator*() const { return (*q_)[i_]; }
    V* operator->() const { return &(*q_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator before = *this;
      ++i_;
      return before;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }
    bool operator!=(const Iterator& o) const { return i_ != o.i_; }

   private:
    Q* q_ = nullptr;
    size_t i_ = 0;
  };
  using iterator = Iterator<RingQueue, T>;
  using const_iterator = Iterator<const RingQueue, const T>;
  iterator begin() { return {this, 0}; }
  iterator end() { return {this, size_}; }
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, size_}; }

 private:
  size_t mask() const { return slots_.size() - 1; }
  // Doubles the ring (a power of two), the entries moved to its start in
  // order.
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;  // size 0 or a power of two
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace metaroce::transport
