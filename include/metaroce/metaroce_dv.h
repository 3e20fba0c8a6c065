// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// MetaRoCE direct-verbs extension (like mlx5dv.h / efadv.h): how a program
// gets MetaRoCE devices when there is no kernel RDMA device behind them.
//
// A MetaRoCE device is a name bound to a local IP address (given as the IP
// or as a network interface name). Opening it gives an ordinary
// struct ibv_context * on which every standard ibv_* call works (ibv_alloc_pd,
// ibv_reg_mr, ibv_create_cq, ibv_create_qp, ibv_modify_qp, ibv_post_send,
// ibv_poll_cq ...): they dispatch through the context's ops to this provider,
// which runs the MetaRoCE transport over UDP from that address. Each context
// binds its own UDP "home port" in [4792, 4792 + 4096) and encodes it in its
// QP numbers, so several processes may open the same device at once.
//
// A few libibverbs calls read the kernel's sysfs files or its command
// channel and so cannot work for a kernel-less device (ibv_query_gid,
// ibv_query_pkey, ibv_get_device_guid, ibv_create_comp_channel ...).
// libmetaroce-preload.so replaces them for MetaRoCE devices (LD_PRELOAD, or
// link it before libibverbs); tools/metaroce-run sets that up for an
// unmodified program. See docs/verbs.md.
//
// Build with `pkg-config --cflags --libs metaroce` (-lmetaroce -libverbs;
// libmetaroce-dev); see metaroce_dv(7).
#ifndef METAROCE_METAROCE_DV_H
#define METAROCE_METAROCE_DV_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// One device to create: a name (as ibv_get_device_name() reports it, at most
// 63 characters) and its local address: an IPv4/IPv6 literal or a network
// interface name, whose first IPv4 address (else its first IPv6 address) is
// used.
//
// Planes: netdev_or_ip may list up to 8 comma-separated netdevs or addresses
// ("eth0,eth1"), one per independent network plane. The device's GID is the
// first one's address; path p of every connection leaves through plane
// p % planes, so a connection spreads over all of them, and a plane whose
// netdev goes down is drained at once (its paths' packets are resent on the
// others). Planes must be numbered in parallel: every host's plane-k address
// differs from its plane-0 address in the same bits (host n is 10.0.0.n on
// plane 0 and 10.1.0.n on plane 1, say), which is how a peer's plane-k
// address is found. docs/verbs.md, "Planes".
struct metaroce_dv_device_spec {
  const char* name;
  const char* netdev_or_ip;
};

enum metaroce_dv_profile {
  METAROCE_DV_PROFILE_METAROCE = 0,  // multipath, selective retransmission
  METAROCE_DV_PROFILE_ROCEV2 = 1,    // one path, go-back-N (comparison baseline)
};

// Which fields of struct metaroce_dv_options are set; unset fields come from
// the environment (METAROCE_PATHS, METAROCE_PROFILE, METAROCE_MTU,
// METAROCE_TEST_LOSS) or the defaults.
enum metaroce_dv_options_mask {
  METAROCE_DV_OPT_PATHS = 1 << 0,
  METAROCE_DV_OPT_PROFILE = 1 << 1,
  METAROCE_DV_OPT_MTU = 1 << 2,
  METAROCE_DV_OPT_TEST_LOSS = 1 << 3,
  METAROCE_DV_OPT_HOME_PORT = 1 << 4,
};

struct metaroce_dv_options {
  uint64_t comp_mask;                // enum metaroce_dv_options_mask
  uint32_t paths;                    // UDP source ports sprayed over (default 4)
  uint32_t mtu;                      // payload bytes per packet (default: what fits the netdev's MTU)
  enum metaroce_dv_profile profile;  // default METAROCE_DV_PROFILE_METAROCE
  // Test hook: probability of dropping each received datagram (default 0).
  double test_loss;
  // Home port; 0 or unset = the first free one in [4792, 4792 + 4096).
  uint16_t home_port;
};

