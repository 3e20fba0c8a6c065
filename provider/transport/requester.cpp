// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The requester: work requests become outbound messages, which the
// connection asks for chunk by chunk; RNR waits and stalled-message recovery.
#include "queue_pair.h"

#include <algorithm>
#include <cstring>

#include "connection.h"
#include "endpoint.h"

namespace metaroce::transport {

// --- posting ---------------------------------------------------------------

PostResult QueuePair::post_send(const SendWr& wr) {
  if (state_ != QpState::ReadyToSend) {
    // Verbs lets a QP in error accept work and flush it at once.
    if (state_ != QpState::Error) return PostResult::BadState;
  }
  if (wr.num_sge > kMaxSge) return PostResult::InvalidArgument;
  if (send_queue_.size() >= config_.max_send_wr) return PostResult::QueueFull;
  const std::span<const Sge> sges(wr.sg.data(), wr.num_sge);
  const uint64_t length = sge_total_length(sges);
  if (length > kMaxMessageBytes) return PostResult::InvalidArgument;

  // Built in the queue's next slot, committed once valid: no allocation
  // (ring_queue.h).
  OutboundMessage& m = send_queue_.back_slot();
  m.reset_keeping_storage();
  m.wr_id = wr.wr_id;
  m.signaled = wr.signaled;
  m.fence = wr.fence;
  m.length = static_cast<uint32_t>(length);
  m.remote_addr = wr.remote_addr;
  m.rkey = wr.rkey;
  m.num_sge = wr.num_sge;
  m.sg = wr.sg;
  bool local_write = false;
  switch (wr.opcode) {
    case WrOpcode::Send:
      m.opcode = wire::Opcode::Send;
      m.wc_opcode = WcOpcode::Send;
      break;
    case WrOpcode::SendWithImm:
      m.opcode = wire::Opcode::SendImm;
      m.wc_opcode = WcOpcode::Send;
      m.imm = wr.imm;
      break;
    case WrOpcode::RdmaWrite:
      m.opcode = wire::Opcode::Write;
      m.wc_opcode = WcOpcode::RdmaWrite;
      break;
    case WrOpcode::RdmaWriteWithImm:
      m.opcode = wire::Opcode::WriteImm;
      m.wc_opcode = WcOpcode::RdmaWrite;
      m.imm = wr.imm;
      break;
    case WrOpcode::RdmaRead:
      m.opcode = wire::Opcode::ReadRequest;
      m.wc_opcode = WcOpcode::RdmaRead;
      local_write = true;
      break;
    case WrOpcode::FetchAdd:
    case WrOpcode::CompareSwap:
      m.opcode = wr.opcode == WrOpcode::FetchAdd ? wire::Opcode::FetchAdd : wire::Opcode::CompareSwap;
      m.wc_opcode = wr.opcode == WrOpcode::FetchAdd ? WcOpcode::FetchAdd : WcOpcode::CompareSwap;
      m.atomic = {wr.compare_add, wr.opcode == WrOpcode::CompareSwap ? wr.swap : 0};
      local_write = true;
      if (m.length != 8 || (wr.remote_addr % 8) != 0) return PostResult::InvalidArgument;
      break;
    default: return PostResult::InvalidArgument;
  }
  if (wr.inline_data && (local_write || m.opcode == wire::Opcode::ReadRequest)) return PostResult::InvalidArgument;

  if (state_ == QpState::Error) {
    m.done = true;
    m.status = WcStatus::WorkRequestFlushed;
    complete_send_wr(m, m.status);
    return PostResult::Ok;
  }

  if (wr.inline_data) {
    m.owned.resize(m.length);
    if (!gather_from_sges(sges, 0, m.owned)) return PostResult::InvalidArgument;
    m.uses_owned = true;
  } else if (endpoint_.memory().check_sges(sges, pd_, local_write) != AccessCheck::Ok) {
    // Verbs reports a bad local buffer as an error completion, not a post failure.
    m.done = true;
    m.status = WcStatus::LocalProtectionError;
  }

  m.msn = next_msn_++;
  if (wire::consumes_receive(m.opcode)) m.recv_index = next_recv_index_++;
  if (m.opcode == wire::Opcode::ReadRequest) {
    m.read = {m.num_sge ? m.sg[0].addr : 0, m.num_sge ? m.sg[0].lkey : 0};
  }
  m.chunks = m.needs_response() ? 1 : chunk_count(m.length, mtu());
  m.acked.reset(m.chunks);
  m.ever_acked.reset(m.chunks);
  if (m.opcode == wire::Opcode::ReadRequest) m.response_received.reset(chunk_count(m.length, mtu()));
  if (m.done) m.next_chunk = m.chunks;  // never transmitted
  send_queue_.commit_back();
  if (m.done) advance_requester();
  return PostResult::Ok;
}

namespace {

// The remote bytes a request reads or writes.
uint64_t remote_span(const OutboundMessage& m) { return wire::is_atomic(m.opcode) ? 8 : m.length; }

bool writes_remote(wire::Opcode op) {
  return op == wire::Opcode::Write || op == wire::Opcode::WriteImm || wire::is_atomic(op);
}

}  // namespace

// A message waits for earlier READs and atomics to complete: for all of them
// if fenced (IB's fence indicator) or if it is a SEND with bytes (where they
// land, in the peer's receive buffer, is unknown here); for those whose
// remote bytes it overlaps if it writes remote memory (WRITE, atomic). A
// responder executing in order gives that for free; here a later request may
// arrive first, and a READ's data is gathered as its response is sent.
bool QueuePair::held(size_t index) const {
  // Every earlier READ or atomic not done holds a max_rd_atomic slot (or
  // waits out an RNR delay): none, nothing to wait for.
  if (reads_atomics_in_flight_ == 0 && rnr_waiting_ == 0) return false;
  const OutboundMessage& m = send_queue_[index];
  const bool waits_for_all =
      m.fence || ((m.opcode == wire::Opcode::Send || m.opcode == wire::Opcode::SendImm) && m.length != 0);
  if (!waits_for_all && !writes_remote(m.opcode)) return false;
  const uint64_t span = remote_span(m);
  for (size_t i = 0; i < index; ++i) {
    const OutboundMessage& earlier = send_queue_[i];
    if (!earlier.needs_response() || earlier.done) continue;
    if (waits_for_all) return true;
    if (span != 0 && m.remote_addr < earlier.remote_addr + remote_span(earlier) &&
        earlier.remote_addr < m.remote_addr + span)
      return true;
  }
  return false;
}

bool QueuePair::has_new_chunks() const {
  if (state_ == QpState::Error || state_ == QpState::Reset) return false;
  for (const auto& [msn, response] : responses_)
    if (!response.all_sent()) return true;
  if (state_ != QpState::ReadyToSend) return false;
  for (size_t i = send_cursor_; i < send_queue_.size(); ++i) {
    const OutboundMessage& m = send_queue_[i];
    if (m.rnr_wait) return false;
    if (!m.all_sent()) {
      if (held(i)) return false;
      return !(m.needs_response() && !m.holds_rd_atomic && reads_atomics_in_flight_ >= config_.max_rd_atomic);
    }
  }
  return false;
}

bool QueuePair::next_new_chunk(ChunkRef& ref) {
  if (state_ == QpState::Error || state_ == QpState::Reset) return false;
  for (auto& [msn, response] : responses_) {
    if (response.all_sent()) continue;
    ref = {qpn_, msn, response.next_chunk++, response.attempt, true};
    return true;
  }
  if (state_ != QpState::ReadyToSend) return false;
  while (send_cursor_ < send_queue_.size()) {
    OutboundMessage& m = send_queue_[send_cursor_];
    // A message waiting out an RNR delay holds back the messages after it, as
    // an RNR NAK stops a verbs requester.
    if (m.rnr_wait) return false;
    if (m.all_sent()) {
      ++send_cursor_;
      continue;
    }
    if (held(send_cursor_)) return false;
    if (m.needs_response() && !m.holds_rd_atomic) {
      if (reads_atomics_in_flight_ >= config_.max_rd_atomic) return false;
      ++reads_atomics_in_flight_;
      m.holds_rd_atomic = true;
    }
    ref = {qpn_, m.msn, m.next_chunk++, m.attempt, false};
    return true;
  }
  return false;
}

bool QueuePair::chunk_needed(const ChunkRef& ref) const {
  if (state_ == QpState::Error || state_ == QpState::Reset) return false;
  const OutboundMessage* m = find_message(ref);
  if (!m || m->done || m->attempt != ref.attempt || m->rnr_wait) return false;
  return ref.chunk < m->chunks && !m->acked.test(ref.chunk);
}

uint32_t QueuePair::payload_of(const OutboundMessage& m, uint32_t chunk) const {
  if (!wire::carries_payload(m.opcode)) return 0;
  const uint32_t size = mtu();
  const uint64_t offset = uint64_t{chunk} * size;
  if (offset >= m.length) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(size, m.length - offset));
}

