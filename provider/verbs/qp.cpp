// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// RC and UD queue pairs: creation (with an SRQ or not), ibv_modify_qp (on
// the state machine of qp_rules.h, which the kernel checks too),
// ibv_query_qp and destruction.
//
// The remote end of an RC QP is (IP of ah_attr.grh.dgid, UDP port 4792 +
// (dest_qp_num >> 12)): QP numbers encode their context's home port. A UD
// QP names its destination per work request (address handle + remote QPN).
#include <arpa/inet.h>

#include <cerrno>
#include <cstring>

#include "provider.h"
#include "qp_rules.h"

namespace metaroce::verbs {
namespace {

bool supported_type(ibv_qp_type type, int& err) {
  switch (type) {
    case IBV_QPT_RC:
    case IBV_QPT_UD: return true;
    case IBV_QPT_UC:
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV:
    case IBV_QPT_DRIVER: err = EOPNOTSUPP; return false;
  }
  err = EINVAL;
  return false;
}

constexpr uint64_t kSupportedSendOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                       IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                                       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
constexpr uint64_t kSupportedUdSendOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

// IB spec minimum RNR NAK timer, in nanoseconds, by its 5-bit code.
transport::Time rnr_timer_ns(uint8_t code) {
  static constexpr uint32_t kMicros[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                           160,    240,   320,   480,    640,    960,    1280,   1920,
                                           2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
                                           40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return static_cast<transport::Time>(kMicros[code & 31]) * 1000;
}

// qp_rules.h numbers states as verbs does (qp_rules.cpp asserts it).
ibv_qp_state from_engine(transport::QpState s) { return static_cast<ibv_qp_state>(transport::qp_rules_state(s)); }

// qp_modify_check lets no QP into SQD or SQE.
transport::QpState to_engine(ibv_qp_state s) {
  switch (s) {
    case IBV_QPS_RESET: return transport::QpState::Reset;
    case IBV_QPS_INIT: return transport::QpState::Init;
    case IBV_QPS_RTR: return transport::QpState::ReadyToReceive;
    case IBV_QPS_RTS: return transport::QpState::ReadyToSend;
    default: return transport::QpState::Error;
  }
}

// The peer's (IP, home port) from the address vector and its QP number.
bool peer_address(const Context& ctx, const ibv_ah_attr& ah, uint32_t dest_qpn, sockaddr_storage& out) {
  if (!av_address(*ctx.device, ah, out)) return false;
  const uint16_t port = htons(home_port_of_qpn(dest_qpn));
  if (out.ss_family == AF_INET) reinterpret_cast<sockaddr_in&>(out).sin_port = port;
  else reinterpret_cast<sockaddr_in6&>(out).sin6_port = port;
  return true;
}

// What the shared rules (qp_rules.h) leave to the provider: the address
// vector's port and source GID.
int check_address_vector(const Context& ctx, const ibv_qp_attr& a, int mask) {
  if (!(mask & IBV_QP_AV)) return 0;
  if (a.ah_attr.port_num > 1) return EINVAL;
  // Kernel devices have the kernel's GID table, which checks the index.
  if (a.ah_attr.is_global && a.ah_attr.grh.sgid_index != 0 && !ctx.device->kernel) return EINVAL;
  return 0;
}

// Records the attributes in `mask` (for ibv_query_qp and the engine config).
void remember(Qp& qp, const ibv_qp_attr& a, int mask) {
  ibv_qp_attr& s = qp.attr;
  if (mask & IBV_QP_ACCESS_FLAGS) s.qp_access_flags = a.qp_access_flags;
  if (mask & IBV_QP_PKEY_INDEX) s.pkey_index = a.pkey_index;
  if (mask & IBV_QP_PORT) s.port_num = a.port_num;
  if (mask & IBV_QP_AV) s.ah_attr = a.ah_attr;
  if (mask & IBV_QP_PATH_MTU) {
    s.path_mtu = a.path_mtu;
    // At the port's MTU (or above) the QP sends full packets (what fits the
    // link, more than the IB MTU's bytes); below it, the IB MTU's bytes.
    qp.config.mtu = a.path_mtu < qp.ctx->active_mtu ? ib_mtu_bytes(a.path_mtu) : 0;
  }
  if (mask & IBV_QP_DEST_QPN) s.dest_qp_num = a.dest_qp_num;
  if (mask & IBV_QP_RQ_PSN) {
    s.rq_psn = a.rq_psn;
    qp.config.rq_psn = a.rq_psn;
  }
  if (mask & IBV_QP_SQ_PSN) {
    s.sq_psn = a.sq_psn;
    qp.config.sq_psn = a.sq_psn;
  }
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) {
    s.max_dest_rd_atomic = a.max_dest_rd_atomic;
    qp.config.max_dest_rd_atomic = a.max_dest_rd_atomic ? a.max_dest_rd_atomic : 1;
  }
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) {
    s.max_rd_atomic = a.max_rd_atomic;
    qp.config.max_rd_atomic = a.max_rd_atomic ? a.max_rd_atomic : 1;
  }
  if (mask & IBV_QP_MIN_RNR_TIMER) {
    s.min_rnr_timer = a.min_rnr_timer;
    qp.config.min_rnr_timer_ns = rnr_timer_ns(a.min_rnr_timer);
  }
  if (mask & IBV_QP_TIMEOUT) {
    s.timeout = a.timeout;
    // 4.096 us * 2^timeout; 0 = no timeout in verbs, the engine's adaptive RTO here.
    qp.config.timeout_ns = a.timeout ? (transport::Time{4096} << a.timeout) : 0;
  }
  if (mask & IBV_QP_RETRY_CNT) {
    s.retry_cnt = a.retry_cnt;
    qp.config.retry_cnt = a.retry_cnt;
  }
  if (mask & IBV_QP_RNR_RETRY) {
    s.rnr_retry = a.rnr_retry;
    qp.config.rnr_retry = a.rnr_retry;
  }
  if (mask & IBV_QP_PATH_MIG_STATE) s.path_mig_state = a.path_mig_state;
  if (mask & IBV_QP_QKEY) s.qkey = a.qkey;
  if (mask & IBV_QP_ALT_PATH) {
    s.alt_ah_attr = a.alt_ah_attr;
    s.alt_pkey_index = a.alt_pkey_index;
    s.alt_port_num = a.alt_port_num;
    s.alt_timeout = a.alt_timeout;
  }
}

ibv_qp* create(Context* ctx, ibv_context* context, ibv_pd* pd, const ibv_qp_init_attr_ex& a) {
  int err = 0;
  if (!supported_type(a.qp_type, err)) {
    errno = err;
    return nullptr;
  }
  if (a.xrcd || a.rwq_ind_tbl) {
    errno = EOPNOTSUPP;  // no XRC / RSS
    return nullptr;
  }
  if (!pd || pd->context != context || !a.send_cq || !a.recv_cq || a.send_cq->context != context ||
      a.recv_cq->context != context || (a.srq && a.srq->context != context)) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_qp_cap& cap = a.cap;
  if (cap.max_send_wr > kMaxQpWr || cap.max_recv_wr > kMaxQpWr || cap.max_send_sge > kMaxSge ||
      cap.max_recv_sge > kMaxSge || cap.max_inline_data > kMaxInlineData) {
    errno = EINVAL;
    return nullptr;
  }
  auto* qp = new (std::nothrow) Qp;
  if (!qp) {
    errno = ENOMEM;
    return nullptr;
  }
  qp->ctx = ctx;
  qp->type = a.qp_type;
  qp->srq = a.srq ? srq_of(a.srq) : nullptr;
  qp->pd = pd_of(pd);
  qp->send_cq = cq_of(a.send_cq);
  qp->recv_cq = cq_of(a.recv_cq);
  qp->sq_sig_all = a.sq_sig_all != 0;
  // Report what the QP really supports (at least what was asked).
  qp->cap.max_send_wr = std::max<uint32_t>(cap.max_send_wr, 1);
  // With an SRQ the QP has no receive queue of its own.
  qp->cap.max_recv_wr = qp->srq ? 0 : std::max<uint32_t>(cap.max_recv_wr, 1);
  qp->cap.max_send_sge = kMaxSge;
  qp->cap.max_recv_sge = kMaxSge;
  qp->cap.max_inline_data = std::max<uint32_t>(cap.max_inline_data, 256);
  qp->config.max_send_wr = qp->cap.max_send_wr;
  qp->config.max_recv_wr = qp->cap.max_recv_wr;
  qp->config.max_rd_atomic = kMaxRdAtomic;
  qp->config.max_dest_rd_atomic = kMaxRdAtomic;
  ibv_qp& q = qp->vqp.qp;
  if (ctx->device->kernel) {
    // The kernel numbers the QP (slot << 12 | index, host-unique). SRQs
    // live in the provider only, so the kernel's QP has none.
    ibv_qp_init_attr init{};
    init.qp_context = a.qp_context;
    init.send_cq = a.send_cq;
    init.recv_cq = a.recv_cq;
    init.cap = cap;
    if (qp->srq) init.cap.max_recv_wr = init.cap.max_recv_sge = 0;
    init.qp_type = a.qp_type;
    init.sq_sig_all = a.sq_sig_all;
    if (const int kerr = kernel_create_qp(pd, init, q)) {
      delete qp;
      errno = kerr;
      return nullptr;
    }
    qp->kernel_handle = q.handle;
  }
  const uint32_t srq_id = qp->srq ? qp->srq->id : 0;
  // A QP that takes its receives from an SRQ lives where the SRQ does.
  qp->shard = qp->srq ? qp->srq->shard : &ctx->pick_shard();
  qp->qpn = qp->shard->engine([&](transport::Endpoint& e) {
    uint32_t qpn = 0;
    if (a.qp_type == IBV_QPT_UD) {
      // UD messages are limited to the port's active MTU.
      qpn = e.create_ud_qp(ctx->device->kernel ? q.qp_num : 0, qp->pd->id, qp->send_cq->id, qp->recv_cq->id, srq_id,
                           qp->config, ib_mtu_bytes(ctx->active_mtu));
    } else {
      qpn = ctx->device->kernel
                ? e.create_qp_numbered(q.qp_num, qp->pd->id, qp->send_cq->id, qp->recv_cq->id, qp->config, srq_id)
                : e.create_qp(qp->pd->id, qp->send_cq->id, qp->recv_cq->id, qp->config, srq_id);
    }
    if (qpn) qp->shard->qps[qpn] = qp;
    return qpn;
  });
  if (qp->qpn == 0) {
    if (ctx->device->kernel) (void)kernel_destroy_qp(q);
    delete qp;
    errno = ENOMEM;  // QP numbers used up
    return nullptr;
  }
  qp->attr.qp_state = IBV_QPS_RESET;
  qp->attr.cap = qp->cap;
  qp->attr.port_num = 1;
  qp->attr.path_mtu = ctx->active_mtu;

  // What libibverbs' ibv_create_qp() would fill in; ibv_create_qp_ex() calls
  // the provider directly, so do it here for both.
  q.context = context;
  q.qp_context = a.qp_context;
  q.pd = pd;
  q.send_cq = a.send_cq;
  q.recv_cq = a.recv_cq;
  q.srq = a.srq;
  q.handle = ctx->device->kernel ? qp->kernel_handle : qp->qpn;
  q.qp_num = qp->qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = a.qp_type;
  q.events_completed = 0;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);

