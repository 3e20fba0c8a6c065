// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// docs/spec.md section 7: a datagram that breaks a rule of sections 2 to 6a
// is dropped without a reaction: no ACK, no NAK, no state change, one
// count in rx_drop_malformed. Each variant below is a valid packet with one
// rule broken and a correct trailer, so that nothing but the rule can be
// why it is dropped.
#include <chrono>
#include <cstddef>
#include <functional>
#include <utility>

#include "case_support.h"
#include "raw_layout.h"

namespace metaroce::compliance {
namespace {

using wire::Opcode;
using wire::PacketType;

constexpr const char* kMalformed = "rx_drop_malformed";

// Stamps the common header as the suite's endpoint does, lets `mutate`
// break it, and appends the CRC of the result.
std::vector<uint8_t> stamped_with_crc(Session& s, std::vector<uint8_t> body,
                                      const std::function<void(std::vector<uint8_t>&)>& mutate) {
  WirePeer& peer = s.peer();
  wire::stamp_common(body, wire::Security::Integrity, peer.epoch(), peer.target_epoch(),
                     peer.next_packet_number(peer.target_epoch()));
  mutate(body);
  raw::append_crc(body);
  return body;
}

struct Mutation {
  const char* name;
  std::function<void(std::vector<uint8_t>&)> apply;
};

// The target's WRITE to the suite, received and left unacknowledged, for
// the ACK and NAK cases: what they forge would complete or fail it.
struct PendingWrite {
  uint32_t msn = 0;
  uint16_t path = 0;
  uint16_t attempt = 0;
};

// `wr_id` counts the target's requests on the fixture's QP from 1, so the
// WRITE is message target_first_msn + wr_id - 1: a late resend of an
// earlier one is not taken for it.
std::optional<PendingWrite> pending_write(Session& s, const Fixture& f, uint64_t wr_id) {
  s.set_auto_ack(false);
  target_post(s, *f.qp, {control::SendOpcode::Write, wr_id, {{f.region.addr, 8, f.region.key}}, 0x8000, 0x8888});
  const uint32_t msn = f.qp->target_first_msn + static_cast<uint32_t>(wr_id - 1);
  const std::optional<Received> data = s.expect([&](const Received& r) {
    return r.is_data(Opcode::Write) && r.packet.data.dst_qpn == f.qp->qpn && r.packet.data.msn == msn;
  });
  if (!data) return std::nullopt;
  return PendingWrite{data->packet.data.msn, data->packet.common.path_id, data->packet.data.attempt};
}

// The target's resends of its pending WRITE are not answers to what the
// case forged.
Ignore its_resends(const Fixture& f) {
  const uint32_t qpn = f.qp->qpn;
  return [qpn](const Received& r) { return r.is(PacketType::Data) && r.packet.data.dst_qpn == qpn; };
}

}  // namespace

COMPLIANCE_CASE(bad_common_header, "C-7a", Stimulus,
                "datagrams whose common header breaks section 2 or 7 are dropped without a reaction") {
  Session& s = c.session();
  const Mutation mutations[] = {
      {"version-1", [](std::vector<uint8_t>& b) { b[raw::kVersion] = 1; }},
      {"version-3", [](std::vector<uint8_t>& b) { b[raw::kVersion] = 3; }},
      {"type-0", [](std::vector<uint8_t>& b) { b[raw::kType] = 0; }},
      {"type-6", [](std::vector<uint8_t>& b) { b[raw::kType] = 6; }},
      {"security-3", [](std::vector<uint8_t>& b) { b[raw::kSecurity] = 3; }},
      {"path-id-64", [](std::vector<uint8_t>& b) { b[raw::kPathId] = 64; }},
      {"path-id-255", [](std::vector<uint8_t>& b) { b[raw::kPathId] = 255; }},
  };
  uint32_t seq = 0x7a00;
  for (const Mutation& m : mutations) {
    expect_silent_drop(c, m.name, kMalformed, [&] {
      s.send_raw(stamped_with_crc(s, s.probe_body(0, PacketType::Probe, seq++, 7), m.apply), 0);
    });
  }
  // Too short for a common header, or for a common header and a trailer.
  expect_silent_drop(c, "shorter-than-header", kMalformed, [&] {
    std::vector<uint8_t> probe = s.peer().frame(s.probe_body(0, PacketType::Probe, seq++, 7));
    probe.resize(19);
    s.send_raw(probe, 0);
  });
  expect_silent_drop(c, "no-room-for-trailer", kMalformed, [&] {
    std::vector<uint8_t> probe = s.peer().frame(s.probe_body(0, PacketType::Probe, seq++, 7));
    probe.resize(raw::kCommonBytes + 3);
    s.send_raw(probe, 0);
  });
}

COMPLIANCE_CASE(bad_data_packet, "C-7b", Stimulus,
                "data packets that break a validity rule of section 3.4 are dropped without a reaction, not placed "
                "and not recorded for the path's SACK") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  constexpr uint8_t kPath = 6;
  const uint32_t msn = f.qp->next_msn;  // every variant claims the QP's next message
  std::vector<uint32_t> dropped_seqs;

