/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The tenant set of rlagent and its changes: validation, slot assignment,
 * the state file and the kernel kept in step, all or nothing.  The three
 * changes rlctl offers (set, delete, apply) are here; the fleet's changes
 * (agent_fleet.c) go through the same agent_commit(), and start-up
 * (agent_state.c) through agent_kern_apply().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent_int.h"
#include "log.h"
#include "opts.h"

const char *agent_code_name(enum agent_code c)
{
	return ctl_code_name((enum ctl_code)c);
}

struct agent_tenant *agent_find(struct agent *a, const char *name)
{
	if (a->ix)
		return agent_index_name(a, name);
	for (size_t i = 0; i < a->n_tenants; i++)
		if (strcmp(a->tenants[i].pol.name, name) == 0)
			return &a->tenants[i];
	return NULL;
}

void agent_no_tenant(const struct agent *a, const char *name, char *err)
{
	struct opts_near near;
	const char *best;

	opts_near_init(&near, name);
	for (size_t i = 0; i < a->n_tenants; i++)
		opts_near_offer(&near, a->tenants[i].pol.name);
	best = opts_near_best(&near);
	if (best)
		snprintf(err, POLICY_ERR_MAX, "no tenant named '%.64s'; did you "
			 "mean '%s'?", name, best);
	else
		snprintf(err, POLICY_ERR_MAX, "no tenant named '%.64s'", name);
}

struct agent_tenant *agent_find_slot(struct agent *a, uint32_t slot)
{
	if (a->ix)
		return agent_index_slot(a, slot);
	for (size_t i = 0; i < a->n_tenants; i++)
		if (a->tenants[i].slot == slot)
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

void agent_free(struct agent *a)
{
	agent_policy_read_drop(a);
	state_lines_drop(&a->lines);
	free(a->tenants);
	pfx_store_free(&a->prefixes);
	free(a->tombs);
	name_hash_free(&a->tomb_names);
	name_hash_free(&a->fleet_names);
	agent_index_free(a);
}

int agent_prefixes_of(struct agent_tenant *ts, size_t n, struct pfx_store *s)
{
	size_t total = 0;

	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < n; i++)
		total += ts[i].pol.n_match;
	/* room for them all first: the puts cannot fail halfway */
	if (pfx_store_reserve(s, total))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		pfx_store_put(s, &ts[i].pol);
	return 0;
}

/* Below this many prefixes no longer held, a store is not worth copying. */
#define PREFIXES_SLACK	(64 * 1024)

void agent_prefixes_tidy(struct agent *a)
{
	struct pfx_store s;
	size_t live = 0;

	if (a->prefixes.n <= 2 * a->prefixes_live + PREFIXES_SLACK)
		return;
	for (size_t i = 0; i < a->n_tenants; i++)
		live += a->tenants[i].pol.n_match;
	a->prefixes_live = live;
	if (a->prefixes.n <= 2 * live + PREFIXES_SLACK ||
	    agent_prefixes_of(a->tenants, a->n_tenants, &s))
		return;
	pfx_store_free(&a->prefixes);
	a->prefixes = s;
}

/* The current set's names for set_find(): none while the set's own
 * indexes are there (a->ix, kept with it), else hashed into *was (freed
 * by the caller).  0 or -ENOMEM. */
static int set_names(const struct agent *a, struct name_hash *was)
{
	memset(was, 0, sizeof(*was));
	return a->ix ? 0 : name_hash_build(was, agent_tenant_names(a->tenants),
					   a->n_tenants, a->n_tenants);
}

/* Where name is in the current set, or SIZE_MAX. */
static size_t set_find(struct agent *a, const struct name_hash *was,
		       const char *name)
{
	const struct agent_tenant *t;

	if (!a->ix)
		return name_hash_find(was, agent_tenant_names(a->tenants), name);
	t = agent_find(a, name);
	return t ? (size_t)(t - a->tenants) : SIZE_MAX;
}

/* Whether t claims exactly what x claims (prefixes, ports, direction):
 * then t conflicts with no tenant that x did not conflict with, and the
 * compiled rules stay right. */
