// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// EndpointConfig::gather_payload: a payload of new data in one piece of
// application memory stays there (TxDatagram::payload) and the datagram the
// driver assembles from its three parts is, byte for byte, the one the
// engine writes whole without the option.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "endpoint.h"

namespace metaroce::transport {
namespace {

constexpr uint32_t kPd = 1;
constexpr PeerId kPeer = 7;

struct Sent {
  std::vector<uint8_t> bytes;  // the datagram as the driver sends it
  std::span<const uint8_t> gathered;
  uint8_t flags = 0;
};

// A WRITE from a two-SGE list: chunk 1 crosses from the first SGE into the
// second, the other chunks lie in one SGE each.
struct Sender {
  explicit Sender(bool gather) : source(4 * EndpointConfig{}.mtu - 300), endpoint(config(gather)) {
    for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint8_t>(i * 7 + 3);
    cq = endpoint.create_cq(64);
    lkey = *endpoint.memory().register_region(kPd, reinterpret_cast<uintptr_t>(source.data()), source.size(),
                                              kAccessLocalWrite);
    qp = endpoint.create_qp(kPd, cq, cq, {});
    EXPECT_EQ(endpoint.connect_qp(qp, kPeer, 0x1000, {}), PostResult::Ok);
  }
  static EndpointConfig config(bool gather) {
    EndpointConfig c;
    c.gather_payload = gather;
    return c;
  }
  void post_write() {
    const uint32_t first = endpoint.config().mtu + 100;
    SendWr wr;
    wr.opcode = WrOpcode::RdmaWrite;
    wr.num_sge = 2;
    wr.sg[0] = {reinterpret_cast<uintptr_t>(source.data()), first, lkey};
    wr.sg[1] = {reinterpret_cast<uintptr_t>(source.data()) + first, static_cast<uint32_t>(source.size() - first), lkey};
    wr.remote_addr = 0x10000;
    wr.rkey = 0x101;
    ASSERT_EQ(endpoint.post_send(qp, wr), PostResult::Ok);
  }
  std::optional<Sent> next(Time now) {
    std::vector<uint8_t> buf(endpoint.max_datagram_bytes());
    const std::optional<TxDatagram> tx = endpoint.poll_transmit(now, buf);
    if (!tx) return std::nullopt;
    Sent s;
    s.gathered = tx->payload;
    if (tx->payload.empty()) {
      s.bytes.assign(buf.begin(), buf.begin() + tx->length);
    } else {
      s.bytes.assign(buf.begin(), buf.begin() + tx->head);
      s.bytes.insert(s.bytes.end(), tx->payload.begin(), tx->payload.end());
      s.bytes.insert(s.bytes.end(), buf.begin() + tx->head,
                     buf.begin() + (tx->length - static_cast<uint32_t>(tx->payload.size())));
    }
    EXPECT_EQ(s.bytes.size(), tx->length);
    wire::Packet packet;
    if (wire::decode(std::span<const uint8_t>(s.bytes).first(s.bytes.size() - wire::kIntegrityTrailerBytes), packet) ==
            wire::DecodeStatus::Ok &&
        packet.common.type == wire::PacketType::Data)
      s.flags = packet.data.flags;
    return s;
  }
  bool in_source(std::span<const uint8_t> bytes) const {
    return bytes.data() >= source.data() && bytes.data() + bytes.size() <= source.data() + source.size();
  }
  std::vector<uint8_t> source;
  Endpoint endpoint;
  uint32_t cq = 0, lkey = 0, qp = 0;
};

TEST(GatheredPayload, DatagramsAreTheBytesACopyingEndpointWritesAndPayloadsInOneSgeStayInPlace) {
  Sender copying(false), gathering(true);
  copying.post_write();
  gathering.post_write();
  size_t datagrams = 0, gathered = 0;
  while (true) {
    const std::optional<Sent> a = copying.next(1'000), b = gathering.next(1'000);
    ASSERT_EQ(a.has_value(), b.has_value());
    if (!a) break;
    ++datagrams;
    EXPECT_TRUE(a->gathered.empty());
    EXPECT_EQ(a->bytes, b->bytes) << "datagram " << datagrams;
    if (!b->gathered.empty()) {
      ++gathered;
      EXPECT_TRUE(gathering.in_source(b->gathered));
    }
  }
  // Four chunks: the one across the two SGEs is copied, the others are not.
  EXPECT_EQ(datagrams, 4u);
  EXPECT_EQ(gathered, 3u);
}

TEST(GatheredPayload, AResendIsCopied) {
  Sender s(true);
  s.post_write();
  size_t sent = 0;
  while (s.next(1'000)) ++sent;
  ASSERT_EQ(sent, 4u);
  // Nothing is acknowledged: the retransmission timeout resends.
  const Time later = 1'000 + 20 * s.endpoint.min_rto();
  s.endpoint.on_timer(later);
  const std::optional<Sent> resend = s.next(later);
  ASSERT_TRUE(resend.has_value());
  EXPECT_NE(resend->flags & wire::kFlagRetransmit, 0);
  EXPECT_TRUE(resend->gathered.empty());
}

}  // namespace
}  // namespace metaroce::transport
