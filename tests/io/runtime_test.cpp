// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The io/ runtime over loopback: two runtimes in one process, QPs connected
// through the engine API, RDMA WRITEs checked byte for byte, both backends,
// GSO/GRO, test drops, idleness, port conflicts, unknown senders, teardown
// with work in flight. Every wait is bounded; completions are awaited on a
// condition variable signalled by the completion listener.
#include <arpa/inet.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "metaroce/wire.h"
#include "metaroce/splitmix64.h"
#include "runtime.h"
#include "scheduler_slice.h"
#include "udp_socket.h"

namespace metaroce::io {
namespace {

using namespace std::chrono_literals;
using transport::Completion;
using transport::Endpoint;
using transport::Time;

constexpr size_t kMiB = size_t{1} << 20;
constexpr auto kTransferLimit = 120s;  // generous: sanitizers on a loaded 2-core box

RuntimeOptions test_options(bool io_uring, bool gso) {
  RuntimeOptions o;
  o.local_address = "127.0.0.1";
  o.allow_io_uring = io_uring;
  o.use_gso = gso;
  o.use_gro = gso;
  o.endpoint.paths = 4;
  o.endpoint.mtu = 4096;
  // Loopback through a user-space stack: RTTs are tens to hundreds of
  // microseconds and jitter a lot; keep the window within socket buffers.
  o.endpoint.path_rate_bps = 10'000'000'000;
  o.endpoint.base_rtt_ns = 100'000;
  o.endpoint.min_rto_ns = 2'000'000;
  o.endpoint.cc.target_queue_delay_ns = 2'000'000;
  return o;
}

std::unique_ptr<Runtime> make_runtime(const RuntimeOptions& options) {
  std::string error;
  auto runtime = Runtime::create(options, error);
  EXPECT_NE(runtime, nullptr) << error;
  return runtime;
}

void fill_pattern(std::vector<uint8_t>& buffer, uint64_t seed) {
  SplitMix64 words(seed);
  for (size_t i = 0; i + 8 <= buffer.size(); i += 8) {
    const uint64_t z = words.next();
    std::memcpy(buffer.data() + i, &z, 8);
  }
}

// Counts completion-listener calls and wakes the test thread.
class CompletionWaiter {
 public:
  void attach(Runtime& runtime) {
    runtime.set_completion_listener([this](uint32_t) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++signals_;
      }
      cv_.notify_all();
    });
  }

  // Polls `cq` until `expected` completions arrived or `limit` passed.
  std::vector<Completion> collect(Runtime& runtime, uint32_t cq, size_t expected,
                                  std::chrono::seconds limit = kTransferLimit) {
    std::vector<Completion> out;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (int round = 0; round < 1'000'000 && out.size() < expected; ++round) {
      uint64_t seen = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        seen = signals_;
      }
      runtime.with_engine([&](Endpoint& engine, Time) {
        Completion batch[64];
        while (size_t n = engine.poll_cq(cq, batch)) out.insert(out.end(), batch, batch + n);
      });
      if (out.size() >= expected) break;
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_until(lock, deadline, [&] { return signals_ != seen; })) break;
    }
    return out;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t signals_ = 0;
};

// One side of a connected pair: CQ, QP, a registered buffer.
struct Side {
  std::unique_ptr<Runtime> runtime;
  uint32_t cq = 0;
  uint32_t qp = 0;
  std::vector<uint8_t> buffer;
  uint32_t key = 0;
};

transport::QpConfig qp_config() {
  transport::QpConfig c;
  // A fixed retry interval: (retry_cnt + 1) * 100 ms without progress before
  // RETRY_EXC_ERR, which tolerates sanitizer builds on a loaded machine.
  c.timeout_ns = 100'000'000;
  return c;
}

// Creates the CQ/QP/MR on both sides and moves the QPs to RTS, connected.
void connect(Side& a, Side& b, size_t bytes) {
  for (Side* s : {&a, &b}) {
    s->buffer.assign(bytes, 0);
    s->runtime->with_engine([&](Endpoint& e, Time) {
      s->cq = e.create_cq(4096);
      s->qp = e.create_qp(1, s->cq, s->cq, qp_config());
      const auto key = e.memory().register_region(
          1, reinterpret_cast<uintptr_t>(s->buffer.data()), s->buffer.size(),
          transport::kAccessLocalWrite | transport::kAccessRemoteWrite | transport::kAccessRemoteRead);
      ASSERT_TRUE(key.has_value());
      s->key = *key;
    });
    ASSERT_NE(s->qp, 0u);
  }
  const transport::PeerId peer_of_b = a.runtime->peer_for(b.runtime->local_address());
  const transport::PeerId peer_of_a = b.runtime->peer_for(a.runtime->local_address());
  EXPECT_EQ(peer_of_b, 1u);
  EXPECT_EQ(peer_of_a, 1u);
  auto bring_up = [](Side& s, transport::PeerId peer, uint32_t remote_qp) {
    s.runtime->with_engine([&](Endpoint& e, Time) {
      EXPECT_EQ(e.connect_qp(s.qp, peer, remote_qp, qp_config()), transport::PostResult::Ok);
    });
  };
  bring_up(a, peer_of_b, b.qp);
  bring_up(b, peer_of_a, a.qp);
}

