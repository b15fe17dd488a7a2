// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The one check and test runner of the C tests: every test function is a
 * TAP line of its own, its diagnostics follow it as "# " lines, and
 * tools/run-tests.sh counts the lines.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

int failures;

static int n_tests, n_failed;
/* While a test runs: its diagnostics, and whether it asked to be skipped.
 * A child it forked writes to stderr instead (its copy of the buffer would
 * be lost). */
static FILE *diag_fp;
static char *diag_buf;
static size_t diag_len;
static pid_t runner;
static char skip_reason[160];
static bool skipped;
static const char *filter;

void check_filter(const char *part)
{
	filter = part;
}

static void vdiag(const char *prefix, const char *fmt, va_list ap)
{
	FILE *fp = diag_fp && getpid() == runner ? diag_fp : stderr;

	fputs(prefix, fp);
	vfprintf(fp, fmt, ap);
	fputc('\n', fp);
}

void diag(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdiag("", fmt, ap);
	va_end(ap);
}

void check_fail(const char *file, int line, const char *fmt, ...)
{
	char where[256];
	va_list ap;

	failures++;
	snprintf(where, sizeof(where), "FAIL %s:%d: ", file, line);
	va_start(ap, fmt);
	vdiag(where, fmt, ap);
	va_end(ap);
}

void check_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(skip_reason, sizeof(skip_reason), fmt, ap);
	va_end(ap);
	skipped = true;
}

static void begin(void)
{
	fflush(stdout);
	fflush(stderr);
	runner = getpid();
	skipped = false;
	skip_reason[0] = '\0';
	diag_fp = open_memstream(&diag_buf, &diag_len);
}

/* Prints the TAP line of the test that ran, then its diagnostics. */
static int end(const char *name, int failed_before, bool failed)
{
	char *line, *save = NULL;

	if (diag_fp)
		fclose(diag_fp);
	diag_fp = NULL;
	failed = failed || failures != failed_before;
	n_tests++;
	n_failed += failed;
	if (skipped && !failed)
		printf("ok %d - %s # SKIP %s\n", n_tests, name, skip_reason);
	else
		printf("%sok %d - %s\n", failed ? "not " : "", n_tests, name);
	for (line = diag_buf ? strtok_r(diag_buf, "\n", &save) : NULL; line;
	     line = strtok_r(NULL, "\n", &save))
		printf("# %s\n", line);
	free(diag_buf);
	diag_buf = NULL;
	diag_len = 0;
	fflush(stdout);
	return failed ? -1 : 0;
}

int check_run(const char *name, void (*fn)(void))
{
	int before = failures;

	if (filter && !strstr(name, filter))
		return 0;
	begin();
	fn();
	return end(name, before, false);
}

int check_run_arg(const char *name, int (*fn)(const void *arg),
		  const void *arg)
{
	int before = failures, rc;

	if (filter && !strstr(name, filter))
		return 0;
	begin();
	rc = fn(arg);
	return end(name, before, rc != 0);
}

int check_exit(void)
{
	printf("1..%d\n", n_tests);
	if (n_failed)
		printf("# %d of %d failed\n", n_failed, n_tests);
	else if (failures)
		printf("# %d check(s) failed outside of a test\n", failures);
	fflush(stdout);
	return n_failed || failures ? 1 : 0;
}
