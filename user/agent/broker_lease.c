// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Leasing: each tenant's next chunk of the global bucket fetched while the
 * last is being spent, sized from the host's own traffic; idle tokens
 * refunded; what the host admitted without a lease (a static fail share)
 * owed back to the bucket; a hot tenant leased from its sub-buckets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "hot.h"
#include "lease.h"
#include "log.h"

/* --- leasing ------------------------------------------------------------------ */

/*
 * What a host holds of a tenant's tokens, and what it owes.
 *
 * held = tokens in the kernel + in a refund on its way to Redis; a lease on
 * its way is never more than the cap allows on top (lease_topup()).  So a
 * host never holds more than its lease cap, whatever the low-water events,
 * the prefetch and the replies in flight do.
 *
 * debt = tokens admitted that no lease paid for: the credit a host starts a
 * tenant with (so that no SYN is refused before its first lease is back),
 * and what the static fail share admitted during a degraded spell shorter
 * than a lease TTL (so that a Redis that flaps does not add a fresh share
 * each time while its bucket keeps refilling).  Every lease asks for the
 * debt on top and pays it first; tokens taken back from the kernel (refund,
 * expiry) pay it too.  A spell longer than a lease TTL is an outage: the fail
 * policy alone decides, and what it admitted is not paid back.
 * Together: lease_bound() (docs/operations.md).
 */

#define RESIZE_MS	250	/* sizes of a busy tenant: at least this often */

uint64_t broker_agents_of(const struct broker *b)
{
	return b->live_agents ? b->live_agents : 1;
}

static uint64_t held_of(const struct broker *b, const struct slot *s)
{
	return host_tokens(b, s->idx, loop_now_ns()) + s->refunding;
}

/* Tokens that leave the kernel unspent pay the debt first; returns what is
 * left over. */
static uint64_t pay_debt(struct slot *s, uint64_t n)
{
	uint64_t pay = n < s->debt ? n : s->debt;

	s->debt -= pay;
	if (s->static_debt > s->debt)
		s->static_debt = s->debt;
	return n - pay;
}

/* --- hot tenants: sub-buckets -------------------------------------------------- */

/*
 * A tenant split k ways (--shards, user/lib/hot.h) has k buckets in Redis,
 * each with its share of the rate and the burst and a key on a slot of its
 * own.  A top-up asks this agent's own sub-bucket first (hot_home() of its
 * id), then the others in hot_order(), one call after the other, until it
 * has what it wanted; sub-buckets whose shard is down are skipped.  The
 * grants of all k add up to at most the sum of their rates x T + bursts:
 * the tenant's rate x T + burst, exactly as one bucket.
 */

static unsigned int shards_of(const struct policy_tenant *p)
{
	return p->shards > 1 ? (unsigned int)p->shards : 1;
}

static unsigned int home_of(const struct broker *b, const struct policy_tenant *p)
{
	return hot_home(b->agent_id, shards_of(p));
}

/* Only a slot that has a ledger has its slot_rare written here. */
void broker_slot_free(struct slot *s)
{
	struct slot_rare *x = slot_rare(s);

	if (x->ledger) {
		free(x->ledger);
		x->ledger = NULL;
	}
}

/* n tokens from sub-bucket sub went into the kernel, which now holds held
 * (hot_ledger_add(); a split tenant's ledger is made at its first grant). */
static void ledger_add(struct slot *s, unsigned int sub, uint64_t n, uint64_t held)
{
	struct slot_rare *x = slot_rare(s);

	if (s->shards <= 1 || (!n && !x->ledger))
		return;
	/* without one, refunds go to the home sub-bucket */
	if (!x->ledger)
		x->ledger = calloc(1, sizeof(*x->ledger));
	if (x->ledger)
		hot_ledger_add(x->ledger, sub, n, held);
}

/* The key and limits of sub-bucket i of p (p's one bucket if unsplit). */
static void sub_args(const struct policy_tenant *p, unsigned int i,
		     struct bucket_args *ba)
{
	struct policy_tenant sub;

	hot_sub_tenant(p, shards_of(p), i, &sub);
	broker_bucket_args(&sub, ba);
	hot_key(ba->key, sizeof(ba->key), p->name, shards_of(p), i, "bucket");
}

void broker_home_args(const struct broker *b, const struct policy_tenant *p,
		      struct bucket_args *ba)
{
	sub_args(p, home_of(b, p), ba);
}

/* Sub-bucket i of p can be called: for a lease or a refund while its
 * shard's breaker is closed; at shutdown, whenever its node is there. */
static bool sub_callable(const struct broker *b, const struct policy_tenant *p,
			 unsigned int i)
{
	char key[sizeof(((struct bucket_args *)0)->key)];

	hot_key(key, sizeof(key), p->name, shards_of(p), i, "bucket");
	return b->done ? broker_key_reachable(b, key) : broker_key_leasing(b, key);
}

/* The first sub-bucket that can be called from place *nth of this agent's
 * order on (*nth moved to it); shards_of(p) when none can. */
static unsigned int next_sub(const struct broker *b, const struct policy_tenant *p,
			     unsigned int *nth)
{
	unsigned int k = shards_of(p), home = home_of(b, p);

	for (; *nth < k; (*nth)++)
		if (sub_callable(b, p, hot_order(home, k, *nth)))
			return hot_order(home, k, *nth);
	return k;
}

/* Some sub-bucket of p can be called (the one bucket, unsplit). */
static bool tenant_callable(const struct broker *b, const struct policy_tenant *p)
{
	unsigned int nth = 0;

	return next_sub(b, p, &nth) < shards_of(p);
}

/* Sizes the next lease and the low-water mark for the host's demand
 * (lease_demand(), lease_plan()). */
