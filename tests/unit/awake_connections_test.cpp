// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Which connections an endpoint visits on each event (Endpoint::
// awake_connections): the ones that may have work. An idle connection must
// leave the list, or every timer, transmit round and rate hint pays for it
// (4,000 idle peers made a busy transfer 180 times dearer); a connection with
// work must stay on it, or its timers and datagrams are never served.
#include <gtest/gtest.h>

#include <vector>

#include "endpoint.h"

namespace metaroce::transport {
namespace {

constexpr uint32_t kPd = 1;
constexpr PeerId kA = 1;  // a's id at b
constexpr PeerId kB = 2;  // b's id at a

// Endpoint a with one QP to b (peer 2), and `idle` more QPs to peers that
// never send; b with the other end of the first QP.
struct Pair {
  explicit Pair(uint32_t idle) : source(4 * EndpointConfig{}.mtu, 0x5a), sink(source.size(), 0), a({}), b({}) {
    const uint32_t cq_a = a.create_cq(64);
    const uint32_t cq_b = b.create_cq(64);
    qp_a = a.create_qp(kPd, cq_a, cq_a, {});
    qp_b = b.create_qp(kPd, cq_b, cq_b, {});
    EXPECT_EQ(a.connect_qp(qp_a, kB, qp_b, {}), PostResult::Ok);
    EXPECT_EQ(b.connect_qp(qp_b, kA, qp_a, {}), PostResult::Ok);
    for (uint32_t i = 0; i < idle; ++i) {
      const uint32_t qp = a.create_qp(kPd, cq_a, cq_a, {});
      EXPECT_EQ(a.connect_qp(qp, 100 + i, 0x1000 + i, {}), PostResult::Ok);
    }
    lkey =
        *a.memory().register_region(kPd, reinterpret_cast<uintptr_t>(source.data()), source.size(), kAccessLocalWrite);
    rkey = *b.memory().register_region(kPd, reinterpret_cast<uintptr_t>(sink.data()), sink.size(),
                                       kAccessLocalWrite | kAccessRemoteWrite);
  }
  void post_write() {
    SendWr wr;
    wr.opcode = WrOpcode::RdmaWrite;
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(source.data()), static_cast<uint32_t>(source.size()), lkey};
    wr.remote_addr = reinterpret_cast<uintptr_t>(sink.data());
    wr.rkey = rkey;
    ASSERT_EQ(a.post_send(qp_a, wr), PostResult::Ok);
  }
  // What `from` hands out now.
  std::vector<std::vector<uint8_t>> drain(Endpoint& from, Time now, std::vector<PeerId>* peers = nullptr) {
    std::vector<std::vector<uint8_t>> out;
    std::vector<uint8_t> buf(from.max_datagram_bytes());
    while (const auto tx = from.poll_transmit(now, buf)) {
      out.emplace_back(buf.begin(), buf.begin() + tx->length);
      if (peers) peers->push_back(tx->peer);
    }
    return out;
  }
  std::vector<uint8_t> source, sink;
  Endpoint a, b;
  uint32_t qp_a = 0, qp_b = 0, lkey = 0, rkey = 0;
};

TEST(AwakeConnections, IdleConnectionsLeaveTheListAndAPostBringsItsOwnBack) {
  Pair p(100);
  // Connecting listed every connection; with nothing to do they leave it
  // once the endpoint is asked when it next has work.
  EXPECT_TRUE(p.drain(p.a, 1'000).empty());
  EXPECT_EQ(p.a.next_wakeup(), kNever);
  EXPECT_EQ(p.a.awake_connections(), 0u);
  p.post_write();
  EXPECT_EQ(p.a.awake_connections(), 1u);
  std::vector<PeerId> peers;
  EXPECT_FALSE(p.drain(p.a, 2'000, &peers).empty());
  for (PeerId peer : peers) EXPECT_EQ(peer, kB);
}

TEST(AwakeConnections, AConnectionWithPacketsInFlightKeepsItsTimer) {
  Pair p(10);
  p.post_write();
  const auto sent = p.drain(p.a, 1'000);
  ASSERT_FALSE(sent.empty());
  // Nothing is acknowledged: the retransmission timer stays armed, and when
  // it fires the endpoint resends.
  const Time rto = p.a.next_wakeup();
  ASSERT_NE(rto, kNever);
  EXPECT_EQ(p.a.awake_connections(), 1u);
  p.a.on_timer(rto);
  EXPECT_FALSE(p.drain(p.a, rto).empty());
  EXPECT_GT(p.a.counters().tx_retransmits, 0u);
}

TEST(AwakeConnections, AReceiverListsTheSenderUntilItsActivityWindowHasPassed) {
  Pair p(0);
  EXPECT_EQ(p.b.next_wakeup(), kNever);
  ASSERT_EQ(p.b.awake_connections(), 0u);
  p.post_write();
  Time now = 1'000;
  for (const auto& d : p.drain(p.a, now)) p.b.on_datagram(now, kA, d, false);
  EXPECT_EQ(p.b.awake_connections(), 1u);
  EXPECT_NE(p.b.next_wakeup(), kNever);
  // b owes ACKs, then counts a as sending for its activity window (the rate
  // hint shares b's capacity among such peers), then forgets it.
  for (const auto& d : p.drain(p.b, now)) p.a.on_datagram(now, kB, d, false);
  p.b.next_wakeup();
  EXPECT_EQ(p.b.awake_connections(), 1u);
  EXPECT_EQ(p.b.active_senders(now), 1u);
  now += 1'000'000'000;
  p.b.on_timer(now);
  p.drain(p.b, now);
  EXPECT_EQ(p.b.next_wakeup(), kNever);
  EXPECT_EQ(p.b.awake_connections(), 0u);
  EXPECT_EQ(p.b.active_senders(now), 0u);
  EXPECT_EQ(p.sink, p.source);
}

TEST(AwakeConnections, DestroyingAQpOnAnIdleConnectionSendsItsFarewell) {
  Pair p(0);
  p.post_write();
  Time now = 1'000;
  for (const auto& d : p.drain(p.a, now)) p.b.on_datagram(now, kA, d, false);
  for (const auto& d : p.drain(p.b, now)) p.a.on_datagram(now, kB, d, false);
  now += 1'000'000'000;
  p.b.on_timer(now);
  p.drain(p.b, now);
  p.b.next_wakeup();
  ASSERT_EQ(p.b.awake_connections(), 0u);
  // b's QP goes: the peer may still wait for its last stream ACK, which
  // leaves although the connection was idle.
  ASSERT_EQ(p.b.destroy_qp(p.qp_b), PostResult::Ok);
  EXPECT_EQ(p.b.awake_connections(), 1u);
  EXPECT_FALSE(p.drain(p.b, now).empty());
}

}  // namespace
}  // namespace metaroce::transport
