// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fleet mode's connection caps: each capped tenant's kernel slot may have
 * in flight what this agent holds of the fleet's cap in Redis (slots.lua),
 * taken as connections open and given back as they close, and beyond it
 * the slots no host held at the last answer (an overdraft the next holding
 * pays back); while Redis is out of reach the tenant's fail policy sets it
 * instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "log.h"

/* A holding lives this long without a renewal: three missed heartbeats, as
 * an agent's entry in the registry does.  An agent that dies loses its
 * slots after it, without anyone's help. */
#define CONN_TTL_MS	REGISTRY_TTL_MS
/* After Redis granted less than asked (the cap is taken), ask again no
 * sooner than this: slots given back elsewhere are found within it, and a
 * starved tenant costs Redis four calls a second, not twenty. */
#define CONN_STARVED_NS	(250ULL * 1000000ULL)

/* What the fail policy lets the kernel have in flight while the tenant's
 * Redis is out of reach: its share of the cap (static), no cap (allow), or
 * nothing new (deny). */
static int64_t conn_fail_slots(const struct broker *b, const struct policy_tenant *p)
{
	switch (p->fail) {
	case POLICY_FAIL_ALLOW:
		return RL_CONNS_MAX;
	case POLICY_FAIL_DENY:
		return 0;
	default:
		return (int64_t)policy_conn_fail_share(p, broker_agents_of(b));
	}
}

/*
 * What the kernel may have in flight while the tenant leases: the holding
 * and the slots no live holder held at Redis's last answer, never more than
 * the cap - the cap less what the other hosts held then.  A burst of
 * connections faster than a check and a Redis round trip is admitted into
 * those free slots at once, and the next holding claims them; two hosts
 * that fill the same free slots before either's next answer are what the
 * fleet's bound above the cap (policy_conn_bound()) is made of.
 */
static int64_t conn_room(const struct policy_tenant *p, const struct slot_rare *x)
{
	uint64_t n = x->conn_held + x->conn_free;

	return (int64_t)(n < p->max_conns ? n : p->max_conns);
}

struct conn_call {
	struct call c;
	uint64_t want;
	uint64_t cap;		/* the cap asked under */
};

static void on_slots(redisAsyncContext *ac, void *reply, void *priv)
{
	struct conn_call *cc = priv;
	struct broker *b = cc->c.b;
	struct slot *s = &b->slots[cc->c.slot];
	redisReply *r = reply;
	uint64_t held, free_;

	(void)ac;
	if (s->gen == cc->c.gen)
		s->conn_inflight = false;
	if (!broker_int_array(r, 2)) {
		broker_call_failed(b, S_SLOTS, r);
		free(cc);
		return;
	}
	breaker_success(b);
	held = r->element[0]->integer > 0 ? (uint64_t)r->element[0]->integer : 0;
	free_ = r->element[1]->integer > 0 ? (uint64_t)r->element[1]->integer : 0;
	if (s->gen == cc->c.gen) {
		struct slot_rare *x = slot_rare(s);

		x->conn_starved_ns = held < cc->want ? loop_now_ns() : 0;
		x->conn_held = held;
		x->conn_free = free_;
		x->conn_renewed_ns = loop_now_ns();
		host_conn_slots(b, cc->c.slot, (int64_t)(held + free_ < cc->cap ?
							 held + free_ : cc->cap));
		log_debug("slots '%s': asked %llu, hold %llu, %llu free",
			  cc->c.name, (unsigned long long)cc->want,
			  (unsigned long long)held, (unsigned long long)free_);
	}
	free(cc);
}

/* Asks slots.lua for a holding of want in all.  What is given back stays
 * admissible until the answer: it becomes free slots, which the kernel may
 * fill anyway (conn_room()); a cap lowered meanwhile lowers it at once. */
static void conn_ask(struct broker *b, const struct broker_tenant *t,
		     struct slot *s, uint64_t want)
{
	char k1[128], k2[128], cap[24], holder[300], w[24], ttl[24];
	const char *args[] = { k1, k2, cap, holder, w, ttl };
	struct slot_rare *x = slot_rare(s);
	struct conn_call *cc;

