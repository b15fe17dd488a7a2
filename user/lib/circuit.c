// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The broker's health decisions (see circuit.h). */
#include "circuit.h"

void circuit_init(struct circuit *c)
{
	*c = (struct circuit){ .open = true };
}

enum circuit_change circuit_step(struct circuit *c, enum circuit_event ev,
				 bool ready, unsigned int threshold)
{
	switch (ev) {
	case CIRCUIT_FAILURE:
		if (++c->failures < threshold)
			return CIRCUIT_SAME;
		/* fall through */
	case CIRCUIT_LOST:
		c->failures = 0;
		if (c->open)
			return CIRCUIT_SAME;
		c->open = true;
		if (c->ever_healthy)
			c->transitions++;
		return CIRCUIT_OPENED;
	case CIRCUIT_SUCCESS:
	default:
		c->failures = 0;
		if (!c->open || !ready)
			return CIRCUIT_SAME;
		c->open = false;
		if (c->ever_healthy)
			c->transitions++;
		c->ever_healthy = true;
		return CIRCUIT_CLOSED;
	}
}

uint64_t circuit_live_agents(uint64_t in_use, uint64_t seen, uint64_t now_ns,
			     uint64_t hold_ns, uint64_t *low_since)
{
	if (seen < in_use) {
		if (!*low_since)
			*low_since = now_ns;
		if (now_ns - *low_since < hold_ns)
			return in_use;
	}
	*low_since = 0;
	return seen;
}
