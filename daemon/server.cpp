// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

namespace metaroce::daemon {
namespace {

// A client that sends this many undecodable messages is disconnected (it
// is broken, and each one costs a log line).
constexpr uint32_t kMaxBadMessages = 64;
// Leases one connection may hold: a context retries when a leased port
// turns out to be taken by a process outside the daemon's pool.
constexpr size_t kMaxLeasesPerClient = 8;
// Owners of the blocks `paths` requests probe from, for each probe's duration:
// counted down from here, far from client ids (counted up from 1).
constexpr uint64_t kProbeOwnerLast = ~uint64_t{0};

sockaddr_un unix_address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.c_str(), std::min(path.size(), sizeof a.sun_path - 1));
  return a;
}

}  // namespace

Server::Server(Config config, std::string config_path, const Clock& clock, Prober prober)
    : config_(std::move(config)), config_path_(std::move(config_path)), clock_(clock), prober_(std::move(prober)) {}

Server::~Server() {
  for (auto& [id, c] : clients_) ::close(c.fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (socket_created_) ::unlink(config_.socket_path.c_str());
  if (signal_fd_ >= 0) ::close(signal_fd_);
}

std::chrono::steady_clock::time_point Server::now() const {
  // The injected clock is CLOCK_MONOTONIC's timeline, as steady_clock's.
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(clock_.now()));
}

bool Server::start(std::string& error) {
  started_ = now();
  allocator_ = std::make_unique<PortAllocator>(config_.ports);
  if (config_.security.mode != "integrity") {
    std::optional<std::vector<uint8_t>> secret = load_cluster_secret(config_.security.secret_file, error);
    if (!secret) {
      error = "security mode " + config_.security.mode + ": " + error;
      return false;
    }
    secret_ = std::move(*secret);
  }

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  if (sigprocmask(SIG_BLOCK, &mask, nullptr) != 0 ||
      (signal_fd_ = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
    error = std::string("signalfd: ") + std::strerror(errno);
    return false;
  }
  ::signal(SIGPIPE, SIG_IGN);
  probes_ = std::make_unique<ProbeWorker>(std::move(prober_));
  if (probes_->fd() < 0) {
    error = std::string("eventfd: ") + std::strerror(errno);
    return false;
  }

  const std::string& path = config_.socket_path;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    error = "cannot create " + dir.string() + ": " + ec.message();
    return false;
  }
  const sockaddr_un address = unix_address(path);
  // A socket file that accepts connections belongs to a live daemon; one
  // that refuses them is left over from a crash.
  const int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (probe >= 0) {
    const bool live = ::connect(probe, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    ::close(probe);
    if (live) {
      error = "another metaroced is serving " + path;
      return false;
    }
  }
  ::unlink(path.c_str());
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    error = "cannot bind " + path + ": " + std::strerror(errno);
    return false;
  }
  socket_created_ = true;
  // Any local user may run a provider; what each may do is checked per
  // request from its peer credentials.
  ::chmod(path.c_str(), 0666);
  if (::listen(listen_fd_, 64) != 0) {
    error = std::string("listen: ") + std::strerror(errno);
    return false;
  }

  std::string why;
  netlink_ = Netlink::open([this](const NetChange& c) { on_net_change(c); }, why);
  if (!netlink_) spdlog::warn("netlink unavailable, path tables will not follow route changes: {}", why);
  spdlog::info("metaroced serving {} (home ports {}+{}, {} source-port blocks of {})", path, config_.ports.home_first,
               config_.ports.home_count, allocator_->free_blocks(), config_.ports.block_size);
  // Under systemd (Type=notify), `systemctl start` returns once providers can connect.
  (void)sd_notify(0, "READY=1");
  return true;
}

