/* Unit test of user/lib/hot.c: a hot tenant's split of rate and burst into k sub-buckets (exact sums, shares within one), the checks on k, sub-bucket keys and their slots, an agent's own sub-bucket and its fallback order and its wait after a top-up, as tables; and the ledger of where a host's tokens came from. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cluster.h"
#include "hot.h"
#include "check.h"

static struct policy_tenant tenant(const char *name, uint64_t count,
				   uint64_t period, uint64_t burst)
{
	struct policy_tenant t;

	memset(&t, 0, sizeof(t));
	snprintf(t.name, sizeof(t.name), "%s", name);
	t.rate.count = count;
	t.rate.period_s = period;
	t.burst = burst;
	return t;
}

static void test_share(void)
{
	static const struct {
		uint64_t total;
		unsigned int k;
		uint64_t share[4];
	} rows[] = {
		{ 1000, 1, { 1000 } },
		{ 1000, 3, { 334, 333, 333 } },		/* 1000 = 3 x 333 + 1 */
		{ 1001, 3, { 334, 334, 333 } },
		{ 999, 3, { 333, 333, 333 } },
		{ 3, 3, { 1, 1, 1 } },
		{ 10, 4, { 3, 3, 2, 2 } },
		{ 7, 2, { 4, 3 } },
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
		for (unsigned int i = 0; i < rows[r].k; i++) {
			uint64_t s = hot_share(rows[r].total, rows[r].k, i);

			CHECK(s == rows[r].share[i], "%llu / %u, share %u: %llu, "
			      "expected %llu", (unsigned long long)rows[r].total,
			      rows[r].k, i, (unsigned long long)s,
			      (unsigned long long)rows[r].share[i]);
		}
	CHECK(hot_share(10, 3, 3) == 0, "a share past k is 0");
	CHECK(hot_share(10, 0, 0) == 0, "no shares of k = 0");

	/* Every total and k: the shares sum to the total exactly and differ
	 * by at most one, the bigger ones first. */
	for (uint64_t total = 0; total <= 300; total++)
		for (unsigned int k = 1; k <= HOT_SHARDS_MAX; k++) {
			uint64_t sum = 0, prev = UINT64_MAX, lo = UINT64_MAX, hi = 0;

			for (unsigned int i = 0; i < k; i++) {
				uint64_t s = hot_share(total, k, i);

				sum += s;
				CHECK(s <= prev, "%llu / %u: share %u grows",
				      (unsigned long long)total, k, i);
				prev = s;
				lo = s < lo ? s : lo;
				hi = s > hi ? s : hi;
			}
			CHECK(sum == total, "%llu / %u: shares sum to %llu",
			      (unsigned long long)total, k, (unsigned long long)sum);
			CHECK(hi - lo <= 1, "%llu / %u: shares from %llu to %llu",
			      (unsigned long long)total, k,
			      (unsigned long long)lo, (unsigned long long)hi);
		}
}

static void test_sub_tenant(void)
{
	struct policy_tenant t = tenant("api", 100, 60, 20), sub;
	uint64_t rate = 0, burst = 0;

	for (unsigned int i = 0; i < 3; i++) {
		hot_sub_tenant(&t, 3, i, &sub);
		CHECK(sub.rate.period_s == 60, "sub %u keeps the period", i);
		CHECK(strcmp(sub.name, "api") == 0, "sub %u keeps the name", i);
		rate += sub.rate.count;
		burst += sub.burst;
	}
	hot_sub_tenant(&t, 3, 0, &sub);
	CHECK(sub.rate.count == 34 && sub.burst == 7,
	      "sub 0: %llu/60 burst %llu, expected 34/60 burst 7",
	      (unsigned long long)sub.rate.count, (unsigned long long)sub.burst);
	hot_sub_tenant(&t, 3, 2, &sub);
	CHECK(sub.rate.count == 33 && sub.burst == 6,
	      "sub 2: %llu/60 burst %llu, expected 33/60 burst 6",
	      (unsigned long long)sub.rate.count, (unsigned long long)sub.burst);
	CHECK(rate == 100 && burst == 20, "sums %llu and %llu, expected 100 and 20",
	      (unsigned long long)rate, (unsigned long long)burst);
}

