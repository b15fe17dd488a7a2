// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The preload pool, the reader's side: mapping and checking the file, and
 * the decision librlpreload.so makes for every accepted connection.  Built
 * into the library as well as librl.a, so nothing here allocates, locks or
 * logs: it may run in a signal handler or in the child of a fork.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "classify.h"
#include "pool.h"

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

int rl_pool_layout(uint32_t max_tenants, uint32_t cls_half, uint32_t max_procs,
		   struct rl_pool_hdr *out)
{
	uint64_t off;

	if (!max_tenants || max_tenants > RL_TENANTS_LIMIT ||
	    cls_half < RL_CLS_GROUPS_MIN || cls_half > RL_CLS_GROUPS_MAX ||
	    !max_procs || max_procs > 65536)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->pre.magic = RL_POOL_MAGIC;
	out->pre.version = RL_POOL_VERSION;
	out->pre.abi = RL_ABI_VERSION;
	out->max_tenants = max_tenants;
	out->cls_half = cls_half;
	out->max_procs = max_procs;
	off = RL_POOL_HDR_BYTES;
	out->off_tenants = off;
	off += (uint64_t)max_tenants * sizeof(struct rl_tenant);
	out->off_stats = off;
	off += (uint64_t)max_tenants * sizeof(struct rl_stats);
	out->off_procs = off;
	off += (uint64_t)max_procs * sizeof(struct rl_pool_proc);
	/* the classifiers on pages of their own: most of them is never
	 * touched, and tmpfs does not allocate pages nobody wrote */
	off = align_up(off, 4096);
	for (int d = 0; d < 2; d++) {
		out->off_cls[d] = off;
		off += 2ULL * cls_half * sizeof(struct rl_cls_group);
	}
	out->pre.size = off;
	return 0;
}

/* Whether hdr (a copy of a header read from a file of file_len bytes) is a
 * pool of this layout whose every part lies inside the file; want is then
 * its layout. */
static int check(const struct rl_pool_hdr *hdr, uint64_t file_len,
		 struct rl_pool_hdr *want_out)
{
	struct rl_pool_hdr want;

	if (rl_pool_layout(hdr->max_tenants, hdr->cls_half, hdr->max_procs,
			   &want))
		return -EBADMSG;
	*want_out = want;
	if (hdr->pre.size != want.pre.size || file_len < want.pre.size ||
	    hdr->off_tenants != want.off_tenants ||
	    hdr->off_stats != want.off_stats ||
	    hdr->off_procs != want.off_procs ||
	    hdr->off_cls[0] != want.off_cls[0] || hdr->off_cls[1] != want.off_cls[1])
		return -EBADMSG;
	return 0;
}

/* A copy of the header at base, word by word (its writers store with
 * atomics; a memcpy would race with them). */
static void hdr_copy(struct rl_pool_hdr *o, const struct rl_pool_hdr *h)
{
	const __u32 *in = (const __u32 *)h;
	__u32 *out = (__u32 *)o;

	for (size_t i = 0; i < sizeof(*o) / sizeof(__u32); i++)
		out[i] = __atomic_load_n(&in[i], __ATOMIC_RELAXED);
}

int rl_pool_map(struct rl_pool *p, const char *path)
{
	struct rl_pool_preamble *pre;
	struct rl_pool_hdr *hdr, h, want;
	struct stat st;
	void *base;
	size_t len;
	int fd, err;

	fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	/* a pool is the agent's, which runs as root: a file of anyone else
	 * (a member of the group that put its own there) is not one */
	if (st.st_uid != 0) {
		close(fd);
		return -EPERM;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < RL_POOL_HDR_BYTES) {
		close(fd);
		return -EBADMSG;
	}
	/* the header alone first: the rest is mapped by its checked size */
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		close(fd);
		return -EBADMSG;
	}
	pre = &h.pre;
	if (pre->magic != RL_POOL_MAGIC) {
		close(fd);
		return -EBADMSG;
	}
	len = RL_POOL_HDR_BYTES;
	if (pre->version == RL_POOL_VERSION && pre->abi == RL_ABI_VERSION) {
		err = check(&h, (uint64_t)st.st_size, &want);
		if (err) {
			close(fd);
			return err;
		}
		len = (size_t)want.pre.size;
	}
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	err = -errno;
	close(fd);
	if (base == MAP_FAILED)
		return err;
	hdr = base;
	if (len == RL_POOL_HDR_BYTES) {
		/* of another layout: counted there for `rlctl status` */
		__atomic_fetch_add(&hdr->pre.foreign, 1, __ATOMIC_RELAXED);
		munmap(base, len);
		return -EPROTO;
	}
	/* the header as mapped, read once more: it may have been rewritten
	 * since the read above, and only a layout that held in both is
	 * taken (its sizes from the copy, never from the file again) */
	hdr_copy(&h, hdr);
	if (check(&h, (uint64_t)len, &want) || want.pre.size != len) {
		munmap(base, len);
		return -EBADMSG;
	}
	p->base = base;
	p->len = len;
	p->n_tenants = want.max_tenants;
	p->cls_half = want.cls_half;
	p->n_procs = want.max_procs;
	p->hdr = hdr;
	p->tenants = (struct rl_tenant *)((char *)base + want.off_tenants);
	p->stats = (struct rl_stats *)((char *)base + want.off_stats);
	p->procs = (struct rl_pool_proc *)((char *)base + want.off_procs);
	for (int d = 0; d < 2; d++)
		p->cls[d] = (struct rl_cls_group *)((char *)base + want.off_cls[d]);
	p->dev = st.st_dev;
	p->ino = st.st_ino;
	return 0;
}

