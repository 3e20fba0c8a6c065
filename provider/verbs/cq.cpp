// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Completion queues over the engine's CQs, and their completion events.
//
// The runtime calls the context's completion listener (from the progress
// thread or a posting thread, just after it has released the engine lock)
// for every completion the engine added; the CQ counts them, so that
// polling an empty CQ costs two atomic loads and no lock, and signals its
// completion channel when armed: a kernel-less
// channel is a pipe the listener writes the CQ handle to; a kernel device's
// channel is the kernel's event file, which the kernel signals when the
// provider rings it with IB_USER_VERBS_CMD_REQ_NOTIFY_CQ (metaroce.ko
// answers that command for a user CQ by running its completion handler).
//
// ibv_create_cq_ex CQs are the same objects with the ibv_start_poll /
// ibv_wc_read_* functions filled in; both ways of polling share one batch.
#include <endian.h>

#include <sched.h>

#include <cerrno>

#include "provider.h"

namespace metaroce::verbs {
namespace {

constexpr size_t kBatch = 32;

// What ibv_wc_read_*() can report (IBV_WC_STANDARD_FLAGS): no timestamps,
// VLANs, flow tags or tag matching.
constexpr uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS;

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
  if (c.has_grh) wc.wc_flags |= IBV_WC_GRH;
  wc.pkey_index = 0;
  wc.slid = 0;
  wc.sl = 0;
  wc.dlid_path_bits = 0;
}

// A busy-polling application would otherwise keep the CPU from the progress
// thread that produces its completions (few cores, several processes): an
// empty poll, through ibv_poll_cq() or the extended API, gives way now and
// then.
void found_nothing(const Context& ctx) {
  thread_local uint32_t empty = 0;
  const uint32_t every = ctx.poll_yield_every;
  if (every != 0 && ++empty % every == 0) sched_yield();
}

// Calls fn(shard) for every shard of the CQ's context, starting one after
// the shard the previous poll started at (so that a busy shard does not
// starve the others' completions), until fn returns false. A context with
// one shard costs no atomic.
template <typename Fn>
void for_each_shard_from_next(Cq& cq, Fn&& fn) {
  const std::vector<std::unique_ptr<Shard>>& shards = cq.ctx->shards;
  if (shards.size() == 1) {
    fn(*shards.front());
    return;
  }
  const size_t first = cq.poll_start.fetch_add(1, std::memory_order_relaxed);
  for (size_t k = 0; k < shards.size(); ++k)
    if (!fn(*shards[(first + k) % shards.size()])) return;
}

// Refills the CQ's batch from the engines (each engine's lock taken in
// turn); false when nothing is waiting.
bool refill(Cq* cq) {
  cq->batch.clear();
  cq->batch_next = 0;
  if (cq->pushed.load(std::memory_order_seq_cst) == cq->polled.load(std::memory_order_relaxed)) {
    found_nothing(*cq->ctx);
    return false;
  }
  cq->batch.resize(kBatch);
  size_t n = 0;
  for_each_shard_from_next(*cq, [&](Shard& shard) {
    n += shard.engine([&](transport::Endpoint& e) {
      const size_t got = e.poll_cq(cq->id, std::span(cq->batch.data() + n, kBatch - n));
      cq->polled.fetch_add(got, std::memory_order_relaxed);
      return got;
    });
    return n < kBatch;
  });
  cq->batch.resize(n);
  return n > 0;
}

const transport::Completion& current(ibv_cq_ex* ex) {
  Cq* cq = cq_of(ex);
  return cq->batch[cq->batch_next];
}

void load_current(ibv_cq_ex* ex) {
  const transport::Completion& c = current(ex);
  ex->wr_id = c.wr_id;
  ex->status = static_cast<ibv_wc_status>(c.status);
}

int start_poll(ibv_cq_ex* ex, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  Cq* cq = cq_of(ex);
  if (cq->batch_next >= cq->batch.size() && !refill(cq)) return ENOENT;
  load_current(ex);
  return 0;
}

int next_poll(ibv_cq_ex* ex) {
  Cq* cq = cq_of(ex);
  ++cq->batch_next;
  if (cq->batch_next >= cq->batch.size() && !refill(cq)) return ENOENT;
  load_current(ex);
  return 0;
}

// The current completion is consumed by next_poll, not here: end_poll
// after a successful start_poll or next_poll leaves it handed out.
void end_poll(ibv_cq_ex* ex) {
  Cq* cq = cq_of(ex);
  if (cq->batch_next < cq->batch.size()) ++cq->batch_next;
}

ibv_wc_opcode read_opcode(ibv_cq_ex* ex) { return static_cast<ibv_wc_opcode>(current(ex).opcode); }
uint32_t read_vendor_err(ibv_cq_ex*) { return 0; }
uint32_t read_byte_len(ibv_cq_ex* ex) { return current(ex).byte_len; }
__be32 read_imm_data(ibv_cq_ex* ex) { return htobe32(current(ex).imm); }
uint32_t read_qp_num(ibv_cq_ex* ex) { return current(ex).qp_num; }
uint32_t read_src_qp(ibv_cq_ex* ex) { return current(ex).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* ex) {
  const transport::Completion& c = current(ex);
  return (c.has_imm ? unsigned{IBV_WC_WITH_IMM} : 0u) | (c.has_grh ? unsigned{IBV_WC_GRH} : 0u);
}
uint32_t read_slid(ibv_cq_ex*) { return 0; }
uint8_t read_sl(ibv_cq_ex*) { return 0; }
uint8_t read_dlid_path_bits(ibv_cq_ex*) { return 0; }

Cq* create(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
  if (cqe < 1 || static_cast<uint32_t>(cqe) > kMaxCqe || comp_vector < 0 || comp_vector >= context->num_comp_vectors) {
    errno = EINVAL;
    return nullptr;
  }
  Context* ctx = context_of(context);
  CompChannel* ch = nullptr;
  if (channel && !ctx->device->kernel) {
    ch = channel_of(channel);
    if (!ch || channel->context != context) {
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
  cq->kernel_channel = channel && ctx->device->kernel;
  cq->ibv.context = context;
  cq->ibv.cqe = cqe;
  // One CQ in every shard's engine, under one number: every engine hands
  // out CQ numbers in the same order, since CQs are made and destroyed in
  // all of them at once.
  bool same_number = true;
  ctx->with_all_engines([&](std::span<transport::Endpoint* const> engines) {
    cq->id = engines.front()->create_cq(static_cast<uint32_t>(cqe));
    for (transport::Endpoint* e : engines.subspan(1)) same_number &= e->create_cq(static_cast<uint32_t>(cqe)) == cq->id;
    if (!same_number) {
      for (transport::Endpoint* e : engines) e->destroy_cq(cq->id);
      return;
    }
    std::lock_guard<std::mutex> lock(ctx->cqs_mutex);
    ctx->cqs[cq->id] = cq;
  });
  if (!same_number) {
    delete cq;
    errno = ENOMEM;
    return nullptr;
  }
  cq->ibv.handle = cq->id;
  if (ctx->device->kernel) {
    // A kernel device's channel is the kernel's event file: the kernel CQ
    // is bound to it.
    const int err = kernel_create_cq(context, cqe, channel, comp_vector, cq->ibv);
    if (err) {
      ctx->with_all_engines([&](std::span<transport::Endpoint* const> engines) {
        for (transport::Endpoint* e : engines) e->destroy_cq(cq->id);
        std::lock_guard<std::mutex> lock(ctx->cqs_mutex);
        ctx->cqs.erase(cq->id);
      });
      delete cq;
      errno = err;
      return nullptr;
    }
    cq->ibv.cqe = cqe;
  }
  return cq;
}

}  // namespace

ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector) {
  Cq* cq = create(context, cqe, channel, comp_vector);
  return cq ? &cq->ibv : nullptr;  // libibverbs' ibv_create_cq then runs verbs_init_cq()
}

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  constexpr uint32_t kKnownMask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
  constexpr uint32_t kKnownFlags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
  if ((attr->comp_mask & ~kKnownMask) || (attr->wc_flags & ~kSupportedWcFlags) ||
      ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~kKnownFlags))) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->cqe > static_cast<uint32_t>(INT32_MAX)) {
    errno = EINVAL;
    return nullptr;
  }
  Cq* cq = create(context, static_cast<int>(attr->cqe), attr->channel, static_cast<int>(attr->comp_vector));
  if (!cq) return nullptr;
  ibv_cq_ex& ex = cq->ex;
  ex.start_poll = start_poll;
  ex.next_poll = next_poll;
  ex.end_poll = end_poll;
  ex.read_opcode = read_opcode;
  ex.read_vendor_err = read_vendor_err;
  ex.read_byte_len = read_byte_len;
  ex.read_imm_data = read_imm_data;
  ex.read_qp_num = read_qp_num;
  ex.read_src_qp = read_src_qp;
  ex.read_wc_flags = read_wc_flags;
  ex.read_slid = read_slid;
  ex.read_sl = read_sl;
  ex.read_dlid_path_bits = read_dlid_path_bits;
  return &ex;  // libibverbs then runs verbs_init_cq()
}