static void test_check(void)
{
	static const struct {
		uint64_t count, burst;
		unsigned int k;
		int ret;
		const char *err;
	} rows[] = {
		{ 1000, 100, 1, 0, "" },
		{ 1000, 100, 16, 0, "" },
		{ 3, 3, 3, 0, "" },
		{ 1000, 100, 0, -EINVAL, "invalid shard count '0': expected 1 to 16" },
		{ 1000, 100, 17, -EINVAL, "invalid shard count '17': expected 1 to 16" },
		{ 1000, 2, 3, -EINVAL, "tenant 'api' cannot be split into 3 shards: "
		  "rate 1000 and burst 2 must each be at least the shard count" },
		{ 2, 100, 3, -EINVAL, "tenant 'api' cannot be split into 3 shards: "
		  "rate 2 and burst 100 must each be at least the shard count" },
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		struct policy_tenant t = tenant("api", rows[r].count, 1, rows[r].burst);
		char err[256] = "";
		int ret = hot_check(&t, rows[r].k, err);

		CHECK(ret == rows[r].ret, "k %u: %d, expected %d", rows[r].k, ret,
		      rows[r].ret);
		CHECK(strcmp(err, rows[r].err) == 0, "k %u: '%s', expected '%s'",
		      rows[r].k, err, rows[r].err);
	}
}

static void test_key(void)
{
	static const struct {
		const char *name;
		unsigned int k, i;
		const char *what, *key;
	} rows[] = {
		{ "api", 1, 0, "bucket", "rl:{t:api}:bucket" },
		{ "api", 0, 0, "bucket", "rl:{t:api}:bucket" },
		{ "api", 3, 0, "bucket", "rl:{t:api#0}:bucket" },
		{ "api", 3, 2, "bucket", "rl:{t:api#2}:bucket" },
		{ "web.v2", 16, 15, "bucket", "rl:{t:web.v2#15}:bucket" },
	};
	char key[128];

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		int n = hot_key(key, sizeof(key), rows[r].name, rows[r].k,
				rows[r].i, rows[r].what);

		CHECK(n == (int)strlen(rows[r].key) && strcmp(key, rows[r].key) == 0,
		      "%s k %u i %u: '%s', expected '%s'", rows[r].name, rows[r].k,
		      rows[r].i, key, rows[r].key);
	}

	/* The three sub-buckets of these tenants are on three slots. */
	static const char *const names[] = { "api", "hot", "t1", "web.v2" };

	for (size_t r = 0; r < sizeof(names) / sizeof(names[0]); r++) {
		unsigned int slot[3];

		for (unsigned int i = 0; i < 3; i++) {
			int n = hot_key(key, sizeof(key), names[r], 3, i, "bucket");

			slot[i] = cluster_key_slot(key, (size_t)n);
		}
		CHECK(slot[0] != slot[1] && slot[1] != slot[2] && slot[0] != slot[2],
		      "%s: slots %u %u %u", names[r], slot[0], slot[1], slot[2]);
	}
}

static void test_home(void)
{
	/* FNV-1a 64: "a" 0xaf63dc4c8601ec8c, "foobar" 0x85944171f73967e8. */
	static const struct {
		const char *id;
		unsigned int k, home;
	} rows[] = {
		{ "a", 1, 0 },
		{ "a", 0, 0 },
		{ "a", 3, 0xaf63dc4c8601ec8cULL % 3 },
		{ "foobar", 16, 0x85944171f73967e8ULL % 16 },
		{ "agent-1", 3, 2 },
		{ "host-7", 5, 1 },
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		unsigned int h = hot_home(rows[r].id, rows[r].k);

		CHECK(h == rows[r].home, "%s k %u: home %u, expected %u",
		      rows[r].id, rows[r].k, h, rows[r].home);
	}

	/* 300 agents over 3 sub-buckets: each is home to 80 to 120. */
	unsigned int n[3] = { 0 };
	char id[32];

	for (int a = 0; a < 300; a++) {
		snprintf(id, sizeof(id), "agent-%d", a);
		n[hot_home(id, 3)]++;
	}
	for (int i = 0; i < 3; i++)
		CHECK(n[i] >= 80 && n[i] <= 120, "sub-bucket %d is home to %u of 300",
		      i, n[i]);
}

