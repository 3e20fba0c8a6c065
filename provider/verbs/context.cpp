// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// A device context: one io::Runtime (UDP sockets, progress thread, engine)
// with its options from the environment or metaroce_dv_options, the ops
// table handed to libibverbs, and the device/port/GID queries.
#include <fcntl.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <strings.h>

#include <nlohmann/json.hpp>

#include "metaroce/abi.h"
#include "daemon_client.h"
#include "exit_flush.h"
#include "provider.h"

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

struct Options {
  uint16_t paths = 4;
  bool paths_explicit = false;  // set by METAROCE_PATHS or the dv options, else metaroced's choice
  uint32_t mtu = 0;  // payload bytes per packet; 0 = what fits the netdev's MTU
  transport::Profile profile = transport::Profile::MetaRoCE;
  double test_loss = 0;
  uint64_t test_seed = 0;  // 0: derived from the home port
  uint16_t home_port = 0;
  // The kernel module chose home_port (the device's port slot): the daemon
  // reserves that one rather than lease another.
  bool home_port_from_kernel = false;
  bool io_uring = true;
  // The engine's defaults suit a datacenter NIC (8 us RTT). Over kernel
  // UDP the host adds tens of microseconds and, on a busy host, scheduling
  // delays of a millisecond or more that are not congestion: a larger base
  // RTT (initial window, minimum RTO) and delay target keep the congestion
  // controller from collapsing the window on them.
  uint64_t base_rtt_ns = 100'000;
  uint64_t target_delay_ns = 1'000'000;
  uint32_t poll_yield_every = 32;
  // ACK a lone packet after this long (the engine's default is base RTT / 4):
  // a latency-bound requester waits for it before its next post.
  uint64_t ack_delay_ns = 10'000;
  // RTO floor: a timeout on a busy host is usually a scheduling delay, and
  // three in a row fail a path. Gaps in a path's sequence still repair loss
  // at once; only tail loss waits for this.
  uint64_t min_rto_ns = 4'000'000;
  // The device's link rate (0 = read the netdev's speed, else the engine's
  // default): it starts each path's window at one link-rate bandwidth-delay
  // product, and the rate hint shares it among senders. A window sized for
  // 100 Gb/s on a slower link fills socket buffers with milliseconds of
  // queue, longer than the RTO.
  uint64_t link_bps = 0;
  // metaroced: whether to ask it for ports, paths and policy, and the
  // traffic class.
  bool use_daemon = true;
  std::string traffic_class;
};

bool parse_unsigned(const char* text, unsigned long min, unsigned long max, unsigned long& out) {
  if (!text || !*text) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long v = std::strtoul(text, &end, 10);
  if (errno || *end || v < min || v > max) return false;
  out = v;
  return true;
}

bool bad_env(const char* name, const char* value) {
  std::fprintf(stderr, "metaroce: invalid %s='%s'\n", name, value);
  errno = EINVAL;
  return false;
}

