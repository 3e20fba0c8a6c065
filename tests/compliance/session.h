// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What the cases share: the side channel, the suite's endpoint on the wire,
// the observer, and the suite's side of the connection — its QPs, what it
// received from the target on each of the target's paths, and the next
// path_seq of each of its own paths.
//
// Every datagram from the target goes through pump(): the observer checks it,
// the suite learns the target's epoch from it, records data packets for its
// ACKs, answers Probes (spec 8.8) and, unless a case says otherwise,
// acknowledges the target's data and answers its READs and atomics the way
// a responder does, so that the target's transfers complete between cases.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "control_client.h"
#include "metaroce/wire.h"
#include "observer.h"
#include "wire_peer.h"

namespace metaroce::compliance {

struct Timing {
  // How long a response the spec requires may take.
  std::chrono::milliseconds reply{2000};
  // After a barrier: how long the suite listens for a reaction that must not come.
  std::chrono::milliseconds quiet{40};
};

// A datagram from the target, decoded by the engine's decoder when its
// trailer checks (the observer has judged its bytes independently).
struct Received {
  std::shared_ptr<const Datagram> datagram;
  bool decoded = false;
  wire::Packet packet;  // payload points into *datagram

  uint8_t type() const { return decoded ? static_cast<uint8_t>(packet.common.type) : 0; }
  bool is(wire::PacketType t) const { return decoded && packet.common.type == t; }
  bool is_data(wire::Opcode op) const { return is(wire::PacketType::Data) && packet.data.opcode == op; }
};

// A message the target sent to one of the suite's QPs, as received.
struct InboundMessage {
  wire::Opcode opcode = wire::Opcode::Write;
  uint32_t length = 0;
  uint32_t recv_index = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  wire::ReadRequest read;
  wire::AtomicRequest atomic;
  uint64_t original = 0;             // ATOMIC_RESP
  std::vector<uint8_t> bytes;        // payload placed by offset
  std::map<uint32_t, uint32_t> got;  // offset -> length of the chunks received
  bool complete = false;
  bool answered = false;  // READ_RESP / ATOMIC_RESP sent
};

// One of the suite's QPs and the target QP connected to it.
struct SuiteQp {
  uint32_t qpn = 0;  // the suite's number
  uint32_t target_qpn = 0;
  uint32_t next_msn = 0;          // the suite's next request
  uint32_t next_recv_index = 0;   // ordinal of the target receive WQE the next SEND consumes
  uint32_t target_first_msn = 0;  // the msn of the target's first request
  uint32_t target_completed = 0;  // the target's requests completed at the suite (serial)
  bool target_completed_any = false;
  std::map<uint32_t, InboundMessage> inbound;    // the target's requests, by msn
  std::map<uint32_t, InboundMessage> responses;  // the target's READ/atomic responses, by msn
};

class Session {
 public:
  Session(ControlClient& control, std::unique_ptr<WirePeer> peer, Observer& observer, TargetInfo target, Timing timing);

  ControlClient& control() { return control_; }
  WirePeer& peer() { return *peer_; }
  Observer& observer() { return observer_; }
  const TargetInfo& target() const { return target_; }
  const Timing& timing() const { return timing_; }

  // --- QPs ---------------------------------------------------------------
  // A fresh suite QP and a target QP connected to it; msns start at
  // arbitrary, distinct values in both directions. The first one also makes
  // the suite a known peer of the target (connections are made at setup,
  // spec 8.1), so the session opens one when it starts.
  SuiteQp& open_qp();
  void close_qp(SuiteQp& qp);
  SuiteQp* find_qp(uint32_t suite_qpn);

  // --- building what the suite sends ----------------------------------------
  uint32_t take_seq(uint8_t path) { return next_seq_[path]++; }
  // Common + data header (+ extension) + payload, by the engine's encoder;
  // header.path_seq is set to the next sequence number of `path`.
  std::vector<uint8_t> data_body(uint8_t path, wire::DataHeader& header, std::span<const uint8_t> payload = {},
                                 const wire::ReadRequest* read = nullptr, const wire::AtomicRequest* atomic = nullptr,
                                 const uint64_t* atomic_original = nullptr);
  // A header for a request of `qp` at message `msn`: dst/src QP, opcode.
  wire::DataHeader request_header(const SuiteQp& qp, wire::Opcode opcode, uint32_t msn) const;
  std::vector<uint8_t> probe_body(uint8_t path, wire::PacketType type, uint32_t probe_seq, uint64_t timestamp) const;
  std::vector<uint8_t> nak_body(uint8_t path, const wire::Nak& nak) const;
  // The ACK the suite would send now: a block for each target path it has
  // heard, a stream entry for each of its QPs that completed a target request.
  wire::Ack current_ack() const;
  std::vector<uint8_t> ack_body(const wire::Ack& ack) const;

