// SPDX-License-Identifier: GPL-2.0-only
/*
 * QP1, the GSI QP of each device, with the kernel CQs and address handles
 * the MAD layer uses with it: the one data path in the kernel, and it
 * carries connection management only (rdma_cm's MADs through ib_cm). User
 * QPs never come here; their data path is the provider's.
 *
 * A send is copied out of the MAD layer's buffers when it is posted (the
 * MAD layer posts with interrupts off) and sent by send_work as one UD
 * datagram (ud_wire.c) on the namespace's GSI socket (gsi_net.c). A
 * datagram for QP1 is copied into the oldest posted receive, behind the
 * GRH that verbs defines for RoCE v2, built from its IP addresses.
 *
 * Every posted work request has its completion slot reserved on its CQ at
 * post time (mroce_cq_slots), so no completion is ever lost to a full CQ.
 * Locks: dev->gsi_lock, then gsi->lock, then cq->lock; all irqsave.
 * Completion handlers are called under the first two (they only schedule
 * work, as the RDMA core's own do).
 */
#include <linux/slab.h>
#include <rdma/ib_mad.h>

#include "mroce.h"

#define MROCE_GSI_SEND_BUDGET 32

static struct rdma_stat_desc mroce_stat_descs[MROCE_STATS];
static const char *const mroce_stat_names[MROCE_STATS - MROCE_UD_VERDICTS] = {
	[MROCE_STAT_RX_NO_RECV - MROCE_UD_VERDICTS] = "gsi_drop_no_recv",
	[MROCE_STAT_RX_NOT_READY - MROCE_UD_VERDICTS] = "gsi_drop_not_ready",
	[MROCE_STAT_RX_BAD_SOURCE - MROCE_UD_VERDICTS] = "gsi_drop_bad_source",
	[MROCE_STAT_TX_MADS - MROCE_UD_VERDICTS] = "gsi_tx_mads",
	[MROCE_STAT_TX_ERRORS - MROCE_UD_VERDICTS] = "gsi_tx_errors",
};

void mroce_gsi_stats_init(void)
{
	int i;

	for (i = 0; i < MROCE_STATS; i++)
		mroce_stat_descs[i].name = i < MROCE_UD_VERDICTS ? mroce_ud_verdict_names[i]
								  : mroce_stat_names[i - MROCE_UD_VERDICTS];
}

static void mroce_stat_inc(struct mroce_dev *dev, int stat)
{
	atomic64_inc(&dev->stats[stat]);
}

