// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The order an endpoint serves its connections in (Endpoint::
// set_transmit_order, docs/spec.md 8.6): one datagram per connection in
// turn, by the peers' keys, starting with the first peer after the own key.
#include <gtest/gtest.h>

#include <vector>

#include "endpoint.h"

namespace metaroce::transport {
namespace {

constexpr uint32_t kPd = 1;

// One endpoint with a WRITE of several packets queued to each of `peers`
// (connected in that order); the peers need not exist, since only what the
// endpoint sends first is looked at.
struct Sender {
  explicit Sender(const std::vector<PeerId>& peers) : source(4 * EndpointConfig{}.mtu, 0x5a), endpoint({}) {
    cq = endpoint.create_cq(64);
    lkey = *endpoint.memory().register_region(kPd, reinterpret_cast<uintptr_t>(source.data()), source.size(),
                                              kAccessLocalWrite);
    for (PeerId peer : peers) connect(peer);
  }
  void connect(PeerId peer) {
    const uint32_t qp = endpoint.create_qp(kPd, cq, cq, {});
    ASSERT_EQ(endpoint.connect_qp(qp, peer, 0x1000 + peer, {}), PostResult::Ok);
    SendWr wr;
    wr.opcode = WrOpcode::RdmaWrite;
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(source.data()), static_cast<uint32_t>(source.size()), lkey};
    wr.remote_addr = 0x10000;
    wr.rkey = 0x101;
    ASSERT_EQ(endpoint.post_send(qp, wr), PostResult::Ok);
  }
  // The peers of the next `count` datagrams.
  std::vector<PeerId> next(size_t count) {
    std::vector<uint8_t> buf(endpoint.max_datagram_bytes());
    std::vector<PeerId> to;
    for (size_t i = 0; i < count; ++i) {
      const auto tx = endpoint.poll_transmit(1'000, buf);
      if (!tx) break;
      to.push_back(tx->peer);
    }
    return to;
  }
  std::vector<uint8_t> source;
  Endpoint endpoint;
  uint32_t cq = 0, lkey = 0;
};

TEST(TransmitOrder, ByDefaultTheRoundStartsAtTheLowestPeerId) {
  Sender s({3, 1, 4, 2});
  EXPECT_EQ(s.next(8), (std::vector<PeerId>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(TransmitOrder, TheRoundStartsWithThePeerAfterTheOwnKey) {
  // Keys are peer ids here, as in the simulator (node ids): the endpoint
  // whose own key is 2 serves 3, 4, then wraps to 1, 2.
  Sender s({1, 2, 3, 4});
  s.endpoint.set_transmit_order(2, nullptr);
  EXPECT_EQ(s.next(8), (std::vector<PeerId>{3, 4, 1, 2, 3, 4, 1, 2}));
}

TEST(TransmitOrder, KeysComeFromTheDriverAndLaterConnectionsTakeTheirPlace) {
  // Keys in reverse of the ids (as addresses need not follow first use).
  Sender s({1, 2, 3});
  s.endpoint.set_transmit_order(40, [](PeerId peer) { return uint64_t{100} - 10 * peer; });
  // Keys: 1 -> 90, 2 -> 80, 3 -> 70; after the own key, 40, come 70, 80, 90.
  EXPECT_EQ(s.next(3), (std::vector<PeerId>{3, 2, 1}));
  // Peer 5 (key 50) joins between the own key and peer 3: it is served
  // first in the next round.
  s.connect(5);
  EXPECT_EQ(s.next(4), (std::vector<PeerId>{5, 3, 2, 1}));
}

TEST(TransmitOrder, EveryEndpointStartingAfterItselfMakesTheFirstRoundAPermutation) {
  // Four endpoints, each with a message to each of the others: in every
  // step of the first round each peer is the destination of exactly one.
  constexpr PeerId kNodes = 4;
  std::vector<std::unique_ptr<Sender>> senders;
  std::vector<std::vector<PeerId>> firsts;
  for (PeerId self = 1; self <= kNodes; ++self) {
    std::vector<PeerId> others;
    for (PeerId p = 1; p <= kNodes; ++p)
      if (p != self) others.push_back(p);
    senders.push_back(std::make_unique<Sender>(others));
    senders.back()->endpoint.set_transmit_order(self, nullptr);
    firsts.push_back(senders.back()->next(kNodes - 1));
  }
  for (size_t step = 0; step + 1 < kNodes; ++step) {
    std::vector<int> received(kNodes + 1, 0);
    for (const auto& first : firsts) ++received.at(first.at(step));
    for (PeerId p = 1; p <= kNodes; ++p) EXPECT_EQ(received[p], 1) << "step " << step << ", peer " << p;
  }
}

}  // namespace
}  // namespace metaroce::transport
