/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The agent's sweep of the kernel's counted connections (`conns`). */
#ifndef RL_CONNTRACK_H
#define RL_CONNTRACK_H

#include <stdint.h>

#include "kern.h"

/*
 * Ends what the kernel could not see end, giving each connection back to
 * its tenant once (the kernel may be ending it at the same moment): a
 * connection to this host with no socket left in the kernel's table past
 * RL_CONN_GRACE_NS, one through the host with no SYN or FIN seen for ttl_ns,
 * and entries of tenants deleted or uncapped since.  Called every second;
 * costs one read of the map when nothing is counted.
 */
void conntrack_sweep(struct kern *k, uint64_t ttl_ns);

struct inet_diag_msg;

/* Calls fn for every TCP socket of `family` (AF_INET or AF_INET6) in one of
 * `states` (a mask of 1 << TCP_*) of the agent's network namespace, as
 * sock_diag reports it (a listener's idiag_rqueue is its accept queue,
 * idiag_wqueue its backlog).  0, -errno, or the first non-zero fn
 * returned, which ends the walk. */
typedef int (*conntrack_diag_fn)(const struct inet_diag_msg *m, void *arg);
int conntrack_diag_dump(int family, uint32_t states, conntrack_diag_fn fn,
			void *arg);

#endif /* RL_CONNTRACK_H */
