// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Path discovery off the daemon's poll thread. A probe waits for routers'
// answers for up to [discovery] timeout_ms; run on the poll thread it would
// stall every other client for that long. The server submits probes here;
// one worker thread runs them in order with the injected Prober (discover()
// in production, a scripted one in tests) and posts each result back through
// an eventfd that the server's poll loop watches. Only the worker thread
// runs a Prober; submit() and take() are the poll thread's.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config.h"
#include "discovery.h"

namespace metaroce::daemon {

// discover()'s arguments.
struct ProbeRequest {
  std::string dest;
  uint16_t dport = 0;
  std::string source;
  std::vector<uint16_t> source_ports;
  DiscoveryConfig config;
};

// Fills `out` (true) or `error` (false), as discover() does.
using Prober = std::function<bool(const ProbeRequest&, Discovery& out, std::string& error)>;
// The one that sends real probes (discover()).
Prober network_prober();

struct ProbeResult {
  uint64_t ticket = 0;
  bool ok = false;
  Discovery discovery;
  std::string error;
};

class ProbeWorker {
 public:
  explicit ProbeWorker(Prober prober);
  // Waits for the probe in progress; the queued ones are dropped.
  ~ProbeWorker();
  ProbeWorker(const ProbeWorker&) = delete;
  ProbeWorker& operator=(const ProbeWorker&) = delete;

  // Readable while results wait for take(); -1 if the eventfd could not be made.
  int fd() const { return event_fd_; }
  // Queues a probe; its result will carry the returned ticket.
  uint64_t submit(ProbeRequest request);
  // The results finished so far, in the order they finished.
  std::vector<ProbeResult> take();

 private:
  void run();

  const Prober prober_;
  const int event_fd_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<std::pair<uint64_t, ProbeRequest>> queue_;
  std::vector<ProbeResult> done_;
  uint64_t next_ticket_ = 1;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is built
};

}  // namespace metaroce::daemon