// Posts `bytes` from a to b as `message`-sized RDMA WRITEs.
void post_writes(Side& a, const Side& b, size_t bytes, size_t message) {
  a.runtime->with_engine([&](Endpoint& e, Time) {
    for (size_t offset = 0, id = 0; offset < bytes; offset += message, ++id) {
      transport::SendWr wr;
      wr.wr_id = id;
      wr.opcode = transport::WrOpcode::RdmaWrite;
      wr.signaled = true;
      wr.num_sge = 1;
      wr.sg[0] = {reinterpret_cast<uintptr_t>(a.buffer.data()) + offset,
                  static_cast<uint32_t>(std::min(message, bytes - offset)), a.key};
      wr.remote_addr = reinterpret_cast<uintptr_t>(b.buffer.data()) + offset;
      wr.rkey = b.key;
      ASSERT_EQ(e.post_send(a.qp, wr), transport::PostResult::Ok);
    }
  });
}

struct TransferResult {
  size_t successes = 0;
  bool intact = false;
  transport::EndpointCounters sender;
  transport::EndpointCounters receiver;
};

// A full WRITE transfer a -> b, waited for and verified.
TransferResult transfer(Side& a, Side& b, CompletionWaiter& waiter, size_t bytes, size_t message, uint64_t seed) {
  fill_pattern(a.buffer, seed);
  std::fill(b.buffer.begin(), b.buffer.end(), uint8_t{0});
  // Publish the cleared sink to b's progress thread through b's engine lock:
  // the causal chain through a's thread and the kernel is invisible to TSan.
  b.runtime->with_engine([](Endpoint&, Time) {});
  const size_t messages = (bytes + message - 1) / message;
  post_writes(a, b, bytes, message);
  const std::vector<Completion> done = waiter.collect(*a.runtime, a.cq, messages);
  TransferResult r;
  for (const Completion& c : done) {
    EXPECT_EQ(c.status, transport::WcStatus::Success) << "wr " << c.wr_id;
    if (c.status == transport::WcStatus::Success) ++r.successes;
  }
  // Through b's lock before reading the sink, for the same reason.
  r.receiver = b.runtime->with_engine([](Endpoint& e, Time) { return e.counters(); });
  r.sender = a.runtime->with_engine([](Endpoint& e, Time) { return e.counters(); });
  r.intact = std::memcmp(a.buffer.data(), b.buffer.data(), bytes) == 0;
  return r;
}

// Polls `done()` every millisecond until it holds or `limit` passed (a safety
// net, never an expectation about speed); whether it held. For state the
// progress thread publishes without signalling anybody (its counters, its
// engine's timers); the pause between polls only spares the shared cores.
template <typename Done>
bool eventually(Done done, std::chrono::seconds limit = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// The stats once `ready(stats)` holds (or the last ones after the safety
// timeout). The runtime publishes its counters at the end of a progress-loop
// iteration and counts a datagram sent when its send completion is reaped,
// which may come after the completion that woke the test: a count read at
// once can be short of the work already done.
template <typename Ready>
RuntimeStats stats_when(const Runtime& runtime, Ready ready) {
  RuntimeStats s = runtime.stats();
  eventually([&] { return ready(s = runtime.stats()); });
  return s;
}

struct Pair {
  CompletionWaiter waiter;  // outlives the runtimes, whose listener points at it
  Side a;
  Side b;
  ~Pair() {
    a.runtime.reset();
    b.runtime.reset();
  }
};

void make_pair(Pair& p, const RuntimeOptions& oa, const RuntimeOptions& ob, size_t bytes) {
  p.a.runtime = make_runtime(oa);
  p.b.runtime = make_runtime(ob);
  ASSERT_TRUE(p.a.runtime && p.b.runtime);
  p.waiter.attach(*p.a.runtime);
  connect(p.a, p.b, bytes);
}

// --- transfers -----------------------------------------------------------------

void run_write_test(bool io_uring, bool gso, bool zerocopy = false) {
  Pair p;
  const size_t bytes = 32 * kMiB;
  // An address of its own, since this test counts every datagram from a
  // stranger: programs of other tests (metaroce-run on lo) take home ports
  // on 127.0.0.1 too, and the peer of one that exits may still be sending
  // to a port a runtime here binds next.
  RuntimeOptions o = test_options(io_uring, gso);
  o.local_address = "127.0.91.1";
  o.zerocopy = zerocopy;
  make_pair(p, o, o, bytes);
  if (::testing::Test::HasFatalFailure()) return;
  if (io_uring && !p.a.runtime->stats().io_uring) GTEST_SKIP() << "io_uring unavailable here";
  EXPECT_EQ(p.a.runtime->stats().io_uring, io_uring);

  const TransferResult r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 7);
  EXPECT_EQ(r.successes, bytes / kMiB);
  EXPECT_TRUE(r.intact);
  EXPECT_EQ(r.receiver.placed_bytes % kMiB, 0u);
  EXPECT_GE(r.receiver.placed_bytes, bytes);

  const RuntimeStats sa =
      stats_when(*p.a.runtime, [&](const RuntimeStats& s) { return s.datagrams_sent >= bytes / 4096; });
  const RuntimeStats sb =
      stats_when(*p.b.runtime, [&](const RuntimeStats& s) { return s.datagrams_received > bytes / 4096 / 2; });
  EXPECT_GE(sa.datagrams_sent, bytes / 4096);
  // Not >= bytes / 4096: on a loaded host the kernel may drop datagrams
  // (socket buffer full); what proves delivery is the intact data above.
  EXPECT_GT(sb.datagrams_received, bytes / 4096 / 2);
  EXPECT_GT(sa.send_syscalls, 0u);
  EXPECT_LT(sa.send_syscalls, sa.datagrams_sent);  // batched
  EXPECT_EQ(sa.send_errors, 0u);
  EXPECT_EQ(sb.unknown_sender_drops, 0u);
  // Over loopback the kernel copies each zero-copy datagram when it
  // delivers it; what this shows is the sends' and their notifications'
  // handling, with the data intact.
  if (zerocopy) {
    EXPECT_GT(sa.zerocopy_sends, 0u);
  } else {
    EXPECT_EQ(sa.zerocopy_sends, 0u);
  }
  if (gso) {
    EXPECT_TRUE(sa.gso);
    EXPECT_TRUE(sb.gro);
    EXPECT_GT(sa.gso_sends, 0u);
    EXPECT_GT(sb.gro_receives, 0u);
  } else {
    EXPECT_FALSE(sa.gso);
    EXPECT_FALSE(sb.gro);
    EXPECT_EQ(sa.gso_sends, 0u);
    EXPECT_EQ(sb.gro_receives, 0u);
  }
  // A second transfer on the same connection.
  const TransferResult again = transfer(p.a, p.b, p.waiter, bytes, kMiB, 8);
  EXPECT_EQ(again.successes, bytes / kMiB);
  EXPECT_TRUE(again.intact);
}

