// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fleet mode's lease broker.  The kernel spends leased tokens; this module
 * fetches the next lease while the last one is still being spent (low-water
 * events and a 50 ms check), sizes leases from the host's own traffic within
 * the tenant's overshoot budget, gives back tokens that sat idle, and keeps
 * the registry of live agents and the policy store.  Everything runs on the
 * agent's loop: no connection ever waits for Redis.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "broker_int.h"
#include "lease.h"
#include "log.h"

const char *const broker_script_names[S_COUNT] = {
	[S_LEASE] = "lease", [S_REFUND] = "refund",
	[S_HEARTBEAT] = "heartbeat", [S_DEREGISTER] = "deregister",
	[S_POLICY_SET] = "policy_set", [S_POLICY_GET] = "policy_get",
	[S_SLOTS] = "slots",
};

const double broker_lease_bounds[BROKER_LEASE_BUCKETS] = {
	0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
	__builtin_inf(),
};

/* --- addresses and options ------------------------------------------------ */

int broker_parse_address(const char *s, char *host, size_t host_len, int *port,
			 char *path, size_t path_len)
{
	const char *colon;
	char *end;
	long p;

	host[0] = path[0] = '\0';
	*port = 0;
	if (strncmp(s, "cluster:", 8) == 0) {
		char err[160];

		return cc_parse_seeds(s + 8, err, sizeof(err)) ? -EINVAL : 0;
	}
	if (strncmp(s, "sentinel:", 9) == 0) {
		char err[160], name[SENTINEL_NAME_MAX + 1];

		return broker_sentinel_parse(s + 9, name, sizeof(name), err,
					     sizeof(err)) ? -EINVAL : 0;
	}
	if (strncmp(s, "unix:", 5) == 0) {
		if (s[5] != '/' || strlen(s + 5) >= path_len)
			return -EINVAL;
		strcpy(path, s + 5);
		return 0;
	}
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':' || (size_t)(close - s - 1) >= host_len ||
		    close == s + 1)
			return -EINVAL;
		memcpy(host, s + 1, close - s - 1);
		host[close - s - 1] = '\0';
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || colon == s || (size_t)(colon - s) >= host_len ||
		    memchr(s, ':', colon - s))
			return -EINVAL;
		memcpy(host, s, colon - s);
		host[colon - s] = '\0';
	}
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || p < 1 || p > 65535)
		return -EINVAL;
	*port = (int)p;
	return 0;
}