bool agent_same_claims(const struct policy_tenant *x,
		       const struct policy_tenant *t)
{
	bool same = x->direction == t->direction && x->n_match == t->n_match &&
		    x->n_ports == t->n_ports &&
		    memcmp(x->ports, t->ports, t->n_ports * sizeof(t->ports[0])) == 0;

	for (unsigned int k = 0; same && k < t->n_match; k++)
		same = x->match[k].family == t->match[k].family &&
		       x->match[k].len == t->match[k].len &&
		       memcmp(x->match[k].addr, t->match[k].addr,
			      sizeof(t->match[k].addr)) == 0;
	return same;
}

/* Whether ts binds the same prefixes and ports to the same slots as old:
 * then the compiled rules in force stay right, and a change of limits
 * alone does not compile and publish thousands of rules again. */
static bool same_rules(const struct agent_tenant *old, size_t n_old,
		       const struct agent_tenant *ts, size_t n, uint32_t max)
{
	const struct agent_tenant **by_slot;
	bool same = n == n_old;

	by_slot = calloc(max, sizeof(*by_slot));
	if (!by_slot)
		return false;
	for (size_t i = 0; same && i < n_old; i++)
		if (old[i].slot < max)
			by_slot[old[i].slot] = &old[i];
	for (size_t i = 0; same && i < n; i++) {
		const struct policy_tenant *x = &ts[i].pol, *y;

		if (ts[i].slot >= max || !by_slot[ts[i].slot]) {
			same = false;
			break;
		}
		y = &by_slot[ts[i].slot]->pol;
		same = agent_same_claims(y, x);
	}
	free(by_slot);
	return same;
}

/* The bindings of ts[0..n) for the rule compiler; NULL when out of memory. */
static struct kern_binding *bindings_of(const struct agent_tenant *ts, size_t n)
{
	struct kern_binding *bs = calloc(n ? n : 1, sizeof(*bs));

	for (size_t i = 0; bs && i < n; i++)
		bs[i] = (struct kern_binding){ ts[i].slot, &ts[i].pol };
	return bs;
}

/* The rules ts needs where old is in force, compiled into r; none
 * (r->compiled false) when those in force are right for it already.  0 or
 * -errno, -ENOSPC when they do not fit (a->kern.rules_err says why). */
static int rules_prepare(struct agent *a, const struct agent_tenant *old,
			 size_t n_old, const struct agent_tenant *ts, size_t n,
			 struct kern_rules *r)
{
	struct kern_binding *bs;
	int err;

	memset(r, 0, sizeof(*r));
	if (a->rules_synced && same_rules(old, n_old, ts, n, a->kern.max_tenants))
		return 0;
	bs = bindings_of(ts, n);
	if (!bs) {
		snprintf(a->kern.rules_err, sizeof(a->kern.rules_err),
			 "out of memory");
		return -ENOMEM;
	}
	err = kern_rules_compile(&a->kern, bs, n, r);
	free(bs);
	return err;
}

/* Makes the kernel hold exactly `ts` where it held `old`: tenants first
 * (so no rule points at an unconfigured slot), rules next (those of `pre`,
 * consumed here, when the caller compiled them already), then the slots
 * nobody uses any more (their rules are gone by then). */
static int kern_apply(struct agent *a, const struct agent_tenant *old,
		      size_t n_old, const struct agent_tenant *ts, size_t n,
		      struct kern_rules *pre)
{
	struct kern_rules own, *r = pre ? pre : &own;
	struct slot_map was, is;
	int err = 0;

	if (!pre) {
		err = rules_prepare(a, old, n_old, ts, n, &own);
		if (err) {
			/* after a failure the kernel's rules are not known to
			 * be either set's: the next change compiles them */
			a->rules_synced = false;
			return err;
		}
	}
	slots_of(old, n_old, &was);
	slots_of(ts, n, &is);
	for (size_t i = 0; i < n; i++) {
		bool fresh = !slot_in(&was, ts[i].slot) ||
			     !kern_slot_live(&a->kern, ts[i].slot);

		kern_tenant_configure(&a->kern, ts[i].slot, &ts[i].pol, fresh);
		if (a->hooks.slot_ready)
			a->hooks.slot_ready(a->hooks.ctx, ts[i].slot, &ts[i].pol);
	}
	if (r->compiled) {
		err = kern_rules_publish(&a->kern, r);
		a->rules_synced = !err;
	}
	if (!err)
		for (size_t i = 0; i < n_old; i++)
			if (!slot_in(&is, old[i].slot))
				kern_tenant_clear(&a->kern, old[i].slot);
	if (!err) {
		uint32_t capped = 0, verifying = 0;

		for (size_t i = 0; i < n; i++) {
			capped += ts[i].pol.max_conns > 0;
			verifying += ts[i].pol.verify != POLICY_VERIFY_NONE;
		}
		kern_conn_gate(&a->kern, capped);
		kern_verify_gate(&a->kern, verifying);
	}
	return err;
}