TEST(IoRuntime, WriteOverIoUringWithGso) { run_write_test(true, true); }
TEST(IoRuntime, WriteOverIoUringWithoutGso) { run_write_test(true, false); }
TEST(IoRuntime, WriteOverIoUringWithGsoAndZeroCopy) { run_write_test(true, true, true); }
TEST(IoRuntime, WriteOverFallbackWithGso) { run_write_test(false, true); }
TEST(IoRuntime, WriteOverFallbackWithoutGso) { run_write_test(false, false); }

void run_drop_test(bool io_uring) {
  Pair p;
  const size_t bytes = 32 * kMiB;
  RuntimeOptions oa = test_options(io_uring, true);
  RuntimeOptions ob = test_options(io_uring, true);
  oa.test_drop_probability = 0.05;
  oa.test_seed = 11;
  ob.test_drop_probability = 0.05;
  ob.test_seed = 12;
  make_pair(p, oa, ob, bytes);
  if (::testing::Test::HasFatalFailure()) return;
  const TransferResult r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 9);
  EXPECT_EQ(r.successes, bytes / kMiB);
  EXPECT_TRUE(r.intact);
  EXPECT_GT(r.sender.tx_retransmits, 0u);
  EXPECT_GT(p.a.runtime->stats().test_drops, 0u);  // ACKs dropped
  EXPECT_GT(p.b.runtime->stats().test_drops, 0u);  // data dropped
  // About 5% of what arrived.
  const RuntimeStats sb = p.b.runtime->stats();
  EXPECT_GT(sb.test_drops, sb.datagrams_received / 40);
  EXPECT_LT(sb.test_drops, sb.datagrams_received / 10);
}

TEST(IoRuntime, SurvivesDropsOverIoUring) { run_drop_test(true); }
TEST(IoRuntime, SurvivesDropsOverFallback) { run_drop_test(false); }

// --- per-peer source ports (route_peer) ---------------------------------------

struct UdpSink {
  int fd = -1;
  sockaddr_storage address{};
  UdpSink() {
    fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    auto& a = reinterpret_cast<sockaddr_in&>(address);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof address;
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(sockaddr_in)), 0);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len);
  }
  ~UdpSink() { ::close(fd); }
  uint16_t port() const { return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port); }

  // Source ports of the next `count` datagrams (fewer after `limit`).
  std::multiset<uint16_t> source_ports(size_t count, std::chrono::seconds limit) {
    std::multiset<uint16_t> seen;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    uint8_t buffer[65536];
    while (seen.size() < count && std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) != 1) continue;
      sockaddr_in from{};
      socklen_t len = sizeof from;
      if (::recvfrom(fd, buffer, sizeof buffer, 0, reinterpret_cast<sockaddr*>(&from), &len) > 0)
        seen.insert(ntohs(from.sin_port));
    }
    return seen;
  }
};

// Two distinct ports the kernel had free a moment ago.
std::vector<uint16_t> free_ports() {
  UdpSink a, b;
  return {a.port(), b.port()};
}

// Sends one 64 KiB WRITE to `peer` (nobody answers; the packets are what counts).
void write_to(Runtime& runtime, transport::PeerId peer, std::vector<uint8_t>& buffer) {
  runtime.with_engine([&](Endpoint& e, Time) {
    const uint32_t cq = e.create_cq(64);
    const uint32_t qp = e.create_qp(1, cq, cq, qp_config());
    const auto key = e.memory().register_region(1, reinterpret_cast<uintptr_t>(buffer.data()), buffer.size(),
                                                transport::kAccessLocalWrite);
    ASSERT_TRUE(key.has_value());
    ASSERT_EQ(e.connect_qp(qp, peer, 1, qp_config()), transport::PostResult::Ok);
    transport::SendWr wr;
    wr.opcode = transport::WrOpcode::RdmaWrite;
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(buffer.data()), static_cast<uint32_t>(buffer.size()), *key};
    wr.remote_addr = 0x1000;
    wr.rkey = 1;
    ASSERT_EQ(e.post_send(qp, wr), transport::PostResult::Ok);
  });
}

