// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Rules: which tenant a SYN is classified to (port rules against any-port
 * ones, longest prefix, no match, a rule to a free slot) as a verdict table,
 * and rules republished while SYNs are being classified.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "xdp_table.h"

static const struct xdp_case cases[] = {
	/* classification */
	{ "IPv4 port rule beats an any-port rule of equal length",
	  { V4, SYN, .src = "10.7.0.10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_PORT_443 },
	{ "IPv4 any-port rule takes the ports without a port rule",
	  { V4, SYN, .src = "10.7.0.10", .dport = 80 },
	  XDP_PASS, O_ADMIT, T_PORT_ANY },
	{ "IPv4 longer any-port prefix beats a shorter port rule",
	  { V4, SYN, .src = "10.8.0.10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_LONG_ANY },
	{ "IPv4 shorter port rule applies outside the longer prefix",
	  { V4, SYN, .src = "10.8.1.10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_SHORT_PORT },
	{ "IPv6 port rule beats an any-port rule of equal length",
	  { V6, SYN, .src = "2001:db8:7::10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_PORT_443 },
	{ "IPv6 any-port rule takes the ports without a port rule",
	  { V6, SYN, .src = "2001:db8:7::10", .dport = 8443 },
	  XDP_PASS, O_ADMIT, T_PORT_ANY },
	{ "IPv6 longer any-port prefix beats a shorter port rule",
	  { V6, SYN, .src = "2001:db8:8::10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_LONG_ANY },
	{ "IPv6 shorter port rule applies outside the longer prefix",
	  { V6, SYN, .src = "2001:db8:8:1::10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_SHORT_PORT },
	{ "IPv4 longest prefix wins: /25 inside /24 inside /16",
	  { V4, SYN, .src = "10.9.1.200" }, XDP_PASS, O_ADMIT, T_L25 },
	{ "IPv4 longest prefix wins: /24 inside /16",
	  { V4, SYN, .src = "10.9.1.10" }, XDP_PASS, O_ADMIT, T_L24 },
	{ "IPv4 longest prefix wins: only the /16",
	  { V4, SYN, .src = "10.9.2.10" }, XDP_PASS, O_ADMIT, T_L16 },
	{ "IPv6 longest prefix wins: /65 inside /64 inside /48",
	  { V6, SYN, .src = "2001:db8:9:1:8000::1" }, XDP_PASS, O_ADMIT, T_L25 },
	{ "IPv6 longest prefix wins: /64 inside /48",
	  { V6, SYN, .src = "2001:db8:9:1::1" }, XDP_PASS, O_ADMIT, T_L24 },
	{ "IPv6 longest prefix wins: only the /48",
	  { V6, SYN, .src = "2001:db8:9:2::1" }, XDP_PASS, O_ADMIT, T_L16 },
	{ "IPv4 SYN from an unmatched source passes, counted as no match",
	  { V4, SYN, .src = "192.0.2.1" }, XDP_PASS, O_NOMATCH, 0 },
	{ "IPv6 SYN from an unmatched source passes, counted as no match",
	  { V6, SYN, .src = "2001:db8:ffff::1" }, XDP_PASS, O_NOMATCH, 0 },
	{ "IPv4 SYN whose rule points at a free tenant slot passes",
	  { V4, SYN, .src = "10.10.0.10" }, XDP_PASS, O_NO_TENANT, 0 },
	{ "IPv6 SYN whose rule points at a free tenant slot passes",
	  { V6, SYN, .src = "2001:db8:a::10" }, XDP_PASS, O_NO_TENANT, 0 },
};

/*
 * Rules republished while SYNs are being classified on another CPU: every
 * SYN is classified by one whole rule set or the other, never by a mix.
 * The two sets put the SYN's /24 in different tables (set B's fillers sort
 * before it and take the first table), so a SYN that read the root of one
 * set and a table of the other would land on the filler tenant or none.
 */
struct republisher {
	struct world *w;
	struct rl_cls_image img[2];
	int cpu;
	volatile int stop;
	int err;
	unsigned int publishes;
};

static void *cls_republish(void *arg)
{
	struct republisher *rp = arg;

	if (rp->cpu >= 0 && pin_to_cpu(rp->cpu))
		rp->cpu = -1;	/* unpinned: still a second thread */
	while (!rp->stop && !rp->err) {
		rp->err = rl_cls_publish(&rp->w->cls,
					 &rp->img[rp->publishes & 1]);
		rp->publishes++;
		usleep(rand() % 3000);
	}
	return NULL;
}

static int scen_republish_under_traffic(const void *arg)
{
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = 4242 };
	struct republisher rp = { .cpu = -1 };
	struct rl_cls_rule rules[2][65];
	struct rl_stats s1, s2, s3;
	__u64 cnt[RL_CNT_MAX], sent = 0, t0;
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	struct inst in;
	pthread_t th;
	char err[256];
	bool ok = true;		/* it could run */
	int len, k, i;

	(void)arg;
	if (inst_open(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	for (i = 1; i <= 3; i++)
		tenant_standalone(&in.w.tenants[i], RL_ACT_DROP, 0, 1,
				  1000000000000ull);
	for (k = 0; k < 2; k++) {
		for (i = 0; i < 65; i++) {
			struct rl_cls_rule *r = &rules[k][i];

			memset(r, 0, sizeof(*r));
			r->family = AF_INET;
			r->plen = 24;
			r->addr[0] = 10;
			if (i == 64) {		/* the SYN's own rule */
				r->addr[1] = 1;
				r->tenant = 1 + k;
			} else {		/* 10.2/16 in A, 10.0/16 in B */
				r->addr[1] = k ? 0 : 2;
				r->addr[2] = i;
				r->tenant = 3;
			}
		}
		if (rl_cls_compile(rules[k], 65, 0, &rp.img[k], err,
				   sizeof(err))) {
			diag("couldn't compile set %d: %s", k, err);
			ok = false;
		}
	}
	rp.w = &in.w;
	/* set A in force before the first SYN, then B, A, B... */
	if (ok && rl_cls_publish(&in.w.cls, &rp.img[0])) {
		diag("couldn't publish set A");
		ok = false;
	}
	rp.publishes = 1;
	if (libbpf_num_possible_cpus() > 1)
		rp.cpu = test_cpu == 0 ? 1 : 0;
	if (!ok || pthread_create(&th, NULL, cls_republish, &rp)) {
		diag("couldn't start the republishing thread");
		ok = false;
		goto out;
	}
	len = pkt_build(&p, buf, NULL);
	t0 = now_ns();
	while (now_ns() - t0 < 1000 * 1000000ull && sent < 100000000ull) {
		/* long runs: a test_run call waits for grace periods of its
		 * own, and short ones fall into step with the publisher's */
		if (xdp_run(in.prog_fd, buf, len, out, sizeof(out), 1000000,
			    &r)) {
			diag("bpf_prog_test_run_opts: %s", strerror(errno));
			ok = false;
			break;
		}
		sent += 1000000;
	}
	rp.stop = 1;
	pthread_join(th, NULL);

	tenant_stats_sum(&in.w, 1, &s1);
	tenant_stats_sum(&in.w, 2, &s2);
	tenant_stats_sum(&in.w, 3, &s3);
	counters_sum(&in.w, cnt);
	CHECK(!rp.err, "publishing failed: %s", strerror(-rp.err));
	CHECK(rp.publishes >= 10, "only %u publishes in a second", rp.publishes);
	CHECK(s1.admitted > 0 && s2.admitted > 0, "set A classified %llu, set "
	      "B %llu: the switch did not happen under traffic (%u publishes)",
	      (unsigned long long)s1.admitted, (unsigned long long)s2.admitted,
	      rp.publishes);
	CHECK(s1.admitted + s2.admitted == sent && s3.admitted == 0 &&
	      cnt[RL_CNT_NOMATCH] == 0,
	      "%llu SYNs: %llu by set A, %llu by set B, %llu by a filler, %llu "
	      "unmatched (%u publishes)", (unsigned long long)sent,
	      (unsigned long long)s1.admitted, (unsigned long long)s2.admitted,
	      (unsigned long long)s3.admitted,
	      (unsigned long long)cnt[RL_CNT_NOMATCH], rp.publishes);
out:
	rl_cls_image_free(&rp.img[0]);
	rl_cls_image_free(&rp.img[1]);
	inst_close(&in);
	return ok ? 0 : -1;
}

static const struct scenario scenarios[] = {
	{ "rules republished under traffic: every SYN sees one whole rule set",
	  scen_republish_under_traffic, NULL },
};

void rule_tests(void)
{
	run_cases(cases, ARRAY_SIZE(cases));
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
