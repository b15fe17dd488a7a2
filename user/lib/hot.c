/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A hot tenant's sub-buckets: shares, keys, home and fallback order. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "hot.h"

uint64_t hot_share(uint64_t total, unsigned int k, unsigned int i)
{
	if (k == 0 || i >= k)
		return 0;
	return total / k + (i < total % k ? 1 : 0);
}

int hot_check(const struct policy_tenant *t, unsigned int k, char *err)
{
	if (k < 1 || k > HOT_SHARDS_MAX) {
		snprintf(err, 256, "invalid shard count '%u': expected "
			 "1 to %d", k, HOT_SHARDS_MAX);
		return -EINVAL;
	}
	if (k > t->rate.count || k > t->burst) {
		snprintf(err, 256, "tenant '%s' cannot be split into %u "
			 "shards: rate %llu and burst %llu must each be at "
			 "least the shard count", t->name, k,
			 (unsigned long long)t->rate.count,
			 (unsigned long long)t->burst);
		return -EINVAL;
	}
	return 0;
}

void hot_sub_tenant(const struct policy_tenant *t, unsigned int k,
		    unsigned int i, struct policy_tenant *sub)
{
	*sub = *t;
	sub->rate.count = hot_share(t->rate.count, k, i);
	sub->burst = hot_share(t->burst, k, i);
}

int hot_key(char *buf, size_t len, const char *name, unsigned int k,
	    unsigned int i, const char *what)
{
	if (k <= 1)
		return snprintf(buf, len, "rl:{t:%s}:%s", name, what);
	return snprintf(buf, len, "rl:{t:%s#%u}:%s", name, i, what);
}

unsigned int hot_home(const char *identity, unsigned int k)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	if (k <= 1)
		return 0;
	for (const unsigned char *p = (const unsigned char *)identity; *p; p++) {
		h ^= *p;
		h *= 0x100000001b3ULL;
	}
	return (unsigned int)(h % k);
}

unsigned int hot_order(unsigned int home, unsigned int k, unsigned int n)
{
	if (k == 0)
		return 0;
	return (home + n) % k;
}

uint64_t hot_wait_ms(unsigned int k, uint64_t got, uint64_t want,
		     uint64_t min_wait_ms)
{
	if (k > 1 && got >= want)
		return 0;
	return min_wait_ms;
}

/* Drops the oldest records until the ledger covers no more than held. */
static void ledger_trim(struct hot_ledger *l, uint64_t held)
{
	unsigned int first = 0;
	uint64_t sum = 0;

	for (unsigned int i = l->n; i-- > 0;) {
		if (sum + l->e[i].n >= held) {
			l->e[i].n = held - sum;
			first = l->e[i].n ? i : i + 1;
			break;
		}
		sum += l->e[i].n;
	}
	l->n -= first;
	memmove(l->e, l->e + first, l->n * sizeof(l->e[0]));
}

void hot_ledger_add(struct hot_ledger *l, unsigned int sub, uint64_t n,
		    uint64_t held)
{
	if (n && l->n && l->e[l->n - 1].sub == sub) {
		l->e[l->n - 1].n += n;
	} else if (n) {
		if (l->n == HOT_LEDGER_MAX) {
			l->n--;
			memmove(l->e, l->e + 1, l->n * sizeof(l->e[0]));
		}
		l->e[l->n].sub = sub;
		l->e[l->n++].n = n;
	}
	/* what was spent since the last look is gone, n or not */
	ledger_trim(l, held);
}

void hot_ledger_take(struct hot_ledger *l, uint64_t held, uint64_t taken,
		     uint64_t give, unsigned int home, uint64_t *parts)
{
	if (l)
		ledger_trim(l, held);
	while (l && l->n && taken) {
		uint64_t *n = &l->e[l->n - 1].n;
		uint64_t x = *n < taken ? *n : taken, y = x < give ? x : give;

		parts[l->e[l->n - 1].sub] += y;
		give -= y;
		taken -= x;
		*n -= x;
		if (!*n)
			l->n--;
	}
	parts[home] += give;
}
