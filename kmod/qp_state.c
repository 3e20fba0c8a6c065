// SPDX-License-Identifier: GPL-2.0-only
/*
 * The RC and UD QP state machines that modify_qp enforces. The kernel keeps the
 * state of record for every user QP so that a provider bug or a hostile
 * program cannot walk a QP through transitions verbs forbid; the provider
 * applies the same rules before it asks.
 */
#include "mroce_logic.h"

struct mroce_transition {
	bool valid;
	int required;
	int optional;
};

/* UD: a Q_Key instead of access flags, no peer, no RC timers. */
static struct mroce_transition mroce_ud_transition(enum ib_qp_state cur, enum ib_qp_state next)
{
	struct mroce_transition t = { false, 0, 0 };

	switch (cur) {
	case IB_QPS_RESET:
		if (next == IB_QPS_INIT) {
			t.valid = true;
			t.required = IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY;
		}
		break;
	case IB_QPS_INIT:
		if (next == IB_QPS_INIT) {
			t.valid = true;
			t.optional = IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_QKEY;
		} else if (next == IB_QPS_RTR) {
			t.valid = true;
			t.optional = IB_QP_PKEY_INDEX | IB_QP_QKEY;
		}
		break;
	case IB_QPS_RTR:
		if (next == IB_QPS_RTS) {
			t.valid = true;
			t.required = IB_QP_SQ_PSN;
			t.optional = IB_QP_QKEY;
		}
		break;
	case IB_QPS_RTS:
		if (next == IB_QPS_RTS) {
			t.valid = true;
			t.optional = IB_QP_QKEY;
		}
		break;
	default:
		break;
	}
	return t;
}

static struct mroce_transition mroce_transition(enum ib_qp_type type, enum ib_qp_state cur,
						enum ib_qp_state next)
{
	struct mroce_transition t = { false, 0, 0 };

	if (cur > IB_QPS_ERR || next > IB_QPS_ERR || (type != IB_QPT_RC && type != IB_QPT_UD))
		return t;
	/* Any state may go to RESET or ERR. */
	if (next == IB_QPS_RESET || next == IB_QPS_ERR) {
		if (cur == IB_QPS_SQD || cur == IB_QPS_SQE)
			return t;
		t.valid = true;
		return t;
	}
	if (type == IB_QPT_UD)
		return mroce_ud_transition(cur, next);
	switch (cur) {
	case IB_QPS_RESET:
		if (next == IB_QPS_INIT) {
			t.valid = true;
			t.required = IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_ACCESS_FLAGS;
		}
		break;
	case IB_QPS_INIT:
		if (next == IB_QPS_INIT) {
			t.valid = true;
			t.optional = IB_QP_PKEY_INDEX | IB_QP_PORT | IB_QP_ACCESS_FLAGS;
		} else if (next == IB_QPS_RTR) {
			t.valid = true;
			t.required = IB_QP_AV | IB_QP_PATH_MTU | IB_QP_DEST_QPN | IB_QP_RQ_PSN |
				     IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER;
			t.optional = IB_QP_ALT_PATH | IB_QP_ACCESS_FLAGS | IB_QP_PKEY_INDEX;
		}
		break;
	case IB_QPS_RTR:
		if (next == IB_QPS_RTS) {
			t.valid = true;
			t.required = IB_QP_SQ_PSN | IB_QP_TIMEOUT | IB_QP_RETRY_CNT | IB_QP_RNR_RETRY |
				     IB_QP_MAX_QP_RD_ATOMIC;
			t.optional = IB_QP_ALT_PATH | IB_QP_ACCESS_FLAGS | IB_QP_MIN_RNR_TIMER |
				     IB_QP_PATH_MIG_STATE;
		}
		break;
	case IB_QPS_RTS:
		if (next == IB_QPS_RTS) {
			t.valid = true;
			t.optional = IB_QP_ACCESS_FLAGS | IB_QP_ALT_PATH | IB_QP_PATH_MIG_STATE |
				     IB_QP_MIN_RNR_TIMER;
		}
		break;
	default:
		break;	/* SQD, SQE: not supported */
	}
	return t;
}

int mroce_qp_transition_check(enum ib_qp_type type, enum ib_qp_state cur, enum ib_qp_state next, int mask)
{
	const struct mroce_transition t = mroce_transition(type, cur, next);
	const int given = mask & ~(IB_QP_STATE | IB_QP_CUR_STATE);

	if (!t.valid)
		return -EINVAL;
	if ((given & t.required) != t.required)
		return -EINVAL;
	if (given & ~(t.required | t.optional))
		return -EINVAL;
	return 0;
}

int mroce_qp_attr_check(const struct ib_qp_attr *attr, int mask)
{
	const int access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
			   IB_ACCESS_REMOTE_ATOMIC | IB_ACCESS_MW_BIND;

	if ((mask & IB_QP_PORT) && attr->port_num != 1)
		return -EINVAL;
	if ((mask & IB_QP_PKEY_INDEX) && attr->pkey_index != 0)
		return -EINVAL;
	if ((mask & IB_QP_ACCESS_FLAGS) && (attr->qp_access_flags & ~access))
		return -EINVAL;
	if ((mask & IB_QP_PATH_MTU) && (attr->path_mtu < IB_MTU_256 || attr->path_mtu > IB_MTU_4096))
		return -EINVAL;
	/* A peer QP with index 0 has no home port: see abi.h. */
	if ((mask & IB_QP_DEST_QPN) &&
	    (attr->dest_qp_num > 0xffffff ||
	     (attr->dest_qp_num & ((1u << METAROCE_QPN_INDEX_BITS) - 1)) == 0))
		return -EINVAL;
	if ((mask & IB_QP_RQ_PSN) && attr->rq_psn > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_SQ_PSN) && attr->sq_psn > 0xffffff)
		return -EINVAL;
	if ((mask & IB_QP_TIMEOUT) && attr->timeout > 31)
		return -EINVAL;
	if ((mask & IB_QP_RETRY_CNT) && attr->retry_cnt > 7)
		return -EINVAL;
	if ((mask & IB_QP_RNR_RETRY) && attr->rnr_retry > 7)
		return -EINVAL;
	if ((mask & IB_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
		return -EINVAL;
	return 0;
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
