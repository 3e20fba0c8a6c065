// SPDX-License-Identifier: GPL-2.0-only
/*
 * The RC and UD QP state machines that modify_qp enforces, on the rules of
 * include/metaroce/qp_rules.h. The kernel keeps the state of record for
 * every user QP so that a provider bug or a hostile program cannot walk a
 * QP through transitions verbs forbid; the provider applies the same rules
 * before it asks.
 */
#include "mroce_logic.h"

/* The shared rules speak the uverbs ABI's values, which the kernel's enums have. */
_Static_assert(IB_QPS_RESET == METAROCE_QPS_RESET && IB_QPS_INIT == METAROCE_QPS_INIT &&
		       IB_QPS_RTR == METAROCE_QPS_RTR && IB_QPS_RTS == METAROCE_QPS_RTS &&
		       IB_QPS_SQD == METAROCE_QPS_SQD && IB_QPS_SQE == METAROCE_QPS_SQE &&
		       IB_QPS_ERR == METAROCE_QPS_ERR,
	       "QP states");
_Static_assert(IB_QP_STATE == METAROCE_QP_STATE && IB_QP_CUR_STATE == METAROCE_QP_CUR_STATE &&
		       IB_QP_EN_SQD_ASYNC_NOTIFY == METAROCE_QP_EN_SQD_ASYNC_NOTIFY &&
		       IB_QP_ACCESS_FLAGS == METAROCE_QP_ACCESS_FLAGS &&
		       IB_QP_PKEY_INDEX == METAROCE_QP_PKEY_INDEX && IB_QP_PORT == METAROCE_QP_PORT &&
		       IB_QP_QKEY == METAROCE_QP_QKEY && IB_QP_AV == METAROCE_QP_AV &&
		       IB_QP_PATH_MTU == METAROCE_QP_PATH_MTU && IB_QP_TIMEOUT == METAROCE_QP_TIMEOUT &&
		       IB_QP_RETRY_CNT == METAROCE_QP_RETRY_CNT &&
		       IB_QP_RNR_RETRY == METAROCE_QP_RNR_RETRY && IB_QP_RQ_PSN == METAROCE_QP_RQ_PSN &&
		       IB_QP_MAX_QP_RD_ATOMIC == METAROCE_QP_MAX_QP_RD_ATOMIC &&
		       IB_QP_ALT_PATH == METAROCE_QP_ALT_PATH &&
		       IB_QP_MIN_RNR_TIMER == METAROCE_QP_MIN_RNR_TIMER &&
		       IB_QP_SQ_PSN == METAROCE_QP_SQ_PSN &&
		       IB_QP_MAX_DEST_RD_ATOMIC == METAROCE_QP_MAX_DEST_RD_ATOMIC &&
		       IB_QP_PATH_MIG_STATE == METAROCE_QP_PATH_MIG_STATE && IB_QP_CAP == METAROCE_QP_CAP &&
		       IB_QP_DEST_QPN == METAROCE_QP_DEST_QPN,
	       "QP attribute mask bits");
_Static_assert(IB_ACCESS_LOCAL_WRITE == METAROCE_ACCESS_LOCAL_WRITE &&
		       IB_ACCESS_REMOTE_WRITE == METAROCE_ACCESS_REMOTE_WRITE &&
		       IB_ACCESS_REMOTE_READ == METAROCE_ACCESS_REMOTE_READ &&
		       IB_ACCESS_REMOTE_ATOMIC == METAROCE_ACCESS_REMOTE_ATOMIC &&
		       IB_ACCESS_MW_BIND == METAROCE_ACCESS_MW_BIND,
	       "access flags");
_Static_assert(IB_MTU_256 == METAROCE_IB_MTU_256 && IB_MTU_4096 == METAROCE_IB_MTU_4096, "IB MTUs");

int mroce_qp_transition_check(enum ib_qp_type type, enum ib_qp_state cur, enum ib_qp_state next, int mask)
{
	if (type != IB_QPT_RC && type != IB_QPT_UD)
		return -EINVAL;
	return metaroce_qp_transition_check(type == IB_QPT_UD, cur, next, mask) ? -EINVAL : 0;
}

int mroce_qp_attr_check(const struct ib_qp_attr *attr, int mask)
{
	const struct metaroce_qp_values v = {
		.qp_access_flags = attr->qp_access_flags,
		.pkey_index = attr->pkey_index,
		.port_num = attr->port_num,
		.path_mtu = attr->path_mtu,
		.dest_qp_num = attr->dest_qp_num,
		.rq_psn = attr->rq_psn,
		.sq_psn = attr->sq_psn,
		.timeout = attr->timeout,
		.retry_cnt = attr->retry_cnt,
		.rnr_retry = attr->rnr_retry,
		.min_rnr_timer = attr->min_rnr_timer,
		.max_rd_atomic = attr->max_rd_atomic,
		.max_dest_rd_atomic = attr->max_dest_rd_atomic,
	};

	return metaroce_qp_values_check(&v, mask) ? -EINVAL : 0;
}

int mroce_qp_modify_check(enum ib_qp_type type, enum ib_qp_state record, const struct ib_qp_attr *attr,
			  int mask, enum ib_qp_state *next)
{
	enum ib_qp_state cur = record;
	enum ib_qp_state to;
	int err;

	if (mask & IB_QP_CUR_STATE) {
		if (attr->cur_qp_state != record && attr->cur_qp_state != IB_QPS_ERR)
			return -EINVAL;
		cur = attr->cur_qp_state;
	}
	to = (mask & IB_QP_STATE) ? attr->qp_state : cur;
	err = mroce_qp_transition_check(type, cur, to, mask);
	if (err)
		return err;
	err = mroce_qp_attr_check(attr, mask);
	if (err)
		return err;
	*next = to;
	return 0;
}
