// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The control protocol between metaroced and its clients (verbs providers
// and the metaroce CLI). One JSON object per message on a SOCK_SEQPACKET unix
// socket (/run/metaroce/metaroced.sock), so that message boundaries come from
// the kernel and a process that dies, even by SIGKILL, closes its connection:
// the daemon takes everything it leased back when the connection closes.
//
// Every message carries "v" (kVersion) and "type". decode() checks the
// length, the version, the type and every field the type needs (type and
// range) before anyone reads it; an unknown field is ignored so that a newer
// peer can add optional fields without a version bump.
//
//   client -> daemon                         daemon -> client
//   lease  {pid, address, paths?, class?,    lease_ok {home_port, source_ports[],
//           home_port?, block_first?,                  block_first, block_size,
//           device?}                                   policy, stats_interval_ms,
//                                                      security?, busy_poll_us?,
//                                                      progress_threads?, planes?}
//   (security: "integrity" (also when absent), "authenticate" or "encrypt",
//    the cluster's mode; docs/spec.md section 9)
//   (device: the RDMA device the context opened, e.g. mr0; busy_poll_us,
//    progress_threads and planes (netdev names, the device's own first):
//    that device's settings in [devices.NAME], when it has them)
//   (without paths, the daemon's paths_per_connection; home_port: the one
//    the kernel module gave the context; home_port + block_first: what a
//    context held before the daemon restarted; both reserved as they are)
//   peer_ports {home_port, dest, dport?,     peer_ports_ok {dest, source_ports[],
//               paths}                                      spread, cached}
//   (source ports of the lease's block that cover the paths to dest;
//    none when discovery found no paths: hash spread)
//   peer_key {home_port, dest, dport?}       peer_key_ok {dest, dport, key, role}
//   (authenticate/encrypt: the pair key of the lease's endpoint and the
//    peer's, 64 hex digits, and this end's role 0 or 1; docs/spec.md 9.3)
//   report {home_port, device?, counters{},  (none)
//           connections[], busy_poll_us?}
//   status | stats | reload                  status | stats | ok
//   paths  {dest, dport?, source?, refresh?} paths {dest, dport, paths[], ...}
//                                            policy {class, policy}   (pushed)
//                                            error {message}
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "metaroce/wire.h"

