// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The engine on the simulated network, moving a 16 MiB RDMA WRITE: every byte
// must land where it belongs whatever the network does, and loss recovery must
// be selective and prompt. Budgets are in virtual time.
#include <gtest/gtest.h>

#include "write_transfer.h"

namespace metaroce::sim {
namespace {

using transport::PathHealth;
using transport::Profile;

WriteTransferSpec base_spec(Profile profile, double loss, uint64_t seed = 1) {
  WriteTransferSpec spec;
  spec.rig.endpoint.profile = profile;
  spec.rig.loss = loss;
  spec.rig.seed = seed;
  spec.total_bytes = 16ull << 20;
  spec.message_bytes = 1u << 20;
  return spec;
}

class LossTest : public ::testing::TestWithParam<double> {};

TEST_P(LossTest, EveryByteLandsUnderRandomLoss) {
  const WriteTransferResult r = run_write_transfer(base_spec(Profile::MetaRoCE, GetParam()));
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_EQ(r.error_completions, 0u);
  if (GetParam() == 0) {
    EXPECT_EQ(r.sender.tx_retransmits, 0u);
  } else {
    EXPECT_GT(r.sender.tx_retransmits, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Loss, LossTest, ::testing::Values(0.0, 0.01, 0.05, 0.10));

TEST(TransferScenarios, ALoneSenderGetsTheReceiversWholeCapacity) {
  // 64 MiB over 4 x 100G: the rate hint of a receiver with one sender
  // hands out all of its 400G, so the paths' own pacing at line rate is the
  // limit. (A 95% share would cap goodput near 0.94 of the line rate.)
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0);
  spec.total_bytes = 64ull << 20;
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed && r.data_intact);
  const double payload_line_rate_gbps = 4 * 100 * 4096.0 / (4096 + 56 + 66);
  EXPECT_GE(r.goodput_gbps, 0.98 * payload_line_rate_gbps);
}

TEST(TransferScenarios, RetransmissionIsSelectiveNotGoBackN) {
  // At 5% loss a selective scheme resends about what was lost (data and the
  // retransmissions themselves); go-back-N resends whole windows.
  const WriteTransferResult meta = run_write_transfer(base_spec(Profile::MetaRoCE, 0.05));
  const WriteTransferResult roce = run_write_transfer(base_spec(Profile::RoCEv2, 0.05));
  ASSERT_TRUE(meta.completed && meta.data_intact);
  ASSERT_TRUE(roce.completed && roce.data_intact);
  const double packets = (16ull << 20) / 4096.0;
  EXPECT_LT(meta.sender.tx_retransmits, 0.08 * packets);
  EXPECT_EQ(meta.sender.go_back_n, 0u);
  EXPECT_GT(roce.sender.go_back_n, 0u);
  EXPECT_GT(roce.sender.tx_retransmits, 3 * meta.sender.tx_retransmits);
  EXPECT_GT(roce.receiver.rx_drop_out_of_order, 0u);
}

TEST(TransferScenarios, RoceV2ProfileIsCorrectUnderLoss) {
  const WriteTransferResult r = run_write_transfer(base_spec(Profile::RoCEv2, 0.01));
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_EQ(r.sender_paths.size(), 1u);
}

TEST(TransferScenarios, ReorderingAcrossPathsCausesNoSpuriousRetransmission) {
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0);
  spec.rig.extra_delay_ns = {0, 1'500, 3'000, 6'000};  // paths differ by up to 6 us
  spec.rig.jitter_ns = 2'000;                          // per-packet jitter, FIFO per path
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_LT(static_cast<double>(r.sender.spurious_retransmits), 0.001 * r.sender.tx_data_packets);
  EXPECT_LT(static_cast<double>(r.sender.tx_retransmits), 0.001 * r.sender.tx_data_packets);
}

// Messages of one packet each, `outstanding` at a time, at 5% loss: how many
// needed a recovery and got it before the minimum RTO, and how many after.
struct Recoveries {
  WriteTransferResult result;
  size_t before_rto = 0;
  size_t after_rto = 0;
};
Recoveries one_packet_messages(uint32_t outstanding, uint64_t total_bytes) {
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0.05);
  spec.total_bytes = total_bytes;
  spec.message_bytes = 4096;
  spec.outstanding = outstanding;
  Recoveries r{run_write_transfer(spec)};
  EXPECT_TRUE(r.result.completed);
  EXPECT_TRUE(r.result.data_intact);
  const Time base_rtt = spec.rig.endpoint.base_rtt_ns;
  const Time min_rto = 4 * base_rtt;
  for (Time fct : r.result.fct_ns) {
    if (fct >= min_rto) ++r.after_rto;
    else if (fct > 2 * base_rtt) ++r.before_rto;
  }
  return r;
}

TEST(TransferScenarios, ALoneLostPacketIsResentBeforeItsRto) {
  // Two in flight over four paths: each packet is the newest on its path, so
  // no later packet on the path reveals its loss; the other message's
  // packet, delivered on another path, does
  // (Connection::detect_losses_by_time). Only a loss with no later packet in
  // flight anywhere has to wait for the RTO.
  const Recoveries r = one_packet_messages(2, 4ull << 20);
  EXPECT_GT(r.result.sender.lost_by_time, 0u);
  // 71 against 28 here; without the detection by time, 21 against 98.
  EXPECT_GT(r.before_rto, 2 * r.after_rto);
}

TEST(TransferScenarios, ALostTailIsProbedBeforeItsRto) {
  // One in flight: each packet is the connection's newest, so nothing sent
  // after it can reveal its loss (or its ACK's); the tail loss probe resends
  // it after two RTTs instead of the RTO (Connection::probe_tail).
  const Recoveries r = one_packet_messages(1, 2ull << 20);
  EXPECT_GT(r.result.sender.tail_probes, 0u);
  // 31 against 3 here; without the probe, 0 against 34.
  EXPECT_GT(r.before_rto, 2 * r.after_rto);
}

TEST(TransferScenarios, DuplicatedPacketsAreDiscarded) {
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0.01);
  spec.rig.duplicate = 0.05;
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  // A datagram the network duplicated carries a packet number already seen:
  // the copy is dropped before the engine looks at its body.
  EXPECT_GT(r.receiver.rx_drop_replay, 0u);
  // Bytes written for the peer: each chunk once, duplicates never.
  EXPECT_EQ(r.receiver.placed_bytes, 16ull << 20);
}

