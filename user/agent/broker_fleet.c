// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The fleet's shared state in Redis: the registry of live agents (the
 * heartbeat, its fleet size, agent-id clashes) and the policy store (changes
 * published, read back in batches, applied through the agent). */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "cluster.h"
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
	/* and so does every lease cap: the next check looks at them all */
	b->walk_all = true;
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

/*
 * Publishing.  Changes wait in a queue and go out at most PUBLISH_WINDOW
 * calls at a time: an apply of 100,000 tenants is 100,000 policy_set calls,
 * and sent at once they would hold Redis for a second, past every agent's
 * call timeout (this one's too); a few at a time, the other clients' calls
 * are served between them.  The queue is dropped when a call cannot go
 * (the connection is gone): the sync after the reconnect offers the store
 * whatever it lacks (reseed()).
 */
#define PUBLISH_WINDOW		16

static void publish_pump(struct broker *b);

void broker_publish_drop(struct broker *b)
{
	for (size_t i = b->pub_head; i < b->n_pub; i++)
		free(b->pubq[i].json);
	b->pub_head = b->n_pub = 0;
}

static void on_policy_set(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	redisReply *r = reply;

	(void)ac;
	b->pub_inflight--;
	/* A deletion stored: the index, in another slot, is told after. */
	if (b->cc && c->tomb && broker_int_array(r, 2) &&
	    r->element[0]->integer == 1)
		index_tenant(b, c->name, false);
	if (!broker_int_array(r, 2)) {
		/* Not stored (say, -BUSY): the fleet would never hear of
		 * this change; the next sync offers it again. */
		if (r)
			b->sync_again = true;
		broker_call_failed(b, S_POLICY_SET, r);
	} else {
		breaker_success(b);
	}
	if (broker_int_array(r, 2) && r->element[0]->integer == 0)
		log_debug("policy of '%s': the fleet has a newer version (%lld)",
			  c->name, r->element[1]->integer);
	free(c);
	publish_pump(b);
}

/* Sends p; -ENOTCONN or -ENOMEM. */
static int publish_send(struct broker *b, const struct pub *p)
{
	char key[128], ver[24], ttl[24];
	const char *args[] = { key, "rl:tenants", p->name, ver, p->json ? p->json : "",
			       ttl };
	struct call *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return -ENOMEM;
	snprintf(c->name, sizeof(c->name), "%s", p->name);
	c->tomb = !p->json;
	snprintf(key, sizeof(key), "rl:{t:%s}:policy", p->name);
	snprintf(ver, sizeof(ver), "%llu", (unsigned long long)p->version);
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)p->ttl_ms);
	if (b->cc) {
		/* rl:tenants is in another slot: the index is told of a
		 * policy before it is stored, and of a deletion after
		 * (docs/redis.md). */
		const char *one[] = { key, p->name, ver, args[4], ttl };

		if (p->json)
			index_tenant(b, p->name, true);
		err = broker_eval(b, S_POLICY_SET, 1, one, 5, on_policy_set, c);
	} else {
		err = broker_eval(b, S_POLICY_SET, 2, args, 6, on_policy_set, c);
	}
	if (err)
		free(c);
	else
		b->pub_inflight++;
	return err;
}

static void publish_pump(struct broker *b)
{
	while (b->pub_inflight < PUBLISH_WINDOW && b->pub_head < b->n_pub) {
		struct pub *p = &b->pubq[b->pub_head];

		if (publish_send(b, p)) {
			broker_publish_drop(b);
			return;
		}
		free(p->json);
		b->pub_head++;
	}
	if (b->pub_head == b->n_pub)
		b->pub_head = b->n_pub = 0;
}

/* Stores one tenant's policy (t NULL: a tombstone, kept in Redis for what
 * is left of its time, and not at all once that is over) with its version:
 * queued, and sent in turn. */
