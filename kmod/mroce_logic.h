/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The parts of metaroce.ko that are pure logic: QP-number and port-slot
 * allocation (ids.c), the modify_qp state machine (qp_state.c) and the
 * private ABI checks (abi.c). They include only this header, which pulls in
 * the kernel's definitions in a module build and the mock of
 * tests/kmod/mock/ otherwise, so that tests/kmod/ runs them in user space.
 * None of them locks: callers hold the lock that protects the object.
 */
#ifndef METAROCE_KMOD_LOGIC_H
#define METAROCE_KMOD_LOGIC_H

#ifdef __KERNEL__
#include <linux/bitmap.h>
#include <linux/bitops.h>
#include <linux/errno.h>
#include <linux/types.h>
#include <rdma/ib_verbs.h>
#else
#include "mock_kernel.h"
#endif

#include <metaroce/abi.h>

/* --- ids.c: next-fit allocator of small integer ids --------------------- */

#define MROCE_ID_POOL_BITS 4096

/*
 * Ids in [min, max] (max < MROCE_ID_POOL_BITS). Allocation is next-fit: the
 * search starts after the id handed out last, so a number just released
 * (a destroyed QP, a dead process's port slot) is reused as late as
 * possible and a stale packet for it meets no new owner soon.
 */
struct mroce_id_pool {
	unsigned long used[BITS_TO_LONGS(MROCE_ID_POOL_BITS)];
	u32 min;
	u32 max;
	u32 cursor;	/* the next id to try */
	u32 count;	/* ids in use */
};

void mroce_id_pool_init(struct mroce_id_pool *pool, u32 min, u32 max);
/* The allocated id, or -ENOSPC when all are in use. */
int mroce_id_alloc(struct mroce_id_pool *pool);
/* 0, or -EINVAL for an id outside the pool or not allocated. */
int mroce_id_free(struct mroce_id_pool *pool, u32 id);

/* QP number of the index-th QP of the context holding port slot `slot`. */
static inline u32 mroce_qpn(u32 slot, u32 index)
{
	return (slot << METAROCE_QPN_INDEX_BITS) | index;
}

/* --- qp_state.c: the RC and UD state machines of modify_qp --------------- */

/*
 * 0 if moving an RC or UD QP (`type`) from `cur` to `next` with the
 * attributes in `mask` is allowed: the transition exists, every required
 * attribute is present and none outside required + optional is (IB spec
 * 11.2.4.2, as ib_modify_qp_is_ok() applies it). -EINVAL otherwise, and for
 * any other type. SQD/SQE are not supported.
 */
int mroce_qp_transition_check(enum ib_qp_type type, enum ib_qp_state cur, enum ib_qp_state next, int mask);
/* 0 if every attribute named in mask has a value this device accepts. */
int mroce_qp_attr_check(const struct ib_qp_attr *attr, int mask);
/*
 * The whole modify_qp decision for a QP whose state of record is `record`:
 * 0 with *next set, or -EINVAL. A current state given with IB_QP_CUR_STATE
 * must be the record, or ERR: the data path runs in user space and may have
 * failed the QP without the kernel knowing.
 */
int mroce_qp_modify_check(enum ib_qp_type type, enum ib_qp_state record, const struct ib_qp_attr *attr,
			  int mask, enum ib_qp_state *next);

/* --- abi.c: the private uverbs ABI ---------------------------------------- */

/*
 * Checks a context request: `inlen` driver bytes came in, of which the
 * first sizeof(*req) are in *req (req is NULL when inlen is shorter), and
 * `outlen` bytes of driver response fit. `tail_clear` says whether the bytes
 * beyond the known request are all zero. Returns 0 or a negative errno:
 * -EINVAL for a short request or response or a reserved field set,
 * -EPROTONOSUPPORT for another ABI version, -EOPNOTSUPP for unknown
 * (non-zero) trailing request bytes.
 */
int mroce_abi_ucontext_check(size_t inlen, size_t outlen, const struct metaroce_alloc_ucontext_req *req,
			     bool tail_clear);
void mroce_abi_ucontext_resp(struct metaroce_alloc_ucontext_resp *resp, u32 slot, __be64 node_guid);

#endif /* METAROCE_KMOD_LOGIC_H */
