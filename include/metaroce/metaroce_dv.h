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
// ("name=netdev_or_ip[,name=netdev_or_ip...]"; none when it is unset).
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

// The UDP home port of an open context (0 if not a MetaRoCE context).
uint16_t metaroce_dv_home_port(struct ibv_context* context);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // METAROCE_METAROCE_DV_H
