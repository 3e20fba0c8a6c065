// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Completion queues over the engine's CQs, and their completion events.
//
// The engine calls the context's completion listener (progress thread or the
// posting thread, engine lock held) for every completion it adds; the CQ
// counts them, so that polling an empty CQ costs two atomic loads and no
// lock, and when armed signals its completion channel: it writes the CQ
// handle to its pipe, or on a kernel device asks the kernel to post the
// event to the channel's event file (ibv_cmd_req_notify_cq, which
// metaroce.ko answers for a user CQ by running its completion handler).
#include <endian.h>

#include <sched.h>

#include <array>
#include <cerrno>

#include "provider.h"

namespace metaroce::verbs {
namespace {

void to_wc(const transport::Completion& c, ibv_wc& wc) {
  wc = ibv_wc{};
  wc.wr_id = c.wr_id;
  wc.status = static_cast<ibv_wc_status>(c.status);
  wc.opcode = static_cast<ibv_wc_opcode>(c.opcode);
  wc.vendor_err = 0;
  wc.byte_len = c.byte_len;
  wc.qp_num = c.qp_num;
  wc.src_qp = c.src_qp;
  if (c.has_imm) {
    wc.imm_data = htobe32(c.imm);
    wc.wc_flags = IBV_WC_WITH_IMM;
  }
  wc.pkey_index = 0;
  wc.slid = 0;
  wc.sl = 0;
  wc.dlid_path_bits = 0;
}

}  // namespace

ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > kMaxCqe || comp_vector < 0 ||
      comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = context_of(context);
  CompChannel* ch = nullptr;
  if (channel) {
    // Our pipe (a channel of libmetaroce-preload.so), or on a kernel
    // device the kernel's event file, which the kernel signals when
    // on_completion asks it to.
    ch = channel_of(channel);
    if ((ch && channel->context != context) || (!ch && !ctx->device->kernel)) {
      errno = EINVAL;
      return nullptr;
    }
  }
  auto* cq = new (std::nothrow) Cq;
  if (!cq) {
    errno = ENOMEM;
    return nullptr;
  }
  cq->ctx = ctx;
  cq->cqe = cqe;
  cq->event_fd = ch ? ch->write_fd : -1;
  cq->kernel_events = channel && !ch;
  cq->ibv.context = context;
  cq->ibv.cqe = cqe;
  ctx->engine([&](transport::Endpoint& e) {
    cq->id = e.create_cq(static_cast<uint32_t>(cqe));
    ctx->cqs[cq->id] = cq;
  });
  cq->ibv.handle = cq->id;
  if (ctx->device->kernel) {
    struct ibv_create_cq cmd{};
    ib_uverbs_create_cq_resp resp{};
    const int err = ibv_cmd_create_cq(context, cqe, cq->kernel_events ? channel : nullptr, comp_vector,
                                      &cq->ibv, &cmd, sizeof cmd, &resp, sizeof resp);
    if (err) {
      ctx->engine([&](transport::Endpoint& e) {
        e.destroy_cq(cq->id);
        ctx->cqs.erase(cq->id);
      });
      delete cq;
      errno = err;
      return nullptr;
    }
    cq->ibv.cqe = cqe;
  }
  return &cq->ibv;  // libibverbs' ibv_create_cq then runs verbs_init_cq()
}

int destroy_cq(ibv_cq* ibcq) {
  Cq* cq = cq_of(ibcq);
  Context* ctx = cq->ctx;
  const transport::PostResult r = ctx->engine([&](transport::Endpoint& e) {
    const transport::PostResult result = e.destroy_cq(cq->id);
    if (result == transport::PostResult::Ok) ctx->cqs.erase(cq->id);
    return result;
  });
  if (r == transport::PostResult::BadState) return EBUSY;  // a QP still uses it
  if (r != transport::PostResult::Ok) return EINVAL;
  // The kernel's CQ goes too (EIO from a removed device counts as done).
  if (ctx->device->kernel) (void)ibv_cmd_destroy_cq(ibcq);
  delete cq;
  return 0;
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq* cq = cq_of(ibcq);
  if (num_entries <= 0) return 0;
  if (cq->pushed.load(std::memory_order_seq_cst) == cq->polled.load(std::memory_order_relaxed)) {
    // A busy-polling application would otherwise keep the CPU from the
    // progress thread that produces its completions (few cores, several
    // processes): give it way now and then.
    thread_local uint32_t empty = 0;
    const uint32_t every = cq->ctx->poll_yield_every;
    if (every && ++empty % every == 0) sched_yield();
    return 0;
  }
  std::array<transport::Completion, 32> batch;
  int total = 0;
  cq->ctx->engine([&](transport::Endpoint& e) {
    while (total < num_entries) {
      const size_t want = std::min<size_t>(batch.size(), static_cast<size_t>(num_entries - total));
      const size_t n = e.poll_cq(cq->id, std::span(batch.data(), want));
      for (size_t i = 0; i < n; ++i) to_wc(batch[i], wc[total + static_cast<int>(i)]);
      total += static_cast<int>(n);
      if (n < want) break;
    }
    cq->polled.fetch_add(static_cast<uint64_t>(total), std::memory_order_relaxed);
  });
  return total;
}

int req_notify_cq(ibv_cq* ibcq, int /*solicited_only*/) {
  // Every completion counts as solicited: a superset of what verbs promises.
  cq_of(ibcq)->armed.store(true, std::memory_order_seq_cst);  // see Context::on_completion
  return 0;
}

void cq_event(ibv_cq* ibcq) { cq_of(ibcq)->events.fetch_add(1, std::memory_order_relaxed); }

int resize_cq(ibv_cq* ibcq, int cqe) {
  // The engine's CQs grow as needed; only the reported size changes.
  if (cqe < 1 || static_cast<uint32_t>(cqe) > kMaxCqe) return EINVAL;
  ibcq->cqe = cqe;
  cq_of(ibcq)->cqe = cqe;
  return 0;
}

}  // namespace metaroce::verbs
