/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Fleet mode's lease arithmetic, as pure functions: how much a host may hold
 * of a tenant's tokens (the lease cap), what the fleet may admit beyond the
 * limit (the overshoot bound), and how big each lease and low-water mark are
 * for a host's observed traffic, and when to come back to a bucket that is
 * short.  The broker (user/agent/broker_lease.c) does the I/O around these;
 * docs/operations.md explains the choices to operators.
 */
#ifndef RL_LEASE_H
#define RL_LEASE_H

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"

/* A tenant's kernel counters as sampled at t_ns (monotonic). */
struct lease_sample {
	uint64_t t_ns, admitted, denied;
};

/* A host's share of the tenant's overshoot budget: the most tokens it may
 * hold at once (in its kernel, in a lease on its way, in a refund on its
 * way), at least 1. */
uint64_t lease_cap(const struct policy_tenant *t, uint64_t agents);

/* Tokens the kernel may admit past a host's last leased one while the
 * next lease is on its way (rl_tenant.overdraft): a quarter of the cap,
 * rounded down (0 for caps under 4).  Traffic that jumps on a host (load
 * moving to it from another) or an agent that is late (a stalled CPU, a
 * slow round trip) spends it instead of being refused; the next lease pays
 * it back first.  It comes out of the cap: what a host holds stays within
 * lease_hold(), so the held tokens and the overdraft together stay within
 * the cap and the overshoot bound is unchanged. */
uint64_t lease_overdraft(const struct policy_tenant *t, uint64_t agents);

/* What a host may hold of a tenant's tokens (in its kernel, in a lease on
 * its way, in a refund on its way): the cap less the overdraft, at least 1.
 * Leases, low-water marks, the credit and the reserve are sized within it. */
uint64_t lease_hold(const struct policy_tenant *t, uint64_t agents);

/* What one host's static fail share can admit during a degraded spell of at
 * most ttl_ms before the spell counts as an outage: its burst (burst /
 * agents) plus ttl_ms of its refill (rate / agents), plus one for rounding.
 * The broker pays that much back to Redis once healthy again, so it is the
 * most a host ever owes.  0 for tenants whose fail policy is not static. */
uint64_t lease_static_debt_max(const struct policy_tenant *t, uint64_t agents,
			       uint64_t ttl_ms);

/* The overshoot bound: over any window T the fleet admits at most
 * rate x T + burst + this, as long as no host stays degraded for longer
 * than ttl_ms.  agents x (lease cap + static debt max). */
uint64_t lease_bound(const struct policy_tenant *t, uint64_t agents,
		     uint64_t ttl_ms);

/* Tokens a host may admit on credit when it first sees a tenant, before
 * its first lease has come back: its share of the burst (rounded down, so
 * possibly 0), within what it may hold (lease_hold()).  Paid back by the
 * first lease. */
uint64_t lease_credit(const struct policy_tenant *t, uint64_t agents);

/* Tokens an idle host keeps of a tenant: the credit, or one token where
 * that is 0 (within lease_hold(), which is at least 1).  Tokens beyond it go
 * back to the global bucket once the tenant has been idle for a lease TTL,
 * and a host left with fewer (it ran dry) leases the rest, so that the
 * first connections after a quiet spell never wait for a lease, on every
 * host at once.  Leased like any token, so within the cap and the bound. */
uint64_t lease_reserve(const struct policy_tenant *t, uint64_t agents);

/* A host that refuses this much of its traffic is at the fleet's limit. */
#define LEASE_SATURATED		0.05
/* The smallest chunk, in ms of the tenant's rate: how soon a host that
 * found the bucket empty may ask again. */
#define LEASE_CHUNK_MS		30

struct lease_in {
	double rate;		/* this host's demand (admitted + refused) per
				 * second; negative: not measured yet */
	double refused;		/* the part of it refused lately, 0 .. 1 */
	const struct policy_tenant *t;
	uint64_t agents;	/* live agents, >= 1 */
	uint64_t ttl_ms;	/* the lease TTL */
	uint64_t lead_ms;	/* how long a lease takes to arrive, with margin */
};

struct lease_plan {
	uint64_t size;		/* tokens to top up by, 1 .. min(burst, hold) */
	uint64_t lowwater;	/* ask for the next lease at this many held */
	uint64_t chunk;		/* when Redis is short, come back for this many */
};

/*
 * Sizes a host's leases for its demand h (tokens per second) and the
 * tenant's rate r.  When the global bucket is short, Redis tells the host to
 * come back once a chunk C has refilled, C/r later; the low-water mark W
 * covers h x (C/r + lead), so the host never runs dry while it waits, as
 * long as the fleet as a whole stays under the rate.  C is a whole lease L,
 * or less where that leaves L more room: the smallest C that covers its own
 * refill (C = W), at least LEASE_CHUNK_MS of the rate.  L + W is kept within
 * what the host may hold (lease_hold(): the cap, the overshoot bound's
 * share, less the overdraft; "the cap" below), and L within one lease TTL
 * of traffic
 * (fewer calls: one per L admissions, and whatever sits unused for a TTL
 * goes back anyway), but at least the credit where the cap has room.
 * W takes the cap first, but a cap too small for both (a far Redis's long
 * lead) leaves L at least half of it, or a lead of traffic where that is
 * less: a host gets about half a cap per round trip, not a token.
 * A host whose own demand exceeds r, or that refuses LEASE_SATURATED of it,
 * is at the limit: the biggest leases and chunks (fewest calls) and a
 * low-water mark of the lead alone.  Unknown demand: the credit, so that a
 * new tenant or a fresh agent does not start by refusing while it
 * measures, and half of it as the low-water mark.
 */
