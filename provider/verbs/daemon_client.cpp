// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "daemon_client.h"
#include "library_thread.h"

#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <cstring>

namespace metaroce::verbs {
namespace {

// A daemon that does not answer a lease in this long is treated as absent.
constexpr int kReplyTimeoutMs = 5000;
constexpr int kReconnectIntervalMs = 1000;

// The IP literal of `a`, and its port.
std::string ip_text(const sockaddr_storage& a, uint16_t& port) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, ip, sizeof ip);
    port = ntohs(v4.sin_port);
  } else {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, ip, sizeof ip);
    port = ntohs(v6.sin6_port);
  }
  return ip;
}

std::string address_text(const sockaddr_storage& a) {
  uint16_t port = 0;
  const std::string ip = ip_text(a, port);
  return (a.ss_family == AF_INET ? ip : "[" + ip + "]") + ":" + std::to_string(port);
}

// Receives one message, waiting up to timeout_ms; nullopt on timeout, error
// or a closed connection (with `error` set).
std::optional<ctl::Message> receive(int fd, int timeout_ms, std::string& error) {
  pollfd p{fd, POLLIN, 0};
  const int r = ::poll(&p, 1, timeout_ms);
  if (r == 0) {
    error = "no answer from metaroced";
    return std::nullopt;
  }
  std::vector<uint8_t> buf(ctl::kMaxMessageBytes);
  const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
  if (n <= 0) {
    error = n == 0 ? "metaroced closed the connection" : std::string("recv: ") + std::strerror(errno);
    return std::nullopt;
  }
  return ctl::decode(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), error);
}

}  // namespace

void apply_policy(io::Runtime& runtime, const ctl::Policy& policy, const transport::CongestionConfig& baseline,
                  double baseline_rate_hint) {
  transport::CongestionConfig cc = baseline;
  ctl::apply_policy(policy, cc);
  runtime.with_engine([&](transport::Endpoint& e, transport::Time) {
    e.set_congestion(cc);
    e.set_rate_hint_utilization(policy.rate_hint_utilization.value_or(baseline_rate_hint));
    return 0;
  });
}

namespace {

// A connected socket to the daemon ($METAROCE_DAEMON_SOCKET, else the
// default socket), or -1 with `why`.
int connect_to_daemon(std::string& why) {
  const char* env = std::getenv(ctl::kSocketEnv);
  return ctl::connect_socket(env && *env ? env : ctl::kDefaultSocket, why);
}

// Sends `request` (a lease) on `fd` and reads the lease; a policy pushed
// meanwhile lands in `pushed`.
std::optional<DaemonLease> request_lease(int fd, const nlohmann::json& request, uint16_t paths,
                                         std::optional<ctl::Policy>& pushed, std::string& error) {
  const std::string text = ctl::encode(request);
  if (::send(fd, text.data(), text.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(text.size())) {
    error = std::string("send to metaroced: ") + std::strerror(errno);
    return std::nullopt;
  }
  for (;;) {
    std::optional<ctl::Message> m = receive(fd, kReplyTimeoutMs, error);
    if (!m) return std::nullopt;
    if (m->type == ctl::Type::Policy) {  // a reload raced the lease
      ctl::Policy p;
      if (ctl::policy_from_json(m->body["policy"], p, error)) pushed = p;
      continue;
    }
    if (m->type == ctl::Type::Error) {
      error = "metaroced: " + m->body["message"].get<std::string>();
      return std::nullopt;
    }
    if (m->type != ctl::Type::LeaseOk) {
      error = std::string("metaroced answered '") + ctl::to_string(m->type) + "' to a lease";
      return std::nullopt;
    }
    DaemonLease l;
    l.home_port = m->body["home_port"].get<uint16_t>();
    l.block_first = m->body["block_first"].get<uint16_t>();
    l.source_ports = m->body["source_ports"].get<std::vector<uint16_t>>();
    l.stats_interval_ms = m->body["stats_interval_ms"].get<uint32_t>();
    const std::string security = m->body.value("security", std::string(ctl::kSecurityModes[0]));
    for (uint8_t i = 0; i < wire::kSecurityCount; ++i)
      if (security == ctl::kSecurityModes[i]) l.security = static_cast<wire::Security>(i);
    if (!ctl::policy_from_json(m->body["policy"], l.policy, error)) return std::nullopt;
    if (m->body.contains("busy_poll_us")) l.busy_poll_us = m->body["busy_poll_us"].get<uint32_t>();
    if (m->body.contains("progress_threads")) l.progress_threads = m->body["progress_threads"].get<uint32_t>();
    if (m->body.contains("planes")) l.planes = m->body["planes"].get<std::vector<std::string>>();
    if (l.source_ports.size() < std::max<size_t>(paths, 1)) {
      error = "metaroced leased " + std::to_string(l.source_ports.size()) + " source ports for " +
              std::to_string(paths) + " paths";
      return std::nullopt;
    }
    return l;
  }
}

}  // namespace

std::unique_ptr<DaemonClient> DaemonClient::connect(std::string& why) {
  const int fd = connect_to_daemon(why);
  if (fd < 0) return nullptr;
  return std::unique_ptr<DaemonClient>(new DaemonClient(fd));
}

DaemonClient::DaemonClient(int fd) : fd_(fd), stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

DaemonClient::~DaemonClient() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (stop_fd_ >= 0) ::close(stop_fd_);
  if (fd_ >= 0) ::close(fd_);
}