// Returns a NULL-terminated array of devices, creating those not yet known
// to this process; *num (if not NULL) is set to their count. With specs ==
// NULL the devices come from the METAROCE_DEVICES environment variable
// ("name=netdev_or_ip[,netdev_or_ip...][,name=...]", an item without '='
// being a further plane of the device before it; none when it is unset).
// Devices live until the process exits; free the array with
// metaroce_dv_free_device_list(). Returns NULL with errno set on error
// (EINVAL: bad spec or unknown interface; EEXIST: the name is already bound
// to another address).
struct ibv_device** metaroce_dv_get_device_list(const struct metaroce_dv_device_spec* specs, int count, int* num);
void metaroce_dv_free_device_list(struct ibv_device** list);

// Creates (or finds) device `name` bound to `netdev_or_ip` and opens it, with
// opts (may be NULL) overriding the environment. Close with
// ibv_close_device(). Returns NULL with errno set on error.
struct ibv_context* metaroce_dv_open_device(const char* name, const char* netdev_or_ip,
                                            const struct metaroce_dv_options* opts);

// Opens a MetaRoCE device from a list with options (ibv_open_device() is the
// same with opts == NULL).
struct ibv_context* metaroce_dv_open(struct ibv_device* device, const struct metaroce_dv_options* opts);

// True when `device` / `context` belong to this provider.
bool metaroce_dv_is_metaroce_device(struct ibv_device* device);
bool metaroce_dv_is_metaroce_context(struct ibv_context* context);

// The UDP home port of an open context (0 if not a MetaRoCE context): its
// first progress thread's.
uint16_t metaroce_dv_home_port(struct ibv_context* context);

// The progress threads of an open context (METAROCE_PROGRESS_THREADS), each
// with its own home port and its share of the QPs; 0 if not a MetaRoCE
// context.
int metaroce_dv_progress_threads(struct ibv_context* context);

// One plane of an open context and the traffic its paths sent, over every
// connection of the context (metaroce_dv_query_planes).
struct metaroce_dv_plane {
  char netdev[16];        // the plane's netdev ("" when it was given as an address)
  char address[46];       // its local IP address, as text
  uint32_t up;            // 0 while its netdev is down or has no carrier
  uint32_t paths;         // paths on this plane, over all connections
  uint32_t active_paths;  // of those, the ones carrying data now
  uint32_t reserved;
  uint64_t packets_sent;  // data packets, retransmissions included
  uint64_t bytes_sent;
  uint64_t retransmits;
  uint64_t lost;  // packets declared lost
};

enum metaroce_dv_path_health {
  METAROCE_DV_PATH_ACTIVE = 0,   // carrying data
  METAROCE_DV_PATH_SUSPECT = 1,  // timed out: probed, not used for new data
  METAROCE_DV_PATH_FAILED = 2,   // drained (or its plane is down) until a probe gets through
};

// The sending side of one path of a connection (metaroce_dv_query_paths).
struct metaroce_dv_path {
  uint16_t path;
  uint16_t plane;
  uint32_t health;  // enum metaroce_dv_path_health
  uint64_t packets_sent;
  uint64_t bytes_sent;
  uint64_t retransmits;
  uint64_t lost;
  uint64_t ecn_marks;
  uint32_t window_bytes;
  uint32_t inflight_bytes;
  uint64_t srtt_ns;
  uint64_t min_rtt_ns;
};

// Fills planes[0 .. min(count, max)) and returns count, the context's number
// of planes; -1 with errno EINVAL when context is not an open MetaRoCE context
// or max < 0 (planes may be NULL when max is 0).
int metaroce_dv_query_planes(struct ibv_context* context, struct metaroce_dv_plane* planes, int max);

// The paths of the connection an RC QP uses (that to the peer it was moved to
// RTR with), as metaroce_dv_query_planes fills planes; 0 before RTR (and for
// other QP types); -1 with errno EINVAL when qp is not a MetaRoCE QP.
int metaroce_dv_query_paths(struct ibv_qp* qp, struct metaroce_dv_path* paths, int max);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // METAROCE_METAROCE_DV_H