static void size_lease(const struct broker *b, const struct broker_tenant *t,
		       struct slot *s, uint64_t now)
{
	struct rl_stats st;
	struct lease_plan p;
	/* A split tenant's top-up may take one call per sub-bucket, one
	 * after the other: the prefetch starts that much earlier. */
	struct lease_in in = {
		.rate = -1, .t = t->pol, .agents = broker_agents_of(b),
		.ttl_ms = b->o.lease_ttl_ms,
		.lead_ms = lease_lead_ms(b->rtt_ns * shards_of(t->pol)),
	};

	if (host_counters(b, t->slot, &st) == 0) {
		struct lease_meter m = {
			.n_samples = t->n_samples, .first = t->first, .last = t->last,
			.now_ns = now, .count = st.admitted + st.denied,
			.sized_ns = s->meter_ns, .sized_count = s->meter_count,
		};

		in.rate = lease_demand(&m, &in.refused);
		s->meter_ns = now;
		s->meter_count = m.count;
	}
	lease_plan(&in, &p);
	s->lease = p.size;
	s->lowwater = p.lowwater;
	s->chunk = p.chunk;
	s->sized_ns = now;
}

static void observe_lease_rtt(struct broker *b, uint64_t ns)
{
	double s = (double)ns / 1e9;

	for (int i = 0; i < BROKER_LEASE_BUCKETS; i++)
		if (s <= broker_lease_bounds[i])
			b->lease_buckets[i]++;
	b->lease_sum_s += s;
	b->lease_count++;
	/* a slow average: one slow reply does not double every lead time */
	b->rtt_ns = b->rtt_ns ? (b->rtt_ns * 7 + ns) / 8 : ns;
}

static void maybe_lease(struct broker *b, const struct broker_tenant *t,
			uint64_t now, bool force);
static void rejoin_done(struct broker *b, const struct broker_tenant *t,
			struct slot *s);

/* The tenant in slot s, found by its name: false when there is none. */
static bool slot_tenant(struct broker *b, const struct slot *s,
			struct broker_tenant *t)
{
	return s->name && b->h.tenant_find(b->h.ctx, broker_slot_name(s), t) &&
	       t->slot == s->idx;
}

static void on_wait(struct loop_timer *tm, void *arg)
{
	struct slot *s = arg;
	struct broker *b = s->b;
	struct broker_tenant t;

	(void)tm;
	s->wait_timer = NULL;
	wake_list(&b->wake, s->idx);
	/* by name, not by walking the set: a fleet at its limit has a timer
	 * like this for every busy tenant */
	if (slot_tenant(b, s, &t) && broker_leasing(b))
		maybe_lease(b, &t, loop_now_ns(), false);
}

/* Forgets Redis's advice to wait: the limit changed, or Redis did. */
void broker_slot_unwait(struct slot *s)
{
	if (s->wait_timer)
		loop_timer_cancel(s->wait_timer);
	s->wait_timer = NULL;
	s->wait_until_ns = 0;
}

static int send_lease(struct broker *b, const struct policy_tenant *p,
		      struct slot *s, struct call *c);

static void on_lease(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	struct slot *s = &b->slots[c->slot];
	redisReply *r = reply;
	uint64_t now = loop_now_ns(), granted, remaining, wait_ms, add, room;
	struct broker_tenant found, *t = NULL;
	struct policy_tenant sub;

	(void)ac;
	if (s->gen == c->gen)
		s->inflight = false;
	/* what it does next is the next check's to say */
	wake_list(&b->wake, c->slot);
	if (!broker_int_array(r, 3)) {
		broker_call_failed(b, S_LEASE, r);
		free(c);
		return;
	}
	observe_lease_rtt(b, now - c->sent_ns);
	log_debug("lease '%s': asked %llu, granted %lld, bucket %lld, wait %lld ms, "
		  "owed %llu", c->name, (unsigned long long)c->n,
		  r->element[0]->integer, r->element[1]->integer,
		  r->element[2]->integer, (unsigned long long)s->debt);
	granted = (uint64_t)r->element[0]->integer;
	remaining = (uint64_t)r->element[1]->integer;
	wait_ms = (uint64_t)r->element[2]->integer;
	if (b->h.tenant_find(b->h.ctx, c->name, &found))
		t = &found;
	if (s->gen != c->gen || !t || t->slot != c->slot ||
	    shards_of(t->pol) != c->shards) {
		/* The tenant went away (or its slot changed, or its bucket
		 * was split another way) while we asked.  Its limit is gone
		 * with it, so there is nothing to refund against: the tokens
		 * lapse, erring on the side of fewer admissions. */
		if (granted)
			log_debug("lease of %llu for departed tenant '%s' dropped",
				  (unsigned long long)granted, c->name);
		free(c);
		breaker_success(b);
		return;
	}
	if (granted) {
		s->st.leases++;
		s->st.tokens_leased += granted;
		s->last_grant_ns = now;
	}
	/* The debt first; the kernel gets the rest: what it overdrew, then
	 * up to what the host may hold (which may have shrunk while we
	 * asked: the excess lapses). */
	add = pay_debt(s, granted);
	room = lease_topup(lease_hold(t->pol, broker_agents_of(b)) +
				   host_overdrawn(b, c->slot),
			   held_of(b, s), add);
	if (add > room) {
		log_debug("lease '%s': %llu token(s) beyond the cap dropped", c->name,
			  (unsigned long long)(add - room));
		add = room;
	}
	host_tokens_add(b, c->slot, add, (int64_t)s->lowwater);
	ledger_add(s, c->sub, add, host_tokens(b, c->slot, now));
	/* The tokens first, then the end of the fail policy's spell. */
	if (s->rejoin)
		rejoin_done(b, t, s);
	hot_sub_tenant(t->pol, c->shards, c->sub, &sub);
	wait_ms = lease_wait_ms(&sub, c->n, granted, remaining, c->chunk, wait_ms);
	c->got += granted;
	if (granted < c->n) {
		c->fell_short = true;
		if (wait_ms < c->wait_ms)
			c->wait_ms = wait_ms;
	}
	/* A split tenant's sub-bucket fell short: the next one in this
	 * agent's order, for the rest, at once. */
	if (c->got < c->want && c->nth + 1 < c->shards) {
		c->nth++;
		c->sub = next_sub(b, t->pol, &c->nth);
		c->n = c->want - c->got;
		if (c->sub < c->shards && send_lease(b, t->pol, s, c) == 0) {
			breaker_success(b);
			return;
		}
	}
	s->scarce = remaining < c->chunk || (c->shards > 1 && c->fell_short);
	if (c->shards > 1)
		wait_ms = hot_wait_ms(c->shards, c->got, c->want,
				      c->wait_ms == UINT64_MAX ? 0 : c->wait_ms);
	if (wait_ms && broker_may_start(b)) {
		/* Saturated: come back exactly when a worthwhile chunk is
		 * there.  Late, the bucket overflows its burst and the fleet
		 * admits less than the limit; early, it costs a call. */
		s->wait_until_ns = now + wait_ms * 1000000ULL;
		if (s->wait_timer)
			loop_timer_cancel(s->wait_timer);
		if (loop_timer_add(host_loop(b), wait_ms, 0, on_wait, s, &s->wait_timer))
			s->wait_timer = NULL;
	}
	free(c);
	/* Last: closing the breaker leases for every tenant, this one with
	 * its grant already counted. */
	breaker_success(b);
}

