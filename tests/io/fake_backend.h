// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// An IoBackend for runtime tests that touches no socket: receives are what
// the test scripts, sends are captured, and wait() sleeps until the runtime
// kicks (its eventfd) or the test wakes it, never on a timer. With a
// FakeClock, the progress loop then runs exactly the iterations the test
// causes, and a test asserts counts and deadlines instead of durations.
//
// The runtime's progress thread owns the backend; the test holds the
// FakeIo it reports to, which outlives the backend.
#pragma once

#include <netinet/in.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "io_backend.h"

namespace metaroce::io::test {

class FakeIo {
 public:
  FakeIo();
  ~FakeIo();
  FakeIo(const FakeIo&) = delete;
  FakeIo& operator=(const FakeIo&) = delete;

  // A RuntimeOptions::make_backend that makes backends reporting here.
  BackendFactory factory();

  // --- the test's side ---
  // Queues a datagram for the next receive() and wakes the backend.
  void deliver(std::vector<uint8_t> datagram, const sockaddr_storage& from);
  // Queues several, all for the same receive().
  void deliver_all(std::vector<std::vector<uint8_t>> datagrams, const sockaddr_storage& from);
  // Ends the current sleep as the kernel's timeout would (after the test
  // moved the clock to its deadline).
  void wake();
  // Waits until the backend is asleep in its `n`th sleeping wait() (1 = the
  // first) and returns that wait's deadline; false if it is not within the
  // safety timeout (a hung runtime, not a slow one) or the backend is gone.
  bool await_sleep(uint64_t n, uint64_t& deadline);
  uint64_t sleeps() const;
  // Waits until wait() has returned at least `n` times without sleeping (a
  // poll); false after the safety timeout.
  bool await_polls(uint64_t n);
  // Kicks (the runtime's eventfd writes) the backend has consumed.
  uint64_t kicks() const;
  // Datagrams handed to the kernel (send() queues them, as io_uring does,
  // until the next wait(), submit_sends() or drain_sends()), in order.
  std::vector<std::vector<uint8_t>> sent() const;
  // While held, wait() and submit_sends() leave queued sends queued: the
  // kernel reads them only at drain_sends() or when their batch is reused.
  void hold_submissions(bool hold);
  // drain_sends() ran, and whether the runtime's stop flag was set then.
  bool drained() const;
  bool stopped_when_drained() const;
  // The backend was destroyed (the progress thread has let go of it).
  bool destroyed() const;

 private:
  class Backend;
  friend class Backend;
  struct Received {
    std::vector<uint8_t> bytes;
    sockaddr_storage from{};
  };

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int wake_fd_ = -1;  // eventfd: deliver() and wake() end a sleep through it
  std::deque<Received> inbox_;
  uint64_t sleeps_ = 0;
  uint64_t polls_ = 0;
  uint64_t kicks_ = 0;
  bool asleep_ = false;
  uint64_t deadline_ = 0;
  std::vector<std::vector<uint8_t>> sent_;
  bool hold_submissions_ = false;
  bool drained_ = false;
  bool stopped_when_drained_ = false;
  bool destroyed_ = false;
};

}  // namespace metaroce::io::test
