// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fleet mode's lease arithmetic: the lease cap, the static share a degraded
 * host may owe, the overshoot bound, and lease sizing.  No I/O: each answer
 * follows from its arguments, so the unit tests are tables.
 */
#include <math.h>

#include "lease.h"

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Rounds up, but not a whole number that floating point missed by a hair
 * (1000 x 0.12 is 120.00000000000001). */
static double ceil_tokens(double x)
{
	return ceil(x - 1e-9);
}

/* The least lease a cap too small for both the lease and the low-water mark
 * still leaves: half the cap (rounded up), but no more than the biggest
 * lease (max) nor than `trip` tokens, what the host spends in a lead (a
 * lease that lasts as long as the next one may take to arrive needs no
 * more).  Not a bare round trip of traffic: a host gets one lease per
 * round trip and a bit, so such leases fall short of its demand by
 * whatever the loop, a busy CPU or the network adds to the measured round
 * trip, and it runs dry a little with every lease; the lead's margin is
 * what covers those.  A host holds at most its cap, lease on its way
 * included, so it gets at most a cap per round trip: a low-water mark that
 * took nearly all of it would leave leases of a token or two per round
 * trip, whereas half and half gets at least half of what any split can. */
static double lease_keep(uint64_t cap, uint64_t max, double trip)
{
	double keep = (double)(cap - cap / 2);

	if (keep > (double)max)
		keep = (double)max;
	if (keep > ceil_tokens(trip))
		keep = ceil_tokens(trip);
	return keep < 1 ? 1 : keep;
}

/* Fits the lease l and the low-water mark w within the cap (the overshoot
 * bound), the mark first, but leaving the lease at least keep. */
static void fit_cap(uint64_t cap, double keep, double *l, double *w)
{
	if (*w > (double)cap - 1)
		*w = (double)cap - 1;
	if (*l + *w > (double)cap) {
		if (*w > (double)cap - keep)
			*w = (double)cap - keep;
		*l = (double)cap - *w;
	}
}

uint64_t lease_cap(const struct policy_tenant *t, uint64_t agents)
{
	uint64_t cap = policy_overshoot_budget(t) / (agents ? agents : 1);

	return cap ? cap : 1;
}

uint64_t lease_overdraft(const struct policy_tenant *t, uint64_t agents)
{
	return lease_cap(t, agents) / 4;
}

uint64_t lease_hold(const struct policy_tenant *t, uint64_t agents)
{
	/* a quarter of a cap of at least 1, rounded down: never all of it */
	return lease_cap(t, agents) - lease_overdraft(t, agents);
}

uint64_t lease_static_debt_max(const struct policy_tenant *t, uint64_t agents,
			       uint64_t ttl_ms)
{
	uint64_t interval, refill;
	uint32_t burst;

	if (t->fail != POLICY_FAIL_STATIC)
		return 0;
	/* As the kernel has it: a bucket of `burst`, one token per interval. */
	policy_fail_share(t, agents, &interval, &burst);
	refill = (uint64_t)((unsigned __int128)ttl_ms * 1000000u / interval) + 1;
	return sat_add(sat_add(burst, refill), 1);
}

uint64_t lease_bound(const struct policy_tenant *t, uint64_t agents,
		     uint64_t ttl_ms)
{
	uint64_t per = sat_add(lease_cap(t, agents),
			       lease_static_debt_max(t, agents, ttl_ms));

	if (!agents)
		agents = 1;
	return per > UINT64_MAX / agents ? UINT64_MAX : per * agents;
}

uint64_t lease_credit(const struct policy_tenant *t, uint64_t agents)
{
	/* Rounded down: the fleet's credit never exceeds one burst, the
	 * most the global bucket could have granted at once. */
	return min_u64(lease_hold(t, agents), t->burst / (agents ? agents : 1));
}

uint64_t lease_reserve(const struct policy_tenant *t, uint64_t agents)
{
	uint64_t credit = lease_credit(t, agents);

	/* lease_hold() is at least 1 */
	return credit ? credit : 1;
}

uint64_t lease_topup(uint64_t cap, uint64_t held, uint64_t size)
{
	return held >= cap ? 0 : min_u64(size, cap - held);
}

uint64_t lease_ask(uint64_t topup, uint64_t debt, uint64_t overdrawn)
{
	return min_u64(sat_add(sat_add(topup, debt), overdrawn), POLICY_BURST_MAX);
}

