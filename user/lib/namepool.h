/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Names kept end to end in one buffer, each known to its holder by a 32-bit
 * offset (0: ""): a table of 100,000 entries holds 4 bytes and the name
 * each, not a 64-byte array each.  A name given up leaves dead bytes, which
 * go when the pool would grow: it is copied anew, and the holders'
 * offsets rewritten - n of them, `stride` bytes apart from `first` (a
 * member of an array of structs).  Pure (no I/O).
 */
#ifndef RL_NAMEPOOL_H
#define RL_NAMEPOOL_H

#include <stddef.h>
#include <stdint.h>

struct name_pool {
	char *buf;
	uint32_t len, cap, dead;
};

struct name_holders {
	uint32_t *first;
	size_t n, stride;
};

/* The name at off; valid until the next name_pool_set(). */
static inline const char *name_pool_get(const struct name_pool *np, uint32_t off)
{
	return off ? np->buf + off : "";
}

/* *off (one of h's) names name now ("": none).  0, or -ENOMEM (*off is 0
 * then). */
int name_pool_set(struct name_pool *np, const struct name_holders *h,
		  uint32_t *off, const char *name);

/* Room for need more bytes of names (strlen + 1 each), the pool copied
 * anew if it must grow: name_pool_set()s of names that add up to no more
 * than need then cannot fail.  0, or -ENOMEM (nothing changed). */
int name_pool_reserve(struct name_pool *np, const struct name_holders *h,
		      size_t need);

void name_pool_free(struct name_pool *np);

#endif /* RL_NAMEPOOL_H */
