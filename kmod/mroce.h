/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * metaroce.ko: a MetaRoCE RDMA device per netdev. The control path of user
 * QPs, and QP1 (the GSI QP that carries rdma_cm's MADs), the one data path
 * the kernel has. The objects behind the ib_* handles and the functions
 * shared between files.
 */
#ifndef METAROCE_KMOD_MROCE_H
#define METAROCE_KMOD_MROCE_H

#include <linux/atomic.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/spinlock.h>
#include <rdma/ib_verbs.h>

#include "mroce_logic.h"

/* GID table entries per port: the default (link-local) GID plus the
 * netdev's IPv4 and IPv6 addresses, filled by the RDMA core. */
#define MROCE_GID_TABLE_LEN METAROCE_GID_TABLE_LEN
/* The GSI QP and kernel CQs (sized by the MAD layer: 128 sends, 512
 * receives, one CQ for both). */
#define MROCE_GSI_MAX_WR 4096
#define MROCE_GSI_MAX_SEND_SGE 2
#define MROCE_GSI_MAX_RECV_SGE 1
#define MROCE_KERNEL_MAX_CQE 8192
/* The lkey of every kernel PD (IBK_LOCAL_DMA_LKEY): kernel consumers'
 * buffers are kernel virtual addresses (the RDMA core's virt DMA). */
#define MROCE_LOCAL_DMA_LKEY 0x4d524f43

/* The device's counters (`rdma statistic show link mr0/1`, sysfs
 * hw_counters): the receive verdicts of mroce_ud_verdict first, then these. */
enum mroce_stat {
	MROCE_STAT_RX_NO_RECV = MROCE_UD_VERDICTS,	/* dropped: QP1 had no receive posted */
	MROCE_STAT_RX_NOT_READY,	/* dropped: QP1 missing or not in RTR/RTS */
	MROCE_STAT_RX_BAD_SOURCE,	/* dropped: from a multicast or unspecified address */
	MROCE_STAT_TX_MADS,
	MROCE_STAT_TX_ERRORS,		/* the network refused a datagram (still completed) */
	MROCE_STATS
};

struct mroce_gsi_net;	/* gsi_net.c */
struct mroce_qp;

struct mroce_dev {
	struct ib_device ib;
	/* Held (dev_hold) from newlink to dealloc_driver, so that ops called
	 * while the device unregisters (sysfs port files) may read it. */
	struct net_device *ndev;
	struct list_head node;	/* mroce_devices, under mroce_devices_lock */
	/* The GSI sockets of the netdev's namespace, newlink to dealloc_driver. */
	struct mroce_gsi_net *gnet;
	spinlock_t gsi_lock;	/* gsi_qp */
	struct mroce_qp *gsi_qp;
	enum ib_port_state port_state;	/* last reported, under mroce_devices_lock */
	u32 epoch;	/* QP1's incarnation (src_epoch of its datagrams): random, never 0 */
	atomic64_t stats[MROCE_STATS];
};

struct mroce_ucontext {
	struct ib_ucontext ib;
	u32 slot;		/* port slot, see include/metaroce/abi.h */
	spinlock_t lock;	/* qp_ids */
	struct mroce_id_pool qp_ids;
};

struct mroce_pd {
	struct ib_pd ib;
};

struct mroce_cq {
	struct ib_cq ib;
	/* Kernel CQs only (the GSI QP's); user CQs live in the provider. */
	spinlock_t lock;	/* slots, wcs, notify */
	struct mroce_cq_slots slots;
	struct ib_wc *wcs;
	enum ib_cq_notify_flags notify;	/* armed for the next completion, or 0 */
};

/* An address handle of a kernel consumer (the MAD layer's): where its
 * datagrams go and which local address they leave from. */
struct mroce_ah {
	struct ib_ah ib;
	struct mroce_addr src;
	struct mroce_addr dst;
};

struct mroce_gsi_send {
	u64 wr_id;	/* also wr_cqe: the union's bits */
	bool signaled;
	struct mroce_addr src;
	struct mroce_addr dst;
	struct mroce_ud_hdr hdr;
	u16 len;
	u8 payload[MROCE_MAD_SIZE];
};

struct mroce_gsi_recv {
	u64 wr_id;
	u64 addr;	/* kernel virtual address (virt DMA) */
	u32 length;
};

/* The GSI QP's own state, beside struct mroce_qp. */
struct mroce_gsi {
	spinlock_t lock;	/* everything below but send_work and tx */
	enum ib_qp_state state;
	u32 qkey;
	bool sq_sig_all;
	struct mroce_ring sq;
	struct mroce_ring rq;
	struct mroce_gsi_send *sends;
	struct mroce_gsi_recv *recvs;
	u32 sq_flushes;	/* bumped when queued sends are flushed or dropped */
	struct mroce_qp *qp;
	struct work_struct send_work;
	u8 tx[MROCE_GSI_DATAGRAM_LEN];	/* send_work's datagram */
};

struct mroce_qp {
	struct ib_qp ib;
	struct mroce_ucontext *uctx;	/* outlives its QPs */
	struct mutex lock;	/* state */
	enum ib_qp_state state;
	u32 index;
	/* Reported by query_qp (`rdma resource show qp`), under lock. */
	u32 dest_qp_num;
	u32 rq_psn;
	u32 sq_psn;
	enum ib_mtu path_mtu;
	int access;
	u32 qkey;		/* UD */
	struct ib_qp_cap cap;
	struct mroce_gsi *gsi;	/* QP1 only */
};

static inline struct mroce_dev *to_mdev(struct ib_device *ib)
{
	return container_of(ib, struct mroce_dev, ib);
}

static inline struct mroce_ucontext *to_muctx(struct ib_ucontext *ib)
{
	return container_of(ib, struct mroce_ucontext, ib);
}

static inline struct mroce_qp *to_mqp(struct ib_qp *ib)
{
	return container_of(ib, struct mroce_qp, ib);
}

static inline struct mroce_cq *to_mcq(struct ib_cq *ib)
{
	return container_of(ib, struct mroce_cq, ib);
}

static inline struct mroce_ah *to_mah(struct ib_ah *ib)
{
	return container_of(ib, struct mroce_ah, ib);
}

/* main.c */
extern struct workqueue_struct *mroce_wq;

/* device.c */
extern struct list_head mroce_devices;
extern struct mutex mroce_devices_lock;
int mroce_newlink(const char *ibdev_name, struct net_device *ndev);
void mroce_netdev_gone(struct net_device *ndev);
void mroce_netdev_port_event(struct net_device *ndev);
void mroce_remove_all(void);
/* The registered device in g's namespace whose GID table holds gid, with a
 * reference (ib_device_put), or NULL. */
struct mroce_dev *mroce_find_by_gid(struct mroce_gsi_net *g, const union ib_gid *gid);

/* gsi_net.c */
extern ushort mroce_gsi_port;
int mroce_gsi_nets_init(void);
void mroce_gsi_nets_exit(void);
int mroce_gsi_net_get(struct net *net, struct mroce_gsi_net **out);
void mroce_gsi_net_put(struct mroce_gsi_net *g);
int mroce_gsi_net_xmit(struct mroce_gsi_net *g, const struct mroce_addr *src, const struct mroce_addr *dst,
		       u16 port, int ifindex, const void *buf, size_t len);

/* gsi.c: QP1, kernel CQs and AHs (called from verbs.c for kernel objects) */
extern const struct ib_device_ops mroce_gsi_ops;
void mroce_gsi_stats_init(void);
int mroce_gsi_create_qp(struct mroce_qp *qp, struct ib_qp_init_attr *init);
int mroce_gsi_modify_qp(struct mroce_qp *qp, struct ib_qp_attr *attr, int mask);
void mroce_gsi_query_qp(struct mroce_qp *qp, struct ib_qp_attr *attr);
void mroce_gsi_destroy_qp(struct mroce_qp *qp);
int mroce_kernel_create_cq(struct mroce_cq *cq, const struct ib_cq_init_attr *attr);
void mroce_kernel_destroy_cq(struct mroce_cq *cq);
/* A datagram of len bytes (buf holds its first MROCE_GSI_DATAGRAM_LEN)
 * from src to dst in g's namespace: to QP1 of the device owning dst.
 * -ENODEV when there is none; other drops are counted on the device. */
int mroce_gsi_deliver(struct mroce_gsi_net *g, const struct mroce_addr *src, const struct mroce_addr *dst,
		      const u8 *buf, int len);

/* query.c */
extern const struct ib_device_ops mroce_query_ops;
enum ib_port_state mroce_port_state(const struct net_device *ndev);

/* verbs.c */
extern const struct ib_device_ops mroce_verbs_ops;
int mroce_slots_init(void);
void mroce_slots_check_empty(void);

#endif /* METAROCE_KMOD_MROCE_H */
