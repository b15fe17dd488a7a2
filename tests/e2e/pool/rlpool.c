/* rlpool: a preload pool written for the e2e tests without an agent.
 *   rlpool PATH SPEC...   makes (or adopts) the pool at PATH, tenant i+1
 *                         from SPEC i: MATCH[,MATCH]@RATE@BURST[@PORT[,PORT]]
 *                         [@max=N] (N: a cap on connections in flight),
 *                         standalone buckets, starting full
 *   rlpool PATH --stats   prints "tenant SLOT ADMITTED DENIED IN-FLIGHT TOKENS
 *                         OVERDRAFT" per slot in use (TOKENS: the leased
 *                         count, below zero on the overdraft), then
 *                         "proc PID COMM FLAGS ADMITTED DENIED"
 *   rlpool PATH --forge tokens|conns N [MS SECONDS]
 *                         what a process of the pool's group can do: writes
 *                         N into the leased tokens (or the connections in
 *                         flight) of every leased slot, once, or every MS
 *                         milliseconds for SECONDS
 *   rlpool PATH --fill-procs PID
 *                         fills every free line of the process table with
 *                         PID (a process that lives as long as the test),
 *                         so that the next process finds the table full
 *   rlpool PATH --hostile MS SECONDS
 *                         what a process of the pool's group can do to the
 *                         file, every MS milliseconds for SECONDS, opening
 *                         whatever is at PATH each time: the connections
 *                         in flight of every slot written 1000000, every
 *                         free line of the process table taken by a pid of
 *                         a pid namespace that does not exist, and in turn
 *                         the header's sizes rewritten (1048576 tenants)
 *                         or the file truncated to its header; prints what
 *                         it did
 * Exit 0, 1 on failure, 2 on a bad argument.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "classify.h"
#include "policy.h"
#include "pool.h"
#include "pool_write.h"

#define SLOTS	16

/* Maps the pool at path: 0, or 1 after saying why not. */
static int map_pool(struct rl_pool *p, const char *path)
{
	int err = rl_pool_map(p, path);

	if (err)
		fprintf(stderr, "Error: couldn't map pool '%s': %s\n", path,
			strerror(-err));
	return err ? 1 : 0;
}

static int stats(const char *path)
{
	struct rl_pool_proc procs[RL_POOL_PROCS];
	struct rl_pool p;
	size_t n;

	if (map_pool(&p, path))
		return 1;
	for (uint32_t i = 0; i < p.n_tenants; i++) {
		struct rl_stats st;

		if (p.tenants[i].mode == RL_MODE_NONE)
			continue;
		rl_pool_tenant_stats(&p, i, &st);
		printf("tenant %u %llu %llu %lld %lld %lld\n", i,
		       (unsigned long long)st.admitted,
		       (unsigned long long)st.denied,
		       (long long)p.tenants[i].conns,
		       (long long)p.tenants[i].tokens,
		       (long long)p.tenants[i].overdraft);
	}
	n = rl_pool_procs(&p, rl_pool_pidns(), procs, RL_POOL_PROCS);
	for (size_t i = 0; i < n && i < RL_POOL_PROCS; i++)
		printf("proc %u %s %u %llu %llu\n", procs[i].pid, procs[i].comm,
		       procs[i].flags, (unsigned long long)procs[i].admitted,
		       (unsigned long long)procs[i].denied);
	rl_pool_unmap(&p);
	return 0;
}