int Server::run() {
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({signal_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    fds.push_back({netlink_ ? netlink_->fd() : -1, POLLIN, 0});
    fds.push_back({probes_->fd(), POLLIN, 0});
    constexpr size_t kFirstClient = 4;
    std::vector<uint64_t> ids;
    for (const auto& [id, c] : clients_) {
      // POLLHUP is reported without asking: a client that goes away while
      // its probe runs is still noticed.
      fds.push_back({c.fd, static_cast<short>(c.probing ? 0 : POLLIN), 0});
      ids.push_back(id);
    }
    const int n = ::poll(fds.data(), fds.size(), 1000);
    if (n < 0 && errno != EINTR) {
      spdlog::critical("poll: {}", std::strerror(errno));
      return 1;
    }
    paths_.expire(now(), config_.discovery.expiry_s);
    if (n <= 0) continue;
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (info.ssi_signo == SIGHUP) {
          std::string error;
          if (!reload_config(error)) spdlog::error("reload failed, keeping the running config:\n{}", error);
        } else {
          spdlog::info("signal {}: shutting down ({} clients)", info.ssi_signo, clients_.size());
          (void)sd_notify(0, "STOPPING=1");
          return 0;
        }
      }
    }
    if (fds[1].revents & POLLIN) accept_clients();
    if (fds[2].revents & POLLIN) netlink_->on_readable();
    if (fds[3].revents & POLLIN) on_probe_results();
    for (size_t i = 0; i < ids.size(); ++i) {
      const short ev = fds[kFirstClient + i].revents;
      if (!ev) continue;
      auto it = clients_.find(ids[i]);
      if (it == clients_.end()) continue;
      if (!(ev & POLLIN) || !on_client_readable(it->second)) drop(ids[i]);
    }
  }
}

void Server::accept_clients() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    Client c;
    c.fd = fd;
    c.id = next_client_id_++;
    socklen_t len = sizeof c.cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c.cred, &len) != 0 || c.cred.pid <= 0) {
      spdlog::warn("refusing a client without peer credentials");
      ::close(fd);
      continue;
    }
    spdlog::debug("client {} connected: pid {} uid {}", c.id, c.cred.pid, c.cred.uid);
    clients_.emplace(c.id, c);
  }
}

bool Server::on_client_readable(Client& c) {
  std::vector<uint8_t> buf(ctl::kMaxMessageBytes + 1);
  const ssize_t n = ::recv(c.fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
  if (n == 0) return false;  // closed: the process exited or was killed
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  std::string error;
  std::optional<ctl::Message> m;
  if (static_cast<size_t>(n) > ctl::kMaxMessageBytes) error = "message too long (" + std::to_string(n) + " bytes)";
  else m = ctl::decode(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), error);
  if (!m) {
    spdlog::warn("client {} (pid {}): bad request: {}", c.id, c.cred.pid, error);
    send(c, ctl::make_error("bad request: " + error));
    return ++c.bad_messages < kMaxBadMessages;
  }
  try {
    handle(c, *m);
  } catch (const std::exception& e) {
    // decode() validated the fields handle() reads; this is a bug, not a crash.
    spdlog::error("client {}: {} failed: {}", c.id, ctl::to_string(m->type), e.what());
    send(c, ctl::make_error(std::string("internal error: ") + e.what()));
  }
  return true;
}

void Server::drop(uint64_t id) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  // A probe may still be binding the ports of this client's block: its
  // leases return when the probe does (on_probe_results()).
  const size_t released = it->second.probing ? 0 : allocator_->release_owner(id);
  stats_.forget(id);
  if (released) spdlog::info("pid {} gone: released {} lease(s)", it->second.cred.pid, released);
  ::close(it->second.fd);
  clients_.erase(it);
}

void Server::handle(Client& c, const ctl::Message& m) {
  switch (m.type) {
    case ctl::Type::Lease: send(c, lease(c, m.body)); return;
    case ctl::Type::Report:
      if (!c.provider) {
        send(c, ctl::make_error("report before lease"));
        return;
      }
      stats_.update(c.id, c.cred.pid, c.cred.uid, m.body, now());
      return;  // reports are not answered: they are periodic and one-way
    case ctl::Type::Status: send(c, status()); return;
    case ctl::Type::Stats: {
      nlohmann::json r = ctl::make(ctl::Type::Stats);
      r["stats"] = stats_.to_json(now());
      send(c, r);
      return;
    }
    case ctl::Type::Paths:
      if (const std::optional<nlohmann::json> r = paths(c, m.body)) send(c, *r);
      return;
    case ctl::Type::PeerPorts:
      if (const std::optional<nlohmann::json> r = peer_ports(c, m.body)) send(c, *r);
      return;
    case ctl::Type::PeerKey: send(c, peer_key(c, m.body)); return;
    case ctl::Type::Reload: send(c, reload(c)); return;
    case ctl::Type::LeaseOk:
    case ctl::Type::PeerPortsOk:
    case ctl::Type::PeerKeyOk:
    case ctl::Type::Policy:
    case ctl::Type::Ok:
    case ctl::Type::Error:
      send(c, ctl::make_error(std::string("'") + ctl::to_string(m.type) + "' is sent by the daemon, not to it"));
      return;
  }
}

