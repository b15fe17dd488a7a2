/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The prefix lists of a large tenant set in few allocations: each list is
 * copied once into chunks that never move, so that copies of a tenant by
 * value share it and none is freed on its own.  What the set no longer
 * uses is dropped by putting the lists it does use into a new store and
 * freeing the old one whole.  Pure.
 */
#ifndef RL_PFXSTORE_H
#define RL_PFXSTORE_H

#include <stddef.h>

#include "policy.h"

struct pfx_chunk;

struct pfx_store {
	struct pfx_chunk *chunks;	/* the newest first */
	size_t n;			/* prefixes stored, in use or not */
};

/* Room for `room` more prefixes in one allocation, so that puts of that
 * many fail no more.  0 or -ENOMEM. */
int pfx_store_reserve(struct pfx_store *s, size_t room);

/* Copies t's prefixes into s and points t at the copy (none: NULL).  The
 * list t pointed at is not freed.  0, or -ENOMEM with t unchanged. */
int pfx_store_put(struct pfx_store *s, struct policy_tenant *t);

/* Frees every list of s (s is empty after, ready for use). */
void pfx_store_free(struct pfx_store *s);

#endif /* RL_PFXSTORE_H */
