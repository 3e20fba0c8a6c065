// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The runtime's progress loop on a FakeClock and a fake backend
// (fake_backend.h): when it sleeps, until when, how often it wakes, what a
// scripted receive does, and how it stops. Nothing here depends on real
// time: each step waits for the backend to be asleep again, and time moves
// only when the test moves it, to the deadline the runtime asked for.
// (runtime_test.cpp runs the real backends over loopback.)
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fake_backend.h"
#include "fake_clock.h"
#include "metaroce/wire.h"
#include "runtime.h"

namespace metaroce::io {
namespace {

using metaroce::test::FakeClock;
using test::FakeIo;
using transport::Endpoint;
using transport::Time;

sockaddr_storage loopback(uint16_t port) {
  sockaddr_storage s{};
  auto& v4 = reinterpret_cast<sockaddr_in&>(s);
  v4.sin_family = AF_INET;
  v4.sin_port = htons(port);
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return s;
}

struct Rig {
  std::shared_ptr<FakeClock> clock = std::make_shared<FakeClock>();
  FakeIo io;  // outlives the runtime, whose backend reports to it
  std::unique_ptr<Runtime> runtime;
  uint64_t sleeps = 0;  // sleeps awaited so far

  explicit Rig(Time busy_poll_ns = 0) {
    RuntimeOptions o;
    o.busy_poll_ns = busy_poll_ns;
    o.local_address = "127.0.0.1";
    o.endpoint.paths = 4;
    o.clock = clock;
    o.make_backend = io.factory();
    // The scripted backend is what these tests observe, so every datagram
    // goes through it (posting-thread sends have their own tests, over real
    // sockets, in runtime_test.cpp).
    o.inline_transmit = false;
    std::string error;
    runtime = Runtime::create(o, error);
    EXPECT_NE(runtime, nullptr) << error;
  }
  ~Rig() { runtime.reset(); }

  // Waits for the next sleep; its deadline (0 when the loop did not sleep again).
  Time next_sleep() {
    Time deadline = 0;
    EXPECT_TRUE(io.await_sleep(++sleeps, deadline)) << "sleep " << sleeps << " never came";
    return deadline;
  }
};

transport::QpConfig qp_config() {
  transport::QpConfig c;
  c.timeout_ns = 10'000'000;
  c.retry_cnt = 3;
  return c;
}

// A QP connected to a peer that never answers, with one WRITE from `buffer`
// posted: its CQ and the buffer's memory key.
struct SilentWrite {
  uint32_t cq;
  uint32_t key;
};
SilentWrite write_to_silent_peer(Runtime& runtime, std::vector<uint8_t>& buffer) {
  const transport::PeerId peer = runtime.peer_for(loopback(9));
  return runtime.with_engine([&](Endpoint& e, Time) {
    const uint32_t cq = e.create_cq(16);
    const uint32_t qp = e.create_qp(1, cq, cq, qp_config());
    const auto key = e.memory().register_region(1, reinterpret_cast<uintptr_t>(buffer.data()), buffer.size(),
                                                transport::kAccessLocalWrite);
    EXPECT_TRUE(key.has_value());
    EXPECT_EQ(e.connect_qp(qp, peer, 1, qp_config()), transport::PostResult::Ok);
    transport::SendWr wr;
    wr.opcode = transport::WrOpcode::RdmaWrite;
    wr.signaled = true;
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(buffer.data()), static_cast<uint32_t>(buffer.size()), key.value_or(0)};
    wr.remote_addr = 0x1000;
    wr.rkey = 1;
    EXPECT_EQ(e.post_send(qp, wr), transport::PostResult::Ok);
    return SilentWrite{cq, key.value_or(0)};
  });
}

TEST(IoRuntimeLoop, IdleRuntimeSleepsWithoutDeadlineAndOnlyWorkWakesIt) {
  Rig rig;
  ASSERT_NE(rig.runtime, nullptr);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);  // idle: no timer to wake for
  // Calls that make nothing due (a query, an empty poll) leave it asleep:
  // the test's own wake-up then finds no kick consumed with it.
  for (int i = 0; i < 5; ++i) rig.runtime->with_engine([](Endpoint& e, Time) { return e.next_wakeup(); });
  rig.io.wake();
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  EXPECT_EQ(rig.io.kicks(), 0u);
  EXPECT_EQ(rig.runtime->stats().progress_wakeups, 1u);
  // A post makes a transmission due: one kick, and the loop sends it.
  std::vector<uint8_t> buffer(1024, 0x5a);
  write_to_silent_peer(*rig.runtime, buffer);
  EXPECT_NE(rig.next_sleep(), transport::kNever);  // its retransmission timer
  EXPECT_EQ(rig.io.kicks(), 1u);
  EXPECT_EQ(rig.runtime->stats().progress_wakeups, 2u);
  EXPECT_FALSE(rig.io.sent().empty());
  rig.runtime.reset();  // before the buffer goes
}

