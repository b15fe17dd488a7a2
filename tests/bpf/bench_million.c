// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-packet cost of an admitted SYN with a policy at SaaS scale loaded: a
 * million prefixes over 100,000 tenants (million.c), in a classifier and
 * tenant maps sized as `rlagent --max-tenants 100001 --rule-memory 128`
 * would.  Every repetition comes from the next of a million sources drawn
 * at random from the whole policy (IPv4 and IPv6 apart), so each SYN walks
 * other tables and charges another tenant than the last: what it costs
 * when they are not in the cache.  Measured in the same rounds as the floor,
 * the same program from one source (the same policy, one hot path), the
 * classification alone from the spread sources, and the plain admit figure
 * (bench.c's, against 1,000 rules).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bench.skel.h"
#include "bench.h"
#include "harness.h"
#include "million.h"

/* Sources per family: a power of two (the program masks with it). */
#define SRCS		(1u << 20)

static const struct pkt syn4 = { .family = 4, .flags = TH_SYN, .seq = 1 };
static const struct pkt syn6 = { .family = 6, .flags = TH_SYN, .seq = 1 };

/* the plain admit path last: ref_ratio is against it */
enum { M_FLOOR, M_SPREAD4, M_ONE4, M_CLS4, M_SPREAD6, M_ONE6, M_CLS6,
       M_ADMIT, M_MAX };

static double ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The million's rules into the classifier: prints how long the compile took
 * and how many tables it made.  0 or -1 (said). */
static int publish(struct million *m, struct world *w)
{
	struct rl_cls_image img;
	struct timespec t0;
	char err[256];
	double ms;
	int ret;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	ret = rl_cls_compile(m->rules, m->n_rules, MILLION_CLS_HALF, &img, err,
			     sizeof(err));
	ms = ms_since(&t0);
	if (ret) {
		fprintf(stderr, "Error: couldn't compile a million prefixes: "
			"%s\n", err);
		return -1;
	}
	ret = rl_cls_publish(&w->cls, &img);
	printf("cls_1m_prefixes_compile_ms %.0f ms\n", ms);
	printf("cls_1m_prefixes_tables %u tables\n", img.n_groups);
	rl_cls_image_free(&img);
	if (ret) {
		fprintf(stderr, "Error: couldn't publish a million prefixes: "
			"%s\n", strerror(-ret));
		return -1;
	}
	return 0;
}

/* The sources, SRCS of each family, each inside a random prefix of a
 * random tenant.  0 or -errno. */
static int fill_sources(struct million *m, struct bench_bpf *bb)
{
	size_t len = 2ul * SRCS * 16;
	uint8_t *s;

	s = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 bpf_map__fd(bb->maps.bench_srcs), 0);
	if (s == MAP_FAILED)
		return -errno;
	for (size_t i = 0; i < 2ul * SRCS; i++) {
		/* a tenant's prefixes: six IPv4 ones, then four IPv6 */
		size_t t = million_rand(m) % MILLION_TENANTS;
		size_t k = i < SRCS ? million_rand(m) % 6 :
			   6 + million_rand(m) % 4;

		million_inside(m, t * MILLION_PER_TENANT + k, s + i * 16);
	}
	munmap(s, len);
	return 0;
}

static int set_up(struct million *m, struct bench_bpf **bbp, struct world *w)
{
	struct bench_bpf *bb;
	int err;

	if (million_make(m, 1))
		return -ENOMEM;
	bb = *bbp = bench_bpf__open();
	if (!bb)
		return -errno;
	bb->rodata->cls_half = MILLION_CLS_HALF;
	bb->rodata->bench_srcs_per_family = SRCS;
	err = world_size(bb->obj, MILLION_TENANTS + 1, MILLION_CLS_HALF);
	if (!err)
		err = bpf_map__set_max_entries(bb->maps.bench_srcs, 2 * SRCS);
	if (!err)
		err = bench_bpf__load(bb);
	if (!err)
		err = world_init(w, bb->obj);
	if (err)
		return err;
	for (__u32 t = 1; t <= MILLION_TENANTS; t++)
		tenant_standalone(&w->tenants[t], RL_ACT_DROP, 0, 1,
				  1000000000000ull);
	if (publish(m, w))
		return -EINVAL;
	return fill_sources(m, bb);
}

