// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * A million prefixes over 100,000 tenants, shaped as address space is
 * handed out.  Each shape of prefix comes from its own providers' ranges:
 * a provider block is what one classifier table covers (a /16 for a /24, a
 * /24 for a /28../32, a /40, /48 or /56 for an IPv6 /48, /56 or /64), and
 * our tenants hold about 4 in 10 of the blocks of their providers' ranges
 * (the rest belong to someone else), placed at random.  A tenant holds two
 * /24s, a /28, a /30, two /32s, two /48s, a /56 and a /64:
 *
 *   shape  prefixes  provider blocks        within
 *   /24    200,000    2,048 /16s            11.0.0.0 - 99.255.255.255
 *   /28    100,000   16,384 /24s            100.0.0.0 - 126.255.255.255
 *   /30    100,000    4,096 /24s            128.0.0.0 - 159.255.255.255
 *   /32    200,000    2,048 /24s            160.0.0.0 - 191.255.255.255
 *   /48    200,000    2,048 /40s  in 256 /32s of 2400::/16
 *   /56    100,000    1,024 /48s  in 256 /32s of 2600::/16
 *   /64    100,000    1,024 /56s  in 256 /32s of 2a00::/16
 *
 * Shapes never share a range, so no prefix holds another: an address
 * inside a prefix belongs to that prefix's tenant, and one in a block no
 * tenant holds to none.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "million.h"

#define PROVIDERS6	256

struct million_pool {
	int family;
	unsigned int plen, parent_bits;
	uint32_t n_parents;
	unsigned int lo, hi;		/* IPv4: first byte; IPv6: first 16 bits */
	uint64_t *parents;		/* the blocks' prefixes, as numbers */
	uint8_t *taken;			/* a bit per prefix-sized block */
	uint32_t provider32[PROVIDERS6];	/* IPv6: the providers' /32s */
};

static const struct million_pool shapes[MS_MAX] = {
	[MS_V4_24] = { AF_INET, 24, 16, 2048, 11, 99 },
	[MS_V4_28] = { AF_INET, 28, 24, 16384, 100, 126 },
	[MS_V4_30] = { AF_INET, 30, 24, 4096, 128, 159 },
	[MS_V4_32] = { AF_INET, 32, 24, 2048, 160, 191 },
	[MS_V6_48] = { AF_INET6, 48, 40, 2048, 0x2400, 0x2400 },
	[MS_V6_56] = { AF_INET6, 56, 48, 1024, 0x2600, 0x2600 },
	[MS_V6_64] = { AF_INET6, 64, 56, 1024, 0x2a00, 0x2a00 },
};

/* A tenant's ten prefixes. */
static const enum million_shape tenant_shapes[MILLION_PER_TENANT] = {
	MS_V4_24, MS_V4_24, MS_V4_28, MS_V4_30, MS_V4_32, MS_V4_32,
	MS_V6_48, MS_V6_48, MS_V6_56, MS_V6_64,
};

static const uint16_t ported_ports[] = { 443, 8443 };

uint32_t million_rand(struct million *m)
{
	m->rng ^= m->rng >> 12;
	m->rng ^= m->rng << 25;
	m->rng ^= m->rng >> 27;
	return (uint32_t)((m->rng * 0x2545f4914f6cdd1dULL) >> 32);
}

static uint64_t rand_bits(struct million *m, unsigned int bits)
{
	uint64_t v = (uint64_t)million_rand(m) << 32 | million_rand(m);

	return bits >= 64 ? v : v & ((1ULL << bits) - 1);
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return (a > b) - (a < b);
}

/* A block of the pool's ranges, as the number its parent_bits spell. */
static uint64_t random_parent(struct million *m, const struct million_pool *p)
{
	if (p->family == AF_INET) {
		uint64_t first = p->lo + million_rand(m) % (p->hi - p->lo + 1);

		return first << (p->parent_bits - 8) |
		       rand_bits(m, p->parent_bits - 8);
	}
	return (uint64_t)p->provider32[million_rand(m) % PROVIDERS6] <<
	       (p->parent_bits - 32) | rand_bits(m, p->parent_bits - 32);
}

/* n distinct random values from gen, sorted. */
static int pool_parents(struct million *m, struct million_pool *p)
{
	uint32_t n = 0;

	p->parents = calloc(p->n_parents, sizeof(*p->parents));
	if (!p->parents)
		return -ENOMEM;
	while (n < p->n_parents) {
		uint32_t k = 0;

		while (n < p->n_parents)
			p->parents[n++] = random_parent(m, p);
		qsort(p->parents, n, sizeof(*p->parents), cmp_u64);
		for (uint32_t i = 0; i < n; i++)
			if (!k || p->parents[k - 1] != p->parents[i])
				p->parents[k++] = p->parents[i];
		n = k;
	}
	return 0;
}

static int pool_init(struct million *m, struct million_pool *p,
		     const struct million_pool *shape)
{
	size_t blocks;

	*p = *shape;
	if (p->family == AF_INET6) {
		/* distinct /32s: a clash only repeats a provider, which
		 * pool_parents' own dedup makes harmless */
		for (int i = 0; i < PROVIDERS6; i++)
			p->provider32[i] = (uint32_t)p->lo << 16 |
					   (million_rand(m) & 0xffff);
	}
	if (pool_parents(m, p))
		return -ENOMEM;
	blocks = (size_t)p->n_parents << (p->plen - p->parent_bits);
	p->taken = calloc((blocks + 7) / 8, 1);
	return p->taken ? 0 : -ENOMEM;
}