static void policy_publish(struct broker *b, const char *name, uint64_t version,
			   const struct policy_tenant *t)
{
	uint64_t left = b->h.tomb_left_ms(b->h.ctx, version);
	struct pub *p;

	if (!t && !left)
		return;
	if (b->n_pub == b->cap_pub) {
		size_t cap = b->cap_pub ? b->cap_pub * 2 : 64;
		void *q;

		/* the sent part of the queue first */
		if (b->pub_head) {
			memmove(b->pubq, b->pubq + b->pub_head,
				(b->n_pub - b->pub_head) * sizeof(*b->pubq));
			b->n_pub -= b->pub_head;
			b->pub_head = 0;
		}
		if (b->n_pub == b->cap_pub) {
			q = realloc(b->pubq, cap * sizeof(*b->pubq));
			if (!q) {
				b->sync_again = true;
				return;
			}
			b->pubq = q;
			b->cap_pub = cap;
		}
	}
	p = &b->pubq[b->n_pub];
	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->version = version;
	/* Ignored for a policy, but it must be valid. */
	p->ttl_ms = left ? left : 1;
	if (t) {
		json_t *j = policy_tenant_to_json(t);

		p->json = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		if (!p->json) {
			b->sync_again = true;
			return;
		}
	}
	b->n_pub++;
	publish_pump(b);
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
 *
 * A batch is read POLICY_GET_KEYS tenants to a policy_get call (on a Redis
 * Cluster, tenants of one slot to a call), at most POLICY_GET_WINDOW calls
 * in flight: a sync of 100,000 tenants is 200 calls of about 2 ms of
 * Redis's time each, between which the other agents' calls are served
 * (Redis takes a client's pipeline 16 KiB, about one such call, at a
 * time), and never a queue that would trip this agent's call timeout.
 * While Redis is busy with the other agents (their refunds when this one
 * joins and so shrinks their lease caps) every round trip waits behind
 * their calls: the names come in SSCAN pages of 2,500 (about as much of
 * Redis's time as a policy_get call; 5,000 cost five times that) and 16
 * calls wait together, 40 + 13 waits for 100,000 tenants.
 */
#define POLICY_BATCH_MS		20
#define POLICY_GET_KEYS		500
#define POLICY_GET_WINDOW	16
#define POLICY_SCAN_COUNT	"2500"	/* rl:tenants names per SSCAN page */

/* The policies a batch read, end to end in blocks of at least JSON_BLOCK
 * bytes, each mapped apart from the heap (main.c) and gone with the batch:
 * a sync's 100,000 are 15 MB that would otherwise be carved from the heap
 * among what the change they make keeps, and left there as holes. */
#define JSON_BLOCK		(256 * 1024)

struct json_block {
	struct json_block *next;
	size_t used, cap;
	char data[];
};

struct read_batch {
	size_t n;
	size_t next;		/* the first tenant not asked for yet */
	size_t left;		/* calls in flight */
	bool lost;		/* the connection went: the next sync reads it all */
	bool sync;		/* a sync: re-seed what the store lacks after */
	struct broker_fleet_update *u;	/* u[i].json in blocks */
	unsigned int *slot;	/* Redis Cluster: u[i]'s hash slot */
	struct json_block *blocks;
};

typedef char name_buf[POLICY_NAME_MAX + 1];

static void policy_read(struct broker *b, bool sync);

static void on_want_timer(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	b->want_timer = NULL;
	policy_read(b, false);
}

/* Appends name to the list *v of *n names (room for *cap); -ENOMEM. */
static int names_add(name_buf **v, size_t *n, size_t *cap, const char *name)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 64;
		void *p = realloc(*v, c * sizeof(**v));

		if (!p)
			return -ENOMEM;
		*v = p;
		*cap = c;
	}
	snprintf((*v)[(*n)++], sizeof(**v), "%s", name);
	return 0;
}

/* Reads name with the next batch. */
static void want_policy(struct broker *b, const char *name)
{
	if (names_add(&b->want, &b->n_want, &b->cap_want, name))
		return;
	if (!b->want_timer && broker_may_start(b) &&
	    loop_timer_add(host_loop(b), POLICY_BATCH_MS, 0, on_want_timer, b,
			   &b->want_timer))
		b->want_timer = NULL;
}

