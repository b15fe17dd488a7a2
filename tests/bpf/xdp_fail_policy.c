// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fail policy of leased tenants: what decides once the leased tokens are
 * spent while the fleet is degraded (the agent's breaker is open, or its
 * heartbeat is stale).  Tenant 1 of a small world, leased, with 0 or a few
 * tokens; `agent_state` set per scenario.  Standalone tenants never consult
 * it.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "xdp_test.h"

/* The deadline after which a heartbeat is stale: far longer than any stall
 * of a loaded machine between writing a "fresh" heartbeat and the SYN that
 * reads it. */
#define STALE_NS	(30 * SEC_NS)

/* A small world whose tenant 1 is leased with `tokens` and the fail policy
 * given, and `agent_state` as given.  NULL (and a diagnostic) on failure. */
static struct rl_tenant *fail_world(struct inst *in, __u32 action,
				    __s64 tokens, __u32 fail, __u32 fail_burst,
				    __u64 fail_interval_ns, __u64 heartbeat_ns,
				    __u64 stale_ns, __u32 degraded)
{
	struct rl_tenant *t;
	int err;

	if (small_world(in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return NULL;
	t = &in->w.tenants[1];
	tenant_leased(t, action, tokens, -1, false);
	tenant_fail(t, fail, fail_burst, fail_interval_ns);
	err = agent_state_set(&in->w, heartbeat_ns, stale_ns, degraded);
	if (err) {
		diag("couldn't set agent_state: %s", strerror(-err));
		inst_close(in);
		return NULL;
	}
	return t;
}

/* An empty leased bucket (action drop) under one agent_state: n SYNs, of
 * which `want` pass; tenant 1's stats after; the balance stays 0. */
struct fail_row {
	__u32 fail;
	__s64 heartbeat_age_ns;	/* heartbeat now - age (NO_HEARTBEAT: 0) */
	__u64 stale_ns;
	__u32 degraded;
	int n, want;
	const char *stats;
	const char *what;
};

#define NO_HEARTBEAT	INT64_MIN

static int run_fail_row(const void *arg)
{
	const struct fail_row *row = arg;
	struct inst in;
	struct rl_tenant *t;

	t = fail_world(&in, RL_ACT_DROP, 0, row->fail, 1, SEC_NS,
		       row->heartbeat_age_ns == NO_HEARTBEAT ? 0 :
		       now_ns() - row->heartbeat_age_ns,
		       row->stale_ns, row->degraded);
	if (!t)
		return -1;
	EXPECT_ADMITS(&in, row->n, 1000, row->want, row->stats, row->what);
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	inst_close(&in);
	return 0;
}

/* Healthy fleet (fresh heartbeat, not degraded), fail policy allow: an
 * empty leased bucket refuses; the fail policy is not consulted. */
static const struct fail_row not_degraded = {
	RL_FAIL_ALLOW, 0, STALE_NS, 0, 3, 0,
	"admitted=0 denied=3 degraded=0", "empty leased bucket, healthy fleet",
};
static const struct fail_row allow = {
	RL_FAIL_ALLOW, 0, STALE_NS, 1, 5, 5,
	"admitted=5 denied=0 degraded=5", "degraded, fail allow",
};
/* A heartbeat ahead of the kernel's clock (written just after the SYN read
 * the time) is fresh, not 2^64 ns old. */
static const struct fail_row heartbeat_ahead = {
	RL_FAIL_ALLOW, -10 * (__s64)SEC_NS, STALE_NS, 0, 2, 0,
	"admitted=0 denied=2 degraded=0", "heartbeat 10 s ahead",
};
/* stale_ns 0 (a standalone agent expects no heartbeat): an ancient or
 * absent heartbeat never makes the fleet degraded. */
static const struct fail_row stale_zero = {
	RL_FAIL_ALLOW, NO_HEARTBEAT, 0, 0, 3, 0,
	"admitted=0 denied=3 degraded=0", "stale_ns 0, heartbeat 0",
};

/* Degraded, fail policy deny: the 3 leased tokens still admit 3, and only
 * the 4th SYN meets the fail policy. */
static int scen_fail_tokens_first(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 3, RL_FAIL_DENY, 1, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return -1;
	EXPECT_ADMITS(&in, 3, 1000, 3, "admitted=3 denied=0 degraded=0",
		      "3 leased tokens while degraded");
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	EXPECT_ADMITS(&in, 2, 2000, 0, "admitted=3 denied=2 degraded=2",
		      "fail deny after the tokens");
	inst_close(&in);
	return 0;
}

/* Degraded: the overdraft is not spent (no lease will pay it back soon),
 * the fail policy decides past the last token; healthy again, it is. */
static int scen_fail_no_overdraft(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 1, RL_FAIL_DENY, 1, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return -1;
	t->overdraft = 4;
	EXPECT_ADMITS(&in, 3, 1000, 1, "admitted=1 denied=2 degraded=2",
		      "degraded, fail deny, overdraft 4");
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	if (agent_state_set(&in.w, now_ns(), STALE_NS, 0)) {
		inst_close(&in);
		return -1;
	}
	EXPECT_ADMITS(&in, 6, 2000, 4, "admitted=5 denied=4 degraded=2",
		      "healthy: the overdraft");
	CHECK(t->tokens == -4, "tokens %lld, want -4", (long long)t->tokens);
	inst_close(&in);
	return 0;
}

/* The fleet is healthy but the tenant's own Redis shard is not
 * (RL_F_DEGRADED): its leased tokens first, then its fail policy; the flag
 * cleared, an empty bucket refuses again. */
static int scen_fail_shard_degraded(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 2, RL_FAIL_ALLOW, 1, SEC_NS,
		       now_ns(), STALE_NS, 0);
	if (!t)
		return -1;
	t->flags |= RL_F_DEGRADED;
	EXPECT_ADMITS(&in, 5, 1000, 5, "admitted=5 denied=0 degraded=3",
		      "shard degraded, 2 tokens, fail allow");
	t->flags &= ~RL_F_DEGRADED;
	EXPECT_ADMITS(&in, 2, 2000, 0, "admitted=5 denied=2 degraded=3",
		      "shard back, empty bucket");
	inst_close(&in);
	return 0;
}

/* Degraded, fail deny, action rst: refused with the RST|ACK the SYN's
 * description calls for. */
static int scen_fail_deny_rst(const void *arg)
{
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = 1000,
			 .seq = 4242 };
	__u8 buf[PKT_MAX], out[PKT_MAX * 2], want[PKT_MAX];
	struct run_result r;
	struct inst in;
	int len, wlen, err;
	bool same;

	(void)arg;
	if (!fail_world(&in, RL_ACT_RST, 0, RL_FAIL_DENY, 1, SEC_NS,
			now_ns(), STALE_NS, 1))
		return -1;
	len = pkt_build(&p, buf, NULL);
	wlen = pkt_build_rst(&p, want);
	err = xdp_run(in.prog_fd, buf, len, out, sizeof(out), 1, &r);
	if (err) {
		diag("bpf_prog_test_run_opts: %s", strerror(-err));
		inst_close(&in);
		return -1;
	}
	CHECK(r.retval == XDP_TX, "verdict %u, want XDP_TX (RST)", r.retval);
	same = r.out_len == (__u32)wlen && !memcmp(out, want, wlen);
	CHECK(r.retval != XDP_TX || same,
	      "the RST differs from the expected reply");
	if (r.retval == XDP_TX && !same) {
		diag_hex("got", out, r.out_len, want, wlen);
		diag_hex("want", want, wlen, out, r.out_len);
	}
	EXPECT_STATS(&in.w, 1, "admitted=0 denied=1 rst_sent=1 degraded=1");
	inst_close(&in);
	return 0;
}

