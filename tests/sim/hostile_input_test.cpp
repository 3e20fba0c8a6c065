// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Datagrams that are stray, stale, malformed or hostile change nothing but a
// drop counter; a late duplicate of a completed message never reaches memory
// the application may already have reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "metaroce/wire.h"
#include "engine_fixture.h"
#include "engine_printers.h"
#include "forge.h"

namespace metaroce::sim {
namespace {

using testing::addr;
using transport::Completion;
using transport::PostResult;
using transport::RecvWr;
using transport::SendWr;
using transport::WcStatus;
using transport::WrOpcode;

// A's buffer is the source of what A sends, B's the sink.
class HostileInput : public testing::TwoHostTest {
 protected:
  void SetUp() override {
    make_rig(RigSpec{}, 64 * 1024);
    std::fill(abuf_.begin(), abuf_.end(), 0x11);
    std::fill(bbuf_.begin(), bbuf_.end(), 0x22);
  }

  std::vector<uint8_t> data_packet(const wire::DataHeader& h, std::vector<uint8_t> payload) {
    std::vector<uint8_t> out = forge::data_packet(0, h, payload);
    EXPECT_FALSE(out.empty());
    return out;
  }

  wire::DataHeader write_header(uint32_t msn, uint32_t length) const {
    wire::DataHeader h;
    h.path_seq = 1000 + msn;
    h.opcode = wire::Opcode::Write;
    h.dst_qpn = qp_.qp_b;
    h.src_qpn = qp_.qp_a;
    h.msn = msn;
    h.msg_length = length;
    h.remote_addr = addr(bbuf_.data());
    h.rkey = bkey_;
    return h;
  }

  // Delivers `datagram` to B as if `from` sent it, framed as A frames what
  // it sends to B (epochs, A's next packet number, the CRC) unless `raw`.
  void inject(transport::PeerId from, std::vector<uint8_t> datagram, bool raw = false) {
    if (!raw) {
      const size_t length = datagram.size();
      datagram.resize(length + wire::kMaxTrailerBytes);
      const size_t framed = a().seal_datagram(rig_->node_b(), datagram, length);
      ASSERT_GT(framed, 0u);
      datagram.resize(framed);
    }
    b().on_datagram(rig_->sim().now(), from, datagram, false);
  }

  // Delivers `datagram` to A as if B sent it, framed as B frames what it
  // sends to A.
  void inject_into_a(std::vector<uint8_t> datagram) {
    const size_t length = datagram.size();
    datagram.resize(length + wire::kMaxTrailerBytes);
    const size_t framed = b().seal_datagram(rig_->node_a(), datagram, length);
    ASSERT_GT(framed, 0u);
    datagram.resize(framed);
    a().on_datagram(rig_->sim().now(), rig_->node_b(), datagram, false);
  }

  // Takes everything A would send right now and loses it.
  size_t lose_what_a_sends() {
    std::vector<uint8_t> buf(a().max_datagram_bytes());
    size_t count = 0;
    while (a().poll_transmit(rig_->sim().now(), buf)) ++count;
    return count;
  }

  std::vector<uint8_t> ack_packet(const wire::Ack& ack) { return forge::ack_packet(0, ack); }
  std::vector<uint8_t> nak_packet(const wire::Nak& nak) { return forge::nak_packet(0, nak); }

  void post_write(uint64_t wr_id, uint32_t length) {
    SendWr w;
    w.wr_id = wr_id;
    w.opcode = WrOpcode::RdmaWrite;
    w.num_sge = 1;
    w.sg[0] = {addr(abuf_.data()), length, akey_};
    w.remote_addr = addr(bbuf_.data());
    w.rkey = bkey_;
    ASSERT_EQ(a().post_send(qp_.qp_a, w), PostResult::Ok);
  }