static int name_cmp(const void *x, const void *y)
{
	return strcmp(x, y);
}

static int update_cmp(const void *x, const void *y)
{
	const struct broker_fleet_update *a = x, *b = y;

	return strcmp(a->name, b->name);
}

static bool name_in(name_buf *sorted, size_t n, const char *name)
{
	return n && bsearch(name, sorted, n, sizeof(*sorted), name_cmp);
}

/* The fleet's changes that could not be applied: kept for the next read,
 * sorted.  Logged when one starts to wait (it is normal for a moment,
 * while a rename's second half is on its way; for long, it means two
 * tenants of the store claim the same prefix).  u sorted by name. */
static void set_waiting(struct broker *b, const struct broker_fleet_update *u,
			size_t n, const bool *wait)
{
	size_t k = 0, cap = b->n_waiting + n;
	name_buf *next = calloc(cap ? cap : 1, sizeof(*next));

	if (!next)
		return;
	/* those this batch did not read (another batch's) wait on */
	for (size_t i = 0; i < b->n_waiting; i++) {
		struct broker_fleet_update key;

		memcpy(key.name, b->waiting[i], sizeof(key.name));
		if (!n || !bsearch(&key, u, n, sizeof(*u), update_cmp))
			snprintf(next[k++], sizeof(*next), "%s", b->waiting[i]);
	}
	for (size_t j = 0; j < n; j++) {
		if (!wait[j])
			continue;
		/* read errors (no json) wait silently */
		if (u[j].json && !name_in(b->waiting, b->n_waiting, u[j].name))
			log_info("the fleet's policy of '%s' (version %llu) conflicts "
				 "with this host's other tenants: applied once the "
				 "conflict is gone", u[j].name,
				 (unsigned long long)u[j].version);
		snprintf(next[k++], sizeof(*next), "%s", u[j].name);
	}
	qsort(next, k, sizeof(*next), name_cmp);
	free(b->waiting);
	b->waiting = next;
	b->n_waiting = k;
}

/* A copy of the len bytes at s, NUL-terminated, in rb's blocks; NULL
 * when out of memory. */
static char *batch_copy(struct read_batch *rb, const char *s, size_t len)
{
	struct json_block *k = rb->blocks;
	char *p;

	if (!k || k->cap - k->used < len + 1) {
		size_t cap = len + 1 > JSON_BLOCK ? len + 1 : JSON_BLOCK;

		k = malloc(sizeof(*k) + cap);
		if (!k)
			return NULL;
		k->next = rb->blocks;
		k->used = 0;
		k->cap = cap;
		rb->blocks = k;
	}
	p = k->data + k->used;
	memcpy(p, s, len);
	p[len] = '\0';
	k->used += len + 1;
	return p;
}

static void read_batch_free(struct read_batch *rb)
{
	while (rb->blocks) {
		struct json_block *k = rb->blocks;

		rb->blocks = k->next;
		free(k);
	}
	free(rb->u);
	free(rb->slot);
	free(rb);
}

/* After a sync's read: every local tenant the store has in another version
 * or not at all is offered to it (the store keeps the newest, so this
 * re-seeds a Redis that lost its data, and changes nothing where the store
 * is ahead); what the store had is applied by then, so this is what it
 * lacks, not every tenant.  Deletions made here are offered as they are. */
