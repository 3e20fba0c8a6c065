// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// What the progress loop needs from the kernel, in two implementations:
// io_uring (uring_backend.cpp) and sendmmsg/recvmmsg + ppoll
// (mmsg_backend.cpp). A backend belongs to the progress thread; nothing in it
// is thread-safe.
//
// Per iteration the loop calls: wait(deadline) -> receive() -> tx_batch() ->
// (engine) -> release_received() -> send(batch); when completions wait for
// the ACKs in the batch, send(batch) -> submit_sends() inside the engine
// step instead.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "metaroce/clock.h"
#include "rx_slots.h"
#include "tx_batch.h"
#include "types.h"

namespace metaroce::io {

// Path sockets a runtime may open: its defaults plus those chosen for
// particular peers (a daemon's block is at most 1024 ports).
inline constexpr size_t kMaxPathSockets = 1024;

struct BackendConfig {
  int home_fd = -1;           // receives everything
  std::vector<int> path_fds;  // send sockets; TxBatch socket indexes point here
  int event_fd = -1;          // kick()
  int timer_fd = -1;          // a timerfd another thread may arm; its expiry ends a sleep (-1: none)
  uint32_t rx_slots = 64;
  uint32_t rx_buffer_bytes = kGroBufferBytes;
  uint32_t tx_capacity = 256;  // datagrams per batch
  uint32_t tx_slot_bytes = 0;  // >= the engine's max_datagram_bytes()
  bool gso = false;            // UDP_SEGMENT usable
  // io_uring: a message TxBatch::build made for it (MessageInfo::zerocopy)
  // is sent with IORING_OP_SENDMSG_ZC where the kernel has it: the kernel
  // pins the pages and the NIC reads them, without a copy. Every other
  // message, and every message of the sendmmsg backend, the kernel copies.
  bool zerocopy = false;
  const std::atomic<bool>* stop = nullptr;
  const Clock* clock = nullptr;  // the runtime's: deadlines are on its timeline
  // Set by the runtime when it has a batch for send(); the backend clears it
  // once it has handed every queued send to the kernel (and sets it again
  // while sends stay queued), so that another thread knows when its own
  // sends cannot overtake the progress thread's.
  std::atomic<bool>* sends_unsent = nullptr;
};

struct BackendCounters {
  uint64_t datagrams_sent = 0;  // handed to the kernel
  uint64_t send_syscalls = 0;
  uint64_t receive_syscalls = 0;
  uint64_t send_errors = 0;  // datagrams the kernel refused
  // Of those, refused for being larger than the path MTU (EMSGSIZE): they
  // would need IP fragmentation, which is never used. A bug (the payload
  // size did not fit the link), so the runtime logs the first.
  uint64_t oversize_drops = 0;
  uint64_t gso_sends = 0;         // messages carrying more than one datagram
  uint64_t receive_restarts = 0;  // io_uring: the multishot receive ended and was armed again
  uint64_t zerocopy_sends = 0;    // io_uring: messages sent with SENDMSG_ZC
};

class IoBackend {
 public:
  explicit IoBackend(bool gso) : gso_(gso) {}
  virtual ~IoBackend() = default;
  IoBackend(const IoBackend&) = delete;
  IoBackend& operator=(const IoBackend&) = delete;

  virtual bool is_io_uring() const = 0;
  // False after the kernel refused a UDP_SEGMENT send (e.g. gso_size above the
  // device MTU): later batches go out one datagram per message.
  bool gso() const { return gso_; }
  // BackendConfig::zerocopy, and the kernel sends that way (until it refuses).
  bool zerocopy() const { return zerocopy_; }

  // Hands the kernel any queued sends, then sleeps until a datagram arrives,
  // a kick, or `deadline` (config.clock's ns; kNever: no timeout). Does not
  // sleep when deadline <= now or when received data is already waiting.
  // Returns how many times it slept.
  virtual uint32_t wait(transport::Time deadline) = 0;
  // True once per consumed kick (eventfd signal or timer_fd expiry).
  bool take_kick() {
    const bool kicked = kicked_;
    kicked_ = false;
    return kicked;
  }
  // Messages received so far, without blocking; valid until release_received().
  virtual std::span<const RxMessage> receive() = 0;
  virtual void release_received() = 0;
  // An empty batch to fill (may wait for the kernel to finish with it).
  virtual TxBatch& tx_batch() = 0;
  // Sends a built batch (io_uring: queued, submitted by the next wait()).
  // Maintains config.sends_unsent.
  virtual void send(TxBatch& batch) = 0;
  // Hands the kernel every send queued so far, without sleeping (io_uring:
  // submits them; sendmmsg sent them in send()).
  virtual void submit_sends() = 0;
  // Hands the kernel every queued send and waits (until `deadline`) for it
  // to take them: the last thing the progress thread does.
  virtual void drain_sends(transport::Time deadline) = 0;
  // The path sockets after the runtime opened more (`fds` extends the
  // current list, at most kMaxPathSockets).
  virtual void set_path_fds(std::vector<int> fds) = 0;

  const BackendCounters& counters() const { return counters_; }

 protected:
  bool gso_;
  bool zerocopy_ = false;
  bool kicked_ = false;
  BackendCounters counters_;
};

// What RuntimeOptions::make_backend returns: the progress thread's backend,
// built on that thread from the runtime's sockets. Null: the runtime fails to
// start.
using BackendFactory = std::function<std::unique_ptr<IoBackend>(const BackendConfig&)>;

// Null (with the reason) when io_uring cannot be used here.
std::unique_ptr<IoBackend> make_uring_backend(const BackendConfig& config, std::string& reason);
std::unique_ptr<IoBackend> make_mmsg_backend(const BackendConfig& config);

}  // namespace metaroce::io
