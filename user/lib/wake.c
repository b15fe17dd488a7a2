// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The slots a periodic check visits (wake.h): a list for the next check,
 * a min-heap of times, a ring of slots waiting their turn.  Every array
 * grows on demand; when one cannot, `all` tells the caller to visit every
 * slot instead, which is what a check did before there was a wake.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wake.h"

#define W_LISTED	1
#define W_QUEUED	2

int wake_init(struct wake *w, uint32_t max)
{
	memset(w, 0, sizeof(*w));
	w->max = max;
	w->flags = calloc(max ? max : 1, sizeof(*w->flags));
	w->due = calloc(max ? max : 1, sizeof(*w->due));
	if (!w->flags || !w->due) {
		wake_free(w);
		return -ENOMEM;
	}
	return 0;
}

void wake_free(struct wake *w)
{
	free(w->flags);
	free(w->due);
	free(w->list);
	free(w->taken);
	free(w->queue);
	free(w->heap);
	memset(w, 0, sizeof(*w));
}

/* Room for one more of size sz in *v (holding n, room for *cap); false
 * when out of memory. */
static bool grow(void **v, size_t n, size_t *cap, size_t sz)
{
	size_t c;
	void *p;

	if (n < *cap)
		return true;
	c = *cap ? *cap * 2 : 64;
	p = realloc(*v, c * sz);
	if (!p)
		return false;
	*v = p;
	*cap = c;
	return true;
}

void wake_list(struct wake *w, uint32_t slot)
{
	if (slot >= w->max || (w->flags[slot] & W_LISTED))
		return;
	if (!grow((void **)&w->list, w->n_list, &w->cap_list, sizeof(*w->list))) {
		w->all = true;
		return;
	}
	w->list[w->n_list++] = slot;
	w->flags[slot] |= W_LISTED;
}

static bool before(const struct wake_due *a, const struct wake_due *b)
{
	return a->ns < b->ns;
}

void wake_at(struct wake *w, uint32_t slot, uint64_t ns)
{
	size_t i;

	if (slot >= w->max || w->due[slot] == ns)
		return;
	w->due[slot] = ns;
	/* an entry of an earlier time stays in the heap, stale */
	if (!ns)
		return;
	if (!grow((void **)&w->heap, w->n_heap, &w->cap_heap, sizeof(*w->heap))) {
		w->all = true;
		return;
	}
	i = w->n_heap++;
	w->heap[i] = (struct wake_due){ ns, slot };
	while (i && before(&w->heap[i], &w->heap[(i - 1) / 2])) {
		struct wake_due x = w->heap[i];

		w->heap[i] = w->heap[(i - 1) / 2];
		w->heap[(i - 1) / 2] = x;
		i = (i - 1) / 2;
	}
}

static struct wake_due heap_pop(struct wake *w)
{
	struct wake_due top = w->heap[0];
	size_t i = 0;

	w->heap[0] = w->heap[--w->n_heap];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct wake_due x;

		if (l < w->n_heap && before(&w->heap[l], &w->heap[m]))
			m = l;
		if (r < w->n_heap && before(&w->heap[r], &w->heap[m]))
			m = r;
		if (m == i)
			break;
		x = w->heap[i];
		w->heap[i] = w->heap[m];
		w->heap[m] = x;
		i = m;
	}
	return top;
}

void wake_queue(struct wake *w, uint32_t slot)
{
	if (slot >= w->max || (w->flags[slot] & W_QUEUED))
		return;
	if (w->q_n == w->q_cap) {
		size_t c = w->q_cap ? w->q_cap * 2 : 64;
		uint32_t *q = malloc(c * sizeof(*q));

		if (!q) {
			w->all = true;
			return;
		}
		/* the ring unrolled from its head */
		for (size_t i = 0; i < w->q_n; i++)
			q[i] = w->queue[(w->q_head + i) % w->q_cap];
		free(w->queue);
		w->queue = q;
		w->q_cap = c;
		w->q_head = 0;
	}
	w->queue[(w->q_head + w->q_n++) % w->q_cap] = slot;
	w->flags[slot] |= W_QUEUED;
}

bool wake_next_queued(struct wake *w, uint32_t *slot)
{
	if (!w->q_n)
		return false;
	*slot = w->queue[w->q_head];
	w->q_head = (w->q_head + 1) % w->q_cap;
	w->q_n--;
	w->flags[*slot] &= (uint8_t)~W_QUEUED;
	return true;
}

size_t wake_take(struct wake *w, uint64_t now, const uint32_t **slots)
{
	uint32_t *t;
	size_t n, c;

	while (w->n_heap && w->heap[0].ns <= now) {
		struct wake_due d = heap_pop(w);

		if (w->due[d.slot] != d.ns)
			continue;	/* stale: due at another time, or not */
		w->due[d.slot] = 0;
		wake_list(w, d.slot);
	}
	/* The list taken is handed out; the next check's starts empty in
	 * the other array, so that the visits can list slots again. */
	t = w->list;
	n = w->n_list;
	c = w->cap_list;
	w->list = w->taken;
	w->cap_list = w->cap_taken;
	w->n_list = 0;
	w->taken = t;
	w->cap_taken = c;
	for (size_t i = 0; i < n; i++)
		w->flags[t[i]] &= (uint8_t)~W_LISTED;
	*slots = t;
	return n;
}

void wake_clear(struct wake *w)
{
	/* every flag and time set is in the list, the ring or the heap:
	 * cleared there, not over every slot */
	for (size_t i = 0; i < w->n_list; i++)
		w->flags[w->list[i]] = 0;
	for (size_t i = 0; i < w->q_n; i++)
		w->flags[w->queue[(w->q_head + i) % w->q_cap]] = 0;
	for (size_t i = 0; i < w->n_heap; i++)
		w->due[w->heap[i].slot] = 0;
	w->n_list = 0;
	w->q_head = w->q_n = 0;
	w->n_heap = 0;
	w->all = false;
}
