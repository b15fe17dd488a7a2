// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The preload pool, the agent's side: making (or adopting) the file,
 * writing tenants and compiled rules into it while preloaded processes
 * spend from it, the heartbeat, and reading back their counts.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "classify.h"
#include "pool_write.h"
#include "slot.h"

/* Whether the pool at path can be taken over as it is: this layout, these
 * counts.  0 with p mapped, or -errno. */
static int adopt(struct rl_pool *p, const char *path, const struct rl_pool_hdr *want)
{
	struct rl_pool q;
	int err = rl_pool_map(&q, path);

	if (err)
		return err;
	if (q.n_tenants != want->max_tenants || q.cls_half != want->cls_half ||
	    q.n_procs != want->max_procs) {
		rl_pool_unmap(&q);
		return -EMSGSIZE;
	}
	*p = q;
	return 0;
}

int rl_pool_create(struct rl_pool *p, const char *path, uint32_t max_tenants,
		   uint32_t cls_half, gid_t gid, bool *adopted)
{
	struct rl_pool_hdr want;
	char tmp[4096];
	struct timespec ts;
	int fd, err;

	*adopted = false;
	err = rl_pool_layout(max_tenants, cls_half, RL_POOL_PROCS, &want);
	if (err)
		return err;
	if (adopt(p, path, &want) == 0) {
		*adopted = true;
		goto own;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	unlink(tmp);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	/* The header last: until its magic is there the file is refused, and
	 * until the rename nobody looks at it anyway. */
	clock_gettime(CLOCK_REALTIME, &ts);
	want.made_ns = (uint64_t)ts.tv_sec * RL_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
	if (ftruncate(fd, (off_t)want.pre.size) < 0 ||
	    (gid != (gid_t)-1 && fchown(fd, (uid_t)-1, gid) < 0) ||
	    fchmod(fd, 0660) < 0 ||
	    pwrite(fd, &want, sizeof(want), 0) != (ssize_t)sizeof(want)) {
		err = errno ? -errno : -EIO;
		close(fd);
		unlink(tmp);
		return err;
	}
	close(fd);
	if (rename(tmp, path) < 0) {
		err = -errno;
		unlink(tmp);
		return err;
	}
	err = rl_pool_map(p, path);
	if (err)
		return err;
own:
	/* by descriptor, never through a link put at path since */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		err = -errno;
	} else {
		struct stat st;

		if (fstat(fd, &st) < 0)
			err = -errno;
		else if (st.st_dev != p->dev || st.st_ino != p->ino)
			err = -ESTALE;
		else if (gid != (gid_t)-1 && fchown(fd, (uid_t)-1, gid) < 0)
			err = -errno;
		else if (fchmod(fd, 0660) < 0)
			err = -errno;
		close(fd);
	}
	if (err) {
		rl_pool_unmap(p);
		return err;
	}
	__atomic_store_n(&p->hdr->agent_pid, (uint32_t)getpid(), __ATOMIC_RELAXED);
	return 0;
}

void rl_pool_tenant_set(struct rl_pool *p, uint32_t slot,
			const struct policy_tenant *t, bool fresh, bool leased,
			uint64_t fail_agents, uint64_t now_ns)
{
	struct rl_tenant *rt = &p->tenants[slot];

	if (fresh) {
		/* out of service before its counts start again from zero */
		__atomic_store_n(&rt->mode, RL_MODE_NONE, __ATOMIC_RELEASE);
		for (size_t i = 0; i < sizeof(struct rl_stats) / sizeof(__u64); i++)
			__atomic_store_n((__u64 *)&p->stats[slot] + i, 0,
					 __ATOMIC_RELAXED);
	}
	rl_slot_configure(rt, t, fresh, leased, false, fail_agents, now_ns);
	__atomic_fetch_add(&p->hdr->generation, 1, __ATOMIC_RELEASE);
}

void rl_pool_tenant_clear(struct rl_pool *p, uint32_t slot)
{
	__atomic_store_n(&p->tenants[slot].mode, RL_MODE_NONE, __ATOMIC_RELEASE);
	__atomic_fetch_add(&p->hdr->generation, 1, __ATOMIC_RELEASE);
}

