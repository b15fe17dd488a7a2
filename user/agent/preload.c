// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rlagent's side of the preload pool: the file made or adopted at start,
 * and what kern.c mirrors into it.  Everything here is a thin layer over
 * user/lib/pool_write.c; the decisions live in user/lib.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "classify.h"
#include "ledger.h"
#include "log.h"
#include "pool_write.h"
#include "preload.h"
#include "procnet.h"
#include "slot.h"

/*
 * A process of the pool's group may truncate the file under the agent's
 * mapping: the next touch of a page past the new end would raise SIGBUS
 * and kill the agent.  The handler below puts anonymous memory in place of
 * the whole mapping instead (zeroes, the agent's alone) and notes it; the
 * access is then made again and succeeds, and preload_watch() makes the
 * pool anew at the next tick.  A SIGBUS anywhere else is not the pool's:
 * the default action is put back, and the access made again raises it.
 * One pool per process, so the mapping's place is a static.
 */
static volatile uintptr_t bus_base;
static volatile size_t bus_len;
static volatile sig_atomic_t bus_hit;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr, b = bus_base;

	(void)uc;
	if (b && a >= b && a - b < bus_len &&
	    mmap((void *)b, bus_len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
		bus_hit = 1;
		return;
	}
	signal(sig, SIG_DFL);
}

/* The pool's mapping is the one the handler guards. */
static void bus_guard(const struct rl_pool *pool)
{
	bus_base = 0;
	bus_len = pool->len;
	bus_base = (uintptr_t)pool->base;
}

static int bus_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	return sigaction(SIGBUS, &sa, NULL) < 0 ? -errno : 0;
}

/* The agent's own descriptor of the pool's file, checked to be the file
 * mapped: its size is what tells a truncation, whatever is at the path.
 * 0 or -errno. */
static int own_fd(struct preload *p, const struct rl_pool *pool)
{
	struct stat st;
	int fd = open(p->path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || st.st_dev != pool->dev ||
	    st.st_ino != pool->ino) {
		close(fd);
		return -ESTALE;
	}
	if (p->fd >= 0)
		close(p->fd);
	p->fd = fd;
	return 0;
}

static void preload_free(struct preload *p)
{
	if (p->fd >= 0)
		close(p->fd);
	free(p->kern_seen);
	free(p->pool_seen);
	free(p->heal_counted);
	free(p->heal_found);
	free(p->heal_counted_now);
	free(p->heal_found_now);
	free(p->ledger);
	free(p->forged);
	free(p->forged_logged);
	free(p->forged_log_ns);
	free(p->conns_found);
	free(p->overdraft);
	free(p);
}

int preload_open(struct preload **out, const char *path, gid_t gid,
		 uint32_t cls_half, uint32_t max_tenants)
{
	struct preload *p = calloc(1, sizeof(*p));
	uint64_t spare = 0;
	int err;

	if (!p)
		return -ENOMEM;
	p->fd = -1;
	p->max_tenants = max_tenants;
	p->cls_half = cls_half;
	p->gid = gid;
	p->heal_budget = PRELOAD_HEAL_BUDGET;
	p->kern_seen = calloc(max_tenants, sizeof(*p->kern_seen));
	p->pool_seen = calloc(max_tenants, sizeof(*p->pool_seen));
	p->heal_counted = calloc(max_tenants, sizeof(int64_t));
	p->heal_found = calloc(max_tenants, sizeof(int64_t));
	p->heal_counted_now = calloc(max_tenants, sizeof(int64_t));
	p->heal_found_now = calloc(max_tenants, sizeof(int64_t));
	p->ledger = calloc(max_tenants, sizeof(*p->ledger));
	p->forged = calloc(max_tenants, sizeof(*p->forged));
	p->forged_logged = calloc(max_tenants, sizeof(*p->forged_logged));
	p->forged_log_ns = calloc(max_tenants, sizeof(*p->forged_log_ns));
	p->conns_found = calloc(max_tenants, sizeof(*p->conns_found));
	p->overdraft = calloc(max_tenants, sizeof(*p->overdraft));
	if (!p->kern_seen || !p->pool_seen || !p->heal_counted ||
	    !p->heal_found || !p->heal_counted_now || !p->heal_found_now ||
	    !p->ledger || !p->forged || !p->forged_logged ||
	    !p->forged_log_ns || !p->conns_found || !p->overdraft) {
		preload_free(p);
		return -ENOMEM;
	}
	snprintf(p->path, sizeof(p->path), "%s", path);
	err = rl_pool_create(&p->pool, path, max_tenants, cls_half, gid,
			     &p->adopted);
	if (err) {
		log_error("couldn't make the preload pool on '%s': %s", path,
			  strerror(-err));
		preload_free(p);
		return err;
	}
	err = own_fd(p, &p->pool);
	if (!err)
		err = bus_install();
	if (err) {
		log_error("couldn't watch the preload pool on '%s': %s", path,
			  strerror(-err));
		rl_pool_unmap(&p->pool);
		preload_free(p);
		return err;
	}
	bus_guard(&p->pool);
	log_info("preload pool '%s' %s (%u tenant slots)", path,
		 p->adopted ? "adopted" : "made", max_tenants);
	/* the counts already there are where the next split starts from */
	for (uint32_t s = 0; s < max_tenants; s++) {
		struct rl_stats st;

		rl_pool_tenant_stats(&p->pool, s, &st);
		p->pool_seen[s] = st.admitted + st.denied;
		p->conns_found[s] = -1;
		/* Leased tokens left in the pool were given by the agent
		 * before, or written by a process of the group: which, cannot
		 * be told.  The preloaded programs spend them as before (no
		 * refusal while this agent starts), but they are never taken
		 * back into the kernel or refunded. */
		if (__atomic_load_n(&p->pool.tenants[s].mode, __ATOMIC_ACQUIRE) ==
		    RL_MODE_LEASED) {
			rl_ledger_adopt(&p->pool.tenants[s], &p->ledger[s]);
			spare += p->ledger[s].spare;
		}
	}
	if (spare)
		log_info("preload pool '%s': %llu leased token(s) left in it, "
			 "spent there and never refunded (not leased by this "
			 "agent)", path, (unsigned long long)spare);
	*out = p;
	return 0;
}