TEST(TransferScenarios, BlackholedPathIsDrainedAndGoodputRecovers) {
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0);
  spec.total_bytes = 64ull << 20;
  const Time base_rtt = 8'000;
  const Time start = 300'000;  // mid-transfer: the whole transfer takes ~1.4 ms
  spec.sample_interval_ns = base_rtt;
  spec.setup = [&](TwoHostRig& rig) { rig.blackhole(3, start, start + 400'000); };
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);

  // What three paths can carry: line rate less per-packet overhead.
  const double efficiency = 4096.0 / (4096 + 56 + 66);
  const double three_paths_gbps = 3 * 100 * efficiency;
  // Goodput over each 10-RTT window that starts 20 base RTTs after the
  // blackhole, for as long as it lasts.
  auto bytes_at = [&](Time t) {
    uint64_t bytes = 0;
    for (const auto& [when, placed] : r.timeline)
      if (when <= t) bytes = placed;
    return bytes;
  };
  for (Time t = start + 20 * base_rtt; t + 10 * base_rtt <= start + 400'000; t += 10 * base_rtt) {
    const double gbps = (bytes_at(t + 10 * base_rtt) - bytes_at(t)) * 8.0 / (10 * base_rtt);
    EXPECT_GE(gbps, 0.9 * three_paths_gbps) << "window starting " << (t - start) / base_rtt << " RTTs after";
  }
  EXPECT_GE(r.sender.path_failures, 1u);
  EXPECT_GE(r.sender.path_recoveries, 1u);
  EXPECT_EQ(r.sender_paths.at(3).health, PathHealth::Active);  // probed and back in use
}

// Blackholes that start mid-transfer and last, in one direction or both, on
// the links the paths' data or ACKs take (the sim routes path i over link i
// both ways; on a real fabric the two directions hash independently).
struct OneWayBlackhole {
  unsigned data_links;  // bit i: link i drops A->B (data) from `start` on
  unsigned ack_links;   // bit i: link i drops B->A (ACKs, probe replies)
};

void blackhole_links(TwoHostRig& rig, const OneWayBlackhole& holes, Time start) {
  for (size_t i = 0; i < rig.links().forward.size(); ++i) {
    for (const auto& [mask, link] :
         {std::pair{holes.data_links, rig.links().forward[i]}, std::pair{holes.ack_links, rig.links().reverse[i]}}) {
      if (!(mask & (1u << i))) continue;
      LinkParams params = rig.sim().link(link);
      params.blackholes.emplace_back(start, kNever);
      rig.sim().set_link(link, params);
    }
  }
}

class DeadPathTest : public ::testing::TestWithParam<OneWayBlackhole> {};