const ctl::Policy& Server::policy_of(const std::string& traffic_class) const {
  auto it = config_.classes.find(traffic_class);
  return it != config_.classes.end() ? it->second : config_.classes.at("default");
}

nlohmann::json Server::lease(Client& c, const nlohmann::json& body) {
  const pid_t claimed = body["pid"].get<pid_t>();
  if (claimed != c.cred.pid)
    return ctl::make_error("pid " + std::to_string(claimed) + " does not match the peer credentials (pid " +
                           std::to_string(c.cred.pid) + ")");
  const std::string traffic_class = body.value("class", "default");
  if (!config_.classes.count(traffic_class)) return ctl::make_error("unknown traffic class '" + traffic_class + "'");
  const uint32_t want = body.value("paths", uint32_t{config_.ports.paths_per_connection});
  if (want > config_.ports.block_size)
    return ctl::make_error("paths " + std::to_string(want) + " exceeds the block size " +
                           std::to_string(config_.ports.block_size));
  if (c.leases.size() >= kMaxLeasesPerClient)
    return ctl::make_error("too many leases on one connection (" + std::to_string(kMaxLeasesPerClient) + ")");
  std::string error;
  std::optional<uint16_t> home_port, block_first;
  if (body.contains("home_port")) home_port = body["home_port"].get<uint16_t>();
  if (body.contains("block_first")) block_first = body["block_first"].get<uint16_t>();
  const std::optional<PortLease> l = allocator_->allocate(c.id, error, home_port, block_first);
  if (!l) return ctl::make_error(error);

  // The default ports: ECMP hashing spreads them (peer_ports then gives each
  // peer ports chosen for its paths).
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < want; ++i) ports.push_back(static_cast<uint16_t>(l->block_first + i));
  c.provider = true;
  c.traffic_class = traffic_class;
  c.leases.push_back({*l, body["address"].get<std::string>()});
  spdlog::info("pid {} uid {}: home port {}, source ports {}..{} (default {}..{}), class {}", c.cred.pid, c.cred.uid,
               l->home_port, l->block_first, l->block_first + l->block_size - 1, ports.front(), ports.back(),
               traffic_class);
  nlohmann::json r = ctl::make(ctl::Type::LeaseOk);
  r["home_port"] = l->home_port;
  r["source_ports"] = ports;
  r["block_first"] = l->block_first;
  r["block_size"] = l->block_size;
  r["class"] = traffic_class;
  r["policy"] = ctl::policy_to_json(policy_of(traffic_class));
  r["stats_interval_ms"] = config_.stats_interval_ms;
  r["security"] = config_.security.mode;
  if (auto d = config_.devices.find(body.value("device", std::string())); d != config_.devices.end()) {
    if (d->second.busy_poll_us) r["busy_poll_us"] = *d->second.busy_poll_us;
    if (d->second.progress_threads) r["progress_threads"] = *d->second.progress_threads;
    if (!d->second.planes.empty()) r["planes"] = d->second.planes;
  }
  return r;
}

std::optional<Server::PeerRequest> Server::peer_request(const Client& c, const nlohmann::json& body,
                                                        nlohmann::json& error) const {
  PeerRequest r;
  r.home_port = body["home_port"].get<uint16_t>();
  for (const Client::Lease& l : c.leases)
    if (!r.lease && l.ports.home_port == r.home_port) r.lease = &l;
  if (!r.lease) {
    error = ctl::make_error("home port " + std::to_string(r.home_port) + " is not leased on this connection");
    return std::nullopt;
  }
  r.dest = body["dest"].get<std::string>();
  r.dport = body.value("dport", config_.ports.home_first);
  return r;
}

