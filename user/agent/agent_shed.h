/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Overload shedding (rlagent --shed-at): the agent's side, which reads the
 * listeners' accept queues and holds the tenants' buckets (agent_shed.c);
 * the decision is user/lib/shed.h's. */
#ifndef RL_AGENT_SHED_H
#define RL_AGENT_SHED_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "agent.h"

/* How often the queues are read: a queue of a few connections fills in
 * tens of milliseconds under a flood. */
#define SHED_PERIOD_MS		10

struct agent_shed_listener {
	uint16_t port;
	uint32_t len, max;	/* accept queue and backlog */
};

struct agent_shed_status {
	unsigned int mark_pct;
	uint16_t port;		/* --shed-port, 0: every listener */
	struct agent_shed_listener top;	/* the fullest at the last sample */
	bool on;		/* shedding now */
	double budget;		/* admissions per second while on */
	double accept_rate;	/* the server's accepts per second */
	uint64_t starts;	/* times shedding started */
};

/* Starts watching (mark_pct 0: off, nothing done).  0 or -ENOMEM. */
int agent_shed_open(struct agent *a, unsigned int mark_pct, uint16_t port);
/* Stops, every held tenant given back its policy's limits. */
void agent_shed_close(struct agent *a);
/* false when shedding is off. */
bool agent_shed_state(const struct agent *a, struct agent_shed_status *out);
/* A tenant's SYNs refused while held, and what it is held to now (per
 * second; < 0: not held).  false when shedding does not apply to it. */
bool agent_shed_tenant(const struct agent *a, const struct agent_tenant *t,
		       uint64_t *shed, double *limit);

/* rlctl status's "shed": the mark, the fullest listener, whether it sheds
 * and at what budget; NULL when shedding is off. */
json_t *agent_shed_json(const struct agent *a);
/* A stats row's "shed" (refused while held), "shed_limit" (per second,
 * null when not held) and "weight"; nothing when shedding is off. */
void agent_shed_tenant_json(const struct agent *a, const struct agent_tenant *t,
			    json_t *j);

#endif /* RL_AGENT_SHED_H */
