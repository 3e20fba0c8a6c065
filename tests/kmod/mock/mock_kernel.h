/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/*
 * A small mock of the kernel API that kmod/'s logic files (ids.c,
 * qp_state.c, abi.c) use, so that they compile and run in user space
 * unchanged (after Homa's test/mock.c). Definitions mirror the kernel's:
 * the values of the IB enums are pinned against libibverbs' identical
 * uapi values in kmod_logic_test.cpp.
 */
#ifndef METAROCE_TESTS_KMOD_MOCK_KERNEL_H
#define METAROCE_TESTS_KMOD_MOCK_KERNEL_H

#include <errno.h>
#include <limits.h>
#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
#define __force

/* --- bitmaps (linux/bitmap.h, linux/bitops.h) ------------------------------ */
#define BITS_PER_LONG (CHAR_BIT * (int)sizeof(long))
#define BITS_TO_LONGS(n) (((n) + BITS_PER_LONG - 1) / BITS_PER_LONG)

void bitmap_zero(unsigned long *map, unsigned int nbits);
unsigned long find_next_zero_bit(const unsigned long *map, unsigned long size, unsigned long offset);
void __set_bit(unsigned long nr, unsigned long *map);
void __clear_bit(unsigned long nr, unsigned long *map);
bool test_bit(unsigned long nr, const unsigned long *map);
/* Calls of find_next_zero_bit since the last reset: the tests bound the
 * allocator's work with it. */
extern unsigned long mock_find_calls;

/* --- asm/unaligned.h, net/checksum.h --------------------------------------- */
typedef uint16_t __sum16;

static inline void put_unaligned_be16(u16 v, void *p)
{
	u8 *b = (u8 *)p;
	b[0] = (u8)(v >> 8);
	b[1] = (u8)v;
}

static inline void put_unaligned_be32(u32 v, void *p)
{
	u8 *b = (u8 *)p;
	b[0] = (u8)(v >> 24);
	b[1] = (u8)(v >> 16);
	b[2] = (u8)(v >> 8);
	b[3] = (u8)v;
}

static inline u16 get_unaligned_be16(const void *p)
{
	const u8 *b = (const u8 *)p;
	return (u16)(b[0] << 8 | b[1]);
}

static inline u32 get_unaligned_be32(const void *p)
{
	const u8 *b = (const u8 *)p;
	return (u32)b[0] << 24 | (u32)b[1] << 16 | (u32)b[2] << 8 | b[3];
}

/* The folded one's-complement sum of an IPv4 header of ihl 32-bit words,
 * in the header's byte order (as the kernel's). */
__sum16 ip_fast_csum(const void *iph, unsigned int ihl);

/* --- linux/crc32c.h ----------------------------------------------------------- */
/* As the kernel's: the CRC32C register after data, from crc; no final XOR. */
u32 crc32c(u32 crc, const void *address, unsigned int length);

/* --- rdma/ib_verbs.h --------------------------------------------------------- */
enum rdma_network_type {
	RDMA_NETWORK_IB,
	RDMA_NETWORK_ROCE_V1,
	RDMA_NETWORK_IPV4,
	RDMA_NETWORK_IPV6
};

enum ib_qp_state {
	IB_QPS_RESET,
	IB_QPS_INIT,
	IB_QPS_RTR,
	IB_QPS_RTS,
	IB_QPS_SQD,
	IB_QPS_SQE,
	IB_QPS_ERR
};

enum ib_qp_type {
	IB_QPT_SMI,
	IB_QPT_GSI,
	IB_QPT_RC,
	IB_QPT_UC,
	IB_QPT_UD
};

enum ib_mtu {
	IB_MTU_256 = 1,
	IB_MTU_512 = 2,
	IB_MTU_1024 = 3,
	IB_MTU_2048 = 4,
	IB_MTU_4096 = 5
};

enum ib_qp_attr_mask {
	IB_QP_STATE = 1,
	IB_QP_CUR_STATE = (1 << 1),
	IB_QP_EN_SQD_ASYNC_NOTIFY = (1 << 2),
	IB_QP_ACCESS_FLAGS = (1 << 3),
	IB_QP_PKEY_INDEX = (1 << 4),
	IB_QP_PORT = (1 << 5),
	IB_QP_QKEY = (1 << 6),
	IB_QP_AV = (1 << 7),
	IB_QP_PATH_MTU = (1 << 8),
	IB_QP_TIMEOUT = (1 << 9),
	IB_QP_RETRY_CNT = (1 << 10),
	IB_QP_RNR_RETRY = (1 << 11),
	IB_QP_RQ_PSN = (1 << 12),
	IB_QP_MAX_QP_RD_ATOMIC = (1 << 13),
	IB_QP_ALT_PATH = (1 << 14),
	IB_QP_MIN_RNR_TIMER = (1 << 15),
	IB_QP_SQ_PSN = (1 << 16),
	IB_QP_MAX_DEST_RD_ATOMIC = (1 << 17),
	IB_QP_PATH_MIG_STATE = (1 << 18),
	IB_QP_CAP = (1 << 19),
	IB_QP_DEST_QPN = (1 << 20)
};

enum ib_access_flags {
	IB_ACCESS_LOCAL_WRITE = 1,
	IB_ACCESS_REMOTE_WRITE = (1 << 1),
	IB_ACCESS_REMOTE_READ = (1 << 2),
	IB_ACCESS_REMOTE_ATOMIC = (1 << 3),
	IB_ACCESS_MW_BIND = (1 << 4)
};

/* The fields of struct ib_qp_attr that the logic reads, with the kernel's
 * names and types. */
struct ib_qp_attr {
	enum ib_qp_state qp_state;
	enum ib_qp_state cur_qp_state;
	enum ib_mtu path_mtu;
	u32 qkey;
	u32 rq_psn;
	u32 sq_psn;
	u32 dest_qp_num;
	int qp_access_flags;
	u16 pkey_index;
	u8 max_rd_atomic;
	u8 max_dest_rd_atomic;
	u8 min_rnr_timer;
	u32 port_num;
	u8 timeout;
	u8 retry_cnt;
	u8 rnr_retry;
};

#ifdef __cplusplus
}
#endif

#endif /* METAROCE_TESTS_KMOD_MOCK_KERNEL_H */
