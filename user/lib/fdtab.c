// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The table of a process's counted connections (fdtab.h).  Atomics only: a
 * signal handler or another thread may close, dup or accept at any time.
 * The fd slot is swapped before the real close, so a number the kernel
 * reuses at once for another thread's accept never loses its new entry.
 */
#include <errno.h>

#include "fdtab.h"

static bool fd_ok(int fd)
{
	return fd >= 0 && fd < RL_FDTAB_FDS;
}

/* Drops one reference of record i (1-based): true when it was the last. */
static bool unref(struct rl_fdtab *t, uint16_t i, struct rl_fdconn *out)
{
	struct rl_fdconn *c = &t->conn[i - 1];

	/* copied while our reference keeps the record ours */
	out->view = __atomic_load_n(&c->view, __ATOMIC_RELAXED);
	out->slot = __atomic_load_n(&c->slot, __ATOMIC_RELAXED);
	out->epoch = __atomic_load_n(&c->epoch, __ATOMIC_RELAXED);
	out->ready = 1;
	out->refs = 0;
	if (__atomic_fetch_sub(&c->refs, 1, __ATOMIC_ACQ_REL) != 1)
		return false;
	__atomic_store_n(&c->ready, 0, __ATOMIC_RELEASE);
	/* a connection shut down was given back then */
	return !__atomic_exchange_n(&c->ended, 0, __ATOMIC_ACQ_REL);
}

int rl_fdtab_open(struct rl_fdtab *t, int fd, uint32_t view, uint32_t slot,
		  uint32_t epoch, struct rl_fdconn *gone)
{
	uint32_t start = __atomic_load_n(&t->next, __ATOMIC_RELAXED);

	if (!fd_ok(fd))
		goto untracked;
	/* from where the last one was found: the records before it are
	 * likely still held */
	for (uint32_t n = 0; n < RL_FDTAB_CONNS; n++) {
		uint32_t i = (start + n) % RL_FDTAB_CONNS, zero = 0, used;
		struct rl_fdconn *c = &t->conn[i];
		uint16_t prev;

		if (__atomic_load_n(&c->refs, __ATOMIC_RELAXED) ||
		    !__atomic_compare_exchange_n(&c->refs, &zero, 1, false,
						 __ATOMIC_ACQUIRE,
						 __ATOMIC_RELAXED))
			continue;
		c->view = view;
		c->slot = slot;
		c->epoch = epoch;
		c->ended = 0;
		__atomic_store_n(&c->ready, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&t->next, (i + 1) % RL_FDTAB_CONNS,
				 __ATOMIC_RELAXED);
		used = __atomic_load_n(&t->used, __ATOMIC_RELAXED);
		while (used < i + 1 &&
		       !__atomic_compare_exchange_n(&t->used, &used, i + 1, false,
						    __ATOMIC_RELEASE,
						    __ATOMIC_RELAXED))
			;
		/* an fd number just accepted holds nothing: an entry there
		 * is a close this table never saw (made outside libc) */
		prev = __atomic_exchange_n(&t->fd[fd], (uint16_t)(i + 1),
					   __ATOMIC_ACQ_REL);
		if (prev && unref(t, prev, gone)) {
			__atomic_fetch_add(&t->unseen, 1, __ATOMIC_RELAXED);
			return 1;
		}
		return 0;
	}
untracked:
	__atomic_fetch_add(&t->untracked, 1, __ATOMIC_RELAXED);
	return -EMFILE;
}

bool rl_fdtab_close(struct rl_fdtab *t, int fd, struct rl_fdconn *out)
{
	uint16_t i;

	if (!fd_ok(fd) || !__atomic_load_n(&t->fd[fd], __ATOMIC_RELAXED))
		return false;
	i = __atomic_exchange_n(&t->fd[fd], 0, __ATOMIC_ACQ_REL);
	return i && unref(t, i, out);
}

bool rl_fdtab_dup(struct rl_fdtab *t, int oldfd, int newfd,
		  struct rl_fdconn *out)
{
	uint16_t i = fd_ok(oldfd) ? __atomic_load_n(&t->fd[oldfd],
						     __ATOMIC_ACQUIRE) : 0;
	uint16_t prev;

	if (oldfd == newfd || !fd_ok(newfd))
		return false;
	if (i)
		__atomic_fetch_add(&t->conn[i - 1].refs, 1, __ATOMIC_ACQ_REL);
	prev = __atomic_exchange_n(&t->fd[newfd], i, __ATOMIC_ACQ_REL);
	return prev && unref(t, prev, out);
}

bool rl_fdtab_end(struct rl_fdtab *t, int fd, struct rl_fdconn *out)
{
	uint16_t i = fd_ok(fd) ? __atomic_load_n(&t->fd[fd], __ATOMIC_ACQUIRE) : 0;
	struct rl_fdconn *c;

	if (!i)
		return false;
	c = &t->conn[i - 1];
	if (__atomic_exchange_n(&c->ended, 1, __ATOMIC_ACQ_REL))
		return false;
	*out = *c;
	return true;
}

bool rl_fdtab_get(const struct rl_fdtab *t, int fd, struct rl_fdconn *out)
{
	uint16_t i = fd_ok(fd) ? __atomic_load_n(&t->fd[fd], __ATOMIC_ACQUIRE) : 0;

	if (!i)
		return false;
	*out = t->conn[i - 1];
	return true;
}

void rl_fdtab_each(struct rl_fdtab *t, bool drop,
		   void (*fn)(const struct rl_fdconn *c, void *arg), void *arg)
{
	uint32_t used = __atomic_load_n(&t->used, __ATOMIC_ACQUIRE);

	for (uint32_t i = 0; i < used && i < RL_FDTAB_CONNS; i++) {
		struct rl_fdconn *c = &t->conn[i];

		if (!__atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) ||
		    !__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&c->ended, __ATOMIC_ACQUIRE))
			continue;
		fn(c, arg);
		if (drop) {
			__atomic_store_n(&c->ready, 0, __ATOMIC_RELAXED);
			__atomic_store_n(&c->refs, 0, __ATOMIC_RELEASE);
		}
	}
	if (drop)
		for (uint32_t fd = 0; fd < RL_FDTAB_FDS; fd++)
			if (t->fd[fd])
				__atomic_store_n(&t->fd[fd], 0, __ATOMIC_RELAXED);
}