void run_routed_peer_test(bool io_uring) {
  std::unique_ptr<Runtime> runtime = make_runtime(test_options(io_uring, false));
  ASSERT_TRUE(runtime);
  UdpSink routed, plain;
  const std::vector<uint16_t> ports = free_ports();
  const transport::PeerId routed_peer = runtime->peer_for(routed.address);
  const transport::PeerId plain_peer = runtime->peer_for(plain.address);
  std::string error;
  ASSERT_TRUE(runtime->route_peer(routed_peer, ports, error)) << error;
  std::set<uint16_t> defaults;
  for (uint16_t path = 0; path < 4; ++path) {
    EXPECT_EQ(runtime->source_port(routed_peer, path), ports[path % 2]);
    defaults.insert(runtime->source_port(plain_peer, path));
  }
  EXPECT_EQ(defaults.size(), 4u);
  for (uint16_t port : ports) EXPECT_EQ(defaults.count(port), 0u);

  std::vector<uint8_t> buffer(64 * 1024, 0x5a);
  write_to(*runtime, routed_peer, buffer);
  write_to(*runtime, plain_peer, buffer);
  if (::testing::Test::HasFatalFailure()) return;
  // 16 packets over 4 paths each: the routed peer's came from its 2 ports,
  // the other peer's from the 4 default ones.
  const std::multiset<uint16_t> to_routed = routed.source_ports(16, 20s);
  const std::multiset<uint16_t> to_plain = plain.source_ports(16, 20s);
  EXPECT_EQ(std::set<uint16_t>(to_routed.begin(), to_routed.end()), std::set<uint16_t>(ports.begin(), ports.end()));
  EXPECT_EQ(std::set<uint16_t>(to_plain.begin(), to_plain.end()), defaults);
  runtime.reset();  // before the buffer goes
}

TEST(IoRuntime, RoutedPeerLeavesFromItsOwnSourcePortsOverIoUring) { run_routed_peer_test(true); }
TEST(IoRuntime, RoutedPeerLeavesFromItsOwnSourcePortsOverFallback) { run_routed_peer_test(false); }

TEST(IoRuntime, RoutingAPeerRefusesUnknownPeersAndTakenPorts) {
  std::unique_ptr<Runtime> runtime = make_runtime(test_options(true, false));
  ASSERT_TRUE(runtime);
  UdpSink peer_socket, taken;
  const transport::PeerId peer = runtime->peer_for(peer_socket.address);
  std::string error;
  EXPECT_FALSE(runtime->route_peer(peer + 1, {free_ports()[0]}, error));
  EXPECT_THAT(error, testing::HasSubstr("unknown peer"));
  EXPECT_FALSE(runtime->route_peer(peer, {}, error));
  EXPECT_FALSE(runtime->route_peer(peer, {taken.port()}, error));
  EXPECT_THAT(error, testing::HasSubstr("in use"));
  // Nothing changed for the peer: it still uses the default sockets.
  EXPECT_EQ(runtime->source_port(peer, 0), runtime->source_port(peer + 1, 0));
}

TEST(IoRuntime, Ipv6Loopback) {
  RuntimeOptions o = test_options(true, true);
  o.local_address = "::1";
  std::string error;
  auto probe = Runtime::create(o, error);
  if (!probe) GTEST_SKIP() << "no IPv6 loopback: " << error;
  probe.reset();
  Pair p;
  const size_t bytes = 4 * kMiB;
  make_pair(p, o, o, bytes);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(p.a.runtime->local_address().ss_family, AF_INET6);
  const TransferResult r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 3);
  EXPECT_EQ(r.successes, 4u);
  EXPECT_TRUE(r.intact);
}

// As if seccomp or kernel.io_uring_disabled blocked io_uring: io_uring_setup
// fails with EPERM. Runs in a forked child (the filter cannot be removed);
// the exit code says what went wrong.
int blocked_io_uring_child() {
#if defined(__x86_64__)
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 10;
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) return 11;
  setenv("METAROCE_LOG", "1", 1);  // the one-line fallback notice goes to stderr
  CompletionWaiter waiter;
  Side a;
  Side b;
  std::string error;
  a.runtime = Runtime::create(test_options(true, true), error);
  b.runtime = Runtime::create(test_options(true, true), error);
  if (!a.runtime || !b.runtime) return 12;
  if (a.runtime->stats().io_uring || b.runtime->stats().io_uring) return 13;
  waiter.attach(*a.runtime);
  connect(a, b, 4 * kMiB);
  const TransferResult r = transfer(a, b, waiter, 4 * kMiB, kMiB, 21);
  a.runtime.reset();
  b.runtime.reset();
  if (r.successes != 4 || !r.intact) return 14;
  return 0;
#else
  return 0;
#endif
}

TEST(IoRuntime, FallsBackWhenIoUringIsBlocked) {
  // No runtime (thread) of an earlier test is alive here, so fork is safe.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(blocked_io_uring_child());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10/11: seccomp refused, 12: create failed, 13: io_uring still used, "
                                       "14: transfer failed";
}

// --- idleness --------------------------------------------------------------------
// That an idle engine puts the progress thread to sleep without a deadline,
// and how often it wakes, is runtime_loop_test.cpp's, on a fake clock and
// backend. Here: after a real transfer, both engines do become idle.