bool DaemonClient::send(const nlohmann::json& message) {
  const std::string text = ctl::encode(message);
  return ::send(fd_, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

std::optional<DaemonLease> DaemonClient::lease(const std::string& device, const std::string& address, uint16_t paths,
                                               const std::string& traffic_class, uint16_t home_port,
                                               std::string& error) {
  nlohmann::json req = ctl::make(ctl::Type::Lease);
  req["pid"] = ::getpid();
  req["address"] = address;
  if (!device.empty()) req["device"] = device;
  if (paths) req["paths"] = paths;
  if (!traffic_class.empty()) req["class"] = traffic_class;
  if (home_port) req["home_port"] = home_port;
  std::optional<DaemonLease> l = request_lease(fd_, req, paths, pending_policy_, error);
  if (l) {
    lease_request_ = std::move(req);
    lease_ = *l;
  }
  return l;
}

std::optional<ctl::Message> DaemonClient::call(const nlohmann::json& request, std::string& error) {
  std::lock_guard<std::mutex> call(call_mutex_);
  std::unique_lock<std::mutex> lock(reply_mutex_);
  if (closed_ || !thread_.joinable()) {
    error = "not connected to metaroced";
    return std::nullopt;
  }
  reply_.reset();
  awaiting_reply_ = true;
  if (!send(request)) {
    awaiting_reply_ = false;
    error = std::string("send to metaroced: ") + std::strerror(errno);
    return std::nullopt;
  }
  const bool answered = reply_ready_.wait_for(lock, std::chrono::milliseconds(kReplyTimeoutMs),
                                              [&] { return reply_.has_value() || closed_; });
  awaiting_reply_ = false;
  if (!answered || !reply_) {
    error = answered ? "metaroced closed the connection" : "no answer from metaroced";
    return std::nullopt;
  }
  std::optional<ctl::Message> m = std::move(reply_);
  reply_.reset();
  if (m->type == ctl::Type::Error) {
    error = "metaroced: " + m->body["message"].get<std::string>();
    return std::nullopt;
  }
  return m;
}

std::optional<PeerPorts> DaemonClient::peer_ports(uint16_t home_port, const sockaddr_storage& peer, uint16_t paths,
                                                  std::string& error) {
  uint16_t dport = 0;
  const std::string dest = ip_text(peer, dport);
  nlohmann::json req = ctl::make(ctl::Type::PeerPorts);
  req["home_port"] = home_port;
  req["dest"] = dest;
  req["dport"] = dport;
  req["paths"] = paths;
  const std::optional<ctl::Message> m = call(req, error);
  if (!m || m->type != ctl::Type::PeerPortsOk) {
    if (m) error = std::string("metaroced answered '") + ctl::to_string(m->type) + "' to peer_ports";
    error += " (for " + dest + ")";
    return std::nullopt;
  }
  PeerPorts p;
  p.source_ports = m->body["source_ports"].get<std::vector<uint16_t>>();
  p.spread = m->body["spread"].get<std::string>();
  if (!p.source_ports.empty() && p.source_ports.size() != paths) {
    error = "metaroced gave " + std::to_string(p.source_ports.size()) + " source ports for " + std::to_string(paths) +
            " paths";
    return std::nullopt;
  }
  return p;
}

std::optional<PeerKey> DaemonClient::peer_key(uint16_t home_port, const sockaddr_storage& peer, std::string& error) {
  uint16_t dport = 0;
  const std::string dest = ip_text(peer, dport);
  nlohmann::json req = ctl::make(ctl::Type::PeerKey);
  req["home_port"] = home_port;
  req["dest"] = dest;
  req["dport"] = dport;
  const std::optional<ctl::Message> m = call(req, error);
  if (!m || m->type != ctl::Type::PeerKeyOk) {
    if (m) error = std::string("metaroced answered '") + ctl::to_string(m->type) + "' to peer_key";
    error += " (for " + dest + ")";
    return std::nullopt;
  }
  PeerKey k;
  const std::string hex = m->body["key"].get<std::string>();
  for (size_t i = 0; i < k.key.size(); ++i)
    k.key[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
  k.role = m->body["role"].get<uint8_t>();
  return k;
}

void DaemonClient::attach(io::Runtime* runtime, std::string device, uint32_t stats_interval_ms,
                          const transport::CongestionConfig& baseline, double baseline_rate_hint) {
  runtime_ = runtime;
  baseline_ = baseline;
  baseline_rate_hint_ = baseline_rate_hint;
  device_ = std::move(device);
  stats_interval_ms_ = stats_interval_ms;
  if (pending_policy_) apply(*pending_policy_);
  thread_ = io::start_library_thread([this] { run(); });
}

void DaemonClient::apply(const ctl::Policy& policy) { apply_policy(*runtime_, policy, baseline_, baseline_rate_hint_); }

void DaemonClient::run() {
  pthread_setname_np(pthread_self(), "metaroce-ctl");
  struct Closed {  // wakes a waiting peer_ports() whichever way the loop ends
    DaemonClient* client;
    ~Closed() {
      std::lock_guard<std::mutex> lock(client->reply_mutex_);
      client->closed_ = true;
      client->reply_ready_.notify_all();
    }
  } closed{this};
  auto next_report = std::chrono::steady_clock::now() + std::chrono::milliseconds(stats_interval_ms_);
  for (;;) {
    const auto interval = std::chrono::milliseconds(stats_interval_ms_);
    int timeout = -1;
    if (stats_interval_ms_) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_report - std::chrono::steady_clock::now());
      timeout = static_cast<int>(std::max<int64_t>(left.count(), 0));
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int r = ::poll(fds, 2, timeout);
    if (r < 0 && errno != EINTR) return;
    if (fds[1].revents) return;
    bool gone = fds[0].revents & (POLLHUP | POLLERR);
    if (!gone && (fds[0].revents & POLLIN)) {
      std::string error;
      std::optional<ctl::Message> m = receive(fd_, 0, error);
      gone = !m && error.find("closed") != std::string::npos;
      if (m && m->type == ctl::Type::Policy) {
        ctl::Policy p;
        if (ctl::policy_from_json(m->body["policy"], p, error)) apply(p);
      } else if (m && (m->type == ctl::Type::PeerPortsOk || m->type == ctl::Type::PeerKeyOk ||
                       m->type == ctl::Type::Error)) {
        std::lock_guard<std::mutex> lock(reply_mutex_);
        if (awaiting_reply_) {
          reply_ = std::move(m);
          reply_ready_.notify_all();
        }
      }
    }
    if (gone) {  // the daemon went away; the context runs on, and comes back when it does
      if (!reconnect()) return;
      next_report = std::chrono::steady_clock::now() + std::chrono::milliseconds(stats_interval_ms_);
      continue;
    }
    if (stats_interval_ms_ && std::chrono::steady_clock::now() >= next_report) {
      report();
      next_report = std::chrono::steady_clock::now() + interval;
    }
  }
}

bool DaemonClient::reconnect() {
  {
    std::lock_guard<std::mutex> lock(reply_mutex_);
    closed_ = true;  // peer_ports() fails fast meanwhile
    reply_ready_.notify_all();
  }
  nlohmann::json request = lease_request_;
  request["home_port"] = lease_.home_port;
  request["block_first"] = lease_.block_first;
  for (;;) {
    pollfd stop{stop_fd_, POLLIN, 0};
    if (::poll(&stop, 1, kReconnectIntervalMs) != 0) return false;
    std::string why;
    const int fd = connect_to_daemon(why);
    if (fd < 0) continue;               // not back yet
    std::optional<ctl::Policy> pushed;  // none can come before the lease is granted
    const std::optional<DaemonLease> l =
        request_lease(fd, request, static_cast<uint16_t>(lease_.source_ports.size()), pushed, why);
    const bool unanswered = why.starts_with("no answer") || why.starts_with("metaroced closed") ||
                            why.starts_with("recv: ") || why.starts_with("send to metaroced");
    if (!l && unanswered) {  // it went away again: retry
      ::close(fd);
      continue;
    }
    if (!l || l->home_port != lease_.home_port || l->block_first != lease_.block_first) {
      ::close(fd);
      std::fprintf(stderr,
                   "metaroce: %s: metaroced restarted and refused this context's ports (%s); running on without it\n",
                   device_.c_str(), l ? "it gave others" : why.c_str());
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(reply_mutex_);
      ::close(fd_);
      fd_ = fd;
      closed_ = false;
    }
    stats_interval_ms_ = l->stats_interval_ms;
    apply(l->policy);
    return true;
  }
}

void DaemonClient::report() {
  nlohmann::json m = ctl::make(ctl::Type::Report);
  m["home_port"] = runtime_->home_port();
  m["device"] = device_;
  m["busy_poll_us"] = runtime_->busy_poll_ns() / 1000;
  const io::RuntimeStats io = runtime_->stats();
  std::vector<std::pair<transport::PeerId, std::vector<transport::PathSnapshot>>> conns;
  nlohmann::json counters;
  runtime_->with_engine([&](transport::Endpoint& e, transport::Time) {
    transport::for_each_counter(e.counters(), [&](const char* name, uint64_t value) { counters[name] = value; });
    size_t paths = 0;
    for (transport::PeerId peer : e.peers()) {
      conns.emplace_back(peer, e.path_snapshots(peer));
      paths += conns.back().second.size();
      if (paths >= 256) break;  // about 300 bytes each: keeps a report well inside kMaxMessageBytes
    }
    return 0;
  });
  io::for_each_counter(io, [&](const char* name, uint64_t value) { counters[name] = value; });
  m["counters"] = std::move(counters);
  nlohmann::json connections = nlohmann::json::array();
  for (const auto& [peer, snaps] : conns) {
    nlohmann::json c;
    const std::optional<sockaddr_storage> a = runtime_->peer_address(peer);
    c["peer"] = a ? address_text(*a) : "peer " + std::to_string(peer);
    c["paths"] = nlohmann::json::array();
    for (const transport::PathSnapshot& s : snaps) {
      nlohmann::json p;
      transport::for_each_field(s, [&](const char* name, const auto& value) { p[name] = value; });
      p["source_port"] = runtime_->source_port(peer, s.path_id);
      c["paths"].push_back(std::move(p));
    }
    connections.push_back(std::move(c));
  }
  m["connections"] = std::move(connections);
  send(m);
}

}  // namespace metaroce::verbs
