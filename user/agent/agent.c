/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The tenant set of rlagent: validation, slot assignment, the state file
 * and the kernel kept in step, all or nothing; and the rate samples.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "log.h"
#include "state.h"

const char *agent_code_name(enum agent_code c)
{
	return ctl_code_name((enum ctl_code)c);
}

struct agent_tenant *agent_find(struct agent *a, const char *name)
{
	for (size_t i = 0; i < a->n_tenants; i++)
		if (strcmp(a->tenants[i].pol.name, name) == 0)
			return &a->tenants[i];
	return NULL;
}

json_t *agent_tenant_json(const struct agent_tenant *t)
{
	json_t *j = policy_tenant_to_json(&t->pol);

	if (j) {
		json_object_set_new(j, "id", json_integer(t->slot));
		json_object_set_new(j, "version", json_integer((json_int_t)t->version));
	}
	return j;
}

/* The state file's line for tenant t: from the slot's cache when neither
 * the tenant nor its version changed since it was made.  NULL when out of
 * memory. */
static const char *tenant_text(struct agent *a, const struct agent_tenant *t)
{
	struct agent_text *c;
	json_t *j;
	char *text;

	if (!a->texts) {
		a->texts = calloc(RL_MAX_TENANTS, sizeof(*a->texts));
		if (!a->texts)
			return NULL;
	}
	c = &a->texts[t->slot];
	/* Bytes equal means fields equal; a difference in padding only costs
	 * an encoding. */
	if (c->text && c->version == t->version &&
	    memcmp(&c->pol, &t->pol, sizeof(c->pol)) == 0)
		return c->text;
	j = agent_tenant_json(t);
	text = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(j);
	if (!text)
		return NULL;
	free(c->text);
	c->text = text;
	c->pol = t->pol;
	c->version = t->version;
	return text;
}

/* Appends len bytes to the buffer *buf of *n bytes, *cap allocated.  0 or
 * -ENOMEM. */
static int append(char **buf, size_t *n, size_t *cap, const char *s, size_t len)
{
	if (*n + len + 1 > *cap) {
		size_t c = *cap ? *cap : 4096;
		char *p;

		while (c < *n + len + 1)
			c *= 2;
		p = realloc(*buf, c);
		if (!p)
			return -ENOMEM;
		*buf = p;
		*cap = c;
	}
	memcpy(*buf + *n, s, len);
	*n += len;
	(*buf)[*n] = '\0';
	return 0;
}

/*
 * Writes the state file: {"version":N,"deleted":[...],"tenants":[...]}, one
 * tenant a line.  The tenants' text comes from tenant_text(), so that a
 * change of one tenant among thousands does not encode them all again.
 */
static int save_policy(struct agent *a, const struct agent_tenant *ts,
		       size_t n, const struct agent_tomb *tombs, size_t n_tombs,
		       uint64_t version)
{
	json_t *del = json_array();
	char *head = NULL, *buf = NULL;
	size_t len = 0, cap = 0;
	int err = -ENOMEM;

	for (size_t i = 0; del && i < n_tombs; i++)
		json_array_append_new(del, json_pack("{s:s,s:I}", "name",
				      tombs[i].name, "version",
				      (json_int_t)tombs[i].version));
	head = del ? json_dumps(del, JSON_COMPACT) : NULL;
	if (!head)
		goto cleanup;
	{
		char start[64];

		snprintf(start, sizeof(start), "{\"version\":%llu,\"deleted\":",
			 (unsigned long long)version);
		if (append(&buf, &len, &cap, start, strlen(start)) ||
		    append(&buf, &len, &cap, head, strlen(head)) ||
		    append(&buf, &len, &cap, ",\"tenants\":[", 12))
			goto cleanup;
	}
	for (size_t i = 0; i < n; i++) {
		const char *t = tenant_text(a, &ts[i]);

		if (!t || append(&buf, &len, &cap, i ? ",\n" : "\n", i ? 2 : 1) ||
		    append(&buf, &len, &cap, t, strlen(t)))
			goto cleanup;
	}
	if (append(&buf, &len, &cap, "\n]}", 3))
		goto cleanup;
	err = state_save_text(a->opts.state_dir, AGENT_POLICY_FILE, buf, len);
cleanup:
	json_decref(del);
	free(head);
	free(buf);
	return err;
}

