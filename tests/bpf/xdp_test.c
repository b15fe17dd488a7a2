// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The helpers every feature test of test_xdp uses (see xdp_test.h): they
 * fail the running test themselves when a load or a run fails, so that a
 * scenario reads as what it sends and what it expects.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_ether.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "xdp_test.h"

int test_cpu;

void inst_close(struct inst *in)
{
	world_fini(&in->w);
	rlgate_bpf__destroy(in->skel);
	in->skel = NULL;
}

int inst_open_gap(struct inst *in, __u64 retrans_window_ns,
		  __u64 retrans_gap_ns)
{
	int err;

	memset(in, 0, sizeof(*in));
	in->skel = rlgate_bpf__open();
	if (!in->skel) {
		err = -errno;
		diag("couldn't open the rlgate skeleton: %s", strerror(-err));
		return err;
	}
	in->skel->rodata->retrans_window_ns = retrans_window_ns;
	in->skel->rodata->retrans_gap_ns = retrans_gap_ns;
	err = rlgate_bpf__load(in->skel);
	if (err) {
		diag("couldn't load the rlgate skeleton: %s", strerror(-err));
		rlgate_bpf__destroy(in->skel);
		in->skel = NULL;
		return err;
	}
	err = world_init(&in->w, in->skel->obj);
	if (err) {
		diag("couldn't find rlgate's maps: %s", strerror(-err));
		inst_close(in);
		return err;
	}
	in->prog_fd = bpf_program__fd(in->skel->progs.xdp_rlgate);
	return 0;
}

int inst_open(struct inst *in, __u64 retrans_window_ns)
{
	return inst_open_gap(in, retrans_window_ns, 0);
}

int small_world(struct inst *in, __u64 retrans_window_ns)
{
	if (inst_open(in, retrans_window_ns))
		return -1;
	if (rule_add(&in->w, "10.1.0.0/16", 0, 1)) {
		diag("couldn't add a rule");
		inst_close(in);
		return -1;
	}
	return 0;
}

int send_tcp(struct inst *in, __u8 flags, __u16 sport, __u32 seq,
	     __u32 *verdict)
{
	struct pkt p = { V4, .flags = flags, .src = "10.1.0.10",
			 .sport = sport, .seq = seq };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), err;

	err = xdp_run(in->prog_fd, buf, len, out, sizeof(out), 1, &r);
	CHECK(!err, "bpf_prog_test_run_opts: %s", strerror(-err));
	if (err)
		return err;
	*verdict = r.retval;
	return 0;
}

int send_syn(struct inst *in, __u16 sport, __u32 seq, __u32 *verdict)
{
	return send_tcp(in, TH_SYN, sport, seq, verdict);
}

int count_admits(struct inst *in, int n, __u16 sport0)
{
	int i, admits = 0;
	bool refused = false;
	__u32 v;

	for (i = 0; i < n; i++) {
		if (send_syn(in, sport0 + i, 1000 + i, &v))
			return -1;
		if (v != XDP_PASS) {
			refused = true;
			continue;
		}
		admits++;
		CHECK(!refused, "SYN %d admitted after a refusal", i);
	}
	return admits;
}

void expect_admits(const char *file, int line, struct inst *in, int n,
		   __u16 sport0, int want, const char *stats, const char *what)
{
	int got = count_admits(in, n, sport0);

	if (got != want)
		check_fail(file, line, "%s admitted %d, want %d", what, got,
			   want);
	if (stats)
		expect_stats(file, line, &in->w, 1, stats);
}

void expect_refill(struct inst *in, __u64 *tatp, __u64 burst,
		   __u64 earned_ns, int n, int want, __u16 sport0,
		   const char *what)
{
	*tatp = now_coarse_ns() + burst * SEC_NS - earned_ns;
	EXPECT_ADMITS(in, n, sport0, want, NULL, what);
}

void expect_refill_realtime(struct inst *in, __u64 *tatp, const char *what)
{
	__u32 v1 = 0, v2 = 0, v3 = 0;

	*tatp = now_ns() + REALTIME_INTERVAL_NS;	/* empty now */
	send_syn(in, 1000, 1, &v1);
	usleep(160 * 1000);
	if (!send_syn(in, 1001, 2, &v2))
		send_syn(in, 1002, 3, &v3);
	CHECK(v1 == XDP_DROP, "SYN on an empty %s: verdict %u, want drop", what,
	      v1);
	CHECK(v2 == XDP_PASS, "SYN 160 ms later (interval 100 ms): verdict "
	      "%u, want pass", v2);
	CHECK(v3 == XDP_DROP, "SYN right after: verdict %u, want drop", v3);
}

void syn_flow(__u16 sport, __u32 seq, struct rl_flow *f)
{
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = sport,
			 .seq = seq };
	__u8 buf[PKT_MAX];
	const __u8 *ip = buf + ETH_HLEN, *tcp = ip + 20;

	pkt_build(&p, buf, NULL);
	memset(f, 0, sizeof(*f));
	memcpy(f->saddr, ip + 12, 4);
	memcpy(f->daddr, ip + 16, 4);
	memcpy(&f->sport, tcp, 2);
	memcpy(&f->dport, tcp + 2, 2);
	memcpy(&f->isn, tcp + 4, 4);
	f->family = 4;
}

/* rl_stats's fields in order: every one is a __u64 counter. */
static const char *const stat_names[] = {
	"admitted", "denied", "shadow_denied", "retransmits", "rst_sent",
	"lowwater_events", "degraded", "unparsed",
};
_Static_assert(ARRAY_SIZE(stat_names) * sizeof(__u64) ==
	       sizeof(struct rl_stats), "stat_names: one name a field");

void expect_stats(const char *file, int line, struct world *w, __u32 tenant,
		  const char *want)
{
	char name[32], got[256];
	unsigned long long v;
	struct rl_stats s;
	const __u64 *f = (const __u64 *)&s;
	const char *p = want;
	size_t i, len = 0;
	bool same = true;
	int n;

	tenant_stats_sum(w, tenant, &s);
	got[0] = '\0';
	while (sscanf(p, " %31[a-z_]=%llu%n", name, &v, &n) == 2) {
		p += n;
		for (i = 0; i < ARRAY_SIZE(stat_names); i++)
			if (!strcmp(name, stat_names[i]))
				break;
		if (i == ARRAY_SIZE(stat_names)) {
			check_fail(file, line, "no stat '%s'", name);
			return;
		}
		same = same && f[i] == v;
		len += snprintf(got + len, sizeof(got) - len, "%s%s=%llu",
				len ? " " : "", name,
				(unsigned long long)f[i]);
		if (len >= sizeof(got))
			len = sizeof(got) - 1;
	}
	if (*p && sscanf(p, " %1s", name) == 1)
		check_fail(file, line, "can't read stats '%s'", want);
	else if (!same)
		check_fail(file, line, "tenant %u: %s, want %s", tenant, got,
			   want);
}

void diag_hex(const char *label, const __u8 *b, int len, const __u8 *other,
	      int other_len)
{
	char buf[4096];

	pkt_hex(buf, sizeof(buf), label, b, len, other, other_len);
	diag("%s", buf);
}

void run_scenarios(const struct scenario *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		check_run_arg(s[i].name, s[i].fn, s[i].arg);
}
