// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-source limits (RL_F_PERSOURCE): each source of a tenant held to its
 * own bucket before the tenant's, sources by prefix (IPv6 /64), shadow
 * mode, the reasons counted apart, the refused-most slots, and a full
 * table: new sources share one overflow bucket and no entry is evicted.
 * Each row is a sequence of sources sending SYNs and the admissions each
 * must get.
 */
#include <errno.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "persource.h"
#include "xdp_test.h"

#define SLOW	(100 * SEC_NS)	/* nothing refills while a row runs */
#define STEPS	8

/* n SYNs from src (n distinct flows): want of them admitted. */
struct ps_step {
	const char *src;
	int n, want;
};

struct ps_row {
	const char *name;
	int family;
	__u64 src_burst, tenant_burst;
	__u8 len4, len6;
	bool shadow;
	__u32 table;		/* max_entries of `sources`; 0: default */
	int n_cycled;		/* then this many more distinct sources, 3
				 * SYNs each, and their admissions in all: */
	int cycled_want;
	struct ps_step steps[STEPS];
	const char *stats;	/* tenant 1's rl_stats */
	/* src_stats: denied, shadow_denied, overflow */
	__u64 src_denied, src_shadow, src_overflow;
};

struct ps_inst {
	struct inst in;
	struct rl_src_conf *conf;
};

static int ps_open(struct ps_inst *p, const struct ps_row *row)
{
	struct inst *in = &p->in;
	struct policy_tenant t = { 0 };
	struct rl_src_conf c = { 0 };
	__u32 one = 1;
	int err;

	memset(p, 0, sizeof(*p));
	if (!row->table) {
		if (inst_open_gap(in, 0, RL_DEFAULT_RETRANS_GAP_NS))
			return -1;
	} else {
		/* a table of its own size: a load of its own */
		in->skel = rlgate_bpf__open();
		if (!in->skel) {
			diag("couldn't open the rlgate skeleton: %s",
			     strerror(errno));
			return -1;
		}
		in->skel->rodata->retrans_window_ns = 0;
		bpf_map__set_max_entries(in->skel->maps.sources, row->table);
		err = rlgate_bpf__load(in->skel);
		if (!err)
			err = world_init(&in->w, in->skel->obj);
		if (err) {
			diag("couldn't load rlgate: %s", strerror(-err));
			inst_close(in);
			return -1;
		}
		in->prog_fd = bpf_program__fd(in->skel->progs.xdp_rlgate);
	}
	if (rule_add(&in->w, row->family == 6 ? "2001:db8::/32" : "10.1.0.0/16",
		     0, 1)) {
		diag("couldn't add a rule");
		inst_close(in);
		return -1;
	}
	/* one token a hundred seconds, as the agent writes it */
	t.src_rate = (struct policy_rate){ 1, 100 };
	t.src_burst = row->src_burst;
	t.src_len4 = row->len4 ? row->len4 : 32;
	t.src_len6 = row->len6 ? row->len6 : 64;
	src_conf_write(&c, &t, true);
	if (bpf_map_update_elem(bpf_map__fd(in->skel->maps.src_conf), &one, &c,
				0)) {
		diag("couldn't write src_conf: %s", strerror(errno));
		inst_close(in);
		return -1;
	}
	tenant_standalone(&in->w.tenants[1], RL_ACT_DROP,
			  RL_F_PERSOURCE | (row->shadow ? RL_F_SHADOW : 0),
			  SLOW, row->tenant_burst);
	return 0;
}

/* n SYNs from src, distinct flows; how many passed, -1 on a failed run. */
static int admits_from(struct inst *in, int family, const char *src, int n,
		       __u16 sport0)
{
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int admits = 0;

	for (int i = 0; i < n; i++) {
		struct pkt p = { .family = family, SYN, .src = src,
				 .sport = (__u16)(sport0 + i),
				 .seq = 1000 + (__u32)i };
		int len = pkt_build(&p, buf, NULL);

		if (xdp_run(in->prog_fd, buf, len, out, sizeof(out), 1, &r))
			return -1;
		admits += r.retval == XDP_PASS;
	}
	return admits;
}