/* A lease call for t may go out now: a sub-bucket can be called (*first,
 * at place *nth of this agent's order), none is in flight, and Redis did
 * not say to wait. */
static bool lease_may_call(struct broker *b, const struct broker_tenant *t,
			   struct slot *s, uint64_t now, unsigned int *first,
			   unsigned int *nth)
{
	/* On a Redis Cluster the callers know the fleet can lease, not that
	 * this tenant's shard can (a split tenant's: one of them). */
	*nth = 0;
	*first = next_sub(b, t->pol, nth);
	if (*first >= shards_of(t->pol))
		return false;
	if (s->inflight) {
		/* A reply that never comes (a hung Redis) must not stop this
		 * tenant's leasing for good. */
		if (now - s->sent_ns < CALL_TIMEOUT_NS)
			return false;
		s->inflight = false;
		s->gen++;
	}
	return now >= s->wait_until_ns;
}

static int lease_call(struct broker *b, const struct broker_tenant *t,
		      struct slot *s, unsigned int first, unsigned int nth,
		      uint64_t n);

/* Asks for a lease for t when it is at its low-water mark (or force: a
 * low-water event, a first lease) or owes tokens, unless one is in flight or
 * Redis said to wait.  The lease tops the host up to at most its cap, plus
 * the debt. */
static void maybe_lease(struct broker *b, const struct broker_tenant *t,
			uint64_t now, bool force)
{
	struct slot *s = &b->slots[t->slot];
	unsigned int nth, first;
	uint64_t held, topup;

	if (!lease_may_call(b, t, s, now, &first, &nth))
		return;
	/* Sizing reads the kernel's counters: at each lease, and every
	 * RESIZE_MS in between, so that the low-water mark follows traffic
	 * that grows while the host still holds plenty. */
	held = held_of(b, s);
	if (held > s->lowwater && !force && !s->debt) {
		if (now - s->sized_ns >= RESIZE_MS * 1000000ULL) {
			size_lease(b, t, s, now);
			host_tokens_add(b, t->slot, 0, (int64_t)s->lowwater);
		}
		if (held > s->lowwater)
			return;
	}
	size_lease(b, t, s, now);
	topup = lease_topup(lease_hold(t->pol, broker_agents_of(b)), held, s->lease);
	/* The bucket was short at the last reply: other hosts want it too.
	 * Two chunks, not a whole lease: what one host takes at once while
	 * it is scarce, another one waits for. */
	if (s->scarce && topup > 2 * s->chunk)
		topup = 2 * s->chunk;
	lease_call(b, t, s, first, nth, topup);
}

/* Sends a lease for n tokens of t plus the debt and what the kernel
 * overdrew (the grant pays both first), from sub-bucket first (place nth of
 * this agent's order) on.  0, or -errno when nothing went out (-EALREADY:
 * nothing to ask; a first lease is then settled as granted, lease_ask()). */
