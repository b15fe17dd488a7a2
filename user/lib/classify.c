// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The rule compiler.  Rules are painted into the trie shortest prefix first,
 * so each entry always holds the answer for the longest prefix painted over
 * it so far.  What an entry holds while compiling is a "class": the any-port
 * tenant and the port rules that still beat it.  Classes are interned, so
 * the many entries one prefix covers share one; at the end each class
 * becomes a tenant, NONE, or a port row.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <bpf/bpf.h>

#include "classify.h"
#include "policy.h"

struct cport {
	uint16_t port;
	uint8_t plen;
	uint32_t tenant;
};

struct cclass {
	int64_t any;		/* tenant, or -1 */
	uint32_t n_ports;
	struct cport *ports;	/* sorted by port */
	uint32_t enc;		/* the final entry */
	uint8_t row_bits;	/* log2 of its port row's slots */
	bool used;
};

struct compiler {
	struct rl_cls_group *g;
	uint32_t n_groups, max_groups;
	struct cclass *cls;
	uint32_t n_cls, cap_cls;
	uint32_t *index;	/* open addressing: class id + 1, 0 empty */
	uint32_t index_cap;	/* a power of two */
	char *err;
	size_t errlen;
};

static int fail(struct compiler *c, int err, const char *fmt, ...)
{
	va_list ap;

	if (c->err && c->errlen) {
		va_start(ap, fmt);
		vsnprintf(c->err, c->errlen, fmt, ap);
		va_end(ap);
	}
	return err;
}

static uint32_t class_hash(int64_t any, const struct cport *p, uint32_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)(any + 1);

	for (uint32_t i = 0; i < n; i++) {
		h = (h ^ p[i].port) * 0x100000001b3ULL;
		h = (h ^ p[i].plen) * 0x100000001b3ULL;
		h = (h ^ p[i].tenant) * 0x100000001b3ULL;
	}
	/* Mixed, so that tenants' neighbouring numbers do not fill one run of
	 * the open-addressed index that other keys must probe through. */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (uint32_t)(h ^ (h >> 32));
}

/* Field by field: struct cport has padding, which memcmp would read. */
static bool class_equal(const struct cclass *k, int64_t any,
			const struct cport *p, uint32_t n)
{
	if (k->any != any || k->n_ports != n)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (k->ports[i].port != p[i].port ||
		    k->ports[i].plen != p[i].plen ||
		    k->ports[i].tenant != p[i].tenant)
			return false;
	return true;
}

static int index_grow(struct compiler *c)
{
	uint32_t cap = c->index_cap ? c->index_cap * 2 : 1024;
	uint32_t *idx = calloc(cap, sizeof(*idx));

	if (!idx)
		return -ENOMEM;
	for (uint32_t id = 0; id < c->n_cls; id++) {
		const struct cclass *k = &c->cls[id];
		uint32_t h = class_hash(k->any, k->ports, k->n_ports);

		while (idx[h & (cap - 1)])
			h++;
		idx[h & (cap - 1)] = id + 1;
	}
	free(c->index);
	c->index = idx;
	c->index_cap = cap;
	return 0;
}

/* The id of the class (any, p[0..n)), made if new; p is copied.  < 0: -errno */
static int64_t intern(struct compiler *c, int64_t any, const struct cport *p,
		      uint32_t n)
{
	uint32_t h, slot;
	struct cclass *k;

	if ((c->n_cls + 1) * 2 > c->index_cap && index_grow(c))
		return -ENOMEM;
	h = class_hash(any, p, n);
	for (;; h++) {
		slot = c->index[h & (c->index_cap - 1)];
		if (!slot)
			break;
		if (class_equal(&c->cls[slot - 1], any, p, n))
			return slot - 1;
	}
	if (c->n_cls >= (1u << 30))
		return -ENOSPC;
	if (c->n_cls == c->cap_cls) {
		uint32_t cap = c->cap_cls ? c->cap_cls * 2 : 256;
		struct cclass *cls = realloc(c->cls, cap * sizeof(*cls));

		if (!cls)
			return -ENOMEM;
		c->cls = cls;
		c->cap_cls = cap;
	}
	k = &c->cls[c->n_cls];
	memset(k, 0, sizeof(*k));
	k->any = any;
	k->n_ports = n;
	if (n) {
		k->ports = malloc(n * sizeof(*p));
		if (!k->ports)
			return -ENOMEM;
		memcpy(k->ports, p, n * sizeof(*p));
	}
	c->index[h & (c->index_cap - 1)] = c->n_cls + 1;
	return c->n_cls++;
}

