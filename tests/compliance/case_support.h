// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Checks the cases share: "the target reacted with nothing", "exactly this
// drop counter moved", what the target's ACKs report, and a QP with a
// registered region to aim requests at.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compliance_case.h"
#include "control_protocol.h"
#include "session.h"

namespace metaroce::compliance {

inline constexpr uint32_t kAllAccess =
    control::kLocalWrite | control::kRemoteWrite | control::kRemoteRead | control::kRemoteAtomic;

// One line about a received datagram, for failure details.
std::string describe(const Received& r);
std::string describe_all(const std::vector<Received>& got);

// What in `got` answers something: ACKs, NAKs, ProbeReplies, data and
// anything undecodable. A Probe is not: the target probes its paths on its own.
std::vector<Received> reactions(const std::vector<Received>& got);

// After the case sent what must be ignored: a barrier, then the quiet
// window, and nothing may have answered it. Datagrams `ignore` accepts are
// not answers (a target's own retransmissions of a pending request).
using Ignore = std::function<bool(const Received&)>;
bool expect_no_reaction(CaseContext& c, const std::string& check, const Ignore& ignore = {});

// The drop counters (control::kDropCounters) moved by exactly `times` in
// `counter` and nothing else since `before`.
bool expect_drops(CaseContext& c, const std::string& check, const std::map<std::string, uint64_t>& before,
                  const std::string& counter, int64_t times = 1);

// settle() (unless the target has a request pending that the case keeps
// unacknowledged: `ignore` then names its packets), `send`, no reaction,
// and exactly one drop in `counter`.
bool expect_silent_drop(CaseContext& c, const std::string& check, const std::string& counter,
                        const std::function<void()>& send, const Ignore& ignore = {});

// What a series of the target's ACKs reports, the latest block per path and
// the latest completed_msn per suite QP.
struct AckView {
  std::map<uint16_t, wire::PathSack> blocks;
  std::map<uint32_t, uint32_t> completed;
  size_t acks = 0;
  bool covers(uint16_t path, uint32_t seq) const;
  // A block for `path` reaches past `seq` and says it was not received.
  bool reports_missing(uint16_t path, uint32_t seq) const;
  void add(const wire::Ack& ack);
};
AckView ack_view(const std::vector<Received>& got);

// Waits (reply timeout) until the target's ACKs cover `seq` on `path`;
// the view of every ACK seen meanwhile.
std::optional<AckView> wait_acked(Session& s, uint16_t path, uint32_t seq);
// Waits until an ACK says `qp`'s requests up to `msn` completed.
std::optional<AckView> wait_completed(Session& s, const SuiteQp& qp, uint32_t msn);

// A suite QP connected to a fresh target QP, and a registered region.
struct Fixture {
  SuiteQp* qp = nullptr;
  Region region;
};
Fixture make_fixture(Session& s, uint64_t length, uint32_t access = kAllAccess);

// A message the suite sends to the target, segmented at the target's mtu.
struct MessageSpec {
  wire::Opcode opcode = wire::Opcode::Write;
  std::optional<uint32_t> msn;  // default: the QP's next (and the QP moves on)
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  std::optional<uint32_t> recv_index;  // default for SEND*, WRITE_IMM: the QP's next ordinal
  std::vector<uint8_t> payload;
  uint16_t attempt = 0;
  uint8_t flags = 0;              // on every packet; ACK_REQUEST goes on the last as well
  std::vector<uint8_t> paths{0};  // packet i leaves on paths[i % size]
};
struct SentPacket {
  uint8_t path = 0;
  uint32_t seq = 0;
  uint32_t offset = 0;
};
// Sends every packet of the message; returns them (spec.msn is filled in).
std::vector<SentPacket> send_message(Session& s, SuiteQp& qp, MessageSpec& spec);
// A READ_REQ of `length` bytes at the target's (addr, rkey); the response
// is to name (sink_addr, sink_key). Returns its msn.
uint32_t send_read(Session& s, SuiteQp& qp, uint8_t path, uint64_t addr, uint32_t rkey, uint32_t length,
                   uint64_t sink_addr, uint32_t sink_key);
uint32_t send_atomic(Session& s, SuiteQp& qp, uint8_t path, wire::Opcode opcode, uint64_t addr, uint32_t rkey,
                     uint64_t compare_add, uint64_t swap);
// Waits until the target's response to `msn` is whole; null when it is not
// within the reply timeout.
const InboundMessage* wait_response(Session& s, SuiteQp& qp, uint32_t msn);

// The target posts a request on its QP (connected to `qp`).
struct TargetWork {
  control::SendOpcode opcode = control::SendOpcode::Write;
  uint64_t wr_id = 0;
  std::vector<control::Sge> sge;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
};
void target_post(Session& s, const SuiteQp& qp, const TargetWork& work);
// Waits for one completion of the target QP; null when none came in time.
std::optional<TargetCompletion> target_completion(Session& s, const SuiteQp& qp);
// While pumping the suite's side: `count` completions of the target QP
// within the reply timeout (fewer when they did not come).
std::vector<TargetCompletion> target_completions(Session& s, const SuiteQp& qp, size_t count);

// Whether the observer filed anything under `case_id` so far, as a check.
void observer_verdict(CaseContext& c, const std::string& case_id);

// The datagram `body` framed with a broken trailer etc. is a case's own
// business; this frames it as the suite's endpoint does.
std::vector<uint8_t> framed(Session& s, std::vector<uint8_t> body);

}  // namespace metaroce::compliance
