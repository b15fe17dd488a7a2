/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tenant policy, the small pieces the rest builds on: the text forms of a
 * tenant's values (rates, prefixes, names of actions and fail policies),
 * messages made safe for JSON, and the numbers derived from the values
 * (default burst, interval, limits, shares).  Parsing is in policy_parse.c,
 * validation in policy_check.c, the JSON form in policy_json.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

void policy_clean_utf8(char *s)
{
	unsigned char *p = (unsigned char *)s;

	while (*p) {
		size_t n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 :
			   (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
		size_t i;

		for (i = 1; i < n && (p[i] & 0xc0) == 0x80; i++)
			;
		/* Overlong two-byte forms and lone continuation bytes are
		 * as invalid as a sequence cut short. */
		if (!n || i < n || (n == 2 && *p < 0xc2)) {
			*p++ = '?';
			continue;
		}
		p += n;
	}
}

int policy_set_prefixes(struct policy_tenant *t, const struct policy_prefix *p,
			unsigned int n)
{
	struct policy_prefix *m = NULL;

	if (n) {
		m = malloc(n * sizeof(*m));
		if (!m)
			return -ENOMEM;
		memcpy(m, p, n * sizeof(*m));
	}
	free(t->match);
	t->match = m;
	t->n_match = n;
	return 0;
}

void policy_tenant_free(struct policy_tenant *t)
{
	free(t->match);
	t->match = NULL;
	t->n_match = 0;
}

int policy_tenant_copy(struct policy_tenant *dst, const struct policy_tenant *src)
{
	*dst = *src;
	dst->match = NULL;
	dst->n_match = 0;
	return policy_set_prefixes(dst, src->match, src->n_match);
}

void policy_tenants_free(struct policy_tenant *ts, size_t n)
{
	for (size_t i = 0; ts && i < n; i++)
		policy_tenant_free(&ts[i]);
	free(ts);
}

const char *policy_direction_name(enum policy_direction d)
{
	return d == POLICY_DIR_OUT ? "out" : "in";
}

const char *policy_verify_name(enum policy_verify v)
{
	switch (v) {
	case POLICY_VERIFY_SYNCOOKIE:
		return "syncookie";
	case POLICY_VERIFY_ANSWER:
		return "syncookie-answer";
	default:
		return "none";
	}
}

const char *policy_fail_name(enum policy_fail f)
{
	switch (f) {
	case POLICY_FAIL_ALLOW:
		return "allow";
	case POLICY_FAIL_DENY:
		return "deny";
	default:
		return "static";
	}
}

const char *policy_action_name(enum policy_action a)
{
	return a == POLICY_ACT_RST ? "rst" : "drop";
}

void policy_format_rate(const struct policy_rate *r, char *buf, size_t len)
{
	char unit = r->period_s == 3600 ? 'h' : r->period_s == 60 ? 'm' : 's';

	snprintf(buf, len, "%" PRIu64 "/%c", r->count, unit);
}

void policy_format_prefix(const struct policy_prefix *p, char *buf, size_t len)
{
	char addr[INET6_ADDRSTRLEN];

	if (!inet_ntop(p->family, p->addr, addr, sizeof(addr)))
		snprintf(addr, sizeof(addr), "?");
	snprintf(buf, len, "%s/%u", addr, p->len);
}

uint64_t policy_default_burst(const struct policy_rate *r)
{
	uint64_t b = r->period_s ? r->count / r->period_s : r->count;

	/* Above 1e8/s one second of the rate exceeds what a burst may be;
	 * the cap keeps the default valid rather than refusing the rate. */
	if (b > POLICY_BURST_MAX)
		b = POLICY_BURST_MAX;
	return b ? b : 1;
}

uint64_t policy_interval_ns(const struct policy_rate *r)
{
	uint64_t ns;

	if (r->count == 0)
		return UINT64_MAX;
	ns = r->period_s * 1000000000ULL / r->count;
	return ns ? ns : 1;
}

uint64_t policy_burst_max(const struct policy_rate *r)
{
	uint64_t max = POLICY_REFILL_MAX_NS / policy_interval_ns(r);

	return max < POLICY_BURST_MAX ? max : POLICY_BURST_MAX;
}

void policy_fail_share(const struct policy_tenant *t, uint64_t agents,
		       uint64_t *interval_ns, uint32_t *burst)
{
	uint64_t interval = policy_interval_ns(&t->rate), b;

	if (!agents)
		agents = 1;
	b = t->burst / agents;
	if (!b)
		b = 1;
	if (b > UINT32_MAX)
		b = UINT32_MAX;
	/* rate / agents, saturating: interval x agents x b could wrap */
	if (interval > POLICY_REFILL_MAX_NS / b / agents)
		interval = POLICY_REFILL_MAX_NS / b;
	else
		interval *= agents;
	*interval_ns = interval;
	*burst = (uint32_t)b;
}

uint64_t policy_conn_fail_share(const struct policy_tenant *t, uint64_t agents)
{
	uint64_t n;

	if (!t->max_conns)
		return 0;
	n = t->max_conns / (agents ? agents : 1);
	return n ? n : 1;
}

uint64_t policy_conn_bound(const struct policy_tenant *t, uint64_t agents)
{
	if (!t->max_conns || agents < 2)
		return 0;
	if (t->fail == POLICY_FAIL_ALLOW)
		return UINT64_MAX;
	return t->max_conns > UINT64_MAX / (agents - 1) ? UINT64_MAX :
	       t->max_conns * (agents - 1);
}

uint64_t policy_overshoot_budget(const struct policy_tenant *t)
{
	uint64_t half;

	if (t->overshoot)
		return t->overshoot;
	half = (t->rate.count + 2 * t->rate.period_s - 1) / (2 * t->rate.period_s);
	return half > t->burst ? half : t->burst;
}
