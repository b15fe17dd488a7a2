/* Unit test of user/lib/topn.c: which rows are the k busiest, as a table; equal scores go by name whatever the rows' order; rows added one at a time choose alike. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The reference: every row ranked by a full sort. */
struct ref_row {
	uint64_t score;
	const char *name;
	size_t i;
};

static int ref_cmp(const void *pa, const void *pb)
{
	const struct ref_row *a = pa, *b = pb;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	return strcmp(a->name, b->name);
}

/* The bounded selection keeps exactly the k rows a full sort ranks first,
 * over tables of 2,000 rows with many equal scores, for k of 1 to n-1. */
static void test_pick_matches_sort(void)
{
	enum { N = 2000 };
	static const size_t ks[] = { 1, 2, 7, 1000, N - 1 };
	static char names[N][8];
	static const char *name[N];
	static uint64_t score[N];
	static struct ref_row ref[N];
	static bool keep[N], want[N];
	unsigned int seed = 12345;

	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "t%zu", (i * 7919) % N);
		name[i] = names[i];
		seed = seed * 1103515245 + 12345;
		score[i] = (seed >> 16) % 50;
	}
	for (size_t c = 0; c < sizeof(ks) / sizeof(ks[0]); c++) {
		for (size_t i = 0; i < N; i++)
			ref[i] = (struct ref_row){ score[i], name[i], i };
		qsort(ref, N, sizeof(ref[0]), ref_cmp);
		memset(want, 0, sizeof(want));
		for (size_t i = 0; i < ks[c]; i++)
			want[ref[i].i] = true;
		CHECK(topn_pick(score, name, N, ks[c], keep) == 0, "k %zu: failed", ks[c]);
		for (size_t i = 0; i < N; i++)
			CHECK(keep[i] == want[i], "k %zu: row %zu (%s, %llu) kept %d",
			      ks[c], i, name[i], (unsigned long long)score[i], keep[i]);
	}
}

/* Rows added one at a time, some never (a tenant gone while they were
 * read): those are never kept, and the others are kept as topn_pick keeps
 * them in the table of the rows added alone. */
static void test_add_some(void)
{
	enum { N = 500 };
	static const size_t ks[] = { 0, 1, 10, 250, N };
	static char names[N][8];
	static const char *name[N], *sub_name[N];
	static uint64_t score[N], sub_score[N];
	static bool keep[N], sub_keep[N];
	unsigned int seed = 777;

	for (size_t i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "t%zu", (i * 31) % N);
		name[i] = names[i];
		seed = seed * 1103515245 + 12345;
		score[i] = (seed >> 16) % 20;
	}
	for (size_t c = 0; c < sizeof(ks) / sizeof(ks[0]); c++) {
		struct topn t;
		size_t n_sub = 0;

		CHECK(topn_init(&t, ks[c], N) == 0, "k %zu: init failed", ks[c]);
		for (size_t i = 0; i < N; i++) {
			if (i % 3 == 1)
				continue;
			topn_add(&t, score[i], name[i], i);
			sub_score[n_sub] = score[i];
			sub_name[n_sub++] = name[i];
		}
		memset(keep, 0xff, sizeof(keep));
		topn_keep(&t, keep, N);
		topn_free(&t);
		CHECK(topn_pick(sub_score, sub_name, n_sub, ks[c], sub_keep) == 0,
		      "k %zu: pick failed", ks[c]);
		for (size_t i = 0, j = 0; i < N; i++) {
			bool want = i % 3 == 1 ? false : sub_keep[j++];

			CHECK(keep[i] == want, "k %zu: row %zu (%s, %llu) kept %d",
			      ks[c], i, name[i], (unsigned long long)score[i],
			      keep[i]);
		}
	}
}

int main(void)
{
	CHECK_RUN(test_pick);
	CHECK_RUN(test_pick_matches_sort);
	CHECK_RUN(test_add_some);
	return check_exit();
}
