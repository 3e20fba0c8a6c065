/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * The private uverbs ABI between metaroce.ko and the user-space provider
 * (libmetaroce-rdmav34.so): the driver data ("udata") that follows the core
 * uverbs command and response structures.
 *
 * Only the control path crosses this boundary; the data path stays in user
 * space. Every struct is a multiple of 8 bytes, has no implicit padding and
 * uses fixed-width types, so that it reads the same in the kernel and in
 * user space (C and C++).
 *
 * Versioning: the provider sends METAROCE_ABI_VERSION in its context
 * request; the kernel refuses a version it does not speak (EPROTONOSUPPORT)
 * and answers with the version it used. Fields are only ever appended; a
 * peer that knows fewer fields reads a prefix.
 *
 * QP numbers and home ports: every user context gets a host-unique "port
 * slot" S in [METAROCE_SLOT_MIN, METAROCE_SLOT_MAX]. The provider binds its
 * UDP home socket to port METAROCE_HOME_PORT_BASE + S on the device's
 * address, and the kernel numbers the context's QPs (S << 12) | index with
 * index in [1, 4095]. A peer therefore derives the home port from a QP
 * number alone: port = 4792 + (qpn >> 12), the rule kernel-less devices
 * already follow. Slot 0 is never handed out, so no kernel QP is numbered 0
 * or 1 (the IB special QPs).
 */
#ifndef METAROCE_ABI_H
#define METAROCE_ABI_H

#include <linux/types.h>

#define METAROCE_ABI_VERSION 1

/* uverbs ABI version the device reports (sysfs abi_version of uverbsN). */
#define METAROCE_UVERBS_ABI_VERSION 1

#define METAROCE_HOME_PORT_BASE 4792
#define METAROCE_QPN_INDEX_BITS 12
#define METAROCE_SLOT_MIN 1
#define METAROCE_SLOT_MAX 4095
#define METAROCE_QP_INDEX_MIN 1
#define METAROCE_QP_INDEX_MAX 4095

/* The UDP port of the kernel's GSI QP (QP1, connection-management MADs;
 * metaroce.ko's module parameter gsi_port, docs/spec.md, "Kernel GSI traffic"): outside the
 * home ports above and not RoCE v2's 4791, so that rxe and MetaRoCE can
 * share a host. */
#define METAROCE_GSI_PORT_DEFAULT 4788

/* GID table entries per port of a kernel device (filled by the RDMA core
 * from the netdev's addresses; entry 0 is the link-local default GID). */
#define METAROCE_GID_TABLE_LEN 32

/*
 * Packet size: a data packet must fit the link unfragmented (docs/spec.md
 * 1.2), so its payload is the link MTU less the IP and UDP headers and what
 * a MetaRoCE data packet adds to its payload (METAROCE_DATA_OVERHEAD_BYTES:
 * its headers and trailer; the provider checks it against wire.h at compile
 * time). A device MTU above a jumbo frame (loopback's 64 KiB) counts as a
 * jumbo frame. The port's active MTU is the largest IB MTU not above that
 * payload: 1024 on a 1500-byte link, 4096 with jumbo frames. The kernel
 * device and the provider both report it from these functions.
 */
#define METAROCE_DATA_OVERHEAD_BYTES 84
#define METAROCE_MAX_LINK_MTU 9000
#define METAROCE_IPV4_UDP_HEADER_BYTES (20 + 8)
#define METAROCE_IPV6_UDP_HEADER_BYTES (40 + 8)

static inline __u32 metaroce_payload_for_link_mtu(__u32 link_mtu, int ipv6)
{
	__u32 ip_udp = ipv6 ? METAROCE_IPV6_UDP_HEADER_BYTES : METAROCE_IPV4_UDP_HEADER_BYTES;
	__u32 mtu = link_mtu < METAROCE_MAX_LINK_MTU ? link_mtu : METAROCE_MAX_LINK_MTU;

	if (mtu < ip_udp + METAROCE_DATA_OVERHEAD_BYTES + 256)
		return 256;	/* below the smallest IB MTU: nothing fits anyway */
	return mtu - ip_udp - METAROCE_DATA_OVERHEAD_BYTES;
}

/* The IB MTU enum (IB_MTU_256 = 1 ... IB_MTU_4096 = 5, the values of both
 * enum ib_mtu and enum ibv_mtu) of the largest IB MTU not above `payload`. */
static inline int metaroce_ib_mtu_not_above(__u32 payload)
{
	int mtu = 1;

	while (mtu < 5 && (256u << mtu) <= payload)
		++mtu;
	return mtu;
}

/* The name of the link type (`rdma link add NAME type metaroce netdev X`)
 * and the value of the device's sysfs hca_type, which the provider matches. */
#define METAROCE_LINK_TYPE "metaroce"
#define METAROCE_HCA_TYPE "metaroce"

/* ibv_cmd_get_context() driver data, provider -> kernel. */
struct metaroce_alloc_ucontext_req {
	__u32 abi_version;	/* METAROCE_ABI_VERSION of the provider */
	__u32 reserved;		/* must be 0 */
};

/* Response driver data, kernel -> provider. */
struct metaroce_alloc_ucontext_resp {
	__u32 abi_version;	/* the version the kernel answered with */
	__u32 port_slot;	/* home port = METAROCE_HOME_PORT_BASE + port_slot */
	__u32 qpn_index_bits;	/* METAROCE_QPN_INDEX_BITS */
	__u32 max_qps;		/* QPs this context may create */
	__u64 node_guid;	/* the device's node GUID, network order */
};

/* ibv_cmd_create_qp() carries no driver data either way: the QP number
 * comes back in the core response (qpn). */

#endif /* METAROCE_ABI_H */
