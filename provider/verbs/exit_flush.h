// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A process that exits without closing its devices still sends what its
// peers are owed (the ACKs of what completed here), as an RDMA NIC would:
// at exit every live context's runtime is shut down (io::Runtime::shutdown).
#pragma once

namespace metaroce::io {
class Runtime;
}

namespace metaroce::verbs {

// Between these two calls the runtime is shut down at exit().
void watch_at_exit(io::Runtime* runtime);
void unwatch_at_exit(io::Runtime* runtime);

}  // namespace metaroce::verbs
