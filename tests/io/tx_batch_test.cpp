// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// TxBatch::build: how a batch of engine datagrams becomes send messages
// (grouping by path socket, GSO runs, limits), and the peer table it routes by.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "peer_table.h"
#include "tx_batch.h"

namespace metaroce::io {
namespace {

sockaddr_storage v4(const char* ip, uint16_t port) {
  sockaddr_storage s{};
  auto& a = reinterpret_cast<sockaddr_in&>(s);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return s;
}

struct Message {
  uint16_t socket;
  uint16_t segments;
  uint16_t gso_size;  // 0 without a UDP_SEGMENT control message
  uint16_t port;
  std::vector<uint8_t> first_bytes;  // first byte of each datagram
  std::vector<size_t> lengths;       // of each datagram
  std::vector<iovec> iovecs;
  std::vector<uint8_t> bytes;  // what the kernel reads: the iovecs in order
  bool zerocopy = false;
};

// The pages the iovecs touch, each counted once per iovec (the kernel's
// fragments of a zero-copy send).
uint32_t pages_read(const std::vector<iovec>& iovecs) {
  uint32_t pages = 0;
  for (const iovec& v : iovecs) {
    const auto first = reinterpret_cast<uintptr_t>(v.iov_base);
    if (v.iov_len > 0) pages += static_cast<uint32_t>((first + v.iov_len - 1) / 4096 - first / 4096 + 1);
  }
  return pages;
}

class TxBatchTest : public testing::Test {
 protected:
  TxBatchTest() : peers_(AF_INET), batch_(128, 4200) {
    peer_a_ = peers_.get_or_add(v4("127.0.0.1", 5000));
    peer_b_ = peers_.get_or_add(v4("127.0.0.2", 6000));
    peers_.refresh(view_);
  }

  // A datagram whose first byte is `tag`.
  void add(transport::PeerId peer, uint16_t path, uint32_t length, uint8_t tag) {
    ASSERT_FALSE(batch_.full());
    std::span<uint8_t> slot = batch_.next_slot();
    ASSERT_GE(slot.size(), length);
    std::memset(slot.data(), tag, length);
    batch_.commit({peer, path, 0, length});
  }

  // A datagram of `head` bytes of `tag`, then `payload` where it is, then 4
  // trailer bytes of `tag` + 1.
  void add_gathered(transport::PeerId peer, uint16_t path, uint32_t head, std::span<const uint8_t> payload,
                    uint8_t tag) {
    ASSERT_FALSE(batch_.full());
    std::span<uint8_t> slot = batch_.next_slot();
    std::memset(slot.data(), tag, head);
    std::memset(slot.data() + head, tag + 1, 4);
    batch_.commit({peer, path, 0, static_cast<uint32_t>(head + payload.size() + 4), head, payload});
  }

  // `sockets` default sockets; `total` sockets in all (0: only the defaults).
  std::vector<Message> build(uint16_t sockets, bool gso, uint64_t* unroutable = nullptr, uint16_t total = 0,
                             bool zerocopy = false) {
    uint64_t dropped = 0;
    batch_.build(view_, sockets, total ? total : sockets, gso, zerocopy, dropped);
    if (unroutable) *unroutable = dropped;
    std::vector<Message> out;
    for (size_t i = 0; i < batch_.message_count(); ++i) {
      const msghdr& h = batch_.messages()[i].msg_hdr;
      Message m{};
      m.socket = batch_.info(i).socket;
      m.segments = batch_.info(i).segments;
      m.zerocopy = batch_.info(i).zerocopy;
      if (h.msg_controllen > 0) {
        const cmsghdr* c = CMSG_FIRSTHDR(&h);
        EXPECT_EQ(c->cmsg_level, SOL_UDP);
        EXPECT_EQ(c->cmsg_type, UDP_SEGMENT);
        std::memcpy(&m.gso_size, CMSG_DATA(c), sizeof m.gso_size);
        EXPECT_EQ(m.gso_size, batch_.info(i).segment_bytes);
      }
      m.port = ntohs(reinterpret_cast<const sockaddr_in*>(h.msg_name)->sin_port);
      for (size_t k = 0; k < h.msg_iovlen; ++k) {
        m.iovecs.push_back(h.msg_iov[k]);
        const auto* base = static_cast<const uint8_t*>(h.msg_iov[k].iov_base);
        m.bytes.insert(m.bytes.end(), base, base + h.msg_iov[k].iov_len);
      }
      // The kernel cuts the bytes into segments of segment_bytes.
      const size_t step = batch_.info(i).segment_bytes;
      for (size_t at = 0; at < m.bytes.size(); at += step) {
        m.first_bytes.push_back(m.bytes[at]);
        m.lengths.push_back(std::min(step, m.bytes.size() - at));
      }
      EXPECT_EQ(m.lengths.size(), m.segments);
      out.push_back(m);
    }
    return out;
  }