int destroy_cq(ibv_cq* ibcq) {
  Cq* cq = cq_of(ibcq);
  Context* ctx = cq->ctx;
  transport::PostResult r = transport::PostResult::Ok;
  ctx->with_all_engines([&](std::span<transport::Endpoint* const> engines) {
    for (const transport::Endpoint* e : engines)
      if (e->cq_in_use(cq->id)) {
        r = transport::PostResult::BadState;
        return;
      }
    for (transport::Endpoint* e : engines) {
      const transport::PostResult result = e->destroy_cq(cq->id);
      if (result != transport::PostResult::Ok) r = result;
    }
    if (r != transport::PostResult::Ok) return;
    // Under cqs_mutex, so that no listener writes an event for this CQ after
    // those unread are discarded below.
    std::lock_guard<std::mutex> lock(ctx->cqs_mutex);
    ctx->cqs.erase(cq->id);
    // An event the application has not read names this CQ: the kernel drops
    // such events when it destroys a CQ, and an application that tears down
    // while another thread waits on the channel (gloo's device thread) would
    // otherwise be handed freed memory and a cq_context it has freed.
    if (cq->event_fd >= 0 && cq->signalled != cq->events.load(std::memory_order_relaxed))
      discard_event_records(ibcq->channel->fd, cq->event_fd, sizeof(ib_uverbs_comp_event_desc),
                            reinterpret_cast<uintptr_t>(ibcq));
  });
  if (r == transport::PostResult::BadState) return EBUSY;  // a QP still uses it
  if (r != transport::PostResult::Ok) return EINVAL;
  // The kernel's CQ goes too (EIO from a removed device counts as done);
  // libibverbs waits there for the completion events to be acknowledged.
  if (ctx->device->kernel) (void)ibv_cmd_destroy_cq(ibcq);
  delete cq;
  return 0;
}