void agent_preload_refill(struct agent *a)
{
	struct kern_binding *bs;
	int err = -ENOMEM;

	for (size_t i = 0; i < a->n_tenants; i++)
		kern_preload_configure(&a->kern, a->tenants[i].slot,
				       &a->tenants[i].pol);
	bs = bindings_of(a->tenants, a->n_tenants);
	if (bs || !a->n_tenants)
		err = kern_preload_rules(&a->kern, bs, a->n_tenants);
	free(bs);
	if (err)
		log_error("couldn't write the rules into the new preload pool: "
			  "%s", strerror(-err));
}

int agent_kern_apply(struct agent *a, const struct agent_tenant *old,
		     size_t n_old, const struct agent_tenant *ts, size_t n)
{
	return kern_apply(a, old, n_old, ts, n, NULL);
}

/*
 * Replaces the tenant set with `next` (owned by this function from here
 * on).  Tenants keep their slot (and bucket) by name; new ones get the
 * lowest slot neither set uses and the kernel does not have live.  The
 * state file is written before the kernel changes so that a crash between
 * the two re-applies the new policy on start; if the kernel refuses, both
 * are put back.
 */
enum agent_code agent_commit(struct agent *a, struct agent_tenant *next,
			     size_t n, char *err)
{
	struct agent_tomb *tombs;
	struct kern_rules rules;
	struct pfx_store prefixes;
	size_t n_tombs = 0;
	struct name_hash was;
	struct slot_map used;
	uint32_t slot = 0;
	int e;

	e = policy_validate_set_at(&next->pol, sizeof(*next), n, err);
	if (e) {
		free(next);
		/* overlapping rules are a conflict; everything else it
		 * finds is bad input */
		return e == -EEXIST ? AGENT_CONFLICT : AGENT_INVALID;
	}
	/* The new set's prefixes, its own from here: those of next may be
	 * the caller's. */
	if (agent_prefixes_of(next, n, &prefixes)) {
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}

	/* Kept tenants first, so that the search for free slots below sees
	 * every slot that stays in use. */
	if (set_names(a, &was)) {
		pfx_store_free(&prefixes);
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (size_t i = 0; i < n; i++) {
		size_t pos = set_find(a, &was, next[i].pol.name);

		next[i].slot = UINT32_MAX;
		if (pos != SIZE_MAX) {
			const struct agent_tenant *old = &a->tenants[pos];

			next[i].slot = old->slot;
			memcpy(next[i].samples, old->samples, sizeof(old->samples));
			next[i].n_samples = old->n_samples;
		}
	}
	name_hash_free(&was);
	/* Slots that stay in use are among the current set's. */
	slots_of(a->tenants, a->n_tenants, &used);
	for (size_t i = 0; i < n; i++) {
		if (next[i].slot != UINT32_MAX)
			continue;
		while (slot < a->kern.max_tenants &&
		       (slot_in(&used, slot) || kern_slot_live(&a->kern, slot)))
			slot++;
		if (slot >= a->kern.max_tenants) {
			pfx_store_free(&prefixes);
			free(next);
			snprintf(err, POLICY_ERR_MAX, "no free tenant slot (at "
				 "most %u tenants, --max-tenants)",
				 a->kern.max_tenants);
			return AGENT_INVALID;
		}
		next[i].slot = slot++;
		next[i].n_samples = 0;
	}

	/* What does not fit (the broker's room for the new tenants, the
	 * rules) is refused before the state file or the kernel is touched:
	 * nothing to put back then. */
	if (a->hooks.slots_reserve &&
	    a->hooks.slots_reserve(a->hooks.ctx, next, n, err)) {
		pfx_store_free(&prefixes);
		free(next);
		return AGENT_INTERNAL;
	}
	e = rules_prepare(a, a->tenants, a->n_tenants, next, n, &rules);
	if (e) {
		pfx_store_free(&prefixes);
		free(next);
		snprintf(err, POLICY_ERR_MAX, "%s", a->kern.rules_err);
		return e == -ENOSPC ? AGENT_INVALID : AGENT_INTERNAL;
	}
	tombs = agent_next_tombs(a, next, n, &n_tombs);
	if (!tombs) {
		kern_rules_free(&rules);
		pfx_store_free(&prefixes);
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	e = agent_save_policy(a, next, n, tombs, n_tombs, a->policy_version + 1);
	if (e) {
		kern_rules_free(&rules);
		pfx_store_free(&prefixes);
		free(next);
		free(tombs);
		snprintf(err, POLICY_ERR_MAX, "couldn't write the state file in "
			 "'%s': %s", a->opts.state_dir, strerror(-e));
		return AGENT_INTERNAL;
	}
	e = kern_apply(a, a->tenants, a->n_tenants, next, n, &rules);
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
		agent_kern_apply(a, next, n, a->tenants, a->n_tenants);
		agent_save_policy(a, a->tenants, a->n_tenants, a->tombs,
				  a->n_tombs, a->policy_version);
		pfx_store_free(&prefixes);
		free(next);
		free(tombs);
		return code;
	}
	agent_tombs_take(a, tombs, n_tombs);
	if (a->hooks.policy_changed && !a->fleet_update)
		a->hooks.policy_changed(a->hooks.ctx, a->tenants, a->n_tenants,
					next, n);
	free(a->tenants);
	pfx_store_free(&a->prefixes);
	a->tenants = next;
	a->n_tenants = n;
	a->cap_tenants = n;
	a->prefixes = prefixes;
	a->prefixes_live = prefixes.n;
	if (agent_index_build(a))
		log_warn("couldn't index %zu tenants: out of memory; every "
			 "change rebuilds the set", n);
	a->policy_version++;
	if (a->hooks.tenants_changed)
		a->hooks.tenants_changed(a->hooks.ctx);
	return AGENT_OK;
}

struct agent_tenant *agent_copy_set(const struct agent *a, size_t extra)
{
	struct agent_tenant *ts = calloc(a->n_tenants + extra + 1, sizeof(*ts));

	if (ts && a->n_tenants)
		memcpy(ts, a->tenants, a->n_tenants * sizeof(*ts));
	return ts;
}

/* The kernel's gates: how many tenants have a cap, how many verify. */
static void conn_gate(struct agent *a)
{
	uint32_t capped = 0, verifying = 0;

	if (a->ix) {
		agent_index_caps(a, &capped, &verifying);
	} else {
		for (size_t i = 0; i < a->n_tenants; i++) {
			capped += a->tenants[i].pol.max_conns > 0;
			verifying += a->tenants[i].pol.verify != POLICY_VERIFY_NONE;
		}
	}
	kern_conn_gate(&a->kern, capped);
	kern_verify_gate(&a->kern, verifying);
}

/* After a change of one tenant (was[0..n_was) to now[0..n_now), each
 * 0 or 1) is in the kernel: the connection gate, the listeners (the broker
 * hears of this tenant alone), the policy's version. */
/* The version of a change of name made in place: the fleet's when this is
 * the fleet's change (agent_fleet.c applies a few that way), else a new
 * one after prev. */
static uint64_t change_version(struct agent *a, const char *name, uint64_t prev)
{
	uint64_t v = a->fleet_update ? agent_fleet_version(a, name) : 0;

	return v ? v : agent_next_version(a, prev);
}

static void changed_one(struct agent *a, const struct agent_tenant *was,
			size_t n_was, const struct agent_tenant *now, size_t n_now)
{
	conn_gate(a);
	if (a->hooks.policy_changed && !a->fleet_update)
		a->hooks.policy_changed(a->hooks.ctx, was, n_was, now, n_now);
	a->policy_version++;
	if (a->hooks.tenants_changed)
		a->hooks.tenants_changed(a->hooks.ctx);
	agent_prefixes_tidy(a);
}

/*
 * A change of one tenant's limits (its rate, burst, action, cap no higher,
 * ...) where its prefixes, ports and direction stay: nothing of the rest
 * of the set needs checking, no rule changes, and the tenant is changed in
 * place, in time that does not grow with the set.  The change is on disk
 * first (a line of the state file's journal); if it cannot be, nothing
 * changed.  Returns AGENT_OK, AGENT_INTERNAL, or -1 when the change is not
 * of that kind (the whole set is then rebuilt and checked).
 */
static int tenant_set_in_place(struct agent *a, struct agent_tenant *cur,
			       const struct policy_tenant *t, char *err)
{
	struct agent_tenant was = *cur;
	int e;

	if (!a->rules_synced || !agent_same_claims(&cur->pol, t) ||
	    t->max_conns > cur->pol.max_conns)
		return -1;
	cur->pol = *t;
	cur->pol.match = was.pol.match;	/* the same prefixes, in the store */
	cur->version = change_version(a, t->name, was.version);
	if (a->ix)
		agent_index_recap(a, &was.pol, t);
	e = agent_journal_tenant(a, cur, a->policy_version + 1);
	if (e) {
		*cur = was;
		if (a->ix)
			agent_index_recap(a, t, &was.pol);
		snprintf(err, POLICY_ERR_MAX, "couldn't write the state file in "
			 "'%s': %s", a->opts.state_dir, strerror(-e));
		return AGENT_INTERNAL;
	}
	kern_tenant_configure(&a->kern, cur->slot, &cur->pol,
			      !kern_slot_live(&a->kern, cur->slot));
	if (a->hooks.slot_ready)
		a->hooks.slot_ready(a->hooks.ctx, cur->slot, &cur->pol);
	changed_one(a, &was, 1, cur, 1);
	return AGENT_OK;
}

/* The kernel's rules, made to follow a change of one tenant from `was` to
 * `now` (either NULL): its inbound prefixes repainted in place, or, where
 * that cannot be done, every rule compiled anew.  0 or -errno. */
static int rules_follow(struct agent *a, const struct policy_tenant *was,
			const struct policy_tenant *now)
{
	const struct policy_tenant *both[2] = { was, now };
	struct rl_cls_rule ps[2 * POLICY_MAX_PREFIXES];
	struct kern_binding *bs;
	size_t n = 0;
	int e = -EAGAIN;

	for (int k = 0; k < 2; k++)
		for (unsigned int x = 0; both[k] && x < both[k]->n_match; x++) {
			if (both[k]->direction != POLICY_DIR_IN)
				continue;
			memset(&ps[n], 0, sizeof(ps[n]));
			ps[n].family = both[k]->match[x].family;
			memcpy(ps[n].addr, both[k]->match[x].addr, 16);
			ps[n].plen = both[k]->match[x].len;
			n++;
		}
	/* An outbound tenant paints nothing in the kernel, but its rules are
	 * the pool's, which is always compiled whole. */
	if (a->rules_synced)
		e = n ? kern_rules_edit(&a->kern, ps, n, agent_index_rule, a) :
		    a->kern.preload ? -EAGAIN : 0;
	if (!e)
		return 0;
	bs = bindings_of(a->tenants, a->n_tenants);
	if (!bs)
		return -ENOMEM;
	e = kern_rules_sync(&a->kern, bs, a->n_tenants);
	a->rules_synced = !e;
	free(bs);
	return e;
}

/* Takes tenant i out of the set: the last one moves into its place. */
static void table_remove(struct agent *a, size_t i)
{
	size_t last = a->n_tenants - 1;

	agent_index_drop(a, i);
	if (i != last) {
		a->tenants[i] = a->tenants[last];
		agent_index_moved(a, last, i);
	}
	a->n_tenants--;
}

/* Adds t at the end of the set.  0 or -ENOMEM (nothing changed). */
static int table_append(struct agent *a, const struct agent_tenant *t)
{
	if (a->n_tenants == a->cap_tenants) {
		size_t cap = a->cap_tenants ? 2 * a->cap_tenants : 64;
		struct agent_tenant *ts = realloc(a->tenants, cap * sizeof(*ts));

		if (!ts)
			return -ENOMEM;
		a->tenants = ts;
		a->cap_tenants = cap;
	}
	a->tenants[a->n_tenants] = *t;
	if (agent_index_put(a, a->n_tenants))
		return -ENOMEM;
	a->n_tenants++;
	return 0;
}

/* The lowest slot no tenant holds and the kernel has not live, or
 * UINT32_MAX. */
static uint32_t free_slot(const struct agent *a)
{
	for (uint32_t s = 0; s < a->kern.max_tenants; s++)
		if (!agent_index_slot_used(a, s) && !kern_slot_live(&a->kern, s))
			return s;
	return UINT32_MAX;
}

int agent_table_put(struct agent *a, const struct agent_tenant *given,
		    char *err)
{
	struct agent_tenant *cur = agent_find(a, given->pol.name), copy = *given, was;
	const struct agent_tenant *t = &copy;
	uint64_t caps = agent_index_caps(a, NULL, NULL) + t->pol.max_conns -
			(cur ? cur->pol.max_conns : 0);

	if (agent_index_conflict(a, &t->pol, err))
		return -EEXIST;
	if (caps > POLICY_CONNS_MAX) {
		snprintf(err, POLICY_ERR_MAX, "tenant '%.63s': max-conns %llu "
			 "brings the caps of all tenants to %llu, more than the "
			 "%d connections one host can count", t->pol.name,
			 (unsigned long long)t->pol.max_conns,
			 (unsigned long long)caps, POLICY_CONNS_MAX);
		return -EINVAL;
	}
	if (cur) {
		size_t i = (size_t)(cur - a->tenants);

		if (cur->slot != t->slot) {
			snprintf(err, POLICY_ERR_MAX, "tenant '%.63s' is in slot "
				 "%u, not %u", t->pol.name, cur->slot, t->slot);
			return -EINVAL;
		}
		if (pfx_store_put(&a->prefixes, &copy.pol)) {
			snprintf(err, POLICY_ERR_MAX, "out of memory");
			return -ENOMEM;
		}
		agent_index_drop(a, i);
		was = *cur;
		*cur = *t;
		if (agent_index_put(a, i)) {
			/* as it was; an index that cannot take it back is
			 * dropped (changes then rebuild the set) */
			*cur = was;
			if (agent_index_put(a, i))
				agent_index_free(a);
			snprintf(err, POLICY_ERR_MAX, "out of memory");
			return -ENOMEM;
		}
		return 0;
	}
	if (t->slot >= a->kern.max_tenants || agent_index_slot_used(a, t->slot) ||
	    a->n_tenants >= a->kern.max_tenants) {
		snprintf(err, POLICY_ERR_MAX, "tenant '%.63s': slot %u is not "
			 "free (at most %u tenants, --max-tenants)", t->pol.name,
			 t->slot, a->kern.max_tenants);
		return -EINVAL;
	}
	if (pfx_store_put(&a->prefixes, &copy.pol) || table_append(a, t)) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return -ENOMEM;
	}
	agent_tomb_forget(a, t->pol.name);
	return 0;
}

