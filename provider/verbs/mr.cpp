// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Memory regions: registered in the engine's table, whose key is both lkey
// and rkey. Nothing is pinned: the engine reads and writes the process's
// memory directly, so every access the peer asks for is checked against the
// region's bounds and access flags there.
#include <cerrno>
#include <cstdint>

#include "provider.h"

namespace metaroce::verbs {

ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access) {
  // The engine addresses remote memory by virtual address: iova must be addr.
  if (hca_va != reinterpret_cast<uintptr_t>(addr) || (access & IBV_ACCESS_ZERO_BASED)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // On-demand paging is a NIC's page-fault protocol: there is nothing to
  // fault here, and saying yes would tell a program ODP semantics hold.
  if (access & IBV_ACCESS_ON_DEMAND) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  constexpr int kRemote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  if ((access & kRemote) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;  // as verbs requires
    return nullptr;
  }
  // MW_BIND (no memory window can be allocated), HUGETLB and the optional
  // range are accepted and have no effect.
  const uint32_t engine_access =
      static_cast<uint32_t>(access) & (transport::kAccessLocalWrite | transport::kAccessRemoteWrite |
                                       transport::kAccessRemoteRead | transport::kAccessRemoteAtomic);
  Context* ctx = context_of(pd->context);
  auto* mr = new (std::nothrow) Mr;
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  std::optional<uint32_t> key;
  ctx->with_all_engines([&](std::span<transport::Endpoint* const>) {
    key = ctx->memory->register_region(pd_of(pd)->id, reinterpret_cast<uintptr_t>(addr), length, engine_access);
  });
  if (!key) {
    delete mr;
    errno = EINVAL;
    return nullptr;
  }
  mr->key = *key;
  mr->vmr.mr_type = IBV_MR_TYPE_MR;
  mr->vmr.access = access;
  ibv_mr& m = mr->vmr.ibv_mr;
  m.context = pd->context;
  m.pd = pd;
  m.addr = addr;
  m.length = length;
  m.handle = *key;
  m.lkey = *key;
  m.rkey = *key;
  return &m;
}

int dereg_mr(verbs_mr* vmr) {
  Mr* mr = mr_of(vmr);
  Context* ctx = context_of(vmr->ibv_mr.context);
  bool ok = false;
  ctx->with_all_engines([&](std::span<transport::Endpoint* const>) { ok = ctx->memory->deregister(mr->key); });
  if (!ok) return EINVAL;
  // Sends already handed to the kernel may still read the region's memory.
  for (const std::unique_ptr<Shard>& shard : ctx->shards) shard->runtime->fence_sends();
  delete mr;
  return 0;
}

}  // namespace metaroce::verbs
