// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "session.h"

#include <algorithm>
#include <cstring>

#include "packet_protection.h"

namespace metaroce::compliance {
namespace {

bool seq_after(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

constexpr uint32_t kQpnStride = 1;
constexpr uint32_t kPsnStride = 0x00100000;
constexpr uint32_t kTargetPsnOffset = 0x00080000;
constexpr uint8_t kReplySlots = 4;
// What the suite keeps of the target's messages is bounded whatever the
// target claims: bytes of messages up to this long, messages this far ahead.
constexpr size_t kMaxKeptMessageBytes = size_t{1} << 20;
constexpr uint32_t kMaxMessagesAhead = 1024;
constexpr int kSettleRounds = 50;

}  // namespace

Session::Session(ControlClient& control, std::unique_ptr<WirePeer> peer, Observer& observer, TargetInfo target,
                 Timing timing)
    : control_(control), peer_(std::move(peer)), observer_(observer), target_(std::move(target)), timing_(timing) {
  resident_qpn_ = open_qp().qpn;
}

// --- QPs -----------------------------------------------------------------------

SuiteQp& Session::open_qp() {
  SuiteQp qp;
  qp.qpn = next_qpn_;
  next_qpn_ += kQpnStride;
  const uint32_t suite_psn = next_psn_;
  const uint32_t target_psn = next_psn_ + kTargetPsnOffset;
  next_psn_ += kPsnStride;
  qp.target_qpn = control_.connect(peer_->local_ip(), peer_->home_port(), qp.qpn, target_psn, suite_psn);
  qp.next_msn = suite_psn;
  qp.target_first_msn = target_psn;
  qp.target_completed = target_psn - 1;
  return qps_[qp.qpn] = qp;
}

void Session::close_qp(SuiteQp& qp) {
  const uint32_t qpn = qp.qpn;
  control_.destroy_qp(qp.target_qpn);
  qps_.erase(qpn);
}

SuiteQp* Session::find_qp(uint32_t suite_qpn) {
  const auto it = qps_.find(suite_qpn);
  return it == qps_.end() ? nullptr : &it->second;
}

// --- building ---------------------------------------------------------------------

wire::DataHeader Session::request_header(const SuiteQp& qp, wire::Opcode opcode, uint32_t msn) const {
  wire::DataHeader h;
  h.opcode = opcode;
  h.dst_qpn = qp.target_qpn;
  h.src_qpn = qp.qpn;
  h.msn = msn;
  return h;
}

std::vector<uint8_t> Session::data_body(uint8_t path, wire::DataHeader& header, std::span<const uint8_t> payload,
                                        const wire::ReadRequest* read, const wire::AtomicRequest* atomic,
                                        const uint64_t* original) {
  header.path_seq = take_seq(path);
  std::vector<uint8_t> out(wire::data_header_bytes(header.opcode) + payload.size());
  const size_t at =
      wire::encode_data(out, wire::Origin(path, peer_->home_port()), header, read, atomic, original, payload.size());
  if (at == 0) throw CaseAbort("the engine's encoder refused a data packet");
  if (!payload.empty()) std::memcpy(out.data() + at, payload.data(), payload.size());  // an empty span may hold nullptr
  return out;
}

std::vector<uint8_t> Session::probe_body(uint8_t path, wire::PacketType type, uint32_t probe_seq,
                                         uint64_t timestamp) const {
  std::vector<uint8_t> out(wire::kCommonHeaderBytes + sizeof(wire::ProbeWire));
  wire::Probe probe;
  probe.probe_seq = probe_seq;
  probe.timestamp = timestamp;
  if (wire::encode_probe(out, wire::Origin(path, peer_->home_port()), type, probe) == 0)
    throw CaseAbort("the engine's encoder refused a probe");
  return out;
}

std::vector<uint8_t> Session::nak_body(uint8_t path, const wire::Nak& nak) const {
  std::vector<uint8_t> out(wire::kCommonHeaderBytes + sizeof(wire::NakWire));
  if (wire::encode_nak(out, wire::Origin(path, peer_->home_port()), nak) == 0)
    throw CaseAbort("the engine's encoder refused a NAK");
  return out;
}

wire::Ack Session::current_ack() const {
  wire::Ack ack;
  for (const auto& [path, seqs] : received_) {
    if (ack.path_count == wire::kMaxAckPathBlocks) break;
    wire::PathSack& block = ack.paths[ack.path_count++];
    block.path_id = path;
    block.highest_seq = highest_.at(path);
    for (const uint32_t seq : seqs) block.mark(seq);
  }
  for (const auto& [qpn, qp] : qps_) {
    if (!qp.target_completed_any || ack.stream_count == wire::kMaxAckStreams) continue;
    ack.streams[ack.stream_count++] = {qp.target_qpn, qp.target_completed};
  }
  return ack;
}

std::vector<uint8_t> Session::ack_body(const wire::Ack& ack) const {
  std::vector<uint8_t> out(wire::kMaxAckBytes);
  const size_t n = wire::encode_ack(out, wire::Origin(0, peer_->home_port()), ack);
  if (n == 0) throw CaseAbort("the engine's encoder refused an ACK");
  out.resize(n);
  return out;
}

void Session::send(std::vector<uint8_t> body, uint8_t slot) {
  const std::vector<uint8_t> datagram = peer_->frame(std::move(body));
  send_raw(datagram, slot);
}

void Session::send_raw(std::span<const uint8_t> datagram, uint8_t slot) {
  if (!peer_->send(datagram, slot)) throw CaseAbort("the kernel refused to send a datagram");
}

void Session::send_ack() {
  send(ack_body(current_ack()), reply_slot_);
  reply_slot_ = static_cast<uint8_t>((reply_slot_ + 1) % kReplySlots);
}

// --- receiving ---------------------------------------------------------------------

void Session::reset_policies() {
  auto_ack_ = true;
  auto_answer_ = true;
  lose_ = {};
}

std::vector<Received> Session::pump(Clock::time_point deadline, const std::function<bool(const Received&)>& stop) {
  std::vector<Received> out;
  bool stopped = false;
  while (!stopped) {
    std::optional<Datagram> first = peer_->receive(deadline);
    if (!first) break;
    bool data_in_batch = false;
    std::optional<Datagram> next = std::move(first);
    // Handles what is already queued before acknowledging, as a receiver
    // that batches its ACKs does.
    while (next) {
      Received r;
      r.datagram = std::make_shared<const Datagram>(std::move(*next));
      observer_.inspect(*r.datagram);
      const std::span<const uint8_t> bytes(r.datagram->bytes);
      if (bytes.size() >= wire::kCommonHeaderBytes + wire::kIntegrityTrailerBytes && transport::check_integrity(bytes))
        r.decoded =
            wire::decode(bytes.first(bytes.size() - wire::kIntegrityTrailerBytes), r.packet) == wire::DecodeStatus::Ok;
      handle(r, data_in_batch);
      out.push_back(r);
      if (stop && stop(r)) {
        stopped = true;
        break;
      }
      next = peer_->receive(Clock::now());
    }
    if (data_in_batch && auto_ack_) send_ack();
  }
  return out;
}

void Session::handle(const Received& r, bool& data_in_batch) {
  if (!r.decoded) return;
  const wire::Packet& p = r.packet;
  if (p.common.src_epoch != 0) peer_->learn_target_epoch(p.common.src_epoch);
  switch (p.common.type) {
    case wire::PacketType::Probe:
      // Any endpoint answers a Probe from a known peer (spec 8.8).
      send(probe_body(static_cast<uint8_t>(p.common.path_id), wire::PacketType::ProbeReply, p.probe.probe_seq,
                      p.probe.timestamp),
           reply_slot_);
      break;
    case wire::PacketType::Data:
      if (lose_ && lose_(p)) break;
      record_data(p);
      data_in_batch = true;
      break;
    default: break;
  }
}

void Session::record_data(const wire::Packet& p) {
  const uint16_t path = p.common.path_id;
  const uint32_t seq = p.data.path_seq;
  std::set<uint32_t>& seqs = received_[path];
  if (seqs.empty() || seq_after(seq, highest_[path])) highest_[path] = seq;
  seqs.insert(seq);
  // Only the last 256 below the highest can be reported.
  while (!seqs.empty() && highest_[path] - *seqs.begin() >= wire::kSackBits && *seqs.begin() != highest_[path])
    seqs.erase(seqs.begin());

  const wire::DataHeader& h = p.data;
  SuiteQp* qp = find_qp(h.dst_qpn);
  if (!qp || h.src_qpn != qp->target_qpn) return;
  const bool request = wire::is_request(h.opcode);
  std::map<uint32_t, InboundMessage>& book = request ? qp->inbound : qp->responses;
  if (request && !seq_after(h.msn, qp->target_completed)) return;  // a duplicate of a completed request
  if (request && h.msn - qp->target_completed > kMaxMessagesAhead) return;
  if (!request && (!seq_after(qp->next_msn, h.msn) || qp->next_msn - h.msn > kMaxMessagesAhead)) return;
  auto [it, fresh] = book.try_emplace(h.msn);
  InboundMessage& m = it->second;
  if (fresh) {
    m.opcode = h.opcode;
    m.length = h.msg_length;
    m.recv_index = h.recv_index;
    m.remote_addr = h.remote_addr;
    m.rkey = h.rkey;
    m.imm = h.imm;
    m.read = p.read;
    m.atomic = p.atomic;
    if (wire::carries_payload(h.opcode) && h.msg_length <= kMaxKeptMessageBytes) m.bytes.assign(h.msg_length, 0);
    m.original = p.atomic_original;
  }
  if (wire::carries_payload(h.opcode)) {
    if (!m.bytes.empty() && uint64_t{h.offset} + p.payload.size() <= m.bytes.size())
      std::memcpy(m.bytes.data() + h.offset, p.payload.data(), p.payload.size());
    m.got[h.offset] = static_cast<uint32_t>(p.payload.size());
    uint64_t total = 0;
    for (const auto& [offset, length] : m.got) total += length;
    m.complete = total >= m.length;
  } else {
    m.complete = true;
  }
  if (request) advance(*qp);
}

void Session::advance(SuiteQp& qp) {
  while (true) {
    const auto it = qp.inbound.find(qp.target_completed + 1);
    if (it == qp.inbound.end() || !it->second.complete) return;
    InboundMessage& m = it->second;
    if (auto_answer_ && !m.answered) answer(qp, it->first, m);
    ++qp.target_completed;
    qp.target_completed_any = true;
  }
}

void Session::answer(SuiteQp& qp, uint32_t msn, InboundMessage& m) {
  if (m.opcode == wire::Opcode::ReadRequest) {
    const std::vector<uint8_t> bytes = pattern(msn, m.length);
    const uint32_t mtu = std::max<uint32_t>(target_.mtu, 1);
    uint32_t offset = 0;
    uint8_t path = 0;
    do {
      const uint32_t n = std::min<uint32_t>(mtu, m.length - offset);
      wire::DataHeader h;
      h.opcode = wire::Opcode::ReadResponse;
      h.dst_qpn = qp.target_qpn;
      h.src_qpn = qp.qpn;
      h.msn = msn;
      h.msg_length = m.length;
      h.offset = offset;
      h.remote_addr = m.read.sink_addr;
      h.rkey = m.read.sink_key;
      offset += n;
      if (offset >= m.length) h.flags = wire::kFlagAckRequest;
      send(data_body(path, h, std::span(bytes).subspan(offset - n, n)), path);
      path = static_cast<uint8_t>((path + 1) % kReplySlots);
    } while (offset < m.length);
    m.answered = true;
  } else if (wire::is_atomic(m.opcode)) {
    wire::DataHeader h;
    h.opcode = wire::Opcode::AtomicResponse;
    h.dst_qpn = qp.target_qpn;
    h.src_qpn = qp.qpn;
    h.msn = msn;
    h.msg_length = 8;
    h.flags = wire::kFlagAckRequest;
    const uint64_t original = atomic_original(msn);
    send(data_body(0, h, {}, nullptr, nullptr, &original), 0);
    m.answered = true;
  }
}

std::optional<Received> Session::expect(const std::function<bool(const Received&)>& match) {
  std::vector<Received> got = pump(Clock::now() + timing_.reply, match);
  if (got.empty() || !match(got.back())) return std::nullopt;
  return got.back();
}

std::optional<std::vector<Received>> Session::barrier() {
  const uint32_t seq = next_probe_seq_++;
  send(probe_body(0, wire::PacketType::Probe, seq, 0x5eed000000000000ull | seq), 0);
  std::vector<Received> got = pump(Clock::now() + timing_.reply, [&](const Received& r) {
    return r.is(wire::PacketType::ProbeReply) && r.packet.probe.probe_seq == seq;
  });
  if (got.empty() || !got.back().is(wire::PacketType::ProbeReply) || got.back().packet.probe.probe_seq != seq)
    return std::nullopt;
  got.pop_back();
  return got;
}

std::vector<Received> Session::listen_quiet() { return pump(Clock::now() + timing_.quiet); }

bool Session::settle() {
  for (int round = 0; round < kSettleRounds; ++round)
    if (listen_quiet().empty()) return true;
  return false;
}

std::map<std::string, int64_t> Session::delta(const std::map<std::string, uint64_t>& before,
                                              const std::map<std::string, uint64_t>& after) {
  std::map<std::string, int64_t> out;
  for (const auto& [name, value] : after) {
    const auto it = before.find(name);
    const int64_t change = static_cast<int64_t>(value - (it == before.end() ? 0 : it->second));
    if (change != 0) out[name] = change;
  }
  return out;
}

std::vector<uint8_t> Session::pattern(uint32_t seed, size_t length) {
  std::vector<uint8_t> out(length);
  for (size_t i = 0; i < length; ++i) out[i] = static_cast<uint8_t>(seed * 131u + i * 7u + (i >> 8) + 1u);
  return out;
}

const wire::PathSack* find_block(const wire::Ack& ack, uint16_t path) {
  for (uint8_t i = 0; i < ack.path_count; ++i)
    if (ack.paths[i].path_id == path) return &ack.paths[i];
  return nullptr;
}

std::optional<uint32_t> completed_msn(const wire::Ack& ack, uint32_t qpn) {
  for (uint8_t i = 0; i < ack.stream_count; ++i)
    if (ack.streams[i].qpn == qpn) return ack.streams[i].completed_msn;
  return std::nullopt;
}

}  // namespace metaroce::compliance
