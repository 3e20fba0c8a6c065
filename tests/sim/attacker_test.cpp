// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Issue 11 item 5 in the simulator: an attacker node (tools/sim/attacker.h)
// sees every datagram of WRITE, READ, SEND and atomic transfers at 0, 1 and
// 10% loss and injects replays, corruptions and forgeries with a correct
// CRC32C from the genuine peer's own address and home port. Every transfer
// must complete with every work request successful and every byte (and
// atomic result) exact, and every injected datagram must be counted by its
// receiver as a drop, a duplicate or ignored control information: in
// integrity mode the forged claims are the inconsistent ones, which the
// consistency checks of docs/spec.md §8.14 ignore; in the authenticate and
// encrypt modes (where the attacker reads the plaintext, given the key) even
// consistent ones (a NAK of the attempt in flight) are dropped as
// authentication failures.
#include <gtest/gtest.h>

#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "attacker.h"
#include "engine_fixture.h"
#include "engine_printers.h"
#include "metaroce/splitmix64.h"
#include "rig.h"

namespace metaroce::sim {
namespace {

using transport::Completion;
using transport::Endpoint;
using transport::PostResult;
using transport::RecvWr;
using transport::SendWr;
using transport::WcStatus;
using transport::WrOpcode;

using testing::addr;
using testing::kAllAccess;
using testing::kPd;
constexpr uint32_t kMessages = 128;
constexpr uint32_t kMessageBytes = 24 * 1024 + 100;  // not a multiple of the MTU
constexpr uint32_t kAtomics = 128;
constexpr size_t kGuardBytes = 4096;       // after the sink: must stay untouched
constexpr Time kBudgetNs = 2'000'000'000;  // virtual

enum class Op { Write, Read, Send, Atomic };
const char* name(Op op) {
  switch (op) {
    case Op::Write: return "Write";
    case Op::Read: return "Read";
    case Op::Send: return "Send";
    case Op::Atomic: return "Atomic";
  }
  return "?";
}

struct Case {
  Op op;
  int loss_percent;
  wire::Security security;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(name(info.param.op)) + "_loss" + std::to_string(info.param.loss_percent) + "_" +
         wire::to_string(info.param.security);
}

struct Outcome {
  bool completed = false;
  uint64_t posted = 0, successes = 0, errors = 0;
  uint64_t corrupted_bytes = 0;
  AttackerReport report;
  transport::EndpointCounters a, b;
};

// A transfer between two engine hosts over 4 lossy paths with the attacker
// on the fabric: everything posted at once, then run to completion.
Outcome run(const Case& c, uint64_t seed, AttackerConfig attacker_config) {
  RigSpec spec;
  spec.seed = seed;
  spec.loss = c.loss_percent / 100.0;
  spec.endpoint.security = c.security;
  TwoHostRig rig(spec);
  Endpoint& a = rig.a().endpoint();
  Endpoint& b = rig.b().endpoint();
  if (c.security != wire::Security::Integrity) {
    transport::PairKey key;
    for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(0x5a + i);
    a.set_peer_key(rig.node_b(), key, 0);
    b.set_peer_key(rig.node_a(), key, 1);
    // In encrypt mode the attacker reads the plaintext, to forge as in the other modes.
    if (c.security == wire::Security::Encrypt) attacker_config.reads_plaintext_with = key;
  }
  const QpPair qp = rig.connect_qps({}, kPd);

  attacker_config.seed = seed;
  Attacker attacker(rig.sim(), attacker_config);
  attacker.watch(rig.node_a(), a);
  attacker.watch(rig.node_b(), b);
  rig.sim().set_tap(&attacker);

  // A's and B's memory: a seeded pattern at the source, a known fill at the
  // sink followed by a guard area.
  const size_t bytes = size_t{kMessages} * kMessageBytes;
  std::vector<uint8_t> source(bytes), sink(bytes + kGuardBytes, 0xee);
  SplitMix64 pattern(seed * 7 + 1);
  for (uint8_t& x : source) x = static_cast<uint8_t>(pattern.next());
  std::vector<uint64_t> target(1 + kGuardBytes / 8, 0);  // atomics hit target[0]
  target[0] = 1000;
  std::vector<uint64_t> originals(kAtomics, ~uint64_t{0});
  const bool a_owns_source = c.op != Op::Read;
  uint8_t* src = source.data();
  uint8_t* dst = sink.data();
  const uint32_t src_key = *(a_owns_source ? a : b).memory().register_region(kPd, addr(src), source.size(), kAllAccess);
  const uint32_t dst_key = *(a_owns_source ? b : a).memory().register_region(kPd, addr(dst), sink.size(), kAllAccess);
  const uint32_t target_key =
      *b.memory().register_region(kPd, addr(target.data()), target.size() * sizeof(uint64_t), kAllAccess);
  const uint32_t originals_key =
      *a.memory().register_region(kPd, addr(originals.data()), originals.size() * sizeof(uint64_t), kAllAccess);

  Outcome out;
  std::vector<uint64_t> expected_originals(kAtomics);
  uint64_t expected_final = target[0];
  if (c.op == Op::Atomic) {
    for (uint32_t i = 0; i < kAtomics; ++i) {
      SendWr w;
      w.wr_id = i;
      w.num_sge = 1;
      w.sg[0] = {addr(&originals[i]), 8, originals_key};
      w.remote_addr = addr(target.data());
      w.rkey = target_key;
      expected_originals[i] = expected_final;
      if (i % 2 == 0) {
        w.opcode = WrOpcode::FetchAdd;
        w.compare_add = 3 + i;
        expected_final += 3 + i;
      } else {
        // Compares with the value it must find, so every swap takes place.
        w.opcode = WrOpcode::CompareSwap;
        w.compare_add = expected_final;
        w.swap = expected_final * 2 + i;
        expected_final = w.swap;
      }
      EXPECT_EQ(a.post_send(qp.qp_a, w), PostResult::Ok);
      ++out.posted;
    }
  } else {
    for (uint32_t i = 0; i < kMessages; ++i) {
      const uint64_t offset = uint64_t{i} * kMessageBytes;
      SendWr w;
      w.wr_id = i;
      w.num_sge = 1;
      if (c.op == Op::Read) {
        w.opcode = WrOpcode::RdmaRead;
        w.sg[0] = {addr(dst + offset), kMessageBytes, dst_key};
        w.remote_addr = addr(src + offset);
        w.rkey = src_key;
      } else {
        w.opcode = c.op == Op::Write ? WrOpcode::RdmaWrite : WrOpcode::Send;
        w.sg[0] = {addr(src + offset), kMessageBytes, src_key};
        w.remote_addr = addr(dst + offset);
        w.rkey = dst_key;
      }
      if (c.op == Op::Send) {
        RecvWr r;
        r.wr_id = 1000 + i;
        r.num_sge = 1;
        r.sg[0] = {addr(dst + offset), kMessageBytes, dst_key};
        EXPECT_EQ(b.post_recv(qp.qp_b, r), PostResult::Ok);
        ++out.posted;
      }
      EXPECT_EQ(a.post_send(qp.qp_a, w), PostResult::Ok);
      ++out.posted;
    }
  }

  uint64_t done = 0;
  Completion wc[64];
  const auto reap = [&] {
    for (Endpoint* e : {&a, &b}) {
      const uint32_t cq = e == &a ? qp.cq_a : qp.cq_b;
      for (size_t n = e->poll_cq(cq, wc); n > 0; n = e->poll_cq(cq, wc)) {
        for (size_t i = 0; i < n; ++i) {
          ++done;
          if (wc[i].status == WcStatus::Success) {
            ++out.successes;
          } else {
            ++out.errors;
            ADD_FAILURE() << "wr " << wc[i].wr_id << ": " << static_cast<int>(wc[i].status);
          }
        }
      }
    }
    return done >= out.posted;
  };
  rig.sim().wake(rig.node_a());
  out.completed = rig.sim().run_until(reap, kBudgetNs);
  // The injections still scheduled (late replays) arrive and are counted too.
  attacker.set_active(false);
  rig.sim().run_until([&] { return attacker.in_flight() == 0; }, rig.sim().now() + 10'000'000);
  EXPECT_EQ(attacker.in_flight(), 0u);
  rig.sim().set_tap(nullptr);

  if (c.op == Op::Atomic) {
    for (uint32_t i = 0; i < kAtomics; ++i)
      if (originals[i] != expected_originals[i]) out.corrupted_bytes += 8;
    if (target[0] != expected_final) out.corrupted_bytes += 8;
    for (size_t i = 1; i < target.size(); ++i)
      if (target[i] != 0) out.corrupted_bytes += 8;
  } else {
    for (size_t i = 0; i < bytes; ++i) out.corrupted_bytes += sink[i] != source[i];
    for (size_t i = bytes; i < sink.size(); ++i) out.corrupted_bytes += sink[i] != 0xee;
  }
  out.report = attacker.report();
  out.a = a.counters();
  out.b = b.counters();
  return out;
}

class AttackerTransfer : public ::testing::TestWithParam<Case> {};

TEST_P(AttackerTransfer, CompletesExactlyAndCountsEveryInjection) {
  const Case c = GetParam();
  const bool authenticated = c.security != wire::Security::Integrity;
  AttackerConfig config;
  config.consistent_claims = authenticated;
  const Outcome out = run(c, 11 + c.loss_percent, config);
  const AttackerReport& r = out.report;
  std::cout << name(c.op) << " loss " << c.loss_percent << "% " << wire::to_string(c.security) << ": " << r.summary();

  ASSERT_TRUE(out.completed) << out.successes << " of " << out.posted << " completions";
  EXPECT_EQ(out.errors, 0u);
  EXPECT_EQ(out.successes, out.posted);
  EXPECT_EQ(out.corrupted_bytes, 0u);

  // Every injected datagram was counted by its receiver.
  EXPECT_GT(r.total_injected(), 100u);
  EXPECT_EQ(r.unaccounted, 0u);
  EXPECT_EQ(r.dropped + r.duplicates + r.ignored, r.total_injected());
  for (const Attack a : {Attack::ReplayNow, Attack::ReplayLater, Attack::BitFlip, Attack::Truncate, Attack::Extend,
                         Attack::Overwrite4, Attack::Overwrite8, Attack::Garbage, Attack::AckBlockBeyond,
                         Attack::AckRateHint, Attack::NakAttemptZero, Attack::DataPathJump})
    EXPECT_GT(r.injected[static_cast<size_t>(a)], 0u) << to_string(a);
  // Replays are replays, whenever they come.
  for (const Attack a : {Attack::ReplayNow, Attack::ReplayLater})
    EXPECT_EQ(r.count(a, "rx_drop_replay"), r.injected[static_cast<size_t>(a)]) << to_string(a);

  if (!authenticated) {
    // What integrity cannot stop, the consistency checks make harmless.
    // (A forgery whose packet number a genuine datagram took first is a
    // replay.)
    const auto expect_all = [&](Attack a, const char* counter) {
      EXPECT_EQ(r.count(a, counter) + r.count(a, "rx_drop_replay"), r.injected[static_cast<size_t>(a)])
          << to_string(a) << " " << counter;
      if (r.injected[static_cast<size_t>(a)] > 2) {
        EXPECT_GT(r.count(a, counter), 0u) << to_string(a);
      }
    };
    expect_all(Attack::AckStreamAhead, "rx_ignored_stream_ack");
    expect_all(Attack::AckBlockBeyond, "rx_ignored_ack_block");
    expect_all(Attack::AckRateHint, "rx_ignored_rate_hint");
    expect_all(Attack::NakAttemptZero, "rx_ignored_nak");
    expect_all(Attack::NakObservedAttempt, "rx_ignored_nak");
    expect_all(Attack::RnrHugeDelay, "rx_ignored_nak");
    expect_all(Attack::DataPathJump, "rx_drop_path_jump");
    expect_all(Attack::ReadHuge, "rx_duplicate_completed");
    // NAKs of an observed attempt need a message the requester has seen
    // complete, and one that needs no response (a READ or an atomic is
    // outstanding until its response arrives, whatever the responder's ACK).
    if (c.op == Op::Write || c.op == Op::Send) {
      EXPECT_GT(r.injected[static_cast<size_t>(Attack::NakObservedAttempt)] +
                    r.injected[static_cast<size_t>(Attack::RnrHugeDelay)],
                0u);
    }
    EXPECT_LE(r.displaced, r.injected_forgeries());
  } else {
    // Authentication failures, whatever the forgery claims.
    uint64_t auth_failures = 0, security_mode = 0, replays = 0;
    for (size_t i = 0; i < kAttackCount; ++i) {
      const auto a = static_cast<Attack>(i);
      if (!is_forgery(a)) continue;
      auth_failures += r.count(a, "rx_drop_integrity");
      security_mode += r.count(a, "rx_drop_security_mode");
      replays += r.count(a, "rx_drop_replay");
      for (const char* ignored : {"rx_ignored_stream_ack", "rx_ignored_ack_block", "rx_ignored_nak",
                                  "rx_ignored_rate_hint", "rx_drop_path_jump", "rx_drop_bad_request"})
        EXPECT_EQ(r.count(a, ignored), 0u) << to_string(a) << " reached " << ignored;
    }
    EXPECT_EQ(auth_failures + security_mode + replays, r.injected_forgeries());
    EXPECT_GT(auth_failures, 0u);
    EXPECT_GT(security_mode, 0u);
    for (const Attack a : {Attack::NakObservedAttempt, Attack::RnrHugeDelay, Attack::ReadHuge})
      EXPECT_GT(r.injected[static_cast<size_t>(a)], 0u) << to_string(a);
    EXPECT_EQ(r.displaced, 0u);  // a forgery's number is never accepted
    EXPECT_EQ(out.a.peer_restarts + out.b.peer_restarts, 0u);
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const wire::Security s : {wire::Security::Integrity, wire::Security::Authenticate, wire::Security::Encrypt})
    for (const Op op : {Op::Write, Op::Read, Op::Send, Op::Atomic})
      for (const int loss : {0, 1, 10}) cases.push_back({op, loss, s});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Attacker, AttackerTransfer, ::testing::ValuesIn(all_cases()), case_name);

// A forged data packet far ahead on a path from which nothing has arrived
// yet (here: its first genuine packet lost to a forgery that took its packet
// number) must be refused like one far ahead of the highest: believed, the
// receiver's ACK blocks for the path would all claim packets never sent, and
// the sender would ignore every one of them.
TEST(AttackerNode, PathJumpIsRefusedOnAPathWithNothingReceivedYet) {
  // Responses are the data that starts on paths with nothing received: B
  // sends none before the first request. (A higher rate is a denial of
  // service in integrity mode: each forgery costs a genuine datagram. At
  // 0.4 one-at-a-time atomics exceed retry_cnt on 7 of seeds 1 to 40; at
  // 0.3 on seed 17 alone: the QP's retry timer counts its expiries while the
  // connection's RTO backs off, not retransmissions that failed.)
  for (const Op op : {Op::Read, Op::Atomic}) {
    for (const uint64_t seed : {1, 2, 3, 4, 5}) {
      AttackerConfig config;
      config.rate = 0.3;
      config.attacks = {Attack::DataPathJump};
      const Outcome out = run({op, 0, wire::Security::Integrity}, seed, config);
      const AttackerReport& r = out.report;
      std::cout << "path jumps only, " << name(op) << " seed " << seed << ": " << r.summary();
      EXPECT_TRUE(out.completed);
      EXPECT_EQ(out.corrupted_bytes, 0u);
      const uint64_t injected = r.injected[static_cast<size_t>(Attack::DataPathJump)];
      EXPECT_GT(injected, 50u);
      EXPECT_EQ(r.count(Attack::DataPathJump, "rx_drop_path_jump") + r.count(Attack::DataPathJump, "rx_drop_replay"),
                injected);
      EXPECT_EQ(out.a.rx_ignored_ack_block + out.b.rx_ignored_ack_block, 0u) << "a genuine ACK block was not believed";
    }
  }
}

TEST(AttackerNode, IsDeterministicForASeed) {
  const Case c{Op::Write, 1, wire::Security::Integrity};
  const Outcome first = run(c, 5, {});
  const Outcome second = run(c, 5, {});
  EXPECT_EQ(first.report.injected, second.report.injected);
  EXPECT_EQ(first.report.counters, second.report.counters);
  EXPECT_EQ(first.report.displaced, second.report.displaced);
}

}  // namespace
}  // namespace metaroce::sim