namespace metaroce::ctl {

inline constexpr int kVersion = 1;
// Larger messages are refused (and cannot be sent: the receive buffers are
// this size).
inline constexpr size_t kMaxMessageBytes = 128 * 1024;
inline constexpr const char* kDefaultSocket = "/run/metaroce/metaroced.sock";
inline constexpr const char* kSocketEnv = "METAROCE_DAEMON_SOCKET";
// The longest busy-poll window, in microseconds (METAROCE_BUSY_POLL_US and
// metaroced's [devices.NAME] busy_poll_us).
inline constexpr uint32_t kMaxBusyPollUs = 1'000'000;
// The most progress threads per device context (METAROCE_PROGRESS_THREADS
// and metaroced's [devices.NAME] progress_threads).
inline constexpr uint32_t kMaxProgressThreads = 16;
// The most network planes (netdevs) one device spans (metaroced's
// [devices.NAME] planes, the provider's "eth0,eth1" devices).
inline constexpr size_t kMaxPlanes = 8;
// A lease names at most one source port per path of a connection.
inline constexpr uint16_t kMaxPaths = wire::kMaxPaths;

// A connection to the daemon's socket at `path`, or -1 with `error`
// ("PATH: reason").
inline int connect_socket(const std::string& path, std::string& error) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) {
    error = path + ": path too long";
    return -1;
  }
  std::memcpy(a.sun_path, path.c_str(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    error = path + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

enum class Type {
  Lease,
  LeaseOk,
  Report,
  Status,
  Stats,
  Reload,
  Paths,
  PeerPorts,
  PeerPortsOk,
  PeerKey,
  PeerKeyOk,
  Policy,
  Ok,
  Error,
};

inline constexpr std::pair<Type, const char*> kTypeNames[] = {
    {Type::Lease, "lease"},
    {Type::LeaseOk, "lease_ok"},
    {Type::Report, "report"},
    {Type::Status, "status"},
    {Type::Stats, "stats"},
    {Type::Reload, "reload"},
    {Type::Paths, "paths"},
    {Type::PeerPorts, "peer_ports"},
    {Type::PeerPortsOk, "peer_ports_ok"},
    {Type::PeerKey, "peer_key"},
    {Type::PeerKeyOk, "peer_key_ok"},
    {Type::Policy, "policy"},
    {Type::Ok, "ok"},
    {Type::Error, "error"},
};

// The security modes a lease can carry, in the order of wire::Security.
inline constexpr const char* kSecurityModes[] = {"integrity", "authenticate", "encrypt"};
inline constexpr size_t kPairKeyHexDigits = 64;

inline const char* to_string(Type type) {
  for (const auto& [t, name] : kTypeNames)
    if (t == type) return name;
  return "?";
}

// A traffic class's congestion policy. Absent fields leave the provider's own
// setting alone, so a config that names only target_delay changes only that.
struct Policy {
  std::optional<double> ecn_gain;                   // (0, 1]
  std::optional<uint32_t> additive_increase_bytes;  // per RTT; 0 = one MTU
  std::optional<uint64_t> target_delay_ns;          // 0 = base RTT
  std::optional<double> delay_backoff;              // (0, 1)
  std::optional<uint32_t> min_window_bytes;
  std::optional<uint32_t> max_window_bytes;
  std::optional<uint32_t> initial_window_bytes;
  std::optional<double> rate_hint_utilization;  // (0, 1]
  bool operator==(const Policy&) const = default;
};

// Writes the policy's fields into a transport::CongestionConfig-like `cc`
// (a template so that this header needs nothing from provider/).
template <typename CongestionConfig>
void apply_policy(const Policy& p, CongestionConfig& cc) {
  if (p.ecn_gain) cc.ecn_gain = *p.ecn_gain;
  if (p.additive_increase_bytes) cc.additive_increase_bytes = *p.additive_increase_bytes;
  if (p.target_delay_ns) cc.target_queue_delay_ns = *p.target_delay_ns;
  if (p.delay_backoff) cc.delay_backoff = *p.delay_backoff;
  if (p.min_window_bytes) cc.min_window_bytes = *p.min_window_bytes;
  if (p.max_window_bytes) cc.max_window_bytes = *p.max_window_bytes;
  if (p.initial_window_bytes) cc.initial_window_bytes = *p.initial_window_bytes;
}

inline nlohmann::json policy_to_json(const Policy& p) {
  nlohmann::json j = nlohmann::json::object();
  if (p.ecn_gain) j["ecn_gain"] = *p.ecn_gain;
  if (p.additive_increase_bytes) j["additive_increase_bytes"] = *p.additive_increase_bytes;
  if (p.target_delay_ns) j["target_delay_ns"] = *p.target_delay_ns;
  if (p.delay_backoff) j["delay_backoff"] = *p.delay_backoff;
  if (p.min_window_bytes) j["min_window_bytes"] = *p.min_window_bytes;
  if (p.max_window_bytes) j["max_window_bytes"] = *p.max_window_bytes;
  if (p.initial_window_bytes) j["initial_window_bytes"] = *p.initial_window_bytes;
  if (p.rate_hint_utilization) j["rate_hint_utilization"] = *p.rate_hint_utilization;
  return j;
}

namespace detail {

inline bool fail(std::string& error, std::string message) {
  error = std::move(message);
  return false;
}

inline bool get_uint(const nlohmann::json& j, const char* key, uint64_t min, uint64_t max, bool required,
                     std::optional<uint64_t>& out, std::string& error) {
  auto it = j.find(key);
  if (it == j.end()) return !required || fail(error, std::string("missing field '") + key + "'");
  if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0))
    return fail(error, std::string("field '") + key + "' must be a non-negative integer");
  const uint64_t v = it->get<uint64_t>();
  if (v < min || v > max)
    return fail(error, std::string("field '") + key + "' out of range [" + std::to_string(min) + ", " +
                           std::to_string(max) + "]");
  out = v;
  return true;
}

// A string of exactly kPairKeyHexDigits hex digits.
inline bool get_key(const nlohmann::json& j, const char* key, std::string& error) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().size() != kPairKeyHexDigits)
    return fail(error, std::string("field '") + key + "' must be " + std::to_string(kPairKeyHexDigits) + " hex digits");
  for (const char c : it->get_ref<const std::string&>())
    if (!std::isxdigit(static_cast<unsigned char>(c)))
      return fail(error, std::string("field '") + key + "' is not hex");
  return true;
}

