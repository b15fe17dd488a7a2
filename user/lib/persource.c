// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-source limits: src_conf from a policy, source keys as text, and the
 * heaviest refused sources (see persource.h). */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persource.h"

static void mask_of(uint8_t len, uint8_t mask[16], unsigned int bytes)
{
	memset(mask, 0, 16);
	for (unsigned int i = 0; i < bytes && len; i++) {
		unsigned int bits = len >= 8 ? 8 : len;

		mask[i] = (uint8_t)(0xff << (8 - bits));
		len = (uint8_t)(len - bits);
	}
}

void src_masks(uint8_t len4, uint8_t len6, uint8_t mask4[16],
	       uint8_t mask6[16])
{
	mask_of(len4 > 32 ? 32 : len4, mask4, 4);
	mask_of(len6 > 128 ? 128 : len6, mask6, 16);
}

void src_conf_write(struct rl_src_conf *c, const struct policy_tenant *t,
		    bool fresh)
{
	uint64_t interval = t->src_rate.count ?
			    policy_interval_ns(&t->src_rate) : 0;

	/* off first: no SYN reads masks and a bucket of two limits */
	__atomic_store_n(&c->interval_ns, 0, __ATOMIC_RELEASE);
	if (fresh || !interval)
		__atomic_store_n(&c->overflow_tat, 0, __ATOMIC_RELAXED);
	if (!interval) {
		memset(c->mask4, 0, sizeof(c->mask4));
		memset(c->mask6, 0, sizeof(c->mask6));
		c->tolerance_ns = 0;
		return;
	}
	src_masks(t->src_len4, t->src_len6, c->mask4, c->mask6);
	/* policy_validate keeps burst x interval within 64 bits */
	__atomic_store_n(&c->tolerance_ns, t->src_burst * interval,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&c->interval_ns, interval, __ATOMIC_RELEASE);
}

void src_key_format(const struct rl_src_key *k, uint8_t len4, uint8_t len6,
		    char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN];
	int af = k->family == 4 ? AF_INET : AF_INET6;
	unsigned int plen = k->family == 4 ? len4 : len6;
	unsigned int full = k->family == 4 ? 32 : 128;

	if (!inet_ntop(af, k->addr, a, sizeof(a)))
		snprintf(a, sizeof(a), "?");
	if (!plen || plen >= full)
		snprintf(buf, len, "%s", a);
	else
		snprintf(buf, len, "%s/%u", a, plen);
}

static int row_cmp(const void *pa, const void *pb)
{
	const struct src_top_row *a = pa, *b = pb;

	if (a->denied != b->denied)
		return a->denied > b->denied ? -1 : 1;
	return memcmp(&a->key, &b->key, sizeof(a->key));
}

size_t src_top_pick(const struct rl_src_top *slots, size_t n, uint32_t tenant,
		    struct src_top_row *out, size_t max)
{
	struct src_top_row *all = calloc(n ? n : 1, sizeof(*all));
	size_t m = 0;

	if (!all)
		return 0;
	for (size_t i = 0; i < n; i++) {
		struct rl_src_top s = slots[i];

		if (!s.denied || (tenant != UINT32_MAX && s.key.tenant != tenant))
			continue;
		all[m].key = s.key;
		all[m].denied = s.denied;
		m++;
	}
	qsort(all, m, sizeof(*all), row_cmp);
	if (m > max)
		m = max;
	memcpy(out, all, m * sizeof(*out));
	free(all);
	return m;
}
