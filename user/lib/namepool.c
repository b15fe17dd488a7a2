// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Names end to end in one buffer (namepool.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "namepool.h"

static uint32_t *holder(const struct name_holders *h, size_t i)
{
	return (uint32_t *)((char *)h->first + i * h->stride);
}

/* The pool copied anew without its dead bytes, with room for need more and
 * as much again.  0 or -ENOMEM. */
static int rebuild(struct name_pool *np, const struct name_holders *h,
		   size_t need)
{
	size_t live = np->len ? np->len - np->dead : 1, cap = 2 * (live + need);
	uint32_t len = 1;
	char *buf;

	if (cap < 4096)
		cap = 4096;
	if (cap > UINT32_MAX || !(buf = malloc(cap)))
		return -ENOMEM;
	buf[0] = '\0';
	for (size_t i = 0; i < h->n; i++) {
		uint32_t *off = holder(h, i);
		size_t n;

		if (!*off)
			continue;
		n = strlen(np->buf + *off) + 1;
		memcpy(buf + len, np->buf + *off, n);
		*off = len;
		len += (uint32_t)n;
	}
	free(np->buf);
	*np = (struct name_pool){ .buf = buf, .len = len, .cap = (uint32_t)cap };
	return 0;
}

int name_pool_set(struct name_pool *np, const struct name_holders *h,
		  uint32_t *off, const char *name)
{
	size_t n = strlen(name) + 1;

	if (*off) {
		np->dead += (uint32_t)strlen(np->buf + *off) + 1;
		*off = 0;
	}
	if (n == 1)
		return 0;
	if (np->len + n > np->cap && rebuild(np, h, n))
		return -ENOMEM;
	memcpy(np->buf + np->len, name, n);
	*off = np->len;
	np->len += (uint32_t)n;
	return 0;
}

int name_pool_reserve(struct name_pool *np, const struct name_holders *h,
		      size_t need)
{
	/* an empty pool starts with its byte 0, the offset of "" */
	if (!need || (size_t)(np->len ? np->len : 1) + need <= np->cap)
		return 0;
	return rebuild(np, h, need);
}

void name_pool_free(struct name_pool *np)
{
	free(np->buf);
	*np = (struct name_pool){ 0 };
}
