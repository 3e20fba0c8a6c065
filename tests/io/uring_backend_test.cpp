// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The io_uring backend on its own, over loopback: its receive path when the
// provided buffers run out (the multishot receive then ends, -ENOBUFS, and
// must be armed again wherever its end is seen, or the home socket goes deaf
// while the progress thread sleeps with nothing to wake it), and its fallback
// to copying sends when the kernel refuses a zero-copy one.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "io_backend.h"
#include "metaroce/clock.h"
#include "peer_table.h"
#include "tx_batch.h"

namespace metaroce::io {
namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

sockaddr_in bound_loopback(int fd) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  return a;
}

TEST(UringBackend, ReceivesEveryDatagramWhenItsBuffersRunOut) {
  Fd home(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  Fd sender(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  Fd kick(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  ASSERT_GE(home.fd, 0);
  ASSERT_GE(sender.fd, 0);
  ASSERT_GE(kick.fd, 0);
  const sockaddr_in to = bound_loopback(home.fd);
  bound_loopback(sender.fd);
  int rcvbuf = 4 << 20;
  (void)::setsockopt(home.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);

  std::atomic<bool> stop{false};
  BackendConfig config;
  config.home_fd = home.fd;
  config.path_fds = {sender.fd};
  config.event_fd = kick.fd;
  config.rx_slots = 2;  // two provided buffers for hundreds of datagrams
  config.rx_buffer_bytes = 2048;
  config.tx_capacity = 4;
  config.tx_slot_bytes = 2048;
  config.stop = &stop;
  config.clock = &monotonic_clock();
  std::string reason;
  std::unique_ptr<IoBackend> io = make_uring_backend(config, reason);
  if (!io) GTEST_SKIP() << "no io_uring here: " << reason;

  constexpr uint32_t kDatagrams = 300;
  for (uint32_t i = 0; i < kDatagrams; ++i) {
    uint8_t payload[64] = {};
    std::memcpy(payload, &i, sizeof i);
    ASSERT_EQ(::sendto(sender.fd, payload, sizeof payload, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(sizeof payload));
  }
  // Every datagram is already queued on the home socket, so each wait has
  // something to deliver; one that ends at its deadline with nothing means
  // the receive was left unarmed.
  std::vector<bool> seen(kDatagrams, false);
  uint32_t distinct = 0;
  uint32_t empty_waits = 0;
  for (uint32_t round = 0; round < 10 * kDatagrams && distinct < kDatagrams; ++round) {
    io->wait(monotonic_clock().now() + 2'000'000'000);
    const std::span<const RxMessage> messages = io->receive();
    if (messages.empty()) ++empty_waits;
    for (const RxMessage& m : messages) {
      ASSERT_EQ(m.length, 64u);
      uint32_t index;
      std::memcpy(&index, m.data, sizeof index);
      ASSERT_LT(index, kDatagrams);
      if (!seen[index]) {
        seen[index] = true;
        ++distinct;
      }
    }
    io->release_received();
  }
  EXPECT_EQ(distinct, kDatagrams);
  EXPECT_EQ(empty_waits, 0u);
  // The case under test happened: the buffers did run out.
  EXPECT_GT(io->counters().receive_restarts, 0u);
  stop = true;
}

TEST(UringBackend, AZeroCopySendTheKernelRefusesTurnsZeroCopyOff) {
  // A socket without zero-copy support (here a Unix datagram socket) fails
  // SENDMSG_ZC with EOPNOTSUPP. The datagrams count as send errors (the engine resends them)
  // and every later batch is built to be copied.
  int unix_pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, unix_pair), 0);
  Fd path(unix_pair[0]), other_end(unix_pair[1]);
  Fd home(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  Fd kick(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  ASSERT_GE(home.fd, 0);
  ASSERT_GE(kick.fd, 0);
  bound_loopback(home.fd);

  std::atomic<bool> stop{false};
  BackendConfig config;
  config.home_fd = home.fd;
  config.path_fds = {path.fd};
  config.event_fd = kick.fd;
  config.tx_capacity = 8;
  config.tx_slot_bytes = 256;
  config.zerocopy = true;
  config.stop = &stop;
  config.clock = &monotonic_clock();
  std::string reason;
  std::unique_ptr<IoBackend> io = make_uring_backend(config, reason);
  if (!io) GTEST_SKIP() << "no io_uring here: " << reason;
  if (!io->zerocopy()) GTEST_SKIP() << "this kernel's io_uring has no SENDMSG_ZC";

  PeerTable peers(AF_INET);
  sockaddr_storage to{};
  reinterpret_cast<sockaddr_in&>(to).sin_family = AF_INET;
  reinterpret_cast<sockaddr_in&>(to).sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  reinterpret_cast<sockaddr_in&>(to).sin_port = htons(9);
  const transport::PeerId peer = peers.get_or_add(to);
  PeerTable::View view;
  peers.refresh(view);
  std::vector<uint8_t> memory(4 * 4096, 0x6b);  // application memory, read in place
  auto send_batch = [&](bool zerocopy) {
    TxBatch& batch = io->tx_batch();
    for (uint32_t i = 0; i < 2; ++i) {
      std::span<uint8_t> slot = batch.next_slot();
      std::memset(slot.data(), 0x11, 64);
      batch.commit({peer, 0, 0, 64 + 4096, 64, std::span<const uint8_t>(memory.data() + i * 4096, 4096)});
    }
    uint64_t unroutable = 0;
    batch.build(view, 1, 1, false, zerocopy, unroutable);
    EXPECT_EQ(unroutable, 0u);
    bool any_zerocopy = false;
    for (size_t i = 0; i < batch.message_count(); ++i) any_zerocopy |= batch.info(i).zerocopy;
    io->send(batch);
    io->drain_sends(monotonic_clock().now() + 2'000'000'000);
    return any_zerocopy;
  };

  ASSERT_TRUE(send_batch(io->zerocopy())) << "the batch held no zero-copy send to refuse";
  EXPECT_FALSE(io->zerocopy());
  EXPECT_EQ(io->counters().zerocopy_sends, 0u);
  EXPECT_EQ(io->counters().send_errors, 2u);
  EXPECT_FALSE(send_batch(io->zerocopy()));
  stop = true;
}

}  // namespace
}  // namespace metaroce::io
