// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The Internet checksum (RFC 1071), see csum.h. */
#include "csum.h"

uint32_t csum_add(uint32_t sum, const void *data, size_t len)
{
	const uint8_t *b = data;
	size_t i;

	for (i = 0; i + 1 < len; i += 2)
		sum += (uint32_t)b[i] << 8 | b[i + 1];
	if (len & 1)
		sum += (uint32_t)b[len - 1] << 8;
	return sum;
}

uint16_t csum_fold16(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}