static void test_order(void)
{
	static const struct {
		unsigned int home, k, order[4];
	} rows[] = {
		{ 0, 1, { 0 } },
		{ 0, 3, { 0, 1, 2 } },
		{ 2, 3, { 2, 0, 1 } },
		{ 1, 4, { 1, 2, 3, 0 } },
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++)
		for (unsigned int n = 0; n < rows[r].k; n++) {
			unsigned int o = hot_order(rows[r].home, rows[r].k, n);

			CHECK(o == rows[r].order[n], "home %u k %u, try %u: %u, "
			      "expected %u", rows[r].home, rows[r].k, n, o,
			      rows[r].order[n]);
		}

	/* Every home and k: k tries visit every sub-bucket once, home first. */
	for (unsigned int k = 1; k <= HOT_SHARDS_MAX; k++)
		for (unsigned int home = 0; home < k; home++) {
			unsigned int seen = 0;

			CHECK(hot_order(home, k, 0) == home, "k %u: home %u first",
			      k, home);
			for (unsigned int n = 0; n < k; n++)
				seen |= 1u << hot_order(home, k, n);
			CHECK(seen == (1u << k) - 1, "k %u home %u: tried %#x", k,
			      home, seen);
		}
}

/* An agent wanting w takes from its home, then falls back in order, as the
 * broker does with lease.lua's grants: it gets min(w, what the sub-buckets
 * hold), never more than their sum, and leaves its home empty first. */
static void test_fallback(void)
{
	static const struct {
		const char *what;
		unsigned int k, home;
		uint64_t held[3], want, got, left[3];
	} rows[] = {
		{ "home has enough", 3, 1, { 5, 5, 5 }, 4, 4, { 5, 1, 5 } },
		{ "home empty: the next", 3, 1, { 5, 0, 5 }, 4, 4, { 5, 0, 1 } },
		{ "home short: the rest from the next, then wrapping", 3, 2,
		  { 3, 9, 2 }, 6, 6, { 0, 8, 0 } },
		{ "all short: what there is", 3, 0, { 1, 1, 1 }, 9, 3, { 0, 0, 0 } },
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		uint64_t held[3], got = 0;

		memcpy(held, rows[r].held, sizeof(held));
		for (unsigned int n = 0; n < rows[r].k && got < rows[r].want; n++) {
			unsigned int i = hot_order(rows[r].home, rows[r].k, n);
			uint64_t g = rows[r].want - got;

			g = g < held[i] ? g : held[i];
			held[i] -= g;
			got += g;
		}
		CHECK(got == rows[r].got, "%s: got %llu, expected %llu", rows[r].what,
		      (unsigned long long)got, (unsigned long long)rows[r].got);
		CHECK(memcmp(held, rows[r].left, sizeof(held)) == 0,
		      "%s: left %llu %llu %llu", rows[r].what,
		      (unsigned long long)held[0], (unsigned long long)held[1],
		      (unsigned long long)held[2]);
	}
}

static void test_wait(void)
{
	static const struct {
		const char *what;
		unsigned int k;
		uint64_t got, want, min_wait, wait;
	} rows[] = {
		{ "whole, short: the bucket's advice", 1, 3, 5, 40, 40 },
		{ "whole, in full but low: the bucket's advice", 1, 5, 5, 25, 25 },
		{ "whole, in full: none", 1, 5, 5, 0, 0 },
		{ "split, in full though one was low: none", 3, 5, 5, 25, 0 },
		{ "split, all short: the shortest advice", 3, 2, 5, 12, 12 },
		{ "split, nothing anywhere", 3, 0, 5, 30, 30 },
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		uint64_t w = hot_wait_ms(rows[r].k, rows[r].got, rows[r].want,
					 rows[r].min_wait);

		CHECK(w == rows[r].wait, "%s: %llu ms, expected %llu", rows[r].what,
		      (unsigned long long)w, (unsigned long long)rows[r].wait);
	}
}

