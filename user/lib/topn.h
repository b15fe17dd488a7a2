/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Picking the busiest rows of a table: which tenants get their own metric
 * series when only N may (rlagent --metrics-tenants).  Pure.
 */
#ifndef RL_TOPN_H
#define RL_TOPN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Sets keep[i] for the k rows of highest score[i] (all n when k >= n, none
 * when k is 0) and clears it for the others.  Equal scores go to the name
 * first in strcmp order, so the choice does not depend on the rows' order.
 * 0, or -ENOMEM.
 */
int topn_pick(const uint64_t *score, const char *const *name, size_t n,
	      size_t k, bool *keep);

/*
 * The same choice made a row at a time, for a caller that reads its rows
 * over several turns of an event loop: topn_init for k of at most n rows,
 * topn_add of each row i (0 <= i < n; name must stay valid until
 * topn_keep), then topn_keep fills keep[0..n) as topn_pick would have for
 * the rows added.  topn_init returns 0 or -ENOMEM; topn_free releases what
 * it took (also after a failed init).
 */
struct topn_row;
struct topn {
	struct topn_row *heap;
	size_t k, len;
};

int topn_init(struct topn *t, size_t k, size_t n);
void topn_add(struct topn *t, uint64_t score, const char *name, size_t i);
void topn_keep(const struct topn *t, bool *keep, size_t n);
void topn_free(struct topn *t);

#endif /* RL_TOPN_H */