void rl_pool_unmap(struct rl_pool *p)
{
	if (p->base)
		munmap(p->base, p->len);
	memset(p, 0, sizeof(*p));
}

uint64_t rl_pool_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * RL_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

int rl_pool_classify(const struct rl_pool *p, enum rl_pool_dir dir, int family,
		     const uint8_t *addr, uint16_t port)
{
	struct rl_pool_cls *c = &p->hdr->cls[dir & 1];
	uint32_t half = p->cls_half;

	/* A rule change is rare and takes microseconds: a few walks always
	 * find a quiet moment.  One that never does answers "no rule". */
	for (int tries = 0; tries < 8; tries++) {
		uint32_t s1 = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		uint32_t act = __atomic_load_n(&c->active, __ATOMIC_ACQUIRE) & 1;
		uint32_t n = __atomic_load_n(&c->groups[act], __ATOMIC_RELAXED);
		int t;

		if (n > half)
			n = half;
		t = rl_cls_walk(p->cls[dir & 1] + (size_t)act * half, n, family,
				addr, port);
		/* the walk's reads before the second look at the count */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) - s1 <= 1)
			return t >= 0 && (uint32_t)t < p->n_tenants ? t : -1;
	}
	return -1;
}

bool rl_pool_needs_port(const struct rl_pool *p, enum rl_pool_dir dir)
{
	struct rl_pool_cls *c = &p->hdr->cls[dir & 1];
	uint32_t act = __atomic_load_n(&c->active, __ATOMIC_ACQUIRE) & 1;

	/* a change under way may be adding the first port rule: look at both */
	return __atomic_load_n(&c->columns[act], __ATOMIC_RELAXED) ||
	       (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) & 1);
}

bool rl_pool_has_rules(const struct rl_pool *p, enum rl_pool_dir dir)
{
	struct rl_pool_cls *c = &p->hdr->cls[dir & 1];
	uint32_t act = __atomic_load_n(&c->active, __ATOMIC_ACQUIRE) & 1;

	return __atomic_load_n(&c->rules[act], __ATOMIC_RELAXED) ||
	       (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) & 1);
}

/* The heartbeat's protocol: the agent stores heartbeat_ns, then stale_ns
 * with release (rl_agent_stamp); here stale_ns is loaded with acquire
 * first.  A stale_ns of this agent's therefore comes with a heartbeat at
 * least as new as the one stored before it: never the agent's first
 * stale_ns with the zero (or a dead agent's) heartbeat of before, which
 * would read as a dead agent for a moment.  degraded is a flag that
 * publishes nothing: relaxed. */
bool rl_pool_degraded(const struct rl_pool *p, uint64_t now)
{
	const struct rl_agent_state *a = &p->hdr->agent;
	uint64_t hb, stale;

	if (__atomic_load_n(&a->degraded, __ATOMIC_RELAXED))
		return true;
	stale = __atomic_load_n(&a->stale_ns, __ATOMIC_ACQUIRE);
	if (!stale)
		return false;
	hb = __atomic_load_n(&a->heartbeat_ns, __ATOMIC_RELAXED);
	return now > hb && now - hb > stale;
}

/* The kernel's take_gcra(): one compare-and-swap on the theoretical
 * arrival time admits.  Relaxed: tat is a counter of its own that
 * publishes nothing, and every change of it is a read-modify-write of the
 * one word (or the agent's compare-and-swap, rl_slot_configure), so none is
 * lost whatever the order other memory is seen in. */