void lease_plan(const struct lease_in *in, struct lease_plan *out)
{
	const struct policy_tenant *t = in->t;
	/* the cap of this sizing is what the host may hold: the overdraft
	 * is the rest of its share of the budget */
	uint64_t cap = lease_hold(t, in->agents), max = min_u64(cap, t->burst);
	uint64_t credit = lease_credit(t, in->agents);
	double h = in->rate, r = (double)t->rate.count / (double)t->rate.period_s;
	double lead = (double)in->lead_ms / 1000.0, tau = (double)in->ttl_ms / 1000.0;
	double lead_tokens, l, w, chunk, fixed, keep;

	if (h <= 0) {
		/* Nothing measured yet, or nothing lately and yet here we are
		 * (a low-water event): traffic is starting that was not there to
		 * measure.  The credit, and half of it as the low-water mark (the
		 * top-up stays within the cap: lease_topup()). */
		out->size = out->chunk = min_u64(max, credit ? credit : 1);
		out->lowwater = min_u64(cap - 1, out->size / 2 ? out->size / 2 : 1);
		return;
	}
	lead_tokens = h * lead;
	if (h >= r || in->refused >= LEASE_SATURATED) {
		/* This host alone asks for more than the whole limit, or it
		 * refuses a good part of its traffic already: the fleet is at
		 * its limit, and no low-water mark changes that.  The biggest
		 * leases and the biggest chunks, so that a saturated tenant
		 * costs the fewest calls; the low-water mark only covers the
		 * round trip. */
		w = ceil_tokens((h < r ? h : r) * lead);
		l = (double)max;
		fit_cap(cap, lease_keep(cap, max, (h < r ? h : r) * lead),
			&l, &w);
		out->size = l < 1 ? 1 : (uint64_t)l;
		out->lowwater = w < 0 ? 0 : (uint64_t)w;
		out->chunk = out->size;
		return;
	}
	/* L + W = h tau + h (h tau / r + lead) <= cap gives the longest lease
	 * period tau the cap allows, with a chunk of a whole lease. */
	if ((double)cap > lead_tokens) {
		double tau_max = ((double)cap - lead_tokens) / (h + h * h / r);

		if (tau_max < tau)
			tau = tau_max;
	} else {
		tau = 0;
	}
	l = ceil_tokens(h * tau);
	if (l < 1)
		l = 1;
	if (l > (double)max)
		l = (double)max;
	/* A cap the low-water mark would take nearly all of still leaves the
	 * lease its share (within a TTL of traffic). */
	keep = lease_keep(cap, max, h * fmin(lead, (double)in->ttl_ms / 1000.0));
	if (l < keep)
		l = keep;
	chunk = l;
	/* A smaller chunk needs a smaller low-water mark, which leaves the
	 * lease more of the cap: the chunk that covers its own refill,
	 * W = h (W / r + lead), unless that is a whole lease anyway.  Not
	 * below LEASE_CHUNK_MS of the rate: a host that finds the bucket
	 * empty comes back no sooner than that. */
	fixed = ceil_tokens(lead_tokens / (1 - h / r));
	if (fixed < r * LEASE_CHUNK_MS / 1000.0)
		fixed = ceil_tokens(r * LEASE_CHUNK_MS / 1000.0);
	if (fixed < chunk) {
		chunk = fixed;
		l = ceil_tokens(h * (double)in->ttl_ms / 1000.0);
		if (l > (double)max)
			l = (double)max;
	}
	w = ceil_tokens(h * (chunk / r + lead));
	fit_cap(cap, keep, &l, &w);
	/* At least the credit, where the cap has room: a host whose traffic
	 * is only starting does not fetch it a few tokens at a time while its
	 * measured rate catches up. */
	if (l < (double)credit && (double)cap - w > l)
		l = (double)credit < (double)cap - w ? (double)credit : (double)cap - w;
	if (l < 1)
		l = 1;
	out->size = (uint64_t)l;
	out->lowwater = w < 0 ? 0 : (uint64_t)w;
	out->chunk = chunk < 1 ? 1 : chunk > l ? out->size : (uint64_t)chunk;
}