  // A WRITE of `payload` bytes (or another opcode's packet) to the region's
  // start, with ACK_REQUEST: what a valid one would be.
  auto packet = [&](Opcode op, size_t payload, const std::function<void(wire::DataHeader&)>& edit) {
    wire::DataHeader h = s.request_header(*f.qp, op, msn);
    h.msg_length = wire::carries_payload(op) ? static_cast<uint32_t>(payload) : 8;
    h.remote_addr = f.region.addr;
    h.rkey = f.region.key;
    h.flags = wire::kFlagAckRequest;
    if (op == Opcode::ReadRequest) h.msg_length = 16;
    edit(h);
    const wire::ReadRequest read{0x9000, 0x99};
    const wire::AtomicRequest atomic{1, 0};
    const uint64_t original = 0;
    const std::vector<uint8_t> bytes = Session::pattern(0x7b, payload);
    std::vector<uint8_t> body =
        s.data_body(kPath, h, bytes, op == Opcode::ReadRequest ? &read : nullptr,
                    wire::is_atomic(op) ? &atomic : nullptr, op == Opcode::AtomicResponse ? &original : nullptr);
    dropped_seqs.push_back(h.path_seq);
    return body;
  };
  auto none = [](wire::DataHeader&) {};
  auto drop = [&](const char* name, std::vector<uint8_t> body,
                  const std::function<void(std::vector<uint8_t>&)>& mutate = {}) {
    expect_silent_drop(c, name, kMalformed, [&] {
      s.send_raw(stamped_with_crc(
                     s, std::move(body), mutate ? mutate : [](std::vector<uint8_t>&) {}),
                 kPath);
    });
  };

  drop("truncated-header", packet(Opcode::Write, 16, none), [](std::vector<uint8_t>& b) { b.resize(60); });
  drop("opcode-9", packet(Opcode::Write, 16, none), [](std::vector<uint8_t>& b) { b[raw::kOpcode] = 9; });
  drop("opcode-255", packet(Opcode::Write, 16, none), [](std::vector<uint8_t>& b) { b[raw::kOpcode] = 255; });
  drop("flags-0x04", packet(Opcode::Write, 16, none), [](std::vector<uint8_t>& b) { b[raw::kFlags] |= 0x04; });
  drop("flags-0x80", packet(Opcode::Write, 16, none), [](std::vector<uint8_t>& b) { b[raw::kFlags] |= 0x80; });
  drop("read-request-short-extension", packet(Opcode::ReadRequest, 0, none),
       [](std::vector<uint8_t>& b) { b.resize(raw::kDataBytes + 10); });
  drop("read-request-trailing-byte", packet(Opcode::ReadRequest, 0, none),
       [](std::vector<uint8_t>& b) { b.push_back(0); });
  drop("atomic-trailing-bytes", packet(Opcode::FetchAdd, 0, none),
       [](std::vector<uint8_t>& b) { b.resize(b.size() + 8, 0); });
  drop("atomic-response-short-extension", packet(Opcode::AtomicResponse, 0, none),
       [](std::vector<uint8_t>& b) { b.resize(raw::kDataBytes + 4); });
  drop("read-request-offset", packet(Opcode::ReadRequest, 0, [](wire::DataHeader& h) { h.offset = 4; }));
  drop("atomic-length-16", packet(Opcode::FetchAdd, 0, [](wire::DataHeader& h) { h.msg_length = 16; }));
  drop("atomic-offset-8", packet(Opcode::FetchAdd, 0, [](wire::DataHeader& h) { h.offset = 8; }));
  drop("payload-past-end", packet(Opcode::Write, 16, [](wire::DataHeader& h) {
         h.msg_length = 16;
         h.offset = 8;
       }));
  drop("offset-wraps", packet(Opcode::Write, 32, [](wire::DataHeader& h) {
         h.msg_length = 0xffffffffu;
         h.offset = 0xfffffff0u;
       }));
  drop("empty-payload", packet(Opcode::Write, 0, [](wire::DataHeader& h) { h.msg_length = 16; }));
  drop("empty-payload-at-offset", packet(Opcode::Write, 0, [](wire::DataHeader& h) { h.offset = 8; }));

