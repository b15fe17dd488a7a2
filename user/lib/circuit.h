/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The lease broker's decisions about the fleet's health, without I/O: the
 * circuit breaker in front of Redis, and which count of live agents to
 * believe.  The broker does what they decide (logs, the kernel's degraded
 * flag, leases); tests/unit/test_circuit.c states them as tables.
 */
#ifndef RL_CIRCUIT_H
#define RL_CIRCUIT_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Closed: leasing.  It opens after `threshold` consecutive failures (error
 * replies, unusable replies, a call unanswered for the timeout), or at once
 * when the connection is lost or cannot be made.  Open: no leases, fail
 * policies.  A success closes it only when Redis is ready (connected, its
 * scripts loaded): a success on a half-set-up connection proves nothing.
 * It starts open: nothing is leased before Redis has answered once.
 */
struct circuit {
	bool open;
	bool ever_healthy;	/* closed at least once: later changes count */
	unsigned int failures;	/* consecutive, while closed */
	uint64_t transitions;	/* opened or closed after the first close */
};

enum circuit_event {
	CIRCUIT_SUCCESS,	/* a good reply */
	CIRCUIT_FAILURE,	/* a failed call */
	CIRCUIT_LOST,		/* the connection went, or a start-up step failed */
};

enum circuit_change { CIRCUIT_SAME, CIRCUIT_OPENED, CIRCUIT_CLOSED };

/* A new breaker: open, never healthy. */
void circuit_init(struct circuit *c);

/* Applies one event (ready: Redis can take leases now) and says what
 * changed. */
enum circuit_change circuit_step(struct circuit *c, enum circuit_event ev,
				 bool ready, unsigned int threshold);

/*
 * The count of live agents to use (for lease caps and static shares), given
 * the one in use and the registry's latest.  A larger count is believed at
 * once (a new agent must not push the fleet over the limit); a smaller one
 * only after it has been seen for hold_ns without a break (an agent that
 * misses a heartbeat is not gone yet).  *low_since tracks that (0: none).
 */
uint64_t circuit_live_agents(uint64_t in_use, uint64_t seen, uint64_t now_ns,
			     uint64_t hold_ns, uint64_t *low_since);

#endif /* RL_CIRCUIT_H */
