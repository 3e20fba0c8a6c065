// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// docs/spec.md section 8: receiver behaviour.
#include "case_support.h"
#include "raw_layout.h"

namespace metaroce::compliance {
namespace {

using wire::Opcode;
using wire::PacketType;

// A second endpoint on the suite's address that the target was never told
// about (another home port).
std::unique_ptr<WirePeer> stranger(Session& s, std::string& error) {
  sockaddr_storage target;
  make_address(s.target().address, s.target().home_port, target);
  return WirePeer::open(s.peer().local_ip(), target, s.peer().epoch() ^ 0x5a5a5a5au, error);
}

// `body` (built for the suite's endpoint) as the stranger sends it: its own
// home port, epochs and packet number.
std::vector<uint8_t> from_stranger(WirePeer& other, std::vector<uint8_t> body) {
  raw::put16(body, raw::kHomePort, other.home_port());
  return other.frame(std::move(body));
}

}  // namespace

COMPLIANCE_CASE(duplicate_not_written, "C-8.3a", Stimulus,
                "a late copy of a completed message is acknowledged and discarded: its bytes are not written again") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 8192);
  SuiteQp& qp = *f.qp;
  MessageSpec m;
  m.remote_addr = f.region.addr;
  m.rkey = f.region.key;
  m.payload = Session::pattern(0x83, 64);
  m.paths = {2};
  send_message(s, qp, m);
  c.check("write-completes", wait_completed(s, qp, *m.msn).has_value(), "no ACK completed the WRITE");
  // The application reuses its buffer.
  const std::vector<uint8_t> reused(64, 0xee);
  s.control().write(f.region.addr, reused);
  const std::map<std::string, uint64_t> before = s.counters();
  // A copy of the same packet under a new path_seq, then the whole message
  // again as a new attempt.
  MessageSpec copy = m;
  copy.flags = wire::kFlagRetransmit;
  copy.paths = {3};
  const std::vector<SentPacket> resent = send_message(s, qp, copy);
  c.check("copy-acknowledged", wait_acked(s, 3, resent.back().seq).has_value(),
          "the late copy was not acknowledged promptly");
  MessageSpec again = m;
  again.attempt = 1;
  again.paths = {1};
  const std::vector<SentPacket> retried = send_message(s, qp, again);
  c.check("attempt-acknowledged", wait_acked(s, 1, retried.back().seq).has_value(),
          "the late new attempt was not acknowledged promptly");
  c.check("write-not-repeated", s.control().read(f.region.addr, 64) == reused,
          "a copy of the completed WRITE wrote the reused buffer");
  const std::map<std::string, int64_t> change = Session::delta(before, s.counters());
  c.check("counted-as-duplicates", change.count("rx_duplicate_completed") && change.at("rx_duplicate_completed") == 2,
          "rx_duplicate_completed did not count the two copies");

  // A SEND: its copy must not land in the next posted receive.
  const uint64_t first = f.region.addr + 1024, second = f.region.addr + 2048;
  s.control().post_recv(qp.target_qpn, 11, {{first, 256, f.region.key}});
  s.control().post_recv(qp.target_qpn, 12, {{second, 256, f.region.key}});
  MessageSpec send;
  send.opcode = Opcode::Send;
  send.payload = Session::pattern(0x84, 100);
  send.paths = {2};
  send_message(s, qp, send);
  const std::optional<TargetCompletion> received = target_completion(s, qp);
  c.check("send-received",
          received && received->status == "success" && received->wr_id == 11 && received->byte_len == 100,
          "the SEND did not complete the first receive with 100 bytes");
  MessageSpec send_copy = send;
  send_copy.flags = wire::kFlagRetransmit;
  send_copy.paths = {0};
  const std::vector<SentPacket> send_resent = send_message(s, qp, send_copy);
  c.check("send-copy-acknowledged", wait_acked(s, 0, send_resent.back().seq).has_value(),
          "the SEND's late copy was not acknowledged");
  s.barrier();
  c.check(
      "second-receive-untouched",
      s.control().poll(qp.target_qpn, 1, 0).empty() && s.control().read(second, 100) == std::vector<uint8_t>(100, 0),
      "the SEND's copy consumed or wrote the next receive");
  s.close_qp(qp);
}

COMPLIANCE_CASE(probe_answered, "C-8.8a", Stimulus,
                "a Probe from a known peer is answered with a ProbeReply echoing probe_seq, timestamp and path_id; "
                "one from an unknown peer is not") {
  Session& s = c.session();
  struct Probe {
    uint8_t path;
    uint32_t seq;
    uint64_t timestamp;
  };
  const Probe probes[] = {{0, 0x880001, 0x1111}, {7, 0x880002, 0x2222222222ull}, {63, 0xfffffffe, ~0ull}};
  for (const Probe& p : probes) {
    const std::string name = "path-" + std::to_string(p.path);
    s.send(s.probe_body(p.path, PacketType::Probe, p.seq, p.timestamp), p.path);
    const std::optional<Received> reply =
        s.expect([&](const Received& r) { return r.is(PacketType::ProbeReply) && r.packet.probe.probe_seq == p.seq; });
    if (!c.check(name, reply.has_value(), "no ProbeReply")) continue;
    c.check(name + "/timestamp", reply->packet.probe.timestamp == p.timestamp, "the timestamp was not echoed");
    c.check(name + "/path-id", reply->packet.common.path_id == p.path,
            "the reply names path " + std::to_string(reply->packet.common.path_id));
  }
  std::string error;
  std::unique_ptr<WirePeer> other = stranger(s, error);
  if (!c.check("stranger-socket", other != nullptr, error)) return;
  s.settle();
  const std::map<std::string, uint64_t> before = s.counters();
  other->send(from_stranger(*other, s.probe_body(0, PacketType::Probe, 0x880003, 3)), 0);
  expect_no_reaction(c, "unknown-peer");
  c.check("unknown-peer/no-reply", !other->receive(Clock::now()).has_value(),
          "the target answered an endpoint it does not know");
  expect_drops(c, "unknown-peer", before, "rx_drop_unknown_peer");
}

