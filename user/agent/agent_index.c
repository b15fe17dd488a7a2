// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The tenant set's indexes, so that a change of one tenant among 100,000
 * looks at that tenant only: names to positions (a hash), claims to the
 * slots that hold them (a hash of direction, prefix and port), and slots
 * to positions.  Built whole after a change of the whole set, kept up to
 * date by the changes of one tenant (agent.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>

#include "agent_int.h"

#define NONE	UINT32_MAX

/* One claim: a tenant's prefix for one of its ports (0: any port). */
struct claim {
	uint8_t addr[16];
	uint32_t slot;		/* NONE: the entry is free */
	uint16_t port;
	uint8_t len;
	uint8_t key;		/* family (4 or 6), direction, PORT_MARK */
};

/* A record beside the claims of one prefix that name ports: how many do
 * (in slot), with port 0, so that a question about the prefix's rules
 * learns in one lookup whether any names a port. */
#define PORT_MARK	0x20

struct agent_index {
	struct name_hash names;	/* of the tenants, with room for them all */
	struct claim *claims;
	size_t claims_cap, n_claims;
	uint32_t *pos;		/* per slot: position in a->tenants, or NONE */
	uint64_t caps;		/* the tenants' max_conns, summed */
	uint32_t n_capped;	/* tenants with a cap */
	uint32_t n_verifying;	/* tenants that verify their SYNs */
};

static uint8_t claim_key(int family, enum policy_direction dir)
{
	return (uint8_t)((family == AF_INET6 ? 6 : 4) | (dir == POLICY_DIR_OUT) << 4);
}

static uint64_t claim_hash(const struct claim *c)
{
	uint64_t w[2], h;

	memcpy(w, c->addr, sizeof(w));
	h = (w[0] ^ ((uint64_t)c->port << 16 | (uint64_t)c->len << 8 | c->key)) *
	    0x9e3779b97f4a7c15ULL;
	h = (h ^ w[1]) * 0xc2b2ae3d27d4eb4fULL;
	return h ^ (h >> 29);
}

static bool claim_same(const struct claim *a, const struct claim *b)
{
	return a->key == b->key && a->len == b->len && a->port == b->port &&
	       memcmp(a->addr, b->addr, sizeof(a->addr)) == 0;
}

static size_t claim_find(const struct agent_index *ix, const struct claim *c)
{
	size_t mask = ix->claims_cap - 1, s = claim_hash(c) & mask;

	while (ix->claims[s].slot != NONE && !claim_same(&ix->claims[s], c))
		s = (s + 1) & mask;
	return s;
}

static int claims_grow(struct agent_index *ix, size_t need)
{
	struct claim *old = ix->claims;
	size_t old_cap = ix->claims_cap, cap = old_cap ? old_cap : 1024;

	if (2 * need <= old_cap)
		return 0;
	while (cap < 2 * need)
		cap *= 2;
	ix->claims = malloc(cap * sizeof(*ix->claims));
	if (!ix->claims) {
		ix->claims = old;
		return -ENOMEM;
	}
	ix->claims_cap = cap;
	for (size_t s = 0; s < cap; s++)
		ix->claims[s].slot = NONE;
	for (size_t s = 0; s < old_cap; s++)
		if (old[s].slot != NONE)
			ix->claims[claim_find(ix, &old[s])] = old[s];
	free(old);
	return 0;
}

/* Linear probing: what follows a freed entry moves back into its place
 * when its home is at or before it, so no lookup stops short. */
static void claim_remove(struct agent_index *ix, size_t s)
{
	size_t mask = ix->claims_cap - 1, j = s;

	ix->claims[s].slot = NONE;
	for (;;) {
		size_t home;

		j = (j + 1) & mask;
		if (ix->claims[j].slot == NONE)
			return;
		home = claim_hash(&ix->claims[j]) & mask;
		if (((j - home) & mask) >= ((j - s) & mask)) {
			ix->claims[s] = ix->claims[j];
			ix->claims[j].slot = NONE;
			s = j;
		}
	}
}

static void claim_of(const struct policy_tenant *t, unsigned int x,
		     uint16_t port, struct claim *c)
{
	memset(c, 0, sizeof(*c));
	memcpy(c->addr, t->match[x].addr, sizeof(c->addr));
	c->len = t->match[x].len;
	c->port = port;
	c->key = claim_key(t->match[x].family, t->direction);
}

/* Calls fn on each claim of t: every prefix times every port (or 0). */
#define FOR_CLAIMS(t, c, ...)						\
	for (unsigned int x_ = 0; x_ < (t)->n_match; x_++)		\
		for (unsigned int p_ = 0; p_ < ((t)->n_ports ? (t)->n_ports : 1); p_++) { \
			claim_of((t), x_, (t)->n_ports ? (t)->ports[p_] : 0, &(c)); \
			__VA_ARGS__					\
		}

void agent_index_free(struct agent *a)
{
	if (!a->ix)
		return;
	name_hash_free(&a->ix->names);
	free(a->ix->claims);
	free(a->ix->pos);
	free(a->ix);
	a->ix = NULL;
}

int agent_index_build(struct agent *a)
{
	struct agent_index *ix;
	int e;

	agent_index_free(a);
	ix = calloc(1, sizeof(*ix));
	if (!ix)
		return -ENOMEM;
	a->ix = ix;
	/* room for every tenant there may be: a put never grows it */
	e = name_hash_build(&ix->names, agent_tenant_names(a->tenants), 0,
			    a->kern.max_tenants);
	ix->pos = malloc((a->kern.max_tenants + 1) * sizeof(*ix->pos));
	if (e || !ix->pos || claims_grow(ix, 512)) {
		agent_index_free(a);
		return -ENOMEM;
	}
	memset(ix->pos, 0xff, (a->kern.max_tenants + 1) * sizeof(*ix->pos));
	for (size_t i = 0; i < a->n_tenants; i++)
		if (agent_index_put(a, i)) {
			agent_index_free(a);
			return -ENOMEM;
		}
	return 0;
}

/* Counts a claim that names a port in (delta 1) or out (-1) of its
 * prefix's PORT_MARK record; room was made for it. */
static void port_mark(struct agent_index *ix, const struct claim *c, int delta)
{
	struct claim m = *c;
	size_t s;

	m.key |= PORT_MARK;
	m.port = 0;
	s = claim_find(ix, &m);
	if (delta > 0 && ix->claims[s].slot == NONE) {
		m.slot = 1;
		ix->claims[s] = m;
		ix->n_claims++;
	} else if (delta > 0) {
		ix->claims[s].slot++;
	} else if (ix->claims[s].slot != NONE && --ix->claims[s].slot == 0) {
		claim_remove(ix, s);
		ix->n_claims--;
	}
}

int agent_index_put(struct agent *a, size_t i)
{
	struct agent_index *ix = a->ix;
	const struct agent_tenant *t = &a->tenants[i];
	struct claim c;
	size_t need = ix->n_claims;

	FOR_CLAIMS(&t->pol, c, need += c.port ? 2 : 1;)
	if (claims_grow(ix, need) ||
	    name_hash_put(&ix->names, agent_tenant_names(a->tenants), i))
		return -ENOMEM;
	FOR_CLAIMS(&t->pol, c, {
		size_t s = claim_find(ix, &c);

		if (ix->claims[s].slot == NONE) {
			ix->n_claims++;
			if (c.port)
				port_mark(ix, &c, 1);
			s = claim_find(ix, &c);	/* the mark may have moved it */
		}
		c.slot = t->slot;
		ix->claims[s] = c;
	})
	if (t->slot < a->kern.max_tenants)
		ix->pos[t->slot] = (uint32_t)i;
	agent_index_recap(a, NULL, &t->pol);
	return 0;
}

void agent_index_drop(struct agent *a, size_t i)
{
	struct agent_index *ix = a->ix;
	const struct agent_tenant *t = &a->tenants[i];
	struct claim c;
	size_t s;

	FOR_CLAIMS(&t->pol, c, {
		s = claim_find(ix, &c);
		if (ix->claims[s].slot == t->slot) {
			claim_remove(ix, s);
			ix->n_claims--;
			if (c.port)
				port_mark(ix, &c, -1);
		}
	})
	name_hash_del(&ix->names, agent_tenant_names(a->tenants), i);
	if (t->slot < a->kern.max_tenants && ix->pos[t->slot] == i)
		ix->pos[t->slot] = NONE;
	agent_index_recap(a, &t->pol, NULL);
}

void agent_index_moved(struct agent *a, size_t from, size_t to)
{
	struct agent_index *ix = a->ix;
	const struct agent_tenant *t = &a->tenants[to];

	name_hash_moved(&ix->names, agent_tenant_names(a->tenants), from, to);
	if (t->slot < a->kern.max_tenants)
		ix->pos[t->slot] = (uint32_t)to;
}

struct agent_tenant *agent_index_name(struct agent *a, const char *name)
{
	size_t i = name_hash_find(&a->ix->names, agent_tenant_names(a->tenants),
				  name);

	return i == SIZE_MAX ? NULL : &a->tenants[i];
}

struct agent_tenant *agent_index_slot(struct agent *a, uint32_t slot)
{
	return agent_index_slot_used(a, slot) ? &a->tenants[a->ix->pos[slot]] : NULL;
}

bool agent_index_slot_used(const struct agent *a, uint32_t slot)
{
	return slot < a->kern.max_tenants && a->ix->pos[slot] != NONE;
}

uint64_t agent_index_caps(const struct agent *a, uint32_t *n_capped,
			  uint32_t *n_verifying)
{
	if (n_capped)
		*n_capped = a->ix->n_capped;
	if (n_verifying)
		*n_verifying = a->ix->n_verifying;
	return a->ix->caps;
}

void agent_index_recap(struct agent *a, const struct policy_tenant *was,
		       const struct policy_tenant *now)
{
	struct agent_index *ix = a->ix;

	if (was) {
		ix->caps -= was->max_conns;
		ix->n_capped -= was->max_conns > 0;
		ix->n_verifying -= was->verify != POLICY_VERIFY_NONE;
	}
	if (now) {
		ix->caps += now->max_conns;
		ix->n_capped += now->max_conns > 0;
		ix->n_verifying += now->verify != POLICY_VERIFY_NONE;
	}
}

const struct agent_tenant *agent_index_conflict(struct agent *a,
						const struct policy_tenant *t,
						char *err)
{
	const struct agent_index *ix = a->ix;
	const struct agent_tenant *self = agent_index_name(a, t->name);
	struct claim c;

	FOR_CLAIMS(t, c, {
		size_t s = claim_find(ix, &c);
		const struct agent_tenant *o;
		char pb[INET6_ADDRSTRLEN + 8], port[16];

		if (ix->claims[s].slot == NONE ||
		    (self && ix->claims[s].slot == self->slot))
			continue;
		o = &a->tenants[ix->pos[ix->claims[s].slot]];
		policy_format_prefix(&t->match[x_], pb, sizeof(pb));
		snprintf(port, sizeof(port), "port %u", c.port);
		/* named in the order of the set, as a check of it would */
		if (self && self < o)
			snprintf(err, POLICY_ERR_MAX, "conflict: tenants '%.63s' "
				 "and '%.63s' both claim %s %s", t->name,
				 o->pol.name, pb, c.port ? port : "on any port");
		else
			snprintf(err, POLICY_ERR_MAX, "conflict: tenants '%.63s' "
				 "and '%.63s' both claim %s %s", o->pol.name,
				 t->name, pb, c.port ? port : "on any port");
		return o;
	})
	return NULL;
}

int64_t agent_index_rule(void *ctx, int family, const uint8_t *addr,
			 unsigned int plen)
{
	const struct agent *a = ctx;
	const struct agent_index *ix = a->ix;
	struct claim c = { .len = (uint8_t)plen,
			   .key = claim_key(family, POLICY_DIR_IN) | PORT_MARK };
	size_t s;

	memcpy(c.addr, addr, sizeof(c.addr));
	if (ix->claims[claim_find(ix, &c)].slot != NONE)
		return RL_CLS_PORTED;
	c.key &= (uint8_t)~PORT_MARK;
	s = claim_find(ix, &c);
	return ix->claims[s].slot == NONE ? -1 : (int64_t)ix->claims[s].slot;
}
