/* Unit test of user/lib/namediff.c: which tenants of a new set are new or of another version and which of the old set went, as a table whatever the lists' order; and a set of 100,000 against itself with one change. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "namediff.h"
#include "check.h"

#define MAXN	4

static void test_table(void)
{
	static const struct {
		const char *what;
		size_t n_old, n_now;
		struct namediff_item old[MAXN], now[MAXN];
		bool changed[MAXN], gone[MAXN];
	} cases[] = {
		{ "both empty", 0, 0, { { 0 } }, { { 0 } }, { 0 }, { 0 } },
		{ "all new", 0, 2, { { 0 } }, { { "a", 1 }, { "b", 1 } },
		  { true, true }, { 0 } },
		{ "all gone", 2, 0, { { "a", 1 }, { "b", 1 } }, { { 0 } },
		  { 0 }, { true, true } },
		{ "same names, same versions: nothing", 3, 3,
		  { { "a", 1 }, { "b", 2 }, { "c", 3 } },
		  { { "c", 3 }, { "a", 1 }, { "b", 2 } },
		  { false, false, false }, { false, false, false } },
		{ "one version moved", 2, 2, { { "a", 1 }, { "b", 2 } },
		  { { "b", 5 }, { "a", 1 } }, { true, false }, { false, false } },
		{ "a rename: the new name changed, the old one gone", 2, 2,
		  { { "web", 4 }, { "api", 1 } }, { { "api", 1 }, { "www", 5 } },
		  { false, true }, { true, false } },
		{ "interleaved names, unsorted", 3, 3,
		  { { "m", 1 }, { "z", 1 }, { "a", 1 } },
		  { { "b", 1 }, { "m", 2 }, { "y", 1 } },
		  { true, true, true }, { false, true, true } },
		{ "a prefix of another name is another name", 1, 2,
		  { { "ab", 1 } }, { { "a", 1 }, { "ab", 1 } },
		  { true, false }, { false } },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		bool changed[MAXN], gone[MAXN];

		memset(changed, 0xff, sizeof(changed));
		memset(gone, 0xff, sizeof(gone));
		CHECK(namediff(cases[c].old, cases[c].n_old, cases[c].now,
			       cases[c].n_now, changed, gone) == 0,
		      "%s: failed", cases[c].what);
		for (size_t i = 0; i < cases[c].n_now; i++)
			CHECK(changed[i] == cases[c].changed[i], "%s: now %s changed %d",
			      cases[c].what, cases[c].now[i].name, changed[i]);
		for (size_t j = 0; j < cases[c].n_old; j++)
			CHECK(gone[j] == cases[c].gone[j], "%s: old %s gone %d",
			      cases[c].what, cases[c].old[j].name, gone[j]);
	}
}

/* 100,000 names against the same set reversed, one version moved, one
 * renamed: exactly those, and as fast as a sort (no time is asserted; a
 * quadratic compare would take minutes). */
static void test_large(void)
{
	enum { N = 100000 };
	struct namediff_item *old = calloc(N, sizeof(*old));
	struct namediff_item *now = calloc(N, sizeof(*now));
	char (*names)[16] = calloc(N + 1, sizeof(*names));
	bool *changed = calloc(N, sizeof(*changed)), *gone = calloc(N, sizeof(*gone));
	size_t n_changed = 0, n_gone = 0;

	CHECK(old && now && names && changed && gone, "out of memory");
	if (!old || !now || !names || !changed || !gone)
		goto out;
	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "t%zu", i);
		old[i] = (struct namediff_item){ names[i], 1 };
		now[N - 1 - i] = old[i];
	}
	now[10].version = 2;
	snprintf(names[N], sizeof(names[N]), "renamed");
	now[20].name = names[N];
	CHECK(namediff(old, N, now, N, changed, gone) == 0, "failed");
	for (size_t i = 0; i < N; i++) {
		n_changed += changed[i];
		n_gone += gone[i];
	}
	CHECK(n_changed == 2 && changed[10] && changed[20], "%zu changed", n_changed);
	CHECK(n_gone == 1 && gone[N - 1 - 20], "%zu gone", n_gone);
out:
	free(old);
	free(now);
	free(names);
	free(changed);
	free(gone);
}

int main(void)
{
	CHECK_RUN(test_table);
	CHECK_RUN(test_large);
	return check_exit();
}
