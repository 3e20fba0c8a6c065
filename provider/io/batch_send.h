// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Sending a built TxBatch synchronously: one sendmmsg per run of messages on
// the same path socket. The fallback backend sends every batch this way, and
// the runtime sends a posting thread's inline batch this way (runtime.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "io_backend.h"
#include "tx_batch.h"

namespace metaroce::io {

struct SyncSendOptions {
  // A full socket send buffer is waited for (10 ms each, at most this many
  // times) before the message is given up as lost; the engine recovers it.
  uint32_t buffer_full_waits = 100;
  const std::atomic<bool>* stop = nullptr;  // set: stop waiting
};

// `fds[i]` is path socket i. Clears `gso` when the kernel refuses a
// UDP_SEGMENT message, so that later batches go out unsegmented.
void send_batch_now(std::span<const int> fds, TxBatch& batch, const SyncSendOptions& options, BackendCounters& counters,
                    bool& gso);

}  // namespace metaroce::io
