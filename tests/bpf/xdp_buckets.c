// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Standalone buckets (GCRA on the tenant's tat): what a bucket emptied a
 * while ago admits, the cap at its burst, refill in real time, and the
 * precise clock for buckets smaller than a tick of tokens.
 */
#include <errno.h>
#include <string.h>
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
 * nothing.  The same SYNs both ways, for a bucket of burst 2: a new flow,
 * its retransmission (free), a second flow, a third (refused, or admitted
 * and counted by a shadow tenant), and a SYN no rule matches.
 */
struct inline_row {
	__u32 action, flags;
	__u32 refused;		/* the third flow's verdict */
};

#define INLINE_SYNS	5

static int inline_run(const struct inline_row *row, bool instance,
		      __u32 v[INLINE_SYNS], struct rl_stats *st,
		      __u64 cnt[RL_CNT_MAX])
{
	static const struct { __u16 sport; __u32 seq; } syns[] = {
		{ 1000, 1 }, { 1000, 1 }, { 1001, 2 }, { 1002, 3 },
	};
	struct rl_tenant on = { .mode = RL_MODE_STANDALONE };
	struct pkt other = { V4, SYN, .src = "192.0.2.1", .sport = 1003 };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	struct inst in;
	__u32 zero = 0;
	int i, len, err = -1;

	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in.w.tenants[1], row->action, row->flags, SEC_NS,
			  2);
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
	err = 0;
out:
	inst_close(&in);
	return err;
}

static int scen_inline(const void *arg)
{
	const struct inline_row *row = arg;
	const __u32 want[INLINE_SYNS] = { XDP_PASS, XDP_PASS, XDP_PASS,
					  row->refused, XDP_PASS };
	__u64 cnt[2][RL_CNT_MAX];
	__u32 v[2][INLINE_SYNS];
	struct rl_stats st[2];
	int k, i;

	for (k = 0; k < 2; k++)
		if (inline_run(row, k, v[k], &st[k], cnt[k]))
			return -1;
	for (k = 0; k < 2; k++)
		for (i = 0; i < INLINE_SYNS; i++)
			CHECK(v[k][i] == want[i], "instance %s: SYN %d: verdict "
			      "%u, want %u", k ? "on" : "off", i, v[k][i],
			      want[i]);
	CHECK(!memcmp(&st[0], &st[1], sizeof(st[0])), "the tenant's stats "
	      "differ: admitted %llu/%llu denied %llu/%llu retransmits "
	      "%llu/%llu shadow_denied %llu/%llu rst_sent %llu/%llu",
	      (unsigned long long)st[0].admitted,
	      (unsigned long long)st[1].admitted,
	      (unsigned long long)st[0].denied,
	      (unsigned long long)st[1].denied,
	      (unsigned long long)st[0].retransmits,
	      (unsigned long long)st[1].retransmits,
	      (unsigned long long)st[0].shadow_denied,
	      (unsigned long long)st[1].shadow_denied,
	      (unsigned long long)st[0].rst_sent,
	      (unsigned long long)st[1].rst_sent);
	CHECK(st[0].admitted == 3 + !!(row->flags & RL_F_SHADOW) &&
	      st[0].retransmits == 1,
	      "admitted %llu (retransmits %llu), want %d (1)",
	      (unsigned long long)st[0].admitted,
	      (unsigned long long)st[0].retransmits,
	      3 + !!(row->flags & RL_F_SHADOW));
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

static const struct inline_row inline_drop = { RL_ACT_DROP, 0, XDP_DROP };
static const struct inline_row inline_rst = { RL_ACT_RST, 0, XDP_TX };
static const struct inline_row inline_shadow = {
	RL_ACT_RST, RL_F_SHADOW, XDP_PASS,
};

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
};

void bucket_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
