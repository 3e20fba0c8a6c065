// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The responder: requests placed at their final address as they arrive,
// completed in msn order, READs and atomics executed in that order and their
// responses owed.
#include "queue_pair.h"

#include <algorithm>
#include <cstring>

#include "connection.h"
#include "endpoint.h"
#include "shared_receive_queue.h"

namespace metaroce::transport {
namespace {

constexpr size_t kAtomicResultCache = 64;

}  // namespace

PostResult QueuePair::post_recv(const RecvWr& wr) {
  if (srq_) return PostResult::InvalidArgument;  // its receives come from the SRQ
  if (state_ == QpState::Reset) return PostResult::BadState;
  if (wr.num_sge > kMaxSge) return PostResult::InvalidArgument;
  if (recv_queue_.size() >= config_.max_recv_wr) return PostResult::QueueFull;
  if (state_ == QpState::Error) {
    Completion c;
    c.wr_id = wr.wr_id;
    c.status = WcStatus::WorkRequestFlushed;
    c.opcode = WcOpcode::Recv;
    c.qp_num = qpn_;
    endpoint_.push_completion(recv_cq_, c);
    return PostResult::Ok;
  }
  recv_queue_.push_back(wr);
  return PostResult::Ok;
}

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

bool QueuePair::source_readable(const ChunkRef& ref) const {
  const OutboundMessage* m = find_message(ref);
  if (!m || !m->uses_source_addr || m->length == 0) return true;  // an empty READ reads nothing
  const uint64_t offset = uint64_t{ref.chunk} * mtu();
  return endpoint_.memory().check_remote(m->source_rkey, pd_, m->source_addr + offset,
                                         chunk_payload_bytes(ref), kAccessRemoteRead) == AccessCheck::Ok;
}

void QueuePair::abandon_response(const ChunkRef& ref) {
  if (!ref.response || !responses_.erase(ref.msn)) return;
  wire::Nak n;
  n.kind = wire::NakKind::RemoteAccess;
  n.qpn = remote_qpn_;
  n.msn = ref.msn;
  connection_->queue_nak(0, n);
}

// --- requests arriving at the responder --------------------------------------

void QueuePair::nak(wire::NakKind kind, const wire::Packet& p) {
  wire::Nak n;
  n.kind = kind;
  n.attempt = p.data.attempt;
  n.data_path_id = p.common.path_id;
  n.qpn = remote_qpn_;
  n.msn = p.data.msn;
  if (kind == wire::NakKind::ReceiverNotReady) n.rnr_delay_ns = static_cast<uint32_t>(config_.min_rnr_timer_ns);
  connection_->queue_nak(p.common.path_id, n);
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
  // A zero-length RDMA WRITE or READ touches no memory, so its R_Key and
  // address are not checked (IB spec 9.7.4.1.6; UCX flushes with one whose
  // rkey and address are 0).
  switch (h.opcode) {
    case wire::Opcode::Write:
    case wire::Opcode::WriteImm:
      if (h.msg_length != 0 &&
          memory.check_remote(h.rkey, pd_, h.remote_addr, h.msg_length, kAccessRemoteWrite) != AccessCheck::Ok)
        return Verdict::AccessError;
      break;
    case wire::Opcode::ReadRequest:
      if (h.msg_length != 0 &&
          memory.check_remote(h.rkey, pd_, h.remote_addr, h.msg_length, kAccessRemoteRead) != AccessCheck::Ok)
        return Verdict::AccessError;
      break;
    case wire::Opcode::FetchAdd:
    case wire::Opcode::CompareSwap:
      if (memory.check_remote(h.rkey, pd_, h.remote_addr, 8, kAccessRemoteAtomic) != AccessCheck::Ok)
        return Verdict::AccessError;
      break;
    default: break;
  }
  if (wire::consumes_receive(h.opcode)) {
    if (h.recv_index < recv_consumed_) return Verdict::InvalidRequest;
    // Each earlier incomplete message consumes at most one receive: an
    // ordinal further ahead is a lie (it would bind a shared queue's WQEs).
    if (h.recv_index - recv_consumed_ >= h.msn - completed_msn_) return Verdict::InvalidRequest;
    const RecvWr* wqe = receive_for(h.recv_index);
    if (!wqe) return Verdict::ReceiverNotReady;
    if ((h.opcode == wire::Opcode::Send || h.opcode == wire::Opcode::SendImm) &&
        h.msg_length > sge_total_length(sges_of(*wqe)))
      return Verdict::InvalidRequest;
  }
  m.received.reset(wire::carries_payload(h.opcode) ? chunk_count(h.msg_length, mtu()) : 1);
  return Verdict::Placed;
}

Verdict QueuePair::place_request_chunk(const wire::Packet& p, InboundMessage& m, uint32_t chunk) {
  const wire::DataHeader& h = p.data;
  if (!p.payload.empty()) {
    if (h.opcode == wire::Opcode::Write || h.opcode == wire::Opcode::WriteImm) {
      // Re-checked per packet: the region may have been deregistered meanwhile.
      if (endpoint_.memory().check_remote(h.rkey, pd_, h.remote_addr + h.offset, p.payload.size(),
                                          kAccessRemoteWrite) != AccessCheck::Ok)
        return Verdict::AccessError;
      std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(h.remote_addr + h.offset)),
                  p.payload.data(), p.payload.size());
    } else {
      // The receive this message was bound to may have been consumed since
      // by another message claiming the same index (a lying peer).
      if (h.recv_index < recv_consumed_ || h.recv_index - recv_consumed_ >= recv_queue_.size())
        return Verdict::InvalidRequest;
      const RecvWr& wr = recv_queue_[h.recv_index - recv_consumed_];
      if (endpoint_.memory().check_sges(sges_of(wr), pd_, true) != AccessCheck::Ok)
        return Verdict::AccessError;
      if (!scatter_to_sges(sges_of(wr), h.offset, p.payload)) return Verdict::InvalidRequest;
    }
    endpoint_.counters_.placed_bytes += p.payload.size();
  }
  m.received.set(chunk);
  return Verdict::Placed;
}