/* Degraded, fail static: a full local share (fail_tat 0) admits exactly
 * fail_burst, and every SYN it decided counts as degraded. */
static int scen_fail_static_burst(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	__u64 tat;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_STATIC, 3, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return -1;
	t->fail_tat = 0;
	EXPECT_ADMITS(&in, 7, 1000, 3, "admitted=3 denied=4 degraded=7",
		      "static share of burst 3");
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	/* Three admissions from a full share: fail_tat = now + 3 intervals. */
	tat = t->fail_tat;
	CHECK(tat > now_ns() + 2 * SEC_NS && tat <= now_ns() + 3 * SEC_NS,
	      "fail_tat %llu is not now + 3 intervals (now %llu)",
	      (unsigned long long)tat, (unsigned long long)now_ns());
	CHECK(t->tat == 0, "the static share moved the standalone tat to %llu",
	      (unsigned long long)t->tat);
	inst_close(&in);
	return 0;
}

/* fail_tat = now + (burst - k) * interval: the share was empty k intervals
 * ago and admits k; the cap at fail_burst holds after a long idle spell. */
static int scen_fail_static_refill(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_STATIC, 5, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return -1;
	expect_refill(&in, &t->fail_tat, 5, 3 * SEC_NS, 8, 3, 1000,
		      "share empty 3 intervals ago (burst 5)");
	expect_refill(&in, &t->fail_tat, 5, 10 * SEC_NS, 8, 5, 2000,
		      "share idle for 2x burst (10 earned, 5 kept)");
	expect_refill(&in, &t->fail_tat, 5, SEC_NS / 2, 3, 0, 3000,
		      "half a token");
	inst_close(&in);
	return 0;
}