	if (want < x->conn_held)
		host_conn_slots(b, t->slot, conn_room(t->pol, x));
	cc = calloc(1, sizeof(*cc));
	if (!cc)
		return;
	snprintf(k1, sizeof(k1), "rl:{t:%s}:slots", t->pol->name);
	snprintf(k2, sizeof(k2), "rl:{t:%s}:slot_exp", t->pol->name);
	snprintf(cap, sizeof(cap), "%llu", (unsigned long long)t->pol->max_conns);
	snprintf(holder, sizeof(holder), "%s/%s", b->agent_id, b->nonce);
	snprintf(w, sizeof(w), "%llu", (unsigned long long)want);
	snprintf(ttl, sizeof(ttl), "%u", CONN_TTL_MS);
	cc->c.slot = t->slot;
	cc->c.gen = s->gen;
	cc->want = want;
	cc->cap = t->pol->max_conns;
	snprintf(cc->c.name, sizeof(cc->c.name), "%s", t->pol->name);
	if (broker_eval(b, S_SLOTS, 2, args, 6, on_slots, &cc->c)) {
		free(cc);
		return;
	}
	if (want < x->conn_held) {
		x->conn_free += x->conn_held - want;
		x->conn_held = want;
	}
	s->conn_inflight = true;
	s->st.redis_calls++;
}

/*
 * Every check: for each capped tenant, the holding lease_conns_want() asks
 * for (what is in flight and a chunk more or back, more room under churn,
 * none while idle), not asked again for
 * CONN_STARVED_NS once Redis granted less, and renewed every heartbeat;
 * the fail policy's slots while its Redis is out of reach.
 */
void broker_conns_check(struct broker *b, uint64_t now)
{
	bool any = false;

	/* No tenant with a cap, none holding slots or asking: nothing to
	 * look at until the tenants change (a set of 100,000 without caps
	 * is not walked every check for nothing). */
	if (!b->conns_any)
		return;
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant tv, *t = &tv;
		struct slot *s;
		struct slot_rare *x;
		struct lease_conns c;
		uint64_t want;
		bool same;

		host_tenant_at(b, i, t);
		s = &b->slots[t->slot];
		x = slot_rare(s);
		same = strcmp(broker_slot_name(s), t->pol->name) == 0;
		any = any || t->pol->max_conns || x->conn_held || s->conn_inflight ||
		      !same;
		if (!same || s->conn_inflight)
			continue;
		if (!t->pol->max_conns) {
			if (x->conn_held && broker_slot_leasing(b, s))
				conn_ask(b, t, s, 0);
			continue;
		}
		if (!broker_slot_leasing(b, s)) {
			host_conn_slots(b, t->slot,
					conn_fail_slots(b, t->pol));
			/* what Redis held for us has expired by the time it
			 * answers again: ask afresh */
			x->conn_held = 0;
			x->conn_free = 0;
			x->conn_renewed_ns = 0;
			continue;
		}
		c = (struct lease_conns){
			.cap = t->pol->max_conns, .agents = broker_agents_of(b),
			.points = host_conn_points(b), .held = x->conn_held,
			.in_flight = (uint64_t)host_conns_in_flight(b, t->slot),
			.n_samples = t->n_samples, .first = t->first,
			.last = t->last, .check_ms = CHECK_MS,
		};
		want = lease_conns_want(&c);
		if (want > x->conn_held && x->conn_starved_ns &&
		    now - x->conn_starved_ns < CONN_STARVED_NS)
			want = x->conn_held;
		if (want != x->conn_held || !x->conn_renewed_ns ||
		    now - x->conn_renewed_ns >= HEARTBEAT_MS * 1000000ULL)
			conn_ask(b, t, s, want);
		else
			/* shared anew between the points by what each has
			 * in flight now */
			host_conn_slots(b, t->slot, conn_room(t->pol, x));
	}
	b->conns_any = any;
}
