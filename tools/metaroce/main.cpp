// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroce: the command line to metaroced. Each command but `counters` is one
// request on the control socket; the answer is printed as a table, or as the
// daemon's JSON with --json.
#include <sys/socket.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "counters.h"
#include "metaroce/ctl.h"
#include "runtime_stats.h"

namespace {

using nlohmann::json;
namespace ctl = metaroce::ctl;

// Path discovery waits for routers; everything else answers at once.
constexpr int kReplyTimeoutMs = 15000;

std::optional<json> request(const std::string& path, const json& req, std::string& error) {
  const int fd = ctl::connect_socket(path, error);
  if (fd < 0) {
    error = "cannot reach metaroced at " + error;
    return std::nullopt;
  }
  const std::string text = ctl::encode(req);
  std::vector<uint8_t> buf(ctl::kMaxMessageBytes);
  pollfd p{fd, POLLIN, 0};
  ssize_t n = -1;
  if (::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size()) &&
      ::poll(&p, 1, kReplyTimeoutMs) == 1)
    n = ::recv(fd, buf.data(), buf.size(), 0);
  const int saved = errno;
  ::close(fd);
  if (n <= 0) {
    error =
        n == 0 ? "metaroced closed the connection" : std::string("no answer from metaroced: ") + std::strerror(saved);
    return std::nullopt;
  }
  std::optional<ctl::Message> m = ctl::decode(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)), error);
  if (!m) {
    error = "bad answer from metaroced: " + error;
    return std::nullopt;
  }
  if (m->type == ctl::Type::Error) {
    error = m->body["message"].get<std::string>();
    return std::nullopt;
  }
  return m->body;
}

// Prints rows as left-aligned columns.
void table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string out;
    for (size_t i = 0; i < r.size(); ++i) {
      out += r[i];
      if (i + 1 < r.size()) out += std::string(width[i] - r[i].size() + 2, ' ');
    }
    std::puts(out.c_str());
  };
  line(header);
  for (const auto& r : rows) line(r);
}

std::string str(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", v.get<double>());
    return buf;
  }
  if (v.is_null()) return "-";
  return v.dump();
}

// Nanoseconds as microseconds.
std::string us(const json& ns) { return ns.is_number() ? str(ns.get<double>() / 1000) : "-"; }

void print_status(const json& s) {
  std::printf("metaroced pid %s, up %.0f s, socket %s, config %s\n", str(s["pid"]).c_str(), s["uptime_s"].get<double>(),
              str(s["socket"]).c_str(),
              s["config"].get<std::string>().empty() ? "(defaults)" : str(s["config"]).c_str());
  std::printf("clients %s, free home ports %s, free source-port blocks %s (of %s ports), cached path tables %s\n",
              str(s["clients"]).c_str(), str(s["free_home_ports"]).c_str(), str(s["free_blocks"]).c_str(),
              str(s["block_size"]).c_str(), str(s["discovery_cache"]).c_str());
  std::puts("");
  std::vector<std::vector<std::string>> rows;
  for (const auto& l : s["leases"]) {
    const int first = l["block_first"].get<int>();
    rows.push_back({str(l["pid"]), str(l["uid"]), str(l["class"]), str(l["home_port"]),
                    std::to_string(first) + "-" + std::to_string(first + l["block_size"].get<int>() - 1)});
  }
  table({"PID", "UID", "CLASS", "HOME", "SOURCE PORTS"}, rows);
  if (s.contains("net")) {
    std::puts("");
    rows.clear();
    for (const auto& l : s["net"]["links"]) {
      std::string addrs;
      for (const auto& a : l["addresses"]) addrs += (addrs.empty() ? "" : ",") + a.get<std::string>();
      rows.push_back({str(l["name"]), l["up"].get<bool>() ? "up" : "down", l["carrier"].get<bool>() ? "yes" : "no",
                      str(l["mtu"]), addrs.empty() ? "-" : addrs});
    }
    table({"LINK", "STATE", "CARRIER", "MTU", "ADDRESSES"}, rows);
  }
}

void print_stats(const json& s) {
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : s["contexts"]) {
    const json& k = c["counters"];
    rows.push_back({str(c["pid"]), str(c["device"]), str(c["home_port"]), str(k.value("tx_data_packets", json())),
                    str(k.value("tx_data_bytes", json())), str(k.value("tx_retransmits", json())),
                    str(k.value("rx_data_packets", json())), str(k.value("rx_ce_marked", json())), str(c["age_ms"])});
  }
  table({"PID", "DEVICE", "HOME", "TX PKTS", "TX BYTES", "RETX", "RX PKTS", "RX CE", "AGE MS"}, rows);
  std::puts("");
  rows.clear();
  for (const auto& c : s["contexts"])
    for (const auto& conn : c["connections"])
      for (const auto& p : conn["paths"])
        rows.push_back({str(c["pid"]), str(conn["peer"]), str(p["path"]), str(p["source_port"]), str(p["health"]),
                        str(p["packets_sent"]), str(p["bytes_sent"]), str(p["retransmits"]), str(p["ecn_marks"]),
                        us(p["srtt_ns"]), str(p["window_bytes"])});
  table({"PID", "PEER", "PATH", "SPORT", "HEALTH", "PKTS", "BYTES", "RETX", "ECN", "SRTT US", "WINDOW"}, rows);
}

