// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The fleet's changes to the tenant set: policies read from the fleet's
 * store, each taken only if newer than the local tenant or tombstone, and
 * applied as one change - or the largest part of them that fits, the rest
 * waiting for the conflict to go.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"
#include "jsonflat.h"
#include "log.h"

/* Whether the fleet's version of name is newer than what this agent has:
 * its tenant, or the tombstone of a deletion made here later than the
 * store's copy was written (say, while Redis was away: the deletion wins,
 * and is published on the next sync). */
static bool fleet_newer(struct agent *a, const struct agent_tenant *t,
			const char *name, uint64_t version)
{
	const struct agent_tomb *tomb = t ? NULL : agent_find_tomb(a, name);

	if (t)
		return version > t->version;
	return !tomb || version > tomb->version;
}

/* The fleet's policy of u->name, checked on its own.  0, or -1 with the
 * reason in err. */
static int fleet_parse(const struct agent_fleet_update *u, struct policy_tenant *t,
		       char *err)
{
	json_error_t jerr;
	json_t *j;
	int e;

	err[0] = '\0';
	/* As agents store it (jansson's compact output), read quickly: a
	 * sync of 100,000 tenants reads as many; anything else in full. */
	j = jsonflat_load(u->json, strlen(u->json));
	if (!j)
		j = json_loads(u->json, 0, &jerr);
	if (!j) {
		snprintf(err, POLICY_ERR_MAX, "not JSON: %s", jerr.text);
		return -1;
	}
	e = policy_tenant_from_json(j, t, err);
	json_decref(j);
	if (!e && strcmp(t->name, u->name) != 0) {
		snprintf(err, POLICY_ERR_MAX, "the stored policy names another tenant");
		e = -1;
	}
	if (!e)
		e = policy_validate(t, err);
	if (e && !err[0])
		snprintf(err, POLICY_ERR_MAX, "not a valid tenant");
	return e ? -1 : 0;
}

/* The current set with the updates u[i] for which use[i] (pol[i] parsed):
 * a new array (NULL when out of memory) of *m tenants.  at[i] is where
 * u[i]'s tenant is in the current set (SIZE_MAX: not there); names are
 * unique in u, so a batch of 100,000 updates is placed in one pass. */
static struct agent_tenant *fleet_next(struct agent *a, const struct agent_fleet_update *u,
				       const struct policy_tenant *pol, const bool *use,
				       const size_t *at, size_t n, size_t *m_out)
{
	struct agent_tenant *next = agent_copy_set(a, n);
	bool *drop = calloc(a->n_tenants + 1, sizeof(*drop));
	size_t m = a->n_tenants, k = 0;

	if (!next || !drop) {
		free(next);
		free(drop);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		size_t j = at[i];

		if (!use[i])
			continue;
		if (!u[i].json[0]) {
			if (j != SIZE_MAX)
				drop[j] = true;
			continue;
		}
		if (j == SIZE_MAX)
			j = m++;
		memset(&next[j], 0, sizeof(next[j]));
		next[j].pol = pol[i];
		next[j].version = u[i].version;
	}
	/* the deleted ones out, the order of the rest kept */
	for (size_t j = 0; j < m; j++)
		if (j >= a->n_tenants || !drop[j])
			next[k++] = next[j];
	free(drop);
	*m_out = k;
	return next;
}

/* Whether that set would be valid, without changing anything. */
static bool fleet_valid(struct agent *a, const struct agent_fleet_update *u,
			const struct policy_tenant *pol, const bool *use,
			const size_t *at, size_t n, char *err)
{
	size_t m = 0;
	struct agent_tenant *next = fleet_next(a, u, pol, use, at, n, &m);
	struct policy_tenant *flat = calloc(m ? m : 1, sizeof(*flat));
	bool ok = false;

	if (next && flat) {
		for (size_t i = 0; i < m; i++)
			flat[i] = next[i].pol;
		ok = policy_validate_set(flat, m, err) == 0;
	} else {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
	}
	free(flat);
	free(next);
	return ok;
}

/* Whether update u (pol parsed) leaves a set that fits fitting whatever
 * else changes with it: a deletion, or a change of the tenant at `at` in
 * the current set that keeps its claims and raises no cap (names are
 * unique in a batch: nothing else changes that tenant). */
static bool fits_still(const struct agent *a, const struct agent_fleet_update *u,
		       const struct policy_tenant *pol, size_t at)
{
	const struct policy_tenant *cur;

	if (!u->json[0])
		return true;
	if (at == SIZE_MAX)
		return false;
	cur = &a->tenants[at].pol;
	return agent_same_claims(cur, pol) && pol->max_conns <= cur->max_conns;
}

/* That set, as one change. */
static enum agent_code fleet_commit(struct agent *a, const struct agent_fleet_update *u,
				    const struct policy_tenant *pol, const bool *use,
				    const size_t *at, size_t n, char *err)
{
	size_t m = 0;
	struct agent_tenant *next = fleet_next(a, u, pol, use, at, n, &m);
	enum agent_code c;

	if (!next) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	agent_fleet_begin(a, u, n);
	c = agent_commit(a, next, m, err);
	agent_fleet_end(a);
	return c;
}

static void fleet_log_applied(const struct agent_fleet_update *u)
{
	log_info("tenant '%s' %s by the fleet (version %llu)", u->name,
		 u->json[0] ? "set" : "deleted", (unsigned long long)u->version);
}