static int forge(const char *path, char **argv, int argc)
{
	bool conns = strcmp(argv[0], "conns") == 0;
	long long n = strtoll(argv[1], NULL, 10);
	long ms = argc > 2 ? strtol(argv[2], NULL, 10) : 0;
	long secs = argc > 3 ? strtol(argv[3], NULL, 10) : 0;
	uint64_t until = rl_pool_now_ns() + (uint64_t)secs * RL_NSEC_PER_SEC;
	struct timespec gap = { ms / 1000, (ms % 1000) * 1000000L };
	struct rl_pool p;

	if ((!conns && strcmp(argv[0], "tokens") != 0) || argc == 3 ||
	    (argc > 2 && (ms <= 0 || secs <= 0))) {
		fprintf(stderr, "Error: expected --forge tokens|conns N [MS SECONDS]\n");
		return 2;
	}
	if (map_pool(&p, path))
		return 1;
	do {
		for (uint32_t i = 0; i < p.n_tenants; i++) {
			struct rl_tenant *t = &p.tenants[i];

			if (__atomic_load_n(&t->mode, __ATOMIC_ACQUIRE) !=
			    RL_MODE_LEASED)
				continue;
			__atomic_store_n(conns ? &t->conns : &t->tokens,
					 (int64_t)n, __ATOMIC_RELEASE);
		}
		if (ms)
			nanosleep(&gap, NULL);
	} while (ms && rl_pool_now_ns() < until);
	rl_pool_unmap(&p);
	return 0;
}