static void heal_reset(struct heal_state *h);

void preload_close(struct preload *p)
{
	if (!p)
		return;
	/* The file stays: preloaded processes keep the rules and buckets
	 * they have, and a restarted agent adopts it. */
	bus_base = 0;
	heal_reset(&p->heal);
	rl_pool_unmap(&p->pool);
	preload_free(p);
}

/* Why the pool in use is no longer one the agent can keep, or NULL: its
 * file truncated (seen by the agent's own descriptor, or by a SIGBUS),
 * removed or replaced at the path, or its header's layout rewritten. */
static const char *pool_lost(struct preload *p, char *buf, size_t len)
{
	const struct rl_pool_hdr *h = p->pool.hdr;
	struct rl_pool_hdr want;
	struct stat st;

	if (bus_hit)
		return "truncated (a page of it was gone)";
	/* without a descriptor of its own (one could not be opened when the
	 * pool was made), the path's file is the one looked at */
	if (p->fd < 0 && own_fd(p, &p->pool) < 0)
		return "removed or replaced";
	if (fstat(p->fd, &st) < 0)
		return "unreadable";
	if ((uint64_t)st.st_size < p->pool.len) {
		snprintf(buf, len, "truncated to %lld bytes",
			 (long long)st.st_size);
		return buf;
	}
	if (lstat(p->path, &st) < 0)
		return "removed";
	if (st.st_dev != p->pool.dev || st.st_ino != p->pool.ino)
		return "replaced by another file";
	if (rl_pool_layout(p->max_tenants, p->cls_half, RL_POOL_PROCS, &want))
		return NULL;
	if (__atomic_load_n(&h->pre.magic, __ATOMIC_RELAXED) != want.pre.magic ||
	    __atomic_load_n(&h->pre.version, __ATOMIC_RELAXED) != want.pre.version ||
	    __atomic_load_n(&h->pre.abi, __ATOMIC_RELAXED) != want.pre.abi ||
	    __atomic_load_n(&h->pre.size, __ATOMIC_RELAXED) != want.pre.size ||
	    __atomic_load_n(&h->max_tenants, __ATOMIC_RELAXED) != want.max_tenants ||
	    __atomic_load_n(&h->cls_half, __ATOMIC_RELAXED) != want.cls_half ||
	    __atomic_load_n(&h->max_procs, __ATOMIC_RELAXED) != want.max_procs ||
	    __atomic_load_n(&h->off_tenants, __ATOMIC_RELAXED) != want.off_tenants ||
	    __atomic_load_n(&h->off_stats, __ATOMIC_RELAXED) != want.off_stats ||
	    __atomic_load_n(&h->off_procs, __ATOMIC_RELAXED) != want.off_procs ||
	    __atomic_load_n(&h->off_cls[0], __ATOMIC_RELAXED) != want.off_cls[0] ||
	    __atomic_load_n(&h->off_cls[1], __ATOMIC_RELAXED) != want.off_cls[1])
		return "its layout rewritten in its header";
	return NULL;
}

/* What the agent knew of the old pool does not hold for a new one: its
 * ledger, counts seen, overdraft and check start from nothing.  No process
 * holds a connection in a pool just made (those counted in the old one are
 * given back there): the share starts from none found, whatever a process
 * of the group writes into the new pool's counts before the next check. */
static void forget_pool(struct preload *p)
{
	size_t n = p->max_tenants;

	memset(p->kern_seen, 0, n * sizeof(*p->kern_seen));
	memset(p->pool_seen, 0, n * sizeof(*p->pool_seen));
	memset(p->heal_counted, 0, n * sizeof(int64_t));
	memset(p->heal_found, 0, n * sizeof(int64_t));
	memset(p->ledger, 0, n * sizeof(*p->ledger));
	memset(p->overdraft, 0, n * sizeof(*p->overdraft));
	for (size_t s = 0; s < n; s++)
		p->conns_found[s] = 0;
	heal_reset(&p->heal);
}