size_t QueuePair::build_packet(const ChunkRef& ref, wire::Origin origin, uint32_t path_seq, uint8_t flags,
                               std::span<uint8_t> out, uint32_t* payload_bytes,
                               std::span<const uint8_t>* gathered) const {
  const OutboundMessage* m = find_message(ref);
  if (!m) return 0;
  const uint32_t payload = payload_of(*m, ref.chunk);
  wire::DataHeader h;
  h.path_seq = path_seq;
  h.opcode = m->opcode;
  h.flags = flags;
  h.attempt = m->attempt;
  h.dst_qpn = remote_qpn_;
  h.src_qpn = qpn_;
  h.msn = m->msn;
  h.recv_index = m->recv_index;
  h.msg_length = m->length;
  h.offset = ref.chunk * mtu();
  h.remote_addr = m->remote_addr;
  h.rkey = m->rkey;
  h.imm = m->imm;
  if (h.offset + payload == m->length || payload == 0) h.flags |= wire::kFlagAckRequest;
  const size_t header =
      wire::encode_data(out, origin, h, m->opcode == wire::Opcode::ReadRequest ? &m->read : nullptr,
                        wire::is_atomic(m->opcode) ? &m->atomic : nullptr,
                        m->opcode == wire::Opcode::AtomicResponse ? &m->atomic_original : nullptr, payload);
  if (header == 0) return 0;
  if (payload_bytes) *payload_bytes = payload;
  // A resend copies: the memory of a resent READ response may be gone (read
  // guarded below), and the message it belongs to may complete, and its
  // buffer be reused, before the driver's send reads it.
  if (gathered && payload > 0 && !m->uses_owned && !(flags & wire::kFlagRetransmit)) {
    const uint8_t* at = m->uses_source_addr
                            ? reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(m->source_addr + h.offset))
                            : sge_range(sges_of(*m), h.offset, payload);
    if (at) {
      *gathered = {at, payload};
      return header + payload;
    }
  }
  const std::span<uint8_t> body = out.subspan(header, payload);
  if (payload > 0) {
    if (m->uses_owned) {
      std::memcpy(body.data(), m->owned.data() + h.offset, payload);
    } else if (m->uses_source_addr) {
      // A resent READ response may find the responder's memory freed: the
      // requester may have had every byte, and told the application so.
      const uint64_t source = m->source_addr + h.offset;
      if (flags & wire::kFlagRetransmit) {
        if (!endpoint_.memory().read_guarded(body.data(), source, payload)) return 0;
      } else {
        std::memcpy(body.data(), reinterpret_cast<const void*>(static_cast<uintptr_t>(source)), payload);
      }
    } else if (!gather_from_sges(sges_of(*m), h.offset, body)) {
      return 0;
    }
  }
  return header + payload;
}