static int fill_procs(const char *path, const char *pid_s)
{
	uint32_t pid = (uint32_t)strtoul(pid_s, NULL, 10);
	uint64_t pidns = rl_pool_pidns();
	struct rl_pool p;

	if (map_pool(&p, path))
		return 1;
	for (uint32_t i = 0; i < p.n_procs; i++) {
		struct rl_pool_proc *s = &p.procs[i];
		uint32_t free_ = 0;

		if (!__atomic_compare_exchange_n(&s->pid, &free_, pid, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		__atomic_store_n(&s->pidns, pidns, __ATOMIC_RELAXED);
		__atomic_store_n(&s->start_ns, rl_pool_now_ns(), __ATOMIC_RELAXED);
		memcpy(s->comm, "filler", sizeof("filler"));
	}
	rl_pool_unmap(&p);
	return 0;
}

/* One round of --hostile on a pool mapped as the library maps it (a pool
 * already damaged is not mapped: only the file is written). */
static void hostile_counts(const char *path, uint32_t round)
{
	struct rl_pool p;

	if (rl_pool_map(&p, path))
		return;
	for (uint32_t i = 0; i < p.n_tenants; i++)
		__atomic_store_n(&p.tenants[i].conns, 1000000, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < p.n_procs; i++) {
		struct rl_pool_proc *s = &p.procs[i];
		uint32_t free_ = 0;

		if (!__atomic_compare_exchange_n(&s->pid, &free_, 1 + i, false,
						 __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			continue;
		__atomic_store_n(&s->pidns, 0xf0000000ULL + i + round,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&s->start_ns, rl_pool_now_ns(), __ATOMIC_RELAXED);
	}
	rl_pool_unmap(&p);
}

static int hostile(const char *path, const char *ms_s, const char *secs_s)
{
	long ms = strtol(ms_s, NULL, 10), secs = strtol(secs_s, NULL, 10);
	uint64_t until = rl_pool_now_ns() + (uint64_t)secs * RL_NSEC_PER_SEC;
	struct timespec gap = { ms / 1000, (ms % 1000) * 1000000L };
	unsigned int headers = 0, truncs = 0, rounds = 0;

	if (ms <= 0 || secs <= 0) {
		fprintf(stderr, "Error: expected --hostile MS SECONDS\n");
		return 2;
	}
	do {
		int fd;

		hostile_counts(path, rounds);
		fd = open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd >= 0 && rounds % 10 == 4) {
			struct rl_pool_hdr h = { 0 };

			if (pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h)) {
				h.max_tenants = 1048576;
				h.cls_half = UINT32_MAX;
				h.max_procs = 1U << 20;
				h.pre.size = ~0ULL;
				headers += pwrite(fd, &h, sizeof(h), 0) ==
					   (ssize_t)sizeof(h);
			}
		} else if (fd >= 0 && rounds % 10 == 9) {
			truncs += ftruncate(fd, RL_POOL_HDR_BYTES) == 0;
		}
		if (fd >= 0)
			close(fd);
		rounds++;
		nanosleep(&gap, NULL);
	} while (rl_pool_now_ns() < until);
	printf("%u rounds, %u headers rewritten, %u truncations\n", rounds,
	       headers, truncs);
	return 0;
}

static int parse(char *spec, struct policy_tenant *t, char *err)
{
	char *f[4] = { 0 }, *end;
	int n = 0;

	for (char *s = strtok(spec, "@"); s; s = strtok(NULL, "@")) {
		if (strncmp(s, "max=", 4) == 0) {
			t->max_conns = strtoull(s + 4, &end, 10);
			if (*end || !t->max_conns) {
				snprintf(err, POLICY_ERR_MAX, "max=N: N a count above 0");
				return -1;
			}
		} else if (n < 4) {
			f[n++] = s;
		}
	}
	if (n < 3) {
		snprintf(err, POLICY_ERR_MAX, "expected MATCH@RATE@BURST[@PORTS][@max=N]");
		return -1;
	}
	if (policy_parse_prefixes(f[0], t, err) || policy_parse_rate(f[1], &t->rate, err) ||
	    policy_parse_burst(f[2], &t->burst, err) ||
	    (f[3] && policy_parse_ports(f[3], t, err)))
		return -1;
	return policy_validate(t, err);
}

int main(int argc, char **argv)
{
	struct policy_tenant ts[SLOTS];
	struct rl_cls_rule *rules = NULL;
	size_t n_rules = 0, cap = 0;
	struct rl_cls_image img;
	char err[POLICY_ERR_MAX];
	struct rl_pool p;
	bool adopted;
	int n = argc - 2, e;

	if (argc == 3 && strcmp(argv[2], "--stats") == 0)
		return stats(argv[1]);
	if (argc == 5 && strcmp(argv[2], "--hostile") == 0)
		return hostile(argv[1], argv[3], argv[4]);
	if (argc == 4 && strcmp(argv[2], "--fill-procs") == 0)
		return fill_procs(argv[1], argv[3]);
	if (argc >= 5 && argc <= 7 && strcmp(argv[2], "--forge") == 0)
		return forge(argv[1], argv + 3, argc - 3);
	if (argc < 3 || n > SLOTS - 1) {
		fprintf(stderr, "Usage: rlpool PATH SPEC... | rlpool PATH --stats | "
			"rlpool PATH --forge tokens|conns N [MS SECONDS] | "
			"rlpool PATH --fill-procs PID | rlpool PATH --hostile MS SECONDS\n");
		return 2;
	}
	memset(ts, 0, sizeof(ts));
	for (int i = 0; i < n; i++) {
		snprintf(ts[i].name, sizeof(ts[i].name), "t%d", i + 1);
		if (parse(argv[i + 2], &ts[i], err)) {
			fprintf(stderr, "Error: tenant %d: %s\n", i + 1, err);
			return 2;
		}
		if (rl_cls_rules_add(&rules, &n_rules, &cap, &ts[i], (uint32_t)i + 1))
			return 1;
	}
	e = rl_pool_create(&p, argv[1], SLOTS, RL_CLS_GROUPS_MIN, (gid_t)-1, &adopted);
	if (e) {
		fprintf(stderr, "Error: couldn't make pool '%s': %s\n", argv[1],
			strerror(-e));
		return 1;
	}
	for (int i = 0; i < n; i++)
		rl_pool_tenant_set(&p, (uint32_t)i + 1, &ts[i], true, false, 1,
				   rl_pool_now_ns());
	if (rl_cls_compile(rules, n_rules, RL_CLS_GROUPS_MIN, &img, err,
			   sizeof(err)) || rl_pool_publish(&p, RL_POOL_IN, &img, n_rules)) {
		fprintf(stderr, "Error: couldn't publish the rules: %s\n", err);
		return 1;
	}
	rl_cls_image_free(&img);
	free(rules);
	rl_pool_unmap(&p);
	return 0;
}
