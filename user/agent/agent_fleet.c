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
#include "log.h"

/* Whether the fleet's version of name is newer than what this agent has:
 * its tenant, or the tombstone of a deletion made here later than the
 * store's copy was written (say, while Redis was away: the deletion wins,
 * and is published on the next sync). */
static bool fleet_newer(struct agent *a, const char *name, uint64_t version)
{
	const struct agent_tenant *t = agent_find(a, name);
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
 * a new array (NULL when out of memory) of *m tenants. */
static struct agent_tenant *fleet_next(struct agent *a, const struct agent_fleet_update *u,
				       const struct policy_tenant *pol, const bool *use,
				       size_t n, size_t *m_out)
{
	struct agent_tenant *next = agent_copy_set(a, n);
	size_t m = a->n_tenants;

	if (!next)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t j;

		if (!use[i])
			continue;
		for (j = 0; j < m; j++)
			if (strcmp(next[j].pol.name, u[i].name) == 0)
				break;
		if (!u[i].json[0]) {
			if (j < m) {
				memmove(&next[j], &next[j + 1], (m - j - 1) * sizeof(*next));
				m--;
			}
			continue;
		}
		if (j == m)
			m++;
		memset(&next[j], 0, sizeof(next[j]));
		next[j].pol = pol[i];
		next[j].version = u[i].version;
	}
	*m_out = m;
	return next;
}

/* Whether that set would be valid, without changing anything. */
static bool fleet_valid(struct agent *a, const struct agent_fleet_update *u,
			const struct policy_tenant *pol, const bool *use, size_t n,
			char *err)
{
	size_t m = 0;
	struct agent_tenant *next = fleet_next(a, u, pol, use, n, &m);
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

/* That set, as one change. */
static enum agent_code fleet_commit(struct agent *a, const struct agent_fleet_update *u,
				    const struct policy_tenant *pol, const bool *use,
				    size_t n, char *err)
{
	size_t m = 0;
	struct agent_tenant *next = fleet_next(a, u, pol, use, n, &m);
	enum agent_code c;

	if (!next) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	a->fleet_update = true;
	a->fleet_batch = u;
	a->fleet_n = n;
	c = agent_commit(a, next, m, err);
	a->fleet_update = false;
	a->fleet_batch = NULL;
	a->fleet_n = 0;
	return c;
}

static void fleet_log_applied(const struct agent_fleet_update *u)
{
	log_info("tenant '%s' %s by the fleet (version %llu)", u->name,
		 u->json[0] ? "set" : "deleted", (unsigned long long)u->version);
}

size_t agent_fleet_apply(struct agent *a, const struct agent_fleet_update *u,
			 size_t n, bool *wait)
{
	struct policy_tenant *pol = calloc(n ? n : 1, sizeof(*pol));
	bool *use = calloc(n ? n : 1, sizeof(*use));
	bool *in = calloc(n ? n : 1, sizeof(*in));
	char err[POLICY_ERR_MAX];
	size_t want = 0, taken = 0;
	enum agent_code c;
	bool progress = true;

	memset(wait, 0, n * sizeof(*wait));
	if (!pol || !use || !in) {
		/* Offered again with the next batch. */
		for (size_t i = 0; i < n; i++)
			wait[i] = true;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		const struct agent_tenant *t = agent_find(a, u[i].name);

		/* not read (no json), not stored (version 0), not newer, or
		 * the deletion of a tenant this host does not have */
		if (!u[i].json || !u[i].version ||
		    !fleet_newer(a, u[i].name, u[i].version) || (!u[i].json[0] && !t))
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
	c = fleet_commit(a, u, pol, use, n, err);
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
	 * room for another - and applied as one change. */
	while (progress) {
		progress = false;
		for (size_t i = 0; i < n; i++) {
			if (!use[i] || in[i])
				continue;
			in[i] = true;
			if (fleet_valid(a, u, pol, in, n, err)) {
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
	if (taken && fleet_commit(a, u, pol, in, n, err) == AGENT_OK) {
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
	free(pol);
	free(use);
	free(in);
	return want;
}
