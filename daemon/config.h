// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// metaroced's configuration (/etc/metaroce/metaroced.toml). Parsing is strict:
// an unknown key, a wrong type or a value out of range is an error reported
// with its line, so that a typo never silently falls back to a default.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/ctl.h"

namespace metaroce::daemon {

struct PortsConfig {
  uint16_t home_first = wire::kHomePortBase;  // provider home ports; QP numbers encode (home - base)
  uint16_t home_count = wire::kHomePortCount;
  uint16_t source_first = 20000;  // source-port pool, outside the kernel's ephemeral range
  uint16_t source_count = 12288;
  uint16_t block_size = 64;  // ports per lease; a context uses `paths` of them
  uint16_t paths_per_connection = 4;
};

struct DiscoveryConfig {
  bool enabled = true;
  uint32_t interval_s = 60;   // re-probe a cached destination this often while it is used
  uint32_t expiry_s = 300;    // forget a destination nobody asked for in this long
  uint32_t probe_ports = 64;  // source ports probed per destination
  uint32_t max_ttl = 8;
  uint32_t timeout_ms = 300;  // wait this long for the last time-exceeded answer
};

// docs/spec.md section 9: how every provider protects its datagrams.
struct SecurityConfig {
  std::string mode = "integrity";  // one of ctl::kSecurityModes
  // Authenticate and encrypt: the cluster secret (hex), owned by the daemon's
  // user, mode 0600 or stricter (cluster_secret.h).
  std::string secret_file = "/etc/metaroce/cluster.key";
};

// [devices.NAME]: settings for the contexts that open RDMA device NAME.
struct DeviceConfig {
  // The provider's progress thread polls without sleeping this long after
  // its last work (METAROCE_BUSY_POLL_US, which overrides it).
  std::optional<uint32_t> busy_poll_us;
  // Progress threads per context of this device, 1..16
  // (METAROCE_PROGRESS_THREADS, which overrides it). Unset: the provider's
  // default.
  std::optional<uint32_t> progress_threads;
  // The device's network planes, one netdev each (docs/verbs.md, "Planes"):
  // the first must be the device's own netdev. Empty: the netdevs the device
  // was given (one for a kernel device).
  std::vector<std::string> planes;
};

struct Config {
  std::string log_level = "info";
  std::string socket_path = "/run/metaroce/metaroced.sock";
  uint32_t stats_interval_ms = 1000;  // providers push counters this often
  std::vector<std::string> planes;    // netdevs; empty = every non-loopback link
  PortsConfig ports;
  DiscoveryConfig discovery;
  SecurityConfig security;
  std::map<std::string, DeviceConfig> devices;  // by RDMA device name
  // Traffic class name -> policy; "default" always exists.
  std::map<std::string, ctl::Policy> classes;
};

struct ConfigError {
  uint32_t line = 0;  // 0 when the error has no position (e.g. unreadable file)
  std::string message;
};

struct ConfigResult {
  std::optional<Config> config;  // set when there are no errors
  std::vector<ConfigError> errors;
};

// Parses TOML text; `source` names it in messages.
ConfigResult parse_config(std::string_view text, std::string_view source = "config");
ConfigResult load_config(const std::string& path);

// "FILE:LINE: message" lines.
std::string format_errors(const ConfigResult& result, std::string_view source);

}  // namespace metaroce::daemon
