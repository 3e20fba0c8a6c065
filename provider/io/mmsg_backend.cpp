// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The fallback backend: recvmmsg on the home socket, one sendmmsg per path
// socket per batch, ppoll on the home socket and the kick eventfd to sleep.
// Sends are synchronous, so a single batch arena suffices.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "io_backend.h"

namespace metaroce::io {
namespace {

timespec to_timespec(transport::Time ns) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return ts;
}

class MmsgBackend final : public IoBackend {
 public:
  explicit MmsgBackend(const BackendConfig& config)
      : IoBackend(config.gso),
        config_(config),
        rx_(config.rx_slots, config.rx_buffer_bytes),
        batch_(config.tx_capacity, config.tx_slot_bytes) {
    messages_.reserve(rx_.count());
  }

  bool is_io_uring() const override { return false; }

  uint32_t wait(transport::Time deadline) override {
    if (!messages_.empty()) return 0;
    const transport::Time now = config_.clock->now();
    if (deadline <= now) return 0;
    pollfd fds[2] = {{config_.home_fd, POLLIN, 0}, {config_.event_fd, POLLIN, 0}};
    timespec ts{};
    const timespec* timeout = nullptr;
    if (deadline != transport::kNever) {
      ts = to_timespec(deadline - now);
      timeout = &ts;
    }
    const int ready = ppoll(fds, 2, timeout, nullptr);
    if (ready > 0 && (fds[1].revents & POLLIN)) {
      uint64_t value = 0;
      if (::read(config_.event_fd, &value, sizeof value) == sizeof value) kicked_ = true;
    }
    return 1;
  }

  std::span<const RxMessage> receive() override {
    if (!messages_.empty()) return messages_;
    mmsghdr* headers = rx_.arm_all(rx_.count());
    const int received = recvmmsg(config_.home_fd, headers, rx_.count(), MSG_DONTWAIT, nullptr);
    ++counters_.receive_syscalls;
    for (int i = 0; i < received; ++i) messages_.push_back(rx_.message(static_cast<uint32_t>(i), headers[i].msg_len));
    return messages_;
  }

  void release_received() override { messages_.clear(); }

  TxBatch& tx_batch() override {
    batch_.clear();
    return batch_;
  }

  void send(TxBatch& batch) override {
    const size_t n = batch.message_count();
    size_t i = 0;
    while (i < n) {
      const uint16_t socket = batch.info(i).socket;
      size_t j = i + 1;
      while (j < n && batch.info(j).socket == socket) ++j;
      send_run(batch, socket, i, j);
      i = j;
    }
  }

  void drain_sends(transport::Time) override {}  // sendmmsg has sent them already

  void set_path_fds(std::vector<int> fds) override { config_.path_fds = std::move(fds); }

 private:
  // Sends messages [begin, end) of `batch`, all on one path socket.
  void send_run(TxBatch& batch, uint16_t socket, size_t begin, size_t end) {
    const int fd = config_.path_fds[socket];
    mmsghdr* messages = batch.messages();
    uint32_t waits = 0;
    size_t next = begin;
    while (next < end) {
      const int sent = sendmmsg(fd, messages + next, static_cast<unsigned>(end - next), MSG_DONTWAIT);
      ++counters_.send_syscalls;
      if (sent > 0) {
        for (size_t k = next; k < next + static_cast<size_t>(sent); ++k) {
          counters_.datagrams_sent += batch.info(k).segments;
          if (batch.info(k).segments > 1) ++counters_.gso_sends;
        }
        next += static_cast<size_t>(sent);
        continue;
      }
      const int err = errno;
      if (err == EINTR) continue;
      if ((err == EAGAIN || err == ENOBUFS) && waits < 100 && !config_.stop->load(std::memory_order_relaxed)) {
        // The socket's send buffer is full: wait for room (bounded) rather
        // than dropping what the engine believes it sent.
        ++waits;
        pollfd pfd{fd, POLLOUT, 0};
        const timespec ts = to_timespec(10'000'000);
        (void)ppoll(&pfd, 1, &ts, nullptr);
        continue;
      }
      // The message at `next` was refused (or we gave up waiting): the
      // engine recovers it as a loss.
      const uint16_t segments = batch.info(next).segments;
      counters_.send_errors += segments;
      if (err == EMSGSIZE) counters_.oversize_drops += segments;
      if (segments > 1 && (err == EIO || err == EINVAL)) gso_ = false;
      ++next;
    }
  }

  BackendConfig config_;
  RxSlots rx_;
  TxBatch batch_;
  std::vector<RxMessage> messages_;
};

}  // namespace

std::unique_ptr<IoBackend> make_mmsg_backend(const BackendConfig& config) {
  return std::make_unique<MmsgBackend>(config);
}

}  // namespace metaroce::io
