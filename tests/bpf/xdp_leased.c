// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Leased mode: tokens granted by user space are spent one by one and never
 * below zero - or below the overdraft, which the next grant pays back -,
 * none lost or minted when two CPUs spend while a third thread grants, and
 * the low-water event fires once per arming.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "xdp_test.h"

static int scen_leased_zero(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 3, -1, false);
	EXPECT_ADMITS(&in, 6, 1000, 3, "admitted=3 denied=3", "3 tokens");
	CHECK(t->tokens == 0, "tokens %lld after denials, want 0",
	      (long long)t->tokens);
	/* More tokens from user space are spent again. */
	__atomic_fetch_add(&t->tokens, 2, __ATOMIC_SEQ_CST);
	EXPECT_ADMITS(&in, 4, 2000, 2, NULL, "2 more tokens");
	inst_close(&in);
	return 0;
}

/* An overdraft of 2 on 3 tokens: 5 admitted, counted as overdrawn past
 * the third, then refused at -2; a grant of 4 pays the 2 first and leaves
 * 2 to spend, and the overdraft is there again after them. */
static int scen_leased_overdraft(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	__u64 cnt[RL_CNT_MAX];

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 3, -1, false);
	t->overdraft = 2;
	EXPECT_ADMITS(&in, 8, 1000, 5, "admitted=5 denied=3", "3 tokens, overdraft 2");
	CHECK(t->tokens == -2, "tokens %lld after the overdraft, want -2",
	      (long long)t->tokens);
	counters_sum(&in.w, cnt);
	CHECK(cnt[RL_CNT_OVERDRAWN] == 2, "%llu SYNs counted overdrawn, want 2",
	      (unsigned long long)cnt[RL_CNT_OVERDRAWN]);
	__atomic_fetch_add(&t->tokens, 4, __ATOMIC_SEQ_CST);
	EXPECT_ADMITS(&in, 6, 2000, 4, "admitted=9 denied=5",
		      "a grant of 4 pays the 2 overdrawn: 2 tokens, then overdraft 2");
	CHECK(t->tokens == -2, "tokens %lld, want -2", (long long)t->tokens);
	counters_sum(&in.w, cnt);
	CHECK(cnt[RL_CNT_OVERDRAWN] == 4, "%llu SYNs counted overdrawn, want 4",
	      (unsigned long long)cnt[RL_CNT_OVERDRAWN]);
	inst_close(&in);
	return 0;
}

/* Two CPUs spending, a third thread granting: nothing lost or minted. */
struct lease_run {
	struct inst *in;
	int cpu;
	int err;
	__u64 runs;
};

#define LEASE_REPEAT	2000
#define LEASE_ROUNDS	100

static void *lease_spender(void *arg)
{
	struct lease_run *lr = arg;
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = 1000 + lr->cpu };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), i;

	lr->err = pin_to_cpu(lr->cpu);
	if (lr->err)
		return NULL;
	for (i = 0; i < LEASE_ROUNDS; i++) {
		lr->err = xdp_run(lr->in->prog_fd, buf, len, out, sizeof(out),
				  LEASE_REPEAT, &r);
		if (lr->err)
			return NULL;
		lr->runs += LEASE_REPEAT;
	}
	return NULL;
}

struct lease_granter {
	struct rl_tenant *t;
	volatile int *stop;
	__u64 added;
};

static void *lease_grant(void *arg)
{
	struct lease_granter *g = arg;

	/* Small grants, often, so that the balance stays near zero and
	 * spends, refusals (take and put back) and grants race on the same
	 * word all the time.  Sleeping between grants leaves the spender
	 * that shares our CPU its share of the tokens. */
	while (!*g->stop) {
		__atomic_fetch_add(&g->t->tokens, 3, __ATOMIC_SEQ_CST);
		g->added += 3;
		usleep(20);
	}
	return NULL;
}

/* arg: the overdraft (a __s64), none or some: the balance never goes below
 * it either way. */