/* Real elapsed time: an empty share of one token per 100 ms. */
static int scen_fail_static_realtime(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_STATIC, 1,
		       REALTIME_INTERVAL_NS, now_ns(), STALE_NS, 1);
	if (!t)
		return -1;
	expect_refill_realtime(&in, &t->fail_tat, "share");
	inst_close(&in);
	return 0;
}

/* Not degraded, but the heartbeat is 31 s old with a 30 s deadline: the
 * agent is presumed dead and the fail policy decides.  1 s old: alive. */
static int scen_fail_stale_heartbeat(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_ALLOW, 1, SEC_NS,
		       now_ns() - SEC_NS, STALE_NS, 0);
	if (!t)
		return -1;
	EXPECT_ADMITS(&in, 2, 1000, 0, "admitted=0 denied=2 degraded=0",
		      "heartbeat 1 s old (stale after 30 s)");
	CHECK(!agent_state_set(&in.w, now_ns() - STALE_NS - SEC_NS, STALE_NS, 0),
	      "couldn't set agent_state");
	EXPECT_ADMITS(&in, 2, 2000, 2, "admitted=2 denied=2 degraded=2",
		      "heartbeat 31 s old (stale after 30 s)");
	inst_close(&in);
	return 0;
}

/* Standalone tenants never look at agent_state or the fail fields: an
 * empty bucket still refuses with fail allow and a degraded fleet, and a
 * bucket with 2 tokens still admits 2 with fail deny. */
static int scen_fail_standalone_ignores(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 2);
	tenant_fail(t, RL_FAIL_ALLOW, 5, SEC_NS);
	t->tat = now_ns() + 3600 * SEC_NS;	/* empty */
	if (agent_state_set(&in.w, now_ns() - STALE_NS - SEC_NS, STALE_NS, 1)) {
		diag("couldn't set agent_state");
		inst_close(&in);
		return -1;
	}
	EXPECT_ADMITS(&in, 3, 1000, 0, "admitted=0 denied=3 degraded=0",
		      "empty standalone bucket, degraded, fail allow");
	tenant_fail(t, RL_FAIL_DENY, 5, SEC_NS);
	t->tat = 0;				/* full: 2 tokens */
	EXPECT_ADMITS(&in, 4, 2000, 2, "admitted=2 denied=5 degraded=0",
		      "full standalone bucket of 2, degraded, fail deny");
	CHECK(t->fail_tat == 0, "a standalone tenant moved fail_tat to %llu",
	      (unsigned long long)t->fail_tat);
	inst_close(&in);
	return 0;
}

static const struct scenario scenarios[] = {
	{ "fail policy: degraded leased tenant spends its leased tokens first "
	  "(fail deny, 3 tokens admit 3, none counted degraded)",
	  scen_fail_tokens_first, NULL },
	{ "fail policy: degraded, the overdraft is not spent (fail deny "
	  "refuses past the last token); healthy again, it is",
	  scen_fail_no_overdraft, NULL },
	{ "fail policy: empty leased bucket on a healthy fleet refuses "
	  "(fail allow not consulted, degraded 0)", run_fail_row,
	  &not_degraded },
	{ "fail policy allow: degraded, empty bucket admits every SYN, each "
	  "counted degraded", run_fail_row, &allow },
	{ "fail policy: a tenant whose Redis shard is degraded (RL_F_DEGRADED) "
	  "on a healthy fleet spends its tokens, then its fail policy decides; "
	  "cleared, an empty bucket refuses", scen_fail_shard_degraded, NULL },
	{ "fail policy deny with action rst: degraded, empty bucket answers "
	  "RST|ACK", scen_fail_deny_rst, NULL },
	{ "fail policy static: full share admits exactly fail_burst (GCRA on "
	  "fail_tat), the standalone tat untouched", scen_fail_static_burst,
	  NULL },
	{ "fail policy static: share empty 3 intervals ago admits 3, capped at "
	  "fail_burst, half a token admits 0", scen_fail_static_refill, NULL },
	{ "fail policy static: share refills in real time (empty, 160 ms later "
	  "1)", scen_fail_static_realtime, NULL },
	{ "fail policy: heartbeat 31 s old with stale_ns 30 s applies it; 1 s old "
	  "does not", scen_fail_stale_heartbeat, NULL },
	{ "fail policy: heartbeat ahead of the kernel clock is fresh",
	  run_fail_row, &heartbeat_ahead },
	{ "fail policy: stale_ns 0 never makes an old heartbeat stale",
	  run_fail_row, &stale_zero },
	{ "fail policy: standalone tenants ignore agent_state and the fail "
	  "fields", scen_fail_standalone_ignores, NULL },
};

void fail_policy_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
