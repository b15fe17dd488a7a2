/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The preload pool, the agent's side: making or adopting the file, writing
 * tenants and rules while preloaded processes spend from it, the heartbeat,
 * and their counts read back.  One writer (the agent) at a time.
 */
#ifndef RL_POOL_WRITE_H
#define RL_POOL_WRITE_H

#include <stdbool.h>
#include <sys/types.h>

#include "pool.h"

struct policy_tenant;
struct rl_cls_image;

/*
 * Maps the pool at path for max_tenants slots and cls_half classifier
 * groups per half: the one there if it has exactly this layout (*adopted:
 * its buckets, counts and processes carry on), else a new one, written as
 * path.tmp and renamed over path so that no process maps a half-made file
 * (those still mapping the old one see its heartbeat go stale, and map the
 * new one).  The file is mode 0660 and, unless gid is -1, of group gid.
 * 0 or -errno.
 */
int rl_pool_create(struct rl_pool *p, const char *path, uint32_t max_tenants,
		   uint32_t cls_half, gid_t gid, bool *adopted);

/* Writes tenant t into slot (see rl_slot_configure); fresh also sets its
 * counts to zero. */
void rl_pool_tenant_set(struct rl_pool *p, uint32_t slot,
			const struct policy_tenant *t, bool fresh, bool leased,
			uint64_t fail_agents, uint64_t now_ns);

/* Takes slot out of service.  Call after its rules are gone. */
void rl_pool_tenant_clear(struct rl_pool *p, uint32_t slot);

/* Makes readers classify the connections of dir by img, compiled from
 * n_rules rules: written into the half not in use, then switched to (see
 * struct rl_pool_cls).  0; -ENOSPC when img needs more groups than a half
 * holds; -EINVAL for an image without its roots. */
int rl_pool_publish(struct rl_pool *p, enum rl_pool_dir dir,
		    const struct rl_cls_image *img, size_t n_rules);

/* The agent's word to readers, as kern_fleet_state() is to the kernel:
 * alive at now_ns (stale after stale_ns; 0: never stale), and degraded. */
void rl_pool_heartbeat(struct rl_pool *p, uint64_t now_ns, uint64_t stale_ns,
		       bool degraded);

/* Standalone: how many points share each capped tenant's cap (2: the
 * kernel and the pool, see rl_pool_hdr.points). */
void rl_pool_points(struct rl_pool *p, unsigned int points);

/* A tenant's counts, summed over every process. */
void rl_pool_tenant_stats(const struct rl_pool *p, uint32_t slot,
			  struct rl_stats *out);

/* Copies up to max live processes of the table into out and returns how
 * many there are; slots of processes of pid namespace pidns (the caller's)
 * that died are freed (of other namespaces, the library reclaims them once
 * long idle). */
size_t rl_pool_procs(struct rl_pool *p, uint64_t pidns,
		     struct rl_pool_proc *out, size_t max);

#endif /* RL_POOL_WRITE_H */
