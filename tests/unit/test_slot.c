/* Unit test of user/lib/slot.c's connection caps: what a slot's cap, count and epoch become as a tenant gains, changes and loses its cap, standalone and leased, as a table of steps; its share of the cap under the fail policy; a standalone bucket retuned in place (overload shedding), its tokens and the part of one kept. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "slot.h"
#include "check.h"

/* A tenant of 10/s, burst 10, nothing else. */
static void policy_plain(struct policy_tenant *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "t");
	t->rate.count = 10;
	t->rate.period_s = 1;
	t->burst = 10;
}

static void test_conn_caps(void)
{
	static const struct {
		const char *what;
		bool fresh, leased, shadow;
		uint64_t max_conns;
		int64_t conns_before;	/* set before the step, as the kernel */
		/* after */
		uint32_t flags;
		int64_t conns, slots;
		uint32_t epoch;
	} steps[] = {
		{ "new tenant with a cap of 20", true, false, false, 20, 0,
		  RL_F_CONNCAP, 0, 20, 1 },
		{ "cap raised to 30 with 5 in flight: the count stays", false, false,
		  false, 30, 5, RL_F_CONNCAP, 5, 30, 1 },
		{ "shadow on: the cap and the count stay", false, false, true, 30, 5,
		  RL_F_SHADOW | RL_F_CONNCAP, 5, 30, 1 },
		{ "cap removed: a new epoch, nothing counted", false, false, false, 0,
		  5, 0, 0, 0, 2 },
		{ "cap set again: another epoch, from zero", false, false, false, 10,
		  0, RL_F_CONNCAP, 0, 10, 3 },
		{ "the slot given to a new tenant: a new epoch", true, false, false,
		  10, 7, RL_F_CONNCAP, 0, 10, 4 },
		{ "leased: a new tenant holds no slots yet", true, true, false, 10,
		  0, RL_F_CONNCAP, 0, 0, 5 },
	};
	struct rl_tenant rt;
	struct policy_tenant t;

	memset(&rt, 0, sizeof(rt));
	policy_plain(&t);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		t.max_conns = steps[i].max_conns;
		t.shadow = steps[i].shadow;
		rt.conns = steps[i].conns_before;
		rl_slot_configure(&rt, &t, steps[i].fresh, steps[i].leased, false, 1, 1000);
		CHECK((rt.flags & (RL_F_SHADOW | RL_F_CONNCAP)) == steps[i].flags &&
		      rt.conns == steps[i].conns && rt.conn_slots == steps[i].slots &&
		      rt.conn_epoch == steps[i].epoch,
		      "%s: flags %#x conns %lld slots %lld epoch %u; want %#x %lld "
		      "%lld %u", steps[i].what, rt.flags, (long long)rt.conns,
		      (long long)rt.conn_slots, rt.conn_epoch, steps[i].flags,
		      (long long)steps[i].conns, (long long)steps[i].slots,
		      steps[i].epoch);
	}

	/* leased: the slots are the broker's, a new number leaves them */
	rt.conn_slots = 4;
	t.max_conns = 40;
	rl_slot_configure(&rt, &t, false, true, false, 1, 1000);
	CHECK(rt.conn_slots == 4, "leased: a new cap changed the slots held "
	      "(%lld)", (long long)rt.conn_slots);
	/* a shard's degraded flag is the broker's: kept, unless the slot is
	 * new */
	rt.flags |= RL_F_DEGRADED;
	rl_slot_configure(&rt, &t, false, true, false, 1, 1000);
	CHECK(rt.flags & RL_F_DEGRADED, "degraded flag lost on a change");
	rl_slot_configure(&rt, &t, true, true, false, 1, 1000);
	CHECK(!(rt.flags & RL_F_DEGRADED), "degraded flag kept by a new tenant");
}

/* The static share of the cap the kernel falls back on once the agent's
 * heartbeat is stale: set with the fail policy, following the fleet's size,
 * at least 1 while capped, 0 without a cap. */
static void test_conn_fail_slots(void)
{
	static const struct {
		uint64_t max_conns, agents;
		int64_t want;
	} rows[] = {
		{ 50, 3, 16 }, { 50, 1, 50 }, { 50, 0, 50 }, { 2, 5, 1 },
		{ 0, 3, 0 },
	};
	struct rl_tenant rt;
	struct policy_tenant t;

	policy_plain(&t);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		memset(&rt, 0, sizeof(rt));
		t.max_conns = rows[i].max_conns;
		rl_slot_configure(&rt, &t, true, true, false, rows[i].agents, 1000);
		CHECK(rt.conn_fail_slots == rows[i].want, "cap %llu, %llu "
		      "agents: fail slots %lld, want %lld",
		      (unsigned long long)rows[i].max_conns,
		      (unsigned long long)rows[i].agents,
		      (long long)rt.conn_fail_slots, (long long)rows[i].want);
	}
	/* the fleet grows: the share shrinks without a new configuration */
	t.max_conns = 50;
	rl_slot_fail(&rt, &t, 5);
	CHECK(rt.conn_fail_slots == 10, "5 agents: fail slots %lld, want 10",
	      (long long)rt.conn_fail_slots);
}

