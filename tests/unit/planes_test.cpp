// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Planes in the engine: path p is on plane p % planes and says so in every
// datagram and snapshot; a plane reported down is drained at once (its
// packets in flight resent on the others, nothing more sent on it, ACKs
// included) and a plane reported up again is probed and carries data again.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <vector>

#include "endpoint.h"

namespace metaroce::transport {
namespace {

constexpr uint32_t kPd = 1;
constexpr PeerId kA = 1, kB = 2;
constexpr Time kOneWay = 2'000;

// Two endpoints and a lossless wire with a fixed delay; datagrams sent on a
// plane that is marked cut are lost.
struct Wire {
  explicit Wire(const EndpointConfig& config) : a(config), b(config) {}
  struct InFlight {
    Time at;
    PeerId to;
    std::vector<uint8_t> bytes;
  };
  Endpoint a, b;
  std::deque<InFlight> flight;
  std::vector<std::vector<uint64_t>> sent_per_plane{{0, 0}, {0, 0}};  // [endpoint][plane] datagrams
  bool plane0_cut = false;
  Time now = 0;

  void drain(Endpoint& e, PeerId self) {
    std::vector<uint8_t> buf(e.max_datagram_bytes());
    while (auto tx = e.poll_transmit(now, buf)) {
      EXPECT_EQ(tx->plane, tx->path_id % e.config().planes);
      ++sent_per_plane[self == kA ? 0 : 1][tx->plane];
      if (tx->plane == 0 && plane0_cut) continue;
      flight.push_back({now + kOneWay, tx->peer, {buf.begin(), buf.begin() + tx->length}});
    }
  }
  // Runs until done() or the time limit, in steps of at most 100 ns.
  template <typename Done>
  bool run(Done done, Time limit) {
    while (now < limit) {
      drain(a, kA);
      drain(b, kB);
      if (done()) return true;
      Time next = std::min({a.next_wakeup(), b.next_wakeup(), flight.empty() ? kNever : flight.front().at});
      now = std::max(now + 1, std::min(next, now + 100));
      while (!flight.empty() && flight.front().at <= now) {
        InFlight d = std::move(flight.front());
        flight.pop_front();
        (d.to == kA ? a : b).on_datagram(now, d.to == kA ? kB : kA, d.bytes, false);
      }
      if (a.next_wakeup() <= now) a.on_timer(now);
      if (b.next_wakeup() <= now) b.on_timer(now);
    }
    return false;
  }
};

struct Transfer {
  explicit Transfer(Wire& w, size_t bytes) : source(bytes), sink(bytes, 0) {
    for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<uint8_t>(i * 7 + 3);
    cq_a = w.a.create_cq(64);
    cq_b = w.b.create_cq(64);
    qp_a = w.a.create_qp(kPd, cq_a, cq_a, {});
    qp_b = w.b.create_qp(kPd, cq_b, cq_b, {});
    EXPECT_EQ(w.a.connect_qp(qp_a, kB, qp_b, {}), PostResult::Ok);
    EXPECT_EQ(w.b.connect_qp(qp_b, kA, qp_a, {}), PostResult::Ok);
    const uint32_t lkey =
        *w.a.memory().register_region(kPd, reinterpret_cast<uintptr_t>(source.data()), bytes, kAccessLocalWrite);
    const uint32_t rkey = *w.b.memory().register_region(kPd, reinterpret_cast<uintptr_t>(sink.data()), bytes,
                                                        kAccessLocalWrite | kAccessRemoteWrite);
    SendWr wr;
    wr.opcode = WrOpcode::RdmaWrite;
    wr.num_sge = 1;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(source.data()), static_cast<uint32_t>(bytes), lkey};
    wr.remote_addr = reinterpret_cast<uintptr_t>(sink.data());
    wr.rkey = rkey;
    EXPECT_EQ(w.a.post_send(qp_a, wr), PostResult::Ok);
  }
  std::vector<uint8_t> source, sink;
  uint32_t cq_a = 0, cq_b = 0, qp_a = 0, qp_b = 0;
};

EndpointConfig two_planes() {
  EndpointConfig config;
  config.paths = 8;
  config.planes = 2;
  return config;
}

TEST(Planes, PathsAlternatePlanesInDatagramsAndSnapshots) {
  Wire w(two_planes());
  Transfer t(w, 4 << 20);
  ASSERT_TRUE(w.run([&] { return w.a.cq_depth(t.cq_a) == 1; }, 10'000'000));
  EXPECT_EQ(t.sink, t.source);
  EXPECT_GT(w.sent_per_plane[0][0], 400u);
  EXPECT_GT(w.sent_per_plane[0][1], 400u);
  EXPECT_GT(w.sent_per_plane[1][0], 0u);  // ACKs leave on both planes too
  EXPECT_GT(w.sent_per_plane[1][1], 0u);
  const auto paths = w.a.path_snapshots(kB);
  ASSERT_EQ(paths.size(), 8u);
  for (const auto& p : paths) EXPECT_EQ(p.plane, p.path_id % 2);
}

TEST(Planes, ThePlanesCountIsAtMostThePathsAndAtLeastOne) {
  EndpointConfig config;
  config.paths = 2;
  config.planes = 8;
  EXPECT_EQ(Endpoint(config).config().planes, 2u);
  config.planes = 0;
  EXPECT_EQ(Endpoint(config).config().planes, 1u);
}

TEST(Planes, APlaneReportedDownIsDrainedAndOneReportedUpIsUsedAgain) {
  Wire w(two_planes());
  Transfer t(w, 32 << 20);  // about 700 us at 8 x 100G
  // Let the transfer get going, then cut plane 0 and say so at both ends.
  ASSERT_FALSE(w.run([] { return false; }, 20'000));
  w.plane0_cut = true;
  w.a.set_plane_up(w.now, 0, false);
  w.b.set_plane_up(w.now, 0, false);
  EXPECT_FALSE(w.a.plane_up(0));
  EXPECT_EQ(w.a.counters().plane_drains, 4u);
  for (const auto& p : w.a.path_snapshots(kB))
    EXPECT_EQ(p.health, p.plane == 0 ? PathHealth::Failed : PathHealth::Active) << "path " << p.path_id;
  const uint64_t a_plane0 = w.sent_per_plane[0][0], b_plane0 = w.sent_per_plane[1][0];
  ASSERT_FALSE(w.run([] { return false; }, 120'000));
  // Nothing at all on the dead plane (data, ACKs, probes), and the
  // transfer goes on over plane 1 without waiting for timeouts.
  EXPECT_EQ(w.sent_per_plane[0][0], a_plane0);
  EXPECT_EQ(w.sent_per_plane[1][0], b_plane0);
  EXPECT_EQ(w.a.counters().path_failures, 0u);
  EXPECT_EQ(w.a.counters().rto_expirations, 0u);
  // Back up: probed, then carrying data again.
  w.plane0_cut = false;
  w.a.set_plane_up(w.now, 0, true);
  w.b.set_plane_up(w.now, 0, true);
  ASSERT_TRUE(w.run([&] { return w.a.cq_depth(t.cq_a) == 1; }, 20'000'000));
  EXPECT_EQ(t.sink, t.source);
  EXPECT_EQ(w.a.counters().path_recoveries, 4u);
  EXPECT_GT(w.sent_per_plane[0][0], a_plane0 + 100);
  for (const auto& p : w.a.path_snapshots(kB)) EXPECT_EQ(p.health, PathHealth::Active) << "path " << p.path_id;
}

}  // namespace
}  // namespace metaroce::transport
