// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// Internal declarations of the MetaRoCE verbs provider: the objects behind
// the ibv_* handles and the ops of one device context.
//
// Every ibv object handed to the application is the first member of a
// provider struct, so the handle converts back with a cast. Each context owns
// one io::Runtime (UDP sockets + progress thread) driving one
// transport::Endpoint; every engine access goes through
// Runtime::with_engine(), which serialises it with the progress thread.
#pragma once

#include <netinet/in.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ibverbs_private.h"
#include "metaroce/metaroce_dv.h"
#include "runtime.h"

namespace metaroce::verbs {

// --- limits reported by ibv_query_device / enforced at create time -----------
inline constexpr uint32_t kHomePortBase = 4792;
inline constexpr uint32_t kHomePortCount = 4096;
inline constexpr uint32_t kQpIndexBits = 12;
inline constexpr uint32_t kMaxQpsPerContext = (1u << kQpIndexBits) - 1;  // index 1..4095
inline constexpr uint32_t kMaxQpWr = 4096;
inline constexpr uint32_t kMaxSge = 4;
inline constexpr uint32_t kMaxInlineData = 4096;
inline constexpr uint32_t kMaxCqe = 1u << 20;
inline constexpr uint32_t kMaxRdAtomic = 16;
inline constexpr uint32_t kMaxMsgSize = 1u << 31;
inline constexpr uint32_t kMaxPd = 1u << 16;
inline constexpr uint32_t kMaxMr = 1u << 20;
inline constexpr uint32_t kMaxCq = 1u << 16;

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
  union ibv_gid gid{};       // ::ffff:a.b.c.d or the IPv6 address
  uint64_t guid_be = 0;      // node GUID, network order
  uint32_t ifindex = 0;      // interface index, 0 if unknown
  // A kernel device (metaroce.ko, found in sysfs by libibverbs): the kernel
  // owns the objects' handles and numbers QPs; the address is resolved from
  // `netdev` when a context opens (resolved under kernel_mutex).
  bool kernel = false;
  bool resolved = false;
  std::mutex kernel_mutex;
};

// Resolves a kernel device's netdev into its address (once; errno set on
// failure). Kernel-less devices are resolved when they are made.
bool resolve_kernel_device(Device& d);

Device* device_of(ibv_device* device);  // null if not ours
extern const verbs_device_ops kDeviceOps;

// Resolves "netdev_or_ip" into an address; returns false (errno set) if it
// is neither a literal nor an interface with an address.
bool resolve_address(const std::string& netdev_or_ip, sockaddr_storage& out, std::string& netdev,
                     uint32_t& ifindex);
Device* find_or_create_device(const char* name, const char* netdev_or_ip);

// --- per-context objects --------------------------------------------------------

struct Context;
class DaemonClient;

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
  ibv_cq ibv{};
  Context* ctx = nullptr;
  uint32_t id = 0;           // engine CQ
  int cqe = 0;
  int event_fd = -1;         // channel write end, -1 without a channel
  bool kernel_events = false;  // the channel is the kernel's event file
  std::atomic<uint64_t> pushed{0};   // completions pushed by the engine
  std::atomic<uint64_t> polled{0};   // completions handed to the application
  std::atomic<bool> armed{false};    // ibv_req_notify_cq pending
  std::atomic<uint64_t> events{0};   // completion events delivered (cq_event op)
};

struct Qp {
  verbs_qp vqp{};  // must be first
  Context* ctx = nullptr;
  uint32_t qpn = 0;
  uint32_t kernel_handle = 0;  // kernel devices: the uverbs handle
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  Pd* pd = nullptr;
  bool sq_sig_all = false;
  ibv_qp_cap cap{};
  uint64_t send_ops_flags = 0;

  std::mutex mutex;          // modify/query
  ibv_qp_state state = IBV_QPS_RESET;
  ibv_qp_attr attr{};        // the attributes last set, for ibv_query_qp
  transport::QpConfig config;

  // Work requests built by the ibv_wr_* API between wr_start and wr_complete.
  std::vector<transport::SendWr> pending;
  std::vector<std::vector<uint8_t>> pending_inline;
  int pending_error = 0;
};

struct Context {
  Device* device = nullptr;
  verbs_context* vctx = nullptr;
  std::unique_ptr<io::Runtime> runtime;
  // The link to metaroced (null without one); its thread uses `runtime`, so
  // it is destroyed first.
  std::unique_ptr<DaemonClient> daemon;
  uint16_t home_port = 0;
  uint32_t mtu = 4096;
  transport::Profile profile = transport::Profile::MetaRoCE;
  uint16_t paths = 4;
  int async_write_fd = -1;   // async_fd is the read end
  uint32_t poll_yield_every = 0;  // sched_yield() every this many empty polls (0: never)
  std::atomic<uint32_t> next_pd{1};
  // CQs by engine id, for the completion listener. Changed and read only
  // with the engine lock held (inside with_engine or the listener).
  std::unordered_map<uint32_t, Cq*> cqs;

  // Runs fn(endpoint) under the engine lock.
  template <typename Fn>
  auto engine(Fn&& fn) {
    return runtime->with_engine([&](transport::Endpoint& e, transport::Time) { return fn(e); });
  }
  void on_completion(uint32_t cq);  // progress thread, engine lock held

  // When a QP goes to RTR: a peer seen for the first time gets the source
  // ports metaroced discovered for the paths to it (without a daemon, or
  // when discovery finds nothing, it keeps the default ports). Blocks for
  // the discovery; the first QP to a peer pays it once.
  void route_peer(transport::PeerId peer, const sockaddr_storage& address);
  std::mutex routing_mutex;
  std::unordered_set<transport::PeerId> routed_peers;
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

// Errno for an engine result.
int errno_of(transport::PostResult result);
ibv_mtu mtu_enum(uint32_t bytes);

// --- ops (one file per concern) ---------------------------------------------------
// context.cpp
verbs_context* alloc_context(ibv_device* device, int cmd_fd, void* private_data);
void free_context(ibv_context* context);
int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size);
int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr);
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
// comp_channel.cpp
CompChannel* channel_of(ibv_comp_channel* channel);  // null if not ours
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
int metaroce_priv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                               struct ibv_gid_entry* entry, uint32_t flags, size_t entry_size);
ssize_t metaroce_priv_query_gid_table(ibv_context* context, struct ibv_gid_entry* entries,
                                      size_t max_entries, uint32_t flags, size_t entry_size);
int metaroce_priv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                 enum ibv_gid_type_sysfs* type);
int metaroce_priv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey);
__be64 metaroce_priv_device_guid(ibv_device* device);
// Completion channels: a pipe whose read end is channel->fd.
ibv_comp_channel* metaroce_priv_create_comp_channel(ibv_context* context);
int metaroce_priv_destroy_comp_channel(ibv_comp_channel* channel);
bool metaroce_priv_is_comp_channel(ibv_comp_channel* channel);
}
