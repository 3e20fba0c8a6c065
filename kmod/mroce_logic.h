/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * The parts of metaroce.ko that are pure logic: QP-number and port-slot
 * allocation (ids.c), the modify_qp state machine (qp_state.c), the
 * private ABI checks (abi.c), the UD datagram codec (ud_wire.c) and the GSI
 * QP's queues, addresses and states (gsi_logic.c). They include only this header, which pulls in
 * the kernel's definitions in a module build and the mock of
 * tests/kmod/mock/ otherwise, so that tests/kmod/ runs them in user space.
 * None of them locks: callers hold the lock that protects the object.
 */
#ifndef METAROCE_KMOD_LOGIC_H
#define METAROCE_KMOD_LOGIC_H

#ifdef __KERNEL__
#include <linux/bitmap.h>
#include <linux/bitops.h>
#include <linux/crc32c.h>
#include <linux/errno.h>
#include <linux/types.h>
#include <net/checksum.h>
#include <rdma/ib_verbs.h>
#include <asm/unaligned.h>
#else
#include "mock_kernel.h"
#endif

#include <metaroce/abi.h>
#include <metaroce/qp_rules.h>

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

/* --- ud_wire.c: MetaRoCE UD datagrams (docs/spec.md, "Kernel GSI traffic") ------------------ */

/*
 * A UD datagram (wire v0.2) is the 20-byte common header with type 6, a
 * 20-byte UD header, the payload and a CRC32C trailer; all fields
 * big-endian. The kernel sends integrity mode only: it has no keys.
 */
#define MROCE_WIRE_VERSION 2
#define MROCE_PACKET_UD_SEND 6
#define MROCE_SECURITY_INTEGRITY 0
#define MROCE_COMMON_HDR_LEN 20
#define MROCE_UD_HDR_LEN 20
#define MROCE_CRC_LEN 4
/* What a datagram adds to its payload. */
#define MROCE_UD_OVERHEAD (MROCE_COMMON_HDR_LEN + MROCE_UD_HDR_LEN + MROCE_CRC_LEN)
#define MROCE_UD_FLAG_IMM 0x01	/* imm carries immediate data */
#define MROCE_UD_FLAGS_KNOWN MROCE_UD_FLAG_IMM
#define MROCE_QPN_MAX 0xffffff

/* QP1: the kernel's GSI QP, which carries one MAD per datagram. */
#define MROCE_GSI_QPN 1
#define MROCE_GSI_QKEY 0x80010000u
#define MROCE_MAD_SIZE 256
#define MROCE_GSI_DATAGRAM_LEN (MROCE_UD_OVERHEAD + MROCE_MAD_SIZE)

struct mroce_ud_hdr {
	u16 home_port;	/* the sending context's home port */
	u32 src_epoch;	/* the sender's incarnation: never 0 */
	u32 dst_qpn;
	u32 src_qpn;
	u32 qkey;
	u32 imm;	/* host order; meaningful with MROCE_UD_FLAG_IMM */
	u8 flags;
};

/* Why a datagram was dropped. The names (one table, in ud_wire.c) are the
 * device's drop counters (`rdma statistic`, sysfs hw_counters). */
enum mroce_ud_verdict {
	MROCE_UD_OK,
	MROCE_UD_TRUNCATED,	/* shorter than the two headers and the trailer */
	MROCE_UD_BAD_VERSION,
	MROCE_UD_BAD_TYPE,	/* not a UD datagram */
	MROCE_UD_BAD_SECURITY,	/* not integrity mode */
	MROCE_UD_BAD_PATH,	/* path_id is not 0 */
	MROCE_UD_BAD_CRC,	/* the trailer is not the CRC32C of the rest */
	MROCE_UD_BAD_FLAGS,	/* an unknown flag bit */
	MROCE_UD_BAD_QPN,	/* a QP number above 24 bits */
	MROCE_UD_NOT_GSI,	/* GSI: dst_qpn is not 1 */
	MROCE_UD_BAD_QKEY,	/* GSI: qkey is not QP1's */
	MROCE_UD_BAD_LENGTH,	/* GSI: payload is not one MAD */
	MROCE_UD_VERDICTS
};
extern const char *const mroce_ud_verdict_names[MROCE_UD_VERDICTS];

/* Writes a datagram, trailer included, into out (out_len bytes of room).
 * Returns its length, or -EINVAL for a QP number above 24 bits, unknown
 * flags or a zero epoch, -ENOSPC when it does not fit. */
