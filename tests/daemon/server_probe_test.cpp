// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// daemon::Server in this process, on a FakeClock and a scripted prober
// that holds each probe until the test lets it go: a discovery probe
// outstanding stalls no other client, its reply comes when it finishes, and
// cached results age on the injected clock. Every wait is for a condition
// (a reply on a socket, the prober's state), never for time.
#include <gtest/gtest.h>

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "fake_clock.h"
#include "metaroce/ctl.h"
#include "server.h"

namespace metaroce::daemon {
namespace {

using nlohmann::json;
using test::FakeClock;

// A safety net for a broken daemon (the test fails instead of hanging).
constexpr int kSafetyTimeoutMs = 60'000;

// Each probe blocks until release(); answers with two paths of two ports.
class HeldProber {
 public:
  Prober prober() {
    return [this](const ProbeRequest& r, Discovery& out, std::string&) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++started_;
      changed_.notify_all();
      changed_.wait(lock, [&] { return released_ >= started_; });
      out = Discovery{};
      out.dest = r.dest;
      out.dport = r.dport;
      out.source = r.source;
      for (size_t i = 0; i < 2; ++i) out.paths.push_back({{"10.0.0." + std::to_string(i + 1)}, {}});
      for (size_t i = 0; i < r.source_ports.size() && i < 4; ++i)
        out.paths[i % 2].source_ports.push_back(r.source_ports[i]);
      return true;
    };
  }
  bool await_started(uint64_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::milliseconds(kSafetyTimeoutMs), [&] { return started_ >= n; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++released_;
    changed_.notify_all();
  }
  uint64_t started() {
    std::lock_guard<std::mutex> lock(mutex_);
    return started_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  uint64_t started_ = 0;
  uint64_t released_ = 0;
};

int connect_to(const std::string& path) {
  std::string error;
  return ctl::connect_socket(path, error);
}

bool send_message(int fd, const json& m) {
  const std::string text = ctl::encode(m);
  return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// The next message; nullopt after timeout_ms (0: only one already there).
std::optional<ctl::Message> receive(int fd, int timeout_ms = kSafetyTimeoutMs) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return std::nullopt;
  std::vector<uint8_t> buf(ctl::kMaxMessageBytes);
  const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
  if (n <= 0) return std::nullopt;
  std::string error;
  return ctl::decode(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), error);
}

json peer_ports_request(int home_port) {
  json r = ctl::make(ctl::Type::PeerPorts);
  r["home_port"] = home_port;
  r["dest"] = "192.0.2.7";
  r["dport"] = 4792;
  r["paths"] = 4;
  return r;
}

// The server on its own thread, stopped by a SIGTERM to that thread (the
// signal Server::start() blocked for its signalfd; the test thread's mask is
// restored afterwards).
class InProcessDaemon {
 public:
  explicit InProcessDaemon(Prober prober) {
    char tmpl[] = "/tmp/metaroced-probe.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    Config config;
    config.socket_path = dir_ + "/d.sock";
    config.classes["default"] = {};
    config.discovery.interval_s = 60;
    server_ = std::make_unique<Server>(config, "", clock, std::move(prober));
    pthread_sigmask(SIG_SETMASK, nullptr, &mask_);
    std::string error;
    started_ = server_->start(error);
    EXPECT_TRUE(started_) << error;
    if (started_) thread_ = std::thread([this] { status_ = server_->run(); });
  }
  ~InProcessDaemon() {
    if (thread_.joinable()) {
      pthread_kill(thread_.native_handle(), SIGTERM);
      thread_.join();
    }
    server_.reset();
    pthread_sigmask(SIG_SETMASK, &mask_, nullptr);
    std::filesystem::remove_all(dir_);
  }
  bool started() const { return started_; }
  std::string socket() const { return dir_ + "/d.sock"; }
  // A connection holding a lease; its home port.
  int leased(int& home_port) {
    const int fd = connect_to(socket());
    json r = ctl::make(ctl::Type::Lease);
    r["pid"] = ::getpid();
    r["address"] = "127.0.0.1";
    r["paths"] = 4;
    EXPECT_TRUE(send_message(fd, r));
    const auto m = receive(fd);
    EXPECT_TRUE(m && m->type == ctl::Type::LeaseOk);
    home_port = m ? m->body.value("home_port", 0) : 0;
    return fd;
  }

  FakeClock clock;

