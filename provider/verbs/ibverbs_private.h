// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The part of libibverbs' provider ABI (symbol version IBVERBS_PRIVATE_34,
// rdma-core 44 as shipped by Debian 12) that this provider uses. Debian ships
// no <infiniband/driver.h>, so the declarations are written here from the
// facts of that ABI:
//
//  * struct verbs_device_ops / verbs_device / verbs_context_ops: field order
//    and types of rdma-core 44 (verbs_context_ops is kept sorted by name and
//    has 76 entries in 44; verbs_set_ops() in the installed libibverbs reads
//    offsets 0 .. 75 * 8 of it).
//  * verbs_qp / verbs_mr: the provider-side wrappers that libibverbs itself
//    reads (ibv_qp_to_qp_ex() tests verbs_qp.comp_mask & VERBS_QP_EX;
//    ibv_dereg_mr()/ibv_rereg_mr() read verbs_mr.mr_type and access).
//  * the exported functions, all versioned IBVERBS_PRIVATE_34.
//
// tests/verbs/abi_test.cpp proves every field against the installed library:
// a test provider fills each op with a distinct function and calls every
// public ibv_* entry point through a context, checking that the right one
// ran; it also checks the verbs_device fields libibverbs reads and writes
// (ops, refcount, sysfs, core_support) and the symbol versions.
//
// Plain C declarations, usable from C and C++.
#ifndef METAROCE_PROVIDER_VERBS_IBVERBS_PRIVATE_H
#define METAROCE_PROVIDER_VERBS_IBVERBS_PRIVATE_H

#include <infiniband/verbs.h>
// The kernel's uverbs command and response structs (linux-libc-dev). They
// end in GNU zero-length arrays, which -Wpedantic rejects in C++.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <rdma/ib_user_verbs.h>
#pragma GCC diagnostic pop
#include <stdbool.h>
#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The private ABI version wired into verbs_register_driver_NN and the
// provider file name suffix (lib<name>-rdmav34.so).
#define METAROCE_IBVERBS_PABI_VERSION 34

// ccan/list.h's node: two pointers.
struct verbs_list_node {
  struct verbs_list_node *next, *prev;
};

// A device found in sysfs (libibverbs allocates it). Opaque here but for
// its leading fields, which are the same in every rdma-core release that
// has IBVERBS_PRIVATE_34 (later fields changed between releases and are not
// declared): cast a verbs_sysfs_dev pointer to read them, never allocate one.
struct verbs_sysfs_dev;
struct verbs_match_ent;
struct verbs_sysfs_dev_head {
  struct verbs_list_node entry;
  void* provider_data;
  const struct verbs_match_ent* match;
  unsigned int flags;
  char sysfs_name[IBV_SYSFS_NAME_MAX];  // uverbsN
  dev_t sysfs_cdev;
  char ibdev_name[IBV_SYSFS_NAME_MAX];  // e.g. mr0
  char ibdev_path[IBV_SYSFS_PATH_MAX];  // /sys/class/infiniband/mr0
};

enum {
  VERBS_MATCH_SENTINEL = 0,
  VERBS_MATCH_PCI = 1,
  VERBS_MATCH_MODALIAS = 2,
  VERBS_MATCH_DRIVER_ID = 3,
};

struct verbs_match_ent {
  void* driver_data;
  union {
    const char* modalias;
    uint64_t driver_id;
  } u;
  uint16_t vendor;
  uint16_t device;
  uint8_t kind;
};

struct verbs_device;
struct verbs_context;

struct verbs_device_ops {
  const char* name;
  uint32_t match_min_abi_version;
  uint32_t match_max_abi_version;
  const struct verbs_match_ent* match_table;
  const struct verbs_device_ops** static_providers;
  bool (*match_device)(struct verbs_sysfs_dev* sysfs_dev);
  struct verbs_context* (*alloc_context)(struct ibv_device* device, int cmd_fd, void* private_data);
  struct verbs_context* (*import_context)(struct ibv_device* device, int cmd_fd);
  struct verbs_device* (*alloc_device)(struct verbs_sysfs_dev* sysfs_dev);
  void (*uninit_device)(struct verbs_device* device);
};

struct verbs_device {
  struct ibv_device device;  // must be first
  const struct verbs_device_ops* ops;
  // atomic_int in libibverbs (same size and alignment as int). libibverbs
  // holds a reference per open context and per device-list entry and calls
  // ops->uninit_device when it drops to zero; touch it only with __atomic
  // builtins.
  int refcount;
  struct verbs_list_node entry;
  struct verbs_sysfs_dev* sysfs;  // NULL: no kernel device (cmd_fd = -1)
  uint64_t core_support;          // IB_UVERBS_CORE_SUPPORT_* bits
};

