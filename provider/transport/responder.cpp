// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The responder: requests placed at their final address as they arrive,
// completed in msn order, READs and atomics executed in that order and their
// responses owed.
#include "queue_pair.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "connection.h"
#include "endpoint.h"
#include "sequence_number.h"
#include "shared_receive_queue.h"

namespace metaroce::transport {
namespace {

constexpr size_t kAtomicResultCache = 64;
// READs whose response was given up (the source region went away) that a
// resent request still gets a NAK for.
constexpr size_t kAbandonedReads = 16;

}  // namespace

PostResult QueuePair::post_recv(const RecvWr& wr) { return post_own_recv(wr, config_.max_recv_wr); }

const RecvWr* QueuePair::receive_for(uint32_t index) {
  if (index < recv_consumed_) return nullptr;
  const uint64_t slot = index - recv_consumed_;
  while (srq_ && slot >= recv_queue_.size()) {
    bool limit_reached = false;
    std::optional<RecvWr> wqe = srq_->take(limit_reached);
    if (limit_reached) endpoint_.notify({AsyncEventKind::SrqLimitReached, srq_->id()});
    if (!wqe) break;
    recv_queue_.push_back(*wqe);
  }
  return slot < recv_queue_.size() ? &recv_queue_[slot] : nullptr;
}

bool QueuePair::source_readable(const ChunkRef& ref) {
  OutboundMessage* m = find_message(ref);
  if (!m || m->uses_owned) return true;
  const uint32_t bytes = payload_of(*m, ref.chunk);
  if (bytes == 0) return true;
  const MemoryRegistry& memory = endpoint_.memory();
  if (m->uses_source_addr)
    return memory.remote_chunk_ok(m->sources_readable_at, m->source_rkey, pd_, m->source_addr, m->length,
                                  uint64_t{ref.chunk} * mtu(), bytes, kAccessRemoteRead);
  if (m->sources_readable_at == memory.epoch()) return true;
  if (memory.check_sges(sges_of(*m), pd_, false) != AccessCheck::Ok) return false;
  m->sources_readable_at = memory.epoch();
  return true;
}

void QueuePair::abandon_source(const ChunkRef& ref) {
  if (!ref.response) {
    OutboundMessage* m = find_request(ref.msn);
    if (!m || m->done) return;
    finish(*m, WcStatus::LocalProtectionError);
    advance_requester();
    return;
  }
  auto it = responses_.find(ref.msn);
  if (it == responses_.end()) return;
  const wire::Nak n = make_nak(wire::NakKind::RemoteAccess, ref.msn, it->second.attempt);
  responses_.erase(it);
  // A copy of the request that arrives later (the requester's NAK was lost
  // and it resends) is NAKed again.
  abandoned_.push_back(n);
  if (abandoned_.size() > kAbandonedReads) abandoned_.pop_front();
  connection_->queue_nak(0, n);
}

// --- requests arriving at the responder --------------------------------------

wire::Nak QueuePair::make_nak(wire::NakKind kind, uint32_t msn, uint16_t attempt) const {
  wire::Nak n;
  n.kind = kind;
  n.attempt = attempt;
  n.qpn = remote_qpn_;
  n.msn = msn;
  if (kind == wire::NakKind::ReceiverNotReady) n.rnr_delay_ns = static_cast<uint32_t>(config_.min_rnr_timer_ns);
  return n;
}

void QueuePair::nak(wire::NakKind kind, const wire::Packet& p) {
  wire::Nak n = make_nak(kind, p.data.msn, p.data.attempt);
  n.data_path_id = p.common.path_id;
  connection_->queue_nak(p.common.path_id, n);
}

// At most one NAK per attempt of the request, and one for every packet that
// asks for an ACK: a lost NAK is repaired by the requester's next attempt
// or tail probe, and a flood of packets gets no flood of NAKs.
bool QueuePair::nak_due(int& naked_attempt, const wire::Packet& p) {
  if (naked_attempt == p.data.attempt && !(p.data.flags & wire::kFlagAckRequest)) return false;
  naked_attempt = p.data.attempt;
  return true;
}

Verdict QueuePair::fail_request(InboundMessage& m, RequestFailure failure, const wire::Packet& p) {
  m.failure = failure;
  if (nak_due(m.naked_attempt, p)) nak(failure.nak, p);
  // The stream goes to the error state when it reaches the message.
  if (p.data.msn == completed_msn_ + 1) advance_responder();
  return verdict_of(failure);
}

// READs and atomics this responder still has to execute or whose response
// it has not sent in full. Each is outstanding at the requester too, so an
// honest requester never has more than its max_rd_atomic here.
uint32_t QueuePair::rd_atomic_outstanding() const {
  uint32_t n = 0;
  for (const auto& [msn, response] : responses_)
    if (!response.all_sent()) ++n;
  for (const auto& [msn, m] : inbound_)
    if (wire::needs_response(m.opcode) && !m.failure) ++n;
  return n;
}

Verdict QueuePair::check_new_inbound(const wire::Packet& p, InboundMessage& m) {
  const wire::DataHeader& h = p.data;
  m.opcode = h.opcode;
  m.length = h.msg_length;
  m.recv_index = h.recv_index;
  m.remote_addr = h.remote_addr;
  m.rkey = h.rkey;
  m.imm = h.imm;
  m.src_qpn = h.src_qpn;
  m.read = p.read;
  m.atomic = p.atomic;
  const MemoryRegistry& memory = endpoint_.memory();
  const RequestFailure access{wire::NakKind::RemoteAccess};
  switch (h.opcode) {
    // A zero-length RDMA operation touches no memory: its key is not checked
    // (IB spec, as rxe and mlx5 do).
    case wire::Opcode::Write:
    case wire::Opcode::WriteImm:
      if (h.msg_length != 0 &&
          memory.check_remote(h.rkey, pd_, h.remote_addr, h.msg_length, kAccessRemoteWrite) != AccessCheck::Ok)
        m.failure = access;
      break;
    case wire::Opcode::ReadRequest:
      if (h.msg_length != 0 &&
          memory.check_remote(h.rkey, pd_, h.remote_addr, h.msg_length, kAccessRemoteRead) != AccessCheck::Ok)
        m.failure = access;
      break;
    case wire::Opcode::FetchAdd:
    case wire::Opcode::CompareSwap:
      if (memory.check_remote(h.rkey, pd_, h.remote_addr, 8, kAccessRemoteAtomic) != AccessCheck::Ok)
        m.failure = access;
      break;
    default: break;
  }
  if (h.msg_length > kMaxMessageBytes) m.failure = RequestFailure{wire::NakKind::InvalidRequest};
  if (!m.failure && wire::needs_response(h.opcode) && rd_atomic_outstanding() >= config_.max_dest_rd_atomic) {
    ++endpoint_.counters_.rd_atomic_limit_refusals;
    m.failure = RequestFailure{wire::NakKind::InvalidRequest};
  }
  if (!m.failure && wire::consumes_receive(h.opcode)) {
    const int32_t slot = static_cast<int32_t>(h.recv_index - recv_consumed_);
    // Each earlier incomplete message consumes at most one receive: an
    // ordinal further ahead is a lie (it would bind a shared queue's WQEs).
    const bool beyond = slot >= 0 && static_cast<uint32_t>(slot) >= h.msn - completed_msn_;
    const RecvWr* wqe = slot < 0 || beyond ? nullptr : receive_for(h.recv_index);
    if (slot < 0 || beyond) {
      m.failure = RequestFailure{wire::NakKind::InvalidRequest};  // a receive already consumed, or a lie
    } else if (!wqe) {
      return Verdict::ReceiverNotReady;
    } else {
      const bool send = h.opcode == wire::Opcode::Send || h.opcode == wire::Opcode::SendImm;
      if (send && h.msg_length > sge_total_length(sges_of(*wqe)))
        m.failure = RequestFailure{wire::NakKind::InvalidRequest, WcStatus::LocalLengthError};
      else if (send && memory.check_sges(sges_of(*wqe), pd_, true) != AccessCheck::Ok)
        m.failure = RequestFailure{wire::NakKind::RemoteOperational, WcStatus::LocalProtectionError};
    }
  }
  // A failed request never places a chunk: no state is kept for its chunks,
  // however long it claims to be.
  if (!m.failure) m.received.reset(wire::carries_payload(h.opcode) ? chunk_count(h.msg_length, mtu()) : 1);
  return Verdict::Placed;
}

// A WRITE's final chunk lands only once the WRITE's other chunks and every
// earlier message have: a program that spins on the last byte of a buffer
// instead of reading a completion (rsockets' riostream; eager protocols that
// poll a flag at a message's end) then sees the whole message when it sees
// that byte, as it would from an RDMA NIC that places packets in order, and
// the region is no longer written once it has seen it (riostream unmaps it).
// The other chunks are placed as they arrive.
bool QueuePair::defer_tail(const wire::Packet& p, const InboundMessage& m, uint32_t chunk) const {
  return chunk + 1 == m.received.size() &&
         !(p.data.msn == completed_msn_ + 1 && m.received.count() + 1 == m.received.size());
}

std::optional<RequestFailure> QueuePair::write_tail(uint32_t msn, InboundMessage& m) {
  const uint64_t dest = m.remote_addr + uint64_t{m.received.size() - 1} * mtu();
  // The region may have been deregistered since the chunk arrived.
  if (endpoint_.memory().check_remote(m.rkey, pd_, dest, m.deferred_tail.size(), kAccessRemoteWrite) != AccessCheck::Ok)
    return RequestFailure{wire::NakKind::RemoteAccess};
  write_chunk(msn, dest, m.deferred_tail);
  endpoint_.counters_.placed_bytes += m.deferred_tail.size();
  m.deferred_tail = {};
  return std::nullopt;
}

// RDMA WRITEs of one QP take effect in order (IB's ordering rules): where a
// later WRITE, not complete yet, already placed its bytes, a late chunk of an
// earlier one (a retransmission, or a packet overtaken on another path)
// leaves them alone.
void QueuePair::write_chunk(uint32_t msn, uint64_t dest, std::span<const uint8_t> payload) {
  const uint64_t end = dest + payload.size();
  std::vector<std::pair<uint64_t, uint64_t>> newer;  // [begin, end) that later WRITEs placed
  if (inbound_.size() > 1) {
    for (const auto& [other_msn, later] : inbound_) {
      // A zero-length WRITE places nothing (and its range would underflow).
      if (!seq_after(other_msn, msn) || later.failure || later.length == 0 ||
          (later.opcode != wire::Opcode::Write && later.opcode != wire::Opcode::WriteImm))
        continue;
      const uint64_t later_end = later.remote_addr + later.length;
      if (later.remote_addr >= end || later_end <= dest) continue;
      const uint64_t first = (std::max(dest, later.remote_addr) - later.remote_addr) / mtu();
      const uint64_t last = (std::min(end, later_end) - 1 - later.remote_addr) / mtu();
      for (uint64_t c = first; c <= last; ++c) {
        if (!later.received.test(static_cast<uint32_t>(c))) continue;
        const uint64_t begin = later.remote_addr + c * mtu();
        newer.emplace_back(std::max(begin, dest), std::min({begin + mtu(), later_end, end}));
      }
    }
  }
  std::sort(newer.begin(), newer.end());
  uint64_t at = dest;
  for (const auto& [skip_begin, skip_end] : newer) {
    if (skip_begin > at)
      std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(at)), payload.data() + (at - dest), skip_begin - at);
    at = std::max(at, skip_end);
  }
  if (at < end)
    std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(at)), payload.data() + (at - dest), end - at);
}

