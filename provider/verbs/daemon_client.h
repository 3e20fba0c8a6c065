// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A provider context's link to metaroced (include/metaroce/ctl.h): it leases
// the context's home port and source ports, then a small thread applies
// congestion policies the daemon pushes to the running engine, reports the
// engine's counters every stats interval, and hands peer_ports() its answer.
// When the daemon restarts (a package upgrade does that) the thread connects
// again and leases the same home port and block, so that policy and
// statistics resume; meanwhile the context runs on with the ports it has. The connection stays open for
// the context's lifetime: when it closes (the context is freed, or the
// process dies, even by SIGKILL) the daemon takes the ports back.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "metaroce/ctl.h"
#include "runtime.h"

namespace metaroce::verbs {

struct DaemonLease {
  uint16_t home_port = 0;
  uint16_t block_first = 0;
  std::vector<uint16_t> source_ports;
  ctl::Policy policy;
  uint32_t stats_interval_ms = 0;
  wire::Security security = wire::Security::Integrity;  // the cluster's mode
  std::optional<uint32_t> busy_poll_us;                 // the device's [devices.NAME] setting
  std::optional<uint32_t> progress_threads;             // the device's [devices.NAME] setting
  std::vector<std::string> planes;                      // the device's [devices.NAME] planes (netdevs)
};

struct PeerKey {
  transport::PairKey key{};
  uint8_t role = 0;
};

struct PeerPorts {
  std::vector<uint16_t> source_ports;  // empty: discovery found no paths (hash spread)
  std::string spread;                  // "hash" or "discovered N paths"
};

class DaemonClient {
 public:
  // Connects to $METAROCE_DAEMON_SOCKET or /run/metaroce/metaroced.sock.
  // Null, with `why` set, when no daemon answers there.
  static std::unique_ptr<DaemonClient> connect(std::string& why);
  ~DaemonClient();  // stops the thread; closing the socket ends the leases

  // Asks for a home port and `paths` source ports (0: as many as the daemon
  // is configured to give) for a context of RDMA device `device` on
  // `address`; with `home_port` (not 0) that home port, which the kernel
  // module gave the context.
  std::optional<DaemonLease> lease(const std::string& device, const std::string& address, uint16_t paths,
                                   const std::string& traffic_class, uint16_t home_port, std::string& error);

  // After attach(): asks for `paths` source ports of this lease's block that
  // cover the fabric's paths to `peer` (its IP and home port; the daemon
  // discovers them, and this blocks for that long). Nullopt, with `error`,
  // when the daemon refuses or is gone.
  std::optional<PeerPorts> peer_ports(uint16_t home_port, const sockaddr_storage& peer, uint16_t paths,
                                      std::string& error);

  // After attach(), in the authenticate and encrypt modes: the pair key of
  // this lease's endpoint and `peer` (its IP and home port). Nullopt, with
  // `error`, when the daemon refuses or is gone.
  std::optional<PeerKey> peer_key(uint16_t home_port, const sockaddr_storage& peer, std::string& error);

  // Starts the thread that applies pushed policies to `runtime` and reports
  // its counters. `runtime` must outlive this client. A policy is applied on
  // top of `baseline` (the context's own settings), so that a key removed
  // from the daemon's config returns to the context's value.
  void attach(io::Runtime* runtime, std::string device, uint32_t stats_interval_ms,
              const transport::CongestionConfig& baseline, double baseline_rate_hint);

 private:
  explicit DaemonClient(int fd);
  void run();
  // After the daemon went away: connects again every second and leases the
  // same ports; false when stopping or when the new daemon refuses them.
  bool reconnect();
  void apply(const ctl::Policy& policy);
  // Sends `request` and waits for the reader thread to hand over the answer
  // (or an error message); nullopt with `error` when none comes.
  std::optional<ctl::Message> call(const nlohmann::json& request, std::string& error);
  void report();
  bool send(const nlohmann::json& message);

  int fd_ = -1;  // replaced by reconnect() under reply_mutex_
  int stop_fd_ = -1;
  nlohmann::json lease_request_;  // the lease asked for, to ask again after a restart
  DaemonLease lease_;
  io::Runtime* runtime_ = nullptr;
  std::string device_;
  uint32_t stats_interval_ms_ = 0;
  transport::CongestionConfig baseline_;
  double baseline_rate_hint_ = 0;
  std::optional<ctl::Policy> pending_policy_;  // pushed before attach()
  std::thread thread_;

  // call(): one request at a time; the thread hands over the answer.
  std::mutex call_mutex_;
  std::mutex reply_mutex_;
  std::condition_variable reply_ready_;
  bool awaiting_reply_ = false;
  bool closed_ = false;  // the thread has stopped reading
  std::optional<ctl::Message> reply_;
};

// Applies a daemon policy, over `baseline`, to the engine of a running runtime.
void apply_policy(io::Runtime& runtime, const ctl::Policy& policy, const transport::CongestionConfig& baseline,
                  double baseline_rate_hint);

}  // namespace metaroce::verbs
