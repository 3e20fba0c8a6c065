// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
// kmod/gsi_logic.c against the mock kernel: the GSI QP's rings and the CQ
// slots reserved for posted work, address handle lookups, the receive
// buffer's GRH and the QP1 state machine.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>

extern "C" {
#include "mroce_logic.h"
}

namespace {

TEST(GsiRing, FillsToItsSizeThenRefuses) {
  mroce_ring r;
  mroce_ring_init(&r, 4);
  for (int i = 0; i < 4; i++) EXPECT_EQ(mroce_ring_produce(&r), i);
  EXPECT_EQ(mroce_ring_produce(&r), -ENOMEM);
  EXPECT_EQ(r.count, 4u);
}

TEST(GsiRing, EmptyRingHasNothingToGive) {
  mroce_ring r;
  mroce_ring_init(&r, 3);
  EXPECT_EQ(mroce_ring_peek(&r), -ENOENT);
  EXPECT_EQ(mroce_ring_consume(&r), -ENOENT);
  mroce_ring_init(&r, 0);
  EXPECT_EQ(mroce_ring_produce(&r), -ENOMEM);
}

// Against a model queue, across many wrap-arounds with varying fill.
TEST(GsiRing, IsFifoAcrossWrapArounds) {
  constexpr uint32_t kSize = 7;
  mroce_ring r;
  mroce_ring_init(&r, kSize);
  int slots[kSize];
  std::deque<int> model;
  int next_value = 0;
  for (int round = 0; round < 500; round++) {
    const int produce = round % 5, consume = (round * 3) % 4;
    for (int i = 0; i < produce; i++) {
      const int s = mroce_ring_produce(&r);
      if (model.size() == kSize) {
        EXPECT_EQ(s, -ENOMEM);
        continue;
      }
      ASSERT_GE(s, 0);
      ASSERT_LT(s, static_cast<int>(kSize));
      slots[s] = next_value;
      model.push_back(next_value++);
    }
    for (int i = 0; i < consume; i++) {
      if (model.empty()) {
        EXPECT_EQ(mroce_ring_consume(&r), -ENOENT);
        continue;
      }
      ASSERT_EQ(mroce_ring_peek(&r), static_cast<int>(r.head));
      const int s = mroce_ring_consume(&r);
      ASSERT_GE(s, 0);
      EXPECT_EQ(slots[s], model.front());
      model.pop_front();
    }
    ASSERT_EQ(r.count, model.size());
  }
}

TEST(GsiCqSlots, EveryPostedRequestHasItsCompletionSlot) {
  mroce_cq_slots cq;
  mroce_cq_slots_init(&cq, 3);
  EXPECT_EQ(mroce_cq_reserve(&cq), 0);
  EXPECT_EQ(mroce_cq_reserve(&cq), 0);
  EXPECT_EQ(mroce_cq_reserve(&cq), 0);
  EXPECT_EQ(mroce_cq_reserve(&cq), -ENOMEM) << "a fourth post would overrun the CQ";
  EXPECT_GE(mroce_cq_complete(&cq), 0);
  EXPECT_EQ(mroce_cq_reserve(&cq), -ENOMEM) << "the completion still occupies its slot";
  EXPECT_GE(mroce_ring_consume(&cq.ring), 0);  // polled
  EXPECT_EQ(mroce_cq_reserve(&cq), 0);
  EXPECT_GE(mroce_cq_complete(&cq), 0);
  EXPECT_GE(mroce_cq_complete(&cq), 0);
  EXPECT_GE(mroce_cq_complete(&cq), 0);
  EXPECT_EQ(mroce_cq_complete(&cq), -ENOSPC) << "no reservation left";
  EXPECT_EQ(cq.ring.count, 3u);
}

TEST(GsiCqSlots, UnreservingGivesTheSlotBack) {
  mroce_cq_slots cq;
  mroce_cq_slots_init(&cq, 1);
  EXPECT_EQ(mroce_cq_reserve(&cq), 0);
  mroce_cq_unreserve(&cq);
  EXPECT_EQ(cq.reserved, 0u);
  mroce_cq_unreserve(&cq);  // never below zero
  EXPECT_EQ(cq.reserved, 0u);
  EXPECT_EQ(mroce_cq_reserve(&cq), 0);
}

void gid_of(const char* spec, uint8_t gid[16]) {
  // spec: 32 hex digits
  for (int i = 0; i < 16; i++) {
    unsigned v = 0;
    ASSERT_EQ(sscanf(spec + 2 * i, "%2x", &v), 1);
    gid[i] = static_cast<uint8_t>(v);
  }
}

TEST(GsiAddress, Ipv4MappedGidIsAnIpv4Address) {
  uint8_t gid[16];
  gid_of("00000000000000000000ffff0a000001", gid);
  mroce_addr a;
  ASSERT_EQ(mroce_addr_from_gid(gid, &a), 0);
  EXPECT_EQ(a.family, MROCE_IPV4);
  const uint8_t want[4] = {10, 0, 0, 1};
  EXPECT_EQ(std::memcmp(a.ip, want, 4), 0);
  uint8_t back[16];
  mroce_gid_from_addr(&a, back);
  EXPECT_EQ(std::memcmp(back, gid, 16), 0);
}

TEST(GsiAddress, OtherGidsAreIpv6Addresses) {
  uint8_t gid[16];
  gid_of("fd000000000000000000000000000001", gid);
  mroce_addr a;
  ASSERT_EQ(mroce_addr_from_gid(gid, &a), 0);
  EXPECT_EQ(a.family, MROCE_IPV6);
  EXPECT_EQ(std::memcmp(a.ip, gid, 16), 0);
  uint8_t back[16];
  mroce_gid_from_addr(&a, back);
  EXPECT_EQ(std::memcmp(back, gid, 16), 0);
  gid_of("fe800000000000000200aafffebbccdd", gid);  // link-local: unicast
  EXPECT_EQ(mroce_addr_from_gid(gid, &a), 0);
}

TEST(GsiAddress, NoUnspecifiedOrMulticastDestination) {
  const char* refused[] = {
      "00000000000000000000000000000000",  // ::
      "00000000000000000000ffff00000000",  // 0.0.0.0
      "00000000000000000000ffffe0000001",  // 224.0.0.1
      "00000000000000000000ffffffffffff",  // 255.255.255.255
      "ff020000000000000000000000000001",  // ff02::1
  };
  for (const char* g : refused) {
    uint8_t gid[16];
    gid_of(g, gid);
    mroce_addr a;
    EXPECT_EQ(mroce_addr_from_gid(gid, &a), -EINVAL) << g;
  }
}

TEST(GsiAddress, Qp1ListensOnTheGsiPortOthersOnTheirHomePort) {
  EXPECT_EQ(mroce_ud_dest_port(1, 4788), 4788);
  EXPECT_EQ(mroce_ud_dest_port(1, 5000), 5000);
  EXPECT_EQ(mroce_ud_dest_port((5u << 12) | 3, 4788), METAROCE_HOME_PORT_BASE + 5);
  EXPECT_EQ(mroce_ud_dest_port((4095u << 12) | 4095, 4788), METAROCE_HOME_PORT_BASE + 4095);
}

TEST(GsiAddress, QkeyWithHighBitMeansTheQpsOwn) {
  EXPECT_EQ(mroce_ud_send_qkey(0x12345678, MROCE_GSI_QKEY), 0x12345678u);
  EXPECT_EQ(mroce_ud_send_qkey(0x80000000, MROCE_GSI_QKEY), MROCE_GSI_QKEY);
  EXPECT_EQ(mroce_ud_send_qkey(MROCE_GSI_QKEY, 0x80010000), 0x80010000u);
}

uint16_t header_sum(const uint8_t* p, size_t len) {
  uint32_t sum = 0;
  for (size_t i = 0; i < len; i += 2) sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

TEST(GsiGrh, Ipv4IsTwentyZeroBytesAndAValidIpv4Header) {
  mroce_addr src{}, dst{};
  src.family = dst.family = MROCE_IPV4;
  const uint8_t s[4] = {10, 0, 0, 2}, d[4] = {10, 0, 0, 1};
  std::memcpy(src.ip, s, 4);
  std::memcpy(dst.ip, d, 4);
  uint8_t grh[MROCE_GRH_LEN];
  std::memset(grh, 0xaa, sizeof grh);
  EXPECT_EQ(mroce_gsi_build_grh(grh, &src, &dst, 264), RDMA_NETWORK_IPV4);
  for (int i = 0; i < 20; i++) EXPECT_EQ(grh[i], 0) << i;
  const uint8_t* ip = grh + 20;
  EXPECT_EQ(ip[0], 0x45);  // version 4, no options: what the RDMA core checks
  EXPECT_EQ(get_unaligned_be16(ip + 2), 284);
  EXPECT_EQ(ip[9], 17);
  EXPECT_EQ(header_sum(ip, 20), 0xffff) << "header checksum";
  EXPECT_EQ(std::memcmp(ip + 12, s, 4), 0);
  EXPECT_EQ(std::memcmp(ip + 16, d, 4), 0);
}

TEST(GsiGrh, Ipv6IsAnIpv6Header) {
  mroce_addr src{}, dst{};
  src.family = dst.family = MROCE_IPV6;
  for (int i = 0; i < 16; i++) {
    src.ip[i] = static_cast<uint8_t>(0xf0 + i);
    dst.ip[i] = static_cast<uint8_t>(i);
  }
  uint8_t grh[MROCE_GRH_LEN];
  EXPECT_EQ(mroce_gsi_build_grh(grh, &src, &dst, 264), RDMA_NETWORK_IPV6);
  EXPECT_EQ(grh[0] >> 4, 6);
  EXPECT_EQ(get_unaligned_be16(grh + 4), 264);
  EXPECT_EQ(grh[6], 17);
  EXPECT_EQ(std::memcmp(grh + 8, src.ip, 16), 0) << "sgid";
  EXPECT_EQ(std::memcmp(grh + 24, dst.ip, 16), 0) << "dgid";
}

int modify(ib_qp_state record, ib_qp_state to, int mask, ib_qp_state* next, ib_qp_attr a = {}) {
  a.qp_state = to;
  a.qkey = MROCE_GSI_QKEY;
  return mroce_gsi_modify_check(record, &a, mask | IB_QP_STATE, next);
}

TEST(GsiStates, TheMadLayersSequencePasses) {
  ib_qp_state s = IB_QPS_RESET, next;
  ASSERT_EQ(modify(s, IB_QPS_INIT, IB_QP_PKEY_INDEX | IB_QP_QKEY, &next), 0);
  EXPECT_EQ(next, IB_QPS_INIT);
  ASSERT_EQ(modify(next, IB_QPS_RTR, 0, &next), 0);
  EXPECT_EQ(next, IB_QPS_RTR);
  ASSERT_EQ(modify(next, IB_QPS_RTS, IB_QP_SQ_PSN, &next), 0);
  EXPECT_EQ(next, IB_QPS_RTS);
  ASSERT_EQ(modify(next, IB_QPS_RESET, 0, &next), 0);
  EXPECT_EQ(next, IB_QPS_RESET);
}

TEST(GsiStates, RequiredAttributesMissingOrExtraAreRefused) {
  ib_qp_state next = IB_QPS_RESET;
  EXPECT_EQ(modify(IB_QPS_RESET, IB_QPS_INIT, IB_QP_PKEY_INDEX, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_RESET, IB_QPS_INIT, IB_QP_QKEY, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_RESET, IB_QPS_INIT, IB_QP_PKEY_INDEX | IB_QP_QKEY | IB_QP_AV, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_RTR, IB_QPS_RTS, 0, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_INIT, IB_QPS_RTR, IB_QP_DEST_QPN, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_RTS, IB_QPS_RTS, IB_QP_QKEY, &next), 0);
}

TEST(GsiStates, OnlyTheSpecsTransitions) {
  ib_qp_state next;
  EXPECT_EQ(modify(IB_QPS_RESET, IB_QPS_RTR, 0, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_RESET, IB_QPS_RTS, IB_QP_SQ_PSN, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_INIT, IB_QPS_RTS, IB_QP_SQ_PSN, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_RTS, IB_QPS_SQD, 0, &next), -EINVAL);
  EXPECT_EQ(modify(IB_QPS_ERR, IB_QPS_RTS, IB_QP_SQ_PSN, &next), -EINVAL);
  for (ib_qp_state from : {IB_QPS_RESET, IB_QPS_INIT, IB_QPS_RTR, IB_QPS_RTS, IB_QPS_ERR}) {
    EXPECT_EQ(modify(from, IB_QPS_ERR, 0, &next), 0) << from;
    EXPECT_EQ(modify(from, IB_QPS_RESET, 0, &next), 0) << from;
  }
}

TEST(GsiStates, AttributeValuesAreChecked) {
  ib_qp_state next;
  ib_qp_attr a{};
  a.pkey_index = 1;
  EXPECT_EQ(modify(IB_QPS_RESET, IB_QPS_INIT, IB_QP_PKEY_INDEX | IB_QP_QKEY, &next, a), -EINVAL);
  a = {};
  a.port_num = 2;
  EXPECT_EQ(modify(IB_QPS_RESET, IB_QPS_INIT, IB_QP_PKEY_INDEX | IB_QP_QKEY | IB_QP_PORT, &next, a), -EINVAL);
  a = {};
  a.sq_psn = 0x1000000;
  EXPECT_EQ(modify(IB_QPS_RTR, IB_QPS_RTS, IB_QP_SQ_PSN, &next, a), -EINVAL);
  a.cur_qp_state = IB_QPS_INIT;  // not the record
  EXPECT_EQ(mroce_gsi_modify_check(IB_QPS_RTR, &a, IB_QP_STATE | IB_QP_CUR_STATE, &next), -EINVAL);
}

}  // namespace
