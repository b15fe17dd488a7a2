/* test_preload_heal: the agent's side of the preload pool (user/agent/
 * preload.c, linked in) against a pool that a process of its group wrote
 * as it liked: header sizes and offsets rewritten, a process table of
 * pids of foreign namespaces, counts forged, the file truncated under the
 * mapping.  The agent reads nothing out of its own bounds (run it under
 * `make SANITIZE=1`), the check of connections in flight spends at most
 * its budget of /proc reads per call, the share between the points takes
 * what the check found and not the forged count, and a pool whose layout
 * or size changed is made anew instead of followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "../../user/agent/preload.h"
#include "check.h"
#include "classify.h"
#include "malloc_fail.h"
#include "pool_write.h"

#define TENANTS	16

static char dir[64], path[128];

/* A pool of TENANTS slots with tenant slot 3 capped (standalone), made
 * by the agent's own code in a fresh directory. */
static struct preload *pool_up(void)
{
	struct preload *p = NULL;
	struct rl_tenant *t;

	snprintf(dir, sizeof(dir), "/dev/shm/test_heal.XXXXXX");
	if (!mkdtemp(dir))
		return NULL;
	snprintf(path, sizeof(path), "%s/pool", dir);
	if (preload_open(&p, path, (gid_t)-1, RL_CLS_GROUPS_MIN, TENANTS))
		return NULL;
	t = preload_slot(p, 3);
	t->conn_slots = 10;
	t->flags = RL_F_CONNCAP;
	__atomic_store_n(&t->mode, RL_MODE_STANDALONE, __ATOMIC_RELEASE);
	return p;
}

