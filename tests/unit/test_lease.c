/* Unit test of user/lib/lease.c: the lease cap, the static share a host may owe, the overshoot bound, the credit, the idle reserve, top-ups, lease sizing, the demand it is sized for and the wait of a saturated fleet, as tables of inputs and decisions. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lease.h"
#include "check.h"

static struct policy_tenant tenant(uint64_t count, uint64_t period, uint64_t burst,
				   uint64_t overshoot, enum policy_fail fail)
{
	struct policy_tenant t;

	memset(&t, 0, sizeof(t));
	snprintf(t.name, sizeof(t.name), "t");
	t.rate.count = count;
	t.rate.period_s = period;
	t.burst = burst;
	t.overshoot = overshoot;
	t.fail = fail;
	return t;
}

static void test_limits(void)
{
	static const struct {
		const char *what;
		uint64_t count, period, burst, overshoot;
		enum policy_fail fail;
		uint64_t agents, ttl_ms;
		uint64_t cap, overdraft, debt_max, bound, credit, reserve;
	} rows[] = {
		/* budget = max(burst, half a second) = 75; cap 75/3, a quarter
		 * of it overdraft; static share 10 + 1 s at 50/s (+1 rounding)
		 * + 1 */
		{ "150/s burst 30, 3 agents", 150, 1, 30, 0, POLICY_FAIL_STATIC, 3, 1000,
		  25, 6, 62, 261, 10, 10 },
		{ "the same, deny: nothing owed while degraded", 150, 1, 30, 0,
		  POLICY_FAIL_DENY, 3, 1000, 25, 6, 0, 75, 10, 10 },
		{ "the same, allow", 150, 1, 30, 0, POLICY_FAIL_ALLOW, 3, 1000,
		  25, 6, 0, 75, 10, 10 },
		{ "3000/s burst 300: the cap is not limited by the burst", 3000, 1, 300, 0,
		  POLICY_FAIL_STATIC, 3, 1000, 500, 125, 1102, 4806, 100, 100 },
		{ "a shorter TTL owes less", 3000, 1, 300, 0, POLICY_FAIL_STATIC, 3, 250,
		  500, 125, 352, 2556, 100, 100 },
		/* no credit: three hosts would admit three tokens of a burst of 1;
		 * an idle host keeps its one token, leased; no overdraft */
		{ "1/m burst 1: a cap of 1, no credit, a reserve of 1", 1, 60, 1, 0, POLICY_FAIL_STATIC,
		  3, 1000, 1, 0, 3, 12, 0, 1 },
		{ "--overshoot 3 over 3 agents: leases of 1", 200, 1, 20, 3,
		  POLICY_FAIL_DENY, 3, 1000, 1, 0, 0, 3, 1, 1 },
		/* a cap of 4 is the least with an overdraft */
		{ "--overshoot 12 over 3 agents: an overdraft of 1", 200, 1, 20, 12,
		  POLICY_FAIL_DENY, 3, 1000, 4, 1, 0, 12, 3, 3 },
		/* the credit within what it may hold, the cap less the
		 * overdraft */
		{ "one agent: the whole budget, a quarter overdraft", 100, 1, 100, 0,
		  POLICY_FAIL_DENY, 1, 1000, 100, 25, 0, 100, 75, 75 },
		{ "no agents counted yet: as one", 100, 1, 100, 0, POLICY_FAIL_DENY,
		  0, 1000, 100, 25, 0, 100, 75, 75 },
		{ "1/h burst 1 for a day of TTL", 1, 3600, 1, 0, POLICY_FAIL_STATIC, 2,
		  86400000, 1, 0, 1 + 13 + 1, 32, 0, 1 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct policy_tenant t = tenant(rows[i].count, rows[i].period,
						rows[i].burst, rows[i].overshoot,
						rows[i].fail);
		uint64_t cap = lease_cap(&t, rows[i].agents);
		uint64_t d = lease_static_debt_max(&t, rows[i].agents, rows[i].ttl_ms);
		uint64_t bound = lease_bound(&t, rows[i].agents, rows[i].ttl_ms);
		uint64_t credit = lease_credit(&t, rows[i].agents);
		uint64_t reserve = lease_reserve(&t, rows[i].agents);
		uint64_t od = lease_overdraft(&t, rows[i].agents);
		uint64_t hold = lease_hold(&t, rows[i].agents);

		CHECK(cap == rows[i].cap, "%s: cap %llu, expected %llu", rows[i].what,
		      (unsigned long long)cap, (unsigned long long)rows[i].cap);
		CHECK(od == rows[i].overdraft && hold >= 1 && hold + od == cap,
		      "%s: overdraft %llu and hold %llu, expected %llu and the rest "
		      "of the cap %llu", rows[i].what, (unsigned long long)od,
		      (unsigned long long)hold, (unsigned long long)rows[i].overdraft,
		      (unsigned long long)cap);
		CHECK(d == rows[i].debt_max, "%s: static debt max %llu, expected %llu",
		      rows[i].what, (unsigned long long)d,
		      (unsigned long long)rows[i].debt_max);
		CHECK(bound == rows[i].bound, "%s: bound %llu, expected %llu",
		      rows[i].what, (unsigned long long)bound,
		      (unsigned long long)rows[i].bound);
		CHECK(credit == rows[i].credit, "%s: credit %llu, expected %llu",
		      rows[i].what, (unsigned long long)credit,
		      (unsigned long long)rows[i].credit);
		CHECK(credit <= hold, "%s: credit %llu beyond the hold %llu", rows[i].what,
		      (unsigned long long)credit, (unsigned long long)hold);
		CHECK(reserve == rows[i].reserve && reserve >= 1 && reserve <= hold,
		      "%s: reserve %llu, expected %llu (hold %llu)", rows[i].what,
		      (unsigned long long)reserve, (unsigned long long)rows[i].reserve,
		      (unsigned long long)hold);
	}
}