int agent_table_del(struct agent *a, const char *name, uint64_t version)
{
	struct agent_tenant *cur = agent_find(a, name);

	if (!cur)
		return -ENOENT;
	if (agent_tomb_add(a, name, version))
		return -ENOMEM;
	table_remove(a, (size_t)(cur - a->tenants));
	return 0;
}

/* After the kernel refused a change made in the tables and the journal:
 * the tables as they were, written whole (the journal's line with them),
 * and the kernel's rules compiled whole for them. */
static void undo(struct agent *a, const struct agent_tenant *was,
		 const struct agent_tenant *now, struct agent_tomb *tombs,
		 size_t n_tombs)
{
	char err[POLICY_ERR_MAX];

	if (now)
		table_remove(a, (size_t)(agent_find(a, now->pol.name) - a->tenants));
	if (was && table_append(a, was))
		log_error("couldn't put tenant '%s' back: out of memory",
			  was->pol.name);
	agent_tombs_take(a, tombs, n_tombs);
	if (now && (!was || was->slot != now->slot))
		kern_tenant_clear(&a->kern, now->slot);
	if (was)
		kern_tenant_configure(&a->kern, was->slot, &was->pol, false);
	a->rules_synced = false;
	if (rules_follow(a, NULL, NULL))
		log_error("couldn't restore the kernel's rules");
	if (agent_save_policy(a, a->tenants, a->n_tenants, a->tombs, a->n_tombs,
			      a->policy_version))
		log_error("couldn't write the state file in '%s'", a->opts.state_dir);
	(void)err;
}

