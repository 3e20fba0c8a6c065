// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The runtime that drives one transport::Endpoint over real UDP: a home
// socket plus one socket per path (its source port), io_uring batched I/O
// with GSO/GRO where the kernel allows (sendmmsg/recvmmsg otherwise), the
// engine's timers, and one progress thread so that one-sided operations
// progress while the application does nothing. One Runtime per device
// context.
//
// Path sockets: `paths` default sockets (ephemeral ports, or the ports a
// daemon leased), used by every peer unless route_peer() gave it its own
// source ports (chosen by path discovery for that destination). Each path
// socket belongs to one plane (RuntimeOptions::plane_addresses).
//
// Threading: the engine is not thread-safe; every access goes through
// with_engine(), which holds the runtime's lock. The progress thread takes the
// same lock for each batch of datagrams and timers.
//
// Waking the progress thread: after a with_engine() call the runtime compares
// the engine's next_wakeup() with the deadline the progress thread sleeps
// until, and wakes it (an eventfd write) only when the engine now wants it
// sooner. A call that changes nothing the thread must act on (a poll that
// found nothing owed, a query) costs it nothing. When the engine has
// datagrams due now and the progress thread holds none unsent, the calling
// thread transmits up to kInlineDatagrams of them itself (inline_transmit):
// a request posted to an idle QP leaves without a thread hand-off.
//
// Injected (RuntimeOptions): the clock the engine, the progress loop and the
// backend share, and the factory of the backend, so that tests drive the
// progress loop with a FakeClock and a scripted backend (tests/io/) instead
// of real time and the kernel.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "endpoint.h"
#include "metaroce/clock.h"
#include "runtime_stats.h"
#include "scheduler_slice.h"

namespace metaroce::io {

class IoBackend;
struct BackendConfig;

struct RuntimeOptions {
  // Local IPv4 or IPv6 literal to bind every socket to (the device's address).
  std::string local_address = "127.0.0.1";
  // A device over several planes (docs/spec.md 8.15): the addresses of planes
  // 1.., of local_address's family (local_address is plane 0). Path p's
  // socket binds plane p % planes's address, and peers are reached on each
  // plane as peer_table.h says; the home socket then binds the wildcard
  // address, so that it receives on every plane. Empty: one plane.
  std::vector<std::string> plane_addresses;
  // Home port; 0 = the first free port in [home_port_first, home_port_first + home_port_count).
  uint16_t home_port = 0;
  uint16_t home_port_first = wire::kHomePortBase;
  uint16_t home_port_count = wire::kHomePortCount;
  // Paths (source ports). Each path socket binds an ephemeral port chosen by
  // the kernel, so concurrent processes never collide.
  transport::EndpointConfig endpoint;  // endpoint.paths, mtu, timers; home_port is filled in
  // The engine's memory-region table when it shares one with other
  // runtimes (transport::Endpoint's constructor), with its guarded reader
  // (guarded_read.h) already set; null: its own.
  std::shared_ptr<transport::MemoryRegistry> memory;
  // When not empty, path i binds path_source_ports[i] instead of an
  // ephemeral port (ports leased from the daemon, so that contexts never
  // collide and discovery can choose ports that cover the fabric's paths);
  // needs at least `paths` ports.
  std::vector<uint16_t> path_source_ports;
  bool allow_io_uring = true;  // false: force the sendmmsg/recvmmsg fallback
  // Datagrams due when a with_engine() call returns leave from the calling
  // thread (sendmmsg) when the progress thread holds none unsent; false:
  // the progress thread sends everything.
  bool inline_transmit = true;
  // Busy polling: after its last datagram or send, the progress thread polls
  // the sockets without sleeping for this long before it sleeps again (0:
  // off). For latency-bound programs that can spare a core; an idle context
  // still sleeps once the time has passed.
  transport::Time busy_poll_ns = 0;
  // The progress thread asks the kernel for this scheduler slice
  // (scheduler_slice.h), so that it runs as soon as a datagram wakes it
  // even when the application's threads spin on every core; 0: the
  // kernel's default slice.
  transport::Time progress_slice_ns = kProgressSliceNs;
  bool use_gso = true;  // UDP_SEGMENT on send where supported
  // Large payloads leave without a copy (BackendConfig::zerocopy). Pays off
  // only where a NIC reads the pinned pages: over loopback and veth the
  // kernel copies each one anyway when it delivers it.
  bool zerocopy = false;
  bool use_gro = true;  // UDP_GRO on receive where supported
  // Test hook: drop each received datagram with this probability before the
  // engine sees it (there is no netem here). Deterministic from test_seed.
  double test_drop_probability = 0;
  uint64_t test_seed = 1;
  // Kernel socket buffer sizes to request (SO_RCVBUF/SO_SNDBUF; capped by rmem_max/wmem_max).
  int socket_buffer_bytes = 8 << 20;
  // Pacing burst allowance given to the engine (EndpointConfig::
  // pacing_burst_ns): how much paced traffic one wake-up of the progress
  // thread may release in one submission. Raised where the links are slow
  // enough that half of it would not fill one GSO message per path (10 Gb/s,
  // 4 paths: 416 us); the engine caps it at a quarter of its minimum RTO.
  // 0 = strictly paced, one datagram per path per wake-up.
  transport::Time pacing_burst_ns = 100'000;
  // The clock of the engine, the progress loop and the backend; null:
  // monotonic_clock(). Shared so that the runtime keeps it alive.
  std::shared_ptr<const Clock> clock;
  // Makes the progress thread's backend (io_backend.h, BackendFactory); empty:
  // io_uring when allow_io_uring and the kernel allow it, else
  // sendmmsg/recvmmsg. A test's factory makes a fake backend.
  std::function<std::unique_ptr<IoBackend>(const BackendConfig&)> make_backend;
};

class Runtime {
 public:
  // Opens sockets and starts the progress thread. On failure returns null
  // and sets `error` to a one-line reason.
  static std::unique_ptr<Runtime> create(const RuntimeOptions& options, std::string& error);
  virtual ~Runtime() = default;  // stops the thread and closes the sockets