int broker_read_password(const char *file, char **out)
{
	char buf[1024];
	FILE *f = fopen(file, "r");
	size_t n;

	if (!f) {
		int err = -errno;

		log_error("couldn't open Redis password file on '%s': %s", file,
			  strerror(-err));
		return err;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (!buf[0]) {
		log_error("couldn't use Redis password file on '%s': it is empty",
			  file);
		return -EINVAL;
	}
	*out = strdup(buf);
	return *out ? 0 : -ENOMEM;
}

/* --- life cycle ------------------------------------------------------------------ */

int broker_open(const struct broker_host *h, const struct broker_opts *o,
		struct broker **out)
{
	struct broker *b;
	int err;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->slots = calloc(h->max_slots, sizeof(*b->slots));
	/* mapped on its own: untouched pages cost nothing */
	b->rare = calloc(h->max_slots, sizeof(*b->rare));
	if (!b->slots || !b->rare || wake_init(&b->wake, h->max_slots)) {
		free(b->slots);
		free(b->rare);
		free(b);
		return -ENOMEM;
	}
	b->h = *h;
	b->o = *o;
	srand((unsigned int)(getpid() ^ time(NULL)));
	for (uint32_t i = 0; i < h->max_slots; i++) {
		b->slots[i].b = b;
		b->slots[i].idx = i;
	}
	if (!b->o.lease_ttl_ms)
		b->o.lease_ttl_ms = 1000;
	err = broker_parse_address(o->redis, b->host, sizeof(b->host), &b->port,
				   b->path, sizeof(b->path));
	if (err)
		goto fail;
	snprintf(b->address, sizeof(b->address), "%s", o->redis);
	if (o->password_file) {
		err = broker_read_password(o->password_file, &b->password);
		if (err)
			goto fail;
	}
	if (o->tls) {
		struct redis_tls_opts to = {
			.ca = o->tls_ca, .cert = o->tls_cert, .key = o->tls_key,
			.server_name = o->tls_server_name,
		};

		if (b->path[0]) {
			log_error("--redis-tls needs a TCP address, not '%s'",
				  o->redis);
			err = -EINVAL;
			goto fail;
		}
		err = redis_tls_new(&to, &b->tls);
		if (err)
			goto fail;
	}
	if (o->agent_id) {
		snprintf(b->agent_id, sizeof(b->agent_id), "%s", o->agent_id);
	} else if (gethostname(b->agent_id, sizeof(b->agent_id) - 1) < 0) {
		snprintf(b->agent_id, sizeof(b->agent_id), "rlagent-%d", getpid());
	}
	{
		uint8_t rnd[8];

		/* Only needs to differ between agents; time and PID if the
		 * kernel's pool cannot say. */
		if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd)) {
			uint64_t x = loop_now_ns() ^ ((uint64_t)getpid() << 32);

			memcpy(rnd, &x, sizeof(rnd));
		}
		for (int i = 0; i < 8; i++)
			snprintf(b->nonce + 2 * i, 3, "%02x", rnd[i]);
	}
	if (!b->o.timeout_ms)
		b->o.timeout_ms = 50;
	if (!b->o.stale_ms)
		b->o.stale_ms = 2000;
	/* The fleet size for static shares until the registry answers: what
	 * the operator said, else what the previous agent knew, else 1. */
	b->live_agents = b->o.expected_agents ? b->o.expected_agents :
			 h->fleet_agents(h->ctx, 0) ? h->fleet_agents(h->ctx, 0) : 1;
	h->fleet_agents(h->ctx, b->live_agents);
	/* Degraded until Redis has answered once, a spell like any other:
	 * tenants the kernel holds nothing for start on credit, then the
	 * fail policies decide, not an empty leased bucket. */
	circuit_init(&b->circ);
	b->open_since_ns = loop_now_ns();
	b->degraded_since = time(NULL);
	snprintf(b->reason, sizeof(b->reason), "not connected to Redis yet");
	host_fleet_state(b, loop_now_ns(), true);
	{
		char why[POLICY_ERR_MAX];

		err = broker_names_reserve_all(b, why);
		if (err) {
			log_error("%s", why);
			goto fail;
		}
	}
	broker_tenants_changed(b);
	b->cmd = (struct conn){ .b = b, .backoff_ms = BACKOFF_MIN_MS, .name = "command" };
	b->load_backoff_ms = BACKOFF_MIN_MS;
	b->sub = (struct conn){ .b = b, .backoff_ms = BACKOFF_MIN_MS, .name = "policy",
				.subscriber = true };
	b->reg_agents = "rl:agents";
	b->reg_ids = "rl:agent_ids";
	b->reply_node = -1;
	if (strncmp(o->redis, "cluster:", 8) == 0) {
		/* The registry's two keys in one slot (docs/redis.md); the
		 * tenants' shards say who is degraded, not the fleet. */
		b->reg_agents = "rl:{registry}:agents";
		b->reg_ids = "rl:{registry}:agent_ids";
		b->hb_first = true;
		err = broker_cluster_open(b);
		if (err)
			goto fail;
		host_fleet_state(b, loop_now_ns(), false);
		broker_shards_update(b, loop_now_ns());
	} else if (strncmp(o->redis, "sentinel:", 9) == 0) {
		/* The master's address comes from the sentinels. */
		err = broker_sentinel_open(b, o->redis + 9);
		if (err)
			goto fail;
		broker_sentinel_ask(b, false);
	}
	err = loop_timer_add(h->loop, CHECK_MS, CHECK_MS, broker_on_check, b, &b->check);
	if (!err)
		err = loop_timer_add(h->loop, HEARTBEAT_MS, HEARTBEAT_MS,
				     broker_on_heartbeat_timer, b, &b->heartbeat);
	if (err)
		goto fail;
	if (!b->cc)
		broker_conn_start(&b->cmd);
	broker_conn_start(&b->sub);
	log_info("fleet mode: agent '%s' (instance %s), Redis on '%s', lease TTL "
		 "%llu ms", b->agent_id, b->nonce, b->address,
		 (unsigned long long)b->o.lease_ttl_ms);
	*out = b;
	return 0;
fail:
	if (b->check)
		loop_timer_cancel(b->check);
	cc_close(b->cc);
	free(b->shards);
	broker_sentinel_close(b);
	redis_tls_put(b->tls);
	free(b->password);
	free(b->slots);
	free(b->rare);
	name_pool_free(&b->names);
	free(b->debt_moved);
	wake_free(&b->wake);
	free(b);
	return err;
}