static void src_stats_sum(struct ps_inst *p, struct rl_src_stats *sum)
{
	int n = libbpf_num_possible_cpus();
	struct rl_src_stats per[n > 0 ? n : 1];
	__u32 one = 1;

	memset(sum, 0, sizeof(*sum));
	if (bpf_map_lookup_elem(bpf_map__fd(p->in.skel->maps.src_stats), &one,
				per))
		return;
	for (int i = 0; i < n; i++) {
		sum->denied += per[i].denied;
		sum->shadow_denied += per[i].shadow_denied;
		sum->overflow += per[i].overflow;
		sum->inserted += per[i].inserted;
	}
}

static int scen_row(const void *arg)
{
	const struct ps_row *row = arg;
	struct rl_src_stats ss;
	struct ps_inst p;
	__u16 sport = 1000;
	int got;

	if (ps_open(&p, row))
		return -1;
	for (int i = 0; i < STEPS && row->steps[i].src; i++) {
		const struct ps_step *st = &row->steps[i];

		got = admits_from(&p.in, row->family ? row->family : 4, st->src,
				  st->n, sport);
		sport += (__u16)st->n;
		CHECK(got == st->want, "step %d: %d SYNs from %s: %d admitted, "
		      "want %d", i, st->n, st->src, got, st->want);
		if (i == 0 && row->n_cycled) {
			char a[32];
			int all = 0;

			for (int s = 0; s < row->n_cycled; s++) {
				snprintf(a, sizeof(a), "10.1.%d.%d", 100 + s / 200,
					 1 + s % 200);
				got = admits_from(&p.in, 4, a, 3, sport);
				sport += 3;
				all += got > 0 ? got : 0;
			}
			CHECK(all == row->cycled_want, "%d more sources, 3 SYNs "
			      "each: %d admitted, want %d", row->n_cycled, all,
			      row->cycled_want);
		}
	}
	EXPECT_STATS(&p.in.w, 1, row->stats);
	src_stats_sum(&p, &ss);
	CHECK(ss.denied == row->src_denied && ss.shadow_denied == row->src_shadow &&
	      ss.overflow == row->src_overflow, "src_stats denied %llu shadow "
	      "%llu overflow %llu, want %llu %llu %llu",
	      (unsigned long long)ss.denied, (unsigned long long)ss.shadow_denied,
	      (unsigned long long)ss.overflow,
	      (unsigned long long)row->src_denied,
	      (unsigned long long)row->src_shadow,
	      (unsigned long long)row->src_overflow);
	inst_close(&p.in);
	return 0;
}

static const struct ps_row rows[] = {
	{ "an abusive source is held to its own burst; the tenant's other "
	  "sources are not refused", 4, 3, 100, 0, 0, false, 0, 0, 0,
	  { { "10.1.0.10", 10, 3 }, { "10.1.0.11", 3, 3 },
	    { "10.1.0.12", 3, 3 } },
	  "admitted=9 denied=7", 7, 0, 0 },
	{ "a SYN its source refuses costs the tenant no token; the tenant's "
	  "own refusals are not the source's", 4, 3, 6, 0, 0, false, 0, 0, 0,
	  { { "10.1.0.10", 10, 3 }, { "10.1.0.11", 3, 3 },
	    { "10.1.0.12", 2, 0 } },
	  "admitted=6 denied=9", 7, 0, 0 },
	{ "IPv6 clients rotating addresses inside one /64 are one source", 6, 3,
	  100, 0, 0, false, 0, 0, 0,
	  { { "2001:db8:0:1::1", 2, 2 }, { "2001:db8:0:1::2", 2, 1 },
	    { "2001:db8:0:1:ffff:ffff:ffff:ffff", 2, 0 },
	    { "2001:db8:0:2::1", 3, 3 } },
	  "admitted=6 denied=3", 3, 0, 0 },
	{ "--source-mask /24,/64 makes an IPv4 /24 one source", 4, 2, 100, 24, 64,
	  false, 0, 0, 0,
	  { { "10.1.0.10", 1, 1 }, { "10.1.0.200", 3, 1 },
	    { "10.1.1.10", 2, 2 } },
	  "admitted=4 denied=2", 2, 0, 0 },
	{ "--source-mask /16,/48 makes IPv6 clients of one /48 one source", 6, 2,
	  100, 16, 48, false, 0, 0, 0,
	  { { "2001:db8:7:1::1", 1, 1 }, { "2001:db8:7:ff::1", 3, 1 },
	    { "2001:db8:8::1", 2, 2 } },
	  "admitted=4 denied=2", 2, 0, 0 },
	{ "shadow: a source over its bucket is admitted, counted as would-deny, "
	  "and costs the tenant no token", 4, 2, 4, 0, 0, true, 0, 0, 0,
	  { { "10.1.0.10", 5, 5 }, { "10.1.0.11", 2, 2 },
	    { "10.1.0.12", 1, 1 } },
	  "admitted=8 denied=0 shadow_denied=4", 0, 3, 0 },
	{ "a full table evicts nobody: 16 entries, 40 more sources share one "
	  "overflow bucket, and the first source's debt is kept", 4, 2, 1000, 0,
	  0, false, 16, 40, 2 * 15 + 2,
	  { { "10.1.0.1", 3, 2 }, { "10.1.0.1", 3, 0 } },
	  "admitted=34 denied=92", 92, 0, 25 * 3 },
};

