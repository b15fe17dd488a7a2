/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tenant policy: the prefixes of one tenant that hold a longer prefix of
 * another.  Allowed (a wide default under specific tenants is a normal
 * design), but the classifier gives each connection to the longest prefix
 * that matches it, so the wider tenant silently loses the narrower one's
 * addresses: rlctl and the agent warn about each such pair.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "policy_int.h"

/* One rule: prefix x of tenant t. */
struct ov_item {
	uint32_t t;
	uint32_t x;
};

struct ov_set {
	const char *first;
	size_t stride;
};

#define OV_AT(s, i) \
	((const struct policy_tenant *)((s)->first + (size_t)(i) * (s)->stride))

static const struct policy_prefix *ov_prefix(const struct ov_set *s,
					     const struct ov_item *it)
{
	return &OV_AT(s, it->t)->match[it->x];
}

/* Whether wide holds narrow: the same family, no longer, and the same
 * first wide->len bits. */
static bool prefix_holds(const struct policy_prefix *wide,
			 const struct policy_prefix *narrow)
{
	unsigned int full = wide->len / 8, rest = wide->len % 8;
	uint8_t mask = (uint8_t)(0xff << (8 - rest));

	if (wide->family != narrow->family || wide->len > narrow->len)
		return false;
	if (memcmp(wide->addr, narrow->addr, full) != 0)
		return false;
	return !rest || ((wide->addr[full] ^ narrow->addr[full]) & mask) == 0;
}

/* By direction, family and address, then shorter first, then by tenant:
 * every prefix comes after all those that hold it. */
static int ov_cmp(const void *pa, const void *pb, void *arg)
{
	const struct ov_set *s = arg;
	const struct ov_item *a = pa, *b = pb;
	const struct policy_tenant *ta = OV_AT(s, a->t), *tb = OV_AT(s, b->t);
	const struct policy_prefix *p = ov_prefix(s, a), *q = ov_prefix(s, b);
	int c;

	if (ta->direction != tb->direction)
		return ta->direction < tb->direction ? -1 : 1;
	if (p->family != q->family)
		return p->family < q->family ? -1 : 1;
	c = memcmp(p->addr, q->addr, sizeof(p->addr));
	if (c)
		return c;
	if (p->len != q->len)
		return p->len < q->len ? -1 : 1;
	return a->t < b->t ? -1 : a->t > b->t;
}

static bool has_port(const struct policy_tenant *t, uint16_t port)
{
	for (unsigned int i = 0; i < t->n_ports && i < POLICY_MAX_PORTS; i++)
		if (t->ports[i] == port)
			return true;
	return false;
}

/* The ports on which narrow takes wide's connections, written as " on
 * port 80" or " on ports 80,443" into buf ("" for every port).  False
 * when there are none: two port lists that do not meet. */
static bool lost_ports(const struct policy_tenant *wide,
		       const struct policy_tenant *narrow, char *buf, size_t len)
{
	/* an any-port side loses (or takes) every port of the other */
	const struct policy_tenant *list = wide->n_ports ? wide : narrow;
	const struct policy_tenant *other = list == wide ? narrow : wide;
	unsigned int n = 0;
	size_t off = 0;
	char ports[POLICY_MAX_PORTS * 6 + 1] = "";

	buf[0] = '\0';
	if (!wide->n_ports && !narrow->n_ports)
		return true;
	for (unsigned int i = 0; i < list->n_ports && i < POLICY_MAX_PORTS; i++) {
		if (other->n_ports && !has_port(other, list->ports[i]))
			continue;
		off += (size_t)snprintf(ports + off, sizeof(ports) - off, "%s%u",
					n++ ? "," : "", list->ports[i]);
	}
	if (!n)
		return false;
	snprintf(buf, len, " on port%s %s", n > 1 ? "s" : "", ports);
	return true;
}

/* The pair's warning into msg (POLICY_OVERLAP_MAX), or false when the
 * narrower tenant takes none of the wider one's connections. */
static bool overlap_message(const struct ov_set *s, const struct ov_item *w,
			    const struct ov_item *nr, char *msg)
{
	const struct policy_tenant *wt = OV_AT(s, w->t), *nt = OV_AT(s, nr->t);
	char wp[INET6_ADDRSTRLEN + 8], np[INET6_ADDRSTRLEN + 8];
	char ports[POLICY_MAX_PORTS * 6 + 16];

	if (!lost_ports(wt, nt, ports, sizeof(ports)))
		return false;
	policy_format_prefix(ov_prefix(s, w), wp, sizeof(wp));
	policy_format_prefix(ov_prefix(s, nr), np, sizeof(np));
	snprintf(msg, POLICY_OVERLAP_MAX, "overlap: tenant '%.63s' claims %s, "
		 "but connections %s %s%s go to tenant '%.63s' (the longest "
		 "prefix wins)", wt->name, wp,
		 wt->direction == POLICY_DIR_OUT ? "to" : "from", np, ports,
		 nt->name);
	return true;
}

/* A first cut of the rules that can nest with the focus's prefixes: the
 * first 16 bits of each that are 16 bits or longer, a bit per value and
 * family, so that most of a million rules are passed over with one load.
 * A focus prefix shorter than 16 bits marks every value it holds. */
