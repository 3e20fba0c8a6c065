// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Runtime: sockets, the peer table, the engine and the progress thread.
//
// Progress loop, one iteration:
//   1. backend.wait(deadline): hand queued sends to the kernel and sleep until
//      a datagram, a kick (eventfd) or the engine's next_wakeup();
//   2. collect received messages (GRO super-datagrams included);
//   3. under the engine lock: feed every datagram (after the test drop), run
//      on_timer if due, drain poll_transmit into a preallocated batch;
//   4. outside the lock: re-arm the receive buffers, group the batch into
//      (GSO) send messages and send it.
// The loop sleeps without timeout when the engine is idle (next_wakeup ==
// kNever), so an idle runtime costs nothing.
//
// Pacing bursts: the engine is configured with a pacing burst allowance
// (RuntimeOptions::pacing_burst_ns), so one drain of poll_transmit releases
// every datagram due within it, and next_wakeup() names a pacing release half
// a burst early: each iteration sends about half a burst of paced traffic in
// one submission, and wake-up latency below half a burst costs no rate. On
// a slow link the burst is lengthened until half of it fills one GSO message
// on every path (pacing_burst()). The engine runs on the runtime's clock
// (CLOCK_MONOTONIC unless a test injected a fake one), so its RTT samples
// are honest.
//
// Inline transmission (RuntimeOptions::inline_transmit): the progress thread
// publishes, under the engine lock, the deadline it will sleep until, and
// the backend says whether sends it was handed are still queued. After each
// with_engine() call (settle()), a thread whose call made datagrams due
// sends up to kInlineDatagrams of them itself through the sockets (sendmmsg,
// batch_send.h) when no progress-thread send is queued, so that they cannot
// overtake it; what remains wakes the progress thread, and a timer now due
// before that deadline arms a timerfd that ends its sleep then. Nothing else
// wakes it: a call that made nothing due leaves it asleep.
//
// Unknown senders: a datagram whose (source IP, header home port) was never
// named by peer_for() is counted in unknown_sender_drops and never reaches
// the engine (the engine would only decode it to drop it, under the lock).
// One with no common header of this version (empty, too short, another
// version) has no home port to look up: the engine counts it malformed, as
// docs/spec.md 9.6 step 1 says (Endpoint::on_headerless_datagram).
#include "runtime.h"

#include <pthread.h>
#include <sys/random.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <future>
#include <thread>

#include "batch_send.h"
#include "guarded_read.h"
#include "io_backend.h"
#include "metaroce/wire.h"
#include "peer_table.h"
#include "metaroce/splitmix64.h"
#include "ud_queue_pair.h"
#include "udp_socket.h"
#include "library_thread.h"

