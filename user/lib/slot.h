/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A tenant slot (struct rl_tenant) written from a policy, and read back:
 * the same for the kernel's `tenants` map and the preload pool, which hold
 * slots of one layout and spend from them the same way.
 */
#ifndef RL_SLOT_H
#define RL_SLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"
#include "rlgate.h"

/*
 * Writes the configuration of tenant t into rt at monotonic time now_ns.
 * fresh: the slot is new to this tenant, so its bucket starts full;
 * otherwise the bucket state is kept (changing a limit never refills or
 * empties a bucket).  leased: fleet mode, where only leased tokens are
 * spent; fail_agents divides the static fail share.  shared: the
 * connection cap is shared with the host's other point, which the caller
 * then does (rl_share_slots): its slots start at none and are otherwise
 * kept, as leased ones are.  The mode is written last, so a reader never
 * sees a half-configured tenant go live.  Safe while readers spend from rt.
 */
void rl_slot_configure(struct rl_tenant *rt, const struct policy_tenant *t,
		       bool fresh, bool leased, bool shared,
		       uint64_t fail_agents, uint64_t now_ns);

/* A standalone slot's rate and burst changed in place, its tokens kept (at
 * most the new burst), the part of one it has refilled too: what overload shedding holds a tenant to, and how
 * it gives back the policy's.  Safe while readers spend from rt; nothing
 * when both are as they are.  interval x burst within 64 bits (the
 * caller's bound: POLICY_REFILL_MAX_NS). */
void rl_slot_retune(struct rl_tenant *rt, uint64_t interval, uint64_t burst,
		    uint64_t now);

/* Writes t's fail policy and its static share among fail_agents. */
void rl_slot_fail(struct rl_tenant *rt, const struct policy_tenant *t,
		  uint64_t fail_agents);

/* Whole tokens the slot holds at now_ns: leased ones, or what the
 * standalone bucket has refilled to. */
uint64_t rl_slot_tokens(const struct rl_tenant *rt, uint64_t now_ns);

/* Leased tokens: rl_slot_tokens_add adds granted tokens and re-arms the
 * low-water mark; rl_slot_tokens_take takes up to max back (all if max is
 * 0), never more than are there, and returns how many it took.  Neither
 * can lose or mint a token however readers spend concurrently. */
void rl_slot_tokens_add(struct rl_tenant *rt, uint64_t n, int64_t lowwater);
uint64_t rl_slot_tokens_take(struct rl_tenant *rt, uint64_t max);

/*
 * A host that enforces at two points (the kernel and the preload pool)
 * holds one lease for both.  rl_share_split: how many of n granted tokens
 * go to the pool, in proportion to what each point saw since the last
 * grant (admitted + refused: refusals are demand too); with no demand seen
 * anywhere, all to the pool if prefer_pool, else all to the kernel.
 * rl_share_balance: tokens to move once a point has run dry while it has
 * demand (kern_wants, pool_wants: it saw connections since the last look)
 * and the other holds some - half of the other's (rounded up), toward the
 * dry one: > 0 from the kernel to the pool, < 0 the other way, 0 none.
 * Moving never changes the sum, so the host never holds more than it
 * leased.
 */
uint64_t rl_share_split(uint64_t n, uint64_t kern_demand, uint64_t pool_demand,
			bool prefer_pool);
int64_t rl_share_balance(int64_t kern_tokens, int64_t pool_tokens,
			 bool kern_wants, bool pool_wants);

/*
 * A host's slots of a connection cap (n: the cap standalone, what it holds
 * of the fleet's cap in Redis) shared by its two points.  Each keeps the
 * places it has in flight (kern, pool) and the free ones go where the
 * demand is: with two or more free, each point gets at least one and the
 * rest are halved (the odd one to the point that alone wants more); with
 * one free, it goes to the point that alone wants it, flips to the other
 * when both do, and otherwise stays where it is (pool_slots: the pool's
 * slots now).  A point wants a slot when it refused a connection since the
 * last share (kern_wants, pool_wants).  All to the pool if prefer_pool
 * (the agent attaches nowhere).  Fewer slots than in flight (giving back)
 * are shared in proportion, so that neither admits more.  Returns the
 * pool's part, 0 to n; the kernel's is n minus it, so the two never hold
 * more than n together.
 */
int64_t rl_share_slots(int64_t n, int64_t kern, int64_t pool, int64_t pool_slots,
		       bool kern_wants, bool pool_wants, bool prefer_pool);

/*
 * Puts pn of n slots in the pool's slot pt and the rest in the kernel's kt:
 * lowered first at the point that loses some, then the other raised by no
 * more than the first leaves free, so that the two never admit more than n
 * together even while one reserves a place at that moment (what it has in
 * flight after the lowering counts up to its old slots: past them it is
 * CPUs refusing, or a count forged in the pool, never places taken).  Each
 * side stores its word, then loads the other's: the readers' reservation
 * is a sequentially consistent add before their sequentially consistent
 * load of the slots (the kernel's __sync add is a full barrier), as the
 * store of the lowered slots here is before the count is read again, so
 * that one of the two always sees the other's.
 */
void rl_share_store(struct rl_tenant *kt, struct rl_tenant *pt, int64_t n,
		    int64_t pn);

/*
 * Stamps the agent's heartbeat into a (the kernel's `agent_state`, or the
 * preload pool's copy): now_ns, then stale_ns with release, then degraded.
 * Readers load stale_ns first, then the heartbeat (the kernel's
 * fleet_degraded(), rl_pool_degraded()): one that finds this agent's
 * stale_ns finds a heartbeat at least as new as the one stored before it,
 * never the zero (or a dead agent's) heartbeat of before with a stale_ns
 * that has just become non-zero, which would read as a dead agent for a
 * moment.
 */
void rl_agent_stamp(struct rl_agent_state *a, uint64_t now_ns,
		    uint64_t stale_ns, bool degraded);

#endif /* RL_SLOT_H */
