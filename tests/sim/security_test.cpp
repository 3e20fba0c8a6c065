// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// docs/spec.md section 9 at the engine: incarnations (a restarted peer on the
// same home port and QP numbers works at once, packets of an old incarnation
// change nothing but a counter), initial message numbers from the PSNs, and
// the authenticate and encrypt modes (forgeries with a correct CRC, bit
// flips, replays and wrong keys are dropped; encrypt hides the payload).
// Two endpoints joined by a lossless in-order pump, so that every datagram can
// be captured and replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "endpoint.h"
#include "engine_fixture.h"
#include "metaroce/wire.h"
#include "packet_protection.h"

namespace metaroce::transport {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr PeerId kA = 1;  // A's name at B
constexpr PeerId kB = 2;  // B's name at A
using sim::testing::addr;
using sim::testing::kPd;
constexpr uint32_t kAccess = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
constexpr size_t kBytes = 64 * 1024;

EndpointConfig config(uint32_t epoch, wire::Security security = wire::Security::Integrity) {
  EndpointConfig c;
  c.mtu = 1024;
  c.epoch = epoch;
  c.security = security;
  return c;
}

PairKey key(uint8_t fill) {
  PairKey k;
  k.fill(fill);
  return k;
}

Bytes pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return b;
}

// Moves datagrams between two endpoints, in order and without loss, and
// keeps a copy of each.
class Pump {
 public:
  Pump(Endpoint* a, Endpoint* b) : a_(a), b_(b) {}
  void set_a(Endpoint* a) { a_ = a; }
  void set_b(Endpoint* b) { b_ = b; }
  Time now = 1'000'000;
  std::vector<Bytes> a_to_b, b_to_a;

  bool run_until(const std::function<bool()>& done, int rounds = 200'000) {
    std::vector<uint8_t> buf(std::max(a_->max_datagram_bytes(), b_->max_datagram_bytes()));
    for (int i = 0; i < rounds; ++i) {
      if (done()) return true;
      for (Endpoint* e : {a_, b_})
        if (e->next_wakeup() <= now) e->on_timer(now);
      move(*a_, *b_, kA, a_to_b, buf);
      move(*b_, *a_, kB, b_to_a, buf);
      now += 1'000;
    }
    return done();
  }

 private:
  void move(Endpoint& from, Endpoint& to, PeerId from_id, std::vector<Bytes>& log, std::vector<uint8_t>& buf) {
    for (int n = 0; n < 256; ++n) {
      const auto tx = from.poll_transmit(now, buf);
      if (!tx) return;
      log.emplace_back(buf.begin(), buf.begin() + tx->length);
      to.on_datagram(now, from_id, log.back(), false);
    }
  }

  Endpoint* a_;
  Endpoint* b_;
};

struct Link {
  uint32_t cq_a = 0, cq_b = 0, qp_a = 0, qp_b = 0;
};

Link connect(Endpoint& a, Endpoint& b, QpConfig ca = {}, QpConfig cb = {}) {
  Link l;
  l.cq_a = a.create_cq(4096);
  l.cq_b = b.create_cq(4096);
  l.qp_a = a.create_qp(kPd, l.cq_a, l.cq_a, ca);
  l.qp_b = b.create_qp(kPd, l.cq_b, l.cq_b, cb);
  EXPECT_EQ(a.connect_qp(l.qp_a, kB, l.qp_b, ca), PostResult::Ok);
  EXPECT_EQ(b.connect_qp(l.qp_b, kA, l.qp_a, cb), PostResult::Ok);
  return l;
}

// Posts a WRITE of `source` into `sink` (registered here) from `from`'s QP;
// returns the sink's rkey.
uint32_t post_write(Endpoint& from, uint32_t qp, Bytes& source, Endpoint& to, Bytes& sink) {
  const uint32_t lkey = *from.memory().register_region(kPd, addr(source.data()), source.size(), kAccess);
  const uint32_t rkey = *to.memory().register_region(kPd, addr(sink.data()), sink.size(), kAccess);
  SendWr wr;
  wr.opcode = WrOpcode::RdmaWrite;
  wr.num_sge = 1;
  wr.sg[0] = {addr(source.data()), static_cast<uint32_t>(source.size()), lkey};
  wr.remote_addr = addr(sink.data());
  wr.rkey = rkey;
  EXPECT_EQ(from.post_send(qp, wr), PostResult::Ok);
  return rkey;
}

// Runs until `cq` of `e` has a completion; returns its status.
WcStatus complete(Pump& pump, Endpoint& e, uint32_t cq) {
  if (!pump.run_until([&] { return e.cq_depth(cq) > 0; })) return WcStatus::GeneralError;
  Completion wc[1];
  e.poll_cq(cq, wc);
  return wc[0].status;
}

