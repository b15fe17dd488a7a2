// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libFuzzer target for rlgate's packet path: every input is one Ethernet
 * frame, run through the loaded xdp_rlgate with bpf_prog_test_run_opts and
 * checked against the independent reference (tests/bpf/pktfuzz.c and
 * pktref.c: the rules are listed in docs/testing.md).  A broken rule
 * aborts with the frame and the rule.  Needs root (it loads BPF).
 *
 *   make    # build/rlgate.skel.h and build/librl.a
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE \
 *       -Ibuild -Ibpf -Iuser/lib -Itests/bpf tests/fuzz/fuzz_xdp.c \
 *       tests/bpf/pktfuzz.c tests/bpf/pktref.c tests/bpf/harness.c \
 *       tests/bpf/pkt.c build/librl.a -lbpf -lelf -lz -ljansson -lm \
 *       -o fuzz_xdp
 *   ./fuzz_xdp -max_len=1500 corpus-dir tests/fuzz/corpus/xdp
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pktfuzz.h"

/* Not on the stack: it holds every tenant slot twice. */
static struct pktfuzz fz;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	harness_quiet_libbpf();
	if (pktfuzz_open(&fz)) {
		fprintf(stderr, "Error: %s", fz.msg);
		exit(1);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int rc = pktfuzz_check(&fz, data, size);

	if (rc) {
		fprintf(stderr, "%s", fz.msg);
		abort();
	}
	return 0;
}

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* A new shape now and then, the generator's own blind mutations, or
 * libFuzzer's; then, mostly, a valid IPv4 header checksum again, or nearly
 * every mutated IPv4 frame would be one Linux drops. */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size,
			       unsigned int seed)
{
	struct pktfuzz_rng r = { seed };
	__u8 buf[PKTFUZZ_MAX];
	size_t cap = max_size < PKTFUZZ_MAX ? max_size : PKTFUZZ_MAX;
	__u64 how = pktfuzz_rand(&r);

	if (how % 8 == 0 || size == 0) {
		size = pktfuzz_generate(&r, buf);
		if (size > cap)
			size = cap;
		memcpy(data, buf, size);
	} else if (how % 8 < 4) {
		size = pktfuzz_mutate(&r, data, size < cap ? size : cap, cap);
	} else {
		size = LLVMFuzzerMutate(data, size, cap);
	}
	if ((how >> 8) % 8)
		pktfuzz_fix_csum(data, size);
	return size;
}