nlohmann::json Server::peer_key(const Client& c, const nlohmann::json& body) {
  if (secret_.empty()) return ctl::make_error("security mode is " + config_.security.mode + ": there are no keys");
  // Keys only for the endpoint this client leased: another local process
  // cannot obtain the key of an endpoint pair it is not part of.
  nlohmann::json refusal;
  const std::optional<PeerRequest> peer = peer_request(c, body, refusal);
  if (!peer) return refusal;
  const std::string& dest = peer->dest;
  const uint16_t dport = peer->dport;
  std::string error;
  const std::optional<PairKeyResult> key =
      derive_pair_key(secret_, peer->lease->address, peer->home_port, dest, dport, error);
  if (!key) return ctl::make_error(error);
  nlohmann::json r = ctl::make(ctl::Type::PeerKeyOk);
  r["dest"] = dest;
  r["dport"] = dport;
  r["key"] = to_hex(key->key);
  r["role"] = key->role;
  return r;
}

std::optional<nlohmann::json> Server::paths(Client& c, const nlohmann::json& body) {
  const std::string dest = body["dest"].get<std::string>();
  const uint16_t dport = body.value("dport", config_.ports.home_first);
  const std::string source = body.value("source", "");
  const std::string key = PathCache::key(dest, dport, source);
  nlohmann::json r = ctl::make(ctl::Type::Paths);
  const bool refresh = body.value("refresh", false);
  if (!refresh) {
    if (const Discovery* d = paths_.find(key, now(), config_.discovery.interval_s)) {
      r.update(to_json(*d));
      r["cached"] = true;
      return r;
    }
  }
  // discover() would refuse it on the worker; refused here, no block is taken.
  in_addr unused{};
  if (inet_pton(AF_INET, dest.c_str(), &unused) != 1)
    return ctl::make_error("destination '" + dest + "' is not an IPv4 address");
  // Probe from a block of the pool, so that the probes disturb no lease.
  std::string error;
  const uint64_t owner = kProbeOwnerLast - probe_owners_++;
  const std::optional<PortLease> l = allocator_->allocate(owner, error);
  if (!l) return ctl::make_error(error);
  ProbeRequest request{dest, dport, source, {}, config_.discovery};
  for (uint32_t i = 0; i < std::min<uint32_t>(l->block_size, config_.discovery.probe_ports); ++i)
    request.source_ports.push_back(static_cast<uint16_t>(l->block_first + i));
  PendingProbe pending;
  pending.type = ctl::Type::Paths;
  pending.key = key;
  pending.reply = std::move(r);
  pending.probe_owner = owner;
  submit_probe(c, std::move(pending), std::move(request));
  return std::nullopt;
}

std::optional<nlohmann::json> Server::peer_ports(Client& c, const nlohmann::json& body) {
  nlohmann::json refusal;
  const std::optional<PeerRequest> peer = peer_request(c, body, refusal);
  if (!peer) return refusal;
  const Client::Lease* lease = peer->lease;
  const std::string& dest = peer->dest;
  const uint16_t dport = peer->dport;
  const uint32_t want = body["paths"].get<uint32_t>();
  nlohmann::json r = ctl::make(ctl::Type::PeerPortsOk);
  r["dest"] = dest;
  r["spread"] = "hash";
  r["source_ports"] = nlohmann::json::array();
  r["cached"] = false;
  if (!config_.discovery.enabled) return r;
  if (auto it = single_path_dests_.find(dest); it != single_path_dests_.end()) {
    if (now() - it->second < std::chrono::seconds(config_.discovery.interval_s)) {
      r["cached"] = true;
      return r;
    }
    single_path_dests_.erase(it);
  }
  // Probes go out from the lease's own block: the ports the context has
  // bound already cannot be bound here and are skipped, so what comes back
  // is free for the context to open.
  ProbeRequest request{dest, dport, lease->address, {}, config_.discovery};
  for (uint32_t i = 0; i < std::min<uint32_t>(lease->ports.block_size, config_.discovery.probe_ports); ++i)
    request.source_ports.push_back(static_cast<uint16_t>(lease->ports.block_first + i));
  PendingProbe pending;
  pending.type = ctl::Type::PeerPorts;
  pending.key = PathCache::key(dest, dport, lease->address);
  pending.reply = std::move(r);
  pending.want = want;
  pending.home_port = peer->home_port;
  submit_probe(c, std::move(pending), std::move(request));
  return std::nullopt;
}

