// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The agent's ledger of the tokens it gave a slot others may write (see
 * ledger.h): every count read from the slot is checked against it before
 * a token is taken, moved or refunded.
 */
#include "ledger.h"
#include "slot.h"

static uint64_t count_of(int64_t seen)
{
	return seen > 0 ? (uint64_t)seen : 0;
}

uint64_t rl_ledger_see(struct rl_ledger *l, int64_t seen)
{
	uint64_t v = count_of(seen), total = l->given + l->spare, spent;

	if (v > total)
		return v - total;
	spent = total - v;
	/* the spare tokens go first: never taken back, they are the ones a
	 * spend should use up before the agent's own */
	if (spent <= l->spare) {
		l->spare -= spent;
	} else {
		l->given -= spent - l->spare;
		l->spare = 0;
	}
	return 0;
}

void rl_ledger_adopt(const struct rl_tenant *rt, struct rl_ledger *l)
{
	l->given = 0;
	l->spare = count_of(__atomic_load_n(&rt->tokens, __ATOMIC_ACQUIRE));
}

uint64_t rl_ledger_trim(struct rl_tenant *rt, struct rl_ledger *l)
{
	int64_t v = __atomic_load_n(&rt->tokens, __ATOMIC_ACQUIRE);

	/* A compare-and-swap down to the ledger: a spend between the read
	 * and the write makes it fail, and the count is read again, so no
	 * spend is undone and nothing the ledger holds is lost. */
	for (;;) {
		struct rl_ledger next = *l;
		uint64_t forged = rl_ledger_see(&next, v);

		if (!forged) {
			*l = next;
			return 0;
		}
		if (__atomic_compare_exchange_n(&rt->tokens, &v,
						(int64_t)(l->given + l->spare),
						false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return forged;
	}
}

uint64_t rl_ledger_bound(struct rl_tenant *rt, struct rl_ledger *l,
			 uint64_t max)
{
	if (l->spare > max)
		l->spare = max;
	return rl_ledger_trim(rt, l);
}

void rl_ledger_add(struct rl_tenant *rt, struct rl_ledger *l, uint64_t n,
		   int64_t lowwater)
{
	rl_slot_tokens_add(rt, n, lowwater);
	l->given += n;
}

uint64_t rl_ledger_take(struct rl_tenant *rt, struct rl_ledger *l, uint64_t max,
			uint64_t *forged)
{
	uint64_t f = rl_ledger_trim(rt, l), got;

	if (forged)
		*forged = f;
	if (!l->given)
		return 0;
	if (!max || max > l->given)
		max = l->given;
	got = rl_slot_tokens_take(rt, max);
	l->given -= got;
	return got;
}

static uint64_t at_most(const struct rl_tenant *rt, uint64_t n)
{
	uint64_t v = count_of(__atomic_load_n(&rt->tokens, __ATOMIC_RELAXED));

	return v < n ? v : n;
}

uint64_t rl_ledger_tokens(const struct rl_tenant *rt, const struct rl_ledger *l)
{
	return at_most(rt, l->given);
}

uint64_t rl_ledger_spendable(const struct rl_tenant *rt,
			     const struct rl_ledger *l)
{
	return at_most(rt, l->given + l->spare);
}

int64_t rl_ledger_conns(int64_t seen, int64_t found)
{
	if (seen < 0)
		seen = 0;
	return found > seen ? found : seen;
}
