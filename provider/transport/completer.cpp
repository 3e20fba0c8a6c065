// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The completer: acknowledgements, NAKs and READ/atomic responses for the
// requester's messages, and their completions in posting order.
#include "queue_pair.h"

#include <algorithm>
#include <cstring>

#include "connection.h"
#include "endpoint.h"
#include "sequence_number.h"

namespace metaroce::transport {

// --- acknowledgements ------------------------------------------------------

bool QueuePair::on_chunk_acked(Time now, const ChunkRef& ref) {
  OutboundMessage* m = find_message(ref);
  if (!m || m->attempt != ref.attempt || ref.chunk >= m->chunks) return false;
  if (!m->acked.set(ref.chunk)) return false;
  m->stall_probes = 0;
  if (ref.response) {
    if (m->acked.full()) responses_.erase(ref.msn);
  } else if (m->ever_acked.set(ref.chunk)) {
    note_progress(now);
  }
  return true;
}

void QueuePair::finish(OutboundMessage& m, WcStatus status) {
  m.done = true;
  m.status = status;
  release_rd_atomic(m);
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
    else if (wire::is_atomic(m.opcode)) c.byte_len = 8;
    else c.byte_len = m.length;
  }
  // A READ or atomic completes on data that arrived here: the ACK of that
  // data leaves first.
  endpoint_.push_completion(send_cq_, c, /*owes_ack=*/status == WcStatus::Success && m.needs_response());
}

void QueuePair::advance_requester() {
  while (!send_queue_.empty() && send_queue_.front().done) {
    // The popped slot keeps its value until a post reuses it (ring_queue.h).
    const OutboundMessage& front = send_queue_.front();
    send_queue_.pop_front();
    if (send_cursor_ > 0) --send_cursor_;
    complete_send_wr(front, front.status);
    if (front.status != WcStatus::Success && front.status != WcStatus::WorkRequestFlushed) {
      to_error();
      return;
    }
  }
}

void QueuePair::on_stream_ack(Time now, uint32_t completed_msn) {
  // A claim for a message never posted is not believed at all.
  if (seq_after(completed_msn, next_msn_ - 1)) {
    ++endpoint_.counters_.rx_ignored_stream_ack;
    return;
  }
  bool progressed = false;
  for (OutboundMessage& m : send_queue_) {
    if (seq_after(m.msn, completed_msn)) break;
    // A message cannot have completed remotely before all of it was sent:
    // such a claim is stale (a restarted attempt) or forged. (Path-level
    // acknowledgement of every chunk is not required: the ACK block of a
    // chunk may be lost for good when its path goes quiet, and only the
    // authenticated modes keep a forger from claiming sent messages.)
    if (!m.done && !m.needs_response() && !m.all_sent()) {
      ++endpoint_.counters_.rx_ignored_stream_ack;
      break;
    }
    if (!m.done && !m.needs_response()) {
      finish(m, WcStatus::Success);
      progressed = true;
    }
  }
  if (progressed) note_progress(now);
  advance_requester();
}

void QueuePair::on_nak(Time now, const wire::Nak& nak) {
  OutboundMessage* m = find_request(nak.msn);
  // Only a NAK of the attempt in flight of a message that was sent counts.
  if (!m || m->done || nak.attempt != m->attempt || m->next_chunk == 0) {
    ++endpoint_.counters_.rx_ignored_nak;
    return;
  }
  switch (nak.kind) {
    case wire::NakKind::ReceiverNotReady: {
      if (m->rnr_wait) return;
      ++m->rnr_naks;
      if (config_.rnr_retry != 7 && m->rnr_naks > config_.rnr_retry) {
        finish(*m, WcStatus::RnrRetryExceeded);
        break;
      }
      m->rnr_wait = true;
      ++rnr_waiting_;
      m->rnr_resend_at = now + std::clamp<Time>(nak.rnr_delay_ns, config_.min_rnr_timer_ns,
                                                std::max(config_.min_rnr_timer_ns, kMaxRnrDelayNs));
      release_rd_atomic(*m);
      note_progress(now);
      return;
    }
    case wire::NakKind::RemoteAccess: finish(*m, WcStatus::RemoteAccessError); break;
    case wire::NakKind::InvalidRequest: finish(*m, WcStatus::RemoteInvalidRequest); break;
    case wire::NakKind::RemoteOperational: finish(*m, WcStatus::RemoteOperationError); break;
    case wire::NakKind::Sequence: return;  // handled by the path (Connection::on_nak)
  }
  note_progress(now);
  advance_requester();
}

void QueuePair::fail_with(WcStatus status) {
  for (OutboundMessage& m : send_queue_) {
    if (m.done) continue;
    finish(m, status);
    break;
  }
  advance_requester();
  if (state_ != QpState::Error) to_error();
}

// --- responses arriving at the requester -------------------------------------

Verdict QueuePair::on_response(Time now, const wire::Packet& p) {
  if (state_ != QpState::ReadyToSend) return Verdict::QpNotReady;
  const wire::DataHeader& h = p.data;
  OutboundMessage* m = find_request(h.msn);
  if (!m || m->done) return Verdict::StaleResponse;
  if (h.opcode == wire::Opcode::AtomicResponse) {
    if (!wire::is_atomic(m->opcode)) return Verdict::StaleResponse;
    const std::span<const Sge> sges = sges_of(*m);
    uint8_t bytes[8];
    std::memcpy(bytes, &p.atomic_original, 8);
    const bool placed =
        endpoint_.memory().check_sges(sges, pd_, true) == AccessCheck::Ok && scatter_to_sges(sges, 0, bytes);
    finish(*m, placed ? WcStatus::Success : WcStatus::LocalProtectionError);
    note_progress(now);
    advance_requester();
    return Verdict::Placed;
  }
  if (m->opcode != wire::Opcode::ReadRequest || h.msg_length != m->length || h.remote_addr != m->read.sink_addr ||
      h.rkey != m->read.sink_key)
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
      if (skip >= sge.length) {
        skip -= sge.length;
        continue;
      }
      const uint64_t n = std::min<uint64_t>(sge.length - skip, left);
      if (endpoint_.memory().check_local(sge.lkey, pd_, sge.addr + skip, n, true) != AccessCheck::Ok) ok = false;
      left -= n;
      skip = 0;
    }
    if (!ok || !scatter_to_sges(sges, h.offset, p.payload)) {
      finish(*m, WcStatus::LocalProtectionError);
      advance_requester();
      return Verdict::Placed;
    }
  }
  m->response_received.set(chunk);
  endpoint_.counters_.placed_bytes += p.payload.size();
  note_progress(now);
  if (m->response_received.full()) {
    finish(*m, WcStatus::Success);
    advance_requester();
  }
  return Verdict::Placed;
}

}  // namespace metaroce::transport