void agent_free(struct agent *a)
{
	if (a->texts)
		for (size_t i = 0; i < RL_MAX_TENANTS; i++)
			free(a->texts[i].text);
	free(a->texts);
	free(a->tenants);
	free(a->tombs);
}

/* The slots a set uses, one bit each: a set of thousands of tenants is
 * asked about every slot, so asking must not walk the set. */
struct slot_map {
	uint64_t bits[RL_MAX_TENANTS / 64];
};

static void slots_of(const struct agent_tenant *ts, size_t n, struct slot_map *m)
{
	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < n; i++)
		if (ts[i].slot < RL_MAX_TENANTS)
			m->bits[ts[i].slot / 64] |= 1ULL << (ts[i].slot % 64);
}

static bool slot_in(const struct slot_map *m, uint32_t slot)
{
	return slot < RL_MAX_TENANTS && (m->bits[slot / 64] >> (slot % 64)) & 1;
}

/* Names sorted, each with its position in the array it came from, for
 * lookups in time log n: a change of a set of thousands of tenants looks
 * each of them up in the set before and among the tombstones. */
struct name_entry {
	const char *name;
	size_t pos;
};

struct name_index {
	struct name_entry *e;
	size_t n;
};

static int name_entry_cmp(const void *pa, const void *pb)
{
	const struct name_entry *a = pa, *b = pb;

	return strcmp(a->name, b->name);
}

/* Indexes the n names found `stride` bytes apart from `first`.  0 or
 * -ENOMEM. */
static int index_names(const char *first, size_t stride, size_t n,
		       struct name_index *ix)
{
	ix->n = n;
	ix->e = malloc((n ? n : 1) * sizeof(*ix->e));
	if (!ix->e)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		ix->e[i] = (struct name_entry){ first + i * stride, i };
	qsort(ix->e, n, sizeof(*ix->e), name_entry_cmp);
	return 0;
}

static int index_tenants(const struct agent_tenant *ts, size_t n,
			 struct name_index *ix)
{
	return index_names(ts ? ts->pol.name : NULL, sizeof(*ts), n, ix);
}

/* The position of name, or SIZE_MAX. */
static size_t index_find(const struct name_index *ix, const char *name)
{
	struct name_entry key = { name, 0 }, *e;

	e = bsearch(&key, ix->e, ix->n, sizeof(*ix->e), name_entry_cmp);
	return e ? e->pos : SIZE_MAX;
}

/* Whether ts binds the same prefixes and ports to the same slots as old:
 * then the compiled rules in force stay right, and a change of limits
 * alone does not compile and publish thousands of rules again. */
static bool same_rules(const struct agent_tenant *old, size_t n_old,
		       const struct agent_tenant *ts, size_t n)
{
	const struct agent_tenant **by_slot;
	bool same = n == n_old;

	by_slot = calloc(RL_MAX_TENANTS, sizeof(*by_slot));
	if (!by_slot)
		return false;
	for (size_t i = 0; same && i < n_old; i++)
		if (old[i].slot < RL_MAX_TENANTS)
			by_slot[old[i].slot] = &old[i];
	for (size_t i = 0; same && i < n; i++) {
		const struct policy_tenant *x = &ts[i].pol, *y;

		if (ts[i].slot >= RL_MAX_TENANTS || !by_slot[ts[i].slot]) {
			same = false;
			break;
		}
		y = &by_slot[ts[i].slot]->pol;
		same = x->n_match == y->n_match && x->n_ports == y->n_ports &&
		       memcmp(x->ports, y->ports, x->n_ports * sizeof(x->ports[0])) == 0;
		for (unsigned int k = 0; same && k < x->n_match; k++)
			same = x->match[k].family == y->match[k].family &&
			       x->match[k].len == y->match[k].len &&
			       memcmp(x->match[k].addr, y->match[k].addr,
				      sizeof(x->match[k].addr)) == 0;
	}
	free(by_slot);
	return same;
}