static bool take_gcra(__u64 *tatp, uint64_t interval, uint64_t tol,
		      uint64_t now)
{
	for (int i = 0; i < 8; i++) {
		uint64_t tat = __atomic_load_n(tatp, __ATOMIC_RELAXED);
		uint64_t base = tat > now ? tat : now;
		uint64_t next = base + interval;

		if (next - now > tol)
			return false;
		if (__atomic_compare_exchange_n(tatp, &tat, next, false,
						__ATOMIC_RELAXED,
						__ATOMIC_RELAXED))
			return true;
	}
	/* eight processes beat us to it in a row: the bucket is hot */
	return false;
}

/* The kernel's take_leased(), as a compare-and-swap: the count never dips
 * below what is there, not even for a moment, so the agent never reads it
 * low and then, once a failed take is put back, higher than its ledger
 * (which it would count as forged).  A swap fails only when another
 * process took a token (or the agent changed the count) meanwhile: some
 * take always gets through.  The low-water "event" is the flag itself: the
 * agent looks at lowwater_armed of every leased tenant often (there is no
 * ring buffer to wake it from here).
 * Relaxed throughout: the count is one word that every side changes only
 * by read-modify-writes (the agent's adds and compare-and-swaps,
 * rl_slot_tokens_add, rl_ledger_trim), which never lose one another
 * whatever the CPU, and no other memory is published through it.  The
 * flag says only "spent down to the mark": the agent acts on the count it
 * reads itself, never on memory written before the flag. */
