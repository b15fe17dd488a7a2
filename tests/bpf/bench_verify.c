// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-packet cost of verification (--verify syncookie), against the floor in
 * the same rounds: a verifying tenant's SYN (passed to the server's
 * cookies), the kernel's own making of that cookie (what the server adds to
 * its SYN-ACK), the handshake ACK whose cookie is checked and charged, and
 * what every other ACK costs while some tenant verifies - one of an open
 * connection of a verifying tenant (a failed check), one of another tenant.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "rlgate.skel.h"
#include "cookie.skel.h"
#include "bench.h"
#include "harness.h"

#define T_VERIFY	1	/* verifies, never denies */
#define T_PLAIN		2	/* does not verify */

static const struct pkt v_syn = { .family = 4, .flags = TH_SYN,
				  .src = "10.1.0.10", .seq = 1000 };
/* an ACK of an open connection: its numbers are no cookie's */
static const struct pkt v_ack_open = { .family = 4, .flags = TH_ACK,
				       .src = "10.1.0.10", .seq = 5001,
				       .ack = 777 };
static const struct pkt plain_ack = { .family = 4, .flags = TH_ACK,
				      .src = "10.2.0.10" };
static struct pkt v_ack_cookie = { .family = 4, .flags = TH_ACK,
				   .src = "10.1.0.10", .seq = 1001 };

enum { V_FLOOR, V_SYN, V_GEN, V_CHARGED, V_OPEN, V_OTHER, V_MAX };

/* A copy of rlgate with tenant 1 verifying (10.1/16) and tenant 2 not
 * (10.2/16), both with buckets that never run dry.  retrans: the flow
 * cache's window (0: every copy of the cookie ACK is charged). */
static struct rlgate_bpf *open_copy(struct world *w, __u64 retrans)
{
	struct rlgate_bpf *rl = rlgate_bpf__open();

	if (!rl)
		return NULL;
	rl->rodata->retrans_window_ns = retrans;
	if (rlgate_bpf__load(rl) || world_init(w, rl->obj)) {
		rlgate_bpf__destroy(rl);
		return NULL;
	}
	tenant_standalone(&w->tenants[T_VERIFY], RL_ACT_DROP, RL_F_VERIFY, 1,
			  1000000000000ull);
	tenant_standalone(&w->tenants[T_PLAIN], RL_ACT_DROP, 0, 1,
			  1000000000000ull);
	rl->bss->verify_tenants = 1;
	if (rule_add(w, "10.1.0.0/16", 0, T_VERIFY) ||
	    rule_add(w, "10.2.0.0/16", 0, T_PLAIN)) {
		world_fini(w);
		rlgate_bpf__destroy(rl);
		return NULL;
	}
	return rl;
}

/* The kernel's cookie for v_syn, put into v_ack_cookie. */
static int cookie_ack(struct cookie_bpf *gen)
{
	__u8 in[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&v_syn, in, NULL), err;
	__u32 c;

	err = xdp_run(bpf_program__fd(gen->progs.xdp_cookie), in, len, out,
		      sizeof(out), 1, &r);
	if (err || r.retval != XDP_TX)
		return err ? err : -EINVAL;
	memcpy(&c, out + 14 + 20 + 8, 4);
	v_ack_cookie.ack = ntohl(c) + 1;
	return 0;
}

int verify_bench(int floor_fd)
{
	struct world w = { 0 }, wc = { 0 };
	struct rlgate_bpf *rl = open_copy(&w, RL_DEFAULT_RETRANS_WINDOW_NS);
	struct rlgate_bpf *charging = open_copy(&wc, 0);
	struct cookie_bpf *gen = cookie_bpf__open_and_load();
	static struct figure f[V_MAX];
	struct rl_stats s;
	__u64 c[RL_CNT_MAX];
	int k, err = -1;

	if (!rl || !charging || !gen || cookie_ack(gen)) {
		fprintf(stderr, "Error: couldn't set up the verify benchmark\n");
		goto out;
	}
	f[V_FLOOR] = (struct figure){ .name = "xdp_pass_floor_ns",
		.prog_fd = floor_fd, .pkt = &plain_ack };
	f[V_SYN] = (struct figure){ .name = "xdp_verify_syn_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &v_syn };
	f[V_GEN] = (struct figure){ .name = "xdp_cookie_gen_ns",
		.prog_fd = bpf_program__fd(gen->progs.xdp_cookie), .pkt = &v_syn };
	f[V_CHARGED] = (struct figure){ .name = "xdp_verify_ack_charged_ns",
		.prog_fd = bpf_program__fd(charging->progs.xdp_rlgate),
		.pkt = &v_ack_cookie };
	f[V_OPEN] = (struct figure){ .name = "xdp_verify_ack_open_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &v_ack_open };
	f[V_OTHER] = (struct figure){ .name = "xdp_verify_ack_other_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &plain_ack };
	if (measure_all(f, V_MAX))
		goto out;

	/* every figure took its path: the charged ACK was admitted each
	 * time, no other packet was charged */
	tenant_stats_sum(&wc, T_VERIFY, &s);
	if (s.admitted < (__u64)BENCH_REPEAT * BENCH_RUNS || s.retransmits) {
		fprintf(stderr, "Error: xdp_verify_ack_charged took the wrong "
			"path (%llu admitted, %llu free)\n",
			(unsigned long long)s.admitted,
			(unsigned long long)s.retransmits);
		goto out;
	}
	tenant_stats_sum(&w, T_VERIFY, &s);
	counters_sum(&w, c);
	if (s.admitted || s.denied || c[RL_CNT_VERIFY_ACK] ||
	    c[RL_CNT_VERIFY_SYN] < (__u64)BENCH_REPEAT * BENCH_RUNS) {
		fprintf(stderr, "Error: a verify figure took the wrong path "
			"(%llu admitted, %llu cookie ACKs, %llu SYNs)\n",
			(unsigned long long)s.admitted,
			(unsigned long long)c[RL_CNT_VERIFY_ACK],
			(unsigned long long)c[RL_CNT_VERIFY_SYN]);
		goto out;
	}
	for (k = V_SYN; k < V_MAX; k++)
		printf("%s %.1f ns\n%s_ratio %.2f x\n", f[k].name, f[k].median,
		       f[k].name, f[k].ratio);
	err = 0;
out:
	cookie_bpf__destroy(gen);
	world_fini(&wc);
	world_fini(&w);
	rlgate_bpf__destroy(charging);
	rlgate_bpf__destroy(rl);
	return err;
}
