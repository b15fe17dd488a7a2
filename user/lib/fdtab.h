/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The preload library's table of a process's counted connections: which fds
 * hold a connection counted in flight in the pool, so that the last close
 * of the last copy (close, dup2 over it, close_range...) gives it back
 * once.  Private to the process; lock-free and async-signal-safe.
 */
#ifndef RL_FDTAB_H
#define RL_FDTAB_H

#include <stdbool.h>
#include <stdint.h>

/* fds 0 .. RL_FDTAB_FDS - 1 can hold a counted connection; at most
 * RL_FDTAB_CONNS connections are counted at once per process.  A
 * connection past either is handed over uncounted (`untracked`). */
#define RL_FDTAB_FDS	65536
#define RL_FDTAB_CONNS	16384

/* A counted connection: which pool view, tenant slot and cap epoch it was
 * counted in, and how many of the process's fds refer to it. */
struct rl_fdconn {
	uint32_t refs;		/* 0: a free record */
	uint32_t ready;		/* the fields below are written */
	uint32_t view;
	uint32_t slot;
	uint32_t epoch;
	uint32_t ended;		/* given back already (shutdown) */
};

struct rl_fdtab {
	uint16_t fd[RL_FDTAB_FDS];	/* 1 + the record of fd; 0: none */
	struct rl_fdconn conn[RL_FDTAB_CONNS];
	uint32_t used;			/* records below this were ever used */
	uint32_t next;			/* where the next free one is looked for */
	uint64_t untracked;		/* connections handed over uncounted */
	uint64_t unseen;		/* connections whose close was never
					 * seen (their fd came back from
					 * accept while still in the table) */
};

/* Records that fd, just accepted, holds a connection counted in (view,
 * slot, epoch).  0; 1 when fd was still in the table (closed outside libc)
 * as the last reference to a connection, copied to *gone for the caller to
 * give back; -EMFILE when fd is past the table or no record is free: the
 * caller gives the count back and hands the fd over uncounted. */
int rl_fdtab_open(struct rl_fdtab *t, int fd, uint32_t view, uint32_t slot,
		  uint32_t epoch, struct rl_fdconn *gone);

/* fd is closed: true when it held the last reference to its connection,
 * copied to *out for the caller to give back.  Call before the real close
 * (once closed, the fd number may be reused by another thread's accept). */
bool rl_fdtab_close(struct rl_fdtab *t, int fd, struct rl_fdconn *out);

/* newfd became a copy of oldfd (dup, dup2, dup3, fcntl F_DUPFD*): it refers
 * to oldfd's connection, if any.  Whatever newfd held before was closed by
 * the dup: true when that was the last reference, copied to *out. */
bool rl_fdtab_dup(struct rl_fdtab *t, int oldfd, int newfd,
		  struct rl_fdconn *out);

/* The connection of fd ended for every copy (shutdown SHUT_RDWR): true the
 * first time, *out to give back now; its last close gives nothing back. */
bool rl_fdtab_end(struct rl_fdtab *t, int fd, struct rl_fdconn *out);

/* Whether fd holds a counted connection; its record copied to *out. */
bool rl_fdtab_get(const struct rl_fdtab *t, int fd, struct rl_fdconn *out);

/* Calls fn for every connection counted (a forked child counts its copies;
 * an exiting process gives them back).  drop: the records are freed. */
void rl_fdtab_each(struct rl_fdtab *t, bool drop,
		   void (*fn)(const struct rl_fdconn *c, void *arg), void *arg);

#endif /* RL_FDTAB_H */
