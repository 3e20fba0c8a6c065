/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * metaroce.ko: a MetaRoCE RDMA device per netdev, control path only. The
 * objects behind the ib_* handles and the functions shared between files.
 */
#ifndef METAROCE_KMOD_MROCE_H
#define METAROCE_KMOD_MROCE_H

#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/spinlock.h>
#include <rdma/ib_verbs.h>

#include "mroce_logic.h"

#define MROCE_FW_VER "metaroce 0.1.0"
/* GID table entries per port: the default (link-local) GID plus the
 * netdev's IPv4 and IPv6 addresses, filled by the RDMA core. */
#define MROCE_GID_TABLE_LEN METAROCE_GID_TABLE_LEN
#define MROCE_MAX_QP_WR 4096
#define MROCE_MAX_SGE 8
#define MROCE_MAX_CQE (1 << 20)
#define MROCE_MAX_RD_ATOMIC 16
#define MROCE_MAX_PD (1 << 16)
#define MROCE_MAX_CQ (1 << 16)
#define MROCE_MAX_MR (1 << 20)
#define MROCE_MAX_INLINE 4096
/* Shared receive queues and address handles live in the provider; these are
 * the limits it reports too. */
#define MROCE_MAX_SRQ (1 << 12)
#define MROCE_MAX_SRQ_WR (1 << 14)
#define MROCE_MAX_AH (1 << 16)

struct mroce_dev {
	struct ib_device ib;
	/* Held (dev_hold) from newlink to dealloc_driver, so that ops called
	 * while the device unregisters (sysfs port files) may read it. */
	struct net_device *ndev;
	struct list_head node;	/* mroce_devices, under mroce_devices_lock */
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

/* device.c */
extern struct list_head mroce_devices;
extern struct mutex mroce_devices_lock;
int mroce_newlink(const char *ibdev_name, struct net_device *ndev);
void mroce_netdev_gone(struct net_device *ndev);
void mroce_netdev_port_event(struct net_device *ndev);
void mroce_remove_all(void);

/* query.c */
extern const struct ib_device_ops mroce_query_ops;

/* verbs.c */
extern const struct ib_device_ops mroce_verbs_ops;
int mroce_slots_init(void);
void mroce_slots_check_empty(void);

#endif /* METAROCE_KMOD_MROCE_H */
