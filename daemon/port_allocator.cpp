// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "port_allocator.h"

#include <algorithm>

namespace metaroce::daemon {
namespace {

// The first free slot at or after `cursor`, wrapping; nullopt when full.
std::optional<size_t> take(std::vector<uint64_t>& owners, size_t& cursor, uint64_t owner) {
  for (size_t i = 0; i < owners.size(); ++i) {
    const size_t slot = (cursor + i) % owners.size();
    if (owners[slot] == 0) {
      owners[slot] = owner;
      cursor = (slot + 1) % owners.size();
      return slot;
    }
  }
  return std::nullopt;
}

}  // namespace

PortAllocator::PortAllocator(const PortsConfig& config)
    : config_(config),
      home_owner_(config.home_count, 0),
      block_owner_(config.block_size ? config.source_count / config.block_size : 0, 0) {}

std::optional<PortLease> PortAllocator::allocate(uint64_t owner, std::string& error, std::optional<uint16_t> home_port,
                                                 std::optional<uint16_t> block_first) {
  if (owner == 0) {
    error = "invalid owner";
    return std::nullopt;
  }
  std::optional<size_t> home;
  if (home_port) {
    const size_t slot = size_t{*home_port} - config_.home_first;
    if (*home_port < config_.home_first || slot >= home_owner_.size()) {
      error = "home port " + std::to_string(*home_port) + " is outside the home ports [" +
              std::to_string(config_.home_first) + ", " + std::to_string(config_.home_first + home_owner_.size()) + ")";
      return std::nullopt;
    }
    if (home_owner_[slot] != 0) {
      error = "home port " + std::to_string(*home_port) + " is leased to another context";
      return std::nullopt;
    }
    home_owner_[slot] = owner;
    home = slot;
  } else {
    home = take(home_owner_, home_cursor_, owner);
    if (!home) {
      error = "no free home port (all " + std::to_string(home_owner_.size()) + " leased)";
      return std::nullopt;
    }
  }
  std::optional<size_t> block;
  if (block_first) {
    const size_t offset = size_t{*block_first} - config_.source_first;
    const size_t index = config_.block_size ? offset / config_.block_size : 0;
    if (*block_first < config_.source_first || offset % config_.block_size != 0 || index >= block_owner_.size())
      error = "source ports from " + std::to_string(*block_first) + " are not a block of this daemon's pool";
    else if (block_owner_[index] != 0)
      error = "the block at " + std::to_string(*block_first) + " is leased to another context";
    else block = index, block_owner_[index] = owner;
  } else {
    block = take(block_owner_, block_cursor_, owner);
    if (!block) error = "no free source-port block (all " + std::to_string(block_owner_.size()) + " leased)";
  }
  if (!block) {
    home_owner_[*home] = 0;
    return std::nullopt;
  }
  PortLease lease;
  lease.owner = owner;
  lease.home_port = static_cast<uint16_t>(config_.home_first + *home);
  lease.block_first = static_cast<uint16_t>(config_.source_first + *block * config_.block_size);
  lease.block_size = config_.block_size;
  return lease;
}

size_t PortAllocator::release_owner(uint64_t owner) {
  size_t released = 0;
  for (uint64_t& o : home_owner_)
    if (o == owner) o = 0, ++released;
  for (uint64_t& o : block_owner_)
    if (o == owner) o = 0;
  return released;
}

std::vector<PortLease> PortAllocator::leases() const {
  // Pairs the n-th home port of an owner with its n-th block, in allocation order.
  std::map<uint64_t, std::vector<uint16_t>> homes, blocks;
  for (size_t i = 0; i < home_owner_.size(); ++i)
    if (home_owner_[i]) homes[home_owner_[i]].push_back(static_cast<uint16_t>(config_.home_first + i));
  for (size_t i = 0; i < block_owner_.size(); ++i)
    if (block_owner_[i])
      blocks[block_owner_[i]].push_back(static_cast<uint16_t>(config_.source_first + i * config_.block_size));
  std::vector<PortLease> out;
  for (const auto& [owner, hs] : homes) {
    const auto& bs = blocks[owner];
    for (size_t i = 0; i < hs.size(); ++i)
      out.push_back({owner, hs[i], i < bs.size() ? bs[i] : uint16_t{0}, config_.block_size});
  }
  return out;
}

size_t PortAllocator::free_home_ports() const {
  return static_cast<size_t>(std::count(home_owner_.begin(), home_owner_.end(), 0u));
}

size_t PortAllocator::free_blocks() const {
  return static_cast<size_t>(std::count(block_owner_.begin(), block_owner_.end(), 0u));
}

}  // namespace metaroce::daemon
