// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Prefix lists in chunks that never move (pfxstore.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pfxstore.h"

/* A chunk's room when nothing asks for more: 128 KiB of prefixes, from
 * the system's pages rather than the heap's, so that a store freed whole
 * gives them back. */
#define PFX_CHUNK	(128 * 1024 / sizeof(struct policy_prefix))

struct pfx_chunk {
	struct pfx_chunk *next;
	size_t used, room;
	struct policy_prefix p[];
};

int pfx_store_reserve(struct pfx_store *s, size_t room)
{
	struct pfx_chunk *c = s->chunks;

	if (!room || (c && c->room - c->used >= room))
		return 0;
	if (room < PFX_CHUNK)
		room = PFX_CHUNK;
	c = malloc(sizeof(*c) + room * sizeof(c->p[0]));
	if (!c)
		return -ENOMEM;
	c->used = 0;
	c->room = room;
	c->next = s->chunks;
	s->chunks = c;
	return 0;
}

int pfx_store_put(struct pfx_store *s, struct policy_tenant *t)
{
	struct pfx_chunk *c;

	if (!t->n_match) {
		t->match = NULL;
		return 0;
	}
	if (pfx_store_reserve(s, t->n_match))
		return -ENOMEM;
	c = s->chunks;
	memcpy(&c->p[c->used], t->match, t->n_match * sizeof(c->p[0]));
	t->match = &c->p[c->used];
	c->used += t->n_match;
	s->n += t->n_match;
	return 0;
}

void pfx_store_free(struct pfx_store *s)
{
	while (s->chunks) {
		struct pfx_chunk *c = s->chunks;

		s->chunks = c->next;
		free(c);
	}
	s->n = 0;
}
