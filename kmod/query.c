// SPDX-License-Identifier: GPL-2.0-only
/*
 * Device, port and pkey queries. The provider answers ibv_query_device and
 * ibv_query_port itself (with the engine's figures); these answers serve the
 * RDMA core (registration, GID table, sysfs, `rdma link show`) and report the
 * same limits.
 */
#include <linux/inetdevice.h>
#include <linux/netdevice.h>
#include <rdma/ib_mad.h>

#include "mroce.h"

static int mroce_query_device(struct ib_device *ib, struct ib_device_attr *attr, struct ib_udata *udata)
{
	/* No driver data is defined for this command. */
	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = 0;
	attr->sys_image_guid = ib->node_guid;
	attr->max_mr_size = METAROCE_MAX_MR_SIZE;
	attr->page_size_cap = METAROCE_PAGE_SIZE_CAP;
	attr->vendor_id = METAROCE_VENDOR_ID;
	attr->max_qp = METAROCE_MAX_QP;
	attr->max_qp_wr = METAROCE_MAX_QP_WR;
	attr->device_cap_flags = IB_DEVICE_RC_RNR_NAK_GEN | IB_DEVICE_SYS_IMAGE_GUID | IB_DEVICE_PORT_ACTIVE_EVENT |
				 IB_DEVICE_SRQ_RESIZE;
	/* `rdma link del` may remove the device; kernel PDs (the MAD
	 * layer's) have the local DMA lkey. */
	attr->kernel_cap_flags = IBK_ALLOW_USER_UNREG | IBK_LOCAL_DMA_LKEY;
	attr->max_send_sge = METAROCE_MAX_SGE;
	attr->max_recv_sge = METAROCE_MAX_SGE;
	attr->max_sge_rd = METAROCE_MAX_SGE;
	attr->max_cq = METAROCE_MAX_CQ;
	attr->max_cqe = METAROCE_MAX_CQE;
	attr->max_mr = METAROCE_MAX_MR;
	attr->max_pd = METAROCE_MAX_PD;
	attr->max_qp_rd_atom = METAROCE_MAX_RD_ATOMIC;
	attr->max_qp_init_rd_atom = METAROCE_MAX_RD_ATOMIC;
	attr->max_res_rd_atom = METAROCE_MAX_RD_ATOMIC * attr->max_qp;
	attr->atomic_cap = IB_ATOMIC_HCA;
	attr->max_srq = METAROCE_MAX_SRQ;
	attr->max_srq_wr = METAROCE_MAX_SRQ_WR;
	attr->max_srq_sge = METAROCE_MAX_SGE;
	attr->max_ah = METAROCE_MAX_AH;
	attr->max_pkeys = METAROCE_PKEY_TBL_LEN;
	attr->local_ca_ack_delay = METAROCE_LOCAL_CA_ACK_DELAY;
	return 0;
}

enum ib_port_state mroce_port_state(const struct net_device *ndev)
{
	return netif_running(ndev) && netif_carrier_ok(ndev) ? IB_PORT_ACTIVE : IB_PORT_DOWN;
}

/* The provider's data packets fill the netdev's MTU over IPv4 when the
 * netdev has an IPv4 address (it binds that one first), else over IPv6;
 * the port reports the largest IB MTU not above that payload, as the
 * provider does (include/metaroce/abi.h). */
static enum ib_mtu mroce_active_mtu(struct net_device *ndev)
{
	struct in_device *in_dev;
	bool ipv4;

	rcu_read_lock();
	in_dev = __in_dev_get_rcu(ndev);
	ipv4 = in_dev && rcu_dereference(in_dev->ifa_list);
	rcu_read_unlock();
	return (enum ib_mtu)metaroce_ib_mtu_not_above(metaroce_payload_for_link_mtu(READ_ONCE(ndev->mtu), !ipv4));
}

static int mroce_query_port(struct ib_device *ib, u32 port, struct ib_port_attr *attr)
{
	struct net_device *ndev = to_mdev(ib)->ndev;
	int err;

	/* The core zeroes *attr and checks the port number. */
	attr->max_mtu = IB_MTU_4096;
	attr->gid_tbl_len = MROCE_GID_TABLE_LEN;
	attr->pkey_tbl_len = METAROCE_PKEY_TBL_LEN;
	attr->max_msg_sz = METAROCE_MAX_MSG_SIZE;
	attr->max_vl_num = METAROCE_MAX_VL_NUM;
	attr->state = IB_PORT_DOWN;
	attr->phys_state = IB_PORT_PHYS_STATE_DISABLED;
	attr->active_mtu = IB_MTU_256;

	err = ib_get_eth_speed(ib, port, &attr->active_speed, &attr->active_width);
	if (err)
		return err;
	attr->port_cap_flags = IB_PORT_CM_SUP;
	if (mroce_port_state(ndev) == IB_PORT_ACTIVE) {
		attr->state = IB_PORT_ACTIVE;
		attr->phys_state = IB_PORT_PHYS_STATE_LINK_UP;
	}
	attr->active_mtu = mroce_active_mtu(ndev);
	return 0;
}

static int mroce_get_port_immutable(struct ib_device *ib, u32 port, struct ib_port_immutable *imm)
{
	struct ib_port_attr attr = {};
	int err;

	err = ib_query_port(ib, port, &attr);
	if (err)
		return err;
	imm->pkey_tbl_len = attr.pkey_tbl_len;
	imm->gid_tbl_len = attr.gid_tbl_len;
	/* RoCE v2 addressing (the core fills the GID table from the netdev's
	 * addresses) with the MAD and CM layers on QP1 (gsi.c): rdma_cm. */
	imm->core_cap_flags = RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;
	imm->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

static enum rdma_link_layer mroce_get_link_layer(struct ib_device *ib, u32 port)
{
	return IB_LINK_LAYER_ETHERNET;
}

static int mroce_query_pkey(struct ib_device *ib, u32 port, u16 index, u16 *pkey)
{
	if (index != 0)
		return -EINVAL;
	*pkey = METAROCE_DEFAULT_PKEY;
	return 0;
}

static void mroce_get_dev_fw_str(struct ib_device *ib, char *str)
{
	/* The provider matches devices by this prefix (sysfs fw_ver). */
	snprintf(str, IB_FW_VERSION_NAME_MAX, "%s", METAROCE_FW_VER);
}

const struct ib_device_ops mroce_query_ops = {
	.query_device = mroce_query_device,
	.query_port = mroce_query_port,
	.get_port_immutable = mroce_get_port_immutable,
	.get_link_layer = mroce_get_link_layer,
	.query_pkey = mroce_query_pkey,
	.get_dev_fw_str = mroce_get_dev_fw_str,
};