uint64_t lease_lead_ms(uint64_t rtt_ns)
{
	uint64_t lead = LEASE_LEAD_MIN_MS + 3 * (rtt_ns / 2000000ULL);

	return lead > LEASE_LEAD_MAX_MS ? LEASE_LEAD_MAX_MS : lead;
}

double lease_demand(const struct lease_meter *m, double *refused)
{
	const struct lease_sample *o = &m->first, *l = &m->last;
	uint64_t age = m->now_ns - m->sized_ns;
	double dt, rate = -1, meter = -1;

	*refused = 0;
	if (m->n_samples >= 2) {
		dt = (double)(l->t_ns - o->t_ns) / 1e9;
		if (dt > 0 && l->admitted >= o->admitted && l->denied >= o->denied &&
		    l->admitted + l->denied > o->admitted + o->denied) {
			rate = (double)(l->admitted + l->denied - o->admitted -
					o->denied) / dt;
			*refused = (double)(l->denied - o->denied) /
				   (double)(l->admitted + l->denied - o->admitted -
					    o->denied);
		}
	}
	if (m->sized_ns && age >= LEASE_METER_MIN_MS * 1000000ULL &&
	    age <= LEASE_METER_MAX_MS * 1000000ULL && m->count >= m->sized_count)
		meter = (double)(m->count - m->sized_count) / ((double)age / 1e9);
	if (rate <= 0 && meter < 0)
		return -1;
	if (m->n_samples >= 1) {
		dt = (double)(m->now_ns - l->t_ns) / 1e9;
		if (dt >= 0.05 && m->count >= l->admitted + l->denied &&
		    (double)(m->count - l->admitted - l->denied) / dt > rate)
			rate = (double)(m->count - l->admitted - l->denied) / dt;
	}
	return meter > rate ? meter : rate;
}

uint64_t lease_wait_ms(const struct policy_tenant *t, uint64_t asked,
		       uint64_t granted, uint64_t remaining, uint64_t chunk,
		       uint64_t advised_ms)
{
	uint64_t per_ms = t->rate.period_s * 1000;

	/* Ignoring other hosts, who only make it later. */
	if (granted == asked && remaining < chunk)
		return ((chunk - remaining) * per_ms + t->rate.count - 1) /
		       t->rate.count;
	return advised_ms;
}

/* Twice the SYNs that arrive in one check, up to the share with what is in
 * flight; 0 while it is no more than a chunk, or unknown. */
static uint64_t conns_room(const struct lease_conns *c, uint64_t chunk,
			   uint64_t share)
{
	const struct lease_sample *f = &c->first, *l = &c->last;
	uint64_t syns, n;

	if (c->n_samples < 2 || l->t_ns <= f->t_ns || l->admitted < f->admitted ||
	    l->denied < f->denied || c->in_flight >= share)
		return 0;
	syns = l->admitted + l->denied - f->admitted - f->denied;
	n = (uint64_t)((double)syns * 2.0 * (double)c->check_ms * 1e6 /
		       (double)(l->t_ns - f->t_ns) + 0.999);
	if (n > share - c->in_flight)
		n = share - c->in_flight;
	return n > chunk ? n : 0;
}

/* Nothing in flight and no SYN between the samples (or none taken yet). */
static bool conns_idle(const struct lease_conns *c)
{
	const struct lease_sample *f = &c->first, *l = &c->last;

	return !c->in_flight &&
	       (c->n_samples < 2 || l->admitted + l->denied == f->admitted + f->denied);
}

uint64_t lease_conns_want(const struct lease_conns *c)
{
	uint64_t share = c->cap / c->agents, chunk = c->cap / (4 * c->agents);
	uint64_t room, top, free_, want = c->held;

	if (conns_idle(c))
		return 0;
	if (chunk < c->points)
		chunk = c->points;
	room = conns_room(c, chunk, share);
	free_ = c->held > c->in_flight ? c->held - c->in_flight : 0;
	if (room) {
		/* a call moves room, or none once the share is held */
		top = c->in_flight + 2 * room;
		if (top > share)
			top = share;
		if ((free_ < room && c->held < top) || free_ > 3 * room)
			want = top;
	} else if ((free_ * 2 < chunk || free_ < c->points) && c->held < c->cap) {
		want = c->in_flight + chunk;
	} else if (free_ > 2 * chunk) {
		want = c->in_flight + chunk;
	}
	return want > c->cap ? c->cap : want;
}
