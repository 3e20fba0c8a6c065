// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "case_support.h"

#include <set>

namespace metaroce::compliance {
namespace {

bool seq_after(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }

}  // namespace

std::string describe(const Received& r) {
  if (!r.decoded) return std::to_string(r.datagram->bytes.size()) + "-byte datagram the suite could not decode";
  const wire::Packet& p = r.packet;
  switch (p.common.type) {
    case wire::PacketType::Data:
      return std::string("data ") + wire::to_string(p.data.opcode) + " msn " + std::to_string(p.data.msn) + " offset " +
             std::to_string(p.data.offset) + " on path " + std::to_string(p.common.path_id);
    case wire::PacketType::Ack: {
      std::string s = "ACK (";
      for (uint8_t i = 0; i < p.ack.path_count; ++i)
        s += "path " + std::to_string(p.ack.paths[i].path_id) + " up to " + std::to_string(p.ack.paths[i].highest_seq) +
             "; ";
      for (uint8_t i = 0; i < p.ack.stream_count; ++i)
        s += "QP " + std::to_string(p.ack.streams[i].qpn) + " completed " +
             std::to_string(p.ack.streams[i].completed_msn) + "; ";
      return s + ")";
    }
    case wire::PacketType::Nak:
      return "NAK kind " + std::to_string(static_cast<int>(p.nak.kind)) + " msn " + std::to_string(p.nak.msn);
    case wire::PacketType::Probe: return "Probe seq " + std::to_string(p.probe.probe_seq);
    case wire::PacketType::ProbeReply: return "ProbeReply seq " + std::to_string(p.probe.probe_seq);
    case wire::PacketType::UdSend:
      return "UD send from QP " + std::to_string(p.ud.src_qpn) + " to QP " + std::to_string(p.ud.dst_qpn);
  }
  return "?";
}

std::string describe_all(const std::vector<Received>& got) {
  std::string out;
  for (const Received& r : got) {
    if (!out.empty()) out += "; ";
    out += describe(r);
  }
  return out;
}

std::vector<Received> reactions(const std::vector<Received>& got) {
  std::vector<Received> out;
  for (const Received& r : got)
    if (!r.is(wire::PacketType::Probe)) out.push_back(r);
  return out;
}

bool expect_no_reaction(CaseContext& c, const std::string& check, const Ignore& ignore) {
  Session& s = c.session();
  const std::optional<std::vector<Received>> before = s.barrier();
  if (!c.check(check + "/barrier", before.has_value(), "the target did not answer the suite's Probe after it"))
    return false;
  std::vector<Received> got = *before;
  for (Received& r : s.listen_quiet()) got.push_back(std::move(r));
  std::vector<Received> answers;
  for (const Received& r : reactions(got))
    if (!ignore || !ignore(r)) answers.push_back(r);
  return c.check(check, answers.empty(), "the target answered: " + describe_all(answers));
}

bool expect_drops(CaseContext& c, const std::string& check, const std::map<std::string, uint64_t>& before,
                  const std::string& counter, int64_t times) {
  const std::map<std::string, int64_t> change = Session::delta(before, c.session().counters());
  std::string wrong;
  for (const char* name : control::kDropCounters) {
    const auto it = change.find(name);
    const int64_t got = it == change.end() ? 0 : it->second;
    const int64_t want = counter == name ? times : 0;
    if (got != want)
      wrong += std::string(name) + " moved by " + std::to_string(got) + " (expected " + std::to_string(want) + "); ";
  }
  return c.check(check + "/counter", wrong.empty(), wrong);
}

bool expect_silent_drop(CaseContext& c, const std::string& check, const std::string& counter,
                        const std::function<void()>& send, const Ignore& ignore) {
  Session& s = c.session();
  if (!ignore) s.settle();
  const std::map<std::string, uint64_t> before = s.counters();
  send();
  const bool quiet = expect_no_reaction(c, check, ignore);
  const bool counted = expect_drops(c, check, before, counter);
  return quiet && counted;
}

bool AckView::covers(uint16_t path, uint32_t seq) const {
  const auto it = blocks.find(path);
  return it != blocks.end() && it->second.covers(seq);
}

bool AckView::reports_missing(uint16_t path, uint32_t seq) const {
  const auto it = blocks.find(path);
  return it != blocks.end() && seq_after(it->second.highest_seq, seq) &&
         it->second.highest_seq - seq < wire::kSackBits && !it->second.covers(seq);
}

void AckView::add(const wire::Ack& ack) {
  ++acks;
  for (uint8_t i = 0; i < ack.path_count; ++i) {
    const wire::PathSack& b = ack.paths[i];
    const auto it = blocks.find(b.path_id);
    if (it == blocks.end() || !seq_after(it->second.highest_seq, b.highest_seq)) blocks[b.path_id] = b;
  }
  for (uint8_t i = 0; i < ack.stream_count; ++i) {
    const auto it = completed.find(ack.streams[i].qpn);
    if (it == completed.end() || seq_after(ack.streams[i].completed_msn, it->second))
      completed[ack.streams[i].qpn] = ack.streams[i].completed_msn;
  }
}

AckView ack_view(const std::vector<Received>& got) {
  AckView view;
  for (const Received& r : got)
    if (r.is(wire::PacketType::Ack)) view.add(r.packet.ack);
  return view;
}

std::optional<AckView> wait_acked(Session& s, uint16_t path, uint32_t seq) {
  AckView view;
  s.pump(Clock::now() + s.timing().reply, [&](const Received& r) {
    if (r.is(wire::PacketType::Ack)) view.add(r.packet.ack);
    return view.covers(path, seq);
  });
  if (!view.covers(path, seq)) return std::nullopt;
  return view;
}

std::optional<AckView> wait_completed(Session& s, const SuiteQp& qp, uint32_t msn) {
  AckView view;
  auto done = [&] {
    const auto it = view.completed.find(qp.qpn);
    return it != view.completed.end() && !seq_after(msn, it->second);
  };
  s.pump(Clock::now() + s.timing().reply, [&](const Received& r) {
    if (r.is(wire::PacketType::Ack)) view.add(r.packet.ack);
    return done();
  });
  if (!done()) return std::nullopt;
  return view;
}

Fixture make_fixture(Session& s, uint64_t length, uint32_t access) {
  Fixture f;
  f.qp = &s.open_qp();
  f.region = s.control().register_region(length, access);
  return f;
}

void observer_verdict(CaseContext& c, const std::string& case_id) {
  const Observer& o = c.session().observer();
  std::string detail = std::to_string(o.finding_count(case_id)) + " finding(s): ";
  for (const std::string& f : o.findings(case_id)) detail += f + "; ";
  c.check("observed", o.finding_count(case_id) == 0, detail);
}

std::vector<uint8_t> framed(Session& s, std::vector<uint8_t> body) { return s.peer().frame(std::move(body)); }

std::vector<SentPacket> send_message(Session& s, SuiteQp& qp, MessageSpec& spec) {
  if (!spec.msn) spec.msn = qp.next_msn++;
  const bool consumes = wire::consumes_receive(spec.opcode);
  if (consumes && !spec.recv_index) spec.recv_index = qp.next_recv_index++;
  const uint32_t mtu = std::max<uint32_t>(s.target().mtu, 1);
  const uint32_t length = static_cast<uint32_t>(spec.payload.size());
  std::vector<SentPacket> sent;
  uint32_t offset = 0;
  size_t index = 0;
  do {
    const uint32_t n = std::min<uint32_t>(mtu, length - offset);
    wire::DataHeader h = s.request_header(qp, spec.opcode, *spec.msn);
    h.attempt = spec.attempt;
    h.msg_length = length;
    h.offset = offset;
    if (consumes) h.recv_index = *spec.recv_index;
    if (spec.opcode == wire::Opcode::Write || spec.opcode == wire::Opcode::WriteImm) {
      h.remote_addr = spec.remote_addr;
      h.rkey = spec.rkey;
    }
    if (spec.opcode == wire::Opcode::SendImm || spec.opcode == wire::Opcode::WriteImm) h.imm = spec.imm;
    h.flags = spec.flags;
    if (offset + n >= length) h.flags |= wire::kFlagAckRequest;
    const uint8_t path = spec.paths[index % spec.paths.size()];
    std::vector<uint8_t> body = s.data_body(path, h, std::span(spec.payload).subspan(offset, n));
    sent.push_back({path, h.path_seq, offset});
    s.send(std::move(body), path);
    offset += n;
    ++index;
  } while (offset < length);
  return sent;
}

uint32_t send_read(Session& s, SuiteQp& qp, uint8_t path, uint64_t addr, uint32_t rkey, uint32_t length,
                   uint64_t sink_addr, uint32_t sink_key) {
  const uint32_t msn = qp.next_msn++;
  wire::DataHeader h = s.request_header(qp, wire::Opcode::ReadRequest, msn);
  h.msg_length = length;
  h.remote_addr = addr;
  h.rkey = rkey;
  h.flags = wire::kFlagAckRequest;
  const wire::ReadRequest read{sink_addr, sink_key};
  s.send(s.data_body(path, h, {}, &read), path);
  return msn;
}

uint32_t send_atomic(Session& s, SuiteQp& qp, uint8_t path, wire::Opcode opcode, uint64_t addr, uint32_t rkey,
                     uint64_t compare_add, uint64_t swap) {
  const uint32_t msn = qp.next_msn++;
  wire::DataHeader h = s.request_header(qp, opcode, msn);
  h.msg_length = 8;
  h.remote_addr = addr;
  h.rkey = rkey;
  h.flags = wire::kFlagAckRequest;
  const wire::AtomicRequest atomic{compare_add, opcode == wire::Opcode::CompareSwap ? swap : 0};
  s.send(s.data_body(path, h, {}, nullptr, &atomic), path);
  return msn;
}

const InboundMessage* wait_response(Session& s, SuiteQp& qp, uint32_t msn) {
  const uint32_t qpn = qp.qpn;
  auto whole = [&]() -> const InboundMessage* {
    SuiteQp* q = s.find_qp(qpn);
    if (!q) return nullptr;
    const auto it = q->responses.find(msn);
    return it != q->responses.end() && it->second.complete ? &it->second : nullptr;
  };
  s.pump(Clock::now() + s.timing().reply, [&](const Received&) { return whole() != nullptr; });
  return whole();
}

void target_post(Session& s, const SuiteQp& qp, const TargetWork& work) {
  control::Request r;
  r.qpn = qp.target_qpn;
  r.wr_id = work.wr_id;
  r.opcode = work.opcode;
  r.sge = work.sge;
  r.remote_addr = work.remote_addr;
  r.rkey = work.rkey;
  r.imm = work.imm;
  r.compare_add = work.compare_add;
  r.swap = work.swap;
  s.control().post_send(r);
}

std::vector<TargetCompletion> target_completions(Session& s, const SuiteQp& qp, size_t count) {
  // The suite answers the target (ACKs, responses) only while it pumps, so
  // it polls the target's CQ between short pumps rather than blocking in it.
  std::vector<TargetCompletion> out;
  const auto deadline = Clock::now() + s.timing().reply;
  while (out.size() < count && Clock::now() < deadline) {
    for (TargetCompletion& t : s.control().poll(qp.target_qpn, static_cast<uint32_t>(count - out.size()), 0))
      out.push_back(std::move(t));
    if (out.size() >= count) break;
    s.pump(Clock::now() + std::chrono::milliseconds(2));
  }
  return out;
}

std::optional<TargetCompletion> target_completion(Session& s, const SuiteQp& qp) {
  std::vector<TargetCompletion> got = target_completions(s, qp, 1);
  if (got.empty()) return std::nullopt;
  return got.front();
}

}  // namespace metaroce::compliance