static void reseed(struct broker *b, const struct read_batch *rb)
{
	size_t n_loc = host_tenant_count(b), n_st = 0;
	struct namediff_item *st = calloc(rb->n + 1, sizeof(*st));
	struct namediff_item *loc = calloc(n_loc + 1, sizeof(*loc));
	struct broker_tenant *t = calloc(n_loc + 1, sizeof(*t));
	bool *changed = calloc(n_loc + 1, sizeof(*changed));
	bool *gone = calloc(rb->n + 1, sizeof(*gone));

	if (st && loc && t && changed && gone) {
		for (size_t i = 0; i < rb->n; i++)
			if (rb->u[i].json && rb->u[i].version)
				st[n_st++] = (struct namediff_item){ rb->u[i].name,
								     rb->u[i].version };
		for (size_t i = 0; i < n_loc; i++) {
			host_tenant_at(b, i, &t[i]);
			loc[i] = (struct namediff_item){ t[i].pol->name, t[i].version };
		}
		if (namediff(st, n_st, loc, n_loc, changed, gone) == 0)
			for (size_t i = 0; i < n_loc; i++)
				if (changed[i])
					policy_publish(b, t[i].pol->name, t[i].version,
						       t[i].pol);
	} else {
		log_warn("couldn't offer this host's tenants to the fleet's store: "
			 "out of memory");
		b->sync_again = true;
	}
	free(st);
	free(loc);
	free(t);
	free(changed);
	free(gone);
	for (size_t i = 0; i < b->h.tomb_count(b->h.ctx); i++) {
		const char *name;
		uint64_t version;

		b->h.tomb_at(b->h.ctx, i, &name, &version);
		policy_publish(b, name, version, NULL);
	}
}

/* A batch of at least this many policies gives the heap back after it. */
#define FLEET_TRIM_TENANTS	10000

/* Every call of the batch answered: applied as one change; then the next
 * batch, of what was announced meanwhile. */
static void batch_done(struct broker *b, struct read_batch *rb)
{
	bool *wait = calloc(rb->n ? rb->n : 1, sizeof(*wait));
	bool sync, trim;

	if (!rb->lost && wait) {
		if (b->cc && rb->n)	/* read in slot order: back in name order */
			qsort(rb->u, rb->n, sizeof(*rb->u), update_cmp);
		b->h.fleet_apply(b->h.ctx, rb->u, rb->n, wait);
		/* Not read (an error reply): read again with the waiting ones. */
		for (size_t i = 0; i < rb->n; i++)
			wait[i] = wait[i] || !rb->u[i].json;
		set_waiting(b, rb->u, rb->n, wait);
		if (rb->sync)
			reseed(b, rb);
	} else if (rb->sync) {
		b->sync_again = !rb->lost;
	}
	free(wait);
	trim = rb->n >= FLEET_TRIM_TENANTS;
	read_batch_free(rb);
	/* the policies of a join or a big apply elsewhere, read, decoded and
	 * gone in small pieces: their pages back to the system */
	if (trim)
		malloc_trim(0);
	b->reading = false;
	sync = b->read_sync;
	if (sync || (b->n_want && !b->want_timer))
		policy_read(b, sync);
}

static void batch_send(struct broker *b, struct read_batch *rb);

static void on_policy_get(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	struct read_batch *rb = c->batch;
	redisReply *r = reply;

	(void)ac;
	if (!r) {
		rb->lost = true;
	} else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 * c->count) {
		broker_call_failed(b, S_POLICY_GET, r);
	} else {
		breaker_success(b);
		for (size_t k = 0; k < c->count; k++) {
			struct broker_fleet_update *u = &rb->u[c->idx + k];
			const redisReply *v = r->element[2 * k], *j = r->element[2 * k + 1];

			/* a pair it cannot read: read again with the next batch */
			if (v->type != REDIS_REPLY_INTEGER || v->integer < 0 ||
			    j->type != REDIS_REPLY_STRING)
				continue;
			u->json = batch_copy(rb, j->str, j->len);
			if (u->json)
				u->version = (uint64_t)v->integer;
		}
	}
	free(c);
	rb->left--;
	batch_send(b, rb);
	if (!rb->left)
		batch_done(b, rb);
}

/* Sends the batch's next calls, up to the window; a call that cannot go
 * loses the batch (the connection is gone, and its return syncs). */
