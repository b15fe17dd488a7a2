/* Unit test of user/lib/namehash.c: names are found at their records' positions through records added, removed (the last moved into the hole, or cut out with the rest moved down) and the array moved, against a brute-force search over random changes; a build keeps a repeated name's first position and its room takes that many names without growing; the table stays at most half full. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "namehash.h"
#include "check.h"

#define N	3000

/* Records as a table would have them: a name among other members. */
struct rec {
	uint64_t before;
	char name[24];
	uint32_t after;
};

static struct name_recs recs_of(const struct rec *r)
{
	return (struct name_recs){ r ? r->name : NULL, sizeof(*r) };
}

static void test_find_put_del(void)
{
	struct rec r[3] = { { .name = "alpha" }, { .name = "beta" }, { .name = "" } };
	struct name_hash h = { 0 };

	CHECK(name_hash_find(&h, recs_of(r), "alpha") == SIZE_MAX,
	      "nothing built: not found");
	name_hash_del(&h, recs_of(r), 0);
	CHECK(name_hash_build(&h, recs_of(r), 2, 0) == 0 && h.n == 2, "built");
	CHECK(name_hash_find(&h, recs_of(r), "alpha") == 0 &&
	      name_hash_find(&h, recs_of(r), "beta") == 1 &&
	      name_hash_find(&h, recs_of(r), "gamma") == SIZE_MAX &&
	      name_hash_find(&h, recs_of(r), "") == SIZE_MAX, "found where they are");
	snprintf(r[2].name, sizeof(r[2].name), "gamma");
	CHECK(name_hash_put(&h, recs_of(r), 2) == 0 && h.n == 3 &&
	      name_hash_find(&h, recs_of(r), "gamma") == 2, "put");
	name_hash_del(&h, recs_of(r), 0);
	CHECK(h.n == 2 && name_hash_find(&h, recs_of(r), "alpha") == SIZE_MAX &&
	      name_hash_find(&h, recs_of(r), "beta") == 1, "deleted alone");
	/* a record of the same name elsewhere is not the one held */
	name_hash_moved(&h, recs_of(r), 0, 1);
	CHECK(name_hash_find(&h, recs_of(r), "beta") == 1, "moved from where it was not");
	r[0] = r[2];
	name_hash_moved(&h, recs_of(r), 2, 0);
	CHECK(name_hash_find(&h, recs_of(r), "gamma") == 0, "moved");
	name_hash_free(&h);
	CHECK(h.cap == 0 && name_hash_find(&h, recs_of(r), "gamma") == SIZE_MAX,
	      "freed: nothing found");
}

/* A name twice in the records: its first position, as a walk from the
 * start would find it; room taken without the table growing. */
static void test_build_first_and_room(void)
{
	static struct rec r[64];
	struct name_hash h = { 0 };
	uint32_t *slots;
	bool ok = true;

	for (int i = 0; i < 64; i++)
		snprintf(r[i].name, sizeof(r[i].name), "n%d", i % 10);
	CHECK(name_hash_build(&h, recs_of(r), 20, 64) == 0 && h.n == 10,
	      "10 names of 20 records (%zu)", h.n);
	for (int i = 0; i < 10; i++)
		ok = ok && name_hash_find(&h, recs_of(r), r[i].name) == (size_t)i;
	CHECK(ok, "each at its first position");
	for (int i = 0; i < 64; i++)
		snprintf(r[i].name, sizeof(r[i].name), "m%d", i);
	CHECK(name_hash_build(&h, recs_of(r), 0, 64) == 0 && h.n == 0, "empty, room for 64");
	slots = h.slots;
	for (int i = 0; i < 64; i++)
		ok = ok && name_hash_put(&h, recs_of(r), (size_t)i) == 0;
	CHECK(ok && h.slots == slots && h.n == 64, "64 put in their room, no growth");
	CHECK(name_hash_put(&h, recs_of(r), 63) == 0 && h.n == 64,
	      "a name put again is held once");
	name_hash_free(&h);
}

/* The position of name among r[0..n), by walking them. */
static size_t walk(const struct rec *r, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(r[i].name, name) == 0)
			return i;
	return SIZE_MAX;
}

/* Random changes of an array of unique names as the agent makes them: a
 * record appended, one removed with the last moved into its place (the
 * tenant set), one cut out with the rest moved down (the tombstones,
 * oldest first), the array reallocated.  Every name, and names not there,
 * found where a walk finds them; never more than half full. */
static void test_matches_walk(void)
{
	struct rec *r = calloc(N, sizeof(*r));
	struct name_hash h = { 0 };
	unsigned int seed = 11;
	size_t n = 0, cap = N;
	int next = 0;
	bool ok = r != NULL;

	for (int round = 0; ok && round < 60000; round++) {
		int op = rand_r(&seed) % 8;

		if (op < 4 && n < cap) {
			snprintf(r[n].name, sizeof(r[n].name), "t%d", next++);
			r[n].before = r[n].after = 0;
			ok = name_hash_put(&h, recs_of(r), n) == 0;
			n++;
		} else if (op < 6 && n) {
			size_t i = (size_t)rand_r(&seed) % n;

			name_hash_del(&h, recs_of(r), i);
			if (i != n - 1) {
				r[i] = r[n - 1];
				name_hash_moved(&h, recs_of(r), n - 1, i);
			}
			n--;
		} else if (op == 6 && n) {
			size_t i = (size_t)rand_r(&seed) % n;

			name_hash_cut(&h, recs_of(r), i);
			memmove(&r[i], &r[i + 1], (n - i - 1) * sizeof(*r));
			n--;
		} else if (op == 7 && round % 50 == 0) {
			struct rec *moved = calloc(cap, sizeof(*moved));

			ok = moved != NULL;
			if (ok) {
				memcpy(moved, r, n * sizeof(*r));
				free(r);
				r = moved;
			}
		}
		for (size_t j = 0; ok && j < n; j += round % 101 ? 97 : 1)
			ok = name_hash_find(&h, recs_of(r), r[j].name) == j;
		for (int k = 0; ok && k < 3; k++) {
			char name[24];

			snprintf(name, sizeof(name), "t%d", rand_r(&seed) % (next + 10));
			ok = name_hash_find(&h, recs_of(r), name) == walk(r, n, name);
		}
		ok = ok && h.n == n && 2 * h.n <= h.cap;
		if (!ok)
			diag("round %d: %zu records, %zu held, cap %zu", round, n,
			     h.n, h.cap);
	}
	for (size_t j = 0; ok && j < n; j++)
		ok = name_hash_find(&h, recs_of(r), r[j].name) == j;
	CHECK(ok, "every name where it is, absent ones not found");
	name_hash_free(&h);
	free(r);
}

int main(void)
{
	CHECK_RUN(test_find_put_del);
	CHECK_RUN(test_build_first_and_room);
	CHECK_RUN(test_matches_walk);
	return check_exit();
}
