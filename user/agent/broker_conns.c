// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fleet mode's connection caps: each capped tenant's kernel slot may have
 * in flight what this agent holds of the fleet's cap in Redis (slots.lua),
 * taken in chunks as connections open and given back as they close; while
 * Redis is out of reach the tenant's fail policy sets it instead.
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

/* Slots taken or given back at a time: a quarter of the tenant's share of
 * the cap, at least one for each of the host's points (the kernel and the
 * preload pool share what the host holds, and each needs a free one to
 * admit).  A host holds at most its connections in flight plus two chunks
 * (one under churn, up to its share of the cap: conn_room()), and one call
 * moves a chunk. */
static uint64_t conn_chunk(const struct broker *b, const struct policy_tenant *p)
{
	uint64_t n = p->max_conns / (4 * broker_agents_of(b));

	return n > host_conn_points(b) ? n : host_conn_points(b);
}

/* The room a host keeps free for a tenant under churn: twice the SYNs that
 * arrive in one check (its rate over the agent's last samples, refusals
 * included), but only up to its share of the cap (cap / live agents) with
 * what it has in flight, so that hosts within their shares never take from
 * each other.  0 while it is no more than a chunk, or unknown: the chunk
 * then does. */
static uint64_t conn_room(const struct broker_tenant *t, uint64_t chunk,
			  uint64_t share, uint64_t in_flight)
{
	const struct lease_sample *f = &t->first, *l = &t->last;
	uint64_t syns, n;

	if (t->n_samples < 2 || l->t_ns <= f->t_ns || l->admitted < f->admitted ||
	    l->denied < f->denied || in_flight >= share)
		return 0;
	syns = l->admitted + l->denied - f->admitted - f->denied;
	n = (uint64_t)((double)syns * 2.0 * CHECK_MS * 1e6 /
		       (double)(l->t_ns - f->t_ns) + 0.999);
	if (n > share - in_flight)
		n = share - in_flight;
	return n > chunk ? n : 0;
}

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

struct conn_call {
	struct call c;
	uint64_t want;
};

static void on_slots(redisAsyncContext *ac, void *reply, void *priv)
{
	struct conn_call *cc = priv;
	struct broker *b = cc->c.b;
	struct slot *s = &b->slots[cc->c.slot];
	redisReply *r = reply;
	uint64_t held;

	(void)ac;
	if (s->gen == cc->c.gen)
		s->conn_inflight = false;
	if (!broker_int_array(r, 2)) {
		broker_call_failed(b, S_SLOTS, r);
		free(cc);
		return;
	}
	breaker_success(b);
	held = (uint64_t)r->element[0]->integer;
	if (s->gen == cc->c.gen) {
		struct slot_rare *x = slot_rare(s);

		x->conn_starved_ns = held < cc->want ? loop_now_ns() : 0;
		x->conn_held = held;
		x->conn_renewed_ns = loop_now_ns();
		host_conn_slots(b, cc->c.slot, (int64_t)held);
		log_debug("slots '%s': asked %llu, hold %llu, %lld free",
			  cc->c.name, (unsigned long long)cc->want,
			  (unsigned long long)held, r->element[1]->integer);
	}
	free(cc);
}

/* Asks slots.lua for a holding of want in all.  Giving back lowers the
 * kernel's slots first, so that it never admits on slots Redis has already
 * handed to another host. */
static void conn_ask(struct broker *b, const struct broker_tenant *t,
		     struct slot *s, uint64_t want)
{
	char k1[128], k2[128], cap[24], holder[300], w[24], ttl[24];
	const char *args[] = { k1, k2, cap, holder, w, ttl };
	struct slot_rare *x = slot_rare(s);
	struct conn_call *cc;

	if (want < x->conn_held)
		host_conn_slots(b, t->slot, (int64_t)want);
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
	snprintf(cc->c.name, sizeof(cc->c.name), "%s", t->pol->name);
	if (broker_eval(b, S_SLOTS, 2, args, 6, on_slots, &cc->c)) {
		free(cc);
		return;
	}
	if (want < x->conn_held)
		x->conn_held = want;
	s->conn_inflight = true;
	s->st.redis_calls++;
}

/*
 * Every check: for each capped tenant, a chunk more when fewer than half a
 * chunk of its slots are free (or fewer than its points, so that each
 * point has one), a chunk back when more than two are; under churn
 * (conn_room()) room more, up to the share, when fewer than room are free,
 * and back to that when more than three times room are; the holding
 * renewed every heartbeat; the fail policy's slots while its Redis is out
 * of reach.
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
		uint64_t in_flight, chunk, share, room, top, want, free_;
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
			x->conn_renewed_ns = 0;
			continue;
		}
		in_flight = (uint64_t)host_conns_in_flight(b, t->slot);
		chunk = conn_chunk(b, t->pol);
		share = t->pol->max_conns / broker_agents_of(b);
		room = conn_room(t, chunk, share, in_flight);
		free_ = x->conn_held > in_flight ? x->conn_held - in_flight : 0;
		want = x->conn_held;
		if (room) {
			/* a call moves room, or none once the share is held */
			top = in_flight + 2 * room;
			if (top > share)
				top = share;
			if ((free_ < room && x->conn_held < top) || free_ > 3 * room)
				want = top;
		} else if ((free_ * 2 < chunk || free_ < host_conn_points(b)) &&
			   x->conn_held < t->pol->max_conns) {
			want = in_flight + chunk;
		} else if (free_ > 2 * chunk) {
			want = in_flight + chunk;
		}
		if (want > t->pol->max_conns)
			want = t->pol->max_conns;
		if (want > x->conn_held && x->conn_starved_ns &&
		    now - x->conn_starved_ns < CONN_STARVED_NS)
			want = x->conn_held;
		if (want != x->conn_held || !x->conn_renewed_ns ||
		    now - x->conn_renewed_ns >= HEARTBEAT_MS * 1000000ULL)
			conn_ask(b, t, s, want);
		else
			/* shared anew between the points by what each has
			 * in flight now */
			host_conn_slots(b, t->slot, (int64_t)x->conn_held);
	}
	b->conns_any = any;
}