void Server::submit_probe(Client& c, PendingProbe pending, ProbeRequest request) {
  pending.client = c.id;
  pending.net_changes = net_changes_;
  c.probing = true;
  pending_.emplace(probes_->submit(std::move(request)), std::move(pending));
}

void Server::on_probe_results() {
  for (ProbeResult& result : probes_->take()) {
    auto it = pending_.find(result.ticket);
    if (it == pending_.end()) continue;
    PendingProbe p = std::move(it->second);
    pending_.erase(it);
    // The result is on the daemon's clock, whatever discover() read.
    result.discovery.when = now();
    if (p.type == ctl::Type::Paths) finish_paths(p, result);
    else finish_peer_ports(p, result);
    auto client = clients_.find(p.client);
    if (client == clients_.end()) {
      allocator_->release_owner(p.client);  // gone while probing: see drop()
      continue;
    }
    client->second.probing = false;
    send(client->second, p.reply);
  }
}

void Server::finish_paths(PendingProbe& p, ProbeResult& result) {
  allocator_->release_owner(p.probe_owner);
  if (!result.ok) {
    p.reply = ctl::make_error(result.error);
    return;
  }
  const Discovery& d = result.discovery;
  spdlog::info("discovery {} -> {} paths in {:.1f} ms ({} probes, {} answers)", p.key, d.paths.size(), d.elapsed_ms,
               d.probes_sent, d.answers);
  p.reply.update(to_json(d));
  p.reply["cached"] = false;
  if (p.net_changes == net_changes_) paths_.put(p.key, std::move(result.discovery));
}

void Server::finish_peer_ports(PendingProbe& p, ProbeResult& result) {
  auto client = clients_.find(p.client);
  const pid_t pid = client != clients_.end() ? client->second.cred.pid : 0;
  const std::string dest = p.reply["dest"].get<std::string>();
  if (!result.ok) {
    spdlog::warn("pid {}: discovery to {} failed: {}", pid, dest, result.error);
    return;
  }
  const Discovery& d = result.discovery;
  const std::vector<uint16_t> ports = spread_ports(d, p.want);
  std::string used;
  for (uint16_t port : ports) used += (used.empty() ? "" : ",") + std::to_string(port);
  if (ports.size() == p.want) {
    p.reply["spread"] = "discovered " + std::to_string(d.paths.size()) + " paths";
    p.reply["source_ports"] = ports;
  }
  spdlog::info("pid {}: home port {} to {}:{}: {} in {:.1f} ms ({})", pid, p.home_port, dest, d.dport,
               p.reply["spread"].get<std::string>(), d.elapsed_ms, ports.size() == p.want ? used : "hash spread");
  if (p.net_changes != net_changes_) return;  // the network changed meanwhile: nothing to remember
  if (d.paths.size() <= 1) single_path_dests_[dest] = d.when;
  paths_.put(p.key, std::move(result.discovery));
}

nlohmann::json Server::status() const {
  nlohmann::json r = ctl::make(ctl::Type::Status);
  r["pid"] = ::getpid();
  r["uptime_s"] = std::chrono::duration<double>(now() - started_).count();
  r["config"] = config_path_;
  r["socket"] = config_.socket_path;
  r["planes"] = config_.planes;
  r["clients"] = clients_.size();
  r["free_home_ports"] = allocator_->free_home_ports();
  r["free_blocks"] = allocator_->free_blocks();
  r["block_size"] = config_.ports.block_size;
  r["discovery_cache"] = paths_.size();
  r["probes_outstanding"] = pending_.size();
  r["net_changes"] = net_changes_;
  nlohmann::json leases = nlohmann::json::array();
  for (const PortLease& l : allocator_->leases()) {
    auto it = clients_.find(l.owner);
    nlohmann::json j;
    j["pid"] = it != clients_.end() ? it->second.cred.pid : 0;
    j["uid"] = it != clients_.end() ? it->second.cred.uid : 0;
    j["class"] = it != clients_.end() ? it->second.traffic_class : "";
    j["home_port"] = l.home_port;
    j["block_first"] = l.block_first;
    j["block_size"] = l.block_size;
    leases.push_back(std::move(j));
  }
  r["leases"] = std::move(leases);
  nlohmann::json classes = nlohmann::json::object();
  for (const auto& [name, p] : config_.classes) classes[name] = ctl::policy_to_json(p);
  r["classes"] = std::move(classes);
  if (netlink_) r["net"] = netlink_->snapshot(config_.planes);
  return r;
}