  register_event_object(*ctx, reinterpret_cast<uintptr_t>(&q), qp->events);
  if ((a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0) {
    qp->send_ops_flags = a.send_ops_flags;
    qp->vqp.comp_mask |= VERBS_QP_EX;
    install_wr_api(qp);
  }
  return &q;
}

}  // namespace

ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ibv_qp_init_attr_ex a{};
  a.qp_context = attr->qp_context;
  a.send_cq = attr->send_cq;
  a.recv_cq = attr->recv_cq;
  a.srq = attr->srq;
  a.cap = attr->cap;
  a.qp_type = attr->qp_type;
  a.sq_sig_all = attr->sq_sig_all;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd;
  ibv_qp* qp = create(context_of(pd->context), pd->context, pd, a);
  if (qp) attr->cap = qp_of(qp)->cap;
  return qp;
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (attr->comp_mask & ~kKnown) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD)) {
    errno = EINVAL;
    return nullptr;
  }
  const uint64_t supported = attr->qp_type == IBV_QPT_UD ? kSupportedUdSendOps : kSupportedSendOps;
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (attr->send_ops_flags & ~supported)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  ibv_qp* qp = create(context_of(context), context, attr->pd, *attr);
  if (qp) attr->cap = qp_of(qp)->cap;
  return qp;
}

int modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  Qp* qp = qp_of(ibqp);
  Context* ctx = qp->ctx;
  std::lock_guard<std::mutex> lock(qp->mutex);
  // The engine may have moved the QP to ERROR on its own (a failed request).
  const std::optional<transport::QpState> engine_state =
      qp->shard->engine([&](transport::Endpoint& e) { return e.qp_state(qp->qpn); });
  if (!engine_state) return EINVAL;
  const ibv_qp_state cur = from_engine(*engine_state);
  ibv_qp_state next = cur;
  if (const int err = qp_modify_check(qp->type, cur, *attr, mask, next)) return err;
  if (const int err = check_address_vector(*ctx, *attr, mask)) return err;
  if (ctx->device->kernel) {
    // The kernel keeps the state of record and has the last word (it also
    // checks the source GID index and resolves the peer).
    sockaddr_storage unused{};
    if (qp->type == IBV_QPT_RC && cur == IBV_QPS_INIT && next == IBV_QPS_RTR &&
        !peer_address(*ctx, attr->ah_attr, attr->dest_qp_num, unused))
      return EINVAL;
    struct ibv_modify_qp cmd {};
    if (const int err = ibv_cmd_modify_qp(ibqp, attr, mask, &cmd, sizeof cmd)) return err;
  }

  const ibv_qp_attr previous = qp->attr;
  const transport::QpConfig previous_config = qp->config;
  remember(*qp, *attr, mask);

  transport::QpModify modify{.next = to_engine(next), .config = qp->config};
  if (qp->type == IBV_QPT_UD && (mask & IBV_QP_QKEY)) modify.qkey = attr->qkey;
  if (qp->type == IBV_QPT_RC && cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    sockaddr_storage peer_addr{};
    if (!peer_address(*ctx, attr->ah_attr, attr->dest_qp_num, peer_addr)) {
      qp->attr = previous;
      qp->config = previous_config;
      return EINVAL;
    }
    modify.peer = qp->shard->runtime->peer_for(peer_addr);
    modify.remote_qpn = attr->dest_qp_num;
    if (!ctx->route_peer(*qp->shard, modify.peer, peer_addr)) {
      qp->attr = previous;
      qp->config = previous_config;
      return EACCES;  // authenticate/encrypt mode without a key for the peer
    }
  }
  const transport::PostResult r =
      qp->shard->engine([&](transport::Endpoint& e) { return e.modify_qp(qp->qpn, modify); });
  if (r == transport::PostResult::Ok && modify.peer != 0) qp->peer = modify.peer;
  if (r == transport::PostResult::Ok && next == IBV_QPS_RESET) {
    const ibv_qp_cap cap = qp->cap;
    qp->attr = ibv_qp_attr{};
    qp->attr.cap = cap;
    qp->attr.port_num = 1;
    qp->attr.path_mtu = ctx->active_mtu;
    qp->peer = 0;
  }
  if (r != transport::PostResult::Ok) {
    qp->attr = previous;
    qp->config = previous_config;
    return errno_of(r);
  }
  qp->state = next;
  qp->attr.qp_state = next;
  qp->attr.cur_qp_state = next;
  return 0;
}

