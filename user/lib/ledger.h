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
 * The agent's own count of a slot's leased tokens, in two parts:
 *   given  what it gave the slot, less what it took back and every spend
 *          it saw (a count read below the ledger): never above what it
 *          gave less what it took, and the most it ever takes back;
 *   spare  what the slot held when the agent started (left by the agent
 *          before it, or written by anyone): spent there, never taken
 *          back.  Spends are counted against it first.
 * A count read above given + spare was raised by someone else: a forgery.
 */
struct rl_ledger {
	uint64_t given;
	uint64_t spare;
};

/* A count seen in the slot: the forged excess above given + spare (the
 * ledger unchanged), or 0 with the spends it shows counted in l. */
uint64_t rl_ledger_see(struct rl_ledger *l, int64_t seen);

/* A ledger for a slot found holding tokens when the agent starts: all
 * spare. */
void rl_ledger_adopt(const struct rl_tenant *rt, struct rl_ledger *l);

/* No more spare tokens than max (the most a host may hold of the
 * tenant): beyond that they were written, not given, and are taken out as
 * rl_ledger_trim does.  Returns the tokens forged. */
uint64_t rl_ledger_bound(struct rl_tenant *rt, struct rl_ledger *l,
			 uint64_t max);

/* Brings the slot back to its ledger: a forged excess is taken out (and
 * dropped, never given to anyone), a spend lowers the ledger.  Returns the
 * tokens forged.  Safe while readers spend from rt. */
uint64_t rl_ledger_trim(struct rl_tenant *rt, struct rl_ledger *l);

/* Adds n granted tokens to the slot (rl_slot_tokens_add) and the ledger. */
void rl_ledger_add(struct rl_tenant *rt, struct rl_ledger *l, uint64_t n,
		   int64_t lowwater);

/* Takes up to max tokens back (0: all), after rl_ledger_trim and never
 * more than given; *forged (may be NULL) gets what the trim found.
 * Returns the tokens taken. */
uint64_t rl_ledger_take(struct rl_tenant *rt, struct rl_ledger *l, uint64_t max,
			uint64_t *forged);

/* The slot's tokens as far as the ledger goes: rl_ledger_tokens, the
 * agent's own (min(count, given)), what it counts as the host's lease;
 * rl_ledger_spendable, those and the spare ones (min(count, given +
 * spare)). */
uint64_t rl_ledger_tokens(const struct rl_tenant *rt, const struct rl_ledger *l);
uint64_t rl_ledger_spendable(const struct rl_tenant *rt,
			     const struct rl_ledger *l);

/*
 * Connections in flight in a slot the agent cannot count itself: the
 * larger of the slot's count and what the agent last found the processes
 * holding (found < 0: not known).  A count lowered by a forged release
 * then frees no place the processes still hold once the agent has looked.
 */
int64_t rl_ledger_conns(int64_t seen, int64_t found);

#endif /* RL_LEDGER_H */