// The keys of a context's counters in `stats` (and of METAROCE_STATS).
void print_counters(bool as_json) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::vector<std::vector<std::string>> rows;
  auto add = [&](const auto& list) {
    for (const auto& c : list) {
      out.push_back({{"name", c.name}, {"unit", c.unit}, {"meaning", c.meaning}});
      rows.push_back({c.name, c.unit, c.meaning});
    }
  };
  add(metaroce::transport::kEndpointCounterInfo);
  add(metaroce::io::kRuntimeCounterInfo);
  if (as_json) std::puts(out.dump(2).c_str());
  else table({"COUNTER", "UNIT", "MEANING"}, rows);
}

void print_paths(const json& d) {
  std::printf("%s:%s from %s: %zu path(s)%s in %.1f ms (%s probes, %s answers%s)\n", str(d["dest"]).c_str(),
              str(d["dport"]).c_str(), d["source"].get<std::string>().empty() ? "(any)" : str(d["source"]).c_str(),
              d["paths"].size(), d["fallback"].get<bool>() ? " [no router answered: hash spread]" : "",
              d["elapsed_ms"].get<double>(), str(d["probes_sent"]).c_str(), str(d["answers"]).c_str(),
              d.value("cached", false) ? ", cached" : "");
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : d["paths"]) {
    std::string hops, ports;
    for (const auto& h : p["hops"])
      hops += (hops.empty() ? "" : " > ") + (h.get<std::string>().empty() ? "*" : h.get<std::string>());
    for (const auto& s : p["source_ports"]) ports += (ports.empty() ? "" : ",") + str(s);
    rows.push_back({str(p["path"]), hops, std::to_string(p["source_ports"].size()), ports});
  }
  table({"PATH", "HOPS", "PORTS", "SOURCE PORTS"}, rows);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"metaroce: query and control metaroced"};
  app.require_subcommand(1);
  const char* env = std::getenv(ctl::kSocketEnv);
  std::string socket = env && *env ? env : ctl::kDefaultSocket;
  bool as_json = false;
  app.add_option("--socket", socket, "metaroced's control socket (env METAROCE_DAEMON_SOCKET)");
  app.add_flag("--json", as_json, "print the daemon's JSON answer");

  auto* status = app.add_subcommand("status", "leases, links and the daemon's state");
  auto* stats = app.add_subcommand("stats", "per-context, per-connection and per-path counters");
  auto* counters = app.add_subcommand("counters", "what each counter counts, in what unit (needs no daemon)");
  counters->add_flag("--json", as_json, "print the list as JSON");
  auto* paths = app.add_subcommand("paths", "discover the ECMP paths to a destination");
  std::string dest, source;
  uint16_t dport = 0;
  bool refresh = false;
  paths->add_option("DEST", dest, "destination IPv4 address")->required()->check(CLI::ValidIPV4);
  paths->add_option("--dport", dport, "destination (home) port; default the first home port")
      ->check(CLI::Range(1, 65535));
  paths->add_option("--from", source, "local address to probe from")->check(CLI::ValidIPV4);
  paths->add_flag("--refresh", refresh, "probe again even if a cached result is fresh");
  auto* config = app.add_subcommand("config", "configuration");
  config->require_subcommand(1);
  auto* reload = config->add_subcommand("reload", "re-read the config file and push policies to providers");
  for (CLI::App* sub : {status, stats, paths, config, reload}) {
    sub->add_option("--socket", socket, "metaroced's control socket");
    sub->add_flag("--json", as_json, "print the daemon's JSON answer");
  }
  CLI11_PARSE(app, argc, argv);
  if (counters->parsed()) {
    print_counters(as_json);
    return 0;
  }

  json req;
  if (status->parsed()) req = ctl::make(ctl::Type::Status);
  else if (stats->parsed()) req = ctl::make(ctl::Type::Stats);
  else if (reload->parsed()) req = ctl::make(ctl::Type::Reload);
  else {
    req = ctl::make(ctl::Type::Paths);
    req["dest"] = dest;
    if (dport) req["dport"] = dport;
    if (!source.empty()) req["source"] = source;
    if (refresh) req["refresh"] = true;
  }
  std::string error;
  const std::optional<json> answer = request(socket, req, error);
  if (!answer) {
    std::fprintf(stderr, "metaroce: %s\n", error.c_str());
    return 1;
  }
  if (as_json) {
    json out = *answer;
    out.erase("v");
    out.erase("type");
    if (stats->parsed()) out = out["stats"];
    std::puts(out.dump(2).c_str());
    return 0;
  }
  if (status->parsed()) print_status(*answer);
  else if (stats->parsed()) print_stats((*answer)["stats"]);
  else if (paths->parsed()) print_paths(*answer);
  else std::puts("config reloaded");
  return 0;
}