TEST(IoRuntime, ConnectedPairIsIdleAfterTransfer) {
  Pair p;
  const size_t bytes = 4 * kMiB;
  make_pair(p, test_options(true, true), test_options(true, true), bytes);
  if (::testing::Test::HasFatalFailure()) return;
  const TransferResult r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 5);
  EXPECT_TRUE(r.intact);
  // Delayed ACKs and RTO timers run out on the progress threads' own time.
  auto idle = [](Runtime& runtime) {
    return runtime.with_engine([](Endpoint& e, Time) { return e.next_wakeup() == transport::kNever; });
  };
  EXPECT_TRUE(eventually([&] { return idle(*p.a.runtime) && idle(*p.b.runtime); }));
}

// --- inline transmission ----------------------------------------------------------
// What a post makes due leaves from the posting thread when the progress
// thread holds no send (RuntimeOptions::inline_transmit, on by default).
// inline_datagrams is counted by the posting thread before with_engine()
// returns, so it is read at once.

bool is_idle(Runtime& runtime) {
  return runtime.with_engine([](Endpoint& e, Time) { return e.next_wakeup() == transport::kNever; });
}

uint64_t inline_datagrams_for_write(Pair& p, size_t bytes) {
  EXPECT_TRUE(eventually([&] { return is_idle(*p.a.runtime) && is_idle(*p.b.runtime); }));
  const uint64_t before = p.a.runtime->stats().inline_datagrams;
  fill_pattern(p.a.buffer, bytes);
  p.b.runtime->with_engine([](Endpoint&, Time) {});  // the sink is published through b's lock (TSan)
  post_writes(p.a, p.b, bytes, bytes);
  const uint64_t sent_inline = p.a.runtime->stats().inline_datagrams - before;
  const std::vector<Completion> done = p.waiter.collect(*p.a.runtime, p.a.cq, 1);
  EXPECT_EQ(done.size(), 1u);
  for (const Completion& c : done) EXPECT_EQ(c.status, transport::WcStatus::Success);
  p.b.runtime->with_engine([](Endpoint&, Time) {});
  EXPECT_EQ(std::memcmp(p.a.buffer.data(), p.b.buffer.data(), bytes), 0);
  return sent_inline;
}

void run_inline_test(bool io_uring) {
  Pair p;
  RuntimeOptions o;
  o.allow_io_uring = io_uring;
  make_pair(p, o, o, kMiB);
  if (::testing::Test::HasFatalFailure()) return;
  // The first exchange sets the connection up; then a lone packet, then a
  // message of many: at most 8 datagrams leave from the posting thread, the
  // progress thread sends the rest.
  EXPECT_TRUE(transfer(p.a, p.b, p.waiter, 64 * 1024, 64 * 1024, 3).intact);
  const uint64_t lone = inline_datagrams_for_write(p, 1000);
  EXPECT_GE(lone, 1u);
  EXPECT_LE(lone, 8u);
  const uint64_t before = p.a.runtime->stats().datagrams_sent;
  const uint64_t large = inline_datagrams_for_write(p, kMiB);
  EXPECT_GE(large, 1u);
  EXPECT_LE(large, 8u);
  const RuntimeStats after =
      stats_when(*p.a.runtime, [&](const RuntimeStats& s) { return s.datagrams_sent - before > large; });
  EXPECT_GT(after.datagrams_sent - before, large);
  EXPECT_EQ(after.send_errors, 0u);
}

TEST(IoRuntime, PostsToAnIdleConnectionLeaveFromThePostingThreadOverIoUring) { run_inline_test(true); }
TEST(IoRuntime, PostsToAnIdleConnectionLeaveFromThePostingThreadOverFallback) { run_inline_test(false); }

TEST(IoRuntime, WithoutInlineTransmitTheProgressThreadSendsEverything) {
  Pair p;
  RuntimeOptions o;
  o.inline_transmit = false;
  make_pair(p, o, o, kMiB);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_TRUE(transfer(p.a, p.b, p.waiter, 64 * 1024, 64 * 1024, 3).intact);
  EXPECT_EQ(inline_datagrams_for_write(p, 1000), 0u);
  EXPECT_EQ(p.a.runtime->stats().inline_datagrams, 0u);
}