int preload_watch(struct preload *p, uint64_t now_ns)
{
	struct rl_pool q;
	const char *why;
	char buf[64];
	bool adopted;
	int err;

	why = pool_lost(p, buf, sizeof(buf));
	if (!why && !p->lost)
		return 0;
	if (!p->lost) {
		/* said once per loss; a pool that cannot be made anew yet is
		 * tried again every tick without a word more */
		snprintf(p->lost_why, sizeof(p->lost_why), "%s", why);
		p->lost_ns = now_ns;
		p->lost = true;
		log_warn("preload: pool '%s': %s (by a process of its "
			 "group?); never followed: making it anew (the "
			 "kernel's point enforces as before; preloaded programs "
			 "apply RLGATE_POOL_FAIL until they map the new one)",
			 p->path, p->lost_why);
	}
	err = rl_pool_create(&q, p->path, p->max_tenants, p->cls_half, p->gid,
			     &adopted);
	if (!err && adopted) {
		/* a file of the right layout put there by someone else, or
		 * the damaged one in place: never taken over */
		rl_pool_unmap(&q);
		if (unlink(p->path) < 0 && errno != ENOENT)
			err = -errno;
		else
			err = rl_pool_create(&q, p->path, p->max_tenants,
					     p->cls_half, p->gid, &adopted);
	}
	if (!err && adopted) {
		rl_pool_unmap(&q);
		err = -EEXIST;
	}
	if (!err) {
		int fd_err;

		bus_base = 0;
		rl_pool_unmap(&p->pool);
		p->pool = q;
		fd_err = own_fd(p, &p->pool);
		bus_hit = 0;
		bus_guard(&p->pool);
		if (fd_err)
			log_warn("couldn't open the preload pool on '%s': %s",
				 p->path, strerror(-fd_err));
	}
	if (err) {
		if (p->remake_err != err)
			log_error("couldn't make the preload pool anew on '%s': "
				  "%s", p->path, strerror(-err));
		p->remake_err = err;
		return 0;
	}
	p->remake_err = 0;
	p->lost = false;
	p->remade++;
	forget_pool(p);
	log_info("preload pool '%s' made anew", p->path);
	return 1;
}

struct rl_tenant *preload_slot(struct preload *p, uint32_t slot)
{
	return &p->pool.tenants[slot];
}

void preload_slot_fresh(struct preload *p, uint32_t slot)
{
	__atomic_store_n(&p->pool.tenants[slot].mode, RL_MODE_NONE,
			 __ATOMIC_RELEASE);
	memset(&p->pool.stats[slot], 0, sizeof(p->pool.stats[slot]));
	p->pool_seen[slot] = 0;
	/* rl_slot_configure empties the slot's tokens */
	p->ledger[slot] = (struct rl_ledger){ 0 };
	p->forged[slot] = p->forged_logged[slot] = p->forged_log_ns[slot] = 0;
	p->conns_found[slot] = -1;
}

static void count_forged(struct preload *p, uint32_t slot, uint64_t n)
{
	if (!n)
		return;
	p->forged[slot] += n;
	p->forged_unlogged = true;
}

void preload_tokens_add(struct preload *p, uint32_t slot, uint64_t n,
			int64_t lowwater)
{
	rl_ledger_add(&p->pool.tenants[slot], &p->ledger[slot], n, lowwater);
}

uint64_t preload_tokens_take(struct preload *p, uint32_t slot, uint64_t max)
{
	uint64_t forged, got;

	got = rl_ledger_take(&p->pool.tenants[slot], &p->ledger[slot], max,
			     &forged);
	count_forged(p, slot, forged);
	return got;
}

void preload_tokens_trim(struct preload *p, uint32_t slot)
{
	count_forged(p, slot, rl_ledger_trim(&p->pool.tenants[slot],
					     &p->ledger[slot]));
}

void preload_tokens_bound(struct preload *p, uint32_t slot, uint64_t max)
{
	count_forged(p, slot, rl_ledger_bound(&p->pool.tenants[slot],
					      &p->ledger[slot], max));
}

uint64_t preload_tokens(const struct preload *p, uint32_t slot)
{
	return rl_ledger_tokens(&p->pool.tenants[slot], &p->ledger[slot]);
}

void preload_overdraft(struct preload *p, uint32_t slot, uint64_t n)
{
	p->overdraft[slot] = n;
	__atomic_store_n(&p->pool.tenants[slot].overdraft, (int64_t)n,
			 __ATOMIC_RELAXED);
}

uint64_t preload_overdrawn(const struct preload *p, uint32_t slot)
{
	int64_t n = __atomic_load_n(&p->pool.tenants[slot].tokens,
				    __ATOMIC_RELAXED);
	uint64_t owed = n < 0 ? (uint64_t)-n : 0;

	return owed < p->overdraft[slot] ? owed : p->overdraft[slot];
}

uint64_t preload_spendable(const struct preload *p, uint32_t slot)
{
	return rl_ledger_spendable(&p->pool.tenants[slot], &p->ledger[slot]);
}

uint64_t preload_forged(const struct preload *p, uint32_t slot)
{
	return p->forged[slot];
}

bool preload_forged_pending(struct preload *p)
{
	bool was = p->forged_unlogged;

	p->forged_unlogged = false;
	return was;
}

#define FORGED_LOG_NS	(60ULL * 1000000000ULL)

