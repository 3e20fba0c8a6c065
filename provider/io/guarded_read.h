// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The engine's guarded reader (MemoryRegistry::set_guarded_read) for a real
// process: a copy from this process's own memory that reports an unmapped
// range instead of faulting.
#pragma once

#include <cstddef>
#include <cstdint>

namespace metaroce::io {

// process_vm_readv on this process: false (EFAULT) when [addr, addr+length)
// is not all mapped. Where the call is refused (a seccomp profile without
// it: EPERM or ENOSYS) it copies with memcpy, as it would without a guard.
bool guarded_read(void* dst, uint64_t addr, size_t length);

}  // namespace metaroce::io
