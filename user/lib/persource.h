/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-source limits (RL_F_PERSOURCE in rlgate.h): a tenant's entry of
 * `src_conf` written from its policy, the reclaim rule of `sources`, a
 * source key as text, and the heaviest refused sources from `src_top`.
 * Pure: the agent and the tests do the map I/O around it.
 */
#ifndef RL_PERSOURCE_H
#define RL_PERSOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"
#include "rlgate.h"

/* Writes t's per-source limit into c (interval 0 and no masks without one),
 * keeping the overflow bucket's state unless fresh.  The interval goes
 * last: the kernel reads no half-written limit.  Safe while CPUs spend. */
void src_conf_write(struct rl_src_conf *c, const struct policy_tenant *t,
		    bool fresh);

/* The most entries of a table of `table` one of `tenants` tenants with a
 * per-source limit may hold (rl_src_ctl.share): an equal part, so that no
 * tenant's new sources, forged or not, take another's room; the whole
 * table while there is at most one.  Never 0, which the kernel reads as no
 * share at all: one entry each when there are more tenants than entries. */
static inline uint64_t src_share(uint32_t table, uint32_t tenants)
{
	if (tenants <= 1)
		return table;
	return table / tenants ? table / tenants : 1;
}

/* The masks of prefix lengths len4 and len6 (as in rl_src_conf). */
void src_masks(uint8_t len4, uint8_t len6, uint8_t mask4[16],
	       uint8_t mask6[16]);

/* Whether the entry s may be deleted at now (the coarse clock): its
 * bucket is full again, so a fresh entry would hold the same tokens (see
 * RL_SRC_TABLE). */
static inline bool src_reclaimable(const struct rl_src *s, uint64_t now)
{
	return s->tat <= now;
}

/* "192.0.2.0/24", "2001:db8:1:2::/64": the source of key k as the tenant
 * with prefix lengths len4 and len6 sees it (the full address at /32 and
 * /128 is written without a length). */
void src_key_format(const struct rl_src_key *k, uint8_t len4, uint8_t len6,
		    char *buf, size_t len);

/* One row of the heaviest refused sources. */
struct src_top_row {
	struct rl_src_key key;
	uint64_t denied;
};

/* Keeps the rows of slots[0..n) that name a source (denied > 0) of tenant
 * `tenant` (UINT32_MAX: any), heaviest first, ties by key; at most max of
 * them into out.  Returns how many. */
size_t src_top_pick(const struct rl_src_top *slots, size_t n, uint32_t tenant,
		    struct src_top_row *out, size_t max);

#endif /* RL_PERSOURCE_H */