  c.check("memory-untouched", s.control().read(f.region.addr, 64) == std::vector<uint8_t>(64, 0),
          "a dropped packet's bytes reached the region");
  // A valid WRITE on the same path: the ACK for it reports none of the
  // dropped packets as received.
  MessageSpec valid;
  valid.remote_addr = f.region.addr + 1024;
  valid.rkey = f.region.key;
  valid.payload = Session::pattern(0x7c, 16);
  valid.paths = {kPath};
  const std::vector<SentPacket> sent = send_message(s, *f.qp, valid);
  const std::optional<AckView> view = wait_acked(s, kPath, sent.back().seq);
  if (c.check("valid-write-acknowledged", view.has_value(), "the valid WRITE after them was not acknowledged")) {
    std::string recorded;
    for (const uint32_t seq : dropped_seqs)
      if (!view->reports_missing(kPath, seq)) recorded += std::to_string(seq) + " ";
    c.check("not-recorded", recorded.empty(), "the ACK does not report path_seq(s) " + recorded + "as missing");
  }
  c.check("valid-write-placed", s.control().read(f.region.addr + 1024, 16) == valid.payload,
          "the valid WRITE was not placed");
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(bad_ack, "C-7c", Stimulus,
                "ACKs that break section 4.4 are dropped: the WRITE they would complete stays incomplete") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  const Mutation mutations[] = {
      {"truncated-35", [](std::vector<uint8_t>& b) { b.resize(35); }},
      {"path-blocks-17", [](std::vector<uint8_t>& b) { b[raw::kAckPathBlocks] = 17; }},
      {"stream-entries-33", [](std::vector<uint8_t>& b) { b[raw::kAckStreamEntries] = 33; }},
      {"one-byte-short", [](std::vector<uint8_t>& b) { b.pop_back(); }},
      {"one-byte-long", [](std::vector<uint8_t>& b) { b.push_back(0); }},
      {"block-path-id-64", [](std::vector<uint8_t>& b) { raw::put16(b, raw::kAckFixedBytes + raw::kBlockPathId, 64); }},
  };
  uint64_t wr_id = 1;
  for (const Mutation& m : mutations) {
    const std::string name = m.name;
    const std::optional<PendingWrite> w = pending_write(s, f, wr_id);
    if (!c.check(name + "/write-arrives", w.has_value(), "the target's WRITE did not arrive")) break;
    const std::vector<uint8_t> ack = s.ack_body(s.current_ack());
    expect_silent_drop(
        c, name, kMalformed, [&] { s.send_raw(stamped_with_crc(s, ack, m.apply), 1); }, its_resends(f));
    c.check(name + "/no-completion", s.control().poll(f.qp->target_qpn, 1, 0).empty(),
            "the malformed ACK completed the WRITE");
    // The same ACK, well formed, completes it.
    s.send_ack();
    const std::optional<TargetCompletion> done = target_completion(s, *f.qp);
    c.check(name + "/valid-ack-completes", done && done->status == "success" && done->wr_id == wr_id,
            "the well-formed ACK did not complete the WRITE");
    s.set_auto_ack(true);
    ++wr_id;
  }
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(bad_nak, "C-7d", Stimulus,
                "NAKs that break section 5 are dropped: the WRITE they would fail completes when acknowledged") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  auto nak_for = [&](const PendingWrite& w) {
    wire::Nak n;
    n.kind = wire::NakKind::RemoteAccess;
    n.data_path_id = w.path;
    n.attempt = w.attempt;
    n.qpn = f.qp->target_qpn;
    n.msn = w.msn;
    return s.nak_body(1, n);
  };
  const Mutation mutations[] = {
      {"length-39", [](std::vector<uint8_t>& b) { b.pop_back(); }},
      {"length-41", [](std::vector<uint8_t>& b) { b.push_back(0); }},
      {"kind-0", [](std::vector<uint8_t>& b) { b[raw::kNakKind] = 0; }},
      {"kind-6", [](std::vector<uint8_t>& b) { b[raw::kNakKind] = 6; }},
      {"data-path-id-64", [](std::vector<uint8_t>& b) { b[raw::kNakDataPathId] = 64; }},
  };
  uint64_t wr_id = 1;
  for (const Mutation& m : mutations) {
    const std::string name = m.name;
    const std::optional<PendingWrite> w = pending_write(s, f, wr_id);
    if (!c.check(name + "/write-arrives", w.has_value(), "the target's WRITE did not arrive")) break;
    expect_silent_drop(
        c, name, kMalformed, [&] { s.send_raw(stamped_with_crc(s, nak_for(*w), m.apply), 1); }, its_resends(f));
    s.send_ack();
    const std::optional<TargetCompletion> done = target_completion(s, *f.qp);
    c.check(name + "/write-succeeds", done && done->status == "success" && done->wr_id == wr_id,
            done ? "the WRITE completed with " + done->status : std::string("the WRITE did not complete"));
    s.set_auto_ack(true);
    ++wr_id;
  }
  // The same NAK, well formed, fails the WRITE. A NAK counts only for the
  // attempt it names (spec 8.14), so a resend that crossed it is NAKed in
  // turn, as a responder would NAK every packet of the failed message.
  std::optional<PendingWrite> w = pending_write(s, f, wr_id);
  if (c.check("valid-nak/write-arrives", w.has_value(), "the target's WRITE did not arrive")) {
    s.send(nak_for(*w), 1);
    std::optional<TargetCompletion> done;
    const auto deadline = Clock::now() + s.timing().reply;
    while (!done && Clock::now() < deadline) {
      if (std::vector<TargetCompletion> got = s.control().poll(f.qp->target_qpn, 1, 0); !got.empty()) {
        done = std::move(got.front());
        break;
      }
      for (const Received& r : s.pump(Clock::now() + std::chrono::milliseconds(2))) {
        if (!r.is_data(Opcode::Write) || r.packet.data.dst_qpn != f.qp->qpn || r.packet.data.msn != w->msn ||
            r.packet.data.attempt == w->attempt)
          continue;
        w->attempt = r.packet.data.attempt;
        w->path = r.packet.common.path_id;
        s.send(nak_for(*w), 1);
      }
    }
    c.check("valid-nak", done && done->status == "rem_access_err",
            done ? "the WRITE completed with " + done->status : std::string("the WRITE did not complete"));
  }
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(bad_probe, "C-7e", Stimulus, "Probes and ProbeReplies not of exactly 36 bytes are dropped unanswered") {
  Session& s = c.session();
  const Mutation mutations[] = {
      {"35-bytes", [](std::vector<uint8_t>& b) { b.pop_back(); }},
      {"37-bytes", [](std::vector<uint8_t>& b) { b.push_back(0); }},
  };
  uint32_t seq = 0x7e00;
  for (const PacketType type : {PacketType::Probe, PacketType::ProbeReply}) {
    for (const Mutation& m : mutations) {
      const std::string name = std::string(type == PacketType::Probe ? "probe-" : "probe-reply-") + m.name;
      expect_silent_drop(c, name, kMalformed,
                         [&] { s.send_raw(stamped_with_crc(s, s.probe_body(0, type, seq++, 9), m.apply), 0); });
    }
  }
}

// A UD datagram is stamped as spec 6a says a sender stamps it (integrity
// mode, dst_epoch and packet_number 0), to a QP number the target need not
// have: the decoder refuses it before any QP is looked up.
COMPLIANCE_CASE(bad_ud_send, "C-7f", Stimulus,
                "UD sends with unknown flag bits or shorter than the UD header are dropped unanswered") {
  Session& s = c.session();
  constexpr size_t kFlagsOffset = wire::kCommonHeaderBytes + offsetof(wire::UdHeaderWire, flags);
  const Mutation mutations[] = {
      {"flag-bit-1", [](std::vector<uint8_t>& b) { b[kFlagsOffset] |= 0x02; }},
      {"flag-bit-7", [](std::vector<uint8_t>& b) { b[kFlagsOffset] |= 0x80; }},
      {"shorter-than-ud-header", [](std::vector<uint8_t>& b) { b.resize(wire::kUdHeaderBytes - 1); }},
  };
  for (const Mutation& m : mutations) {
    std::vector<uint8_t> body(wire::kUdHeaderBytes + 16, 0x5a);
    wire::UdHeader header;
    header.dst_qpn = 0x7f01;
    header.src_qpn = 0x7f02;
    header.qkey = 0x11111111;
    if (wire::encode_ud(body, wire::Origin(0, s.peer().home_port()), header, 16) == 0)
      throw CaseAbort("the engine's encoder refused a UD send");
    wire::stamp_common(body, wire::Security::Integrity, s.peer().epoch(), 0, 0);
    m.apply(body);
    raw::append_crc(body);
    expect_silent_drop(c, std::string("ud-") + m.name, kMalformed, [&] { s.send_raw(body, 0); });
  }
}

}  // namespace metaroce::compliance
