// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Standalone buckets (GCRA on the tenant's tat): what a bucket emptied a
 * while ago admits, the cap at its burst, refill in real time, and the
 * precise clock for buckets smaller than a tick of tokens.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>

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

/*
 * The common SYN is decided inline in the entry program, every other one by
 * judge_open() (see judge_syn()); an instance limit that is on but limits
 * nothing (no cap, no rate) sends every SYN to judge_open() and must change
 * nothing.  The same SYNs both ways: a new flow, its retransmission (free),
 * a second flow, a third (refused, or admitted by a shadow tenant, the
 * overdraft or the fail policy), the second flow's retransmission (free
 * however empty the bucket), and a SYN no rule matches.  Standalone buckets
 * of burst 2, and leased ones of 2 tokens or less: spent to the floor, a
 * leased tenant's SYN is decided inline too, unless an event is to be sent
 * or the fleet is degraded.
 */
#define INLINE_SYNS	6

struct inline_row {
	__u32 mode, action, flags;
	/* leased: tokens, overdraft, low-water mark and whether armed, the
	 * fail policy, and whether the agent's heartbeat is stale */
	__s64 tokens, overdraft, lowwater;
	bool armed;
	__u32 fail;
	bool stale;
	__u32 want[INLINE_SYNS];
};

static int inline_run(const struct inline_row *row, bool instance,
		      __u32 v[INLINE_SYNS], struct rl_stats *st,
		      __u64 cnt[RL_CNT_MAX], __s64 *tokens)
{
	static const struct { __u16 sport; __u32 seq; } syns[] = {
		{ 1000, 1 }, { 1000, 1 }, { 1001, 2 }, { 1002, 3 }, { 1001, 2 },
	};
	struct rl_tenant on = { .mode = RL_MODE_STANDALONE };
	struct pkt other = { V4, SYN, .src = "192.0.2.1", .sport = 1003 };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct rl_tenant *t;
	struct run_result r;
	struct inst in;
	__u32 zero = 0;
	int i, len, err = -1;

	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	if (row->mode == RL_MODE_LEASED) {
		tenant_leased(t, row->action, row->tokens, row->lowwater,
			      row->armed);
		t->flags = row->flags;
		t->overdraft = row->overdraft;
		tenant_fail(t, row->fail, 1, SEC_NS);
	} else {
		tenant_standalone(t, row->action, row->flags, SEC_NS, 2);
	}
	if (row->stale &&
	    agent_state_set(&in.w, now_ns() - 10 * SEC_NS, SEC_NS, 0)) {
		diag("couldn't write the agent's state");
		goto out;
	}
	if (instance && bpf_map_update_elem(bpf_map__fd(in.skel->maps.instance),
					    &zero, &on, 0)) {
		diag("couldn't write the instance: %s", strerror(errno));
		goto out;
	}
	for (i = 0; i < (int)ARRAY_SIZE(syns); i++)
		if (send_syn(&in, syns[i].sport, syns[i].seq, &v[i]))
			goto out;
	len = pkt_build(&other, buf, NULL);
	if (xdp_run(in.prog_fd, buf, len, out, sizeof(out), 1, &r)) {
		diag("couldn't run the unmatched SYN");
		goto out;
	}
	v[i] = r.retval;
	tenant_stats_sum(&in.w, 1, st);
	counters_sum(&in.w, cnt);
	*tokens = t->tokens;
	err = 0;
out:
	inst_close(&in);
	return err;
}

