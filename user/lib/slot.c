// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Tenant slots written from a policy while readers (the kernel's CPUs, or
 * preloaded processes) spend from them with atomics: every store that
 * could race with an admission is atomic, and the mode goes last.
 */
#include "slot.h"

/* Tokens a GCRA bucket holds at now: (now + tolerance - max(tat, now)) /
 * interval, at most burst. */
static uint64_t gcra_tokens(uint64_t tat, uint64_t now, uint64_t interval,
			    uint64_t tol, uint64_t burst)
{
	uint64_t base = tat > now ? tat : now, tokens;

	if (!interval)
		return 0;
	/* After a limit was lowered, tat may lie beyond the new tolerance:
	 * that is an empty bucket, not a negative count. */
	if (now + tol <= base)
		return 0;
	tokens = (now + tol - base) / interval;
	return tokens < burst ? tokens : burst;
}

void rl_slot_fail(struct rl_tenant *rt, const struct policy_tenant *t,
		  uint64_t fail_agents)
{
	uint64_t interval;
	uint32_t burst;

	/* The reader multiplies the two: policy_fail_share keeps the product
	 * within 64 bits however many agents Redis reports. */
	policy_fail_share(t, fail_agents, &interval, &burst);
	/* the share before the policy, stored with release: a reader that
	 * loads the policy with acquire gets a share at least as new */
	__atomic_store_n(&rt->fail_interval_ns, interval, __ATOMIC_RELAXED);
	__atomic_store_n(&rt->fail_burst, burst, __ATOMIC_RELAXED);
	__atomic_store_n(&rt->conn_fail_slots,
			 (int64_t)policy_conn_fail_share(t, fail_agents),
			 __ATOMIC_RELEASE);
	__atomic_store_n(&rt->fail, t->fail == POLICY_FAIL_ALLOW ? RL_FAIL_ALLOW :
			 t->fail == POLICY_FAIL_DENY ? RL_FAIL_DENY : RL_FAIL_STATIC,
			 __ATOMIC_RELEASE);
}

/*
 * The flags, and the connection cap.  A slot that gets a new tenant, or a
 * tenant that gains or loses its cap, starts a new epoch with nothing in
 * flight: the connections counted before (or never counted) are not this
 * cap's, and when they end they give nothing back to it.  A cap that only
 * changes its number keeps what is in flight.  A new cap is in force before
 * the flag that turns it on; a removed one is off before its count goes.
 * Leased (fleet mode), the slots are what the broker holds of the fleet's
 * cap, and shared, the point's part of the host's: none at first, and kept
 * across a change of the number (never the whole cap at both points).
 */
static void rl_slot_conns(struct rl_tenant *rt, const struct policy_tenant *t,
			  bool fresh, bool held)
{
	uint32_t old = __atomic_load_n(&rt->flags, __ATOMIC_RELAXED);
	/* Whether the tenant's Redis shard is out of reach is the broker's
	 * to say, not the policy's: a new limit keeps it, a new tenant
	 * starts without. */
	uint32_t flags = (t->shadow ? RL_F_SHADOW : 0) |
			 (t->max_conns ? RL_F_CONNCAP : 0) |
			 (t->verify ? RL_F_VERIFY : 0) |
			 (t->verify == POLICY_VERIFY_ANSWER ? RL_F_ANSWER : 0) |
			 (t->src_rate.count ? RL_F_PERSOURCE : 0) |
			 (fresh ? 0 : (old & RL_F_DEGRADED));
	bool was = old & RL_F_CONNCAP;

	if (!t->max_conns)
		__atomic_store_n(&rt->flags, flags, __ATOMIC_RELEASE);
	if (fresh || was != (t->max_conns > 0)) {
		__atomic_fetch_add(&rt->conn_epoch, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&rt->conns, 0, __ATOMIC_RELEASE);
		if (held)
			__atomic_store_n(&rt->conn_slots, 0, __ATOMIC_RELEASE);
	}
	if (!held)
		__atomic_store_n(&rt->conn_slots, (int64_t)t->max_conns,
				 __ATOMIC_RELEASE);
	__atomic_store_n(&rt->flags, flags, __ATOMIC_RELEASE);
}