// Goodput after the blackhole is what the surviving paths carry: the dead
// paths are failed within a few RTOs, not fed one packet per backed-off RTO
// while the peer, having acknowledged everything else, looks silent (which
// stalled the transfer for good when two paths lost their data direction).
TEST_P(DeadPathTest, DeadPathsAreFailedAndTheOthersKeepTheirGoodput) {
  const OneWayBlackhole holes = GetParam();
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0);
  spec.total_bytes = 32ull << 20;
  spec.message_bytes = 64u << 10;
  spec.outstanding = 64;
  const WriteTransferResult clean = run_write_transfer(spec);
  ASSERT_TRUE(clean.completed);
  const Time start = 200'000;
  spec.setup = [&](TwoHostRig& rig) { blackhole_links(rig, holes, start); };
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_EQ(r.error_completions, 0u);
  const unsigned dead = static_cast<unsigned>(__builtin_popcount(holes.data_links));
  EXPECT_EQ(r.sender.path_failures, dead);
  for (const auto& path : r.sender_paths)
    EXPECT_EQ(path.health == PathHealth::Failed, ((holes.data_links >> path.path_id) & 1) != 0)
        << "path " << path.path_id;
  // The rest of the transfer at the surviving paths' share of the clean
  // rate, with 5% for detection.
  const double rest = static_cast<double>(clean.duration_ns - start) * 4 / (4 - dead);
  EXPECT_LE(static_cast<double>(r.duration_ns), 1.05 * (static_cast<double>(start) + rest));
}

INSTANTIATE_TEST_SUITE_P(Blackholes, DeadPathTest,
                         ::testing::Values(OneWayBlackhole{0b0001, 0}, OneWayBlackhole{0b0011, 0},
                                           OneWayBlackhole{0b0001, 0b0001}, OneWayBlackhole{0b0011, 0b0011},
                                           OneWayBlackhole{0b0011, 0b1100}));

TEST(TransferScenarios, DeadAckPathsCostLittle) {
  // Only the ACK direction of two links dies: every data packet arrives,
  // half of the ACKs are lost, and the cumulative state that every ACK
  // repeats covers for them; no path is to blame.
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0);
  spec.total_bytes = 32ull << 20;
  const WriteTransferResult clean = run_write_transfer(spec);
  spec.setup = [&](TwoHostRig& rig) { blackhole_links(rig, {0, 0b0011}, 200'000); };
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(clean.completed && r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_EQ(r.sender.path_failures, 0u);
  EXPECT_LE(static_cast<double>(r.duration_ns), 1.1 * static_cast<double>(clean.duration_ns));
}

// The engine as the verbs provider configures it for a 1 Gb/s path with
// ~100 us RTTs (provider/verbs/context_options.h: base RTT 100 us, ACK delay
// 10 us, RTO floor 4 ms) and perftest's QP timeout (14: 67 ms), moving
// 64 KiB WRITEs 64 deep, as datapath.sh blackhole does.
WriteTransferSpec namespace_fabric_spec() {
  WriteTransferSpec spec;
  spec.rig.endpoint.mtu = 1400;
  spec.rig.endpoint.base_rtt_ns = 100'000;
  spec.rig.endpoint.ack_delay_ns = 10'000;
  spec.rig.endpoint.min_rto_ns = 4'000'000;
  spec.rig.endpoint.path_rate_bps = 1'000'000'000;
  spec.rig.link_rate_bps = 1'000'000'000;
  spec.rig.one_way_delay_ns = 20'000;
  spec.rig.jitter_ns = 5'000;
  spec.qp.timeout_ns = 67'108'864;
  spec.total_bytes = 600ull << 16;
  spec.message_bytes = 64u << 10;
  spec.outstanding = 64;
  return spec;
}

TEST(TransferScenarios, DeadPathOnTheNamespaceFabricsTimescale) {
  // One path's data direction dies 10 ms in.
  WriteTransferSpec spec = namespace_fabric_spec();
  spec.rig.seed = 2;
  const WriteTransferResult clean = run_write_transfer(spec);
  ASSERT_TRUE(clean.completed);
  const Time start = 10'000'000;
  spec.setup = [&](TwoHostRig& rig) { blackhole_links(rig, {0b0001, 0}, start); };
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_EQ(r.sender.path_failures, 1u);
  const double rest = static_cast<double>(clean.duration_ns - start) * 4 / 3;
  EXPECT_LE(static_cast<double>(r.duration_ns), 1.05 * (static_cast<double>(start) + rest));
}

TEST(TransferScenarios, AckPathsThePeerDoesNotHearAreLeftOut) {
  // The ACK direction of three of the four links dies 10 ms in. The sender
  // reports which of the receiver's paths it hears (heard_paths), and the
  // receiver stops sending its ACKs on paths it used that the sender does
  // not hear, but for one in 32 that looks for them again: a lost last ACK
  // of a burst would cost the sender an RTO.
  WriteTransferSpec spec = namespace_fabric_spec();
  const WriteTransferResult clean = run_write_transfer(spec);
  ASSERT_TRUE(clean.completed);
  const Time start = 10'000'000;
  uint64_t lost_acks = 0, delivered_acks = 0;  // after the blackhole began
  spec.setup = [&](TwoHostRig& rig) {
    blackhole_links(rig, {0, 0b0111}, start);
    rig.sim().at(start,
                 [&rig, &delivered_acks] { delivered_acks = rig.sim().stats(rig.links().reverse[3]).delivered; });
  };
  spec.on_finish = [&](TwoHostRig& rig) {
    for (size_t i = 0; i < 3; ++i) lost_acks += rig.sim().stats(rig.links().reverse[i]).dropped_blackhole;
    delivered_acks = rig.sim().stats(rig.links().reverse[3]).delivered - delivered_acks;
  };
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_EQ(r.sender.path_failures, 0u);
  ASSERT_GT(delivered_acks, 0u);
  EXPECT_LT(static_cast<double>(lost_acks), 0.1 * static_cast<double>(delivered_acks));
  EXPECT_LE(static_cast<double>(r.duration_ns), 1.03 * static_cast<double>(clean.duration_ns));
}

TEST(TransferScenarios, SilentPeerFailsNoPathAndTheTransferResumes) {
  // Every path goes dark at once, as when the receiving host stalls: no
  // choice of path helps, so no path may be failed, and the transfer must
  // resume soon after the silence ends (timeouts back off from the minimum
  // RTO, so the first probe after it comes within about one silence).
  const Time start = 300'000;
  const Time silence = 300'000;
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0);
  spec.total_bytes = 64ull << 20;
  const WriteTransferResult clean = run_write_transfer(spec);
  spec.setup = [&](TwoHostRig& rig) {
    for (size_t path = 0; path < 4; ++path) rig.blackhole(path, start, start + silence);
  };
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(clean.completed);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_EQ(r.sender.path_failures, 0u);
  for (const auto& path : r.sender_paths) EXPECT_EQ(path.health, PathHealth::Active) << "path " << path.path_id;
  EXPECT_GT(r.sender.rto_expirations, 0u);
  EXPECT_LE(r.duration_ns, clean.duration_ns + 3 * silence);
}

TEST(TransferScenarios, RandomLossNeverShrinksTheWindow) {
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0.05);
  spec.rig.ecn_threshold_bytes = UINT64_MAX;  // no ECN marks: loss is the only event
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed && r.data_intact);
  const uint32_t initial = 100'000'000'000ull / 8 * 8'000 / 1'000'000'000;
  for (const auto& path : r.sender_paths) EXPECT_GE(path.window_bytes, initial) << "path " << path.path_id;
}