std::optional<RequestFailure> QueuePair::place_request_chunk(const wire::Packet& p, InboundMessage& m, uint32_t chunk) {
  const wire::DataHeader& h = p.data;
  if (!p.payload.empty()) {
    if (h.opcode == wire::Opcode::Write || h.opcode == wire::Opcode::WriteImm) {
      // Checked for every packet, since the region may have been deregistered
      // meanwhile (the packet's rkey and address are the message's: on_request).
      if (!endpoint_.memory().remote_chunk_ok(m.target_writable_at, m.rkey, pd_, m.remote_addr, m.length, h.offset,
                                              p.payload.size(), kAccessRemoteWrite))
        return RequestFailure{wire::NakKind::RemoteAccess};
      if (defer_tail(p, m, chunk)) {
        m.deferred_tail.assign(p.payload.begin(), p.payload.end());
        ++endpoint_.counters_.write_tails_deferred;
        m.received.set(chunk);
        return std::nullopt;
      }
      write_chunk(h.msn, h.remote_addr + h.offset, p.payload);
    } else {
      // The receive this message was bound to may have been consumed since
      // by another message claiming the same index (a lying peer).
      const int32_t slot = static_cast<int32_t>(h.recv_index - recv_consumed_);
      if (slot < 0 || static_cast<size_t>(slot) >= recv_queue_.size())
        return RequestFailure{wire::NakKind::InvalidRequest};
      const RecvWr& wr = recv_queue_[static_cast<size_t>(slot)];
      if (endpoint_.memory().check_sges(sges_of(wr), pd_, true) != AccessCheck::Ok)
        return RequestFailure{wire::NakKind::RemoteOperational, WcStatus::LocalProtectionError};
      if (!scatter_to_sges(sges_of(wr), h.offset, p.payload))
        return RequestFailure{wire::NakKind::InvalidRequest, WcStatus::LocalLengthError};
    }
    endpoint_.counters_.placed_bytes += p.payload.size();
  }
  m.received.set(chunk);
  return std::nullopt;
}

