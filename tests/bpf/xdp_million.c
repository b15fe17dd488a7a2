// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A million prefixes over 100,000 tenants (million.c): they fit the rule
 * memory the operations guide gives for them and not the default, every
 * prefix classifies to its own tenant in the table the kernel reads, the
 * gaps between them to none, and SYNs from a sample of them are charged by
 * the program to the right tenant.  Correctness only: speed is for
 * `make bench`.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <bpf/libbpf.h>

#include "million.h"
#include "xdp_test.h"

#define SENT_TENANTS	2000	/* tenants the program is asked about */
#define GAPS		100000

/* One rlgate sized for the policy (--max-tenants 100001, --rule-memory
 * 128), shared by the scenarios: building it takes seconds. */
static struct {
	struct million m;
	struct inst in;
	bool made, loaded, published;
} big;

static int big_load(void)
{
	struct inst *in = &big.in;
	int err;

	if (!big.made) {
		if (million_make(&big.m, 1)) {
			diag("couldn't make the policy: out of memory");
			return -1;
		}
		big.made = true;
	}
	if (big.loaded)
		return 0;
	in->skel = rlgate_bpf__open();
	if (!in->skel) {
		diag("couldn't open the rlgate skeleton: %s", strerror(errno));
		return -1;
	}
	in->skel->rodata->retrans_window_ns = 0;
	in->skel->rodata->cls_half = MILLION_CLS_HALF;
	err = world_size(in->skel->obj, MILLION_TENANTS + 1, MILLION_CLS_HALF);
	if (!err)
		err = rlgate_bpf__load(in->skel);
	if (!err)
		err = world_init(&in->w, in->skel->obj);
	if (err) {
		diag("couldn't load rlgate for 100,000 tenants: %s",
		     strerror(-err));
		inst_close(in);
		return -1;
	}
	in->prog_fd = bpf_program__fd(in->skel->progs.xdp_rlgate);
	for (__u32 t = 1; t <= MILLION_TENANTS; t++)
		tenant_standalone(&in->w.tenants[t], RL_ACT_DROP, 0, 1,
				  1000000000000ull);
	big.loaded = true;
	return 0;
}

/* The half of `cls` the kernel reads now, once scen_fits published the
 * policy; NULL (said) before. */
static const struct rl_cls_group *published_half(void)
{
	struct world *w = &big.in.w;
	__u32 cur;

	if (!big.published) {
		diag("the policy was not published");
		return NULL;
	}
	cur = __atomic_load_n(&w->cls.state->active, __ATOMIC_ACQUIRE);
	return w->cls.groups + (size_t)(cur & 1) * w->cls.half;
}

static int scen_fits(const void *arg)
{
	struct world *w = &big.in.w;
	struct rl_cls_image img;
	char err[256];
	__u32 gen;
	int ret;

	(void)arg;
	if (big_load())
		return -1;
	ret = rl_cls_compile(big.m.rules, big.m.n_rules, MILLION_CLS_HALF,
			     &img, err, sizeof(err));
	CHECK(ret == 0, "compile into %u tables per half: %d %s",
	      MILLION_CLS_HALF, ret, err);
	if (ret)
		return 0;
	diag("%zu rules take %u tables of 1 KiB per half, %u port rows",
	     big.m.n_rules, img.n_groups, img.n_rows);
	CHECK(img.n_columns == 2, "columns: %u, want 2 (443, 8443)",
	      img.n_columns);
	gen = w->cls.state->generation;
	ret = rl_cls_publish(&w->cls, &img);
	rl_cls_image_free(&img);
	CHECK(ret == 0, "publish: %s", strerror(-ret));
	CHECK(w->cls.state->generation == gen + 1, "generation %u after %u",
	      w->cls.state->generation, gen);
	big.published = ret == 0;
	return 0;
}

static int scen_every_prefix(const void *arg)
{
	const struct rl_cls_group *g;
	size_t wrong = 0, wrong_port = 0;
	uint8_t a[16];

	(void)arg;
	g = published_half();
	if (!g)
		return -1;
	for (size_t i = 0; i < MILLION_PREFIXES; i++) {
		int fam = million_inside(&big.m, i, a);
		int want = (int)big.m.prefixes[i].tenant;
		bool ported = million_ported(&big.m, (__u32)want);
		int got = rl_cls_walk(g, MILLION_CLS_HALF, fam, a, 443);
		int got80 = rl_cls_walk(g, MILLION_CLS_HALF, fam, a, 80);

		if (got != want && wrong++ < 5)
			diag("prefix %zu: tenant %d, want %d", i, got, want);
		/* a ported tenant's sources on another port match no rule */
		if (got80 != (ported ? -1 : want) && wrong_port++ < 5)
			diag("prefix %zu port 80: tenant %d, want %d", i, got80,
			     ported ? -1 : want);
	}
	CHECK(wrong == 0, "%zu of %d prefixes classify to another tenant",
	      wrong, MILLION_PREFIXES);
	CHECK(wrong_port == 0, "%zu of %d prefixes classify port 80 wrongly",
	      wrong_port, MILLION_PREFIXES);
	return 0;
}

static int scen_gaps(const void *arg)
{
	const struct rl_cls_group *g;
	size_t wrong = 0;
	uint8_t a[16];

	(void)arg;
	g = published_half();
	if (!g)
		return -1;
	for (int i = 0; i < GAPS; i++) {
		int fam = million_gap(&big.m, a);
		int got = rl_cls_walk(g, MILLION_CLS_HALF, fam, a, 443);

		if (got != -1 && wrong++ < 5)
			diag("a gap address classifies to tenant %d", got);
	}
	CHECK(wrong == 0, "%zu of %d gap addresses have a tenant", wrong, GAPS);
	return 0;
}