/* A copy of the tombstones, for undo().  NULL when out of memory. */
static struct agent_tomb *tombs_copy(const struct agent *a)
{
	struct agent_tomb *ts = malloc((a->n_tombs + 1) * sizeof(*ts));

	if (ts && a->n_tombs)
		memcpy(ts, a->tombs, a->n_tombs * sizeof(*ts));
	return ts;
}

/*
 * A new tenant, or a change of one tenant's prefixes, ports, direction or
 * cap, in time that does not grow with the set: the indexes find its
 * conflicts, the change is a line of the state file's journal (on disk
 * before the kernel is touched), and the kernel's rules are repainted
 * where its prefixes were and are.  Returns an agent_code, or -1 when the
 * set must be rebuilt instead (no indexes).
 */
static int tenant_put_in_place(struct agent *a, struct agent_tenant *cur,
			       const struct policy_tenant *t, char *err)
{
	struct agent_tenant was = { 0 }, nt = { .pol = *t };
	struct agent_tomb *tombs;
	size_t n_tombs = a->n_tombs;
	int e;

	if (!a->ix)
		return -1;
	if (cur) {
		was = *cur;
		nt.slot = cur->slot;
		nt.version = change_version(a, t->name, cur->version);
		memcpy(nt.samples, cur->samples, sizeof(nt.samples));
		nt.n_samples = cur->n_samples;
	} else {
		const struct agent_tomb *tomb = agent_find_tomb(a, t->name);

		if (a->n_tenants >= a->kern.max_tenants ||
		    (nt.slot = free_slot(a)) == UINT32_MAX) {
			snprintf(err, POLICY_ERR_MAX, "no free tenant slot (at "
				 "most %u tenants, --max-tenants)",
				 a->kern.max_tenants);
			return AGENT_INVALID;
		}
		nt.version = change_version(a, t->name, tomb ? tomb->version : 0);
	}
	if (a->hooks.slots_reserve && a->hooks.slots_reserve(a->hooks.ctx, &nt, 1, err))
		return AGENT_INTERNAL;
	tombs = tombs_copy(a);
	if (!tombs) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	e = agent_table_put(a, &nt, err);
	if (e) {
		free(tombs);
		return e == -EEXIST ? AGENT_CONFLICT :
		       e == -ENOMEM ? AGENT_INTERNAL : AGENT_INVALID;
	}
	cur = agent_find(a, t->name);
	e = agent_journal_tenant(a, cur, a->policy_version + 1);
	if (!e) {
		kern_tenant_configure(&a->kern, nt.slot, &nt.pol, !was.pol.name[0] ||
				      !kern_slot_live(&a->kern, nt.slot));
		if (a->hooks.slot_ready)
			a->hooks.slot_ready(a->hooks.ctx, nt.slot, &nt.pol);
		e = rules_follow(a, was.pol.name[0] ? &was.pol : NULL, &nt.pol);
		if (e) {
			snprintf(err, POLICY_ERR_MAX, "%s", e == -ENOSPC ?
				 a->kern.rules_err : "couldn't update the kernel maps");
			undo(a, was.pol.name[0] ? &was : NULL, &nt, tombs, n_tombs);
			return e == -ENOSPC ? AGENT_INVALID : AGENT_INTERNAL;
		}
	} else {
		snprintf(err, POLICY_ERR_MAX, "couldn't write the state file in "
			 "'%s': %s", a->opts.state_dir, strerror(-e));
		undo(a, was.pol.name[0] ? &was : NULL, &nt, tombs, n_tombs);
		return AGENT_INTERNAL;
	}
	free(tombs);
	changed_one(a, &was, was.pol.name[0] ? 1 : 0, agent_find(a, t->name), 1);
	return AGENT_OK;
}

