/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent's control socket: the agent side of docs/control-protocol.md,
 * served from the event loop, never blocking on a client.
 */
#ifndef RL_CTL_H
#define RL_CTL_H

#include <stdint.h>
#include <sys/types.h>

#include "ctl_proto.h"	/* CTL_LINE_MAX: request buffers grow lazily
			 * (malloc leaves untouched pages unbacked) */

#define CTL_MAX_CLIENTS		64
#define CTL_STALL_NS		(10ULL * 1000000000ULL)
/* A client waiting for its next request goes after this long */
#define CTL_IDLE_NS		(60ULL * 1000000000ULL)
/* With every place taken, a new client takes that of one that made no
 * progress for this long (server_ops.evict_ns) */
#define CTL_EVICT_NS		(1ULL * 1000000000ULL)
/* Connections one user other than root may hold at once: a user of the
 * control group cannot keep the others out */
#define CTL_MAX_PER_UID		(CTL_MAX_CLIENTS / 4)
/* Unread replies a client may leave queued: one that has this much and
 * sends another request is pipelining without reading, and is cut off. */
#define CTL_OUT_MAX		(1U << 20)
/* The longest one client's requests hold the loop before the rest of the
 * agent (timers, Redis, the kernel's heartbeat, other clients) gets a turn;
 * one request is always answered, however long it takes. */
#define CTL_SLICE_NS		(2ULL * 1000000ULL)

struct agent;
struct ctl;

/* Creates the socket at path (mode 0660, group gid unless it is -1; the
 * parent directory is created 0750 in that group, and an existing one must
 * be safe: state_secure_dir) and starts serving it.  Refuses if another
 * agent answers on path, or if what is there is not a socket; a stale
 * socket is replaced.  0 or -errno (logged). */
int ctl_open(struct agent *a, const char *path, gid_t gid, struct ctl **out);

/* Disconnects every client, closes and removes the socket. */
void ctl_close(struct ctl *c);

/* Housekeeping: disconnects clients stalled mid-line (or not reading their
 * replies) for CTL_STALL_NS, and idle ones after CTL_IDLE_NS. */
void ctl_tick(struct ctl *c, uint64_t now_ns);

#endif /* RL_CTL_H */