Verdict QueuePair::on_duplicate_request(const wire::Packet& p) {
  const wire::DataHeader& h = p.data;
  if (wire::is_atomic(h.opcode)) {
    for (const auto& [msn, original] : atomic_results_) {
      if (msn != h.msn) continue;
      if (!responses_.count(msn)) {
        queue_atomic_response(msn, original);
        ++endpoint_.counters_.atomic_replays;
      }
      break;
    }
  } else if (h.opcode == wire::Opcode::ReadRequest) {
    for (wire::Nak& n : abandoned_) {
      if (n.msn != h.msn) continue;
      if (n.attempt != h.attempt || (h.flags & wire::kFlagAckRequest)) {
        n.attempt = h.attempt;
        nak(wire::NakKind::RemoteAccess, p);
      }
      return Verdict::AccessError;
    }
  }
  ack_dirty_ = true;
  return Verdict::DuplicateComplete;
}

Verdict QueuePair::on_request(const wire::Packet& p) {
  const wire::DataHeader& h = p.data;
  if (state_ == QpState::Error && fatal_ && fatal_->msn == h.msn) {
    // The request that sent this QP to the error state: its NAK may have
    // been lost, so its packets are NAKed still.
    int naked = fatal_naked_attempt_;
    if (nak_due(naked, p)) nak(fatal_->kind, p);
    fatal_naked_attempt_ = naked;
    return verdict_of(RequestFailure{fatal_->kind});
  }
  if (state_ != QpState::ReadyToReceive && state_ != QpState::ReadyToSend) return Verdict::QpNotReady;
  const int32_t ahead = static_cast<int32_t>(h.msn - completed_msn_);
  // A late copy of a completed message: its buffer may already be reused.
  if (ahead <= 0) return on_duplicate_request(p);
  if (static_cast<uint32_t>(ahead) > endpoint_.config().max_outstanding_messages) return Verdict::OutOfWindow;

  auto it = inbound_.find(h.msn);
  if (it == inbound_.end()) {
    InboundMessage fresh;
    if (check_new_inbound(p, fresh) == Verdict::ReceiverNotReady) {
      if (rnr_nak_msn_ != h.msn || rnr_nak_attempt_ != h.attempt || (h.flags & wire::kFlagAckRequest)) {
        rnr_nak_msn_ = h.msn;
        rnr_nak_attempt_ = h.attempt;
        nak(wire::NakKind::ReceiverNotReady, p);
      }
      return Verdict::ReceiverNotReady;
    }
    it = inbound_.emplace(h.msn, std::move(fresh)).first;
  }
  InboundMessage& m = it->second;
  m.attempt = h.attempt;
  if (m.failure) return fail_request(m, *m.failure, p);
  if (m.opcode != h.opcode || m.length != h.msg_length || m.recv_index != h.recv_index ||
      m.remote_addr != h.remote_addr || m.rkey != h.rkey || m.src_qpn != h.src_qpn)
    return fail_request(m, RequestFailure{wire::NakKind::InvalidRequest}, p);
  uint32_t chunk = 0;
  if (wire::carries_payload(h.opcode)) {
    const uint64_t expected = std::min<uint64_t>(mtu(), h.msg_length - h.offset);
    if (h.offset % mtu() != 0 || p.payload.size() != (h.msg_length ? expected : 0))
      return fail_request(m, RequestFailure{wire::NakKind::InvalidRequest}, p);
    chunk = h.offset / mtu();
  }
  if (m.received.test(chunk)) return Verdict::DuplicateChunk;
  if (const std::optional<RequestFailure> failure = place_request_chunk(p, m, chunk))
    return fail_request(m, *failure, p);
  ack_dirty_ = true;
  if (m.received.full() && h.msn == completed_msn_ + 1) advance_responder();
  return Verdict::Placed;
}