static int scen_inline(const void *arg)
{
	const struct inline_row *row = arg;
	__u64 cnt[2][RL_CNT_MAX];
	__u32 v[2][INLINE_SYNS];
	struct rl_stats st[2];
	__s64 tokens[2];
	int k, i, passed = 0;

	for (k = 0; k < 2; k++)
		if (inline_run(row, k, v[k], &st[k], cnt[k], &tokens[k]))
			return -1;
	for (k = 0; k < 2; k++)
		for (i = 0; i < INLINE_SYNS; i++)
			CHECK(v[k][i] == row->want[i], "instance %s: SYN %d: "
			      "verdict %u, want %u", k ? "on" : "off", i,
			      v[k][i], row->want[i]);
	for (i = 0; i < INLINE_SYNS - 1; i++)
		passed += row->want[i] == XDP_PASS;
	CHECK(!memcmp(&st[0], &st[1], sizeof(st[0])), "the tenant's stats "
	      "differ: admitted %llu/%llu denied %llu/%llu retransmits "
	      "%llu/%llu shadow_denied %llu/%llu rst_sent %llu/%llu "
	      "degraded %llu/%llu lowwater_events %llu/%llu",
	      (unsigned long long)st[0].admitted,
	      (unsigned long long)st[1].admitted,
	      (unsigned long long)st[0].denied,
	      (unsigned long long)st[1].denied,
	      (unsigned long long)st[0].retransmits,
	      (unsigned long long)st[1].retransmits,
	      (unsigned long long)st[0].shadow_denied,
	      (unsigned long long)st[1].shadow_denied,
	      (unsigned long long)st[0].rst_sent,
	      (unsigned long long)st[1].rst_sent,
	      (unsigned long long)st[0].degraded,
	      (unsigned long long)st[1].degraded,
	      (unsigned long long)st[0].lowwater_events,
	      (unsigned long long)st[1].lowwater_events);
	CHECK(st[0].admitted == (__u64)passed &&
	      st[0].denied == (__u64)(INLINE_SYNS - 1 - passed),
	      "admitted %llu, denied %llu, want %d and %d",
	      (unsigned long long)st[0].admitted,
	      (unsigned long long)st[0].denied, passed,
	      INLINE_SYNS - 1 - passed);
	CHECK(tokens[0] == tokens[1], "tokens left %lld with the instance "
	      "off, %lld on", (long long)tokens[0], (long long)tokens[1]);
	for (i = 0; i < RL_CNT_MAX; i++)
		CHECK(cnt[0][i] == cnt[1][i], "counter %d: %llu with the "
		      "instance off, %llu on", i,
		      (unsigned long long)cnt[0][i],
		      (unsigned long long)cnt[1][i]);
	CHECK(cnt[0][RL_CNT_SYN] == INLINE_SYNS && cnt[0][RL_CNT_NOMATCH] == 1,
	      "SYNs counted %llu, unmatched %llu, want %d and 1",
	      (unsigned long long)cnt[0][RL_CNT_SYN],
	      (unsigned long long)cnt[0][RL_CNT_NOMATCH], INLINE_SYNS);
	return 0;
}

/*
 * The inline path judges a spent lease's fleet on a clock it keeps per tick
 * (tick_now()): that clock moves.  A SYN with the heartbeat in the future
 * (fresh) is refused and sets this CPU's clock; 100 ms later the heartbeat
 * is written 40 ms old, after that first SYN, stale after 20 ms: the next
 * SYN must see it stale and go to the fail policy (allow).  A clock that
 * stayed at the first SYN's time would find the heartbeat newer than now,
 * and refuse.  The test runs pinned to one CPU (test_xdp's main()).
 */
static int scen_inline_clock(const void *arg)
{
	const __u64 stale = 20 * 1000000ull;
	struct rl_tenant *t;
	struct inst in;
	__u32 v[2];
	int err = -1;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 0, -1, false);
	tenant_fail(t, RL_FAIL_ALLOW, 1, SEC_NS);
	if (agent_state_set(&in.w, now_coarse_ns() + 60 * SEC_NS, stale, 0) ||
	    send_syn(&in, 1000, 1, &v[0])) {
		diag("couldn't run the first SYN");
		goto out;
	}
	usleep(100 * 1000);
	if (agent_state_set(&in.w, now_coarse_ns() - 2 * stale, stale, 0) ||
	    send_syn(&in, 1001, 2, &v[1])) {
		diag("couldn't run the second SYN");
		goto out;
	}
	CHECK(v[0] == XDP_DROP, "the heartbeat fresh: verdict %u, want drop",
	      v[0]);
	CHECK(v[1] == XDP_PASS, "the heartbeat gone stale since the SYN "
	      "before: verdict %u, want pass (fail allow)", v[1]);
	err = 0;