// Provider-side wrappers that libibverbs reads.
enum verbs_qp_mask {
  VERBS_QP_XRCD = 1 << 0,
  VERBS_QP_EX = 1 << 1,
};

struct verbs_xrcd;

struct verbs_qp {
  union {
    struct ibv_qp qp;
    struct ibv_qp_ex qp_ex;
  };
  uint32_t comp_mask;  // VERBS_QP_EX: ibv_qp_to_qp_ex() returns &qp_ex
  struct verbs_xrcd* xrcd;
};

enum ibv_mr_type {
  IBV_MR_TYPE_MR,
  IBV_MR_TYPE_NULL_MR,
  IBV_MR_TYPE_IMPORTED_MR,
  IBV_MR_TYPE_DMABUF_MR,
};

struct verbs_mr {
  struct ibv_mr ibv_mr;
  enum ibv_mr_type mr_type;
  int access;
};

// The GID types as ibv_query_gid_type() reports them.
enum ibv_gid_type_sysfs {
  IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
  IBV_GID_TYPE_SYSFS_ROCE_V2,
};

// Every op a provider can supply, sorted by name (rdma-core 44).
struct verbs_context_ops {
  int (*advise_mr)(struct ibv_pd* pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge* sg_list,
                   uint32_t num_sges);
  struct ibv_dm* (*alloc_dm)(struct ibv_context* context, struct ibv_alloc_dm_attr* attr);
  struct ibv_mw* (*alloc_mw)(struct ibv_pd* pd, enum ibv_mw_type type);
  struct ibv_mr* (*alloc_null_mr)(struct ibv_pd* pd);
  struct ibv_pd* (*alloc_parent_domain)(struct ibv_context* context, struct ibv_parent_domain_init_attr* attr);
  struct ibv_pd* (*alloc_pd)(struct ibv_context* context);
  struct ibv_td* (*alloc_td)(struct ibv_context* context, struct ibv_td_init_attr* init_attr);
  void (*async_event)(struct ibv_context* context, struct ibv_async_event* event);
  int (*attach_counters_point_flow)(struct ibv_counters* counters, struct ibv_counter_attach_attr* attr,
                                    struct ibv_flow* flow);
  int (*attach_mcast)(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid);
  int (*bind_mw)(struct ibv_qp* qp, struct ibv_mw* mw, struct ibv_mw_bind* mw_bind);
  int (*close_xrcd)(struct ibv_xrcd* xrcd);
  void (*cq_event)(struct ibv_cq* cq);
  struct ibv_ah* (*create_ah)(struct ibv_pd* pd, struct ibv_ah_attr* attr);
  struct ibv_counters* (*create_counters)(struct ibv_context* context, struct ibv_counters_init_attr* init_attr);
  struct ibv_cq* (*create_cq)(struct ibv_context* context, int cqe, struct ibv_comp_channel* channel, int comp_vector);
  struct ibv_cq_ex* (*create_cq_ex)(struct ibv_context* context, struct ibv_cq_init_attr_ex* init_attr);
  struct ibv_flow* (*create_flow)(struct ibv_qp* qp, struct ibv_flow_attr* flow_attr);
  struct ibv_flow_action* (*create_flow_action_esp)(struct ibv_context* context, struct ibv_flow_action_esp_attr* attr);
  struct ibv_qp* (*create_qp)(struct ibv_pd* pd, struct ibv_qp_init_attr* attr);
  struct ibv_qp* (*create_qp_ex)(struct ibv_context* context, struct ibv_qp_init_attr_ex* qp_init_attr_ex);
  struct ibv_rwq_ind_table* (*create_rwq_ind_table)(struct ibv_context* context,
                                                    struct ibv_rwq_ind_table_init_attr* init_attr);
  struct ibv_srq* (*create_srq)(struct ibv_pd* pd, struct ibv_srq_init_attr* srq_init_attr);
  struct ibv_srq* (*create_srq_ex)(struct ibv_context* context, struct ibv_srq_init_attr_ex* srq_init_attr_ex);
  struct ibv_wq* (*create_wq)(struct ibv_context* context, struct ibv_wq_init_attr* wq_init_attr);
  int (*dealloc_mw)(struct ibv_mw* mw);
  int (*dealloc_pd)(struct ibv_pd* pd);
  int (*dealloc_td)(struct ibv_td* td);
  int (*dereg_mr)(struct verbs_mr* vmr);
  int (*destroy_ah)(struct ibv_ah* ah);
  int (*destroy_counters)(struct ibv_counters* counters);
  int (*destroy_cq)(struct ibv_cq* cq);
  int (*destroy_flow)(struct ibv_flow* flow);
  int (*destroy_flow_action)(struct ibv_flow_action* action);
  int (*destroy_qp)(struct ibv_qp* qp);
  int (*destroy_rwq_ind_table)(struct ibv_rwq_ind_table* rwq_ind_table);
  int (*destroy_srq)(struct ibv_srq* srq);
  int (*destroy_wq)(struct ibv_wq* wq);
  int (*detach_mcast)(struct ibv_qp* qp, const union ibv_gid* gid, uint16_t lid);
  void (*free_context)(struct ibv_context* context);
  int (*free_dm)(struct ibv_dm* dm);
  int (*get_srq_num)(struct ibv_srq* srq, uint32_t* srq_num);
  struct ibv_dm* (*import_dm)(struct ibv_context* context, uint32_t dm_handle);
  struct ibv_mr* (*import_mr)(struct ibv_pd* pd, uint32_t mr_handle);
  struct ibv_pd* (*import_pd)(struct ibv_context* context, uint32_t pd_handle);
  int (*modify_cq)(struct ibv_cq* cq, struct ibv_modify_cq_attr* attr);
  int (*modify_flow_action_esp)(struct ibv_flow_action* action, struct ibv_flow_action_esp_attr* attr);
  int (*modify_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask);
  int (*modify_qp_rate_limit)(struct ibv_qp* qp, struct ibv_qp_rate_limit_attr* attr);
  int (*modify_srq)(struct ibv_srq* srq, struct ibv_srq_attr* srq_attr, int srq_attr_mask);
  int (*modify_wq)(struct ibv_wq* wq, struct ibv_wq_attr* wq_attr);
  struct ibv_qp* (*open_qp)(struct ibv_context* context, struct ibv_qp_open_attr* attr);
  struct ibv_xrcd* (*open_xrcd)(struct ibv_context* context, struct ibv_xrcd_init_attr* xrcd_init_attr);
  int (*poll_cq)(struct ibv_cq* cq, int num_entries, struct ibv_wc* wc);
  int (*post_recv)(struct ibv_qp* qp, struct ibv_recv_wr* wr, struct ibv_recv_wr** bad_wr);
  int (*post_send)(struct ibv_qp* qp, struct ibv_send_wr* wr, struct ibv_send_wr** bad_wr);
  int (*post_srq_ops)(struct ibv_srq* srq, struct ibv_ops_wr* op, struct ibv_ops_wr** bad_op);
  int (*post_srq_recv)(struct ibv_srq* srq, struct ibv_recv_wr* recv_wr, struct ibv_recv_wr** bad_recv_wr);
  int (*query_device_ex)(struct ibv_context* context, const struct ibv_query_device_ex_input* input,
                         struct ibv_device_attr_ex* attr, size_t attr_size);
  int (*query_ece)(struct ibv_qp* qp, struct ibv_ece* ece);
  int (*query_port)(struct ibv_context* context, uint8_t port_num, struct ibv_port_attr* port_attr);
  int (*query_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask, struct ibv_qp_init_attr* init_attr);
  int (*query_qp_data_in_order)(struct ibv_qp* qp, enum ibv_wr_opcode op, uint32_t flags);
  int (*query_rt_values)(struct ibv_context* context, struct ibv_values_ex* values);
  int (*query_srq)(struct ibv_srq* srq, struct ibv_srq_attr* srq_attr);
  int (*read_counters)(struct ibv_counters* counters, uint64_t* counters_value, uint32_t ncounters, uint32_t flags);
  struct ibv_mr* (*reg_dm_mr)(struct ibv_pd* pd, struct ibv_dm* dm, uint64_t dm_offset, size_t length,
                              unsigned int access);
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd, int access);
  struct ibv_mr* (*reg_mr)(struct ibv_pd* pd, void* addr, size_t length, uint64_t hca_va, int access);
  int (*req_notify_cq)(struct ibv_cq* cq, int solicited_only);
  int (*rereg_mr)(struct verbs_mr* vmr, int flags, struct ibv_pd* pd, void* addr, size_t length, int access);
  int (*resize_cq)(struct ibv_cq* cq, int cqe);
  int (*set_ece)(struct ibv_qp* qp, struct ibv_ece* ece);
  void (*unimport_dm)(struct ibv_dm* dm);
  void (*unimport_mr)(struct ibv_mr* mr);
  void (*unimport_pd)(struct ibv_pd* pd);
};