uint64_t drops(const EndpointCounters& c) {
  return c.rx_drop_malformed + c.rx_drop_integrity + c.rx_drop_security_mode + c.rx_drop_no_key +
         c.rx_drop_stale_epoch + c.rx_drop_replay + c.rx_drop_unknown_peer + c.rx_drop_unknown_qp + c.rx_drop_qp_state +
         c.rx_drop_out_of_window;
}

wire::CommonHeader common_of(const Bytes& d) {
  wire::CommonHeader c;
  EXPECT_EQ(wire::decode_common(d, c), wire::DecodeStatus::Ok);
  return c;
}

// The first captured data datagram carrying a payload.
const Bytes& first_data(const std::vector<Bytes>& log) {
  for (const Bytes& d : log)
    if (common_of(d).type == wire::PacketType::Data && d.size() > 200) return d;
  ADD_FAILURE() << "no data datagram captured";
  return log.front();
}

TEST(Incarnations, RestartedPeerOnTheSameHomePortAndQpnsWorksAtOnce) {
  Endpoint a(config(0xA1A1A1A1));
  auto b1 = std::make_unique<Endpoint>(config(0xB1B1B1B1));
  Pump pump(&a, b1.get());
  const Link first = connect(a, *b1);
  Bytes source1 = pattern(kBytes, 1), sink1(kBytes, 0);
  post_write(*b1, first.qp_b, source1, a, sink1);
  ASSERT_EQ(complete(pump, *b1, first.cq_b), WcStatus::Success);
  ASSERT_EQ(sink1, source1);
  const std::vector<Bytes> old_life = pump.b_to_a;

  // B's process dies and comes back on the same home port: same QP numbers,
  // a new epoch, path sequences from 0 again.
  b1.reset();
  auto b2 = std::make_unique<Endpoint>(config(0xB2B2B2B2));
  pump.set_b(b2.get());
  pump.now += 50'000'000;
  const Link second = connect(a, *b2);
  ASSERT_EQ(second.qp_b, first.qp_b);
  Bytes source2 = pattern(kBytes, 2), sink2(kBytes, 0);
  post_write(*b2, second.qp_b, source2, a, sink2);
  ASSERT_EQ(complete(pump, *b2, second.cq_b), WcStatus::Success);
  EXPECT_EQ(sink2, source2);
  EXPECT_EQ(a.counters().peer_restarts, 1u);

  // A's first QP belongs to B's first life: B's second life cannot write
  // through it, although the QP numbers match.
  {
    wire::DataHeader h;
    h.opcode = wire::Opcode::Write;
    h.dst_qpn = first.qp_a;
    h.src_qpn = second.qp_b;
    h.msn = 1;
    h.msg_length = 16;
    h.remote_addr = addr(sink1.data());
    h.rkey = 0;  // dropped before any key is looked at
    Bytes d(wire::kDataHeaderBytes + 16 + wire::kMaxTrailerBytes, 0xEE);
    const size_t n = wire::encode_data(d, {0, wire::kHomePortBase}, h, nullptr, nullptr, nullptr, 16);
    d.resize(b2->seal_datagram(kA, d, n + 16));
    const uint64_t stale = a.counters().rx_drop_stale_epoch;
    const Bytes sink1_now = sink1;
    a.on_datagram(pump.now, kB, d, false);
    EXPECT_EQ(a.counters().rx_drop_stale_epoch, stale + 1);
    EXPECT_EQ(sink1, sink1_now);
  }

  // Every datagram of B's first life, replayed now, is only counted.
  const EndpointCounters before = a.counters();
  const Bytes sink1_before = sink1, sink2_before = sink2;
  for (const Bytes& d : old_life) a.on_datagram(pump.now, kB, d, false);
  EXPECT_EQ(a.counters().rx_drop_stale_epoch, before.rx_drop_stale_epoch + old_life.size());
  EXPECT_EQ(a.counters().rx_data_packets, before.rx_data_packets);
  EXPECT_EQ(a.counters().placed_bytes, before.placed_bytes);
  EXPECT_EQ(sink1, sink1_before);
  EXPECT_EQ(sink2, sink2_before);
  EXPECT_EQ(a.cq_depth(second.cq_a), 0u);
}