namespace metaroce::io {
namespace {

static_assert(std::is_same_v<transport::Time, uint64_t>, "Clock::now() is a transport::Time");

// Sleep used when an iteration did nothing although the engine claims to be
// due: never spin on a stale wakeup time.
constexpr transport::Time kStaleWakeupSleepNs = 20'000;
// How long a closing runtime waits for the kernel to take its last sends.
constexpr transport::Time kOwedSendsTimeoutNs = 100'000'000;
// How long fence_sends() lets the kernel take the sends it waits for; past
// it a send still queued may read memory the application has freed, and at
// worst fails (EFAULT) or carries bytes its checksum does not match: a lost
// datagram, never memory of this process written.
constexpr transport::Time kFenceDrainNs = 1'000'000'000;
constexpr unsigned long kTimerSlackNs = 5'000;
// Datagrams a with_engine() caller sends itself at most; the rest is the
// progress thread's (a posting thread is not held up by a large message).
constexpr uint32_t kInlineDatagrams = 8;
// Socket-buffer-full waits (10 ms each) an inline send makes at most.
constexpr uint32_t kInlineBufferWaits = 10;

// The engine's pacing burst: the configured one, or longer where the links
// are slow enough that half of it (what one wake-up releases) would not fill
// one GSO message on every path. A wake-up then sends full GSO messages
// wherever the windows allow, rather than as much as 50 us of a slow link
// carries. The pace that binds is usually the peer's rate hint, its inbound
// capacity, taken to be ours.
transport::Time pacing_burst(const RuntimeOptions& options) {
  const transport::EndpointConfig& e = options.endpoint;
  const uint64_t paths = std::max<uint16_t>(e.paths, 1);
  uint64_t rate_bps = paths * e.path_rate_bps;
  if (e.inbound_capacity_bps != 0) rate_bps = std::min(rate_bps, e.inbound_capacity_bps);
  if (options.pacing_burst_ns == 0 || rate_bps == 0) return options.pacing_burst_ns;
  const double gso_round_ns = 8e9 * static_cast<double>(paths * kMaxGsoBytes) / static_cast<double>(rate_bps);
  return std::max(options.pacing_burst_ns, static_cast<transport::Time>(2 * gso_round_ns));
}

void log_fallback_once(const std::string& reason) {
  static std::once_flag once;
  std::call_once(once, [&] {
    const char* env = std::getenv("METAROCE_LOG");
    if (env == nullptr || *env == '\0') return;
    std::fprintf(stderr, "metaroce: io_uring unavailable (%s); using sendmmsg/recvmmsg\n", reason.c_str());
  });
}

int64_t realtime_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

// A longer wait than this in a socket buffer is taken for a step of the
// wall clock, not a wait: the timestamp is then not used.
constexpr int64_t kMaxSocketWaitNs = 1'000'000'000;

// When a datagram with kernel receive timestamp `stamp` (CLOCK_REALTIME,
// 0 = none) arrived, on the runtime's clock, given both clocks read at one
// moment (`now`, `realtime`): the time it waited in the socket buffer for
// the progress thread is taken off `now`. That wait is this host's, not
// the network's: counted in RTT samples and in the holding times reported
// to the peer, a descheduled progress thread (a busy-polling application
// sharing its core, an emulated CPU) reads as queueing, and delay-based
// congestion control shrinks the windows to nothing.
transport::Time arrival_time(int64_t stamp, transport::Time now, int64_t realtime) {
  const int64_t waited = realtime - stamp;
  if (stamp == 0 || waited <= 0 || waited > kMaxSocketWaitNs || static_cast<uint64_t>(waited) >= now) return now;
  return now - static_cast<uint64_t>(waited);
}

uint64_t drop_threshold(double probability) {
  if (!(probability > 0)) return 0;
  if (probability >= 1) return UINT64_MAX;
  return static_cast<uint64_t>(probability * 18446744073709551616.0);
}

// The backend when RuntimeOptions::make_backend is empty: io_uring if allowed
// and the kernel lets us, else sendmmsg/recvmmsg.
std::unique_ptr<IoBackend> default_backend(const BackendConfig& config, bool allow_io_uring) {
  if (allow_io_uring) {
    std::string reason;
    if (std::unique_ptr<IoBackend> io = make_uring_backend(config, reason)) return io;
    log_fallback_once(reason);
  }
  return make_mmsg_backend(config);
}

const Clock& clock_of(const RuntimeOptions& options) { return options.clock ? *options.clock : monotonic_clock(); }

class RuntimeImpl final : public Runtime {
 public:
  explicit RuntimeImpl(const RuntimeOptions& options)
      : Runtime(clock_of(options)),
        options_(options),
        rng_(options.test_seed),
        drop_threshold_(drop_threshold(options.test_drop_probability)) {}

  ~RuntimeImpl() override { shutdown(); }

  void shutdown() override {
    std::lock_guard<std::mutex> lock(shutdown_mutex_);
    stop_.store(true);
    if (thread_.joinable()) {
      kick();
      thread_.join();
    }
  }

  bool start(std::string& error);

  uint16_t home_port() const override { return home_port_; }
  transport::Time busy_poll_ns() const override { return options_.busy_poll_ns; }
  sockaddr_storage local_address() const override { return local_; }
  transport::PeerId peer_for(const sockaddr_storage& address) override { return peers_->get_or_add(address); }

  RuntimeStats stats() const override;
  void fence_sends() override;
  bool route_peer(transport::PeerId peer, const std::vector<uint16_t>& ports, std::string& error) override;
  uint16_t source_port(transport::PeerId peer, uint16_t path) const override;
  std::optional<sockaddr_storage> peer_address(transport::PeerId peer) const override {
    sockaddr_storage a{};
    if (!peers_->destination_of(peer, a)) return std::nullopt;
    return a;
  }

 protected:
  transport::Endpoint& engine() override { return *engine_; }

  void settle() override;

 private:
  // Written by the progress thread only; published to `shared_` per iteration.
  struct Counters {
    uint64_t datagrams_received = 0;
    uint64_t test_drops = 0;
    uint64_t unknown_sender_drops = 0;
    uint64_t truncated_drops = 0;
    uint64_t gro_receives = 0;
    uint64_t progress_wakeups = 0;
    uint64_t unroutable = 0;  // datagrams for a peer without a usable address
  };
  struct Shared {
    std::atomic<bool> io_uring{false};
    std::atomic<bool> gso{false};
#define METAROCE_SHARED_COUNTER(name, unit, meaning) std::atomic<uint64_t> name{0};
    METAROCE_RUNTIME_COUNTERS(METAROCE_SHARED_COUNTER)
#undef METAROCE_SHARED_COUNTER
  };
  // What with_engine() callers use to send (engine lock held).
  struct InlineSender {
    InlineSender(uint32_t slot_bytes, bool use_gso) : batch(kInlineDatagrams, slot_bytes), gso(use_gso) {}
    PeerTable::View view;
    std::vector<int> fds;
    uint64_t sockets_version = UINT64_MAX;
    TxBatch batch;
    bool gso;
    BackendCounters counters;
    // Copies of `counters` for stats(), which adds them to the progress thread's.
    std::atomic<uint64_t> datagrams_sent{0};
    std::atomic<uint64_t> send_syscalls{0};
    std::atomic<uint64_t> send_errors{0};
    std::atomic<uint64_t> oversize_drops{0};
    std::atomic<uint64_t> gso_sends{0};
  };

