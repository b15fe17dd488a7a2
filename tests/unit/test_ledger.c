/* Unit test of user/lib/ledger.c: what the agent believes of a pool slot's leased tokens and connections in flight, as tables of counts read and of steps (grants, spends, forged counts, takes, an agent starting on a filled slot); with any mix of steps, never more taken out of the slot than was given to it; and with processes spending through librlpreload.so's rl_pool_take() meanwhile, no token lost or minted and none taken for forged. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"
#include "pool.h"
#include "check.h"

static void test_see(void)
{
	static const struct {
		const char *what;
		int64_t seen;
		uint64_t given, spare;
		/* after */
		uint64_t forged, given_after, spare_after;
	} rows[] = {
		{ "as given", 10, 10, 0, 0, 10, 0 },
		{ "some spent", 4, 10, 0, 0, 4, 0 },
		{ "all spent", 0, 10, 0, 0, 0, 0 },
		{ "below zero (a count written negative)", -5, 10, 0, 0, 0, 0 },
		{ "raised by one", 11, 10, 0, 1, 10, 0 },
		{ "raised from nothing given", 1000000, 0, 0, 1000000, 0, 0 },
		{ "spare and given, as they were", 15, 10, 5, 0, 10, 5 },
		{ "a spend uses the spare ones first", 12, 10, 5, 0, 10, 2 },
		{ "then the agent's own", 7, 10, 5, 0, 7, 0 },
		{ "raised past both", 20, 10, 5, 5, 10, 5 },
		{ "only spare, raised", 9, 0, 8, 1, 0, 8 },
		{ "the largest count, nothing given", INT64_MAX, 0, 0,
		  (uint64_t)INT64_MAX, 0, 0 },
		{ "the largest count, as much given", INT64_MAX,
		  (uint64_t)INT64_MAX, 0, 0, (uint64_t)INT64_MAX, 0 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct rl_ledger l = { rows[i].given, rows[i].spare };
		uint64_t forged = rl_ledger_see(&l, rows[i].seen);

		CHECK(forged == rows[i].forged && l.given == rows[i].given_after &&
		      l.spare == rows[i].spare_after,
		      "%s: forged %llu, given %llu, spare %llu; want %llu %llu %llu",
		      rows[i].what, (unsigned long long)forged,
		      (unsigned long long)l.given, (unsigned long long)l.spare,
		      (unsigned long long)rows[i].forged,
		      (unsigned long long)rows[i].given_after,
		      (unsigned long long)rows[i].spare_after);
	}
}

enum step_op {
	ADOPT,	/* the agent starts on the slot as it is */
	GIVE,	/* the agent adds n */
	SPEND,	/* a process spends n (as the library: never below 0) */
	WRITE,	/* a process of the group writes the count n */
	TRIM,	/* the agent's check */
	TAKE,	/* the agent takes up to n back (0: all) */
	BOUND,	/* no more spare than n */
};