/*
 * The class an entry of class `id` becomes once the rules run[0..n) of one
 * prefix, no shorter than any painted before them, are painted over it.
 * The run is sorted by port, its any-port rule (port 0) first if it has one.
 * One merge per prefix, not per rule: a prefix with thousands of port rules
 * makes one class, not thousands of growing ones.  < 0: -errno
 */
static int64_t merge(struct compiler *c, uint32_t id,
		     const struct rl_cls_rule *const *run, size_t n)
{
	const struct cclass *k = &c->cls[id];
	uint32_t kn = k->n_ports, i = 0, m = 0;
	unsigned int plen = run[0]->plen;
	bool has_any = run[0]->port == 0;
	int64_t any = has_any ? run[0]->tenant : k->any, out;
	size_t j = has_any;
	struct cport *p;

	p = calloc(kn + n, sizeof(*p));
	if (!p)
		return -ENOMEM;
	while (i < kn || j < n) {
		/* An any-port rule leaves only port rules as long as it. */
		if (i < kn && has_any && k->ports[i].plen < plen) {
			i++;
			continue;
		}
		if (j < n && (i >= kn || run[j]->port <= k->ports[i].port)) {
			if (i < kn && k->ports[i].port == run[j]->port)
				i++;
			p[m].port = run[j]->port;
			p[m].plen = (uint8_t)plen;
			p[m].tenant = run[j]->tenant;
			m++;
			j++;
		} else {
			p[m++] = k->ports[i++];
		}
	}
	out = intern(c, any, p, m);
	free(p);
	return out;
}

struct painter {
	const struct rl_cls_rule *const *run;	/* one prefix's rules */
	size_t n;
	uint32_t last_in, last_out;	/* neighbouring entries share classes */
	bool have_last;
};

static int paint(struct compiler *c, struct painter *pt, uint32_t group,
		 uint32_t idx)
{
	uint32_t *e = &c->g[group].e[idx];
	int64_t out;

	if (RL_CLS_TYPE(*e) == RL_CLS_T_GROUP) {
		uint32_t child = RL_CLS_VAL(*e);

		for (uint32_t j = 0; j < RL_CLS_FANOUT; j++) {
			int err = paint(c, pt, child, j);

			if (err)
				return err;
		}
		return 0;
	}
	if (pt->have_last && pt->last_in == *e) {
		*e = pt->last_out;
		return 0;
	}
	out = merge(c, *e, pt->run, pt->n);
	if (out < 0)
		return (int)out;
	pt->last_in = *e;
	pt->last_out = (uint32_t)out;
	pt->have_last = true;
	*e = (uint32_t)out;
	return 0;
}

static int64_t alloc_groups(struct compiler *c, uint32_t n)
{
	uint32_t first = c->n_groups;

	if (n > c->max_groups - c->n_groups)
		return -ENOSPC;
	c->n_groups += n;
	return first;
}

/* The group below entry e, made (holding e's class everywhere) if e is a
 * class.  < 0: -errno */
static int64_t descend(struct compiler *c, uint32_t group, uint32_t idx)
{
	uint32_t e = c->g[group].e[idx];
	int64_t g;

	if (RL_CLS_TYPE(e) == RL_CLS_T_GROUP)
		return RL_CLS_VAL(e);
	g = alloc_groups(c, 1);
	if (g < 0)
		return g;
	for (uint32_t j = 0; j < RL_CLS_FANOUT; j++)
		c->g[g].e[j] = e;
	c->g[group].e[idx] = RL_CLS_ENTRY(RL_CLS_T_GROUP, g);
	return g;
}

static const char *rule_str(const struct rl_cls_rule *r, char *buf, size_t len)
{
	char a[64];
	int n;

	if (!inet_ntop(r->family, r->addr, a, sizeof(a)))
		snprintf(a, sizeof(a), "?");
	n = snprintf(buf, len, "%s/%u", a, r->plen);
	if (r->port && n > 0 && (size_t)n < len)
		snprintf(buf + n, len - n, " port %u", r->port);
	return buf;
}

