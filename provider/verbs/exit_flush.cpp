// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "exit_flush.h"

#include <cstdlib>
#include <mutex>
#include <set>

#include "runtime.h"

namespace metaroce::verbs {
namespace {

std::mutex& live_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Never destroyed: the exit handler may run after static destructors began.
std::set<io::Runtime*>& live() {
  static auto* runtimes = new std::set<io::Runtime*>;
  return *runtimes;
}

void shut_down_live_runtimes() {
  std::lock_guard<std::mutex> lock(live_mutex());
  for (io::Runtime* runtime : live()) runtime->shutdown();
}

}  // namespace

void watch_at_exit(io::Runtime* runtime) {
  static std::once_flag registered;
  std::call_once(registered, [] { std::atexit(shut_down_live_runtimes); });
  std::lock_guard<std::mutex> lock(live_mutex());
  live().insert(runtime);
}

void unwatch_at_exit(io::Runtime* runtime) {
  std::lock_guard<std::mutex> lock(live_mutex());
  live().erase(runtime);
}

}  // namespace metaroce::verbs