nlohmann::json Server::reload(const Client& c) {
  if (c.cred.uid != 0 && c.cred.uid != ::geteuid())
    return ctl::make_error("reload needs root or the daemon's user (uid " + std::to_string(c.cred.uid) + ")");
  std::string error;
  if (!reload_config(error)) return ctl::make_error("reload failed, running config kept:\n" + error);
  return ctl::make(ctl::Type::Ok);
}

bool Server::reload_config(std::string& error) {
  // systemd (Type=notify) shows the service as reloading until READY again.
  (void)sd_notify(0, "RELOADING=1");
  struct Ready {
    ~Ready() { (void)sd_notify(0, "READY=1"); }
  } ready;
  if (config_path_.empty()) {
    error = "no config file (started without --config)";
    return false;
  }
  ConfigResult r = load_config(config_path_);
  if (!r.config) {
    error = format_errors(r, config_path_);
    return false;
  }
  Config next = std::move(*r.config);
  // What the running allocations and socket depend on needs a restart.
  if (next.socket_path != config_.socket_path || std::memcmp(&next.ports, &config_.ports, sizeof next.ports) != 0)
    spdlog::warn("reload: socket and [ports] changes take effect at the next start");
  if (next.security.mode != config_.security.mode || next.security.secret_file != config_.security.secret_file)
    spdlog::warn("reload: [security] changes take effect at the next start");
  next.socket_path = config_.socket_path;
  next.ports = config_.ports;
  next.security = config_.security;
  config_ = std::move(next);
  if (auto level = spdlog::level::from_str(config_.log_level);
      level != spdlog::level::off || config_.log_level == "off")
    spdlog::set_level(level);
  paths_.clear();
  push_policies();
  spdlog::info("config reloaded from {}", config_path_);
  return true;
}

void Server::push_policies() {
  size_t pushed = 0;
  for (auto& [id, c] : clients_) {
    if (!c.provider) continue;
    if (!config_.classes.count(c.traffic_class)) c.traffic_class = "default";
    nlohmann::json m = ctl::make(ctl::Type::Policy);
    m["class"] = c.traffic_class;
    m["policy"] = ctl::policy_to_json(policy_of(c.traffic_class));
    if (send(c, m)) ++pushed;
  }
  spdlog::info("policy pushed to {} provider context(s)", pushed);
}

bool Server::send(const Client& c, const nlohmann::json& message) {
  const std::string text = ctl::encode(message);
  if (text.size() > ctl::kMaxMessageBytes) {
    const std::string err = ctl::encode(ctl::make_error("reply too large"));
    return ::send(c.fd, err.data(), err.size(), MSG_NOSIGNAL | MSG_DONTWAIT) >= 0;
  }
  if (::send(c.fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
    spdlog::debug("client {}: send failed: {}", c.id, std::strerror(errno));
    return false;
  }
  return true;
}

void Server::on_net_change(const NetChange& change) {
  ++net_changes_;
  single_path_dests_.clear();
  spdlog::debug("netlink: {}", change.description);
  if (change.kind == NetChange::Kind::Route && change.route_prefix != "0.0.0.0/0") {
    // Only the destinations behind this route are affected.
    const size_t dropped = paths_.drop_if([&](const Discovery& d) { return in_prefix(d.dest, change.route_prefix); });
    if (dropped) spdlog::info("route {} changed: {} path table(s) to refresh", change.route_prefix, dropped);
  } else if (paths_.size()) {
    spdlog::info("{}: {} path table(s) to refresh", change.description, paths_.size());
    paths_.clear();
  }
}

}  // namespace metaroce::daemon