static void pool_down(struct preload *p)
{
	char tmp[160];

	preload_close(p);
	unlink(path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	unlink(tmp);
	rmdir(dir);
}

/* Runs checks until one is done (at most max calls): the calls it took,
 * and the most /proc reads one made. */
static unsigned int heal_done(struct preload *p, unsigned int max,
			      size_t *most)
{
	uint64_t was = p->heal_checks;
	unsigned int calls = 0;

	*most = 0;
	while (calls < max && p->heal_checks == was) {
		preload_heal(p);
		calls++;
		if (p->heal_reads > *most)
			*most = p->heal_reads;
		if (p->heal.phase == HEAL_IDLE && p->heal_checks == was)
			break;	/* could not look (another pid namespace) */
	}
	return calls;
}

/* The header a process of the group writes: sizes far beyond the file,
 * offsets out of it. */
static void hostile_header(struct preload *p)
{
	struct rl_pool_hdr *h = p->pool.hdr;

	h->max_tenants = 1048576;
	h->cls_half = UINT32_MAX;
	h->max_procs = 1U << 20;
	h->off_tenants = ~0ULL;
	h->off_stats = 1ULL << 40;
	h->off_procs = 17;
	h->off_cls[0] = h->off_cls[1] = ~0ULL >> 1;
	h->pre.size = ~0ULL;
	h->procs_full = 1;
	for (int d = 0; d < 2; d++) {
		h->cls[d].active = 7;
		h->cls[d].groups[0] = h->cls[d].groups[1] = UINT32_MAX;
	}
}

/* The whole table: pids of pid namespaces that do not exist. */
static void foreign_table(struct preload *p)
{
	for (uint32_t i = 0; i < RL_POOL_PROCS; i++) {
		p->pool.procs[i].pid = 1000000 + i;
		p->pool.procs[i].pidns = 0xdead0000ULL + i;
	}
}

static void test_hostile_header(void)
{
	struct preload *p = pool_up();
	unsigned int calls;
	struct rl_stats st;
	size_t most;
	json_t *j;

	CHECK(p, "pool made: %s", strerror(errno));
	if (!p)
		return;
	hostile_header(p);
	foreign_table(p);
	p->pool.tenants[3].conns = 1000000;
	/* every reader of the pool, on the hostile header */
	calls = heal_done(p, 100000, &most);
	CHECK(calls < 100000, "the check ends (%u calls)", calls);
	preload_stats(p, TENANTS - 1, &st);
	preload_split(p, TENANTS - 1, 100, 5, false);
	j = preload_status_json(p, rl_pool_now_ns());
	CHECK(j && json_array_size(json_object_get(j, "processes")) <= RL_POOL_PROCS,
	      "status");
	json_decref(j);
	CHECK(rl_pool_classify(&p->pool, RL_POOL_IN, AF_INET,
			       (const uint8_t *)"\x0a\0\0\x01", 80) == -1,
	      "classify: the agent's own groups, no rule");
	/* never followed: made anew, once */
	CHECK(preload_watch(p, rl_pool_now_ns()) == 1 && p->remade == 1,
	      "made anew: remade %llu", (unsigned long long)p->remade);
	CHECK(strstr(p->lost_why, "layout") != NULL, "why: %s", p->lost_why);
	CHECK(p->pool.hdr->max_tenants == TENANTS &&
	      p->pool.hdr->cls_half == RL_CLS_GROUPS_MIN,
	      "the new pool has the agent's layout");
	CHECK(preload_watch(p, rl_pool_now_ns()) == 0 && p->remade == 1,
	      "a sound pool is kept");
	pool_down(p);
}

static void test_budget(void)
{
	struct preload *p = pool_up();
	unsigned int calls;
	size_t most;

	CHECK(p, "pool made");
	if (!p)
		return;
	foreign_table(p);
	p->heal_budget = 8;
	calls = heal_done(p, 100000, &most);
	if (rl_pool_pidns() != 0xEFFFFFFCULL) {
		check_skip("not in the initial pid namespace: the check does "
			   "not look at other namespaces");
		pool_down(p);
		return;
	}
	/* a scan of /proc for 256 foreign entries: many calls, none more
	 * than the budget and one process's files */
	CHECK(p->heal_checks == 1, "one check done");
	CHECK(calls > 1, "over %u calls", calls);
	CHECK(most <= 8 + 3, "at most %zu reads in one call", most);
	pool_down(p);
}

static void test_forged_conns(void)
{
	struct preload *p = pool_up();
	size_t most;

	CHECK(p, "pool made");
	if (!p)
		return;
	/* nobody holds a connection; the count says a million, rewritten
	 * before every check */
	for (int i = 0; i < 3; i++) {
		__atomic_store_n(&p->pool.tenants[3].conns, 1000000 + i,
				 __ATOMIC_RELAXED);
		heal_done(p, 1000, &most);
	}
	CHECK(p->heal_checks == 3, "checks done: %llu",
	      (unsigned long long)p->heal_checks);
	CHECK(preload_conns_found(p, 3) == 0,
	      "the share takes what was found: %lld",
	      (long long)preload_conns_found(p, 3));
	pool_down(p);
}

static void test_truncated(void)
{
	struct preload *p = pool_up();
	int64_t n;
	int fd;

	CHECK(p, "pool made");
	if (!p)
		return;
	fd = open(path, O_RDWR);
	CHECK(fd >= 0 && ftruncate(fd, RL_POOL_HDR_BYTES) == 0, "truncated");
	if (fd >= 0)
		close(fd);
	/* a page past the end: SIGBUS, turned into a loss */
	n = __atomic_load_n(&p->pool.tenants[TENANTS - 1].conns, __ATOMIC_RELAXED);
	CHECK(n == 0, "read as zero: %lld", (long long)n);
	preload_heal(p);
	CHECK(preload_watch(p, rl_pool_now_ns()) == 1 && p->remade == 1,
	      "made anew");
	CHECK(strstr(p->lost_why, "truncated") != NULL, "why: %s", p->lost_why);
	p->pool.tenants[TENANTS - 1].conns = 5;
	CHECK(p->pool.tenants[TENANTS - 1].conns == 5, "the new one is used");
	/* truncated again, seen without a touch past the end */
	fd = open(path, O_RDWR);
	CHECK(fd >= 0 && ftruncate(fd, RL_POOL_HDR_BYTES) == 0, "truncated again");
	if (fd >= 0)
		close(fd);
	CHECK(preload_watch(p, rl_pool_now_ns()) == 1 && p->remade == 2,
	      "made anew again: %llu", (unsigned long long)p->remade);
	pool_down(p);
}

static void test_replaced(void)
{
	struct preload *p = pool_up();
	char other[160];
	int fd;

	CHECK(p, "pool made");
	if (!p)
		return;
	snprintf(other, sizeof(other), "%s/other", dir);
	fd = open(other, O_RDWR | O_CREAT, 0660);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)p->pool.len) == 0, "another file");
	if (fd >= 0)
		close(fd);
	CHECK(rename(other, path) == 0, "put in its place");
	CHECK(preload_watch(p, rl_pool_now_ns()) == 1, "made anew");
	CHECK(strstr(p->lost_why, "replaced") != NULL, "why: %s", p->lost_why);
	CHECK(p->pool.hdr->pre.magic == RL_POOL_MAGIC, "a pool of its own");
	pool_down(p);
}

int main(void)
{
	CHECK_RUN(test_hostile_header);
	CHECK_RUN(test_budget);
	CHECK_RUN(test_forged_conns);
	CHECK_RUN(test_truncated);
	CHECK_RUN(test_replaced);
	return check_exit();
}
