// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Internal declarations of the MetaRoCE verbs provider: the objects behind
// the ibv_* handles and the ops of one device context.
//
// Every ibv object handed to the application is the first member of a
// provider struct, so the handle converts back with a cast. Each context owns
// one or more shards, each an io::Runtime (UDP sockets + progress thread)
// driving one transport::Endpoint; every engine access goes through
// Runtime::with_engine(), which serialises it with that shard's progress
// thread.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ibverbs_private.h"
#include "metaroce/abi.h"
#include "metaroce/metaroce_dv.h"
#include "metaroce/qp_rules.h"
#include "metaroce/wire.h"
#include "metaroce/ctl.h"
#include "plane_monitor.h"
#include "runtime.h"

namespace metaroce::verbs {

// --- limits reported by ibv_query_device / enforced at create time -----------
// (the device's own, shared with metaroce.ko, are in metaroce/qp_rules.h)
inline constexpr uint32_t kHomePortBase = wire::kHomePortBase;
inline constexpr uint32_t kHomePortCount = wire::kHomePortCount;
inline constexpr uint32_t kQpIndexBits = wire::kQpnIndexBits;
static_assert(kHomePortBase == METAROCE_HOME_PORT_BASE && kQpIndexBits == METAROCE_QPN_INDEX_BITS &&
              kHomePortCount == METAROCE_SLOT_MAX + 1);
inline constexpr uint32_t kMaxQpsPerContext = METAROCE_MAX_QP;  // index 1..4095
inline constexpr uint32_t kMaxQpWr = METAROCE_MAX_QP_WR;
inline constexpr uint32_t kMaxSge = METAROCE_MAX_SGE;
inline constexpr uint32_t kMaxInlineData = METAROCE_MAX_INLINE_DATA;
inline constexpr uint32_t kMaxCqe = METAROCE_MAX_CQE;
inline constexpr uint32_t kMaxRdAtomic = METAROCE_MAX_RD_ATOMIC;
inline constexpr uint32_t kMaxMsgSize = METAROCE_MAX_MSG_SIZE;
inline constexpr uint32_t kMaxPd = METAROCE_MAX_PD;
inline constexpr uint32_t kMaxMr = METAROCE_MAX_MR;
inline constexpr uint32_t kMaxCq = METAROCE_MAX_CQ;
inline constexpr uint32_t kMaxSrq = METAROCE_MAX_SRQ;
inline constexpr uint32_t kMaxSrqWr = METAROCE_MAX_SRQ_WR;
inline constexpr uint32_t kMaxAh = METAROCE_MAX_AH;
inline constexpr uint32_t kUdQkeyDefault = 0;

// The QP number a context gives its index-th QP, and the inverse used to find
// a peer's home port from the QP number it advertised.
constexpr uint32_t qpn_base_for_port(uint16_t home_port) {
  return ((static_cast<uint32_t>(home_port) - kHomePortBase) << kQpIndexBits) | 1;
}
constexpr uint16_t home_port_of_qpn(uint32_t qpn) {
  return static_cast<uint16_t>(kHomePortBase + (qpn >> kQpIndexBits));
}

// --- device --------------------------------------------------------------------

struct Device {
  verbs_device vdev{};  // must be first: libibverbs sees &vdev.device
  std::string name;
  std::string netdev;        // interface name if one was given (else empty)
  std::string address_text;  // the IP literal the runtime binds
  sockaddr_storage address{};
  union ibv_gid gid {};  // ::ffff:a.b.c.d or the IPv6 address
  uint64_t guid_be = 0;  // node GUID, network order
  uint32_t ifindex = 0;  // interface index, 0 if unknown
  // A kernel device (metaroce.ko, found in sysfs by libibverbs): the kernel
  // owns the objects' handles and numbers QPs; the address is resolved from
  // `netdev` when a context opens (resolved under kernel_mutex).
  bool kernel = false;
  bool resolved = false;
  std::mutex kernel_mutex;
  // Planes 1.. of a device opened over several netdevs ("eth0,eth1"; plane 0
  // is the fields above). docs/verbs.md, "Planes".
  struct Plane {
    std::string netdev;
    std::string address_text;
    sockaddr_storage address{};
    uint32_t ifindex = 0;
  };
  std::vector<Plane> more_planes;
};

// The most netdevs (planes) one device is opened over.
inline constexpr size_t kMaxDevicePlanes = ctl::kMaxPlanes;

// Resolves a kernel device's netdev into its address (once; errno set on
// failure). Kernel-less devices are resolved when they are made.
bool resolve_kernel_device(Device& d);

Device* device_of(ibv_device* device);  // null if not ours
extern const verbs_device_ops kDeviceOps;

// Resolves "netdev_or_ip" into an address; returns false (errno set) if it
// is neither a literal nor an interface with an address.
bool resolve_address(const std::string& netdev_or_ip, sockaddr_storage& out, std::string& netdev, uint32_t& ifindex);
// The IP of an AF_INET or AF_INET6 address, as text.
std::string address_text_of(const sockaddr_storage& address);
// resolve_address into a plane, its address_text included.
bool resolve_plane(const std::string& netdev_or_ip, Device::Plane& plane);
Device* find_or_create_device(const char* name, const char* netdev_or_ip);

// --- per-context objects --------------------------------------------------------

struct Context;
struct Shard;
class DaemonClient;

// A kernel device's own async events (port state, DEVICE_FATAL) copied from
// the kernel's event file into the context's event pipe, by a thread.
class AsyncEventForwarder {
 public:
  AsyncEventForwarder(int kernel_fd, int out_fd);  // owns kernel_fd
  ~AsyncEventForwarder();
  AsyncEventForwarder(const AsyncEventForwarder&) = delete;
  AsyncEventForwarder& operator=(const AsyncEventForwarder&) = delete;

