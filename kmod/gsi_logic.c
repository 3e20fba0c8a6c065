// SPDX-License-Identifier: GPL-2.0-only
/*
 * The GSI QP's logic without locks or memory: its rings and the CQ slots
 * reserved for posted work, what an address handle's GIDs mean on the
 * wire, the receive buffer's GRH, and the QP1 state machine.
 */
#include "mroce_logic.h"

void mroce_ring_init(struct mroce_ring *ring, u32 size)
{
	ring->size = size;
	ring->head = 0;
	ring->count = 0;
}

int mroce_ring_produce(struct mroce_ring *ring)
{
	u32 slot;

	if (ring->count >= ring->size)
		return -ENOMEM;
	slot = ring->head + ring->count;
	if (slot >= ring->size)
		slot -= ring->size;
	ring->count++;
	return (int)slot;
}

int mroce_ring_peek(const struct mroce_ring *ring)
{
	return ring->count ? (int)ring->head : -ENOENT;
}

int mroce_ring_consume(struct mroce_ring *ring)
{
	u32 slot = ring->head;

	if (!ring->count)
		return -ENOENT;
	ring->head = slot + 1 == ring->size ? 0 : slot + 1;
	ring->count--;
	return (int)slot;
}

void mroce_cq_slots_init(struct mroce_cq_slots *cq, u32 size)
{
	mroce_ring_init(&cq->ring, size);
	cq->reserved = 0;
}

int mroce_cq_reserve(struct mroce_cq_slots *cq)
{
	if (cq->ring.count + cq->reserved >= cq->ring.size)
		return -ENOMEM;
	cq->reserved++;
	return 0;
}

void mroce_cq_unreserve(struct mroce_cq_slots *cq)
{
	if (cq->reserved)
		cq->reserved--;
}

int mroce_cq_complete(struct mroce_cq_slots *cq)
{
	if (!cq->reserved)
		return -ENOSPC;
	cq->reserved--;
	return mroce_ring_produce(&cq->ring);
}

static const u8 mroce_v4_mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

int mroce_addr_from_gid(const u8 gid[16], struct mroce_addr *addr)
{
	static const u8 zero[16];

	memset(addr, 0, sizeof(*addr));
	if (!memcmp(gid, mroce_v4_mapped_prefix, sizeof(mroce_v4_mapped_prefix))) {
		const u8 *v4 = gid + 12;

		/* 0.0.0.0 and 224.0.0.0/4 (multicast, 240/4 reserved) */
		if (!memcmp(v4, zero, 4) || v4[0] >= 224)
			return -EINVAL;
		addr->family = MROCE_IPV4;
		memcpy(addr->ip, v4, 4);
		return 0;
	}
	if (!memcmp(gid, zero, 16) || gid[0] == 0xff)
		return -EINVAL;
	addr->family = MROCE_IPV6;
	memcpy(addr->ip, gid, 16);
	return 0;
}

void mroce_gid_from_addr(const struct mroce_addr *addr, u8 gid[16])
{
	if (addr->family == MROCE_IPV4) {
		memcpy(gid, mroce_v4_mapped_prefix, sizeof(mroce_v4_mapped_prefix));
		memcpy(gid + 12, addr->ip, 4);
	} else {
		memcpy(gid, addr->ip, 16);
	}
}

u16 mroce_ud_dest_port(u32 dst_qpn, u16 gsi_port)
{
	if (dst_qpn == MROCE_GSI_QPN)
		return gsi_port;
	return (u16)(METAROCE_HOME_PORT_BASE + (dst_qpn >> METAROCE_QPN_INDEX_BITS));
}

u32 mroce_ud_send_qkey(u32 wr_qkey, u32 qp_qkey)
{
	return (wr_qkey & 0x80000000u) ? qp_qkey : wr_qkey;
}

int mroce_gsi_build_grh(u8 grh[MROCE_GRH_LEN], const struct mroce_addr *src, const struct mroce_addr *dst,
			u16 payload_len)
{
	enum { IP_VERSION_IHL = 0x45, IP_DONT_FRAGMENT = 0x4000, HOP_LIMIT = 64, PROTO_UDP = 17 };
	u8 *ip4 = grh + 20;
	__sum16 check;

	memset(grh, 0, MROCE_GRH_LEN);
	if (src->family == MROCE_IPV6) {
		put_unaligned_be32(6u << 28, grh);
		put_unaligned_be16(payload_len, grh + 4);
		grh[6] = PROTO_UDP;
		grh[7] = HOP_LIMIT;
		memcpy(grh + 8, src->ip, 16);
		memcpy(grh + 24, dst->ip, 16);
		return RDMA_NETWORK_IPV6;
	}
	ip4[0] = IP_VERSION_IHL;
	put_unaligned_be16(20 + payload_len, ip4 + 2);
	put_unaligned_be16(IP_DONT_FRAGMENT, ip4 + 6);
	ip4[8] = HOP_LIMIT;
	ip4[9] = PROTO_UDP;
	memcpy(ip4 + 12, src->ip, 4);
	memcpy(ip4 + 16, dst->ip, 4);
	check = ip_fast_csum(ip4, 5);
	memcpy(ip4 + 10, &check, sizeof(check));
	return RDMA_NETWORK_IPV4;
}

int mroce_gsi_modify_check(enum ib_qp_state record, const struct ib_qp_attr *attr, int mask,
			   enum ib_qp_state *next)
{
	enum ib_qp_state cur = record, to;
	int required = 0, optional = 0, given;

	if (mask & IB_QP_CUR_STATE) {
		if (attr->cur_qp_state != record && attr->cur_qp_state != IB_QPS_ERR)
			return -EINVAL;
		cur = attr->cur_qp_state;
	}
	to = (mask & IB_QP_STATE) ? attr->qp_state : cur;
	given = mask & ~(IB_QP_STATE | IB_QP_CUR_STATE);
	if (to == IB_QPS_RESET || to == IB_QPS_ERR) {
		if (cur > IB_QPS_ERR)
			return -EINVAL;
	} else if (cur == IB_QPS_RESET && to == IB_QPS_INIT) {
		required = IB_QP_PKEY_INDEX | IB_QP_QKEY;
		optional = IB_QP_PORT;
	} else if (cur == IB_QPS_INIT && to == IB_QPS_INIT) {
		optional = IB_QP_PKEY_INDEX | IB_QP_QKEY | IB_QP_PORT;
	} else if (cur == IB_QPS_INIT && to == IB_QPS_RTR) {
		optional = IB_QP_PKEY_INDEX | IB_QP_QKEY;
	} else if (cur == IB_QPS_RTR && to == IB_QPS_RTS) {
		required = IB_QP_SQ_PSN;
		optional = IB_QP_QKEY;
	} else if (cur == IB_QPS_RTS && to == IB_QPS_RTS) {
		optional = IB_QP_QKEY;
	} else {
		return -EINVAL;	/* SQD and SQE are not supported */
	}
	if ((given & required) != required || (given & ~(required | optional)))
		return -EINVAL;
	if ((mask & IB_QP_PKEY_INDEX) && attr->pkey_index != 0)
		return -EINVAL;
	if ((mask & IB_QP_PORT) && attr->port_num != 1)
		return -EINVAL;
	if ((mask & IB_QP_SQ_PSN) && attr->sq_psn > MROCE_QPN_MAX)
		return -EINVAL;
	*next = to;
	return 0;
}