TEST(IoRuntimeLoop, SleepsUntilTheEnginesTimersAndWakesOnlyForThem) {
  Rig rig;
  ASSERT_NE(rig.runtime, nullptr);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  std::vector<uint8_t> buffer(16 * 1024, 0x5a);
  const uint32_t cq = write_to_silent_peer(*rig.runtime, buffer).cq;
  const Time start = rig.clock->now();
  // Nobody answers: the loop wakes for pacing and retransmission timers,
  // each time with a deadline ahead of the clock (it never spins), until the
  // retries run out and it sleeps without one.
  uint64_t timed_sleeps = 0;
  for (Time deadline = rig.next_sleep(); deadline != transport::kNever; deadline = rig.next_sleep()) {
    ASSERT_NE(deadline, 0u);
    ASSERT_GT(deadline, rig.clock->now());
    ASSERT_LT(++timed_sleeps, 10'000u) << "the loop did not settle";
    rig.clock->advance_to(deadline);
    rig.io.wake();
  }
  // Each wake-up was the test's (one kick, then one per timer).
  EXPECT_EQ(rig.runtime->stats().progress_wakeups, timed_sleeps + 1);
  const std::vector<transport::Completion> done = rig.runtime->with_engine([&](Endpoint& e, Time) {
    transport::Completion batch[16];
    const size_t n = e.poll_cq(cq, batch);
    return std::vector<transport::Completion>(batch, batch + n);
  });
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, transport::WcStatus::RetryExceeded);
  // The first attempt plus retry_cnt retransmissions, a timeout apart.
  EXPECT_GE(rig.clock->now() - start, qp_config().retry_cnt * qp_config().timeout_ns);
  const auto counters = rig.runtime->with_engine([](Endpoint& e, Time) { return e.counters(); });
  EXPECT_GT(counters.tx_retransmits, 0u);
  EXPECT_GT(rig.io.sent().size(), 4u);  // 16 KiB over 4 paths, then retransmissions
  rig.runtime.reset();                  // before the buffer goes
}

size_t acks_in(const std::vector<std::vector<uint8_t>>& datagrams) {
  size_t acks = 0;
  for (const std::vector<uint8_t>& d : datagrams) acks += wire::peek_type(d) == wire::PacketType::Ack;
  return acks;
}