static bool take_leased(struct rl_tenant *t, __s64 floor)
{
	__s64 old = __atomic_load_n(&t->tokens, __ATOMIC_RELAXED), left;

	/* down to floor: 0, the last token; -overdraft, into the overdraft */
	do {
		if (old <= floor) {
			left = old;
			break;
		}
		left = old - 1;
	} while (!__atomic_compare_exchange_n(&t->tokens, &old, left, false,
					      __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	if (left <= __atomic_load_n(&t->lowwater, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&t->lowwater_armed, __ATOMIC_RELAXED))
		__atomic_store_n(&t->lowwater_armed, 0, __ATOMIC_RELAXED);
	return old > floor;
}

/* The fail policy's verdict.  rl_slot_fail stores the static share (its
 * interval and burst) before the policy, with release: loaded here with
 * acquire first, the policy comes with a share at least as new. */
static bool take_failed(struct rl_tenant *t, uint64_t now)
{
	uint32_t fail = __atomic_load_n(&t->fail, __ATOMIC_ACQUIRE);
	uint64_t iv;

	switch (fail) {
	case RL_FAIL_ALLOW:
		return true;
	case RL_FAIL_DENY:
		return false;
	default:
		iv = __atomic_load_n(&t->fail_interval_ns, __ATOMIC_RELAXED);
		return take_gcra(&t->fail_tat, iv,
				 iv * __atomic_load_n(&t->fail_burst,
						      __ATOMIC_RELAXED), now);
	}
}

static void count(__u64 *c)
{
	__atomic_fetch_add(c, 1, __ATOMIC_RELAXED);
}

enum rl_pool_verdict rl_pool_take(struct rl_pool *p, uint32_t slot,
				  uint64_t now)
{
	struct rl_tenant *t;
	struct rl_stats *st;
	uint32_t mode;
	bool ok;

	if (slot >= p->n_tenants)
		return RL_POOL_PASS;
	t = &p->tenants[slot];
	st = &p->stats[slot];
	/* rl_slot_configure stores the mode last, with release: a tenant
	 * seen live comes with the configuration written before it */
	mode = __atomic_load_n(&t->mode, __ATOMIC_ACQUIRE);
	if (mode == RL_MODE_STANDALONE) {
		ok = take_gcra(&t->tat, __atomic_load_n(&t->interval_ns,
							__ATOMIC_RELAXED),
			       __atomic_load_n(&t->tolerance_ns, __ATOMIC_RELAXED),
			       now);
	} else if (mode == RL_MODE_LEASED) {
		int64_t od;

		/* Leased tokens first, even while degraded, as the kernel.
		 * Past the last one, the fail policy while degraded, else the
		 * overdraft (the agent gives it to the pool when it attaches
		 * nowhere, else to the kernel), which the next lease pays
		 * back. */
		ok = take_leased(t, 0);
		if (!ok && ((__atomic_load_n(&t->flags, __ATOMIC_RELAXED) &
			     RL_F_DEGRADED) || rl_pool_degraded(p, now))) {
			count(&st->degraded);
			ok = take_failed(t, now);
		} else if (!ok && (od = __atomic_load_n(&t->overdraft,
							 __ATOMIC_RELAXED)) > 0) {
			ok = take_leased(t, -od);
		}
	} else {
		return RL_POOL_PASS;
	}
	if (!ok && (__atomic_load_n(&t->flags, __ATOMIC_RELAXED) & RL_F_SHADOW)) {
		count(&st->shadow_denied);
		ok = true;
	}
	count(ok ? &st->admitted : &st->denied);
	return ok ? RL_POOL_ADMIT : RL_POOL_REFUSE;
}

/*
 * What a capped tenant may have in flight now, as the kernel's
 * conn_limit(): the slots the agent set, or while a leased tenant's agent
 * is degraded or silent, its fail policy (the static share set in advance,
 * no cap, or nothing new).
 * Standalone, the cap is the pool's alone and needs no agent, unless the
 * agent shares it with the kernel (points == 2): then the pool's slots are
 * the part the agent last gave it, moved to wherever connections wait only
 * while the agent lives.  Once its heartbeat is stale that split would
 * stay as it was, refusing here what the kernel's idle part could take:
 * the fail policy decides instead, as it does in the kernel (whose
 * conn_limit() watches the same heartbeat) - static keeps the pool's part
 * (the kernel keeps the rest: never more than the cap between them),
 * allow lifts the cap, deny admits nothing new.
 */
static int64_t conn_limit(const struct rl_pool *p, const struct rl_tenant *t,
			  uint32_t flags, uint64_t now)
{
	uint32_t mode = __atomic_load_n(&t->mode, __ATOMIC_ACQUIRE);
	bool failing;

	if (mode == RL_MODE_LEASED)
		failing = (flags & RL_F_DEGRADED) || rl_pool_degraded(p, now);
	else
		failing = __atomic_load_n(&p->hdr->points, __ATOMIC_RELAXED) == 2 &&
			  rl_pool_degraded(p, now);
	switch (failing ? __atomic_load_n(&t->fail, __ATOMIC_ACQUIRE) :
			  RL_FAIL_STATIC) {
	case RL_FAIL_ALLOW:
		return RL_CONN_NO_CAP;
	case RL_FAIL_DENY:
		return 0;
	default:
		if (failing && mode == RL_MODE_LEASED)
			return __atomic_load_n(&t->conn_fail_slots,
					       __ATOMIC_RELAXED);
		/* sequentially consistent: see rl_pool_conn_open */
		return __atomic_load_n(&t->conn_slots, __ATOMIC_SEQ_CST);
	}
}

enum rl_pool_verdict rl_pool_conn_open(struct rl_pool *p, uint32_t slot,
				       uint64_t now, uint32_t *epoch)
{
	struct rl_tenant *t;
	uint32_t flags;

	if (slot >= p->n_tenants)
		return RL_POOL_PASS;
	t = &p->tenants[slot];
	flags = __atomic_load_n(&t->flags, __ATOMIC_ACQUIRE);
	if (!(flags & RL_F_CONNCAP) ||
	    __atomic_load_n(&t->mode, __ATOMIC_ACQUIRE) == RL_MODE_NONE)
		return RL_POOL_PASS;
	/* the epoch before the reservation: a new tenant in the slot since
	 * makes the give-back a no-op, never a loss to the new one */
	*epoch = __atomic_load_n(&t->conn_epoch, __ATOMIC_ACQUIRE);
	/* The reservation, then the slots: the other half of rl_share_store's
	 * store of lowered slots, then its load of the count.  Each side a
	 * store then a load of the other's word, so both are sequentially
	 * consistent: either the agent sees this reservation or this sees
	 * the lowered slots, never neither (which acquire and release allow,
	 * in the C model and on ARM64 with ldapr).  No dearer than acq_rel:
	 * a locked add and a plain load on x86, ldaddal and ldar on ARM64. */
	if (__atomic_fetch_add(&t->conns, 1, __ATOMIC_SEQ_CST) <
	    conn_limit(p, t, flags, now))
		return RL_POOL_ADMIT;
	if (flags & RL_F_SHADOW) {
		count(&p->stats[slot].shadow_denied);
		return RL_POOL_ADMIT;
	}
	__atomic_fetch_add(&t->conns, -1, __ATOMIC_RELEASE);
	count(&p->stats[slot].denied);
	return RL_POOL_REFUSE;
}

void rl_pool_conn_close(struct rl_pool *p, uint32_t slot, uint32_t epoch)
{
	struct rl_tenant *t;

	if (slot >= p->n_tenants)
		return;
	t = &p->tenants[slot];
	if (__atomic_load_n(&t->conn_epoch, __ATOMIC_ACQUIRE) != epoch)
		return;
	if (__atomic_fetch_add(&t->conns, -1, __ATOMIC_ACQ_REL) <= 0)
		__atomic_fetch_add(&t->conns, 1, __ATOMIC_RELEASE);
}

bool rl_pool_conn_hold(struct rl_pool *p, uint32_t slot, uint32_t epoch)
{
	struct rl_tenant *t;

	if (slot >= p->n_tenants)
		return false;
	t = &p->tenants[slot];
	if (__atomic_load_n(&t->conn_epoch, __ATOMIC_ACQUIRE) != epoch)
		return false;
	__atomic_fetch_add(&t->conns, 1, __ATOMIC_ACQ_REL);
	return true;
}

uint64_t rl_pool_pidns(void)
{
	struct stat st;

	return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Whether the process of slot s, of pid namespace pidns, is gone for sure.
 * kill(pid, 0) is the one check that needs neither /proc nor the right to
 * signal it (EPERM: alive); a pid of another namespace cannot be checked. */
static bool proc_gone(const struct rl_pool_proc *s, uint64_t pidns)
{
	uint32_t pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);

	return pid && __atomic_load_n(&s->pidns, __ATOMIC_RELAXED) == pidns &&
	       kill((pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Whether slot s, of another pid namespace than pidns, has been idle so
 * long that it is taken for gone. */
static bool proc_stale(const struct rl_pool_proc *s, uint64_t pidns,
		       uint64_t now)
{
	uint64_t seen = __atomic_load_n(&s->seen_ns, __ATOMIC_RELAXED);

	if (!seen)
		seen = __atomic_load_n(&s->start_ns, __ATOMIC_RELAXED);
	return __atomic_load_n(&s->pidns, __ATOMIC_RELAXED) != pidns &&
	       now > seen && now - seen > RL_POOL_PROC_IDLE_NS;
}

struct rl_pool_proc *rl_pool_proc_claim(struct rl_pool *p, uint32_t pid,
					uint64_t pidns, const char *comm)
{
	uint32_t n = p->n_procs;
	struct rl_pool_proc *s = NULL;
	uint64_t now = rl_pool_now_ns();
	int saved = errno;

	for (uint32_t i = 0; i < n && !s; i++)
		if (__atomic_load_n(&p->procs[i].pid, __ATOMIC_ACQUIRE) == pid &&
		    __atomic_load_n(&p->procs[i].pidns, __ATOMIC_RELAXED) == pidns)
			s = &p->procs[i];
	/* free slots first, then those of processes that died, then those
	 * of other namespaces long idle */
	for (int pass = 0; pass < 3 && !s; pass++) {
		for (uint32_t i = 0; i < n && !s; i++) {
			uint32_t old = __atomic_load_n(&p->procs[i].pid,
						       __ATOMIC_ACQUIRE);
			bool take = pass == 0 ? old == 0 :
				    pass == 1 ? proc_gone(&p->procs[i], pidns) :
				    old && proc_stale(&p->procs[i], pidns, now);

			if (!take)
				continue;
			if (__atomic_compare_exchange_n(&p->procs[i].pid, &old,
							pid, false,
							__ATOMIC_ACQ_REL,
							__ATOMIC_RELAXED)) {
				s = &p->procs[i];
				__atomic_store_n(&s->flags, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&s->admitted, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&s->denied, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&s->seen_ns, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&s->start_ns, now,
						 __ATOMIC_RELAXED);
				__atomic_store_n(&s->pidns, pidns,
						 __ATOMIC_RELAXED);
				for (size_t c = 0; c < sizeof(s->comm); c++) {
					char ch = comm && c + 1 < sizeof(s->comm) ?
						  comm[c] : '\0';

					__atomic_store_n(&s->comm[c], ch,
							 __ATOMIC_RELAXED);
					if (!ch)
						comm = NULL;
				}
			}
		}
	}
	if (!s)
		__atomic_fetch_add(&p->hdr->procs_full, 1, __ATOMIC_RELAXED);
	errno = saved;
	return s;
}