void preload_forged_log(struct preload *p, uint32_t slot, const char *tenant,
			uint64_t now_ns)
{
	uint64_t n = p->forged[slot] - p->forged_logged[slot];

	if (!n)
		return;
	if (p->forged_log_ns[slot] && now_ns - p->forged_log_ns[slot] < FORGED_LOG_NS) {
		/* told within the minute: the next look tells the rest */
		p->forged_unlogged = true;
		return;
	}
	log_warn("preload: tenant '%s': %llu token(s) in pool '%s' that this "
		 "agent never gave it, written by a process of the pool's "
		 "group; taken out and dropped (%llu since the tenant came)",
		 tenant, (unsigned long long)n, p->path,
		 (unsigned long long)p->forged[slot]);
	p->forged_logged[slot] = p->forged[slot];
	p->forged_log_ns[slot] = now_ns;
}

int64_t preload_conns_found(const struct preload *p, uint32_t slot)
{
	int64_t n = __atomic_load_n(&p->pool.tenants[slot].conns,
				    __ATOMIC_RELAXED);

	if (p->conns_found[slot] >= 0)
		return p->conns_found[slot];
	return n > 0 ? n : 0;
}

int64_t preload_conns(const struct preload *p, uint32_t slot)
{
	return rl_ledger_conns(__atomic_load_n(&p->pool.tenants[slot].conns,
					       __ATOMIC_RELAXED),
			       p->conns_found[slot]);
}

uint64_t preload_denied(const struct preload *p, uint32_t slot)
{
	return __atomic_load_n(&p->pool.stats[slot].denied, __ATOMIC_RELAXED);
}

void preload_changed(struct preload *p)
{
	__atomic_fetch_add(&p->pool.hdr->generation, 1, __ATOMIC_RELEASE);
}

int preload_rules(struct preload *p, enum rl_pool_dir dir,
		  const struct rl_cls_image *img, size_t n_rules)
{
	int err = rl_pool_publish(&p->pool, dir, img, n_rules);

	if (err)
		log_error("couldn't publish %s rules on preload pool '%s': %s",
			  dir == RL_POOL_OUT ? "outbound" : "inbound", p->path,
			  strerror(-err));
	return err;
}

void preload_heartbeat(struct preload *p, uint64_t now_ns, uint64_t stale_ns,
		       bool degraded)
{
	rl_pool_heartbeat(&p->pool, now_ns, stale_ns, degraded);
}

void preload_alive(struct preload *p, uint64_t now_ns, unsigned int points)
{
	rl_pool_points(&p->pool, points);
	rl_pool_heartbeat(&p->pool, now_ns, p->stale_ns, false);
}

void preload_stats(const struct preload *p, uint32_t slot, struct rl_stats *out)
{
	rl_pool_tenant_stats(&p->pool, slot, out);
}

uint64_t preload_split(struct preload *p, uint32_t slot, uint64_t n,
		       uint64_t kern_count, bool prefer_pool)
{
	struct rl_stats st;
	uint64_t pool_count, kd, pd;

	rl_pool_tenant_stats(&p->pool, slot, &st);
	pool_count = st.admitted + st.denied;
	/* counts reset by a fresh slot start again from zero */
	kd = kern_count >= p->kern_seen[slot] ? kern_count - p->kern_seen[slot] :
						kern_count;
	pd = pool_count >= p->pool_seen[slot] ? pool_count - p->pool_seen[slot] :
						pool_count;
	p->kern_seen[slot] = kern_count;
	p->pool_seen[slot] = pool_count;
	return rl_share_split(n, kd, pd, prefer_pool);
}

size_t preload_procs(struct preload *p, struct rl_pool_proc *out, size_t max)
{
	return rl_pool_procs(&p->pool, rl_pool_pidns(), out, max);
}

/* --- the check of connections in flight ---------------------------------- */

/*
 * The check is a walk over /proc that a process of the pool's group can
 * make long (a full table, entries naming other pid namespaces): it runs
 * in steps of at most HEAL_BUDGET reads of /proc per call of
 * preload_heal(), each call taking up where the last one stopped, so that
 * no tick of the loop that carries the heartbeat and the lease checks
 * waits for more than one step.  A check whose steps span several calls
 * judges what it found when it is done, as one check.
 */

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The socket inodes pid's fds hold, and its network namespace.  0; 1 for
 * a process gone (it holds nothing); -errno when it cannot be read.  Every
 * /proc read is counted in *reads. */
static int proc_sockets(uint32_t pid, struct heal_proc *hp, size_t *reads)
{
	char path[64], link[64];
	struct dirent *e;
	size_t cap = 0, w = 0;
	struct stat st;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%u/ns/net", pid);
	(*reads)++;
	if (stat(path, &st) < 0)
		return errno == ENOENT || errno == ESRCH ? 1 : -errno;
	hp->netns = (uint64_t)st.st_ino;
	snprintf(path, sizeof(path), "/proc/%u/fd", pid);
	(*reads)++;
	d = opendir(path);
	if (!d)
		return errno == ENOENT || errno == ESRCH ? 1 : -errno;
	while ((e = readdir(d))) {
		ssize_t n;
		unsigned long long ino;

		if (e->d_name[0] == '.')
			continue;
		(*reads)++;
		n = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (sscanf(link, "socket:[%llu]", &ino) != 1)
			continue;
		if (hp->n == cap) {
			uint64_t *v = realloc(hp->inodes, (cap ? 2 * cap : 64) *
						      sizeof(*v));

			if (!v) {
				closedir(d);
				return -ENOMEM;
			}
			hp->inodes = v;
			cap = cap ? 2 * cap : 64;
		}
		hp->inodes[hp->n++] = ino;
	}
	closedir(d);
	if (hp->n)
		qsort(hp->inodes, hp->n, sizeof(*hp->inodes), u64_cmp);
	/* one fd's copies count once: the library counts a connection once
	 * per process */
	for (size_t i = 0; i < hp->n; i++)
		if (!w || hp->inodes[w - 1] != hp->inodes[i])
			hp->inodes[w++] = hp->inodes[i];
	hp->n = w;
	return 0;
}