enum agent_code agent_tenant_set(struct agent *a, const struct policy_tenant *t,
				 char *err)
{
	struct agent_tenant *next, *cur;
	size_t n = a->n_tenants, i;
	uint64_t prev = 0;
	int c;

	if (policy_validate(t, err))
		return AGENT_INVALID;
	cur = agent_find(a, t->name);
	if (cur) {
		c = tenant_set_in_place(a, cur, t, err);
		if (c >= 0)
			return (enum agent_code)c;
	}
	c = tenant_put_in_place(a, cur, t, err);
	if (c >= 0)
		return (enum agent_code)c;
	next = agent_copy_set(a, 1);
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
	return agent_commit(a, next, n, err);
}

/* A deletion in time that does not grow with the set: the journal's line
 * first, then the tenant's prefixes repainted without it, then its slot
 * cleared. */
static enum agent_code tenant_del_in_place(struct agent *a,
					   struct agent_tenant *cur, char *err)
{
	struct agent_tenant was = *cur;
	size_t n_tombs = a->n_tombs;
	struct agent_tomb *tombs = tombs_copy(a);
	uint64_t version = change_version(a, cur->pol.name, cur->version);
	int e;

	if (!tombs || agent_table_del(a, was.pol.name, version)) {
		free(tombs);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	e = agent_journal_del(a, was.pol.name, version, a->policy_version + 1);
	if (e) {
		snprintf(err, POLICY_ERR_MAX, "couldn't write the state file in "
			 "'%s': %s", a->opts.state_dir, strerror(-e));
		undo(a, &was, NULL, tombs, n_tombs);
		return AGENT_INTERNAL;
	}
	e = rules_follow(a, &was.pol, NULL);
	if (e) {
		snprintf(err, POLICY_ERR_MAX, "%s", e == -ENOSPC ?
			 a->kern.rules_err : "couldn't update the kernel maps");
		undo(a, &was, NULL, tombs, n_tombs);
		return e == -ENOSPC ? AGENT_INVALID : AGENT_INTERNAL;
	}
	free(tombs);
	kern_tenant_clear(&a->kern, was.slot);
	changed_one(a, &was, 1, NULL, 0);
	return AGENT_OK;
}

enum agent_code agent_tenant_del(struct agent *a, const char *name, char *err)
{
	struct agent_tenant *next;
	size_t n = 0;

