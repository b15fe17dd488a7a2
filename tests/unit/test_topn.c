/* Unit test of user/lib/topn.c: which rows are the k busiest, as a table; equal scores go by name whatever the rows' order. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "topn.h"
#include "check.h"

static void test_pick(void)
{
	static const struct {
		const char *what;
		size_t n, k;
		uint64_t score[5];
		const char *name[5];
		bool keep[5];
	} cases[] = {
		{ "k 0: none", 3, 0, { 5, 1, 9 }, { "a", "b", "c" },
		  { false, false, false } },
		{ "k >= n: all", 3, 3, { 5, 1, 9 }, { "a", "b", "c" },
		  { true, true, true } },
		{ "k 2 of 4: the two highest", 4, 2, { 5, 1, 9, 7 },
		  { "a", "b", "c", "d" }, { false, false, true, true } },
		{ "a tie at the edge goes to the first name", 4, 2, { 3, 9, 3, 1 },
		  { "zz", "m", "aa", "b" }, { false, true, true, false } },
		{ "all equal: the first names, wherever they are", 5, 2,
		  { 0, 0, 0, 0, 0 }, { "e", "c", "a", "d", "b" },
		  { false, false, true, false, true } },
		{ "k 1: the busiest even last", 5, 1, { 1, 2, 3, 4, 100 },
		  { "a", "b", "c", "d", "e" }, { false, false, false, false, true } },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		bool keep[5];

		memset(keep, 0xff, sizeof(keep));
		CHECK(topn_pick(cases[c].score, cases[c].name, cases[c].n,
				cases[c].k, keep) == 0, "%s: failed", cases[c].what);
		for (size_t i = 0; i < cases[c].n; i++)
			CHECK(keep[i] == cases[c].keep[i], "%s: row %zu (%s) kept %d",
			      cases[c].what, i, cases[c].name[i], keep[i]);
	}
}

int main(void)
{
	CHECK_RUN(test_pick);
	return check_exit();
}