/* `src_top` names the source refused most, with its count, and never one
 * that was not refused. */
static int scen_top(const void *arg)
{
	struct rl_src_top slots[RL_SRC_TOP];
	struct src_top_row top[4];
	struct ps_inst p;
	char a[64];
	size_t n;

	(void)arg;
	if (ps_open(&p, &rows[0]))
		return -1;
	admits_from(&p.in, 4, "10.1.0.10", 12, 1000);
	admits_from(&p.in, 4, "10.1.0.11", 5, 2000);
	admits_from(&p.in, 4, "10.1.0.12", 3, 3000);
	for (__u32 i = 0; i < RL_SRC_TOP; i++)
		if (bpf_map_lookup_elem(bpf_map__fd(p.in.skel->maps.src_top), &i,
					&slots[i]))
			memset(&slots[i], 0, sizeof(slots[i]));
	n = src_top_pick(slots, RL_SRC_TOP, 1, top, 4);
	CHECK(n == 2, "%zu sources in src_top, want 2 (10.1.0.12 was never "
	      "refused)", n);
	if (n >= 1) {
		src_key_format(&top[0].key, 32, 64, a, sizeof(a));
		CHECK(!strcmp(a, "10.1.0.10") && top[0].denied == 9,
		      "the most refused: %s %llu, want 10.1.0.10 9", a,
		      (unsigned long long)top[0].denied);
	}
	if (n >= 2) {
		src_key_format(&top[1].key, 32, 64, a, sizeof(a));
		CHECK(!strcmp(a, "10.1.0.11") && top[1].denied == 2,
		      "the next: %s %llu, want 10.1.0.11 2", a,
		      (unsigned long long)top[1].denied);
	}
	CHECK(src_top_pick(slots, RL_SRC_TOP, 2, top, 4) == 0,
	      "another tenant's sources shown");
	inst_close(&p.in);
	return 0;
}

/* Two per-source tenants share a table of 16 entries, 8 each as the agent
 * writes it (src_share()).  Tenant 1 meets a flood of 40 new sources, one
 * SYN each, as forged ones would be: it fills its own 8 entries and the
 * rest share its overflow bucket (burst 2).  Tenant 2's 5 new sources then
 * still get entries of their own: 2 SYNs each, all admitted, none judged
 * by an overflow bucket.  Without the share, tenant 1's flood fills the
 * whole table and tenant 2's sources share its one overflow bucket. */
