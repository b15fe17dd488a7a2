// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-packet cost of xdp_rlgate, measured with bpf_prog_test_run_opts and
 * `repeat`, against the cost of a program that only returns XDP_PASS (the
 * floor: test_run's own loop, context setup and the call).  Prints
 * "name value unit" lines; exits 1 when a figure could not be measured or
 * did not take the path it names.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "rlgate.skel.h"
#include "bench.skel.h"
#include "pass.skel.h"
#include "bench.h"
#include "harness.h"
#include "../unit/check.h"
#include "pkt.h"
#include "sockets.h"

#define BENCH_RULES	1000

#define T_ADMIT		1	/* never denies */
#define T_DENY		2	/* always denies, drop */
#define T_DENY_LEASED	3	/* leased, spent to its overdraft: denies */
#define T_BACKGROUND	100	/* the 1,000 background rules' tenants */

static const struct pkt syn_admit = { .family = 4, .flags = TH_SYN,
				      .src = "10.1.0.10", .seq = 1 };
static const struct pkt syn_deny = { .family = 4, .flags = TH_SYN,
				     .src = "10.2.0.10" };
static const struct pkt syn_deny_leased = { .family = 4, .flags = TH_SYN,
					    .src = "10.3.0.10" };
static const struct pkt syn_nomatch = { .family = 4, .flags = TH_SYN,
					.src = "192.0.2.1" };
static const struct pkt ack = { .family = 4, .flags = TH_ACK,
				.src = "10.1.0.10" };
/* A FIN of a connection no cap counted: what every FIN or RST costs once a
 * tenant has a cap (a lookup in `conns` that misses). */
static const struct pkt fin = { .family = 4, .flags = TH_FIN | TH_ACK,
				.src = "10.1.0.10" };
/* A client's RST of a counted connection whose server's socket is on this
 * host: what every RST or FIN of a counted connection costs, its entry in
 * `conns` found and the socket looked up and read.  Its sequence number is
 * not the server's rcv_nxt (the forged RST of a flood): the entry stays,
 * and every repetition takes the whole path. */
#define RST_CLIENT	"10.1.0.10"
#define RST_SERVER	"198.51.100.1"
#define RST_SPORT	40001
static __u32 rst_rcv_nxt;	/* the server's, read by rst_conn() */
static const struct pkt rst = { .family = 4, .flags = TH_RST | TH_ACK,
				.src = RST_CLIENT, .dst = RST_SERVER,
				.sport = RST_SPORT, .seq = 1 };

/*
 * 1,000 rules of mixed prefix lengths spread over the IPv4 space, one in
 * four for a single port, so that both tries have depth.  Deterministic, and
 * never inside 10/8 or 192/8 where the measured sources live.
 */
static int load_rules(struct world *w)
{
	static const int plens[] = { 8, 12, 16, 20, 22, 24, 26, 28, 30, 32 };
	__u32 x = 0x2545f491;
	char cidr[32];
	int i, n = 0, err;

	for (i = 0; i < 50; i++)
		tenant_standalone(&w->tenants[T_BACKGROUND + i], RL_ACT_DROP, 0,
				  1000, 1000);
	w->rules_batch = true;
	while (n < BENCH_RULES) {
		static __u32 seen[BENCH_RULES];
		__u32 a, mask;
		int plen = plens[n % 10], k;

		x = x * 1664525u + 1013904223u;	/* LCG: repeatable */
		a = x;
		if ((a >> 24) == 10 || (a >> 24) == 192 || (a >> 24) == 0)
			continue;
		mask = plen == 32 ? ~0u : ~(~0u >> plen);
		a &= mask;
		/* one tenant per prefix: the same /8 twice is a conflict */
		for (k = 0; k < n && !(seen[k] == a && plens[k % 10] == plen); k++)
			;
		if (k < n)
			continue;
		seen[n] = a;
		snprintf(cidr, sizeof(cidr), "%u.%u.%u.%u/%d", a >> 24,
			 (a >> 16) & 255, (a >> 8) & 255, a & 255, plen);
		err = rule_add(w, cidr, n % 4 == 3 ? 1024 + n : 0,
			       T_BACKGROUND + n % 50);
		if (err) {
			fprintf(stderr, "Error: couldn't add rule %s: %s\n",
				cidr, strerror(-err));
			return err;
		}
		n++;
	}

	/* The tenants the figures use. */
	tenant_standalone(&w->tenants[T_ADMIT], RL_ACT_DROP, 0, 1,
			  1000000000000ull);
	tenant_standalone(&w->tenants[T_DENY], RL_ACT_DROP, 0, RL_NSEC_PER_SEC,
			  1);
	w->tenants[T_DENY].tat = now_ns() + 1000000 * RL_NSEC_PER_SEC;
	/* a fleet tenant under a flood: its lease and overdraft spent, the
	 * low-water event sent (disarmed until the next lease) */
	tenant_leased(&w->tenants[T_DENY_LEASED], RL_ACT_DROP, -5, 0, false);
	w->tenants[T_DENY_LEASED].overdraft = 5;
	err = rule_add(w, "10.1.0.0/16", 0, T_ADMIT);
	if (!err)
		err = rule_add(w, "10.2.0.0/16", 0, T_DENY);
	if (!err)
		err = rule_add(w, "10.3.0.0/16", 0, T_DENY_LEASED);
	w->rules_batch = false;
	return err ? err : rules_publish(w);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * The kernel's mean ns per packet.  Not the time around the syscall: every
 * XDP test_run swaps the XDP dispatcher in and out, a fixed cost of
 * milliseconds that would swamp a 10 ns figure even over a million
 * repetitions.  The kernel's figure is whole ns (it divides and rounds down),
 * so a run is sized to last about BENCH_RUN_NS, and at least BENCH_REPEAT
 * repetitions, to keep its own noise below that step.
 */
#define BENCH_RUN_NS	100000000ull


static int run_once(struct figure *f, __u64 repeat, __u32 *ns)
{
	__u8 out[PKT_MAX];
	struct run_result r;
	int err;

	err = xdp_run(f->prog_fd, f->in, f->len, out, sizeof(out), repeat, &r);
	if (err) {
		fprintf(stderr, "Error: couldn't run %s: %s\n", f->name,
			strerror(-err));
		return err;
	}
	*ns = r.duration_ns;
	f->retval = r.retval;
	return 0;
}

/* Warms caches, the flow table and the branch predictors; sizes the run. */
static int prepare(struct figure *f)
{
	__u32 ns;
	int err;

	f->len = pkt_build(f->pkt, f->in, NULL);
	err = run_once(f, BENCH_REPEAT / 10, &ns);
	if (err)
		return err;
	f->repeat = BENCH_RUN_NS / (ns ? ns : 1);
	if (f->repeat < (f->min_repeat ? f->min_repeat : BENCH_REPEAT))
		f->repeat = f->min_repeat ? f->min_repeat : BENCH_REPEAT;
	if (f->repeat > 20 * BENCH_REPEAT)
		f->repeat = 20 * BENCH_REPEAT;
	return 0;
}

/* The median over the rounds of a[i] / b[i]. */
static double median_ratio(const double *a, const double *b)
{
	double r[BENCH_RUNS];
	int i;

	for (i = 0; i < BENCH_RUNS; i++)
		r[i] = b[i] > 0 ? a[i] / b[i] : 0;
	qsort(r, BENCH_RUNS, sizeof(double), cmp_double);
	return r[BENCH_RUNS / 2];
}

/*
 * BENCH_RUNS rounds, each measuring every figure once, then the median per
 * figure.  f[0] is the floor, f[n - 1] the irreducible reference.  A
 * ratio is the median of each round's figure / floor, not the
 * ratio of medians: on a shared machine the cost of memory work drifts by
 * up to 2x over seconds, and a round's figure and floor are measured within
 * a fraction of a second of each other.
 */
int measure_all(struct figure *f, int n)
{
	__u32 ns;
	int i, k, err;

	for (k = 0; k < n; k++) {
		err = prepare(&f[k]);
		if (err)
			return err;
	}
	for (i = 0; i < BENCH_RUNS; i++) {
		for (k = 0; k < n; k++) {
			err = run_once(&f[k], f[k].repeat, &ns);
			if (err)
				return err;
			f[k].runs[i] = ns;
		}
	}
	for (k = 0; k < n; k++)
		f[k].ref_ratio = median_ratio(f[k].runs, f[n - 1].runs);
	for (k = 0; k < n; k++) {
		for (i = 0; i < BENCH_RUNS; i++)
			f[k].ratios[i] = f[0].runs[i] > 0 ?
					 f[k].runs[i] / f[0].runs[i] : 0;
	}
	for (k = 0; k < n; k++) {
		qsort(f[k].runs, BENCH_RUNS, sizeof(double), cmp_double);
		qsort(f[k].ratios, BENCH_RUNS, sizeof(double), cmp_double);
		f[k].median = f[k].runs[BENCH_RUNS / 2];
		f[k].ratio = f[k].ratios[BENCH_RUNS / 2];
	}
	return 0;
}

/* A figure is only honest if the packets took the path it is named for. */
static int expect_path(const char *what, __u64 on_path, __u64 elsewhere,
		       __u64 min)
{
	if (on_path < min || elsewhere) {
		fprintf(stderr, "Error: %s took the wrong path (%llu on it, "
			"%llu elsewhere)\n", what,
			(unsigned long long)on_path,
			(unsigned long long)elsewhere);
		return -EINVAL;
	}
	return 0;
}

enum { F_FLOOR, F_NONSYN, F_ADMIT, F_DENY, F_DENY_LEASED, F_DENY_FLOOD,
       F_NOMATCH, F_NONSYN_CAPS, F_FIN,
       F_FIN_CAPS, F_RST, F_RETRANS, F_KTIME, F_CAS, F_REF, F_MAX };

/* The SYN figures, which are also read against the irreducible reference. */
static const int syn_figures[] = { F_ADMIT, F_DENY, F_DENY_LEASED,
				   F_DENY_FLOOD, F_NOMATCH, F_RETRANS };

/* Opens the gate of connection caps in one copy's maps (conn_ctl): as on a
 * host where some tenant has a cap. */
static int caps_on(struct bpf_object *obj)
{
	struct rl_conn_ctl c = { .capped = 1 };
	struct bpf_map *m = bpf_object__find_map_by_name(obj, "conn_ctl");
	__u32 zero = 0;

	if (!m || bpf_map_update_elem(bpf_map__fd(m), &zero, &c, 0)) {
		fprintf(stderr, "Error: couldn't write map 'conn_ctl'\n");
		return -1;
	}
	return 0;
}

/*
 * The connection xdp_rst_ns ends: a real one, RST_CLIENT:RST_SPORT to
 * RST_SERVER:443, in a network namespace of the benchmark's own (entered
 * for good: every figure is test_run on its lo), counted in the copy obj
 * with caps on.  *fds: the listener, the client's and the server's
 * sockets, for the caller to close.  rst's sequence number is 1, which is
 * the server's rcv_nxt only by a 2^-32 chance: checked.  0 or -1.
 */
static int rst_conn(struct bpf_object *obj, int fds[3], struct rl_flow *k)
{
	static const char *const addrs[] = { RST_CLIENT, RST_SERVER, NULL };
	struct bpf_map *m = bpf_object__find_map_by_name(obj, "conns");
	struct rl_conn c = { .tenant = T_ADMIT, .isn = htonl(1) };
	__u32 nxt;
	int ns;

	rst_rcv_nxt = 0;

	ns = lab_netns(addrs);
	if (ns < 0)
		return -1;
	close(ns);
	fds[0] = tcp_listen(RST_SERVER, 443);
	if (fds[0] < 0 ||
	    tcp_pair(RST_CLIENT, RST_SPORT, RST_SERVER, 443, fds[0], &fds[1],
		     &fds[2]) ||
	    tcp_rcv_nxt(fds[2], &nxt))
		return -1;
	rst_rcv_nxt = nxt;
	if (nxt == rst.seq) {
		fprintf(stderr, "Error: the server expects the benchmark's RST "
			"(rcv_nxt %u): run it again\n", nxt);
		return -1;
	}
	memset(k, 0, sizeof(*k));
	k->family = 4;
	inet_pton(AF_INET, RST_CLIENT, k->saddr);
	inet_pton(AF_INET, RST_SERVER, k->daddr);
	k->sport = pkt_sport(&rst);
	k->dport = pkt_dport(&rst);
	if (!m || bpf_map_update_elem(bpf_map__fd(m), k, &c, BPF_NOEXIST)) {
		fprintf(stderr, "Error: couldn't write map 'conns'\n");
		return -1;
	}
	return 0;
}

/* Sends rst once more at the server's rcv_nxt, which ends its connection.
 * 0 or -1. */
static int rst_honest(int prog_fd)
{
	struct pkt p = rst;
	__u8 in[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len;

	p.seq = rst_rcv_nxt;
	len = pkt_build(&p, in, NULL);
	if (len < 0 || xdp_run(prog_fd, in, len, out, sizeof(out), 1, &r)) {
		fprintf(stderr, "Error: couldn't run the honest RST\n");
		return -1;
	}
	return 0;
}

int bench_main(int argc, char **argv)
{
	struct rlgate_bpf *rl = NULL;
	struct bench_bpf *bb = NULL;
	struct pass_bpf *pass = NULL;
	struct world wr = { 0 }, wb = { 0 };
	static struct figure f[F_MAX];
	int rst_fds[3] = { -1, -1, -1 };
	struct rl_flow rst_key;
	struct rl_conn rst_entry;
	struct rl_stats s;
	const __u64 total = (__u64)BENCH_REPEAT * BENCH_RUNS;
	int cpu, k, err = -1;

	if (argc > 1) {
		fprintf(stderr, "Error: unexpected argument '%s'; usage: "
			"test_xdp --bench\n", argv[1]);
		return 2;
	}
	harness_quiet_libbpf();

	/* One CPU for every figure, the last one: CPU 0 takes most IRQs. */
	cpu = sysconf(_SC_NPROCESSORS_ONLN) - 1;
	if (cpu < 0 || pin_to_cpu(cpu)) {
		fprintf(stderr, "Error: couldn't pin to CPU %d: %s\n", cpu,
			strerror(errno));
		return 1;
	}

	pass = pass_bpf__open_and_load();
	/* rlgate's own copy measures the retransmission path: every repeat
	 * must be a free one, however many and however fast */
	rl = rlgate_bpf__open();
	if (rl) {
		rl->rodata->retrans_gap_ns = 0;
		rl->rodata->retrans_max_repeats = ~0u;
		if (rlgate_bpf__load(rl)) {
			rlgate_bpf__destroy(rl);
			rl = NULL;
		}
	}
	bb = bench_bpf__open_and_load();
	if (!pass || !rl || !bb) {
		fprintf(stderr, "Error: couldn't load the programs: %s\n",
			strerror(errno));
		goto cleanup;
	}
	/* the benchmark's copy runs with caps on, rlgate's without */
	if (world_init(&wr, rl->obj) || world_init(&wb, bb->obj) ||
	    load_rules(&wr) || load_rules(&wb) || caps_on(bb->obj) ||
	    rst_conn(bb->obj, rst_fds, &rst_key))
		goto cleanup;

	f[F_FLOOR] = (struct figure){ .name = "xdp_pass_floor_ns",
		.prog_fd = bpf_program__fd(pass->progs.xdp_pass), .pkt = &ack };
	f[F_NONSYN] = (struct figure){ .name = "xdp_nonsyn_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &ack };
	f[F_ADMIT] = (struct figure){ .name = "xdp_syn_admit_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_admit), .pkt = &syn_admit };
	f[F_DENY] = (struct figure){ .name = "xdp_syn_deny_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &syn_deny };
	f[F_DENY_LEASED] = (struct figure){ .name = "xdp_syn_deny_leased_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate),
		.pkt = &syn_deny_leased };
	/* the same, a new flow each time (the benchmark's copy bumps the
	 * source port and the ISN): a flood's SYNs, each looking up a slot
	 * of the flow cache of its own, that none of them was admitted to */
	f[F_DENY_FLOOD] = (struct figure){ .name = "xdp_syn_deny_flood_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_bench_flood),
		.pkt = &syn_deny_leased };
	f[F_NOMATCH] = (struct figure){ .name = "xdp_syn_nomatch_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &syn_nomatch };
	f[F_NONSYN_CAPS] = (struct figure){ .name = "xdp_nonsyn_caps_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_rlgate), .pkt = &ack };
	f[F_FIN] = (struct figure){ .name = "xdp_fin_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &fin };
	f[F_FIN_CAPS] = (struct figure){ .name = "xdp_fin_caps_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_rlgate), .pkt = &fin };
	f[F_RST] = (struct figure){ .name = "xdp_rst_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_rlgate), .pkt = &rst };
	/* the benchmark's admit tenant lives in bench_bpf's maps, so this
	 * one (rlgate's) admits once and then sees only retransmissions */
	f[F_RETRANS] = (struct figure){ .name = "xdp_syn_retrans_ns",
		.prog_fd = bpf_program__fd(rl->progs.xdp_rlgate), .pkt = &syn_admit };
	f[F_KTIME] = (struct figure){ .name = "xdp_ref_ktime_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_ref_ktime), .pkt = &ack };
	f[F_CAS] = (struct figure){ .name = "xdp_ref_cas_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_ref_cas), .pkt = &ack };
	/* in the benchmark's copy, whose admit tenant never refuses */
	f[F_REF] = (struct figure){ .name = "xdp_ref_irreducible_ns",
		.prog_fd = bpf_program__fd(bb->progs.xdp_ref_irreducible),
		.pkt = &syn_admit };
	if (measure_all(f, F_MAX))
		goto cleanup;

	if (f[F_REF].retval != XDP_PASS) {
		fprintf(stderr, "Error: xdp_ref_irreducible found no tenant "
			"(verdict %u)\n", f[F_REF].retval);
		goto cleanup;
	}
	tenant_stats_sum(&wb, T_ADMIT, &s);
	if (expect_path("xdp_syn_admit", s.admitted,
			s.retransmits + s.denied, total))
		goto cleanup;
	tenant_stats_sum(&wr, T_DENY, &s);
	if (expect_path("xdp_syn_deny", s.denied, s.admitted, total))
		goto cleanup;
	tenant_stats_sum(&wr, T_DENY_LEASED, &s);
	if (expect_path("xdp_syn_deny_leased", s.denied, s.admitted, total) ||
	    expect_path("xdp_syn_deny_leased's bucket",
			wr.tenants[T_DENY_LEASED].tokens == -5, 0, 1))
		goto cleanup;
	tenant_stats_sum(&wb, T_DENY_LEASED, &s);
	if (expect_path("xdp_syn_deny_flood", s.denied, s.admitted, total) ||
	    expect_path("xdp_syn_deny_flood's bucket",
			wb.tenants[T_DENY_LEASED].tokens == -5, 0, 1))
		goto cleanup;
	tenant_stats_sum(&wr, T_ADMIT, &s);
	if (expect_path("xdp_syn_retrans", s.retransmits, s.denied, total))
		goto cleanup;
	/* the forged RST ended nothing, and the server's socket was there
	 * to be read: the same RST at its rcv_nxt ends the connection */
	if (expect_path("xdp_rst", !bpf_map_lookup_elem(bpf_map__fd(
				bb->maps.conns), &rst_key, &rst_entry), 0, 1) ||
	    rst_honest(bpf_program__fd(bb->progs.xdp_rlgate)) ||
	    expect_path("xdp_rst at rcv_nxt", bpf_map_lookup_elem(bpf_map__fd(
				bb->maps.conns), &rst_key, &rst_entry) != 0,
			0, 1))
		goto cleanup;

	for (k = 0; k < F_MAX; k++)
		printf("%s %.1f ns\n", f[k].name, f[k].median);
	for (k = F_NONSYN; k <= F_RST; k++)
		printf("%s_ratio %.2f x\n", f[k].name, f[k].ratio);
	/* what one clock read and one compare-and-swap add to the floor */
	for (k = F_KTIME; k <= F_CAS; k++)
		printf("%s_over_floor %.1f ns\n", f[k].name,
		       f[k].median - f[F_FLOOR].median);
	printf("%s_ratio %.2f x\n", f[F_REF].name, f[F_REF].ratio);
	for (k = 0; k < (int)(sizeof(syn_figures) / sizeof(syn_figures[0])); k++)
		printf("%s_ref_ratio %.2f x\n", f[syn_figures[k]].name,
		       f[syn_figures[k]].ref_ratio);
	err = verify_bench(bpf_program__fd(pass->progs.xdp_pass));
	if (!err)
		err = per_source_bench(bpf_program__fd(pass->progs.xdp_pass));
	if (!err)
		err = million_bench(bpf_program__fd(pass->progs.xdp_pass),
				    bpf_program__fd(bb->progs.xdp_bench_admit),
				    &syn_admit);

cleanup:
	for (k = 0; k < 3; k++)
		close_rst(rst_fds[k]);
	world_fini(&wb);
	world_fini(&wr);
	bench_bpf__destroy(bb);
	rlgate_bpf__destroy(rl);
	pass_bpf__destroy(pass);
	return err ? 1 : 0;
}

/* make bench is not part of make test, so a program of the benchmark's
 * that the verifier refuses (its entry points add to xdp_decide()'s stack,
 * which the verifier's 512 bytes barely fit) would go unseen until someone
 * measures: the suite loads them. */
static void test_bench_programs_load(void)
{
	struct bench_bpf *bb = bench_bpf__open_and_load();

	CHECK(bb, "make bench's programs (bench.bpf.c) load: %s", strerror(errno));
	bench_bpf__destroy(bb);
}

void bench_load_tests(void)
{
	CHECK_RUN(test_bench_programs_load);
}
