// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The agent's ledger of the tokens it gave a slot others may write (see
 * ledger.h): every count read from the slot is checked against it before
 * a token is taken, moved or refunded.
 */
#include "ledger.h"
#include "slot.h"

uint64_t rl_ledger_check(int64_t seen, uint64_t ledger, uint64_t *trusted)
{
	uint64_t v = seen > 0 ? (uint64_t)seen : 0;

	*trusted = v < ledger ? v : ledger;
	return v > ledger ? v - ledger : 0;
}

uint64_t rl_ledger_trim(struct rl_tenant *rt, uint64_t *ledger)
{
	int64_t v = __atomic_load_n(&rt->tokens, __ATOMIC_ACQUIRE);
	uint64_t trusted, forged;

	/* A compare-and-swap down to the ledger: a spend between the read
	 * and the write makes it fail, and the count is read again, so no
	 * spend is undone and nothing the ledger holds is lost. */
	for (;;) {
		forged = rl_ledger_check(v, *ledger, &trusted);
		if (!forged) {
			*ledger = trusted;
			return 0;
		}
		if (__atomic_compare_exchange_n(&rt->tokens, &v, (int64_t)*ledger,
						false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE))
			return forged;
	}
}

void rl_ledger_add(struct rl_tenant *rt, uint64_t *ledger, uint64_t n,
		   int64_t lowwater)
{
	rl_slot_tokens_add(rt, n, lowwater);
	*ledger += n;
}

uint64_t rl_ledger_take(struct rl_tenant *rt, uint64_t *ledger, uint64_t max,
			uint64_t *forged)
{
	uint64_t f = rl_ledger_trim(rt, ledger), got;

	if (forged)
		*forged = f;
	if (!*ledger)
		return 0;
	if (!max || max > *ledger)
		max = *ledger;
	got = rl_slot_tokens_take(rt, max);
	*ledger -= got;
	return got;
}

uint64_t rl_ledger_tokens(const struct rl_tenant *rt, uint64_t ledger)
{
	uint64_t trusted;

	rl_ledger_check(__atomic_load_n(&rt->tokens, __ATOMIC_RELAXED), ledger,
			&trusted);
	return trusted;
}

int64_t rl_ledger_conns(int64_t seen, int64_t found)
{
	if (seen < 0)
		seen = 0;
	return found > seen ? found : seen;
}