/* Makes the kernel hold exactly `ts` where it held `old`: tenants first
 * (so no rule points at an unconfigured slot), rules next, then the slots
 * nobody uses any more (their rules are gone by then). */
static int kern_apply(struct agent *a, const struct agent_tenant *old,
		      size_t n_old, const struct agent_tenant *ts, size_t n)
{
	struct slot_map was, is;
	struct kern_binding *bs;
	int err = 0;

	bs = calloc(n ? n : 1, sizeof(*bs));
	if (!bs)
		return -ENOMEM;
	slots_of(old, n_old, &was);
	slots_of(ts, n, &is);
	for (size_t i = 0; i < n; i++) {
		bool fresh = !slot_in(&was, ts[i].slot) ||
			     !kern_slot_live(&a->kern, ts[i].slot);

		kern_tenant_configure(&a->kern, ts[i].slot, &ts[i].pol, fresh);
		if (a->hooks.slot_ready)
			a->hooks.slot_ready(a->hooks.ctx, ts[i].slot, &ts[i].pol);
		bs[i].slot = ts[i].slot;
		bs[i].t = &ts[i].pol;
	}
	if (!a->rules_synced || !same_rules(old, n_old, ts, n)) {
		err = kern_rules_sync(&a->kern, bs, n);
		/* after a failure the kernel's rules are not known to be
		 * either set's: the next change compiles them in any case */
		a->rules_synced = !err;
	}
	if (!err)
		for (size_t i = 0; i < n_old; i++)
			if (!slot_in(&is, old[i].slot))
				kern_tenant_clear(&a->kern, old[i].slot);
	if (!err) {
		uint32_t capped = 0;

		for (size_t i = 0; i < n; i++)
			capped += ts[i].pol.max_conns > 0;
		kern_conn_gate(&a->kern, capped);
	}
	free(bs);
	return err;
}

/*
 * Replaces the tenant set with `next` (owned by this function from here
 * on).  Tenants keep their slot (and bucket) by name; new ones get the
 * lowest slot neither set uses and the kernel does not have live.  The
 * state file is written before the kernel changes so that a crash between
 * the two re-applies the new policy on start; if the kernel refuses, both
 * are put back.
 */
const struct agent_tomb *agent_find_tomb(const struct agent *a, const char *name)
{
	for (size_t i = 0; i < a->n_tombs; i++)
		if (strcmp(a->tombs[i].name, name) == 0)
			return &a->tombs[i];
	return NULL;
}

/* The fleet's version of name in the batch being applied, or 0. */
static uint64_t fleet_version_of(const struct agent *a, const char *name)
{
	for (size_t i = 0; i < a->fleet_n; i++)
		if (strcmp(a->fleet_batch[i].name, name) == 0)
			return a->fleet_batch[i].version;
	return 0;
}

/*
 * The tombstones once `next` replaces the current set: a tenant that comes
 * back loses its tombstone, a tenant that goes gets one - with the fleet's
 * version when the fleet deleted it, else a new one.  Past AGENT_MAX_TOMBS
 * the oldest are forgotten.  NULL when out of memory.
 */
