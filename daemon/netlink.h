// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Links, addresses and routes (multipath included) of the daemon's network
// namespace, followed live through libnl's cache manager. A change calls the
// listener with what it affects, so that cached path discoveries to the
// destinations behind a changed route (or all of them, for a link or address
// change) are probed again.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace metaroce::daemon {

struct NetChange {
  enum class Kind { Link, Address, Route } kind = Kind::Link;
  std::string route_prefix;  // for a route: "a.b.c.d/len" ("0.0.0.0/0" for default)
  std::string description;   // for the log
};

class Netlink {
 public:
  // Null with `error` when netlink cannot be opened.
  static std::unique_ptr<Netlink> open(std::function<void(const NetChange&)> listener, std::string& error);
  virtual ~Netlink() = default;
  virtual int fd() const = 0;
  // Call when fd() is readable: reads the updates and calls the listener.
  virtual void on_readable() = 0;
  // Links (optionally only `planes`), their state and IPv4 addresses, and the
  // IPv4 routes with their nexthops.
  virtual nlohmann::json snapshot(const std::vector<std::string>& planes) const = 0;
};

// True when the IPv4 literal `address` lies in `prefix` ("a.b.c.d/len").
bool in_prefix(const std::string& address, const std::string& prefix);

}  // namespace metaroce::daemon
