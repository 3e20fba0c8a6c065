// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "fake_backend.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace metaroce::io::test {
namespace {

// How long await_sleep() waits for the progress thread: a safety net for a
// hung runtime (the test fails instead of hanging), never a measurement.
constexpr auto kSafetyTimeout = std::chrono::seconds(60);

uint64_t take(int fd) {
  uint64_t value = 0;
  return ::read(fd, &value, sizeof value) == sizeof value ? value : 0;
}

}  // namespace

class FakeIo::Backend final : public IoBackend {
 public:
  Backend(const BackendConfig& config, FakeIo& io)
      : IoBackend(false), config_(config), io_(io), batch_(config.tx_capacity, config.tx_slot_bytes) {}

  ~Backend() override {
    std::lock_guard<std::mutex> lock(io_.mutex_);
    io_.destroyed_ = true;
    io_.changed_.notify_all();
  }

  bool is_io_uring() const override { return false; }

  uint32_t wait(transport::Time deadline) override {
    {
      std::lock_guard<std::mutex> lock(io_.mutex_);
      submit_locked();
      if (!held_.empty() || !io_.inbox_.empty() || deadline <= config_.clock->now()) {
        ++io_.polls_;
        io_.changed_.notify_all();
        return 0;
      }
      ++io_.sleeps_;
      io_.asleep_ = true;
      io_.deadline_ = deadline;
    }
    io_.changed_.notify_all();
    pollfd fds[2] = {{config_.event_fd, POLLIN, 0}, {io_.wake_fd_, POLLIN, 0}};
    while (::poll(fds, 2, -1) <= 0) {}
    const uint64_t kicks =
        (fds[0].revents & POLLIN) ? take(config_.event_fd) : 0;  // eventfd: writes since the last read
    kicked_ = kicks != 0;
    if (fds[1].revents & POLLIN) take(io_.wake_fd_);
    std::lock_guard<std::mutex> lock(io_.mutex_);
    io_.asleep_ = false;
    io_.kicks_ += kicks;
    return 1;
  }

  std::span<const RxMessage> receive() override {
    if (held_.empty()) {
      std::lock_guard<std::mutex> lock(io_.mutex_);
      while (!io_.inbox_.empty()) {
        held_.push_back(std::move(io_.inbox_.front()));
        io_.inbox_.pop_front();
      }
      for (const Received& r : held_) {
        RxMessage m;
        m.data = r.bytes.data();
        m.length = static_cast<uint32_t>(r.bytes.size());
        m.from = &r.from;
        messages_.push_back(m);
      }
      counters_.receive_syscalls += held_.empty() ? 0 : 1;
    }
    return messages_;
  }

  void release_received() override {
    messages_.clear();
    held_.clear();
  }

  TxBatch& tx_batch() override {
    {
      // As io_uring's: the kernel is done with the batch before it is reused.
      std::lock_guard<std::mutex> lock(io_.mutex_);
      submit_locked(true);
    }
    batch_.clear();
    return batch_;
  }

  // As io_uring: send() queues, and the kernel gets the datagrams at the
  // next wait(), submit_sends() or drain_sends().
  void send(TxBatch& batch) override {
    std::lock_guard<std::mutex> lock(io_.mutex_);
    for (size_t i = 0; i < batch.message_count(); ++i) {
      // Where its bytes are: they are read when the kernel takes the send.
      const msghdr& h = batch.messages()[i].msg_hdr;
      std::vector<uint8_t> bytes;
      queued_.push_back({std::vector<iovec>(h.msg_iov, h.msg_iov + h.msg_iovlen), batch.info(i).segment_bytes});
    }
    if (config_.sends_unsent) config_.sends_unsent->store(!queued_.empty());
  }

  void submit_sends() override {
    std::lock_guard<std::mutex> lock(io_.mutex_);
    submit_locked();
  }

  void drain_sends(transport::Time) override {
    std::lock_guard<std::mutex> lock(io_.mutex_);
    submit_locked(true);
    io_.drained_ = true;
    io_.stopped_when_drained_ = config_.stop->load();
  }

  void set_path_fds(std::vector<int> fds) override { config_.path_fds = std::move(fds); }

 private:
  struct Queued {
    std::vector<iovec> iovecs;
    uint32_t segment_bytes;
  };
  // The kernel takes the queued sends: reads their bytes and cuts each
  // message into its segments. Not while the test holds submissions, unless
  // `force` (a drain, or the batch about to be reused).
  void submit_locked(bool force = false) {
    if (queued_.empty() || (io_.hold_submissions_ && !force)) return;
    ++counters_.send_syscalls;
    for (const Queued& q : queued_) {
      std::vector<uint8_t> bytes;
      for (const iovec& v : q.iovecs) {
        const auto* base = static_cast<const uint8_t*>(v.iov_base);
        bytes.insert(bytes.end(), base, base + v.iov_len);
      }
      for (size_t at = 0; at < bytes.size(); at += q.segment_bytes) {
        io_.sent_.emplace_back(bytes.begin() + at,
                               bytes.begin() + std::min<size_t>(at + q.segment_bytes, bytes.size()));
        ++counters_.datagrams_sent;
      }
    }
    queued_.clear();
    if (config_.sends_unsent) config_.sends_unsent->store(false);
  }

  BackendConfig config_;
  FakeIo& io_;
  TxBatch batch_;
  std::vector<Queued> queued_;  // sent but not yet submitted
  std::vector<Received> held_;  // what messages_ point into, until release_received()
  std::vector<RxMessage> messages_;
};

FakeIo::FakeIo() : wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

FakeIo::~FakeIo() { ::close(wake_fd_); }

BackendFactory FakeIo::factory() {
  return [this](const BackendConfig& config) -> std::unique_ptr<IoBackend> {
    return std::make_unique<Backend>(config, *this);
  };
}

void FakeIo::deliver(std::vector<uint8_t> datagram, const sockaddr_storage& from) {
  std::vector<std::vector<uint8_t>> one;
  one.push_back(std::move(datagram));
  deliver_all(std::move(one), from);
}

void FakeIo::deliver_all(std::vector<std::vector<uint8_t>> datagrams, const sockaddr_storage& from) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::vector<uint8_t>& d : datagrams) inbox_.push_back({std::move(d), from});
  }
  wake();
}

void FakeIo::wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

bool FakeIo::await_sleep(uint64_t n, uint64_t& deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool reached = changed_.wait_for(lock, kSafetyTimeout, [&] { return destroyed_ || (sleeps_ >= n && asleep_); });
  if (!reached || destroyed_ || sleeps_ != n) return false;
  deadline = deadline_;
  return true;
}

bool FakeIo::await_polls(uint64_t n) {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, kSafetyTimeout, [&] { return polls_ >= n; });
}

uint64_t FakeIo::sleeps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sleeps_;
}

uint64_t FakeIo::kicks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return kicks_;
}

std::vector<std::vector<uint8_t>> FakeIo::sent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sent_;
}

void FakeIo::hold_submissions(bool hold) {
  std::lock_guard<std::mutex> lock(mutex_);
  hold_submissions_ = hold;
}

bool FakeIo::drained() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return drained_;
}

bool FakeIo::stopped_when_drained() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopped_when_drained_;
}

bool FakeIo::destroyed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return destroyed_;
}

}  // namespace metaroce::io::test
