// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libFuzzer target for every reader the root agent has of the preload pool,
 * a file that every process of --preload-group can write: the input is
 * what such a process writes into the agent's own pool (made by
 * preload_open in a private directory under /dev/shm) - bytes anywhere in
 * it, the header's sizes and offsets included, and the file truncated -
 * and then the agent reads it as it does every tick: the check of
 * connections in flight (preload_heal, a few budgeted steps, carried on at
 * the next input), the split of a grant and of the connection slots, the
 * ledger of leased tokens, the counts and the status, and last the watch
 * (preload_watch), which makes a damaged pool anew.
 * Invariants: no crash, no sanitizer report, no SIGBUS that kills; after
 * the watch the pool has the agent's layout and is as long as it; the
 * share's count of connections is never the pool's forged count beyond
 * what the check found.
 *
 *   clang -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Ibpf \
 *       -Iuser/lib -Iuser/agent tests/fuzz/fuzz_pool.c user/agent/preload.c \
 *       user/lib/pool.c user/lib/pool_write.c user/lib/ledger.c \
 *       user/lib/slot.c build/librl.a -ljansson -lbpf -lelf -lz -lm \
 *       -o fuzz_pool
 *   ./fuzz_pool -max_total_time=60
 *
 * Input: byte 0 says what else happens (bit 0: the file is truncated to
 * byte 1 x 4 KiB before the readers; bits 1 and 2: the status is asked too, which
 * walks /proc), then patches: a 32-bit offset (little endian, taken modulo
 * the pool's length), a length byte, and that many bytes.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "classify.h"
#include "log.h"
#include "pool_write.h"
#include "preload.h"

#define TENANTS	32

static struct preload *pre;
static char dir[64], path[128];

static void cleanup(void)
{
	char tmp[160];

	preload_close(pre);
	unlink(path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(tmp);
	rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_set_level(LOG_LVL_ERROR);
	snprintf(dir, sizeof(dir), "/dev/shm/fuzz_pool.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(path, sizeof(path), "%s/pool", dir);
	if (preload_open(&pre, path, (gid_t)-1, RL_CLS_GROUPS_MIN, TENANTS))
		abort();
	/* a budget small enough that a check spans inputs */
	pre->heal_budget = 48;
	atexit(cleanup);
	return 0;
}

/* Slot 1 a capped standalone tenant and slot 2 a leased one, as the agent
 * would have written them: what a hostile writer then overwrites. */
static void tenants_set(struct preload *p)
{
	struct rl_tenant *t = preload_slot(p, 1);

	if (__atomic_load_n(&t->mode, __ATOMIC_RELAXED) == RL_MODE_NONE) {
		t->flags = RL_F_CONNCAP;
		t->conn_slots = 10;
		__atomic_store_n(&t->mode, RL_MODE_STANDALONE, __ATOMIC_RELEASE);
	}
	t = preload_slot(p, 2);
	if (__atomic_load_n(&t->mode, __ATOMIC_RELAXED) == RL_MODE_NONE) {
		__atomic_store_n(&t->mode, RL_MODE_LEASED, __ATOMIC_RELEASE);
		preload_tokens_add(p, 2, 100, 10);
	}
}

/* What a process of the group writes: the patches of the input. */
static void patch(struct preload *p, const uint8_t *d, size_t n)
{
	uint8_t *base = p->pool.base;
	size_t len = p->pool.len;

	while (n >= 5) {
		uint32_t off = (uint32_t)d[0] | (uint32_t)d[1] << 8 |
			       (uint32_t)d[2] << 16 | (uint32_t)d[3] << 24;
		size_t k = d[4];

		d += 5;
		n -= 5;
		if (k > n)
			k = n;
		off %= (uint32_t)len;
		if (k > len - off)
			k = len - off;
		/* after a truncation the page may be gone: the agent's
		 * SIGBUS handler stands anonymous memory in for it */
		memcpy(base + off, d, k);
		d += k;
		n -= k;
	}
}

/* Every reader the agent has of the pool, as its ticks run them. */
static void read_all(struct preload *p, bool status)
{
	uint64_t now = rl_pool_now_ns();
	struct rl_pool_proc procs[RL_POOL_PROCS];

	for (int i = 0; i < 3; i++)
		preload_heal(p);
	for (uint32_t s = 0; s < TENANTS; s++) {
		struct rl_stats st;
		int64_t c;

		preload_stats(p, s, &st);
		(void)preload_split(p, s, 1000, s * 7ULL, s & 1);
		c = preload_conns_found(p, s);
		assert(c >= 0);
		assert(p->conns_found[s] < 0 || c == p->conns_found[s]);
		(void)preload_conns(p, s);
		(void)preload_denied(p, s);
		preload_tokens_trim(p, s);
		(void)preload_tokens_take(p, s, 3);
		(void)preload_tokens(p, s);
		(void)preload_spendable(p, s);
		(void)preload_overdrawn(p, s);
		preload_forged_log(p, s, "t", now);
	}
	(void)preload_procs(p, procs, RL_POOL_PROCS);
	if (status)
		json_decref(preload_status_json(p, now));
	for (int d = 0; d < 2; d++)
		(void)rl_pool_classify(&p->pool, (enum rl_pool_dir)d, AF_INET,
				       (const uint8_t *)"\x0a\x00\x00\x01", 80);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	struct rl_pool_hdr want;
	struct stat st;

	if (n < 2)
		return 0;
	tenants_set(pre);
	patch(pre, d + 2, n - 2);
	if (d[0] & 1) {
		int fd = open(path, O_RDWR | O_NOFOLLOW);

		if (fd >= 0) {
			if (ftruncate(fd, (off_t)d[1] * 4096))
				abort();
			close(fd);
		}
	}
	read_all(pre, (d[0] & 6) == 6);
	preload_watch(pre, rl_pool_now_ns());
	/* what the agent uses next is a pool of its own layout */
	assert(rl_pool_layout(TENANTS, RL_CLS_GROUPS_MIN, RL_POOL_PROCS, &want) == 0);
	if (!pre->lost) {
		assert(pre->pool.len == want.pre.size);
		assert(fstat(pre->fd, &st) == 0 &&
		       (uint64_t)st.st_size >= want.pre.size);
		assert(pre->pool.hdr->max_tenants == TENANTS);
		assert(pre->pool.hdr->max_procs == RL_POOL_PROCS);
		assert(pre->pool.hdr->cls_half == RL_CLS_GROUPS_MIN);
	}
	return 0;
}
