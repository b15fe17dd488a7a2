/* Unit test of user/lib/mem.c: a map's bytes by kind (plain, per CPU with values rounded to 8, ring buffer), and the resident set read from /proc/PID/statm text. */
#include <stdint.h>
#include <stdio.h>

#include "mem.h"
#include "check.h"

static void test_map_bytes(void)
{
	static const struct {
		const char *what;
		enum mem_map_kind kind;
		uint32_t key, value, entries;
		int ncpus;
		uint64_t bytes;
	} cases[] = {
		{ "array of 4096 x 128", MEM_MAP_PLAIN, 4, 128, 4096, 2, 4096 * 132 },
		{ "hash, CPUs do not count", MEM_MAP_PLAIN, 16, 8, 10, 64, 240 },
		{ "per CPU, 2 CPUs", MEM_MAP_PERCPU, 4, 128, 100000, 2,
		  100000ULL * (4 + 256) },
		{ "per CPU value rounded up to 8", MEM_MAP_PERCPU, 4, 12, 10, 4,
		  10 * (4 + 16 * 4) },
		{ "per CPU, no CPU count: one", MEM_MAP_PERCPU, 4, 8, 1, 0, 12 },
		{ "ring buffer: its size", MEM_MAP_RINGBUF, 0, 0, 262144, 8, 262144 },
		{ "a million slots of 128 on 64 CPUs does not wrap", MEM_MAP_PERCPU,
		  4, 128, 1048576, 64, 1048576ULL * (4 + 128 * 64) },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		uint64_t b = mem_map_bytes(cases[c].kind, cases[c].key,
					   cases[c].value, cases[c].entries,
					   cases[c].ncpus);

		CHECK(b == cases[c].bytes, "%s: %llu, expected %llu",
		      cases[c].what, (unsigned long long)b,
		      (unsigned long long)cases[c].bytes);
	}
}

static void test_statm(void)
{
	uint64_t rss = 0, anon = 0;

	CHECK(mem_statm("2000 300 100 5 0 400 0\n", 4096, &rss, &anon) == 0 &&
	      rss == 300 * 4096ULL && anon == 200 * 4096ULL,
	      "statm: %llu, %llu", (unsigned long long)rss,
	      (unsigned long long)anon);
	CHECK(mem_statm("2000 300 300 5 0 400 0\n", 4096, &rss, &anon) == 0 &&
	      anon == 0, "all shared: %llu", (unsigned long long)anon);
	CHECK(mem_statm("2000 300 301 5 0 400 0\n", 4096, &rss, &anon) < 0,
	      "more shared than resident accepted");
	CHECK(mem_statm("2000 300", 4096, &rss, &anon) < 0, "two fields accepted");
	CHECK(mem_statm("2000", 4096, &rss, &anon) < 0, "one field accepted");
	CHECK(mem_statm("", 4096, &rss, &anon) < 0, "empty accepted");
	CHECK(mem_statm("1 2 1", 0, &rss, &anon) < 0, "page size 0 accepted");
}

int main(void)
{
	CHECK_RUN(test_map_bytes);
	CHECK_RUN(test_statm);
	return check_exit();
}
