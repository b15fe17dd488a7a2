// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-packet cost of a per-source limit (--per-source), in the same rounds
 * as the floor and as the plain admit path: an admitted SYN of a tenant
 * whose source already holds a bucket (a lookup in `sources` and a
 * compare-and-swap on it, then the tenant's bucket), against the same SYN
 * of a tenant without one.  Every repetition is a new flow of the same
 * source (xdp_bench_admit bumps the ISN).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bench.skel.h"
#include "bench.h"
#include "harness.h"
#include "persource.h"

#define T_PLAIN		1	/* no per-source limit, never denies */
#define T_SRC		2	/* a per-source limit, neither denies */

static const struct pkt plain_syn = { .family = 4, .flags = TH_SYN,
				      .src = "10.1.0.10", .seq = 1 };
static const struct pkt src_syn = { .family = 4, .flags = TH_SYN,
				    .src = "10.2.0.10", .seq = 1 };
static const struct pkt floor_pkt = { .family = 4, .flags = TH_ACK,
				      .src = "10.1.0.10" };

/* the plain admit path last: ref_ratio is against it */
enum { S_FLOOR, S_SRC, S_PLAIN, S_MAX };

static int set_up(struct bench_bpf *bb, struct world *w)
{
	struct policy_tenant t = { .src_rate = { POLICY_RATE_MAX, 1 },
				   .src_burst = POLICY_BURST_MAX,
				   .src_len4 = 32, .src_len6 = 64 };
	struct rl_src_conf c = { 0 };
	__u32 slot = T_SRC;

	if (world_init(w, bb->obj))
		return -1;
	src_conf_write(&c, &t, true);
	if (bpf_map_update_elem(bpf_map__fd(bb->maps.src_conf), &slot, &c, 0))
		return -1;
	tenant_standalone(&w->tenants[T_PLAIN], RL_ACT_DROP, 0, 1,
			  1000000000000ull);
	tenant_standalone(&w->tenants[T_SRC], RL_ACT_DROP, RL_F_PERSOURCE, 1,
			  1000000000000ull);
	return rule_add(w, "10.1.0.0/16", 0, T_PLAIN) ||
	       rule_add(w, "10.2.0.0/16", 0, T_SRC) ? -1 : 0;
}

int per_source_bench(int floor_fd)
{
	struct bench_bpf *bb = bench_bpf__open_and_load();
	static struct figure f[S_MAX];
	struct world w = { 0 };
	struct rl_stats s;
	const __u64 total = (__u64)BENCH_REPEAT * BENCH_RUNS;
	int err = -1;

	if (!bb || set_up(bb, &w)) {
		fprintf(stderr, "Error: couldn't set up the per-source "
			"benchmark\n");
		goto out;
	}
	f[S_FLOOR] = (struct figure){ .name = "xdp_pass_floor_ns",
		.prog_fd = floor_fd, .pkt = &floor_pkt };
	f[S_SRC] = (struct figure){ .name = "xdp_syn_admit_per_source_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_admit),
		.pkt = &src_syn };
	f[S_PLAIN] = (struct figure){ .name = "xdp_syn_admit_plain_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_admit),
		.pkt = &plain_syn };
	if (measure_all(f, S_MAX))
		goto out;
	tenant_stats_sum(&w, T_SRC, &s);
	if (s.admitted < total || s.denied || s.retransmits) {
		fprintf(stderr, "Error: xdp_syn_admit_per_source took the wrong "
			"path (%llu admitted, %llu denied, %llu free)\n",
			(unsigned long long)s.admitted,
			(unsigned long long)s.denied,
			(unsigned long long)s.retransmits);
		goto out;
	}
	printf("%s %.1f ns\n%s_ratio %.2f x\n%s_admit_ratio %.2f x\n",
	       f[S_SRC].name, f[S_SRC].median, f[S_SRC].name, f[S_SRC].ratio,
	       f[S_SRC].name, f[S_SRC].ref_ratio);
	err = 0;
out:
	world_fini(&w);
	bench_bpf__destroy(bb);
	return err;
}