// A request sent inline arms its retransmission timer without waking the
// progress thread (a timerfd ends that thread's sleep instead): when nobody
// answers, the timer must still fire, retransmit and finally fail the WR.
void run_unanswered_inline_test(bool io_uring) {
  RuntimeOptions o;
  o.allow_io_uring = io_uring;
  CompletionWaiter waiter;
  std::unique_ptr<Runtime> runtime = make_runtime(o);
  ASSERT_NE(runtime, nullptr);
  waiter.attach(*runtime);
  // A bound socket that never reads: the peer's home port exists and is silent.
  const int silent = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(silent, 0);
  sockaddr_in bound{};
  bound.sin_family = AF_INET;
  bound.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof bound;
  ASSERT_EQ(::bind(silent, reinterpret_cast<const sockaddr*>(&bound), sizeof bound), 0);
  ASSERT_EQ(::getsockname(silent, reinterpret_cast<sockaddr*>(&bound), &length), 0);
  sockaddr_storage peer_address{};
  std::memcpy(&peer_address, &bound, sizeof bound);
  const transport::PeerId peer = runtime->peer_for(peer_address);
  std::vector<uint8_t> buffer(1000, 0x5a);
  transport::QpConfig qp;
  qp.timeout_ns = 10'000'000;
  qp.retry_cnt = 2;
  const uint32_t cq = runtime->with_engine([&](Endpoint& e, Time) {
    const uint32_t c = e.create_cq(16);
    const uint32_t q = e.create_qp(1, c, c, qp);
    const auto key = e.memory().register_region(1, reinterpret_cast<uintptr_t>(buffer.data()), buffer.size(),
                                                transport::kAccessLocalWrite);
    EXPECT_TRUE(key.has_value());
    EXPECT_EQ(e.connect_qp(q, peer, 1, qp), transport::PostResult::Ok);
    transport::SendWr wr;
    wr.opcode = transport::WrOpcode::RdmaWrite;
    wr.signaled = true;
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(buffer.data()), static_cast<uint32_t>(buffer.size()), key.value_or(0)};
    wr.remote_addr = 0x1000;
    wr.rkey = 1;
    EXPECT_EQ(e.post_send(q, wr), transport::PostResult::Ok);
    return c;
  });
  EXPECT_GE(runtime->stats().inline_datagrams, 1u);
  const std::vector<Completion> done = waiter.collect(*runtime, cq, 1, 60s);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, transport::WcStatus::RetryExceeded);
  const auto counters = runtime->with_engine([](Endpoint& e, Time) { return e.counters(); });
  EXPECT_GE(counters.tx_retransmits, 2u);
  runtime.reset();
  ::close(silent);
}

TEST(IoRuntime, AnUnansweredInlineRequestIsRetransmittedOnItsTimerOverIoUring) { run_unanswered_inline_test(true); }
TEST(IoRuntime, AnUnansweredInlineRequestIsRetransmittedOnItsTimerOverFallback) { run_unanswered_inline_test(false); }

// --- sockets and peers -------------------------------------------------------------

TEST(IoRuntime, ExplicitHomePortConflictIsACleanError) {
  auto first = make_runtime(test_options(false, true));
  ASSERT_NE(first, nullptr);
  RuntimeOptions o = test_options(false, true);
  o.home_port = first->home_port();
  std::string error;
  auto second = Runtime::create(o, error);
  EXPECT_EQ(second, nullptr);
  EXPECT_THAT(error, testing::HasSubstr(std::to_string(first->home_port())));
  EXPECT_THAT(error, testing::HasSubstr("in use"));
  EXPECT_EQ(error.find('\n'), std::string::npos);
}

TEST(IoRuntime, AutomaticHomePortsDiffer) {
  auto a = make_runtime(test_options(false, true));
  auto b = make_runtime(test_options(false, true));
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->home_port(), b->home_port());
  EXPECT_GE(a->home_port(), wire::kHomePortBase);
  sockaddr_storage local = a->local_address();
  EXPECT_EQ(local.ss_family, AF_INET);
  EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in&>(local).sin_port), a->home_port());
}

// One wake-up releases half the pacing burst: on a slow link that must still
// fill one GSO message on every path; on a fast one the configured burst
// already does.
TEST(IoRuntime, HalfAPacingBurstFillsAGsoMessageOnEveryPath) {
  auto burst_for = [](uint64_t link_bps) {
    RuntimeOptions o = test_options(false, true);
    o.endpoint.path_rate_bps = link_bps;  // as the provider sets them for one plane
    o.endpoint.inbound_capacity_bps = link_bps;
    auto runtime = make_runtime(o);
    return runtime ? runtime->with_engine([](Endpoint& e, Time) { return e.config().pacing_burst_ns; }) : Time{0};
  };
  const uint64_t slow_bps = 10'000'000'000;
  const Time slow = burst_for(slow_bps);
  EXPECT_GE(static_cast<double>(slow) / 2 * slow_bps / 8e9, 4.0 * kMaxGsoBytes);
  EXPECT_LE(static_cast<double>(slow) / 2 * slow_bps / 8e9, 4.0 * kMaxGsoBytes + 1);
  EXPECT_EQ(burst_for(100'000'000'000), RuntimeOptions{}.pacing_burst_ns);
}

// This process's progress threads (named metaroce-io).
std::vector<pid_t> progress_threads() {
  std::vector<pid_t> threads;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name == "metaroce-io")
      threads.push_back(static_cast<pid_t>(std::stol(task.path().filename().string())));
  }
  return threads;
}

TEST(IoRuntime, TheProgressThreadAsksForTheShortestSchedulerSlice) {
  auto runtime = make_runtime(test_options(true, true));
  ASSERT_NE(runtime, nullptr);
  std::vector<pid_t> threads = progress_threads();
  ASSERT_EQ(threads.size(), 1u);
  const uint64_t slice = scheduler_slice_of(threads[0]);
  if (slice == 0) GTEST_SKIP() << "this kernel (before 6.12) has no per-thread scheduler slices";
  EXPECT_EQ(slice, kMinSchedulerSliceNs);
  runtime.reset();

  RuntimeOptions o = test_options(true, true);
  o.progress_slice_ns = 0;  // the kernel's default, longer
  runtime = make_runtime(o);
  ASSERT_NE(runtime, nullptr);
  threads = progress_threads();
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_GT(scheduler_slice_of(threads[0]), kMinSchedulerSliceNs);
}