/*
 * A few changes (one `rlctl tenant set` elsewhere) are made one at a time in
 * place, each in time that does not grow with the set, as a local change
 * of one tenant is: rebuilding a set of 100,000 tenants for each would
 * take the fleet's changes a second per agent.  Deletions first, so that
 * a rename's new tenant finds its prefixes free.  What cannot be made so
 * (a conflict: the second half of a rename still on its way) is left in
 * use[] for the change of the whole set.  Returns how many are left.
 */
#define FLEET_IN_PLACE_MAX	64

static size_t fleet_in_place(struct agent *a, const struct agent_fleet_update *u,
			     const struct policy_tenant *pol, bool *use, size_t n)
{
	char err[POLICY_ERR_MAX];
	size_t left = 0;

	agent_fleet_begin(a, u, n);
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < n; i++) {
			bool del = !u[i].json[0];
			enum agent_code c;

			if (!use[i] || del != (pass == 0))
				continue;
			c = del ? agent_tenant_del(a, u[i].name, err) :
				  agent_tenant_set(a, &pol[i], err);
			if (c == AGENT_OK) {
				use[i] = false;
				fleet_log_applied(&u[i]);
			} else {
				log_debug("tenant '%s' of the fleet (version %llu): "
					  "not changed alone: %s", u[i].name,
					  (unsigned long long)u[i].version, err);
			}
		}
	agent_fleet_end(a);
	for (size_t i = 0; i < n; i++)
		left += use[i];
	return left;
}

size_t agent_fleet_apply(struct agent *a, const struct agent_fleet_update *u,
			 size_t n, bool *wait)
{
	struct policy_tenant *pol = calloc(n ? n : 1, sizeof(*pol));
	bool *use = calloc(n ? n : 1, sizeof(*use));
	bool *in = calloc(n ? n : 1, sizeof(*in));
	size_t *at = calloc(n ? n : 1, sizeof(*at));
	char err[POLICY_ERR_MAX];
	size_t want = 0, taken = 0;
	enum agent_code c;
	bool progress = true;

	memset(wait, 0, n * sizeof(*wait));
	if (!pol || !use || !in || !at) {
		/* Offered again with the next batch. */
		for (size_t i = 0; i < n; i++)
			wait[i] = true;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const struct agent_tenant *t;

		t = agent_find(a, u[i].name);
		at[i] = t ? (size_t)(t - a->tenants) : SIZE_MAX;
		/* not read (no json), not stored (version 0), not newer, or
		 * the deletion of a tenant this host does not have */
		if (!u[i].json || !u[i].version ||
		    !fleet_newer(a, t, u[i].name, u[i].version) || (!u[i].json[0] && !t))
			continue;
		if (u[i].json[0] && fleet_parse(&u[i], &pol[i], err)) {
			log_warn("couldn't apply the fleet's policy of '%s' (version "
				 "%llu): %s", u[i].name,
				 (unsigned long long)u[i].version, err);
			continue;
		}
		use[i] = true;
		want++;
	}
	if (!want)
		goto out;
	if (want <= FLEET_IN_PLACE_MAX && a->ix) {
		want = fleet_in_place(a, u, pol, use, n);
		if (!want)
			goto out;
		/* the set moved: where the rest are in it */
		for (size_t i = 0; i < n; i++) {
			const struct agent_tenant *t = agent_find(a, u[i].name);

			at[i] = t ? (size_t)(t - a->tenants) : SIZE_MAX;
		}
	}
	c = fleet_commit(a, u, pol, use, at, n, err);
	if (c == AGENT_OK) {
		for (size_t i = 0; i < n; i++)
			if (use[i])
				fleet_log_applied(&u[i]);
		want = 0;
		goto out;
	}
	if (c != AGENT_CONFLICT && c != AGENT_INVALID) {
		log_warn("couldn't apply the fleet's policy: %s", err);
		memcpy(wait, use, n * sizeof(*wait));
		goto out;
	}
	/* Not as a whole: it conflicts with tenants it does not touch.  The
	 * largest part that fits then, found by checking (not applying) one
	 * more update at a time for as long as one more fits - each may make
	 * room for another - and applied as one change.  A deletion needs no
	 * check, nor a change of limits that keeps a tenant's claims and
	 * raises no cap: a set that fits still fits then (no new claim, no
	 * cap raised), and checking each of 10,000 deletions that came with
	 * one conflict against the whole set took minutes. */
	while (progress) {
		progress = false;
		for (size_t i = 0; i < n; i++) {
			if (!use[i] || in[i])
				continue;
			in[i] = true;
			if (fits_still(a, &u[i], &pol[i], at[i]) ||
			    fleet_valid(a, u, pol, in, at, n, err)) {
				taken++;
				progress = true;
			} else {
				in[i] = false;
				log_debug("tenant '%s' of the fleet (version %llu) "
					  "does not fit yet: %s", u[i].name,
					  (unsigned long long)u[i].version, err);
			}
		}
	}
	if (taken && fleet_commit(a, u, pol, in, at, n, err) == AGENT_OK) {
		for (size_t i = 0; i < n; i++)
			if (in[i])
				fleet_log_applied(&u[i]);
	} else {
		memset(in, 0, n * sizeof(*in));
	}
	for (size_t i = 0; i < n; i++) {
		wait[i] = use[i] && !in[i];
		if (in[i])
			want--;
	}
out:
	policy_tenants_free(pol, n);
	free(use);
	free(in);
	free(at);
	return want;
}
