// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Protection domains: a number per context. The engine checks that a memory
// region and the QP using it belong to the same one.
#include <cerrno>

#include "provider.h"

namespace metaroce::verbs {

ibv_pd* alloc_pd(ibv_context* context) {
  Context* ctx = context_of(context);
  const uint32_t id = ctx->next_pd.fetch_add(1, std::memory_order_relaxed);
  if (id == 0 || id > kMaxPd) {
    errno = ENOMEM;
    return nullptr;
  }
  auto* pd = new (std::nothrow) Pd;
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->id = id;
  pd->ibv.context = context;
  pd->ibv.handle = id;
  if (ctx->device->kernel) {
    // The kernel's PD (its handle replaces ours) is what its QPs refer to.
    struct ibv_alloc_pd cmd {};
    ib_uverbs_alloc_pd_resp resp{};
    if (const int err = ibv_cmd_alloc_pd(context, &pd->ibv, &cmd, sizeof cmd, &resp, sizeof resp)) {
      delete pd;
      errno = err;
      return nullptr;
    }
  }
  return &pd->ibv;
}

int dealloc_pd(ibv_pd* pd) {
  if (context_of(pd->context)->device->kernel) {
    if (const int err = ibv_cmd_dealloc_pd(pd)) return err;
  }
  delete pd_of(pd);
  return 0;
}

}  // namespace metaroce::verbs
