// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The latest counters each provider context reported, kept until its
// connection closes, and the totals the CLI prints.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>

#include <nlohmann/json.hpp>

namespace metaroce::daemon {

class StatsStore {
 public:
  void update(uint64_t client, pid_t pid, uid_t uid, nlohmann::json report, std::chrono::steady_clock::time_point now);
  void forget(uint64_t client) { reports_.erase(client); }
  size_t size() const { return reports_.size(); }
  // {"contexts": [{pid, uid, age_ms, home_port, device, counters, connections}], "totals": {...}}
  nlohmann::json to_json(std::chrono::steady_clock::time_point now) const;

 private:
  struct Entry {
    pid_t pid = 0;
    uid_t uid = 0;
    nlohmann::json report;
    std::chrono::steady_clock::time_point when;
  };
  std::map<uint64_t, Entry> reports_;
};

}  // namespace metaroce::daemon
