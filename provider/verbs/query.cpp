// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// ibv_query_device_ex, ibv_query_port and the GID and P_Key queries.
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "provider.h"

namespace metaroce::verbs {

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                    size_t attr_size) {
  if (input && input->comp_mask) return EINVAL;
  if (attr_size < sizeof(ibv_device_attr)) return EINVAL;
  Context* ctx = context_of(context);
  ibv_device_attr_ex a{};
  ibv_device_attr& d = a.orig_attr;
  std::snprintf(d.fw_ver, sizeof d.fw_ver, "%s", METAROCE_FW_VER);
  d.node_guid = ctx->device->guid_be;
  d.sys_image_guid = ctx->device->guid_be;
  d.max_mr_size = METAROCE_MAX_MR_SIZE;
  d.page_size_cap = METAROCE_PAGE_SIZE_CAP;
  d.vendor_id = METAROCE_VENDOR_ID;
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
  d.max_pkeys = METAROCE_PKEY_TBL_LEN;
  d.local_ca_ack_delay = METAROCE_LOCAL_CA_ACK_DELAY;
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
  p.pkey_tbl_len = METAROCE_PKEY_TBL_LEN;
  p.lid = 0;
  p.max_vl_num = METAROCE_MAX_VL_NUM;
  p.active_width = 2;   // 4x
  p.active_speed = 32;  // EDR: 4x EDR = 100 Gb/s
  p.phys_state = 5;     // LinkUp
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

int metaroce_priv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                               uint32_t flags, size_t entry_size) {
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

ssize_t metaroce_priv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                                      size_t entry_size) {
  if (flags) return -EINVAL;
  if (entry_size < offsetof(ibv_gid_entry, ndev_ifindex)) return -EINVAL;
  if (max_entries < 1) return -EINVAL;
  const int rc = metaroce_priv_query_gid_ex(context, 1, 0, entries, 0, entry_size);
  return rc ? -rc : 1;
}

int metaroce_priv_query_gid_type(ibv_context*, uint8_t port_num, unsigned int index, ibv_gid_type_sysfs* type) {
  if (port_num != 1 || index != 0) return EINVAL;
  *type = IBV_GID_TYPE_SYSFS_ROCE_V2;
  return 0;
}

int metaroce_priv_query_pkey(ibv_context*, uint8_t port_num, int index, __be16* pkey) {
  if (port_num != 1 || index != 0) return EINVAL;
  *pkey = htobe16(METAROCE_DEFAULT_PKEY);
  return 0;
}

}  // extern "C"