static struct agent_tomb *next_tombs(struct agent *a, const struct agent_tenant *next,
				     size_t n, size_t *n_out)
{
	struct agent_tomb *ts = calloc(a->n_tombs + a->n_tenants + 1, sizeof(*ts));
	struct name_index in_next = { 0 }, kept = { 0 };
	size_t k = 0, n_kept;

	if (!ts || index_tenants(next, n, &in_next))
		goto fail;
	for (size_t i = 0; i < a->n_tombs; i++)
		if (index_find(&in_next, a->tombs[i].name) == SIZE_MAX)
			ts[k++] = a->tombs[i];
	n_kept = k;
	if (index_names(ts[0].name, sizeof(*ts), n_kept, &kept))
		goto fail;
	for (size_t i = 0; i < a->n_tenants; i++) {
		const struct agent_tenant *t = &a->tenants[i];
		size_t j;

		if (index_find(&in_next, t->pol.name) != SIZE_MAX)
			continue;
		/* A tombstone of a live tenant (a state file edited by hand)
		 * gives way to the new one. */
		j = index_find(&kept, t->pol.name);
		if (j == SIZE_MAX)
			j = k++;
		snprintf(ts[j].name, sizeof(ts[j].name), "%s", t->pol.name);
		ts[j].version = a->fleet_update ? fleet_version_of(a, t->pol.name) : 0;
		if (!ts[j].version)
			ts[j].version = agent_next_version(a, t->version);
	}
	free(in_next.e);
	free(kept.e);
	if (k > AGENT_MAX_TOMBS) {
		/* oldest first out: they sit at the front */
		memmove(ts, ts + (k - AGENT_MAX_TOMBS), AGENT_MAX_TOMBS * sizeof(*ts));
		k = AGENT_MAX_TOMBS;
	}
	*n_out = k;
	return ts;
fail:
	free(in_next.e);
	free(ts);
	return NULL;
}

