// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The flow cache and free retransmissions: a copy of an admitted SYN (same
 * 4-tuple and ISN) passes free within the window, a bounded number of times
 * and never after the client's RST or FIN; two flows in one slot; one cache
 * per CPU.  Most cases are replays: segments sent in order against one
 * token, each verdict and the counts at the end checked.
 */
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "xdp_test.h"

/* Retransmitted SYN: same 4-tuple and ISN, free within the window. */
static int scen_retransmit(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	__u32 v[4] = { 0 };
	__u64 tat;
	int err;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 1);
	err = send_syn(&in, 1000, 0xabcd, &v[0]);
	tat = t->tat;
	err = err || send_syn(&in, 1000, 0xabcd, &v[1]) ||
	      send_syn(&in, 1000, 0xabce, &v[2]) ||
	      send_syn(&in, 1001, 0xabcd, &v[3]);
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS, "retransmission with no token left: verdict "
	      "%u, want pass", v[1]);
	CHECK(t->tat == tat || err, "the retransmission spent a token");
	CHECK(v[2] == XDP_DROP, "same tuple, new ISN: verdict %u, want drop "
	      "(charged)", v[2]);
	CHECK(v[3] == XDP_DROP, "other source port, same ISN: verdict %u, "
	      "want drop (charged)", v[3]);
	EXPECT_STATS(&in.w, 1, "admitted=2 retransmits=1 denied=2");
	inst_close(&in);
	return 0;
}

/* Two flows in one slot of the direct-mapped flow cache: the second
 * admission overwrites the first, whose retransmission is then charged, and
 * neither flow is ever admitted free as the other. */
static int scen_flow_collision(const void *arg)
{
	struct inst in;
	struct rl_flow a, b;
	struct rl_flow_slot slot;
	__u32 idx, port, v[4] = { 0 };

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 2);

	syn_flow(1000, 0xabcd, &a);
	idx = rl_flow_hash(&a, RL_FLOW_BITS);
	/* the slot depends on the 4-tuple, not on the ISN */
	for (port = 1001; port < 65536; port++) {
		syn_flow(port, 0xabcd, &b);
		if (rl_flow_hash(&b, RL_FLOW_BITS) == idx)
			break;
	}
	if (port == 65536) {
		diag("no flow from another port shares slot %u", idx);
		inst_close(&in);
		return -1;
	}

	if (!send_syn(&in, 1000, 0xabcd, &v[0]))
		send_syn(&in, port, 0xabcd, &v[1]);
	CHECK(v[0] == XDP_PASS && v[1] == XDP_PASS,
	      "two new flows with two tokens: verdicts %u, %u, want pass, pass",
	      v[0], v[1]);
	/* The collision happened in the kernel, not only in our copy of the
	 * hash: the slot now holds the second flow. */
	CHECK(!flow_slot_cpu(&in.w, idx, test_cpu, &slot) &&
	      !memcmp(&slot.flow, &b, sizeof(b)),
	      "slot %u of CPU %d does not hold the second flow", idx, test_cpu);

	if (!send_syn(&in, 1000, 0xabcd, &v[2]))
		send_syn(&in, port, 0xabcd, &v[3]);
	CHECK(v[2] == XDP_DROP, "the overwritten flow's retransmission: "
	      "verdict %u, want drop (charged, no token left)", v[2]);
	CHECK(v[3] == XDP_PASS, "the slot holder's retransmission: verdict "
	      "%u, want pass (free)", v[3]);
	EXPECT_STATS(&in.w, 1, "admitted=3 retransmits=1 denied=1");
	inst_close(&in);
	return 0;
}

/* A retransmission that reaches another CPU than its SYN did finds that
 * CPU's cache empty and is charged: the caches are per CPU, with no
 * cross-CPU traffic.  On this CPU it is free. */
static int scen_flow_per_cpu(const void *arg)
{
	struct inst in;
	struct rl_flow_slot slot;
	struct rl_flow a;
	__u32 idx, v[3] = { 0 };
	int other;

	(void)arg;
	if (libbpf_num_possible_cpus() < 2) {
		check_skip("one CPU");
		return 0;
	}
	other = test_cpu == 0 ? 1 : 0;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 2);
	syn_flow(1000, 77, &a);
	idx = rl_flow_hash(&a, RL_FLOW_BITS);

	send_syn(&in, 1000, 77, &v[0]);
	CHECK(!flow_slot_cpu(&in.w, idx, test_cpu, &slot) &&
	      !memcmp(&slot.flow, &a, sizeof(a)),
	      "slot %u of CPU %d does not hold the admitted flow", idx,
	      test_cpu);
	CHECK(!flow_slot_cpu(&in.w, idx, other, &slot) &&
	      memcmp(&slot.flow, &a, sizeof(a)),
	      "the flow was written on CPU %d too", other);
	CHECK(!pin_to_cpu(other), "couldn't pin to CPU %d", other);
	send_syn(&in, 1000, 77, &v[1]);
	CHECK(!pin_to_cpu(test_cpu), "couldn't pin back to CPU %d", test_cpu);
	send_syn(&in, 1000, 77, &v[2]);
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS, "on CPU %d: verdict %u, want pass (charged, "
	      "the last token)", other, v[1]);
	CHECK(v[2] == XDP_PASS, "back on CPU %d: verdict %u, want pass "
	      "(free, no token left)", test_cpu, v[2]);
	CHECK(in.w.tenants[1].tat > now_ns() + 3600 * SEC_NS,
	      "the tenant was charged fewer than two tokens");
	inst_close(&in);
	return 0;
}