/* Frees c's connection.  redisAsyncFree() calls back every call in flight
 * with no reply before it returns: c is down (and its context gone from it)
 * first, so that no callback sends on the context being freed. */
static void conn_close(struct conn *c)
{
	redisAsyncContext *ac = c->ac;

	if (c->retry)
		loop_timer_cancel(c->retry);
	c->retry = NULL;
	c->state = C_DOWN;
	c->ac = NULL;
	if (ac) {
		ac->data = c;
		/* Not redisAsyncSetDisconnectCallback(): hiredis only sets a
		 * callback where none is set.  Going away is not an outage. */
		ac->onDisconnect = NULL;
		redisAsyncFree(ac);
	}
}

/* Frees b and everything it holds.  The calls still in flight are called
 * back with no reply while the connections go; from the first line on
 * (closing) none of those callbacks starts a call, a connection or a
 * timer, and each still finds b, its slots and its queues in place: they
 * are freed only once every connection is. */
void broker_close(struct broker *b)
{
	if (!b)
		return;
	b->closing = true;
	b->done = NULL;
	if (b->deadline)
		loop_timer_cancel(b->deadline);
	if (b->check)
		loop_timer_cancel(b->check);
	if (b->heartbeat)
		loop_timer_cancel(b->heartbeat);
	if (b->load_retry)
		loop_timer_cancel(b->load_retry);
	if (b->want_timer)
		loop_timer_cancel(b->want_timer);
	for (uint32_t i = 0; i < b->h.max_slots; i++) {
		if (b->slots[i].wait_timer)
			loop_timer_cancel(b->slots[i].wait_timer);
		broker_slot_free(&b->slots[i]);
	}
	b->pending = 0;
	conn_close(&b->sub);
	conn_close(&b->cmd);
	/* Calls in flight get no reply: their callbacks still see b. */
	cc_close(b->cc);
	free(b->shards);
	broker_sentinel_close(b);
	free(b->want);
	free(b->scan);
	broker_publish_drop(b);
	free(b->pubq);
	free(b->waiting);
	/* every hiredis context is freed: relays left are the loop's no more */
	redis_tls_close(b->tls);
	free(b->password);
	free(b->slots);
	free(b->rare);
	name_pool_free(&b->names);
	free(b->debt_moved);
	wake_free(&b->wake);
	free(b);
}

static void on_deadline(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	b->deadline = NULL;
	if (b->done) {
		void (*done)(void *) = b->done;

		log_warn("Redis on '%s' did not confirm every refund within %d ms",
			 b->address, SHUTDOWN_MS);
		b->done = NULL;
		done(b->done_arg);
	}
}

static void on_deregister(redisAsyncContext *ac, void *reply, void *priv)
{
	broker_on_refund(ac, reply, priv);
}

static void on_repaid(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;

	(void)ac;
	if (!broker_int_array(reply, 3))
		broker_call_failed(b, S_LEASE, reply);
	if (b->done && b->pending && --b->pending == 0) {
		void (*done)(void *) = b->done;

		b->done = NULL;
		done(b->done_arg);
	}
	free(c);
}

/* At shutdown: takes what t still owes from its global bucket (and drops
 * it), so that a stopped agent leaves no debt behind.  0 if under way. */
static int repay(struct broker *b, const struct broker_tenant *t)
{
	struct slot *s = &b->slots[t->slot];
	struct bucket_args ba;
	char want[24];
	const char *args[] = { ba.key, ba.count, ba.period, ba.burst, want, "1" };
	struct call *c;

	if (!s->debt || strcmp(broker_slot_name(s), t->pol->name) != 0)
		return -ENOENT;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->slot = t->slot;
	c->n = s->debt;
	broker_home_args(b, t->pol, &ba);
	snprintf(want, sizeof(want), "%llu", (unsigned long long)s->debt);
	if (broker_eval(b, S_LEASE, 1, args, 6, on_repaid, c)) {
		free(c);
		return -ENOTCONN;
	}
	s->st.redis_calls++;
	return 0;
}

