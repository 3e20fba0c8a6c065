// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Watches the netdevs of a device's planes (docs/spec.md 8.15) over
// rtnetlink and reports each one going down or coming back up, so that the
// engine drains a plane at once instead of waiting for its paths to time out.
// A plane is up while its netdev is administratively up and has carrier
// (IFF_UP and IFF_RUNNING). One thread, asleep until the kernel reports a
// link change.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace metaroce::io {

class PlaneMonitor {
 public:
  // on_change(plane, up) runs on the monitor's thread, first for every plane
  // that is down when it starts, then for every change. `ifindexes[k]` is
  // plane k's netdev (0: not a netdev, never reported). Null with `error` when
  // rtnetlink cannot be opened.
  static std::unique_ptr<PlaneMonitor> start(std::vector<uint32_t> ifindexes,
                                             std::function<void(uint16_t plane, bool up)> on_change,
                                             std::string& error);
  virtual ~PlaneMonitor() = default;  // stops the thread
};

}  // namespace metaroce::io
