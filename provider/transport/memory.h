// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The memory-region table: every byte the engine writes or reads on behalf of
// a peer or a work request goes through a check here first.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "metaroce/splitmix64.h"
#include "types.h"
#include "ring_queue.h"

namespace metaroce::transport {

struct MemoryRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t key = 0;  // lkey == rkey, as in rxe
  uint32_t access = 0;
  uint32_t pd = 0;
};

enum class AccessCheck : uint8_t {
  Ok,
  NoSuchKey,
  WrongProtectionDomain,
  OutOfBounds,
  NoPermission,
  Misaligned,  // atomics need 8-byte alignment
};

// Keys are a slot index (low 20 bits) and a 12-bit tag (high bits) that
// starts at a random value per slot and advances with every registration in
// that slot; freed slots wait in a FIFO and are reused only once 64 others
// are free, so a deregistered key comes back only after 4096 registrations
// of its slot, and the first key of an endpoint is not a constant.
class MemoryRegistry {
 public:
  explicit MemoryRegistry(uint64_t seed = 0x6d656d6f7279) : rng_(seed) {}
  // Returns the key (used as both lkey and rkey), or nothing when the range
  // wraps around the address space or access has unknown bits.
  std::optional<uint32_t> register_region(uint32_t pd, uint64_t addr, uint64_t length, uint32_t access);
  bool deregister(uint32_t key);
  const MemoryRegion* find(uint32_t key) const;
  // Advances with every deregistration, the only change that can fail a
  // check that passed: while it stays the same, so does that check's result.
  uint64_t epoch() const { return epoch_; }
  size_t size() const { return live_; }

  // A peer's access to [addr, addr+length) with `required` (kAccessRemote*).
  AccessCheck check_remote(uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t length, uint32_t required) const;
  // A peer's access to `length` bytes at `offset` into a message's remote
  // range [addr, addr+whole): the whole range is checked, and its pass kept
  // in `passed_at` (an epoch) so that later chunks need no check until a
  // deregistration; a range that fails as a whole is checked chunk by chunk.
  bool remote_chunk_ok(uint64_t& passed_at, uint32_t rkey, uint32_t pd, uint64_t addr, uint64_t whole, uint64_t offset,
                       uint64_t length, uint32_t required) const;
  // A local work request's buffer; need_write asks for kAccessLocalWrite.
  AccessCheck check_local(uint32_t lkey, uint32_t pd, uint64_t addr, uint64_t length, bool need_write) const;
  AccessCheck check_sges(std::span<const Sge> sges, uint32_t pd, bool need_write) const;

  // Copies `length` registered bytes at `addr` into dst; false when they
  // could not be read. A NIC reads the pinned pages of a region; this
  // engine reads through the address space, where an application may unmap
  // memory that is still registered (UCX's registration cache deregisters
  // lazily, after the munmap). The driver installs a reader that survives
  // that (the runtime's uses process_vm_readv); without one it is memcpy.
  // Used where the engine may read after the application thinks the memory
  // is no longer in use: a READ response resent after the requester has it.
  using GuardedRead = bool (*)(void* dst, uint64_t addr, size_t length);
  void set_guarded_read(GuardedRead read) { guarded_read_ = read; }
  bool read_guarded(void* dst, uint64_t addr, size_t length) const;

 private:
  struct Slot {
    MemoryRegion region;
    uint32_t tag = 0;
    bool live = false;
  };
  uint32_t next_random();
  std::vector<Slot> slots_;
  RingQueue<uint32_t> free_;  // oldest first
  size_t live_ = 0;
  uint64_t epoch_ = 1;
  SplitMix64 rng_;
  GuardedRead guarded_read_ = nullptr;
};

// Copies between a scatter/gather list and a flat byte range, `offset` bytes
// into the list. Returns false (copying nothing) if the range does not fit.
bool scatter_to_sges(std::span<const Sge> sges, uint64_t offset, std::span<const uint8_t> data);
bool gather_from_sges(std::span<const Sge> sges, uint64_t offset, std::span<uint8_t> out);
// The address of bytes [offset, offset + length) of the list when they lie in
// one SGE; null when they cross SGEs or run past the end.
const uint8_t* sge_range(std::span<const Sge> sges, uint64_t offset, uint64_t length);
uint64_t sge_total_length(std::span<const Sge> sges);

}  // namespace metaroce::transport