	struct agent_tenant *cur = agent_find(a, name);

	if (!cur) {
		agent_no_tenant(a, name, err);
		return AGENT_NOT_FOUND;
	}
	if (a->ix)
		return tenant_del_in_place(a, cur, err);
	next = agent_copy_set(a, 0);
	if (!next) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (size_t i = 0; i < a->n_tenants; i++)
		if (strcmp(a->tenants[i].pol.name, name) != 0)
			next[n++] = a->tenants[i];
	return agent_commit(a, next, n, err);
}

enum agent_code agent_apply(struct agent *a, const struct policy_tenant *ts,
			    size_t n, unsigned int counts[3], char *err)
{
	struct name_hash was = { 0 };
	struct agent_tenant *next;
	enum agent_code c;
	unsigned int added = 0, updated = 0, kept = 0, removed;

	for (size_t i = 0; i < n; i++) {
		if (policy_validate(&ts[i], err))
			return AGENT_INVALID;
	}
	if (n > a->kern.max_tenants) {
		snprintf(err, POLICY_ERR_MAX, "%zu tenants, at most %u "
			 "(--max-tenants)", n, a->kern.max_tenants);
		return AGENT_INVALID;
	}
	next = calloc(n ? n : 1, sizeof(*next));
	if (!next) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	if (set_names(a, &was)) {
		free(next);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return AGENT_INTERNAL;
	}
	for (size_t i = 0; i < n; i++) {
		size_t pos = set_find(a, &was, ts[i].name);
		const struct agent_tenant *old = pos == SIZE_MAX ? NULL :
						 &a->tenants[pos];

		next[i].pol = ts[i];
		kept += old != NULL;
		if (!old) {
			const struct agent_tomb *tomb = agent_find_tomb(a, ts[i].name);

			added++;
			next[i].version = agent_next_version(a, tomb ? tomb->version : 0);
		} else if (!policy_same(&old->pol, &ts[i])) {
			updated++;
			next[i].version = agent_next_version(a, old->version);
		} else {
			next[i].version = old->version;
		}
	}
	/* the rest of the current set goes (names are unique in a set that
	 * commits) */
	removed = (unsigned int)(a->n_tenants - kept);
	name_hash_free(&was);
	c = agent_commit(a, next, n, err);
	if (c == AGENT_OK) {
		counts[0] = added;
		counts[1] = updated;
		counts[2] = removed;
	}
	return c;
}