void QueuePair::restart(OutboundMessage& m, size_t index) {
  ++m.attempt;
  m.next_chunk = 0;
  m.acked.reset(m.chunks);
  release_rd_atomic(m);
  send_cursor_ = std::min(send_cursor_, index);
}

void QueuePair::release_rd_atomic(OutboundMessage& m) {
  if (!m.holds_rd_atomic) return;
  m.holds_rd_atomic = false;
  --reads_atomics_in_flight_;
}

bool QueuePair::recover_stalled(ChunkRef& ref) {
  for (size_t i = 0; i < send_queue_.size(); ++i) {
    OutboundMessage& m = send_queue_[i];
    if (m.done) continue;
    if (m.rnr_wait || !m.all_sent() || !m.acked.full()) return false;
    if (m.stall_probes++ == 0) {
      ref = {qpn_, m.msn, m.chunks - 1, m.attempt, false};
      return true;
    }
    restart(m, i);
    return false;
  }
  return false;
}

bool QueuePair::has_outstanding_work() const {
  if (state_ == QpState::Error || state_ == QpState::Reset) return false;
  if (!responses_.empty()) return true;
  for (const OutboundMessage& m : send_queue_)
    if (!m.done && !m.rnr_wait) return true;
  return false;
}

// --- the transport timer --------------------------------------------------------