  // Runs the rig until A has a completion; returns it.
  Completion run_to_completion(Time budget_ns) {
    rig_->sim().wake(rig_->node_a());
    EXPECT_TRUE(rig_->sim().run_until([&] { return a().cq_depth(qp_.cq_a) > 0; }, budget_ns));
    Completion wc[1];
    EXPECT_EQ(a().poll_cq(qp_.cq_a, wc), 1u);
    return wc[0];
  }

  // The packets B would send right now, decoded.
  std::vector<wire::Packet> b_sends() {
    std::vector<uint8_t> buf(b().max_datagram_bytes());
    std::vector<wire::Packet> out;
    while (const auto n = b().poll_transmit(rig_->sim().now(), buf)) {
      wire::Packet p;
      const std::span<const uint8_t> body(buf.data(), n->length - wire::kIntegrityTrailerBytes);
      EXPECT_EQ(wire::decode(body, p), wire::DecodeStatus::Ok);
      out.push_back(p);
    }
    return out;
  }

  // Everything the engine would send in reply right now.
  size_t replies() {
    std::vector<uint8_t> buf(b().max_datagram_bytes());
    size_t count = 0;
    while (b().poll_transmit(rig_->sim().now(), buf)) ++count;
    return count;
  }
};

TEST_F(HostileInput, LateDuplicateOfCompletedSendNeverTouchesTheReusedBuffer) {
  RecvWr recv;
  recv.wr_id = 1;
  recv.num_sge = 1;
  recv.sg[0] = {addr(bbuf_.data()), 100, bkey_};
  ASSERT_EQ(b().post_recv(qp_.qp_b, recv), PostResult::Ok);
  SendWr send;
  send.opcode = WrOpcode::Send;
  send.num_sge = 1;
  send.sg[0] = {addr(abuf_.data()), 100, akey_};
  ASSERT_EQ(a().post_send(qp_.qp_a, send), PostResult::Ok);
  rig_->sim().wake(rig_->node_a());
  ASSERT_TRUE(rig_->sim().run_until([&] { return b().cq_depth(qp_.cq_b) == 1; }, 1'000'000));
  Completion wc[1];
  ASSERT_EQ(b().poll_cq(qp_.cq_b, wc), 1u);
  ASSERT_EQ(wc[0].status, WcStatus::Success);

  // The application reuses its buffer; then a copy of message 1 arrives late.
  std::memset(bbuf_.data(), 0x77, 100);
  wire::DataHeader h = write_header(1, 100);
  h.opcode = wire::Opcode::Send;
  h.remote_addr = 0;
  h.rkey = 0;
  const uint64_t duplicates = b().counters().rx_duplicate_completed;
  inject(rig_->node_a(), data_packet(h, std::vector<uint8_t>(100, 0x99)));
  EXPECT_EQ(b().counters().rx_duplicate_completed, duplicates + 1);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(bbuf_[i], 0x77) << "byte " << i;
  EXPECT_EQ(b().cq_depth(qp_.cq_b), 0u);
}

TEST_F(HostileInput, StrayDatagramsOnlyCountDrops) {
  const std::vector<uint8_t> before = bbuf_;
  const auto counters_before = b().counters();
  const wire::DataHeader good = write_header(1, 16);

  // Malformed: garbage and a truncated data header.
  inject(rig_->node_a(), {1, 2, 3}, true);
  std::vector<uint8_t> truncated = data_packet(good, std::vector<uint8_t>(16, 1));
  truncated.resize(20);
  inject(rig_->node_a(), truncated);
  // A well-formed WRITE from an address with no connection.
  inject(777, data_packet(good, std::vector<uint8_t>(16, 1)));
  // From the right peer but to a QP that does not exist, or claiming another source QP.
  wire::DataHeader wrong_qp = good;
  wrong_qp.dst_qpn = 0xdead;
  inject(rig_->node_a(), data_packet(wrong_qp, std::vector<uint8_t>(16, 1)));
  wire::DataHeader wrong_src = good;
  wrong_src.src_qpn = qp_.qp_a + 1;
  inject(rig_->node_a(), data_packet(wrong_src, std::vector<uint8_t>(16, 1)));
  // A message number far beyond the receive window.
  wire::DataHeader far = good;
  far.msn = 1'000'000;
  inject(rig_->node_a(), data_packet(far, std::vector<uint8_t>(16, 1)));
  // An ACK, a NAK and a probe reply from an unknown peer.
  inject(999, ack_packet(wire::Ack{}));

  const auto& after = b().counters();
  EXPECT_EQ(after.rx_drop_malformed, counters_before.rx_drop_malformed + 2);
  EXPECT_EQ(after.rx_drop_unknown_peer, counters_before.rx_drop_unknown_peer + 2);
  EXPECT_EQ(after.rx_drop_unknown_qp, counters_before.rx_drop_unknown_qp + 2);
  EXPECT_EQ(after.rx_drop_out_of_window, counters_before.rx_drop_out_of_window + 1);
  EXPECT_EQ(after.placed_bytes, 0u);
  EXPECT_EQ(bbuf_, before);
  EXPECT_EQ(b().cq_depth(qp_.cq_b), 0u);
  // None of them is acknowledged: they changed no receive state.
  EXPECT_EQ(replies(), 0u);
}

TEST_F(HostileInput, InconsistentPlacementIsRefusedAndNaked) {
  // A chunk whose payload is not the MTU-sized piece its offset implies.
  wire::DataHeader odd = write_header(2, 8192);
  odd.path_seq = 0;
  odd.offset = 100;
  inject(rig_->node_a(), data_packet(odd, std::vector<uint8_t>(50, 0x55)));
  EXPECT_EQ(b().counters().rx_drop_bad_request, 1u);
  for (size_t i = 0; i < 200; ++i) ASSERT_NE(bbuf_[i], 0x55);
  // Two packets of one message disagreeing on its length: the second is refused.
  wire::DataHeader first = write_header(1, 8192);
  first.path_seq = 1;
  inject(rig_->node_a(), data_packet(first, std::vector<uint8_t>(4096, 0x33)));
  wire::DataHeader liar = write_header(1, 60'000);
  liar.path_seq = 2;
  liar.offset = 4096;
  inject(rig_->node_a(), data_packet(liar, std::vector<uint8_t>(4096, 0x44)));
  EXPECT_EQ(b().counters().rx_drop_bad_request, 2u);
  EXPECT_GT(b().counters().tx_naks + replies(), 0u);
  for (size_t i = 4096; i < 8192; ++i) ASSERT_EQ(bbuf_[i], 0x22);
  // The stream reached a request it cannot carry out: the QP is in error,
  // as an RDMA NIC's responder is after an invalid request.
  EXPECT_EQ(b().qp_state(qp_.qp_b), transport::QpState::Error);
}

TEST_F(HostileInput, ACompletionClaimBeyondWhatWasPostedCompletesNothing) {
  post_write(7, 4096);
  ASSERT_GT(lose_what_a_sends(), 0u);  // sent, never delivered
  const uint64_t ignored = a().counters().rx_ignored_stream_ack;
  wire::Ack claim;
  claim.stream_count = 1;
  claim.streams[0] = {qp_.qp_a, 1'000'000};
  inject_into_a(ack_packet(claim));
  EXPECT_EQ(a().counters().rx_ignored_stream_ack, ignored + 1);
  EXPECT_EQ(a().cq_depth(qp_.cq_a), 0u);

  // The genuine transfer still completes, and its bytes arrive.
  const Completion wc = run_to_completion(1'000'000'000);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(bbuf_.data(), abuf_.data(), 4096), 0);
}

TEST_F(HostileInput, AckBlocksForPacketsNeverSentDeclareNothingLost) {
  post_write(1, 4096);
  ASSERT_GT(lose_what_a_sends(), 0u);
  wire::Ack forged;
  forged.path_count = static_cast<uint8_t>(a().config().paths);
  for (uint8_t i = 0; i < forged.path_count; ++i) {
    forged.paths[i].path_id = i;
    forged.paths[i].highest_seq = 1u << 30;  // nothing received up to it
  }
  const uint64_t ignored = a().counters().rx_ignored_ack_block;
  inject_into_a(ack_packet(forged));
  EXPECT_EQ(a().counters().rx_ignored_ack_block, ignored + forged.path_count);
  // Believed, the blocks would have declared the packet lost: it would be
  // retransmitted at once.
  EXPECT_EQ(lose_what_a_sends(), 0u);
  EXPECT_EQ(run_to_completion(1'000'000'000).status, WcStatus::Success);
}

TEST_F(HostileInput, APathSequenceFarAheadIsDroppedNotBelieved) {
  wire::DataHeader h = write_header(0, 16);  // msn 0: a duplicate, acknowledged
  h.flags = wire::kFlagAckRequest;
  h.path_seq = 5;
  inject(rig_->node_a(), data_packet(h, std::vector<uint8_t>(16, 1)));
  h.path_seq = 5 + (1u << 30);
  inject(rig_->node_a(), data_packet(h, std::vector<uint8_t>(16, 1)));
  EXPECT_EQ(b().counters().rx_drop_path_jump, 1u);
  h.path_seq = 6;
  inject(rig_->node_a(), data_packet(h, std::vector<uint8_t>(16, 1)));
  // The ACK still speaks of the genuine sequence numbers: believed, the jump
  // would have made every later packet on the path too old to acknowledge.
  bool acked = false;
  for (const wire::Packet& p : b_sends()) {
    if (p.common.type != wire::PacketType::Ack) continue;
    for (uint8_t i = 0; i < p.ack.path_count; ++i) {
      if (p.ack.paths[i].path_id != 0) continue;
      EXPECT_EQ(p.ack.paths[i].highest_seq, 6u);
      EXPECT_TRUE(p.ack.paths[i].covers(5));
      acked = true;
    }
  }
  EXPECT_TRUE(acked);
}

TEST_F(HostileInput, NaksForNothingSentAndHugeRnrDelaysAreBounded) {
  // A NAK for a message not sent yet is no answer to it.
  post_write(1, 4096);
  wire::Nak nak;
  nak.kind = wire::NakKind::RemoteAccess;
  nak.qpn = qp_.qp_a;
  nak.msn = 1;
  inject_into_a(nak_packet(nak));
  EXPECT_EQ(a().counters().rx_ignored_nak, 1u);
  EXPECT_EQ(a().qp_state(qp_.qp_a), transport::QpState::ReadyToSend);
  EXPECT_EQ(run_to_completion(1'000'000'000).status, WcStatus::Success);

  // An RNR NAK asking for 4.29 s waits IB's longest RNR timer at most.
  post_write(2, 4096);
  ASSERT_GT(lose_what_a_sends(), 0u);
  nak.kind = wire::NakKind::ReceiverNotReady;
  nak.msn = 2;
  nak.rnr_delay_ns = 4'290'000'000u;
  inject_into_a(nak_packet(nak));
  const Time start = rig_->sim().now();
  const Completion wc = run_to_completion(1'000'000'000);
  EXPECT_EQ(wc.status, WcStatus::Success);
  EXPECT_GE(rig_->sim().now() - start, transport::kMaxRnrDelayNs);
}

TEST_F(HostileInput, ALowRateHintIsNotBelieved) {
  wire::Ack hint;
  hint.rate_hint_mbps = 1;
  inject_into_a(ack_packet(hint));
  EXPECT_EQ(a().counters().rx_ignored_rate_hint, 1u);
  // 64 KiB at the hinted 1 Mb/s would take half a second of virtual time.
  post_write(1, 64 * 1024);
  EXPECT_EQ(run_to_completion(100'000'000).status, WcStatus::Success);
}

TEST_F(HostileInput, TheControlQueueIsBounded) {
  // Each packet starts a message that fails its key check and asks for an
  // ACK: one NAK each, were the queue unbounded.
  const uint32_t window = b().config().max_outstanding_messages;
  for (uint32_t msn = 2; msn < window; ++msn) {
    wire::DataHeader h = write_header(msn, 16);
    h.rkey ^= 0x5a5a00;
    h.path_seq = msn;
    h.flags = wire::kFlagAckRequest;
    inject(rig_->node_a(), data_packet(h, std::vector<uint8_t>(16, 1)));
  }
  size_t naks = 0;
  for (const wire::Packet& p : b_sends()) naks += p.common.type == wire::PacketType::Nak;
  EXPECT_GT(naks, 0u);
  EXPECT_LE(naks, 256u);
  EXPECT_EQ(b().counters().tx_control_dropped, window - 2 - naks);
}

TEST_F(HostileInput, ReadsBeyondMaxDestRdAtomicAreRefused) {
  // B's QP takes max_dest_rd_atomic (16) outstanding READs; the 17th is an
  // invalid request, as the IB spec has a responder treat it.
  const uint32_t limit = transport::QpConfig{}.max_dest_rd_atomic;
  for (uint32_t msn = 1; msn <= limit + 4; ++msn) {
    wire::DataHeader h = write_header(msn, 64 * 1024);
    h.opcode = wire::Opcode::ReadRequest;
    h.path_seq = msn;
    wire::ReadRequest read{addr(abuf_.data()), akey_};
    inject(rig_->node_a(), forge::data_packet(0, h, {}, &read));
  }
  EXPECT_EQ(b().counters().rd_atomic_limit_refusals, 1u);
  EXPECT_EQ(b().qp_state(qp_.qp_b), transport::QpState::Error);
}

TEST_F(HostileInput, AMessageLongerThanTheLargestIsRefused) {
  for (const uint32_t length : {0x80000001u, 0xffffff00u}) {
    wire::DataHeader h = write_header(1, length);
    h.path_seq = length & 0xff;
    inject(rig_->node_a(), data_packet(h, std::vector<uint8_t>(4096, 0x66)));
  }
  EXPECT_EQ(b().counters().rx_drop_bad_request, 2u);
  EXPECT_EQ(b().counters().placed_bytes, 0u);
  EXPECT_EQ(b().qp_state(qp_.qp_b), transport::QpState::Error);
}

TEST_F(HostileInput, ALateChunkOfAnEarlierWriteNeverOverwritesALaterWrite) {
  // WRITE 1 (two chunks) and WRITE 2 (one chunk) target the same first 4 KiB;
  // WRITE 2's chunk arrives before WRITE 1's first one.
  wire::DataHeader later = write_header(2, 4096);
  later.path_seq = 1;
  inject(rig_->node_a(), data_packet(later, std::vector<uint8_t>(4096, 0xbb)));
  wire::DataHeader earlier = write_header(1, 8192);
  earlier.path_seq = 2;
  inject(rig_->node_a(), data_packet(earlier, std::vector<uint8_t>(4096, 0xaa)));
  earlier.path_seq = 3;
  earlier.offset = 4096;
  inject(rig_->node_a(), data_packet(earlier, std::vector<uint8_t>(4096, 0xaa)));
  // Both complete; the bytes are WRITE 2's where it wrote, WRITE 1's elsewhere.
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(bbuf_[i], 0xbb) << "byte " << i;
  for (size_t i = 4096; i < 8192; ++i) ASSERT_EQ(bbuf_[i], 0xaa) << "byte " << i;
  EXPECT_EQ(b().counters().rx_drop_bad_request, 0u);
  bool stream_acked = false;
  for (const wire::Packet& p : b_sends())
    for (uint8_t i = 0; p.common.type == wire::PacketType::Ack && i < p.ack.stream_count; ++i)
      stream_acked |= p.ack.streams[i].completed_msn == 2;
  EXPECT_TRUE(stream_acked);
}

}  // namespace
}  // namespace metaroce::sim
