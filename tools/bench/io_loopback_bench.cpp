// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// io-loopback-bench: goodput of one large RDMA WRITE transfer between two
// io::Runtimes over 127.0.0.1, for io_uring and the sendmmsg fallback, with
// and without GSO/GRO, next to a raw UDP baseline measured in the same run (a
// tight sendmsg + UDP_SEGMENT loop into a receiver thread doing recvmsg with
// UDP_GRO). One JSON object per line on stdout.
//
//   io-loopback-bench [--mib N] [--message-kib N] [--mtu N] [--paths N]
//                     [--burst-us N] [--rate-gbps N] [--wire-delay-us N]
//                     [--runs N] [--case NAME]
//                     [--security integrity|authenticate|encrypt|all]
// Cases: raw-gso, raw-plain, byte-floor, engine-only, uring-gso, uring,
// mmsg-gso, mmsg
// (default: all). The engine cases run once per security mode (default:
// all three, side by side) and report the CPU time per byte moved.
//
// engine-only runs the two engines in one thread, in virtual time, driven as
// the runtime drives them: the runtime's pacing burst (--burst-us), and a
// virtual wire that delivers each datagram --wire-delay-us after it left
// (default 10). Without the delay every RTT sample is zero, the rate hint's
// connection window (two hint-rate RTTs) sits at its two-packet floor, and
// each pair of packets waits out the ACK delay: half the datagrams are then
// ACKs. The runtime cases print acks_sent too, for comparison (over loopback
// the runtime sends one ACK per 80 to 120 data packets).

#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cpu_time.h"
#include "metaroce/wire.h"
#include "packet_protection.h"
#include "runtime.h"

namespace {

using metaroce::bench::cpu_s_per_gib;
using metaroce::bench::cpu_seconds;
using metaroce::io::Runtime;
using metaroce::io::RuntimeOptions;
using metaroce::io::RuntimeStats;
using metaroce::transport::Completion;
using metaroce::transport::Endpoint;
using metaroce::transport::Time;
using metaroce::wire::Security;

struct Args {
  size_t mib = 256;
  size_t message_kib = 1024;
  uint32_t mtu = 4096;
  uint16_t paths = 4;
  uint64_t burst_us = 100;
  uint64_t rate_gbps = 100;
  uint64_t wire_delay_us = 10;  // engine-only: one-way delay of the virtual wire
  int runs = 1;
  std::string only;
  std::vector<Security> modes = {Security::Integrity, Security::Authenticate, Security::Encrypt};
};

// The bench's two ends share one pair key (metaroced would derive it).
void key_endpoints(Endpoint& a, metaroce::transport::PeerId b_at_a, Endpoint& b, metaroce::transport::PeerId a_at_b) {
  metaroce::transport::PairKey key;
  key.fill(0x5c);
  a.set_peer_key(b_at_a, key, 0);
  b.set_peer_key(a_at_b, key, 1);
}

// Both ends of every engine case, with or without the runtime.
metaroce::transport::EndpointConfig endpoint_config(const Args& args, Security security) {
  metaroce::transport::EndpointConfig config;
  config.paths = args.paths;
  config.mtu = args.mtu;
  config.path_rate_bps = args.rate_gbps * 1'000'000'000 / std::max<uint16_t>(args.paths, 1);
  config.base_rtt_ns = 100'000;
  config.min_rto_ns = 2'000'000;
  config.cc.target_queue_delay_ns = 2'000'000;
  config.security = security;
  return config;
}

// The bench's transfer: WRITEs of `message` bytes from source to sink, at
// most `depth` of them posted at a time (the QP's send queue; perftest keeps
// its tx_depth the same way), the next ones posted as completions arrive.
class WriteStream {
 public:
  WriteStream(const std::vector<uint8_t>& source, uint32_t lkey, std::vector<uint8_t>& sink, uint32_t rkey,
              size_t total, size_t message, size_t depth)
      : source_(reinterpret_cast<uintptr_t>(source.data())),
        sink_(reinterpret_cast<uintptr_t>(sink.data())),
        lkey_(lkey),
        rkey_(rkey),
        total_(total),
        message_(message),
        depth_(depth),
        messages_((total + message - 1) / message) {}