TEST(Incarnations, DatagramsForAnEarlierIncarnationOfUsAreDropped) {
  auto a1 = std::make_unique<Endpoint>(config(0xA1A1A1A1));
  Endpoint b(config(0xB1B1B1B1));
  Pump pump(a1.get(), &b);
  const Link l = connect(*a1, b);
  Bytes source = pattern(kBytes, 3), sink(kBytes, 0);
  post_write(b, l.qp_b, source, *a1, sink);
  ASSERT_EQ(complete(pump, b, l.cq_b), WcStatus::Success);
  std::vector<Bytes> named_a1;
  for (const Bytes& d : pump.b_to_a)
    if (common_of(d).dst_epoch == 0xA1A1A1A1) named_a1.push_back(d);
  ASSERT_FALSE(named_a1.empty());

  a1.reset();
  Endpoint a2(config(0xA2A2A2A2));
  const uint32_t cq = a2.create_cq(16);
  const uint32_t qp = a2.create_qp(kPd, cq, cq, {});
  ASSERT_EQ(a2.modify_qp(qp, {.next = QpState::Init}), PostResult::Ok);
  ASSERT_EQ(a2.modify_qp(qp, {.next = QpState::ReadyToReceive, .peer = kB, .remote_qpn = l.qp_b, .config = {}}),
            PostResult::Ok);
  Bytes sink2(kBytes, 0x5A);
  (void)a2.memory().register_region(kPd, addr(sink2.data()), sink2.size(), kAccess);
  for (const Bytes& d : named_a1) a2.on_datagram(pump.now, kB, d, false);
  EXPECT_EQ(a2.counters().rx_drop_stale_epoch, named_a1.size());
  EXPECT_EQ(a2.counters().placed_bytes, 0u);
}

TEST(Incarnations, ANewEpochIsNotBelievedWhileTheCurrentOneTalks) {
  Endpoint a(config(0xA1A1A1A1));
  Endpoint b(config(0xB1B1B1B1));
  Pump pump(&a, &b);
  const Link l = connect(a, b);
  Bytes source = pattern(kBytes, 4), sink(kBytes, 0);
  post_write(b, l.qp_b, source, a, sink);
  ASSERT_EQ(complete(pump, b, l.cq_b), WcStatus::Success);

  // Another endpoint claiming B's address with another epoch, right now.
  Endpoint impostor(config(0xB9B9B9B9));
  const uint32_t cq = impostor.create_cq(16);
  const uint32_t qp = impostor.create_qp(kPd, cq, cq, {});
  ASSERT_EQ(impostor.modify_qp(qp, {.next = QpState::Init}), PostResult::Ok);
  ASSERT_EQ(impostor.modify_qp(qp, {.next = QpState::ReadyToReceive, .peer = kA, .remote_qpn = l.qp_a, .config = {}}),
            PostResult::Ok);
  wire::Probe probe{1, 2};
  Bytes d(impostor.max_datagram_bytes());
  const size_t n = wire::encode_probe(d, {0, wire::kHomePortBase}, wire::PacketType::Probe, probe);
  d.resize(impostor.seal_datagram(kA, d, n));
  const EndpointCounters before = a.counters();
  a.on_datagram(pump.now, kB, d, false);
  EXPECT_EQ(a.counters().rx_drop_stale_epoch, before.rx_drop_stale_epoch + 1);
  EXPECT_EQ(a.counters().peer_restarts, 0u);
  // The real B goes on undisturbed.
  Bytes source2 = pattern(kBytes, 5), sink2(kBytes, 0);
  post_write(b, l.qp_b, source2, a, sink2);
  ASSERT_EQ(complete(pump, b, l.cq_b), WcStatus::Success);
  EXPECT_EQ(sink2, source2);
}

TEST(InitialSequenceNumbers, MessagesAreNumberedFromThePsns) {
  Endpoint a(config(0xA1A1A1A1));
  Endpoint b(config(0xB1B1B1B1));
  Pump pump(&a, &b);
  QpConfig ca, cb;
  ca.sq_psn = 0x00ABCDEF;  // A's requests start here...
  cb.rq_psn = 0x00ABCDEF;  // ...where B expects them
  const Link l = connect(a, b, ca, cb);
  Bytes source = pattern(kBytes, 6), sink(kBytes, 0);
  post_write(a, l.qp_a, source, b, sink);
  ASSERT_EQ(complete(pump, a, l.cq_a), WcStatus::Success);
  EXPECT_EQ(sink, source);
  const Bytes& d = first_data(pump.a_to_b);
  wire::Packet p;
  ASSERT_EQ(wire::decode({d.data(), d.size() - wire::kIntegrityTrailerBytes}, p), wire::DecodeStatus::Ok);
  EXPECT_EQ(p.data.msn, 0x00ABCDEFu);
}

