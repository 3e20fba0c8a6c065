// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroced's event loop: the control socket and its clients, signals
// (SIGTERM/SIGINT stop, SIGHUP reloads the config), netlink updates and cache
// expiry, all on one thread with poll(). A client is a SOCK_SEQPACKET
// connection; what it leased is returned when the connection closes, which
// the kernel does for a process that dies by any means.
//
// Path discovery (`paths`, `peer_ports`) runs on a ProbeWorker thread, so a
// probe waiting out timeout_ms stalls nobody: the poll thread answers other
// clients meanwhile and sends the reply when the result comes back. A client
// with a probe outstanding is not read from until then, so its replies keep
// the order of its requests. The clock and the prober are injected (tests:
// a FakeClock, a scripted prober).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster_secret.h"
#include "config.h"
#include "discovery.h"
#include "metaroce/clock.h"
#include "metaroce/ctl.h"
#include "netlink.h"
#include "port_allocator.h"
#include "probe_worker.h"
#include "stats_store.h"

namespace metaroce::daemon {

class Server {
 public:
  Server(Config config, std::string config_path, const Clock& clock = monotonic_clock(),
         Prober prober = network_prober());
  ~Server();
  // Opens the socket (refusing to replace a live daemon's), blocks the
  // signals it handles and opens netlink. False with `error` on failure.
  bool start(std::string& error);
  // Serves until SIGTERM or SIGINT; returns the exit status.
  int run();

 private:
  struct Client {
    int fd = -1;
    uint64_t id = 0;
    ucred cred{};
    bool provider = false;
    std::string traffic_class;
    struct Lease {
      PortLease ports;
      std::string address;  // the context's local address
    };
    std::vector<Lease> leases;
    uint32_t bad_messages = 0;
    bool probing = false;  // a reply waits for a probe: not read from meanwhile
  };
  // A request whose reply waits for its probe.
  struct PendingProbe {
    uint64_t client = 0;
    ctl::Type type = ctl::Type::Paths;
    std::string key;           // PathCache key
    nlohmann::json reply;      // what is known before the probe
    uint64_t probe_owner = 0;  // `paths`: the allocator owner of the probed block
    uint32_t want = 0;         // `peer_ports`: ports asked for
    uint16_t home_port = 0;
    uint64_t net_changes = 0;  // net_changes_ at submission: a result from before a change is not cached
  };

  void accept_clients();
  // False when the client is to be dropped.
  bool on_client_readable(Client& c);
  void drop(uint64_t id);
  void handle(Client& c, const ctl::Message& m);
  nlohmann::json lease(Client& c, const nlohmann::json& body);
  // The reply, or nullopt when it waits for a probe (submitted).
  std::optional<nlohmann::json> paths(Client& c, const nlohmann::json& body);
  std::optional<nlohmann::json> peer_ports(Client& c, const nlohmann::json& body);
  void submit_probe(Client& c, PendingProbe pending, ProbeRequest request);
  void on_probe_results();
  void finish_paths(PendingProbe& p, ProbeResult& result);
  void finish_peer_ports(PendingProbe& p, ProbeResult& result);
  std::chrono::steady_clock::time_point now() const;
  nlohmann::json peer_key(const Client& c, const nlohmann::json& body);
  // What a peer_key or peer_ports request names: a lease of this client's
  // (else `error` is the reply), the peer's address and its home port.
  struct PeerRequest {
    const Client::Lease* lease = nullptr;
    uint16_t home_port = 0;
    std::string dest;
    uint16_t dport = 0;
  };
  std::optional<PeerRequest> peer_request(const Client& c, const nlohmann::json& body, nlohmann::json& error) const;
  nlohmann::json status() const;
  nlohmann::json reload(const Client& c);
  bool reload_config(std::string& error);
  void push_policies();
  bool send(const Client& c, const nlohmann::json& message);
  void on_net_change(const NetChange& change);
  const ctl::Policy& policy_of(const std::string& traffic_class) const;

  Config config_;
  std::string config_path_;
  const Clock& clock_;
  Prober prober_;
  // Made by start() once the signals are blocked: a thread started before
  // would take SIGTERM's default action for the process.
  std::unique_ptr<ProbeWorker> probes_;
  std::map<uint64_t, PendingProbe> pending_;  // by ticket
  uint64_t probe_owners_ = 0;                 // `paths` probes so far: each probes from a block of its own
  std::vector<uint8_t> secret_;               // the cluster secret; empty in integrity mode
  int listen_fd_ = -1;
  int signal_fd_ = -1;
  bool socket_created_ = false;
  std::unique_ptr<PortAllocator> allocator_;
  std::unique_ptr<Netlink> netlink_;
  PathCache paths_;
  // Destinations whose last discovery found at most one path (no router
  // answered, or no ECMP on the way): peer_ports answers "hash" for them at
  // once, rather than probe for each new peer (a peer's home port is bound,
  // so on a flat network every probe waits out timeout_ms). Forgotten after
  // interval_s and on any netlink change.
  std::map<std::string, std::chrono::steady_clock::time_point> single_path_dests_;
  StatsStore stats_;
  std::map<uint64_t, Client> clients_;
  uint64_t next_client_id_ = 1;
  std::chrono::steady_clock::time_point started_;
  uint64_t net_changes_ = 0;
};

}  // namespace metaroce::daemon