static enum agent_code commit(struct agent *a, struct agent_tenant *next,
			      size_t n, char *err)
{
	struct agent_tomb *tombs;
	size_t n_tombs = 0;
	struct policy_tenant *flat;
	struct name_index was;
	struct slot_map used;
	uint32_t slot = 0;
	int e;

	flat = calloc(n ? n : 1, sizeof(*flat));
	if (!flat) {
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (size_t i = 0; i < n; i++)
		flat[i] = next[i].pol;
	e = policy_validate_set(flat, n, err);
	free(flat);
	if (e) {
		free(next);
		/* overlapping rules are a conflict; everything else it
		 * finds is bad input */
		return e == -EEXIST ? AGENT_CONFLICT : AGENT_INVALID;
	}

	/* Kept tenants first, so that the search for free slots below sees
	 * every slot that stays in use. */
	if (index_tenants(a->tenants, a->n_tenants, &was)) {
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (size_t i = 0; i < n; i++) {
		size_t pos = index_find(&was, next[i].pol.name);

		next[i].slot = UINT32_MAX;
		if (pos != SIZE_MAX) {
			const struct agent_tenant *old = &a->tenants[pos];

			next[i].slot = old->slot;
			memcpy(next[i].samples, old->samples, sizeof(old->samples));
			next[i].n_samples = old->n_samples;
		}
	}
	free(was.e);
	/* Slots that stay in use are among the current set's. */
	slots_of(a->tenants, a->n_tenants, &used);
	for (size_t i = 0; i < n; i++) {
		if (next[i].slot != UINT32_MAX)
			continue;
		while (slot < RL_MAX_TENANTS &&
		       (slot_in(&used, slot) || kern_slot_live(&a->kern, slot)))
			slot++;
		if (slot >= RL_MAX_TENANTS) {
			free(next);
			snprintf(err, POLICY_ERR_MAX, "no free tenant slot (at "
				 "most %d tenants)", RL_MAX_TENANTS);
			return AGENT_INVALID;
		}
		next[i].slot = slot++;
		next[i].n_samples = 0;
	}

	tombs = next_tombs(a, next, n, &n_tombs);
	if (!tombs) {
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	e = save_policy(a, next, n, tombs, n_tombs, a->policy_version + 1);
	if (e) {
		free(next);
		free(tombs);
		snprintf(err, POLICY_ERR_MAX, "couldn't write the state file in "
			 "'%s': %s", a->opts.state_dir, strerror(-e));
		return AGENT_INTERNAL;
	}
	e = kern_apply(a, a->tenants, a->n_tenants, next, n);
	if (e) {
		enum agent_code code = AGENT_INTERNAL;

		if (e == -ENOSPC) {
			/* too many rules: the operator's to fix, not ours */
			snprintf(err, POLICY_ERR_MAX, "%s", a->kern.rules_err);
			code = AGENT_INVALID;
		} else {
			snprintf(err, POLICY_ERR_MAX, "couldn't update the "
				 "kernel maps: %s", strerror(-e));
		}
		kern_apply(a, next, n, a->tenants, a->n_tenants);
		save_policy(a, a->tenants, a->n_tenants, a->tombs, a->n_tombs,
			    a->policy_version);
		free(next);
		free(tombs);
		return code;
	}
	free(a->tombs);
	a->tombs = tombs;
	a->n_tombs = n_tombs;
	if (a->hooks.policy_changed && !a->fleet_update)
		a->hooks.policy_changed(a->hooks.ctx, a->tenants, a->n_tenants,
					next, n);
	free(a->tenants);
	a->tenants = next;
	a->n_tenants = n;
	a->policy_version++;
	if (a->hooks.tenants_changed)
		a->hooks.tenants_changed(a->hooks.ctx);
	return AGENT_OK;
}

static struct agent_tenant *copy_set(const struct agent *a, size_t extra)
{
	struct agent_tenant *ts = calloc(a->n_tenants + extra + 1, sizeof(*ts));

	if (ts && a->n_tenants)
		memcpy(ts, a->tenants, a->n_tenants * sizeof(*ts));
	return ts;
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
	log_debug("forgot %zu deleted tenant(s) after the tombstone TTL", n - k);
	e = save_policy(a, a->tenants, a->n_tenants, a->tombs, a->n_tombs,
			a->policy_version);
	if (e)
		log_warn("couldn't write the state file in '%s': %s",
			 a->opts.state_dir, strerror(-e));
}

enum agent_code agent_tenant_set(struct agent *a, const struct policy_tenant *t,
				 char *err)
{
	struct agent_tenant *next;
	size_t n = a->n_tenants, i;
	uint64_t prev = 0;

	if (policy_validate(t, err))
		return AGENT_INVALID;
	next = copy_set(a, 1);
	if (!next) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (i = 0; i < n; i++)
		if (strcmp(next[i].pol.name, t->name) == 0)
			break;
	if (i == n) {
		const struct agent_tomb *tomb = agent_find_tomb(a, t->name);

		/* Re-created after a deletion: newer than the deletion. */
		prev = tomb ? tomb->version : 0;
		n++;
	} else {
		prev = next[i].version;
	}
	memset(&next[i], 0, sizeof(next[i]));
	next[i].pol = *t;
	next[i].version = agent_next_version(a, prev);
	return commit(a, next, n, err);
}

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
	struct agent_tenant *next = copy_set(a, n);
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
	c = commit(a, next, m, err);
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

enum agent_code agent_tenant_del(struct agent *a, const char *name, char *err)
{
	struct agent_tenant *next;
	size_t n = 0;

	if (!agent_find(a, name)) {
		snprintf(err, POLICY_ERR_MAX, "no tenant named '%.64s'", name);
		return AGENT_NOT_FOUND;
	}
	next = copy_set(a, 0);
	if (!next) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (size_t i = 0; i < a->n_tenants; i++)
		if (strcmp(a->tenants[i].pol.name, name) != 0)
			next[n++] = a->tenants[i];
	return commit(a, next, n, err);
}

static bool same_policy(const struct policy_tenant *x,
			const struct policy_tenant *y)
{
	json_t *jx = policy_tenant_to_json(x), *jy = policy_tenant_to_json(y);
	bool eq = jx && jy && json_equal(jx, jy);

	json_decref(jx);
	json_decref(jy);
	return eq;
}

enum agent_code agent_apply(struct agent *a, const struct policy_tenant *ts,
			    size_t n, unsigned int counts[3], char *err)
{
	struct name_index was = { 0 }, in_ts = { 0 }, tombs = { 0 };
	struct agent_tenant *next;
	enum agent_code c;
	unsigned int added = 0, updated = 0, removed = 0;

	for (size_t i = 0; i < n; i++) {
		if (policy_validate(&ts[i], err))
			return AGENT_INVALID;
	}
	if (n > RL_MAX_TENANTS) {
		snprintf(err, POLICY_ERR_MAX, "%zu tenants, at most %d", n,
			 RL_MAX_TENANTS);
		return AGENT_INVALID;
	}
	next = calloc(n ? n : 1, sizeof(*next));
	if (!next) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	if (index_tenants(a->tenants, a->n_tenants, &was) ||
	    index_names(ts ? ts->name : NULL, sizeof(*ts), n, &in_ts) ||
	    index_names(a->tombs ? a->tombs->name : NULL, sizeof(*a->tombs),
			a->n_tombs, &tombs)) {
		free(was.e);
		free(in_ts.e);
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (size_t i = 0; i < n; i++) {
		size_t pos = index_find(&was, ts[i].name);
		const struct agent_tenant *old = pos == SIZE_MAX ? NULL :
						 &a->tenants[pos];

		next[i].pol = ts[i];
		if (!old) {
			size_t tomb = index_find(&tombs, ts[i].name);

			added++;
			next[i].version = agent_next_version(a, tomb == SIZE_MAX ? 0 :
							     a->tombs[tomb].version);
		} else if (!same_policy(&old->pol, &ts[i])) {
			updated++;
			next[i].version = agent_next_version(a, old->version);
		} else {
			next[i].version = old->version;
		}
	}
	for (size_t i = 0; i < a->n_tenants; i++)
		if (index_find(&in_ts, a->tenants[i].pol.name) == SIZE_MAX)
			removed++;
	free(was.e);
	free(in_ts.e);
	free(tombs.e);
	c = commit(a, next, n, err);
	if (c == AGENT_OK) {
		counts[0] = added;
		counts[1] = updated;
		counts[2] = removed;
	}
	return c;
}

/* --- start-up ------------------------------------------------------------ */

/* Turns the state document into tenants with slots.  0, or -EINVAL with
 * the problem in err. */
static int parse_doc(json_t *doc, struct agent_tenant **out, size_t *n_out,
		     uint64_t *version, char *err)
{
	struct policy_tenant *flat = NULL;
	struct agent_tenant *ts = NULL;
	struct slot_map used = { 0 };
	json_t *arr, *item, *v;
	size_t i, n;
	int e = -EINVAL;

	if (!json_is_object(doc)) {
		snprintf(err, POLICY_ERR_MAX, "not a JSON object");
		return -EINVAL;
	}
	v = json_object_get(doc, "version");
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		snprintf(err, POLICY_ERR_MAX, "'version' missing or not a "
			 "non-negative integer");
		return -EINVAL;
	}
	*version = (uint64_t)json_integer_value(v);
	arr = json_object_get(doc, "tenants");
	if (!json_is_array(arr)) {
		snprintf(err, POLICY_ERR_MAX, "'tenants' missing or not an array");
		return -EINVAL;
	}
	n = json_array_size(arr);
	if (n > RL_MAX_TENANTS) {
		snprintf(err, POLICY_ERR_MAX, "%zu tenants, at most %d", n,
			 RL_MAX_TENANTS);
		return -EINVAL;
	}
	ts = calloc(n ? n : 1, sizeof(*ts));
	flat = calloc(n ? n : 1, sizeof(*flat));
	if (!ts || !flat) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		e = -ENOMEM;
		goto cleanup;
	}
	json_array_foreach(arr, i, item) {
		char terr[POLICY_ERR_MAX];
		json_t *copy;
		json_int_t id;
		int r;

		v = json_object_get(item, "id");
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) >= RL_MAX_TENANTS) {
			snprintf(err, POLICY_ERR_MAX, "tenant %zu: 'id' missing or "
				 "not a slot number from 0 to %d", i,
				 RL_MAX_TENANTS - 1);
			goto cleanup;
		}
		id = json_integer_value(v);
		v = json_object_get(item, "version");
		ts[i].version = json_is_integer(v) && json_integer_value(v) > 0 ?
				(uint64_t)json_integer_value(v) : 0;
		copy = json_copy(item);
		json_object_del(copy, "id");
		json_object_del(copy, "version");
		r = policy_tenant_from_json(copy, &ts[i].pol, terr);
		if (!r && !ts[i].version)
			ts[i].version = 1;
		json_decref(copy);
		if (r) {
			snprintf(err, POLICY_ERR_MAX, "tenant %zu: %.200s", i, terr);
			goto cleanup;
		}
		if (slot_in(&used, (uint32_t)id)) {
			snprintf(err, POLICY_ERR_MAX, "tenant %zu: slot %lld used "
				 "twice", i, (long long)id);
			goto cleanup;
		}
		ts[i].slot = (uint32_t)id;
		used.bits[id / 64] |= 1ULL << (id % 64);
		flat[i] = ts[i].pol;
	}
	if (policy_validate_set(flat, n, err))
		goto cleanup;
	*out = ts;
	*n_out = n;
	ts = NULL;
	e = 0;
cleanup:
	free(flat);
	free(ts);
	return e;
}