 private:
  void run();
  const int kernel_fd_;
  const int out_fd_;
  int stop_[2] = {-1, -1};
  std::thread thread_;
};

struct Pd {
  ibv_pd ibv{};
  uint32_t id = 0;
};

struct Mr {
  verbs_mr vmr{};
  uint32_t key = 0;
};

struct CompChannel {
  ibv_comp_channel ibv{};  // fd = read end of a pipe
  int write_fd = -1;       // the provider writes the CQ pointer here
};

struct Cq {
  // Must be first. An ibv_cq_ex begins with the fields of an ibv_cq, so the
  // same object serves ibv_poll_cq and, when made by ibv_create_cq_ex, the
  // ibv_start_poll / ibv_wc_read_* interface.
  union {
    ibv_cq ibv;
    ibv_cq_ex ex;
  };
  Cq() : ex{} {}
  Context* ctx = nullptr;
  uint32_t id = 0;  // engine CQ
  int cqe = 0;
  int event_fd = -1;                    // kernel-less channel: its write end; -1 without one
  bool kernel_channel = false;          // kernel device with a channel: the kernel delivers the events
  std::atomic<uint64_t> pushed{0};      // completions pushed by the engine
  std::atomic<uint64_t> polled{0};      // completions handed to the application
  std::atomic<bool> armed{false};       // ibv_req_notify_cq pending
  std::atomic<uint64_t> events{0};      // completion events delivered (cq_event op)
  std::atomic<uint32_t> poll_start{0};  // the shard the next poll starts at (cq.cpp), modulo their number
  uint64_t signalled = 0;               // events written to a kernel-less channel (engine lock)
  // ibv_start_poll: completions taken from the engine, handed out one by one.
  std::vector<transport::Completion> batch;
  size_t batch_next = 0;
};

// Async events of one object (QP or SRQ): written to the event socket, and
// read by the application (counted in the async_event op, as the kernel
// counts the events it hands out).
struct EventCounts {
  std::atomic<uint32_t> written{0};
  std::atomic<uint32_t> read{0};
};

struct Srq {
  ibv_srq ibv{};  // must be first
  Context* ctx = nullptr;
  Shard* shard = nullptr;  // whose engine holds it; its QPs go there too
  uint32_t id = 0;         // engine SRQ
  uint32_t max_sge = 0;
  EventCounts events;
};

// The destination IP of an address vector (no port): its GRH's destination
// GID, IPv4-mapped or IPv6. Without a GRH (LIDs are 0 here) only this host
// is reachable, which a loopback device allows (qperf and ibv_rc_pingpong
// without -g exchange LIDs only) and any other device refuses, as rxe
// refuses a RoCE address vector without a GRH: the packets would go to this
// host, and the requester would time out instead of being told. False also
// for a zero GID and for a family the device does not speak.
bool av_address(const Device& device, const ibv_ah_attr& av, sockaddr_storage& out);

struct Ah {
  ibv_ah ibv{};                // must be first
  sockaddr_storage address{};  // the destination IP (the port comes from each WR's QP number)
  ibv_ah_attr attr{};
};

struct Qp {
  verbs_qp vqp{};  // must be first
  Context* ctx = nullptr;
  Shard* shard = nullptr;  // whose engine holds it
  ibv_qp_type type = IBV_QPT_RC;
  Srq* srq = nullptr;
  EventCounts events;
  uint32_t qpn = 0;
  transport::PeerId peer = 0;  // RC: the peer since RTR (0 before)
  uint32_t kernel_handle = 0;  // kernel devices: the uverbs handle
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Pd* pd = nullptr;
  bool sq_sig_all = false;
  ibv_qp_cap cap{};
  uint64_t send_ops_flags = 0;