static void test_steps(void)
{
	static const struct {
		const char *what;
		enum step_op op;
		int64_t n;
		/* after */
		int64_t tokens;
		uint64_t given, spare, got, forged;
	} steps[] = {
		{ "a grant of 10", GIVE, 10, 10, 10, 0, 0, 0 },
		{ "3 spent", SPEND, 3, 7, 10, 0, 0, 0 },
		{ "the check sees the spends", TRIM, 0, 7, 7, 0, 0, 0 },
		{ "forged to 1000", WRITE, 1000, 1000, 7, 0, 0, 0 },
		{ "the check takes the forged tokens out", TRIM, 0, 7, 7, 0, 0, 993 },
		{ "forged to 500 again", WRITE, 500, 500, 7, 0, 0, 0 },
		{ "a take of all: 7, the forged 493 dropped", TAKE, 0, 0, 0, 0, 7, 493 },
		{ "forged from nothing given", WRITE, 50, 50, 0, 0, 0, 0 },
		{ "a take of 10 takes nothing", TAKE, 10, 0, 0, 0, 0, 50 },
		{ "a grant of 20", GIVE, 20, 20, 20, 0, 0, 0 },
		{ "written 25 where the ledger holds 20", WRITE, 25, 25, 20, 0, 0, 0 },
		{ "a take of 8: the 5 forged out first", TAKE, 8, 12, 12, 0, 8, 5 },
		{ "12 spent (all)", SPEND, 12, 0, 12, 0, 0, 0 },
		{ "a take of all finds none", TAKE, 0, 0, 0, 0, 0, 0 },
		{ "written negative", WRITE, -3, -3, 0, 0, 0, 0 },
		{ "the check leaves a negative count alone", TRIM, 0, -3, 0, 0, 0, 0 },
		{ "a grant of 5 onto it", GIVE, 5, 2, 5, 0, 0, 0 },
		{ "the check: the ledger follows the count down", TRIM, 0, 2, 2, 0, 0, 0 },
		{ "a take of all: 2", TAKE, 0, 0, 0, 0, 2, 0 },
		{ "written 100 while no agent runs", WRITE, 100, 100, 0, 0, 0, 0 },
		{ "a new agent: all spare", ADOPT, 0, 100, 0, 100, 0, 0 },
		{ "at most 60 a host may hold: 40 forged", BOUND, 60, 60, 0, 60, 0, 40 },
		{ "a take of all takes none of them", TAKE, 0, 60, 0, 60, 0, 0 },
		{ "a grant of 10", GIVE, 10, 70, 10, 60, 0, 0 },
		{ "30 spent: the spare ones", SPEND, 30, 40, 10, 60, 0, 0 },
		{ "the check", TRIM, 0, 40, 10, 30, 0, 0 },
		{ "written 90", WRITE, 90, 90, 10, 30, 0, 0 },
		{ "the check takes 50 out", TRIM, 0, 40, 10, 30, 0, 50 },
		{ "a take of all: the 10 given", TAKE, 0, 30, 0, 30, 10, 0 },
		{ "a bound above what is left changes nothing", BOUND, 60, 30, 0, 30, 0, 0 },
		{ "75 spent, more than spare", SPEND, 75, 0, 0, 30, 0, 0 },
		{ "the check: nothing left", TRIM, 0, 0, 0, 0, 0, 0 },
	};
	struct rl_tenant rt;
	struct rl_ledger l = { 0 };

	memset(&rt, 0, sizeof(rt));
	rt.mode = RL_MODE_LEASED;
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		uint64_t got = 0, forged = 0;

		switch (steps[i].op) {
		case ADOPT:
			rl_ledger_adopt(&rt, &l);
			break;
		case GIVE:
			rl_ledger_add(&rt, &l, (uint64_t)steps[i].n, 0);
			break;
		case SPEND:
			rt.tokens -= steps[i].n < rt.tokens ? steps[i].n : rt.tokens;
			break;
		case WRITE:
			rt.tokens = steps[i].n;
			break;
		case TRIM:
			forged = rl_ledger_trim(&rt, &l);
			break;
		case TAKE:
			got = rl_ledger_take(&rt, &l, (uint64_t)steps[i].n, &forged);
			break;
		case BOUND:
			forged = rl_ledger_bound(&rt, &l, (uint64_t)steps[i].n);
			break;
		}
		CHECK(rt.tokens == steps[i].tokens && l.given == steps[i].given &&
		      l.spare == steps[i].spare && got == steps[i].got &&
		      forged == steps[i].forged,
		      "%s: tokens %lld given %llu spare %llu got %llu forged %llu; "
		      "want %lld %llu %llu %llu %llu", steps[i].what,
		      (long long)rt.tokens, (unsigned long long)l.given,
		      (unsigned long long)l.spare, (unsigned long long)got,
		      (unsigned long long)forged, (long long)steps[i].tokens,
		      (unsigned long long)steps[i].given,
		      (unsigned long long)steps[i].spare,
		      (unsigned long long)steps[i].got,
		      (unsigned long long)steps[i].forged);
		CHECK(rl_ledger_tokens(&rt, &l) <= l.given &&
		      rl_ledger_spendable(&rt, &l) <= l.given + l.spare,
		      "%s: believed %llu (%llu with spare) beyond the ledger",
		      steps[i].what, (unsigned long long)rl_ledger_tokens(&rt, &l),
		      (unsigned long long)rl_ledger_spendable(&rt, &l));
	}
}

/* Any mix of grants, spends, forged counts, checks and takes: what comes
 * out of the slot (to the kernel or Redis) never exceeds what went in, and
 * the ledger never exceeds what is left of that. */
static void test_never_mints(void)
{
	struct rl_tenant rt;
	struct rl_ledger l;
	uint64_t given = 0, taken = 0;

	memset(&rt, 0, sizeof(rt));
	rt.mode = RL_MODE_LEASED;
	/* an agent started on a slot someone filled */
	rt.tokens = 5000;
	rl_ledger_adopt(&rt, &l);
	srand(7);
	for (int i = 0; i < 200000; i++) {
		uint64_t n = (uint64_t)(rand() % 50);

		switch (1 + rand() % 5) {
		case GIVE:
			rl_ledger_add(&rt, &l, n, 0);
			given += n;
			break;
		case SPEND:
			if (rt.tokens > 0)
				rt.tokens -= (int64_t)n < rt.tokens ? (int64_t)n :
								     rt.tokens;
			break;
		case WRITE:
			rt.tokens = rand() % 3 ? rt.tokens + (int64_t)n * 100 :
						 -(int64_t)n;
			break;
		case TRIM:
			rl_ledger_trim(&rt, &l);
			break;
		case TAKE:
			taken += rl_ledger_take(&rt, &l, n, NULL);
			break;
		}
		if (taken > given || l.given > given - taken) {
			CHECK(0, "step %d: given %llu, taken %llu, ledger %llu", i,
			      (unsigned long long)given, (unsigned long long)taken,
			      (unsigned long long)l.given);
			return;
		}
	}
	diag("given %llu, taken back %llu", (unsigned long long)given,
	     (unsigned long long)taken);
}