/* The "deleted" list of the state document (absent in older files).
 * 0, or -EINVAL with the problem in err. */
static int parse_tombs(json_t *doc, struct agent_tomb **out, size_t *n_out,
		       char *err)
{
	json_t *arr = json_object_get(doc, "deleted"), *item;
	struct agent_tomb *ts;
	size_t i, n;

	*out = NULL;
	*n_out = 0;
	if (!arr)
		return 0;
	n = json_array_size(arr);
	if (!json_is_array(arr) || n > AGENT_MAX_TOMBS) {
		snprintf(err, POLICY_ERR_MAX, "'deleted' is not an array of at "
			 "most %d entries", AGENT_MAX_TOMBS);
		return -EINVAL;
	}
	ts = calloc(n + 1, sizeof(*ts));
	if (!ts)
		return -ENOMEM;
	json_array_foreach(arr, i, item) {
		json_t *name = json_object_get(item, "name");
		json_t *v = json_object_get(item, "version");
		char perr[POLICY_ERR_MAX];

		if (!json_is_string(name) || !json_is_integer(v) ||
		    json_integer_value(v) < 1 ||
		    policy_parse_name(json_string_value(name), ts[i].name, perr)) {
			snprintf(err, POLICY_ERR_MAX, "deleted tenant %zu: expected "
				 "a valid name and a version", i);
			free(ts);
			return -EINVAL;
		}
		ts[i].version = (uint64_t)json_integer_value(v);
	}
	*out = ts;
	*n_out = n;
	return 0;
}

