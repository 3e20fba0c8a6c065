// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "queue_pair.h"

#include <algorithm>
#include <cstring>

#include "connection.h"
#include "endpoint.h"

namespace metaroce::transport {
namespace {

bool is_atomic(wire::Opcode op) {
  return op == wire::Opcode::FetchAdd || op == wire::Opcode::CompareSwap;
}

std::span<const Sge> sges_of(const OutboundMessage& m) { return {m.sg.data(), m.num_sge}; }
std::span<const Sge> sges_of(const RecvWr& wr) { return {wr.sg.data(), wr.num_sge}; }

constexpr size_t kAtomicResultCache = 64;

}  // namespace

QueuePair::QueuePair(Endpoint& endpoint, uint32_t qpn, uint32_t pd, uint32_t send_cq,
                     uint32_t recv_cq, const QpConfig& config)
    : endpoint_(endpoint), qpn_(qpn), pd_(pd), send_cq_(send_cq), recv_cq_(recv_cq), config_(config) {}

uint32_t QueuePair::mtu() const { return endpoint_.config().mtu; }

void QueuePair::to_rtr(Connection* connection, uint32_t remote_qpn, const QpConfig& config) {
  connection_ = connection;
  remote_qpn_ = remote_qpn;
  config_ = config;
  state_ = QpState::ReadyToReceive;
}

void QueuePair::to_reset() {
  send_queue_.clear();
  send_cursor_ = 0;
  recv_queue_.clear();
  inbound_.clear();
  responses_.clear();
  atomic_results_.clear();
  next_msn_ = 1;
  next_recv_index_ = 0;
  recv_consumed_ = 0;
  completed_msn_ = 0;
  reads_atomics_in_flight_ = 0;
  state_ = QpState::Reset;
}

void QueuePair::to_error() {
  state_ = QpState::Error;
  flush();
}

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
  if (length > (uint64_t{1} << 31)) return PostResult::InvalidArgument;