bool options_from_env(Options& o) {
  unsigned long v = 0;
  if (const char* s = std::getenv("METAROCE_PATHS")) {
    if (!parse_unsigned(s, 1, 64, v)) return bad_env("METAROCE_PATHS", s);
    o.paths = static_cast<uint16_t>(v);
    o.paths_explicit = true;
  }
  if (const char* s = std::getenv("METAROCE_MTU")) {
    if (!parse_unsigned(s, 256, 65000, v)) return bad_env("METAROCE_MTU", s);
    o.mtu = static_cast<uint32_t>(v);
  }
  if (const char* s = std::getenv("METAROCE_PROFILE")) {
    if (strcasecmp(s, "metaroce") == 0) o.profile = transport::Profile::MetaRoCE;
    else if (strcasecmp(s, "rocev2") == 0) o.profile = transport::Profile::RoCEv2;
    else return bad_env("METAROCE_PROFILE", s);
  }
  if (const char* s = std::getenv("METAROCE_TEST_LOSS")) {
    char* end = nullptr;
    const double p = std::strtod(s, &end);
    if (!*s || *end || !(p >= 0 && p <= 1)) return bad_env("METAROCE_TEST_LOSS", s);
    o.test_loss = p;
  }
  if (const char* s = std::getenv("METAROCE_TEST_SEED")) {
    if (!parse_unsigned(s, 1, ~0ul, v)) return bad_env("METAROCE_TEST_SEED", s);
    o.test_seed = v;
  }
  if (const char* s = std::getenv("METAROCE_IO_URING")) o.io_uring = std::strcmp(s, "0") != 0;
  if (const char* s = std::getenv("METAROCE_BASE_RTT_US")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_BASE_RTT_US", s);
    o.base_rtt_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_CC_TARGET_DELAY_US")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_CC_TARGET_DELAY_US", s);
    o.target_delay_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_MIN_RTO_US")) {
    if (!parse_unsigned(s, 10, 10'000'000, v)) return bad_env("METAROCE_MIN_RTO_US", s);
    o.min_rto_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_ACK_DELAY_US")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_ACK_DELAY_US", s);
    o.ack_delay_ns = v * 1000;
  }
  if (const char* s = std::getenv("METAROCE_LINK_MBPS")) {
    if (!parse_unsigned(s, 1, 10'000'000, v)) return bad_env("METAROCE_LINK_MBPS", s);
    o.link_bps = uint64_t{v} * 1'000'000;
  }
  if (const char* s = std::getenv("METAROCE_DAEMON")) o.use_daemon = std::strcmp(s, "0") != 0;
  if (const char* s = std::getenv("METAROCE_TRAFFIC_CLASS")) {
    if (!*s || std::strlen(s) > 64) return bad_env("METAROCE_TRAFFIC_CLASS", s);
    o.traffic_class = s;
  }
  if (const char* s = std::getenv("METAROCE_POLL_YIELD")) {
    if (!parse_unsigned(s, 0, 1'000'000'000, v)) return bad_env("METAROCE_POLL_YIELD", s);
    o.poll_yield_every = static_cast<uint32_t>(v);
  }
  return true;
}

bool apply_dv_options(Options& o, const metaroce_dv_options* dv) {
  if (!dv) return true;
  constexpr uint64_t kKnown = METAROCE_DV_OPT_PATHS | METAROCE_DV_OPT_PROFILE | METAROCE_DV_OPT_MTU |
                              METAROCE_DV_OPT_TEST_LOSS | METAROCE_DV_OPT_HOME_PORT;
  if (dv->comp_mask & ~kKnown) return false;
  if (dv->comp_mask & METAROCE_DV_OPT_PATHS) {
    if (dv->paths < 1 || dv->paths > 64) return false;
    o.paths = static_cast<uint16_t>(dv->paths);
    o.paths_explicit = true;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_MTU) {
    if (dv->mtu < 256 || dv->mtu > 65000) return false;
    o.mtu = dv->mtu;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_PROFILE) {
    if (dv->profile == METAROCE_DV_PROFILE_METAROCE) o.profile = transport::Profile::MetaRoCE;
    else if (dv->profile == METAROCE_DV_PROFILE_ROCEV2) o.profile = transport::Profile::RoCEv2;
    else return false;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_TEST_LOSS) {
    if (!(dv->test_loss >= 0 && dv->test_loss <= 1)) return false;
    o.test_loss = dv->test_loss;
  }
  if (dv->comp_mask & METAROCE_DV_OPT_HOME_PORT) {
    if (dv->home_port != 0 &&
        (dv->home_port < kHomePortBase || dv->home_port >= kHomePortBase + kHomePortCount))
      return false;
    o.home_port = dv->home_port;
  }
  return true;
}

// True when nothing is bound to (address, port) over UDP right now.
bool port_looks_free(const sockaddr_storage& address, uint16_t port) {
  sockaddr_storage a = address;
  socklen_t len = sizeof(sockaddr_in);
  if (a.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(a).sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6&>(a).sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  }
  const int fd = ::socket(a.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // let the runtime report the real error
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), len) == 0 || errno != EADDRINUSE;
  ::close(fd);
  return ok;
}