/* Paints the rules run[0..n) of one prefix over the addresses it covers. */
static int insert(struct compiler *c, const struct rl_cls_rule *const *run,
		  size_t n)
{
	struct painter pt = { .run = run, .n = n };
	const struct rl_cls_rule *r = run[0];
	uint32_t root = r->family == AF_INET ? RL_CLS_ROOT4 : RL_CLS_ROOT6;
	const uint8_t *a = r->addr;
	unsigned int depth;
	int64_t g;
	int err;

	if (r->plen <= 16) {
		uint32_t v = (uint32_t)a[0] << 8 | a[1];
		uint32_t cnt = 1u << (16 - r->plen);

		for (uint32_t k = 0; k < cnt; k++) {
			err = paint(c, &pt, root + ((v + k) >> 8), (v + k) & 0xff);
			if (err)
				return err;
		}
		return 0;
	}
	g = descend(c, root + a[0], a[1]);
	for (depth = 16; g >= 0; depth += 8) {
		if (r->plen <= depth + 8) {
			uint32_t cnt = 1u << (depth + 8 - r->plen);

			for (uint32_t k = 0; k < cnt; k++) {
				err = paint(c, &pt, g, a[depth / 8] + k);
				if (err)
					return err;
			}
			return 0;
		}
		g = descend(c, g, a[depth / 8]);
	}
	return (int)g;
}

/* Zeroes the bits of a[16] past the first plen. */
static void clear_bits(uint8_t *a, unsigned int plen)
{
	if (plen >= 128)
		return;
	if (plen % 8)
		a[plen / 8] &= (uint8_t)(0xff << (8 - plen % 8));
	memset(a + (plen + 7) / 8, 0, 16 - (plen + 7) / 8);
}

/* Rules by prefix, shortest first (merge() relies on it), then by port:
 * one prefix's rules are neighbours, its any-port rule first. */
static int prefix_cmp(const struct rl_cls_rule *a, const struct rl_cls_rule *b)
{
	if (a->plen != b->plen)
		return a->plen < b->plen ? -1 : 1;
	if (a->family != b->family)
		return a->family < b->family ? -1 : 1;
	return memcmp(a->addr, b->addr, 16);
}

static int rule_cmp(const void *x, const void *y)
{
	const struct rl_cls_rule *a = x, *b = y;
	int d = prefix_cmp(a, b);

	if (d)
		return d;
	return (a->port > b->port) - (a->port < b->port);
}

static int port_cmp(const void *x, const void *y)
{
	uint16_t a = *(const uint16_t *)x, b = *(const uint16_t *)y;

	return (a > b) - (a < b);
}

/* Whether ports p[0..n) take a slot each in a row of 2^bits slots; keys[]
 * (2^bits of them) is left as the row's port keys (port + 1, 0 empty). */
static bool row_place(const struct cport *p, uint32_t n, unsigned int bits,
		      uint32_t *keys)
{
	uint32_t mask = (1u << bits) - 1;

	memset(keys, 0, (mask + 1) * sizeof(*keys));
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = rl_cls_port_hash(p[i].port) & mask;

		if (keys[s])
			return false;
		keys[s] = (uint32_t)p[i].port + 1;
	}
	return true;
}

/* The fewest slots (log2) in which the class's ports take one each: 2^16
 * always do, the hash being a bijection of the port. */
static unsigned int row_bits(const struct cclass *k, uint32_t *keys)
{
	unsigned int bits = 0;

	while ((1u << bits) < k->n_ports)
		bits++;
	while (bits < 16 && !row_place(k->ports, k->n_ports, bits, keys))
		bits++;
	return bits;
}

/* Entries a row of 2^bits slots takes at entry `at`, with the entry
 * skipped before it when `at` is even (headers are at odd entries). */
static uint64_t row_size(uint64_t at, unsigned int bits)
{
	return !(at & 1) + 1 + (2ull << bits);
}

static uint32_t *flat(struct compiler *c, uint64_t idx)
{
	return &c->g[idx / RL_CLS_FANOUT].e[idx % RL_CLS_FANOUT];
}

