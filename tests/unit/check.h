/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What every C test shares (tests/unit and tests/bpf): CHECK() records a
 * failed expectation with its place and a message, and the test goes on;
 * check_run() runs one test function and reports it as a TAP line. */
#ifndef RL_TEST_CHECK_H
#define RL_TEST_CHECK_H

#include <stdio.h>

/* Failed checks so far in this process. */
extern int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond))							\
		check_fail(__FILE__, __LINE__, __VA_ARGS__);		\
} while (0)

/* Counts a failed check and says where and why: in the running test's
 * diagnostics, or on stderr outside of one. */
void check_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A diagnostic line of the running test, printed as "# ..." after its TAP
 * line whether it passes or not (on stderr outside of a test). */
void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The running test cannot run here (no second CPU, no redis-server...): it
 * is reported as skipped with this reason, unless a check failed. */
void check_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * Runs fn as the next test: prints "ok N - name", "not ok N - name" or
 * "ok N - name # SKIP why", then its diagnostics.  A test fails when a
 * CHECK in it failed or, for check_run_arg(), fn returned non-zero (it
 * could not run: it says why with diag()).  Returns 0 when it passed or
 * was skipped, else -1.
 */
int check_run(const char *name, void (*fn)(void));
int check_run_arg(const char *name, int (*fn)(const void *arg),
		  const void *arg);
/* A test named after its function, as the kernel's test_progs names them. */
#define CHECK_RUN(fn)	check_run(#fn, fn)

/* Runs only the tests whose name contains `part` (NULL: all). */
void check_filter(const char *part);

/* The plan line ("1..N") and main's exit status: 0 when every test passed
 * (or was skipped) and no check failed outside of a test, else 1. */
int check_exit(void);

#endif /* RL_TEST_CHECK_H */