  PeerTable peers_;
  PeerTable::View view_;
  TxBatch batch_;
  transport::PeerId peer_a_ = 0;
  transport::PeerId peer_b_ = 0;
};

TEST_F(TxBatchTest, EqualSizedDatagramsOfOnePathBecomeOneGsoMessage) {
  for (uint8_t i = 0; i < 5; ++i) add(peer_a_, 0, 4152, i);
  const auto m = build(4, true);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].segments, 5);
  EXPECT_EQ(m[0].gso_size, 4152);
  EXPECT_EQ(m[0].port, 5000);
  EXPECT_EQ(m[0].first_bytes, (std::vector<uint8_t>{0, 1, 2, 3, 4}));
}

TEST_F(TxBatchTest, PathsAreGroupedStablyAndKeepTheirOrder) {
  // Interleaved over two paths, as the engine sprays them.
  for (uint8_t i = 0; i < 8; ++i) add(peer_a_, i % 2, 4152, i);
  const auto m = build(4, true);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].socket, 0);
  EXPECT_EQ(m[0].first_bytes, (std::vector<uint8_t>{0, 2, 4, 6}));
  EXPECT_EQ(m[1].socket, 1);
  EXPECT_EQ(m[1].first_bytes, (std::vector<uint8_t>{1, 3, 5, 7}));
}

TEST_F(TxBatchTest, EachBatchStartsWithTheSocketAfterTheOneTheLastBatchStartedWith) {
  // The same three paths in every batch; each path's datagrams keep their order.
  std::vector<uint16_t> first_sockets;
  for (int round = 0; round < 4; ++round) {
    batch_.clear();
    for (uint8_t i = 0; i < 6; ++i) add(peer_a_, i % 3, 4152, i);
    const auto m = build(3, true);
    ASSERT_EQ(m.size(), 3u);
    first_sockets.push_back(m[0].socket);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_EQ(m[k].socket, (m[0].socket + k) % 3);
      EXPECT_EQ(m[k].first_bytes,
                (std::vector<uint8_t>{static_cast<uint8_t>(m[k].socket), static_cast<uint8_t>(m[k].socket + 3)}));
    }
  }
  EXPECT_EQ(first_sockets, (std::vector<uint16_t>{0, 1, 2, 0}));
}

TEST_F(TxBatchTest, SocketsABatchDoesNotUseTakeNoTurnGoingFirst) {
  // A peer whose 4 paths use discovered sockets 4..7 of 8 (the defaults 0..3
  // idle): over 8 batches each of its sockets goes first twice, as a path
  // handed to the kernel later in every batch would show a longer RTT.
  ASSERT_TRUE(peers_.set_sockets(peer_b_, {4, 5, 6, 7}));
  peers_.refresh(view_);
  std::vector<int> first_counts(8, 0);
  for (int round = 0; round < 8; ++round) {
    batch_.clear();
    for (uint16_t path = 0; path < 4; ++path) add(peer_b_, path, 4152, static_cast<uint8_t>(path));
    const auto m = build(4, true, nullptr, 8);
    ASSERT_EQ(m.size(), 4u);
    ++first_counts[m[0].socket];
  }
  EXPECT_EQ(first_counts, (std::vector<int>{0, 0, 0, 0, 2, 2, 2, 2}));
}

TEST_F(TxBatchTest, APeersOwnSocketMapRoutesItsPathsAndLeavesOtherPeersOnTheDefaults) {
  // Peer b's paths 0..3 leave through sockets 7, 5, 4, 6 (discovered for it).
  ASSERT_TRUE(peers_.set_sockets(peer_b_, {7, 5, 4, 6}));
  peers_.refresh(view_);
  for (uint16_t path = 0; path < 4; ++path) add(peer_b_, path, 4152, static_cast<uint8_t>(10 + path));
  for (uint16_t path = 0; path < 4; ++path) add(peer_a_, path, 4152, static_cast<uint8_t>(20 + path));
  add(peer_b_, 5, 4152, 15);  // path 5 wraps onto the map's entry 1
  const auto m = build(4, true, nullptr, 8);
  ASSERT_EQ(m.size(), 8u);
  for (uint16_t s = 0; s < 4; ++s) {
    EXPECT_EQ(m[s].socket, s);
    EXPECT_EQ(m[s].port, 5000);
    EXPECT_EQ(m[s].first_bytes, (std::vector<uint8_t>{static_cast<uint8_t>(20 + s)}));
  }
  EXPECT_EQ(m[4].socket, 4);
  EXPECT_EQ(m[4].first_bytes, (std::vector<uint8_t>{12}));
  EXPECT_EQ(m[5].socket, 5);
  EXPECT_EQ(m[5].first_bytes, (std::vector<uint8_t>{11, 15}));
  EXPECT_EQ(m[6].first_bytes, (std::vector<uint8_t>{13}));
  EXPECT_EQ(m[7].first_bytes, (std::vector<uint8_t>{10}));
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(m[i].port, 6000);
}

