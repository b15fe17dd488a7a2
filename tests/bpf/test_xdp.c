// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Verdict tests for xdp_rlgate, run through bpf_prog_test_run_opts: by
 * feature in the xdp_*.c files, as tables of crafted frames and multi-packet
 * scenarios, each test a TAP line of its own (check.c).  `-t PART` runs
 * only the tests whose name contains PART; `--bench` runs the per-packet
 * benchmark instead (bench.c), `--fuzz` the packet fuzzer alone (pktfuzz.c).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "xdp_test.h"
#include "pktfuzz.h"

/* Table rows first (each against a fresh world), then the scenarios. */
static void (*const suites[])(void) = {
	verdict_tests,
	fragment_tests,
	rule_tests,
	truncation_tests,
	bucket_tests,
	leased_tests,
	flow_cache_tests,
	fail_policy_tests,
	conn_tests,
	verify_tests,
	answer_tests,
	per_source_tests,
	million_tests,
	fuzz_tests,
	synflood_tests,
	bench_load_tests,
};

int main(int argc, char **argv)
{
	size_t i;

	if (argc > 1 && !strcmp(argv[1], "--bench"))
		return bench_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "--fuzz"))
		return pktfuzz_main(argc - 1, argv + 1);
	if (argc == 3 && !strcmp(argv[1], "-t"))
		check_filter(argv[2]);
	else if (argc > 1) {
		fprintf(stderr, "usage: %s [-t PART | --bench | --fuzz ...]\n",
			argv[0]);
		return 2;
	}
	harness_quiet_libbpf();
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_cpu = sched_getcpu();
	if (test_cpu < 0 || pin_to_cpu(test_cpu)) {
		fprintf(stderr, "Error: couldn't pin to a CPU: %s\n",
			strerror(errno));
		return 1;
	}
	for (i = 0; i < ARRAY_SIZE(suites); i++)
		suites[i]();
	return check_exit();
}