int agent_policy_start(struct agent *a)
{
	char err[POLICY_ERR_MAX + STATE_ERR_MAX], bad[4200];
	struct agent_tenant *ts = NULL;
	struct slot_map used;
	uint64_t version = 0;
	json_t *doc = NULL;
	size_t n = 0;
	int e;

	e = state_secure_dir(a->opts.state_dir, 0700, (gid_t)-1, err, sizeof(err));
	if (e) {
		log_error("%s", err);
		return e;
	}
	e = state_load(a->opts.state_dir, AGENT_POLICY_FILE, &doc, err,
		       sizeof(err));
	if (e == 0) {
		e = parse_doc(doc, &ts, &n, &version, err);
		if (!e) {
			e = parse_tombs(doc, &a->tombs, &a->n_tombs, err);
			if (e) {
				free(ts);
				ts = NULL;
				n = 0;
			}
		}
		json_decref(doc);
		if (e == -ENOMEM)
			return e;
		if (e)
			e = -EBADMSG;
	}
	if (e == -EBADMSG) {
		log_error("couldn't read policy on '%s/%s': %s", a->opts.state_dir,
			  AGENT_POLICY_FILE, err);
		if (state_quarantine(a->opts.state_dir, AGENT_POLICY_FILE, bad,
				     sizeof(bad)) == 0)
			log_error("moved the damaged policy to '%s'; starting with "
				  "an empty policy and leaving the kernel's rules "
				  "in force until the next change", bad);
		a->policy_damaged = true;
		return 0;
	}
	if (e && e != -ENOENT) {
		log_error("couldn't read policy on '%s/%s': %s", a->opts.state_dir,
			  AGENT_POLICY_FILE, err);
		return e;
	}

	/* The file is the truth; the kernel may have adopted maps from an
	 * older run.  A slot that is live keeps its bucket: passing the set
	 * as its own predecessor makes only dead slots fresh. */
	e = kern_apply(a, ts, n, ts, n);
	if (e) {
		free(ts);
		return e;
	}
	slots_of(ts, n, &used);
	for (uint32_t s = 0; s < RL_MAX_TENANTS; s++)
		if (kern_slot_live(&a->kern, s) && !slot_in(&used, s)) {
			log_info("cleared kernel slot %u: not in the policy", s);
			kern_tenant_clear(&a->kern, s);
		}
	a->tenants = ts;
	a->n_tenants = n;
	a->policy_version = version;
	log_info("policy: %zu tenants (version %llu)", n,
		 (unsigned long long)version);
	agent_prune_tombs(a);
	return 0;
}

