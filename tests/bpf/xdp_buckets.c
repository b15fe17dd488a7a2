// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Standalone buckets (GCRA on the tenant's tat): what a bucket emptied a
 * while ago admits, the cap at its burst, refill in real time, and the
 * precise clock for buckets smaller than a tick of tokens.
 */
#include "xdp_test.h"

/* Tenant 1 of a small world, burst 5 at one token a second, emptied
 * `earned_ns` ago: `want` of n SYNs pass. */
struct refill_row {
	__u64 earned_ns;
	int n, want;
	const char *what;
};

static int scen_refill(const void *arg)
{
	const struct refill_row *row = arg;
	struct inst in;
	struct rl_tenant *t;

	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 5);
	expect_refill(&in, &t->tat, 5, row->earned_ns, row->n, row->want,
		      1000, row->what);
	inst_close(&in);
	return 0;
}

static const struct refill_row emptied_3_ago = {
	3 * SEC_NS, 8, 3, "bucket empty 3 intervals ago (burst 5)",
};
static const struct refill_row idle_2x_burst = {
	10 * SEC_NS, 12, 5, "idle for 2x burst (10 tokens earned, 5 kept)",
};
static const struct refill_row half_a_token = {
	SEC_NS / 2, 3, 0, "half a token",
};

static int scen_refill_realtime(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, REALTIME_INTERVAL_NS, 1);
	expect_refill_realtime(&in, &t->tat, "bucket");
	inst_close(&in);
	return 0;
}

/*
 * A bucket that one tick's worth of tokens would overflow (burst 1 at
 * 1,000/s: on the coarse clock it could admit at most one SYN per tick,
 * 250/s at HZ=250) reads the precise clock (RL_FINE_CLOCK_NS) and keeps its
 * rate.  SYNs back to back for 200 ms: never more than rate x time + burst,
 * and at least 60 % of the milliseconds in which the test got to send a SYN
 * at all (a tick-bound bucket gets 25 % at HZ=250).  Counting only those
 * milliseconds keeps a loaded machine, which deschedules the sender and
 * wastes the tokens of the gaps, from failing the test.
 */
static int scen_fine_clock(const void *arg)
{
	const __u64 interval = 1000000, span = 200 * 1000000ull;
	__u64 t0, elapsed, admits = 0, bound, slot, last = ~0ull, slots = 0;
	struct inst in;
	__u32 v, i;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, interval, 1);
	t0 = now_ns();
	for (i = 0; i < 2000000 && now_ns() - t0 < span; i++) {
		if (send_syn(&in, 1000 + (i & 0x3fff), i, &v))
			break;
		admits += v == XDP_PASS;
		slot = (now_ns() - t0) / interval;
		slots += slot != last;
		last = slot;
	}
	elapsed = now_ns() - t0;
	bound = elapsed / interval + 1;
	CHECK(admits <= bound, "admitted %llu in %llu ms, more than rate x "
	      "time + burst = %llu", (unsigned long long)admits,
	      (unsigned long long)(elapsed / 1000000), (unsigned long long)bound);
	CHECK(admits * 10 >= slots * 6, "admitted %llu in %llu ms at 1,000/s, "
	      "SYNs sent in %llu of them (%u SYNs): the bucket ran on the tick",
	      (unsigned long long)admits,
	      (unsigned long long)(elapsed / 1000000),
	      (unsigned long long)slots, i);
	inst_close(&in);
	return 0;
}

static const struct scenario scenarios[] = {
	{ "standalone bucket emptied 3 intervals ago admits exactly 3 SYNs",
	  scen_refill, &emptied_3_ago },
	{ "standalone bucket idle for twice its burst admits exactly burst",
	  scen_refill, &idle_2x_burst },
	{ "standalone bucket half an interval past empty admits nothing",
	  scen_refill, &half_a_token },
	{ "standalone bucket refills in real time (empty, 160 ms later 1)",
	  scen_refill_realtime, NULL },
	{ "a bucket smaller than a tick of tokens keeps its rate (precise clock)",
	  scen_fine_clock, NULL },
};

void bucket_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
