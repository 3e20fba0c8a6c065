// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// ibv_post_send / ibv_post_recv: each list is converted and handed to the
// engine under one engine lock. Errors that verbs reports at post time
// (bad opcode, too many SGEs, inline data too long, QP state, queue full)
// stop the list there with *bad_wr set; errors verbs reports as completions
// (a bad lkey: IBV_WC_LOC_PROT_ERR) come from the engine.
#include <endian.h>

#include <cerrno>
#include <vector>

#include "provider.h"
#include "ud_queue_pair.h"

namespace metaroce::verbs {
namespace {

using transport::WrOpcode;

int convert(const Qp& qp, const ibv_send_wr& wr, transport::SendWr& s) {
  s = transport::SendWr{};
  s.wr_id = wr.wr_id;
  bool may_inline = false;
  switch (wr.opcode) {
    case IBV_WR_RDMA_WRITE:
      s.opcode = WrOpcode::RdmaWrite;
      may_inline = true;
      break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      s.opcode = WrOpcode::RdmaWriteWithImm;
      may_inline = true;
      break;
    case IBV_WR_SEND:
      s.opcode = WrOpcode::Send;
      may_inline = true;
      break;
    case IBV_WR_SEND_WITH_IMM:
      s.opcode = WrOpcode::SendWithImm;
      may_inline = true;
      break;
    case IBV_WR_RDMA_READ: s.opcode = WrOpcode::RdmaRead; break;
    case IBV_WR_ATOMIC_CMP_AND_SWP: s.opcode = WrOpcode::CompareSwap; break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: s.opcode = WrOpcode::FetchAdd; break;
    default: return EINVAL;  // LOCAL_INV, BIND_MW, SEND_WITH_INV, TSO, DRIVER1, ATOMIC_WRITE
  }
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > qp.cap.max_send_sge) return EINVAL;
  if (wr.num_sge > 0 && !wr.sg_list) return EINVAL;
  s.num_sge = static_cast<uint32_t>(wr.num_sge);
  uint64_t total = 0;
  for (uint32_t i = 0; i < s.num_sge; ++i) {
    s.sg[i] = {wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
    total += wr.sg_list[i].length;
  }
  s.signaled = (wr.send_flags & IBV_SEND_SIGNALED) || qp.sq_sig_all;
  s.fence = wr.send_flags & IBV_SEND_FENCE;
  // IBV_SEND_INLINE only means something for SEND and RDMA WRITE.
  if ((wr.send_flags & IBV_SEND_INLINE) && may_inline) {
    if (total > qp.cap.max_inline_data) return EINVAL;
    s.inline_data = true;
  }
  if (wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr.opcode == IBV_WR_SEND_WITH_IMM) s.imm = be32toh(wr.imm_data);
  if (wr.opcode == IBV_WR_RDMA_WRITE || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr.opcode == IBV_WR_RDMA_READ) {
    s.remote_addr = wr.wr.rdma.remote_addr;
    s.rkey = wr.wr.rdma.rkey;
  } else if (wr.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    if (s.num_sge != 1 || total != 8 || (wr.wr.atomic.remote_addr & 7)) return EINVAL;
    s.remote_addr = wr.wr.atomic.remote_addr;
    s.rkey = wr.wr.atomic.rkey;
    s.compare_add = wr.wr.atomic.compare_add;
    s.swap = wr.wr.atomic.swap;
  }
  return 0;
}

// A UD send's destination: its address handle and the QP number, whose
// high bits name the remote context's home port. QP 1 (GSI) is the kernel's
// and is not reachable from a user QP yet.
int ud_destination(Qp& qp, const ibv_send_wr& wr, transport::UdSendWr& u) {
  if (wr.opcode != IBV_WR_SEND && wr.opcode != IBV_WR_SEND_WITH_IMM) return EINVAL;
  const uint32_t qpn = wr.wr.ud.remote_qpn;
  if (!wr.wr.ud.ah || wr.wr.ud.ah->context != qp.vqp.qp.context || qpn > 0xffffff || (qpn & 0xfff) == 0) return EINVAL;
  uint64_t total = 0;
  for (int i = 0; i < wr.num_sge; ++i) total += wr.sg_list[i].length;
  if (total > ib_mtu_bytes(qp.ctx->active_mtu)) return EINVAL;  // a UD message fits one packet
  u.remote_qpn = qpn;
  u.remote_qkey = wr.wr.ud.remote_qkey;
  u.peer = ud_peer(qp, *ah_of(wr.wr.ud.ah), qpn);
  return u.peer ? 0 : EINVAL;
}

}  // namespace

int post_send(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp* qp = qp_of(ibqp);
  int err = 0;
  if (qp->type == IBV_QPT_UD) {
    // Destinations first: peer_for() takes the runtime's peer table lock.
    std::vector<transport::UdSendWr> sends;
    ibv_send_wr* first_bad = nullptr;
    for (ibv_send_wr* w = wr; w; w = w->next) {
      transport::UdSendWr u;
      if ((err = convert(*qp, *w, u.wr)) != 0 || (err = ud_destination(*qp, *w, u)) != 0) {
        first_bad = w;
        break;
      }
      sends.push_back(u);
    }
    ibv_send_wr* at = wr;
    qp->shard->engine([&](transport::Endpoint& e) {
      for (const transport::UdSendWr& u : sends) {
        const transport::PostResult r = e.post_send_ud(qp->qpn, u);
        if (r != transport::PostResult::Ok) {
          err = errno_of(r);
          first_bad = at;
          return;
        }
        at = at->next;
      }
    });
    if (err && bad_wr) *bad_wr = first_bad;
    return err;
  }
  transport::SendWr s;
  qp->shard->engine([&](transport::Endpoint& e) {
    for (; wr; wr = wr->next) {
      if ((err = convert(*qp, *wr, s)) != 0) return;
      const transport::PostResult r = e.post_send(qp->qpn, s);
      if (r != transport::PostResult::Ok) {
        err = errno_of(r);
        return;
      }
    }
  });
  if (err && bad_wr) *bad_wr = wr;
  return err;
}

std::optional<transport::RecvWr> recv_wr_of(const ibv_recv_wr& wr, uint32_t max_sge) {
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > max_sge || (wr.num_sge > 0 && !wr.sg_list))
    return std::nullopt;
  transport::RecvWr r;
  r.wr_id = wr.wr_id;
  r.num_sge = static_cast<uint32_t>(wr.num_sge);
  for (uint32_t i = 0; i < r.num_sge; ++i) r.sg[i] = {wr.sg_list[i].addr, wr.sg_list[i].length, wr.sg_list[i].lkey};
  return r;
}

int post_recv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp* qp = qp_of(ibqp);
  return post_recv_chain(*qp->shard, wr, bad_wr, qp->cap.max_recv_sge,
                         [qp](transport::Endpoint& e, const transport::RecvWr& r) { return e.post_recv(qp->qpn, r); });
}

}  // namespace metaroce::verbs
