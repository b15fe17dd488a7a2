/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Overload shedding's decision: start, stop, budget and each tenant's
 * share of it (shed.h says what each function promises). */
#include <math.h>

#include "shed.h"

uint32_t shed_mark_len(uint32_t max, unsigned int mark_pct)
{
	uint64_t len;

	if (!mark_pct)
		return UINT32_MAX;
	len = ((uint64_t)max * mark_pct + 99) / 100;
	return len ? (uint32_t)len : 1;
}

double shed_ewma(double avg, double sample)
{
	return avg + SHED_EWMA * (sample - avg);
}

bool shed_sample(struct shed_ctl *c, uint32_t len, uint32_t max,
		 unsigned int mark_pct, uint64_t admitted, double demand,
		 double dt_s)
{
	uint32_t mark = shed_mark_len(max, mark_pct);
	double accepted, budget;

	if (c->primed && dt_s > 0) {
		/* handshakes still in flight count as accepted now and as
		 * queue growth at the next sample: the average evens it */
		accepted = (double)admitted - ((double)len - (double)c->len_prev);
		if (accepted < 0)
			accepted = 0;
		c->accept_rate = shed_ewma(c->accept_rate, accepted / dt_s);
	}
	c->primed = true;
	c->len_prev = len;
	if (!mark_pct || !max) {
		c->on = false;
		return false;
	}
	budget = c->accept_rate +
		 ((double)mark - (double)len) / SHED_HORIZON_S;
	c->budget = budget > 0 ? budget : 0;
	if (!c->on)
		c->on = len >= mark;
	else if (len < mark && demand <= c->budget)
		c->on = false;
	return c->on;
}

double shed_level(double budget, size_t n, const uint32_t *w, const double *d)
{
	double total = 0, level = 0;

	for (size_t i = 0; i < n; i++)
		total += d[i] > 0 ? d[i] : 0;
	if (total <= budget)
		return INFINITY;
	/* Water-filling: a tenant that asks no more than its weight's part
	 * of the level takes what it asks and leaves the rest to the others.
	 * The level only rises from round to round (each settles more
	 * tenants below it, leaving more to fewer), so at most n + 1 rounds,
	 * the last of which settles nobody new. */
	for (size_t round = 0; round <= n; round++) {
		double left = budget > 0 ? budget : 0, wsum = 0, next;

		for (size_t i = 0; i < n; i++) {
			double wi = w[i] ? w[i] : 1;

			if (d[i] <= wi * level)
				left -= d[i] > 0 ? d[i] : 0;
			else
				wsum += wi;
		}
		next = wsum > 0 && left > 0 ? left / wsum : level;
		if (next <= level)
			break;
		level = next;
	}
	return level;
}
