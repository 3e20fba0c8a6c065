// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "guarded_read.h"

#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace metaroce::io {

namespace {
std::atomic<bool> refused{false};  // process_vm_readv is not allowed here
}  // namespace

bool guarded_read(void* dst, uint64_t addr, size_t length) {
  if (!refused.load(std::memory_order_relaxed)) {
    iovec local{dst, length};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), length};
    const ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
    if (n == static_cast<ssize_t>(length)) return true;
    if (n >= 0 || errno == EFAULT) return false;  // part or none of it is mapped
    if (errno != EPERM && errno != ENOSYS) return false;
    refused.store(true, std::memory_order_relaxed);
  }
  std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(addr)), length);
  return true;
}

}  // namespace metaroce::io
