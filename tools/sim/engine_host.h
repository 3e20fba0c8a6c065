// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Runs a transport::Endpoint as a host of the network simulator. The node id
// doubles as the engine's PeerId; path p sends from UDP source port
// base_port + p, which is what ECMP (or PortModulo) hashes, through the
// host's NIC (egress) for the path's plane.
#pragma once

#include <functional>

#include "endpoint.h"
#include "netsim.h"

namespace metaroce::sim {

class EngineHost : public Host {
 public:
  static constexpr uint16_t kHomePort = wire::kHomePortBase;
  static constexpr uint16_t kBasePort = 49152;

  explicit EngineHost(const transport::EndpointConfig& config) : endpoint_(config) {}

  transport::Endpoint& endpoint() { return endpoint_; }
  const transport::Endpoint& endpoint() const { return endpoint_; }
  // The application's turn: called after every delivery and timer, before the
  // host is asked for datagrams, so it can reap completions and post work.
  void set_application(std::function<void(Time)> application) { application_ = std::move(application); }

  void receive(Time now, Datagram&& d) override;
  void on_timer(Time now) override;
  bool transmit(Time now, Datagram& out) override;
  Time next_wakeup() const override { return endpoint_.next_wakeup(); }

 private:
  transport::Endpoint endpoint_;
  std::function<void(Time)> application_;
};

}  // namespace metaroce::sim
