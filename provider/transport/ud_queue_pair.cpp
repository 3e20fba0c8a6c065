// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "ud_queue_pair.h"

#include <endian.h>

#include <algorithm>
#include <cstring>

#include "endpoint.h"
#include "shared_receive_queue.h"

namespace metaroce::transport {
namespace {

constexpr uint32_t kUseOwnQkey = 0x80000000u;  // verbs: a WR Q_Key with the high bit set
constexpr uint8_t kNextHeaderUdp = 17;
constexpr uint8_t kHopLimit = 64;

}  // namespace

void build_grh(const UdAddresses& addresses, size_t udp_payload_bytes, std::span<uint8_t, kGrhBytes> out) {
  const uint32_t version = htobe32(6u << 28);
  const uint16_t length = htobe16(static_cast<uint16_t>(std::min<size_t>(udp_payload_bytes + 8, 0xffff)));
  std::memcpy(out.data(), &version, 4);
  std::memcpy(out.data() + 4, &length, 2);
  out[6] = kNextHeaderUdp;
  out[7] = kHopLimit;
  std::memcpy(out.data() + 8, addresses.source.data(), 16);
  std::memcpy(out.data() + 24, addresses.destination.data(), 16);
}

UdQueuePair::UdQueuePair(Endpoint& endpoint, uint32_t qpn, uint32_t pd, uint32_t send_cq, uint32_t recv_cq,
                         SharedReceiveQueue* srq, const QpConfig& config, uint32_t max_message)
    : QueuePairCommon(endpoint, qpn, pd, send_cq, recv_cq, srq), config_(config), max_message_(max_message) {}

void UdQueuePair::modify(QpState next, std::optional<uint32_t> qkey) {
  if (next == QpState::Error) return to_error(/*requested=*/true);
  if (next == QpState::Reset) return to_reset();
  if (qkey) qkey_ = *qkey;
  state_ = next;
}

void UdQueuePair::to_reset() {
  pending_.clear();
  recv_queue_.clear();
  qkey_ = 0;
  state_ = QpState::Reset;
}

void UdQueuePair::flush() {
  while (!pending_.empty()) {
    complete_send(pending_.front(), WcStatus::WorkRequestFlushed);
    pending_.pop_front();
  }
  while (!recv_queue_.empty()) {
    endpoint_.push_flushed_receive(recv_cq_, qpn_, recv_queue_.front().wr_id);
    recv_queue_.pop_front();
  }
}

void UdQueuePair::complete_send(const Pending& p, WcStatus status) {
  if (!p.send.wr.signaled && status == WcStatus::Success) return;
  Completion c;
  c.wr_id = p.send.wr.wr_id;
  c.status = status;
  c.opcode = WcOpcode::Send;
  c.qp_num = qpn_;
  endpoint_.push_completion(send_cq_, c);
}

PostResult UdQueuePair::post_send(const UdSendWr& s) {
  const SendWr& wr = s.wr;
  if (state_ != QpState::ReadyToSend && state_ != QpState::Error) return PostResult::BadState;
  if (wr.opcode != WrOpcode::Send && wr.opcode != WrOpcode::SendWithImm) return PostResult::InvalidArgument;
  if (wr.num_sge > kMaxSge) return PostResult::InvalidArgument;
  const std::span<const Sge> sges(wr.sg.data(), wr.num_sge);
  if (sge_total_length(sges) > max_message_) return PostResult::InvalidArgument;
  if (pending_.size() >= config_.max_send_wr) return PostResult::QueueFull;
  Pending p;
  p.send = s;
  if (state_ == QpState::Error) {
    complete_send(p, WcStatus::WorkRequestFlushed);
    return PostResult::Ok;
  }
  if (wr.inline_data) {
    p.inline_bytes.resize(sge_total_length(sges));
    if (!gather_from_sges(sges, 0, p.inline_bytes)) return PostResult::InvalidArgument;
  }
  pending_.push_back(std::move(p));
  return PostResult::Ok;
}

PostResult UdQueuePair::post_recv(const RecvWr& wr) { return post_own_recv(wr, config_.max_recv_wr); }

size_t UdQueuePair::build_next(std::span<uint8_t> out, PeerId& peer) {
  if (pending_.empty()) return 0;
  const Pending p = std::move(pending_.front());
  pending_.pop_front();
  const SendWr& wr = p.send.wr;
  const std::span<const Sge> sges(wr.sg.data(), wr.num_sge);
  const size_t length = wr.inline_data ? p.inline_bytes.size() : sge_total_length(sges);
  wire::UdHeader h;
  h.dst_qpn = p.send.remote_qpn;
  h.src_qpn = qpn_;
  h.qkey = (p.send.remote_qkey & kUseOwnQkey) ? qkey_ : p.send.remote_qkey;
  h.has_imm = wr.opcode == WrOpcode::SendWithImm;
  h.imm = wr.imm;
  const size_t header = wire::encode_ud(out, {0, endpoint_.config().home_port}, h, length);
  // The buffer is read now, so it is checked now: it may have been
  // deregistered since the post.
  const bool readable = wr.inline_data || endpoint_.memory().check_sges(sges, pd_, false) == AccessCheck::Ok;
  if (header == 0 || !readable) {
    complete_send(p, WcStatus::LocalProtectionError);
    to_error();
    return 0;
  }
  const std::span<uint8_t> body = out.subspan(header, length);
  if (wr.inline_data) {
    std::memcpy(body.data(), p.inline_bytes.data(), length);
  } else if (!gather_from_sges(sges, 0, body)) {
    complete_send(p, WcStatus::LocalProtectionError);
    to_error();
    return 0;
  }
  peer = p.send.peer;
  complete_send(p, WcStatus::Success);
  return header + length;
}

const RecvWr* UdQueuePair::next_receive() {
  if (recv_queue_.empty() && srq_) {
    bool limit_reached = false;
    std::optional<RecvWr> wqe = srq_->take(limit_reached);
    if (limit_reached) endpoint_.notify({AsyncEventKind::SrqLimitReached, srq_->id()});
    if (wqe) recv_queue_.push_back(*wqe);
  }
  return recv_queue_.empty() ? nullptr : &recv_queue_.front();
}

void UdQueuePair::on_datagram(const wire::Packet& packet, const UdAddresses& addresses, EndpointCounters& counters) {
  if (state_ != QpState::ReadyToReceive && state_ != QpState::ReadyToSend) {
    ++counters.rx_drop_ud_unknown_qp;
    return;
  }
  if (packet.ud.qkey != qkey_) {
    ++counters.rx_drop_ud_qkey;
    return;
  }
  const RecvWr* wqe = next_receive();
  if (!wqe) {
    ++counters.rx_drop_ud_no_receive;
    return;
  }
  const std::span<const Sge> sges(wqe->sg.data(), wqe->num_sge);
  const size_t length = packet.payload.size();
  if (length > max_message_ || sge_total_length(sges) < kGrhBytes + length) {
    ++counters.rx_drop_ud_too_long;
    return;
  }
  if (endpoint_.memory().check_sges(sges, pd_, true) != AccessCheck::Ok) {
    // The application's buffer went away: the receive completes in error.
    Completion c;
    c.wr_id = wqe->wr_id;
    c.status = WcStatus::LocalProtectionError;
    c.opcode = WcOpcode::Recv;
    c.qp_num = qpn_;
    recv_queue_.pop_front();
    endpoint_.push_completion(recv_cq_, c);
    to_error();
    return;
  }
  scratch_.resize(kGrhBytes + length);
  build_grh(addresses, wire::kUdHeaderBytes + length, std::span<uint8_t, kGrhBytes>(scratch_.data(), kGrhBytes));
  if (length) std::memcpy(scratch_.data() + kGrhBytes, packet.payload.data(), length);
  scatter_to_sges(sges, 0, scratch_);
  Completion c;
  c.wr_id = wqe->wr_id;
  c.status = WcStatus::Success;
  c.opcode = WcOpcode::Recv;
  c.byte_len = static_cast<uint32_t>(kGrhBytes + length);
  c.qp_num = qpn_;
  c.src_qp = packet.ud.src_qpn;
  c.has_imm = packet.ud.has_imm;
  c.imm = packet.ud.imm;
  c.has_grh = true;
  recv_queue_.pop_front();
  ++counters.rx_ud_delivered;
  counters.placed_bytes += length;
  endpoint_.push_completion(recv_cq_, c);
}

}  // namespace metaroce::transport