struct ov_filter {
	uint8_t bits[2][65536 / 8];	/* IPv4, IPv6 */
};

static unsigned int first16(const struct policy_prefix *p)
{
	return (unsigned int)p->addr[0] << 8 | p->addr[1];
}

static void filter_mark(struct ov_filter *f, const struct policy_prefix *p)
{
	uint8_t *bits = f->bits[p->family == AF_INET6];
	unsigned int lo = first16(p), span = p->len >= 16 ? 1 : 1u << (16 - p->len);

	for (unsigned int v = lo; v < lo + span && v < 65536; v++)
		bits[v / 8] |= (uint8_t)(1u << (v % 8));
}

/* Whether p may nest with a prefix the filter marked (false: it cannot). */
static bool filter_may(const struct ov_filter *f, const struct policy_prefix *p)
{
	unsigned int v = first16(p);

	/* a short rule may hold a focus prefix anywhere in its range */
	return p->len < 16 ||
	       (f->bits[p->family == AF_INET6][v / 8] >> (v % 8) & 1);
}

/* Whether item it nests with one of focus's prefixes (either way), in the
 * same direction: only those can pair with focus. */
static bool near_focus(const struct ov_set *s, const struct ov_filter *flt,
		       const struct ov_item *it, size_t focus)
{
	const struct policy_tenant *f = OV_AT(s, focus), *t = OV_AT(s, it->t);
	const struct policy_prefix *p = ov_prefix(s, it);

	if (it->t == focus)
		return true;
	if (t->direction != f->direction || !filter_may(flt, p))
		return false;
	for (unsigned int x = 0; x < f->n_match && x < POLICY_MAX_PREFIXES; x++)
		if (prefix_holds(&f->match[x], p) || prefix_holds(p, &f->match[x]))
			return true;
	return false;
}

static bool items_add(struct ov_item **v, size_t *n, size_t *cap,
		      struct ov_item it)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 256;
		struct ov_item *g = realloc(*v, c * sizeof(*g));

		if (!g)
			return false;
		*v = g;
		*cap = c;
	}
	(*v)[(*n)++] = it;
	return true;
}

/* The rules to look at: every prefix, or (with a focus) those that can
 * pair with the focus, a few of a million.  NULL when out of memory. */
static struct ov_item *ov_items(const struct ov_set *s, size_t n, size_t focus,
				size_t *n_items)
{
	struct ov_filter *flt = NULL;
	struct ov_item *v = NULL;
	size_t k = 0, cap = 0;

	if (focus < n) {
		const struct policy_tenant *f = OV_AT(s, focus);

		flt = calloc(1, sizeof(*flt));
		if (!flt)
			return NULL;
		for (unsigned int x = 0; x < f->n_match &&
		     x < POLICY_MAX_PREFIXES; x++)
			filter_mark(flt, &f->match[x]);
	}
	for (size_t i = 0; i < n; i++) {
		const struct policy_tenant *t = OV_AT(s, i);

		for (unsigned int x = 0; x < t->n_match &&
		     x < POLICY_MAX_PREFIXES; x++) {
			struct ov_item it = { (uint32_t)i, x };

			if (flt && !near_focus(s, flt, &it, focus))
				continue;
			if (!items_add(&v, &k, &cap, it)) {
				free(flt);
				free(v);
				return NULL;
			}
		}
	}
	free(flt);
	*n_items = k;
	/* none is not a failure */
	return v ? v : calloc(1, sizeof(*v));
}

long policy_find_overlaps(const struct policy_tenant *first, size_t stride,
			  size_t n, size_t focus, policy_overlap_fn fn,
			  void *ctx)
{
	struct ov_set s = { (const char *)first, stride };
	struct ov_item *v, *stack;
	size_t n_items = 0, depth = 0;
	char msg[POLICY_OVERLAP_MAX];
	long found = 0;

	v = ov_items(&s, n, focus, &n_items);
	stack = malloc((n_items ? n_items : 1) * sizeof(*stack));
	if (!v || !stack) {
		free(v);
		free(stack);
		return -ENOMEM;
	}
	if (n_items)
		qsort_r(v, n_items, sizeof(*v), ov_cmp, &s);
	/* Prefixes nest or do not meet, and each comes after those that hold
	 * it: the stack is the chain of prefixes that hold the current one. */
	for (size_t i = 0; i < n_items; i++) {
		const struct ov_item *q = &v[i];
		const struct policy_prefix *qp = ov_prefix(&s, q);

		while (depth && (OV_AT(&s, stack[depth - 1].t)->direction !=
				 OV_AT(&s, q->t)->direction ||
				 !prefix_holds(ov_prefix(&s, &stack[depth - 1]), qp)))
			depth--;
		for (size_t k = 0; k < depth; k++) {
			const struct ov_item *w = &stack[k];

			if (w->t == q->t || ov_prefix(&s, w)->len == qp->len)
				continue;
			if (focus < n && w->t != focus && q->t != focus)
				continue;
			if (!overlap_message(&s, w, q, msg))
				continue;
			found++;
			if (fn)
				fn(ctx, w->t, q->t, msg);
		}
		stack[depth++] = *q;
	}
	free(stack);
	free(v);
	return found;
}