COMPLIANCE_CASE(any_path_id, "C-8.12a", Stimulus,
                "data on any path_id below 64 is accepted, with SACK state kept per path") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  // One WRITE per path, path 40 twice with a sequence number skipped
  // between, which its ACK block must report as missing.
  constexpr uint8_t kGapPath = 40;
  const uint8_t paths[] = {0, 17, kGapPath, 63, kGapPath};
  std::vector<SentPacket> sent;
  uint32_t skipped = 0;
  for (size_t i = 0; i < std::size(paths); ++i) {
    MessageSpec m;
    m.remote_addr = f.region.addr + 64 * i;
    m.rkey = f.region.key;
    m.payload = Session::pattern(0x812 + static_cast<uint32_t>(i), 64);
    m.paths = {paths[i]};
    if (i == 4) skipped = s.take_seq(kGapPath);
    const std::vector<SentPacket> p = send_message(s, *f.qp, m);
    sent.insert(sent.end(), p.begin(), p.end());
  }
  const uint32_t last_msn = f.qp->next_msn - 1;
  AckView view;
  auto complete = [&] {
    for (const SentPacket& p : sent)
      if (!view.covers(p.path, p.seq)) return false;
    const auto it = view.completed.find(f.qp->qpn);
    return it != view.completed.end() && it->second == last_msn;
  };
  s.pump(Clock::now() + s.timing().reply, [&](const Received& r) {
    if (r.is(PacketType::Ack)) view.add(r.packet.ack);
    return complete();
  });
  for (const SentPacket& p : sent)
    c.check("path-" + std::to_string(p.path), view.covers(p.path, p.seq),
            "no ACK block reports path_seq " + std::to_string(p.seq) + " of path " + std::to_string(p.path));
  c.check("gap-reported", view.reports_missing(kGapPath, skipped),
          "path 40's block does not report its skipped path_seq as missing");
  bool placed = true;
  for (size_t i = 0; i < std::size(paths); ++i)
    placed &= s.control().read(f.region.addr + 64 * i, 64) == Session::pattern(0x812 + static_cast<uint32_t>(i), 64);
  c.check("placed", placed, "not every WRITE was placed");
  c.check("completed", view.completed.count(f.qp->qpn) && view.completed.at(f.qp->qpn) == last_msn,
          "no ACK reported the WRITEs completed");
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(no_reflection, "C-8.14a", Stimulus,
                "no ACK or NAK for a datagram from an unknown peer, to an unknown QP or from the wrong QP; "
                "none of them is recorded for SACK") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  constexpr uint8_t kPath = 9;
  std::vector<uint32_t> refused;
  // WRITEs with ACK_REQUEST and a bad rkey: anything that got past the
  // QP lookup would be NAKed.
  auto bad_write = [&](uint32_t dst_qpn, uint32_t src_qpn) {
    wire::DataHeader h = s.request_header(*f.qp, Opcode::Write, f.qp->next_msn);
    h.dst_qpn = dst_qpn;
    h.src_qpn = src_qpn;
    h.msg_length = 16;
    h.remote_addr = f.region.addr;
    h.rkey = f.region.key ^ 0x00ff0000u;
    h.flags = wire::kFlagAckRequest;
    std::vector<uint8_t> body = s.data_body(kPath, h, Session::pattern(0x814, 16));
    refused.push_back(h.path_seq);
    return body;
  };
  expect_silent_drop(c, "unknown-qp", "rx_drop_unknown_qp",
                     [&] { s.send(bad_write(f.qp->target_qpn + 0x1000, f.qp->qpn), kPath); });
  expect_silent_drop(c, "wrong-source-qp", "rx_drop_unknown_qp",
                     [&] { s.send(bad_write(f.qp->target_qpn, f.qp->qpn + 0x1000), kPath); });
  std::string error;
  std::unique_ptr<WirePeer> other = stranger(s, error);
  if (c.check("stranger-socket", other != nullptr, error)) {
    expect_silent_drop(c, "unknown-peer", "rx_drop_unknown_peer", [&] {
      std::vector<uint8_t> body = bad_write(f.qp->target_qpn, f.qp->qpn);
      refused.pop_back();  // another peer's path: not in the suite's SACK state
      other->send(from_stranger(*other, std::move(body)), kPath);
    });
    c.check("unknown-peer/nothing-to-it", !other->receive(Clock::now()).has_value(),
            "the target sent something to an endpoint it does not know");
  }
  MessageSpec valid;
  valid.remote_addr = f.region.addr;
  valid.rkey = f.region.key;
  valid.payload = Session::pattern(0x815, 16);
  valid.paths = {kPath};
  const std::vector<SentPacket> sent = send_message(s, *f.qp, valid);
  const std::optional<AckView> view = wait_acked(s, kPath, sent.back().seq);
  if (c.check("valid-write-acknowledged", view.has_value(), "the valid WRITE after them was not acknowledged")) {
    std::string recorded;
    for (const uint32_t seq : refused)
      if (!view->reports_missing(kPath, seq)) recorded += std::to_string(seq) + " ";
    c.check("not-recorded", recorded.empty(), "the ACK does not report path_seq(s) " + recorded + "as missing");
  }
  s.close_qp(*f.qp);
}

}  // namespace metaroce::compliance
