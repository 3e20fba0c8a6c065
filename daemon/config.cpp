// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "config.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <toml++/toml.h>

namespace metaroce::daemon {
namespace {

class Reader {
 public:
  explicit Reader(std::vector<ConfigError>& errors) : errors_(errors) {}

  void error(const toml::node* node, std::string message) {
    errors_.push_back({node ? static_cast<uint32_t>(node->source().begin.line) : 0, std::move(message)});
  }

  // Reports every key of `table` not in `known`.
  void check_keys(const toml::table& table, std::string_view where, const std::set<std::string_view>& known) {
    for (const auto& [key, node] : table) {
      if (!known.count(key.str())) {
        std::string msg = "unknown key '" + std::string(key.str()) + "'";
        if (!where.empty()) msg += " in [" + std::string(where) + "]";
        errors_.push_back({static_cast<uint32_t>(key.source().begin.line), msg});
      }
    }
  }

  const toml::table* table(const toml::table& parent, std::string_view key) {
    const toml::node* node = parent.get(key);
    if (!node) return nullptr;
    if (!node->is_table()) {
      error(node, "'" + std::string(key) + "' must be a table");
      return nullptr;
    }
    return node->as_table();
  }

  template <typename T>
  void integer(const toml::table& t, std::string_view key, int64_t min, int64_t max, T& out) {
    const toml::node* node = t.get(key);
    if (!node) return;
    if (!node->is_integer()) return error(node, "'" + std::string(key) + "' must be an integer");
    const int64_t v = node->as_integer()->get();
    if (v < min || v > max)
      return error(node, "'" + std::string(key) + "' = " + std::to_string(v) + " is out of range [" +
                             std::to_string(min) + ", " + std::to_string(max) + "]");
    out = static_cast<T>(v);
  }

  template <typename T>
  void integer(const toml::table& t, std::string_view key, int64_t min, int64_t max, std::optional<T>& out) {
    T v{};
    const size_t before = errors_.size();
    if (!t.get(key)) return;
    integer(t, key, min, max, v);
    if (errors_.size() == before) out = v;
  }