int query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int /*attr_mask*/, ibv_qp_init_attr* init_attr) {
  Qp* qp = qp_of(ibqp);
  std::lock_guard<std::mutex> lock(qp->mutex);
  const std::optional<transport::QpState> s =
      qp->shard->engine([&](transport::Endpoint& e) { return e.qp_state(qp->qpn); });
  if (!s) return EINVAL;
  *attr = qp->attr;
  attr->qp_state = from_engine(*s);
  attr->cur_qp_state = attr->qp_state;
  attr->cap = qp->cap;
  attr->sq_draining = 0;
  if (init_attr) {
    *init_attr = ibv_qp_init_attr{};
    init_attr->qp_context = ibqp->qp_context;
    init_attr->send_cq = ibqp->send_cq;
    init_attr->recv_cq = ibqp->recv_cq;
    init_attr->srq = ibqp->srq;
    init_attr->cap = qp->cap;
    init_attr->qp_type = ibqp->qp_type;
    init_attr->sq_sig_all = qp->sq_sig_all ? 1 : 0;
  }
  return 0;
}

int destroy_qp(ibv_qp* ibqp) {
  Qp* qp = qp_of(ibqp);
  Context* ctx = qp->ctx;
  // No event is written for the QP once it is off the map. As the kernel
  // does: once the QP is gone, its events that nobody has read are dropped,
  // and destroy waits for the application to acknowledge those it read.
  Shard& shard = *qp->shard;
  shard.engine([&](transport::Endpoint&) { shard.qps.erase(qp->qpn); });
  if (ctx->device->kernel) {
    if (const int err = kernel_destroy_qp(*ibqp)) {
      shard.engine([&](transport::Endpoint&) { shard.qps[qp->qpn] = qp; });
      return err;
    }
  }
  const uint64_t element = reinterpret_cast<uintptr_t>(ibqp);
  const transport::PostResult r = shard.engine([&](transport::Endpoint& e) {
    const transport::PostResult result = e.destroy_qp(qp->qpn);
    if (result == transport::PostResult::Ok) discard_async_events(*ctx, element, qp->events);
    return result;
  });
  if (r != transport::PostResult::Ok) return errno_of(r);
  retire_event_object(*ctx, element, qp->events, ibqp->mutex, ibqp->cond, ibqp->events_completed);
  pthread_mutex_destroy(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  delete qp;
  return 0;
}

int query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) {
  // Data is placed as packets arrive, over several paths: never in order.
  return 0;
}

}  // namespace metaroce::verbs
