// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The threads the provider starts inside an application's process.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace metaroce::io {

// Starts `fn` on a new thread with every signal blocked (a thread inherits
// its creator's mask). A process-directed signal (SIGALRM from alarm(),
// SIGINT, SIGCHLD) then reaches one of the application's own threads, as it
// would without this library: an application's handler may take locks or
// call functions that are not async-signal-safe, which is only safe on the
// threads the application knows about.
template <class Fn>
std::thread start_library_thread(Fn&& fn) {
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  struct Restore {
    const sigset_t& mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};
  return std::thread(std::forward<Fn>(fn));
}

}  // namespace metaroce::io