/* The initial pid namespace's inode (PROC_PID_INIT_INO): an agent there
 * sees every process of every namespace in its /proc. */
#define PID_INIT_INO	0xEFFFFFFCULL

/* Whether the check may read pid's files of /proc: the agent's own
 * process is never one (a pid the pool names is anything its writer
 * wants). */
static bool foreign_pid(unsigned long pid)
{
	return pid && pid <= UINT32_MAX && pid != (unsigned long)getpid();
}

/* Adds pid's sockets to the set (a pid already there adds nothing).  0 (a
 * process gone adds nothing too) or -errno. */
static int heal_add(struct heal_set *set, uint32_t pid, size_t *reads)
{
	int r;

	for (size_t i = 0; i < set->n; i++)
		if (set->pids[i] == pid)
			return 0;
	if (set->n == set->cap) {
		size_t cap = set->cap ? 2 * set->cap : RL_POOL_PROCS;
		struct heal_proc *procs = realloc(set->procs, cap * sizeof(*procs));
		uint32_t *pids;

		if (!procs)
			return -ENOMEM;
		set->procs = procs;
		pids = realloc(set->pids, cap * sizeof(*pids));
		if (!pids)
			return -ENOMEM;
		set->pids = pids;
		set->cap = cap;
	}
	memset(&set->procs[set->n], 0, sizeof(set->procs[set->n]));
	r = proc_sockets(pid, &set->procs[set->n], reads);
	if (r != 0) {
		free(set->procs[set->n].inodes);
		return r < 0 ? r : 0;
	}
	set->pids[set->n++] = pid;
	return 0;
}

static void heal_set_free(struct heal_set *set)
{
	for (size_t i = 0; i < set->n; i++)
		free(set->procs[i].inodes);
	free(set->procs);
	free(set->pids);
	memset(set, 0, sizeof(*set));
}

/* Whether process pid (of /proc) maps the pool's file. */
static bool maps_pool(const struct preload *p, const char *pid)
{
	char path[300], line[512];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%s/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		found = rl_procmaps_maps(line, major(p->pool.dev), minor(p->pool.dev),
					 (uint64_t)p->pool.ino);
		/* the rest of a line longer than the buffer */
		while (!strchr(line, '\n') && fgets(line, sizeof(line), f))
			;
	}
	fclose(f);
	return found;
}

/* The pid of /proc entry name, or 0 for an entry that is no process. */
static unsigned long proc_entry_pid(const char *name)
{
	char *end;
	unsigned long pid = strtoul(name, &end, 10);

	return *end ? 0 : pid;
}

/* One process of /proc in the scan: if it is in a pid namespace some table
 * entry names, the entries it is (NSpid's last field, its pid there) get
 * its pid here; if the table was found full, a process that maps the pool
 * joins the set.  0 or -errno. */
static int scan_one(struct preload *p, struct heal_state *h, const char *name,
		    unsigned long pid, size_t *reads)
{
	char path[300], line[256];
	struct stat st;
	FILE *f;

	if (h->want_ns) {
		bool wanted = false;

		snprintf(path, sizeof(path), "/proc/%s/ns/pid", name);
		(*reads)++;
		if (stat(path, &st) == 0)
			for (uint32_t i = 0; i < h->n_snap && !wanted; i++)
				wanted = h->snap[i].pidns == (uint64_t)st.st_ino &&
					 !h->snap[i].host;
		snprintf(path, sizeof(path), "/proc/%s/status", name);
		f = wanted ? fopen(path, "re") : NULL;
		(*reads) += wanted;
		while (f && fgets(line, sizeof(line), f)) {
			char *last;
			unsigned long nspid;

			if (strncmp(line, "NSpid:", 6) != 0)
				continue;
			last = strrchr(line, '\t');
			nspid = last ? strtoul(last + 1, NULL, 10) : 0;
			for (uint32_t i = 0; i < h->n_snap; i++)
				if (h->snap[i].pidns == (uint64_t)st.st_ino &&
				    h->snap[i].pid == nspid && !h->snap[i].host)
					h->snap[i].host = (uint32_t)pid;
			break;
		}
		if (f)
			fclose(f);
	}
	if (h->want_maps) {
		bool listed = false;

		for (uint32_t i = 0; i < h->n_snap && !listed; i++)
			listed = h->snap[i].host == pid;
		(*reads)++;
		if (!listed && maps_pool(p, name))
			return heal_add(&h->set, (uint32_t)pid, reads);
	}
	return 0;
}

/* Adds to found[] the capped connections the processes of procs[] in the
 * network namespace of procs[first] hold, from pid's socket table.  Every
 * slot the pool's rules answer is checked against the agent's own count
 * of slots before it is counted. */