/* sum of a ledger's records */
static uint64_t ledger_sum(const struct hot_ledger *l)
{
	uint64_t n = 0;

	for (unsigned int i = 0; i < l->n; i++)
		n += l->e[i].n;
	return n;
}

/* The ledger: refunds go to where the newest grants came from, spent tokens
 * are the oldest, what paid a debt goes nowhere, what it does not cover goes
 * home; and whatever the mix, the parts add up to what is given back. */
static void test_ledger(void)
{
	/* each from 10 tokens granted by sub-bucket 1, then 5 by 2 */
	static const struct {
		const char *what;
		uint64_t held, taken, give;
		uint64_t parts[3];
	} rows[] = {
		{ "all back", 15, 15, 15, { 0, 10, 5 } },
		{ "8 spent: the newest 7 back", 7, 7, 7, { 0, 2, 5 } },
		{ "a debt of 5 paid first", 15, 15, 10, { 0, 5, 5 } },
		{ "5 held beyond the ledger (credit) go home", 20, 20, 20, { 5, 10, 5 } },
		{ "some of them", 15, 6, 6, { 0, 1, 5 } },
	};
	struct hot_ledger l;
	uint64_t parts[HOT_SHARDS_MAX], held = 0, seed = 1;

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		memset(&l, 0, sizeof(l));
		memset(parts, 0, sizeof(parts));
		hot_ledger_add(&l, 1, 10, 10);
		hot_ledger_add(&l, 2, 5, rows[r].held < 15 ? rows[r].held : 15);
		hot_ledger_take(&l, rows[r].held, rows[r].taken, rows[r].give, 0,
				parts);
		CHECK(!memcmp(parts, rows[r].parts, sizeof(rows[r].parts)),
		      "%s: %llu %llu %llu, expected %llu %llu %llu", rows[r].what,
		      (unsigned long long)parts[0], (unsigned long long)parts[1],
		      (unsigned long long)parts[2],
		      (unsigned long long)rows[r].parts[0],
		      (unsigned long long)rows[r].parts[1],
		      (unsigned long long)rows[r].parts[2]);
	}
	memset(parts, 0, sizeof(parts));
	hot_ledger_take(NULL, 4, 4, 3, 1, parts);
	CHECK(parts[1] == 3, "no ledger: %llu to home, expected 3",
	      (unsigned long long)parts[1]);

	/* any mix: records never beyond what is held nor the maximum, and
	 * the parts always what is given back */
	memset(&l, 0, sizeof(l));
	for (int step = 0; step < 100000; step++) {
		uint64_t r, taken, give, sum = 0;

		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		r = seed >> 33;
		if (r % 3) {
			uint64_t n = r % 50, spent = (r >> 8) % 20;

			held += n;
			held -= spent < held ? spent : held;
			hot_ledger_add(&l, (unsigned int)(r >> 16) % 5, n, held);
		} else {
			taken = held ? (r >> 8) % (held + 1) : 0;
			give = taken ? (r >> 20) % (taken + 1) : 0;
			memset(parts, 0, sizeof(parts));
			hot_ledger_take(&l, held, taken, give, 3, parts);
			held -= taken;
			for (int i = 0; i < HOT_SHARDS_MAX; i++)
				sum += parts[i];
			CHECK(sum == give, "step %d: parts %llu, given %llu", step,
			      (unsigned long long)sum, (unsigned long long)give);
		}
		CHECK(ledger_sum(&l) <= held && l.n <= HOT_LEDGER_MAX,
		      "step %d: ledger %llu (%u records), held %llu", step,
		      (unsigned long long)ledger_sum(&l), l.n,
		      (unsigned long long)held);
	}
}

int main(void)
{
	CHECK_RUN(test_share);
	CHECK_RUN(test_sub_tenant);
	CHECK_RUN(test_check);
	CHECK_RUN(test_key);
	CHECK_RUN(test_home);
	CHECK_RUN(test_order);
	CHECK_RUN(test_fallback);
	CHECK_RUN(test_wait);
	CHECK_RUN(test_ledger);
	return check_exit();
}
