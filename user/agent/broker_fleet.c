// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The fleet's shared state in Redis: the registry of live agents (the
 * heartbeat, its fleet size, agent-id clashes) and the policy store (changes
 * published, read back in batches, applied through the agent). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "log.h"
#include "namediff.h"

/* --- registry ------------------------------------------------------------------ */

/*
 * The registry's count of live agents.  A larger count is taken at once (the
 * static share and the lease cap only shrink); a smaller one only once it has
 * held for the registry's TTL: a Redis restarted empty counts 1, 2, 3 as the
 * agents' heartbeats come in, and the shares must not jump to the whole limit
 * meanwhile.
 */
static void set_live_agents(struct broker *b, uint64_t n)
{
	n = circuit_live_agents(b->live_agents, n, loop_now_ns(),
				REGISTRY_TTL_MS * 1000000ULL, &b->live_low_since_ns);
	if (n == b->live_agents)
		return;
	log_info("live agents: %llu", (unsigned long long)n);
	b->live_agents = n;
	/* The static fail share follows the fleet's size, and a restarted
	 * agent finds it in the kernel. */
	b->h.fleet_agents(b->h.ctx, n);
}

/*
 * Two agents with one --agent-id (two hosts with the same host name).  The
 * registry counts running agents by id and nonce, so both are counted; but
 * an operator reading the registry, logs or metrics by id would take them
 * for one, so it is reported loudly for as long as it lasts: each heartbeat
 * after the first on a connection that finds another nonce under our id
 * means another agent heartbeated with it in between.
 */
static void id_clash_seen(struct broker *b, const char *other)
{
	b->id_clash_seen_ns = loop_now_ns();
	if (b->id_clash)
		return;
	b->id_clash = true;
	b->id_clashes++;
	log_warn("another agent runs with agent id '%s' (instance %.16s; this "
		 "one is %s): the registry counts both, but give each host its "
		 "own --agent-id", b->agent_id, other, b->nonce);
}

static void id_clash_check(struct broker *b)
{
	if (b->id_clash && loop_now_ns() - b->id_clash_seen_ns > ID_CLASH_CLEAR_NS) {
		b->id_clash = false;
		log_info("no other agent has run with agent id '%s' for %llu s",
			 b->agent_id, ID_CLASH_CLEAR_NS / 1000000000ULL);
	}
}

static void on_heartbeat(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	redisReply *r = reply;

	(void)ac;
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_INTEGER &&
	    r->element[0]->integer > 0 &&
	    r->element[1]->type == REDIS_REPLY_STRING) {
		set_live_agents(b, (uint64_t)r->element[0]->integer);
		/* On the first, another nonce is this host's previous agent. */
		if (r->element[1]->len && !c->n)
			id_clash_seen(b, r->element[1]->str);
		if (c->n)
			b->hb_first = false;
		id_clash_check(b);
		breaker_success(b);
	} else {
		broker_call_failed(b, S_HEARTBEAT, r);
	}
	free(c);
}

void broker_heartbeat(struct broker *b)
{
	char ttl[24];
	const char *args[] = { b->reg_agents, b->reg_ids, b->agent_id, ttl,
			       b->nonce, b->hb_first ? "1" : "0" };
	struct call *c = calloc(1, sizeof(*c));

	if (!c)
		return;
	c->n = b->hb_first;
	snprintf(ttl, sizeof(ttl), "%d", REGISTRY_TTL_MS);
	if (broker_eval(b, S_HEARTBEAT, 2, args, 6, on_heartbeat, c))
		free(c);
}

static void want_policy(struct broker *b, const char *name);

void broker_on_heartbeat_timer(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	broker_heartbeat(b);
	if (b->cc)
		broker_cluster_probe(b);
	/* A failover the connections have not noticed (the old master
	 * still up, as a replica): the sentinels say so. */
	broker_sentinel_ask(b, false);
	/* The fleet's changes that wait for a conflict to go: read again. */
	if (b->n_waiting && !b->want_timer)
		want_policy(b, b->waiting[0]);
	/* A sync that failed half-way (an error reply, not a lost
	 * connection): again, once Redis is healthy. */
	if (b->sync_again && broker_leasing(b) && b->sub.state == C_UP) {
		b->sync_again = false;
		broker_policy_sync(b);
	}
}

/* --- policy store -------------------------------------------------------------- */