static int lease_call(struct broker *b, const struct broker_tenant *t,
		      struct slot *s, unsigned int first, unsigned int nth,
		      uint64_t n)
{
	struct call *c;

	n = lease_ask(n, s->debt, host_overdrawn(b, t->slot));
	if (!n) {
		/* The host holds its cap and owes nothing (the kernel's
		 * tokens adopted after a restart): granted as far as the
		 * pacing of first leases and the idle refund go, or the
		 * tenant would wait in the queue of first leases, looked at
		 * every check, for a lease that never goes out. */
		if (!s->last_grant_ns)
			s->last_grant_ns = loop_now_ns();
		return -EALREADY;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->slot = t->slot;
	c->gen = s->gen;
	c->n = c->want = n;
	c->shards = shards_of(t->pol);
	c->sub = first;
	c->nth = nth;
	c->wait_ms = UINT64_MAX;
	snprintf(c->name, sizeof(c->name), "%s", t->pol->name);
	if (send_lease(b, t->pol, s, c)) {
		free(c);
		return -ENOTCONN;
	}
	s->want_lease = false;
	return 0;
}

/* Sends lease call c: c->n tokens from sub-bucket c->sub of p (p's one
 * bucket if unsplit).  0 or -ENOTCONN. */
static int send_lease(struct broker *b, const struct policy_tenant *p,
		      struct slot *s, struct call *c)
{
	struct bucket_args ba;
	char want[24], chunk[24];
	const char *args[] = { ba.key, ba.count, ba.period, ba.burst, want, chunk };
	uint64_t burst = hot_share(p->burst, c->shards, c->sub);
	uint64_t part = hot_share(s->chunk, c->shards, c->sub);

	/* A sub-bucket's share of the chunk: when all K fall short, Redis's
	 * advice is when each holds its share again, which is when the K
	 * together hold a chunk. */
	if (!part)
		part = 1;
	c->chunk = part < burst ? part : burst;
	sub_args(p, c->sub, &ba);
	snprintf(want, sizeof(want), "%llu", (unsigned long long)c->n);
	snprintf(chunk, sizeof(chunk), "%llu", (unsigned long long)c->chunk);
	if (broker_eval(b, S_LEASE, 1, args, 6, on_lease, c))
		return -ENOTCONN;
	s->inflight = true;
	s->sent_ns = loop_now_ns();
	s->st.redis_calls++;
	return 0;
}

void broker_on_refund(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	struct slot *s = &b->slots[c->slot];
	redisReply *r = reply;

	(void)ac;
	if (s->gen == c->gen)
		s->refunding -= c->n < s->refunding ? c->n : s->refunding;
	wake_list(&b->wake, c->slot);
	if (!r || r->type != REDIS_REPLY_INTEGER)
		broker_call_failed(b, S_REFUND, r);
	else
		breaker_success(b);
	if (b->done && b->pending && --b->pending == 0) {
		void (*done)(void *) = b->done;

		b->done = NULL;
		done(b->done_arg);
	}
	free(c);
}

/* Refunds n tokens to sub-bucket i of t (t's one bucket if unsplit).
 * 0, -ENOMEM or -ENOTCONN. */
static int refund_to(struct broker *b, const struct broker_tenant *t,
		     struct slot *s, unsigned int i, uint64_t give)
{
	struct bucket_args ba;
	char n[24];
	const char *args[] = { ba.key, ba.count, ba.period, ba.burst, n };
	struct call *c;

	if (!sub_callable(b, t->pol, i))
		return -ENOTCONN;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->slot = t->slot;
	c->gen = s->gen;
	c->n = give;
	sub_args(t->pol, i, &ba);
	snprintf(n, sizeof(n), "%llu", (unsigned long long)give);
	if (broker_eval(b, S_REFUND, 1, args, 5, broker_on_refund, c)) {
		free(c);
		return -ENOTCONN;
	}
	s->refunding += give;
	s->st.tokens_refunded += give;
	s->st.redis_calls++;
	return 0;
}

/* Takes up to max idle tokens (0: all) back from the kernel; they pay the
 * debt first, and the rest is refunded to the tenant's global bucket (a
 * split tenant's: to the sub-buckets they came from, one call each, what
 * cannot be sent going back to the kernel).  Returns 0 if a refund is
 * under way; at shutdown, every call beyond the first is counted in
 * b->pending here. */
int broker_refund(struct broker *b, const struct broker_tenant *t, uint64_t max)
{
	struct slot *s = &b->slots[t->slot];
	unsigned int k = shards_of(t->pol), sent = 0;
	uint64_t parts[HOT_SHARDS_MAX] = { 0 }, held, taken, give;

	if (!tenant_callable(b, t->pol))
		return -ENOTCONN;
	held = host_tokens(b, t->slot, loop_now_ns());
	taken = host_tokens_take(b, t->slot, max);
	if (!taken)
		return -ENOENT;
	give = pay_debt(s, taken);
	/* split another way since the slot was last in step: its ledger names
	 * sub-buckets that are not asked any more */
	if (s->shards != k)
		broker_slot_free(s);
	hot_ledger_take(slot_rare(s)->ledger, held, taken, give, home_of(b, t->pol),
			parts);
	if (!give)
		return -ENOENT;
	for (unsigned int i = 0; i < k; i++) {
		if (!parts[i])
			continue;
		if (refund_to(b, t, s, i, parts[i]) == 0) {
			sent++;
			continue;
		}
		host_tokens_add(b, t->slot, parts[i], (int64_t)s->lowwater);
		ledger_add(s, i, parts[i], host_tokens(b, t->slot, loop_now_ns()));
	}
	if (!sent)
		return -ENOTCONN;
	if (b->done)
		b->pending += sent - 1;
	return 0;
}

/*
 * What the fail policy admitted on a slot, as a running count.  While the
 * kernel is told the fleet is degraded, every SYN that finds no leased token
 * goes to the fail policy (counted in `degraded`), and each it refuses is
 * counted in `denied` (a shadow tenant's in `shadow_denied`): so degraded -
 * denied - shadow_denied grows by one for each admission of the fail policy
 * and by nothing else.  Outside a spell it falls with ordinary refusals;
 * only its growth within a spell counts.
 */
static int fail_count(struct broker *b, uint32_t slot, int64_t *out)
{
	struct rl_stats st;
	int err = host_counters(b, slot, &st);

	if (!err)
		*out = (int64_t)(st.degraded - st.denied - st.shadow_denied);
	return err;
}

/* Where a spell's count starts: now, before the kernel is told. */
static void debt_baseline(struct broker *b, struct slot *s)
{
	s->fail_seen_ok = fail_count(b, s->idx, &s->fail_seen) == 0;
}

/* What the static fail share admitted since the last look becomes debt,
 * up to what a spell shorter than a lease TTL can admit; past that (an
 * outage, b->tokens_expired) nothing is counted.  The count is read CPU by
 * CPU while SYNs are decided, so it may run one or two ahead for a moment:
 * only growth beyond the highest value seen counts, never a token twice. */
static void count_static_debt(struct broker *b, const struct policy_tenant *p,
			      struct slot *s)
{
	uint64_t add, max;
	int64_t n;

	if (!s->fail_seen_ok || fail_count(b, s->idx, &n) || n <= s->fail_seen)
		return;
	add = (uint64_t)(n - s->fail_seen);
	s->fail_seen = n;
	max = lease_static_debt_max(p, broker_agents_of(b), b->o.lease_ttl_ms);
	if ((b->cc ? s->shard_expired : b->tokens_expired) ||
	    p->fail != POLICY_FAIL_STATIC || s->static_debt >= max)
		return;
	if (add > max - s->static_debt)
		add = max - s->static_debt;
	s->static_debt += add;
	s->debt += add;
	s->st.static_charged += add;
}

/* Brings every tenant's count of fail-policy admissions up to date: one
 * read of the kernel's counters each. */
void broker_debt_look(struct broker *b)
{
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;

		host_tenant_at(b, i, &t);
		count_static_debt(b, t.pol, &b->slots[t.slot]);
	}
}