TEST(IoRuntimeLoop, AReceiveCompletesOnlyOnceItsAckIsWithTheKernel) {
  // An application that exits (even with _exit(), as fio's jobs do) at its
  // last completion must leave no peer waiting for the ACK: the backend
  // queues sends as io_uring does, and the completion may become visible
  // only after they were submitted.
  Rig rig;
  ASSERT_NE(rig.runtime, nullptr);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  constexpr uint16_t kPeerHomePort = 9;
  transport::EndpointConfig peer_config;
  peer_config.home_port = kPeerHomePort;
  peer_config.mtu = rig.runtime->with_engine([](Endpoint& e, Time) { return e.config().mtu; });
  Endpoint peer(peer_config);
  const uint32_t peer_cq = peer.create_cq(4);
  const uint32_t peer_qp = peer.create_qp(1, peer_cq, peer_cq, {});

  std::vector<uint8_t> source(3 * peer_config.mtu - 100, 0x3c), sink(source.size(), 0);
  size_t acks_when_completed = 0, completions = 0;  // the progress thread's; read after it sleeps
  // The listener runs once the engine lock is free again: the application
  // thread it wakes must not then sleep on that lock.
  std::future<void> other_thread;
  bool engine_free_in_listener = false;
  rig.runtime->set_completion_listener([&](uint32_t) {
    ++completions;
    acks_when_completed = acks_in(rig.io.sent());
    other_thread = std::async(std::launch::async, [&] { rig.runtime->with_engine([](Endpoint&, Time) {}); });
    engine_free_in_listener = other_thread.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  });
  const transport::PeerId from_runtime = 1;
  const transport::PeerId to_peer = rig.runtime->peer_for(loopback(kPeerHomePort));
  const auto [cq, qp] = rig.runtime->with_engine([&](Endpoint& e, Time) {
    const uint32_t c = e.create_cq(4);
    const uint32_t q = e.create_qp(1, c, c, {});
    const auto key = e.memory().register_region(1, reinterpret_cast<uintptr_t>(sink.data()), sink.size(),
                                                transport::kAccessLocalWrite);
    EXPECT_TRUE(key.has_value());
    EXPECT_EQ(e.connect_qp(q, to_peer, peer_qp, {}), transport::PostResult::Ok);
    transport::RecvWr wr;
    wr.wr_id = 77;
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(sink.data()), static_cast<uint32_t>(sink.size()), key.value_or(0)};
    EXPECT_EQ(e.post_recv(q, wr), transport::PostResult::Ok);
    return std::pair{c, q};
  });

  ASSERT_EQ(peer.connect_qp(peer_qp, from_runtime, qp, {}), transport::PostResult::Ok);
  const auto lkey = peer.memory().register_region(1, reinterpret_cast<uintptr_t>(source.data()), source.size(),
                                                  transport::kAccessLocalWrite);
  ASSERT_TRUE(lkey.has_value());
  transport::SendWr send;
  send.opcode = transport::WrOpcode::Send;
  send.num_sge = 1;
  send.sg[0] = {reinterpret_cast<uintptr_t>(source.data()), static_cast<uint32_t>(source.size()), *lkey};
  ASSERT_EQ(peer.post_send(peer_qp, send), transport::PostResult::Ok);
  std::vector<uint8_t> buf(peer.max_datagram_bytes());
  std::vector<std::vector<uint8_t>> datagrams;
  while (auto tx = peer.poll_transmit(rig.clock->now(), buf))
    datagrams.emplace_back(buf.begin(), buf.begin() + tx->length);
  ASSERT_EQ(datagrams.size(), 3u);                                    // MTU-sized chunks
  rig.io.deliver_all(std::move(datagrams), loopback(kPeerHomePort));  // one receive: one loop iteration

  rig.next_sleep();
  ASSERT_EQ(completions, 1u);
  EXPECT_GE(acks_when_completed, 1u) << "the completion was visible before its ACK was submitted";
  EXPECT_TRUE(engine_free_in_listener) << "the listener ran with the engine lock held";
  const std::vector<transport::Completion> done = rig.runtime->with_engine([&](Endpoint& e, Time) {
    transport::Completion batch[4];
    return std::vector<transport::Completion>(batch, batch + e.poll_cq(cq, batch));
  });
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 77u);
  EXPECT_EQ(done[0].byte_len, source.size());
  EXPECT_TRUE(std::equal(source.begin(), source.end(), sink.begin()));
  rig.runtime.reset();  // before the buffers go
}