/* The most a static share admits in ttl, by the kernel's own arithmetic
 * (a GCRA bucket of burst / agents, one token per interval x agents), is
 * within what lease_static_debt_max() lets a host owe. */
static void test_static_debt_covers_the_kernel(void)
{
	static const uint64_t rates[][2] = {
		{ 1, 1 }, { 7, 1 }, { 150, 1 }, { 3000, 1 }, { 999999, 1 },
		{ 1, 60 }, { 17, 60 }, { 1, 3600 }, { 1000000000, 1 },
	};
	static const uint64_t bursts[] = { 1, 2, 30, 1000 };
	static const uint64_t ttls[] = { 10, 250, 1000, 60000 };

	for (size_t i = 0; i < sizeof(rates) / sizeof(rates[0]); i++)
		for (size_t j = 0; j < sizeof(bursts) / sizeof(bursts[0]); j++)
			for (size_t k = 0; k < sizeof(ttls) / sizeof(ttls[0]); k++)
				for (uint64_t n = 1; n <= 7; n += 3) {
					struct policy_tenant t = tenant(rates[i][0], rates[i][1],
									bursts[j], 0,
									POLICY_FAIL_STATIC);
					uint64_t interval = policy_interval_ns(&t.rate) * n;
					uint64_t burst = bursts[j] / n ? bursts[j] / n : 1;
					unsigned __int128 most = burst +
						(unsigned __int128)ttls[k] * 1000000 / interval;

					/* the kernel's share, saturated or not, is no bigger */
					{
						uint64_t ki;
						uint32_t kb;

						policy_fail_share(&t, n, &ki, &kb);
						CHECK(kb <= burst && ki >= interval,
						      "policy_fail_share() grew the share");
					}

					CHECK(most < lease_static_debt_max(&t, n, ttls[k]),
					      "%llu/%llus burst %llu, %llu agents, TTL %llu ms: "
					      "the kernel may admit %llu, owed at most %llu",
					      (unsigned long long)rates[i][0],
					      (unsigned long long)rates[i][1],
					      (unsigned long long)bursts[j], (unsigned long long)n,
					      (unsigned long long)ttls[k], (unsigned long long)most,
					      (unsigned long long)lease_static_debt_max(&t, n, ttls[k]));
				}
}