static int count_netns(struct preload *p, struct heal_proc *procs, size_t n,
		       size_t first, uint32_t pid, int64_t *found, size_t *reads)
{
	for (int v6 = 0; v6 < 2; v6++) {
		char path[64], line[512];
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%u/net/tcp%s", pid,
			 v6 ? "6" : "");
		(*reads)++;
		f = fopen(path, "re");
		if (!f)
			return -errno;
		while (fgets(line, sizeof(line), f)) {
			struct rl_procnet_sock so;
			int t;

			if (!rl_procnet_parse(line, v6, &so) || !so.inode ||
			    so.state == 10 /* listening */)
				continue;
			for (size_t i = first; i < n; i++) {
				if (procs[i].netns != procs[first].netns ||
				    !procs[i].n ||
				    !bsearch(&so.inode, procs[i].inodes, procs[i].n,
					     sizeof(uint64_t), u64_cmp))
					continue;
				t = rl_pool_classify(&p->pool, RL_POOL_IN,
						     so.family, so.remote,
						     so.lport);
				if (t >= 0 && (uint32_t)t < p->max_tenants)
					found[t]++;
			}
		}
		fclose(f);
	}
	return 0;
}

/* The check could not look: the pool's counts alone are what the agent
 * has. */
static void conns_unknown(struct preload *p)
{
	for (uint32_t s = 0; s < p->max_tenants; s++)
		p->conns_found[s] = -1;
}

/* A check over: its state back to the start. */
static void heal_reset(struct heal_state *h)
{
	heal_set_free(&h->set);
	if (h->dir)
		closedir(h->dir);
	h->dir = NULL;
	h->phase = HEAL_IDLE;
	h->i = 0;
	h->n_snap = 0;
}

/* The start of a check: the table as it is now, copied (its pids and
 * namespaces, each entry once), and what the check must scan for.  0,
 * -EXDEV when this agent cannot see a process the table names, or 1 when
 * no tenant is capped (nothing to check). */
static int heal_begin(struct preload *p, struct heal_state *h)
{
	int64_t *counted = p->heal_counted_now;
	bool capped = false;

	for (uint32_t s = 0; s < p->max_tenants; s++) {
		const struct rl_tenant *t = &p->pool.tenants[s];

		counted[s] = __atomic_load_n(&t->conns, __ATOMIC_ACQUIRE);
		/* every capped tenant, even with nothing counted: a count a
		 * process of the pool's group lowered to 0 is one the check
		 * must look at */
		if ((__atomic_load_n(&t->flags, __ATOMIC_RELAXED) & RL_F_CONNCAP) &&
		    __atomic_load_n(&t->mode, __ATOMIC_RELAXED) != RL_MODE_NONE)
			capped = true;
	}
	if (!capped)
		return 1;
	memset(p->heal_found_now, 0, p->max_tenants * sizeof(int64_t));
	h->pidns = rl_pool_pidns();
	h->want_ns = h->want_maps = false;
	h->want_maps = __atomic_load_n(&p->pool.hdr->procs_full,
				       __ATOMIC_RELAXED) != 0;
	if (h->want_maps && h->pidns != PID_INIT_INO)
		return -EXDEV;
	h->n_snap = 0;
	for (uint32_t i = 0; i < p->pool.n_procs && i < RL_POOL_PROCS; i++) {
		const struct rl_pool_proc *s = &p->pool.procs[i];
		uint32_t pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
		uint64_t ns = __atomic_load_n(&s->pidns, __ATOMIC_RELAXED);
		bool dup = false;

		if (!pid)
			continue;
		for (uint32_t j = 0; j < h->n_snap && !dup; j++)
			dup = h->snap[j].pid == pid && h->snap[j].pidns == ns;
		if (dup)
			continue;
		h->snap[h->n_snap].pid = pid;
		h->snap[h->n_snap].pidns = ns;
		h->snap[h->n_snap].host = ns == h->pidns && foreign_pid(pid) ?
					  pid : 0;
		if (ns != h->pidns) {
			if (h->pidns != PID_INIT_INO)
				return -EXDEV;
			h->want_ns = true;
		}
		h->n_snap++;
	}
	h->phase = h->want_ns || h->want_maps ? HEAL_SCAN : HEAL_TABLE;
	h->i = 0;
	return 0;
}

/* The check's end: each tenant's count against what was found.  A count
 * above it by the same amount at two checks in a row is lowered by it. */
static void heal_judge(struct preload *p)
{
	int64_t *found = p->heal_found_now, *counted = p->heal_counted_now;

	for (uint32_t s = 0; s < p->max_tenants; s++) {
		struct rl_tenant *t = &p->pool.tenants[s];
		int64_t c = counted[s], d = c - found[s];

		p->conns_found[s] = found[s];
		if (d > 0 && p->heal_counted[s] == c &&
		    p->heal_found[s] == found[s] &&
		    __atomic_compare_exchange_n(&t->conns, &c, c - d, false,
						__ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED)) {
			p->healed += (uint64_t)d;
			log_info("preload: %lld connection(s) of slot %u given "
				 "back: closed where the library could not see",
				 (long long)d, s);
			c = -1;	/* the next check starts afresh */
		}
		p->heal_counted[s] = c;
		p->heal_found[s] = found[s];
	}
}

