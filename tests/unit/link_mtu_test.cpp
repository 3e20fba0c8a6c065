// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The payload that fits a link, and the IB MTU a port reports for it
// (include/metaroce/abi.h): the same functions serve the provider and
// metaroce.ko.
#include <gtest/gtest.h>

#include "metaroce/abi.h"
#include "metaroce/wire.h"

namespace {

TEST(LinkMtu, DatagramFillsAStandardEthernetFrame) {
  const uint32_t v4 = metaroce_payload_for_link_mtu(1500, 0);
  EXPECT_EQ(v4, 1500u - 20 - 8 - metaroce::wire::kDataOverheadBytes);
  EXPECT_EQ(v4 + metaroce::wire::kDataOverheadBytes + 8 + 20, 1500u);
  EXPECT_EQ(metaroce_payload_for_link_mtu(1500, 1), 1500u - 40 - 8 - metaroce::wire::kDataOverheadBytes);
}

TEST(LinkMtu, PortMtuIsTheLargestIbMtuNotAboveThePayload) {
  EXPECT_EQ(metaroce_ib_mtu_not_above(metaroce_payload_for_link_mtu(1500, 0)), 3);  // IBV_MTU_1024
  EXPECT_EQ(metaroce_ib_mtu_not_above(metaroce_payload_for_link_mtu(1500, 1)), 3);
  EXPECT_EQ(metaroce_ib_mtu_not_above(metaroce_payload_for_link_mtu(9000, 0)), 5);  // IBV_MTU_4096
  EXPECT_EQ(metaroce_ib_mtu_not_above(2048), 4);
  EXPECT_EQ(metaroce_ib_mtu_not_above(2047), 3);
  EXPECT_EQ(metaroce_ib_mtu_not_above(256), 1);
  EXPECT_EQ(metaroce_ib_mtu_not_above(100000), 5);
}

TEST(LinkMtu, LoopbackCountsAsAJumboFrameAndTinyLinksAsTheSmallestIbMtu) {
  EXPECT_EQ(metaroce_payload_for_link_mtu(65536, 0), metaroce_payload_for_link_mtu(METAROCE_MAX_LINK_MTU, 0));
  EXPECT_EQ(metaroce_payload_for_link_mtu(300, 0), 256u);
  EXPECT_EQ(metaroce_payload_for_link_mtu(0, 1), 256u);
}

}  // namespace