void lease_plan(const struct lease_in *in, struct lease_plan *out);

/* Tokens to ask for so that held + the lease stays within cap: min(size,
 * cap - held), 0 when the host already holds its cap. */
uint64_t lease_topup(uint64_t cap, uint64_t held, uint64_t size);

/* What a lease call asks for: the top-up, plus the debt and what the kernel
 * overdrew (the grant pays those first), at most POLICY_BURST_MAX (the
 * largest want lease.lua takes; no bucket holds more).  0: nothing to ask,
 * the host holds all it may and owes nothing.  A tenant's first lease that
 * would ask for nothing (tokens the agent adopted from its last run, up to
 * the cap) counts as granted: it is settled, not asked again at every
 * check, and its idle tokens beyond the reserve go back after a lease TTL
 * as a leased tenant's do.  Nothing is added to what the host holds, so
 * the overshoot bound is unchanged. */
uint64_t lease_ask(uint64_t topup, uint64_t debt, uint64_t overdrawn);

/* A lease's lead time (how long it takes to arrive, with margin) for a
 * smoothed round trip of rtt_ns: the round trip and half of it again for
 * jitter, on top of LEASE_LEAD_MIN_MS (the loop, the kernel's low-water
 * event), at most LEASE_LEAD_MAX_MS, the default lease TTL: tokens fetched
 * longer ahead than a TTL would lapse before they are spent.  A longer lead
 * only moves tokens from the lease to the low-water mark within the cap, no
 * further than half the cap (lease_plan()): the overshoot bound does not
 * depend on it. */
#define LEASE_LEAD_MIN_MS	20
#define LEASE_LEAD_MAX_MS	1000
uint64_t lease_lead_ms(uint64_t rtt_ns);

/* The rate since the last sizing counts once that is this old, and no
 * older than this. */
#define LEASE_METER_MIN_MS	5
#define LEASE_METER_MAX_MS	500

/* What a host's demand for a tenant is measured from. */
struct lease_meter {
	unsigned int n_samples;		/* 1 s samples kept: first and last are
					 * valid from 1 */
	struct lease_sample first, last;	/* the oldest and the latest */
	uint64_t now_ns, count;		/* now, and admitted + refused by now */
	uint64_t sized_ns, sized_count;	/* the same at the last sizing
					 * (sized_ns 0: none yet) */
};

/*
 * The host's demand (admitted + refused per second): the largest of the
 * rate over the samples, the rate since the latest sample (at least 50 ms
 * ago) and the rate since the last sizing, so that traffic moving to this
 * host gets big leases at once, not after the samples have caught up.
 * Negative when not measured yet: traffic that starts after a quiet spell,
 * before a sizing could measure it (the longer rates would average the
 * quiet spell in).  Counters that fell (a slot reset) measure nothing.
 * *refused: the part of the demand refused over the samples, 0 .. 1.
 */
double lease_demand(const struct lease_meter *m, double *refused);

/*
 * How long to wait before the next lease, after a reply that granted
 * `granted` of the `asked` tokens and left `remaining` in the global
 * bucket.  Redis's own advice (advised_ms, given when it granted nothing);
 * or, granted in full but with less than `chunk` left, the time until a
 * chunk has refilled at the tenant's rate, rounded up: the fleet is at its
 * limit, and prefetching sooner would only fetch crumbs (the low-water mark
 * covers that long: lease_plan()).  0: no need to wait.
 */
uint64_t lease_wait_ms(const struct policy_tenant *t, uint64_t asked,
		       uint64_t granted, uint64_t remaining, uint64_t chunk,
		       uint64_t advised_ms);

/* A host's holding of a tenant's connection slots, the fleet's cap shared
 * through Redis (user/agent/broker_conns.c). */
struct lease_conns {
	uint64_t cap;			/* the tenant's max_conns, above 0 */
	uint64_t agents;		/* live agents, at least 1 */
	unsigned int points;		/* where the host admits: 1, or 2 with a
					 * preload pool beside XDP */
	uint64_t held, in_flight;	/* the host's holding, and in flight */
	unsigned int n_samples;		/* the tenant's counters, as in struct */
	struct lease_sample first, last; /* lease_meter */
	uint64_t check_ms;		/* how often the host looks */
};

/*
 * The holding to ask for now (held: none to ask for).  None while idle -
 * nothing in flight and no SYN between the samples, or no samples yet - so
 * that the cap is free for a burst on any host, which its kernel admits
 * into the free slots before the agent claims them.  By the chunk (a
 * quarter of the host's share of the cap, at least points): a chunk more
 * when fewer than half a chunk are free (or fewer than points), a chunk
 * back when more than two are.  Under churn - SYNs (refusals included, over
 * the samples) that would fill more than a chunk in two checks - by the
 * room they need instead, up to the share (cap / agents) with what is in
 * flight: up to twice the room, or the share, when fewer than the room
 * are free, back to that when more than three times the room are.  Hosts
 * within their shares never take slots from each other.  Never more than
 * the cap.
 */
uint64_t lease_conns_want(const struct lease_conns *c);

#endif /* RL_LEASE_H */