/* One step of the check, until budget reads of /proc are spent.  1 when
 * the check is done, 0 when it goes on at the next call, -errno. */
static int heal_step(struct preload *p, struct heal_state *h, size_t budget)
{
	size_t *rd = &h->reads;
	struct dirent *e;
	int err = 0;

	if (h->phase == HEAL_SCAN) {
		if (!h->dir) {
			(*rd)++;
			h->dir = opendir("/proc");
			if (!h->dir)
				return -errno;
		}
		while (!err && *rd < budget && (e = readdir(h->dir))) {
			unsigned long pid = proc_entry_pid(e->d_name);

			if (foreign_pid(pid))
				err = scan_one(p, h, e->d_name, pid, rd);
		}
		if (err || *rd >= budget)
			return err;
		closedir(h->dir);
		h->dir = NULL;
		h->phase = HEAL_TABLE;
		h->i = 0;
	}
	if (h->phase == HEAL_TABLE) {
		/* a process of another namespace not found holds nothing
		 * (its namespace's init died, and it with it) */
		for (; !err && h->i < h->n_snap && *rd < budget; h->i++)
			if (h->snap[h->i].host)
				err = heal_add(&h->set, h->snap[h->i].host, rd);
		if (err || h->i < h->n_snap)
			return err;
		h->phase = HEAL_COUNT;
		h->i = 0;
	}
	for (; !err && h->i < h->set.n && *rd < budget; h->i++) {
		bool seen = false;

		for (size_t j = 0; j < h->i && !seen; j++)
			seen = h->set.procs[j].netns == h->set.procs[h->i].netns;
		if (!seen)
			err = count_netns(p, h->set.procs, h->set.n, h->i,
					  h->set.pids[h->i], p->heal_found_now,
					  rd);
	}
	if (err || h->i < h->set.n)
		return err;
	return 1;
}

/* heal_step, its reads kept for the tests (heal_reads). */
static int heal_step_counted(struct preload *p, struct heal_state *h,
			     size_t budget)
{
	int r;

	h->reads = 0;
	r = heal_step(p, h, budget);
	p->heal_reads = h->reads;
	return r;
}

void preload_heal(struct preload *p)
{
	struct heal_state *h = &p->heal;
	int err = 0;

	if (h->phase == HEAL_IDLE) {
		err = heal_begin(p, h);
		if (err == 1) {
			heal_reset(h);
			conns_unknown(p);
			return;
		}
	}
	if (!err)
		err = heal_step_counted(p, h, p->heal_budget);
	if (err == 0)
		return;		/* on at the next call */
	if (err == 1) {
		heal_judge(p);
		p->heal_checks++;
	} else {
		log_debug("preload: connections in flight not checked: %s",
			  strerror(-err));
		/* not a connection is given back on a partial view */
		memset(p->heal_counted, 0, p->max_tenants * sizeof(int64_t));
		conns_unknown(p);
	}
	heal_reset(h);
}

/* A process's state as the operator reads it. */
static const char *proc_state(uint32_t flags)
{
	if (flags & (RL_POOL_P_ACCEPT | RL_POOL_P_CONNECT))
		return "governed";
	/* listened through the library, but no accept came through it:
	 * not yet, or its accepts bypass libc (io_uring, raw syscalls) */
	if (flags & RL_POOL_P_LISTEN)
		return "listening";
	return "loaded";
}

/* --- listeners the library does not run in -------------------------------- */

struct inodes {
	unsigned long *v;
	size_t n, cap;
};

/* The inodes of the TCP sockets listening in this network namespace. */
static void listening_inodes(struct inodes *in)
{
	static const char *const files[] = { "/proc/net/tcp", "/proc/net/tcp6" };

	for (size_t f = 0; f < 2; f++) {
		FILE *fp = fopen(files[f], "re");
		char line[512];

		if (!fp)
			continue;
		while (fgets(line, sizeof(line), fp)) {
			unsigned int st;
			unsigned long ino;

			/* sl local rem st tx:rx tr:when retr uid timeout inode */
			if (sscanf(line, "%*s %*s %*s %x %*s %*s %*s %*s %*s %lu",
				   &st, &ino) != 2 || st != 0x0a || !ino)
				continue;
			if (in->n == in->cap) {
				size_t cap = in->cap ? in->cap * 2 : 64;
				unsigned long *v = realloc(in->v, cap * sizeof(*v));

				if (!v)
					break;
				in->v = v;
				in->cap = cap;
			}
			in->v[in->n++] = ino;
		}
		fclose(fp);
	}
}

/* Whether process pid holds one of the sockets in. */
static bool holds_one(const char *pid, const struct inodes *in)
{
	char path[600], link[64];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%s/fd", pid);
	d = opendir(path);
	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		unsigned long ino;
		ssize_t n;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd/%s", pid, e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (sscanf(link, "socket:[%lu]", &ino) != 1)
			continue;
		for (size_t i = 0; i < in->n && !found; i++)
			found = in->v[i] == ino;
	}
	closedir(d);
	return found;
}

/* Why the library cannot be in process pid, as far as /proc tells: its
 * program is statically linked (no PT_INTERP: LD_PRELOAD never reaches
 * it) or setuid (the loader ignores LD_PRELOAD), or else it was started
 * without the library; "loaded" when the library is there but nothing
 * went through it yet (a socket inherited, accepts outside libc). */
