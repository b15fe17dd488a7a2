/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tenant policy: validation of one tenant (every field within its limits,
 * as the kernel needs it) and of a whole set (unique names, no two tenants
 * claiming the same prefix and port), in time linear in the rules.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "hot.h"
#include "policy_int.h"

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

/* The per-source limit: a rate the kernel can hold, a burst it can refill,
 * lengths within the families; nothing of it without a rate. */
static int source_check(const struct policy_tenant *t, char *err)
{
	const struct policy_rate *r = &t->src_rate;

	if (!r->count) {
		if (t->src_burst || t->src_len4 || t->src_len6)
			return fail(err, "tenant '%s': a per-source burst or mask "
				    "without a per-source rate", t->name);
		return 0;
	}
	if ((r->period_s != 1 && r->period_s != 60 && r->period_s != 3600) ||
	    r->count > POLICY_RATE_MAX * r->period_s)
		return fail(err, "tenant '%s': invalid per-source rate %" PRIu64
			    "/%" PRIu64 "s: expected 1 to %llu per second, "
			    "minute or hour", t->name, r->count, r->period_s,
			    POLICY_RATE_MAX);
	if (t->src_burst == 0 || t->src_burst > policy_burst_max(r))
		return fail(err, "tenant '%s': invalid per-source burst %" PRIu64
			    ": expected 1 to %" PRIu64 " for its rate", t->name,
			    t->src_burst, policy_burst_max(r));
	if (t->src_len4 < 1 || t->src_len4 > 32 || t->src_len6 < 1 ||
	    t->src_len6 > 128)
		return fail(err, "tenant '%s': invalid source mask /%u,/%u: "
			    "expected 1-32 for IPv4 and 1-128 for IPv6", t->name,
			    t->src_len4, t->src_len6);
	if (t->direction == POLICY_DIR_OUT)
		return fail(err, "tenant '%s': a per-source limit on an outbound "
			    "tenant: sources are the clients that reach this "
			    "host (--direction in)", t->name);
	return 0;
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
	if (t->max_conns > POLICY_CONNS_MAX)
		return fail(err, "tenant '%s': invalid max-conns %" PRIu64
			    ": expected 0 (no cap) to %d", t->name,
			    t->max_conns, POLICY_CONNS_MAX);
	if (t->max_conns && t->direction == POLICY_DIR_OUT)
		return fail(err, "tenant '%s': max-conns %" PRIu64 " on an "
			    "outbound tenant: caps count the connections that "
			    "reach this host (--direction in)", t->name,
			    t->max_conns);
	if (source_check(t, err))
		return -EINVAL;
	if (t->verify != POLICY_VERIFY_NONE &&
	    t->verify != POLICY_VERIFY_SYNCOOKIE &&
	    t->verify != POLICY_VERIFY_ANSWER)
		return fail(err, "tenant '%s': invalid verify %d: expected none, "
			    "syncookie or syncookie-answer", t->name,
			    (int)t->verify);
	if (t->verify && t->direction == POLICY_DIR_OUT)
		return fail(err, "tenant '%s': verify syncookie on an outbound "
			    "tenant: only the handshakes of connections to this "
			    "host are checked (--direction in)", t->name);
	if (t->weight > POLICY_WEIGHT_MAX)
		return fail(err, "tenant '%s': invalid weight %llu: expected 1 "
			    "to %d", t->name, (unsigned long long)t->weight,
			    POLICY_WEIGHT_MAX);
	/* 0 is one bucket, as 1 is */
	if (t->shards > 1 &&
	    hot_check(t, t->shards > UINT_MAX ? UINT_MAX : (unsigned int)t->shards,
		      err) < 0)
		return -EINVAL;
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

/* The tenants of a set, `stride` bytes apart: an array of them, or the
 * policies inside the agent's own records, checked where they are. */
struct tset {
	const char *first;
	size_t stride;
};

#define AT(ts, i) \
	((const struct policy_tenant *)((ts)->first + (size_t)(i) * (ts)->stride))

/* Counts bounded by the arrays, for tenants that failed policy_validate. */
static unsigned int n_match_of(const struct policy_tenant *t)
{
	return t->n_match < POLICY_MAX_PREFIXES ? t->n_match : POLICY_MAX_PREFIXES;
}

static int name_cmp(const void *pa, const void *pb, void *arg)
{
	const struct tset *ts = arg;
	uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
	int c = strncmp(AT(ts, a)->name, AT(ts, b)->name, POLICY_NAME_MAX + 1);

	return c ? c : a < b ? -1 : a > b;
}

/* Every pair of tenants with one name. */
static int find_names(const struct tset *ts, size_t n,
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
		     strncmp(AT(ts, order[s])->name, AT(ts, order[s + run])->name,
			     POLICY_NAME_MAX + 1) == 0; run++)
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
static int find_group(const struct tset *ts, const uint32_t *c_tenant,
		      const uint8_t *c_x, const uint32_t *next, uint32_t head,
		      struct claim **buf, size_t *buf_cap, struct findings *f)
{
	size_t n = 0, run;

	for (uint32_t c = head; c != UINT32_MAX; c = next[c]) {
		const struct policy_tenant *t = AT(ts, c_tenant[c]);
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
static int find_conflicts(const struct tset *ts, size_t n,
			  struct findings *f)
{
	size_t n_claims = 0, size = 1, buf_cap = 0;
	uint32_t *head = NULL, *next = NULL, *c_tenant = NULL, c = 0;
	struct claim *buf = NULL;
	uint8_t *c_x = NULL;
	int err = -ENOMEM;

	for (size_t i = 0; i < n; i++)
		n_claims += n_match_of(AT(ts, i));
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
		for (unsigned int x = 0; x < n_match_of(AT(ts, i)); x++, c++) {
			const struct policy_prefix *p = &AT(ts, i)->match[x];
			size_t s = prefix_hash(p) & (size - 1);

			/* an outbound rule (a destination) never meets an
			 * inbound one (a source): chained apart */
			while (head[s] != UINT32_MAX &&
			       (!prefix_equal(p, &AT(ts, c_tenant[head[s]])->match[c_x[head[s]]]) ||
				AT(ts, c_tenant[head[s]])->direction != AT(ts, i)->direction))
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

/* The caps must fit the kernel's table of connections together: one
 * problem, on the tenant whose cap goes past it. */
static int check_caps(const struct tset *ts, size_t n,
		      problem_kind_fn fn, void *ctx)
{
	char err[POLICY_ERR_MAX];
	uint64_t sum = 0;

	for (size_t i = 0; i < n; i++) {
		if (AT(ts, i)->max_conns > POLICY_CONNS_MAX)
			continue;	/* policy_validate said so */
		sum += AT(ts, i)->max_conns;
		if (sum > POLICY_CONNS_MAX) {
			fail(err, "tenant '%.63s': max-conns %" PRIu64 " brings "
			     "the caps of all tenants to %" PRIu64 ", more than "
			     "the %d connections one host can count",
			     AT(ts, i)->name, AT(ts, i)->max_conns, sum,
			     POLICY_CONNS_MAX);
			if (fn)
				fn(ctx, i, false, err);
			return 1;
		}
	}
	return 0;
}

static int check_set(const struct tset *ts, size_t n,
		     problem_kind_fn fn, void *ctx)
{
	struct findings f = { 0 };
	char err[POLICY_ERR_MAX];
	int problems = 0;

	for (size_t i = 0; i < n; i++) {
		if (policy_validate(AT(ts, i), err) < 0) {
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
		const struct policy_tenant *a = AT(ts, d->j), *b = AT(ts, d->i);
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
	return problems + check_caps(ts, n, fn, ctx);
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
	struct tset set = { (const char *)ts, sizeof(*ts) };

	return check_set(&set, n, plain, &p);
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

int policy_validate_set_at(const struct policy_tenant *first, size_t stride,
			   size_t n, char *err)
{
	struct first_problem fp = { .err = err };
	struct tset set = { (const char *)first, stride };

	if (!check_set(&set, n, keep_first, &fp))
		return 0;
	return fp.conflict ? -EEXIST : -EINVAL;
}

int policy_validate_set(const struct policy_tenant *ts, size_t n, char *err)
{
	return policy_validate_set_at(ts, sizeof(*ts), n, err);
}