void QueuePair::advance_responder() {
  while (true) {
    auto it = inbound_.find(completed_msn_ + 1);
    if (it == inbound_.end()) return;
    const uint32_t msn = it->first;
    InboundMessage& m = it->second;
    if (m.failure) {
      fail_responder(msn, m);
      return;
    }
    if (!m.received.full()) return;
    if (!m.deferred_tail.empty()) {
      if (const std::optional<RequestFailure> failure = write_tail(msn, m)) {
        m.failure = failure;
        continue;
      }
    }
    if (wire::consumes_receive(m.opcode)) {
      if (m.recv_index != recv_consumed_ || recv_queue_.empty()) {
        m.failure = RequestFailure{wire::NakKind::InvalidRequest};
        continue;
      }
      Completion c;
      c.wr_id = recv_queue_.front().wr_id;
      c.status = WcStatus::Success;
      c.opcode = m.opcode == wire::Opcode::WriteImm ? WcOpcode::RecvRdmaWithImm : WcOpcode::Recv;
      c.byte_len = m.length;
      c.qp_num = qpn_;
      c.src_qp = m.src_qpn;
      c.has_imm = m.opcode != wire::Opcode::Send;
      c.imm = m.imm;
      recv_queue_.pop_front();
      ++recv_consumed_;
      endpoint_.push_completion(recv_cq_, c, /*owes_ack=*/true);
    } else if (m.opcode == wire::Opcode::ReadRequest) {
      execute_read(msn, m);
    } else if (wire::is_atomic(m.opcode) && !execute_atomic(msn, m)) {
      m.failure = RequestFailure{wire::NakKind::RemoteAccess};
      continue;
    }
    inbound_.erase(it);
    completed_msn_ = msn;
    ack_dirty_ = true;
    if (connection_) connection_->on_message_completed();
  }
}

