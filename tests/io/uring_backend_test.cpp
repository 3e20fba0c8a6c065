// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The io_uring backend on its own, over loopback: its receive path when the
// provided buffers run out. The multishot receive then ends (-ENOBUFS) and
// must be armed again wherever its end is seen, or the home socket goes deaf
// while the progress thread sleeps with nothing to wake it.
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

}  // namespace
}  // namespace metaroce::io