static struct slot *slot_of(struct broker *b, const struct broker_tenant *t);

/*
 * A check's look while degraded: the counts of the tenants whose counters
 * moved since the last one, not of every tenant every 50 ms.  A fail-policy
 * admission or refusal moves them (admitted or denied); what one admits
 * after the agent's last sampling is counted by the looks at every tenant
 * that matter: before its leases are dropped (expire_tenant()), and before
 * the leases go out again (breaker_success(), rejoin_done()).
 */
void broker_debt_look_moved(struct broker *b)
{
	size_t n = b->n_debt_moved;

	b->n_debt_moved = 0;
	if (b->debt_all) {
		b->debt_all = false;
		broker_debt_look(b);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct broker_tenant t;
		struct slot *s = &b->slots[b->debt_moved[i]];

		if (slot_tenant(b, s, &t))
			count_static_debt(b, t.pol, slot_of(b, &t));
	}
}

/* Lists slot for the next check's look (broker_debt_look_moved()); the
 * agent's sampling tells of each slot once a second at most, and each
 * check empties the list. */
static void debt_moved_add(struct broker *b, uint32_t slot)
{
	if (b->n_debt_moved == b->cap_debt_moved) {
		size_t cap = b->cap_debt_moved ? 2 * b->cap_debt_moved : 1024;
		uint32_t *p = reallocarray(b->debt_moved, cap, sizeof(*p));

		if (!p) {
			b->debt_all = true;
			return;
		}
		b->debt_moved = p;
		b->cap_debt_moved = cap;
	}
	b->debt_moved[b->n_debt_moved++] = slot;
}

void broker_debt_begin(struct broker *b)
{
	b->n_debt_moved = 0;
	b->debt_all = false;
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;

		host_tenant_at(b, i, &t);
		debt_baseline(b, &b->slots[t.slot]);
	}
}

/*
 * Back from a spell.  When Redis (or a tenant's shard) answers again, a
 * tenant whose leased tokens are spent or expired holds none until its next
 * lease is answered: were the kernel told at once that it is healthy, the
 * SYNs of that round trip would be refused, even under fail allow.  So such
 * a tenant keeps its fail policy (the kernel's RL_F_DEGRADED, whatever the
 * fleet's flag says) until its first lease after the spell is answered, or
 * until a check finds it holding tokens with none in flight.  A call that
 * failed leaves it so until a later one is answered (an idle tenant's comes
 * with its reserve, lease_reserve()).  What a static share admits meanwhile
 * counts as the spell's.
 */
static void rejoin_set(struct broker *b, struct slot *s, bool on)
{
	if (s->rejoin == on)
		return;
	s->rejoin = on;
	if (on)
		b->n_rejoin++;
	else
		b->n_rejoin--;
	host_tenant_degraded(b, s->idx, on || s->shard_down);
}

static void rejoin_done(struct broker *b, const struct broker_tenant *t,
			struct slot *s)
{
	count_static_debt(b, t->pol, s);
	rejoin_set(b, s, false);
}

/* A tenant of slot s, whose spell ends now, keeps its fail policy if the
 * kernel holds none of its tokens; Redis's advice to wait is from before
 * the spell. */
static void rejoin_start(struct broker *b, struct slot *s)
{
	if (host_tokens(b, s->idx, loop_now_ns()))
		return;
	broker_slot_unwait(s);
	rejoin_set(b, s, true);
}

/* Redis is back: before the kernel is told the fleet is healthy, and before
 * the leases go out (broker_rejoin_end() after them). */
void broker_rejoin_begin(struct broker *b)
{
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;
		struct slot *s;

		host_tenant_at(b, i, &t);
		s = slot_of(b, &t);
		if (s)
			rejoin_start(b, s);
	}
}

/* After a round of leases, and at each check: a tenant that holds tokens
 * again (a lease, the reserve) and has no lease in flight waits for none.
 * One whose call failed, or that asked for none yet, keeps its fail policy
 * with its empty bucket until a lease is answered: its SYNs are the fail
 * policy's, never refused for want of a token the agent has not had a
 * chance to lease. */
void broker_rejoin_end(struct broker *b)
{
	uint64_t now = loop_now_ns();

	for (size_t i = 0; b->n_rejoin && i < host_tenant_count(b); i++) {
		struct broker_tenant t;
		struct slot *s;

		host_tenant_at(b, i, &t);
		s = &b->slots[t.slot];
		if (s->rejoin && !s->inflight && host_tokens(b, s->idx, now) &&
		    strcmp(broker_slot_name(s), t.pol->name) == 0)
			rejoin_done(b, &t, s);
	}
}

/* --- the slots' names -------------------------------------------------------- */

const char *broker_slot_name(const struct slot *s)
{
	return name_pool_get(&s->b->names, s->name);
}

static struct name_holders slot_holders(struct broker *b)
{
	return (struct name_holders){ &b->slots[0].name, b->h.max_slots,
				      sizeof(*b->slots) };
}

int broker_slot_name_set(struct slot *s, const char *name)
{
	struct name_holders h = slot_holders(s->b);

	return name_pool_set(&s->b->names, &h, &s->name, name);
}