/* Writes class k's port row at entry `row` (odd) of the half. */
static void row_write(struct compiler *c, const struct cclass *k, uint64_t row,
		      uint32_t any, uint32_t *keys)
{
	uint32_t n = 1u << k->row_bits;

	row_place(k->ports, k->n_ports, k->row_bits, keys);
	*flat(c, row) = any | ((uint32_t)k->row_bits << RL_CLS_ROW_SHIFT);
	for (uint32_t s = 0; s < n; s++) {
		*flat(c, row + 1 + 2 * s) = keys[s];
		*flat(c, row + 2 + 2 * s) = RL_CLS_NONE;
	}
	for (uint32_t i = 0; i < k->n_ports; i++) {
		uint32_t s = rl_cls_port_hash(k->ports[i].port) &
			     (n - 1);

		*flat(c, row + 2 + 2 * s) =
			RL_CLS_ENTRY(RL_CLS_T_TENANT, k->ports[i].tenant);
	}
}

static uint32_t any_entry(const struct cclass *k)
{
	return k->any < 0 ? RL_CLS_NONE : RL_CLS_ENTRY(RL_CLS_T_TENANT, k->any);
}

/* The distinct ports the used classes name. */
static int count_ports(struct compiler *c, size_t n_all, uint32_t *n_cols)
{
	uint16_t *cols;
	uint32_t n = 0, width = 0;

	*n_cols = 0;
	if (!n_all)
		return 0;
	cols = malloc(n_all * sizeof(*cols));
	if (!cols)
		return -ENOMEM;
	for (uint32_t id = 0; id < c->n_cls; id++)
		for (uint32_t i = 0; c->cls[id].used && i < c->cls[id].n_ports; i++)
			cols[n++] = c->cls[id].ports[i].port;
	qsort(cols, n, sizeof(*cols), port_cmp);
	for (uint32_t i = 0; i < n; i++)
		if (!width || cols[width - 1] != cols[i])
			cols[width++] = cols[i];
	*n_cols = width;
	free(cols);
	return 0;
}

/* Class ids become entries: tenants, NONE, or port rows, packed after the
 * trie entry by entry. */
static int finish(struct compiler *c, struct rl_cls_image *img)
{
	uint32_t trie_end = c->n_groups;
	uint64_t room, need = 0, row;
	uint32_t *keys = NULL;
	size_t n_all = 0, n_rows = 0;
	int err = 0;

	for (uint32_t g = 0; g < trie_end; g++) {
		for (uint32_t j = 0; j < RL_CLS_FANOUT; j++) {
			uint32_t e = c->g[g].e[j];
			struct cclass *k;

			if (RL_CLS_TYPE(e) == RL_CLS_T_GROUP)
				continue;
			k = &c->cls[e];
			if (!k->used) {
				k->used = true;
				n_all += k->n_ports;
				n_rows += k->n_ports != 0;
			}
		}
	}
	err = count_ports(c, n_all, &img->n_columns);
	if (err)
		return err;
	keys = malloc(sizeof(*keys) << 16);
	if (!keys) {
		err = -ENOMEM;
		goto out;
	}
	row = (uint64_t)c->n_groups * RL_CLS_FANOUT;
	for (uint32_t id = 0; id < c->n_cls; id++) {
		struct cclass *k = &c->cls[id];

		if (!k->used || !k->n_ports)
			continue;
		k->row_bits = (uint8_t)row_bits(k, keys);
		need += row_size(row + need, k->row_bits);
	}
	room = (uint64_t)(c->max_groups - c->n_groups) * RL_CLS_FANOUT;
	if (need > room) {
		err = fail(c, -ENOSPC, "the classifier is full: the port rules "
			   "of %zu address ranges need %llu KiB and %llu KiB of "
			   "%u MiB are left", n_rows,
			   (unsigned long long)(need * 4 + 1023) / 1024,
			   (unsigned long long)room * 4 / 1024,
			   c->max_groups / 1024);
		goto out;
	}

	for (uint32_t id = 0; id < c->n_cls; id++) {
		struct cclass *k = &c->cls[id];
		uint64_t size;

		if (!k->used)
			continue;
		if (!k->n_ports) {
			k->enc = any_entry(k);
			continue;
		}
		size = row_size(row, k->row_bits);
		row += size - 1 - (2ull << k->row_bits);	/* to odd */
		row_write(c, k, row, any_entry(k), keys);
		k->enc = RL_CLS_ENTRY(RL_CLS_T_PORTS, (uint32_t)row);
		row += 1 + (2ull << k->row_bits);
		img->n_rows++;
	}
	img->row_entries = (uint32_t)need;
	c->n_groups += (uint32_t)((need + RL_CLS_FANOUT - 1) / RL_CLS_FANOUT);
	for (uint32_t g = 0; g < trie_end; g++) {
		for (uint32_t j = 0; j < RL_CLS_FANOUT; j++) {
			uint32_t *e = &c->g[g].e[j];

			if (RL_CLS_TYPE(*e) != RL_CLS_T_GROUP)
				*e = c->cls[*e].enc;
		}
	}
out:
	free(keys);
	return err;
}