  // A number in (min, max] (or [min, max] when !min_open); integers accepted.
  void real(const toml::table& t, std::string_view key, double min, double max, bool min_open, bool max_open,
            std::optional<double>& out) {
    const toml::node* node = t.get(key);
    if (!node) return;
    double v = 0;
    if (node->is_floating_point()) v = node->as_floating_point()->get();
    else if (node->is_integer()) v = static_cast<double>(node->as_integer()->get());
    else return error(node, "'" + std::string(key) + "' must be a number");
    const bool ok = (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
    if (!ok) {
      std::ostringstream range;
      range << (min_open ? "(" : "[") << min << ", " << max << (max_open ? ")" : "]");
      return error(node, "'" + std::string(key) + "' = " + std::to_string(v) + " is out of range " + range.str());
    }
    out = v;
  }

  void boolean(const toml::table& t, std::string_view key, bool& out) {
    const toml::node* node = t.get(key);
    if (!node) return;
    if (!node->is_boolean()) return error(node, "'" + std::string(key) + "' must be true or false");
    out = node->as_boolean()->get();
  }

  void string(const toml::table& t, std::string_view key, std::string& out) {
    const toml::node* node = t.get(key);
    if (!node) return;
    if (!node->is_string()) return error(node, "'" + std::string(key) + "' must be a string");
    out = node->as_string()->get();
  }

 private:
  std::vector<ConfigError>& errors_;
};

bool valid_netdev_name(const std::string& name) {
  if (name.empty() || name.size() > 15 || name == "." || name == "..") return false;
  for (char c : name)
    if (c == '/' || c == ':' || c <= ' ' || c == 0x7f) return false;
  return true;
}

// `t`'s "planes": an array of netdev names, appended to `out`.
void read_netdevs(Reader& r, const toml::table& t, std::vector<std::string>& out) {
  const toml::node* planes = t.get("planes");
  if (!planes) return;
  if (!planes->is_array()) {
    r.error(planes, "'planes' must be an array of netdev names");
    return;
  }
  for (const toml::node& p : *planes->as_array()) {
    if (!p.is_string() || !valid_netdev_name(p.as_string()->get())) {
      r.error(&p, "'planes' entries must be netdev names (1-15 bytes, no '/', ':' or spaces)");
      continue;
    }
    out.push_back(p.as_string()->get());
  }
}

void read_policy(Reader& r, const toml::table& t, std::string_view where, ctl::Policy& p) {
  r.check_keys(t, where,
               {"ecn_gain", "additive_increase_bytes", "target_delay_us", "delay_backoff", "min_window_bytes",
                "max_window_bytes", "initial_window_bytes", "rate_hint_utilization"});
  r.real(t, "ecn_gain", 0, 1, true, false, p.ecn_gain);
  r.real(t, "delay_backoff", 0, 1, true, true, p.delay_backoff);
  r.real(t, "rate_hint_utilization", 0, 1, true, false, p.rate_hint_utilization);
  r.integer(t, "additive_increase_bytes", 0, 1 << 30, p.additive_increase_bytes);
  r.integer(t, "min_window_bytes", 0, 1 << 30, p.min_window_bytes);
  r.integer(t, "max_window_bytes", 0, 1 << 30, p.max_window_bytes);
  r.integer(t, "initial_window_bytes", 0, 1 << 30, p.initial_window_bytes);
  std::optional<uint64_t> target_us;
  r.integer(t, "target_delay_us", 0, 10'000'000, target_us);
  if (target_us) p.target_delay_ns = *target_us * 1000;
  if (p.min_window_bytes && p.max_window_bytes && *p.max_window_bytes != 0 && *p.min_window_bytes > *p.max_window_bytes)
    r.error(t.get("min_window_bytes"), "min_window_bytes exceeds max_window_bytes in [" + std::string(where) + "]");
}

// Calls `read(NAME, table)` for each [section.NAME] of `root`; a NAME that
// is not a table, is empty, longer than `max_name` bytes or has a '/' is an
// error. `what` says what a NAME stands for.
template <typename Read>
void read_named_tables(Reader& r, const toml::table& root, const std::string& section, const std::string& what,
                       size_t max_name, Read read) {
  const toml::table* t = r.table(root, section);
  if (!t) return;
  for (const auto& [key, node] : *t) {
    const std::string name(key.str());
    if (!node.is_table()) {
      r.error(&node, "[" + section + "." + name + "] must be a table (" + what + ")");
    } else if (name.empty() || name.size() > max_name || name.find('/') != std::string::npos) {
      r.error(&node,
              "[" + section + "." + name + "]: the name must be 1-" + std::to_string(max_name) + " bytes without '/'");
    } else {
      read(name, *node.as_table());
    }
  }
}

void read(Reader& r, const toml::table& root, Config& c) {
  r.check_keys(root, "", {"daemon", "ports", "discovery", "security", "devices", "congestion"});
  if (const toml::table* t = r.table(root, "daemon")) {
    r.check_keys(*t, "daemon", {"log_level", "socket", "stats_interval_ms", "planes"});
    r.string(*t, "log_level", c.log_level);
    static const std::set<std::string> levels = {"trace", "debug", "info", "warn", "error", "critical", "off"};
    if (t->get("log_level") && !levels.count(c.log_level))
      r.error(t->get("log_level"),
              "log_level '" + c.log_level + "' is not one of trace, debug, info, warn, error, critical, off");
    r.string(*t, "socket", c.socket_path);
    if (t->get("socket") && (c.socket_path.empty() || c.socket_path[0] != '/' || c.socket_path.size() > 107))
      r.error(t->get("socket"), "socket must be an absolute path of at most 107 bytes");
    r.integer(*t, "stats_interval_ms", 0, 3'600'000, c.stats_interval_ms);
    read_netdevs(r, *t, c.planes);
  }
  if (const toml::table* t = r.table(root, "ports")) {
    r.check_keys(*t, "ports",
                 {"home_first", "home_count", "source_first", "source_count", "block_size", "paths_per_connection"});
    PortsConfig& p = c.ports;
    r.integer(*t, "home_first", 1, 65535, p.home_first);
    r.integer(*t, "home_count", 1, 4096, p.home_count);
    r.integer(*t, "source_first", 1, 65535, p.source_first);
    r.integer(*t, "source_count", 1, 65535, p.source_count);
    r.integer(*t, "block_size", 1, ctl::kMaxPaths * 16, p.block_size);
    r.integer(*t, "paths_per_connection", 1, ctl::kMaxPaths, p.paths_per_connection);
    const uint32_t home_end = uint32_t{p.home_first} + p.home_count;
    const uint32_t source_end = uint32_t{p.source_first} + p.source_count;
    if (home_end > 65536) r.error(t->get("home_count"), "home ports run past 65535");
    if (source_end > 65536) r.error(t->get("source_count"), "source ports run past 65535");
    if (p.home_first < source_end && p.source_first < home_end)
      r.error(t->get("source_first") ? t->get("source_first") : t, "the source-port pool overlaps the home ports");
    if (p.block_size > p.source_count) r.error(t->get("block_size"), "block_size exceeds source_count");
    if (p.paths_per_connection > p.block_size)
      r.error(t->get("paths_per_connection"), "paths_per_connection exceeds block_size");
  }
  if (const toml::table* t = r.table(root, "discovery")) {
    r.check_keys(*t, "discovery", {"enabled", "interval_s", "expiry_s", "probe_ports", "max_ttl", "timeout_ms"});
    DiscoveryConfig& d = c.discovery;
    r.boolean(*t, "enabled", d.enabled);
    r.integer(*t, "interval_s", 1, 86400, d.interval_s);
    r.integer(*t, "expiry_s", 1, 86400 * 7, d.expiry_s);
    r.integer(*t, "probe_ports", 1, 1024, d.probe_ports);
    r.integer(*t, "max_ttl", 1, 64, d.max_ttl);
    r.integer(*t, "timeout_ms", 10, 10'000, d.timeout_ms);
  }
  c.classes["default"] = ctl::Policy{};
  if (const toml::table* t = r.table(root, "security")) {
    r.check_keys(*t, "security", {"mode", "secret_file"});
    r.string(*t, "mode", c.security.mode);
    if (t->get("mode") && std::find(std::begin(ctl::kSecurityModes), std::end(ctl::kSecurityModes), c.security.mode) ==
                              std::end(ctl::kSecurityModes))
      r.error(t->get("mode"), "mode '" + c.security.mode + "' is not one of integrity, authenticate, encrypt");
    r.string(*t, "secret_file", c.security.secret_file);
    if (t->get("secret_file") && (c.security.secret_file.empty() || c.security.secret_file[0] != '/'))
      r.error(t->get("secret_file"), "secret_file must be an absolute path");
  }
  read_named_tables(r, root, "devices", "an RDMA device, e.g. [devices.mr0]", 63,
                    [&](const std::string& name, const toml::table& d) {
                      r.check_keys(d, "devices." + name, {"busy_poll_us", "progress_threads", "planes"});
                      r.integer(d, "busy_poll_us", 0, ctl::kMaxBusyPollUs, c.devices[name].busy_poll_us);
                      r.integer(d, "progress_threads", 1, ctl::kMaxProgressThreads, c.devices[name].progress_threads);
                      std::vector<std::string>& planes = c.devices[name].planes;
                      read_netdevs(r, d, planes);
                      if (planes.size() > ctl::kMaxPlanes)
                        r.error(d.get("planes"), "a device has at most " + std::to_string(ctl::kMaxPlanes) + " planes");
                      for (size_t i = 0; i < planes.size(); ++i)
                        if (std::find(planes.begin(), planes.begin() + i, planes[i]) != planes.begin() + i)
                          r.error(d.get("planes"), "'planes' names " + planes[i] + " twice");
                    });
  read_named_tables(r, root, "congestion", "a traffic class", 64, [&](const std::string& name, const toml::table& t) {
    read_policy(r, t, "congestion." + name, c.classes[name]);
  });
}

}  // namespace

ConfigResult parse_config(std::string_view text, std::string_view source) {
  ConfigResult result;
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    result.errors.push_back({static_cast<uint32_t>(e.source().begin.line), std::string(e.description())});
    return result;
  }
  Reader reader(result.errors);
  Config config;
  read(reader, root, config);
  std::stable_sort(result.errors.begin(), result.errors.end(),
                   [](const ConfigError& a, const ConfigError& b) { return a.line < b.line; });
  if (result.errors.empty()) result.config = std::move(config);
  return result;
}

ConfigResult load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ConfigResult r;
    r.errors.push_back({0, "cannot read the file"});
    return r;
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_config(text, path);
}

std::string format_errors(const ConfigResult& result, std::string_view source) {
  std::string out;
  for (const ConfigError& e : result.errors) {
    out += std::string(source);
    if (e.line) out += ":" + std::to_string(e.line);
    out += ": error: " + e.message + "\n";
  }
  return out;
}

}  // namespace metaroce::daemon
