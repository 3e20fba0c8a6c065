// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The provider's event descriptors (completion channel records, async
// events) travel through one-way Unix stream sockets whose read end the
// application reads. As the kernel does for its event files, destroying an
// object takes the records naming it that nobody has read out of the socket,
// so that no event names a destroyed object.
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cstring>

#include "provider.h"

namespace metaroce::verbs {

uint32_t discard_event_records(int read_fd, int write_fd, size_t record_bytes, uint64_t element) {
  // Only the records there now: those put back go behind them. Each record
  // is read and, if another object's, put back at once, so that a reader
  // finds the socket empty only when every record in it was this object's.
  int bytes = 0;
  if (::ioctl(read_fd, FIONREAD, &bytes) != 0) return 0;
  uint8_t record[kMaxEventRecordBytes];
  if (record_bytes > sizeof record) return 0;
  uint32_t discarded = 0;
  for (int n = bytes / static_cast<int>(record_bytes); n > 0; --n) {
    // A record the application takes meanwhile is its own: then fewer are left.
    if (::recv(read_fd, record, record_bytes, MSG_DONTWAIT) != static_cast<ssize_t>(record_bytes)) break;
    uint64_t named = 0;
    std::memcpy(&named, record, sizeof named);
    if (named == element) ++discarded;
    else (void)!::send(write_fd, record, record_bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  return discarded;
}

}  // namespace metaroce::verbs