/* The bound on connections in flight above the cap across the fleet: every
 * host but one admitting the whole cap (its free slots) at once, whatever
 * the fail policy but allow, which has none. */
static void test_conn_bound(void)
{
	static const struct {
		uint64_t max_conns, agents;
		enum policy_fail fail;
		uint64_t want;
	} rows[] = {
		{ 30, 3, POLICY_FAIL_STATIC, 60 }, { 30, 1, POLICY_FAIL_STATIC, 0 },
		{ 30, 0, POLICY_FAIL_STATIC, 0 }, { 2, 5, POLICY_FAIL_STATIC, 8 },
		{ 30, 3, POLICY_FAIL_DENY, 60 }, { 30, 3, POLICY_FAIL_ALLOW, UINT64_MAX },
		{ 0, 3, POLICY_FAIL_ALLOW, 0 },
	};
	struct policy_tenant t;

	policy_plain(&t);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		uint64_t got;

		t.max_conns = rows[i].max_conns;
		t.fail = rows[i].fail;
		got = policy_conn_bound(&t, rows[i].agents);
		CHECK(got == rows[i].want, "cap %llu, %llu agents, fail %d: bound "
		      "%llu, want %llu", (unsigned long long)rows[i].max_conns,
		      (unsigned long long)rows[i].agents, rows[i].fail,
		      (unsigned long long)got, (unsigned long long)rows[i].want);
	}
}

#define MS	1000000ULL

/* rl_slot_retune(): what a bucket holds stays (at most the new burst),
 * the part of a token it has refilled too, and its policy's limits give
 * back what the held ones left. */
static void test_retune(void)
{
	struct policy_tenant t;
	struct rl_tenant rt;
	uint64_t now = 1000 * MS;
	uint32_t gen;

	memset(&rt, 0, sizeof(rt));
	policy_plain(&t);		/* 10/s, burst 10: full at the start */
	t.rate.count = 1000;
	t.burst = 100;
	rl_slot_configure(&rt, &t, true, false, false, 1, now);
	CHECK(rl_slot_tokens(&rt, now) == 100, "a new bucket holds %llu, not 100",
	      (unsigned long long)rl_slot_tokens(&rt, now));

	/* held to 10/s, burst 3: the full bucket keeps 3 */
	rl_slot_retune(&rt, 100 * MS, 3, now);
	CHECK(rl_slot_tokens(&rt, now) == 3, "held: %llu tokens, expected 3",
	      (unsigned long long)rl_slot_tokens(&rt, now));
	/* spent: the next token a full interval later */
	rt.tat = now + 3 * 100 * MS;
	CHECK(rl_slot_tokens(&rt, now + 99 * MS) == 0 &&
	      rl_slot_tokens(&rt, now + 100 * MS) == 1,
	      "held and spent: a token after 100 ms");

	/* half a token refilled, then retuned to 110 ms: the half is kept,
	 * the next token 55 ms later rather than 110 */
	now += 50 * MS;
	gen = rt.generation;
	rl_slot_retune(&rt, 110 * MS, 3, now);
	CHECK(rt.generation == gen + 1, "a retune bumps the generation");
	CHECK(rl_slot_tokens(&rt, now + 54 * MS) == 0 &&
	      rl_slot_tokens(&rt, now + 55 * MS) == 1,
	      "retuned: a token after %s ms, expected 55",
	      rl_slot_tokens(&rt, now + 54 * MS) ? "< 55" : "> 55");

	/* the same limits again: nothing written */
	gen = rt.generation;
	rl_slot_retune(&rt, 110 * MS, 3, now);
	CHECK(rt.generation == gen, "a retune to the same limits wrote");

	/* given back 1000/s, burst 100: what it held (about half a token)
	 * in the new units, then the policy's refill */
	rl_slot_retune(&rt, MS, 100, now);
	CHECK(rl_slot_tokens(&rt, now) == 0 &&
	      rl_slot_tokens(&rt, now + 20 * MS) == 20,
	      "given back: %llu tokens after 20 ms, expected 20",
	      (unsigned long long)rl_slot_tokens(&rt, now + 20 * MS));
	CHECK(rl_slot_tokens(&rt, now + 1000 * MS) == 100,
	      "given back: refills to its burst of 100");
}

int main(void)
{
	CHECK_RUN(test_conn_bound);
	CHECK_RUN(test_conn_caps);
	CHECK_RUN(test_conn_fail_slots);
	CHECK_RUN(test_retune);
	return check_exit();
}