  std::mutex mutex;  // modify/query
  ibv_qp_state state = IBV_QPS_RESET;
  ibv_qp_attr attr{};  // the attributes last set, for ibv_query_qp
  transport::QpConfig config;

  // Work requests built by the ibv_wr_* API between wr_start and wr_complete
  // (UD: with the destination ibv_wr_set_ud_addr gave each).
  std::vector<transport::SendWr> pending;
  struct UdAddress {
    ibv_ah* ah = nullptr;
    uint32_t remote_qpn = 0;
    uint32_t remote_qkey = 0;
  };
  std::vector<UdAddress> pending_ud;
  std::vector<std::vector<uint8_t>> pending_inline;
  int pending_error = 0;
};

// One progress thread's share of a context (docs/verbs.md, "Progress
// threads"): its own home port, engine, sockets and thread. A QP belongs to
// one shard from its creation (its number encodes the shard's home port);
// CQs exist in every shard's engine under one number, and every shard's
// engine reads the context's one memory-region table.
struct Shard {
  std::unique_ptr<io::Runtime> runtime;
  // metaroced's lease of this shard's ports (null without a daemon); its
  // thread uses `runtime`, so it is destroyed first.
  std::unique_ptr<DaemonClient> daemon;
  // QPs and SRQs by engine number, for the async event observer. Changed and
  // read with this shard's engine lock held.
  std::unordered_map<uint32_t, Qp*> qps;
  std::unordered_map<uint32_t, Srq*> srqs;
  std::mutex routing_mutex;  // see Context::route_peer
  std::unordered_set<transport::PeerId> routed_peers;
  std::unordered_set<transport::PeerId> keyed_peers;

  // Runs fn(endpoint) under this shard's engine lock.
  template <typename Fn>
  auto engine(Fn&& fn) {
    return runtime->with_engine([&](transport::Endpoint& e, transport::Time) { return fn(e); });
  }
};

struct Context {
  Device* device = nullptr;
  verbs_context* vctx = nullptr;
  // At least one; [0]'s home port is the context's (metaroce_dv_home_port).
  std::vector<std::unique_ptr<Shard>> shards;
  // The memory-region table every shard's engine reads. Changed only with
  // every shard's engine lock held (with_all_engines), so that an engine
  // reading it under its own lock never races a registration.
  std::shared_ptr<transport::MemoryRegistry> memory;
  // The shard the next QP or SRQ without an SRQ goes to (round-robin).
  std::atomic<uint32_t> next_shard{0};
  // Reports plane netdevs going down and up to the engines (a device over
  // several planes only); uses the shards' runtimes, so it is destroyed first.
  std::unique_ptr<io::PlaneMonitor> plane_monitor;
  // The planes the runtime runs over: the device's, or those metaroced's
  // [devices.NAME] planes names; [0] is the device's own netdev and address.
  std::vector<Device::Plane> planes;
  uint32_t mtu = 0;                   // payload bytes per data packet (what fits the netdev's MTU, or METAROCE_MTU)
  ibv_mtu active_mtu = IBV_MTU_1024;  // the largest IB MTU not above mtu
  transport::Profile profile = transport::Profile::MetaRoCE;
  uint16_t paths = 4;
  // async_fd is the read end of a one-way Unix stream socket the provider
  // writes events to, for kernel devices too (the kernel's own events are
  // forwarded into it).
  int async_write_fd = -1;
  std::unique_ptr<AsyncEventForwarder> kernel_events;
  // Writes one ib_uverbs_async_event_desc (element: an object pointer or a
  // port number).
  void post_async_event(uint64_t element, ibv_event_type type);
  // The engine of `shard` reports an event (its engine lock held).
  void on_async_event(Shard& shard, const transport::Endpoint& e, const transport::AsyncEvent& event);
  // The event counts of live objects by the element their events name, for
  // the async_event op: registered at creation, forgotten at destruction.
  std::mutex event_objects_mutex;
  std::unordered_map<uint64_t, EventCounts*> event_objects;
  uint32_t poll_yield_every = 0;  // sched_yield() every this many empty polls (0: never)
  std::atomic<uint32_t> next_pd{1};
  // CQs by engine id (the same in every shard), for the completion
  // listener, which runs without the engine lock: changed and read with
  // cqs_mutex held.
  std::mutex cqs_mutex;
  std::unordered_map<uint32_t, Cq*> cqs;

