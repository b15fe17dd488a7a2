// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The packet fuzzer (pktfuzz.c) as one row, bounded: the regression
 * corpus, then seeded random and mutated frames, each checked against the
 * independent reference, then copies of a few SYNs with free repeats on,
 * against the flow model.  RLGATE_FUZZ_SEED, RLGATE_PKTFUZZ_FRAMES,
 * RLGATE_PKTFUZZ_SECONDS and RLGATE_PKTFUZZ_FLOWS change the run;
 * `test_xdp --fuzz [--flows]` runs it alone.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "xdp_test.h"
#include "pktfuzz.h"

#define FUZZ_FRAMES	400000
#define FUZZ_SECONDS	25
#define FUZZ_FLOW_FRAMES	100000
#define FUZZ_FLOW_SECONDS	10

/* tests/fuzz/corpus/xdp of the tree this binary was built from. */
static void fuzz_corpus_dir(char *out, size_t cap)
{
	const char *top = getenv("RLGATE_TOP");
	char exe[4096], path[4096];
	ssize_t n;

	if (top) {
		snprintf(out, cap, "%s/tests/fuzz/corpus/xdp", top);
		return;
	}
	/* BUILD/tests/test_xdp, BUILD in the tree */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	snprintf(path, sizeof(path), "%s/../../tests/fuzz/corpus/xdp",
		 dirname(exe));
	if (!realpath(path, out))
		snprintf(out, cap, "%s", path);
}

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);

	return v && *v ? strtol(v, NULL, 0) : def;
}

static int scen_fuzz(const void *arg)
{
	struct pktfuzz *f = calloc(1, sizeof(*f));
	char dir[4096], *log = NULL, *line, *save = NULL;
	size_t log_len = 0;
	__u64 seed = env_long("RLGATE_FUZZ_SEED", 1);
	long frames = env_long("RLGATE_PKTFUZZ_FRAMES", FUZZ_FRAMES), bad, n;
	long bad_flows = 0;
	int files = 0, bad_files;
	bool ran;
	FILE *fp;

	(void)arg;
	if (!f || !(fp = open_memstream(&log, &log_len))) {
		free(f);
		return -1;
	}
	if (pktfuzz_open(f)) {
		diag("%s", f->msg);
		fclose(fp);
		free(log);
		free(f);
		return -1;
	}
	fuzz_corpus_dir(dir, sizeof(dir));
	bad_files = pktfuzz_corpus(f, dir, 2, fp, &files);
	fprintf(fp, "%d frames of %s\n", files, dir);
	n = pktfuzz_seeded(f, seed, frames,
			   env_long("RLGATE_PKTFUZZ_SECONDS", FUZZ_SECONDS),
			   NULL, 3, fp, &bad);
	fprintf(fp, "%ld frames of seed %llu (RLGATE_FUZZ_SEED), %ld broke a "
		"rule\n", n, (unsigned long long)seed, bad);
	ran = n > 0;
	pktfuzz_summary(f, fp);
	pktfuzz_close(f);

	/* Copies of admitted SYNs with free repeats on, against the model. */
	memset(f, 0, sizeof(*f));
	if (pktfuzz_open_flows(f)) {
		fprintf(fp, "%s", f->msg);
		bad++;
	} else {
		n = pktfuzz_flows(f, seed,
				  env_long("RLGATE_PKTFUZZ_FLOWS", FUZZ_FLOW_FRAMES),
				  FUZZ_FLOW_SECONDS, 3, fp, &bad_flows);
		fprintf(fp, "%ld frames of the flows of seed %llu, %ld broke a "
			"rule\n", n, (unsigned long long)seed, bad_flows);
		pktfuzz_summary(f, fp);
		pktfuzz_close(f);
		bad += bad_flows + (n == 0);
	}
	fclose(fp);
	for (line = strtok_r(log, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		diag("%s", line);
	free(log);
	free(f);
	CHECK(!bad_files && !bad && ran, "%d corpus frames and %ld others "
	      "broke a rule, or no frame ran", bad_files, bad);
	return 0;
}

static const struct scenario scenarios[] = {
	{ "packet fuzz: the regression corpus and seeded random and mutated "
	  "frames keep every verdict rule of an independent reference; "
	  "copies of admitted SYNs pass free only as its flow model allows",
	  scen_fuzz, NULL },
};

void fuzz_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