static int scen_leased_concurrent(const void *arg)
{
	__s64 od = *(const __s64 *)arg;
	struct inst in;
	struct rl_tenant *t;
	struct lease_run lr[2];
	struct lease_granter g;
	struct rl_stats s, c0, c1;
	volatile int stop = 0;
	pthread_t th[2], gt;
	int i;

	if (libbpf_num_possible_cpus() < 2 || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		check_skip("needs two CPUs");
		return 0;
	}
	/* Identical repeated SYNs would be retransmissions: turn that off. */
	if (small_world(&in, 0))
		return -1;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 0, -1, false);
	t->overdraft = od;

	g = (struct lease_granter){ .t = t, .stop = &stop };
	pthread_create(&gt, NULL, lease_grant, &g);
	for (i = 0; i < 2; i++) {
		lr[i] = (struct lease_run){ .in = &in, .cpu = i };
		pthread_create(&th[i], NULL, lease_spender, &lr[i]);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	stop = 1;
	pthread_join(gt, NULL);

	for (i = 0; i < 2; i++)
		CHECK(!lr[i].err, "spender on CPU %d: %s", i,
		      strerror(-lr[i].err));
	tenant_stats_sum(&in.w, 1, &s);
	tenant_stats_cpu(&in.w, 1, 0, &c0);
	tenant_stats_cpu(&in.w, 1, 1, &c1);
	diag("granted %llu, admitted %llu (cpu0 %llu, cpu1 %llu), left %lld, "
	     "denied %llu", (unsigned long long)g.added,
	     (unsigned long long)s.admitted, (unsigned long long)c0.admitted,
	     (unsigned long long)c1.admitted, (long long)t->tokens,
	     (unsigned long long)s.denied);
	CHECK(s.admitted + t->tokens == g.added,
	      "admitted + left = %lld, granted %llu: tokens %s",
	      (long long)(s.admitted + t->tokens),
	      (unsigned long long)g.added,
	      s.admitted + t->tokens > g.added ? "minted" : "lost");
	CHECK(t->tokens >= -od, "balance went below the overdraft %lld: %lld",
	      (long long)od, (long long)t->tokens);
	CHECK(s.admitted + s.denied == lr[0].runs + lr[1].runs,
	      "admitted + denied = %llu, runs %llu",
	      (unsigned long long)(s.admitted + s.denied),
	      (unsigned long long)(lr[0].runs + lr[1].runs));
	CHECK(c0.admitted && c1.admitted,
	      "both CPUs must have spent tokens for this to test anything");
	inst_close(&in);
	return 0;
}

/* Low water: one event per arming. */
struct ev_seen {
	int n;
	struct rl_event last;
};

static int on_event(void *ctx, void *data, size_t len)
{
	struct ev_seen *es = ctx;

	if (len >= sizeof(struct rl_event))
		memcpy(&es->last, data, sizeof(es->last));
	es->n++;
	return 0;
}

static int scen_lowwater(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	struct ring_buffer *rb;
	struct ev_seen es = { 0 };
	struct rl_stats s;
	__u32 v;
	int i;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 5, 2, true);
	rb = ring_buffer__new(in.w.events_fd, on_event, &es, NULL);
	if (!rb) {
		diag("couldn't create a ring buffer reader: %s", strerror(errno));
		inst_close(&in);
		return -1;
	}

	/* 5 -> 4, 3: above the mark, silent. */
	for (i = 0; i < 2; i++)
		send_syn(&in, 1000 + i, i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 0, "%d events above the low-water mark", es.n);
	/* -> 2: at the mark, one event. */
	send_syn(&in, 1002, 2, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 1, "%d events on reaching the mark, want 1", es.n);
	CHECK(es.last.type == RL_EV_LOWWATER && es.last.tenant == 1 &&
	      es.last.tokens == 2,
	      "event type %u tenant %u tokens %lld, want %u, 1, 2",
	      es.last.type, es.last.tenant, (long long)es.last.tokens,
	      RL_EV_LOWWATER);
	CHECK(t->lowwater_armed == 0, "still armed after the event");
	/* -> 1, 0, refused, refused: disarmed, silent. */
	for (i = 0; i < 4; i++)
		send_syn(&in, 1003 + i, 3 + i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 1, "%d events before re-arming, want 1", es.n);

	/* User space refills and re-arms: fires again at the mark. */
	__atomic_fetch_add(&t->tokens, 5, __ATOMIC_SEQ_CST);
	__atomic_store_n(&t->lowwater_armed, 1, __ATOMIC_SEQ_CST);
	for (i = 0; i < 2; i++)
		send_syn(&in, 1010 + i, 10 + i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 1, "%d events above the mark after re-arming, want 1",
	      es.n);
	send_syn(&in, 1012, 12, &v);
	for (i = 0; i < 4; i++)
		send_syn(&in, 1013 + i, 13 + i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 2, "%d events after re-arming, want 2", es.n);
	CHECK(es.last.tokens == 2, "second event tokens %lld, want 2",
	      (long long)es.last.tokens);
	tenant_stats_sum(&in.w, 1, &s);
	CHECK(s.lowwater_events == 2, "lowwater_events %llu, want 2",
	      (unsigned long long)s.lowwater_events);
	ring_buffer__free(rb);
	inst_close(&in);
	return 0;
}

static const __s64 no_overdraft = 0, overdraft_5 = 5;

static const struct scenario scenarios[] = {
	{ "leased tokens are spent one by one, refused at zero, never below",
	  scen_leased_zero, NULL },
	{ "leased tokens spent on an overdraft past the last, paid back by the next grant",
	  scen_leased_overdraft, NULL },
	{ "leased tokens spent from two CPUs while granted: none lost or minted",
	  scen_leased_concurrent, &no_overdraft },
	{ "... with an overdraft of 5: none lost or minted, never below -5",
	  scen_leased_concurrent, &overdraft_5 },
	{ "low-water event fires once per arming, again after re-arming",
	  scen_lowwater, NULL },
};

void leased_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