bool QueuePair::requests_outstanding() const {
  if (state_ != QpState::ReadyToSend) return false;
  for (const OutboundMessage& m : send_queue_)
    if (!m.done && !m.rnr_wait && m.next_chunk > 0) return true;
  return false;
}

Time QueuePair::retry_interval() const {
  // A verbs timeout is a fixed interval, so that retry_cnt + 1 of them bound
  // how long a dead peer takes to notice, as on an RDMA NIC (never shorter
  // than the paths' RTO, or every loss would look like a timeout). Without
  // one the engine's RTO doubles per expiry.
  const Time base = connection_ ? connection_->retry_base() : endpoint_.min_rto();
  if (config_.timeout_ns > 0) return std::max(base, config_.timeout_ns);
  return std::min<Time>(base << std::min<uint32_t>(retries_, 10), endpoint_.config().max_rto_ns);
}

void QueuePair::on_request_sent(Time now) {
  if (retry_at_ == kNever) retry_at_ = now + retry_interval();
}

void QueuePair::note_progress(Time now) {
  retries_ = 0;
  retry_at_ = requests_outstanding() ? now + retry_interval() : kNever;
}

bool QueuePair::on_retry_timer(Time now, ChunkRef& ref) {
  if (retry_at_ > now) return false;
  if (!requests_outstanding()) {
    // Only RNR waits or nothing sent yet: the timer starts again with the
    // next request packet.
    retry_at_ = kNever;
    return false;
  }
  if (++retries_ > config_.retry_cnt) {
    retry_at_ = kNever;
    record_retry_exhaustion(now);
    fail_with(WcStatus::RetryExceeded);
    return false;
  }
  retry_at_ = now + retry_interval();
  return recover_stalled(ref);
}

void QueuePair::record_retry_exhaustion(Time now) {
  RetryExhaustion r;
  r.expiries = retries_;
  r.interval_ns = retry_interval();
  for (const OutboundMessage& m : send_queue_) {
    if (m.done) continue;
    r.msn = m.msn;
    r.opcode = m.opcode;
    r.length = m.length;
    r.chunks = m.chunks;
    r.sent = m.next_chunk;
    r.acked = m.acked.count();
    r.ever_acked = m.ever_acked.count();
    r.attempt = m.attempt;
    r.rnr_naks = m.rnr_naks;
    r.stall_probes = m.stall_probes;
    break;
  }
  if (connection_) {
    r.paths = connection_->snapshots();
    if (const Time heard = connection_->last_heard(); heard != 0) r.peer_silent_ns = now - std::min(now, heard);
  }
  retry_exhaustion_ = std::make_unique<RetryExhaustion>(std::move(r));
}

Time QueuePair::next_rnr_resend() const {
  Time earliest = kNever;
  if (rnr_waiting_ == 0) return earliest;
  for (const OutboundMessage& m : send_queue_)
    if (m.rnr_wait) earliest = std::min(earliest, m.rnr_resend_at);
  return earliest;
}

void QueuePair::on_timer(Time now) {
  if (rnr_waiting_ == 0) return;
  uint32_t still_waiting = 0;
  for (size_t i = 0; i < send_queue_.size(); ++i) {
    OutboundMessage& m = send_queue_[i];
    if (!m.rnr_wait) continue;
    if (m.rnr_resend_at > now) {
      ++still_waiting;
      continue;
    }
    m.rnr_wait = false;
    m.rnr_resend_at = kNever;
    restart(m, i);
    // The resend is a new request: the transport timer starts afresh.
    retries_ = 0;
  }
  rnr_waiting_ = still_waiting;
}

}  // namespace metaroce::transport