int rl_cls_compile(const struct rl_cls_rule *rules, size_t n, uint32_t half,
		   struct rl_cls_image *img, char *err, size_t errlen)
{
	struct compiler c = { .err = err, .errlen = errlen,
			      .max_groups = half ? half : RL_CLS_GROUPS };
	const struct rl_cls_rule **order = NULL;
	struct rl_cls_rule *norm = NULL;
	char buf[96], buf2[96];
	size_t m = 0;
	int ret;

	memset(img, 0, sizeof(*img));
	if (err && errlen)
		err[0] = '\0';
	if (c.max_groups < RL_CLS_GROUPS_MIN || c.max_groups > RL_CLS_GROUPS_MAX) {
		ret = fail(&c, -EINVAL, "%u tables is not a classifier size "
			   "(%u to %u)", c.max_groups, RL_CLS_GROUPS_MIN,
			   RL_CLS_GROUPS_MAX);
		goto out;
	}
	c.g = calloc(c.max_groups, sizeof(*c.g));
	norm = calloc(n ? n : 1, sizeof(*norm));
	order = calloc(n ? n : 1, sizeof(*order));
	if (!c.g || !norm || !order) {
		ret = fail(&c, -ENOMEM, "out of memory");
		goto out;
	}
	c.n_groups = RL_CLS_POOL;
	/* class 0: no rule; every entry starts there */
	if (intern(&c, -1, NULL, 0) != 0) {
		ret = fail(&c, -ENOMEM, "out of memory");
		goto out;
	}

	for (size_t i = 0; i < n; i++) {
		const struct rl_cls_rule *r = &rules[i];
		unsigned int bits = r->family == AF_INET ? 32 :
				    r->family == AF_INET6 ? 128 : 0;

		if (!bits || r->plen > bits) {
			ret = fail(&c, -EINVAL, "rule %zu: bad family %d or "
				   "prefix length %u", i, r->family, r->plen);
			goto out;
		}
		if (r->tenant >= RL_TENANTS_LIMIT) {
			ret = fail(&c, -EINVAL, "rule %zu: tenant slot %u is "
				   "not below %u", i, r->tenant, RL_TENANTS_LIMIT);
			goto out;
		}
		norm[i] = *r;
		clear_bits(norm[i].addr, r->plen);
	}
	/* The rules themselves, not pointers to them: the walks below then
	 * read them in order instead of a cache miss each (a million rules
	 * are tens of MB). */
	qsort(norm, n, sizeof(*norm), rule_cmp);
	for (size_t i = 0; i < n; i++)
		order[i] = &norm[i];
	/* the same rule twice is one; one prefix and port, two tenants is not */
	for (size_t i = 0; i < n; i++) {
		if (m && !rule_cmp(order[m - 1], order[i])) {
			if (order[m - 1]->tenant == order[i]->tenant)
				continue;
			ret = fail(&c, -EEXIST, "%s is claimed by tenant slots "
				   "%u and %u", rule_str(order[i], buf, sizeof(buf)),
				   order[m - 1]->tenant, order[i]->tenant);
			goto out;
		}
		order[m++] = order[i];
	}
	for (size_t i = 0, j; i < m; i = j) {
		for (j = i + 1; j < m && !prefix_cmp(order[i], order[j]); j++)
			;
		ret = insert(&c, &order[i], j - i);
		if (ret == -ENOSPC) {
			fail(&c, ret, "the classifier is full at %s: the rules "
			     "need more than %u tables of %u entries (%u MiB)",
			     rule_str(order[i], buf2, sizeof(buf2)),
			     c.max_groups, RL_CLS_FANOUT, c.max_groups / 1024);
			goto out;
		}
		if (ret) {
			fail(&c, ret, "out of memory");
			goto out;
		}
	}
	ret = finish(&c, img);
	if (ret == -ENOMEM)
		fail(&c, ret, "out of memory");
out:
	if (!ret) {
		img->groups = c.g;
		img->n_groups = c.n_groups;
		c.g = NULL;
	}
	for (uint32_t id = 0; id < c.n_cls; id++)
		free(c.cls[id].ports);
	free(c.cls);
	free(c.index);
	free(c.g);
	free(norm);
	free(order);
	return ret;
}

