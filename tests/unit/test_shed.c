/* Unit test of user/lib/shed.c: overload shedding's decision as tables - the mark as a queue length, each tenant's limit from weights and demands (a weighted max-min share), and the controller's start, budget and stop from queue samples. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "shed.h"
#include "check.h"

static void test_mark_len(void)
{
	static const struct {
		uint32_t max;
		unsigned int pct;
		uint32_t len;
	} rows[] = {
		{ 8, 50, 4 },
		{ 8, 60, 5 },		/* 4.8 rounds up: never below the mark */
		{ 128, 100, 128 },
		{ 4096, 80, 3277 },
		{ 1, 1, 1 },		/* at least one connection */
		{ 0, 50, 1 },
		{ 8, 0, UINT32_MAX },	/* no mark: never */
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		uint32_t got = shed_mark_len(rows[r].max, rows[r].pct);

		CHECK(got == rows[r].len, "max %u, mark %u%%: %u, expected %u",
		      rows[r].max, rows[r].pct, got, rows[r].len);
	}
}

#define NT 4

static void test_level(void)
{
	/* budget, weights and demands (per second) -> each tenant's limit
	 * (weight x level; -1: not held, the demands fit) */
	static const struct {
		const char *what;
		double budget;
		size_t n;
		uint32_t w[NT];
		double d[NT];
		double limit[NT];
	} rows[] = {
		{ "3:1, both flooding: 75/25", 100, 2, { 3, 1 }, { 500, 500 },
		  { 75, 25 } },
		{ "1:1:2, all flooding: 25/25/50", 200, 3, { 1, 1, 2 },
		  { 800, 800, 800 }, { 50, 50, 100 } },
		{ "a light tenant takes what it asks, its rest to the others",
		  100, 3, { 1, 1, 2 }, { 5, 800, 800 }, { 31.666, 31.666, 63.333 } },
		{ "weight 0 counts as 1", 60, 2, { 0, 2 }, { 500, 500 },
		  { 20, 40 } },
		{ "a tenant that offers nothing holds nothing back", 90, 3,
		  { 1, 1, 1 }, { 0, 300, 300 }, { 45, 45, 45 } },
		{ "demands fit: nobody held", 100, 2, { 3, 1 }, { 50, 50 },
		  { -1, -1 } },
		{ "no budget: everyone at 0", 0, 2, { 3, 1 }, { 10, 10 },
		  { 0, 0 } },
		{ "the heavy one's excess, not the light one's share", 100, 2,
		  { 1, 1 }, { 30, 1000 }, { 70, 70 } },
		{ "two settle in turn", 100, 4, { 1, 1, 1, 1 },
		  { 10, 20, 500, 500 }, { 35, 35, 35, 35 } },
	};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		double level = shed_level(rows[r].budget, rows[r].n, rows[r].w,
					  rows[r].d);
		double admitted = 0;

		for (size_t i = 0; i < rows[r].n; i++) {
			double wi = rows[r].w[i] ? rows[r].w[i] : 1;
			double want = rows[r].limit[i];
			double got = isinf(level) ? -1 : wi * level;

			CHECK(fabs(got - want) < 0.01, "%s: tenant %zu held to "
			      "%.3f/s, expected %.3f/s", rows[r].what, i, got,
			      want);
			admitted += rows[r].d[i] < got || isinf(level) ?
				    rows[r].d[i] : got;
		}
		/* what they would be admitted adds up to the budget */
		if (!isinf(level))
			CHECK(fabs(admitted - rows[r].budget) < 0.01,
			      "%s: %.3f/s admitted of a budget of %.3f/s",
			      rows[r].what, admitted, rows[r].budget);
	}
}

/* Splits of a budget among random weights and demands: held or not as
 * the demands exceed the budget or not, and when held, what each tenant
 * is admitted (its demand, at most its limit) adds up to the budget. */
static void test_level_random(void)
{
	uint64_t x = 88172645463325252ULL;

	for (int round = 0; round < 2000; round++) {
		uint32_t w[NT];
		double d[NT], budget, level, sum = 0;

		for (int i = 0; i < NT; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			w[i] = 1 + x % 5;
			d[i] = (double)((x >> 20) % 1000);
		}
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		budget = (double)(x % 2000);
		level = shed_level(budget, NT, w, d);
		for (int i = 0; i < NT; i++)
			sum += isinf(level) ? d[i] : fmin(d[i], w[i] * level);
		if (isinf(level)) {
			CHECK(sum <= budget, "round %d: not held while the "
			      "demands (%.3f) exceed the budget %.3f", round,
			      sum, budget);
			continue;
		}
		CHECK(fabs(sum - budget) < 1e-6 * (budget + 1), "round %d: "
		      "%.6f admitted of a budget of %.6f", round, sum, budget);
	}
}

/* The controller on a queue of 8 with the mark at 50% (4): samples of
 * 10 ms, a server that accepts 100/s (one a sample). */
static void test_sample(void)
{
	struct shed_ctl c = { 0 };
	double dt = 0.01;

	/* below the mark: never on, whatever the demand */
	CHECK(!shed_sample(&c, 0, 8, 50, 0, 0, dt), "idle: off");
	for (int i = 0; i < 20; i++)
		CHECK(!shed_sample(&c, 3, 8, 50, 1, 1000, dt),
		      "at 3 of 8 (mark 4): off, sample %d", i);
	CHECK(fabs(c.accept_rate - 100) < 20, "accept rate %.1f/s, "
	      "about 100/s", c.accept_rate);

	/* the mark reached: on, budget the accept rate less the excess */
	CHECK(shed_sample(&c, 6, 8, 50, 4, 1000, dt), "at 6 of 8: on");
	CHECK(c.budget < c.accept_rate, "above the mark the budget %.1f/s is "
	      "below the accept rate %.1f/s", c.budget, c.accept_rate);
	/* full: the 4 above the mark taken off over SHED_HORIZON_S */
	CHECK(shed_sample(&c, 8, 8, 50, 3, 1000, dt), "full: on");
	CHECK(fabs(c.budget - (c.accept_rate - 4 / SHED_HORIZON_S)) < 0.01,
	      "full queue: budget %.1f/s, expected the accept rate %.1f/s "
	      "less 80/s", c.budget, c.accept_rate);
	/* a queue that stays full while nothing is accepted: no budget */
	for (int i = 0; i < 50; i++)
		shed_sample(&c, 8, 8, 50, 0, 1000, dt);
	CHECK(c.budget == 0, "stuck full: budget %.1f/s, expected 0", c.budget);

	/* below the mark again, the demand still over budget: stays on */
	CHECK(shed_sample(&c, 2, 8, 50, 0, 1000, dt), "drained, demand "
	      "1000/s over budget: still on");
	CHECK(c.budget > c.accept_rate, "below the mark the budget %.1f/s "
	      "adds the room to the accept rate %.1f/s", c.budget,
	      c.accept_rate);
	/* the demand fits in the budget: off */
	CHECK(!shed_sample(&c, 2, 8, 50, 1, 10, dt), "demand 10/s fits: off");

	/* a mark of 0 never sheds, even on a full queue */
	c = (struct shed_ctl){ 0 };
	CHECK(!shed_sample(&c, 8, 8, 0, 0, 1000, dt), "mark 0: off");
	/* a listener without a backlog (max 0) is not judged */
	CHECK(!shed_sample(&c, 0, 0, 50, 0, 1000, dt), "max 0: off");
}

int main(void)
{
	CHECK_RUN(test_mark_len);
	CHECK_RUN(test_level);
	CHECK_RUN(test_level_random);
	CHECK_RUN(test_sample);
	return check_exit();
}