static size_t pool_blocks(const struct million_pool *p)
{
	return (size_t)p->n_parents << (p->plen - p->parent_bits);
}

/* Block b of the pool (parent-major) as a prefix with host bits from
 * `host`: its address into a[16]. */
static void block_addr(const struct million_pool *p, size_t b, uint64_t host,
		       uint8_t a[16])
{
	unsigned int sub = p->plen - p->parent_bits;
	uint64_t v = p->parents[b >> sub] << sub | (b & ((1ULL << sub) - 1));
	unsigned int width = p->family == AF_INET ? 32 : 64;

	v = v << (width - p->plen);
	if (p->plen < width)
		v |= host & ((1ULL << (width - p->plen)) - 1);
	memset(a, 0, 16);
	for (unsigned int i = 0; i < width / 8; i++)
		a[i] = (uint8_t)(v >> (width - 8 - 8 * i));
	if (p->family == AF_INET6)
		for (unsigned int i = 8; i < 16; i++)
			a[i] = (uint8_t)(host >> (8 * (i - 8)));
}

/* A block no prefix holds yet, now taken. */
static size_t pool_take(struct million *m, struct million_pool *p)
{
	size_t n = pool_blocks(p), b = rand_bits(m, 62) % n;

	while (p->taken[b / 8] & (1u << (b % 8)))
		b = (b + 1) % n;
	p->taken[b / 8] |= (uint8_t)(1u << (b % 8));
	return b;
}

int million_make(struct million *m, uint32_t first_slot)
{
	size_t n_ported = (MILLION_TENANTS + MILLION_PORTED_EVERY - 1) /
			  MILLION_PORTED_EVERY;
	size_t cap = MILLION_PREFIXES + n_ported * MILLION_PER_TENANT *
		     (sizeof(ported_ports) / sizeof(ported_ports[0]) - 1);

	memset(m, 0, sizeof(*m));
	m->rng = 0x9e3779b97f4a7c15ULL;
	m->first_slot = first_slot;
	m->pools = calloc(MS_MAX, sizeof(*m->pools));
	m->prefixes = calloc(MILLION_PREFIXES, sizeof(*m->prefixes));
	m->rules = calloc(cap, sizeof(*m->rules));
	if (!m->pools || !m->prefixes || !m->rules)
		goto nomem;
	for (int s = 0; s < MS_MAX; s++)
		if (pool_init(m, &m->pools[s], &shapes[s]))
			goto nomem;
	for (uint32_t t = 0; t < MILLION_TENANTS; t++) {
		uint32_t slot = first_slot + t;
		bool ported = million_ported(m, slot);

		for (int k = 0; k < MILLION_PER_TENANT; k++) {
			struct million_pool *p = &m->pools[tenant_shapes[k]];
			struct rl_cls_rule *r =
				&m->prefixes[(size_t)t * MILLION_PER_TENANT + k];

			r->family = p->family;
			r->plen = p->plen;
			r->tenant = slot;
			block_addr(p, pool_take(m, p), 0, r->addr);
			for (size_t i = 0; i < (ported ? 2 : 1); i++) {
				m->rules[m->n_rules] = *r;
				m->rules[m->n_rules++].port =
					ported ? ported_ports[i] : 0;
			}
		}
	}
	return 0;
nomem:
	million_free(m);
	return -ENOMEM;
}

void million_free(struct million *m)
{
	for (int s = 0; m->pools && s < MS_MAX; s++) {
		free(m->pools[s].parents);
		free(m->pools[s].taken);
	}
	free(m->pools);
	free(m->prefixes);
	free(m->rules);
	memset(m, 0, sizeof(*m));
}

bool million_ported(const struct million *m, uint32_t slot)
{
	return slot >= m->first_slot &&
	       (slot - m->first_slot) % MILLION_PORTED_EVERY ==
	       MILLION_PORTED_EVERY - 1;
}

int million_inside(struct million *m, size_t i, uint8_t a[16])
{
	const struct rl_cls_rule *r = &m->prefixes[i];
	unsigned int bytes = r->family == AF_INET ? 4 : 16;

	for (unsigned int b = 0; b < bytes; b++) {
		uint8_t keep = r->plen >= 8 * (b + 1) ? 0xff :
			       r->plen <= 8 * b ? 0 :
			       (uint8_t)(0xff << (8 - (r->plen - 8 * b)));

		a[b] = (uint8_t)((r->addr[b] & keep) |
				 (million_rand(m) & ~keep));
	}
	if (bytes == 4)
		memset(a + 4, 0, 12);
	return r->family;
}

int million_gap(struct million *m, uint8_t a[16])
{
	for (;;) {
		const struct million_pool *p = &m->pools[million_rand(m) % MS_MAX];
		size_t b = rand_bits(m, 62) % pool_blocks(p);

		if (p->taken[b / 8] & (1u << (b % 8)))
			continue;
		block_addr(p, b, rand_bits(m, 64), a);
		return p->family;
	}
}