/* The index's answers: nothing to do but count a failure. */
static void on_index(redisAsyncContext *ac, void *reply, void *priv)
{
	struct broker *b = priv;
	redisReply *r = reply;

	(void)ac;
	if (r && r->type == REDIS_REPLY_ERROR) {
		b->redis_errors++;
		log_warn("couldn't update rl:tenants: %.200s", r->str);
	}
}

/* Names a tenant in rl:tenants (add) or not.  On a Redis Cluster only:
 * a single Redis's policy_set does it in the same script. */
static void index_tenant(struct broker *b, const char *name, bool add)
{
	const char *argv[] = { add ? "SADD" : "SREM", "rl:tenants", name };

	broker_command(b, "rl:tenants", 3, argv, on_index, b);
}

static void on_policy_set(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	redisReply *r = reply;

	(void)ac;
	/* A deletion stored: the index, in another slot, is told after. */
	if (c->b->cc && c->tomb && broker_int_array(r, 2) &&
	    r->element[0]->integer == 1)
		index_tenant(c->b, c->name, false);
	if (!broker_int_array(r, 2)) {
		/* Not stored (say, -BUSY): the fleet would never hear of
		 * this change; the next sync offers it again. */
		if (r)
			c->b->sync_again = true;
		broker_call_failed(c->b, S_POLICY_SET, r);
	} else {
		breaker_success(c->b);
	}
	if (broker_int_array(r, 2) && r->element[0]->integer == 0)
		log_debug("policy of '%s': the fleet has a newer version (%lld)",
			  c->name, r->element[1]->integer);
	free(c);
}

/* Stores one tenant's policy (t NULL: a tombstone, kept in Redis for what
 * is left of its time, and not at all once that is over) with its version. */
static void policy_publish(struct broker *b, const char *name, uint64_t version,
			   const struct policy_tenant *t)
{
	char key[128], ver[24], ttl[24], *json = NULL;
	const char *args[] = { key, "rl:tenants", name, ver, "", ttl };
	uint64_t left = b->h.tomb_left_ms(b->h.ctx, version);
	struct call *c;

	if (!t && !left)
		return;
	/* Ignored for a policy, but it must be valid. */
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)(left ? left : 1));
	if (t) {
		json_t *j = policy_tenant_to_json(t);

		json = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		if (!json)
			return;
		args[4] = json;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		free(json);
		return;
	}
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->tomb = !t;
	snprintf(key, sizeof(key), "rl:{t:%s}:policy", name);
	snprintf(ver, sizeof(ver), "%llu", (unsigned long long)version);
	if (b->cc) {
		/* rl:tenants is in another slot: the index is told of a
		 * policy before it is stored, and of a deletion after
		 * (docs/redis.md). */
		const char *one[] = { key, name, ver, args[4], ttl };

		if (t)
			index_tenant(b, name, true);
		if (broker_eval(b, S_POLICY_SET, 1, one, 5, on_policy_set, c))
			free(c);
	} else if (broker_eval(b, S_POLICY_SET, 2, args, 6, on_policy_set, c)) {
		free(c);
	}
	free(json);
}

/* Names are matched through namediff (sorted once), not old against new
 * one by one: at 100,000 tenants that would be 10^10 compares. */
void broker_policy_changed(struct broker *b, const struct broker_tenant *old,
			   size_t n_old, const struct broker_tenant *now,
			   size_t n_now)
{
	struct namediff_item *io, *in;
	bool *changed, *gone;
	int err = -ENOMEM;

	if (!b)
		return;
	io = calloc(n_old + 1, sizeof(*io));
	in = calloc(n_now + 1, sizeof(*in));
	changed = calloc(n_now + 1, sizeof(*changed));
	gone = calloc(n_old + 1, sizeof(*gone));
	if (io && in && changed && gone) {
		for (size_t j = 0; j < n_old; j++)
			io[j] = (struct namediff_item){ old[j].pol->name,
							old[j].version };
		for (size_t i = 0; i < n_now; i++)
			in[i] = (struct namediff_item){ now[i].pol->name,
							now[i].version };
		err = namediff(io, n_old, in, n_now, changed, gone);
	}
	if (err) {
		log_warn("couldn't publish a policy change to the fleet's "
			 "store: out of memory");
		n_now = n_old = 0;
	}
	for (size_t i = 0; i < n_now; i++)
		if (changed[i])
			policy_publish(b, now[i].pol->name, now[i].version, now[i].pol);
	for (size_t j = 0; j < n_old; j++) {
		uint64_t version;

		if (!gone[j])
			continue;
		if (!b->h.tomb_find(b->h.ctx, old[j].pol->name, &version))
			version = b->h.next_version(b->h.ctx, old[j].version);
		policy_publish(b, old[j].pol->name, version, NULL);
	}
	free(io);
	free(in);
	free(changed);
	free(gone);
}

