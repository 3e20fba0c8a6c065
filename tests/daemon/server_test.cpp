// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroced as a process: started from the build tree on a socket of its own,
// spoken to over the control protocol, signalled, and always reaped.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "metaroce/ctl.h"

extern char** environ;

namespace {

using nlohmann::json;
namespace ctl = metaroce::ctl;
using Clock = std::chrono::steady_clock;

int connect_to(const std::string& path) {
  std::string error;
  return ctl::connect_socket(path, error);
}

// One message, or nullopt after timeout_ms or on a closed connection.
std::optional<ctl::Message> receive(int fd, int timeout_ms = 5000) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) return std::nullopt;
  std::vector<uint8_t> buf(ctl::kMaxMessageBytes);
  const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
  if (n <= 0) return std::nullopt;
  std::string error;
  auto m = ctl::decode(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), error);
  EXPECT_TRUE(m) << "the daemon sent an undecodable message: " << error;
  return m;
}

bool send_raw(int fd, const std::string& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

class Daemon {
 public:
  explicit Daemon(const std::string& config_text) {
    char tmpl[] = "/tmp/metaroced-test.XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    socket_ = dir_ + "/d.sock";
    config_ = dir_ + "/metaroced.toml";
    write_config(config_text);
    start();
  }
  ~Daemon() {
    stop(SIGTERM);
    std::filesystem::remove_all(dir_);
  }

  void write_config(const std::string& text) {
    std::ofstream(config_ + ".new") << text;
    std::filesystem::rename(config_ + ".new", config_);
  }

  void start() {
    const std::string log = dir_ + "/log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    std::vector<std::string> args = {METAROCED, "--config", config_, "--socket", socket_, "--log-level", "debug"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ASSERT_EQ(posix_spawn(&pid_, METAROCED, &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      const int fd = connect_to(socket_);
      if (fd >= 0) {
        ::close(fd);
        return;
      }
      ASSERT_TRUE(alive()) << "metaroced exited at start:\n" << log_text();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "metaroced did not open its socket in 10 s";
  }

  // Sends `sig` and reaps the daemon (SIGKILL after 10 s); the exit status.
  int stop(int sig) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    return status;
  }

  bool alive() const { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& config() const { return config_; }
  std::string log_text() const {
    std::ifstream in(dir_ + "/log");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  // One request on a fresh connection.
  std::optional<ctl::Message> ask(const json& request) const {
    const int fd = connect_to(socket_);
    if (fd < 0) return std::nullopt;
    send_raw(fd, ctl::encode(request));
    auto m = receive(fd);
    ::close(fd);
    return m;
  }

  json status() const {
    auto m = ask(ctl::make(ctl::Type::Status));
    EXPECT_TRUE(m && m->type == ctl::Type::Status);
    return m ? m->body : json();
  }

 private:
  std::string dir_, socket_, config_;
  pid_t pid_ = -1;
};

json lease_request(pid_t pid, int paths = 4) {
  json r = ctl::make(ctl::Type::Lease);
  r["pid"] = pid;
  r["address"] = "127.0.0.1";
  r["paths"] = paths;
  return r;
}

std::string error_of(int fd, const std::string& bytes) {
  EXPECT_TRUE(send_raw(fd, bytes));
  auto m = receive(fd);
  if (!m) return "(no answer)";
  EXPECT_EQ(m->type, ctl::Type::Error) << m->body.dump();
  return m->type == ctl::Type::Error ? m->body["message"].get<std::string>() : "";
}

const char* kConfig = R"([ports]
source_first = 21000
source_count = 640
block_size = 64
[discovery]
enabled = false
[congestion.default]
target_delay_us = 1000
[congestion.bulk]
max_window_bytes = 1048576
)";

TEST(Metaroced, BadRequestsGetClearErrorsAndTheDaemonKeepsServing) {
  Daemon d(kConfig);
  const int fd = connect_to(d.socket());
  ASSERT_GE(fd, 0);
  EXPECT_NE(error_of(fd, "hello?").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(fd, "{}").find("missing version"), std::string::npos);
  EXPECT_NE(error_of(fd, R"({"v":9,"type":"status"})").find("unsupported protocol version 9"), std::string::npos);
  EXPECT_NE(error_of(fd, R"({"v":1,"type":"format_disk"})").find("unknown message type"), std::string::npos);
  EXPECT_NE(error_of(fd, std::string(ctl::kMaxMessageBytes + 10, '{')).find("too long"), std::string::npos);
  EXPECT_NE(error_of(fd, R"({"v":1,"type":"lease","pid":1,"address":"127.0.0.1","paths":4000})").find("paths"),
            std::string::npos);
  EXPECT_NE(error_of(fd, ctl::encode(lease_request(::getpid() + 1))).find("does not match the peer credentials"),
            std::string::npos);
  json wrong_class = lease_request(::getpid());
  wrong_class["class"] = "gold";
  EXPECT_NE(error_of(fd, ctl::encode(wrong_class)).find("unknown traffic class 'gold'"), std::string::npos);
  EXPECT_NE(error_of(fd, R"({"v":1,"type":"report","home_port":4792,"counters":{},"connections":[]})")
                .find("report before lease"),
            std::string::npos);
  EXPECT_NE(
      error_of(
          fd,
          R"({"v":1,"type":"lease_ok","home_port":1,"stats_interval_ms":0,"block_first":1,"block_size":1,"source_ports":[1],"policy":{}})")
          .find("sent by the daemon"),
      std::string::npos);
  EXPECT_NE(error_of(fd, R"({"v":1,"type":"paths","dest":"not-an-ip"})").find("not an IPv4 address"),
            std::string::npos);
  // None of that leased anything, and the same connection still works.
  ASSERT_TRUE(send_raw(fd, ctl::encode(ctl::make(ctl::Type::Status))));
  auto m = receive(fd);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->type, ctl::Type::Status);
  EXPECT_TRUE(m->body["leases"].empty());
  ::close(fd);
  // A client that closes mid-conversation, or connects and says nothing.
  for (int i = 0; i < 20; ++i) {
    const int quiet = connect_to(d.socket());
    ASSERT_GE(quiet, 0);
    if (i % 2) send_raw(quiet, "{\"v\":1,");
    ::close(quiet);
  }
  EXPECT_TRUE(d.alive());
  // Closed connections are noticed (the status request itself is the one left).
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (d.status()["clients"] != 1 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(d.status()["clients"], 1);
  EXPECT_EQ(WEXITSTATUS(d.stop(SIGTERM)), 0);
}

// Three processes lease at once; then one is killed with SIGKILL.
TEST(Metaroced, ConcurrentProcessesGetDisjointLeasesAndKill9ReturnsThem) {
  Daemon d(kConfig);
  const json before = d.status();
  constexpr int kProcs = 3;
  int results[2];
  ASSERT_EQ(::pipe(results), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < kProcs; ++i) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Two contexts per process, each on its own connection.
      std::string out;
      for (int ctx = 0; ctx < 2; ++ctx) {
        const int fd = connect_to(d.socket());
        if (fd < 0 || !send_raw(fd, ctl::encode(lease_request(::getpid())))) _exit(2);
        auto m = receive(fd);
        if (!m || m->type != ctl::Type::LeaseOk) _exit(3);
        m->body["pid"] = ::getpid();
        out += ctl::encode(m->body) + "\n";
        (void)fd;  // held open: the lease lives as long as the connection
      }
      if (::write(results[1], out.data(), out.size()) != static_cast<ssize_t>(out.size())) _exit(4);
      for (;;) ::pause();
    }
    children.push_back(child);
  }
  ::close(results[1]);
  std::string all;
  char buf[4096];
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (std::count(all.begin(), all.end(), '\n') < kProcs * 2 && Clock::now() < deadline) {
    pollfd p{results[0], POLLIN, 0};
    if (::poll(&p, 1, 1000) != 1) continue;
    const ssize_t n = ::read(results[0], buf, sizeof buf);
    if (n <= 0) break;
    all.append(buf, static_cast<size_t>(n));
  }
  ::close(results[0]);
  std::set<int> homes, sources;
  int leases = 0;
  for (size_t pos = 0, nl; (nl = all.find('\n', pos)) != std::string::npos; pos = nl + 1) {
    const json l = json::parse(all.substr(pos, nl - pos));
    ++leases;
    EXPECT_TRUE(homes.insert(l["home_port"].get<int>()).second) << "home port leased twice";
    const int first = l["block_first"].get<int>();
    for (int p = first; p < first + l["block_size"].get<int>(); ++p)
      EXPECT_TRUE(sources.insert(p).second) << "source port " << p << " leased twice";
    ASSERT_EQ(l["source_ports"].size(), 4u);
    for (const auto& p : l["source_ports"]) {
      EXPECT_GE(p.get<int>(), first);
      EXPECT_LT(p.get<int>(), first + 64);
    }
    EXPECT_EQ(l["policy"]["target_delay_ns"], 1'000'000);
  }
  EXPECT_EQ(leases, kProcs * 2);
  json s = d.status();
  EXPECT_EQ(s["leases"].size(), static_cast<size_t>(kProcs * 2));
  EXPECT_EQ(s["free_blocks"].get<int>(), before["free_blocks"].get<int>() - kProcs * 2);

  // SIGKILL: the kernel closes the victim's connections; its leases return.
  const pid_t victim = children[1];
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  ASSERT_EQ(::waitpid(victim, nullptr, 0), victim);
  const auto until = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    s = d.status();
    if (s["leases"].size() == static_cast<size_t>((kProcs - 1) * 2) || Clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(s["leases"].size(), static_cast<size_t>((kProcs - 1) * 2));
  for (const auto& l : s["leases"]) EXPECT_NE(l["pid"].get<int>(), victim);
  EXPECT_EQ(s["free_blocks"].get<int>(), before["free_blocks"].get<int>() - (kProcs - 1) * 2);

  for (pid_t c : children)
    if (c != victim) ::kill(c, SIGKILL), ::waitpid(c, nullptr, 0);
  const auto until2 = Clock::now() + std::chrono::seconds(10);
  while (!d.status()["leases"].empty() && Clock::now() < until2)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  s = d.status();
  EXPECT_TRUE(s["leases"].empty());
  EXPECT_EQ(s["free_blocks"], before["free_blocks"]);
  EXPECT_EQ(s["free_home_ports"], before["free_home_ports"]);
}