int poll_cq(ibv_cq* ibcq, int num_entries, ibv_wc* wc) {
  Cq* cq = cq_of(ibcq);
  if (num_entries <= 0) return 0;
  int total = 0;
  // Completions an ibv_start_poll() batch took first.
  while (total < num_entries && cq->batch_next < cq->batch.size()) to_wc(cq->batch[cq->batch_next++], wc[total++]);
  if (total == num_entries) return total;
  if (cq->pushed.load(std::memory_order_seq_cst) == cq->polled.load(std::memory_order_relaxed)) {
    if (total == 0) found_nothing(*cq->ctx);
    return total;
  }
  std::array<transport::Completion, kBatch> batch;
  for_each_shard_from_next(*cq, [&](Shard& shard) {
    shard.engine([&](transport::Endpoint& e) {
      int got = 0;
      while (total < num_entries) {
        const size_t want = std::min<size_t>(batch.size(), static_cast<size_t>(num_entries - total));
        const size_t n = e.poll_cq(cq->id, std::span(batch.data(), want));
        for (size_t i = 0; i < n; ++i) to_wc(batch[i], wc[total + static_cast<int>(i)]);
        total += static_cast<int>(n);
        got += static_cast<int>(n);
        if (n < want) break;
      }
      cq->polled.fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
    });
    return total < num_entries;
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