/* Every SYN admitted, each for a tenant of the policy: no source fell
 * outside it and no bucket refused.  0 or -1 (said). */
static int check_path(struct world *w, __u64 syns)
{
	__u64 c[RL_CNT_MAX], admitted = 0, denied = 0;
	struct rl_stats s;

	counters_sum(w, c);
	for (__u32 t = 1; t <= MILLION_TENANTS; t++) {
		tenant_stats_sum(w, t, &s);
		admitted += s.admitted;
		denied += s.denied + s.retransmits;
	}
	if (c[RL_CNT_NOMATCH] || denied || admitted != c[RL_CNT_SYN] ||
	    admitted < syns) {
		fprintf(stderr, "Error: xdp_syn_admit_1m_prefixes took the "
			"wrong path (%llu SYNs, %llu admitted, %llu without a "
			"rule, %llu refused or free)\n",
			(unsigned long long)c[RL_CNT_SYN],
			(unsigned long long)admitted,
			(unsigned long long)c[RL_CNT_NOMATCH],
			(unsigned long long)denied);
		return -1;
	}
	return 0;
}

int million_bench(int floor_fd, int admit_fd, const struct pkt *admit_pkt)
{
	static struct figure f[M_MAX];
	struct bench_bpf *bb = NULL;
	struct million m = { 0 };
	struct world w = { 0 };
	int err;

	err = set_up(&m, &bb, &w);
	if (err) {
		fprintf(stderr, "Error: couldn't set up the million-prefix "
			"benchmark: %s\n", strerror(-err));
		goto out;
	}
	f[M_FLOOR] = (struct figure){ .name = "xdp_pass_floor_ns",
		.prog_fd = floor_fd, .pkt = admit_pkt };
	f[M_SPREAD4] = (struct figure){ .name = "xdp_syn_admit_1m_prefixes_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_spread),
		.pkt = &syn4 };
	f[M_ONE4] = (struct figure){ .name = "xdp_syn_admit_1m_one_source_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_one_source),
		.pkt = &syn4 };
	f[M_CLS4] = (struct figure){ .name = "xdp_classify_1m_prefixes_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_classify_spread),
		.pkt = &syn4 };
	f[M_SPREAD6] = (struct figure){
		.name = "xdp_syn_admit_1m_prefixes_v6_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_spread),
		.pkt = &syn6 };
	f[M_ONE6] = (struct figure){
		.name = "xdp_syn_admit_1m_one_source_v6_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_one_source),
		.pkt = &syn6 };
	f[M_CLS6] = (struct figure){
		.name = "xdp_classify_1m_prefixes_v6_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_classify_spread),
		.pkt = &syn6 };
	f[M_ADMIT] = (struct figure){ .name = "xdp_syn_admit_plain_ns",
		.prog_fd = admit_fd, .pkt = admit_pkt };
	/* a few hundred ns each: 100 ms is enough repetitions */
	for (int k = M_SPREAD4; k < M_ADMIT; k++)
		f[k].min_repeat = BENCH_REPEAT / 10;
	err = measure_all(f, M_MAX);
	if (!err)
		err = check_path(&w, (f[M_SPREAD4].repeat + f[M_ONE4].repeat +
				      f[M_SPREAD6].repeat + f[M_ONE6].repeat) *
				     BENCH_RUNS);
	if (err)
		goto out;
	if (f[M_CLS4].retval != XDP_PASS || f[M_CLS6].retval != XDP_PASS) {
		fprintf(stderr, "Error: xdp_classify_1m_prefixes found no "
			"tenant (verdicts %u, %u)\n", f[M_CLS4].retval,
			f[M_CLS6].retval);
		err = -1;
		goto out;
	}
	for (int k = M_SPREAD4; k < M_ADMIT; k++)
		printf("%s %.1f ns\n%s_ratio %.2f x\n%s_admit_ratio %.2f x\n",
		       f[k].name, f[k].median, f[k].name, f[k].ratio,
		       f[k].name, f[k].ref_ratio);
out:
	world_fini(&w);
	bench_bpf__destroy(bb);
	million_free(&m);
	return err ? -1 : 0;
}
