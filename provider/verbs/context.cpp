// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A device context: the ops table handed to libibverbs, and the context's
// life: its options (context_options.cpp), its io::Runtime (UDP sockets,
// progress thread, engine; runtime_start.cpp), its completions and peers,
// and at close the stats dump (stats_dump.cpp). The device, port and GID
// queries are in query.cpp.
#include <fcntl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "metaroce/abi.h"
#include "metaroce/splitmix64.h"
#include "context_options.h"
#include "daemon_client.h"
#include "exit_flush.h"
#include "guarded_read.h"
#include "provider.h"
#include "runtime_start.h"

namespace metaroce::verbs {
namespace {

static_assert(METAROCE_DATA_OVERHEAD_BYTES == wire::kDataOverheadBytes,
              "abi.h's data packet overhead must be wire.h's: the kernel reports the same active MTU");

const verbs_context_ops kContextOps = [] {
  verbs_context_ops ops{};
  ops.alloc_pd = alloc_pd;
  ops.async_event = async_event;
  ops.cq_event = cq_event;
  ops.create_ah = create_ah;
  ops.create_cq = create_cq;
  ops.create_cq_ex = create_cq_ex;
  ops.create_qp = create_qp;
  ops.create_qp_ex = create_qp_ex;
  ops.create_srq = create_srq;
  ops.dealloc_pd = dealloc_pd;
  ops.dereg_mr = dereg_mr;
  ops.destroy_ah = destroy_ah;
  ops.destroy_cq = destroy_cq;
  ops.destroy_qp = destroy_qp;
  ops.destroy_srq = destroy_srq;
  ops.free_context = free_context;
  ops.modify_qp = modify_qp;
  ops.modify_srq = modify_srq;
  ops.poll_cq = poll_cq;
  ops.post_recv = post_recv;
  ops.post_send = post_send;
  ops.post_srq_recv = post_srq_recv;
  ops.query_device_ex = query_device_ex;
  ops.query_port = query_port;
  ops.query_qp = query_qp;
  ops.query_qp_data_in_order = query_qp_data_in_order;
  ops.query_srq = query_srq;
  ops.reg_mr = reg_mr;
  ops.req_notify_cq = req_notify_cq;
  ops.resize_cq = resize_cq;
  return ops;
}();

// The seed of the context's memory keys: fresh randomness, so that a peer
// cannot predict the keys of a process it did not learn them from.
uint64_t key_seed() {
  uint64_t seed = 0;
  if (::getrandom(&seed, sizeof seed, 0) != sizeof seed)
    seed = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return splitmix64_mix(seed);
}

}  // namespace

Context* context_of(ibv_context* context) {
  auto* vctx = reinterpret_cast<verbs_context*>(reinterpret_cast<char*>(context) - offsetof(verbs_context, context));
  return reinterpret_cast<ContextAlloc*>(vctx)->impl;
}

int errno_of(transport::PostResult result) {
  switch (result) {
    case transport::PostResult::Ok: return 0;
    case transport::PostResult::QueueFull: return ENOMEM;
    case transport::PostResult::InvalidArgument:
    case transport::PostResult::BadState:
    case transport::PostResult::NoSuchObject: return EINVAL;
  }
  return EINVAL;
}

void Context::on_completion(uint32_t cq) {
  std::lock_guard<std::mutex> lock(cqs_mutex);
  auto it = cqs.find(cq);
  if (it == cqs.end()) return;
  Cq* c = it->second;
  // seq_cst with req_notify_cq's store and the polls' loads: either this
  // sees the arm or the application's poll after arming sees this completion
  // (release/acquire alone lets both miss each other, and the application
  // then waits for an event that never comes).
  c->pushed.fetch_add(1, std::memory_order_seq_cst);
  if ((c->event_fd >= 0 || c->kernel_channel) && c->armed.exchange(false, std::memory_order_seq_cst)) {
    if (c->kernel_channel) {
      // The kernel writes the event to its channel (see cq.cpp).
      (void)ibv_cmd_req_notify_cq(&c->ibv, 0);
    } else {
      // ibv_get_cq_event() reads the CQ handle (struct ib_uverbs_comp_event_desc).
      const uint64_t handle = reinterpret_cast<uintptr_t>(&c->ibv);
      if (::write(c->event_fd, &handle, sizeof handle) == sizeof handle) ++c->signalled;
    }
  }
}

void Context::with_all_engines(const std::function<void(std::span<transport::Endpoint* const>)>& fn) {
  std::vector<transport::Endpoint*> engines;
  engines.reserve(shards.size());
  // Each shard's lock is taken inside the previous one's.
  std::function<void(size_t)> lock_from = [&](size_t k) {
    if (k == shards.size()) {
      fn(engines);
      return;
    }
    shards[k]->engine([&](transport::Endpoint& e) {
      engines.push_back(&e);
      lock_from(k + 1);
    });
  };
  lock_from(0);
}

Shard& Context::pick_shard() { return *shards[next_shard.fetch_add(1, std::memory_order_relaxed) % shards.size()]; }

bool Context::route_peer(Shard& shard, transport::PeerId peer, const sockaddr_storage& address) {
  if (!shard.daemon || peer == 0) return true;
  std::lock_guard<std::mutex> lock(shard.routing_mutex);  // a second QP to the peer waits for the first's ports
  const wire::Security security = shard.engine([](transport::Endpoint& e) { return e.config().security; });
  if (security != wire::Security::Integrity && !shard.keyed_peers.count(peer)) {
    std::string error;
    const std::optional<PeerKey> key = shard.daemon->peer_key(shard.runtime->home_port(), address, error);
    if (!key) {
      std::fprintf(stderr, "metaroce: %s: no key for a peer in %s mode (%s)\n", device->name.c_str(),
                   wire::to_string(security), error.c_str());
      return false;
    }
    shard.engine([&](transport::Endpoint& e) {
      e.set_peer_key(peer, key->key, key->role);
      return 0;
    });
    shard.keyed_peers.insert(peer);
  }
  if (!shard.routed_peers.insert(peer).second) return true;
  std::string error;
  const std::optional<PeerPorts> ports = shard.daemon->peer_ports(shard.runtime->home_port(), address, paths, error);
  if (!ports) {
    warn_once("metaroced gave no source ports for a peer (" + error + "); using the default ports");
    return true;
  }
  if (!ports->source_ports.empty() && !shard.runtime->route_peer(peer, ports->source_ports, error))
    warn_once("cannot use the source ports metaroced discovered for a peer (" + error + "); using the default ports");
  return true;
}

verbs_context* alloc_context(ibv_device* device, int cmd_fd, void* private_data) {
  Device* dev = device_of(device);
  Options o;
  if (!dev || !options_from_env(o) || !apply_dv_options(o, static_cast<const metaroce_dv_options*>(private_data))) {
    if (cmd_fd >= 0) ::close(cmd_fd);
    errno = EINVAL;
    return nullptr;
  }
  auto* alloc = static_cast<ContextAlloc*>(_verbs_init_and_alloc_context(
      device, cmd_fd, sizeof(ContextAlloc),
      reinterpret_cast<verbs_context*>(static_cast<uintptr_t>(offsetof(ContextAlloc, vctx))),
      0 /* RDMA_DRIVER_UNKNOWN */));
  if (!alloc) return nullptr;

  if (dev->kernel) {
    // The kernel hands out this context's port slot (host-unique): the home
    // port, and with it the QP numbers, follow from it.
    struct {
      struct ibv_get_context ibv;
      metaroce_alloc_ucontext_req drv;
    } cmd{};
    struct {
      alignas(8) uint8_t ibv[sizeof(ib_uverbs_get_context_resp)];  // filled by libibverbs
      metaroce_alloc_ucontext_resp drv;
    } resp{};
    cmd.drv.abi_version = METAROCE_ABI_VERSION;
    int err = ibv_cmd_get_context(&alloc->vctx, &cmd.ibv, sizeof cmd,
                                  reinterpret_cast<ib_uverbs_get_context_resp*>(resp.ibv), sizeof resp);
    if (!err && (resp.drv.abi_version != METAROCE_ABI_VERSION || resp.drv.port_slot < METAROCE_SLOT_MIN ||
                 resp.drv.port_slot > METAROCE_SLOT_MAX || resp.drv.qpn_index_bits != kQpIndexBits)) {
      std::fprintf(stderr, "metaroce: %s: unexpected kernel answer (ABI %u, slot %u)\n", dev->name.c_str(),
                   resp.drv.abi_version, resp.drv.port_slot);
      err = EPROTO;
    }
    if (!err) {
      dev->guid_be = resp.drv.node_guid;
      if (!resolve_kernel_device(*dev)) {
        err = errno;
        std::fprintf(stderr, "metaroce: %s: netdev '%s' has no address in this network namespace\n", dev->name.c_str(),
                     dev->netdev.c_str());
      }
    }
    if (err) {
      verbs_uninit_context(&alloc->vctx);  // closes cmd_fd and the async fd
      std::free(alloc);
      errno = err;
      return nullptr;
    }
    o.home_port = static_cast<uint16_t>(kHomePortBase + resp.drv.port_slot);
    o.home_port_from_kernel = true;
  }

  auto impl = std::make_unique<Context>();
  impl->device = dev;
  impl->vctx = &alloc->vctx;
  impl->profile = o.profile;
  impl->paths = o.profile == transport::Profile::RoCEv2 ? 1 : o.paths;
  impl->poll_yield_every = o.poll_yield_every;

  std::string error;
  impl->planes.push_back({dev->netdev, dev->address_text, dev->address, dev->ifindex});
  impl->planes.insert(impl->planes.end(), dev->more_planes.begin(), dev->more_planes.end());
  impl->memory = std::make_shared<transport::MemoryRegistry>(key_seed());
  impl->memory->set_guarded_read(&io::guarded_read);
  const bool started = start_shards(*dev, o, impl->planes, impl->memory, impl->shards, error);
  int fds[2] = {-1, -1};
  if (!started || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    const int saved = started ? errno : EADDRNOTAVAIL;
    if (!started) std::fprintf(stderr, "metaroce: %s: %s\n", dev->name.c_str(), error.c_str());
    impl.reset();
    verbs_uninit_context(&alloc->vctx);
    std::free(alloc);
    errno = saved;
    return nullptr;
  }
  impl->mtu = std::clamp<uint32_t>(o.mtu, 256, 65000);
  impl->active_mtu = static_cast<ibv_mtu>(metaroce_ib_mtu_not_above(impl->mtu));
  // metaroced may have chosen the number of paths.
  if (o.profile != transport::Profile::RoCEv2)
    impl->paths = impl->shards.front()->engine([](transport::Endpoint& e) { return e.config().paths; });
  // async_fd: one way of a Unix stream socket pair (a pipe the provider can
  // also read without blocking, whatever flags the application gives
  // async_fd) that ibv_get_async_event() reads and poll/epoll can watch; the
  // provider writes struct ib_uverbs_async_event_desc records, and for a
  // kernel device a thread copies the kernel's events from its event file
  // into it (see async_events.cpp).
  ::shutdown(fds[0], SHUT_WR);
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  int kernel_async_fd = alloc->vctx.context.async_fd;
  // libibverbs' ioctl form of GET_CONTEXT makes no event file: libibverbs
  // allocates one after alloc_context when async_fd is -1, which ours never
  // is; without it the kernel's port events reach nobody.
  if (dev->kernel && kernel_async_fd < 0) kernel_async_fd = kernel_alloc_async_fd(alloc->vctx.context.cmd_fd);
  alloc->vctx.context.async_fd = fds[0];
  impl->async_write_fd = fds[1];
  if (dev->kernel && kernel_async_fd >= 0)
    impl->kernel_events = std::make_unique<AsyncEventForwarder>(kernel_async_fd, fds[1]);
  alloc->vctx.context.num_comp_vectors = 1;

  if (impl->planes.size() > 1) {
    std::vector<uint32_t> ifindexes;
    for (const Device::Plane& plane : impl->planes) ifindexes.push_back(plane.ifindex);
    Context* context = impl.get();
    impl->plane_monitor = io::PlaneMonitor::start(
        std::move(ifindexes),
        [context](uint16_t plane, bool up) {
          for (const std::unique_ptr<Shard>& shard : context->shards)
            shard->runtime->with_engine(
                [&](transport::Endpoint& e, transport::Time now) { e.set_plane_up(now, plane, up); });
        },
        error);
    // Without it a plane that fails is still drained, by its paths' timeouts.
    if (!impl->plane_monitor) warn_once(dev->name + ": planes are not watched (" + error + ")");
  }

  Context* raw = impl.release();
  alloc->impl = raw;
  verbs_set_ops(&alloc->vctx, &kContextOps);
  for (const std::unique_ptr<Shard>& s : raw->shards) {
    Shard* shard = s.get();
    shard->runtime->set_completion_listener([raw](uint32_t cq) { raw->on_completion(cq); });
    watch_at_exit(shard->runtime.get());
    shard->engine([raw, shard](transport::Endpoint& e) {
      e.set_async_observer(
          [raw, shard, &e](const transport::AsyncEvent& event) { raw->on_async_event(*shard, e, event); });
    });
  }
  return &alloc->vctx;
}

void free_context(ibv_context* context) {
  auto* alloc = reinterpret_cast<ContextAlloc*>(reinterpret_cast<char*>(context) - offsetof(verbs_context, context));
  Context* impl = alloc->impl;
  dump_stats(*impl);
  for (const std::unique_ptr<Shard>& shard : impl->shards) unwatch_at_exit(shard->runtime.get());
  impl->plane_monitor.reset();  // its thread uses the runtimes
  for (const std::unique_ptr<Shard>& shard : impl->shards) {
    shard->daemon.reset();   // its thread uses the runtime
    shard->runtime.reset();  // stops the progress thread first
  }
  impl->kernel_events.reset();  // writes to async_write_fd
  if (impl->async_write_fd >= 0) ::close(impl->async_write_fd);
  delete impl;
  verbs_uninit_context(&alloc->vctx);  // closes async_fd, drops the device reference
  std::free(alloc);
}

}  // namespace metaroce::verbs