out:
	inst_close(&in);
	return err;
}

#define P	XDP_PASS
#define D	XDP_DROP
#define R	XDP_TX

static const struct inline_row inline_drop = {
	RL_MODE_STANDALONE, RL_ACT_DROP, 0, .want = { P, P, P, D, P, P },
};
static const struct inline_row inline_rst = {
	RL_MODE_STANDALONE, RL_ACT_RST, 0, .want = { P, P, P, R, P, P },
};
static const struct inline_row inline_shadow = {
	RL_MODE_STANDALONE, RL_ACT_RST, RL_F_SHADOW,
	.want = { P, P, P, P, P, P },
};
static const struct inline_row inline_leased_drop = {
	RL_MODE_LEASED, RL_ACT_DROP, 0, .tokens = 2, .lowwater = -1,
	.want = { P, P, P, D, P, P },
};
static const struct inline_row inline_leased_rst = {
	RL_MODE_LEASED, RL_ACT_RST, 0, .tokens = 2, .lowwater = -1,
	.want = { P, P, P, R, P, P },
};
static const struct inline_row inline_leased_shadow = {
	RL_MODE_LEASED, RL_ACT_DROP, RL_F_SHADOW, .tokens = 2, .lowwater = -1,
	.want = { P, P, P, P, P, P },
};
static const struct inline_row inline_leased_overdraft = {
	RL_MODE_LEASED, RL_ACT_DROP, 0, .tokens = 1, .overdraft = 1,
	.lowwater = -5, .want = { P, P, P, D, P, P },
};
static const struct inline_row inline_leased_lowwater = {
	RL_MODE_LEASED, RL_ACT_DROP, 0, .tokens = 0, .lowwater = 0,
	.armed = true, .want = { D, D, D, D, D, P },
};
static const struct inline_row inline_leased_degraded = {
	RL_MODE_LEASED, RL_ACT_DROP, RL_F_DEGRADED, .tokens = 2,
	.lowwater = -1, .fail = RL_FAIL_ALLOW, .want = { P, P, P, P, P, P },
};
static const struct inline_row inline_leased_stale_allow = {
	RL_MODE_LEASED, RL_ACT_DROP, 0, .tokens = 2, .lowwater = -1,
	.fail = RL_FAIL_ALLOW, .stale = true, .want = { P, P, P, P, P, P },
};
static const struct inline_row inline_leased_stale = {
	RL_MODE_LEASED, RL_ACT_DROP, 0, .tokens = 2, .overdraft = 3,
	.lowwater = -1, .fail = RL_FAIL_DENY, .stale = true,
	.want = { P, P, P, D, P, P },
};

#undef P
#undef D
#undef R

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
	{ "a dropping tenant's SYNs: the inline path decides as judge_open() "
	  "does", scen_inline, &inline_drop },
	{ "a RST tenant's SYNs: the inline path decides as judge_open() does",
	  scen_inline, &inline_rst },
	{ "a shadow tenant's SYNs: the inline path decides as judge_open() "
	  "does", scen_inline, &inline_shadow },
	{ "a leased tenant's SYNs past its last token: decided inline as "
	  "judge_open() does", scen_inline, &inline_leased_drop },
	{ "... a RST tenant", scen_inline, &inline_leased_rst },
	{ "... a shadow tenant", scen_inline, &inline_leased_shadow },
	{ "... past the overdraft (one token, overdraft 1)", scen_inline,
	  &inline_leased_overdraft },
	{ "... at zero with the low-water event armed (sent once)",
	  scen_inline, &inline_leased_lowwater },
	{ "... degraded, fail allow (the fail policy admits)", scen_inline,
	  &inline_leased_degraded },
	{ "... the agent's heartbeat stale, fail allow (the fail policy "
	  "admits)", scen_inline, &inline_leased_stale_allow },
	{ "... the agent's heartbeat stale, fail deny (no overdraft while "
	  "degraded)", scen_inline, &inline_leased_stale },
	{ "... the inline path's clock moves: a heartbeat stale since the "
	  "last SYN is seen", scen_inline_clock, NULL },
};

void bucket_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