// --- functions exported by libibverbs.so.1 at IBVERBS_PRIVATE_34 ------------

// Adds ops to libibverbs' driver list (what a provider's constructor does).
void verbs_register_driver_34(const struct verbs_device_ops* ops);

// calloc(alloc_size) + context setup: takes a device reference, stores
// cmd_fd (owned from then on), sets async_fd = -1, allocates the private
// part and installs the dummy ops. context_offset is the offset of the
// struct verbs_context inside the allocation, passed as a pointer value.
void* _verbs_init_and_alloc_context(struct ibv_device* device, int cmd_fd, size_t alloc_size,
                                    struct verbs_context* context_offset, uint32_t driver_id);
// Frees the private part, closes cmd_fd / async_fd when not -1 and drops the
// device reference. The allocation itself is the provider's to free().
void verbs_uninit_context(struct verbs_context* context);
// Copies every non-NULL op to where libibverbs dispatches it.
void verbs_set_ops(struct verbs_context* vctx, const struct verbs_context_ops* ops);
void verbs_init_cq(struct ibv_cq* cq, struct ibv_context* context, struct ibv_comp_channel* channel, void* cq_context);
// ibv_open_device() with private_data passed to ops->alloc_context. With
// verbs_device.sysfs == NULL no character device is opened: cmd_fd = -1.
struct ibv_context* verbs_open_device(struct ibv_device* device, void* private_data);
int ibv_query_gid_type(struct ibv_context* context, uint8_t port_num, unsigned int index,
                       enum ibv_gid_type_sysfs* type);