/* One segment of a replay (flags 0: a pause of sleep_ms instead; flags 0
 * and no pause: the end). */
struct replay_step {
	__u8 flags;
	__u16 sport;
	__u32 seq;
	__u32 want;		/* verdict */
	int sleep_ms;
};

#define STEP(f, port, seq, v)	{ (f), (port), (seq), (v), 0 }
#define SLEEP(ms)		{ 0, 0, 0, 0, (ms) }
#define STEPS(...)	((const struct replay_step[]){ __VA_ARGS__, { 0 } })

/* A replay against tenant 1 of a small world with one token and none back
 * within the test. */
struct replay {
	__u64 window_ns, gap_ns;	/* retrans_window_ns, retrans_gap_ns */
	const struct replay_step *steps;
	const char *stats;	/* tenant 1's at the end (EXPECT_STATS) */
	long charged;		/* RL_CNT_REPEAT_CHARGED; -1: unchecked */
};

static int run_replay(const void *arg)
{
	const struct replay *rp = arg;
	const struct replay_step *st;
	struct inst in;
	__u64 cnt[RL_CNT_MAX];
	int i;

	if (inst_open_gap(&in, rp->window_ns, rp->gap_ns))
		return -1;
	if (rule_add(&in.w, "10.1.0.0/16", 0, 1)) {
		diag("couldn't add a rule");
		inst_close(&in);
		return -1;
	}
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 1);
	for (i = 0, st = rp->steps; st->flags || st->sleep_ms; i++, st++) {
		__u32 v = 0;

		if (!st->flags) {
			usleep(st->sleep_ms * 1000);
			continue;
		}
		if (send_tcp(&in, st->flags, st->sport, st->seq, &v))
			break;
		CHECK(v == st->want, "step %d (flags 0x%02x, port %u): verdict "
		      "%u, want %u", i, st->flags, st->sport, v, st->want);
	}
	EXPECT_STATS(&in.w, 1, rp->stats);
	counters_sum(&in.w, cnt);
	CHECK(rp->charged < 0 ||
	      cnt[RL_CNT_REPEAT_CHARGED] == (__u64)rp->charged,
	      "repeats charged %llu, want %ld",
	      (unsigned long long)cnt[RL_CNT_REPEAT_CHARGED], rp->charged);
	inst_close(&in);
	return 0;
}

_Static_assert(RL_FLOW_MAX_REPEATS == 2, "the bounded replay assumes 2");

static const struct replay expired = {
	50 * 1000000ull, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	SLEEP(100),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* after the 50 ms window */
	"retransmits=0", -1,
}, window_off = {
	0, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),
	"", -1,
}, bounded = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* the token */
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free */
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free */
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* past the bound */
	"admitted=3 retransmits=2 denied=1", 1,
}, after_rst = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_RST, 1000, 78, XDP_PASS),	/* the client resets */
	STEP(TH_SYN, 1000, 77, XDP_DROP),	/* a new connection */
	STEP(TH_SYN, 1000, 77, XDP_DROP)),
	"admitted=1 retransmits=0 denied=2", 2,
}, after_fin = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free before the FIN */
	STEP(TH_FIN | TH_ACK, 1000, 5000, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),
	"admitted=2 retransmits=1 denied=1", 1,
}, rst_other_flow = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_RST, 1001, 78, XDP_PASS),	/* another flow's */
	STEP(TH_SYN, 1000, 77, XDP_PASS)),	/* still free */
	"admitted=2 retransmits=1 denied=0", 0,
},
/* With a 1 s gap: a copy right after the SYN is charged; one 1.1 s later is
 * free; the next right after it is charged (the second needs 2 s). */
gap_other_flow = {
	30 * SEC_NS, SEC_NS, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1001, 90, XDP_DROP)),	/* another flow, no token */
	"admitted=1 retransmits=0 denied=1", 0,
}, gap_too_soon = {
	30 * SEC_NS, SEC_NS, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* too soon */
	"admitted=1 retransmits=0 denied=1", 1,
}, gap_kept = {
	30 * SEC_NS, SEC_NS, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	SLEEP(1100),
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* as a kernel would */
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* sooner than 2 s */
	"admitted=2 retransmits=1 denied=1", 1,
};

static const struct scenario scenarios[] = {
	{ "retransmitted SYN (same tuple and ISN) is free; a new ISN is charged",
	  scen_retransmit, NULL },
	{ "retransmitted SYN after the window is charged", run_replay,
	  &expired },
	{ "retrans_window_ns 0 charges an identical SYN twice", run_replay,
	  &window_off },
	{ "free repeats are bounded: the third copy of an admitted SYN is "
	  "charged", run_replay, &bounded },
	{ "replayed SYN after the client's RST is charged as a new connection",
	  run_replay, &after_rst },
	{ "replayed SYN after the client's FIN is charged as a new connection",
	  run_replay, &after_fin },
	{ "a RST of another flow leaves a SYN's retransmission free",
	  run_replay, &rst_other_flow },
	{ "repeats follow a kernel's schedule: with a 1 s gap another flow "
	  "without a token is charged", run_replay, &gap_other_flow },
	{ "repeats follow a kernel's schedule: a copy sooner than the gap is "
	  "charged", run_replay, &gap_too_soon },
	{ "repeats follow a kernel's schedule: a copy after the gap is free, "
	  "the next needs twice the gap", run_replay, &gap_kept },
	{ "flow-cache collision: the overwritten flow is charged again, "
	  "neither flow passes free as the other", scen_flow_collision, NULL },
	{ "flow cache is per CPU: a retransmission on another CPU is charged",
	  scen_flow_per_cpu, NULL },
};

void flow_cache_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
