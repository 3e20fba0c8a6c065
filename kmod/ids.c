// SPDX-License-Identifier: GPL-2.0-only
/*
 * Next-fit allocation of port slots and QP indexes (see mroce_logic.h and
 * include/metaroce/abi.h for why QP numbers are slot << 12 | index).
 */
#include "mroce_logic.h"

void mroce_id_pool_init(struct mroce_id_pool *pool, u32 min, u32 max)
{
	bitmap_zero(pool->used, MROCE_ID_POOL_BITS);
	if (max >= MROCE_ID_POOL_BITS)
		max = MROCE_ID_POOL_BITS - 1;
	pool->min = min;
	pool->max = max;
	pool->cursor = min;
	pool->count = 0;
}

int mroce_id_alloc(struct mroce_id_pool *pool)
{
	unsigned long id;

	if (pool->min > pool->max || pool->count > pool->max - pool->min)
		return -ENOSPC;
	/* From the cursor to max, then wrap to min: two bounded scans. */
	id = find_next_zero_bit(pool->used, (unsigned long)pool->max + 1, pool->cursor);
	if (id > pool->max) {
		id = find_next_zero_bit(pool->used, (unsigned long)pool->max + 1, pool->min);
		if (id > pool->max)
			return -ENOSPC;
	}
	__set_bit(id, pool->used);
	pool->count++;
	pool->cursor = id + 1 > pool->max ? pool->min : (u32)id + 1;
	return (int)id;
}

int mroce_id_free(struct mroce_id_pool *pool, u32 id)
{
	if (id < pool->min || id > pool->max || !test_bit(id, pool->used))
		return -EINVAL;
	__clear_bit(id, pool->used);
	pool->count--;
	return 0;
}
