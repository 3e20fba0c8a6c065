// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* User-space versions of the kernel helpers declared in mock_kernel.h. */
#include "mock_kernel.h"

#include <isa-l/crc.h>

unsigned long mock_find_calls;

void bitmap_zero(unsigned long *map, unsigned int nbits)
{
	memset(map, 0, BITS_TO_LONGS(nbits) * sizeof(long));
}

/* As the kernel's: the first clear bit at or after offset, or size. */
unsigned long find_next_zero_bit(const unsigned long *map, unsigned long size, unsigned long offset)
{
	mock_find_calls++;
	for (unsigned long i = offset; i < size; i++)
		if (!test_bit(i, map))
			return i;
	return size;
}

void __set_bit(unsigned long nr, unsigned long *map)
{
	map[nr / BITS_PER_LONG] |= 1ul << (nr % BITS_PER_LONG);
}

void __clear_bit(unsigned long nr, unsigned long *map)
{
	map[nr / BITS_PER_LONG] &= ~(1ul << (nr % BITS_PER_LONG));
}

bool test_bit(unsigned long nr, const unsigned long *map)
{
	return (map[nr / BITS_PER_LONG] >> (nr % BITS_PER_LONG)) & 1;
}

__sum16 ip_fast_csum(const void *iph, unsigned int ihl)
{
	const u8 *p = (const u8 *)iph;
	u32 sum = 0;
	__sum16 out;
	u16 folded;

	for (unsigned int i = 0; i < ihl * 4; i += 2)
		sum += (u32)(p[i] << 8 | p[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	folded = (u16)~sum;
	/* Back into the header's (network) byte order. */
	put_unaligned_be16(folded, &out);
	return out;
}

/* ISA-L's crc32_iscsi takes and returns the raw register, as the kernel's
 * crc32c() does. */
u32 crc32c(u32 crc, const void *address, unsigned int length)
{
	return crc32_iscsi((unsigned char *)address, (int)length, crc);
}
