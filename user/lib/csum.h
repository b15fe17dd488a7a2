/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Internet checksum (RFC 1071) of frames built in user space: the flood
 * generator's SYNs and the packet tests' frames. */
#ifndef RLGATE_CSUM_H
#define RLGATE_CSUM_H

#include <stddef.h>
#include <stdint.h>

/* The one's complement sum of len bytes (big-endian words, an odd last
 * byte padded) added to sum, not folded.  Frames of up to 64 KiB cannot
 * overflow 32 bits. */
uint32_t csum_add(uint32_t sum, const void *data, size_t len);
/* sum folded to 16 bits and complemented: the checksum field's value. */
uint16_t csum_fold16(uint32_t sum);

#endif