  // Frames (epochs, packet number, CRC) and sends from `slot`.
  void send(std::vector<uint8_t> body, uint8_t slot);
  // Sends bytes exactly as given.
  void send_raw(std::span<const uint8_t> datagram, uint8_t slot);

  // --- receiving -----------------------------------------------------------
  // Receives until `deadline`, or until `stop` returns true for a datagram
  // (which is then the last one returned).
  std::vector<Received> pump(Clock::time_point deadline, const std::function<bool(const Received&)>& stop = {});
  // The first datagram matching `match` within the reply timeout.
  std::optional<Received> expect(const std::function<bool(const Received&)>& match);
  // Sends a Probe and waits for its ProbeReply: the target has processed
  // everything sent before it. Returns what arrived before the reply, or
  // nothing when no reply came.
  std::optional<std::vector<Received>> barrier();
  // Everything that arrives within the quiet window.
  std::vector<Received> listen_quiet();
  // Waits until the target has sent nothing for a quiet window (bounded).
  bool settle();

  // A case that needs to see the target's data unacknowledged, or some of
  // it, says so here; reset to "acknowledge everything" between cases.
  void set_auto_ack(bool on) { auto_ack_ = on; }
  // Data packets from the target for which this returns true are treated
  // as lost on the way: observed, but neither recorded, acknowledged nor
  // placed in the suite's view of their message.
  void set_loss(std::function<bool(const wire::Packet&)> lose) { lose_ = std::move(lose); }
  void set_auto_answer(bool on) { auto_answer_ = on; }
  void reset_policies();

  // Sends the suite's current ACK now.
  void send_ack();

  // The counters the target reports, and the change between two readings.
  std::map<std::string, uint64_t> counters() { return control_.counters(); }
  static std::map<std::string, int64_t> delta(const std::map<std::string, uint64_t>& before,
                                              const std::map<std::string, uint64_t>& after);

  // Bytes the suite puts in its READ responses and WRITE/SEND payloads.
  static std::vector<uint8_t> pattern(uint32_t seed, size_t length);
  // The original value the suite answers the target's atomic `msn` with.
  static uint64_t atomic_original(uint32_t msn) { return 0x0123456789abcdefull ^ msn; }

 private:
  void handle(const Received& r, bool& acked_data);
  void record_data(const wire::Packet& p);
  void answer(SuiteQp& qp, uint32_t msn, InboundMessage& m);
  void advance(SuiteQp& qp);

  ControlClient& control_;
  std::unique_ptr<WirePeer> peer_;
  Observer& observer_;
  TargetInfo target_;
  Timing timing_;

  std::map<uint32_t, SuiteQp> qps_;  // by suite QP number
  uint32_t next_qpn_ = 0x00c0de01;
  uint32_t next_psn_ = 0x51000000;
  uint32_t next_probe_seq_ = 0x7000;
  std::array<uint32_t, 64> next_seq_{};
  uint32_t resident_qpn_ = 0;  // the QP that keeps the suite a known peer
  // What the suite received on each of the target's paths: the sequence
  // numbers (the last 256 below the highest matter).
  std::map<uint16_t, std::set<uint32_t>> received_;
  std::map<uint16_t, uint32_t> highest_;
  uint8_t reply_slot_ = 0;

  bool auto_ack_ = true;
  bool auto_answer_ = true;
  std::function<bool(const wire::Packet&)> lose_;
};

// The path block of `ack` for `path`, if any.
const wire::PathSack* find_block(const wire::Ack& ack, uint16_t path);
// The completed_msn `ack` reports for the suite QP `qpn`, if any.
std::optional<uint32_t> completed_msn(const wire::Ack& ack, uint32_t qpn);

}  // namespace metaroce::compliance
