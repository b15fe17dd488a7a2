// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Tombstones and versions: a deleted tenant is remembered with the version
 * of its deletion for --tombstone-ttl, so that older copies of it (the
 * fleet's store, an agent that was away) cannot bring it back; versions are
 * milliseconds since the epoch, so that across the fleet the latest change
 * wins.  The tombstones and the fleet's batch being applied are found by
 * name through a hash each.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent_int.h"
#include "log.h"

static struct name_recs tomb_recs(const struct agent *a)
{
	return (struct name_recs){ a->tombs ? a->tombs->name : NULL,
				   sizeof(*a->tombs) };
}

static struct name_recs fleet_recs(const struct agent *a)
{
	return (struct name_recs){ a->fleet_batch ? a->fleet_batch->name : NULL,
				   sizeof(*a->fleet_batch) };
}

/* Both are asked once per tenant of a change of the whole set, and for
 * every deletion the broker publishes: walking a list of thousands for
 * each of 50,000 deleted tenants took seconds.  Without their hash (out of
 * memory) they walk it. */
const struct agent_tomb *agent_find_tomb(const struct agent *a, const char *name)
{
	size_t i;

	if (a->tomb_names.cap) {
		i = name_hash_find(&a->tomb_names, tomb_recs(a), name);
		return i == SIZE_MAX ? NULL : &a->tombs[i];
	}
	for (i = 0; i < a->n_tombs; i++)
		if (strcmp(a->tombs[i].name, name) == 0)
			return &a->tombs[i];
	return NULL;
}

uint64_t agent_fleet_version(const struct agent *a, const char *name)
{
	size_t i;

	if (a->fleet_names.cap) {
		i = name_hash_find(&a->fleet_names, fleet_recs(a), name);
		return i == SIZE_MAX ? 0 : a->fleet_batch[i].version;
	}
	for (i = 0; i < a->fleet_n; i++)
		if (strcmp(a->fleet_batch[i].name, name) == 0)
			return a->fleet_batch[i].version;
	return 0;
}

void agent_fleet_begin(struct agent *a, const struct agent_fleet_update *u,
		       size_t n)
{
	a->fleet_update = true;
	a->fleet_batch = u;
	a->fleet_n = n;
	/* none when out of memory: walked */
	name_hash_build(&a->fleet_names, fleet_recs(a), n, n);
}

void agent_fleet_end(struct agent *a)
{
	a->fleet_update = false;
	a->fleet_batch = NULL;
	a->fleet_n = 0;
	name_hash_free(&a->fleet_names);
}

/* The tombstones' hash made anew; none when out of memory (walked). */
static void tombs_index(struct agent *a)
{
	if (name_hash_build(&a->tomb_names, tomb_recs(a), a->n_tombs,
			    a->n_tombs + 1))
		log_warn("couldn't index %zu deleted tenants: out of memory",
			 a->n_tombs);
}

void agent_tombs_take(struct agent *a, struct agent_tomb *ts, size_t n)
{
	free(a->tombs);
	a->tombs = ts;
	a->n_tombs = n;
	tombs_index(a);
}

/* Takes tombstone i out, the newer ones moved down (the oldest stay
 * first). */
static void tomb_remove(struct agent *a, size_t i)
{
	name_hash_cut(&a->tomb_names, tomb_recs(a), i);
	memmove(&a->tombs[i], &a->tombs[i + 1],
		(a->n_tombs - i - 1) * sizeof(*a->tombs));
	a->n_tombs--;
}

void agent_tomb_forget(struct agent *a, const char *name)
{
	const struct agent_tomb *t = agent_find_tomb(a, name);

	if (t)
		tomb_remove(a, (size_t)(t - a->tombs));
}

int agent_tomb_add(struct agent *a, const char *name, uint64_t version)
{
	struct agent_tomb *ts;

	agent_tomb_forget(a, name);
	if (a->n_tombs >= AGENT_MAX_TOMBS)
		tomb_remove(a, 0);
	ts = realloc(a->tombs, (a->n_tombs + 1) * sizeof(*ts));
	if (!ts)
		return -ENOMEM;
	a->tombs = ts;
	snprintf(ts[a->n_tombs].name, sizeof(ts->name), "%s", name);
	ts[a->n_tombs].version = version;
	/* a hash that cannot follow goes: the list is walked */
	if (a->tomb_names.cap &&
	    name_hash_put(&a->tomb_names, tomb_recs(a), a->n_tombs))
		name_hash_free(&a->tomb_names);
	a->n_tombs++;
	return 0;
}

/*
 * The tombstones once `next` replaces the current set: a tenant that comes
 * back loses its tombstone, a tenant that goes gets one - with the fleet's
 * version when the fleet deleted it, else a new one.  Past AGENT_MAX_TOMBS
 * the oldest are forgotten.  NULL when out of memory.
 */
struct agent_tomb *agent_next_tombs(struct agent *a,
				    const struct agent_tenant *next, size_t n,
				    size_t *n_out)
{
	struct agent_tomb *ts = calloc(a->n_tombs + a->n_tenants + 1, sizeof(*ts)), *shrunk;
	struct name_recs in_r = agent_tenant_names(next);
	struct name_hash in_next = { 0 }, kept = { 0 };
	size_t k = 0, n_kept;

	if (!ts || name_hash_build(&in_next, in_r, n, n))
		goto fail;
	for (size_t i = 0; i < a->n_tombs; i++)
		if (name_hash_find(&in_next, in_r, a->tombs[i].name) == SIZE_MAX)
			ts[k++] = a->tombs[i];
	n_kept = k;
	if (name_hash_build(&kept, (struct name_recs){ ts->name, sizeof(*ts) },
			    n_kept, n_kept))
		goto fail;
	for (size_t i = 0; i < a->n_tenants; i++) {
		const struct agent_tenant *t = &a->tenants[i];
		size_t j;

		if (name_hash_find(&in_next, in_r, t->pol.name) != SIZE_MAX)
			continue;
		/* A tombstone of a live tenant (a state file edited by hand)
		 * gives way to the new one. */
		j = name_hash_find(&kept, (struct name_recs){ ts->name, sizeof(*ts) },
				   t->pol.name);
		if (j == SIZE_MAX)
			j = k++;
		snprintf(ts[j].name, sizeof(ts[j].name), "%s", t->pol.name);
		ts[j].version = a->fleet_update ? agent_fleet_version(a, t->pol.name) : 0;
		if (!ts[j].version)
			ts[j].version = agent_next_version(a, t->version);
	}
	name_hash_free(&in_next);
	name_hash_free(&kept);
	if (k > AGENT_MAX_TOMBS) {
		/* oldest first out: they sit at the front */
		memmove(ts, ts + (k - AGENT_MAX_TOMBS), AGENT_MAX_TOMBS * sizeof(*ts));
		k = AGENT_MAX_TOMBS;
	}
	/* room was made for every tenant to go: kept, only what did */
	shrunk = realloc(ts, (k + 1) * sizeof(*ts));
	*n_out = k;
	return shrunk ? shrunk : ts;
fail:
	name_hash_free(&in_next);
	free(ts);
	return NULL;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t agent_next_version(const struct agent *a, uint64_t prev)
{
	uint64_t ms = wall_ms();

	(void)a;
	return ms > prev ? ms : prev + 1;
}

uint64_t agent_tomb_left_ms(const struct agent *a, uint64_t version)
{
	uint64_t now = wall_ms(), ttl = a->opts.tomb_ttl_ms ? a->opts.tomb_ttl_ms :
							      AGENT_TOMB_TTL_MS;

	return version + ttl > now ? version + ttl - now : 0;
}

/*
 * A tombstone keeps a tenant deleted against older copies of it (an agent
 * that was away, a Redis re-seeded from the agents), but only for a while:
 * otherwise every name ever deleted would be kept, offered to Redis at each
 * reconnect and written to the state file forever.  Its time is the
 * deletion's version (milliseconds since the epoch, from the host that
 * deleted it), so every agent and Redis forget it at about the same moment.
 */
void agent_prune_tombs(struct agent *a)
{
	size_t k = 0, n = a->n_tombs;
	int e;

	for (size_t i = 0; i < n; i++)
		if (agent_tomb_left_ms(a, a->tombs[i].version))
			a->tombs[k++] = a->tombs[i];
	if (k == n)
		return;
	a->n_tombs = k;
	tombs_index(a);
	log_debug("forgot %zu deleted tenant(s) after the tombstone TTL", n - k);
	e = agent_save_policy(a, a->tenants, a->n_tenants, a->tombs, a->n_tombs,
			a->policy_version);
	if (e)
		log_warn("couldn't write the state file in '%s': %s",
			 a->opts.state_dir, strerror(-e));
}