size_t broker_slot_name_need(const struct broker *b, uint32_t slot,
			     const char *name)
{
	if (!b || slot >= b->h.max_slots ||
	    strcmp(broker_slot_name(&b->slots[slot]), name) == 0)
		return 0;
	return strlen(name) + 1;
}

int broker_names_reserve(struct broker *b, size_t need, size_t n,
			 const char *first, char *err)
{
	struct name_holders h;

	if (!b || !need)
		return 0;
	h = slot_holders(b);
	if (!name_pool_reserve(&b->names, &h, need))
		return 0;
	if (n > 1)
		snprintf(err, POLICY_ERR_MAX, "couldn't make room for the names of "
			 "tenant '%.64s' and %zu more (%zu bytes) in the lease "
			 "broker: out of memory", first, n - 1, need);
	else
		snprintf(err, POLICY_ERR_MAX, "couldn't make room for the name of "
			 "tenant '%.64s' (%zu bytes) in the lease broker: out of "
			 "memory", first, need);
	return -ENOMEM;
}

int broker_names_reserve_all(struct broker *b, char *err)
{
	const char *first = NULL;
	size_t need = 0, n = 0;

	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;
		size_t k;

		host_tenant_at(b, i, &t);
		k = broker_slot_name_need(b, t.slot, t.pol->name);
		if (k && !n++)
			first = t.pol->name;
		need += k;
	}
	return broker_names_reserve(b, need, n, first, err);
}

/*
 * Keeps the slot table in step with the tenant set.  A slot that changed
 * tenant starts over, and when the kernel holds nothing for it, on credit
 * (lease_credit()): no SYN waits for the first lease.  A changed limit
 * forgets Redis's advice to wait, which was about the old one.
 *
 * The new tenant's name is made room for before anything of the slot
 * changes: a slot is known to be in step by its name, and one reset
 * without it would be reset, and credited, again at every sync.  The
 * changes of the set reserve that room before they are made
 * (broker_names_reserve()); should it still lack, the slot stays as it
 * was, its tenant is not leased for, and NULL is returned: each check
 * walks every tenant (and so tries again) until the name is kept.
 */
static struct slot *slot_sync(struct broker *b, uint32_t idx,
			      const struct policy_tenant *p)
{
	struct slot *s = &b->slots[idx];

	if (strcmp(broker_slot_name(s), p->name) != 0) {
		static const struct slot_rare none;
		struct slot_rare *x = slot_rare(s);
		struct name_holders h = slot_holders(b);
		size_t need = strlen(p->name) + 1;
		uint64_t gen = s->gen + 1, credit;

		if (name_pool_reserve(&b->names, &h, need)) {
			if (!b->names_short)
				log_error("couldn't keep the name of tenant '%s' "
					  "(%zu bytes) in the lease broker: out of "
					  "memory; slot %u is not leased for until "
					  "it is", p->name, need, idx);
			b->names_short = true;
			b->walk_all = true;
			return NULL;
		}
		b->names_short = false;
		broker_slot_unwait(s);
		rejoin_set(b, s, false);
		broker_slot_free(s);
		broker_slot_name_set(s, "");
		memset(s, 0, sizeof(*s));
		/* written only when there is something to clear: a side
		 * table's page no slot ever wrote stays unallocated */
		if (memcmp(x, &none, sizeof(*x)) != 0)
			memset(x, 0, sizeof(*x));
		s->gen = gen;
		s->b = b;
		s->idx = idx;
		/* cannot fail: the room is there */
		broker_slot_name_set(s, p->name);
		s->rate = p->rate;
		s->burst = p->burst;
		s->budget = policy_overshoot_budget(p);
		if (host_tokens(b, idx, loop_now_ns()) == 0) {
			credit = lease_credit(p, broker_agents_of(b));
			s->debt = credit;
			host_tokens_add(b, idx, credit, 0);
		}
		/* Counted from here only while degraded: a spell that starts
		 * later counts from its start (broker_debt_begin(), and on a
		 * Cluster each shard's: broker_shards_update()).  Read for
		 * each of 100,000 new tenants, the counters would cost a
		 * syscall apiece. */
		if (b->circ.open)
			debt_baseline(b, s);
	}
	if (s->rate.count != p->rate.count || s->rate.period_s != p->rate.period_s ||
	    s->burst != p->burst || s->budget != policy_overshoot_budget(p)) {
		s->rate = p->rate;
		s->burst = p->burst;
		s->budget = policy_overshoot_budget(p);
		broker_slot_unwait(s);
	}
	if (s->shards != shards_of(p)) {
		/* Split another way: the sub-buckets the tokens came from are
		 * not asked any more (what refunds find uncovered goes to the
		 * new home sub-bucket). */
		s->shards = (uint16_t)shards_of(p);
		broker_slot_free(s);
		broker_slot_unwait(s);
	}
	return s;
}

static struct slot *slot_of(struct broker *b, const struct broker_tenant *t)
{
	return slot_sync(b, t->slot, t->pol);
}

/* Keeps every slot of the tenant set in step (slot_sync()). */
static void slots_sync(struct broker *b)
{
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;

		host_tenant_at(b, i, &t);
		slot_of(b, &t);
	}
}

void broker_slot_ready(struct broker *b, uint32_t slot, const struct policy_tenant *p)
{
	if (!b)
		return;
	slot_sync(b, slot, p);
	wake_list(&b->wake, slot);
}

/* Degraded for longer than a lease TTL: an outage.  What is left of the
 * leases is stale budget and is dropped (paying the debt as far as it
 * goes); the fail policy alone decides from now on, and what the static
 * share admitted so far is not paid back. */
static uint64_t expire_tenant(struct broker *b, const struct broker_tenant *t,
			      struct slot *s)
{
	uint64_t n = host_tokens_take(b, t->slot, 0);