static const char *why_not(const char *pid)
{
	char path[300], line[512];
	Elf64_Ehdr eh;
	struct stat st;
	bool loaded = false, interp = false;
	FILE *fp;
	int fd;

	snprintf(path, sizeof(path), "/proc/%s/maps", pid);
	fp = fopen(path, "re");
	while (fp && !loaded && fgets(line, sizeof(line), fp))
		loaded = strstr(line, "librlpreload") != NULL;
	if (fp)
		fclose(fp);
	if (loaded)
		return "loaded";
	snprintf(path, sizeof(path), "/proc/%s/exe", pid);
	if (stat(path, &st) == 0 && (st.st_mode & (S_ISUID | S_ISGID)))
		return "setuid";
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) &&
	    !memcmp(eh.e_ident, ELFMAG, SELFMAG) &&
	    eh.e_ident[EI_CLASS] == ELFCLASS64 &&
	    eh.e_phentsize == sizeof(Elf64_Phdr)) {
		for (unsigned int i = 0; i < eh.e_phnum && !interp; i++) {
			Elf64_Phdr ph;

			if (pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff +
			    (uint64_t)i * sizeof(ph))) != (ssize_t)sizeof(ph))
				break;
			interp = ph.p_type == PT_INTERP;
		}
		close(fd);
		return interp ? "not preloaded" : "static";
	}
	if (fd >= 0)
		close(fd);
	return "not preloaded";
}

/* Processes listening on TCP in this network namespace that are not in the
 * pool's table, with why_not(), appended to arr. */
static void unseen_listeners(const struct rl_pool_proc *seen, size_t n_seen,
			     uint64_t pidns, json_t *arr)
{
	struct inodes in = { 0 };
	struct dirent *e;
	DIR *d;

	listening_inodes(&in);
	d = in.n ? opendir("/proc") : NULL;
	while (d && (e = readdir(d))) {
		char *end, comm[32] = "?", path[64];
		unsigned long pid = strtoul(e->d_name, &end, 10);
		bool known = false;
		FILE *fp;

		if (*end || !pid || pid == (unsigned long)getpid())
			continue;
		for (size_t i = 0; i < n_seen && !known; i++)
			known = seen[i].pid == pid && seen[i].pidns == pidns;
		if (known || !holds_one(e->d_name, &in))
			continue;
		snprintf(path, sizeof(path), "/proc/%lu/comm", pid);
		fp = fopen(path, "re");
		if (fp) {
			if (fgets(comm, sizeof(comm), fp))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(fp);
		}
		json_array_append_new(arr, json_pack("{s:I,s:s,s:s}",
			"pid", (json_int_t)pid, "name", comm,
			"state", why_not(e->d_name)));
	}
	if (d)
		closedir(d);
	free(in.v);
}

json_t *preload_status_json(struct preload *p, uint64_t now)
{
	struct rl_pool_proc *procs = calloc(RL_POOL_PROCS, sizeof(*procs));
	json_t *arr = json_array(), *unseen, *r;
	size_t n = procs ? preload_procs(p, procs, RL_POOL_PROCS) : 0;
	uint64_t pidns = rl_pool_pidns(), forged = 0;

	for (size_t i = 0; i < n && i < RL_POOL_PROCS; i++) {
		const struct rl_pool_proc *s = &procs[i];
		char comm[sizeof(s->comm) + 1];

		memcpy(comm, s->comm, sizeof(s->comm));
		comm[sizeof(s->comm)] = '\0';
		json_array_append_new(arr, json_pack(
			"{s:I,s:s,s:b,s:s,s:I,s:I,s:I}",
			"pid", (json_int_t)s->pid, "name", comm,
			/* its pid is of another namespace: a container's */
			"other_pid_namespace", s->pidns != pidns,
			"state", proc_state(s->flags),
			"admitted", (json_int_t)s->admitted,
			"denied", (json_int_t)s->denied,
			"idle_s", s->seen_ns && now > s->seen_ns ?
				  (json_int_t)((now - s->seen_ns) / 1000000000ULL) :
				  (json_int_t)-1));
	}
	/* what listens here without the library: the operator's blind spot */
	unseen = json_array();
	unseen_listeners(procs, procs ? n : 0, pidns, unseen);
	free(procs);
	for (uint32_t s = 0; s < p->max_tenants; s++)
		forged += p->forged[s];
	r = json_pack("{s:s,s:o,s:o,s:I,s:I,s:s?,s:I,s:I,s:I}", "pool", p->path,
		      "processes", arr, "ungoverned", unseen,
		      "forged_tokens", (json_int_t)forged,
		      /* the last loss, and how often the pool was made anew */
		      "remade", (json_int_t)p->remade,
		      "lost", p->remade || p->lost ? p->lost_why : NULL,
		      "lost_s", p->remade || p->lost ?
				(json_int_t)((now - p->lost_ns) / 1000000000ULL) :
				(json_int_t)-1,
		      "other_layout", (json_int_t)__atomic_load_n(
			      &p->pool.hdr->pre.foreign, __ATOMIC_RELAXED),
		      "table_full", (json_int_t)__atomic_load_n(
			      &p->pool.hdr->procs_full, __ATOMIC_RELAXED));
	return r;
}