TEST(IoRuntime, TheSliceRequestKeepsTheNiceValueTheProgressThreadInherits) {
  // On a thread of its own: raising a nice value cannot be undone without
  // privilege.
  int nice_seen = -100;
  std::thread([&] {
    ASSERT_EQ(setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 7), 0);
    auto runtime = make_runtime(test_options(true, true));
    ASSERT_NE(runtime, nullptr);
    const std::vector<pid_t> threads = progress_threads();
    ASSERT_EQ(threads.size(), 1u);
    errno = 0;
    nice_seen = getpriority(PRIO_PROCESS, static_cast<id_t>(threads[0]));
    ASSERT_EQ(errno, 0);
  }).join();
  EXPECT_EQ(nice_seen, 7);
}

TEST(IoRuntime, BadOptionsAreRejected) {
  std::string error;
  RuntimeOptions o = test_options(false, true);
  o.local_address = "not-an-address";
  EXPECT_EQ(Runtime::create(o, error), nullptr);
  EXPECT_THAT(error, testing::HasSubstr("not-an-address"));
  o = test_options(false, true);
  o.test_drop_probability = 1.5;
  EXPECT_EQ(Runtime::create(o, error), nullptr);
  EXPECT_FALSE(error.empty());
  // A plane's address: an IP of plane 0's family other than plane 0's own.
  for (const char* plane : {"eth1", "::1", "127.0.0.1"}) {
    o = test_options(false, true);
    o.plane_addresses = {plane};
    EXPECT_EQ(Runtime::create(o, error), nullptr) << plane;
    EXPECT_THAT(error, testing::HasSubstr("plane 1 address")) << plane;
  }
  o = test_options(false, true);
  o.plane_addresses = {"127.0.0.2"};
  o.endpoint.paths = 1;
  EXPECT_EQ(Runtime::create(o, error), nullptr);
  EXPECT_THAT(error, testing::HasSubstr("2 planes need at least as many paths"));
}

// --- planes --------------------------------------------------------------------

// The sending side of a's paths to its peer (peer 1).
std::vector<transport::PathSnapshot> paths_of(Side& a) {
  return a.runtime->with_engine([](Endpoint& e, Time) { return e.path_snapshots(1); });
}

uint64_t plane_packets(const std::vector<transport::PathSnapshot>& paths, uint16_t plane) {
  uint64_t packets = 0;
  for (const transport::PathSnapshot& p : paths)
    if (p.plane == plane) packets += p.packets_sent;
  return packets;
}

bool all_active(Side& a) {
  for (const transport::PathSnapshot& p : paths_of(a))
    if (p.health != transport::PathHealth::Active) return false;
  return true;
}

// Two devices over two planes each, on loopback addresses numbered in
// parallel (127.0.95.x on plane 0, 127.0.96.x on plane 1): one connection
// spreads over both, keeps its data intact when plane 1 goes down, and uses
// plane 1 again once it is back.
TEST(IoRuntime, TwoPlanesCarryOneConnectionAndSurviveOneGoingDown) {
  Pair p;
  const size_t bytes = 16 * kMiB;
  RuntimeOptions oa = test_options(true, true);
  RuntimeOptions ob = oa;
  oa.local_address = "127.0.95.1";
  oa.plane_addresses = {"127.0.96.1"};
  ob.local_address = "127.0.95.2";
  ob.plane_addresses = {"127.0.96.2"};
  make_pair(p, oa, ob, bytes);
  if (::testing::Test::HasFatalFailure()) return;

  TransferResult r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 21);
  EXPECT_EQ(r.successes, bytes / kMiB);
  EXPECT_TRUE(r.intact);
  std::vector<transport::PathSnapshot> paths = paths_of(p.a);
  ASSERT_EQ(paths.size(), 4u);
  for (const transport::PathSnapshot& path : paths) {
    EXPECT_EQ(path.plane, path.path_id % 2);
    EXPECT_GT(path.packets_sent, 0u) << "path " << path.path_id;
    // Its datagrams were accepted as the peer's on either plane (dropped as a
    // stranger's, its packets would have timed out and failed the path).
    EXPECT_EQ(path.health, transport::PathHealth::Active) << "path " << path.path_id;
  }
  const uint64_t plane1_before = plane_packets(paths, 1);

  // Plane 1 goes down on a's side: its paths are drained, nothing more is
  // sent on it, and the transfer completes on plane 0.
  p.a.runtime->with_engine([](Endpoint& e, Time now) { e.set_plane_up(now, 1, false); });
  r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 22);
  EXPECT_EQ(r.successes, bytes / kMiB);
  EXPECT_TRUE(r.intact);
  EXPECT_EQ(r.sender.plane_drains, 2u);
  paths = paths_of(p.a);
  EXPECT_EQ(plane_packets(paths, 1), plane1_before);
  for (const transport::PathSnapshot& path : paths) {
    if (path.plane == 1) {
      EXPECT_EQ(path.health, transport::PathHealth::Failed) << "path " << path.path_id;
    }
  }

  // Back up: its paths are probed, become active and carry data again.
  p.a.runtime->with_engine([](Endpoint& e, Time now) { e.set_plane_up(now, 1, true); });
  ASSERT_TRUE(eventually([&] { return all_active(p.a); }));
  r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 23);
  EXPECT_EQ(r.successes, bytes / kMiB);
  EXPECT_TRUE(r.intact);
  EXPECT_GT(plane_packets(paths_of(p.a), 1), plane1_before);
}

