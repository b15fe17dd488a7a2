/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The busiest k rows of a table, ties broken by name (see topn.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "topn.h"

struct row {
	uint64_t score;
	const char *name;
	size_t i;
};

static int busiest_first(const void *pa, const void *pb)
{
	const struct row *a = pa, *b = pb;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	return strcmp(a->name, b->name);
}

int topn_pick(const uint64_t *score, const char *const *name, size_t n,
	      size_t k, bool *keep)
{
	struct row *rows;

	if (k >= n) {
		for (size_t i = 0; i < n; i++)
			keep[i] = true;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		keep[i] = false;
	if (!k)
		return 0;
	rows = calloc(n, sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		rows[i] = (struct row){ score[i], name[i], i };
	qsort(rows, n, sizeof(*rows), busiest_first);
	for (size_t i = 0; i < k; i++)
		keep[rows[i].i] = true;
	free(rows);
	return 0;
}