// The speed the kernel reports for the interface (ethtool's), 0 if it has
// none (loopback, some virtual devices) or it is unknown.
uint64_t netdev_speed_bps(uint32_t ifindex) {
  char name[IF_NAMESIZE] = {};
  if (ifindex == 0 || !if_indextoname(ifindex, name)) return 0;
  std::FILE* f = std::fopen((std::string("/sys/class/net/") + name + "/speed").c_str(), "re");
  if (!f) return 0;
  long mbps = 0;
  const bool ok = std::fscanf(f, "%ld", &mbps) == 1;  // reading fails with EINVAL when unknown
  std::fclose(f);
  return ok && mbps > 0 ? uint64_t(mbps) * 1'000'000 : 0;
}

// The netdev's MTU; a standard Ethernet frame's when the address belongs to
// no interface we can see.
uint32_t netdev_mtu(uint32_t ifindex) {
  constexpr uint32_t kEthernetMtu = 1500;
  char name[IF_NAMESIZE] = {};
  if (ifindex == 0 || !if_indextoname(ifindex, name)) return kEthernetMtu;
  std::FILE* f = std::fopen((std::string("/sys/class/net/") + name + "/mtu").c_str(), "re");
  if (!f) return kEthernetMtu;
  unsigned long mtu = 0;
  const bool ok = std::fscanf(f, "%lu", &mtu) == 1;
  std::fclose(f);
  return ok && mtu > 0 ? static_cast<uint32_t>(mtu) : kEthernetMtu;
}

// One line per process, not per context: a program opening many contexts
// without a daemon is told once.
void warn_once(const std::string& message) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) std::fprintf(stderr, "metaroce: %s\n", message.c_str());
}

// Creates the runtime on the home port and source ports metaroced leases;
// null (and `daemon` reset) when there is no daemon or its lease fails.
std::unique_ptr<io::Runtime> start_with_daemon(const Device& device, const Options& o, io::RuntimeOptions ro,
                                               std::unique_ptr<DaemonClient>& daemon) {
  std::string why;
  daemon = DaemonClient::connect(why);
  if (!daemon) {
    warn_once("no metaroced (" + why + "); choosing ports locally, integrity mode (datagrams are not authenticated)");
    return nullptr;
  }
  const transport::CongestionConfig baseline = ro.endpoint.cc;
  const double baseline_rate_hint = ro.endpoint.rate_hint_utilization;
  // A leased port can still be taken by a process that bypasses the daemon:
  // lease again (the daemon never hands out the same port twice in a row).
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::optional<DaemonLease> lease = daemon->lease(device.address_text, o.paths_explicit ? o.paths : 0,
                                                     o.traffic_class, o.home_port, why);
    if (!lease) break;
    if (lease->home_port < kHomePortBase || lease->home_port >= kHomePortBase + kHomePortCount) {
      why = "leased home port " + std::to_string(lease->home_port) + " is outside [" + std::to_string(kHomePortBase) + ", " +
            std::to_string(kHomePortBase + kHomePortCount) + ")";
      break;
    }
    ro.home_port = lease->home_port;
    ro.endpoint.qpn_base = qpn_base_for_port(ro.home_port);
    ro.test_seed = o.test_seed ? o.test_seed : 0x9e3779b97f4a7c15ull ^ ro.home_port;
    ro.path_source_ports = lease->source_ports;
    ro.endpoint.security = lease->security;
    if (!o.paths_explicit) ro.endpoint.paths = static_cast<uint16_t>(lease->source_ports.size());
    ctl::apply_policy(lease->policy, ro.endpoint.cc);
    if (lease->policy.rate_hint_utilization) ro.endpoint.rate_hint_utilization = *lease->policy.rate_hint_utilization;
    std::unique_ptr<io::Runtime> runtime = io::Runtime::create(ro, why);
    if (runtime) {
      daemon->attach(runtime.get(), device.name, lease->stats_interval_ms, baseline, baseline_rate_hint);
      return runtime;
    }
    if (why.find("in use") == std::string::npos) break;
  }
  warn_once("metaroced lease failed (" + why + "); choosing ports locally, integrity mode (datagrams are not authenticated)");
  daemon.reset();
  return nullptr;
}

