// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The fallback backend: recvmmsg on the home socket, one sendmmsg per path
// socket per batch, ppoll on the home socket, the kick eventfd and the
// timerfd to sleep.
// Sends are synchronous (batch_send.h), so a single batch arena suffices.
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "batch_send.h"
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
    pollfd fds[3] = {{config_.home_fd, POLLIN, 0}, {config_.event_fd, POLLIN, 0}, {config_.timer_fd, POLLIN, 0}};
    timespec ts{};
    const timespec* timeout = nullptr;
    if (deadline != transport::kNever) {
      ts = to_timespec(deadline - now);
      timeout = &ts;
    }
    const int ready = ppoll(fds, config_.timer_fd >= 0 ? 3 : 2, timeout, nullptr);
    for (size_t i = 1; ready > 0 && i < 3; ++i) {
      uint64_t value = 0;
      if ((fds[i].revents & POLLIN) && ::read(fds[i].fd, &value, sizeof value) == sizeof value) kicked_ = true;
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
    SyncSendOptions options;
    options.stop = config_.stop;
    send_batch_now(config_.path_fds, batch, options, counters_, gso_);
    if (config_.sends_unsent) config_.sends_unsent->store(false, std::memory_order_release);
  }

  void submit_sends() override {}                // sendmmsg has sent them already
  void drain_sends(transport::Time) override {}  // likewise

  void set_path_fds(std::vector<int> fds) override { config_.path_fds = std::move(fds); }

 private:
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