static void batch_send(struct broker *b, struct read_batch *rb)
{
	while (!rb->lost && rb->left < POLICY_GET_WINDOW && rb->next < rb->n) {
		size_t i = rb->next, end = i + 1, m;
		char (*keys)[96];
		const char **args;
		struct call *c;

		while (end < rb->n && end - i < POLICY_GET_KEYS &&
		       (!b->cc || rb->slot[end] == rb->slot[i]))
			end++;
		m = end - i;
		keys = calloc(m, sizeof(*keys));
		args = calloc(m, sizeof(*args));
		c = calloc(1, sizeof(*c));
		if (!keys || !args || !c) {
			free(keys);
			free(args);
			free(c);
			rb->lost = true;
			break;
		}
		for (size_t k = 0; k < m; k++) {
			snprintf(keys[k], sizeof(*keys), "rl:{t:%s}:policy",
				 rb->u[i + k].name);
			args[k] = keys[k];
		}
		c->batch = rb;
		c->idx = i;
		c->count = m;
		if (broker_eval(b, S_POLICY_GET, (int)m, args, (int)m,
				on_policy_get, c)) {
			free(c);
			rb->lost = true;
		} else {
			rb->left++;
		}
		free(keys);
		free(args);
		rb->next = end;
	}
}

static int slot_cmp(const void *x, const void *y, void *arg)
{
	const struct read_batch *rb = arg;
	size_t i = *(const size_t *)x, j = *(const size_t *)y;

	if (rb->slot[i] != rb->slot[j])
		return rb->slot[i] < rb->slot[j] ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* Redis Cluster: the batch in slot order, so that a call takes the tenants
 * of one slot together.  -ENOMEM. */
static int batch_by_slot(struct read_batch *rb)
{
	size_t *ord = calloc(rb->n, sizeof(*ord));
	struct broker_fleet_update *u = calloc(rb->n, sizeof(*u));
	unsigned int *slot = calloc(rb->n, sizeof(*slot));

	if (!ord || !u || !slot || !(rb->slot = calloc(rb->n, sizeof(*rb->slot)))) {
		free(ord);
		free(u);
		free(slot);
		return -ENOMEM;
	}
	for (size_t i = 0; i < rb->n; i++) {
		char tag[POLICY_NAME_MAX + 3];
		int len = snprintf(tag, sizeof(tag), "t:%s", rb->u[i].name);

		rb->slot[i] = cluster_key_slot(tag, (size_t)len);
		ord[i] = i;
	}
	qsort_r(ord, rb->n, sizeof(*ord), slot_cmp, rb);
	for (size_t i = 0; i < rb->n; i++) {
		u[i] = rb->u[ord[i]];
		slot[i] = rb->slot[ord[i]];
	}
	free(rb->u);
	free(rb->slot);
	free(ord);
	rb->u = u;
	rb->slot = slot;
	return 0;
}

/* Reads every wanted tenant, and every waiting one, as one batch (sync:
 * the one after a reconnect, which then re-seeds the store). */
static void policy_read(struct broker *b, bool sync)
{
	struct read_batch *rb;
	size_t n = 0;

	/* One batch at a time: changes announced while one is read (an
	 * apply of 10,000 tenants elsewhere) make one more change here, not
	 * one per POLICY_BATCH_MS. */
	if (b->reading) {
		b->read_sync = b->read_sync || sync;
		return;
	}
	b->read_sync = false;
	for (size_t i = 0; i < b->n_waiting; i++)
		want_policy(b, b->waiting[i]);
	if (b->want_timer) {
		/* armed again by the waiting ones: this read covers them */
		loop_timer_cancel(b->want_timer);
		b->want_timer = NULL;
	}
	if (b->n_want)	/* b->want may be NULL then */
		qsort(b->want, b->n_want, sizeof(*b->want), name_cmp);
	for (size_t i = 0; i < b->n_want; i++)
		if (!n || strcmp(b->want[n - 1], b->want[i]) != 0)
			memmove(b->want[n++], b->want[i], sizeof(*b->want));
	b->n_want = 0;
	rb = calloc(1, sizeof(*rb));
	if (!rb || (n && !(rb->u = calloc(n, sizeof(*rb->u))))) {
		free(rb);
		if (sync)
			b->sync_again = true;
		return;
	}
	rb->n = n;
	rb->sync = sync;
	b->reading = true;
	for (size_t i = 0; i < n; i++)
		memcpy(rb->u[i].name, b->want[i], sizeof(rb->u[i].name));
	/* a sync's or a big apply's names: not kept until the next one */
	if (b->cap_want >= FLEET_TRIM_TENANTS) {
		free(b->want);
		b->want = NULL;
		b->cap_want = 0;
	}
	if (b->cc && n && batch_by_slot(rb)) {
		read_batch_free(rb);
		b->reading = false;
		if (sync)
			b->sync_again = true;
		return;
	}
	batch_send(b, rb);
	if (!rb->left)
		batch_done(b, rb);
}

static void scan_page(struct broker *b, const char *cursor);

struct scan_req {
	struct broker *b;
	uint64_t gen;
};

/* A page of rl:tenants.  Once the cursor is back at 0, the names read, and
 * this host's own tenants too (one deleted by the fleet while this agent
 * was away is no longer in the index), are read as one batch. */
static void on_scan(redisAsyncContext *ac, void *reply, void *priv)
{
	struct scan_req *q = priv;
	struct broker *b = q->b;
	uint64_t gen = q->gen;
	redisReply *r = reply, *names;

	(void)ac;
	free(q);
	if (gen != b->sync_gen)
		return;		/* a newer sync reads it all */
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_ARRAY) {
		/* No reply: the connection went, and the next one syncs. */
		if (r)
			b->sync_again = true;
		broker_call_failed(b, S_POLICY_GET, r);
		return;
	}
	names = r->element[1];
	for (size_t i = 0; i < names->elements; i++) {
		char name[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX];

		if (names->element[i]->type != REDIS_REPLY_STRING ||
		    policy_parse_name(names->element[i]->str, name, err))
			continue;
		if (names_add(&b->scan, &b->n_scan, &b->cap_scan, name)) {
			b->sync_again = true;
			return;
		}
	}
	if (strcmp(r->element[0]->str, "0") != 0) {
		scan_page(b, r->element[0]->str);
		return;
	}
	for (size_t i = 0; i < b->n_scan; i++)
		want_policy(b, b->scan[i]);
	/* only a sync's: not kept (64 bytes a tenant of the store) */
	free(b->scan);
	b->scan = NULL;
	b->n_scan = b->cap_scan = 0;
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;

		host_tenant_at(b, i, &t);
		want_policy(b, t.pol->name);
	}
	policy_read(b, true);
}

static void scan_page(struct broker *b, const char *cursor)
{
	const char *argv[] = { "SSCAN", "rl:tenants", cursor, "COUNT",
			       POLICY_SCAN_COUNT };
	struct scan_req *q = calloc(1, sizeof(*q));

	if (!q) {
		b->sync_again = true;
		return;
	}
	q->b = b;
	q->gen = b->sync_gen;
	/* not sent: the connection is gone, and its return syncs */
	if (broker_command(b, "rl:tenants", 5, argv, on_scan, q))
		free(q);
}

/*
 * After (re)connecting: read every tenant the fleet has - the index
 * rl:tenants a page at a time (SSCAN), then the policies in batches - and
 * apply them as one change; then offer the store what it lacks of this
 * host's tenants (reseed()).  A store of N tenants costs N/2500 SSCAN
 * pages and N/500 policy_get calls (docs/redis.md).
 */
void broker_policy_sync(struct broker *b)
{
	b->sync_again = false;
	b->sync_gen++;
	b->n_scan = 0;
	scan_page(b, "0");
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
			broker_conn_answered(&b->sub);
			b->sub.backoff_ms = BACKOFF_MIN_MS;
			b->subscribed = true;
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