TEST(TransferScenarios, EcnMarksShrinkTheWindowToTheBottleneck) {
  // The links are 25 Gb/s while the engine believes in 100 Gb/s: queues build,
  // the switch marks, and the windows must come down to what fits.
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0);
  spec.rig.link_rate_bps = 25'000'000'000;
  spec.rig.ecn_threshold_bytes = 60'000;
  spec.rig.queue_bytes = 1 << 20;
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed && r.data_intact);
  const uint32_t initial = 100'000'000'000ull / 8 * 8'000 / 1'000'000'000;
  uint64_t marks = 0;
  for (const auto& path : r.sender_paths) {
    marks += path.ecn_marks;
    EXPECT_LT(path.window_bytes, initial) << "path " << path.path_id;
  }
  EXPECT_GT(marks, 0u);
  EXPECT_EQ(r.sender.tx_retransmits, 0u);  // no queue overflowed
  EXPECT_GT(r.goodput_gbps, 0.8 * 4 * 25 * 4096.0 / (4096 + 56 + 66));
}

TEST(TransferScenarios, ManyStreamsShareOneConnectionAndItsPaths) {
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0.05);
  spec.qps = 4;
  spec.outstanding = 4;
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  ASSERT_EQ(r.sender_paths.size(), 4u);  // one connection: one set of paths for all QPs
  for (const auto& path : r.sender_paths) EXPECT_GT(path.packets_sent, 0u);
}

TEST(TransferScenarios, SameSeedSameRun) {
  const WriteTransferResult a = run_write_transfer(base_spec(Profile::MetaRoCE, 0.02, 7));
  const WriteTransferResult b = run_write_transfer(base_spec(Profile::MetaRoCE, 0.02, 7));
  const WriteTransferResult c = run_write_transfer(base_spec(Profile::MetaRoCE, 0.02, 8));
  EXPECT_EQ(a.duration_ns, b.duration_ns);
  EXPECT_EQ(a.events, b.events);
  EXPECT_EQ(a.sender.tx_retransmits, b.sender.tx_retransmits);
  EXPECT_NE(a.sender.tx_retransmits, c.sender.tx_retransmits);
}

}  // namespace
}  // namespace metaroce::sim
