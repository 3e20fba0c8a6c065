// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Completion channels without the kernel: a Unix stream socket pair (a pipe
// that the provider can read without blocking whatever flags the
// application gives channel->fd). libibverbs' ibv_get_cq_event() reads an
// 8-byte struct ib_uverbs_comp_event_desc {cq_handle} from channel->fd and
// takes cq_handle as the struct ibv_cq *; the completion listener writes
// exactly that when an armed CQ gets a completion. As the kernel does,
// destroying a CQ takes its events that nobody has read out of the channel
// (discard_event_records): ibv_get_cq_event() never returns a destroyed CQ.
// ibv_create_comp_channel()/ibv_destroy_comp_channel() of libibverbs go to the kernel, so libmetaroce-preload.so routes
// them here for MetaRoCE contexts.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <unordered_set>

#include "provider.h"

namespace metaroce::verbs {
namespace {

struct Channels {
  std::mutex mutex;
  std::unordered_set<CompChannel*> live;
};

Channels& channels() {
  static Channels* c = new Channels;  // never destroyed
  return *c;
}

}  // namespace

CompChannel* channel_of(ibv_comp_channel* channel) {
  auto* ch = reinterpret_cast<CompChannel*>(channel);
  Channels& c = channels();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.live.count(ch) ? ch : nullptr;
}

}  // namespace metaroce::verbs

using namespace metaroce::verbs;

extern "C" {

ibv_comp_channel* metaroce_priv_create_comp_channel(ibv_context* context) {
  if (!metaroce_dv_is_metaroce_context(context)) {
    errno = EINVAL;
    return nullptr;
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return nullptr;
  ::shutdown(fds[0], SHUT_WR);  // one way, as a pipe
  // The writer never blocks (one event per arm, so a full channel means the
  // application has stopped reading); the reader blocks unless the
  // application sets O_NONBLOCK on channel->fd.
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  auto* ch = new (std::nothrow) CompChannel;
  if (!ch) {
    ::close(fds[0]);
    ::close(fds[1]);
    errno = ENOMEM;
    return nullptr;
  }
  ch->ibv.context = context;
  ch->ibv.fd = fds[0];
  ch->ibv.refcnt = 0;
  ch->write_fd = fds[1];
  Channels& c = channels();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.live.insert(ch);
  return &ch->ibv;
}

int metaroce_priv_destroy_comp_channel(ibv_comp_channel* channel) {
  CompChannel* ch = channel_of(channel);
  if (!ch) return EINVAL;
  // As libibverbs does: refuse while a CQ still uses the channel.
  pthread_mutex_lock(&channel->context->mutex);
  const int refcnt = channel->refcnt;
  pthread_mutex_unlock(&channel->context->mutex);
  if (refcnt) return EBUSY;
  {
    Channels& c = channels();
    std::lock_guard<std::mutex> lock(c.mutex);
    c.live.erase(ch);
  }
  ::close(ch->ibv.fd);
  ::close(ch->write_fd);
  delete ch;
  return 0;
}

bool metaroce_priv_is_comp_channel(ibv_comp_channel* channel) { return channel_of(channel) != nullptr; }

}  // extern "C"
