// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "probe_worker.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <utility>

namespace metaroce::daemon {

Prober network_prober() {
  return [](const ProbeRequest& r, Discovery& out, std::string& error) {
    return discover(r.dest, r.dport, r.source, r.source_ports, r.config, out, error);
  };
}

ProbeWorker::ProbeWorker(Prober prober)
    : prober_(std::move(prober)), event_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), thread_([this] { run(); }) {}

ProbeWorker::~ProbeWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    queue_.clear();
  }
  queued_.notify_all();
  thread_.join();
  if (event_fd_ >= 0) ::close(event_fd_);
}

uint64_t ProbeWorker::submit(ProbeRequest request) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = next_ticket_++;
    queue_.emplace_back(ticket, std::move(request));
  }
  queued_.notify_one();
  return ticket;
}

std::vector<ProbeResult> ProbeWorker::take() {
  uint64_t value = 0;
  (void)!::read(event_fd_, &value, sizeof value);
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(done_, {});
}

void ProbeWorker::run() {
  pthread_setname_np(pthread_self(), "metaroced-probe");
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    queued_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    auto [ticket, request] = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    ProbeResult result;
    result.ticket = ticket;
    result.ok = prober_(request, result.discovery, result.error);
    lock.lock();
    done_.push_back(std::move(result));
    const uint64_t one = 1;
    (void)!::write(event_fd_, &one, sizeof one);
  }
}

}  // namespace metaroce::daemon
