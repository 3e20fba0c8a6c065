// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Home ports and source-port blocks for provider contexts. Two pools: home
// ports one at a time, source ports in fixed-size blocks, so that two leases
// can never overlap by construction. Allocation rotates through each pool
// (a released port is the last to be handed out again) so that a peer still
// talking to a dead context's port is unlikely to reach its successor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config.h"

namespace metaroce::daemon {

struct PortLease {
  uint64_t owner = 0;  // the daemon's id of the client connection
  uint16_t home_port = 0;
  uint16_t block_first = 0;  // source ports [block_first, block_first + block_size)
  uint16_t block_size = 0;
};

class PortAllocator {
 public:
  explicit PortAllocator(const PortsConfig& config);

  // Fails (nullopt, `error` set) when either pool is exhausted. With
  // `home_port`, that home port (one the kernel module gave a context) is
  // taken instead of the next free one, and must be free; with
  // `block_first`, that block (a context that held it before the daemon
  // restarted), which must be a free block of the pool.
  std::optional<PortLease> allocate(uint64_t owner, std::string& error,
                                    std::optional<uint16_t> home_port = std::nullopt,
                                    std::optional<uint16_t> block_first = std::nullopt);
  // Returns every lease of `owner` to the pools; the number returned.
  size_t release_owner(uint64_t owner);

  std::vector<PortLease> leases() const;
  size_t free_home_ports() const;
  size_t free_blocks() const;
  const PortsConfig& config() const { return config_; }

 private:
  PortsConfig config_;
  std::vector<uint64_t> home_owner_;   // per home port; 0 = free
  std::vector<uint64_t> block_owner_;  // per block; 0 = free
  size_t home_cursor_ = 0;
  size_t block_cursor_ = 0;
};

}  // namespace metaroce::daemon
