/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The tenant set's insides, shared by some of its files and by nothing
 * else; which file holds what is docs/architecture.md's source map's to
 * say.
 */
#ifndef RL_AGENT_INT_H
#define RL_AGENT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agent.h"

/* The slots a set uses, one bit each: a set of thousands of tenants is
 * asked about every slot, so asking must not walk the set. */
struct slot_map {
	uint64_t bits[RL_TENANTS_LIMIT / 64];
};

static inline void slots_of(const struct agent_tenant *ts, size_t n,
			    struct slot_map *m)
{
	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < n; i++)
		if (ts[i].slot < RL_TENANTS_LIMIT)
			m->bits[ts[i].slot / 64] |= 1ULL << (ts[i].slot % 64);
}

static inline bool slot_in(const struct slot_map *m, uint32_t slot)
{
	return slot < RL_TENANTS_LIMIT && (m->bits[slot / 64] >> (slot % 64)) & 1;
}

/* Where the names of the tenants ts[] are, for a hash of them. */
static inline struct name_recs agent_tenant_names(const struct agent_tenant *ts)
{
	return (struct name_recs){ ts ? ts->pol.name : NULL, sizeof(*ts) };
}

/* agent_state.c: waits for the reading agent_policy_read started, if any,
 * and drops what it read (a start that failed before taking it). */
void agent_policy_read_drop(struct agent *a);

/* agent_index.c: the indexes of a->tenants.  agent_index_build makes them
 * for the whole set (a->ix NULL on failure); put adds tenant i (its name,
 * claims and slot; -ENOMEM), drop removes it, moved says the tenant now at
 * `to` was at `from`. */
int agent_index_build(struct agent *a);
void agent_index_free(struct agent *a);
int agent_index_put(struct agent *a, size_t i);
void agent_index_drop(struct agent *a, size_t i);
void agent_index_moved(struct agent *a, size_t from, size_t to);
struct agent_tenant *agent_index_name(struct agent *a, const char *name);
struct agent_tenant *agent_index_slot(struct agent *a, uint32_t slot);
/* Whether a tenant holds slot. */
bool agent_index_slot_used(const struct agent *a, uint32_t slot);
/* The tenants' caps summed, how many have one and how many verify their
 * SYNs (each if not NULL). */
uint64_t agent_index_caps(const struct agent *a, uint32_t *n_capped,
			  uint32_t *n_verifying);
/* A tenant's cap and verification went from was to now (either NULL) in
 * place. */
void agent_index_recap(struct agent *a, const struct policy_tenant *was,
		       const struct policy_tenant *now);
/* The tenant other than t's namesake that claims one of t's (prefix,
 * port) in t's direction, with the conflict worded in err; or NULL. */
const struct agent_tenant *agent_index_conflict(struct agent *a,
						const struct policy_tenant *t,
						char *err);
/* rl_cls_rule_fn over the inbound claims; ctx is the agent. */
int64_t agent_index_rule(void *ctx, int family, const uint8_t *addr,
			 unsigned int plen);

/* agent.c */

/* Makes the kernel hold exactly ts where it held old.  0 or -errno (the
 * rules' -ENOSPC included). */
int agent_kern_apply(struct agent *a, const struct agent_tenant *old,
		     size_t n_old, const struct agent_tenant *ts, size_t n);

/* Replaces the tenant set with next (taken over, freed on failure), all
 * or nothing: the state file and the kernel, then the hooks. */
enum agent_code agent_commit(struct agent *a, struct agent_tenant *next,
			     size_t n, char *err);

/* The prefixes of ts[0..n) put into a new store, *s, and ts pointed at
 * them.  0, or -ENOMEM (ts unchanged, s empty). */
int agent_prefixes_of(struct agent_tenant *ts, size_t n, struct pfx_store *s);

/* Drops the prefixes no tenant of a->tenants holds, once they are most
 * of a->prefixes: no copy of a tenant made before may be used after. */
void agent_prefixes_tidy(struct agent *a);

/* A copy of the tenant set with room for extra more.  NULL when out of
 * memory. */
struct agent_tenant *agent_copy_set(const struct agent *a, size_t extra);

/* Whether t claims exactly what x claims: prefixes, ports, direction. */
bool agent_same_claims(const struct policy_tenant *x,
		       const struct policy_tenant *t);

/* The set's changes of one tenant, on the tables alone (the array, its
 * indexes, the tombstones), for agent.c and the journal's replay:
 * agent_table_put adds t at its slot, or replaces its namesake (same
 * slot), after the checks a set would make (its claims, the caps), with
 * a copy of t's prefixes in a->prefixes (t's stay the caller's):
 * 0, -EEXIST (a conflict), -EINVAL, -ENOMEM, with err.
 * agent_table_del removes name with a tombstone at version: 0, -ENOENT,
 * -ENOMEM. */
int agent_table_put(struct agent *a, const struct agent_tenant *t, char *err);
int agent_table_del(struct agent *a, const char *name, uint64_t version);

/* agent_tombs.c */

/* The fleet's version of name in the batch being applied, or 0. */
uint64_t agent_fleet_version(const struct agent *a, const char *name);

/* The fleet's batch u[0..n) is being applied (agent_fleet_version() finds
 * its names), until agent_fleet_end(). */
void agent_fleet_begin(struct agent *a, const struct agent_fleet_update *u,
		       size_t n);
void agent_fleet_end(struct agent *a);

/* The tombstones are ts[0..n) (taken over) from now on; the old ones are
 * freed. */
void agent_tombs_take(struct agent *a, struct agent_tomb *ts, size_t n);

/* Forgets name's tombstone (it is back). */
void agent_tomb_forget(struct agent *a, const char *name);

/* Remembers the deletion of name at version, the newest (the oldest go
 * past AGENT_MAX_TOMBS).  0 or -ENOMEM. */
int agent_tomb_add(struct agent *a, const char *name, uint64_t version);

/* The tombstones once next[0..n) replaces the current set.  NULL when out
 * of memory. */
struct agent_tomb *agent_next_tombs(struct agent *a, const struct agent_tenant *next,
				    size_t n, size_t *n_out);

/* agent_state.c */

/* Writes the state file of ts[0..n) and tombs[0..n_tombs) at version.  0
 * or -errno. */
int agent_save_policy(struct agent *a, const struct agent_tenant *ts, size_t n,
		      const struct agent_tomb *tombs, size_t n_tombs,
		      uint64_t version);

#define AGENT_JOURNAL_MAX	(4u << 20)	/* bytes, then policy.json anew */

/* Records the change of tenant t (new, or changed; in a->tenants
 * already) as the policy's version: a line appended to the journal, or
 * the whole state file when the journal is past its size.  0 or -errno. */
int agent_journal_tenant(struct agent *a, const struct agent_tenant *t,
			 uint64_t version);

/* Records the deletion of name (its tombstone at tomb_version) as the
 * policy's version, the same way.  0 or -errno. */
int agent_journal_del(struct agent *a, const char *name, uint64_t tomb_version,
		      uint64_t version);

#endif /* RL_AGENT_INT_H */