TEST_F(TxBatchTest, AMapEntryBeyondTheKnownSocketsFallsBackToTheDefaultSocket) {
  ASSERT_TRUE(peers_.set_sockets(peer_b_, {9}));
  peers_.refresh(view_);
  add(peer_b_, 2, 4152, 1);
  const auto m = build(4, true, nullptr, 6);  // socket 9 is not open (yet)
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].socket, 2);
}

TEST_F(TxBatchTest, AShorterDatagramEndsARunALargerOneStartsANewMessage) {
  add(peer_a_, 0, 4152, 1);
  add(peer_a_, 0, 4152, 2);
  add(peer_a_, 0, 1000, 3);  // short tail: joins, then closes the run
  add(peer_a_, 0, 4152, 4);
  add(peer_a_, 0, 300, 5);   // an ACK-sized datagram
  add(peer_a_, 0, 4152, 6);  // larger than the run's segment: new message
  const auto m = build(4, true);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].first_bytes, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(m[0].gso_size, 4152);
  EXPECT_EQ(m[0].lengths.back(), 1000u);
  EXPECT_EQ(m[1].first_bytes, (std::vector<uint8_t>{4, 5}));
  EXPECT_EQ(m[2].first_bytes, (std::vector<uint8_t>{6}));
  EXPECT_EQ(m[2].gso_size, 0);  // a single datagram carries no UDP_SEGMENT
}

TEST_F(TxBatchTest, AnotherPeerBreaksTheRun) {
  add(peer_a_, 0, 4152, 1);
  add(peer_b_, 0, 4152, 2);
  add(peer_a_, 0, 4152, 3);
  const auto m = build(4, true);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].port, 5000);
  EXPECT_EQ(m[1].port, 6000);
  EXPECT_EQ(m[2].port, 5000);
}

TEST_F(TxBatchTest, RunsRespectTheByteAndSegmentLimits) {
  for (uint8_t i = 0; i < 40; ++i) add(peer_a_, 0, 4152, i);  // 40 * 4152 > 65000
  const auto big = build(4, true);
  ASSERT_EQ(big.size(), 3u);
  EXPECT_EQ(big[0].segments, 15);  // 15 * 4152 = 62280 <= kMaxGsoBytes
  EXPECT_EQ(big[1].segments, 15);
  EXPECT_EQ(big[2].segments, 10);
  batch_.clear();
  for (uint8_t i = 0; i < 70; ++i) add(peer_a_, 0, 100, i);
  const auto many = build(4, true);
  ASSERT_EQ(many.size(), 2u);
  EXPECT_EQ(many[0].segments, 64);  // kMaxGsoSegments
  EXPECT_EQ(many[1].segments, 6);
}

TEST_F(TxBatchTest, WithoutGsoEveryDatagramIsItsOwnMessage) {
  for (uint8_t i = 0; i < 6; ++i) add(peer_a_, i % 3, 4152, i);
  const auto m = build(4, false);
  ASSERT_EQ(m.size(), 6u);
  for (const Message& message : m) {
    EXPECT_EQ(message.segments, 1);
    EXPECT_EQ(message.gso_size, 0);
  }
  // Still grouped by path, in order within each.
  EXPECT_EQ(m[0].first_bytes[0], 0);
  EXPECT_EQ(m[1].first_bytes[0], 3);
  EXPECT_EQ(m[2].first_bytes[0], 1);
}

TEST_F(TxBatchTest, PathIdsWrapOntoTheAvailableSockets) {
  add(peer_a_, 5, 4152, 1);  // a peer's path id beyond our socket count (an ACK)
  add(peer_a_, 1, 4152, 2);
  const auto m = build(4, true);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].socket, 1);
  EXPECT_EQ(m[0].segments, 2);
}

TEST_F(TxBatchTest, UnknownPeersAreCountedNotSent) {
  add(peer_a_, 0, 4152, 1);
  add(77, 0, 4152, 2);
  uint64_t unroutable = 0;
  const auto m = build(4, true, &unroutable);
  EXPECT_EQ(unroutable, 1u);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].first_bytes, (std::vector<uint8_t>{1}));
}

