// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "stats_store.h"

namespace metaroce::daemon {

void StatsStore::update(uint64_t client, pid_t pid, uid_t uid, nlohmann::json report,
                        std::chrono::steady_clock::time_point now) {
  reports_[client] = Entry{pid, uid, std::move(report), now};
}

nlohmann::json StatsStore::to_json(std::chrono::steady_clock::time_point now) const {
  nlohmann::json out;
  out["contexts"] = nlohmann::json::array();
  std::map<std::string, double> totals;
  for (const auto& [id, e] : reports_) {
    nlohmann::json c;
    c["pid"] = e.pid;
    c["uid"] = e.uid;
    c["age_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.when).count();
    c["home_port"] = e.report.value("home_port", 0);
    c["device"] = e.report.value("device", "");
    c["busy_poll_us"] = e.report.value("busy_poll_us", 0);
    c["counters"] = e.report.value("counters", nlohmann::json::object());
    c["connections"] = e.report.value("connections", nlohmann::json::array());
    for (const auto& [k, v] : c["counters"].items())
      if (v.is_number()) totals[k] += v.get<double>();
    out["contexts"].push_back(std::move(c));
  }
  nlohmann::json t = nlohmann::json::object();
  for (const auto& [k, v] : totals) t[k] = static_cast<uint64_t>(v);
  out["totals"] = std::move(t);
  return out;
}

}  // namespace metaroce::daemon