/* A SYN from a (AF_INET or AF_INET6) to port dport; its verdict. */
static int send_from(int fam, const uint8_t *a, __u16 dport, __u16 sport,
		     __u32 *verdict)
{
	char src[INET6_ADDRSTRLEN];
	struct pkt p = { .family = fam == AF_INET ? 4 : 6, SYN, .src = src,
			 .dport = dport, .sport = sport, .seq = sport };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len, err;

	inet_ntop(fam, a, src, sizeof(src));
	len = pkt_build(&p, buf, NULL);
	err = xdp_run(big.in.prog_fd, buf, len, out, sizeof(out), 1, &r);
	if (err) {
		diag("couldn't run a SYN from %s: %s", src, strerror(-err));
		return err;
	}
	*verdict = r.retval;
	return 0;
}

static int scen_program(const void *arg)
{
	struct world *w = &big.in.w;
	__u64 before[RL_CNT_MAX], after[RL_CNT_MAX];
	static uint32_t sent[SENT_TENANTS];
	size_t wrong = 0;
	uint8_t a[16];
	__u32 v;
	int n_nomatch = 0;

	(void)arg;
	if (!published_half())
		return -1;
	counters_sum(w, before);
	/* distinct tenants, one prefix each, in random order */
	for (int k = 0; k < SENT_TENANTS; k++) {
		uint32_t t = (uint32_t)k * (MILLION_TENANTS / SENT_TENANTS) +
			     million_rand(&big.m) % (MILLION_TENANTS /
						      SENT_TENANTS);
		size_t i = (size_t)t * MILLION_PER_TENANT +
			   million_rand(&big.m) % MILLION_PER_TENANT;
		int fam = million_inside(&big.m, i, a);

		sent[k] = big.m.prefixes[i].tenant;
		if (send_from(fam, a, 443, (__u16)(1000 + k), &v))
			return -1;
		CHECK(v == XDP_PASS, "SYN %d: verdict %u", k, v);
		/* the same source on a port its tenant does not limit */
		if (million_ported(&big.m, sent[k])) {
			if (send_from(fam, a, 80, (__u16)(1000 + k), &v))
				return -1;
			CHECK(v == XDP_PASS, "SYN %d to port 80: verdict %u",
			      k, v);
			n_nomatch++;
		}
	}
	for (int i = 0; i < 100; i++) {
		int fam = million_gap(&big.m, a);

		if (send_from(fam, a, 443, (__u16)(5000 + i), &v))
			return -1;
		n_nomatch++;
	}
	for (int k = 0; k < SENT_TENANTS; k++) {
		struct rl_stats s;

		tenant_stats_sum(w, sent[k], &s);
		if ((s.admitted != 1 || s.denied) && wrong++ < 5)
			diag("tenant %u: %llu admitted, %llu denied, want 1 "
			     "admitted", sent[k], (unsigned long long)s.admitted,
			     (unsigned long long)s.denied);
	}
	CHECK(wrong == 0, "%zu of %d tenants were not charged their one SYN",
	      wrong, SENT_TENANTS);
	counters_sum(w, after);
	CHECK(after[RL_CNT_SYN] - before[RL_CNT_SYN] ==
	      (__u64)(SENT_TENANTS + n_nomatch), "SYNs seen: %llu, want %d",
	      (unsigned long long)(after[RL_CNT_SYN] - before[RL_CNT_SYN]),
	      SENT_TENANTS + n_nomatch);
	CHECK(after[RL_CNT_NOMATCH] - before[RL_CNT_NOMATCH] ==
	      (__u64)n_nomatch, "SYNs without a rule: %llu, want %d",
	      (unsigned long long)(after[RL_CNT_NOMATCH] -
				   before[RL_CNT_NOMATCH]), n_nomatch);
	return 0;
}

static int scen_too_big(const void *arg)
{
	struct rl_cls_image img;
	char err[256];
	int ret;

	(void)arg;
	if (!big.made && million_make(&big.m, 1) == 0)
		big.made = true;
	if (!big.made) {
		diag("couldn't make the policy: out of memory");
		return -1;
	}
	ret = rl_cls_compile(big.m.rules, big.m.n_rules, RL_CLS_GROUPS, &img,
			     err, sizeof(err));
	CHECK(ret == -ENOSPC, "compile into the default size: %d, want %d",
	      ret, -ENOSPC);
	CHECK(!img.groups && !img.n_groups, "a refused compile left a table");
	CHECK(strstr(err, "the classifier is full at ") &&
	      strstr(err, "8192 tables"), "message: %s", err);
	diag("%s", err);
	if (!ret)
		rl_cls_image_free(&img);
	return 0;
}

static const struct scenario scens[] = {
	{ "million: 1,000,000 prefixes over 100,000 tenants (IPv4 /24../32, "
	  "IPv6 /48../64, 1% of tenants by port) compile into --rule-memory "
	  "128 and are published", scen_fits, NULL },
	{ "million: an address inside each of the million prefixes classifies "
	  "to its tenant in the kernel's table; port 80 to none for tenants "
	  "that name ports", scen_every_prefix, NULL },
	{ "million: addresses in the providers' blocks no tenant holds "
	  "classify to no tenant", scen_gaps, NULL },
	{ "million: SYNs from 2,000 tenants' prefixes are each charged by the "
	  "program to their own tenant; gaps and unlimited ports to none",
	  scen_program, NULL },
	{ "million: the same policy at the default --rule-memory is refused "
	  "whole, naming the classifier and its size", scen_too_big, NULL },
};

void million_tests(void)
{
	run_scenarios(scens, ARRAY_SIZE(scens));
	if (big.loaded)
		inst_close(&big.in);
	if (big.made)
		million_free(&big.m);
	memset(&big, 0, sizeof(big));
}