TEST(Metaroced, PoolExhaustionIsAnErrorNotACrash) {
  Daemon d(R"([ports]
source_first = 21000
source_count = 128
block_size = 64
)");
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) {
    const int fd = connect_to(d.socket());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_raw(fd, ctl::encode(lease_request(::getpid()))));
    auto m = receive(fd);
    ASSERT_TRUE(m);
    if (i < 2) EXPECT_EQ(m->type, ctl::Type::LeaseOk);
    else EXPECT_NE(m->body.value("message", "").find("no free source-port block"), std::string::npos) << m->body.dump();
    fds.push_back(fd);
  }
  for (int fd : fds) ::close(fd);
  EXPECT_TRUE(d.alive());
}

json peer_ports_request(int home_port) {
  json r = ctl::make(ctl::Type::PeerPorts);
  r["home_port"] = home_port;
  r["dest"] = "127.0.0.1";
  r["dport"] = 4792;
  r["paths"] = 4;
  return r;
}

TEST(Metaroced, PeerPortsNeedTheConnectionsOwnLeaseAndSayHashWhenNothingIsDiscovered) {
  std::string config = kConfig;
  config.replace(config.find("enabled = false"), 15, "enabled = true\ntimeout_ms = 50");
  Daemon d(config);
  const int fd = connect_to(d.socket());
  const int other = connect_to(d.socket());
  ASSERT_GE(fd, 0);
  ASSERT_GE(other, 0);
  EXPECT_NE(error_of(fd, ctl::encode(peer_ports_request(4792))).find("is not leased on this connection"),
            std::string::npos);
  ASSERT_TRUE(send_raw(fd, ctl::encode(lease_request(::getpid()))));
  auto lease = receive(fd);
  ASSERT_TRUE(lease && lease->type == ctl::Type::LeaseOk);
  const int home = lease->body["home_port"].get<int>();
  // Another connection cannot use this lease's block.
  EXPECT_NE(error_of(other, ctl::encode(peer_ports_request(home))).find("is not leased on this connection"),
            std::string::npos);
  // Over loopback no router answers: no ports, "hash".
  ASSERT_TRUE(send_raw(fd, ctl::encode(peer_ports_request(home))));
  auto m = receive(fd);
  ASSERT_TRUE(m);
  ASSERT_EQ(m->type, ctl::Type::PeerPortsOk) << m->body.dump();
  EXPECT_EQ(m->body["spread"], "hash");
  EXPECT_TRUE(m->body["source_ports"].empty());
  EXPECT_EQ(m->body["dest"], "127.0.0.1");
  EXPECT_EQ(m->body["cached"], false);
  // Another peer on that host (another home port) is not probed again.
  json next = peer_ports_request(home);
  next["dport"] = 4793;
  ASSERT_TRUE(send_raw(fd, ctl::encode(next)));
  m = receive(fd);
  ASSERT_TRUE(m && m->type == ctl::Type::PeerPortsOk);
  EXPECT_EQ(m->body["spread"], "hash");
  EXPECT_EQ(m->body["cached"], true);
  ::close(fd);
  ::close(other);
  EXPECT_TRUE(d.alive());
}