sockaddr_storage loopback(uint16_t port) {
  sockaddr_storage s{};
  auto& v4 = reinterpret_cast<sockaddr_in&>(s);
  v4.sin_family = AF_INET;
  v4.sin_port = htons(port);
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return s;
}

TEST(IoRuntime, PeerIdsAreStableAndThreadSafe) {
  auto runtime = make_runtime(test_options(false, true));
  ASSERT_NE(runtime, nullptr);
  constexpr int kThreads = 4;
  constexpr uint16_t kPorts = 50;
  std::vector<std::vector<transport::PeerId>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint16_t i = 0; i < kPorts; ++i)
        ids[t].push_back(runtime->peer_for(loopback(static_cast<uint16_t>(20000 + i))));
    });
  }
  for (auto& thread : threads) thread.join();
  std::set<transport::PeerId> distinct(ids[0].begin(), ids[0].end());
  EXPECT_EQ(distinct.size(), kPorts);
  EXPECT_EQ(*distinct.begin(), 1u);
  EXPECT_EQ(*distinct.rbegin(), transport::PeerId{kPorts});
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(ids[t], ids[0]);
  // IPv4 and its v4-mapped IPv6 form name the same peer.
  sockaddr_storage mapped{};
  auto& v6 = reinterpret_cast<sockaddr_in6&>(mapped);
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(20000);
  inet_pton(AF_INET6, "::ffff:127.0.0.1", &v6.sin6_addr);
  EXPECT_EQ(runtime->peer_for(mapped), ids[0][0]);
}

void run_unknown_sender_test(bool io_uring) {
  Pair p;
  const size_t bytes = 2 * kMiB;
  make_pair(p, test_options(io_uring, true), test_options(io_uring, true), bytes);
  if (::testing::Test::HasFatalFailure()) return;

  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  const sockaddr_storage target = p.b.runtime->local_address();
  auto send = [&](const void* data, size_t length) {
    ASSERT_EQ(::sendto(fd, data, length, 0, reinterpret_cast<const sockaddr*>(&target), sizeof(sockaddr_in)),
              static_cast<ssize_t>(length));
  };
  const char text[] = "hello";
  send(text, sizeof text);  // too short for a header
  std::vector<uint8_t> garbage(200, 0xa5);
  garbage[0] = wire::kVersion;  // a plausible header, home port nobody registered
  garbage[4] = 0x00;
  garbage[5] = 0x07;
  send(garbage.data(), garbage.size());
  send(garbage.data(), 0);  // empty datagram
  // Spoofed: claims A's home port from another source port. It reaches the
  // engine, which refuses to decode it.
  std::vector<uint8_t> spoofed(64, 0xff);
  spoofed[0] = wire::kVersion;
  const uint16_t home_a = htons(p.a.runtime->home_port());
  std::memcpy(&spoofed[4], &home_a, 2);
  send(spoofed.data(), spoofed.size());
  ::close(fd);

  // The garbage from a home port nobody registered is an unknown sender's;
  // the datagrams with no common header (too short, empty) and the spoofed
  // one are malformed (docs/spec.md 9.6 step 1).
  uint64_t malformed = 0;
  eventually([&] {
    malformed = p.b.runtime->with_engine([](Endpoint& e, Time) { return e.counters().rx_drop_malformed; });
    return malformed >= 3;
  });
  EXPECT_EQ(malformed, 3u);
  EXPECT_EQ(
      stats_when(*p.b.runtime, [](const RuntimeStats& s) { return s.unknown_sender_drops >= 1; }).unknown_sender_drops,
      1u);
  // Still works.
  const TransferResult r = transfer(p.a, p.b, p.waiter, bytes, kMiB, 4);
  EXPECT_EQ(r.successes, 2u);
  EXPECT_TRUE(r.intact);
}

TEST(IoRuntime, UnknownSendersAreCountedAndHarmlessOverIoUring) { run_unknown_sender_test(true); }
TEST(IoRuntime, UnknownSendersAreCountedAndHarmlessOverFallback) { run_unknown_sender_test(false); }

// --- teardown -----------------------------------------------------------------------

void run_teardown_test(bool io_uring, bool sender_first) {
  Pair p;
  const size_t bytes = 32 * kMiB;
  make_pair(p, test_options(io_uring, true), test_options(io_uring, true), bytes);
  if (::testing::Test::HasFatalFailure()) return;
  post_writes(p.a, p.b, bytes, kMiB);
  // Let some of it be on the wire (bounded wait on a stats counter).
  stats_when(*p.b.runtime, [](const RuntimeStats& s) { return s.datagrams_received >= 100; });
  // Each reset joins its progress thread: the test passing is the teardown
  // finishing (meson's timeout is the safety net).
  if (sender_first) {
    p.a.runtime.reset();
    p.b.runtime.reset();
  } else {
    p.b.runtime.reset();
    p.a.runtime.reset();
  }
  EXPECT_EQ(p.a.runtime, nullptr);
  EXPECT_EQ(p.b.runtime, nullptr);
}

TEST(IoRuntime, TeardownWithWorkInFlightIoUring) {
  run_teardown_test(true, true);
  run_teardown_test(true, false);
}
TEST(IoRuntime, TeardownWithWorkInFlightFallback) {
  run_teardown_test(false, true);
  run_teardown_test(false, false);
}

}  // namespace
}  // namespace metaroce::io
