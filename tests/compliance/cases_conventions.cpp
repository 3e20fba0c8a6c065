// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// docs/spec.md section 1: encoding conventions and the transport mapping.
#include <cstring>

#include "case_support.h"
#include "ip_capture.h"
#include "raw_layout.h"

namespace metaroce::compliance {
namespace {

using wire::Opcode;
using wire::PacketType;

bool is_probe_reply(const Received& r, uint32_t seq) {
  return r.is(PacketType::ProbeReply) && r.packet.probe.probe_seq == seq;
}

constexpr uint32_t kSuiteSinkKey = 0x5151;
constexpr uint64_t kSuiteSinkAddr = 0x5000;

}  // namespace

COMPLIANCE_CASE(reserved_sent_as_zero, "C-1.1a", Observed,
                "reserved fields are sent as zero (ACK, READ_REQ extension, Probe and ProbeReply)") {
  const Observer::Seen& seen = c.session().observer().seen();
  c.check("kinds-seen",
          seen.types[raw::kTypeAck] > 0 && seen.types[raw::kTypeProbeReply] > 0 && seen.opcodes[raw::kOpReadReq] > 0,
          "the run did not make the target send an ACK, a ProbeReply and a READ_REQ");
  observer_verdict(c, "C-1.1a");
}

COMPLIANCE_CASE(reserved_ignored, "C-1.1b", Stimulus,
                "reserved fields are ignored on receipt (Probe, READ_REQ extension, ACK)") {
  Session& s = c.session();
  // A Probe whose reserved word is all ones is answered as any Probe.
  std::vector<uint8_t> probe = s.probe_body(3, PacketType::Probe, 0xa110, 0x1122334455667788ull);
  raw::put32(probe, raw::kProbeReserved, 0xffffffffu);
  s.send(probe, 3);
  const std::optional<Received> reply = s.expect([](const Received& r) { return is_probe_reply(r, 0xa110); });
  c.check("probe", reply && reply->packet.probe.timestamp == 0x1122334455667788ull,
          "no ProbeReply echoing the Probe with a reserved word set");

  // A READ_REQ whose extension's reserved word is set is served.
  Fixture f = make_fixture(s, 4096);
  const std::vector<uint8_t> content = Session::pattern(0x1b, 256);
  s.control().write(f.region.addr, content);
  wire::DataHeader h = s.request_header(*f.qp, Opcode::ReadRequest, f.qp->next_msn++);
  h.msg_length = static_cast<uint32_t>(content.size());
  h.remote_addr = f.region.addr;
  h.rkey = f.region.key;
  h.flags = wire::kFlagAckRequest;
  const wire::ReadRequest read{kSuiteSinkAddr, kSuiteSinkKey};
  std::vector<uint8_t> body = s.data_body(2, h, {}, &read);
  raw::put32(body, raw::kReadReqReserved, 0xdeadbeefu);
  s.send(body, 2);
  const InboundMessage* response = wait_response(s, *f.qp, h.msn);
  c.check("read-request",
          response && response->bytes == content && response->remote_addr == kSuiteSinkAddr &&
              response->rkey == kSuiteSinkKey,
          "no READ_RESP with the region's bytes for a READ_REQ with its reserved word set");

  // An ACK with both reserved fields set completes the WRITE it acknowledges.
  s.set_auto_ack(false);
  target_post(s, *f.qp, {control::SendOpcode::Write, 7, {{f.region.addr, 8, f.region.key}}, 0x7000, 0x7777});
  const std::optional<Received> data = s.expect([](const Received& r) { return r.is_data(Opcode::Write); });
  if (!c.check("write-arrives", data.has_value(), "the target's WRITE did not arrive")) return;
  std::vector<uint8_t> ack = s.ack_body(s.current_ack());
  raw::put16(ack, raw::kAckReserved, 0xffff);
  raw::put32(ack, raw::kAckReserved2, 0xffffffffu);
  s.send(ack, 1);
  const std::optional<TargetCompletion> done = target_completion(s, *f.qp);
  c.check("ack", done && done->status == "success" && done->wr_id == 7,
          done ? "the WRITE completed with " + done->status : "the ACK with reserved fields set completed nothing");
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(unused_fields_zero, "C-1.1c", Workload,
                "fields an opcode or packet type does not use are sent as zero (every opcode, NAK kinds 1 and 2)") {
  Session& s = c.session();
  const uint32_t mtu = s.target().mtu;
  Fixture f = make_fixture(s, 8 * uint64_t{mtu} + 4096);
  SuiteQp& qp = *f.qp;
  const Region& r = f.region;
  const std::vector<uint8_t> source = Session::pattern(3, 3 * mtu + 5);
  s.control().write(r.addr, source);
  const uint64_t sink = r.addr + 4 * uint64_t{mtu};
  // Atomics need 8-byte aligned addresses (IB spec 9.4.5); an mtu need not be a multiple of 8.
  const uint64_t atomics = (r.addr + 7 * uint64_t{mtu} + 7) & ~uint64_t{7};

  // The target as requester: every request opcode; the suite answers as a
  // responder (session.h).
  const uint32_t first = qp.target_first_msn;
  const std::vector<TargetWork> work = {
      {control::SendOpcode::Send, 1, {{r.addr, 100, r.key}}},
      {control::SendOpcode::SendImm, 2, {{r.addr, 100, r.key}}, 0, 0, 0xabcd0001},
      {control::SendOpcode::Write, 3, {{r.addr, 3 * mtu + 5, r.key}}, 0x10000, 0x1111},
      {control::SendOpcode::WriteImm, 4, {{r.addr, 64, r.key}}, 0x18000, 0x1111, 0xabcd0004},
      {control::SendOpcode::Read, 5, {{sink, 2 * mtu + 3, r.key}}, 0x20000, 0x2222},
      {control::SendOpcode::FetchAdd, 6, {{atomics, 8, r.key}}, 0x30000, 0x3333, 0, 5},
      {control::SendOpcode::CompareSwap, 7, {{atomics + 8, 8, r.key}}, 0x30008, 0x3333, 0, 1, 2},
  };
  for (const TargetWork& w : work) target_post(s, qp, w);
  const std::vector<TargetCompletion> done = target_completions(s, qp, work.size());
  bool all_ok = done.size() == work.size();
  std::string statuses;
  for (size_t i = 0; i < done.size(); ++i) {
    all_ok &= done[i].status == "success" && done[i].wr_id == i + 1;
    statuses += std::to_string(done[i].wr_id) + ":" + done[i].status + " ";
  }
  c.check("target-requests-complete", all_ok, "completions: " + statuses);
  const auto write = qp.inbound.find(first + 2);
  c.check("write-bytes", write != qp.inbound.end() && write->second.bytes == source,
          "the suite did not receive the WRITE's bytes as the target's buffer held them");
  c.check("read-sink", s.control().read(sink, 2 * mtu + 3) == Session::pattern(first + 4, 2 * mtu + 3),
          "the READ's sink does not hold the suite's READ_RESP bytes");
  const std::vector<uint8_t> originals = s.control().read(atomics, 16);
  uint64_t fetched = 0, swapped = 0;
  std::memcpy(&fetched, originals.data(), 8);
  std::memcpy(&swapped, originals.data() + 8, 8);
  c.check("atomic-results",
          fetched == Session::atomic_original(first + 5) && swapped == Session::atomic_original(first + 6),
          "the atomics' local buffers do not hold the originals of the suite's ATOMIC_RESPs");

  // The target as responder: READ_RESP over several packets, ATOMIC_RESP.
  const uint32_t read_msn = send_read(s, qp, 1, r.addr, r.key, 2 * mtu + 3, kSuiteSinkAddr, kSuiteSinkKey);
  const InboundMessage* read = wait_response(s, qp, read_msn);
  c.check("read-response", read && read->bytes == std::vector<uint8_t>(source.begin(), source.begin() + 2 * mtu + 3),
          "no READ_RESP with the region's bytes");
  const uint32_t add_msn = send_atomic(s, qp, 2, Opcode::FetchAdd, atomics + 64, r.key, 9, 0);
  const InboundMessage* add = wait_response(s, qp, add_msn);
  const uint32_t swap_msn = send_atomic(s, qp, 3, Opcode::CompareSwap, atomics + 64, r.key, 9, 42);
  const InboundMessage* swap = wait_response(s, qp, swap_msn);
  uint64_t value = 0;
  std::memcpy(&value, s.control().read(atomics + 64, 8).data(), 8);
  c.check("atomic-responses", add && add->original == 0 && swap && swap->original == 9 && value == 42,
          "FETCH_ADD 9 then COMPARE_SWAP 9->42 on a zero word did not answer 0 and 9 and leave 42");

  // NAKs: RemoteAccess for a bad key, ReceiverNotReady for a SEND without a receive.
  Fixture bad_key = make_fixture(s, 4096);
  MessageSpec wrong;
  wrong.remote_addr = bad_key.region.addr;
  wrong.rkey = bad_key.region.key ^ 0x00ff0000u;
  wrong.payload = Session::pattern(4, 32);
  send_message(s, *bad_key.qp, wrong);
  c.check("nak-remote-access", s.expect([](const Received& x) {
                                  return x.is(PacketType::Nak) && x.packet.nak.kind == wire::NakKind::RemoteAccess;
                                }).has_value(),
          "no NAK RemoteAccess for a WRITE with a bad rkey");
  Fixture no_receive = make_fixture(s, 4096);
  MessageSpec send;
  send.opcode = Opcode::Send;
  send.payload = Session::pattern(5, 32);
  send_message(s, *no_receive.qp, send);
  c.check("nak-rnr", s.expect([](const Received& x) {
                        return x.is(PacketType::Nak) && x.packet.nak.kind == wire::NakKind::ReceiverNotReady;
                      }).has_value(),
          "no NAK ReceiverNotReady for a SEND without a posted receive");
  for (Fixture* fixture : {&f, &bad_key, &no_receive}) s.close_qp(*fixture->qp);

  const Observer::Seen& seen = s.observer().seen();
  std::string missing;
  for (uint8_t op = 0; op < raw::kOpcodeLimit; ++op)
    if (seen.opcodes[op] == 0) missing += std::to_string(op) + " ";
  c.check("every-opcode-seen", missing.empty(), "the target sent no data packet with opcode(s) " + missing);
  observer_verdict(c, "C-1.1c");
}

COMPLIANCE_CASE(
    one_packet_per_datagram, "C-1.2a", Stimulus,
    "one packet per datagram: two Probes in one datagram are dropped; a packet inside a payload is payload") {
  Session& s = c.session();
  WirePeer& peer = s.peer();
  expect_silent_drop(c, "concatenated-probes", "rx_drop_malformed", [&] {
    std::vector<uint8_t> datagram;
    for (uint32_t seq : {0xc0c0u, 0xc0c1u}) {
      std::vector<uint8_t> probe = s.probe_body(0, PacketType::Probe, seq, 1);
      wire::stamp_common(probe, wire::Security::Integrity, peer.epoch(), peer.target_epoch(),
                         peer.next_packet_number(peer.target_epoch()));
      datagram.insert(datagram.end(), probe.begin(), probe.end());
    }
    raw::append_crc(datagram);
    s.send_raw(datagram, 0);
  });

  // A WRITE whose payload is a whole framed Probe: placed, and not answered as a Probe.
  Fixture f = make_fixture(s, 4096);
  const std::vector<uint8_t> inner = framed(s, s.probe_body(0, PacketType::Probe, 0xc0c2, 2));
  MessageSpec m;
  m.remote_addr = f.region.addr;
  m.rkey = f.region.key;
  m.payload = inner;
  m.paths = {4};
  const std::vector<SentPacket> sent = send_message(s, *f.qp, m);
  c.check("payload-acknowledged", wait_acked(s, 4, sent.back().seq).has_value(), "the WRITE was not acknowledged");
  const std::optional<std::vector<Received>> before = s.barrier();
  std::vector<Received> got = before.value_or(std::vector<Received>{});
  for (Received& r : s.listen_quiet()) got.push_back(std::move(r));
  bool answered = false;
  for (const Received& r : got) answered |= is_probe_reply(r, 0xc0c2);
  c.check("payload-not-a-packet", !answered, "the target answered the Probe carried as a WRITE's payload");
  c.check("payload-placed", s.control().read(f.region.addr, inner.size()) == inner,
          "the region does not hold the WRITE's payload");
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(not_fragmented, "C-1.2b", Workload,
                "datagrams are not IP-fragmented: IPv4 DF set, no fragments (AF_PACKET capture)") {
  Session& s = c.session();
  std::string why;
  std::unique_ptr<IpCapture> capture = IpCapture::open(s.peer().local_ip(), s.peer().home_port(), why);
  if (!capture) {
    c.skip(why);
    return;
  }
  const uint32_t mtu = s.target().mtu;
  Fixture f = make_fixture(s, 4 * uint64_t{mtu});
  target_post(s, *f.qp, {control::SendOpcode::Write, 1, {{f.region.addr, 3 * mtu, f.region.key}}, 0x40000, 0x4444});
  const std::optional<TargetCompletion> done = target_completion(s, *f.qp);
  c.check("write-completes", done && done->status == "success", "the target's WRITE did not complete");
  MessageSpec m;
  m.remote_addr = f.region.addr;
  m.rkey = f.region.key;
  m.payload = Session::pattern(6, 100);
  const std::vector<SentPacket> sent = send_message(s, *f.qp, m);
  wait_acked(s, sent.back().path, sent.back().seq);
  s.close_qp(*f.qp);
  const std::vector<CapturedIp> packets = capture->collect(Clock::now() + s.timing().quiet);
  size_t without_df = 0, fragments = 0;
  for (const CapturedIp& p : packets) {
    if (!p.ipv6 && !p.dont_fragment) ++without_df;
    if (p.fragment) ++fragments;
  }
  c.check("captured", packets.size() >= 4, "captured " + std::to_string(packets.size()) + " datagrams of the target");
  c.check("dont-fragment", without_df == 0, std::to_string(without_df) + " IPv4 datagrams without DF");
  c.check("no-fragments", fragments == 0, std::to_string(fragments) + " IP fragments");
}

COMPLIANCE_CASE(fits_path_mtu, "C-1.2c", Observed, "every datagram fits the path MTU") {
  const Observer::Seen& seen = c.session().observer().seen();
  c.check("full-packets-seen", seen.largest >= c.session().target().mtu,
          "the run made the target send no data packet with a full mtu of payload");
  observer_verdict(c, "C-1.2c");
}

COMPLIANCE_CASE(sent_from_named_slot, "C-1.2d", Workload,
                "Data and Probes leave from the source port of the path slot path_id names") {
  Session& s = c.session();
  const uint32_t mtu = s.target().mtu;
  if (s.target().paths < 2) {
    c.skip("the target sends on one path; the Probe of a failing path cannot be provoked");
    observer_verdict(c, "C-1.2d");
    return;
  }
  // Losing everything the target sends on its path 1 while acknowledging
  // its other paths makes it judge path 1 failing and probe it (spec 8.7, 8.8).
  // A path is judged by a timeout of a packet sent before others that were
  // acknowledged, so the target keeps sending: a WRITE every few
  // milliseconds until the Probe comes.
  constexpr uint16_t kStarved = 1;
  constexpr uint64_t kMaxWrites = 32;
  constexpr auto kEvery = std::chrono::milliseconds(20);
  Fixture f = make_fixture(s, 9 * uint64_t{mtu});
  s.set_loss([](const wire::Packet& p) { return p.common.path_id == kStarved; });
  uint16_t data_port = 0, probe_port = 0;
  uint64_t posted = 0;
  const auto deadline = Clock::now() + 4 * s.timing().reply;
  while (probe_port == 0 && posted < kMaxWrites && Clock::now() < deadline) {
    target_post(s, *f.qp,
                {control::SendOpcode::Write, ++posted, {{f.region.addr, 8 * mtu, f.region.key}}, 0x50000, 0x5555});
    s.pump(Clock::now() + kEvery, [&](const Received& r) {
      if (r.is(PacketType::Data) && r.packet.common.path_id == kStarved) data_port = r.datagram->source_port;
      if (r.is(PacketType::Probe) && r.packet.common.path_id == kStarved) probe_port = r.datagram->source_port;
      return probe_port != 0;
    });
  }
  s.set_loss({});
  s.send_ack();
  const std::vector<TargetCompletion> done = target_completions(s, *f.qp, posted);
  bool all_ok = done.size() == posted;
  for (const TargetCompletion& t : done) all_ok &= t.status == "success";
  c.check("writes-complete", all_ok, "the target's WRITEs did not all complete");
  c.check("data-on-path", data_port != 0, "no data packet of the target named path 1");
  c.check("probe-sent", probe_port != 0, "the target did not probe the path whose packets went unacknowledged");
  c.check("probe-port", probe_port == data_port,
          "the Probe for path 1 left from port " + std::to_string(probe_port) + ", its data from " +
              std::to_string(data_port));
  s.close_qp(*f.qp);
  observer_verdict(c, "C-1.2d");
}

COMPLIANCE_CASE(sent_ect0, "C-1.2e", Observed, "every datagram is sent ECN-capable, ECT(0)") {
  const Observer::Seen& seen = c.session().observer().seen();
  c.check("ecn-reported", seen.ecn_reported == seen.datagrams && seen.datagrams > 0,
          "the kernel reported the ECN field of " + std::to_string(seen.ecn_reported) + " of " +
              std::to_string(seen.datagrams) + " datagrams");
  observer_verdict(c, "C-1.2e");
}

}  // namespace metaroce::compliance