TEST(Metaroced, AuthenticateModeHandsOutPairKeysOnlyForTheConnectionsOwnLease) {
  char tmpl[] = "/tmp/metaroced-key.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string secret = dir + "/cluster.key";
  std::ofstream(secret) << "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  std::string config = kConfig;
  config += "[security]\nmode = \"authenticate\"\nsecret_file = \"" + secret + "\"\n";
  {
    Daemon d(config);
    const int fd = connect_to(d.socket());
    const int other = connect_to(d.socket());
    ASSERT_TRUE(send_raw(fd, ctl::encode(lease_request(::getpid()))));
    auto lease = receive(fd);
    ASSERT_TRUE(lease && lease->type == ctl::Type::LeaseOk);
    EXPECT_EQ(lease->body["security"], "authenticate");
    const int home = lease->body["home_port"].get<int>();
    json ask = ctl::make(ctl::Type::PeerKey);
    ask["home_port"] = home;
    ask["dest"] = "127.0.0.1";
    ask["dport"] = home + 1;
    EXPECT_NE(error_of(other, ctl::encode(ask)).find("is not leased on this connection"), std::string::npos);
    ASSERT_TRUE(send_raw(fd, ctl::encode(ask)));
    auto key = receive(fd);
    ASSERT_TRUE(key);
    ASSERT_EQ(key->type, ctl::Type::PeerKeyOk) << key->body.dump();
    EXPECT_EQ(key->body["key"].get<std::string>().size(), 64u);
    EXPECT_EQ(key->body["role"], 0);  // 127.0.0.1:home sorts before 127.0.0.1:home+1
    EXPECT_EQ(d.log_text().find("00112233445566778899"), std::string::npos) << "the secret is never logged";
    ::close(fd);
    ::close(other);
  }
  // A secret others may read: the daemon refuses to start.
  ASSERT_EQ(::chmod(secret.c_str(), 0644), 0);
  const std::string toml = dir + "/metaroced.toml";
  std::ofstream(toml) << config;
  const std::string cmd =
      std::string(METAROCED) + " --config " + toml + " --socket " + dir + "/s.sock 2>" + dir + "/err";
  EXPECT_NE(std::system(cmd.c_str()), 0);
  std::ifstream err(dir + "/err");
  const std::string text((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("chmod 600"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

TEST(Metaroced, ALeaseWithoutPathsGetsTheConfiguredNumber) {
  std::string config = kConfig;
  config.replace(config.find("block_size = 64"), 15, "block_size = 64\npaths_per_connection = 6");
  Daemon d(config);
  const int fd = connect_to(d.socket());
  ASSERT_GE(fd, 0);
  json req = lease_request(::getpid());
  req.erase("paths");
  ASSERT_TRUE(send_raw(fd, ctl::encode(req)));
  auto m = receive(fd);
  ASSERT_TRUE(m && m->type == ctl::Type::LeaseOk);
  EXPECT_EQ(m->body["source_ports"].size(), 6u);
  ::close(fd);
}

TEST(Metaroced, ALeaseCarriesItsDevicesSettings) {
  Daemon d(std::string(kConfig) +
           "[devices.mr7]\nbusy_poll_us = 250\nprogress_threads = 4\nplanes = [\"eth0\", \"eth1\"]\n"
           "[devices.mr9]\nbusy_poll_us = 10\n");
  const int fd = connect_to(d.socket());
  ASSERT_GE(fd, 0);
  json req = lease_request(::getpid());
  req["device"] = "mr7";
  ASSERT_TRUE(send_raw(fd, ctl::encode(req)));
  auto m = receive(fd);
  ASSERT_TRUE(m && m->type == ctl::Type::LeaseOk);
  EXPECT_EQ(m->body.value("busy_poll_us", 0), 250);
  EXPECT_EQ(m->body.value("progress_threads", 0), 4);
  EXPECT_EQ(m->body.value("planes", json::array()), json::array({"eth0", "eth1"}));
  req["device"] = "mr8";  // no [devices.mr8]: the provider keeps its own settings
  ASSERT_TRUE(send_raw(fd, ctl::encode(req)));
  m = receive(fd);
  ASSERT_TRUE(m && m->type == ctl::Type::LeaseOk);
  EXPECT_FALSE(m->body.contains("busy_poll_us"));
  EXPECT_FALSE(m->body.contains("progress_threads"));
  EXPECT_FALSE(m->body.contains("planes"));
  req["device"] = "mr9";  // a [devices.mr9] without progress_threads: only what it sets
  ASSERT_TRUE(send_raw(fd, ctl::encode(req)));
  m = receive(fd);
  ASSERT_TRUE(m && m->type == ctl::Type::LeaseOk);
  EXPECT_EQ(m->body.value("busy_poll_us", 0), 10);
  EXPECT_FALSE(m->body.contains("progress_threads"));
  EXPECT_FALSE(m->body.contains("planes"));
  ::close(fd);
}

TEST(Metaroced, ReloadPushesPoliciesAndABadConfigKeepsTheRunningOne) {
  Daemon d(kConfig);
  const int provider = connect_to(d.socket());
  ASSERT_GE(provider, 0);
  json req = lease_request(::getpid());
  req["class"] = "bulk";
  ASSERT_TRUE(send_raw(provider, ctl::encode(req)));
  auto lease = receive(provider);
  ASSERT_TRUE(lease && lease->type == ctl::Type::LeaseOk);
  EXPECT_EQ(lease->body["policy"]["max_window_bytes"], 1048576);

  // `metaroce config reload`
  std::string changed = kConfig;
  changed.replace(changed.find("1048576"), 7, "2097152");
  d.write_config(changed);
  auto ok = d.ask(ctl::make(ctl::Type::Reload));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->type, ctl::Type::Ok) << ok->body.dump();
  auto pushed = receive(provider);
  ASSERT_TRUE(pushed);
  ASSERT_EQ(pushed->type, ctl::Type::Policy);
  EXPECT_EQ(pushed->body["class"], "bulk");
  EXPECT_EQ(pushed->body["policy"]["max_window_bytes"], 2097152);

  // A broken file: the error names the line, and nothing changes.
  d.write_config("[ports]\nblock_size = 64\n[congestion.bulk]\nmax_window = 5\n");
  auto bad = d.ask(ctl::make(ctl::Type::Reload));
  ASSERT_TRUE(bad);
  ASSERT_EQ(bad->type, ctl::Type::Error);
  EXPECT_NE(bad->body["message"].get<std::string>().find(d.config() + ":4: error: unknown key 'max_window'"),
            std::string::npos)
      << bad->body["message"];
  EXPECT_FALSE(receive(provider, 200)) << "a failed reload pushed a policy";
  EXPECT_EQ(d.status()["classes"]["bulk"]["max_window_bytes"], 2097152);

  // SIGHUP does the same as `config reload`.
  changed.replace(changed.find("2097152"), 7, "4194304");
  d.write_config(changed);
  ASSERT_EQ(::kill(d.pid(), SIGHUP), 0);
  pushed = receive(provider);
  ASSERT_TRUE(pushed);
  EXPECT_EQ(pushed->body["policy"]["max_window_bytes"], 4194304);
  EXPECT_TRUE(d.alive());
  ::close(provider);
}

// What the daemon tells systemd (Type=notify) through $NOTIFY_SOCKET.
TEST(Metaroced, TellsSystemdWhenReadyReloadingAndStopping) {
  char tmpl[] = "/tmp/metaroced-notify.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string path = dir + "/notify";
  std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
  const auto next = [&] {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) != 1) return std::string("(nothing in 10 s)");
    char buf[512];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string("(recv failed)");
  };
  ::setenv("NOTIFY_SOCKET", path.c_str(), 1);
  {
    Daemon d(kConfig);
    ::unsetenv("NOTIFY_SOCKET");
    EXPECT_EQ(next(), "READY=1");
    ::kill(d.pid(), SIGHUP);
    EXPECT_EQ(next(), "RELOADING=1");
    EXPECT_EQ(next(), "READY=1");
    EXPECT_EQ(WEXITSTATUS(d.stop(SIGTERM)), 0);
    EXPECT_EQ(next(), "STOPPING=1");
  }
  ::unsetenv("NOTIFY_SOCKET");
  ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST(Metaroced, SigtermExitsCleanlyAndRemovesTheSocket) {
  Daemon d(kConfig);
  const int fd = connect_to(d.socket());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_raw(fd, ctl::encode(lease_request(::getpid()))));
  ASSERT_TRUE(receive(fd));
  const int status = d.stop(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(std::filesystem::exists(d.socket()));
  ::close(fd);
}

TEST(Metaroced, RefusesToReplaceALiveDaemon) {
  Daemon d(kConfig);
  const std::string cmd = std::string(METAROCED) + " --socket " + d.socket() + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  char line[512] = {};
  const bool got = std::fgets(line, sizeof line, p) != nullptr;
  const int status = ::pclose(p);
  ASSERT_TRUE(got);
  EXPECT_NE(std::string(line).find("another metaroced is serving"), std::string::npos) << line;
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_TRUE(d.alive());
  EXPECT_GE(connect_to(d.socket()), 0);
}

TEST(Metaroced, CheckConfigReportsLinesAndExitStatus) {
  char tmpl[] = "/tmp/metaroced-check.XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  std::ofstream(dir + "/bad.toml") << "[daemon]\nlog_level = \"info\"\nverbose = true\n";
  const std::string cmd = std::string(METAROCED) + " --check-config " + dir + "/bad.toml 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_TRUE(p);
  char line[512] = {};
  ASSERT_TRUE(std::fgets(line, sizeof line, p));
  EXPECT_EQ(WEXITSTATUS(::pclose(p)), 1);
  EXPECT_EQ(std::string(line), dir + "/bad.toml:3: error: unknown key 'verbose' in [daemon]\n");
  const std::string ok =
      std::string(METAROCED) + " --check-config " METAROCE_SOURCE_ROOT "/packaging/metaroced.toml >/dev/null";
  EXPECT_EQ(WEXITSTATUS(std::system(ok.c_str())), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
