// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "memory.h"

#include <algorithm>
#include <cstring>

namespace metaroce::transport {
namespace {

constexpr uint32_t kKnownAccess = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

constexpr uint32_t kIndexBits = 20;
constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
constexpr uint32_t kTagMask = (1u << (32 - kIndexBits)) - 1;
constexpr size_t kMaxSlots = kIndexMask;  // index 0 is never used, so key 0 never valid
constexpr size_t kQuarantine = 64;

uint32_t make_key(uint32_t index, uint32_t tag) { return (tag << kIndexBits) | index; }

bool range_inside(const MemoryRegion& mr, uint64_t addr, uint64_t length) {
  if (addr < mr.addr) return false;
  const uint64_t start = addr - mr.addr;
  return start <= mr.length && length <= mr.length - start;
}

}  // namespace

uint32_t MemoryRegistry::next_random() { return static_cast<uint32_t>(rng_.next()); }

std::optional<uint32_t> MemoryRegistry::register_region(uint32_t pd, uint64_t addr, uint64_t length, uint32_t access) {
  if ((access & ~kKnownAccess) != 0) return std::nullopt;
  if (addr + length < addr) return std::nullopt;
  // Verbs requires local write whenever remote write or atomic is granted.
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite)) return std::nullopt;
  uint32_t index;
  if (!free_.empty() && (free_.size() >= kQuarantine || slots_.size() >= kMaxSlots)) {
    index = free_.front();
    free_.pop_front();
  } else {
    if (slots_.size() >= kMaxSlots) return std::nullopt;
    index = static_cast<uint32_t>(slots_.size()) + 1;
    slots_.emplace_back();
    slots_.back().tag = next_random();
  }
  Slot& slot = slots_[index - 1];
  slot.tag = (slot.tag + 1) & kTagMask;
  slot.live = true;
  slot.region = MemoryRegion{addr, length, make_key(index, slot.tag), access, pd};
  ++live_;
  return slot.region.key;
}

bool MemoryRegistry::deregister(uint32_t key) {
  const MemoryRegion* mr = find(key);
  if (!mr) return false;
  const uint32_t index = key & kIndexMask;
  slots_[index - 1].live = false;
  free_.push_back(index);
  --live_;
  ++epoch_;
  return true;
}

const MemoryRegion* MemoryRegistry::find(uint32_t key) const {
  const uint32_t index = key & kIndexMask;
  if (index == 0 || index > slots_.size()) return nullptr;
  const Slot& slot = slots_[index - 1];
  if (!slot.live || slot.region.key != key) return nullptr;
  return &slot.region;
}

bool MemoryRegistry::read_guarded(void* dst, uint64_t addr, size_t length) const {
  if (guarded_read_) return guarded_read_(dst, addr, length);
  std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(addr)), length);
  return true;
}

bool MemoryRegistry::remote_chunk_ok(uint64_t& passed_at, uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t whole,
                                     uint64_t offset, uint64_t length, uint32_t required) const {
  const bool within = offset + length <= whole;
  if (within && passed_at == epoch_) return true;
  if (within && check_remote(rkey, pd, addr, whole, required) == AccessCheck::Ok) {
    passed_at = epoch_;
    return true;
  }
  return check_remote(rkey, pd, addr + offset, length, required) == AccessCheck::Ok;
}

AccessCheck MemoryRegistry::check_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t length,
                                         uint32_t required) const {
  const MemoryRegion* mr = find(rkey);
  if (!mr) return AccessCheck::NoSuchKey;
  if (mr->pd != pd) return AccessCheck::WrongProtectionDomain;
  if ((mr->access & required) != required) return AccessCheck::NoPermission;
  if (!range_inside(*mr, addr, length)) return AccessCheck::OutOfBounds;
  if ((required & kAccessRemoteAtomic) && (addr % 8) != 0) return AccessCheck::Misaligned;
  return AccessCheck::Ok;
}

AccessCheck MemoryRegistry::check_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t length,
                                        bool need_write) const {
  const MemoryRegion* mr = find(lkey);
  if (!mr) return AccessCheck::NoSuchKey;
  if (mr->pd != pd) return AccessCheck::WrongProtectionDomain;
  if (need_write && !(mr->access & kAccessLocalWrite)) return AccessCheck::NoPermission;
  if (!range_inside(*mr, addr, length)) return AccessCheck::OutOfBounds;
  return AccessCheck::Ok;
}

AccessCheck MemoryRegistry::check_sges(std::span<const Sge> sges, uint32_t pd, bool need_write) const {
  for (const Sge& sge : sges) {
    if (sge.length == 0) continue;
    const AccessCheck result = check_local(sge.lkey, pd, sge.addr, sge.length, need_write);
    if (result != AccessCheck::Ok) return result;
  }
  return AccessCheck::Ok;
}

uint64_t sge_total_length(std::span<const Sge> sges) {
  uint64_t total = 0;
  for (const Sge& sge : sges) total += sge.length;
  return total;
}

namespace {

template <typename Copy>
bool walk_sges(std::span<const Sge> sges, uint64_t offset, uint64_t length, Copy copy) {
  if (offset + length < offset || offset + length > sge_total_length(sges)) return false;
  uint64_t done = 0;
  for (const Sge& sge : sges) {
    if (done == length) break;
    if (offset >= sge.length) {
      offset -= sge.length;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(sge.length - offset, length - done);
    copy(reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(sge.addr + offset)), done, n);
    done += n;
    offset = 0;
  }
  return true;
}

}  // namespace

bool scatter_to_sges(std::span<const Sge> sges, uint64_t offset, std::span<const uint8_t> data) {
  return walk_sges(sges, offset, data.size(),
                   [&](uint8_t* dst, uint64_t at, uint64_t n) { std::memcpy(dst, data.data() + at, n); });
}

bool gather_from_sges(std::span<const Sge> sges, uint64_t offset, std::span<uint8_t> out) {
  return walk_sges(sges, offset, out.size(),
                   [&](uint8_t* src, uint64_t at, uint64_t n) { std::memcpy(out.data() + at, src, n); });
}

const uint8_t* sge_range(std::span<const Sge> sges, uint64_t offset, uint64_t length) {
  for (const Sge& sge : sges) {
    if (offset < sge.length) {
      if (length > sge.length - offset) return nullptr;
      return reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(sge.addr + offset));
    }
    offset -= sge.length;
  }
  return nullptr;
}

}  // namespace metaroce::transport