TEST(PeerTableTest, LookupsAndDestinations) {
  PeerTable table(AF_INET);
  PeerTable::View view;
  EXPECT_EQ(table.get_or_add(v4("10.0.0.1", 4792)), 1u);
  EXPECT_EQ(table.get_or_add(v4("10.0.0.1", 4793)), 2u);
  EXPECT_EQ(table.get_or_add(v4("10.0.0.1", 4792)), 1u);
  table.refresh(view);
  PeerKey key;
  ASSERT_TRUE(make_peer_key(v4("10.0.0.1", 9999), 4793, key));  // source port ignored: the home port counts
  EXPECT_EQ(view.lookup(key), 2u);
  ASSERT_TRUE(make_peer_key(v4("10.0.0.2", 0), 4793, key));
  EXPECT_EQ(view.lookup(key), 0u);
  socklen_t length = 0;
  const sockaddr_storage* d = view.destination(2, 0, length);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(length, sizeof(sockaddr_in));
  EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(d)->sin_port), 4793);
  EXPECT_EQ(view.destination(3, 0, length), nullptr);
  // An IPv6 peer cannot be reached from IPv4 sockets.
  sockaddr_storage s6{};
  auto& a6 = reinterpret_cast<sockaddr_in6&>(s6);
  a6.sin6_family = AF_INET6;
  a6.sin6_port = htons(1);
  inet_pton(AF_INET6, "2001:db8::1", &a6.sin6_addr);
  const transport::PeerId six = table.get_or_add(s6);
  table.refresh(view);
  EXPECT_EQ(view.destination(six, 0, length), nullptr);
}

// The transmit order key follows the address, then the home port, whatever
// order the peers were first used in, so every host orders them alike.
TEST(PeerTableTest, TransmitOrderKeysFollowAddressThenPort) {
  PeerTable table(AF_INET);
  const transport::PeerId c = table.get_or_add(v4("10.0.1.3", 4792));
  const transport::PeerId a = table.get_or_add(v4("10.0.0.2", 4793));
  const transport::PeerId b = table.get_or_add(v4("10.0.0.3", 4792));
  const transport::PeerId a2 = table.get_or_add(v4("10.0.0.2", 4794));
  EXPECT_LT(table.transmit_order_key(a), table.transmit_order_key(a2));
  EXPECT_LT(table.transmit_order_key(a2), table.transmit_order_key(b));
  EXPECT_LT(table.transmit_order_key(b), table.transmit_order_key(c));
  PeerKey own;
  ASSERT_TRUE(make_peer_key(v4("10.0.0.2", 0), 4793, own));
  EXPECT_EQ(transmit_order_key(own), table.transmit_order_key(a));  // a host's own key is the one its peers give it
  EXPECT_EQ(table.transmit_order_key(0), 0u);
  EXPECT_EQ(table.transmit_order_key(9), 0u);
}

// Two planes, numbered in parallel (10.77.x.y on plane 0, 10.78.x.y on
// plane 1): a peer added by its plane-0 address is reached on plane 1 at
// 10.78.x.y, and datagrams from either address are that peer's.
TEST(PeerTableTest, PlanesMapOnePeerToOneAddressPerPlane) {
  PeerKey local0;
  PeerKey local1;
  ASSERT_TRUE(make_peer_key(v4("10.77.10.2", 0), 0, local0));
  ASSERT_TRUE(make_peer_key(v4("10.78.10.2", 0), 0, local1));
  PeerTable::Ip mask{};
  for (size_t b = 0; b < mask.size(); ++b) mask[b] = local0.ip[b] ^ local1.ip[b];
  PeerTable table(AF_INET, {mask});
  PeerTable::View view;
  const transport::PeerId peer = table.get_or_add(v4("10.77.11.2", 4792));
  ASSERT_NE(peer, 0u);
  // Named by its plane-1 address it is the same peer, not a new one.
  EXPECT_EQ(table.get_or_add(v4("10.78.11.2", 4792)), peer);
  EXPECT_NE(table.get_or_add(v4("10.78.11.2", 4793)), peer);
  table.refresh(view);
  PeerKey key;
  ASSERT_TRUE(make_peer_key(v4("10.78.11.2", 1234), 4792, key));
  EXPECT_EQ(view.lookup(key), peer);
  ASSERT_TRUE(make_peer_key(v4("10.77.11.2", 1234), 4792, key));
  EXPECT_EQ(view.lookup(key), peer);
  ASSERT_TRUE(make_peer_key(v4("10.79.11.2", 1234), 4792, key));
  EXPECT_EQ(view.lookup(key), 0u);
  auto ip_of = [](const sockaddr_storage* d) {
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(d)->sin_addr, text, sizeof text);
    return std::string(text);
  };
  socklen_t length = 0;
  for (uint16_t path = 0; path < 4; ++path) {
    const sockaddr_storage* d = view.destination(peer, path, length);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(ip_of(d), path % 2 == 0 ? "10.77.11.2" : "10.78.11.2") << "path " << path;
    EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in*>(d)->sin_port), 4792);
  }
  sockaddr_storage first{};
  ASSERT_TRUE(table.destination_of(peer, first));
  EXPECT_EQ(ip_of(&first), "10.77.11.2");
}