 private:
  std::string dir_;
  std::unique_ptr<Server> server_;
  sigset_t mask_{};
  bool started_ = false;
  std::thread thread_;
  int status_ = -1;
};

TEST(MetarocedServer, AnswersOtherClientsWhileADiscoveryProbeIsOutstanding) {
  HeldProber prober;
  InProcessDaemon d(prober.prober());
  ASSERT_TRUE(d.started());
  int home = 0;
  const int a = d.leased(home);
  ASSERT_TRUE(send_message(a, peer_ports_request(home)));
  ASSERT_TRUE(prober.await_started(1));  // a's probe is running, and held
  // Another client is served meanwhile, and sees the probe outstanding.
  const int b = connect_to(d.socket());
  ASSERT_TRUE(send_message(b, ctl::make(ctl::Type::Status)));
  const auto status = receive(b);
  ASSERT_TRUE(status && status->type == ctl::Type::Status);
  EXPECT_EQ(status->body["probes_outstanding"], 1);
  int other_home = 0;
  const int c = d.leased(other_home);  // and a lease is granted
  EXPECT_NE(other_home, home);
  EXPECT_FALSE(receive(a, 0)) << "a was answered before its probe finished";
  prober.release();
  const auto reply = receive(a);
  ASSERT_TRUE(reply);
  ASSERT_EQ(reply->type, ctl::Type::PeerPortsOk) << reply->body.dump();
  EXPECT_EQ(reply->body["spread"], "discovered 2 paths");
  EXPECT_EQ(reply->body["source_ports"].size(), 4u);
  EXPECT_EQ(reply->body["cached"], false);
  ::close(a);
  ::close(b);
  ::close(c);
}

TEST(MetarocedServer, AClientsNextRequestWaitsForItsProbeAndRepliesKeepTheirOrder) {
  HeldProber prober;
  InProcessDaemon d(prober.prober());
  ASSERT_TRUE(d.started());
  int home = 0;
  const int a = d.leased(home);
  ASSERT_TRUE(send_message(a, peer_ports_request(home)));
  ASSERT_TRUE(send_message(a, ctl::make(ctl::Type::Status)));
  ASSERT_TRUE(prober.await_started(1));
  prober.release();
  const auto first = receive(a);
  const auto second = receive(a);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->type, ctl::Type::PeerPortsOk);
  EXPECT_EQ(second->type, ctl::Type::Status);
  EXPECT_EQ(second->body["probes_outstanding"], 0);
  ::close(a);
}

TEST(MetarocedServer, ALeaseReturnsOnlyOnceTheProbeOfItsClosedConnectionIsDone) {
  HeldProber prober;
  InProcessDaemon d(prober.prober());
  ASSERT_TRUE(d.started());
  int home = 0;
  const int a = d.leased(home);
  ASSERT_TRUE(send_message(a, peer_ports_request(home)));
  ASSERT_TRUE(prober.await_started(1));
  ::close(a);  // while the probe binds ports of a's block
  // Connected after the close: the poll that accepts this connection also
  // reports a's hang-up, so a is dropped before this client is read.
  const int watcher = connect_to(d.socket());
  auto leases = [&] {
    EXPECT_TRUE(send_message(watcher, ctl::make(ctl::Type::Status)));
    const auto m = receive(watcher);
    return m ? m->body["leases"].size() : size_t{999};
  };
  EXPECT_EQ(leases(), 1u);  // still a's, until its probe is done
  prober.release();
  // The result comes back to nobody and the block is returned (a bounded
  // number of round trips: the result reaches the poll loop on its own).
  size_t left = 1;
  for (int i = 0; i < 10'000 && left != 0; ++i) left = leases();
  EXPECT_EQ(left, 0u);
  ::close(watcher);
}

TEST(MetarocedServer, CachedDiscoveriesAgeOnTheInjectedClock) {
  HeldProber prober;
  InProcessDaemon d(prober.prober());
  ASSERT_TRUE(d.started());
  const int cli = connect_to(d.socket());
  json ask = ctl::make(ctl::Type::Paths);
  ask["dest"] = "192.0.2.9";
  auto paths = [&] {
    EXPECT_TRUE(send_message(cli, ask));
    return receive(cli);
  };
  ASSERT_TRUE(send_message(cli, ask));
  ASSERT_TRUE(prober.await_started(1));
  prober.release();
  auto m = receive(cli);
  ASSERT_TRUE(m && m->type == ctl::Type::Paths) << (m ? m->body.dump() : "no reply");
  EXPECT_EQ(m->body["cached"], false);
  d.clock.advance(59'000'000'000);  // within interval_s (60 s)
  m = paths();
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body["cached"], true);
  EXPECT_EQ(prober.started(), 1u);
  d.clock.advance(2'000'000'000);  // past it: probed again
  ASSERT_TRUE(send_message(cli, ask));
  ASSERT_TRUE(prober.await_started(2));
  prober.release();
  m = receive(cli);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body["cached"], false);
  ::close(cli);
}

}  // namespace
}  // namespace metaroce::daemon
