// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Asynchronous events (ibv_get_async_event). A context's async_fd is the
// read end of a one-way socket to which the provider writes struct
// ib_uverbs_async_event_desc records, as the kernel writes them to its
// async event file: libibverbs reads one, turns `element` back into the
// object pointer (QP, SRQ) or port number, and ibv_ack_async_event() counts
// it on the object. The engine reports QP and SRQ events (on_async_event);
// for a kernel device a thread copies the kernel's own events (port state,
// DEVICE_FATAL when the device goes away) from the kernel's event file into
// the same socket.
//
// Destroying an object does what the kernel does: the object's events that
// nobody has read are taken out of the socket (discard_async_events), and
// destroy waits until the application acknowledged every event it read.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "provider.h"
#include "library_thread.h"

namespace metaroce::verbs {

AsyncEventForwarder::AsyncEventForwarder(int kernel_fd, int out_fd) : kernel_fd_(kernel_fd), out_fd_(out_fd) {
  if (::pipe2(stop_, O_CLOEXEC) != 0) stop_[0] = stop_[1] = -1;
  thread_ = io::start_library_thread([this] { run(); });
}

AsyncEventForwarder::~AsyncEventForwarder() {
  if (stop_[1] >= 0) (void)!::write(stop_[1], "x", 1);
  thread_.join();
  for (const int fd : stop_)
    if (fd >= 0) ::close(fd);
  ::close(kernel_fd_);
}

void AsyncEventForwarder::run() {
  pollfd fds[2] = {{kernel_fd_, POLLIN, 0}, {stop_[0], POLLIN, 0}};
  while (true) {
    if (::poll(fds, stop_[0] >= 0 ? 2 : 1, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) {
      if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) return;
      continue;
    }
    ib_uverbs_async_event_desc desc{};
    const ssize_t n = ::read(kernel_fd_, &desc, sizeof desc);
    if (n == static_cast<ssize_t>(sizeof desc)) {
      (void)!::send(out_fd_, &desc, sizeof desc, MSG_NOSIGNAL);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return;  // the device is gone (EIO)
    }
  }
}

void Context::post_async_event(uint64_t element, ibv_event_type type) {
  ib_uverbs_async_event_desc desc{};
  desc.element = element;
  desc.event_type = static_cast<uint32_t>(type);
  // Never blocks: a full socket means the application stopped reading events.
  (void)!::send(async_write_fd, &desc, sizeof desc, MSG_NOSIGNAL);
}

void discard_async_events(Context& ctx, uint64_t element, EventCounts& counts) {
  const uint32_t discarded = discard_event_records(ctx.vctx->context.async_fd, ctx.async_write_fd,
                                                   sizeof(ib_uverbs_async_event_desc), element);
  counts.written.fetch_sub(discarded, std::memory_order_acq_rel);
}

namespace {

// One line on stderr for a QP the transport timer failed (the application
// sees IBV_WC_RETRY_EXC_ERR): what was outstanding and how the paths stood,
// where an RDMA NIC leaves the user to guess.
void report_retry_exhaustion(const std::string& device, uint32_t qpn, const transport::RetryExhaustion& r) {
  std::string paths;
  for (const transport::PathSnapshot& p : r.paths) {
    char one[160];
    std::snprintf(one, sizeof one, " [path %u %s: window %u inflight %u srtt %.1f ms sent %llu lost %llu]", p.path_id,
                  transport::to_string(p.health), p.window_bytes, p.inflight_bytes, p.srtt_ns / 1e6,
                  static_cast<unsigned long long>(p.packets_sent), static_cast<unsigned long long>(p.lost));
    paths += one;
  }
  char heard[64] = "nothing ever heard from the peer";
  if (r.peer_silent_ns != transport::kNever)
    std::snprintf(heard, sizeof heard, "the peer last heard %.1f ms ago", r.peer_silent_ns / 1e6);
  std::fprintf(
      stderr,
      "metaroce: %s: QP 0x%x: transport retry counter exceeded (%u timeouts without progress, the last %.1f ms): "
      "msn %u %s of %u bytes, attempt %u: %u of %u chunks sent, %u acknowledged (%u in any attempt), "
      "%u RNR NAKs, %u tail probes; %s;%s\n",
      device.c_str(), qpn, r.expiries, r.interval_ns / 1e6, r.msn, wire::to_string(r.opcode), r.length, r.attempt,
      r.sent, r.chunks, r.acked, r.ever_acked, r.rnr_naks, r.stall_probes, heard,
      paths.empty() ? " no paths" : paths.c_str());
}

}  // namespace

void Context::on_async_event(Shard& shard, const transport::Endpoint& e, const transport::AsyncEvent& event) {
  switch (event.kind) {
    case transport::AsyncEventKind::QpFatal:
    case transport::AsyncEventKind::QpLastWqeReached: {
      if (event.kind == transport::AsyncEventKind::QpFatal)
        if (const transport::RetryExhaustion* r = e.retry_exhaustion(event.object))
          report_retry_exhaustion(device->name, event.object, *r);
      auto it = shard.qps.find(event.object);
      if (it == shard.qps.end()) return;
      Qp* qp = it->second;
      qp->events.written.fetch_add(1, std::memory_order_acq_rel);
      post_async_event(reinterpret_cast<uintptr_t>(&qp->vqp.qp), event.kind == transport::AsyncEventKind::QpFatal
                                                                     ? IBV_EVENT_QP_FATAL
                                                                     : IBV_EVENT_QP_LAST_WQE_REACHED);
      return;
    }
    case transport::AsyncEventKind::SrqLimitReached: {
      auto it = shard.srqs.find(event.object);
      if (it == shard.srqs.end()) return;
      Srq* srq = it->second;
      srq->events.written.fetch_add(1, std::memory_order_acq_rel);
      post_async_event(reinterpret_cast<uintptr_t>(&srq->ibv), IBV_EVENT_SRQ_LIMIT_REACHED);
      return;
    }
  }
}

void register_event_object(Context& ctx, uint64_t element, EventCounts& counts) {
  std::lock_guard<std::mutex> lock(ctx.event_objects_mutex);
  ctx.event_objects[element] = &counts;
}

void retire_event_object(Context& ctx, uint64_t element, const EventCounts& counts, pthread_mutex_t& mutex,
                         pthread_cond_t& cond, const uint32_t& completed) {
  // Every event left was read (only a read() that the discard could not
  // overtake is still to be counted, by the async_event op right after it),
  // and every event read is acknowledged: each step ends with an
  // acknowledgement, which signals `cond`.
  pthread_mutex_lock(&mutex);
  while (counts.read.load(std::memory_order_acquire) != counts.written.load(std::memory_order_acquire) ||
         completed != counts.read.load(std::memory_order_acquire))
    pthread_cond_wait(&cond, &mutex);
  pthread_mutex_unlock(&mutex);
  std::lock_guard<std::mutex> lock(ctx.event_objects_mutex);
  ctx.event_objects.erase(element);
}

// libibverbs' ibv_get_async_event() calls this for every event it read.
void async_event(ibv_context* context, ibv_async_event* event) {
  uint64_t element = 0;
  switch (event->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_LAST_WQE_REACHED: element = reinterpret_cast<uintptr_t>(event->element.qp); break;
    case IBV_EVENT_SRQ_LIMIT_REACHED: element = reinterpret_cast<uintptr_t>(event->element.srq); break;
    default: return;
  }
  Context* ctx = context_of(context);
  std::lock_guard<std::mutex> lock(ctx->event_objects_mutex);
  auto it = ctx->event_objects.find(element);
  if (it != ctx->event_objects.end()) it->second->read.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace metaroce::verbs
