/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A hot tenant split into k sub-buckets (shards) on different Redis slots,
 * as pure functions: each sub-bucket's share of the rate and the burst, its
 * key, which sub-bucket an agent leases from first and where it falls back
 * when that one is empty.  docs/redis.md gives the key layout and the bound.
 *
 * The split is exact: sub-bucket i of k holds total / k, plus one for the
 * first total % k of them (i < total % k), so the k shares sum to the
 * tenant's rate count and burst exactly, and no two differ by more than one.
 * Every share is at least 1 (what lease.lua accepts), so k may be at most
 * the smaller of the rate count and the burst.
 */
#ifndef RL_HOT_H
#define RL_HOT_H

#include <stddef.h>
#include <stdint.h>

#include "policy.h"

/* The most sub-buckets a tenant may be split into. */
#define HOT_SHARDS_MAX		POLICY_SHARDS_MAX

/* Sub-bucket i's share of total (a rate count or a burst) split k ways:
 * total / k, plus 1 when i < total % k.  0 when k is 0 or i >= k. */
uint64_t hot_share(uint64_t total, unsigned int k, unsigned int i);

/* Checks that tenant t can be split k ways: 1 <= k <= HOT_SHARDS_MAX, and
 * k at most t's rate count and burst (every share at least 1).  0, or
 * -EINVAL with a message naming the bad value in err (256 bytes). */
int hot_check(const struct policy_tenant *t, unsigned int k, char *err);

/* Writes sub-bucket i's limits into *sub: t with its rate count and burst
 * replaced by their shares (the period is kept). */
void hot_sub_tenant(const struct policy_tenant *t, unsigned int k,
		    unsigned int i, struct policy_tenant *sub);

/* The key of sub-bucket i of tenant name's field `what` (e.g. "bucket"):
 * rl:{t:NAME}:what for an unsplit tenant (k <= 1, the key it always had),
 * rl:{t:NAME#i}:what otherwise.  '#' is never part of a tenant name, so
 * no other tenant's key can collide; each hash tag differs, so the
 * sub-buckets spread over slots.  snprintf's return convention. */
int hot_key(char *buf, size_t len, const char *name, unsigned int k,
	    unsigned int i, const char *what);

/* An agent's own sub-bucket among k: FNV-1a (64 bits) of its identity
 * (the agent id in the registry) mod k; 0 when k <= 1. */
unsigned int hot_home(const char *identity, unsigned int k);

/* The n-th sub-bucket to lease from (n = 0 .. k-1), for an agent whose own
 * is home: home first, then the next ones in turn, wrapping
 * ((home + n) mod k), so every sub-bucket is tried once and agents of
 * different homes start their fallbacks at different sub-buckets. */
unsigned int hot_order(unsigned int home, unsigned int k, unsigned int n);

/* How long an agent waits before its next top-up of a tenant split k ways,
 * after asking its sub-buckets in turn (hot_order()) and getting got of the
 * want tokens; min_wait_ms is the shortest wait any of them advised
 * (lease_wait_ms()).  Unsplit (k <= 1): that wait, as for one bucket.
 * Split: none when the top-up came in full, since one sub-bucket running
 * low says little of the others; min_wait_ms when all k fell short. */
uint64_t hot_wait_ms(unsigned int k, uint64_t got, uint64_t want,
		     uint64_t min_wait_ms);

/*
 * Where the tokens a host holds of a split tenant came from, oldest grant
 * first, so that a refund goes back to the sub-bucket its tokens came from.
 * Held tokens are all alike: the ledger counts the oldest as spent first,
 * so what the host holds is its newest grants.  What it does not cover
 * (tokens held on credit, a record that fell off its end) counts as the
 * home sub-bucket's.  A zeroed one is empty.
 */
#define HOT_LEDGER_MAX		(2 * HOT_SHARDS_MAX)

struct hot_ledger {
	unsigned int n;
	struct {
		unsigned int sub;
		uint64_t n;
	} e[HOT_LEDGER_MAX];
};

/* n tokens from sub-bucket sub were added to what the host holds, which
 * is held now (n included): the oldest records beyond held are dropped
 * as spent, and the oldest of all when the ledger is full. */
void hot_ledger_add(struct hot_ledger *l, unsigned int sub, uint64_t n,
		    uint64_t held);

/* taken tokens left the host, which held `held` before; give of them
 * (at most taken) go back to Redis, the rest paid what the host owed.
 * Adds to parts[i] (k entries) what of give goes to sub-bucket i: the
 * newest grants first, what the ledger does not cover to home.  l may be
 * NULL (all to home). */
void hot_ledger_take(struct hot_ledger *l, uint64_t held, uint64_t taken,
		     uint64_t give, unsigned int home, uint64_t *parts);

#endif /* RL_HOT_H */
