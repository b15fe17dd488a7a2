// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-packet cost of verification (--verify syncookie), against the floor in
 * the same rounds: a verifying tenant's SYN (passed to the server's
 * cookies), the kernel's own making of that cookie (what the server adds to
 * its SYN-ACK), the handshake ACK whose cookie is checked and charged, and
 * what every other ACK costs while some tenant verifies - one of an open
 * connection of a verifying tenant (a failed check), one of another tenant.
 * And --verify syncookie-answer's SYN, answered here with the cookie
 * SYN-ACK (answer_bench()).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "rlgate.skel.h"
#include "bench.skel.h"
#include "cookie.skel.h"
#include "bench.h"
#include "harness.h"
#include "sockets.h"

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

/* The server xdp_bench_answer's SYNs go to: a listener of the benchmark's
 * network namespace (entered by the RST figure's set-up, rst_conn()). */
#define ANSWER_SERVER	"198.51.100.1"
#define ANSWER_PORT	8443
#define ANSWER_CLIENT	"10.1.0.10"

/* A flood's SYN to the listener, with MSS, SACK, timestamps and window
 * scale, as a Linux client sends it (its source port and ISN are each
 * repetition's own). */
static const __u8 answer_opts[20] = {
	2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0x30, 0x39, 0, 0, 0, 0,
	1, 3, 3, 7 };
static const struct pkt answer_syn = { .family = 4, .flags = TH_SYN,
				       .src = ANSWER_CLIENT,
				       .dst = ANSWER_SERVER,
				       .dport = ANSWER_PORT, .seq = 1,
				       .tcp_opts = 20,
				       .opt_bytes = answer_opts };

enum { A_FLOOR, A_RESTORE, A_ANSWER, A_MAX };

/* The listener, made to take cookie ACKs: its kernel sent a cookie of its
 * own (net.ipv4.tcp_syncookies=2) to a real connection just now, which
 * holds for longer than the figures take.  The listener's fd, or -1. */
static int answer_listener(void)
{
	int lfd, cfd = -1, sfd = -1;
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_syncookies", "we");

	if (!f || fputs("2", f) < 0 || fclose(f)) {
		fprintf(stderr, "Error: couldn't write sysctl on "
			"'net.ipv4.tcp_syncookies': %s\n", strerror(errno));
		return -1;
	}
	lfd = tcp_listen(ANSWER_SERVER, ANSWER_PORT);
	if (lfd < 0)
		return -1;
	if (tcp_pair(ANSWER_CLIENT, 40002, ANSWER_SERVER, ANSWER_PORT, lfd,
		     &cfd, &sfd)) {
		close_rst(lfd);
		return -1;
	}
	close_rst(cfd);
	close_rst(sfd);
	return lfd;
}

/*
 * --verify syncookie-answer's SYN: xdp_bench_answer (the SYN written back,
 * then decided as xdp_rlgate does: the listener's lookup, the options'
 * walk, the kernel's cookie, the SYN-ACK) against xdp_bench_answer_restore
 * (the writing back alone).  Runs in the benchmark's own network
 * namespace, which the RST figure's set-up entered.
 */
static int answer_bench(int floor_fd)
{
	struct bench_bpf *bb = bench_bpf__open_and_load();
	static struct figure f[A_MAX];
	struct world w = { 0 };
	__u8 frame[PKT_MAX];
	__u64 c[RL_CNT_MAX];
	int lfd = -1, err = -1, len;

	if (!bb || world_init(&w, bb->obj)) {
		fprintf(stderr, "Error: couldn't set up the answer benchmark\n");
		goto out;
	}
	len = pkt_build(&answer_syn, frame, NULL);
	if (len != (int)sizeof(bb->bss->bench_answer_syn)) {
		fprintf(stderr, "Error: the answer benchmark's SYN is %d bytes, "
			"want %zu\n", len, sizeof(bb->bss->bench_answer_syn));
		goto out;
	}
	memcpy(bb->bss->bench_answer_syn, frame, len);
	tenant_standalone(&w.tenants[T_VERIFY], RL_ACT_DROP,
			  RL_F_VERIFY | RL_F_ANSWER, 1, 1000000000000ull);
	bb->bss->verify_tenants = 1;
	bb->bss->cookie_opts = RL_COOKIE_TS | RL_COOKIE_SACK |
			       RL_COOKIE_WSCALE | RL_COOKIE_RCV_WSCALE_SET(7);
	if (rule_add(&w, "10.1.0.0/16", 0, T_VERIFY))
		goto out;
	lfd = answer_listener();
	if (lfd < 0)
		goto out;
	f[A_FLOOR] = (struct figure){ .name = "xdp_pass_floor_ns",
		.prog_fd = floor_fd, .pkt = &plain_ack };
	f[A_RESTORE] = (struct figure){ .name = "xdp_answer_restore_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_answer_restore),
		.pkt = &answer_syn };
	f[A_ANSWER] = (struct figure){ .name = "xdp_verify_answer_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_answer),
		.pkt = &answer_syn };
	if (measure_all(f, A_MAX))
		goto out;
	/* every repetition was answered here, none left to the kernel */
	counters_sum(&w, c);
	if (c[RL_CNT_COOKIE_SENT] < (__u64)BENCH_REPEAT * BENCH_RUNS ||
	    c[RL_CNT_COOKIE_SENT] != c[RL_CNT_VERIFY_SYN]) {
		fprintf(stderr, "Error: xdp_verify_answer took the wrong path "
			"(%llu SYNs answered of %llu)\n",
			(unsigned long long)c[RL_CNT_COOKIE_SENT],
			(unsigned long long)c[RL_CNT_VERIFY_SYN]);
		goto out;
	}
	printf("%s %.1f ns\n%s %.1f ns\n", f[A_RESTORE].name,
	       f[A_RESTORE].median, f[A_ANSWER].name, f[A_ANSWER].median);
	printf("%s_over_restore %.1f ns\n", f[A_ANSWER].name,
	       f[A_ANSWER].median - f[A_RESTORE].median);
	err = 0;
out:
	close_rst(lfd);
	world_fini(&w);
	bench_bpf__destroy(bb);
	return err;
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
	err = answer_bench(floor_fd);
out:
	cookie_bpf__destroy(gen);
	world_fini(&wc);
	world_fini(&w);
	rlgate_bpf__destroy(charging);
	rlgate_bpf__destroy(rl);
	return err;
}
