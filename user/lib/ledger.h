/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The agent's ledger of a slot it shares with processes it does not trust
 * (the preload pool, which every process of its group may write): what it
 * gave the slot bounds what it ever takes back out of it, so a count forged
 * in the slot never reaches the kernel or Redis.
 */
#ifndef RL_LEDGER_H
#define RL_LEDGER_H

#include <stdint.h>

#include "rlgate.h"

/*
 * A ledger is the agent's own count of a slot's leased tokens: raised by
 * what it adds, lowered by what it takes and by every spend it sees (a
 * count read below the ledger); never above what it gave less what it took.
 * A count read above it was raised by someone else: a forgery.
 *
 * rl_ledger_check: of a count seen in the slot, *trusted gets what the
 * agent may believe (min(seen, ledger), never below 0), and the return is
 * the forged excess (seen - ledger, or 0).
 */
uint64_t rl_ledger_check(int64_t seen, uint64_t ledger, uint64_t *trusted);

/* Brings the slot back to its ledger: a forged excess is taken out (and
 * dropped, never given to anyone), a spend lowers the ledger.  Returns the
 * tokens forged.  Safe while readers spend from rt. */
uint64_t rl_ledger_trim(struct rl_tenant *rt, uint64_t *ledger);

/* Adds n granted tokens to the slot (rl_slot_tokens_add) and the ledger. */
void rl_ledger_add(struct rl_tenant *rt, uint64_t *ledger, uint64_t n,
		   int64_t lowwater);

/* Takes up to max tokens back (0: all), after rl_ledger_trim and never
 * more than the ledger holds; *forged (may be NULL) gets what the trim
 * found.  Returns the tokens taken. */
uint64_t rl_ledger_take(struct rl_tenant *rt, uint64_t *ledger, uint64_t max,
			uint64_t *forged);

/* The tokens the slot holds as far as the agent believes: min(count,
 * ledger). */
uint64_t rl_ledger_tokens(const struct rl_tenant *rt, uint64_t ledger);

/*
 * Connections in flight in a slot the agent cannot count itself: the
 * larger of the slot's count and what the agent last found the processes
 * holding (found < 0: not known).  A count lowered by a forged release
 * then frees no place the processes still hold once the agent has looked.
 */
int64_t rl_ledger_conns(int64_t seen, int64_t found);

#endif /* RL_LEDGER_H */