	count_static_debt(b, t->pol, s);
	pay_debt(s, n);
	s->debt -= s->static_debt;
	s->static_debt = 0;
	return n;
}

static void expire_leases(struct broker *b)
{
	uint64_t dropped = 0;

	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;

		struct slot *s;

		host_tenant_at(b, i, &t);
		s = slot_of(b, &t);
		if (s)
			dropped += expire_tenant(b, &t, s);
	}
	b->tokens_expired = true;
	if (dropped)
		log_info("degraded past the lease TTL: %llu leased token(s) "
			 "expired", (unsigned long long)dropped);
}

/*
 * One tenant's look at a check: fetch a lease if its kernel bucket is at or
 * below the low-water mark and it has demand (a low-water event, or its
 * counters moved within the lease TTL; a tenant that never had a lease gets
 * one so that its credit is paid back), or if it owes tokens; give back
 * what sat idle for longer than the lease TTL beyond the credit.  *warm
 * counts the paced calls of this check.
 */
static void lease_visit(struct broker *b, const struct broker_tenant *t,
			struct slot *s, uint64_t now, unsigned int *warm)
{
	uint64_t ttl_ns = b->o.lease_ttl_ms * 1000000ULL;
	uint64_t count = 0, tokens, keep, cap;

	cap = lease_hold(t->pol, broker_agents_of(b));
	if (t->n_samples)
		count = t->last.admitted + t->last.denied;
	if (count != s->seen_count) {
		s->seen_count = count;
		s->last_active_ns = now;
	}
	/* A lowered limit (or a grown fleet) shrinks the cap: what a
	 * host holds beyond it goes back at once rather than being
	 * spent under the old limit. */
	tokens = host_tokens(b, t->slot, now);
	if (tokens + s->refunding > cap) {
		broker_refund(b, t, tokens + s->refunding - cap);
		return;
	}
	if (s->want_lease || now - s->last_active_ns < ttl_ns) {
		maybe_lease(b, t, now, !s->last_grant_ns);
		return;
	}
	/* Without demand, the first lease (which pays the credit the
	 * tenant started on) or one that pays a debt: paced, so that an
	 * agent given 100,000 tenants at once does not send 100,000
	 * calls at once.  Demand (a low-water event, recent traffic)
	 * never waits for this. */
	if (!s->last_grant_ns || s->debt) {
		if (!s->inflight && (*warm)++ >= WARM_LEASES_PER_CHECK)
			return;
		maybe_lease(b, t, now, !s->last_grant_ns);
		return;
	}
	/* Idle: back to the reserve, so that the first connections
	 * after a quiet spell are admitted at once, even on every host
	 * together: what is beyond it goes back, and a host that ran
	 * dry (a fleet at its limit that went quiet) leases the rest,
	 * paced like the first leases.  The low-water mark at the
	 * reserve: the first SYN asks for a lease, and the whole
	 * reserve covers its round trip. */
	keep = lease_reserve(t->pol, broker_agents_of(b));
	if (s->lowwater < keep) {
		s->lowwater = keep;
		host_tokens_add(b, t->slot, 0, (int64_t)keep);
	}
	if (tokens > keep && now - s->last_grant_ns > ttl_ns) {
		broker_refund(b, t, tokens - keep);
	} else if (held_of(b, s) < keep && *warm < WARM_LEASES_PER_CHECK) {
		unsigned int first, nth;

		if (lease_may_call(b, t, s, now, &first, &nth) &&
		    lease_call(b, t, s, first, nth, keep - held_of(b, s)) == 0)
			(*warm)++;
	}
}

/*
 * When the tenant needs its next look (lease_visit()): at every check
 * while it has demand (within the lease TTL of its counters moving, or a
 * low-water event) or a call in flight; in its turn while it waits for a
 * paced lease; at the end of the lease TTL when an idle refund will be
 * due; else at no time - until an event says otherwise: a low-water event
 * (broker_lowwater()), its counters moving (broker_slot_moved(), from the
 * agent's sampling of every counter each second), a reply, its policy, the
 * fleet's size or Redis's health changing (a walk of every tenant).
 */
static void lease_schedule(struct broker *b, const struct broker_tenant *t,
			   struct slot *s, uint64_t now)
{
	uint64_t ttl_ns = b->o.lease_ttl_ms * 1000000ULL, keep;

	if (s->want_lease || s->inflight || now - s->last_active_ns < ttl_ns) {
		wake_list(&b->wake, s->idx);
		return;
	}
	keep = lease_reserve(t->pol, broker_agents_of(b));
	if (!s->last_grant_ns || s->debt || held_of(b, s) < keep) {
		wake_queue(&b->wake, s->idx);
		return;
	}
	wake_at(&b->wake, s->idx, host_tokens(b, s->idx, now) > keep ?
		s->last_grant_ns + ttl_ns + 1 : 0);
}

/* Every tenant's look (lease_visit()), and when each needs the next. */
void broker_lease_all(struct broker *b, uint64_t now)
{
	unsigned int warm = 0;

	wake_clear(&b->wake);
	b->walk_all = false;
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;
		struct slot *s;

		host_tenant_at(b, i, &t);
		s = slot_of(b, &t);
		if (!s)
			continue;	/* not in step: its name is not kept */
		lease_visit(b, &t, s, now, &warm);
		lease_schedule(b, &t, s, now);
	}
}

/* The look of one slot's tenant, if it still has one there. */
static void lease_visit_slot(struct broker *b, uint32_t idx, uint64_t now,
			     unsigned int *warm)
{
	struct broker_tenant t;
	struct slot *s = &b->slots[idx];

	if (!slot_tenant(b, s, &t))
		return;		/* gone: nothing to look at */
	s = slot_of(b, &t);
	lease_visit(b, &t, s, now, warm);
	lease_schedule(b, &t, s, now);
}