Verdict QueuePair::on_request(const wire::Packet& p) {
  if (state_ != QpState::ReadyToReceive && state_ != QpState::ReadyToSend) return Verdict::QpNotReady;
  const wire::DataHeader& h = p.data;
  const int32_t ahead = static_cast<int32_t>(h.msn - completed_msn_);
  if (ahead <= 0) {
    // A late copy of a completed message: its buffer may already be reused.
    if (wire::is_atomic(h.opcode)) {
      for (const auto& [msn, original] : atomic_results_) {
        if (msn != h.msn) continue;
        if (!responses_.count(msn)) {
          queue_atomic_response(msn, original);
          ++endpoint_.counters_.atomic_replays;
        }
        break;
      }
    }
    ack_dirty_ = true;
    return Verdict::DuplicateComplete;
  }
  if (static_cast<uint32_t>(ahead) > endpoint_.config().max_outstanding_messages) return Verdict::OutOfWindow;

  auto it = inbound_.find(h.msn);
  if (it == inbound_.end()) {
    InboundMessage fresh;
    const Verdict verdict = check_new_inbound(p, fresh);
    if (verdict != Verdict::Placed) {
      if (verdict == Verdict::ReceiverNotReady) {
        if (rnr_nak_msn_ != h.msn || rnr_nak_attempt_ != h.attempt ||
            (h.flags & wire::kFlagAckRequest)) {
          rnr_nak_msn_ = h.msn;
          rnr_nak_attempt_ = h.attempt;
          nak(wire::NakKind::ReceiverNotReady, p);
        }
      } else {
        nak(verdict == Verdict::AccessError ? wire::NakKind::RemoteAccess : wire::NakKind::InvalidRequest, p);
      }
      return verdict;
    }
    it = inbound_.emplace(h.msn, std::move(fresh)).first;
  }
  InboundMessage& m = it->second;
  if (m.failed) return Verdict::InvalidRequest;
  if (m.opcode != h.opcode || m.length != h.msg_length || m.recv_index != h.recv_index ||
      m.remote_addr != h.remote_addr || m.rkey != h.rkey || m.src_qpn != h.src_qpn) {
    m.failed = true;
    nak(wire::NakKind::InvalidRequest, p);
    return Verdict::InvalidRequest;
  }
  uint32_t chunk = 0;
  if (wire::carries_payload(h.opcode)) {
    const uint64_t expected = std::min<uint64_t>(mtu(), h.msg_length - h.offset);
    if (h.offset % mtu() != 0 || p.payload.size() != (h.msg_length ? expected : 0)) {
      m.failed = true;
      nak(wire::NakKind::InvalidRequest, p);
      return Verdict::InvalidRequest;
    }
    chunk = h.offset / mtu();
  }
  if (m.received.test(chunk)) return Verdict::DuplicateChunk;
  const Verdict placed = place_request_chunk(p, m, chunk);
  if (placed != Verdict::Placed) {
    m.failed = true;
    nak(placed == Verdict::AccessError ? wire::NakKind::RemoteAccess : wire::NakKind::InvalidRequest, p);
    return placed;
  }
  ack_dirty_ = true;
  if (m.received.full() && h.msn == completed_msn_ + 1) advance_responder();
  return Verdict::Placed;
}

void QueuePair::advance_responder() {
  while (true) {
    auto it = inbound_.find(completed_msn_ + 1);
    if (it == inbound_.end() || it->second.failed || !it->second.received.full()) return;
    const uint32_t msn = it->first;
    InboundMessage& m = it->second;
    if (wire::consumes_receive(m.opcode)) {
      if (m.recv_index != recv_consumed_ || recv_queue_.empty()) {
        m.failed = true;
        return;
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
      endpoint_.push_completion(recv_cq_, c);
    } else if (m.opcode == wire::Opcode::ReadRequest) {
      execute_read(msn, m);
    } else if (wire::is_atomic(m.opcode)) {
      execute_atomic(msn, m);
    }
    inbound_.erase(it);
    completed_msn_ = msn;
    ack_dirty_ = true;
    if (connection_) connection_->on_message_completed();
  }
}

void QueuePair::execute_read(uint32_t msn, const InboundMessage& m) {
  OutboundMessage r;
  r.opcode = wire::Opcode::ReadResponse;
  r.msn = msn;
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

void QueuePair::execute_atomic(uint32_t msn, const InboundMessage& m) {
  // Validated on arrival; the region is checked again since it may be gone.
  if (endpoint_.memory().check_remote(m.rkey, pd_, m.remote_addr, 8, kAccessRemoteAtomic) != AccessCheck::Ok)
    return;
  auto* target = reinterpret_cast<uint64_t*>(static_cast<uintptr_t>(m.remote_addr));
  const uint64_t original = *target;
  if (m.opcode == wire::Opcode::FetchAdd) {
    *target = original + m.atomic.compare_add;
  } else if (original == m.atomic.compare_add) {
    *target = m.atomic.swap;
  }
  ++endpoint_.counters_.atomics_executed;
  atomic_results_.emplace_back(msn, original);
  if (atomic_results_.size() > kAtomicResultCache) atomic_results_.pop_front();
  queue_atomic_response(msn, original);
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
