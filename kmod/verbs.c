// SPDX-License-Identifier: GPL-2.0-only
/*
 * User contexts, PDs, CQs and QPs: kernel objects so that the device is a
 * real uverbs device (numbering, state of record, cleanup when a process
 * dies), with no data path behind them. Kernel consumers get PDs, CQs and
 * QP1, the GSI QP of the MAD layer (gsi.c); any other kernel QP (a ULP's)
 * is refused: there is nobody in the kernel to move its packets.
 */
#include <rdma/uverbs_ioctl.h>

#include "mroce.h"

/* Port slots are unique on the host, across all metaroce devices, so that
 * QP numbers (slot << 12 | index) are too. */
static DEFINE_SPINLOCK(mroce_slots_lock);
static struct mroce_id_pool mroce_slots;

int mroce_slots_init(void)
{
	mroce_id_pool_init(&mroce_slots, METAROCE_SLOT_MIN, METAROCE_SLOT_MAX);
	return 0;
}

void mroce_slots_check_empty(void)
{
	if (mroce_slots.count)
		pr_err("metaroce: %u port slots still in use at unload\n", mroce_slots.count);
}

/* For commands whose driver data is empty: anything but zeros is from a
 * provider that expects a newer kernel. */
static int mroce_udata_empty(struct ib_udata *udata)
{
	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EOPNOTSUPP;
	return 0;
}

static int mroce_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata)
{
	struct mroce_ucontext *uc = to_muctx(ibuc);
	struct metaroce_alloc_ucontext_req req = {};
	struct metaroce_alloc_ucontext_resp resp;
	bool have_req = udata->inlen >= sizeof(req);
	bool tail_clear = true;
	int err, slot;

	if (have_req && ib_copy_from_udata(&req, udata, sizeof(req)))
		return -EFAULT;
	if (udata->inlen > sizeof(req))
		tail_clear = ib_is_udata_cleared(udata, sizeof(req), udata->inlen - sizeof(req));
	err = mroce_abi_ucontext_check(udata->inlen, udata->outlen, have_req ? &req : NULL, tail_clear);
	if (err) {
		pr_info_ratelimited("metaroce: context refused (request %zu bytes, version %u, response %zu bytes): %d\n",
				    udata->inlen, req.abi_version, udata->outlen, err);
		return err;
	}

	spin_lock(&mroce_slots_lock);
	slot = mroce_id_alloc(&mroce_slots);
	spin_unlock(&mroce_slots_lock);
	if (slot < 0)
		return slot;
	uc->slot = slot;
	spin_lock_init(&uc->lock);
	mroce_id_pool_init(&uc->qp_ids, METAROCE_QP_INDEX_MIN, METAROCE_QP_INDEX_MAX);

	mroce_abi_ucontext_resp(&resp, uc->slot, ibuc->device->node_guid);
	err = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (err) {
		spin_lock(&mroce_slots_lock);
		mroce_id_free(&mroce_slots, uc->slot);
		spin_unlock(&mroce_slots_lock);
	}
	return err;
}

static void mroce_dealloc_ucontext(struct ib_ucontext *ibuc)
{
	struct mroce_ucontext *uc = to_muctx(ibuc);

	spin_lock(&mroce_slots_lock);
	mroce_id_free(&mroce_slots, uc->slot);
	spin_unlock(&mroce_slots_lock);
}

/* Nothing is mapped into user space: after the device goes away the
 * process simply gets EIO from uverbs. Having this op lets unregistration
 * proceed while contexts are open instead of waiting for them to close. */
static void mroce_disassociate_ucontext(struct ib_ucontext *ibuc)
{
}

static int mroce_alloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	/* A kernel PD (the MAD layer's) uses MROCE_LOCAL_DMA_LKEY. */
	if (!udata)
		return 0;
	return mroce_udata_empty(udata);
}

static int mroce_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
	return 0;
}

static int mroce_create_cq(struct ib_cq *cq, const struct ib_cq_init_attr *attr, struct ib_udata *udata)
{
	if (attr->flags)
		return -EOPNOTSUPP;
	if (!udata)
		return mroce_kernel_create_cq(to_mcq(cq), attr);
	if (attr->cqe < 1 || attr->cqe > METAROCE_MAX_CQE)
		return -EINVAL;
	cq->cqe = attr->cqe;
	return mroce_udata_empty(udata);
}

static int mroce_destroy_cq(struct ib_cq *cq, struct ib_udata *udata)
{
	if (!udata)
		mroce_kernel_destroy_cq(to_mcq(cq));
	return 0;
}

static int mroce_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
	struct mroce_qp *qp = to_mqp(ibqp);
	struct mroce_ucontext *uc;
	const struct ib_qp_cap *cap = &init->cap;
	int err, index;

	if (!udata) {
		if (init->qp_type != IB_QPT_GSI)
			return -EOPNOTSUPP;
		err = mroce_gsi_create_qp(qp, init);
		if (!err) {
			qp->state = IB_QPS_RESET;
			mutex_init(&qp->lock);
		}
		return err;
	}
	/* SRQs live in the provider: it creates SRQ-attached QPs without one here. */
	if ((init->qp_type != IB_QPT_RC && init->qp_type != IB_QPT_UD) || init->srq || init->create_flags ||
	    init->xrcd)
		return -EOPNOTSUPP;
	if (cap->max_send_wr > METAROCE_MAX_QP_WR || cap->max_recv_wr > METAROCE_MAX_QP_WR ||
	    cap->max_send_sge > METAROCE_MAX_SGE || cap->max_recv_sge > METAROCE_MAX_SGE ||
	    cap->max_inline_data > METAROCE_MAX_INLINE_DATA)
		return -EINVAL;
	err = mroce_udata_empty(udata);
	if (err)
		return err;

	uc = rdma_udata_to_drv_context(udata, struct mroce_ucontext, ib);
	spin_lock(&uc->lock);
	index = mroce_id_alloc(&uc->qp_ids);
	spin_unlock(&uc->lock);
	if (index < 0)
		return index;
	qp->uctx = uc;
	qp->index = index;
	qp->state = IB_QPS_RESET;
	qp->path_mtu = IB_MTU_4096;
	qp->cap = *cap;
	mutex_init(&qp->lock);
	ibqp->qp_num = mroce_qpn(uc->slot, index);
	return 0;
}

