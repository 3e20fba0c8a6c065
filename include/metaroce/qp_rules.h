/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * What a metaroce device allows, in one place for metaroce.ko and the
 * user-space provider: its limits, and the QP state machine that modify_qp
 * enforces (the transitions of IB spec 11.2.4.2 with their required and
 * optional attributes, and the range of each attribute's value). The kernel
 * keeps the state of record of a kernel device's QPs and the provider
 * checks before it asks, with the same rules; a kernel-less device has only
 * the provider's check.
 *
 * The states, attribute-mask bits and access flags below have the values of
 * the uverbs ABI, which enum ib_qp_state / enum ibv_qp_state,
 * enum ib_qp_attr_mask / enum ibv_qp_attr_mask and enum ib_access_flags /
 * enum ibv_access_flags share; kmod/qp_state.c and provider/verbs/qp_rules.cpp
 * assert that at compile time.
 */
#ifndef METAROCE_QP_RULES_H
#define METAROCE_QP_RULES_H

#include <linux/types.h>
#ifndef __KERNEL__
#include <stddef.h>
#endif

#include "abi.h"

/* --- device limits and attributes (ibv_query_device, ibv_query_port) --------------- */
#define METAROCE_MAX_QP (METAROCE_QP_INDEX_MAX - METAROCE_QP_INDEX_MIN + 1)
#define METAROCE_MAX_QP_WR 4096
#define METAROCE_MAX_SGE 8
#define METAROCE_MAX_INLINE_DATA 4096
#define METAROCE_MAX_CQE (1 << 20)
#define METAROCE_MAX_RD_ATOMIC 16
#define METAROCE_MAX_PD (1 << 16)
#define METAROCE_MAX_MR (1 << 20)
#define METAROCE_MAX_CQ (1 << 16)
#define METAROCE_MAX_SRQ (1 << 12)
#define METAROCE_MAX_SRQ_WR (1 << 14)
#define METAROCE_MAX_AH (1 << 16)
#define METAROCE_MAX_MSG_SIZE (1u << 31) /* max_msg_sz: a request claiming more is invalid */
#define METAROCE_MAX_MR_SIZE (~0ull)
#define METAROCE_PAGE_SIZE_CAP 0xfffff000u
#define METAROCE_VENDOR_ID 0xffffff
#define METAROCE_LOCAL_CA_ACK_DELAY 15
#define METAROCE_MAX_VL_NUM 1
/* One P_Key, the default partition with full membership. */
#define METAROCE_PKEY_TBL_LEN 1
#define METAROCE_DEFAULT_PKEY 0xffff
/* The firmware version both report; the provider recognises a kernel
 * device by its METAROCE_HCA_TYPE prefix. */
#define METAROCE_FW_VER METAROCE_HCA_TYPE " 0.1.0"

/* --- QP states, attribute-mask bits, access flags -------------------------------- */
#define METAROCE_QPS_RESET 0
#define METAROCE_QPS_INIT 1
#define METAROCE_QPS_RTR 2
#define METAROCE_QPS_RTS 3
#define METAROCE_QPS_SQD 4
#define METAROCE_QPS_SQE 5
#define METAROCE_QPS_ERR 6

#define METAROCE_QP_STATE (1 << 0)
#define METAROCE_QP_CUR_STATE (1 << 1)
#define METAROCE_QP_EN_SQD_ASYNC_NOTIFY (1 << 2)
#define METAROCE_QP_ACCESS_FLAGS (1 << 3)
#define METAROCE_QP_PKEY_INDEX (1 << 4)
#define METAROCE_QP_PORT (1 << 5)
#define METAROCE_QP_QKEY (1 << 6)
#define METAROCE_QP_AV (1 << 7)
#define METAROCE_QP_PATH_MTU (1 << 8)
#define METAROCE_QP_TIMEOUT (1 << 9)
#define METAROCE_QP_RETRY_CNT (1 << 10)
#define METAROCE_QP_RNR_RETRY (1 << 11)
#define METAROCE_QP_RQ_PSN (1 << 12)
#define METAROCE_QP_MAX_QP_RD_ATOMIC (1 << 13)
#define METAROCE_QP_ALT_PATH (1 << 14)
#define METAROCE_QP_MIN_RNR_TIMER (1 << 15)
#define METAROCE_QP_SQ_PSN (1 << 16)
#define METAROCE_QP_MAX_DEST_RD_ATOMIC (1 << 17)
#define METAROCE_QP_PATH_MIG_STATE (1 << 18)
#define METAROCE_QP_CAP (1 << 19)
#define METAROCE_QP_DEST_QPN (1 << 20)

#define METAROCE_ACCESS_LOCAL_WRITE (1 << 0)
#define METAROCE_ACCESS_REMOTE_WRITE (1 << 1)
#define METAROCE_ACCESS_REMOTE_READ (1 << 2)
#define METAROCE_ACCESS_REMOTE_ATOMIC (1 << 3)
#define METAROCE_ACCESS_MW_BIND (1 << 4)

/* IB MTU enum values (enum ib_mtu, enum ibv_mtu): 256 ... 4096 bytes. */
#define METAROCE_IB_MTU_256 1
#define METAROCE_IB_MTU_4096 5

/* --- the transitions -------------------------------------------------------------- */
/* A transition `from` -> `to` and the attributes modify_qp must and may
 * give with it (besides STATE and CUR_STATE, which any transition may
 * carry). Any state may also go to RESET or ERR, with no attributes. */
struct metaroce_qp_transition {
	int from;	/* METAROCE_QPS_* */
	int to;
	int required;
	int optional;
};

static const struct metaroce_qp_transition metaroce_rc_transitions[] = {
	{ METAROCE_QPS_RESET, METAROCE_QPS_INIT,
	  METAROCE_QP_PKEY_INDEX | METAROCE_QP_PORT | METAROCE_QP_ACCESS_FLAGS, 0 },
	{ METAROCE_QPS_INIT, METAROCE_QPS_INIT, 0,
	  METAROCE_QP_PKEY_INDEX | METAROCE_QP_PORT | METAROCE_QP_ACCESS_FLAGS },
	{ METAROCE_QPS_INIT, METAROCE_QPS_RTR,
	  METAROCE_QP_AV | METAROCE_QP_PATH_MTU | METAROCE_QP_DEST_QPN | METAROCE_QP_RQ_PSN |
		  METAROCE_QP_MAX_DEST_RD_ATOMIC | METAROCE_QP_MIN_RNR_TIMER,
	  METAROCE_QP_ALT_PATH | METAROCE_QP_ACCESS_FLAGS | METAROCE_QP_PKEY_INDEX },
	{ METAROCE_QPS_RTR, METAROCE_QPS_RTS,
	  METAROCE_QP_SQ_PSN | METAROCE_QP_TIMEOUT | METAROCE_QP_RETRY_CNT | METAROCE_QP_RNR_RETRY |
		  METAROCE_QP_MAX_QP_RD_ATOMIC,
	  METAROCE_QP_ALT_PATH | METAROCE_QP_ACCESS_FLAGS | METAROCE_QP_MIN_RNR_TIMER |
		  METAROCE_QP_PATH_MIG_STATE },
	{ METAROCE_QPS_RTS, METAROCE_QPS_RTS, 0,
	  METAROCE_QP_ACCESS_FLAGS | METAROCE_QP_ALT_PATH | METAROCE_QP_PATH_MIG_STATE |
		  METAROCE_QP_MIN_RNR_TIMER },
	/* SQD and SQE are not supported: a QP never enters them. */
};

/* UD: a Q_Key instead of access flags, no peer, no RC timers. */
static const struct metaroce_qp_transition metaroce_ud_transitions[] = {
	{ METAROCE_QPS_RESET, METAROCE_QPS_INIT,
	  METAROCE_QP_PKEY_INDEX | METAROCE_QP_PORT | METAROCE_QP_QKEY, 0 },
	{ METAROCE_QPS_INIT, METAROCE_QPS_INIT, 0,
	  METAROCE_QP_PKEY_INDEX | METAROCE_QP_PORT | METAROCE_QP_QKEY },
	{ METAROCE_QPS_INIT, METAROCE_QPS_RTR, 0, METAROCE_QP_PKEY_INDEX | METAROCE_QP_QKEY },
	{ METAROCE_QPS_RTR, METAROCE_QPS_RTS, METAROCE_QP_SQ_PSN, METAROCE_QP_QKEY },
	{ METAROCE_QPS_RTS, METAROCE_QPS_RTS, 0, METAROCE_QP_QKEY },
};

/* The table's entry for `from` -> `to` of a QP (UD if `ud`, else RC); NULL
 * if there is none (RESET and ERR, reachable from anywhere, have none). */
static inline const struct metaroce_qp_transition *metaroce_qp_transition_find(int ud, int from, int to)
{
	const struct metaroce_qp_transition *table = ud ? metaroce_ud_transitions : metaroce_rc_transitions;
	const unsigned int n = ud ? sizeof(metaroce_ud_transitions) / sizeof(metaroce_ud_transitions[0])
				  : sizeof(metaroce_rc_transitions) / sizeof(metaroce_rc_transitions[0]);
	unsigned int i;

	for (i = 0; i < n; i++)
		if (table[i].from == from && table[i].to == to)
			return &table[i];
	return NULL;
}

/* 1 if a QP (UD if `ud`, else RC) may go from `from` to `to` at all. */
static inline int metaroce_qp_transition_exists(int ud, int from, int to)
{
	if (from < METAROCE_QPS_RESET || from > METAROCE_QPS_ERR || to < METAROCE_QPS_RESET ||
	    to > METAROCE_QPS_ERR)
		return 0;
	return to == METAROCE_QPS_RESET || to == METAROCE_QPS_ERR || metaroce_qp_transition_find(ud, from, to);
}

/* 0 if a QP (UD if `ud`, else RC) may go from `from` to `to` with the
 * attributes of `mask`; -1 if not. */
static inline int metaroce_qp_transition_check(int ud, int from, int to, int mask)
{
	const int given = mask & ~(METAROCE_QP_STATE | METAROCE_QP_CUR_STATE);
	const struct metaroce_qp_transition *t;

	if (!metaroce_qp_transition_exists(ud, from, to))
		return -1;
	if (to == METAROCE_QPS_RESET || to == METAROCE_QPS_ERR)
		return given == 0 ? 0 : -1;
	t = metaroce_qp_transition_find(ud, from, to);
	if ((given & t->required) != t->required)
		return -1;
	return (given & ~(t->required | t->optional)) ? -1 : 0;
}

/* --- attribute values --------------------------------------------------------------- */
/* The attribute values modify_qp checks, copied out of struct ib_qp_attr or
 * struct ibv_qp_attr (their field names). */
struct metaroce_qp_values {
	__u32 qp_access_flags;
	__u32 pkey_index;
	__u32 port_num;
	__u32 path_mtu;
	__u32 dest_qp_num;
	__u32 rq_psn;
	__u32 sq_psn;
	__u32 timeout;
	__u32 retry_cnt;
	__u32 rnr_retry;
	__u32 min_rnr_timer;
	__u32 max_rd_atomic;
	__u32 max_dest_rd_atomic;
};

/* 0 if every value that `mask` gives is in range; -1 if one is not. A peer
 * QP number needs a non-zero index: index 0 has no home port (abi.h). */
static inline int metaroce_qp_values_check(const struct metaroce_qp_values *v, int mask)
{
	const __u32 access = METAROCE_ACCESS_LOCAL_WRITE | METAROCE_ACCESS_REMOTE_WRITE |
			     METAROCE_ACCESS_REMOTE_READ | METAROCE_ACCESS_REMOTE_ATOMIC |
			     METAROCE_ACCESS_MW_BIND;

	if ((mask & METAROCE_QP_PORT) && v->port_num != 1)
		return -1;
	if ((mask & METAROCE_QP_PKEY_INDEX) && v->pkey_index != 0)
		return -1;
	if ((mask & METAROCE_QP_ACCESS_FLAGS) && (v->qp_access_flags & ~access))
		return -1;
	if ((mask & METAROCE_QP_PATH_MTU) &&
	    (v->path_mtu < METAROCE_IB_MTU_256 || v->path_mtu > METAROCE_IB_MTU_4096))
		return -1;
	if ((mask & METAROCE_QP_DEST_QPN) &&
	    (v->dest_qp_num > 0xffffff || (v->dest_qp_num & ((1u << METAROCE_QPN_INDEX_BITS) - 1)) == 0))
		return -1;
	if ((mask & METAROCE_QP_RQ_PSN) && v->rq_psn > 0xffffff)
		return -1;
	if ((mask & METAROCE_QP_SQ_PSN) && v->sq_psn > 0xffffff)
		return -1;
	if ((mask & METAROCE_QP_TIMEOUT) && v->timeout > 31)
		return -1;
	if ((mask & METAROCE_QP_RETRY_CNT) && v->retry_cnt > 7)
		return -1;
	if ((mask & METAROCE_QP_RNR_RETRY) && v->rnr_retry > 7)
		return -1;
	if ((mask & METAROCE_QP_MIN_RNR_TIMER) && v->min_rnr_timer > 31)
		return -1;
	if ((mask & METAROCE_QP_MAX_QP_RD_ATOMIC) && v->max_rd_atomic > METAROCE_MAX_RD_ATOMIC)
		return -1;
	if ((mask & METAROCE_QP_MAX_DEST_RD_ATOMIC) && v->max_dest_rd_atomic > METAROCE_MAX_RD_ATOMIC)
		return -1;
	return 0;
}

#endif /* METAROCE_QP_RULES_H */