/*
 * Reading the store.  Tenants announced together (one `rlctl apply` that
 * renames a tenant publishes the new name and the old one's tombstone), or
 * all of them after a reconnect, are read as one batch and applied as one
 * change: applied one at a time, the new tenant would conflict with the old
 * one that still holds its prefix and be refused, and the old one's
 * deletion would then leave the host with neither.  A change that cannot
 * be applied yet waits, and is read again with every batch and every
 * second until it goes in (or the store has moved on).
 */
#define POLICY_BATCH_MS		20

struct read_batch {
	size_t n, left;
	bool lost;		/* the connection went: the next sync reads it all */
	struct broker_fleet_update *u;
};

static void policy_read(struct broker *b);

static void on_want_timer(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	b->want_timer = NULL;
	policy_read(b);
}

/* Reads name with the next batch. */
static void want_policy(struct broker *b, const char *name)
{
	if (b->n_want == b->cap_want) {
		size_t cap = b->cap_want ? b->cap_want * 2 : 64;
		void *p = realloc(b->want, cap * sizeof(*b->want));

		if (!p)
			return;
		b->want = p;
		b->cap_want = cap;
	}
	snprintf(b->want[b->n_want++], sizeof(*b->want), "%s", name);
	if (!b->want_timer &&
	    loop_timer_add(host_loop(b), POLICY_BATCH_MS, 0, on_want_timer, b,
			   &b->want_timer))
		b->want_timer = NULL;
}

static bool name_in(char (*names)[POLICY_NAME_MAX + 1], size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* The fleet's changes that could not be applied: kept for the next read.
 * Logged when one starts to wait (it is normal for a moment, while a
 * rename's second half is on its way; for long, it means two tenants of the
 * store claim the same prefix). */
static void set_waiting(struct broker *b, const struct broker_fleet_update *u,
			size_t n, const bool *wait)
{
	size_t k = 0, cap = b->n_waiting + n;
	char (*next)[POLICY_NAME_MAX + 1] = calloc(cap ? cap : 1, sizeof(*next));

	if (!next)
		return;
	for (size_t i = 0; i < b->n_waiting; i++) {
		bool read = false;

		for (size_t j = 0; j < n && !read; j++)
			read = strcmp(u[j].name, b->waiting[i]) == 0;
		if (!read)
			snprintf(next[k++], sizeof(*next), "%s", b->waiting[i]);
	}
	for (size_t j = 0; j < n; j++) {
		if (!wait[j] || name_in(next, k, u[j].name))
			continue;
		/* read errors (no json) wait silently */
		if (u[j].json && !name_in(b->waiting, b->n_waiting, u[j].name))
			log_info("the fleet's policy of '%s' (version %llu) conflicts "
				 "with this host's other tenants: applied once the "
				 "conflict is gone", u[j].name,
				 (unsigned long long)u[j].version);
		snprintf(next[k++], sizeof(*next), "%s", u[j].name);
	}
	free(b->waiting);
	b->waiting = next;
	b->n_waiting = k;
}

static void read_batch_free(struct read_batch *rb)
{
	for (size_t i = 0; i < rb->n; i++)
		free(rb->u[i].json);
	free(rb->u);
	free(rb);
}

static void on_policy_get(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	struct read_batch *rb = c->batch;
	struct broker_fleet_update *u = &rb->u[c->idx];
	redisReply *r = reply;
	bool *wait;

	(void)ac;
	if (!r) {
		rb->lost = true;
	} else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		   r->element[0]->type != REDIS_REPLY_INTEGER ||
		   r->element[0]->integer < 0 ||
		   r->element[1]->type != REDIS_REPLY_STRING) {
		broker_call_failed(b, S_POLICY_GET, r);
	} else {
		breaker_success(b);
		u->json = strdup(r->element[1]->str);
		if (u->json)
			u->version = (uint64_t)r->element[0]->integer;
	}
	free(c);
	if (--rb->left)
		return;
	wait = calloc(rb->n ? rb->n : 1, sizeof(*wait));
	if (!rb->lost && wait) {
		b->h.fleet_apply(b->h.ctx, rb->u, rb->n, wait);
		/* Not read (an error reply): read again with the waiting ones. */
		for (size_t i = 0; i < rb->n; i++)
			wait[i] = wait[i] || !rb->u[i].json;
		set_waiting(b, rb->u, rb->n, wait);
	}
	free(wait);
	read_batch_free(rb);
}

