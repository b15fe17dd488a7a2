/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Connection caps from user space: what the agent's sweep decides about an
 * entry of `conns` (a pure function), and giving a connection back when the
 * agent, not the kernel, sees it end.  See RL_CONNS_MAX in rlgate.h.
 */
#ifndef RL_CONNS_H
#define RL_CONNS_H

#include <stdbool.h>
#include <stdint.h>

#include "rlgate.h"

/* A connection to a local server with no socket left is forgotten once it
 * is older than this: the SYN may still be on its way to the listener. */
#define RL_CONN_GRACE_NS	(2ULL * RL_NSEC_PER_SEC)
/* A connection through the host (no local socket to ask) is forgotten
 * after this long without a SYN or FIN seen (rlagent --conn-ttl). */
#define RL_CONN_TTL_NS		(3600ULL * RL_NSEC_PER_SEC)

enum rl_conn_fate {
	RL_CONN_KEEP = 0,
	RL_CONN_STALE,		/* counted nowhere any more (its slot has
				 * another tenant or no cap, and the
				 * instance none of it): dropped, nothing
				 * to give back */
	RL_CONN_GONE,		/* the local server has no socket for it */
	RL_CONN_IDLE,		/* no local server, idle past the TTL */
};

/* What one sweep knows of an entry besides the entry. */
struct rl_conn_view {
	const struct rl_tenant *t;	/* its slot (NULL: out of range, or
					 * RL_CONN_NO_TENANT) */
	const struct rl_tenant *inst;	/* the instance limit (NULL: none) */
	bool local;		/* its server address is one of this host's */
	bool has_socket;	/* the kernel has a socket for it (not
				 * TIME_WAIT); only meaningful when local */
	uint64_t now_ns;	/* the coarse monotonic clock */
	uint64_t grace_ns, ttl_ns;
};

/* The sweep's decision on entry c.  Pure. */
enum rl_conn_fate rl_conn_judge(const struct rl_conn *c,
				const struct rl_conn_view *v);

/*
 * Deletes connection k from `conns` (fd) and, if this delete is the one
 * that succeeded, gives the connection back to its tenant in the mmap'd
 * tenant table, and to the instance limit inst (mmap'd; NULL: none) when
 * it is counted there - as the kernel does, so the agent and the kernel
 * racing on one connection give it back once.  *c, the entry as read
 * before, becomes the entry as deleted: a handshake's ACK may have set
 * RL_CONN_F_INSTANCE on it since, and that place goes back too.  Returns
 * 1 when this call removed it, 0 when it was already gone, -errno
 * otherwise.  The table holds n_tenants slots.
 */
int rl_conn_forget(int conns_fd, struct rl_tenant *tenants, uint32_t n_tenants,
		   struct rl_tenant *inst, const struct rl_flow *k,
		   struct rl_conn *c);

/* Gives one connection back to slot id of epoch (never below zero) in a
 * table of n_tenants slots. */
void rl_conn_release(struct rl_tenant *tenants, uint32_t n_tenants, uint32_t id,
		     uint32_t epoch);

#endif /* RL_CONNS_H */