int rl_pool_publish(struct rl_pool *p, enum rl_pool_dir dir,
		    const struct rl_cls_image *img, size_t n_rules)
{
	struct rl_pool_cls *c = &p->hdr->cls[dir & 1];
	uint32_t half = p->cls_half, next;
	struct rl_cls_group *dst;

	if (!img->groups || img->n_groups < RL_CLS_POOL)
		return -EINVAL;
	if (img->n_groups > half)
		return -ENOSPC;
	next = (__atomic_load_n(&c->active, __ATOMIC_RELAXED) & 1) ^ 1;
	dst = p->cls[dir & 1] + (size_t)next * half;
	/* Odd: readers that walk across this will walk again.  The fence
	 * keeps the count's change before every store into the half below
	 * (a release fence orders the stores before it ahead of the stores
	 * after it, which a release store alone does not): a reader whose
	 * walk read any of them finds the count moved on its second look. */
	__atomic_fetch_add(&c->seq, 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	for (uint32_t g = 0; g < img->n_groups; g++)
		for (uint32_t i = 0; i < RL_CLS_FANOUT; i++)
			__atomic_store_n(&dst[g].e[i], img->groups[g].e[i],
					 __ATOMIC_RELAXED);
	__atomic_store_n(&c->groups[next], img->n_groups, __ATOMIC_RELAXED);
	__atomic_store_n(&c->columns[next], img->n_columns, __ATOMIC_RELAXED);
	__atomic_store_n(&c->rules[next], n_rules > UINT32_MAX ? UINT32_MAX :
			 (uint32_t)n_rules, __ATOMIC_RELAXED);
	/* what the half holds, published by the switch: a reader that loads
	 * `active` with acquire and finds it sees all of the above */
	__atomic_store_n(&c->active, next, __ATOMIC_RELEASE);
	/* even again, after everything of this change */
	__atomic_fetch_add(&c->seq, 1, __ATOMIC_RELEASE);
	__atomic_fetch_add(&p->hdr->generation, 1, __ATOMIC_RELEASE);
	return 0;
}

void rl_pool_heartbeat(struct rl_pool *p, uint64_t now_ns, uint64_t stale_ns,
		       bool degraded)
{
	/* as the kernel's: the readers' side is rl_pool_degraded */
	rl_agent_stamp(&p->hdr->agent, now_ns, stale_ns, degraded);
}

void rl_pool_points(struct rl_pool *p, unsigned int points)
{
	__atomic_store_n(&p->hdr->points, points, __ATOMIC_RELAXED);
}

void rl_pool_tenant_stats(const struct rl_pool *p, uint32_t slot,
			  struct rl_stats *out)
{
	const __u64 *in = (const __u64 *)&p->stats[slot];
	__u64 *o = (__u64 *)out;

	for (size_t i = 0; i < sizeof(*out) / sizeof(__u64); i++)
		o[i] = __atomic_load_n(&in[i], __ATOMIC_RELAXED);
}

/* A copy of a process slot while its process writes it: word by word,
 * each atomic (a memcpy would race with those stores).  A slot claimed at
 * that moment may mix the old process's figures with the new pid: they
 * are for display, and the next look has them right. */
static void proc_copy(struct rl_pool_proc *o, const struct rl_pool_proc *s)
{
	o->pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
	o->flags = __atomic_load_n(&s->flags, __ATOMIC_RELAXED);
	o->start_ns = __atomic_load_n(&s->start_ns, __ATOMIC_RELAXED);
	o->seen_ns = __atomic_load_n(&s->seen_ns, __ATOMIC_RELAXED);
	o->admitted = __atomic_load_n(&s->admitted, __ATOMIC_RELAXED);
	o->denied = __atomic_load_n(&s->denied, __ATOMIC_RELAXED);
	for (size_t c = 0; c < sizeof(o->comm); c++)
		o->comm[c] = __atomic_load_n(&s->comm[c], __ATOMIC_RELAXED);
	o->pidns = __atomic_load_n(&s->pidns, __ATOMIC_RELAXED);
}

size_t rl_pool_procs(struct rl_pool *p, uint64_t pidns,
		     struct rl_pool_proc *out, size_t max)
{
	size_t n = 0;

	for (uint32_t i = 0; i < p->n_procs; i++) {
		struct rl_pool_proc *s = &p->procs[i];
		uint32_t pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);

		if (!pid)
			continue;
		if (__atomic_load_n(&s->pidns, __ATOMIC_RELAXED) == pidns &&
		    kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
			/* gone: free the slot unless a new process took it */
			__atomic_compare_exchange_n(&s->pid, &pid, 0, false,
						    __ATOMIC_ACQ_REL,
						    __ATOMIC_RELAXED);
			continue;
		}
		if (n < max)
			proc_copy(&out[n], s);
		n++;
	}
	return n;
}
