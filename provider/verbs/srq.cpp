// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Shared receive queues over the engine's (transport/shared_receive_queue.h).
// They live in the provider only, for kernel devices too: the kernel has no
// data path, and an SRQ needs no number of its own (XRC, which would give it
// one, is not supported). RC and UD QPs created with one take their
// receives from it.
#include <cerrno>

#include "provider.h"

namespace metaroce::verbs {

ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  if (attr->attr.max_wr == 0 || attr->attr.max_wr > kMaxSrqWr || attr->attr.max_sge > kMaxSge ||
      attr->attr.srq_limit > attr->attr.max_wr) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = context_of(pd->context);
  auto* srq = new (std::nothrow) Srq;
  if (!srq) {
    errno = ENOMEM;
    return nullptr;
  }
  srq->ctx = ctx;
  srq->max_sge = kMaxSge;
  srq->shard = &ctx->pick_shard();
  srq->shard->engine([&](transport::Endpoint& e) {
    srq->id = e.create_srq(pd_of(pd)->id, attr->attr.max_wr);
    if (attr->attr.srq_limit) e.modify_srq(srq->id, std::nullopt, attr->attr.srq_limit);
    srq->shard->srqs[srq->id] = srq;
  });
  srq->ibv.handle = srq->id;
  register_event_object(*ctx, reinterpret_cast<uintptr_t>(&srq->ibv), srq->events);
  // What the SRQ really holds (libibverbs fills context, pd, srq_context).
  attr->attr.max_sge = kMaxSge;
  return &srq->ibv;
}

int modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  Srq* srq = srq_of(ibsrq);
  std::optional<uint32_t> max_wr;
  std::optional<uint32_t> limit;
  if (mask & IBV_SRQ_MAX_WR) {
    if (attr->max_wr == 0 || attr->max_wr > kMaxSrqWr) return EINVAL;
    max_wr = attr->max_wr;
  }
  if (mask & IBV_SRQ_LIMIT) limit = attr->srq_limit;
  return errno_of(srq->shard->engine([&](transport::Endpoint& e) { return e.modify_srq(srq->id, max_wr, limit); }));
}

int query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  Srq* srq = srq_of(ibsrq);
  const std::optional<transport::SrqAttributes> a =
      srq->shard->engine([&](transport::Endpoint& e) { return e.query_srq(srq->id); });
  if (!a) return EINVAL;
  attr->max_wr = a->max_wr;
  attr->max_sge = srq->max_sge;
  attr->srq_limit = a->limit;
  return 0;
}

int destroy_srq(ibv_srq* ibsrq) {
  Srq* srq = srq_of(ibsrq);
  Context* ctx = srq->ctx;
  const uint64_t element = reinterpret_cast<uintptr_t>(ibsrq);
  const transport::PostResult r = srq->shard->engine([&](transport::Endpoint& e) {
    const transport::PostResult result = e.destroy_srq(srq->id);
    if (result == transport::PostResult::Ok) {
      srq->shard->srqs.erase(srq->id);
      discard_async_events(*ctx, element, srq->events);
    }
    return result;
  });
  if (r == transport::PostResult::BadState) return EBUSY;  // a QP still takes from it
  if (r != transport::PostResult::Ok) return EINVAL;
  retire_event_object(*ctx, element, srq->events, ibsrq->mutex, ibsrq->cond, ibsrq->events_completed);
  delete srq;
  return 0;
}

int post_srq_recv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq* srq = srq_of(ibsrq);
  return post_recv_chain(
      *srq->shard, wr, bad_wr, srq->max_sge,
      [srq](transport::Endpoint& e, const transport::RecvWr& r) { return e.post_srq_recv(srq->id, r); });
}

}  // namespace metaroce::verbs