// Creates the runtime on the first free home port, with QP numbers that
// encode it.
std::unique_ptr<io::Runtime> start_runtime(const Device& device, const Options& o,
                                           std::unique_ptr<DaemonClient>& daemon, std::string& error) {
  io::RuntimeOptions ro;
  ro.local_address = device.address_text;
  ro.allow_io_uring = o.io_uring;
  ro.test_drop_probability = o.test_loss;
  ro.endpoint.profile = o.profile;
  ro.endpoint.paths = o.paths;
  ro.endpoint.mtu = o.mtu;
  ro.endpoint.max_qps = kMaxQpsPerContext;
  ro.endpoint.max_outstanding_messages = kMaxQpWr;
  ro.endpoint.base_rtt_ns = o.base_rtt_ns;
  ro.endpoint.cc.target_queue_delay_ns = o.target_delay_ns;
  ro.endpoint.ack_delay_ns = o.ack_delay_ns;
  ro.endpoint.min_rto_ns = o.min_rto_ns;
  if (const uint64_t link = o.link_bps ? o.link_bps : netdev_speed_bps(device.ifindex)) {
    // Every path can carry the whole link, and everything arrives through it.
    ro.endpoint.path_rate_bps = link;
    ro.endpoint.inbound_capacity_bps = link;
  }
  // A home port the caller chose is theirs: no daemon then. One the kernel
  // chose is leased as it is.
  if (o.use_daemon && (!o.home_port || o.home_port_from_kernel)) {
    if (std::unique_ptr<io::Runtime> runtime = start_with_daemon(device, o, ro, daemon)) return runtime;
  }
  const uint32_t first = o.home_port ? o.home_port : kHomePortBase;
  const uint32_t last = o.home_port ? o.home_port + 1 : kHomePortBase + kHomePortCount;
  int races = 0;
  for (uint32_t port = first; port < last; ++port) {
    if (!o.home_port && !port_looks_free(device.address, static_cast<uint16_t>(port))) continue;
    ro.home_port = static_cast<uint16_t>(port);
    ro.endpoint.qpn_base = qpn_base_for_port(ro.home_port);
    ro.test_seed = o.test_seed ? o.test_seed : 0x9e3779b97f4a7c15ull ^ port;
    std::unique_ptr<io::Runtime> runtime = io::Runtime::create(ro, error);
    if (runtime) return runtime;
    // Another process may have taken the port since the probe.
    if (o.home_port || ++races > 16 || error.find("in use") == std::string::npos) return nullptr;
  }
  if (error.empty()) error = "no free home port on " + device.address_text;
  return nullptr;
}

}  // namespace

Context* context_of(ibv_context* context) {
  auto* vctx = reinterpret_cast<verbs_context*>(reinterpret_cast<char*>(context) -
                                                offsetof(verbs_context, context));
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
      (void)!::write(c->event_fd, &handle, sizeof handle);
    }
  }
}

bool Context::route_peer(transport::PeerId peer, const sockaddr_storage& address) {
  if (!daemon || peer == 0) return true;
  std::lock_guard<std::mutex> lock(routing_mutex);  // a second QP to the peer waits for the first's ports
  const wire::Security security = engine([](transport::Endpoint& e) { return e.config().security; });
  if (security != wire::Security::Integrity && !keyed_peers.count(peer)) {
    std::string error;
    const std::optional<PeerKey> key = daemon->peer_key(home_port, address, error);
    if (!key) {
      std::fprintf(stderr, "metaroce: %s: no key for a peer in %s mode (%s)\n", device->name.c_str(),
                   wire::to_string(security), error.c_str());
      return false;
    }
    engine([&](transport::Endpoint& e) {
      e.set_peer_key(peer, key->key, key->role);
      return 0;
    });
    keyed_peers.insert(peer);
  }
  if (!routed_peers.insert(peer).second) return true;
  std::string error;
  const std::optional<PeerPorts> ports = daemon->peer_ports(home_port, address, paths, error);
  if (!ports) {
    warn_once("metaroced gave no source ports for a peer (" + error + "); using the default ports");
    return true;
  }
  if (!ports->source_ports.empty() && !runtime->route_peer(peer, ports->source_ports, error))
    warn_once("cannot use the source ports metaroced discovered for a peer (" + error + "); using the default ports");
  return true;
}