/*
 * A check's leasing: the looks of the tenants that need one now (listed,
 * or due by now), then of those waiting for a paced lease, in turn, until
 * this check's paced calls are made (or each waiting one was looked at
 * once).  An idle tenant costs nothing here; a walk of every tenant when
 * something changed them all.
 */
void broker_lease_due(struct broker *b, uint64_t now)
{
	unsigned int warm = 0;
	const uint32_t *due;
	size_t n, waiting;
	uint32_t idx;

	if (b->walk_all || b->wake.all) {
		broker_lease_all(b, now);
		return;
	}
	n = wake_take(&b->wake, now, &due);
	for (size_t i = 0; i < n; i++)
		lease_visit_slot(b, due[i], now, &warm);
	waiting = b->wake.q_n;
	while (warm < WARM_LEASES_PER_CHECK && waiting-- &&
	       wake_next_queued(&b->wake, &idx))
		lease_visit_slot(b, idx, now, &warm);
}

/* The agent's sampling saw the counters of slot's tenant move. */
void broker_slot_moved(struct broker *b, uint32_t slot)
{
	if (!b)
		return;
	wake_list(&b->wake, slot);
	if (!b->cc && (b->circ.open || b->n_rejoin))
		debt_moved_add(b, slot);
}

/*
 * Redis Cluster: each tenant is degraded while its own shard is (its node's
 * breaker open, or no node ready for its slot), with the single Redis's
 * rules applied per tenant: the fail policy's admissions counted from the
 * moment it is, the kernel told (RL_F_DEGRADED) after that, debt owed for a
 * spell shorter than the lease TTL and leases dropped after it; and the
 * count brought up to date before the kernel is told it is over.  Tenants
 * on healthy shards are not touched.
 */
void broker_shards_update(struct broker *b, uint64_t now)
{
	uint64_t ttl_ns = b->o.lease_ttl_ms * 1000000ULL, dropped = 0;

	if (!b->cc)
		return;
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant tv, *t = &tv;
		struct slot *s;
		bool down;

		host_tenant_at(b, i, t);
		s = slot_of(b, t);
		if (!s)
			continue;
		/* a split tenant: while none of its sub-buckets' shards can
		 * lease; one shard down only takes its sub-buckets' shares */
		down = !tenant_callable(b, t->pol) && !b->done;

		if (down && !s->shard_down) {
			debt_baseline(b, s);
			s->shard_down = true;
			s->shard_expired = false;
			slot_rare(s)->shard_down_ns = now;
		} else if (!down && s->shard_down) {
			/* shard_expired stays: it is the spell's until the
			 * tenant's first lease (rejoin) */
			count_static_debt(b, t->pol, s);
			s->shard_down = false;
			rejoin_start(b, s);
		} else if (down) {
			count_static_debt(b, t->pol, s);
			if (!s->shard_expired &&
			    loop_now_ns() - slot_rare(s)->shard_down_ns > ttl_ns) {
				dropped += expire_tenant(b, t, s);
				s->shard_expired = true;
			}
		} else if (s->rejoin) {
			count_static_debt(b, t->pol, s);
		}
		/* Every time: a slot reconfigured for a new tenant starts
		 * without the flag. */
		host_tenant_degraded(b, t->slot, s->shard_down || s->rejoin);
	}
	if (dropped)
		log_info("shard degraded past the lease TTL: %llu leased token(s) "
			 "expired", (unsigned long long)dropped);
}

/* Every CHECK_MS: the heartbeat to the kernel, the breaker's timeouts, the
 * static share's debt while degraded, the outage rule, then leasing. */
void broker_on_check(struct loop_timer *tm, void *arg)
{
	struct broker *b = arg;
	uint64_t now = loop_now_ns(), ttl_ns = b->o.lease_ttl_ms * 1000000ULL;

	(void)tm;
	if (b->cc) {
		/* The fleet as a whole is degraded only while shutting down;
		 * each tenant's shard says the rest. */
		host_fleet_state(b, now, b->done);
		broker_cluster_check(b, now);
		broker_shards_update(b, now);
		if (broker_leasing(b))
			broker_lease_all(b, now);
		broker_rejoin_end(b);
		broker_conns_check(b, now);
		return;
	}
	/* The kernel's view of this agent: alive, and whether Redis is. */
	host_fleet_state(b, now, b->circ.open || b->done);
	breaker_check_timeouts(b, now);
	broker_script_loads_check(b, now);
	/* While degraded, and while rejoining: what the fail policy
	 * admitted, for the tenants that moved.  The slots are kept in step
	 * by the changes themselves (broker_slot_ready(),
	 * broker_tenants_changed()). */
	if (b->circ.open || b->n_rejoin)
		broker_debt_look_moved(b);
	/* The time again: the breaker may have opened just now, after now
	 * was read. */
	if (b->circ.open && !b->tokens_expired && loop_now_ns() - b->open_since_ns > ttl_ns)
		expire_leases(b);
	if (broker_leasing(b))
		broker_lease_due(b, now);
	broker_rejoin_end(b);
	broker_conns_check(b, now);
}

void broker_lowwater(struct broker *b, uint32_t slot)
{
	struct broker_tenant t;

	/* a slot holds one tenant at most */
	if (slot >= b->h.max_slots || !slot_tenant(b, &b->slots[slot], &t))
		return;
	slot_of(b, &t)->want_lease = true;
	slot_of(b, &t)->last_active_ns = loop_now_ns();
	wake_list(&b->wake, slot);
	if (broker_leasing(b))
		maybe_lease(b, &t, loop_now_ns(), true);
}

void broker_tenants_changed(struct broker *b)
{
	if (!b)
		return;
	b->conns_any = true;
	slots_sync(b);
	if (broker_leasing(b))
		broker_lease_all(b, loop_now_ns());
}