  OutboundMessage m;
  m.wr_id = wr.wr_id;
  m.signaled = wr.signaled;
  m.length = static_cast<uint32_t>(length);
  m.remote_addr = wr.remote_addr;
  m.rkey = wr.rkey;
  m.num_sge = wr.num_sge;
  m.sg = wr.sg;
  bool local_write = false;
  switch (wr.opcode) {
    case WrOpcode::Send: m.opcode = wire::Opcode::Send; m.wc_opcode = WcOpcode::Send; break;
    case WrOpcode::SendWithImm:
      m.opcode = wire::Opcode::SendImm; m.wc_opcode = WcOpcode::Send; m.imm = wr.imm; break;
    case WrOpcode::RdmaWrite: m.opcode = wire::Opcode::Write; m.wc_opcode = WcOpcode::RdmaWrite; break;
    case WrOpcode::RdmaWriteWithImm:
      m.opcode = wire::Opcode::WriteImm; m.wc_opcode = WcOpcode::RdmaWrite; m.imm = wr.imm; break;
    case WrOpcode::RdmaRead:
      m.opcode = wire::Opcode::ReadRequest; m.wc_opcode = WcOpcode::RdmaRead; local_write = true;
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
  if (wr.inline_data && (local_write || m.opcode == wire::Opcode::ReadRequest))
    return PostResult::InvalidArgument;

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
  if (m.opcode == wire::Opcode::ReadRequest) m.response_received.reset(chunk_count(m.length, mtu()));
  if (m.done) m.next_chunk = m.chunks;  // never transmitted
  send_queue_.push_back(std::move(m));
  if (send_queue_.back().done) advance_requester();
  return PostResult::Ok;
}

PostResult QueuePair::post_recv(const RecvWr& wr) {
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

// --- transmit side ----------------------------------------------------------

OutboundMessage* QueuePair::find_request(uint32_t msn) {
  if (send_queue_.empty()) return nullptr;
  const uint32_t index = msn - send_queue_.front().msn;
  if (index >= send_queue_.size()) return nullptr;
  return &send_queue_[index];
}

const OutboundMessage* QueuePair::find_request(uint32_t msn) const {
  return const_cast<QueuePair*>(this)->find_request(msn);
}

OutboundMessage* QueuePair::find_message(const ChunkRef& ref) {
  if (ref.response) {
    auto it = responses_.find(ref.msn);
    return it == responses_.end() ? nullptr : &it->second;
  }
  return find_request(ref.msn);
}

const OutboundMessage* QueuePair::find_message(const ChunkRef& ref) const {
  return const_cast<QueuePair*>(this)->find_message(ref);
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
      return !(m.needs_response() && m.next_chunk == 0 &&
               reads_atomics_in_flight_ >= config_.max_rd_atomic);
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
    if (m.needs_response() && m.next_chunk == 0) {
      if (reads_atomics_in_flight_ >= config_.max_rd_atomic) return false;
      ++reads_atomics_in_flight_;
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

uint32_t QueuePair::chunk_payload_bytes(const ChunkRef& ref) const {
  const OutboundMessage* m = find_message(ref);
  if (!m || !wire::carries_payload(m->opcode)) return 0;
  const uint64_t offset = uint64_t{ref.chunk} * mtu();
  if (offset >= m->length) return 0;
  return static_cast<uint32_t>(std::min<uint64_t>(mtu(), m->length - offset));
}

size_t QueuePair::build_packet(const ChunkRef& ref, uint16_t path_id, uint32_t path_seq, uint8_t flags,
                               std::span<uint8_t> out) const {
  const OutboundMessage* m = find_message(ref);
  if (!m) return 0;
  const uint32_t payload = chunk_payload_bytes(ref);
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
  const size_t header = wire::encode_data(
      out, {path_id, endpoint_.config().home_port}, h, m->opcode == wire::Opcode::ReadRequest ? &m->read : nullptr,
      is_atomic(m->opcode) ? &m->atomic : nullptr,
      m->opcode == wire::Opcode::AtomicResponse ? &m->atomic_original : nullptr, payload);
  if (header == 0) return 0;
  const std::span<uint8_t> body = out.subspan(header, payload);
  if (payload > 0) {
    if (m->uses_owned) {
      std::memcpy(body.data(), m->owned.data() + h.offset, payload);
    } else if (m->uses_source_addr) {
      std::memcpy(body.data(),
                  reinterpret_cast<const void*>(static_cast<uintptr_t>(m->source_addr + h.offset)),
                  payload);
    } else if (!gather_from_sges(sges_of(*m), h.offset, body)) {
      return 0;
    }
  }
  return header + payload;
}

bool QueuePair::on_chunk_acked(const ChunkRef& ref) {
  OutboundMessage* m = find_message(ref);
  if (!m || m->attempt != ref.attempt || ref.chunk >= m->chunks) return false;
  if (!m->acked.set(ref.chunk)) return false;
  m->stall_probes = 0;
  if (ref.response && m->acked.full()) responses_.erase(ref.msn);
  return true;
}

void QueuePair::restart(OutboundMessage& m, size_t index) {
  ++m.attempt;
  m.next_chunk = 0;
  m.acked.reset(m.chunks);
  send_cursor_ = std::min(send_cursor_, index);
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

bool QueuePair::source_readable(const ChunkRef& ref) const {
  const OutboundMessage* m = find_message(ref);
  if (!m || !m->uses_source_addr) return true;
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

bool QueuePair::has_outstanding_work() const {
  if (state_ == QpState::Error || state_ == QpState::Reset) return false;
  if (!responses_.empty()) return true;
  for (const OutboundMessage& m : send_queue_)
    if (!m.done && !m.rnr_wait) return true;
  return false;
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
  }
  rnr_waiting_ = still_waiting;
}

// --- requester completions ---------------------------------------------------

void QueuePair::complete_send_wr(const OutboundMessage& m, WcStatus status) {
  if (!m.signaled && status == WcStatus::Success) return;
  Completion c;
  c.wr_id = m.wr_id;
  c.status = status;
  c.opcode = m.wc_opcode;
  c.qp_num = qpn_;
  if (status == WcStatus::Success) {
    if (m.opcode == wire::Opcode::ReadRequest) c.byte_len = m.length;
    else if (is_atomic(m.opcode)) c.byte_len = 8;
    else c.byte_len = m.length;
  }
  endpoint_.push_completion(send_cq_, c);
}

void QueuePair::advance_requester() {
  while (!send_queue_.empty() && send_queue_.front().done) {
    const OutboundMessage front = std::move(send_queue_.front());
    send_queue_.pop_front();
    if (send_cursor_ > 0) --send_cursor_;
    complete_send_wr(front, front.status);
    if (front.status != WcStatus::Success && front.status != WcStatus::WorkRequestFlushed) {
      to_error();
      return;
    }
  }
}

bool QueuePair::on_stream_ack(uint32_t completed_msn) {
  bool progressed = false;
  for (OutboundMessage& m : send_queue_) {
    if (static_cast<int32_t>(m.msn - completed_msn) > 0) break;
    // A message cannot have completed remotely before all of it was sent:
    // such a claim is stale (a restarted attempt) or forged.
    if (!m.all_sent()) break;
    if (!m.done && !m.needs_response()) {
      m.done = true;
      progressed = true;
    }
  }
  advance_requester();
  return progressed;
}

bool QueuePair::on_nak(Time now, const wire::Nak& nak) {
  OutboundMessage* m = find_request(nak.msn);
  if (!m || m->done || nak.attempt != m->attempt) return false;
  switch (nak.kind) {
    case wire::NakKind::ReceiverNotReady: {
      if (m->rnr_wait) return false;
      ++m->rnr_naks;
      if (config_.rnr_retry != 7 && m->rnr_naks > config_.rnr_retry) {
        m->done = true;
        m->status = WcStatus::RnrRetryExceeded;
        break;
      }
      m->rnr_wait = true;
      ++rnr_waiting_;
      m->rnr_resend_at = now + std::max<Time>(nak.rnr_delay_ns, config_.min_rnr_timer_ns);
      if (m->needs_response() && reads_atomics_in_flight_ > 0) --reads_atomics_in_flight_;
      return true;
    }
    case wire::NakKind::RemoteAccess: m->done = true; m->status = WcStatus::RemoteAccessError; break;
    case wire::NakKind::InvalidRequest:
      m->done = true;
      m->status = WcStatus::RemoteInvalidRequest;
      break;
    case wire::NakKind::Sequence: return false;  // handled by the path, not the stream
  }
  advance_requester();
  return true;
}

void QueuePair::fail_with(WcStatus status) {
  for (OutboundMessage& m : send_queue_) {
    if (m.done) continue;
    m.done = true;
    m.status = status;
    break;
  }
  advance_requester();
  if (state_ != QpState::Error) to_error();
}

void QueuePair::flush() {
  while (!send_queue_.empty()) {
    OutboundMessage m = std::move(send_queue_.front());
    send_queue_.pop_front();
    complete_send_wr(m, WcStatus::WorkRequestFlushed);
  }
  send_cursor_ = 0;
  reads_atomics_in_flight_ = 0;
  while (!recv_queue_.empty()) {
    Completion c;
    c.wr_id = recv_queue_.front().wr_id;
    c.status = WcStatus::WorkRequestFlushed;
    c.opcode = WcOpcode::Recv;
    c.qp_num = qpn_;
    recv_queue_.pop_front();
    endpoint_.push_completion(recv_cq_, c);
  }
  inbound_.clear();
  responses_.clear();
}

// --- responses arriving at the requester -------------------------------------

Verdict QueuePair::on_response(const wire::Packet& p) {
  if (state_ != QpState::ReadyToSend) return Verdict::QpNotReady;
  const wire::DataHeader& h = p.data;
  OutboundMessage* m = find_request(h.msn);
  if (!m || m->done) return Verdict::StaleResponse;
  if (h.opcode == wire::Opcode::AtomicResponse) {
    if (!is_atomic(m->opcode)) return Verdict::StaleResponse;
    const std::span<const Sge> sges = sges_of(*m);
    uint8_t bytes[8];
    std::memcpy(bytes, &p.atomic_original, 8);
    if (endpoint_.memory().check_sges(sges, pd_, true) != AccessCheck::Ok ||
        !scatter_to_sges(sges, 0, bytes)) {
      m->status = WcStatus::LocalProtectionError;
    }
    m->done = true;
    if (reads_atomics_in_flight_ > 0) --reads_atomics_in_flight_;
    advance_requester();
    return Verdict::Placed;
  }
  if (m->opcode != wire::Opcode::ReadRequest || h.msg_length != m->length ||
      h.remote_addr != m->read.sink_addr || h.rkey != m->read.sink_key)
    return Verdict::StaleResponse;
  if (h.offset % mtu() != 0) return Verdict::StaleResponse;
  const uint32_t chunk = h.offset / mtu();
  const uint64_t expected = std::min<uint64_t>(mtu(), m->length - h.offset);
  if (chunk >= m->response_received.size() || p.payload.size() != (m->length ? expected : 0))
    return Verdict::StaleResponse;
  if (m->response_received.test(chunk)) return Verdict::DuplicateChunk;
  const std::span<const Sge> sges = sges_of(*m);
  // Only the part of the sink this chunk covers is checked and written.
  if (!p.payload.empty()) {
    bool ok = true;
    uint64_t skip = h.offset;
    uint64_t left = p.payload.size();
    for (const Sge& sge : sges) {
      if (left == 0) break;
      if (skip >= sge.length) { skip -= sge.length; continue; }
      const uint64_t n = std::min<uint64_t>(sge.length - skip, left);
      if (endpoint_.memory().check_local(sge.lkey, pd_, sge.addr + skip, n, true) != AccessCheck::Ok)
        ok = false;
      left -= n;
      skip = 0;
    }
    if (!ok || !scatter_to_sges(sges, h.offset, p.payload)) {
      m->status = WcStatus::LocalProtectionError;
      m->done = true;
      advance_requester();
      return Verdict::Placed;
    }
  }
  m->response_received.set(chunk);
  endpoint_.counters_.placed_bytes += p.payload.size();
  if (m->response_received.full()) {
    m->done = true;
    if (reads_atomics_in_flight_ > 0) --reads_atomics_in_flight_;
    advance_requester();
  }
  return Verdict::Placed;
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
  switch (h.opcode) {
    case wire::Opcode::Write:
    case wire::Opcode::WriteImm:
      if (memory.check_remote(h.rkey, pd_, h.remote_addr, h.msg_length, kAccessRemoteWrite) !=
          AccessCheck::Ok)
        return Verdict::AccessError;
      break;
    case wire::Opcode::ReadRequest:
      if (memory.check_remote(h.rkey, pd_, h.remote_addr, h.msg_length, kAccessRemoteRead) !=
          AccessCheck::Ok)
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
    const uint64_t slot = h.recv_index - recv_consumed_;
    if (slot >= recv_queue_.size()) return Verdict::ReceiverNotReady;
    if ((h.opcode == wire::Opcode::Send || h.opcode == wire::Opcode::SendImm) &&
        h.msg_length > sge_total_length(sges_of(recv_queue_[slot])))
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
    if (is_atomic(h.opcode)) {
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
    } else if (is_atomic(m.opcode)) {
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
