/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The packet-path fuzzer: random and mutated frames through xdp_rlgate and
 * tc_rlgate (bpf_prog_test_run_opts), each checked against the reference of
 * pktref.c.  Shared by `test_xdp --fuzz`, its table row, and the libFuzzer
 * target tests/fuzz/fuzz_xdp.c.
 */
#ifndef RL_TEST_PKTFUZZ_H
#define RL_TEST_PKTFUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <linux/types.h>

#include "rlgate.h"
#include "harness.h"

/* Longest frame generated or run; XDP test runs take up to a page. */
#define PKTFUZZ_MAX	1500

/* A SYN the flow model saw admitted (a token spent), as the reference
 * read it: what a later copy may repeat for free. */
struct pktfuzz_flow {
	int family;
	__u8 src[16], dst[16];
	__u16 sport, dport;
	__u32 isn;
	__u32 repeats;		/* free copies taken since */
	bool ended;		/* the client's RST or FIN came since */
};

#define PKTFUZZ_FLOWS	256

/* One loaded rlgate with the fuzz world's tenants and rules, its buckets
 * reset before every frame, and the sums it last read. */
struct pktfuzz {
	struct rlgate_bpf *skel;
	struct world w;
	int prog_fd, tc_fd;	/* xdp_rlgate, tc_rlgate */
	struct rl_tenant init[RL_MAX_TENANTS];	/* slots as configured */
	struct rl_stats stats[RL_MAX_TENANTS];	/* last per-CPU sums */
	__u64 cnt[RL_CNT_MAX];
	unsigned long frames, by_kind[8], by_verdict[5], repeats,
		      repeats_charged;
	char msg[16384];	/* the rule a frame broke, and why */
	/* Free repeats on (pktfuzz_open_flows()): the flow cache carries
	 * from frame to frame, and the model says which copies may pass
	 * free. */
	bool flows;
	__u32 max_repeats;
	struct pktfuzz_flow model[PKTFUZZ_FLOWS];
	int n_model;
};

/* Loads the program (no free retransmissions: every SYN is charged) and
 * sets up the world.  0 or -errno, with a reason in f->msg. */
int pktfuzz_open(struct pktfuzz *f);
/* The same with free repeats of admitted SYNs on (retrans_window_ns an
 * hour, retrans_gap_ns 0): a copy of an admitted SYN may pass free at most
 * retrans_max_repeats times, never after the client's RST or FIN.  The
 * flow cache is per CPU: the caller runs every frame on one CPU. */
int pktfuzz_open_flows(struct pktfuzz *f);
void pktfuzz_close(struct pktfuzz *f);

/*
 * Runs one frame through each program from fresh buckets and checks every
 * rule.  0 when they
 * hold (or the frame is too short or long to run), 1 when one is broken
 * (f->msg says which, with the frame), -errno when the run itself failed.
 */
int pktfuzz_check(struct pktfuzz *f, const __u8 *frame, size_t len);

/* A deterministic generator: splitmix64. */
struct pktfuzz_rng {
	__u64 s;
};
__u64 pktfuzz_rand(struct pktfuzz_rng *r);

/* A frame of one of the shapes that reach the edge cases: VLAN tags,
 * IPv4 options and fragments of every kind, IPv6 extension chains short,
 * at and past the walk limit, TCP options, cuts.  Returns its length. */
size_t pktfuzz_generate(struct pktfuzz_rng *r, __u8 *buf);
/* One to three blind mutations of buf (bit flips, interesting values,
 * cuts, inserted, deleted and repeated chunks).  Returns the new length,
 * at most cap. */
size_t pktfuzz_mutate(struct pktfuzz_rng *r, __u8 *buf, size_t len,
		      size_t cap);
/* Recomputes the IPv4 header checksum, if the frame has one to fix, so that
 * mutated frames are not all dropped by Linux for a bad checksum. */
void pktfuzz_fix_csum(__u8 *buf, size_t len);
/* Frame i of a seeded run: a generated shape, mutated half of the time. */
size_t pktfuzz_frame(__u64 seed, __u64 i, __u8 *buf);

/* Runs every file of dir (one frame each); returns how many broke a rule,
 * the first `reports` of them reported in full in log, the others named;
 * the number of files in *files. */
int pktfuzz_corpus(struct pktfuzz *f, const char *dir, int reports,
		   FILE *log, int *files);
/* Runs frames 0, 1, ... of seed until `frames` or `seconds`; reports the
 * first `reports` broken ones in log, saves every one in save_dir (unless
 * NULL).  Returns the frames run, *bad those that broke a rule. */
long pktfuzz_seeded(struct pktfuzz *f, __u64 seed, long frames,
		    double seconds, const char *save_dir, int reports,
		    FILE *log, long *bad);
/* Runs `frames` (or `seconds`) frames of a few flows of seed through a
 * world of pktfuzz_open_flows(): copies of their SYNs in many shapes, RSTs,
 * FINs and ACKs, each checked against the rules and the flow model.
 * Returns the frames run, *bad those that broke a rule. */
long pktfuzz_flows(struct pktfuzz *f, __u64 seed, long frames,
		   double seconds, int reports, FILE *log, long *bad);
/* One line: frames by the reference's kind and by verdict. */
void pktfuzz_summary(const struct pktfuzz *f, FILE *log);

/* `test_xdp --fuzz`: seeded frames and files.  Exit code. */
int pktfuzz_main(int argc, char **argv);

#endif /* RL_TEST_PKTFUZZ_H */