void QueuePair::fail_responder(uint32_t msn, const InboundMessage& m) {
  // As an RDMA NIC's responder does for an invalid request, an access
  // violation or a bad receive WQE: NAK (again: the NAKs sent on arrival
  // may have been lost), complete the receive WQE the message consumed in
  // error, and move the QP to the error state.
  const RequestFailure failure = *m.failure;
  fatal_ = make_nak(failure.nak, msn, m.attempt);
  fatal_naked_attempt_ = m.attempt;
  connection_->queue_nak(0, *fatal_);
  if (wire::consumes_receive(m.opcode) && failure.recv_status != WcStatus::Success && !recv_queue_.empty() &&
      m.recv_index == recv_consumed_) {
    Completion c;
    c.wr_id = recv_queue_.front().wr_id;
    c.status = failure.recv_status;
    c.opcode = WcOpcode::Recv;
    c.qp_num = qpn_;
    c.src_qp = m.src_qpn;
    recv_queue_.pop_front();
    ++recv_consumed_;
    endpoint_.push_completion(recv_cq_, c, /*owes_ack=*/true);
  }
  to_error();
}

void QueuePair::execute_read(uint32_t msn, const InboundMessage& m) {
  OutboundMessage r;
  r.opcode = wire::Opcode::ReadResponse;
  r.msn = msn;
  r.attempt = m.attempt;
  r.length = m.length;
  r.remote_addr = m.read.sink_addr;
  r.rkey = m.read.sink_key;
  r.source_addr = m.remote_addr;
  r.source_rkey = m.rkey;
  r.uses_source_addr = true;
  r.chunks = chunk_count(m.length, mtu());
  r.acked.reset(r.chunks);
  responses_.emplace(msn, std::move(r));
}

bool QueuePair::execute_atomic(uint32_t msn, const InboundMessage& m) {
  // Validated on arrival; the region is checked again since it may be gone.
  if (endpoint_.memory().check_remote(m.rkey, pd_, m.remote_addr, 8, kAccessRemoteAtomic) != AccessCheck::Ok)
    return false;
  // Atomic against the local CPU as well (verbs' IBV_ATOMIC_HCA at best).
  auto* target = reinterpret_cast<uint64_t*>(static_cast<uintptr_t>(m.remote_addr));
  uint64_t original;
  if (m.opcode == wire::Opcode::FetchAdd) {
    original = __atomic_fetch_add(target, m.atomic.compare_add, __ATOMIC_SEQ_CST);
  } else {
    original = m.atomic.compare_add;
    __atomic_compare_exchange_n(target, &original, m.atomic.swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
  ++endpoint_.counters_.atomics_executed;
  atomic_results_.push_back({msn, original});
  if (atomic_results_.size() > kAtomicResultCache) atomic_results_.pop_front();
  queue_atomic_response(msn, original);
  return true;
}

void QueuePair::queue_atomic_response(uint32_t msn, uint64_t original) {
  OutboundMessage r;
  r.opcode = wire::Opcode::AtomicResponse;
  r.msn = msn;
  r.length = 8;
  r.atomic_original = original;
  r.chunks = 1;
  r.acked.reset(1);
  responses_.insert_or_assign(msn, std::move(r));
}

}  // namespace metaroce::transport