static int mroce_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask, struct ib_udata *udata)
{
	struct mroce_qp *qp = to_mqp(ibqp);
	enum ib_qp_state next;
	int err;

	if (qp->gsi)
		return mroce_gsi_modify_qp(qp, attr, mask);
	if (udata) {
		err = mroce_udata_empty(udata);
		if (err)
			return err;
	}
	mutex_lock(&qp->lock);
	err = mroce_qp_modify_check(ibqp->qp_type, qp->state, attr, mask, &next);
	if (!err) {
		qp->state = next;
		if (mask & IB_QP_DEST_QPN)
			qp->dest_qp_num = attr->dest_qp_num;
		if (mask & IB_QP_RQ_PSN)
			qp->rq_psn = attr->rq_psn;
		if (mask & IB_QP_SQ_PSN)
			qp->sq_psn = attr->sq_psn;
		if (mask & IB_QP_PATH_MTU)
			qp->path_mtu = attr->path_mtu;
		if (mask & IB_QP_ACCESS_FLAGS)
			qp->access = attr->qp_access_flags;
		if (mask & IB_QP_QKEY)
			qp->qkey = attr->qkey;
	}
	mutex_unlock(&qp->lock);
	return err;
}

/* The state of record and the attributes kept for it: what `rdma resource
 * show qp` (and ibv_query_qp through the kernel) can learn here. The engine
 * in user space knows the rest. */
static int mroce_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
			  struct ib_qp_init_attr *init)
{
	struct mroce_qp *qp = to_mqp(ibqp);

	memset(attr, 0, sizeof(*attr));
	memset(init, 0, sizeof(*init));
	if (qp->gsi) {
		mroce_gsi_query_qp(qp, attr);
		goto init;
	}
	mutex_lock(&qp->lock);
	attr->qp_state = qp->state;
	attr->cur_qp_state = qp->state;
	attr->path_mtu = qp->path_mtu;
	attr->path_mig_state = IB_MIG_MIGRATED;
	attr->dest_qp_num = qp->dest_qp_num;
	attr->rq_psn = qp->rq_psn;
	attr->sq_psn = qp->sq_psn;
	attr->qp_access_flags = qp->access;
	attr->qkey = qp->qkey;
	attr->port_num = 1;
	attr->cap = qp->cap;
	mutex_unlock(&qp->lock);
init:
	init->qp_type = ibqp->qp_type;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->cap = attr->cap;
	init->sq_sig_type = IB_SIGNAL_REQ_WR;
	return 0;
}

static int mroce_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct mroce_qp *qp = to_mqp(ibqp);

	if (qp->gsi) {
		mroce_gsi_destroy_qp(qp);
		mutex_destroy(&qp->lock);
		return 0;
	}
	spin_lock(&qp->uctx->lock);
	mroce_id_free(&qp->uctx->qp_ids, qp->index);
	spin_unlock(&qp->uctx->lock);
	mutex_destroy(&qp->lock);
	return 0;
}

static struct ib_mr *mroce_get_dma_mr(struct ib_pd *pd, int access)
{
	return ERR_PTR(-EOPNOTSUPP);
}

/* Memory regions live in the provider (it checks every remote access
 * itself); nothing is pinned. */
static struct ib_mr *mroce_reg_user_mr(struct ib_pd *pd, u64 start, u64 length, u64 virt, int access,
				       struct ib_udata *udata)
{
	return ERR_PTR(-EOPNOTSUPP);
}

static int mroce_dereg_mr(struct ib_mr *mr, struct ib_udata *udata)
{
	return 0;
}

const struct ib_device_ops mroce_verbs_ops = {
	.alloc_ucontext = mroce_alloc_ucontext,
	.dealloc_ucontext = mroce_dealloc_ucontext,
	.disassociate_ucontext = mroce_disassociate_ucontext,
	.alloc_pd = mroce_alloc_pd,
	.dealloc_pd = mroce_dealloc_pd,
	.create_cq = mroce_create_cq,
	.destroy_cq = mroce_destroy_cq,
	.create_qp = mroce_create_qp,
	.modify_qp = mroce_modify_qp,
	.query_qp = mroce_query_qp,
	.destroy_qp = mroce_destroy_qp,
	.get_dma_mr = mroce_get_dma_mr,
	.reg_user_mr = mroce_reg_user_mr,
	.dereg_mr = mroce_dereg_mr,

	INIT_RDMA_OBJ_SIZE(ib_ucontext, mroce_ucontext, ib),
	INIT_RDMA_OBJ_SIZE(ib_pd, mroce_pd, ib),
	INIT_RDMA_OBJ_SIZE(ib_cq, mroce_cq, ib),
	INIT_RDMA_OBJ_SIZE(ib_qp, mroce_qp, ib),
};
