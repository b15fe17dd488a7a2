/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Overload shedding: while a protected listener's accept queue stands at
 * or above a mark, the tenants' admissions are held to what the server
 * accepts, shared by weight.  The pure decision - when to start and stop,
 * how much to admit, each tenant's limit - is here; the agent reads the
 * queue and writes the limits (user/agent/agent_shed.c).
 */
#ifndef RL_SHED_H
#define RL_SHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHED_WEIGHT_MAX		1000
/* How fast the budget brings the queue back to the mark: the room above
 * it (or the excess) spread over this long. */
#define SHED_HORIZON_S		0.05
/* Weight of the newest sample in the running averages of the accept rate
 * and of each tenant's demand: about ten samples' memory. */
#define SHED_EWMA		0.1

/* The controller's state between samples (all zero: off, nothing seen). */
struct shed_ctl {
	bool on;		/* holding the tenants to their limits */
	bool primed;		/* len_prev holds a sample */
	uint32_t len_prev;	/* the queue at the last sample */
	double accept_rate;	/* the server's accepts per second, averaged */
	double budget;		/* admissions per second while on */
};

/* The queue length at which shedding starts: mark_pct of max, at least
 * one connection (a mark of 0 never sheds: UINT32_MAX). */
uint32_t shed_mark_len(uint32_t max, unsigned int mark_pct);

/*
 * One sample, dt_s seconds after the last: the listener's accept queue
 * (len of max), the admissions of the tenants it serves since the last
 * sample, and their demand (SYNs offered, admitted or not, per second,
 * averaged).  What the server accepted is what was admitted less what
 * the queue grew by.  Starts shedding once len reaches the mark; while on,
 * the budget is the accept rate plus the room below the mark over
 * SHED_HORIZON_S (less, above it; never below 0); stops once the queue is
 * below the mark and the demand fits in the budget.  Returns c->on.
 */
bool shed_sample(struct shed_ctl *c, uint32_t len, uint32_t max,
		 unsigned int mark_pct, uint64_t admitted, double demand,
		 double dt_s);

/*
 * The water level of a weighted max-min share of budget among n tenants
 * of weights w[i] (0 counts as 1) and demands d[i] (per second): the level
 * L at which sum(min(d[i], w[i] x L)) is the budget.  Each tenant is then
 * held to w[i] x L: one that asks less than that is refused nothing, and
 * what it leaves goes to the others by weight.  INFINITY when the demands
 * fit in the budget (nobody need be held).
 */
double shed_level(double budget, size_t n, const uint32_t *w, const double *d);

/* A running average's next value: sample weighted SHED_EWMA. */
double shed_ewma(double avg, double sample);

#endif /* RL_SHED_H */