TEST_F(TxBatchTest, AGatheredPayloadIsSentFromWhereItIsBetweenItsHeaderAndTrailer) {
  std::vector<uint8_t> memory(3000);
  for (size_t i = 0; i < memory.size(); ++i) memory[i] = static_cast<uint8_t>(i);
  const std::span<const uint8_t> first(memory.data(), 1000), second(memory.data() + 1000, 1000);
  add_gathered(peer_a_, 0, 60, first, 10);
  add(peer_a_, 0, 1064, 20);  // a copied one of the same size joins the run
  add_gathered(peer_a_, 0, 60, second, 30);
  const auto m = build(4, true);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].segments, 3);
  EXPECT_EQ(m[0].gso_size, 1064);
  ASSERT_EQ(m[0].iovecs.size(), 7u);
  EXPECT_EQ(m[0].iovecs[1].iov_base, first.data());  // not copied
  EXPECT_EQ(m[0].iovecs[1].iov_len, 1000u);
  EXPECT_EQ(m[0].iovecs[5].iov_base, second.data());
  std::vector<uint8_t> expected;
  auto append = [&](uint8_t tag, std::span<const uint8_t> payload) {
    expected.insert(expected.end(), 60, tag);
    expected.insert(expected.end(), payload.begin(), payload.end());
    expected.insert(expected.end(), 4, static_cast<uint8_t>(tag + 1));
  };
  append(10, first);
  expected.insert(expected.end(), 1064, 20);
  append(30, second);
  EXPECT_EQ(m[0].bytes, expected);
}

TEST_F(TxBatchTest, ZeroCopyRunsOfLargePayloadsStayWithinTheKernelsFragmentsAndSmallOnesAreCopied) {
  // Payloads of 4096 bytes that start mid-page (two pages each), then
  // payloads of 1400: only the first are sent without a copy.
  std::vector<uint8_t> memory(40 * 4096);
  for (size_t i = 0; i < 12; ++i)
    add_gathered(peer_a_, 0, 60, std::span<const uint8_t>(memory.data() + 100 + i * 4096, 4096), 1);
  for (size_t i = 0; i < 12; ++i)
    add_gathered(peer_a_, 0, 60, std::span<const uint8_t>(memory.data() + 100 + i * 1400, 1400), 2);
  const auto m = build(4, true, nullptr, 0, true);
  size_t copyless = 0, copied = 0;
  for (const Message& message : m) {
    if (message.zerocopy) {
      copyless += message.segments;
      EXPECT_GE(message.segments, 2);
      EXPECT_LE(pages_read(message.iovecs), kMaxZeroCopyFrags);
      EXPECT_EQ(message.lengths.front(), 60u + 4096 + 4);
    } else {
      copied += message.segments;
      EXPECT_EQ(message.lengths.front(), 60u + 1400 + 4);
    }
  }
  EXPECT_EQ(copyless, 12u);
  EXPECT_EQ(copied, 12u);
  // One copied run: the fragment limit is a zero-copy send's alone.
  EXPECT_EQ(std::count_if(m.begin(), m.end(), [](const Message& x) { return !x.zerocopy; }), 1);
  // Without a zero-copy backend the large ones form one GSO run, which the
  // first short one closes.
  const auto plain = build(4, true);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_FALSE(plain[0].zerocopy);
  EXPECT_EQ(plain[0].segments, 13);
}

TEST_F(TxBatchTest, ADatagramSpanningMoreFragmentsThanAZeroCopySendHoldsIsCopied) {
  // 64,000 payload bytes span at least 16 pages; with the header's and the
  // trailer's, at least 18.
  std::vector<uint8_t> memory(64'000 + 4096);
  add_gathered(peer_a_, 0, 60, std::span<const uint8_t>(memory.data() + 100, 64'000), 1);
  const auto m = build(4, true, nullptr, 0, true);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_FALSE(m[0].zerocopy);
}

}  // namespace
}  // namespace metaroce::io