/* --- rates --------------------------------------------------------------- */

void agent_sample(struct agent *a)
{
	uint64_t now = loop_now_ns();

	for (size_t i = 0; i < a->n_tenants; i++) {
		struct agent_tenant *t = &a->tenants[i];
		struct rl_stats s;

		if (kern_tenant_stats(&a->kern, t->slot, &s))
			continue;
		if (t->n_samples == AGENT_RATE_SAMPLES) {
			memmove(t->samples, t->samples + 1,
				(AGENT_RATE_SAMPLES - 1) * sizeof(t->samples[0]));
			t->n_samples--;
		}
		t->samples[t->n_samples++] = (struct agent_sample){
			.t_ns = now, .admitted = s.admitted, .denied = s.denied,
		};
	}
}

void agent_tenant_stats(struct agent *a, const struct agent_tenant *t,
			struct agent_tenant_stats *out)
{
	struct kern_conns kc;

	memset(out, 0, sizeof(*out));
	kern_tenant_stats(&a->kern, t->slot, &out->s);
	out->tokens = kern_tenant_tokens(&a->kern, t->slot, loop_now_ns());
	if (a->kern.preload) {
		out->points = true;
		kern_point_stats(&a->kern, t->slot, &out->kernel, &out->preload);
		kern_point_tokens(&a->kern, t->slot, loop_now_ns(),
				  &out->kernel_tokens, &out->preload_tokens);
	}
	if (t->pol.max_conns && !kern_tenant_conns(&a->kern, t->slot, &kc)) {
		out->max_conns = t->pol.max_conns;
		out->conns = kc.in_flight > 0 ? (uint64_t)kc.in_flight : 0;
		out->conn_slots = kc.slots > 0 ? (uint64_t)kc.slots : 0;
		out->conn_denied = kc.s.denied;
		out->conns_opened = kc.s.opened;
		out->conns_closed = kc.s.closed;
		out->conns_forgotten = kc.forgotten;
	}
	if (t->n_samples >= 2) {
		const struct agent_sample *o = &t->samples[0];
		const struct agent_sample *l = &t->samples[t->n_samples - 1];
		double dt = (double)(l->t_ns - o->t_ns) / 1e9;

		/* Counters only grow, but a slot reset on re-creation could
		 * make them fall: no negative rates. */
		if (dt > 0 && l->admitted >= o->admitted && l->denied >= o->denied) {
			out->admit_rate = (double)(l->admitted - o->admitted) / dt;
			out->deny_rate = (double)(l->denied - o->denied) / dt;
		}
	}
}
