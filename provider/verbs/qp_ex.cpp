// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The ibv_wr_* work request API of struct ibv_qp_ex (what perftest uses by
// default): builders and setters collect work requests between
// ibv_wr_start() and ibv_wr_complete(), which hands them to the engine under
// one lock. Inline data is copied when it is set, so the caller's buffer is
// free as soon as ibv_wr_set_inline_data*() returns.
#include <endian.h>

#include <cerrno>
#include <cstring>

#include "provider.h"
#include "ud_queue_pair.h"

namespace metaroce::verbs {
namespace {

using transport::SendWr;
using transport::WrOpcode;

Qp* Q(ibv_qp_ex* q) { return qp_of(q); }

void add(ibv_qp_ex* q, WrOpcode op) {
  Qp* qp = Q(q);
  SendWr s;
  s.wr_id = q->wr_id;
  s.opcode = op;
  s.signaled = (q->wr_flags & IBV_SEND_SIGNALED) || qp->sq_sig_all;
  qp->pending.push_back(s);
  qp->pending_ud.emplace_back();
}

SendWr* last(ibv_qp_ex* q) {
  Qp* qp = Q(q);
  if (qp->pending.empty()) {
    qp->pending_error = EINVAL;  // a setter without a builder
    return nullptr;
  }
  return &qp->pending.back();
}

void unsupported(Qp* qp) { qp->pending_error = EOPNOTSUPP; }

void wr_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, uint64_t compare, uint64_t swap) {
  add(q, WrOpcode::CompareSwap);
  SendWr& s = Q(q)->pending.back();
  s.rkey = rkey;
  s.remote_addr = remote_addr;
  s.compare_add = compare;
  s.swap = swap;
}

void wr_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, uint64_t add_value) {
  add(q, WrOpcode::FetchAdd);
  SendWr& s = Q(q)->pending.back();
  s.rkey = rkey;
  s.remote_addr = remote_addr;
  s.compare_add = add_value;
}

void wr_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr) {
  add(q, WrOpcode::RdmaRead);
  SendWr& s = Q(q)->pending.back();
  s.rkey = rkey;
  s.remote_addr = remote_addr;
}

void wr_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr) {
  add(q, WrOpcode::RdmaWrite);
  SendWr& s = Q(q)->pending.back();
  s.rkey = rkey;
  s.remote_addr = remote_addr;
}

void wr_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t remote_addr, __be32 imm) {
  add(q, WrOpcode::RdmaWriteWithImm);
  SendWr& s = Q(q)->pending.back();
  s.rkey = rkey;
  s.remote_addr = remote_addr;
  s.imm = be32toh(imm);
}

void wr_send(ibv_qp_ex* q) { add(q, WrOpcode::Send); }

void wr_send_imm(ibv_qp_ex* q, __be32 imm) {
  add(q, WrOpcode::SendWithImm);
  Q(q)->pending.back().imm = be32toh(imm);
}

void wr_bind_mw(ibv_qp_ex* q, ibv_mw*, uint32_t, const ibv_mw_bind_info*) { unsupported(Q(q)); }
void wr_local_inv(ibv_qp_ex* q, uint32_t) { unsupported(Q(q)); }
void wr_send_inv(ibv_qp_ex* q, uint32_t) { unsupported(Q(q)); }
void wr_send_tso(ibv_qp_ex* q, void*, uint16_t, uint16_t) { unsupported(Q(q)); }
void wr_set_ud_addr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  Qp* qp = Q(q);
  if (qp->type != IBV_QPT_UD || !last(q)) {
    qp->pending_error = EINVAL;
    return;
  }
  qp->pending_ud.back() = {ah, remote_qpn, remote_qkey};
}
void wr_set_xrc_srqn(ibv_qp_ex* q, uint32_t) { unsupported(Q(q)); }
void wr_atomic_write(ibv_qp_ex* q, uint32_t, uint64_t, const void*) { unsupported(Q(q)); }

bool may_inline(const SendWr& s) {
  return s.opcode == WrOpcode::Send || s.opcode == WrOpcode::SendWithImm || s.opcode == WrOpcode::RdmaWrite ||
         s.opcode == WrOpcode::RdmaWriteWithImm;
}

void set_inline(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* bufs) {
  Qp* qp = Q(q);
  SendWr* s = last(q);
  if (!s) return;
  size_t total = 0;
  for (size_t i = 0; i < num_buf; ++i) total += bufs[i].length;
  if (!may_inline(*s) || total > qp->cap.max_inline_data) {
    qp->pending_error = EINVAL;
    return;
  }
  std::vector<uint8_t>& copy = qp->pending_inline.emplace_back(total);
  size_t at = 0;
  for (size_t i = 0; i < num_buf; ++i) {
    if (bufs[i].length) std::memcpy(copy.data() + at, bufs[i].addr, bufs[i].length);
    at += bufs[i].length;
  }
  s->inline_data = true;
  s->num_sge = total ? 1 : 0;
  s->sg[0] = {reinterpret_cast<uintptr_t>(copy.data()), static_cast<uint32_t>(total), 0};
}