static struct rl_pool spend_pool;
static int spending;

/* A preloaded process: spends from slot 0 until told to stop; returns
 * how many it was admitted. */
static void *spender(void *arg)
{
	uint64_t *admitted = arg;

	while (__atomic_load_n(&spending, __ATOMIC_ACQUIRE))
		if (rl_pool_take(&spend_pool, 0, 1) == RL_POOL_ADMIT)
			__atomic_fetch_add(admitted, 1, __ATOMIC_RELAXED);
	return NULL;
}

/* The agent's grants, checks and takes while two processes spend (until
 * they have spent 20,000 tokens): what it gave is what they were admitted,
 * what it took back and what is left, and no honest spend ever looks like
 * a forgery. */
static void test_spent_meanwhile(void)
{
	static struct rl_pool_hdr hdr;
	static struct rl_tenant slot;
	static struct rl_stats stats;
	struct rl_ledger l = { 0 };
	uint64_t given = 0, taken = 0, forged = 0, f;
	uint64_t admitted[2] = { 0 }, spent = 0;
	time_t deadline = time(NULL) + 60;
	pthread_t th[2];

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		check_skip("one CPU: the spends would not run alongside");
		return;
	}
	memset(&slot, 0, sizeof(slot));
	spend_pool.n_tenants = 1;
	slot.mode = RL_MODE_LEASED;
	slot.fail = RL_FAIL_DENY;
	spend_pool.hdr = &hdr;
	spend_pool.tenants = &slot;
	spend_pool.stats = &stats;
	__atomic_store_n(&spending, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, spender, &admitted[i]);
	srand(11);
	while (spent < 20000 && time(NULL) < deadline) {
		uint64_t n = (uint64_t)(rand() % 20);

		switch (rand() % 4) {
		case 0:
		case 1:
			rl_ledger_add(&slot, &l, n, 0);
			given += n;
			break;
		case 2:
			forged += rl_ledger_trim(&slot, &l);
			break;
		default:
			taken += rl_ledger_take(&slot, &l, n / 4, &f);
			forged += f;
			break;
		}
		spent = __atomic_load_n(&admitted[0], __ATOMIC_RELAXED) +
			__atomic_load_n(&admitted[1], __ATOMIC_RELAXED);
	}
	__atomic_store_n(&spending, 0, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	diag("given %llu, admitted %llu + %llu, taken back %llu, left %lld",
	     (unsigned long long)given, (unsigned long long)admitted[0],
	     (unsigned long long)admitted[1], (unsigned long long)taken,
	     (long long)slot.tokens);
	CHECK(forged == 0, "%llu honest token(s) taken for forged",
	      (unsigned long long)forged);
	CHECK(slot.tokens >= 0 &&
	      given == admitted[0] + admitted[1] + taken + (uint64_t)slot.tokens,
	      "given %llu != admitted %llu + taken %llu + left %lld",
	      (unsigned long long)given,
	      (unsigned long long)(admitted[0] + admitted[1]),
	      (unsigned long long)taken, (long long)slot.tokens);
	CHECK(spent >= 20000, "the processes spent %llu in 60 s",
	      (unsigned long long)spent);
}

static void test_conns(void)
{
	static const struct {
		const char *what;
		int64_t seen, found, want;
	} rows[] = {
		{ "nothing looked at yet", 5, -1, 5 },
		{ "as found", 5, 5, 5 },
		{ "fewer found (closes the check gives back)", 5, 3, 5 },
		{ "a release forged to 0 with 4 held", 0, 4, 4 },
		{ "written negative, nothing looked at", -7, -1, 0 },
		{ "written negative with 2 held", -7, 2, 2 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int64_t got = rl_ledger_conns(rows[i].seen, rows[i].found);

		CHECK(got == rows[i].want, "%s: %lld, want %lld", rows[i].what,
		      (long long)got, (long long)rows[i].want);
	}
}

int main(void)
{
	CHECK_RUN(test_see);
	CHECK_RUN(test_steps);
	CHECK_RUN(test_never_mints);
	CHECK_RUN(test_spent_meanwhile);
	CHECK_RUN(test_conns);
	return check_exit();
}
