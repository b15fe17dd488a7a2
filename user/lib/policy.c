/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tenant policy: parsing of rlctl arguments, validation of one tenant and of a
 * whole set (names, overlapping rules), and the JSON form of a tenant.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "parse.h"
#include "policy.h"

/* Values echoed back in messages are cut here so that a pasted megabyte of
 * garbage cannot push the explanation out of the error buffer. */
#define ECHO "%.64s"

static int fail(char *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

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

static int fail(char *err, const char *fmt, ...)
{
	va_list ap;

	if (err) {
		va_start(ap, fmt);
		vsnprintf(err, POLICY_ERR_MAX, fmt, ap);
		va_end(ap);
		/* Messages quote the offending value, cut to a length that may
		 * split a character; they end up in JSON, which must be UTF-8. */
		policy_clean_utf8(err);
	}
	return -EINVAL;
}

static bool name_char(char c, bool first)
{
	if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9'))
		return true;
	return !first && (c == '_' || c == '.' || c == '-');
}

int policy_parse_name(const char *s, char *out, char *err)
{
	size_t n = strlen(s);

	if (n == 0)
		return fail(err, "invalid tenant name '': expected 1-%d characters "
			    "from A-Z a-z 0-9 _ . -, starting with a letter or digit",
			    POLICY_NAME_MAX);
	if (n > POLICY_NAME_MAX)
		return fail(err, "invalid tenant name '" ECHO "...': %zu characters, "
			    "at most %d allowed", s, n, POLICY_NAME_MAX);
	for (size_t i = 0; i < n; i++)
		if (!name_char(s[i], i == 0))
			return fail(err, "invalid tenant name '" ECHO "': expected "
				    "characters from A-Z a-z 0-9 _ . -, starting "
				    "with a letter or digit", s);
	memcpy(out, s, n + 1);
	return 0;
}

int policy_parse_rate(const char *s, struct policy_rate *out, char *err)
{
	const char *slash = strchr(s, '/');
	uint64_t count, period;
	int ret;

	if (!slash || strlen(slash) != 2)
		goto bad;
	switch (slash[1]) {
	case 's': period = 1; break;
	case 'm': period = 60; break;
	case 'h': period = 3600; break;
	default: goto bad;
	}
	ret = parse_u64n(s, (size_t)(slash - s), UINT64_MAX, &count);
	if (ret == -ERANGE || (ret == 0 && count > POLICY_RATE_MAX * period))
		return fail(err, "invalid rate '" ECHO "': at most %llu per second "
			    "(%llu/m, %llu/h) allowed", s, POLICY_RATE_MAX,
			    POLICY_RATE_MAX * 60, POLICY_RATE_MAX * 3600);
	if (ret < 0)
		goto bad;
	if (count == 0)
		return fail(err, "invalid rate '" ECHO "': the count must be at "
			    "least 1 (e.g. 1/s, 10/m, 1/h)", s);
	out->count = count;
	out->period_s = period;
	return 0;
bad:
	return fail(err, "invalid rate '" ECHO "': expected N/s, N/m or N/h with N "
		    "a whole number from 1 (e.g. 100/s, 500/m)", s);
}

int policy_parse_burst(const char *s, uint64_t *out, char *err)
{
	uint64_t v;
	int ret = parse_u64n(s, strlen(s), POLICY_BURST_MAX, &v);

	if (ret < 0 || v == 0)
		return fail(err, "invalid burst '" ECHO "': expected a whole number "
			    "from 1 to %llu", s, POLICY_BURST_MAX);
	*out = v;
	return 0;
}

/* Clears the host bits of addr beyond len; returns whether any were set. */
static bool clear_host_bits(uint8_t *addr, unsigned int alen, unsigned int len)
{
	bool had = false;

	for (unsigned int i = 0; i < alen; i++) {
		unsigned int bit = i * 8;
		uint8_t mask;

		if (bit + 8 <= len)
			continue;
		mask = bit >= len ? 0 : (uint8_t)(0xff << (8 - (len - bit)));
		if (addr[i] & ~mask)
			had = true;
		addr[i] &= mask;
	}
	return had;
}

int policy_parse_prefix(const char *s, struct policy_prefix *out, char *err)
{
	char addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	struct policy_prefix p = { 0 };
	unsigned int maxlen;
	uint64_t len;

	if (alen == 0 || alen >= sizeof(addr))
		goto bad;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	/* inet_pton, unlike inet_aton, refuses the shorthand forms ("10.1",
	 * "0x0a.0.0.1") that would be read as an address nobody meant. */
	if (inet_pton(AF_INET, addr, p.addr) == 1) {
		p.family = AF_INET;
		maxlen = 32;
	} else if (inet_pton(AF_INET6, addr, p.addr) == 1) {
		p.family = AF_INET6;
		maxlen = 128;
	} else {
		goto bad;
	}
	if (!slash) {
		len = maxlen;
	} else if (parse_u64n(slash + 1, strlen(slash + 1), maxlen, &len) < 0) {
		return fail(err, "invalid prefix '" ECHO "': the length must be a "
			    "whole number from 0 to %u for an IPv%d address", s,
			    maxlen, p.family == AF_INET ? 4 : 6);
	}
	p.len = (uint8_t)len;
	if (clear_host_bits(p.addr, maxlen / 8, p.len)) {
		char net[INET6_ADDRSTRLEN + 8];

		policy_format_prefix(&p, net, sizeof(net));
		return fail(err, "invalid prefix '" ECHO "': host bits are set "
			    "beyond /%u; did you mean %s?", s, p.len, net);
	}
	*out = p;
	return 0;
bad:
	return fail(err, "invalid prefix '" ECHO "': expected an IPv4 or IPv6 "
		    "address or CIDR (e.g. 192.0.2.0/24, 2001:db8::/32, "
		    "198.51.100.7)", s);
}

static bool prefix_equal(const struct policy_prefix *a,
			 const struct policy_prefix *b)
{
	return a->family == b->family && a->len == b->len &&
	       memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

/* Splits a comma list into a scratch copy; empty items are an error so that
 * "80,,443" or a trailing comma is reported rather than silently skipped. */
static int next_item(char **cursor, char **item)
{
	char *s = *cursor, *comma;

	if (!s)
		return 0;
	comma = strchr(s, ',');
	if (comma) {
		*comma = '\0';
		*cursor = comma + 1;
	} else {
		*cursor = NULL;
	}
	*item = s;
	return 1;
}

int policy_parse_prefixes(const char *list, struct policy_tenant *t, char *err)
{
	struct policy_prefix tmp[POLICY_MAX_PREFIXES];
	char *copy = strdup(list), *cur = copy, *item;
	unsigned int n = 0;
	int ret = 0;

	if (!copy)
		return fail(err, "out of memory");
	while (next_item(&cur, &item)) {
		if (*item == '\0') {
			ret = fail(err, "invalid prefix list '" ECHO "': empty "
				   "item; expected PREFIX[,PREFIX...]", list);
			goto out;
		}
		if (n == POLICY_MAX_PREFIXES) {
			ret = fail(err, "too many prefixes: at most %d per tenant",
				   POLICY_MAX_PREFIXES);
			goto out;
		}
		ret = policy_parse_prefix(item, &tmp[n], err);
		if (ret < 0)
			goto out;
		for (unsigned int i = 0; i < n; i++) {
			if (prefix_equal(&tmp[i], &tmp[n])) {
				char buf[INET6_ADDRSTRLEN + 8];

				policy_format_prefix(&tmp[n], buf, sizeof(buf));
				ret = fail(err, "duplicate prefix %s in '" ECHO "'",
					   buf, list);
				goto out;
			}
		}
		n++;
	}
	memcpy(t->match, tmp, n * sizeof(tmp[0]));
	t->n_match = n;
out:
	free(copy);
	return ret;
}

int policy_parse_ports(const char *list, struct policy_tenant *t, char *err)
{
	uint16_t tmp[POLICY_MAX_PORTS];
	char *copy = strdup(list), *cur = copy, *item;
	unsigned int n = 0;
	int ret = 0;

	if (!copy)
		return fail(err, "out of memory");
	while (next_item(&cur, &item)) {
		uint64_t v;

		if (parse_u64n(item, strlen(item), 65535, &v) < 0 || v == 0) {
			ret = fail(err, "invalid port '" ECHO "': expected a whole "
				   "number from 1 to 65535 (list: PORT[,PORT...])",
				   item);
			goto out;
		}
		if (n == POLICY_MAX_PORTS) {
			ret = fail(err, "too many ports in '" ECHO "': at most %d "
				   "per tenant", list, POLICY_MAX_PORTS);
			goto out;
		}
		for (unsigned int i = 0; i < n; i++) {
			if (tmp[i] == v) {
				ret = fail(err, "duplicate port %" PRIu64 " in '"
					   ECHO "'", v, list);
				goto out;
			}
		}
		tmp[n++] = (uint16_t)v;
	}
	memcpy(t->ports, tmp, n * sizeof(tmp[0]));
	t->n_ports = n;
out:
	free(copy);
	return ret;
}

int policy_parse_action(const char *s, enum policy_action *out, char *err)
{
	if (strcmp(s, "drop") == 0)
		*out = POLICY_ACT_DROP;
	else if (strcmp(s, "rst") == 0)
		*out = POLICY_ACT_RST;
	else
		return fail(err, "invalid action '" ECHO "': expected drop or rst", s);
	return 0;
}

int policy_parse_fail(const char *s, enum policy_fail *out, char *err)
{
	if (!strcmp(s, "static"))
		*out = POLICY_FAIL_STATIC;
	else if (!strcmp(s, "allow"))
		*out = POLICY_FAIL_ALLOW;
	else if (!strcmp(s, "deny"))
		*out = POLICY_FAIL_DENY;
	else
		return fail(err, "invalid fail policy '" ECHO "': expected static "
			    "(a local share of the rate), allow or deny", s);
	return 0;
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

static bool prefix_valid(const struct policy_prefix *p)
{
	struct policy_prefix q = *p;
	unsigned int maxlen;

	if (p->family == AF_INET)
		maxlen = 32;
	else if (p->family == AF_INET6)
		maxlen = 128;
	else
		return false;
	if (p->len > maxlen)
		return false;
	/* The kernel trie keys IPv4 on four bytes: stray bytes past them
	 * would make two equal prefixes compare different here. */
	for (unsigned int i = maxlen / 8; i < sizeof(q.addr); i++)
		if (q.addr[i])
			return false;
	return !clear_host_bits(q.addr, maxlen / 8, p->len);
}

int policy_validate(const struct policy_tenant *t, char *err)
{
	char buf[POLICY_NAME_MAX + 1];
	size_t nlen = strnlen(t->name, sizeof(t->name));

	if (nlen == sizeof(t->name))
		return fail(err, "invalid tenant name: not terminated within %d "
			    "characters", POLICY_NAME_MAX);
	if (policy_parse_name(t->name, buf, err) < 0)
		return -EINVAL;
	if (t->rate.period_s != 1 && t->rate.period_s != 60 &&
	    t->rate.period_s != 3600)
		return fail(err, "tenant '%s': invalid rate period %" PRIu64
			    " s: expected 1, 60 or 3600", t->name,
			    t->rate.period_s);
	if (t->rate.count == 0 ||
	    t->rate.count > POLICY_RATE_MAX * t->rate.period_s)
		return fail(err, "tenant '%s': invalid rate count %" PRIu64
			    ": expected 1 to %llu per second", t->name,
			    t->rate.count, POLICY_RATE_MAX);
	if (t->burst == 0 || t->burst > POLICY_BURST_MAX)
		return fail(err, "tenant '%s': invalid burst %" PRIu64
			    ": expected 1 to %llu", t->name, t->burst,
			    POLICY_BURST_MAX);
	if (t->burst > policy_burst_max(&t->rate)) {
		char rate[32];

		policy_format_rate(&t->rate, rate, sizeof(rate));
		return fail(err, "tenant '%s': invalid burst %" PRIu64 " for rate "
			    "%s: at most %" PRIu64 " for this rate (an empty "
			    "bucket must refill within %d years)", t->name,
			    t->burst, rate, policy_burst_max(&t->rate),
			    POLICY_REFILL_MAX_YEARS);
	}
	if (t->n_match == 0)
		return fail(err, "tenant '%s': no match prefix; at least one "
			    "is required", t->name);
	if (t->n_match > POLICY_MAX_PREFIXES)
		return fail(err, "tenant '%s': %u prefixes, at most %d allowed",
			    t->name, t->n_match, POLICY_MAX_PREFIXES);
	for (unsigned int i = 0; i < t->n_match; i++) {
		char pb[INET6_ADDRSTRLEN + 8];

		if (!prefix_valid(&t->match[i]))
			return fail(err, "tenant '%s': match prefix #%u is not a "
				    "valid network (bad family, length or host "
				    "bits)", t->name, i);
		for (unsigned int j = 0; j < i; j++) {
			if (!prefix_equal(&t->match[i], &t->match[j]))
				continue;
			policy_format_prefix(&t->match[i], pb, sizeof(pb));
			return fail(err, "tenant '%s': duplicate prefix %s",
				    t->name, pb);
		}
	}
	if (t->n_ports > POLICY_MAX_PORTS)
		return fail(err, "tenant '%s': %u ports, at most %d allowed",
			    t->name, t->n_ports, POLICY_MAX_PORTS);
	for (unsigned int i = 0; i < t->n_ports; i++) {
		if (t->ports[i] == 0)
			return fail(err, "tenant '%s': invalid port 0: expected "
				    "1 to 65535", t->name);
		for (unsigned int j = 0; j < i; j++)
			if (t->ports[i] == t->ports[j])
				return fail(err, "tenant '%s': duplicate port %u",
					    t->name, t->ports[i]);
	}
	if (t->action != POLICY_ACT_DROP && t->action != POLICY_ACT_RST)
		return fail(err, "tenant '%s': invalid action %d: expected drop "
			    "or rst", t->name, (int)t->action);
	return 0;
}

/* Two rules on the same prefix collide when their port sets meet; an any-port
 * rule only collides with another any-port rule, because the kernel looks up
 * (prefix, port) before (prefix, any) and so the port rule simply wins.
 * Returns the first of a's ports that b has too, 0 for two any-port rules,
 * or -1 when they do not collide. */
static int shared_port(const struct policy_tenant *a,
		       const struct policy_tenant *b)
{
	if (a->n_ports == 0 || b->n_ports == 0)
		return a->n_ports == 0 && b->n_ports == 0 ? 0 : -1;
	for (unsigned int i = 0; i < a->n_ports && i < POLICY_MAX_PORTS; i++)
		for (unsigned int j = 0; j < b->n_ports && j < POLICY_MAX_PORTS; j++)
			if (a->ports[i] == b->ports[j])
				return a->ports[i];
	return -1;
}

/*
 * The set checks take time linear in the rules, so that a set of 4,096
 * tenants of 64 prefixes is checked in milliseconds, not by comparing every
 * pair of tenants: names are sorted, prefixes are grouped in a hash table,
 * and only the tenants that claim one prefix are compared, by sorting their
 * (port, tenant) claims.  Every problem becomes a finding; the findings are
 * sorted into the order a comparison of every pair gives (by the later
 * tenant, then the earlier one, then the later one's prefix) and reported.
 */
#define FINDING_NAME	UINT32_MAX	/* the x of a duplicate name */

struct finding {
	uint32_t i, j;		/* the later and the earlier tenant */
	uint32_t x;		/* i's prefix that j claims too, or FINDING_NAME */
};

struct findings {
	struct finding *v;
	size_t n, cap;
	bool nomem;
};

static void finding_add(struct findings *f, size_t i, size_t j, uint32_t x)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 64;
		struct finding *v = realloc(f->v, cap * sizeof(*v));

		if (!v) {
			f->nomem = true;
			return;
		}
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = (struct finding){ (uint32_t)i, (uint32_t)j, x };
}

static int finding_cmp(const void *pa, const void *pb)
{
	const struct finding *a = pa, *b = pb;

	if (a->i != b->i)
		return a->i < b->i ? -1 : 1;
	if (a->j != b->j)
		return a->j < b->j ? -1 : 1;
	if (a->x == b->x)
		return 0;
	/* the name first: it stands for the whole pair */
	if (a->x == FINDING_NAME || b->x == FINDING_NAME)
		return a->x == FINDING_NAME ? -1 : 1;
	return a->x < b->x ? -1 : 1;
}

/* Counts bounded by the arrays, for tenants that failed policy_validate. */
static unsigned int n_match_of(const struct policy_tenant *t)
{
	return t->n_match < POLICY_MAX_PREFIXES ? t->n_match : POLICY_MAX_PREFIXES;
}

static int name_cmp(const void *pa, const void *pb, void *arg)
{
	const struct policy_tenant *ts = arg;
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	int c = strncmp(ts[a].name, ts[b].name, sizeof(ts[a].name));

	return c ? c : a < b ? -1 : a > b;
}

/* Every pair of tenants with one name. */
static int find_names(const struct policy_tenant *ts, size_t n,
		      struct findings *f)
{
	uint32_t *order = malloc((n ? n : 1) * sizeof(*order));
	size_t run;

	if (!order)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		order[i] = (uint32_t)i;
	qsort_r(order, n, sizeof(*order), name_cmp, (void *)ts);
	for (size_t s = 0; s < n; s += run) {
		for (run = 1; s + run < n &&
		     strncmp(ts[order[s]].name, ts[order[s + run]].name,
			     sizeof(ts->name)) == 0; run++)
			;
		/* in index order within the run: j before i */
		for (size_t b = 1; b < run; b++)
			for (size_t a = 0; a < b; a++)
				finding_add(f, order[s + b], order[s + a],
					    FINDING_NAME);
	}
	free(order);
	return 0;
}

/* One tenant's claim on one prefix, for one of its ports (0: any port). */
struct claim {
	uint32_t tenant;
	uint32_t x;
	uint32_t port;
};

static int claim_cmp(const void *pa, const void *pb)
{
	const struct claim *a = pa, *b = pb;

	if (a->port != b->port)
		return a->port < b->port ? -1 : 1;
	return a->tenant < b->tenant ? -1 : a->tenant > b->tenant;
}

static uint64_t prefix_hash(const struct policy_prefix *p)
{
	uint64_t w[2], h;

	memcpy(w, p->addr, sizeof(w));
	h = w[0] * 0x9e3779b97f4a7c15ULL;
	h ^= (w[1] + ((uint64_t)p->len << 8 | (uint64_t)(p->family & 0xff))) *
	     0xc2b2ae3d27d4eb4fULL;
	return h ^ (h >> 29);
}

/* The tenants that claim one prefix (claims chained through next, newest
 * first): every (port, tenant) claim sorted, and a finding for each pair
 * of tenants whose claims meet. */
static int find_group(const struct policy_tenant *ts, const uint32_t *c_tenant,
		      const uint8_t *c_x, const uint32_t *next, uint32_t head,
		      struct claim **buf, size_t *buf_cap, struct findings *f)
{
	size_t n = 0, run;

	for (uint32_t c = head; c != UINT32_MAX; c = next[c]) {
		const struct policy_tenant *t = &ts[c_tenant[c]];
		unsigned int np = t->n_ports < POLICY_MAX_PORTS ? t->n_ports :
				  POLICY_MAX_PORTS;

		if (n + (np ? np : 1) > *buf_cap) {
			size_t cap = 2 * (n + POLICY_MAX_PORTS);
			struct claim *b = realloc(*buf, cap * sizeof(*b));

			if (!b)
				return -ENOMEM;
			*buf = b;
			*buf_cap = cap;
		}
		for (unsigned int k = 0; k < (np ? np : 1); k++)
			(*buf)[n++] = (struct claim){ c_tenant[c], c_x[c],
						     np ? t->ports[k] : 0 };
	}
	qsort(*buf, n, sizeof(**buf), claim_cmp);
	for (size_t s = 0; s < n; s += run) {
		const struct claim *r = *buf + s;

		for (run = 1; s + run < n && r[run].port == r[0].port; run++)
			;
		for (size_t b = 1; b < run; b++)
			for (size_t a = 0; a < b; a++)
				if (r[a].tenant != r[b].tenant)
					finding_add(f, r[b].tenant, r[a].tenant,
						    r[b].x);
	}
	return 0;
}

/* Every pair of tenants that claim one prefix with colliding ports. */
static int find_conflicts(const struct policy_tenant *ts, size_t n,
			  struct findings *f)
{
	size_t n_claims = 0, size = 1, buf_cap = 0;
	uint32_t *head = NULL, *next = NULL, *c_tenant = NULL, c = 0;
	struct claim *buf = NULL;
	uint8_t *c_x = NULL;
	int err = -ENOMEM;

	for (size_t i = 0; i < n; i++)
		n_claims += n_match_of(&ts[i]);
	while (size < 2 * n_claims)
		size *= 2;
	head = malloc(size * sizeof(*head));
	next = malloc((n_claims + 1) * sizeof(*next));
	c_tenant = malloc((n_claims + 1) * sizeof(*c_tenant));
	c_x = malloc(n_claims + 1);
	if (!head || !next || !c_tenant || !c_x)
		goto cleanup;
	memset(head, 0xff, size * sizeof(*head));
	/* Open addressing: each slot heads the chain of one prefix. */
	for (size_t i = 0; i < n; i++) {
		for (unsigned int x = 0; x < n_match_of(&ts[i]); x++, c++) {
			const struct policy_prefix *p = &ts[i].match[x];
			size_t s = prefix_hash(p) & (size - 1);

			while (head[s] != UINT32_MAX &&
			       !prefix_equal(p, &ts[c_tenant[head[s]]].match[c_x[head[s]]]))
				s = (s + 1) & (size - 1);
			c_tenant[c] = (uint32_t)i;
			c_x[c] = (uint8_t)x;
			next[c] = head[s];
			head[s] = c;
		}
	}
	err = 0;
	for (size_t s = 0; s < size && !err; s++)
		if (head[s] != UINT32_MAX && next[head[s]] != UINT32_MAX)
			err = find_group(ts, c_tenant, c_x, next, head[s], &buf,
					 &buf_cap, f);
cleanup:
	free(buf);
	free(c_x);
	free(c_tenant);
	free(next);
	free(head);
	return err;
}

/* policy_check_set, telling fn which problems are conflicts. */
typedef void (*problem_kind_fn)(void *ctx, size_t index, bool conflict,
				const char *msg);

static int check_set(const struct policy_tenant *ts, size_t n,
		     problem_kind_fn fn, void *ctx)
{
	struct findings f = { 0 };
	char err[POLICY_ERR_MAX];
	int problems = 0;

	for (size_t i = 0; i < n; i++) {
		if (policy_validate(&ts[i], err) < 0) {
			problems++;
			if (fn)
				fn(ctx, i, false, err);
		}
	}
	if (find_names(ts, n, &f) || find_conflicts(ts, n, &f) || f.nomem) {
		free(f.v);
		fail(err, "out of memory while checking %zu tenants", n);
		if (fn)
			fn(ctx, 0, false, err);
		return problems + 1;
	}
	/* qsort() of NULL is undefined, even for no elements */
	if (f.n)
		qsort(f.v, f.n, sizeof(*f.v), finding_cmp);
	for (size_t k = 0; k < f.n; k++) {
		const struct finding *d = &f.v[k];
		const struct policy_tenant *a = &ts[d->j], *b = &ts[d->i];
		char pb[INET6_ADDRSTRLEN + 8];
		int port;

		if (d->x == FINDING_NAME) {
			fail(err, "duplicate tenant name '%.63s' (also tenant "
			     "#%u)", b->name, d->j);
		} else {
			/* A pair found on several ports is one problem, and
			 * two tenants of one name are one problem already. */
			if (k > 0 && finding_cmp(d, d - 1) == 0)
				continue;
			if (strncmp(a->name, b->name, sizeof(a->name)) == 0)
				continue;
			port = shared_port(a, b);
			policy_format_prefix(&b->match[d->x], pb, sizeof(pb));
			if (port)
				fail(err, "conflict: tenants '%.63s' and '%.63s' "
				     "both claim %s port %d", a->name, b->name,
				     pb, port);
			else
				fail(err, "conflict: tenants '%.63s' and '%.63s' "
				     "both claim %s on any port", a->name,
				     b->name, pb);
		}
		problems++;
		if (fn)
			fn(ctx, d->i, d->x != FINDING_NAME, err);
	}
	free(f.v);
	return problems;
}

struct plain_problem {
	policy_problem_fn fn;
	void *ctx;
};

static void plain(void *ctx, size_t index, bool conflict, const char *msg)
{
	struct plain_problem *p = ctx;

	(void)conflict;
	if (p->fn)
		p->fn(p->ctx, index, msg);
}

int policy_check_set(const struct policy_tenant *ts, size_t n,
		     policy_problem_fn fn, void *ctx)
{
	struct plain_problem p = { fn, ctx };

	return check_set(ts, n, plain, &p);
}

struct first_problem {
	char *err;
	bool seen;
	bool conflict;
};

static void keep_first(void *ctx, size_t index, bool conflict, const char *msg)
{
	struct first_problem *fp = ctx;

	(void)index;
	if (fp->seen)
		return;
	fp->seen = true;
	fp->conflict = conflict;
	if (fp->err)
		snprintf(fp->err, POLICY_ERR_MAX, "%s", msg);
}

int policy_validate_set(const struct policy_tenant *ts, size_t n, char *err)
{
	struct first_problem fp = { .err = err };

	if (!check_set(ts, n, keep_first, &fp))
		return 0;
	return fp.conflict ? -EEXIST : -EINVAL;
}

uint64_t policy_overshoot_budget(const struct policy_tenant *t)
{
	uint64_t half;

	if (t->overshoot)
		return t->overshoot;
	half = (t->rate.count + 2 * t->rate.period_s - 1) / (2 * t->rate.period_s);
	return half > t->burst ? half : t->burst;
}

json_t *policy_tenant_to_json(const struct policy_tenant *t)
{
	char buf[INET6_ADDRSTRLEN + 8];
	json_t *j, *match, *ports;

	policy_format_rate(&t->rate, buf, sizeof(buf));
	match = json_array();
	ports = json_array();
	j = json_pack("{s:s%, s:s, s:I, s:o, s:o, s:s, s:b}",
		      "name", t->name, strnlen(t->name, sizeof(t->name)),
		      "rate", buf, "burst", (json_int_t)t->burst,
		      "match", match, "ports", ports,
		      "action", policy_action_name(t->action),
		      "shadow", t->shadow);
	if (j && t->overshoot)
		json_object_set_new(j, "overshoot", json_integer((json_int_t)t->overshoot));
	if (j)
		json_object_set_new(j, "fail", json_string(policy_fail_name(t->fail)));
	if (!j)
		return NULL;
	for (unsigned int i = 0; i < t->n_match && i < POLICY_MAX_PREFIXES; i++) {
		policy_format_prefix(&t->match[i], buf, sizeof(buf));
		if (json_array_append_new(match, json_string(buf)) < 0)
			goto fail;
	}
	for (unsigned int i = 0; i < t->n_ports && i < POLICY_MAX_PORTS; i++)
		if (json_array_append_new(ports, json_integer(t->ports[i])) < 0)
			goto fail;
	return j;
fail:
	json_decref(j);
	return NULL;
}

/* Fields the agent adds to what it returns; accepted (and ignored) on input
 * so that `rlctl --json tenant list` output can be fed back to `apply`. */
static const char *const read_only_keys[] = { "id", "version" };

static bool known_key(const char *k)
{
	static const char *const keys[] = {
		"name", "rate", "burst", "match", "ports", "action", "shadow",
		"overshoot", "fail",
	};

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strcmp(k, keys[i]) == 0)
			return true;
	for (size_t i = 0; i < sizeof(read_only_keys) / sizeof(read_only_keys[0]); i++)
		if (strcmp(k, read_only_keys[i]) == 0)
			return true;
	return false;
}

int policy_tenant_from_json(const json_t *j, struct policy_tenant *t, char *err)
{
	const json_t *v, *item;
	const char *key;
	size_t i;

	memset(t, 0, sizeof(*t));
	if (!json_is_object(j))
		return fail(err, "a tenant must be a JSON object");
	json_object_foreach((json_t *)j, key, v)
		if (!known_key(key))
			return fail(err, "unknown field '" ECHO "': expected name, "
				    "rate, burst, match, ports, action, shadow, overshoot, fail", key);

	v = json_object_get(j, "name");
	if (!json_is_string(v))
		return fail(err, "field 'name' is missing or not a string");
	if (strlen(json_string_value(v)) != json_string_length(v))
		return fail(err, "field 'name' contains a NUL character");
	if (policy_parse_name(json_string_value(v), t->name, err) < 0)
		return -EINVAL;

	v = json_object_get(j, "rate");
	if (!json_is_string(v))
		return fail(err, "field 'rate' is missing or not a string "
			    "(e.g. \"100/s\")");
	if (policy_parse_rate(json_string_value(v), &t->rate, err) < 0)
		return -EINVAL;

	v = json_object_get(j, "burst");
	if (!v || json_is_null(v)) {
		t->burst = policy_default_burst(&t->rate);
	} else if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		   (uint64_t)json_integer_value(v) > POLICY_BURST_MAX) {
		return fail(err, "field 'burst' must be a whole number from 1 "
			    "to %llu", POLICY_BURST_MAX);
	} else {
		t->burst = (uint64_t)json_integer_value(v);
	}

	v = json_object_get(j, "match");
	if (!json_is_array(v) || json_array_size(v) == 0)
		return fail(err, "field 'match' must be a non-empty array of "
			    "prefixes (e.g. [\"192.0.2.0/24\"])");
	if (json_array_size(v) > POLICY_MAX_PREFIXES)
		return fail(err, "field 'match' has %zu prefixes, at most %d "
			    "allowed", json_array_size(v), POLICY_MAX_PREFIXES);
	json_array_foreach(v, i, item) {
		if (!json_is_string(item))
			return fail(err, "field 'match' item %zu is not a string",
				    i);
		if (policy_parse_prefix(json_string_value(item),
					&t->match[i], err) < 0)
			return -EINVAL;
		t->n_match = (unsigned int)i + 1;
	}

	v = json_object_get(j, "ports");
	if (v && !json_is_null(v)) {
		if (!json_is_array(v))
			return fail(err, "field 'ports' must be an array of port "
				    "numbers ([] for any port)");
		if (json_array_size(v) > POLICY_MAX_PORTS)
			return fail(err, "field 'ports' has %zu ports, at most %d "
				    "allowed", json_array_size(v),
				    POLICY_MAX_PORTS);
		json_array_foreach(v, i, item) {
			json_int_t p = json_integer_value(item);

			if (!json_is_integer(item) || p < 1 || p > 65535)
				return fail(err, "field 'ports' item %zu: expected "
					    "a whole number from 1 to 65535", i);
			t->ports[i] = (uint16_t)p;
			t->n_ports = (unsigned int)i + 1;
		}
	}

	v = json_object_get(j, "action");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return fail(err, "field 'action' must be \"drop\" or \"rst\"");
		if (policy_parse_action(json_string_value(v), &t->action, err) < 0)
			return -EINVAL;
	}

	v = json_object_get(j, "shadow");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return fail(err, "field 'shadow' must be true or false");
		t->shadow = json_is_true(v);
	}

	v = json_object_get(j, "overshoot");
	if (v && !json_is_null(v)) {
		json_int_t o = json_integer_value(v);

		if (!json_is_integer(v) || o < 0 || (uint64_t)o > POLICY_BURST_MAX)
			return fail(err, "field 'overshoot' must be a whole number "
				    "from 0 (automatic) to %llu",
				    (unsigned long long)POLICY_BURST_MAX);
		t->overshoot = (uint64_t)o;
	}

	v = json_object_get(j, "fail");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return fail(err, "field 'fail' must be \"static\", \"allow\" "
				    "or \"deny\"");
		if (policy_parse_fail(json_string_value(v), &t->fail, err) < 0)
			return -EINVAL;
	}
	return policy_validate(t, err);
}