  virtual uint16_t home_port() const = 0;
  // RuntimeOptions::busy_poll_ns as the runtime was started with it.
  virtual transport::Time busy_poll_ns() const = 0;
  // The bound local address (with the home port).
  virtual sockaddr_storage local_address() const = 0;

  // The peer id for a remote endpoint at `address` (IP + home port),
  // allocated on first use. Datagrams are attributed to a peer by their
  // source IP and the home_port field of their common header.
  virtual transport::PeerId peer_for(const sockaddr_storage& address) = 0;

  // Runs fn(endpoint, now) under the engine lock, then (still under it)
  // transmits what fn made due or wakes the progress thread for it (see
  // Threading above).
  template <typename Fn>
  auto with_engine(Fn&& fn) {
    EngineLock lock(*this);
    struct Settle {
      Runtime* runtime;
      ~Settle() { runtime->settle(); }
    } settle{this};  // destroyed before the lock is released
    return fn(engine(), now());
  }

  // `listener` is called once for every completion pushed to CQ `cq`, by
  // the thread that pushed it (the progress thread, or one in with_engine())
  // just after that thread has released the engine lock, so that an
  // application thread the listener wakes finds the lock free rather than
  // sleeping on it until the progress thread has ended its iteration. Must
  // be quick (e.g. write an eventfd).
  void set_completion_listener(std::function<void(uint32_t cq)> listener) {
    std::lock_guard<std::mutex> lock(listener_mutex_);
    completion_listener_ = std::move(listener);
  }

  virtual RuntimeStats stats() const = 0;
  // Returns once the kernel has read every datagram handed out so far whose
  // payload it copies from application memory (EndpointConfig::
  // gather_payload; the progress thread's sends may still be queued in the
  // kernel after the engine lock is released). An MR's deregistration calls
  // it after the engine has forgotten the MR, before the application may
  // free the memory. Not on the progress thread, nor with the engine lock
  // held.
  virtual void fence_sends() = 0;
  // Stops the progress thread after it has sent what the peers are owed
  // (ACKs for what completed here, NAKs); the destructor does it too. For
  // a process that exits without closing its devices. Idempotent.
  virtual void shutdown() = 0;
  // Path i of `peer` leaves from source port ports[i % size] (opening
  // sockets for ports not open yet) instead of the default sockets, so that
  // path discovery can steer it. Meant for before the first packet to the
  // peer (a path that changes its source port mid-transfer changes its
  // route). False, with `error`, when a port cannot be bound or the peer is
  // unknown.
  virtual bool route_peer(transport::PeerId peer, const std::vector<uint16_t>& ports, std::string& error) = 0;
  // The source port path `path` of `peer` leaves from.
  virtual uint16_t source_port(transport::PeerId peer, uint16_t path) const = 0;
  // The address (IP + home port) a peer id stands for.
  virtual std::optional<sockaddr_storage> peer_address(transport::PeerId) const = 0;
  // The injected clock's time (CLOCK_MONOTONIC ns by default).
  transport::Time now() const { return clock_.now(); }

 protected:
  explicit Runtime(const Clock& clock) : clock_(clock) {}
  virtual transport::Endpoint& engine() = 0;
  // After a with_engine() call, engine lock held: transmit inline or wake
  // the progress thread when the engine wants it before its deadline.
  virtual void settle() = 0;

  // Holds the engine lock for its lifetime; once it has released it, tells
  // the completion listener of the completions pushed meanwhile.
  class EngineLock {
   public:
    explicit EngineLock(Runtime& runtime) : runtime_(runtime) { runtime_.engine_mutex_.lock(); }
    ~EngineLock();
    EngineLock(const EngineLock&) = delete;
    EngineLock& operator=(const EngineLock&) = delete;

   private:
    Runtime& runtime_;
  };
  // The engine's completion observer (engine lock held).
  void completion_pushed(uint32_t cq) { completions_pushed_.push_back(cq); }

 private:
  const Clock& clock_;
  std::mutex engine_mutex_;
  // CQ ids of the completions pushed since the engine lock was taken, one per
  // completion (engine lock held).
  std::vector<uint32_t> completions_pushed_;
  // Held while the listener runs, so that once set_completion_listener()
  // has returned the listener it replaced is not running and never runs again.
  std::mutex listener_mutex_;
  std::function<void(uint32_t cq)> completion_listener_;
};

}  // namespace metaroce::io
