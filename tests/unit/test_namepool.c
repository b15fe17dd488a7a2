/* Unit test of user/lib/namepool.c: every holder reads back the name it was given, through names given up and the pool copied anew (its offsets rewritten, its dead bytes gone); against a reference of fixed arrays over random changes; names set in room reserved for them without the pool growing. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "namepool.h"
#include "check.h"

#define N	3000

/* Holders as a table would have them: an offset among other members. */
struct entry {
	uint64_t before;
	uint32_t name;
	uint32_t after;
};

static void test_set_and_drop(void)
{
	struct entry e[4] = { 0 };
	struct name_holders h = { &e[0].name, 4, sizeof(e[0]) };
	struct name_pool np = { 0 };

	CHECK(strcmp(name_pool_get(&np, e[0].name), "") == 0, "unset: \"\"");
	CHECK(name_pool_set(&np, &h, &e[0].name, "alpha") == 0 &&
	      name_pool_set(&np, &h, &e[1].name, "beta") == 0, "set");
	CHECK(strcmp(name_pool_get(&np, e[0].name), "alpha") == 0 &&
	      strcmp(name_pool_get(&np, e[1].name), "beta") == 0,
	      "read back: '%s' '%s'", name_pool_get(&np, e[0].name),
	      name_pool_get(&np, e[1].name));
	CHECK(name_pool_set(&np, &h, &e[0].name, "") == 0 && e[0].name == 0 &&
	      np.dead == 6, "given up: offset 0, 6 dead bytes (%u)", np.dead);
	CHECK(strcmp(name_pool_get(&np, e[1].name), "beta") == 0, "the other kept");
	name_pool_free(&np);
}

/* Room reserved for names: they are set without the pool growing (the
 * same buffer, the same capacity), however full it was. */
static void test_reserve(void)
{
	struct entry e[8] = { 0 };
	struct name_holders h = { &e[0].name, 8, sizeof(e[0]) };
	struct name_pool np = { 0 };
	char name[600];
	bool ok = true;
	char *buf;
	uint32_t cap;

	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	CHECK(name_pool_reserve(&np, &h, 0) == 0 && !np.buf, "nothing: no pool");
	CHECK(name_pool_set(&np, &h, &e[0].name, "alpha") == 0, "set");
	/* up to the last byte, then 8 x 600 more */
	while (np.len + 2 <= np.cap && name_pool_set(&np, &h, &e[1].name, "b") == 0)
		;
	CHECK(name_pool_reserve(&np, &h, 8 * sizeof(name)) == 0, "reserved");
	buf = np.buf;
	cap = np.cap;
	for (int i = 0; i < 8; i++)
		ok = ok && name_pool_set(&np, &h, &e[i].name, name) == 0;
	CHECK(ok && np.buf == buf && np.cap == cap, "set in the room reserved: "
	      "cap %u, was %u", np.cap, cap);
	for (int i = 0; i < 8; i++)
		ok = ok && strcmp(name_pool_get(&np, e[i].name), name) == 0;
	CHECK(ok, "each reads back");
	CHECK(name_pool_reserve(&np, &h, (size_t)UINT32_MAX) == -ENOMEM &&
	      np.buf == buf && np.cap == cap, "more than 4 GiB: -ENOMEM, unchanged");
	name_pool_free(&np);
}

/* Random names set and given up in N holders: each reads back what a
 * fixed array holds, and a pool that grew is at most twice its live
 * bytes (the dead ones gone). */
static void test_matches_reference(void)
{
	static struct entry e[N];
	static char ref[N][64];
	struct name_holders h = { &e[0].name, N, sizeof(e[0]) };
	struct name_pool np = { 0 };
	unsigned int seed = 7;
	bool ok = true;
	size_t live = 1;
	uint32_t cap;

	memset(e, 0, sizeof(e));
	memset(ref, 0, sizeof(ref));
	for (int round = 0; ok && round < 200000; round++) {
		size_t i = (size_t)rand_r(&seed) % N;
		char name[64] = "";

		if (rand_r(&seed) % 4) {
			int len = 1 + rand_r(&seed) % 63;

			for (int k = 0; k < len; k++)
				name[k] = (char)('a' + rand_r(&seed) % 26);
			name[len] = '\0';
		}
		live -= ref[i][0] ? strlen(ref[i]) + 1 : 0;
		cap = np.cap;
		ok = name_pool_set(&np, &h, &e[i].name, name) == 0;
		snprintf(ref[i], sizeof(ref[i]), "%s", name);
		live += name[0] ? strlen(name) + 1 : 0;
		for (size_t j = 0; ok && j < N; j += round % 97 ? N : 1)
			ok = strcmp(name_pool_get(&np, e[j].name), ref[j]) == 0;
		ok = ok && np.len - np.dead == live && np.len <= np.cap &&
		     (np.cap == cap || np.cap <= 4096 || np.cap <= 2 * live);
		if (!ok)
			diag("round %d: holder %zu, len %u dead %u cap %u live %zu",
			     round, i, np.len, np.dead, np.cap, live);
	}
	for (size_t j = 0; ok && j < N; j++)
		ok = strcmp(name_pool_get(&np, e[j].name), ref[j]) == 0 &&
		     e[j].before == 0 && e[j].after == 0;
	CHECK(ok, "every holder reads its name, the other members untouched");
	name_pool_free(&np);
}

int main(void)
{
	CHECK_RUN(test_set_and_drop);
	CHECK_RUN(test_reserve);
	CHECK_RUN(test_matches_reference);
	return check_exit();
}
