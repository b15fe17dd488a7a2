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

#endif /* RL_TEST_BENCH_H */