verbs_context* alloc_context(ibv_device* device, int cmd_fd, void* private_data) {
  Device* dev = device_of(device);
  Options o;
  if (!dev || !options_from_env(o) ||
      !apply_dv_options(o, static_cast<const metaroce_dv_options*>(private_data))) {
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
    if (!err && (resp.drv.abi_version != METAROCE_ABI_VERSION ||
                 resp.drv.port_slot < METAROCE_SLOT_MIN || resp.drv.port_slot > METAROCE_SLOT_MAX ||
                 resp.drv.qpn_index_bits != kQpIndexBits)) {
      std::fprintf(stderr, "metaroce: %s: unexpected kernel answer (ABI %u, slot %u)\n",
                   dev->name.c_str(), resp.drv.abi_version, resp.drv.port_slot);
      err = EPROTO;
    }
    if (!err) {
      dev->guid_be = resp.drv.node_guid;
      if (!resolve_kernel_device(*dev)) {
        err = errno;
        std::fprintf(stderr, "metaroce: %s: netdev '%s' has no address in this network namespace\n",
                     dev->name.c_str(), dev->netdev.c_str());
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
  if (o.mtu == 0)
    o.mtu = metaroce_payload_for_link_mtu(netdev_mtu(dev->ifindex), dev->address.ss_family == AF_INET6);
  impl->mtu = std::clamp<uint32_t>(o.mtu, 256, 65000);
  impl->active_mtu = static_cast<ibv_mtu>(metaroce_ib_mtu_not_above(impl->mtu));
  impl->profile = o.profile;
  impl->paths = o.profile == transport::Profile::RoCEv2 ? 1 : o.paths;
  impl->poll_yield_every = o.poll_yield_every;

  std::string error;
  impl->runtime = start_runtime(*dev, o, impl->daemon, error);
  int fds[2] = {-1, -1};
  if (!impl->runtime || ::pipe2(fds, O_CLOEXEC) != 0) {
    const int saved = impl->runtime ? errno : EADDRNOTAVAIL;
    if (!impl->runtime) std::fprintf(stderr, "metaroce: %s: %s\n", dev->name.c_str(), error.c_str());
    impl.reset();
    verbs_uninit_context(&alloc->vctx);
    std::free(alloc);
    errno = saved;
    return nullptr;
  }
  impl->home_port = impl->runtime->home_port();
  // metaroced may have chosen the number of paths.
  if (o.profile != transport::Profile::RoCEv2)
    impl->paths = impl->runtime->with_engine([](transport::Endpoint& e, transport::Time) { return e.config().paths; });
  // async_fd: a pipe that ibv_get_async_event() can read (and poll/epoll
  // can watch); the provider writes struct ib_uverbs_async_event_desc
  // records, and for a kernel device a thread copies the kernel's events
  // from its event file into the pipe (see async_events.cpp).
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

  Context* raw = impl.release();
  alloc->impl = raw;
  verbs_set_ops(&alloc->vctx, &kContextOps);
  raw->runtime->set_completion_listener([raw](uint32_t cq) { raw->on_completion(cq); });
  watch_at_exit(raw->runtime.get());
  raw->engine([raw](transport::Endpoint& e) {
    e.set_async_observer([raw](const transport::AsyncEvent& event) { raw->on_async_event(event); });
  });
  return &alloc->vctx;
}

// METAROCE_STATS=1: the engine's counters and per-path state on stderr when
// the context closes, one JSON object (until the daemon collects them).
void dump_stats(Context& ctx) {
  const char* env = std::getenv("METAROCE_STATS");
  if (!env || std::strcmp(env, "0") == 0) return;
  const io::RuntimeStats io = ctx.runtime->stats();
  nlohmann::ordered_json stats = {{"io_uring", io.io_uring},
                                  {"gso", io.gso},
                                  {"gro", io.gro},
                                  {"datagrams_sent", io.datagrams_sent},
                                  {"send_syscalls", io.send_syscalls},
                                  {"gso_sends", io.gso_sends},
                                  {"datagrams_received", io.datagrams_received},
                                  {"receive_syscalls", io.receive_syscalls},
                                  {"gro_receives", io.gro_receives},
                                  {"progress_wakeups", io.progress_wakeups},
                                  {"unknown_sender_drops", io.unknown_sender_drops},
                                  {"truncated_drops", io.truncated_drops},
                                  {"oversize_drops", io.oversize_drops}};
  ctx.engine([&](transport::Endpoint& e) {
    stats["security"] = wire::to_string(e.config().security);
    transport::for_each_counter(e.counters(), [&](const char* name, uint64_t value) { stats[name] = value; });
    // Sending-side state of every path of every peer, as the engine sees it now.
    nlohmann::ordered_json paths = nlohmann::ordered_json::array();
    for (const transport::PeerId peer : e.peers()) {
      for (const transport::PathSnapshot& p : e.path_snapshots(peer)) {
        paths.push_back({{"peer", peer},
                         {"path", p.path_id},
                         {"health", transport::to_string(p.health)},
                         {"packets_sent", p.packets_sent},
                         {"retransmits", p.retransmits},
                         {"lost", p.lost},
                         {"ecn_marks", p.ecn_marks},
                         {"window_bytes", p.window_bytes},
                         {"srtt_ns", p.srtt_ns},
                         {"min_rtt_ns", p.min_rtt_ns}});
      }
    }
    stats["paths"] = std::move(paths);
    return 0;
  });
  std::fprintf(stderr, "%s\n", nlohmann::ordered_json{{"metaroce_stats", stats}}.dump().c_str());
}

void free_context(ibv_context* context) {
  auto* alloc = reinterpret_cast<ContextAlloc*>(reinterpret_cast<char*>(context) -
                                                offsetof(verbs_context, context));
  Context* impl = alloc->impl;
  dump_stats(*impl);
  unwatch_at_exit(impl->runtime.get());
  impl->daemon.reset();   // its thread uses the runtime
  impl->runtime.reset();  // stops the progress thread first
  impl->kernel_events.reset();  // writes to async_write_fd
  if (impl->async_write_fd >= 0) ::close(impl->async_write_fd);
  free_event_objects(*impl);
  delete impl;
  verbs_uninit_context(&alloc->vctx);  // closes async_fd, drops the device reference
  std::free(alloc);
}

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size) {
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  Context* ctx = context_of(context);
  ibv_device_attr_ex a{};
  ibv_device_attr& d = a.orig_attr;
  std::snprintf(d.fw_ver, sizeof d.fw_ver, "metaroce 0.1.0");
  d.node_guid = ctx->device->guid_be;
  d.sys_image_guid = ctx->device->guid_be;
  d.max_mr_size = ~0ull;
  d.page_size_cap = 0xfffff000;
  d.vendor_id = 0xffffff;
  d.vendor_part_id = 0;
  d.hw_ver = 0;
  d.max_qp = static_cast<int>(kMaxQpsPerContext);
  d.max_qp_wr = static_cast<int>(kMaxQpWr);
  // SRQs can be resized; a kernel device reports port state changes
  // (metaroce.ko follows the netdev's carrier).
  d.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_SRQ_RESIZE;
  if (ctx->device->kernel) d.device_cap_flags |= IBV_DEVICE_PORT_ACTIVE_EVENT;
  d.max_sge = kMaxSge;
  d.max_sge_rd = kMaxSge;
  d.max_cq = static_cast<int>(kMaxCq);
  d.max_cqe = static_cast<int>(kMaxCqe);
  d.max_mr = static_cast<int>(kMaxMr);
  d.max_pd = static_cast<int>(kMaxPd);
  d.max_qp_rd_atom = kMaxRdAtomic;
  d.max_res_rd_atom = static_cast<int>(kMaxRdAtomic * kMaxQpsPerContext);
  d.max_qp_init_rd_atom = kMaxRdAtomic;
  d.atomic_cap = IBV_ATOMIC_HCA;  // atomic among RDMA atomics (one progress thread)
  d.max_srq = static_cast<int>(kMaxSrq);
  d.max_srq_wr = static_cast<int>(kMaxSrqWr);
  d.max_srq_sge = static_cast<int>(kMaxSge);
  d.max_ah = static_cast<int>(kMaxAh);
  d.max_pkeys = 1;
  d.local_ca_ack_delay = 15;
  d.phys_port_cnt = 1;
  a.phys_port_cnt_ex = 1;
  std::memcpy(attr, &a, std::min(attr_size, sizeof a));
  return 0;
}

int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr) {
  if (port_num != 1) return EINVAL;
  Context* ctx = context_of(context);
  ibv_port_attr p{};
  p.state = IBV_PORT_ACTIVE;
  p.max_mtu = IBV_MTU_4096;
  p.active_mtu = ctx->active_mtu;
  // Kernel devices have the RDMA core's GID table (default GID, then the
  // netdev's addresses); kernel-less ones a single entry.
  p.gid_tbl_len = ctx->device->kernel ? METAROCE_GID_TABLE_LEN : 1;
  p.port_cap_flags = 0;
  p.max_msg_sz = kMaxMsgSize;
  p.pkey_tbl_len = 1;
  p.lid = 0;
  p.max_vl_num = 1;
  p.active_width = 2;    // 4x
  p.active_speed = 32;   // EDR: 4x EDR = 100 Gb/s
  p.phys_state = 5;      // LinkUp
  p.link_layer = IBV_LINK_LAYER_ETHERNET;
  *port_attr = p;
  return 0;
}

}  // namespace metaroce::verbs

