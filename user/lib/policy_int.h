/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the policy_*.c files share and nobody else needs: the error message
 * helper and the prefix comparisons that parsing and validation both use.
 */
#ifndef RL_POLICY_INT_H
#define RL_POLICY_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "policy.h"

/* Values echoed back in messages are cut here so that a pasted megabyte of
 * garbage cannot push the explanation out of the error buffer. */
#define ECHO "%.64s"

/* Writes the message (when err is not NULL) and returns -EINVAL. */
static inline int fail(char *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static inline int fail(char *err, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		va_start(ap, fmt);
		vsnprintf(err, POLICY_ERR_MAX, fmt, ap);
		va_end(ap);
		/* Messages quote the offending value, cut to a length that may
		 * split a character; they end up in JSON, which must be UTF-8. */
		policy_clean_utf8(err);
	}
	return -EINVAL;
}

/* Clears the host bits of addr beyond len; returns whether any were set. */
static inline bool clear_host_bits(uint8_t *addr, unsigned int alen, unsigned int len)
{
	bool had = false;

	for (unsigned int i = 0; i < alen; i++) {
		unsigned int bit = i * 8;
		uint8_t mask;

		if (bit + 8 <= len)
			continue;
		mask = bit >= len ? 0 : (uint8_t)(0xff << (8 - (len - bit)));
		if (addr[i] & ~mask)
			had = true;
		addr[i] &= mask;
	}
	return had;
}

static inline bool prefix_equal(const struct policy_prefix *a,
			 const struct policy_prefix *b)
{
	return a->family == b->family && a->len == b->len &&
	       memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

#endif /* RL_POLICY_INT_H */