int rl_cls_rules_add(struct rl_cls_rule **rules, size_t *n, size_t *cap,
		     const struct policy_tenant *t, uint32_t slot)
{
	unsigned int np = t->n_ports ? t->n_ports : 1;
	size_t need = *n + (size_t)t->n_match * np;

	if (need > *cap) {
		size_t c = *cap ? *cap : 64;
		struct rl_cls_rule *r;

		while (c < need)
			c *= 2;
		r = realloc(*rules, c * sizeof(*r));
		if (!r)
			return -ENOMEM;
		*rules = r;
		*cap = c;
	}
	for (unsigned int m = 0; m < t->n_match; m++) {
		for (unsigned int pi = 0; pi < np; pi++) {
			struct rl_cls_rule *r = &(*rules)[(*n)++];

			memset(r, 0, sizeof(*r));
			r->family = t->match[m].family;
			memcpy(r->addr, t->match[m].addr, sizeof(r->addr));
			r->plen = t->match[m].len;
			r->port = t->n_ports ? t->ports[pi] : 0;
			r->tenant = slot;
		}
	}
	return 0;
}

void rl_cls_image_free(struct rl_cls_image *img)
{
	free(img->groups);
	memset(img, 0, sizeof(*img));
}

int rl_cls_lookup(const struct rl_cls_image *img, int family,
		  const uint8_t *a, uint16_t port)
{
	return rl_cls_walk(img->groups, img->groups ? img->n_groups : 0,
			   family, a, port);
}

static size_t map_bytes(uint32_t half)
{
	return 2ul * half * sizeof(struct rl_cls_group);
}

int rl_cls_map_open(struct rl_cls_map *m, int cls_fd, int state_fd,
		    int sync_fd, uint32_t half)
{
	long page = sysconf(_SC_PAGESIZE);
	void *g, *s;
	int inner;

	if (!half)
		half = RL_CLS_GROUPS;
	/* what cls_sync holds: an array like its template */
	inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "cls_sync_inner", 4, 4, 1,
			       NULL);
	if (inner < 0)
		return -errno;
	g = mmap(NULL, map_bytes(half), PROT_READ | PROT_WRITE, MAP_SHARED,
		 cls_fd, 0);
	if (g == MAP_FAILED) {
		int err = -errno;

		close(inner);
		return err;
	}
	s = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, state_fd, 0);
	if (s == MAP_FAILED) {
		int err = -errno;

		munmap(g, map_bytes(half));
		close(inner);
		return err;
	}
	m->groups = g;
	m->state = s;
	m->half = half;
	m->sync_fd = sync_fd;
	m->inner_fd = inner;
	/* A publisher before us (an agent that died) may have switched halves
	 * without waiting: the first publish waits first. */
	m->unsynced = true;
	return 0;
}

void rl_cls_map_close(struct rl_cls_map *m)
{
	if (m->groups)
		munmap(m->groups, map_bytes(m->half));
	if (m->state)
		munmap(m->state, sysconf(_SC_PAGESIZE));
	if (m->groups && m->inner_fd >= 0)
		close(m->inner_fd);
	m->groups = NULL;
	m->state = NULL;
	m->inner_fd = -1;
}

/* Waits until every BPF program that started before now has returned: the
 * kernel does that before an update of a map-in-map returns, so that user
 * space knows no program still uses the old value.  (The value stored is
 * always the same; only the wait matters.) */
static int grace_period(struct rl_cls_map *m)
{
	__u32 zero = 0;

	if (bpf_map_update_elem(m->sync_fd, &zero, &m->inner_fd, BPF_ANY))
		return -errno;
	return 0;
}

/* The half the kernel reads, in *cur, once the other one may be written:
 * it may still be read until the grace period of the last switch is over.
 * 0 or -errno. */
