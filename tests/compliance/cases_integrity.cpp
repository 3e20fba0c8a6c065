// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// docs/spec.md section 9: the trailer, security modes, epochs and packet
// numbers. The trailers here are written with raw_layout.h's CRC32C, not
// the engine's.
#include <string_view>

#include "case_support.h"
#include "raw_layout.h"

namespace metaroce::compliance {
namespace {

using wire::Opcode;
using wire::PacketType;

// `body` with its common header stamped in integrity mode with these
// epochs and packet number, and no trailer.
std::vector<uint8_t> stamped(Session& s, std::vector<uint8_t> body, uint32_t dst_epoch, uint32_t number,
                             wire::Security security = wire::Security::Integrity) {
  wire::stamp_common(body, security, s.peer().epoch(), dst_epoch, number);
  return body;
}

std::vector<uint8_t> with_crc(std::vector<uint8_t> datagram) {
  raw::append_crc(datagram);
  return datagram;
}

bool probe_answered(Session& s, uint32_t seq) {
  return s.expect([&](const Received& r) { return r.is(PacketType::ProbeReply) && r.packet.probe.probe_seq == seq; })
      .has_value();
}

// A 32-byte WRITE with ACK_REQUEST to the fixture's region at `offset`.
std::vector<uint8_t> write_body(Session& s, const Fixture& f, uint8_t path, uint64_t offset, uint32_t* seq = nullptr) {
  wire::DataHeader h = s.request_header(*f.qp, Opcode::Write, f.qp->next_msn);
  h.msg_length = 32;
  h.remote_addr = f.region.addr + offset;
  h.rkey = f.region.key;
  h.flags = wire::kFlagAckRequest;
  std::vector<uint8_t> body = s.data_body(path, h, Session::pattern(0x91, 32));
  if (seq) *seq = h.path_seq;
  return body;
}

}  // namespace

COMPLIANCE_CASE(integrity_trailer, "C-9.1a", Observed,
                "in integrity mode every datagram ends in the big-endian CRC32C of everything before it") {
  constexpr std::string_view kCheck = "123456789";
  const std::vector<uint8_t> check(kCheck.begin(), kCheck.end());
  c.check("suite-crc32c", raw::crc32c(check) == 0xe3069283u, "the suite's own CRC32C fails its check value");
  c.check("datagrams-seen", c.session().observer().seen().datagrams > 0, "the target sent nothing");
  observer_verdict(c, "C-9.1a");
}

COMPLIANCE_CASE(bad_trailer_dropped, "C-9.1b", Stimulus,
                "a datagram whose trailer does not check is dropped and counted: no answer, no state change") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  constexpr uint8_t kPath = 11;
  std::vector<uint32_t> refused;
  auto bad = [&](const char* name, const std::function<std::vector<uint8_t>(std::vector<uint8_t>)>& spoil) {
    expect_silent_drop(c, name, "rx_drop_integrity", [&] {
      uint32_t seq = 0;
      std::vector<uint8_t> body = write_body(s, f, kPath, 0, &seq);
      refused.push_back(seq);
      const uint32_t te = s.peer().target_epoch();
      s.send_raw(spoil(stamped(s, std::move(body), te, s.peer().next_packet_number(te))), kPath);
    });
  };
  bad("payload-bit", [](std::vector<uint8_t> d) {
    d = with_crc(std::move(d));
    d[raw::kDataBytes + 5] ^= 0x10;
    return d;
  });
  bad("header-bit", [](std::vector<uint8_t> d) {
    d = with_crc(std::move(d));
    d[raw::kDstQpn + 3] ^= 0x01;
    return d;
  });
  bad("crc-little-endian", [](std::vector<uint8_t> d) {
    const uint32_t crc = raw::crc32c(d);
    for (int i = 0; i < 4; ++i) d.push_back(static_cast<uint8_t>(crc >> (8 * i)));
    return d;
  });
  bad("no-trailer", [](std::vector<uint8_t> d) { return d; });
  bad("crc-after-common-header-only", [](std::vector<uint8_t> d) {
    const uint32_t crc = raw::crc32c(std::span<const uint8_t>(d).subspan(raw::kCommonBytes));
    d.resize(d.size() + 4);
    raw::put32(d, d.size() - 4, crc);
    return d;
  });
  expect_silent_drop(c, "probe-crc-plus-one", "rx_drop_integrity", [&] {
    const uint32_t te = s.peer().target_epoch();
    std::vector<uint8_t> d =
        with_crc(stamped(s, s.probe_body(0, PacketType::Probe, 0x91b, 1), te, s.peer().next_packet_number(te)));
    raw::put32(d, d.size() - 4, raw::be32(d, d.size() - 4) + 1);
    s.send_raw(d, 0);
  });
  c.check("memory-untouched", s.control().read(f.region.addr, 64) == std::vector<uint8_t>(64, 0),
          "a datagram with a bad trailer wrote the region");
  uint32_t seq = 0;
  s.send(write_body(s, f, kPath, 1024, &seq), kPath);
  const std::optional<AckView> view = wait_acked(s, kPath, seq);
  if (c.check("valid-write-acknowledged", view.has_value(), "a valid WRITE after them was not acknowledged")) {
    std::string recorded;
    for (const uint32_t r : refused)
      if (!view->reports_missing(kPath, r)) recorded += std::to_string(r) + " ";
    c.check("not-recorded", recorded.empty(), "the ACK does not report path_seq(s) " + recorded + "as missing");
  }
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(other_mode_dropped, "C-9.1c", Stimulus,
                "a datagram protected in another mode than the receiver's is dropped and counted") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  const struct {
    const char* name;
    wire::Security mode;
  } modes[] = {{"authenticate", wire::Security::Authenticate}, {"encrypt", wire::Security::Encrypt}};
  for (const auto& m : modes) {
    const std::string name = m.name;
    // A tag's worth of bytes where the trailer goes; the receiver must not
    // get as far as checking it.
    auto tagged = [&](std::vector<uint8_t> body) {
      const uint32_t te = s.peer().target_epoch();
      std::vector<uint8_t> d = stamped(s, std::move(body), te, s.peer().next_packet_number(te), m.mode);
      d.resize(d.size() + wire::kAuthTagBytes, 0xa5);
      return d;
    };
    expect_silent_drop(c, name + "-probe", "rx_drop_security_mode",
                       [&] { s.send_raw(tagged(s.probe_body(0, PacketType::Probe, 0x91c, 1)), 0); });
    expect_silent_drop(c, name + "-write", "rx_drop_security_mode",
                       [&] { s.send_raw(tagged(write_body(s, f, 12, 0)), 12); });
  }
  c.check("memory-untouched", s.control().read(f.region.addr, 32) == std::vector<uint8_t>(32, 0),
          "a datagram of another mode wrote the region");
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(stale_destination_epoch, "C-9.4a", Stimulus,
                "a datagram whose dst_epoch is neither 0 nor the receiver's epoch is dropped; dst_epoch 0 is not") {
  Session& s = c.session();
  Fixture f = make_fixture(s, 4096);
  WirePeer& peer = s.peer();
  const uint32_t wrong = peer.target_epoch() ^ 0x0f0f0f0fu;
  expect_silent_drop(c, "probe", "rx_drop_stale_epoch", [&] {
    s.send_raw(
        with_crc(stamped(s, s.probe_body(0, PacketType::Probe, 0x94a, 1), wrong, peer.next_packet_number(wrong))), 0);
  });
  expect_silent_drop(c, "write", "rx_drop_stale_epoch", [&] {
    s.send_raw(with_crc(stamped(s, write_body(s, f, 13, 0), wrong, peer.next_packet_number(wrong))), 13);
  });
  c.check("memory-untouched", s.control().read(f.region.addr, 32) == std::vector<uint8_t>(32, 0),
          "a datagram for another incarnation wrote the region");
  // Not learned yet (0) is what every first datagram says: accepted.
  s.send_raw(with_crc(stamped(s, s.probe_body(0, PacketType::Probe, 0x94b, 1), 0, peer.next_packet_number(0))), 0);
  c.check("dst-epoch-0-accepted", probe_answered(s, 0x94b), "a Probe with dst_epoch 0 was not answered");
  s.close_qp(*f.qp);
}

COMPLIANCE_CASE(replay_dropped, "C-9.5a", Stimulus,
                "a packet number seen before, 4096 or more below the highest, or more than 2^24 above it is "
                "dropped and counted") {
  Session& s = c.session();
  WirePeer& peer = s.peer();
  const uint32_t te = peer.target_epoch();
  auto probe = [&](uint32_t seq, uint32_t number) {
    return with_crc(stamped(s, s.probe_body(0, PacketType::Probe, seq, 1), te, number));
  };

  const std::vector<uint8_t> once = probe(0x95a0, peer.next_packet_number(te));
  s.send_raw(once, 0);
  c.check("first-copy-answered", probe_answered(s, 0x95a0), "the Probe was not answered");
  expect_silent_drop(c, "replayed-probe", "rx_drop_replay", [&] { s.send_raw(once, 0); });

  Fixture f = make_fixture(s, 4096);
  uint32_t seq = 0;
  const std::vector<uint8_t> write = s.peer().frame(write_body(s, f, 14, 0, &seq));
  s.send_raw(write, 14);
  c.check("write-acknowledged", wait_acked(s, 14, seq).has_value(), "the WRITE was not acknowledged");
  s.control().write(f.region.addr, std::vector<uint8_t>(32, 0));
  expect_silent_drop(c, "replayed-write", "rx_drop_replay", [&] { s.send_raw(write, 14); });
  c.check("replayed-write/not-placed", s.control().read(f.region.addr, 32) == std::vector<uint8_t>(32, 0),
          "the replayed WRITE wrote the region");
  s.close_qp(*f.qp);

  // The window: 4096 below the highest accepted number. A jump of 5000
  // leaves the numbers below it unused, so that an unseen one just inside
  // the window can be tried; the highest is the last one the suite sent
  // (its barrier Probes move it on).
  const uint32_t high = peer.last_packet_number(te) + 5000;
  s.send_raw(probe(0x95a1, high), 0);
  peer.skip_packet_numbers(te, high + 1);
  c.check("jump-ahead-answered", probe_answered(s, 0x95a1), "a Probe 5000 numbers ahead was not answered");
  expect_silent_drop(c, "4096-below", "rx_drop_replay",
                     [&] { s.send_raw(probe(0x95a2, peer.last_packet_number(te) - 4096), 0); });
  s.send_raw(probe(0x95a3, peer.last_packet_number(te) - 4095), 0);
  c.check("4095-below-answered", probe_answered(s, 0x95a3), "an unseen number 4095 below the highest was refused");
  expect_silent_drop(c, "beyond-2^24-ahead", "rx_drop_replay",
                     [&] { s.send_raw(probe(0x95a4, peer.last_packet_number(te) + (uint32_t{1} << 24) + 1), 0); });
  s.send(s.probe_body(0, PacketType::Probe, 0x95a5, 1), 0);
  c.check("numbering-goes-on", probe_answered(s, 0x95a5), "the next number after the highest was refused");
}

}  // namespace metaroce::compliance
