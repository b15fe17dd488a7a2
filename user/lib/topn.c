/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The busiest k rows of a table, ties broken by name (see topn.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "topn.h"

struct topn_row {
	uint64_t score;
	const char *name;
	size_t i;
};

static int busiest_first(const void *pa, const void *pb)
{
	const struct topn_row *a = pa, *b = pb;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	return strcmp(a->name, b->name);
}

/* Whether row a goes before row b in the ranking (busier, or as busy and
 * first by name). */
static bool before(const struct topn_row *a, const struct topn_row *b)
{
	return busiest_first(a, b) < 0;
}

/* The heap h[0..n) keeps its last-ranked row at h[0]: a row pushed down
 * from i goes below the children ranked after it. */
static void sift_down(struct topn_row *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, last = i;
		struct topn_row t;

		if (l < n && before(&h[last], &h[l]))
			last = l;
		if (r < n && before(&h[last], &h[r]))
			last = r;
		if (last == i)
			return;
		t = h[i];
		h[i] = h[last];
		h[last] = t;
		i = last;
	}
}

/*
 * A bounded selection, not a sort: the k best seen so far in a heap whose
 * top is the worst of them, each row compared with that top and let in
 * only if it ranks before it - n log k, so 1,000 of 100,000 tenants cost
 * about a sixth of sorting them all, and the rows not kept are never moved.
 */
int topn_init(struct topn *t, size_t k, size_t n)
{
	t->k = k < n ? k : n;
	t->len = 0;
	t->heap = NULL;
	if (!t->k)
		return 0;
	t->heap = calloc(t->k, sizeof(*t->heap));
	return t->heap ? 0 : -ENOMEM;
}

void topn_add(struct topn *t, uint64_t score, const char *name, size_t i)
{
	struct topn_row r = { score, name, i };

	if (t->len < t->k) {
		t->heap[t->len++] = r;
		/* full: the worst of the first k on top */
		if (t->len == t->k)
			for (size_t j = t->k / 2; j-- > 0;)
				sift_down(t->heap, t->k, j);
		return;
	}
	if (!t->k || !before(&r, &t->heap[0]))
		return;
	t->heap[0] = r;
	sift_down(t->heap, t->k, 0);
}

void topn_keep(const struct topn *t, bool *keep, size_t n)
{
	for (size_t i = 0; i < n; i++)
		keep[i] = false;
	for (size_t j = 0; j < t->len; j++)
		if (t->heap[j].i < n)
			keep[t->heap[j].i] = true;
}

void topn_free(struct topn *t)
{
	free(t->heap);
	t->heap = NULL;
	t->len = t->k = 0;
}

int topn_pick(const uint64_t *score, const char *const *name, size_t n,
	      size_t k, bool *keep)
{
	struct topn t;

	if (topn_init(&t, k, n))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		topn_add(&t, score[i], name[i], i);
	topn_keep(&t, keep, n);
	topn_free(&t);
	return 0;
}