static int name_cmp(const void *x, const void *y)
{
	return strcmp(x, y);
}

/* Reads every wanted tenant, and every waiting one, as one batch. */
static void policy_read(struct broker *b)
{
	struct read_batch *rb;
	size_t n = 0;

	for (size_t i = 0; i < b->n_waiting; i++)
		want_policy(b, b->waiting[i]);
	if (b->want_timer) {
		/* armed again by the waiting ones: this read covers them */
		loop_timer_cancel(b->want_timer);
		b->want_timer = NULL;
	}
	qsort(b->want, b->n_want, sizeof(*b->want), name_cmp);
	for (size_t i = 0; i < b->n_want; i++)
		if (!n || strcmp(b->want[n - 1], b->want[i]) != 0)
			memmove(b->want[n++], b->want[i], sizeof(*b->want));
	b->n_want = 0;
	rb = calloc(1, sizeof(*rb));
	if (!rb || !n || !(rb->u = calloc(n, sizeof(*rb->u)))) {
		free(rb);
		return;
	}
	rb->n = n;
	rb->left = 1;		/* held until every call is out */
	for (size_t i = 0; i < n; i++) {
		char key[128];
		const char *args[] = { key };
		struct call *c = calloc(1, sizeof(*c));

		snprintf(rb->u[i].name, sizeof(rb->u[i].name), "%s", b->want[i]);
		if (!c)
			continue;
		snprintf(c->name, sizeof(c->name), "%s", b->want[i]);
		c->batch = rb;
		c->idx = i;
		snprintf(key, sizeof(key), "rl:{t:%s}:policy", b->want[i]);
		if (broker_eval(b, S_POLICY_GET, 1, args, 1, on_policy_get, c)) {
			free(c);
			rb->lost = true;
			continue;
		}
		rb->left++;
	}
	if (--rb->left == 0)
		read_batch_free(rb);
}

static void on_members(redisAsyncContext *ac, void *reply, void *priv)
{
	struct broker *b = priv;
	redisReply *r = reply;

	(void)ac;
	if (!r || r->type != REDIS_REPLY_ARRAY) {
		/* No reply: the connection went, and the next one syncs. */
		if (r)
			b->sync_again = true;
		broker_call_failed(b, S_POLICY_GET, r);
		return;
	}
	for (size_t i = 0; i < r->elements; i++) {
		char name[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX];

		if (r->element[i]->type != REDIS_REPLY_STRING ||
		    policy_parse_name(r->element[i]->str, name, err))
			continue;
		want_policy(b, name);
	}
	/* This host's own tenants too: one deleted by the fleet while this
	 * agent was away is no longer in the index. */
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;

		host_tenant_at(b, i, &t);
		want_policy(b, t.pol->name);
	}
}

/* After (re)connecting: offer every local tenant (the store keeps the newest
 * version, so this re-seeds a Redis that lost its data and changes nothing
 * otherwise), then read every tenant the fleet has. */
void broker_policy_sync(struct broker *b)
{
	b->sync_again = false;
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;

		host_tenant_at(b, i, &t);
		policy_publish(b, t.pol->name, t.version, t.pol);
	}
	for (size_t i = 0; i < b->h.tomb_count(b->h.ctx); i++) {
		const char *name;
		uint64_t version;

		b->h.tomb_at(b->h.ctx, i, &name, &version);
		policy_publish(b, name, version, NULL);
	}
	{
		const char *argv[] = { "SMEMBERS", "rl:tenants" };

		broker_command(b, "rl:tenants", 2, argv, on_members, b);
	}
}

void broker_on_message(redisAsyncContext *ac, void *reply, void *priv)
{
	struct broker *b = priv;
	redisReply *r = reply;
	char name[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX];

	(void)ac;
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING)
		return;
	if (strcmp(r->element[0]->str, "message") != 0) {
		/* the subscribe confirmation: catch up on what we missed */
		if (strcmp(r->element[0]->str, "subscribe") == 0) {
			b->sub.backoff_ms = BACKOFF_MIN_MS;
			if (broker_store_ready(b))
				broker_policy_sync(b);
		}
		return;
	}
	if (r->element[2]->type != REDIS_REPLY_STRING ||
	    policy_parse_name(r->element[2]->str, name, err))
		return;
	want_policy(b, name);
}