int mroce_ud_encode(u8 *out, size_t out_len, const struct mroce_ud_hdr *hdr, const void *payload,
		    size_t payload_len);
/* Parses a datagram of len bytes, trailer included: on MROCE_UD_OK, *hdr
 * is filled and the payload is payload_len bytes at buf + *payload_off.
 * Reads nothing beyond len. */
enum mroce_ud_verdict mroce_ud_decode(const u8 *buf, size_t len, struct mroce_ud_hdr *hdr,
				      size_t *payload_off, size_t *payload_len);
/* What the GSI QP additionally requires of a decoded datagram. */
enum mroce_ud_verdict mroce_gsi_check(const struct mroce_ud_hdr *hdr, size_t payload_len);

/* --- gsi_logic.c: the GSI QP's queues, addresses and states ----------------- */

/*
 * A ring of `size` slots, oldest first. The kernel file keeps the entries;
 * this keeps the indices. produce returns the slot to fill, consume the
 * oldest filled slot.
 */
struct mroce_ring {
	u32 size;
	u32 head;	/* oldest filled slot */
	u32 count;
};

void mroce_ring_init(struct mroce_ring *ring, u32 size);
/* The slot to fill, or -ENOMEM when full. */
int mroce_ring_produce(struct mroce_ring *ring);
/* The oldest filled slot (now free), or -ENOENT when empty. */
int mroce_ring_consume(struct mroce_ring *ring);
/* The oldest filled slot, left in place, or -ENOENT. */
int mroce_ring_peek(const struct mroce_ring *ring);

/*
 * A completion queue whose every posted work request has a slot reserved
 * at post time, so that each one gets its completion: a post that would
 * overrun the CQ fails with -ENOMEM instead.
 */
struct mroce_cq_slots {
	struct mroce_ring ring;	/* completions waiting to be polled */
	u32 reserved;		/* posted work requests not yet completed */
};

void mroce_cq_slots_init(struct mroce_cq_slots *cq, u32 size);
int mroce_cq_reserve(struct mroce_cq_slots *cq);
void mroce_cq_unreserve(struct mroce_cq_slots *cq);
/* Turns a reservation into a completion: the slot to fill (never fails
 * for a reservation that was made; -ENOSPC without one). */
int mroce_cq_complete(struct mroce_cq_slots *cq);

/* An IP address as the GSI QP sends to and receives from. */
enum mroce_family { MROCE_IPV4 = 4, MROCE_IPV6 = 6 };
struct mroce_addr {
	enum mroce_family family;
	u8 ip[16];	/* IPv4: the first 4 bytes */
};

/* The unicast address of a RoCE v2 GID (IPv4-mapped or IPv6): 0, or
 * -EINVAL for the unspecified address and multicast. */
int mroce_addr_from_gid(const u8 gid[16], struct mroce_addr *addr);
void mroce_gid_from_addr(const struct mroce_addr *addr, u8 gid[16]);
/* The UDP port a datagram for dst_qpn goes to: QP1 listens on the GSI
 * port, every other QP on its context's home port (abi.h). */
u16 mroce_ud_dest_port(u32 dst_qpn, u16 gsi_port);
/* The Q_Key a UD send uses: the QP's own when the request's has its high
 * bit set (IB spec 10.2.5). */
u32 mroce_ud_send_qkey(u32 wr_qkey, u32 qp_qkey);

#define MROCE_GRH_LEN 40
/*
 * The 40 bytes a UD receive buffer starts with, as verbs defines them for
 * RoCE v2: IPv6, a GRH-shaped IPv6 header; IPv4, 20 zero bytes and then
 * the IPv4 header. Built from the datagram's addresses. Returns the RDMA
 * network type (RDMA_NETWORK_IPV4 or RDMA_NETWORK_IPV6) for the work
 * completion.
 */
int mroce_gsi_build_grh(u8 grh[MROCE_GRH_LEN], const struct mroce_addr *src, const struct mroce_addr *dst,
			u16 payload_len);

/*
 * modify_qp of the GSI QP: the UD transitions of IB spec 11.2.4.2 as they
 * apply to QP1 (RESET->INIT needs PKEY_INDEX and QKEY; RTR->RTS needs
 * SQ_PSN; RTS->RTS may change QKEY; any state may go to RESET or ERR).
 * 0 with *next set, or -EINVAL.
 */
int mroce_gsi_modify_check(enum ib_qp_state record, const struct ib_qp_attr *attr, int mask,
			   enum ib_qp_state *next);

#endif /* METAROCE_KMOD_LOGIC_H */