  // Runs fn(engines) with every shard's engine lock held (taken in shard
  // order): engines[k] is shard k's. For what spans the shards: CQs and
  // memory regions.
  void with_all_engines(const std::function<void(std::span<transport::Endpoint* const>)>& fn);
  // The shard a new QP or SRQ goes to.
  Shard& pick_shard();
  void on_completion(uint32_t cq);  // the completion listener (Runtime::set_completion_listener)

  // When a QP goes to RTR: a peer the shard sees for the first time gets
  // the source ports metaroced discovered for the paths to it (without a
  // daemon, or when discovery finds nothing, it keeps the default ports).
  // Blocks for the discovery; the first QP to a peer pays it once.
  // In the authenticate and encrypt modes it also gives the engine the pair
  // key metaroced derived for the peer; false when there is none (the QP
  // then cannot connect).
  bool route_peer(Shard& shard, transport::PeerId peer, const sockaddr_storage& address);
};

struct ContextAlloc {
  verbs_context vctx;  // must be first (the ibv_context is inside it)
  Context* impl;
};

Context* context_of(ibv_context* context);  // never null for our contexts
inline Pd* pd_of(ibv_pd* pd) { return reinterpret_cast<Pd*>(pd); }
inline Mr* mr_of(verbs_mr* mr) { return reinterpret_cast<Mr*>(mr); }
inline Cq* cq_of(ibv_cq* cq) { return reinterpret_cast<Cq*>(cq); }
inline Qp* qp_of(ibv_qp* qp) { return reinterpret_cast<Qp*>(qp); }
inline Qp* qp_of(ibv_qp_ex* qp) { return reinterpret_cast<Qp*>(qp); }
inline Cq* cq_of(ibv_cq_ex* cq) { return reinterpret_cast<Cq*>(cq); }
inline Srq* srq_of(ibv_srq* srq) { return reinterpret_cast<Srq*>(srq); }
inline Ah* ah_of(ibv_ah* ah) { return reinterpret_cast<Ah*>(ah); }

// Errno for an engine result.
int errno_of(transport::PostResult result);
// The engine's form of a receive WR, or nothing when its scatter list is
// invalid (more than max_sge entries, or entries without a list): EINVAL.
std::optional<transport::RecvWr> recv_wr_of(const ibv_recv_wr& wr, uint32_t max_sge);
// ibv_post_recv and ibv_post_srq_recv: posts the chain `wr` in order with
// `post(endpoint, RecvWr)` under the engine lock; at the first WR that fails
// stops, points *bad_wr at it and returns its errno.
template <typename Post>
int post_recv_chain(Shard& shard, ibv_recv_wr* wr, ibv_recv_wr** bad_wr, uint32_t max_sge, Post&& post) {
  int err = 0;
  shard.engine([&](transport::Endpoint& e) {
    for (; wr; wr = wr->next) {
      const std::optional<transport::RecvWr> r = recv_wr_of(*wr, max_sge);
      const transport::PostResult result = r ? post(e, *r) : transport::PostResult::InvalidArgument;
      if (result != transport::PostResult::Ok) {
        err = errno_of(result);
        return;
      }
    }
  });
  if (err && bad_wr) *bad_wr = wr;
  return err;
}
// Bytes of an IB MTU.
constexpr uint32_t ib_mtu_bytes(ibv_mtu mtu) { return 128u << mtu; }

// --- ops (one file per concern) ---------------------------------------------------
// context.cpp
verbs_context* alloc_context(ibv_device* device, int cmd_fd, void* private_data);
void free_context(ibv_context* context);
// query.cpp
int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size);
int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr);
// stats_dump.cpp: METAROCE_STATS=1's dump of the engine's counters and paths
// on stderr, when the context closes.
void dump_stats(Context& ctx);
void async_event(ibv_context* context, ibv_async_event* event);
// pd.cpp
ibv_pd* alloc_pd(ibv_context* context);
int dealloc_pd(ibv_pd* pd);
// mr.cpp
ibv_mr* reg_mr(ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access);
int dereg_mr(verbs_mr* vmr);
// cq.cpp
ibv_cq* create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector);
int destroy_cq(ibv_cq* cq);
int poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int req_notify_cq(ibv_cq* cq, int solicited_only);
void cq_event(ibv_cq* cq);
int resize_cq(ibv_cq* cq, int cqe);
ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
// kernel_commands.cpp: a kernel device's CQ and QP objects (0 or an errno;
// they set the handle, and the QP number).
int kernel_create_cq(ibv_context* context, int cqe, ibv_comp_channel* channel, int comp_vector, ibv_cq& cq);
int kernel_create_qp(ibv_pd* pd, const ibv_qp_init_attr& attr, ibv_qp& qp);
// Destroys the kernel's QP object (0 or an errno; EIO, a removed device,
// counts as done), without libibverbs' wait on the QP's event count.
int kernel_destroy_qp(ibv_qp& qp);
// A new kernel async event file for the context on cmd_fd: its descriptor,
// or a negative errno.
int kernel_alloc_async_fd(int cmd_fd);
// srq.cpp
ibv_srq* create_srq(ibv_pd* pd, ibv_srq_init_attr* attr);
int modify_srq(ibv_srq* srq, ibv_srq_attr* attr, int mask);
int query_srq(ibv_srq* srq, ibv_srq_attr* attr);
int destroy_srq(ibv_srq* srq);
int post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// ah.cpp
ibv_ah* create_ah(ibv_pd* pd, ibv_ah_attr* attr);
int destroy_ah(ibv_ah* ah);
// The peer (IP + the home port that remote_qpn names) of a UD send from
// the QP `qp`.
transport::PeerId ud_peer(const Qp& qp, const Ah& ah, uint32_t remote_qpn);
// async_events.cpp
void register_event_object(Context& ctx, uint64_t element, EventCounts& counts);
// Takes the events written for a destroyed object that nobody has read out
// of async_fd, as the kernel drops them (engine lock held, and the object
// already off the maps that on_async_event looks in).
void discard_async_events(Context& ctx, uint64_t element, EventCounts& counts);
// Then, as the kernel makes destroy wait: waits until the application has
// acknowledged every event it read for the object (`completed`: the ibv
// object's events_completed, guarded by its mutex and signalled on its
// cond), and forgets the object. The caller frees it.
void retire_event_object(Context& ctx, uint64_t element, const EventCounts& counts, pthread_mutex_t& mutex,
                         pthread_cond_t& cond, const uint32_t& completed);