inline bool get_security(const nlohmann::json& j, std::string& error) {
  auto it = j.find("security");
  if (it == j.end()) return true;
  if (it->is_string())
    for (const char* mode : kSecurityModes)
      if (it->get_ref<const std::string&>() == mode) return true;
  return fail(error, "field 'security' must be \"integrity\", \"authenticate\" or \"encrypt\"");
}

inline bool get_real(const nlohmann::json& j, const char* key, double min, double max, bool min_open,
                     std::optional<double>& out, std::string& error) {
  auto it = j.find(key);
  if (it == j.end()) return true;
  if (!it->is_number()) return fail(error, std::string("field '") + key + "' must be a number");
  const double v = it->get<double>();
  if (!(v <= max && (min_open ? v > min : v >= min)))
    return fail(error, std::string("field '") + key + "' out of range");
  out = v;
  return true;
}

inline bool get_string(const nlohmann::json& j, const char* key, size_t max_len, bool required, std::string& error) {
  auto it = j.find(key);
  if (it == j.end()) return !required || fail(error, std::string("missing field '") + key + "'");
  if (!it->is_string()) return fail(error, std::string("field '") + key + "' must be a string");
  if (it->get_ref<const std::string&>().size() > max_len)
    return fail(error, std::string("field '") + key + "' too long");
  return true;
}

// An array of `min`..kMaxPaths ports, each in [1, 65535].
inline bool get_ports(const nlohmann::json& j, const char* key, size_t min, std::string& error) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() < min || it->size() > kMaxPaths)
    return fail(error, std::string("field '") + key + "' must be an array of " + std::to_string(min) + ".." +
                           std::to_string(kMaxPaths) + " ports");
  for (const auto& p : *it)
    if (!p.is_number_unsigned() || p.get<uint64_t>() < 1 || p.get<uint64_t>() > 65535)
      return fail(error, std::string("field '") + key + "' holds a bad port");
  return true;
}

// Absent, or an array of 1..kMaxPlanes netdev names (1-15 bytes each).
inline bool get_netdevs(const nlohmann::json& j, const char* key, std::string& error) {
  auto it = j.find(key);
  if (it == j.end()) return true;
  if (!it->is_array() || it->empty() || it->size() > kMaxPlanes)
    return fail(error, std::string("field '") + key + "' must be an array of 1.." + std::to_string(kMaxPlanes) +
                           " netdev names");
  for (const auto& n : *it)
    if (!n.is_string() || n.get_ref<const std::string&>().empty() || n.get_ref<const std::string&>().size() > 15)
      return fail(error, std::string("field '") + key + "' holds a bad netdev name");
  return true;
}

}  // namespace detail

