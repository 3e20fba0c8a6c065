// SPDX-License-Identifier: GPL-2.0-only
/*
 * The context request and response of the private ABI
 * (include/metaroce/abi.h), checked and filled without touching user memory
 * so that every size and version case is testable in user space.
 */
#include "mroce_logic.h"

int mroce_abi_ucontext_check(size_t inlen, size_t outlen, const struct metaroce_alloc_ucontext_req *req,
			     bool tail_clear)
{
	if (inlen < sizeof(*req) || !req)
		return -EINVAL;
	if (outlen < sizeof(struct metaroce_alloc_ucontext_resp))
		return -EINVAL;
	if (req->abi_version != METAROCE_ABI_VERSION)
		return -EPROTONOSUPPORT;
	if (req->reserved)
		return -EINVAL;
	if (inlen > sizeof(*req) && !tail_clear)
		return -EOPNOTSUPP;
	return 0;
}

void mroce_abi_ucontext_resp(struct metaroce_alloc_ucontext_resp *resp, u32 slot, __be64 node_guid)
{
	memset(resp, 0, sizeof(*resp));
	resp->abi_version = METAROCE_ABI_VERSION;
	resp->port_slot = slot;
	resp->qpn_index_bits = METAROCE_QPN_INDEX_BITS;
	resp->max_qps = METAROCE_QP_INDEX_MAX - METAROCE_QP_INDEX_MIN + 1;
	resp->node_guid = (__force __u64)node_guid;
}
