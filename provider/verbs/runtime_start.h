// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Starting a context's runtime: on the ports metaroced leases when it runs,
// else on the first free home port, with the netdev's speed and MTU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "context_options.h"
#include "daemon_client.h"
#include "provider.h"

namespace metaroce::verbs {

// Creates the runtime on the first free home port, with QP numbers that
// encode it (or on metaroced's lease, `daemon` then holding the client),
// over `planes` (the device's own first), which metaroced's
// [devices.NAME] planes may extend for a device given one netdev. Sets
// o.mtu when it is 0: the payload that fits every plane's netdev. The
// engine reads `memory` (Context::memory).
std::unique_ptr<io::Runtime> start_runtime(const Device& device, Options& o, std::vector<Device::Plane>& planes,
                                           const std::shared_ptr<transport::MemoryRegistry>& memory,
                                           std::unique_ptr<DaemonClient>& daemon, std::string& error);
// Starts a context's shards (start_runtime for each): o.progress_threads of
// them, else as many as metaroced's [devices.NAME] says, else
// default_progress_threads(); one for a kernel device, whose context has
// one port slot. False, with `error`, when the first cannot start; a later
// one that cannot start leaves the context with fewer (and a warning).
bool start_shards(const Device& device, Options& o, std::vector<Device::Plane>& planes,
                  const std::shared_ptr<transport::MemoryRegistry>& memory, std::vector<std::unique_ptr<Shard>>& shards,
                  std::string& error);
// Prints "metaroce: MESSAGE" on stderr once per process, not per context:
// a program opening many contexts without a daemon is told once.
void warn_once(const std::string& message);
// The netdev's MTU; a standard Ethernet frame's when the address belongs to
// no interface we can see.
uint32_t netdev_mtu(uint32_t ifindex);

}  // namespace metaroce::verbs