static int writable_half(struct rl_cls_map *m, uint32_t *cur)
{
	if (m->unsynced) {
		int err = grace_period(m);

		if (err)
			return err;
		m->unsynced = false;
	}
	*cur = __atomic_load_n(&m->state->active, __ATOMIC_ACQUIRE) & 1;
	return 0;
}

int rl_cls_publish(struct rl_cls_map *m, const struct rl_cls_image *img)
{
	uint32_t cur, next;
	int err;

	if (!m->groups || !img->groups || img->n_groups < RL_CLS_POOL ||
	    img->n_groups > m->half)
		return -EINVAL;
	err = writable_half(m, &cur);
	if (err)
		return err;
	next = cur ^ 1;
	memcpy(m->groups + (size_t)next * m->half, img->groups,
	       (size_t)img->n_groups * sizeof(*img->groups));
	__atomic_fetch_add(&m->state->generation, 1, __ATOMIC_RELAXED);
	/* The release store orders the table before the switch to it. */
	__atomic_store_n(&m->state->active, next, __ATOMIC_RELEASE);
	m->mirrored = false;
	/* Switched: the kernel reads the new rules, so this publish is done.
	 * A wait that failed is owed, and paid before the next write. */
	m->unsynced = grace_period(m) != 0;
	return 0;
}

/* --- edits in place -------------------------------------------------------- */

/* One repaint: the rules it asks about, its room and what it may visit. */
struct repaint {
	struct rl_cls_group *g;
	uint32_t *n_groups, max_groups;
	rl_cls_rule_fn rule;
	void *ctx;
	int family;
	uint8_t addr[16];	/* the address being walked, bits past it zero */
	size_t budget;		/* entries left to visit */
	bool ported;		/* a port rule decides somewhere: give up */
};

/* The tenant entry of the longest any-port rule of length hi down to lo
 * over rp->addr, or `below` when none is; RL_CLS_PORTED (a port rule would
 * decide) sets rp->ported. */
static uint32_t answer(struct repaint *rp, unsigned int hi, unsigned int lo,
		       uint32_t below)
{
	uint8_t a[16];

	for (unsigned int len = hi + 1; len-- > lo;) {
		int64_t t;

		memset(a, 0, sizeof(a));
		memcpy(a, rp->addr, len / 8);
		if (len % 8)
			a[len / 8] = rp->addr[len / 8] & (uint8_t)(0xff << (8 - len % 8));
		t = rp->rule(rp->ctx, rp->family, a, len);
		if (t == RL_CLS_PORTED)
			rp->ported = true;
		if (t >= 0 || t == RL_CLS_PORTED)
			return t >= 0 ? RL_CLS_ENTRY(RL_CLS_T_TENANT, (uint32_t)t) :
			       below;
	}
	return below;
}

/* Recomputes entry idx of group, for addresses of `bits` bits (the entry's
 * byte included) whose rules of at most bits - 8 bits answer `above`. */
static int repaint_entry(struct repaint *rp, uint32_t group, uint32_t idx,
			 unsigned int bits, uint32_t above)
{
	uint32_t *e = &rp->g[group].e[idx], v;

	if (!rp->budget--)
		return -EAGAIN;
	if (RL_CLS_TYPE(*e) == RL_CLS_T_PORTS)
		return -EAGAIN;
	rp->addr[bits / 8 - 1] = (uint8_t)idx;
	v = answer(rp, bits, bits - 8 + 1, above);
	if (rp->ported)
		return -EAGAIN;
	if (RL_CLS_TYPE(*e) == RL_CLS_T_GROUP) {
		uint32_t child = RL_CLS_VAL(*e);

		if (child >= *rp->n_groups)
			return -EAGAIN;
		for (uint32_t j = 0; j < RL_CLS_FANOUT; j++) {
			int err = repaint_entry(rp, child, j, bits + 8, v);

			if (err)
				return err;
		}
		rp->addr[bits / 8] = 0;
		return 0;
	}
	*e = v;
	return 0;
}