// --- kernel commands (devices with a uverbs character device) ---------------
// Each command struct is the uverbs header followed by the kernel's core
// payload (rdma-core's kern-abi.h layout); a provider appends its driver
// data after it and passes the total size. Responses likewise: the core
// response, then the driver's. libibverbs fills the payload; it is declared
// as bytes of the uapi struct's size because those structs end in
// zero-length arrays, which C++ does not allow inside another struct.
struct ibv_get_context {
  struct ib_uverbs_cmd_hdr hdr;
  __attribute__((aligned(8))) uint8_t core_payload[sizeof(struct ib_uverbs_get_context)];
};
struct ibv_alloc_pd {
  struct ib_uverbs_cmd_hdr hdr;
  __attribute__((aligned(8))) uint8_t core_payload[sizeof(struct ib_uverbs_alloc_pd)];
};
struct ibv_modify_qp {
  struct ib_uverbs_cmd_hdr hdr;
  __attribute__((aligned(8))) uint8_t core_payload[sizeof(struct ib_uverbs_modify_qp)];
};

// Each returns 0 or a positive errno. ibv_cmd_get_context also sets the
// context's async_fd and num_comp_vectors; ibv_cmd_alloc_pd sets the PD's
// handle from the kernel's answer. (A kernel device's CQs and QPs are
// created and a QP destroyed by kernel_commands.cpp.)
int ibv_cmd_get_context(struct verbs_context* context, struct ibv_get_context* cmd, size_t cmd_size,
                        struct ib_uverbs_get_context_resp* resp, size_t resp_size);
int ibv_cmd_alloc_pd(struct ibv_context* context, struct ibv_pd* pd, struct ibv_alloc_pd* cmd, size_t cmd_size,
                     struct ib_uverbs_alloc_pd_resp* resp, size_t resp_size);
int ibv_cmd_dealloc_pd(struct ibv_pd* pd);
int ibv_cmd_destroy_cq(struct ibv_cq* cq);
// IB_USER_VERBS_CMD_REQ_NOTIFY_CQ: metaroce.ko answers it for a user CQ by
// signalling the CQ's completion channel (the provider's doorbell).
int ibv_cmd_req_notify_cq(struct ibv_cq* cq, int solicited_only);
int ibv_cmd_modify_qp(struct ibv_qp* qp, struct ibv_qp_attr* attr, int attr_mask, struct ibv_modify_qp* cmd,
                      size_t cmd_size);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // METAROCE_PROVIDER_VERBS_IBVERBS_PRIVATE_H