static struct rdma_hw_stats *mroce_alloc_hw_port_stats(struct ib_device *ib, u32 port)
{
	return rdma_alloc_hw_stats_struct(mroce_stat_descs, MROCE_STATS, RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

static int mroce_get_hw_stats(struct ib_device *ib, struct rdma_hw_stats *stats, u32 port, int index)
{
	struct mroce_dev *dev = to_mdev(ib);
	int i;

	for (i = 0; i < MROCE_STATS; i++)
		stats->value[i] = atomic64_read(&dev->stats[i]);
	return MROCE_STATS;
}

/* --- kernel CQs ------------------------------------------------------------ */

int mroce_kernel_create_cq(struct mroce_cq *cq, const struct ib_cq_init_attr *attr)
{
	if (attr->cqe < 1 || attr->cqe > MROCE_KERNEL_MAX_CQE)
		return -EINVAL;
	cq->wcs = kvcalloc(attr->cqe, sizeof(*cq->wcs), GFP_KERNEL);
	if (!cq->wcs)
		return -ENOMEM;
	spin_lock_init(&cq->lock);
	mroce_cq_slots_init(&cq->slots, attr->cqe);
	cq->ib.cqe = attr->cqe;
	return 0;
}

void mroce_kernel_destroy_cq(struct mroce_cq *cq)
{
	kvfree(cq->wcs);
	cq->wcs = NULL;
}

static int mroce_kcq_reserve(struct mroce_cq *cq)
{
	unsigned long flags;
	int err;

	spin_lock_irqsave(&cq->lock, flags);
	err = mroce_cq_reserve(&cq->slots);
	spin_unlock_irqrestore(&cq->lock, flags);
	return err;
}

static void mroce_kcq_unreserve(struct mroce_cq *cq)
{
	unsigned long flags;

	spin_lock_irqsave(&cq->lock, flags);
	mroce_cq_unreserve(&cq->slots);
	spin_unlock_irqrestore(&cq->lock, flags);
}

/* Adds the completion of a reserved work request and calls the handler
 * if the CQ was armed. */
static void mroce_kcq_push(struct mroce_cq *cq, const struct ib_wc *wc)
{
	unsigned long flags;
	bool fire = false;
	int slot;

	spin_lock_irqsave(&cq->lock, flags);
	slot = mroce_cq_complete(&cq->slots);
	if (slot >= 0) {
		cq->wcs[slot] = *wc;
		fire = cq->notify == IB_CQ_NEXT_COMP ||
		       (cq->notify == IB_CQ_SOLICITED && wc->status != IB_WC_SUCCESS);
		if (fire)
			cq->notify = 0;
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	WARN_ON_ONCE(slot < 0);	/* a completion without its reservation */
	if (fire && cq->ib.comp_handler)
		cq->ib.comp_handler(&cq->ib, cq->ib.cq_context);
}

/* Takes a destroyed QP's completions off its CQ, so that nobody polls a
 * work request whose QP (and buffers) are gone. */
static void mroce_kcq_clean(struct mroce_cq *cq, const struct ib_qp *qp)
{
	unsigned long flags;
	u32 n;
	int from, to;

	spin_lock_irqsave(&cq->lock, flags);
	for (n = cq->slots.ring.count; n; n--) {
		from = mroce_ring_consume(&cq->slots.ring);
		if (cq->wcs[from].qp == qp)
			continue;
		to = mroce_ring_produce(&cq->slots.ring);
		cq->wcs[to] = cq->wcs[from];
	}
	spin_unlock_irqrestore(&cq->lock, flags);
}

static int mroce_poll_cq(struct ib_cq *ibcq, int num_entries, struct ib_wc *wc)
{
	struct mroce_cq *cq = to_mcq(ibcq);
	unsigned long flags;
	int n, slot;

	if (!cq->wcs)
		return 0;	/* a user CQ: its completions are in user space */
	spin_lock_irqsave(&cq->lock, flags);
	for (n = 0; n < num_entries; n++) {
		slot = mroce_ring_consume(&cq->slots.ring);
		if (slot < 0)
			break;
		wc[n] = cq->wcs[slot];
	}
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

static int mroce_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct mroce_cq *cq = to_mcq(ibcq);
	unsigned long irqflags;
	int missed = 0;

	/*
	 * A user CQ: its completions are made in user space, and the provider
	 * calls this (IB_USER_VERBS_CMD_REQ_NOTIFY_CQ) when an armed CQ got
	 * one, so that uverbs posts the event to the CQ's completion channel.
	 */
	if (!cq->wcs) {
		if (ibcq->comp_handler)
			ibcq->comp_handler(ibcq, ibcq->cq_context);
		return 0;
	}
	spin_lock_irqsave(&cq->lock, irqflags);
	cq->notify = flags & IB_CQ_SOLICITED_MASK;
	if ((flags & IB_CQ_REPORT_MISSED_EVENTS) && cq->slots.ring.count)
		missed = 1;
	spin_unlock_irqrestore(&cq->lock, irqflags);
	return missed;
}

/* --- address handles ---------------------------------------------------------- */

static int mroce_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init, struct ib_udata *udata)
{
	struct mroce_ah *ah = to_mah(ibah);
	const struct rdma_ah_attr *attr = init->ah_attr;
	const struct ib_global_route *grh;

	/* User AHs are the provider's: they never reach the kernel. */
	if (udata)
		return -EOPNOTSUPP;
	if (attr->type != RDMA_AH_ATTR_TYPE_ROCE || !(rdma_ah_get_ah_flags(attr) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(attr);
	if (!grh->sgid_attr)
		return -EINVAL;
	if (mroce_addr_from_gid(grh->dgid.raw, &ah->dst) ||
	    mroce_addr_from_gid(grh->sgid_attr->gid.raw, &ah->src) || ah->src.family != ah->dst.family)
		return -EINVAL;
	return 0;
}

static int mroce_destroy_ah(struct ib_ah *ah, u32 flags)
{
	return 0;
}

/* --- QP1 ------------------------------------------------------------------------ */

static struct mroce_dev *mroce_dev_of(struct mroce_qp *qp)
{
	return to_mdev(qp->ib.device);
}

/* Completes every queued work request with a flush error (to ERR). */
static void mroce_gsi_flush_locked(struct mroce_qp *qp)
{
	struct mroce_gsi *gsi = qp->gsi;
	struct ib_wc wc = { .status = IB_WC_WR_FLUSH_ERR, .qp = &qp->ib };
	int slot;

	while ((slot = mroce_ring_consume(&gsi->rq)) >= 0) {
		wc.wr_id = gsi->recvs[slot].wr_id;
		wc.opcode = IB_WC_RECV;
		mroce_kcq_push(to_mcq(qp->ib.recv_cq), &wc);
	}
	while ((slot = mroce_ring_consume(&gsi->sq)) >= 0) {
		if (!gsi->sends[slot].signaled)
			continue;
		wc.wr_id = gsi->sends[slot].wr_id;
		wc.opcode = IB_WC_SEND;
		mroce_kcq_push(to_mcq(qp->ib.send_cq), &wc);
	}
	gsi->sq_flushes++;
}

/* Forgets every queued work request without a completion (to RESET). */
static void mroce_gsi_drop_locked(struct mroce_qp *qp)
{
	struct mroce_gsi *gsi = qp->gsi;
	int slot;

	while (mroce_ring_consume(&gsi->rq) >= 0)
		mroce_kcq_unreserve(to_mcq(qp->ib.recv_cq));
	while ((slot = mroce_ring_consume(&gsi->sq)) >= 0)
		if (gsi->sends[slot].signaled)
			mroce_kcq_unreserve(to_mcq(qp->ib.send_cq));
	gsi->sq_flushes++;
}

static void mroce_gsi_send_work(struct work_struct *work)
{
	struct mroce_gsi *gsi = container_of(work, struct mroce_gsi, send_work);
	struct mroce_qp *qp = gsi->qp;
	struct mroce_dev *dev = mroce_dev_of(qp);
	struct mroce_addr src, dst;
	unsigned long flags;
	u32 flushes;
	int n, slot, len, err;
	u16 port;

	for (n = 0; n < MROCE_GSI_SEND_BUDGET; n++) {
		const struct mroce_gsi_send *s;

		spin_lock_irqsave(&gsi->lock, flags);
		slot = mroce_ring_peek(&gsi->sq);
		if (slot < 0) {
			spin_unlock_irqrestore(&gsi->lock, flags);
			return;
		}
		s = &gsi->sends[slot];
		len = mroce_ud_encode(gsi->tx, sizeof(gsi->tx), &s->hdr, s->payload, s->len);
		src = s->src;
		dst = s->dst;
		port = mroce_ud_dest_port(s->hdr.dst_qpn, mroce_gsi_port);
		flushes = gsi->sq_flushes;
		spin_unlock_irqrestore(&gsi->lock, flags);

		err = len < 0 ? len : mroce_gsi_net_xmit(dev->gnet, &src, &dst, port, dev->ndev->ifindex, gsi->tx, len);
		if (err) {
			/* UD is unreliable: the MAD layer retries on its timeout. */
			mroce_stat_inc(dev, MROCE_STAT_TX_ERRORS);
			pr_debug_ratelimited("metaroce: %s: GSI send to port %u failed: %d\n",
					     dev_name(&dev->ib.dev), port, err);
		} else {
			mroce_stat_inc(dev, MROCE_STAT_TX_MADS);
		}

		spin_lock_irqsave(&gsi->lock, flags);
		/* Unless a flush or reset took the queue meanwhile. */
		if (gsi->sq_flushes == flushes) {
			slot = mroce_ring_consume(&gsi->sq);
			if (gsi->sends[slot].signaled) {
				struct ib_wc wc = {
					.wr_id = gsi->sends[slot].wr_id,
					.status = IB_WC_SUCCESS,
					.opcode = IB_WC_SEND,
					.qp = &qp->ib,
					.port_num = 1,
				};

				mroce_kcq_push(to_mcq(qp->ib.send_cq), &wc);
			}
		}
		spin_unlock_irqrestore(&gsi->lock, flags);
	}
	queue_work(mroce_wq, &gsi->send_work);
}

static int mroce_gsi_post_send_one(struct mroce_qp *qp, const struct ib_send_wr *wr)
{
	struct mroce_gsi *gsi = qp->gsi;
	const struct ib_ud_wr *ud = ud_wr(wr);
	struct mroce_gsi_send *s;
	struct mroce_ah *ah;
	u32 total = 0;
	bool signaled;
	int i, slot, err;

	if (gsi->state != IB_QPS_RTS)
		return -EINVAL;
	if (wr->opcode != IB_WR_SEND && wr->opcode != IB_WR_SEND_WITH_IMM)
		return -EINVAL;
	if (wr->num_sge < 0 || wr->num_sge > qp->cap.max_send_sge || !ud->ah || ud->remote_qpn > MROCE_QPN_MAX)
		return -EINVAL;
	for (i = 0; i < wr->num_sge; i++) {
		if (wr->sg_list[i].lkey != MROCE_LOCAL_DMA_LKEY || wr->sg_list[i].length > MROCE_MAD_SIZE - total)
			return -EINVAL;
		total += wr->sg_list[i].length;
	}
	/* QP1 carries MADs: its peer accepts exactly one per datagram. */
	if (total != MROCE_MAD_SIZE)
		return -EINVAL;
	ah = to_mah(ud->ah);

	signaled = gsi->sq_sig_all || (wr->send_flags & IB_SEND_SIGNALED);
	if (signaled) {
		err = mroce_kcq_reserve(to_mcq(qp->ib.send_cq));
		if (err)
			return err;
	}
	slot = mroce_ring_produce(&gsi->sq);
	if (slot < 0) {
		if (signaled)
			mroce_kcq_unreserve(to_mcq(qp->ib.send_cq));
		return slot;
	}
	s = &gsi->sends[slot];
	s->wr_id = wr->wr_id;
	s->signaled = signaled;
	s->src = ah->src;
	s->dst = ah->dst;
	s->hdr = (struct mroce_ud_hdr){
		.home_port = mroce_gsi_port,
		.src_epoch = mroce_dev_of(qp)->epoch,
		.dst_qpn = ud->remote_qpn,
		.src_qpn = qp->ib.qp_num,
		.qkey = mroce_ud_send_qkey(ud->remote_qkey, gsi->qkey),
		.imm = wr->opcode == IB_WR_SEND_WITH_IMM ? be32_to_cpu(wr->ex.imm_data) : 0,
		.flags = wr->opcode == IB_WR_SEND_WITH_IMM ? MROCE_UD_FLAG_IMM : 0,
	};
	s->len = total;
	for (i = 0, total = 0; i < wr->num_sge; i++) {
		memcpy(s->payload + total, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
		total += wr->sg_list[i].length;
	}
	return 0;
}

static int mroce_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr, const struct ib_send_wr **bad_wr)
{
	struct mroce_qp *qp = to_mqp(ibqp);
	unsigned long flags;
	int err = 0, posted = 0;

	/* A user QP: its data path is in user space. */
	if (!qp->gsi) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	spin_lock_irqsave(&qp->gsi->lock, flags);
	for (; wr; wr = wr->next, posted++) {
		err = mroce_gsi_post_send_one(qp, wr);
		if (err) {
			*bad_wr = wr;
			break;
		}
	}
	spin_unlock_irqrestore(&qp->gsi->lock, flags);
	if (posted)
		queue_work(mroce_wq, &qp->gsi->send_work);
	return err;
}

static int mroce_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr, const struct ib_recv_wr **bad_wr)
{
	struct mroce_qp *qp = to_mqp(ibqp);
	struct mroce_gsi *gsi = qp->gsi;
	unsigned long flags;
	int err = 0, slot;

	if (!gsi) {
		*bad_wr = wr;
		return -EOPNOTSUPP;
	}
	spin_lock_irqsave(&gsi->lock, flags);
	for (; wr; wr = wr->next) {
		err = -EINVAL;
		if (gsi->state == IB_QPS_RESET || gsi->state == IB_QPS_ERR)
			break;
		if (wr->num_sge != 1 || wr->sg_list[0].lkey != MROCE_LOCAL_DMA_LKEY)
			break;
		err = mroce_kcq_reserve(to_mcq(qp->ib.recv_cq));
		if (err)
			break;
		slot = mroce_ring_produce(&gsi->rq);
		if (slot < 0) {
			mroce_kcq_unreserve(to_mcq(qp->ib.recv_cq));
			err = slot;
			break;
		}
		gsi->recvs[slot] = (struct mroce_gsi_recv){
			.wr_id = wr->wr_id,
			.addr = wr->sg_list[0].addr,
			.length = wr->sg_list[0].length,
		};
		err = 0;
	}
	spin_unlock_irqrestore(&gsi->lock, flags);
	if (err)
		*bad_wr = wr;
	return err;
}

/* Into the oldest posted receive: the GRH, then the MAD. The statistic
 * to count. */
static int mroce_gsi_receive(struct mroce_dev *dev, const struct mroce_addr *src, const struct mroce_addr *dst,
			     const struct mroce_ud_hdr *hdr, const u8 *mad)
{
	u8 grh[MROCE_GRH_LEN];
	struct mroce_gsi *gsi;
	struct mroce_qp *qp;
	struct ib_wc wc = {};
	unsigned long flags;
	int net_type, slot, stat = MROCE_UD_OK;
	const struct mroce_gsi_recv *r;

	net_type = mroce_gsi_build_grh(grh, src, dst, sizeof(struct udphdr) + MROCE_GSI_DATAGRAM_LEN);
	spin_lock_irqsave(&dev->gsi_lock, flags);
	qp = dev->gsi_qp;
	if (!qp) {
		stat = MROCE_STAT_RX_NOT_READY;
		goto unlock_dev;
	}
	gsi = qp->gsi;
	spin_lock(&gsi->lock);
	if (gsi->state != IB_QPS_RTR && gsi->state != IB_QPS_RTS) {
		stat = MROCE_STAT_RX_NOT_READY;
		goto unlock;
	}
	slot = mroce_ring_consume(&gsi->rq);
	if (slot < 0) {
		stat = MROCE_STAT_RX_NO_RECV;
		goto unlock;
	}
	r = &gsi->recvs[slot];
	wc.wr_id = r->wr_id;
	wc.opcode = IB_WC_RECV;
	wc.qp = &qp->ib;
	wc.port_num = 1;
	if (r->length < MROCE_GRH_LEN + MROCE_MAD_SIZE) {
		wc.status = IB_WC_LOC_LEN_ERR;
	} else {
		memcpy((void *)(uintptr_t)r->addr, grh, MROCE_GRH_LEN);
		memcpy((u8 *)(uintptr_t)r->addr + MROCE_GRH_LEN, mad, MROCE_MAD_SIZE);
		wc.status = IB_WC_SUCCESS;
		wc.byte_len = MROCE_GRH_LEN + MROCE_MAD_SIZE;
		wc.src_qp = hdr->src_qpn;
		wc.wc_flags = IB_WC_GRH | IB_WC_WITH_NETWORK_HDR_TYPE;
		wc.network_hdr_type = net_type;
		if (hdr->flags & MROCE_UD_FLAG_IMM) {
			wc.wc_flags |= IB_WC_WITH_IMM;
			wc.ex.imm_data = cpu_to_be32(hdr->imm);
		}
	}
	mroce_kcq_push(to_mcq(qp->ib.recv_cq), &wc);
unlock:
	spin_unlock(&gsi->lock);
unlock_dev:
	spin_unlock_irqrestore(&dev->gsi_lock, flags);
	return stat;
}

int mroce_gsi_deliver(struct mroce_gsi_net *g, const struct mroce_addr *src, const struct mroce_addr *dst,
		      const u8 *buf, int len)
{
	union ib_gid dgid, sgid;
	struct mroce_addr checked;
	struct mroce_ud_hdr hdr;
	struct mroce_dev *dev;
	size_t off = 0, payload_len = 0;
	int stat;

	mroce_gid_from_addr(dst, dgid.raw);
	dev = mroce_find_by_gid(g, &dgid);
	if (!dev)
		return -ENODEV;
	/* Longer than one MAD's datagram: not for QP1, whatever it holds
	 * (the CRC covers bytes buf does not have). */
	if (len > MROCE_GSI_DATAGRAM_LEN)
		stat = MROCE_UD_BAD_LENGTH;
	else
		stat = mroce_ud_decode(buf, len, &hdr, &off, &payload_len);
	if (stat == MROCE_UD_OK)
		stat = mroce_gsi_check(&hdr, payload_len);
	mroce_gid_from_addr(src, sgid.raw);
	/* A reply must not go to a multicast or unspecified address. */
	if (stat == MROCE_UD_OK && mroce_addr_from_gid(sgid.raw, &checked))
		stat = MROCE_STAT_RX_BAD_SOURCE;
	if (stat == MROCE_UD_OK)
		stat = mroce_gsi_receive(dev, src, dst, &hdr, buf + off);
	mroce_stat_inc(dev, stat);
	ib_device_put(&dev->ib);
	return 0;
}

int mroce_gsi_create_qp(struct mroce_qp *qp, struct ib_qp_init_attr *init)
{
	struct mroce_dev *dev = mroce_dev_of(qp);
	struct ib_qp_cap *cap = &init->cap;
	struct mroce_gsi *gsi;
	unsigned long flags;
	int err = -ENOMEM;

	if (init->port_num != 1 || init->srq || init->create_flags)
		return -EINVAL;
	if (!cap->max_send_wr || cap->max_send_wr > MROCE_GSI_MAX_WR || !cap->max_recv_wr ||
	    cap->max_recv_wr > MROCE_GSI_MAX_WR || cap->max_send_sge > MROCE_GSI_MAX_SEND_SGE ||
	    cap->max_recv_sge > MROCE_GSI_MAX_RECV_SGE || cap->max_inline_data)
		return -EINVAL;
	gsi = kzalloc(sizeof(*gsi), GFP_KERNEL);
	if (!gsi)
		return -ENOMEM;
	gsi->sends = kvcalloc(cap->max_send_wr, sizeof(*gsi->sends), GFP_KERNEL);
	gsi->recvs = kvcalloc(cap->max_recv_wr, sizeof(*gsi->recvs), GFP_KERNEL);
	if (!gsi->sends || !gsi->recvs)
		goto free;
	spin_lock_init(&gsi->lock);
	gsi->qp = qp;
	gsi->state = IB_QPS_RESET;
	gsi->sq_sig_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	mroce_ring_init(&gsi->sq, cap->max_send_wr);
	mroce_ring_init(&gsi->rq, cap->max_recv_wr);
	INIT_WORK(&gsi->send_work, mroce_gsi_send_work);
	cap->max_send_sge = MROCE_GSI_MAX_SEND_SGE;
	cap->max_recv_sge = MROCE_GSI_MAX_RECV_SGE;
	qp->cap = *cap;
	qp->gsi = gsi;
	qp->ib.qp_num = MROCE_GSI_QPN;

	err = -EBUSY;	/* one QP1 per port */
	spin_lock_irqsave(&dev->gsi_lock, flags);
	if (!dev->gsi_qp) {
		dev->gsi_qp = qp;
		err = 0;
	}
	spin_unlock_irqrestore(&dev->gsi_lock, flags);
	if (!err)
		return 0;
	qp->gsi = NULL;
free:
	kvfree(gsi->sends);
	kvfree(gsi->recvs);
	kfree(gsi);
	return err;
}

int mroce_gsi_modify_qp(struct mroce_qp *qp, struct ib_qp_attr *attr, int mask)
{
	struct mroce_gsi *gsi = qp->gsi;
	enum ib_qp_state next;
	unsigned long flags;
	int err;

	spin_lock_irqsave(&gsi->lock, flags);
	err = mroce_gsi_modify_check(gsi->state, attr, mask, &next);
	if (!err) {
		if (mask & IB_QP_QKEY)
			gsi->qkey = attr->qkey;
		if (mask & IB_QP_SQ_PSN)
			qp->sq_psn = attr->sq_psn;
		if (next == IB_QPS_ERR && gsi->state != IB_QPS_ERR)
			mroce_gsi_flush_locked(qp);
		else if (next == IB_QPS_RESET)
			mroce_gsi_drop_locked(qp);
		gsi->state = next;
	}
	spin_unlock_irqrestore(&gsi->lock, flags);
	return err;
}

void mroce_gsi_query_qp(struct mroce_qp *qp, struct ib_qp_attr *attr)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->gsi->lock, flags);
	attr->qp_state = qp->gsi->state;
	attr->cur_qp_state = qp->gsi->state;
	attr->qkey = qp->gsi->qkey;
	attr->sq_psn = qp->sq_psn;
	spin_unlock_irqrestore(&qp->gsi->lock, flags);
	attr->port_num = 1;
	attr->cap = qp->cap;
}

void mroce_gsi_destroy_qp(struct mroce_qp *qp)
{
	struct mroce_dev *dev = mroce_dev_of(qp);
	struct mroce_gsi *gsi = qp->gsi;
	unsigned long flags;

	/* No datagram reaches the QP once this returns. */
	spin_lock_irqsave(&dev->gsi_lock, flags);
	if (dev->gsi_qp == qp)
		dev->gsi_qp = NULL;
	spin_unlock_irqrestore(&dev->gsi_lock, flags);
	spin_lock_irqsave(&gsi->lock, flags);
	mroce_gsi_drop_locked(qp);
	gsi->state = IB_QPS_RESET;
	spin_unlock_irqrestore(&gsi->lock, flags);
	cancel_work_sync(&gsi->send_work);
	mroce_kcq_clean(to_mcq(qp->ib.send_cq), &qp->ib);
	if (qp->ib.recv_cq != qp->ib.send_cq)
		mroce_kcq_clean(to_mcq(qp->ib.recv_cq), &qp->ib);
	kvfree(gsi->sends);
	kvfree(gsi->recvs);
	kfree(gsi);
	qp->gsi = NULL;
}

const struct ib_device_ops mroce_gsi_ops = {
	.post_send = mroce_post_send,
	.post_recv = mroce_post_recv,
	.poll_cq = mroce_poll_cq,
	.req_notify_cq = mroce_req_notify_cq,
	.create_ah = mroce_create_ah,
	.destroy_ah = mroce_destroy_ah,
	.alloc_hw_port_stats = mroce_alloc_hw_port_stats,
	.get_hw_stats = mroce_get_hw_stats,

	INIT_RDMA_OBJ_SIZE(ib_ah, mroce_ah, ib),
};