/* Re-expresses the tokens a standalone bucket holds at now, counted in
 * its old limits, in the new ones already stored (at most new_burst).
 * Readers admit by compare-and-swap on tat while this runs: a plain store
 * of the new value would erase every admission made since tat was read
 * (tokens minted from nothing).  So this is a compare-and-swap too: if a
 * reader moved tat, the tokens are counted again from where it left it.
 * They are counted in the old limits', which is what the bucket held them
 * in; an admission between the caller's stores and this one moved tat by
 * the new interval, a fraction of a token in the old units. */
static void rebase_tat(struct rl_tenant *rt, uint64_t old_interval,
		       uint64_t old_tol, uint64_t old_burst, uint64_t interval,
		       uint64_t new_burst, uint64_t now)
{
	uint64_t tat = __atomic_load_n(&rt->tat, __ATOMIC_ACQUIRE), next;

	do {
		uint64_t keep = gcra_tokens(tat, now, old_interval, old_tol,
					    old_burst);

		if (keep > new_burst)
			keep = new_burst;
		next = now + rt->tolerance_ns - keep * interval;
	} while (!__atomic_compare_exchange_n(&rt->tat, &tat, next, false,
					      __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
}

void rl_slot_configure(struct rl_tenant *rt, const struct policy_tenant *t,
		       bool fresh, bool leased, bool shared,
		       uint64_t fail_agents, uint64_t now)
{
	uint64_t interval = policy_interval_ns(&t->rate);
	uint64_t old_interval = rt->interval_ns, old_tol = rt->tolerance_ns;
	uint64_t old_burst = rt->burst;
	bool changed = old_interval != interval || old_burst != t->burst;
	/* A new rate or burst on a standalone bucket: keep the tokens it
	 * holds now (at most the new burst) and re-express them in the new
	 * units.  Left alone, tat would keep the old rate's meaning: after
	 * 1/h, a raise to 1000/s would still wait out the hour. */
	bool rebase = !fresh && changed && rt->mode == RL_MODE_STANDALONE &&
		      !leased;

	if (fresh) {
		/* Out of service while the bucket is reset: a reader that
		 * loads the mode from here on spends nothing until the new
		 * tenant's mode is stored (one that loaded it a moment before
		 * may still decide one connection on the slot as it changes,
		 * as a CPU of the kernel may).  Nothing of the slot's last
		 * tenant stays: its bucket, its leased tokens, and its static
		 * fail share (a deleted 1/h tenant's share, spent, would
		 * refuse its successor for an hour while degraded). */
		__atomic_store_n(&rt->mode, RL_MODE_NONE, __ATOMIC_RELEASE);
		__atomic_store_n(&rt->tat, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&rt->tokens, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&rt->fail_tat, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&rt->lowwater_armed, 0, __ATOMIC_RELAXED);
	}
	/* Readers load these while they are written: atomic stores, never
	 * torn, relaxed (the mode's release store below publishes them to a
	 * reader that finds the slot live; a reader of a live slot being
	 * changed may combine an old and a new field once, as the kernel
	 * may). */
	__atomic_store_n(&rt->action, t->action == POLICY_ACT_RST ? RL_ACT_RST :
			 RL_ACT_DROP, __ATOMIC_RELAXED);
	rl_slot_conns(rt, t, fresh, leased || shared);
	__atomic_store_n(&rt->interval_ns, interval, __ATOMIC_RELAXED);
	__atomic_store_n(&rt->burst, t->burst, __ATOMIC_RELAXED);
	/* policy_validate keeps burst x interval within 64 bits */
	__atomic_store_n(&rt->tolerance_ns, t->burst * interval, __ATOMIC_RELAXED);
	rl_slot_fail(rt, t, fail_agents);
	if (!fresh && changed)
		/* The static share of new limits starts full, as a new
		 * tenant's does: its state in the old units means nothing. */
		__atomic_store_n(&rt->fail_tat, 0, __ATOMIC_RELAXED);
	if (rebase)
		rebase_tat(rt, old_interval, old_tol, old_burst, interval,
			   t->burst, now);
	__atomic_store_n(&rt->lowwater, 0, __ATOMIC_RELAXED);
	if (leased && rt->mode != RL_MODE_LEASED)
		/* Tokens a standalone bucket held were never leased: a leased
		 * slot starts empty and arms its first low-water event. */
		__atomic_store_n(&rt->tokens, 0, __ATOMIC_RELAXED);
	if (leased)
		__atomic_store_n(&rt->lowwater_armed, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rt->generation, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&rt->mode, leased ? RL_MODE_LEASED : RL_MODE_STANDALONE,
			 __ATOMIC_RELEASE);
}

void rl_slot_retune(struct rl_tenant *rt, uint64_t interval, uint64_t burst,
		    uint64_t now)
{
	uint64_t old_interval = rt->interval_ns, old_tol = rt->tolerance_ns;
	uint64_t tat = __atomic_load_n(&rt->tat, __ATOMIC_ACQUIRE), next;

	if (old_interval == interval && rt->burst == burst)
		return;
	__atomic_store_n(&rt->interval_ns, interval, __ATOMIC_RELAXED);
	__atomic_store_n(&rt->burst, burst, __ATOMIC_RELAXED);
	__atomic_store_n(&rt->tolerance_ns, burst * interval, __ATOMIC_RELAXED);
	/* As rebase_tat, but the part of a token the bucket has refilled
	 * is kept too: a limit retuned more often than a token takes to
	 * refill would otherwise never give one. */
	do {
		uint64_t base = tat > now ? tat : now;
		double held = 0;

		if (old_interval && now + old_tol > base)
			held = (double)(now + old_tol - base) / (double)old_interval;
		if (held > (double)burst)
			held = (double)burst;
		next = now + burst * interval - (uint64_t)(held * (double)interval);
	} while (!__atomic_compare_exchange_n(&rt->tat, &tat, next, false,
					      __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	__atomic_fetch_add(&rt->generation, 1, __ATOMIC_RELEASE);
}

uint64_t rl_slot_tokens(const struct rl_tenant *rt, uint64_t now)
{
	uint32_t mode = __atomic_load_n(&rt->mode, __ATOMIC_ACQUIRE);

	if (mode == RL_MODE_LEASED) {
		int64_t t = __atomic_load_n(&rt->tokens, __ATOMIC_RELAXED);

		return t > 0 ? (uint64_t)t : 0;
	}
	if (mode != RL_MODE_STANDALONE)
		return 0;
	return gcra_tokens(__atomic_load_n(&rt->tat, __ATOMIC_RELAXED), now,
			   rt->interval_ns, rt->tolerance_ns, rt->burst);
}

void rl_slot_tokens_add(struct rl_tenant *rt, uint64_t n, int64_t lowwater)
{
	__atomic_store_n(&rt->lowwater, lowwater, __ATOMIC_RELAXED);
	__atomic_fetch_add(&rt->tokens, (int64_t)n, __ATOMIC_RELEASE);
	/* After the add: an event sent now is about the new lease. */
	__atomic_store_n(&rt->lowwater_armed, 1, __ATOMIC_RELEASE);
}

uint64_t rl_slot_tokens_take(struct rl_tenant *rt, uint64_t max)
{
	int64_t old = __atomic_load_n(&rt->tokens, __ATOMIC_ACQUIRE), take;

	/* A compare-and-swap so that only tokens that are there are taken: a
	 * reader's transient -1 (a failed spend it is about to put back) is
	 * never mistaken for a token. */
	do {
		if (old <= 0)
			return 0;
		take = max && (uint64_t)old > max ? (int64_t)max : old;
	} while (!__atomic_compare_exchange_n(&rt->tokens, &old, old - take, false,
					      __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	return (uint64_t)take;
}

uint64_t rl_share_split(uint64_t n, uint64_t kern_demand, uint64_t pool_demand,
			bool prefer_pool)
{
	unsigned __int128 share;

	if (!kern_demand && !pool_demand)
		return prefer_pool ? n : 0;
	share = (unsigned __int128)n * pool_demand / (kern_demand + pool_demand);
	/* the token rounding leaves over goes where the demand is larger */
	if (pool_demand > kern_demand && share < n &&
	    (unsigned __int128)n * pool_demand % (kern_demand + pool_demand))
		share++;
	return (uint64_t)share;
}

int64_t rl_share_balance(int64_t kern_tokens, int64_t pool_tokens,
			 bool kern_wants, bool pool_wants)
{
	if (pool_tokens <= 0 && pool_wants && kern_tokens > 0)
		return (kern_tokens + 1) / 2;
	if (kern_tokens <= 0 && kern_wants && pool_tokens > 0)
		return -((pool_tokens + 1) / 2);
	return 0;
}

int64_t rl_share_slots(int64_t n, int64_t kern, int64_t pool, int64_t pool_slots,
		       bool kern_wants, bool pool_wants, bool prefer_pool)
{
	int64_t free_;
	bool pool_has;

	if (n <= 0)
		return 0;
	kern = kern > 0 ? kern : 0;
	pool = pool > 0 ? pool : 0;
	if (prefer_pool)
		return n;
	if (kern + pool >= n)
		return kern + pool ?
			(int64_t)((unsigned __int128)n * (uint64_t)pool /
				  (uint64_t)(kern + pool)) : 0;
	free_ = n - kern - pool;
	if (free_ >= 2)
		return pool + (pool_wants && !kern_wants ? (free_ + 1) / 2 :
							    free_ / 2);
	/* the last free slot: a point that refused since the last share
	 * gets it, the other has refused nothing */
	pool_has = pool_slots > pool;
	if (kern_wants && pool_wants)
		return pool + !pool_has;
	if (kern_wants || pool_wants)
		return pool + pool_wants;
	return pool + pool_has;
}

/* Stores a point's new slots, lowered, and answers what it has in flight
 * after: a reservation made against its old slots is then seen here, or
 * the point sees the new ones. */
static int64_t conn_lower(struct rl_tenant *rt, int64_t slots)
{
	__atomic_store_n(&rt->conn_slots, slots, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&rt->conns, __ATOMIC_SEQ_CST);
}

void rl_share_store(struct rl_tenant *kt, struct rl_tenant *pt, int64_t n,
		    int64_t pn)
{
	int64_t ps = __atomic_load_n(&pt->conn_slots, __ATOMIC_RELAXED);
	int64_t ks = __atomic_load_n(&kt->conn_slots, __ATOMIC_RELAXED);
	int64_t c;

	if (n < 0)
		n = 0;
	pn = pn < 0 ? 0 : pn > n ? n : pn;
	if (pn < ps) {
		c = conn_lower(pt, pn);
		c = c < pn ? pn : c > ps ? ps : c;
		__atomic_store_n(&kt->conn_slots, n - c > 0 ? n - c : 0,
				 __ATOMIC_RELEASE);
		return;
	}
	/* the kernel may be gaining too, when n grew */
	if (ks < n - pn)
		ks = n - pn;
	c = conn_lower(kt, n - pn);
	c = c < n - pn ? n - pn : c > ks ? ks : c;
	__atomic_store_n(&pt->conn_slots, n - c > 0 ? n - c : 0,
			 __ATOMIC_RELEASE);
}

void rl_agent_stamp(struct rl_agent_state *a, uint64_t now_ns,
		    uint64_t stale_ns, bool degraded)
{
	__atomic_store_n(&a->heartbeat_ns, now_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&a->stale_ns, stale_ns, __ATOMIC_RELEASE);
	/* a flag that publishes nothing */
	__atomic_store_n(&a->degraded, degraded ? 1 : 0, __ATOMIC_RELAXED);
}