  bool open_home_socket(std::string& error);
  // Opens a path socket on `port` (0: ephemeral) of plane `plane`'s
  // address; sockets_mutex_ held.
  bool open_path_socket(uint16_t port, uint16_t plane, std::string& error);
  // The planes' masks for the peer table (peer_table.h); false with `error`
  // for an invalid plane address.
  bool plane_masks(std::vector<PeerTable::Ip>& masks, std::string& error) const;
  // Hands the backend the path sockets route_peer() added (progress thread).
  void sync_path_sockets(IoBackend& io);
  void run(std::promise<std::string>& started);
  void progress_loop(IoBackend& io);
  // Drains the backend for the fence_sends() callers (progress thread).
  void serve_fences(IoBackend& io);
  void send_what_is_owed(IoBackend& io);
  void send_inline(TxBatch& batch);
  // Builds and hands a filled batch to the backend (progress thread).
  void send(IoBackend& io, TxBatch& batch);
  // `realtime`: CLOCK_REALTIME read with `now`, to place the kernel's receive
  // timestamps on the runtime's clock.
  void deliver(const RxMessage& message, transport::Time now, int64_t realtime);
  void publish(const IoBackend& io);
  // The deadline the progress thread sleeps until after an iteration.
  static transport::Time sleep_deadline(bool batch_full, bool worked, transport::Time next, transport::Time clock);
  // Sends what the engine has due now, up to kInlineDatagrams (engine lock held).
  void transmit_inline();
  void log_oversize_once(uint64_t oversize_drops);

  const RuntimeOptions options_;
  Fd home_;
  // Path sockets: the first path_count_ are the defaults; route_peer() adds more.
  mutable std::mutex sockets_mutex_;
  std::vector<Fd> paths_;
  std::vector<uint16_t> path_ports_;
  std::vector<uint16_t> path_planes_;         // the plane of each path socket
  std::vector<std::string> plane_addresses_;  // [0] is local_address
  std::atomic<uint64_t> sockets_version_{0};
  Fd event_fd_;
  // Armed by settle() for a deadline the progress thread must wake for;
  // only on the monotonic clock (not with an injected one).
  Fd timer_fd_;
  sockaddr_storage local_{};
  transport::Gid local_gid_{};  // local_ as a GID, the destination of every UD datagram
  uint16_t home_port_ = 0;
  bool gro_ = false;
  bool gso_ = false;
  // Declared before engine_ so that it outlives the engine, whose transmit
  // order asks it for peers' keys.
  std::unique_ptr<PeerTable> peers_;
  std::unique_ptr<transport::Endpoint> engine_;
  uint16_t path_count_ = 1;
  size_t max_datagram_ = 0;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex shutdown_mutex_;
  // Engine lock held: the deadline the progress thread will sleep until, 0
  // once it has been woken or has more to do (settle() then leaves it be).
  // Before its first iteration: never (that iteration comes first anyway).
  transport::Time sleep_deadline_ = transport::kNever;
  std::atomic<bool> sends_unsent_{false};  // BackendConfig::sends_unsent
  std::unique_ptr<InlineSender> inline_;   // null without inline_transmit
  std::atomic<bool> oversize_logged_{false};
  // fence_sends(): batches the progress thread filled with a gathered
  // payload; of those, how many the kernel has read (UINT64_MAX once the
  // thread has ended); requests, and the requests served.
  std::atomic<uint64_t> gathered_batches_{0};
  std::atomic<uint64_t> drained_batches_{0};
  std::atomic<uint64_t> fence_requests_{0};
  uint64_t fences_served_ = 0;  // progress thread

  // Wakes the progress thread.
  void kick() {
    const uint64_t one = 1;
    (void)!::write(event_fd_.get(), &one, sizeof one);
  }