static void test_topup(void)
{
	static const struct {
		uint64_t cap, held, size, want;
	} rows[] = {
		{ 10, 3, 5, 5 },	/* room for a whole lease */
		{ 10, 8, 5, 2 },	/* only up to the cap */
		{ 10, 10, 5, 0 },	/* at the cap: nothing */
		{ 10, 12, 5, 0 },	/* above it (the cap shrank): nothing */
		{ 1, 0, 1, 1 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		CHECK(lease_topup(rows[i].cap, rows[i].held, rows[i].size) == rows[i].want,
		      "topup(cap %llu, held %llu, size %llu): %llu, expected %llu",
		      (unsigned long long)rows[i].cap, (unsigned long long)rows[i].held,
		      (unsigned long long)rows[i].size,
		      (unsigned long long)lease_topup(rows[i].cap, rows[i].held,
						     rows[i].size),
		      (unsigned long long)rows[i].want);
}

/* What a lease call asks for: the top-up with the debt and the overdraft
 * on top, within lease.lua's largest want; 0 only when there is nothing at
 * all to ask, which settles a first lease (lease_ask()). */
static void test_ask(void)
{
	static const struct {
		const char *what;
		uint64_t topup, debt, overdrawn, want;
	} rows[] = {
		{ "at the cap, owing nothing: nothing", 0, 0, 0, 0 },
		{ "a top-up alone", 7, 0, 0, 7 },
		{ "at the cap, the credit to pay", 0, 5, 0, 5 },
		{ "at the cap, the overdraft to pay", 0, 0, 3, 3 },
		{ "all three", 7, 5, 3, 15 },
		{ "beyond the largest want", POLICY_BURST_MAX, 1, 0, POLICY_BURST_MAX },
		{ "sums that would wrap", UINT64_MAX, UINT64_MAX, UINT64_MAX,
		  POLICY_BURST_MAX },
	};
	struct policy_tenant t = tenant(3000, 1, 300, 0, POLICY_FAIL_STATIC);

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		CHECK(lease_ask(rows[i].topup, rows[i].debt, rows[i].overdrawn) ==
		      rows[i].want, "%s: ask(%llu, %llu, %llu) = %llu, want %llu",
		      rows[i].what, (unsigned long long)rows[i].topup,
		      (unsigned long long)rows[i].debt,
		      (unsigned long long)rows[i].overdrawn,
		      (unsigned long long)lease_ask(rows[i].topup, rows[i].debt,
						    rows[i].overdrawn),
		      (unsigned long long)rows[i].want);

	/* Tokens adopted after a restart, as many as the host may hold: the
	 * first lease asks for nothing, whatever its size, and so settles.
	 * A new tenant started on credit asks for at least the credit. */
	for (uint64_t agents = 1; agents <= 8; agents++) {
		uint64_t hold = lease_hold(&t, agents), credit = lease_credit(&t, agents);

		CHECK(lease_ask(lease_topup(hold, hold, hold), 0, 0) == 0,
		      "%llu agents: a full hold of %llu asks for something",
		      (unsigned long long)agents, (unsigned long long)hold);
		CHECK(lease_ask(lease_topup(hold, credit, hold), credit, 0) >= credit &&
		      credit > 0, "%llu agents: a first lease on a credit of %llu "
		      "asks for less", (unsigned long long)agents,
		      (unsigned long long)credit);
	}
}

static void test_plan(void)
{
	static const struct {
		const char *what;
		uint64_t count, burst, agents;
		double rate, refused;
		uint64_t ttl_ms, lead_ms;
		uint64_t size, lowwater, chunk;
	} rows[] = {
		/* cap 500, of which the host may hold 375 (the rest is the
		 * overdraft); a chunk of 30 ms of the rate (90) refills in 30 ms,
		 * so the low-water mark is 50 ms of the host's traffic, and the
		 * lease the burst (a TTL of traffic would be 1000) */
		{ "3000/s, even 95%", 3000, 300, 3, 1000, 0, 1000, 20, 300, 50, 90 },
		/* the busy host of a 90/5/5 skew: a chunk that covers its own
		 * refill would be bigger than a lease; size + low-water = hold */
		{ "3000/s, 90% of 95% on one host", 3000, 300, 3, 2565, 0, 1000, 20,
		  174, 201, 174 },
		/* a quiet host: a lease TTL of its own traffic */
		{ "3000/s, 5% of 95% on one host", 3000, 300, 3, 142.5, 0, 1000, 20,
		  143, 8, 90 },
		{ "100/s, even 95%", 100, 100, 3, 95.0 / 3, 0, 1000, 20, 23, 2, 3 },
		/* at least the credit (2500, all it may hold) where there is
		 * room */
		{ "10000/s, even 95%", 10000, 10000, 3, 9500.0 / 3, 0, 1000, 20,
		  2341, 159, 300 },
		/* not measured yet: the credit, and half of it as low-water */
		{ "3000/s, demand unknown", 3000, 300, 3, -1, 0, 1000, 20, 100, 50, 100 },
		{ "100/s, demand unknown: the credit is all it may hold", 100, 100, 3, -1,
		  0, 1000, 20, 25, 12, 25 },
		/* asked all the same: traffic is starting, the credit */
		{ "no demand measured", 3000, 300, 3, 0, 0, 1000, 20, 100, 50, 100 },
		/* a quiet host leases its credit, not a TTL of its traffic */
		{ "3000/s, a host at 5/s", 3000, 300, 3, 5, 0, 1000, 20, 100, 1, 5 },
		/* a cap of 1 leaves no room for a low-water mark */
		{ "1/s burst 1 (cap 1)", 1, 1, 3, 5, 0, 1000, 20, 1, 0, 1 },
		{ "1/s burst 1 (cap 1), demand unknown", 1, 1, 3, -1, 0, 1000, 20, 1, 0, 1 },
		/* demand above the whole rate: refused anyway, so the biggest
		 * lease and chunk and a low-water mark of the lead (150/s x
		 * 20 ms), within the 19 it may hold */
		{ "150/s burst 30 with 2000/s of demand", 150, 30, 3, 2000, 0.9, 1000, 20,
		  16, 3, 16 },
		{ "200/s burst 20, one host at 270/s", 200, 20, 3, 270, 0.3, 1000, 20,
		  20, 4, 20 },
		/* under the rate, but refusing 10%: the fleet is at its limit */
		{ "3000/s, even 150%", 3000, 300, 3, 1500, 0.1, 1000, 20, 300, 30, 300 },
		/* ...refusing 1%: not yet */
		{ "3000/s, even, 1% refused", 3000, 300, 3, 1000, 0.01, 1000, 20,
		  300, 50, 90 },
		/* a long lead: a bigger chunk, which covers its own refill */
		{ "3000/s, even 95%, 100 ms lead", 3000, 300, 3, 1000, 0, 1000, 100,
		  225, 150, 150 },
		{ "3000/s, even 95%, TTL 100 ms", 3000, 300, 3, 1000, 0, 100, 20,
		  100, 50, 90 },
		/* a Redis 200 ms away (a lead of 320 ms, 64 tokens): lease
		 * and low-water mark share the 94 it may hold, half each; a
		 * lease of a bare round trip of traffic (40) would fall short
		 * whenever a lease came later than the measured round trip */
		{ "1000/s burst 100 on 4 hosts, one at 200/s, 320 ms lead", 1000, 100, 4,
		  200, 0, 1000, 320, 47, 47, 47 },
		/* ...and a hold (9 of a cap of 12) smaller than a lead of
		 * traffic: the
		 * low-water mark no longer takes all of it but 1, leaving
		 * leases of one token per round trip; lease and mark share it,
		 * about half a cap per round trip */
		{ "100/s burst 20 on 4 hosts, twice the limit evenly, 320 ms lead", 100, 20,
		  4, 50, 0.5, 1000, 320, 5, 4, 5 },
		{ "100/s burst 20 on 4 hosts, one at 200/s, 320 ms lead", 100, 20, 4,
		  200, 0.5, 1000, 320, 5, 4, 5 },
		{ "100/s burst 20 on 4 hosts, even 50/s not yet refused, 320 ms lead", 100,
		  20, 4, 50, 0, 1000, 320, 5, 4, 5 },
		/* the lease needs no more than a round trip of traffic (10 of
		 * the 10 of half the hold, 19): the mark keeps the rest */
		{ "50/s burst 50 on 2 hosts (cap 25), one at 80/s, 320 ms lead", 50, 50,
		  2, 80, 0.4, 1000, 320, 10, 9, 10 },
		/* no round trip measured (a lead of 20 ms): as before, the
		 * mark first */
		{ "100/s burst 20 on 4 hosts, one at 200/s, 20 ms lead", 100, 20, 4,
		  200, 0.5, 1000, 20, 7, 2, 7 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct policy_tenant t = tenant(rows[i].count, 1, rows[i].burst, 0,
						POLICY_FAIL_STATIC);
		struct lease_in in = {
			.rate = rows[i].rate, .refused = rows[i].refused, .t = &t,
			.agents = rows[i].agents, .ttl_ms = rows[i].ttl_ms,
			.lead_ms = rows[i].lead_ms,
		};
		struct lease_plan p;

		lease_plan(&in, &p);
		CHECK(p.size == rows[i].size && p.lowwater == rows[i].lowwater &&
		      p.chunk == rows[i].chunk,
		      "%s: lease %llu low-water %llu chunk %llu, expected %llu, %llu "
		      "and %llu", rows[i].what, (unsigned long long)p.size,
		      (unsigned long long)p.lowwater, (unsigned long long)p.chunk,
		      (unsigned long long)rows[i].size,
		      (unsigned long long)rows[i].lowwater,
		      (unsigned long long)rows[i].chunk);
	}
}

/* Whatever the demand: a lease of at least 1 and at most the burst and
 * what the host may hold (the cap less the overdraft), a low-water mark
 * below that, and topping up at the low-water mark never holds more; with
 * the demand measured, a whole lease fits on top of the low-water mark. */
static void test_plan_within_cap(void)
{
	static const uint64_t counts[] = { 1, 10, 100, 3000, 10000, 1000000 };
	static const uint64_t bursts[] = { 1, 3, 100, 300, 10000 };
	static const double rates[] = { -1, 0, 0.5, 3, 99, 1000, 2850, 1e5, 1e7 };

	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++)
		for (size_t j = 0; j < sizeof(bursts) / sizeof(bursts[0]); j++)
			for (size_t k = 0; k < sizeof(rates) / sizeof(rates[0]); k++)
				for (uint64_t n = 1; n <= 9; n += 4)
				for (uint64_t lead = 30; lead <= 1000; lead += 290) {
					struct policy_tenant t = tenant(counts[i], 1, bursts[j], 0,
									POLICY_FAIL_STATIC);
					struct lease_in in = {
						.rate = rates[k], .t = &t, .agents = n,
						.ttl_ms = 1000, .lead_ms = lead,
					};
					uint64_t cap = lease_hold(&t, n);
					struct lease_plan p;

					lease_plan(&in, &p);
					CHECK(p.size >= 1 && p.size <= bursts[j] && p.size <= cap &&
					      p.chunk >= 1 && p.chunk <= p.size &&
					      (p.lowwater < cap || (cap == 1 && p.lowwater == 0)) &&
					      p.lowwater + lease_topup(cap, p.lowwater, p.size) <= cap &&
					      (rates[k] <= 0 || cap == 1 || p.size + p.lowwater <= cap),
					      "%llu/s burst %llu, %llu agents, demand %g, lead "
					      "%llu ms: lease %llu low-water %llu, cap %llu",
					      (unsigned long long)counts[i],
					      (unsigned long long)bursts[j], (unsigned long long)n,
					      rates[k], (unsigned long long)lead, (unsigned long long)p.size,
					      (unsigned long long)p.lowwater, (unsigned long long)cap);
				}
}

static void test_lead(void)
{
	static const struct {
		uint64_t rtt_ns, lead_ms;
	} rows[] = {
		{ 0, 20 },		/* no round trip measured yet */
		{ 1999999, 20 },	/* in steps of 2 ms, rounded down */
		{ 2000000, 23 },
		{ 5000000, 26 },
		{ 20000000, 50 },
		{ 200000000, 320 },	/* a Redis 200 ms away */
		{ 653999999, 998 },
		{ 654000000, 1000 },	/* the most: the default lease TTL */
		{ 2000000000, 1000 },
		{ UINT64_MAX, 1000 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		CHECK(lease_lead_ms(rows[i].rtt_ns) == rows[i].lead_ms,
		      "lead for a round trip of %llu ns: %llu ms, expected %llu",
		      (unsigned long long)rows[i].rtt_ns,
		      (unsigned long long)lease_lead_ms(rows[i].rtt_ns),
		      (unsigned long long)rows[i].lead_ms);
}

#define MS	1000000ULL

static void test_demand(void)
{
	static const struct {
		const char *what;
		unsigned int n;
		struct lease_sample first, last;
		uint64_t now_ns, count, sized_ns, sized_count;
		double rate, refused;
	} rows[] = {
		{ "nothing sampled, never sized: not measured", 0, { 0 }, { 0 },
		  1000 * MS, 50, 0, 0, -1, 0 },
		/* traffic that starts after a quiet spell, before any sizing
		 * saw it: not measured, though it ran 100/s since the sample */
		{ "one sample, never sized: not measured", 1, { 0, 0, 0 }, { 0, 0, 0 },
		  1000 * MS, 100, 0, 0, -1, 0 },
		{ "3 s of samples: 300/s, 10% refused", 4, { 0, 0, 0 },
		  { 3000 * MS, 810, 90 }, 3020 * MS, 900, 0, 0, 300, 0.1 },
		{ "traffic moved here since the latest sample: its rate", 4,
		  { 0, 0, 0 }, { 3000 * MS, 300, 0 }, 3500 * MS, 550, 0, 0, 500, 0 },
		/* 50 in 50 ms since the sizing beats 90 in 450 ms since the
		 * sample and 300 in 3 s */
		{ "the rate since the last sizing, when it is the fastest", 4,
		  { 0, 0, 0 }, { 3000 * MS, 300, 0 }, 3450 * MS, 390, 3400 * MS, 340,
		  1000, 0 },
		{ "less than 50 ms since the latest sample: the window's rate", 4,
		  { 0, 0, 0 }, { 3000 * MS, 300, 0 }, 3040 * MS, 340, 0, 0, 100, 0 },
		{ "traffic in the window, none since: the window's rate", 4,
		  { 0, 0, 0 }, { 3000 * MS, 300, 0 }, 3100 * MS, 300, 0, 0, 100, 0 },
		{ "sized 4 ms ago: too soon to count", 0, { 0 }, { 0 }, 1000 * MS, 60,
		  996 * MS, 10, -1, 0 },
		{ "sized 5 ms ago: counts", 0, { 0 }, { 0 }, 1000 * MS, 60, 995 * MS, 10,
		  10000, 0 },
		{ "sized 600 ms ago: too long ago to count", 0, { 0 }, { 0 }, 1000 * MS,
		  600, 400 * MS, 0, -1, 0 },
		/* the window saw none of it: what came since the sizing and
		 * since the sample decide */
		{ "a quiet window, then traffic", 4, { 0, 100, 0 }, { 3000 * MS, 100, 0 },
		  3200 * MS, 150, 3100 * MS, 100, 500, 0 },
		{ "counters that fell (a slot reset): no rate", 4, { 0, 500, 0 },
		  { 3000 * MS, 10, 0 }, 3010 * MS, 10, 0, 0, -1, 0 },
		{ "counters below the sizing's: no rate", 0, { 0 }, { 0 }, 1000 * MS, 10,
		  900 * MS, 500, -1, 0 },
		{ "every SYN refused: 100% refused", 2, { 0, 40, 0 }, { 1000 * MS, 40, 200 },
		  1010 * MS, 240, 0, 0, 200, 1 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct lease_meter m = {
			.n_samples = rows[i].n, .first = rows[i].first,
			.last = rows[i].last, .now_ns = rows[i].now_ns,
			.count = rows[i].count, .sized_ns = rows[i].sized_ns,
			.sized_count = rows[i].sized_count,
		};
		double refused = -1, rate = lease_demand(&m, &refused);

		CHECK(fabs(rate - rows[i].rate) < 1e-6 &&
		      fabs(refused - rows[i].refused) < 1e-9,
		      "%s: %g/s with %g refused, expected %g/s and %g", rows[i].what,
		      rate, refused, rows[i].rate, rows[i].refused);
	}
}

static void test_wait(void)
{
	static const struct {
		const char *what;
		uint64_t count, period;
		uint64_t asked, granted, remaining, chunk, advised_ms;
		uint64_t wait_ms;
	} rows[] = {
		{ "granted nothing: Redis's advice", 100, 1, 10, 0, 0, 5, 40, 40 },
		{ "granted in part: no wait", 100, 1, 10, 4, 0, 5, 0, 0 },
		{ "granted in full, a chunk left: no wait", 100, 1, 10, 10, 5, 5, 0, 0 },
		{ "granted in full, 3 short of a chunk at 100/s: 30 ms", 100, 1, 10, 10,
		  2, 5, 0, 30 },
		{ "4 short at 30/s: 133.3 ms, rounded up", 30, 1, 8, 8, 0, 4, 0, 134 },
		{ "1/m, one short: a minute", 1, 60, 1, 1, 0, 1, 0, 60000 },
		{ "an empty bucket at 3000/s, chunk 90: 30 ms", 3000, 1, 300, 300, 0, 90,
		  0, 30 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct policy_tenant t = tenant(rows[i].count, rows[i].period, 100, 0,
						POLICY_FAIL_STATIC);
		uint64_t w = lease_wait_ms(&t, rows[i].asked, rows[i].granted,
					   rows[i].remaining, rows[i].chunk,
					   rows[i].advised_ms);

		CHECK(w == rows[i].wait_ms, "%s: wait %llu ms, expected %llu",
		      rows[i].what, (unsigned long long)w,
		      (unsigned long long)rows[i].wait_ms);
	}
}

static void test_conns(void)
{
	/* samples 1 s apart: syns SYNs (admitted) in between */
	static const struct {
		const char *what;
		uint64_t cap, agents;
		unsigned int points;
		uint64_t held, in_flight, syns;
		uint64_t want;
	} rows[] = {
		{ "idle, none held: none to ask for", 30, 3, 1, 0, 0, 0, 0 },
		{ "idle, a chunk held: all of it back", 30, 3, 1, 2, 0, 0, 0 },
		{ "first in flight, none held: it and a chunk (30 / 3 / 4)", 30, 3, 1, 0, 1, 0, 3 },
		{ "one free of a chunk of 2: nothing to ask", 30, 3, 1, 3, 2, 0, 3 },
		{ "none free: a chunk more", 30, 3, 1, 3, 3, 0, 5 },
		{ "more than two chunks free: back to a chunk", 30, 3, 1, 10, 1, 0, 3 },
		{ "two points: a free one each", 30, 3, 2, 3, 2, 0, 4 },
		{ "a small cap: a chunk of at least 1", 10, 3, 1, 1, 1, 0, 2 },
		{ "at the cap: no more", 4, 1, 1, 4, 4, 0, 4 },
		{ "churn too slow for more than a chunk (20/s)", 30, 3, 1, 2, 0, 20, 2 },
		{ "churn at 100/s: its share ahead (10)", 30, 3, 1, 2, 0, 100, 10 },
		{ "churn at 100/s, 5 in flight: the share, 5 free", 30, 3, 1, 8, 5, 100, 10 },
		{ "churn at 100/s, 5 free of the share: nothing to ask", 30, 3, 1, 10, 5, 100, 10 },
		{ "churn at 100/s, its share in flight: a chunk beyond", 30, 3, 1, 10, 10, 100, 12 },
		{ "churn at 200/s, share 30: twice the room of 20", 90, 3, 1, 0, 0, 200, 30 },
		{ "churn at 100/s, share 250: within a chunk of 62", 1000, 4, 1, 62, 0, 100, 62 },
		{ "churn at 150/s, share 40: twice the room of 15", 120, 3, 1, 10, 0, 150, 30 },
		{ "churn at 150/s, room 15, 20 free: nothing to ask", 120, 3, 1, 20, 0, 150, 20 },
		{ "churn at 150/s, more than 3 x 15 free: back to 30", 120, 3, 1, 46, 0, 150, 30 },
		{ "churn at 150/s, 3 x 15 free: nothing to ask", 120, 3, 1, 45, 0, 150, 45 },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct lease_conns c = {
			.cap = rows[i].cap, .agents = rows[i].agents,
			.points = rows[i].points, .held = rows[i].held,
			.in_flight = rows[i].in_flight, .n_samples = 2,
			.first = { 1000000000ULL, 500, 0 },
			.last = { 2000000000ULL, 500 + rows[i].syns, 0 },
			.check_ms = 50,
		};
		uint64_t want = lease_conns_want(&c);

		CHECK(want == rows[i].want, "%s: asks for %llu, expected %llu",
		      rows[i].what, (unsigned long long)want,
		      (unsigned long long)rows[i].want);
	}
}

int main(void)
{
	CHECK_RUN(test_limits);
	CHECK_RUN(test_static_debt_covers_the_kernel);
	CHECK_RUN(test_topup);
	CHECK_RUN(test_ask);
	CHECK_RUN(test_plan);
	CHECK_RUN(test_plan_within_cap);
	CHECK_RUN(test_lead);
	CHECK_RUN(test_demand);
	CHECK_RUN(test_wait);
	CHECK_RUN(test_conns);
	return check_exit();
}
