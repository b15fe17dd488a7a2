/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What changed between two versions of a named set: which items are new
 * or of another version, and which went.  Pure; O(n log n), so that a set
 * of 100,000 tenants compares in milliseconds.
 */
#ifndef RL_NAMEDIFF_H
#define RL_NAMEDIFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct namediff_item {
	const char *name;
	uint64_t version;
};

/*
 * changed[i] is set when no item of old has now[i]'s name, or the one that
 * has carries another version; gone[j] when no item of now has old[j]'s
 * name.  Names are unique within each list.  0, or -ENOMEM (changed and
 * gone then unset).
 */
int namediff(const struct namediff_item *old, size_t n_old,
	     const struct namediff_item *now, size_t n_now,
	     bool *changed, bool *gone);

#endif /* RL_NAMEDIFF_H */
