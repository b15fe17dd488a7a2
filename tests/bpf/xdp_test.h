/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the feature tests of test_xdp share: a freshly loaded rlgate with
 * empty maps, the small world most scenarios start from (10.1.0.0/16 ->
 * tenant 1), SYNs sent and their verdicts counted, stats compared by name,
 * and the list of feature suites the runner calls in order.
 */
#ifndef RL_TEST_XDP_TEST_H
#define RL_TEST_XDP_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>

#include "rlgate.skel.h"
#include "harness.h"
#include "pkt.h"
#include "../unit/check.h"

#define SEC_NS		1000000000ull
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

/* Shorthands of packet descriptions. */
#define V4	.family = 4
#define V6	.family = 6
#define SYN	.flags = TH_SYN

/* The CPU every test runs pinned to: the flow cache is per CPU, as a NIC
 * queue's flows are, so a retransmission must run where its SYN did. */
extern int test_cpu;

/* A CPU other than test_cpu for a packet sent from elsewhere, or -1 with
 * the test skipped on a machine of one CPU. */
int other_cpu(void);

/* One copy of rlgate with empty maps (rlgate_get()). */
struct inst {
	struct rlgate_bpf *skel;
	struct world w;
	int prog_fd;
};

/* A loaded rlgate with this retransmission window and gap and every map
 * empty: a fresh load, or one kept from an instance given back and reset
 * (loading costs the verifier about a second a test).  NULL on failure,
 * said with diag(). */
struct rlgate_bpf *rlgate_get(__u64 retrans_window_ns, __u64 retrans_gap_ns);
/* Gives back what rlgate_get() returned (or destroys another skeleton). */
void rlgate_put(struct rlgate_bpf *skel);

/* Loads rlgate with a retransmission window and the least gap before a
 * free repeat (see RL_FLOW_MAX_REPEATS).  0 or -errno, said with diag(). */
int inst_open_gap(struct inst *in, __u64 retrans_window_ns,
		  __u64 retrans_gap_ns);
/* Most scenarios send a SYN's copies back to back: no gap required. */
int inst_open(struct inst *in, __u64 retrans_window_ns);
void inst_close(struct inst *in);

/* inst_open() plus one rule, 10.1.0.0/16 any port -> tenant 1, whose slot
 * the scenario configures.  0 or -1, said with diag(). */
int small_world(struct inst *in, __u64 retrans_window_ns);

/* A TCP segment with these flags from 10.1.0.10:sport; its verdict in
 * *verdict.  A failed run fails the test.  0 or -errno. */
int send_tcp(struct inst *in, __u8 flags, __u16 sport, __u32 seq,
	     __u32 *verdict);
int send_syn(struct inst *in, __u16 sport, __u32 seq, __u32 *verdict);
/* The same from src (an IPv4 address in 10.1.0.0/16, small_world()'s). */
int send_tcp_from(struct inst *in, const char *src, __u8 flags, __u16 sport,
		  __u32 seq, __u32 *verdict);
int send_syn_from(struct inst *in, const char *src, __u16 sport, __u32 seq,
		  __u32 *verdict);

/* Sends n SYNs from ports sport0, sport0 + 1, ... (distinct flows, so none
 * is a retransmission); returns how many passed, -1 when one could not be
 * run.  A pass after a refusal fails the test (a bucket does not refill
 * within microseconds). */
int count_admits(struct inst *in, int n, __u16 sport0);

/* Sends n SYNs as count_admits() does and checks that `want` of them pass,
 * then (unless stats is NULL) tenant 1's stats as EXPECT_STATS does. */
#define EXPECT_ADMITS(in, n, sport0, want, stats, what) \
	expect_admits(__FILE__, __LINE__, (in), (n), (sport0), (want), \
		      (stats), (what))
void expect_admits(const char *file, int line, struct inst *in, int n,
		   __u16 sport0, int want, const char *stats, const char *what);

/* A bucket of `burst` tokens, one a second, on *tatp (a tenant's tat, or
 * its static share's fail_tat) as if it were empty earned_ns ago: sends n
 * SYNs from ports sport0 on and checks that `want` of them pass.  Set on
 * the coarse clock, the buckets': now_ns() may be a tick ahead of it and the
 * bucket would look a fraction of a token short. */
void expect_refill(struct inst *in, __u64 *tatp, __u64 burst,
		   __u64 earned_ns, int n, int want, __u16 sport0,
		   const char *what);

/* Real elapsed time, with margins of tens of milliseconds: a GCRA bucket
 * (*tatp) of one token per REALTIME_INTERVAL_NS and burst 1, empty now,
 * refuses, admits one SYN 160 ms later, and refuses the next. */
#define REALTIME_INTERVAL_NS	(100 * 1000000ull)
void expect_refill_realtime(struct inst *in, __u64 *tatp, const char *what);

/* The flow key the program builds for send_syn(sport, seq), read back from
 * the frame itself, so that the test and the program agree on addresses and
 * byte order by construction. */
void syn_flow(__u16 sport, __u32 seq, struct rl_flow *f);
void syn_flow_from(const char *src, __u16 sport, __u32 seq, struct rl_flow *f);

/* Checks a tenant's summed stats against `want`, fields by name:
 * "admitted=3 denied=1" (rl_stats's field names; others unchecked).  One
 * check. */
#define EXPECT_STATS(w, tenant, want) \
	expect_stats(__FILE__, __LINE__, (w), (tenant), (want))
void expect_stats(const char *file, int line, struct world *w, __u32 tenant,
		  const char *want);
/* A frame as hex in the diagnostics, '*' where it differs from `other`. */
void diag_hex(const char *label, const __u8 *b, int len, const __u8 *other,
	      int other_len);

/* A named test of a suite; fn returns 0, or non-zero when it could not
 * run (and says why with diag()). */
struct scenario {
	const char *name;
	int (*fn)(const void *arg);
	const void *arg;
};
void run_scenarios(const struct scenario *s, size_t n);

/* The feature suites, in the order test_xdp runs them.  A new feature is a
 * file of its own, tests/bpf/xdp_<feature>.c, whose <feature>_tests()
 * runs its rows and scenarios (run_cases(), run_scenarios()); it is named
 * here and in test_xdp.c's list. */
void verdict_tests(void);	/* xdp_verdicts.c */
void fragment_tests(void);	/* xdp_fragments.c */
void rule_tests(void);		/* xdp_rules.c */
void truncation_tests(void);	/* xdp_truncation.c */
void bucket_tests(void);	/* xdp_buckets.c */
void leased_tests(void);	/* xdp_leased.c */
void flow_cache_tests(void);	/* xdp_flow_cache.c */
void fail_policy_tests(void);	/* xdp_fail_policy.c */
void conn_tests(void);		/* xdp_conns.c */
void verify_tests(void);	/* xdp_verify.c */
void answer_tests(void);	/* xdp_answer.c */
void per_source_tests(void);	/* xdp_per_source.c */
void million_tests(void);	/* xdp_million.c */
void fuzz_tests(void);		/* xdp_fuzz.c */
void synflood_tests(void);	/* xdp_synflood.c */
void bench_load_tests(void);	/* bench.c */

#endif /* RL_TEST_XDP_TEST_H */
