// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "batch_send.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace metaroce::io {
namespace {

// Sends messages [begin, end) of `batch`, all on socket `fd`.
void send_run(int fd, TxBatch& batch, size_t begin, size_t end, const SyncSendOptions& options,
              BackendCounters& counters, bool& gso) {
  mmsghdr* messages = batch.messages();
  uint32_t waits = 0;
  size_t next = begin;
  while (next < end) {
    const int sent = sendmmsg(fd, messages + next, static_cast<unsigned>(end - next), MSG_DONTWAIT);
    ++counters.send_syscalls;
    if (sent > 0) {
      for (size_t k = next; k < next + static_cast<size_t>(sent); ++k) {
        counters.datagrams_sent += batch.info(k).segments;
        if (batch.info(k).segments > 1) ++counters.gso_sends;
      }
      next += static_cast<size_t>(sent);
      continue;
    }
    const int err = errno;
    if (err == EINTR) continue;
    const bool stopping = options.stop && options.stop->load(std::memory_order_relaxed);
    if ((err == EAGAIN || err == ENOBUFS) && waits < options.buffer_full_waits && !stopping) {
      // The socket's send buffer is full: wait for room (bounded) rather
      // than dropping what the engine believes it sent.
      ++waits;
      pollfd pfd{fd, POLLOUT, 0};
      (void)poll(&pfd, 1, 10);
      continue;
    }
    // The message at `next` was refused (or we gave up waiting): the
    // engine recovers it as a loss.
    const uint16_t segments = batch.info(next).segments;
    counters.send_errors += segments;
    if (err == EMSGSIZE) counters.oversize_drops += segments;
    if (segments > 1 && (err == EIO || err == EINVAL)) gso = false;
    ++next;
  }
}

}  // namespace

void send_batch_now(std::span<const int> fds, TxBatch& batch, const SyncSendOptions& options, BackendCounters& counters,
                    bool& gso) {
  const size_t n = batch.message_count();
  size_t i = 0;
  while (i < n) {
    const uint16_t socket = batch.info(i).socket;
    size_t j = i + 1;
    while (j < n && batch.info(j).socket == socket) ++j;
    if (socket < fds.size()) {
      send_run(fds[socket], batch, i, j, options, counters, gso);
    } else {
      for (size_t k = i; k < j; ++k) counters.send_errors += batch.info(k).segments;
    }
    i = j;
  }
}

}  // namespace metaroce::io