  // Progress thread state.
  PeerTable::View view_;
  SplitMix64 rng_;  // the test drop decisions, reproducible from the seed
  const uint64_t drop_threshold_;
  Counters counters_;
  Shared shared_;
  uint64_t synced_sockets_version_ = 0;
  uint16_t socket_count_ = 0;      // path sockets the backend knows
  transport::Time last_work_ = 0;  // the last iteration that received or sent (busy polling)
};

bool RuntimeImpl::open_home_socket(std::string& error) {
  sockaddr_storage address{};
  if (make_address(options_.local_address, 0, address) == 0) {
    error = "invalid local address '" + options_.local_address + "'";
    return false;
  }
  // Several planes: the home socket receives on every plane's address.
  const std::string bind_address = plane_addresses_.size() == 1    ? options_.local_address
                                   : address.ss_family == AF_INET6 ? "::"
                                                                   : "0.0.0.0";
  auto try_port = [&](uint16_t port, int& bind_errno) {
    sockaddr_storage candidate{};
    make_address(bind_address, port, candidate);
    home_ = open_udp_socket(candidate, options_.socket_buffer_bytes, error, bind_errno);
    if (!home_.valid()) return false;
    make_address(options_.local_address, port, local_);
    home_port_ = port;
    return true;
  };
  int bind_errno = 0;
  if (options_.home_port != 0) return try_port(options_.home_port, bind_errno);
  const uint32_t first = options_.home_port_first;
  const uint32_t last = std::min<uint32_t>(first + options_.home_port_count, 65536);
  for (uint32_t port = std::max<uint32_t>(first, 1); port < last; ++port) {
    if (try_port(static_cast<uint16_t>(port), bind_errno)) return true;
    if (bind_errno != EADDRINUSE && bind_errno != EACCES) return false;
  }
  error =
      "no free home port in [" + std::to_string(first) + ", " + std::to_string(last) + ") on " + options_.local_address;
  return false;
}

bool RuntimeImpl::plane_masks(std::vector<PeerTable::Ip>& masks, std::string& error) const {
  PeerKey first;
  make_peer_key(local_, 0, first);
  for (size_t k = 1; k < plane_addresses_.size(); ++k) {
    sockaddr_storage address{};
    PeerKey key;
    if (make_address(plane_addresses_[k], 0, address) == 0 || address.ss_family != local_.ss_family ||
        !make_peer_key(address, 0, key) || key.ip == first.ip) {
      error = "invalid plane " + std::to_string(k) + " address '" + plane_addresses_[k] +
              "' (an IP literal of plane 0's family, not plane 0's own)";
      return false;
    }
    PeerTable::Ip& mask = masks.emplace_back();
    for (size_t b = 0; b < mask.size(); ++b) mask[b] = first.ip[b] ^ key.ip[b];
  }
  return true;
}

bool RuntimeImpl::open_path_socket(uint16_t port, uint16_t plane, std::string& error) {
  sockaddr_storage path_address{};
  make_address(plane_addresses_[plane], port, path_address);
  int bind_errno = 0;
  Fd fd = open_udp_socket(path_address, options_.socket_buffer_bytes, error, bind_errno);
  if (!fd.valid()) {
    error = "path socket: " + error;
    return false;
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  path_ports_.push_back(ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6&>(bound).sin6_port
                                                          : reinterpret_cast<sockaddr_in&>(bound).sin_port));
  path_planes_.push_back(plane);
  paths_.push_back(std::move(fd));
  return true;
}

bool RuntimeImpl::route_peer(transport::PeerId peer, const std::vector<uint16_t>& ports, std::string& error) {
  if (ports.empty() || ports.size() > wire::kMaxPaths) {
    error = std::to_string(ports.size()) + " source ports for a peer (1 to " + std::to_string(wire::kMaxPaths) + ")";
    return false;
  }
  if (!peer_address(peer)) {
    error = "unknown peer " + std::to_string(peer);
    return false;
  }
  // Path i leaves from map[i % map size]. With several planes the map has
  // one entry per path, each socket bound on its path's plane.
  const uint16_t planes = static_cast<uint16_t>(plane_addresses_.size());
  const size_t entries = planes == 1 ? ports.size() : path_count_;
  std::vector<uint16_t> sockets;
  {
    std::lock_guard<std::mutex> lock(sockets_mutex_);
    const size_t before = paths_.size();
    for (size_t i = 0; i < entries; ++i) {
      const uint16_t port = ports[i % ports.size()];
      const uint16_t plane = static_cast<uint16_t>(i % planes);
      size_t index = 0;
      while (index < path_ports_.size() && (path_ports_[index] != port || path_planes_[index] != plane)) ++index;
      if (index == path_ports_.size()) {
        if (paths_.size() >= kMaxPathSockets) {
          error = "more than " + std::to_string(kMaxPathSockets) + " path sockets";
          break;
        }
        if (!open_path_socket(port, plane, error)) break;
      }
      sockets.push_back(static_cast<uint16_t>(index));
    }
    if (paths_.size() != before) sockets_version_.fetch_add(1, std::memory_order_release);
  }
  // Published after the sockets: a progress thread that sees the map sees them.
  return sockets.size() == entries && peers_->set_sockets(peer, std::move(sockets));
}

uint16_t RuntimeImpl::source_port(transport::PeerId peer, uint16_t path) const {
  const std::vector<uint16_t> map = peers_->sockets_of(peer);
  const uint16_t index = map.empty() ? static_cast<uint16_t>(path % path_count_) : map[path % map.size()];
  std::lock_guard<std::mutex> lock(sockets_mutex_);
  return index < path_ports_.size() ? path_ports_[index] : 0;
}

void RuntimeImpl::sync_path_sockets(IoBackend& io) {
  if (sockets_version_.load(std::memory_order_acquire) == synced_sockets_version_) return;
  std::vector<int> fds;
  {
    std::lock_guard<std::mutex> lock(sockets_mutex_);
    synced_sockets_version_ = sockets_version_.load(std::memory_order_relaxed);
    for (const Fd& fd : paths_) fds.push_back(fd.get());
  }
  socket_count_ = static_cast<uint16_t>(fds.size());
  io.set_path_fds(std::move(fds));
}

bool RuntimeImpl::start(std::string& error) {
  if (!(options_.test_drop_probability >= 0 && options_.test_drop_probability <= 1)) {
    error = "test_drop_probability must be in [0, 1]";
    return false;
  }
  plane_addresses_.push_back(options_.local_address);
  plane_addresses_.insert(plane_addresses_.end(), options_.plane_addresses.begin(), options_.plane_addresses.end());
  if (plane_addresses_.size() > 64) {
    error = std::to_string(plane_addresses_.size()) + " planes (at most 64)";
    return false;
  }
  if (!open_home_socket(error)) return false;
  std::vector<PeerTable::Ip> masks;
  if (!plane_masks(masks, error)) return false;
  peers_ = std::make_unique<PeerTable>(local_.ss_family, std::move(masks));
  PeerKey local_key;
  if (make_peer_key(local_, 0, local_key)) local_gid_ = local_key.ip;

  transport::EndpointConfig config = options_.endpoint;
  config.home_port = home_port_;
  // Each context's epoch and memory keys come from fresh randomness, so that
  // a restarted process is a new incarnation to its peers.
  while (config.random_seed == 0) {
    if (::getrandom(&config.random_seed, sizeof config.random_seed, 0) != sizeof config.random_seed) {
      error = std::string("getrandom: ") + std::strerror(errno);
      return false;
    }
  }
  config.pacing_burst_ns = pacing_burst(options_);
  config.driver_releases_completions = true;  // see progress_loop
  // The kernel copies a payload straight from application memory (TxBatch);
  // fence_sends() keeps a deregistered MR's memory from being read after.
  config.gather_payload = true;
  config.planes = static_cast<uint16_t>(plane_addresses_.size());
  if (config.paths < config.planes) {
    error =
        std::to_string(config.planes) + " planes need at least as many paths (" + std::to_string(config.paths) + ")";
    return false;
  }
  engine_ = std::make_unique<transport::Endpoint>(config, options_.memory);
  // A shared table is its owner's to set up (RuntimeOptions::memory).
  if (!options_.memory) engine_->memory().set_guarded_read(&guarded_read);
  engine_->set_completion_observer([this](uint32_t cq) { completion_pushed(cq); });
  PeerKey own_key;
  if (make_peer_key(local_, home_port_, own_key))
    engine_->set_transmit_order(transmit_order_key(own_key), [peers = peers_.get()](transport::PeerId peer) {
      return peers->transmit_order_key(peer);
    });
  path_count_ = std::max<uint16_t>(engine_->config().paths, 1);
  max_datagram_ = engine_->max_datagram_bytes();

  if (!options_.path_source_ports.empty() && options_.path_source_ports.size() < path_count_) {
    error = "path_source_ports holds " + std::to_string(options_.path_source_ports.size()) + " ports for " +
            std::to_string(path_count_) + " paths";
    return false;
  }
  for (uint16_t i = 0; i < path_count_; ++i) {
    const uint16_t port = options_.path_source_ports.empty() ? 0 : options_.path_source_ports[i];
    if (!open_path_socket(port, static_cast<uint16_t>(i % plane_addresses_.size()), error)) return false;
  }
  gro_ = options_.use_gro && enable_udp_gro(home_.get());
  gso_ = options_.use_gso && udp_gso_supported(paths_.front().get());

  if (options_.inline_transmit) inline_ = std::make_unique<InlineSender>(static_cast<uint32_t>(max_datagram_), gso_);
  event_fd_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!options_.clock) timer_fd_ = Fd(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!event_fd_.valid()) {
    error = std::string("eventfd: ") + std::strerror(errno);
    return false;
  }

