/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Two named sets compared by sorting each once and walking them together
 * (see namediff.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "namediff.h"

static int by_name(const void *pa, const void *pb)
{
	const struct namediff_item *const *a = pa, *const *b = pb;

	return strcmp((*a)->name, (*b)->name);
}

/* Pointers to the n items, sorted by name; NULL if out of memory. */
static const struct namediff_item **sorted(const struct namediff_item *v,
					   size_t n)
{
	const struct namediff_item **s = calloc(n ? n : 1, sizeof(*s));

	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++)
		s[i] = &v[i];
	qsort(s, n, sizeof(*s), by_name);
	return s;
}

int namediff(const struct namediff_item *old, size_t n_old,
	     const struct namediff_item *now, size_t n_now,
	     bool *changed, bool *gone)
{
	const struct namediff_item **so = sorted(old, n_old);
	const struct namediff_item **sn = sorted(now, n_now);
	size_t i = 0, j = 0;

	if (!so || !sn) {
		free(so);
		free(sn);
		return -ENOMEM;
	}
	while (i < n_now || j < n_old) {
		int c = i == n_now ? 1 : j == n_old ? -1 :
			strcmp(sn[i]->name, so[j]->name);

		if (c < 0) {
			changed[sn[i] - now] = true;
			i++;
		} else if (c > 0) {
			gone[so[j] - old] = true;
			j++;
		} else {
			changed[sn[i] - now] = sn[i]->version != so[j]->version;
			gone[so[j] - old] = false;
			i++;
			j++;
		}
	}
	free(so);
	free(sn);
	return 0;
}