// Reads a policy object; false with `error` on a bad field.
inline bool policy_from_json(const nlohmann::json& j, Policy& p, std::string& error) {
  using namespace detail;
  if (!j.is_object()) return fail(error, "policy must be an object");
  std::optional<uint64_t> u;
  Policy out;
  if (!get_real(j, "ecn_gain", 0, 1, true, out.ecn_gain, error)) return false;
  if (!get_real(j, "delay_backoff", 0, 1, true, out.delay_backoff, error)) return false;
  if (out.delay_backoff && *out.delay_backoff >= 1) return fail(error, "field 'delay_backoff' out of range");
  if (!get_real(j, "rate_hint_utilization", 0, 1, true, out.rate_hint_utilization, error)) return false;
  const auto u32 = [&](const char* key, std::optional<uint32_t>& field) {
    u.reset();
    if (!get_uint(j, key, 0, UINT32_MAX, false, u, error)) return false;
    if (u) field = static_cast<uint32_t>(*u);
    return true;
  };
  if (!u32("additive_increase_bytes", out.additive_increase_bytes) || !u32("min_window_bytes", out.min_window_bytes) ||
      !u32("max_window_bytes", out.max_window_bytes) || !u32("initial_window_bytes", out.initial_window_bytes))
    return false;
  u.reset();
  if (!get_uint(j, "target_delay_ns", 0, 10'000'000'000ull, false, u, error)) return false;
  if (u) out.target_delay_ns = *u;
  if (out.min_window_bytes && out.max_window_bytes && *out.max_window_bytes != 0 &&
      *out.min_window_bytes > *out.max_window_bytes)
    return fail(error, "min_window_bytes exceeds max_window_bytes");
  p = out;
  return true;
}

struct Message {
  Type type = Type::Error;
  nlohmann::json body;  // the whole object, validated for `type`
};

// Checks `body` holds what a message of `type` needs.
inline bool validate(Type type, const nlohmann::json& body, std::string& error) {
  using namespace detail;
  std::optional<uint64_t> u;
  switch (type) {
    case Type::Lease:
      return get_uint(body, "pid", 1, INT32_MAX, true, u, error) && get_string(body, "address", 64, true, error) &&
             get_uint(body, "paths", 1, kMaxPaths, false, u, error) && get_string(body, "class", 64, false, error) &&
             get_uint(body, "home_port", 1, 65535, false, u, error) &&
             get_uint(body, "block_first", 1, 65535, false, u, error) && get_string(body, "device", 64, false, error);
    case Type::LeaseOk: {
      if (!get_uint(body, "home_port", 1, 65535, true, u, error) ||
          !get_uint(body, "stats_interval_ms", 0, 3'600'000, true, u, error) ||
          !get_uint(body, "block_first", 1, 65535, true, u, error) ||
          !get_uint(body, "block_size", 1, 65535, true, u, error) || !get_ports(body, "source_ports", 1, error) ||
          !get_security(body, error) || !get_uint(body, "busy_poll_us", 0, kMaxBusyPollUs, false, u, error) ||
          !get_uint(body, "progress_threads", 1, kMaxProgressThreads, false, u, error) ||
          !get_netdevs(body, "planes", error))
        return false;
      Policy policy;
      auto pit = body.find("policy");
      return pit == body.end() ? fail(error, "missing field 'policy'") : policy_from_json(*pit, policy, error);
    }
    case Type::Report: {
      if (!get_uint(body, "home_port", 1, 65535, true, u, error) || !get_string(body, "device", 64, false, error) ||
          !get_uint(body, "busy_poll_us", 0, kMaxBusyPollUs, false, u, error))
        return false;
      auto c = body.find("counters");
      if (c == body.end() || !c->is_object()) return fail(error, "field 'counters' must be an object");
      for (const auto& [k, v] : c->items())
        if (!v.is_number()) return fail(error, "counter '" + k + "' is not a number");
      auto conns = body.find("connections");
      if (conns == body.end() || !conns->is_array()) return fail(error, "field 'connections' must be an array");
      for (const auto& conn : *conns) {
        if (!conn.is_object()) return fail(error, "a connection must be an object");
        if (!get_string(conn, "peer", 64, true, error)) return false;
        auto paths = conn.find("paths");
        if (paths == conn.end() || !paths->is_array() || paths->size() > kMaxPaths)
          return fail(error, "a connection's 'paths' must be an array of at most " + std::to_string(kMaxPaths));
        for (const auto& p : *paths) {
          if (!p.is_object()) return fail(error, "a path must be an object");
          for (const auto& [k, v] : p.items())
            if (!v.is_number() && !v.is_string()) return fail(error, "path field '" + k + "' has a bad type");
        }
      }
      return true;
    }
    case Type::Paths:
      if (auto r = body.find("refresh"); r != body.end() && !r->is_boolean())
        return fail(error, "field 'refresh' must be true or false");
      return get_string(body, "dest", 64, true, error) && get_uint(body, "dport", 1, 65535, false, u, error) &&
             get_string(body, "source", 64, false, error);
    case Type::PeerPorts:
      return get_uint(body, "home_port", 1, 65535, true, u, error) && get_string(body, "dest", 64, true, error) &&
             get_uint(body, "dport", 1, 65535, false, u, error) &&
             get_uint(body, "paths", 1, kMaxPaths, true, u, error);
    case Type::PeerKey:
      return get_uint(body, "home_port", 1, 65535, true, u, error) && get_string(body, "dest", 64, true, error) &&
             get_uint(body, "dport", 1, 65535, false, u, error);
    case Type::PeerKeyOk:
      return get_string(body, "dest", 64, true, error) && get_uint(body, "dport", 1, 65535, true, u, error) &&
             get_key(body, "key", error) && get_uint(body, "role", 0, 1, true, u, error);
    case Type::PeerPortsOk:
      return get_string(body, "dest", 64, true, error) && get_string(body, "spread", 64, true, error) &&
             get_ports(body, "source_ports", 0, error);
    case Type::Policy: {
      if (!get_string(body, "class", 64, true, error)) return false;
      Policy policy;
      auto pit = body.find("policy");
      return pit == body.end() ? fail(error, "missing field 'policy'") : policy_from_json(*pit, policy, error);
    }
    case Type::Error: return get_string(body, "message", 4096, true, error);
    case Type::Status:
    case Type::Stats:
    case Type::Reload:
    case Type::Ok: return true;
  }
  return fail(error, "unknown type");
}

// Parses and validates one received message. Never throws.
inline std::optional<Message> decode(std::span<const uint8_t> bytes, std::string& error) {
  if (bytes.empty()) return detail::fail(error, "empty message"), std::nullopt;
  if (bytes.size() > kMaxMessageBytes) return detail::fail(error, "message too long"), std::nullopt;
  nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded()) return detail::fail(error, "not valid JSON"), std::nullopt;
  if (!j.is_object()) return detail::fail(error, "message is not a JSON object"), std::nullopt;
  auto v = j.find("v");
  if (v == j.end() || !v->is_number_integer()) return detail::fail(error, "missing version 'v'"), std::nullopt;
  if (v->get<int64_t>() != kVersion)
    return detail::fail(error, "unsupported protocol version " + v->dump() + " (this side speaks " +
                                   std::to_string(kVersion) + ")"),
           std::nullopt;
  auto t = j.find("type");
  if (t == j.end() || !t->is_string()) return detail::fail(error, "missing 'type'"), std::nullopt;
  std::optional<Type> type;
  for (const auto& [tt, name] : kTypeNames)
    if (t->get_ref<const std::string&>() == name) type = tt;
  if (!type) return detail::fail(error, "unknown message type '" + t->get<std::string>() + "'"), std::nullopt;
  std::string why;
  if (!validate(*type, j, why)) return detail::fail(error, std::string(to_string(*type)) + ": " + why), std::nullopt;
  return Message{*type, std::move(j)};
}

// A message of `type` with the version set; add fields, then encode().
inline nlohmann::json make(Type type) {
  nlohmann::json j = nlohmann::json::object();
  j["v"] = kVersion;
  j["type"] = to_string(type);
  return j;
}

inline std::string encode(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

inline nlohmann::json make_error(std::string_view message) {
  nlohmann::json j = make(Type::Error);
  j["message"] = std::string(message);
  return j;
}

}  // namespace metaroce::ctl
