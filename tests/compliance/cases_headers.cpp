// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// docs/spec.md sections 2 to 6: the common header, data packets, ACK, NAK
// and Probe as the target sends them.
#include "case_support.h"
#include "raw_layout.h"

namespace metaroce::compliance {
namespace {

using wire::Opcode;
using wire::PacketType;

}  // namespace

COMPLIANCE_CASE(common_header, "C-2a", Observed,
                "the common header: a Probe built byte by byte is answered by a ProbeReply laid out as section 2 "
                "says; version, type, security, path_id < 64, home_port, epochs and packet numbers of every datagram") {
  Session& s = c.session();
  WirePeer& peer = s.peer();
  constexpr uint8_t kPath = 0x2a;
  constexpr uint32_t kSeq = 0x2a2b2c2d;
  constexpr uint64_t kTimestamp = 0x0102030405060708ull;
  std::vector<uint8_t> probe = raw::common_header(raw::kTypeProbe, kPath, peer.home_port(), 0, peer.epoch(),
                                                  peer.target_epoch(), peer.next_packet_number(peer.target_epoch()));
  probe.resize(raw::kProbeBytes, 0);
  raw::put32(probe, raw::kProbeSeq, kSeq);
  raw::put64(probe, raw::kProbeTimestamp, kTimestamp);
  raw::append_crc(probe);
  s.send_raw(probe, kPath);
  const std::vector<Received> got = s.pump(Clock::now() + s.timing().reply, [&](const Received& r) {
    const std::vector<uint8_t>& b = r.datagram->bytes;
    return b.size() >= raw::kProbeSeq + 4 && b[raw::kType] == raw::kTypeProbeReply &&
           raw::be32(b, raw::kProbeSeq) == kSeq;
  });
  const bool replied = !got.empty() && got.back().datagram->bytes.size() >= raw::kProbeSeq + 4 &&
                       raw::be32(got.back().datagram->bytes, raw::kProbeSeq) == kSeq;
  if (c.check("hand-built-probe-answered", replied, "no ProbeReply to a Probe assembled from section 2 and 6")) {
    const std::vector<uint8_t>& b = got.back().datagram->bytes;
    c.check("reply-length", b.size() == raw::kProbeBytes + raw::kCrcBytes,
            std::to_string(b.size()) + " bytes, not 36 + 4");
    if (b.size() == raw::kProbeBytes + raw::kCrcBytes) {
      c.check("reply-version", b[raw::kVersion] == raw::kWireVersion, "byte 0 is " + std::to_string(b[0]));
      c.check("reply-security", b[raw::kSecurity] == 0, "byte 2 is " + std::to_string(b[2]));
      c.check("reply-path-id", b[raw::kPathId] == kPath,
              "byte 3 is " + std::to_string(b[3]) + ", not the Probe's path_id " + std::to_string(kPath));
      c.check("reply-home-port", raw::be16(b, raw::kHomePort) == s.target().home_port,
              "bytes 4-5 are " + std::to_string(raw::be16(b, raw::kHomePort)));
      c.check("reply-src-epoch",
              raw::be32(b, raw::kSrcEpoch) != 0 && raw::be32(b, raw::kSrcEpoch) == peer.target_epoch(),
              "bytes 8-11 are not the target's epoch");
      c.check("reply-dst-epoch", raw::be32(b, raw::kDstEpoch) == peer.epoch(), "bytes 12-15 are not the suite's epoch");
      c.check("reply-reserved", raw::be32(b, raw::kProbeReserved) == 0, "bytes 24-27 are not zero");
      c.check("reply-timestamp", raw::be64(b, raw::kProbeTimestamp) == kTimestamp,
              "bytes 28-35 do not echo the Probe's timestamp");
      c.check("reply-trailer", raw::crc_matches(b), "bytes 36-39 are not the big-endian CRC32C of bytes 0-35");
    }
  }
  c.check("datagrams-seen", s.observer().seen().datagrams > 0, "the target sent nothing");
  std::string numbering;
  for (const auto& [epoch, lowest] : s.observer().lowest_packet_numbers())
    if (lowest != 1) numbering += "dst_epoch " + std::to_string(epoch) + " from " + std::to_string(lowest) + "; ";
  c.check("numbered-from-1", numbering.empty(), "packet numbers under a key do not start at 1: " + numbering);
  observer_verdict(c, "C-2a");
}

COMPLIANCE_CASE(flag_bits_zero, "C-3.1a", Observed, "data packets are sent with flag bits 2-7 zero") {
  uint64_t data = 0;
  for (const uint64_t n : c.session().observer().seen().opcodes) data += n;
  c.check("data-seen", data > 0, "the target sent no data packet");
  observer_verdict(c, "C-3.1a");
}

COMPLIANCE_CASE(message_fields_agree, "C-3.3b", Workload,
                "the packets of one message carry identical fields; a packet that differs is refused with NAK "
                "InvalidRequest and not placed") {
  Session& s = c.session();
  const uint32_t mtu = s.target().mtu;
  Fixture f = make_fixture(s, 5 * uint64_t{mtu});
  target_post(s, *f.qp, {control::SendOpcode::Write, 1, {{f.region.addr, 4 * mtu, f.region.key}}, 0x60000, 0x6666});
  const std::optional<TargetCompletion> done = target_completion(s, *f.qp);
  c.check("write-completes", done && done->status == "success", "the target's 4-packet WRITE did not complete");
  s.close_qp(*f.qp);
  c.check("multi-packet-seen", s.observer().seen().multi_packet_messages > 0,
          "the run made the target send no message of more than one packet");
  observer_verdict(c, "C-3.3b");

  // The receiver's side (section 8.3 step 6): the second packet of a WRITE
  // names another rkey, message length or address.
  struct Variant {
    const char* name;
    void (*change)(wire::DataHeader&, uint32_t mtu);
  };
  const Variant variants[] = {
      {"other-rkey", [](wire::DataHeader& h, uint32_t) { h.rkey ^= 0x1; }},
      {"other-length", [](wire::DataHeader& h, uint32_t m) { h.msg_length += m; }},
      {"other-address", [](wire::DataHeader& h, uint32_t) { h.remote_addr += 64; }},
  };
  for (const Variant& v : variants) {
    Fixture g = make_fixture(s, 3 * uint64_t{mtu});
    const std::vector<uint8_t> payload = Session::pattern(0x33, 2 * mtu);
    const uint32_t msn = g.qp->next_msn++;
    wire::DataHeader h = s.request_header(*g.qp, Opcode::Write, msn);
    h.msg_length = 2 * mtu;
    h.remote_addr = g.region.addr;
    h.rkey = g.region.key;
    s.send(s.data_body(5, h, std::span(payload).first(mtu)), 5);
    h.offset = mtu;
    h.flags = wire::kFlagAckRequest;
    v.change(h, mtu);
    s.send(s.data_body(5, h, std::span(payload).subspan(mtu)), 5);
    const std::optional<Received> nak = s.expect([&](const Received& r) {
      return r.is(PacketType::Nak) && r.packet.nak.msn == msn && r.packet.nak.qpn == g.qp->qpn;
    });
    c.check(std::string(v.name) + "/nak", nak && nak->packet.nak.kind == wire::NakKind::InvalidRequest,
            nak ? "NAK kind " + std::to_string(static_cast<int>(nak->packet.nak.kind)) : std::string("no NAK"));
    c.check(std::string(v.name) + "/not-placed",
            s.control().read(g.region.addr + mtu, mtu) == std::vector<uint8_t>(mtu, 0),
            "the inconsistent packet's bytes were written");
    s.close_qp(*g.qp);
  }
}

COMPLIANCE_CASE(payload_within_message, "C-3.4a", Observed,
                "a data packet's payload lies within its message: offset + payload length <= msg_length") {
  c.check("payload-seen", c.session().observer().seen().largest > 0, "the target sent no payload");
  observer_verdict(c, "C-3.4a");
}

COMPLIANCE_CASE(retransmission_same_bytes, "C-3.5a", Workload,
                "a retransmission carries the same offset and bytes as the original packet") {
  Session& s = c.session();
  const uint32_t mtu = s.target().mtu;
  Fixture f = make_fixture(s, 9 * uint64_t{mtu});
  const std::vector<uint8_t> source = Session::pattern(0x35, 8 * mtu);
  s.control().write(f.region.addr, source);
  // The first data packet is lost on the way to the suite: the target must
  // find it lost and send its bytes again (spec 8.7).
  std::optional<Received> original, resent;
  const uint32_t qpn = f.qp->qpn;
  s.set_loss([&](const wire::Packet& p) {
    if (p.data.dst_qpn != qpn) return false;
    return !original ||
           (p.common.path_id == original->packet.common.path_id && p.data.path_seq == original->packet.data.path_seq);
  });
  target_post(s, *f.qp, {control::SendOpcode::Write, 1, {{f.region.addr, 8 * mtu, f.region.key}}, 0x70000, 0x7777});
  s.pump(Clock::now() + 4 * s.timing().reply, [&](const Received& r) {
    if (!r.is(PacketType::Data) || r.packet.data.dst_qpn != qpn) return false;
    if (!original) {
      original = r;
      return false;
    }
    if (r.packet.data.msn == original->packet.data.msn && r.packet.data.offset == original->packet.data.offset)
      resent = r;
    return resent.has_value();
  });
  const std::optional<TargetCompletion> done = target_completion(s, *f.qp);
  c.check("write-completes", done && done->status == "success", "the target's WRITE did not complete");
  if (c.check("retransmitted", resent.has_value(), "the unacknowledged packet was never sent again")) {
    const wire::Packet& a = original->packet;
    const wire::Packet& b = resent->packet;
    c.check("flagged", (b.data.flags & wire::kFlagRetransmit) != 0, "the resent packet lacks RETRANSMIT");
    c.check("new-sequence", b.common.path_id != a.common.path_id || b.data.path_seq != a.data.path_seq,
            "the resent packet reused its path_seq (section 8.2)");
    c.check("same-bytes", std::equal(a.payload.begin(), a.payload.end(), b.payload.begin(), b.payload.end()),
            "the resent packet carries other bytes");
  }
  const auto write = f.qp->inbound.find(f.qp->target_first_msn);
  c.check("bytes-intact", write != f.qp->inbound.end() && write->second.bytes == source,
          "the suite did not receive the buffer's bytes");
  s.close_qp(*f.qp);
  observer_verdict(c, "C-3.5a");
}

COMPLIANCE_CASE(ack_block_path_ids, "C-4.2a", Observed, "ACK path blocks name a path_id below 64") {
  c.check("acks-seen", c.session().observer().seen().types[raw::kTypeAck] > 0, "the target sent no ACK");
  observer_verdict(c, "C-4.2a");
}

COMPLIANCE_CASE(nak_data_path_ids, "C-5a", Observed, "NAKs name a data_path_id below 64") {
  c.check("naks-seen", c.session().observer().seen().types[raw::kTypeNak] > 0, "the target sent no NAK");
  observer_verdict(c, "C-5a");
}

}  // namespace metaroce::compliance