void wr_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) {
  const ibv_data_buf buf{addr, length};
  set_inline(q, 1, &buf);
}

void wr_set_inline_data_list(ibv_qp_ex* q, size_t num_buf, const ibv_data_buf* buf_list) {
  set_inline(q, num_buf, buf_list);
}

void wr_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  SendWr* s = last(q);
  if (!s) return;
  s->num_sge = 1;
  s->sg[0] = {addr, length, lkey};
}

void wr_set_sge_list(ibv_qp_ex* q, size_t num_sge, const ibv_sge* sg_list) {
  Qp* qp = Q(q);
  SendWr* s = last(q);
  if (!s) return;
  if (num_sge > qp->cap.max_send_sge) {
    qp->pending_error = EINVAL;
    return;
  }
  s->num_sge = static_cast<uint32_t>(num_sge);
  for (size_t i = 0; i < num_sge; ++i) s->sg[i] = {sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
}

void clear(Qp* qp) {
  qp->pending.clear();
  qp->pending_ud.clear();
  qp->pending_inline.clear();
  qp->pending_error = 0;
}

void wr_start(ibv_qp_ex* q) { clear(Q(q)); }

void wr_abort(ibv_qp_ex* q) { clear(Q(q)); }

int wr_complete(ibv_qp_ex* q) {
  Qp* qp = Q(q);
  int err = qp->pending_error;
  if (!err) {
    for (const SendWr& s : qp->pending) {
      const bool atomic = s.opcode == WrOpcode::CompareSwap || s.opcode == WrOpcode::FetchAdd;
      if (atomic && (s.num_sge != 1 || s.sg[0].length != 8 || (s.remote_addr & 7))) err = EINVAL;
    }
  }
  if (!err && qp->type == IBV_QPT_UD) {
    std::vector<transport::UdSendWr> sends;
    for (size_t i = 0; i < qp->pending.size() && !err; ++i) {
      const Qp::UdAddress& a = qp->pending_ud[i];
      const transport::SendWr& s = qp->pending[i];
      if (!a.ah || a.ah->context != q->qp_base.context || (a.remote_qpn & 0xfff) == 0 || a.remote_qpn > 0xffffff ||
          (s.opcode != WrOpcode::Send && s.opcode != WrOpcode::SendWithImm) ||
          transport::sge_total_length({s.sg.data(), s.num_sge}) > ib_mtu_bytes(qp->ctx->active_mtu)) {
        err = EINVAL;
        break;
      }
      transport::UdSendWr u;
      u.wr = s;
      u.remote_qpn = a.remote_qpn;
      u.remote_qkey = a.remote_qkey;
      u.peer = ud_peer(*qp, *ah_of(a.ah), a.remote_qpn);
      sends.push_back(u);
    }
    if (!err) {
      qp->shard->engine([&](transport::Endpoint& e) {
        for (const transport::UdSendWr& u : sends) {
          const transport::PostResult r = e.post_send_ud(qp->qpn, u);
          if (r != transport::PostResult::Ok) {
            err = errno_of(r);
            return;
          }
        }
      });
    }
  } else if (!err && !qp->pending.empty()) {
    qp->shard->engine([&](transport::Endpoint& e) {
      for (const SendWr& s : qp->pending) {
        const transport::PostResult r = e.post_send(qp->qpn, s);
        if (r != transport::PostResult::Ok) {
          err = errno_of(r);
          return;
        }
      }
    });
  }
  clear(qp);
  return err;
}

}  // namespace

void install_wr_api(Qp* qp) {
  ibv_qp_ex& q = qp->vqp.qp_ex;
  q.comp_mask = 0;
  q.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  q.wr_atomic_fetch_add = wr_atomic_fetch_add;
  q.wr_bind_mw = wr_bind_mw;
  q.wr_local_inv = wr_local_inv;
  q.wr_rdma_read = wr_rdma_read;
  q.wr_rdma_write = wr_rdma_write;
  q.wr_rdma_write_imm = wr_rdma_write_imm;
  q.wr_send = wr_send;
  q.wr_send_imm = wr_send_imm;
  q.wr_send_inv = wr_send_inv;
  q.wr_send_tso = wr_send_tso;
  q.wr_set_ud_addr = wr_set_ud_addr;
  q.wr_set_xrc_srqn = wr_set_xrc_srqn;
  q.wr_set_inline_data = wr_set_inline_data;
  q.wr_set_inline_data_list = wr_set_inline_data_list;
  q.wr_set_sge = wr_set_sge;
  q.wr_set_sge_list = wr_set_sge_list;
  q.wr_start = wr_start;
  q.wr_complete = wr_complete;
  q.wr_abort = wr_abort;
  q.wr_atomic_write = wr_atomic_write;
}

}  // namespace metaroce::verbs