TEST(IoRuntimeLoop, FenceSendsReturnsOnlyOnceTheKernelHasReadThePayloadsItWasHanded) {
  // The runtime's engine leaves a WRITE's payload in application memory
  // (EndpointConfig::gather_payload) and the kernel reads it when it takes
  // the send, after the engine lock is released. An MR's deregistration
  // (verbs' dereg_mr) calls fence_sends(); once it returns, the application
  // may free or reuse the memory.
  Rig rig;
  ASSERT_NE(rig.runtime, nullptr);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  rig.io.hold_submissions(true);
  const uint32_t mtu = rig.runtime->with_engine([](Endpoint& e, Time) { return e.config().mtu; });
  std::vector<uint8_t> buffer(3 * mtu - 100, 0x5c);
  const uint32_t key = write_to_silent_peer(*rig.runtime, buffer).key;
  rig.next_sleep();  // the loop filled a batch; its sends wait for the kernel
  ASSERT_TRUE(rig.io.sent().empty());

  ASSERT_TRUE(rig.runtime->with_engine([&](Endpoint& e, Time) { return e.memory().deregister(key); }));
  rig.runtime->fence_sends();
  std::fill(buffer.begin(), buffer.end(), 0xee);  // the application reuses the memory

  size_t data = 0;
  for (const std::vector<uint8_t>& d : rig.io.sent()) {
    if (wire::peek_type(d) != wire::PacketType::Data) continue;
    ++data;
    EXPECT_TRUE(transport::check_integrity(d)) << "datagram " << data << " was read after the fence";
    // Its payload as it was (the shortest chunk is the last, mtu - 100 bytes).
    EXPECT_NE(std::search_n(d.begin(), d.end(), mtu - 100, uint8_t{0x5c}), d.end());
  }
  EXPECT_GE(data, 1u) << "fence_sends() returned with the WRITE's datagrams still queued";
  rig.io.hold_submissions(false);
  rig.runtime.reset();  // before the buffer goes
}

TEST(IoRuntimeLoop, BusyPollingPollsWithoutSleepingAfterWorkThenSleeps) {
  constexpr Time kBusyPollNs = 50'000;
  Rig rig(kBusyPollNs);
  ASSERT_NE(rig.runtime, nullptr);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);  // no work yet: it sleeps at once
  std::vector<uint8_t> datagram(64, 0xa5);
  datagram[0] = wire::kVersion;
  rig.io.deliver(datagram, loopback(7));  // work (a counted drop)
  // The clock stands still, so the loop keeps polling; it sleeps again only
  // once the busy-poll window after that work has passed.
  ASSERT_TRUE(rig.io.await_polls(100)) << "the loop slept instead of polling";
  EXPECT_EQ(rig.io.sleeps(), 1u);
  rig.clock->advance(kBusyPollNs);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  EXPECT_EQ(rig.runtime->stats().unknown_sender_drops, 1u);
}

TEST(IoRuntimeLoop, AScriptedDatagramFromAnUnknownSenderIsCountedAndDropped) {
  Rig rig;
  ASSERT_NE(rig.runtime, nullptr);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  std::vector<uint8_t> datagram(64, 0xa5);
  datagram[0] = wire::kVersion;  // a plausible header from a home port nobody registered
  datagram[4] = 0x00;
  datagram[5] = 0x07;
  rig.io.deliver(datagram, loopback(7));
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  const RuntimeStats s = rig.runtime->stats();
  EXPECT_EQ(s.datagrams_received, 1u);
  EXPECT_EQ(s.unknown_sender_drops, 1u);
  EXPECT_EQ(s.progress_wakeups, 1u);
  EXPECT_TRUE(rig.io.sent().empty());
}

TEST(IoRuntimeLoop, ShutdownWithWorkInFlightJoinsAfterTheBackendSawStop) {
  Rig rig;
  ASSERT_NE(rig.runtime, nullptr);
  EXPECT_EQ(rig.next_sleep(), transport::kNever);
  std::vector<uint8_t> buffer(16 * 1024, 0x5a);
  write_to_silent_peer(*rig.runtime, buffer);
  EXPECT_NE(rig.next_sleep(), transport::kNever);  // a timer is pending
  EXPECT_FALSE(rig.io.drained());
  rig.runtime->shutdown();  // returns once the progress thread has joined
  EXPECT_TRUE(rig.io.drained());
  EXPECT_TRUE(rig.io.stopped_when_drained());
  EXPECT_TRUE(rig.io.destroyed());
  rig.runtime->shutdown();  // idempotent
  rig.runtime.reset();
  EXPECT_EQ(rig.io.sleeps(), 2u);  // it never slept again
}

TEST(IoRuntimeLoop, AFactoryThatMakesNoBackendFailsTheStart) {
  RuntimeOptions o;
  o.local_address = "127.0.0.1";
  o.make_backend = [](const BackendConfig&) { return std::unique_ptr<IoBackend>(); };
  std::string error;
  EXPECT_EQ(Runtime::create(o, error), nullptr);
  EXPECT_THAT(error, ::testing::HasSubstr("backend"));
}

}  // namespace
}  // namespace metaroce::io
