// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Names to positions in an array of records (namehash.h): linear probing,
 * and removal by moving back what follows, so that no lookup stops short
 * and no entry is ever marked deleted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "namehash.h"

#define MIN_CAP	16

static uint64_t hash_of(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;	/* FNV-1a */

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ULL;
	return h ^ (h >> 31);
}

static const char *name_at(struct name_recs r, size_t pos)
{
	return r.first + pos * r.stride;
}

/* The slot that holds name, or the free one where it would go. */
static size_t slot_of(const uint32_t *slots, size_t cap, struct name_recs r,
		      const char *name)
{
	size_t mask = cap - 1, s = hash_of(name) & mask;

	while (slots[s] && strcmp(name_at(r, slots[s] - 1), name) != 0)
		s = (s + 1) & mask;
	return s;
}

/* slots of cap (a power of two) for room names, at most half full. */
static size_t cap_for(size_t room)
{
	size_t cap = MIN_CAP;

	while (cap < 2 * room)
		cap *= 2;
	return cap;
}

/* h's names moved into a table of cap slots.  0 or -ENOMEM. */
static int rehash(struct name_hash *h, struct name_recs r, size_t cap)
{
	uint32_t *slots = calloc(cap, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (size_t s = 0; s < h->cap; s++)
		if (h->slots[s])
			slots[slot_of(slots, cap, r, name_at(r, h->slots[s] - 1))] =
				h->slots[s];
	free(h->slots);
	h->slots = slots;
	h->cap = cap;
	return 0;
}

int name_hash_build(struct name_hash *h, struct name_recs r, size_t n,
		    size_t room)
{
	name_hash_free(h);
	if (n >= UINT32_MAX)
		return -ENOMEM;
	if (rehash(h, r, cap_for(room > n ? room : n)))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		size_t s = slot_of(h->slots, h->cap, r, name_at(r, i));

		if (!h->slots[s]) {
			h->slots[s] = (uint32_t)i + 1;
			h->n++;
		}
	}
	return 0;
}

size_t name_hash_find(const struct name_hash *h, struct name_recs r,
		      const char *name)
{
	size_t s;

	if (!h->cap)
		return SIZE_MAX;
	s = slot_of(h->slots, h->cap, r, name);
	return h->slots[s] ? h->slots[s] - 1 : SIZE_MAX;
}

int name_hash_put(struct name_hash *h, struct name_recs r, size_t pos)
{
	size_t s;

	if (pos >= UINT32_MAX - 1)
		return -ENOMEM;
	if (2 * (h->n + 1) > h->cap && rehash(h, r, cap_for(h->n + 1)))
		return -ENOMEM;
	s = slot_of(h->slots, h->cap, r, name_at(r, pos));
	h->n += !h->slots[s];
	h->slots[s] = (uint32_t)pos + 1;
	return 0;
}

void name_hash_del(struct name_hash *h, struct name_recs r, size_t pos)
{
	size_t mask = h->cap - 1, s, j;

	if (!h->cap)
		return;
	s = slot_of(h->slots, h->cap, r, name_at(r, pos));
	if (h->slots[s] != pos + 1)
		return;
	h->slots[s] = 0;
	h->n--;
	/* what follows moves back into the hole when its home is at or
	 * before it, up to the next free slot */
	for (j = (s + 1) & mask; h->slots[j]; j = (j + 1) & mask) {
		size_t home = hash_of(name_at(r, h->slots[j] - 1)) & mask;

		if (((j - home) & mask) >= ((j - s) & mask)) {
			h->slots[s] = h->slots[j];
			h->slots[j] = 0;
			s = j;
		}
	}
}

void name_hash_moved(struct name_hash *h, struct name_recs r, size_t from,
		     size_t to)
{
	size_t s;

	if (!h->cap || to >= UINT32_MAX - 1)
		return;
	s = slot_of(h->slots, h->cap, r, name_at(r, to));
	if (h->slots[s] == from + 1)
		h->slots[s] = (uint32_t)to + 1;
}

void name_hash_cut(struct name_hash *h, struct name_recs r, size_t pos)
{
	name_hash_del(h, r, pos);
	/* where a name sits does not depend on its position: a pass over
	 * the slots, not a lookup of each name that moves */
	for (size_t s = 0; s < h->cap; s++)
		h->slots[s] -= h->slots[s] > pos + 1;
}

void name_hash_free(struct name_hash *h)
{
	free(h->slots);
	*h = (struct name_hash){ 0 };
}