  bool finished() const { return completed_ >= messages_; }
  void completed(size_t n) { completed_ += n; }
  // Posts what the depth allows. A refused post would leave the bench
  // waiting for a completion that never comes: it ends the bench instead.
  void post(Endpoint& e, uint32_t qp) {
    for (; posted_ < messages_ && posted_ - completed_ < depth_; ++posted_) {
      metaroce::transport::SendWr wr;
      wr.wr_id = posted_;
      wr.opcode = metaroce::transport::WrOpcode::RdmaWrite;
      wr.num_sge = 1;
      const size_t offset = posted_ * message_;
      wr.sg[0] = {source_ + offset, static_cast<uint32_t>(std::min(message_, total_ - offset)), lkey_};
      wr.remote_addr = sink_ + offset;
      wr.rkey = rkey_;
      if (e.post_send(qp, wr) != metaroce::transport::PostResult::Ok) {
        std::fprintf(stderr, "io-loopback-bench: the engine refused WRITE %zu\n", posted_);
        std::exit(1);
      }
    }
  }

 private:
  const uintptr_t source_, sink_;
  const uint32_t lkey_, rkey_;
  const size_t total_, message_, depth_, messages_;
  size_t posted_ = 0;
  size_t completed_ = 0;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void set_buffers(int fd, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
}

// The runtime cases send straight from the source buffer. On some virtual
// machines, this project's CI machines among them, the kernel's first read of
// each freshly written user page is slow: 512 MiB took 1.02 s through
// write(2) the first time and 0.05 s the second. Whichever runtime case ran
// first paid for it (io_uring with GSO, which then looked 4x slower than
// sendmmsg with GSO), and a case run alone paid for it every time. So every
// page of the buffer passes through a pipe once, before anything is timed.
void let_the_kernel_read(const std::vector<uint8_t>& buffer) {
  int fds[2];
  if (pipe(fds) != 0) return;
  std::vector<uint8_t> drain(65536);  // a pipe's default capacity: one write never blocks
  bool ok = true;
  for (size_t offset = 0; ok && offset < buffer.size(); offset += drain.size()) {
    const size_t n = std::min(drain.size(), buffer.size() - offset);
    ok = write(fds[1], buffer.data() + offset, n) == static_cast<ssize_t>(n);
    for (size_t got = 0; ok && got < n;) {
      const ssize_t r = read(fds[0], drain.data(), n - got);
      ok = r > 0;
      got += ok ? static_cast<size_t>(r) : 0;
    }
  }
  close(fds[0]);
  close(fds[1]);
}

// --- raw UDP baseline ----------------------------------------------------------

void run_raw(const Args& args, bool gso) {
  const size_t total = args.mib << 20;
  // What the engine puts on the wire per data packet in integrity mode.
  const uint32_t datagram =
      args.mtu + static_cast<uint32_t>(metaroce::wire::kDataHeaderBytes + metaroce::wire::kIntegrityTrailerBytes);
  const uint32_t per_send = gso ? std::max<uint32_t>(1, 65000 / datagram) : 1;

  const int rx = socket(AF_INET, SOCK_DGRAM, 0);
  const int tx = socket(AF_INET, SOCK_DGRAM, 0);
  set_buffers(rx, 8 << 20);
  set_buffers(tx, 8 << 20);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(rx, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(rx, reinterpret_cast<sockaddr*>(&address), &length);
  const int one = 1;
  if (gso) setsockopt(rx, SOL_UDP, UDP_GRO, &one, sizeof one);
  timeval timeout{0, 200'000};
  setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  connect(tx, reinterpret_cast<sockaddr*>(&address), sizeof address);

  std::atomic<bool> sender_done{false};
  std::atomic<size_t> received{0};
  std::atomic<uint64_t> receive_calls{0};
  auto last_byte = std::chrono::steady_clock::now();
  std::thread receiver([&] {
    std::vector<uint8_t> buffer(65536);
    alignas(8) uint8_t control[128];
    size_t got = 0;
    uint64_t calls = 0;
    while (got < total) {
      iovec iov{buffer.data(), buffer.size()};
      msghdr h{};
      h.msg_iov = &iov;
      h.msg_iovlen = 1;
      h.msg_control = control;
      h.msg_controllen = sizeof control;
      const ssize_t n = recvmsg(rx, &h, 0);
      ++calls;
      if (n < 0) {
        if (sender_done.load()) break;  // timed out after the sender finished: the rest was lost
        continue;
      }
      got += static_cast<size_t>(n);
      last_byte = std::chrono::steady_clock::now();
    }
    received = got;
    receive_calls = calls;
  });

  std::vector<uint8_t> payload(size_t{datagram} * per_send, 0x5a);
  alignas(8) uint8_t control[CMSG_SPACE(sizeof(uint16_t))] = {};
  const double cpu0 = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  size_t sent = 0;
  uint64_t send_calls = 0;
  while (sent < total) {
    iovec iov{payload.data(), payload.size()};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    if (per_send > 1) {
      h.msg_control = control;
      h.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
      const uint16_t segment = static_cast<uint16_t>(datagram);
      std::memcpy(CMSG_DATA(c), &segment, sizeof segment);
    }
    const ssize_t n = sendmsg(tx, &h, 0);
    ++send_calls;
    if (n > 0) sent += static_cast<size_t>(n);
  }
  sender_done = true;
  receiver.join();
  const double wall = std::chrono::duration<double>(last_byte - start).count();
  const double cpu = cpu_seconds() - cpu0;
  std::printf(
      "{\"bench\":\"io_loopback\",\"case\":\"%s\",\"gso\":%s,\"gro\":%s,\"bytes_sent\":%zu,\"bytes_received\":%zu,"
      "\"loss_pct\":%.2f,\"datagram_bytes\":%u,\"seconds\":%.4f,\"goodput_gbps\":%.2f,\"cpu_seconds\":%.3f,"
      "\"cpu_s_per_gib\":%.3f,\"send_syscalls\":%llu,\"receive_syscalls\":%llu}\n",
      gso ? "raw-udp-gso" : "raw-udp", gso ? "true" : "false", gso ? "true" : "false", sent, received.load(),
      100.0 * (1.0 - static_cast<double>(received.load()) / static_cast<double>(sent)), datagram, wall,
      static_cast<double>(received.load()) * 8 / wall / 1e9, cpu, cpu_s_per_gib(cpu, received.load()),
      static_cast<unsigned long long>(send_calls), static_cast<unsigned long long>(receive_calls.load()));
  std::fflush(stdout);
  close(rx);
  close(tx);
}

// --- MetaRoCE over io::Runtime ---------------------------------------------------

class Waiter {
 public:
  void signal() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++signals_;
    }
    cv_.notify_all();
  }
  uint64_t signals() {
    std::lock_guard<std::mutex> lock(mutex_);
    return signals_;
  }
  bool wait_change(uint64_t seen, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_until(lock, deadline, [&] { return signals_ != seen; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  uint64_t signals_ = 0;
};

bool run_metaroce(const Args& args, bool io_uring, bool gso, Security security, std::vector<uint8_t>& source,
                  std::vector<uint8_t>& sink) {
  const size_t total = args.mib << 20;
  const size_t message = args.message_kib << 10;
  RuntimeOptions options;
  options.allow_io_uring = io_uring;
  options.use_gso = gso;
  options.use_gro = gso;
  options.pacing_burst_ns = args.burst_us * 1000;
  options.endpoint = endpoint_config(args, security);
  std::string error;
  Waiter waiter;
  auto a = Runtime::create(options, error);
  auto b = a ? Runtime::create(options, error) : nullptr;
  if (!a || !b) {
    std::fprintf(stderr, "runtime: %s\n", error.c_str());
    std::exit(1);
  }
  a->set_completion_listener([&](uint32_t) { waiter.signal(); });
  metaroce::transport::QpConfig qp_config;
  qp_config.timeout_ns = 50'000'000;
  uint32_t cq_a = 0, qp_a = 0, key_a = 0, cq_b = 0, qp_b = 0, key_b = 0;
  a->with_engine([&](Endpoint& e, Time) {
    cq_a = e.create_cq(4096);
    qp_a = e.create_qp(1, cq_a, cq_a, qp_config);
    key_a = *e.memory().register_region(1, reinterpret_cast<uintptr_t>(source.data()), total,
                                        metaroce::transport::kAccessLocalWrite);
  });
  b->with_engine([&](Endpoint& e, Time) {
    cq_b = e.create_cq(4096);
    qp_b = e.create_qp(1, cq_b, cq_b, qp_config);
    key_b =
        *e.memory().register_region(1, reinterpret_cast<uintptr_t>(sink.data()), total,
                                    metaroce::transport::kAccessLocalWrite | metaroce::transport::kAccessRemoteWrite);
  });
  const auto peer_b = a->peer_for(b->local_address());
  const auto peer_a = b->peer_for(a->local_address());
  a->with_engine(
      [&](Endpoint& ea, Time) { b->with_engine([&](Endpoint& eb, Time) { key_endpoints(ea, peer_b, eb, peer_a); }); });
  a->with_engine([&](Endpoint& e, Time) { e.connect_qp(qp_a, peer_b, qp_b, qp_config); });
  b->with_engine([&](Endpoint& e, Time) { e.connect_qp(qp_b, peer_a, qp_a, qp_config); });
  std::memset(sink.data(), 0, total);

  const double cpu0 = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  WriteStream stream(source, key_a, sink, key_b, total, message, qp_config.max_send_wr);
  a->with_engine([&](Endpoint& e, Time) { stream.post(e, qp_a); });
  size_t failed = 0;
  const auto deadline = start + std::chrono::seconds(300);
  while (!stream.finished()) {
    const uint64_t seen = waiter.signals();
    a->with_engine([&](Endpoint& e, Time) {
      Completion batch[64];
      while (size_t n = e.poll_cq(cq_a, batch)) {
        for (size_t i = 0; i < n; ++i) failed += batch[i].status != metaroce::transport::WcStatus::Success;
        stream.completed(n);
      }
      stream.post(e, qp_a);
    });
    if (stream.finished()) break;
    if (!waiter.wait_change(seen, deadline)) break;
  }
  const double wall = seconds_since(start);
  const double cpu = cpu_seconds() - cpu0;
  const bool intact = stream.finished() && failed == 0 && std::memcmp(source.data(), sink.data(), total) == 0;
  const RuntimeStats sa = a->stats();
  const RuntimeStats sb = b->stats();
  const auto ca = a->with_engine([](Endpoint& e, Time) { return e.counters(); });
  const auto cb = b->with_engine([](Endpoint& e, Time) { return e.counters(); });
  std::printf(
      "{\"bench\":\"io_loopback\",\"case\":\"metaroce\",\"security\":\"%s\",\"backend\":\"%s\",\"gso\":%s,\"gro\":%s,"
      "\"bytes\":%zu,"
      "\"message_bytes\":%zu,\"mtu\":%u,\"paths\":%u,\"burst_us\":%llu,\"intact\":%s,\"seconds\":%.4f,"
      "\"goodput_gbps\":%.2f,\"cpu_seconds\":%.3f,\"cpu_ns_per_byte\":%.3f,\"cpu_s_per_gib\":%.3f,"
      "\"datagrams_sent\":%llu,\"send_syscalls\":%llu,"
      "\"gso_sends\":%llu,\"receiver_datagrams\":%llu,\"receiver_syscalls\":%llu,\"gro_receives\":%llu,"
      "\"retransmits\":%llu,\"acks_sent\":%llu,\"sender_wakeups\":%llu,\"receiver_wakeups\":%llu}\n",
      metaroce::wire::to_string(security), sa.io_uring ? "io_uring" : "sendmmsg", sa.gso ? "true" : "false",
      sb.gro ? "true" : "false", total, message, args.mtu, args.paths, static_cast<unsigned long long>(args.burst_us),
      intact ? "true" : "false", wall, intact ? static_cast<double>(total) * 8 / wall / 1e9 : 0.0, cpu,
      cpu * 1e9 / static_cast<double>(total), cpu_s_per_gib(cpu, total),
      static_cast<unsigned long long>(sa.datagrams_sent), static_cast<unsigned long long>(sa.send_syscalls),
      static_cast<unsigned long long>(sa.gso_sends), static_cast<unsigned long long>(sb.datagrams_received),
      static_cast<unsigned long long>(sb.receive_syscalls), static_cast<unsigned long long>(sb.gro_receives),
      static_cast<unsigned long long>(ca.tx_retransmits), static_cast<unsigned long long>(cb.tx_acks),
      static_cast<unsigned long long>(sa.progress_wakeups), static_cast<unsigned long long>(sb.progress_wakeups));
  std::fflush(stdout);
  return intact;
}

// --- the engine alone ------------------------------------------------------------

// One direction of the engine-only bench's wire: datagrams in the order
// sent, each delivered at its time, in preallocated slots (the engine writes
// into the slot; nothing is copied or allocated per datagram).
class VirtualWire {
 public:
  explicit VirtualWire(size_t slot_bytes) : slot_bytes_(slot_bytes), data_(kSlots * slot_bytes), entries_(kSlots) {}

  bool full() const { return count_ == kSlots; }
  std::span<uint8_t> slot() { return {data_.data() + index(count_) * slot_bytes_, slot_bytes_}; }
  void commit(Time arrival, uint32_t length) { entries_[index(count_++)] = {arrival, length}; }

  bool arrived(Time now) const { return count_ > 0 && entries_[head_].arrival <= now; }
  std::span<const uint8_t> front() const { return {data_.data() + head_ * slot_bytes_, entries_[head_].length}; }
  void pop() {
    head_ = (head_ + 1) % kSlots;
    --count_;
  }
  Time next_arrival() const { return count_ > 0 ? entries_[head_].arrival : metaroce::transport::kNever; }

 private:
  static constexpr size_t kSlots = 4096;  // far above what a window puts in flight
  struct Entry {
    Time arrival = 0;
    uint32_t length = 0;
  };
  size_t index(size_t offset) const { return (head_ + offset) % kSlots; }

  size_t slot_bytes_;
  std::vector<uint8_t> data_;
  std::vector<Entry> entries_;
  size_t head_ = 0;
  size_t count_ = 0;
};

// The same transfer between two Endpoints in this thread, datagrams crossing
// a VirtualWire and the clock jumping to the next event: the CPU cost of the
// engine without any I/O, an upper bound for one core.
bool run_engine_only(const Args& args, Security security, std::vector<uint8_t>& source, std::vector<uint8_t>& sink) {
  using namespace metaroce::transport;
  const size_t total = args.mib << 20;
  const size_t message = args.message_kib << 10;
  EndpointConfig config = endpoint_config(args, security);
  config.pacing_burst_ns = args.burst_us * 1000;  // as the runtime sets it
  Endpoint a(config);
  Endpoint b(config);
  key_endpoints(a, 2, b, 1);
  QpConfig qp_config;
  qp_config.timeout_ns = 50'000'000;
  const uint32_t cq_a = a.create_cq(4096);
  const uint32_t qp_a = a.create_qp(1, cq_a, cq_a, qp_config);
  const uint32_t cq_b = b.create_cq(4096);
  const uint32_t qp_b = b.create_qp(1, cq_b, cq_b, qp_config);
  const uint32_t key_a =
      *a.memory().register_region(1, reinterpret_cast<uintptr_t>(source.data()), total, kAccessLocalWrite);
  const uint32_t key_b = *b.memory().register_region(1, reinterpret_cast<uintptr_t>(sink.data()), total,
                                                     kAccessLocalWrite | kAccessRemoteWrite);
  a.connect_qp(qp_a, 2, qp_b, qp_config);  // peer ids: a is 1, b is 2
  b.connect_qp(qp_b, 1, qp_a, qp_config);
  std::memset(sink.data(), 0, total);
  const size_t slot_bytes = std::max(a.max_datagram_bytes(), b.max_datagram_bytes());
  VirtualWire a_to_b(slot_bytes);
  VirtualWire b_to_a(slot_bytes);
  const Time delay = args.wire_delay_us * 1000;
  const double cpu0 = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  WriteStream stream(source, key_a, sink, key_b, total, message, qp_config.max_send_wr);
  stream.post(a, qp_a);
  Time now = 1'000'000;
  uint64_t datagrams = 0;
  Completion batch[64];
  for (uint64_t step = 0; !stream.finished() && step < 100'000'000; ++step) {
    bool moved = false;
    while (!a_to_b.full()) {
      auto d = a.poll_transmit(now, a_to_b.slot());
      if (!d) break;
      a_to_b.commit(now + delay, d->length);
      moved = true;
      ++datagrams;
    }
    while (!b_to_a.full()) {
      auto d = b.poll_transmit(now, b_to_a.slot());
      if (!d) break;
      b_to_a.commit(now + delay, d->length);
      moved = true;
    }
    for (; a_to_b.arrived(now); a_to_b.pop(), moved = true) b.on_datagram(now, 1, a_to_b.front(), false);
    for (; b_to_a.arrived(now); b_to_a.pop(), moved = true) a.on_datagram(now, 2, b_to_a.front(), false);
    while (size_t n = a.poll_cq(cq_a, batch)) {
      stream.completed(n);
      moved = true;
    }
    stream.post(a, qp_a);
    if (moved) continue;
    // As a driver does: each side's wake-up asked once per idle turn.
    const Time wake_a = a.next_wakeup();
    const Time wake_b = b.next_wakeup();
    const Time next = std::min({wake_a, wake_b, a_to_b.next_arrival(), b_to_a.next_arrival()});
    if (next == kNever) break;
    now = std::max(now + 1, next);
    if (wake_a <= now) a.on_timer(now);
    if (wake_b <= now) b.on_timer(now);
  }
  const double wall = seconds_since(start);
  const double cpu = cpu_seconds() - cpu0;
  const bool intact = stream.finished() && std::memcmp(source.data(), sink.data(), total) == 0;
  std::printf(
      "{\"bench\":\"io_loopback\",\"case\":\"engine-only\",\"security\":\"%s\",\"bytes\":%zu,\"mtu\":%u,\"paths\":%u,"
      "\"intact\":%s,\"seconds\":%.4f,\"goodput_gbps\":%.2f,\"cpu_seconds\":%.3f,\"cpu_ns_per_byte\":%.3f,"
      "\"cpu_s_per_gib\":%.3f,\"datagrams_sent\":%llu,\"acks_sent\":%llu,\"wire_delay_us\":%llu}\n",
      metaroce::wire::to_string(security), total, args.mtu, args.paths, intact ? "true" : "false", wall,
      intact ? static_cast<double>(total) * 8 / wall / 1e9 : 0.0, cpu, cpu * 1e9 / static_cast<double>(total),
      cpu_s_per_gib(cpu, total), static_cast<unsigned long long>(datagrams),
      static_cast<unsigned long long>(b.counters().tx_acks), static_cast<unsigned long long>(args.wire_delay_us));
  std::fflush(stdout);
  return intact;
}

// The per-byte work every data datagram costs, whatever the engine does
// around it: the sender copies the payload behind a data header and seals the
// datagram (integrity: a CRC32C; authenticate and encrypt: AES-128-GCM), the
// receiver checks (and in encrypt mode decrypts) it and copies the payload to
// its place. No header is encoded or decoded and no state is kept, so the
// engine-only case costs at least this much; the runtime cases pay it less
// the sender's copy (the kernel makes it) on top of the raw UDP baseline.
bool run_byte_floor(const Args& args, Security security, const std::vector<uint8_t>& source,
                    std::vector<uint8_t>& sink) {
  using namespace metaroce::transport;
  const size_t total = args.mib << 20;
  const size_t head = metaroce::wire::kDataHeaderBytes;
  std::vector<uint8_t> datagram(head + args.mtu + metaroce::wire::kMaxTrailerBytes, 0x11);
  std::vector<uint8_t> plain(datagram.size());
  PairKey pair_key;
  pair_key.fill(0x5c);
  TrafficKey seal_key(pair_key, 0, 1, 1);
  TrafficKey open_key(pair_key, 0, 1, 1);
  const size_t trailer = metaroce::wire::trailer_bytes(security);
  std::memset(sink.data(), 0, total);
  const double cpu0 = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  bool genuine = true;
  uint64_t datagrams = 0;
  const size_t message = args.message_kib << 10;
  for (size_t offset = 0; offset < total; ++datagrams) {
    // Chunked per message, as the engine chunks each WRITE.
    const size_t message_end = std::min(total, (offset / message + 1) * message);
    const size_t payload = std::min<size_t>(args.mtu, message_end - offset);
    const size_t length = head + payload;
    std::memcpy(datagram.data() + head, source.data() + offset, payload);
    const std::span<uint8_t> sealed(datagram.data(), length + trailer);
    const uint8_t* placed = sealed.data() + head;
    if (security == Security::Integrity) {
      seal_integrity(sealed, length);
      genuine &= check_integrity(sealed);
    } else {
      genuine &= seal_key.seal(security, sealed, length, datagrams);
      genuine &= open_key.open(security, sealed, datagrams, plain);
      if (security == Security::Encrypt) placed = plain.data() + head;
    }
    std::memcpy(sink.data() + offset, placed, payload);
    offset += payload;
  }
  const double wall = seconds_since(start);
  const double cpu = cpu_seconds() - cpu0;
  const bool intact = genuine && std::memcmp(source.data(), sink.data(), total) == 0;
  std::printf(
      "{\"bench\":\"io_loopback\",\"case\":\"byte-floor\",\"security\":\"%s\",\"bytes\":%zu,\"mtu\":%u,"
      "\"intact\":%s,\"seconds\":%.4f,\"goodput_gbps\":%.2f,\"cpu_seconds\":%.3f,\"cpu_ns_per_byte\":%.3f,"
      "\"cpu_s_per_gib\":%.3f,\"datagrams_sent\":%llu}\n",
      metaroce::wire::to_string(security), total, args.mtu, intact ? "true" : "false", wall,
      intact ? static_cast<double>(total) * 8 / wall / 1e9 : 0.0, cpu, cpu * 1e9 / static_cast<double>(total),
      cpu_s_per_gib(cpu, total), static_cast<unsigned long long>(datagrams));
  std::fflush(stdout);
  return intact;
}

bool parse(int argc, char** argv, Args& args) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    if (flag == "--mib") args.mib = std::strtoull(value, nullptr, 10);
    else if (flag == "--message-kib") args.message_kib = std::strtoull(value, nullptr, 10);
    else if (flag == "--mtu") args.mtu = static_cast<uint32_t>(std::strtoul(value, nullptr, 10));
    else if (flag == "--paths") args.paths = static_cast<uint16_t>(std::strtoul(value, nullptr, 10));
    else if (flag == "--burst-us") args.burst_us = std::strtoull(value, nullptr, 10);
    else if (flag == "--rate-gbps") args.rate_gbps = std::strtoull(value, nullptr, 10);
    else if (flag == "--wire-delay-us") args.wire_delay_us = std::strtoull(value, nullptr, 10);
    else if (flag == "--runs") args.runs = std::atoi(value);
    else if (flag == "--case") args.only = value;
    else if (flag == "--security") {
      args.modes.clear();
      for (uint8_t m = 0; m < metaroce::wire::kSecurityCount; ++m)
        if (std::strcmp(value, "all") == 0 ||
            std::strcmp(value, metaroce::wire::to_string(static_cast<Security>(m))) == 0)
          args.modes.push_back(static_cast<Security>(m));
      if (args.modes.empty()) return false;
    } else return false;
  }
  return args.mib > 0 && args.message_kib > 0 && args.paths > 0 && args.runs > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, args)) {
    std::fprintf(stderr,
                 "usage: io-loopback-bench [--mib N] [--message-kib N] [--mtu N] [--paths N] [--burst-us N]\n"
                 "                         [--rate-gbps N] [--wire-delay-us N] [--runs N]\n"
                 "                         [--case raw-gso|raw-plain|byte-floor|engine-only|uring-gso|"
                 "uring|mmsg-gso|mmsg]\n"
                 "                         [--security integrity|authenticate|encrypt|all]\n");
    return 2;
  }
  const size_t total = args.mib << 20;
  std::vector<uint8_t> source(total);
  std::vector<uint8_t> sink(total);
  uint64_t x = 1;
  for (size_t i = 0; i + 8 <= total; i += 8) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    std::memcpy(source.data() + i, &x, 8);
  }
  let_the_kernel_read(source);
  auto want = [&](const char* name) { return args.only.empty() || args.only == name; };
  bool intact = true;  // every MetaRoCE case delivered every byte
  for (int run = 0; run < args.runs; ++run) {
    if (want("raw-gso")) run_raw(args, true);
    if (want("raw-plain")) run_raw(args, false);
    for (const Security mode : args.modes) {
      if (want("byte-floor")) intact &= run_byte_floor(args, mode, source, sink);
      if (want("engine-only")) intact &= run_engine_only(args, mode, source, sink);
      if (want("uring-gso")) intact &= run_metaroce(args, true, true, mode, source, sink);
      if (want("uring")) intact &= run_metaroce(args, true, false, mode, source, sink);
      if (want("mmsg-gso")) intact &= run_metaroce(args, false, true, mode, source, sink);
      if (want("mmsg")) intact &= run_metaroce(args, false, false, mode, source, sink);
    }
  }
  if (!intact) std::fprintf(stderr, "io-loopback-bench: a MetaRoCE case did not deliver its data intact\n");
  return intact ? 0 : 1;
}