void broker_shutdown(struct broker *b, void (*done)(void *arg), void *arg)
{
	uint64_t total = 0;

	b->done = done;
	b->done_arg = arg;
	b->pending = 0;
	/* From here on the kernel runs on the fail policies: the tokens go
	 * back to Redis, and the next agent may take a while. */
	host_fleet_state(b, loop_now_ns(), true);
	if (!b->cc && (b->cmd.state != C_UP || !b->scripts_ok)) {
		log_warn("Redis on '%s' is out of reach: leased tokens are not "
			 "refunded (they return when their bucket refills)", b->address);
		b->done = NULL;
		done(arg);
		return;
	}
	for (size_t i = 0; i < host_tenant_count(b); i++) {
		struct broker_tenant t;
		uint64_t before;

		host_tenant_at(b, i, &t);
		before = b->slots[t.slot].st.tokens_refunded;
		if (broker_refund(b, &t, 0) == 0) {
			b->pending++;
			total += b->slots[t.slot].st.tokens_refunded - before;
		}
		if (repay(b, &t) == 0)
			b->pending++;
	}
	{
		const char *args[] = { b->reg_agents, b->reg_ids, b->agent_id,
				       b->nonce };
		struct call *c = calloc(1, sizeof(*c));

		if (c && broker_eval(b, S_DEREGISTER, 2, args, 4, on_deregister, c) == 0)
			b->pending++;
		else
			free(c);
	}
	log_info("refunding %llu leased token(s) to Redis on '%s'",
		 (unsigned long long)total, b->address);
	if (!b->pending) {
		b->done = NULL;
		done(arg);
		return;
	}
	loop_timer_add(host_loop(b), SHUTDOWN_MS, 0, on_deadline, b, &b->deadline);
}

/* --- stats ------------------------------------------------------------------------- */

void broker_tenant_stats(const struct broker *b, uint32_t slot,
			 const struct policy_tenant *p,
			 struct broker_tenant_stats *out)
{
	const struct slot *s = &b->slots[slot];
	bool ours = strcmp(broker_slot_name(s), p->name) == 0;

	memset(out, 0, sizeof(*out));
	if (ours) {
		out->leases = s->st.leases;
		out->tokens_leased = s->st.tokens_leased;
		out->tokens_refunded = s->st.tokens_refunded;
		out->redis_calls = s->st.redis_calls;
		out->static_charged = s->st.static_charged;
		out->owed = s->debt;
		out->conn_held = slot_rare(s)->conn_held;
	}
	out->lease_size = ours && s->lease ? s->lease :
			  lease_credit(p, broker_agents_of(b));
	out->overshoot_bound = lease_bound(p, broker_agents_of(b), b->o.lease_ttl_ms);
	out->conn_bound = policy_conn_bound(p, broker_agents_of(b));
}

void broker_stats(const struct broker *b, struct broker_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->address = b->address;
	/* up once Redis answered: a TLS handshake refused is not */
	out->state = b->cmd.state == C_UP && b->cmd.answered ? "connected" :
		     b->cmd.state != C_DOWN ? "connecting" : "down";
	out->healthy = b->cmd.state == C_UP && b->scripts_ok && !b->circ.open;
	out->degraded_since = b->circ.open ? b->degraded_since : 0;
	out->reason = b->circ.open ? b->reason : "";
	out->transitions = b->circ.transitions;
	if (b->cc) {
		/* The cluster is healthy when every slot's master is; degraded
		 * since the earliest of the masters that are not. */
		unsigned int covered = cc_covered(b->cc);

		out->state = covered == CLUSTER_SLOTS ? "connected" :
			     covered ? "partial" : "down";
		out->healthy = covered == CLUSTER_SLOTS;
		out->degraded_since = 0;
		out->reason = "";
		out->transitions = 0;
		for (int n = 0; n < cc_nodes(b->cc) && n < CLUSTER_NODES_MAX; n++) {
			const struct shard *sh = &b->shards[n];

			out->transitions += sh->circ.transitions;
			if (!cc_node_serves(b->cc, n) || !sh->circ.open)
				continue;
			out->healthy = false;
			if (!out->degraded_since || sh->degraded_since < out->degraded_since) {
				out->degraded_since = sh->degraded_since;
				out->reason = sh->reason;
			}
		}
		if (!out->healthy && !out->reason[0])
			out->reason = covered ? "some slots have no master ready" :
					        "no Redis Cluster node ready yet";
		if (!out->healthy && !out->degraded_since)
			out->degraded_since = b->degraded_since;
	}
	out->timeouts = b->redis_timeouts;
	out->live_agents = b->live_agents;
	out->agent_id = b->agent_id;
	out->nonce = b->nonce;
	out->agent_id_conflict = b->id_clash;
	out->agent_id_conflicts = b->id_clashes;
	out->redis_calls = b->redis_calls;
	out->redis_errors = b->redis_errors;
	out->lease_bounds = broker_lease_bounds;
	memcpy(out->lease_buckets, b->lease_buckets, sizeof(out->lease_buckets));
	out->lease_sum_s = b->lease_sum_s;
	out->lease_count = b->lease_count;
}