static int scen_share(const void *arg)
{
	const struct ps_row *row = arg;
	struct rl_src_conf c1, c2 = { 0 };
	struct policy_tenant t = { 0 };
	struct rl_src_ctl ctl = { .share = src_share(row->table, 2) };
	struct rl_src_stats ss;
	__u32 zero = 0, one = 1, two = 2;
	struct ps_inst p;
	int flood = 0, got = 0, n;
	char a[32];

	if (ps_open(&p, row))
		return -1;
	t.src_rate = (struct policy_rate){ 1, 100 };
	t.src_burst = row->src_burst;
	t.src_len4 = 32;
	t.src_len6 = 64;
	src_conf_write(&c2, &t, true);
	if (rule_add(&p.in.w, "10.2.0.0/16", 0, 2) ||
	    bpf_map_update_elem(bpf_map__fd(p.in.skel->maps.src_conf), &two,
				&c2, 0) ||
	    bpf_map_update_elem(bpf_map__fd(p.in.skel->maps.src_ctl), &zero,
				&ctl, 0)) {
		diag("couldn't set up tenant 2: %s", strerror(errno));
		inst_close(&p.in);
		return -1;
	}
	tenant_standalone(&p.in.w.tenants[2], RL_ACT_DROP, RL_F_PERSOURCE, SLOW,
			  1000);
	for (int i = 0; i < 40; i++) {
		snprintf(a, sizeof(a), "10.1.7.%d", 1 + i);
		n = admits_from(&p.in, 4, a, 1, (__u16)(1000 + i));
		flood += n > 0 ? n : 0;
	}
	CHECK(flood == 8 + 2, "tenant 1's flood of 40 new sources: %d admitted, "
	      "want 10 (its 8 entries, then its overflow bucket's 2)", flood);
	for (int i = 0; i < 5; i++) {
		snprintf(a, sizeof(a), "10.2.0.%d", 1 + i);
		n = admits_from(&p.in, 4, a, 2, (__u16)(2000 + 2 * i));
		got += n > 0 ? n : 0;
	}
	CHECK(got == 10, "tenant 2's 5 new sources, 2 SYNs each: %d admitted, "
	      "want 10", got);
	src_stats_sum(&p, &ss);
	CHECK(ss.overflow == 32 && ss.inserted == 8, "tenant 1: %llu judged by "
	      "its overflow bucket, %llu inserted; want 32 and 8",
	      (unsigned long long)ss.overflow, (unsigned long long)ss.inserted);
	if (!bpf_map_lookup_elem(bpf_map__fd(p.in.skel->maps.src_conf), &one,
				 &c1))
		CHECK(c1.used == 8, "tenant 1 holds %lld entries, want 8",
		      (long long)c1.used);
	if (!bpf_map_lookup_elem(bpf_map__fd(p.in.skel->maps.src_conf), &two,
				 &c2))
		CHECK(c2.used == 5, "tenant 2 holds %lld entries, want 5",
		      (long long)c2.used);
	inst_close(&p.in);
	return 0;
}

/* Without RL_F_PERSOURCE the per-source configuration is not read: no
 * entry is made, no source refused. */
static int scen_flag_off(const void *arg)
{
	struct ps_inst p;
	struct rl_src_key next;
	int got;

	(void)arg;
	if (ps_open(&p, &rows[0]))
		return -1;
	p.in.w.tenants[1].flags = 0;
	got = admits_from(&p.in, 4, "10.1.0.10", 10, 1000);
	CHECK(got == 10, "%d of 10 admitted without RL_F_PERSOURCE", got);
	CHECK(bpf_map_get_next_key(bpf_map__fd(p.in.skel->maps.sources), NULL,
				   &next) < 0, "an entry was made");
	inst_close(&p.in);
	return 0;
}

void per_source_tests(void)
{
	static const struct ps_row share_row = {
		.family = 4, .src_burst = 2, .tenant_burst = 1000, .table = 16 };
	struct scenario s[ARRAY_SIZE(rows) + 3];

	for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
		s[i] = (struct scenario){ rows[i].name, scen_row, &rows[i] };
	s[ARRAY_SIZE(rows)] = (struct scenario){
		"src_top names the sources refused most, by tenant", scen_top,
		NULL };
	s[ARRAY_SIZE(rows) + 1] = (struct scenario){
		"without RL_F_PERSOURCE no source is looked up or refused",
		scen_flag_off, NULL };
	s[ARRAY_SIZE(rows) + 2] = (struct scenario){
		"one tenant's flood of new sources fills only its share of the "
		"table: another tenant's new sources still get their own buckets",
		scen_share, &share_row };
	run_scenarios(s, ARRAY_SIZE(s));
}
