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

#endif /* RL_TOPN_H */
