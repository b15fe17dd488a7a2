/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the per-packet benchmark's parts share (bench.c, bench_verify.c,
 * bench_per_source.c):
 * one figure, measured against the floor in the same rounds.
 */
#ifndef RL_TEST_BENCH_H
#define RL_TEST_BENCH_H

#include <linux/types.h>

#include "pkt.h"

#define BENCH_REPEAT	1000000
#define BENCH_RUNS	9

struct figure {
	const char *name;
	int prog_fd;
	const struct pkt *pkt;
	__u8 in[PKT_MAX];
	int len;
	__u64 repeat;
	/* Repetitions a run takes at least (0: BENCH_REPEAT); a run lasts
	 * about 100 ms otherwise.  Figures of hundreds of ns need fewer to
	 * stay well above the kernel's 1 ns step. */
	__u64 min_repeat;
	double runs[BENCH_RUNS];
	double ratios[BENCH_RUNS];	/* this round's figure / floor */
	double median;
	double ratio;			/* the median of ratios */
	double ref_ratio;		/* the same against F_REF */
	__u32 retval;			/* the last run's verdict */
};

/*
 * Measures f[0..n) in BENCH_RUNS rounds; f[0] is the floor, f[n - 1] the
 * reference of ref_ratio.  Fills runs, median, ratio (to the floor) and
 * ref_ratio.  0 or -errno (said on stderr).
 */
int measure_all(struct figure *f, int n);

/* The figures of verification (bench_verify.c), printed as bench_main
 * prints its own; floor_fd: the pass-all program.  0 or -1 (said). */
int verify_bench(int floor_fd);

/* The figure of per-source limits (bench_per_source.c): an admitted SYN
 * whose source holds a bucket, its ratio to the floor and to the plain
 * admit path measured in the same rounds. */
int per_source_bench(int floor_fd);

/* The figures with a million prefixes over 100,000 tenants loaded
 * (bench_million.c): admitted SYNs from sources spread over the whole
 * policy and from one, and the classification alone, each against the
 * floor and against the plain admit path (admit_fd sending admit_pkt)
 * measured in the same rounds.  0 or -1 (said). */
int million_bench(int floor_fd, int admit_fd, const struct pkt *admit_pkt);

#endif /* RL_TEST_BENCH_H */