int rl_cls_repaint(struct rl_cls_group *groups, uint32_t *n_groups,
		   uint32_t max_groups, int family, const uint8_t *addr,
		   unsigned int plen, rl_cls_rule_fn rule, void *ctx)
{
	struct repaint rp = { .g = groups, .n_groups = n_groups,
			      .max_groups = max_groups, .rule = rule,
			      .ctx = ctx, .family = family,
			      .budget = RL_CLS_REPAINT_BUDGET };
	unsigned int bytes = family == AF_INET ? 4 : 16, depth;
	uint32_t group, first, cnt, above;

	if ((family != AF_INET && family != AF_INET6) || plen > bytes * 8 ||
	    *n_groups < RL_CLS_POOL || *n_groups > max_groups)
		return -EINVAL;
	memcpy(rp.addr, addr, bytes);
	clear_bits(rp.addr, plen);
	if (plen <= 16) {
		uint32_t v = (uint32_t)rp.addr[0] << 8 | rp.addr[1];
		uint32_t root = family == AF_INET ? RL_CLS_ROOT4 : RL_CLS_ROOT6;

		cnt = 1u << (16 - plen);
		for (uint32_t k = 0; k < cnt; k++) {
			int err;

			uint32_t above8;

			rp.addr[0] = (uint8_t)((v + k) >> 8);
			above8 = answer(&rp, 8, 0, RL_CLS_NONE);
			err = rp.ported ? -EAGAIN :
			      repaint_entry(&rp, root + ((v + k) >> 8),
					    (v + k) & 0xff, 16, above8);
			if (err)
				return err;
		}
		return 0;
	}
	/* Down to the group of the prefix's last byte, making the groups on
	 * the way (each holding its parent entry's answer everywhere). */
	group = (family == AF_INET ? RL_CLS_ROOT4 : RL_CLS_ROOT6) + rp.addr[0];
	for (depth = 16;; depth += 8) {
		uint32_t *e = &groups[group].e[rp.addr[depth / 8 - 1]];

		if (RL_CLS_TYPE(*e) == RL_CLS_T_PORTS)
			return -EAGAIN;
		if (RL_CLS_TYPE(*e) != RL_CLS_T_GROUP) {
			if (*n_groups >= max_groups)
				return -ENOSPC;
			for (uint32_t j = 0; j < RL_CLS_FANOUT; j++)
				groups[*n_groups].e[j] = *e;
			/* the group is whole before the entry points at it */
			*e = RL_CLS_ENTRY(RL_CLS_T_GROUP, (*n_groups)++);
		}
		group = RL_CLS_VAL(*e);
		if (group >= *n_groups)
			return -EAGAIN;
		if (plen <= depth + 8)
			break;
	}
	first = rp.addr[depth / 8];
	cnt = 1u << (depth + 8 - plen);
	above = answer(&rp, depth, 0, RL_CLS_NONE);
	if (rp.ported)
		return -EAGAIN;
	for (uint32_t k = 0; k < cnt; k++) {
		int err = repaint_entry(&rp, group, first + k, depth + 8, above);

		if (err)
			return err;
	}
	return 0;
}

int rl_cls_map_edit(struct rl_cls_map *m, uint32_t *n_groups,
		    const struct rl_cls_rule *ps, size_t n, rl_cls_rule_fn rule,
		    void *ctx)
{
	struct rl_cls_group *half[2];
	uint32_t cur, next, used = *n_groups, again = *n_groups;
	int err = 0;

	if (!m->groups || used < RL_CLS_POOL || used > m->half)
		return -EINVAL;
	err = writable_half(m, &cur);
	if (err)
		return err;
	next = cur ^ 1;
	half[0] = m->groups;
	half[1] = m->groups + m->half;
	if (!m->mirrored)
		memcpy(half[next], half[cur], (size_t)used * sizeof(*half[next]));
	m->mirrored = false;
	for (size_t i = 0; i < n && !err; i++)
		err = rl_cls_repaint(half[next], &used, m->half, ps[i].family,
				     ps[i].addr, ps[i].plen, rule, ctx);
	if (err)
		return err;
	__atomic_fetch_add(&m->state->generation, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&m->state->active, next, __ATOMIC_RELEASE);
	*n_groups = used;
	if (grace_period(m)) {
		m->unsynced = true;
		return 0;
	}
	/* The old half is no one's now: the same edits make it the same as
	 * the new one (groups are taken in the same order), so the next edit
	 * copies nothing. */
	for (size_t i = 0; i < n && !err; i++)
		err = rl_cls_repaint(half[cur], &again, m->half, ps[i].family,
				     ps[i].addr, ps[i].plen, rule, ctx);
	m->mirrored = !err && again == used;
	return 0;
}