// comp_channel.cpp
CompChannel* channel_of(ibv_comp_channel* channel);  // null if not ours
// event_records.cpp
// Takes the records (each `record_bytes` long, starting with the u64 that
// names their object) naming `element` out of a one-way Unix stream socket;
// others stay. Returns how many it took. Callers keep their own writers out
// meanwhile (the engine lock).
inline constexpr size_t kMaxEventRecordBytes = 16;
uint32_t discard_event_records(int read_fd, int write_fd, size_t record_bytes, uint64_t element);
// qp.cpp
ibv_qp* create_qp(ibv_pd* pd, ibv_qp_init_attr* attr);
ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
int modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
int query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr);
int destroy_qp(ibv_qp* qp);
int query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags);
// post.cpp
int post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// qp_ex.cpp: the ibv_wr_* work request API
void install_wr_api(Qp* qp);

}  // namespace metaroce::verbs

// --- between the provider and the preload library (not a public API) ------------
extern "C" {
// GID / pkey / GUID answers for MetaRoCE devices: 0 or a positive errno.
int metaroce_priv_query_gid(ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid);
int metaroce_priv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, struct ibv_gid_entry* entry,
                               uint32_t flags, size_t entry_size);
ssize_t metaroce_priv_query_gid_table(ibv_context* context, struct ibv_gid_entry* entries, size_t max_entries,
                                      uint32_t flags, size_t entry_size);
int metaroce_priv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                 enum ibv_gid_type_sysfs* type);
int metaroce_priv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey);
__be64 metaroce_priv_device_guid(ibv_device* device);
// Completion channels: a pipe whose read end is channel->fd.
ibv_comp_channel* metaroce_priv_create_comp_channel(ibv_context* context);
int metaroce_priv_destroy_comp_channel(ibv_comp_channel* channel);
bool metaroce_priv_is_comp_channel(ibv_comp_channel* channel);
}