TEST(InitialSequenceNumbers, AResponderExpectingOtherPsnsPlacesNothing) {
  Endpoint a(config(0xA1A1A1A1));
  Endpoint b(config(0xB1B1B1B1));
  Pump pump(&a, &b);
  QpConfig ca, cb;
  ca.sq_psn = 0x00300000;
  cb.rq_psn = 0x00200000;  // the requester's messages are far outside its window
  const Link l = connect(a, b, ca, cb);
  Bytes source = pattern(kBytes, 7), sink(kBytes, 0);
  post_write(a, l.qp_a, source, b, sink);
  pump.run_until([] { return false; }, 2'000);
  EXPECT_GT(b.counters().rx_drop_out_of_window, 0u);
  EXPECT_EQ(b.counters().placed_bytes, 0u);
  EXPECT_EQ(sink, Bytes(kBytes, 0));
}

TEST(InitialSequenceNumbers, AReconnectedQpIgnoresItsPreviousConnectionsMessages) {
  Endpoint a(config(0xA1A1A1A1));
  Endpoint b(config(0xB1B1B1B1));
  Pump pump(&a, &b);
  QpConfig c1;
  c1.sq_psn = c1.rq_psn = 0x00100000;
  const Link l = connect(a, b, c1, c1);
  Bytes source = pattern(kBytes, 8), sink(kBytes, 0);
  post_write(a, l.qp_a, source, b, sink);
  ASSERT_EQ(complete(pump, a, l.cq_a), WcStatus::Success);
  std::vector<Bytes> old_data;
  for (const Bytes& d : pump.a_to_b)
    if (common_of(d).type == wire::PacketType::Data) old_data.push_back(d);

  // Both QPs reset and connected again with fresh PSNs (as perftest does).
  QpConfig c2;
  c2.sq_psn = c2.rq_psn = 0x00900000;
  for (auto [e, qp, peer, remote] : {std::tuple{&a, l.qp_a, kB, l.qp_b}, std::tuple{&b, l.qp_b, kA, l.qp_a}}) {
    ASSERT_EQ(e->modify_qp(qp, {.next = QpState::Reset}), PostResult::Ok);
    ASSERT_EQ(e->connect_qp(qp, peer, remote, c2), PostResult::Ok);
  }
  // The old connection's data packets, as if still in flight (framed anew,
  // so that only the QP's message numbers can tell them apart).
  std::fill(sink.begin(), sink.end(), 0x77);
  const uint64_t placed = b.counters().placed_bytes;
  for (const Bytes& d : old_data) {
    Bytes body(d.begin(), d.end() - wire::kIntegrityTrailerBytes);
    body.resize(d.size());
    ASSERT_GT(a.seal_datagram(kB, body, d.size() - wire::kIntegrityTrailerBytes), 0u);
    b.on_datagram(pump.now, kA, body, false);
  }
  EXPECT_EQ(b.counters().placed_bytes, placed);
  EXPECT_EQ(sink, Bytes(kBytes, 0x77));
  EXPECT_EQ(b.cq_depth(l.cq_b), 0u);
}

class Authenticated : public ::testing::TestWithParam<wire::Security> {
 protected:
  void SetUp() override {
    a_ = std::make_unique<Endpoint>(config(0xA1A1A1A1, GetParam()));
    b_ = std::make_unique<Endpoint>(config(0xB1B1B1B1, GetParam()));
    a_->set_peer_key(kB, key(7), 0);
    b_->set_peer_key(kA, key(7), 1);
    pump_ = std::make_unique<Pump>(a_.get(), b_.get());
    link_ = connect(*a_, *b_);
    source_ = pattern(kBytes, 9);
    sink_.assign(kBytes, 0);
    rkey_ = post_write(*a_, link_.qp_a, source_, *b_, sink_);
    ASSERT_EQ(complete(*pump_, *a_, link_.cq_a), WcStatus::Success);
    ASSERT_EQ(sink_, source_);
  }

  std::unique_ptr<Endpoint> a_, b_;
  std::unique_ptr<Pump> pump_;
  Link link_;
  Bytes source_, sink_;
  uint32_t rkey_ = 0;
};

TEST_P(Authenticated, ReplaysAndEveryBitFlipAreDropped) {
  const Bytes genuine = first_data(pump_->a_to_b);
  EndpointCounters before = b_->counters();
  b_->on_datagram(pump_->now, kA, genuine, false);
  EXPECT_EQ(b_->counters().rx_drop_replay, before.rx_drop_replay + 1);
  std::fill(sink_.begin(), sink_.end(), 0x33);
  for (size_t bit = 0; bit < genuine.size() * 8; bit += 3) {
    Bytes flipped = genuine;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    before = b_->counters();
    b_->on_datagram(pump_->now, kA, flipped, false);
    ASSERT_EQ(drops(b_->counters()), drops(before) + 1) << "bit " << bit;
    ASSERT_EQ(b_->counters().rx_data_packets, before.rx_data_packets) << "bit " << bit;
  }
  EXPECT_EQ(sink_, Bytes(kBytes, 0x33));
}

TEST_P(Authenticated, ForgeriesWithACorrectCrcAreDropped) {
  // What a forger without the key can build: a well-formed WRITE to B's
  // region with the right epochs and a fresh packet number, and a CRC.
  wire::DataHeader h;
  h.opcode = wire::Opcode::Write;
  h.dst_qpn = link_.qp_b;
  h.src_qpn = link_.qp_a;
  h.msn = 2;  // the next message
  h.msg_length = 16;
  h.remote_addr = addr(sink_.data());
  h.rkey = rkey_;
  std::fill(sink_.begin(), sink_.end(), 0x44);
  const EndpointCounters before = b_->counters();
  for (const wire::Security mode : {GetParam(), wire::Security::Integrity}) {
    Bytes d(wire::kDataHeaderBytes + 16 + wire::kMaxTrailerBytes, 0x99);
    const size_t n = wire::encode_data(d, {0, wire::kHomePortBase}, h, nullptr, nullptr, nullptr, 16);
    wire::stamp_common(d, mode, a_->epoch(), b_->epoch(), 1u << 20);
    seal_integrity(d, n + 16);
    d.resize(n + 16 + wire::trailer_bytes(mode));
    b_->on_datagram(pump_->now, kA, d, false);
  }
  EXPECT_EQ(b_->counters().rx_drop_integrity, before.rx_drop_integrity + 1);
  EXPECT_EQ(b_->counters().rx_drop_security_mode, before.rx_drop_security_mode + 1);
  EXPECT_EQ(b_->counters().rx_data_packets, before.rx_data_packets);
  EXPECT_EQ(sink_, Bytes(kBytes, 0x44));
}

TEST_P(Authenticated, APeerWithAnotherKeyGetsNothingThrough) {
  Endpoint c(config(0xC1C1C1C1, GetParam()));
  c.set_peer_key(kA, key(8), 1);  // not the pair key A has for this address
  Pump pump(a_.get(), &c);
  pump.now = pump_->now;
  const Link l = connect(*a_, c);
  Bytes source = pattern(kBytes, 10), sink(kBytes, 0);
  post_write(c, l.qp_b, source, *a_, sink);
  pump.run_until([] { return false; }, 2'000);
  EXPECT_GT(a_->counters().rx_drop_integrity, 0u);
  EXPECT_EQ(sink, Bytes(kBytes, 0));
  EXPECT_EQ(c.cq_depth(l.cq_b), 0u);
}

TEST_P(Authenticated, EncryptHidesThePayload) {
  const Bytes needle(source_.begin() + 4096, source_.begin() + 4096 + 32);
  bool seen = false;
  for (const Bytes& d : pump_->a_to_b) seen |= std::search(d.begin(), d.end(), needle.begin(), needle.end()) != d.end();
  EXPECT_EQ(seen, GetParam() == wire::Security::Authenticate);
}

INSTANTIATE_TEST_SUITE_P(Modes, Authenticated, ::testing::Values(wire::Security::Authenticate, wire::Security::Encrypt),
                         [](const auto& param_info) { return std::string(wire::to_string(param_info.param)); });

TEST(IntegrityMode, EveryBitFlipOfAGenuineDatagramIsDropped) {
  Endpoint a(config(0xA1A1A1A1));
  Endpoint b(config(0xB1B1B1B1));
  Pump pump(&a, &b);
  const Link l = connect(a, b);
  Bytes source = pattern(kBytes, 11), sink(kBytes, 0);
  post_write(a, l.qp_a, source, b, sink);
  ASSERT_EQ(complete(pump, a, l.cq_a), WcStatus::Success);
  const Bytes genuine = first_data(pump.a_to_b);
  std::fill(sink.begin(), sink.end(), 0x66);
  for (size_t bit = 0; bit < genuine.size() * 8; ++bit) {
    Bytes flipped = genuine;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    const EndpointCounters before = b.counters();
    b.on_datagram(pump.now, kA, flipped, false);
    ASSERT_EQ(drops(b.counters()), drops(before) + 1) << "bit " << bit;
    ASSERT_EQ(b.counters().rx_data_packets, before.rx_data_packets) << "bit " << bit;
  }
  EXPECT_EQ(sink, Bytes(kBytes, 0x66));
}

}  // namespace
}  // namespace metaroce::transport
