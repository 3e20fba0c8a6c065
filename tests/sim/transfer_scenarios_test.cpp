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
  spec.rig.jitter_ns = 2'000;                           // per-packet jitter, FIFO per path
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_LT(static_cast<double>(r.sender.spurious_retransmits), 0.001 * r.sender.tx_data_packets);
  EXPECT_LT(static_cast<double>(r.sender.tx_retransmits), 0.001 * r.sender.tx_data_packets);
}

TEST(TransferScenarios, DuplicatedPacketsAreDiscarded) {
  WriteTransferSpec spec = base_spec(Profile::MetaRoCE, 0.01);
  spec.rig.duplicate = 0.05;
  const WriteTransferResult r = run_write_transfer(spec);
  ASSERT_TRUE(r.completed);
  EXPECT_TRUE(r.data_intact);
  EXPECT_GT(r.receiver.rx_duplicate_chunk + r.receiver.rx_duplicate_completed, 0u);
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