  std::promise<std::string> started;
  std::future<std::string> result = started.get_future();
  thread_ = start_library_thread([this, &started] { run(started); });
  error = result.get();
  if (!error.empty()) {
    thread_.join();
    return false;
  }
  return true;
}

void RuntimeImpl::run(std::promise<std::string>& started) {
  pthread_setname_np(pthread_self(), "metaroce-io");
  // Timed sleeps end within a few microseconds of the deadline (the default
  // slack is 50 us), well inside half a pacing burst.
  (void)prctl(PR_SET_TIMERSLACK, kTimerSlackNs);
  // Best effort, like the timer slack: the thread works without it.
  if (options_.progress_slice_ns) (void)request_scheduler_slice(options_.progress_slice_ns);
  BackendConfig config;
  config.home_fd = home_.get();
  {
    std::lock_guard<std::mutex> lock(sockets_mutex_);
    for (const Fd& fd : paths_) config.path_fds.push_back(fd.get());
    socket_count_ = static_cast<uint16_t>(paths_.size());
  }
  config.event_fd = event_fd_.get();
  config.timer_fd = timer_fd_.valid() ? timer_fd_.get() : -1;
  config.rx_slots = gro_ ? 64 : 256;
  config.rx_buffer_bytes = gro_ ? kGroBufferBytes : static_cast<uint32_t>(std::max<size_t>(max_datagram_, 2048));
  config.tx_capacity = 256;
  config.tx_slot_bytes = static_cast<uint32_t>(max_datagram_);
  config.gso = gso_;
  config.zerocopy = options_.zerocopy;
  config.stop = &stop_;
  config.clock = &clock_of(options_);
  config.sends_unsent = &sends_unsent_;

  std::unique_ptr<IoBackend> io =
      options_.make_backend ? options_.make_backend(config) : default_backend(config, options_.allow_io_uring);
  if (!io) {
    started.set_value("the backend factory made no backend");
    return;
  }
  shared_.io_uring.store(io->is_io_uring());
  publish(*io);
  started.set_value(std::string());  // `started` must not be touched after this
  progress_loop(*io);
  drained_batches_.store(UINT64_MAX, std::memory_order_release);
  drained_batches_.notify_all();
}

void RuntimeImpl::fence_sends() {
  const uint64_t target = gathered_batches_.load(std::memory_order_acquire);
  uint64_t drained = drained_batches_.load(std::memory_order_acquire);
  if (drained >= target) return;
  fence_requests_.fetch_add(1, std::memory_order_release);
  kick();
  while (drained < target) {
    drained_batches_.wait(drained, std::memory_order_acquire);
    drained = drained_batches_.load(std::memory_order_acquire);
  }
}

void RuntimeImpl::serve_fences(IoBackend& io) {
  const uint64_t requests = fence_requests_.load(std::memory_order_acquire);
  if (requests == fences_served_) return;
  fences_served_ = requests;
  // Every batch filled so far went to send() in the iteration that filled it.
  const uint64_t filled = gathered_batches_.load(std::memory_order_relaxed);
  io.drain_sends(now() + kFenceDrainNs);
  drained_batches_.store(filled, std::memory_order_release);
  drained_batches_.notify_all();
}

void RuntimeImpl::progress_loop(IoBackend& io) {
  transport::Time deadline = 0;
  while (!stop_.load(std::memory_order_acquire)) {
    counters_.progress_wakeups += io.wait(deadline);
    (void)io.take_kick();
    if (stop_.load(std::memory_order_acquire)) break;
    serve_fences(io);  // before receive(): draining reaps completions

    // The batch first: making one free may reap completions, which must not
    // move the received messages while we hold a view of them.
    TxBatch& batch = io.tx_batch();
    const std::span<const RxMessage> received = io.receive();
    bool sent = false;
    {
      EngineLock lock(*this);
      const transport::Time clock = now();
      const int64_t realtime = realtime_ns();
      // The view first: a peer map it holds names sockets already published.
      peers_->refresh(view_);
      sync_path_sockets(io);
      for (const RxMessage& message : received) deliver(message, clock, realtime);
      if (engine_->next_wakeup() <= clock) engine_->on_timer(clock);
      bool gathered = false;
      while (!batch.full()) {
        const std::optional<transport::TxDatagram> datagram = engine_->poll_transmit(clock, batch.next_slot());
        if (!datagram) break;
        batch.commit(*datagram);
        gathered |= !datagram->payload.empty();
      }
      if (gathered) gathered_batches_.fetch_add(1, std::memory_order_release);
      const bool worked = !received.empty() || batch.size() > 0;
      // Before the submission below, which clears it again.
      if (batch.size() > 0) sends_unsent_.store(true, std::memory_order_release);
      if (engine_->completions_releasable()) {
        // Completions that wait for their ACK become visible only once the
        // kernel has it, as a NIC acknowledges what it placed before the
        // application sees it: an application that exits at its last
        // completion, even with _exit(), leaves no peer waiting. The lock
        // stays held, so no thread sees them earlier.
        send(io, batch);
        sent = true;
        io.submit_sends();
        engine_->release_completions();
      }
      deadline = sleep_deadline(batch.full(), worked, engine_->next_wakeup(), clock);
      if (options_.busy_poll_ns != 0) {
        if (worked) last_work_ = clock;
        if (deadline > clock && clock - last_work_ < options_.busy_poll_ns) deadline = clock;  // poll again at once
      }
      sleep_deadline_ = deadline;
    }
    io.release_received();
    if (!sent) send(io, batch);
    publish(io);
  }
  send_what_is_owed(io);
}

void RuntimeImpl::send(IoBackend& io, TxBatch& batch) {
  if (batch.size() == 0) return;
  batch.build(view_, path_count_, socket_count_, io.gso(), io.zerocopy(), counters_.unroutable);
  io.send(batch);
}

transport::Time RuntimeImpl::sleep_deadline(bool batch_full, bool worked, transport::Time next, transport::Time clock) {
  if (batch_full) return 0;  // more to transmit right away
  if (next == transport::kNever) return transport::kNever;
  if (!worked && next <= clock) return clock + kStaleWakeupSleepNs;  // never spin on a stale wakeup time
  return next;
}

void RuntimeImpl::settle() {
  transport::Time next = engine_->next_wakeup();
  if (next >= sleep_deadline_) return;
  if (inline_ && next <= now() && !sends_unsent_.load(std::memory_order_acquire) &&
      !stop_.load(std::memory_order_relaxed)) {
    transmit_inline();
    next = engine_->next_wakeup();
    if (next >= sleep_deadline_) return;
  }
  if (next > now() && timer_fd_.valid()) {
    // Only a timer is due sooner (a retransmission timeout for what was
    // just sent): the timerfd ends the sleep then, without a wake-up now.
    const itimerspec when{{0, 0}, {static_cast<time_t>(next / 1'000'000'000), static_cast<long>(next % 1'000'000'000)}};
    if (::timerfd_settime(timer_fd_.get(), TFD_TIMER_ABSTIME, &when, nullptr) == 0) {
      sleep_deadline_ = next;
      return;
    }
  }
  sleep_deadline_ = 0;  // the progress thread sets it again once awake
  kick();
}

void RuntimeImpl::transmit_inline() {
  InlineSender& s = *inline_;
  peers_->refresh(s.view);
  if (const uint64_t version = sockets_version_.load(std::memory_order_acquire); version != s.sockets_version) {
    std::lock_guard<std::mutex> lock(sockets_mutex_);
    s.sockets_version = sockets_version_.load(std::memory_order_relaxed);
    s.fds.clear();
    for (const Fd& fd : paths_) s.fds.push_back(fd.get());
  }
  TxBatch& batch = s.batch;
  batch.clear();
  const transport::Time clock = now();
  while (!batch.full()) {
    const std::optional<transport::TxDatagram> datagram = engine_->poll_transmit(clock, batch.next_slot());
    if (!datagram) break;
    batch.commit(*datagram);
  }
  if (batch.size() > 0) send_inline(batch);
  // The ACKs the held completions wait for are with the kernel now: this
  // thread sent them, or the progress thread had (sends_unsent_ was clear).
  if (engine_->completions_releasable()) engine_->release_completions();
}

void RuntimeImpl::send_inline(TxBatch& batch) {
  InlineSender& s = *inline_;
  uint64_t unroutable = 0;
  batch.build(s.view, path_count_, static_cast<uint16_t>(s.fds.size()), s.gso, false, unroutable);
  SyncSendOptions send_options;
  send_options.buffer_full_waits = kInlineBufferWaits;
  send_options.stop = &stop_;
  s.counters.send_errors += unroutable;
  send_batch_now(s.fds, batch, send_options, s.counters, s.gso);
  constexpr auto relaxed = std::memory_order_relaxed;
  s.datagrams_sent.store(s.counters.datagrams_sent, relaxed);
  s.send_syscalls.store(s.counters.send_syscalls, relaxed);
  s.send_errors.store(s.counters.send_errors, relaxed);
  s.oversize_drops.store(s.counters.oversize_drops, relaxed);
  s.gso_sends.store(s.counters.gso_sends, relaxed);
  log_oversize_once(s.counters.oversize_drops);
}

void RuntimeImpl::send_what_is_owed(IoBackend& io) {
  // What a NIC would still put on the wire for a closing context: the ACKs
  // and NAKs the peer is owed (its requests completed here, or failed), and
  // whatever else is due, in one last batch handed to the kernel.
  TxBatch& batch = io.tx_batch();
  {
    EngineLock lock(*this);
    const transport::Time clock = now();
    peers_->refresh(view_);
    engine_->flush_owed(clock);
    while (!batch.full()) {
      const std::optional<transport::TxDatagram> datagram = engine_->poll_transmit(clock, batch.next_slot());
      if (!datagram) break;
      batch.commit(*datagram);
    }
  }
  send(io, batch);
  io.drain_sends(now() + kOwedSendsTimeoutNs);
  {
    EngineLock lock(*this);
    if (engine_->completions_releasable()) engine_->release_completions();
  }
  publish(io);
}

void RuntimeImpl::deliver(const RxMessage& message, transport::Time now, int64_t realtime) {
  if (message.truncated || message.length == 0) {
    ++counters_.datagrams_received;
    if (message.truncated) ++counters_.truncated_drops;
    else engine_->on_headerless_datagram();
    return;
  }
  const transport::Time arrival = arrival_time(message.arrival_realtime_ns, now, realtime);
  const uint32_t step = message.segment != 0 ? message.segment : message.length;
  if (step < message.length) ++counters_.gro_receives;
  PeerKey key;
  const bool addressable = make_peer_key(*message.from, 0, key);
  for (uint32_t offset = 0; offset < message.length; offset += step) {
    const std::span<const uint8_t> datagram(message.data + offset, std::min(step, message.length - offset));
    ++counters_.datagrams_received;
    if (drop_threshold_ != 0 && rng_.next() < drop_threshold_) {
      ++counters_.test_drops;
      continue;
    }
    // UD belongs to no connection: any source may send it, and its
    // addresses become the receive's GRH.
    if (addressable && wire::peek_type(datagram) == wire::PacketType::UdSend) {
      engine_->on_ud_datagram({key.ip, local_gid_}, datagram);
      continue;
    }
    transport::PeerId peer = 0;
    if (addressable) {
      const std::optional<uint16_t> port = wire::peek_home_port(datagram);
      if (!port) {
        engine_->on_headerless_datagram();
        continue;
      }
      key.port = *port;
      peer = view_.lookup(key);
    }
    if (peer == 0) {
      ++counters_.unknown_sender_drops;
      continue;
    }
    engine_->on_datagram(now, peer, datagram, message.ce, arrival);
  }
}

void RuntimeImpl::publish(const IoBackend& io) {
  constexpr auto relaxed = std::memory_order_relaxed;
  const BackendCounters& b = io.counters();
  shared_.gso.store(gso_ && io.gso(), relaxed);
  shared_.datagrams_sent.store(b.datagrams_sent, relaxed);
  shared_.send_syscalls.store(b.send_syscalls, relaxed);
  shared_.receive_syscalls.store(b.receive_syscalls, relaxed);
  shared_.send_errors.store(b.send_errors + counters_.unroutable, relaxed);
  shared_.oversize_drops.store(b.oversize_drops, relaxed);
  log_oversize_once(b.oversize_drops);
  shared_.gso_sends.store(b.gso_sends, relaxed);
  shared_.receive_restarts.store(b.receive_restarts, relaxed);
  shared_.zerocopy_sends.store(b.zerocopy_sends, relaxed);
  shared_.datagrams_received.store(counters_.datagrams_received, relaxed);
  shared_.test_drops.store(counters_.test_drops, relaxed);
  shared_.unknown_sender_drops.store(counters_.unknown_sender_drops, relaxed);
  shared_.truncated_drops.store(counters_.truncated_drops, relaxed);
  shared_.gro_receives.store(counters_.gro_receives, relaxed);
  shared_.progress_wakeups.store(counters_.progress_wakeups, relaxed);
}

void RuntimeImpl::log_oversize_once(uint64_t oversize_drops) {
  if (oversize_drops == 0 || oversize_logged_.exchange(true)) return;
  std::fprintf(stderr,
               "metaroce: the kernel refused a datagram of up to %zu bytes from %s as larger than the path MTU "
               "(IP fragmentation is never used); such datagrams are counted in oversize_drops\n",
               max_datagram_, options_.local_address.c_str());
}

RuntimeStats RuntimeImpl::stats() const {
  constexpr auto relaxed = std::memory_order_relaxed;
  RuntimeStats s;
  s.io_uring = shared_.io_uring.load(relaxed);
  s.gso = shared_.gso.load(relaxed);
  s.gro = gro_;
#define METAROCE_LOAD_COUNTER(name, unit, meaning) s.name = shared_.name.load(relaxed);
  METAROCE_RUNTIME_COUNTERS(METAROCE_LOAD_COUNTER)
#undef METAROCE_LOAD_COUNTER
  if (inline_) {
    s.inline_datagrams = inline_->datagrams_sent.load(relaxed);
    s.datagrams_sent += s.inline_datagrams;
    s.send_syscalls += inline_->send_syscalls.load(relaxed);
    s.send_errors += inline_->send_errors.load(relaxed);
    s.oversize_drops += inline_->oversize_drops.load(relaxed);
    s.gso_sends += inline_->gso_sends.load(relaxed);
  }
  return s;
}

}  // namespace

Runtime::EngineLock::~EngineLock() {
  // The ids move to this thread's vector, so that the listener runs without
  // the engine lock and without allocating.
  thread_local std::vector<uint32_t> pushed;
  const bool any = !runtime_.completions_pushed_.empty();
  if (any) pushed.swap(runtime_.completions_pushed_);
  runtime_.engine_mutex_.unlock();
  if (!any) return;
  {
    std::lock_guard<std::mutex> lock(runtime_.listener_mutex_);
    if (runtime_.completion_listener_)
      for (const uint32_t cq : pushed) runtime_.completion_listener_(cq);
  }
  pushed.clear();
}

std::unique_ptr<Runtime> Runtime::create(const RuntimeOptions& options, std::string& error) {
  auto runtime = std::make_unique<RuntimeImpl>(options);
  error.clear();
  if (!runtime->start(error)) return nullptr;
  return runtime;
}

}  // namespace metaroce::io
