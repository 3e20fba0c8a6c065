// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A datagram's arrival time (Endpoint::on_datagram's `arrival`, the io
// runtime's kernel receive timestamp): RTT samples and the holding times an
// ACK reports run from it, so that time a datagram waited for a busy
// progress thread at either end is not taken for network delay.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <vector>

#include "endpoint.h"

namespace metaroce::transport {
namespace {

constexpr uint32_t kPd = 1;
constexpr PeerId kA = 1, kB = 2;
constexpr Time kOneWay = 5'000;
// How long every datagram waits at its receiver before the engine sees it.
constexpr Time kHostWait = 40'000;

// Two endpoints on a lossless wire. Every datagram reaches its host after
// kOneWay and the engine after kHostWait more; with `stamped` the engine is
// told when it arrived.
struct SlowHosts {
  explicit SlowHosts(bool with_arrival) : a(EndpointConfig{}), b(EndpointConfig{}), stamped(with_arrival) {}
  struct InFlight {
    Time arrives;
    PeerId to;
    std::vector<uint8_t> bytes;
  };
  Endpoint a, b;
  const bool stamped;
  std::deque<InFlight> flight;
  Time now = 0;

  void drain(Endpoint& e) {
    std::vector<uint8_t> buf(e.max_datagram_bytes());
    while (auto tx = e.poll_transmit(now, buf))
      flight.push_back({now + kOneWay, tx->peer, {buf.begin(), buf.begin() + tx->length}});
  }
  template <typename Done>
  bool run(Done done, Time limit) {
    while (now < limit) {
      drain(a);
      drain(b);
      if (done()) return true;
      const Time next_delivery = flight.empty() ? kNever : flight.front().arrives + kHostWait;
      now = std::max(now + 1, std::min({a.next_wakeup(), b.next_wakeup(), next_delivery}));
      while (!flight.empty() && flight.front().arrives + kHostWait <= now) {
        InFlight d = std::move(flight.front());
        flight.pop_front();
        (d.to == kA ? a : b).on_datagram(now, d.to == kA ? kB : kA, d.bytes, false, stamped ? d.arrives : 0);
      }
      if (a.next_wakeup() <= now) a.on_timer(now);
      if (b.next_wakeup() <= now) b.on_timer(now);
    }
    return false;
  }
};

// One 64 KiB WRITE from a to b; returns a's path snapshots once it completed.
std::vector<PathSnapshot> write_once(SlowHosts& w) {
  std::vector<uint8_t> source(64 << 10, 0x5a), sink(source.size(), 0);
  const uint32_t cq_a = w.a.create_cq(16);
  const uint32_t cq_b = w.b.create_cq(16);
  const uint32_t qp_a = w.a.create_qp(kPd, cq_a, cq_a, {});
  const uint32_t qp_b = w.b.create_qp(kPd, cq_b, cq_b, {});
  EXPECT_EQ(w.a.connect_qp(qp_a, kB, qp_b, {}), PostResult::Ok);
  EXPECT_EQ(w.b.connect_qp(qp_b, kA, qp_a, {}), PostResult::Ok);
  const uint32_t lkey =
      *w.a.memory().register_region(kPd, reinterpret_cast<uintptr_t>(source.data()), source.size(), kAccessLocalWrite);
  const uint32_t rkey = *w.b.memory().register_region(kPd, reinterpret_cast<uintptr_t>(sink.data()), sink.size(),
                                                      kAccessLocalWrite | kAccessRemoteWrite);
  SendWr wr;
  wr.wr_id = 1;
  wr.opcode = WrOpcode::RdmaWrite;
  wr.num_sge = 1;
  wr.sg[0] = {reinterpret_cast<uintptr_t>(source.data()), static_cast<uint32_t>(source.size()), lkey};
  wr.remote_addr = reinterpret_cast<uintptr_t>(sink.data());
  wr.rkey = rkey;
  EXPECT_EQ(w.a.post_send(qp_a, wr), PostResult::Ok);
  Completion c[4];
  size_t completed = 0;
  EXPECT_TRUE(w.run([&] { return (completed += w.a.poll_cq(cq_a, c)) > 0; }, 100'000'000));
  EXPECT_EQ(c[0].status, WcStatus::Success);
  EXPECT_EQ(std::memcmp(source.data(), sink.data(), sink.size()), 0);
  return w.a.path_snapshots(kB);
}

Time smallest_sampled_srtt(const std::vector<PathSnapshot>& paths) {
  Time smallest = kNever;
  for (const PathSnapshot& p : paths)
    if (p.min_rtt_ns != 0) smallest = std::min(smallest, p.srtt_ns);
  return smallest;
}

TEST(ArrivalTime, RttSamplesLeaveOutTheWaitForTheProgressThread) {
  SlowHosts stamped(true);
  const Time with_stamps = smallest_sampled_srtt(write_once(stamped));
  // The wire's round trip, plus at most the ACK's own wait to be sent.
  EXPECT_GE(with_stamps, 2 * kOneWay);
  EXPECT_LT(with_stamps, 2 * kOneWay + kHostWait / 4);

  SlowHosts unstamped(false);
  const Time without = smallest_sampled_srtt(write_once(unstamped));
  // Without arrival times the sender's wait for its own progress thread
  // reads as network delay.
  EXPECT_GE(without, 2 * kOneWay + kHostWait);
}

}  // namespace
}  // namespace metaroce::transport