using namespace metaroce::verbs;

extern "C" {

int metaroce_priv_query_gid(ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid) {
  if (port_num != 1 || index != 0) return EINVAL;
  *gid = context_of(context)->device->gid;
  return 0;
}

int metaroce_priv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                               ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  if (flags) return EINVAL;
  if (port_num != 1 || gid_index != 0) return EINVAL;
  if (entry_size < offsetof(ibv_gid_entry, ndev_ifindex)) return EINVAL;
  const Device* d = context_of(context)->device;
  ibv_gid_entry e{};
  e.gid = d->gid;
  e.gid_index = 0;
  e.port_num = 1;
  e.gid_type = IBV_GID_TYPE_ROCE_V2;
  e.ndev_ifindex = d->ifindex;
  std::memcpy(entry, &e, std::min(entry_size, sizeof e));
  return 0;
}

ssize_t metaroce_priv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                      uint32_t flags, size_t entry_size) {
  if (flags) return -EINVAL;
  if (entry_size < offsetof(ibv_gid_entry, ndev_ifindex)) return -EINVAL;
  if (max_entries < 1) return -EINVAL;
  const int rc = metaroce_priv_query_gid_ex(context, 1, 0, entries, 0, entry_size);
  return rc ? -rc : 1;
}

int metaroce_priv_query_gid_type(ibv_context*, uint8_t port_num, unsigned int index,
                                 ibv_gid_type_sysfs* type) {
  if (port_num != 1 || index != 0) return EINVAL;
  *type = IBV_GID_TYPE_SYSFS_ROCE_V2;
  return 0;
}

int metaroce_priv_query_pkey(ibv_context*, uint8_t port_num, int index, __be16* pkey) {
  if (port_num != 1 || index != 0) return EINVAL;
  *pkey = htobe16(0xffff);  // the default partition, full membership
  return 0;
}

}  // extern "C"
