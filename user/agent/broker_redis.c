// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The broker's Redis side: the command and subscriber connections with
 * reconnect and backoff, scripts loaded and called by SHA, replies checked,
 * and the circuit breaker that decides when the fleet is degraded. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "log.h"
#include "redis_loop.h"
#include "scripts.h"

/* --- circuit breaker ----------------------------------------------------------
 *
 * Closed: leasing.  It opens after BREAKER_FAILURES consecutive failures
 * (error replies, unusable replies, a call unanswered for the --redis-timeout)
 * or at once when the connection is lost or cannot be made.  Open: no leases;
 * the kernel is told the fleet is degraded and applies each tenant's fail
 * policy once its leased tokens are spent.  The heartbeat, every second, is
 * the half-open probe: its first good reply closes the breaker.
 */


/* The breaker opened (circuit_step()): before the kernel turns to the
 * fail policies, what they admit starts being counted. */
static void on_opened(struct broker *b, const char *reason)
{
	broker_debt_begin(b);
	b->open_since_ns = loop_now_ns();
	b->degraded_since = time(NULL);
	b->tokens_expired = false;
	snprintf(b->reason, sizeof(b->reason), "%s", reason);
	log_warn("fleet degraded: %s; each tenant's fail policy applies once its "
		 "leased tokens are spent", reason);
	host_fleet_state(b, loop_now_ns(), true);
}

static void breaker_open(struct broker *b, const char *reason)
{
	if (b->cc) {
		broker_shard_step(b, b->reply_node, CIRCUIT_LOST, reason);
		return;
	}
	if (circuit_step(&b->circ, CIRCUIT_LOST, false, BREAKER_FAILURES) ==
	    CIRCUIT_OPENED)
		on_opened(b, reason);
	else if (b->circ.open && !b->circ.ever_healthy)
		/* Degraded since the start: say what keeps it so (a refused
		 * certificate, say) rather than "not connected yet". */
		snprintf(b->reason, sizeof(b->reason), "%s", reason);
}

static void breaker_failure(struct broker *b, const char *reason)
{
	if (b->cc) {
		broker_shard_step(b, b->reply_node, CIRCUIT_FAILURE, reason);
		return;
	}
	if (circuit_step(&b->circ, CIRCUIT_FAILURE, false, BREAKER_FAILURES) ==
	    CIRCUIT_OPENED)
		on_opened(b, reason);
}

void breaker_success(struct broker *b)
{
	bool first = !b->circ.ever_healthy;

	if (b->cc) {
		broker_shard_step(b, b->reply_node, CIRCUIT_SUCCESS, "");
		return;
	}
	if (circuit_step(&b->circ, CIRCUIT_SUCCESS,
			 b->cmd.state == C_UP && b->scripts_ok,
			 BREAKER_FAILURES) != CIRCUIT_CLOSED)
		return;
	if (!first)
		log_warn("fleet healthy again after %.1f s degraded (%s): leasing",
			 (double)(loop_now_ns() - b->open_since_ns) / 1e9, b->reason);
	else
		log_info("Redis on '%s' ready: leasing", b->address);
	b->reason[0] = '\0';
	/* The spell's last look, while every refusal is still the fail
	 * policy's. */
	broker_debt_look(b);
	broker_rejoin_begin(b);
	host_fleet_state(b, loop_now_ns(), false);
	/* At once, not at the next check: the kernel spends leased tokens
	 * only from here on. */
	broker_lease_all(b, loop_now_ns());
	broker_rejoin_end(b);
}

/* Leases and refunds go out only while the breaker is closed.  On a Redis
 * Cluster: while some master can take them (each tenant's own shard is
 * broker_slot_leasing()'s). */
bool broker_leasing(const struct broker *b)
{
	if (b->cc)
		return !b->done && cc_covered(b->cc) > 0;
	return b->cmd.state == C_UP && b->scripts_ok && !b->circ.open && !b->done;
}

/* Scripts and the policy store can be called. */
bool broker_store_ready(const struct broker *b)
{
	return b->cc ? cc_covered(b->cc) > 0 : b->cmd.state == C_UP && b->scripts_ok;
}

/* The bucket key of the tenant of slot s (unsplit: a split tenant's
 * sub-buckets have keys of their own, broker_lease.c). */
static void slot_key(const struct slot *s, char *key, size_t len)
{
	snprintf(key, len, "rl:{t:%s}:bucket", broker_slot_name(s));
}

/* A script about key can be called for leasing: the fleet's breaker is
 * closed, or on a Redis Cluster, the breaker of key's shard. */
bool broker_key_leasing(const struct broker *b, const char *key)
{
	int n;

	if (!b->cc)
		return broker_leasing(b);
	n = cc_node_of(b->cc, key);
	return !b->done && cc_node_ready(b->cc, n) && !b->shards[n].circ.open;
}

/* A script about key can be called at all (a refund at shutdown goes out
 * whatever the breaker says). */
bool broker_key_reachable(const struct broker *b, const char *key)
{
	if (!b->cc)
		return b->cmd.state == C_UP && b->scripts_ok;
	return cc_node_ready(b->cc, cc_node_of(b->cc, key));
}

/* The tenant of slot s can be leased for: the fleet's breaker is closed,
 * or on a Redis Cluster, its own shard's. */
bool broker_slot_leasing(const struct broker *b, const struct slot *s)
{
	char key[POLICY_NAME_MAX + 16];

	slot_key(s, key, sizeof(key));
	return broker_key_leasing(b, key);
}

/* The tenant of slot s can be called at all. */
bool broker_slot_reachable(const struct broker *b, const struct slot *s)
{
	char key[POLICY_NAME_MAX + 16];

	slot_key(s, key, sizeof(key));
	return broker_key_reachable(b, key);
}

/* Every reply passes here first: it answers the oldest call in flight. */
static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;

	if (b->ring_len) {
		b->ring_head = (b->ring_head + 1) % CALL_RING;
		b->ring_len--;
	}
	c->fn(ac, reply, priv);
}

/* Called every CHECK_MS: the oldest call unanswered past the timeout counts
 * as one failure per check for as long as it stays unanswered. */
void breaker_check_timeouts(struct broker *b, uint64_t now)
{
	char why[96];

	if (!b->ring_len || now - b->ring[b->ring_head] < b->o.timeout_ms * 1000000ULL)
		return;
	snprintf(why, sizeof(why), "Redis on '%.40s' did not answer within %llu ms",
		 b->address, (unsigned long long)b->o.timeout_ms);
	b->redis_timeouts++;
	breaker_failure(b, why);
}

static bool reply_is_noscript(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static void load_scripts(struct broker *b);

/* A script error or an unexpected reply: logged, counted; NOSCRIPT (Redis
 * restarted or flushed) reloads every script. */
void broker_call_failed(struct broker *b, enum script_id s, const redisReply *r)
{
	b->redis_errors++;
	if (!r) {
		log_debug("%s call lost: connection closed", broker_script_names[s]);
		return;
	}
	{
		char why[128];

		snprintf(why, sizeof(why), "Redis on '%.60s' gave %s an unusable reply",
			 b->cc ? cc_node_name(b->cc, b->reply_node) : b->address,
			 broker_script_names[s]);
		breaker_failure(b, why);
	}
	/* A master that cannot serve its slots (its cluster lost a master,
	 * or its majority) is out, as a lost connection is: its tenants'
	 * fail policies apply now, not after two more such calls. */
	if (b->cc && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "CLUSTERDOWN", 11)) {
		char why[160];

		snprintf(why, sizeof(why), "Redis Cluster node '%.60s': %.60s",
			 cc_node_name(b->cc, b->reply_node), r->str);
		breaker_open(b, why);
	}
	if (reply_is_noscript(r)) {
		/* Every call in flight says so: one reload is enough.  (A
		 * cluster's nodes reload on their own: cluster_client.c.) */
		if (b->scripts_ok && !b->cc) {
			log_warn("Redis on '%s' lost rlgate's scripts (restarted or "
				 "flushed): loading them again", b->address);
			load_scripts(b);
		}
		return;
	}
	if (r->type == REDIS_REPLY_ERROR)
		log_warn("couldn't run %s on '%s': %.200s", broker_script_names[s],
			 b->cc ? cc_node_name(b->cc, b->reply_node) : b->address,
			 r->str);
	else
		log_warn("couldn't use %s's reply from '%s': unexpected type %d",
			 broker_script_names[s],
			 b->cc ? cc_node_name(b->cc, b->reply_node) : b->address,
			 r->type);
}

bool broker_int_array(const redisReply *r, size_t n)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (r->element[i]->type != REDIS_REPLY_INTEGER ||
		    r->element[i]->integer < 0)
			return false;
	return true;
}

/* The command connection can take a call: up, and not being freed (a
 * callback hiredis runs from redisAsyncFree() finds it down). */
static bool cmd_ready(const struct broker *b)
{
	return broker_may_start(b) && b->cmd.state == C_UP && b->cmd.ac;
}

/* A plain command about key (argv[0] the command): on the single Redis,
 * or on key's master.  0 or -ENOTCONN. */
int broker_command(struct broker *b, const char *key, int argc, const char **argv,
		   redisCallbackFn *fn, void *priv)
{
	if (b->cc)
		return broker_cluster_send(b, S_COUNT, 0, argv, argc, key, fn, priv);
	if (!cmd_ready(b) ||
	    redisAsyncCommandArgv(b->cmd.ac, fn, priv, argc, argv, NULL) != REDIS_OK)
		return -ENOTCONN;
	b->redis_calls++;
	return 0;
}

/* Sends EVALSHA of script s with the key(s) and argv (as many as the
 * caller has: a policy_get of a sync's chunk takes hundreds).  The callback
 * gets c (freed by the callback).  0 or -ENOTCONN. */
int broker_eval(struct broker *b, enum script_id s, int nkeys, const char **args,
		int nargs, redisCallbackFn *fn, struct call *c)
{
	const char *few[16], **argv = few;
	int argc = 0, err = 0;
	char nk[12];

	if (b->cc) {
		c->b = b;
		c->script = s;
		c->sent_ns = loop_now_ns();
		c->fn = fn;
		return broker_cluster_send(b, s, nkeys, args, nargs, NULL, fn, c);
	}
	if (!cmd_ready(b) || !b->scripts_ok)
		return -ENOTCONN;
	if (nargs + 3 > (int)(sizeof(few) / sizeof(few[0])) &&
	    !(argv = malloc((size_t)(nargs + 3) * sizeof(*argv))))
		return -ENOTCONN;
	snprintf(nk, sizeof(nk), "%d", nkeys);
	argv[argc++] = "EVALSHA";
	argv[argc++] = b->sha[s];
	argv[argc++] = nk;
	for (int i = 0; i < nargs; i++)
		argv[argc++] = args[i];
	c->b = b;
	c->script = s;
	c->sent_ns = loop_now_ns();
	c->fn = fn;
	if (redisAsyncCommandArgv(b->cmd.ac, on_reply, c, argc, argv, NULL) != REDIS_OK)
		err = -ENOTCONN;
	if (argv != few)
		free(argv);
	if (err)
		return err;
	if (b->ring_len < CALL_RING)
		b->ring[(b->ring_head + b->ring_len++) % CALL_RING] = c->sent_ns;
	b->redis_calls++;
	return 0;
}

/* The key and the limit arguments every bucket script takes first. */

void broker_bucket_args(const struct policy_tenant *p, struct bucket_args *ba)
{
	snprintf(ba->key, sizeof(ba->key), "rl:{t:%s}:bucket", p->name);
	snprintf(ba->count, sizeof(ba->count), "%llu", (unsigned long long)p->rate.count);
	snprintf(ba->period, sizeof(ba->period), "%llu",
		 (unsigned long long)p->rate.period_s);
	snprintf(ba->burst, sizeof(ba->burst), "%llu", (unsigned long long)p->burst);
}

/* --- connections ----------------------------------------------------------------- */

static void send_script_loads(struct broker *b);

static void on_load_retry(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	b->load_retry = NULL;
	send_script_loads(b);
}

/*
 * A SCRIPT LOAD that failed: Redis answers, but cannot take the script yet
 * (-LOADING while it loads its dataset, -BUSY behind a long script,
 * -MASTERDOWN on a replica cut off from its master, or anything else).
 * Without its scripts the agent cannot lease, so the breaker opens; the
 * missing scripts are asked for again after a backoff (100 ms doubling to
 * 1 s) on the same connection, which is healthy as such.
 */
static void script_load_failed(struct broker *b, int idx, const redisReply *r)
{
	char why[160], what[64];

	b->redis_errors++;
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(what, sizeof(what), "%.60s", r->str);
	else
		snprintf(what, sizeof(what), "unexpected reply type %d", r->type);
	if (!b->load_warned)
		log_warn("couldn't load script '%s' into Redis on '%s': %s "
			 "(retrying)", broker_script_names[idx], b->address, what);
	b->load_warned = true;
	snprintf(why, sizeof(why), "Redis on '%.40s' couldn't load rlgate's "
		 "scripts: %.60s", b->address, what);
	breaker_open(b, why);
	/* Already open: the reason an operator sees is the current one. */
	snprintf(b->reason, sizeof(b->reason), "%s", why);
	if (b->load_retry || !broker_may_start(b))
		return;
	if (loop_timer_add(host_loop(b), b->load_backoff_ms, 0, on_load_retry, b,
			   &b->load_retry))
		b->load_retry = NULL;
	b->load_backoff_ms = b->load_backoff_ms * 2 > BACKOFF_MAX_MS ?
			     BACKOFF_MAX_MS : b->load_backoff_ms * 2;
}

static void on_script_load(redisAsyncContext *ac, void *reply, void *priv)
{
	struct broker *b = ac->data ? ((struct conn *)ac->data)->b : NULL;
	redisReply *r = reply;
	int idx = (int)(intptr_t)priv;

	/* No reply: the connection is going, and its loss is handled there. */
	if (!b || !r)
		return;
	broker_conn_answered(ac->data);
	if (r->type != REDIS_REPLY_STRING || r->len != 40) {
		script_load_failed(b, idx, r);
		return;
	}
	memcpy(b->sha[idx], r->str, 40);
	b->sha[idx][40] = '\0';
	b->scripts_mask |= 1u << idx;
	if (b->scripts_mask == SCRIPTS_ALL && !b->scripts_ok) {
		b->scripts_ok = true;
		b->cmd.backoff_ms = BACKOFF_MIN_MS;
		b->load_backoff_ms = BACKOFF_MIN_MS;
		if (b->load_warned)
			log_info("Redis on '%s': scripts loaded", b->address);
		else
			log_debug("Redis on '%s': scripts loaded", b->address);
		b->load_warned = false;
		if (b->load_retry)
			loop_timer_cancel(b->load_retry);
		b->load_retry = NULL;
		broker_heartbeat(b);
		/* else the subscription's confirmation syncs */
		if (b->subscribed)
			broker_policy_sync(b);
	}
}

/* Sends SCRIPT LOAD for every script not loaded yet. */
static void send_script_loads(struct broker *b)
{
	if (!cmd_ready(b))
		return;
	b->load_sent_ns = loop_now_ns();
	for (int i = 0; i < S_COUNT; i++) {
		const char *src = NULL;

		if (b->scripts_mask & (1u << i))
			continue;
		for (unsigned int j = 0; j < lua_scripts_count; j++)
			if (strcmp(lua_scripts[j].name, broker_script_names[i]) == 0)
				src = lua_scripts[j].src;
		if (!src) {
			log_error("couldn't find script '%s' in this build", broker_script_names[i]);
			continue;
		}
		if (redisAsyncCommand(b->cmd.ac, on_script_load, (void *)(intptr_t)i,
				      "SCRIPT LOAD %s", src) == REDIS_OK)
			b->redis_calls++;
	}
}

/* Loads every script (a new connection, or Redis lost them). */
static void load_scripts(struct broker *b)
{
	b->scripts_ok = false;
	b->scripts_mask = 0;
	send_script_loads(b);
}

/* Called every CHECK_MS while the scripts are missing: loads that went
 * unanswered for CALL_TIMEOUT_NS (a Redis frozen or blocked) are sent
 * again.  A late answer to the first ones is as good as any. */
void broker_script_loads_check(struct broker *b, uint64_t now)
{
	if (b->cmd.state != C_UP || b->scripts_ok || b->load_retry ||
	    now - b->load_sent_ns < CALL_TIMEOUT_NS)
		return;
	log_debug("Redis on '%s': no answer to SCRIPT LOAD within %llu ms: "
		  "sending it again", b->address,
		  (unsigned long long)(CALL_TIMEOUT_NS / 1000000));
	if (b->circ.open)
		snprintf(b->reason, sizeof(b->reason), "Redis on '%.40s' did not "
			 "answer SCRIPT LOAD within %llu ms", b->address,
			 (unsigned long long)(CALL_TIMEOUT_NS / 1000000));
	send_script_loads(b);
}

void broker_conn_answered(struct conn *c)
{
	if (c->answered)
		return;
	c->answered = true;
	if (c->backoff_ms == BACKOFF_MIN_MS)
		log_info("Redis on '%s': %s connection up", c->b->address, c->name);
	else
		log_debug("Redis on '%s': %s connection up", c->b->address, c->name);
}

static void on_auth(redisAsyncContext *ac, void *reply, void *priv)
{
	struct conn *c = priv;
	redisReply *r = reply;

	(void)ac;
	if (r)
		broker_conn_answered(c);
	if (r && r->type == REDIS_REPLY_ERROR)
		log_error("couldn't authenticate to Redis on '%s': %.200s",
			  c->b->address, r->str);
}

static void on_retry(struct loop_timer *t, void *arg)
{
	struct conn *c = arg;

	(void)t;
	c->retry = NULL;
	broker_conn_start(c);
}

static void conn_retry(struct conn *c)
{
	c->state = C_DOWN;
	c->ac = NULL;
	if (c->b->done || !broker_may_start(c->b))
		return;
	/* Up to a quarter more, at random: a fleet that lost Redis together
	 * does not come back in lockstep. */
	if (loop_timer_add(host_loop(c->b), c->backoff_ms +
			   (uint64_t)rand() % (c->backoff_ms / 4 + 1), 0, on_retry, c,
			   &c->retry))
		c->retry = NULL;
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS :
							    c->backoff_ms * 2;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;
	struct broker *b = c->b;

	if (status != REDIS_OK) {
		char why[240];

		if (c->backoff_ms == BACKOFF_MIN_MS)
			log_warn("couldn't connect to Redis on '%s': %s (retrying)",
				 b->address, ac->errstr);
		snprintf(why, sizeof(why), "couldn't connect to Redis on '%.100s': %.80s",
			 b->address, ac->errstr);
		if (!c->subscriber)
			breaker_open(b, why);
		/* A master gone may be a failover: the sentinels know. */
		broker_sentinel_ask(b, true);
		conn_retry(c);
		return;
	}
	/* The backoff is reset only once the connection proved useful (scripts
	 * loaded, subscription confirmed): a server that accepts and then
	 * breaks every connection must not be hammered ten times a second. */
	c->state = C_UP;
	c->answered = false;	/* "up" is told at Redis' first answer */
	if (b->password) {
		if (b->o.user)
			redisAsyncCommand(c->ac, on_auth, c, "AUTH %s %s", b->o.user,
					  b->password);
		else
			redisAsyncCommand(c->ac, on_auth, c, "AUTH %s", b->password);
	}
	if (c->subscriber) {
		redisAsyncCommand(c->ac, broker_on_message, b, "SUBSCRIBE rl:policy");
	} else {
		b->hb_first = true;
		load_scripts(b);
	}
}

/* Why a connection went: under TLS, hiredis only sees its plain end close,
 * and the relay knows the real reason (a certificate, a handshake). */
static const char *conn_error(const struct broker *b, const redisAsyncContext *ac)
{
	if (b->tls && redis_tls_error(b->tls)[0])
		return redis_tls_error(b->tls);
	return ac->errstr;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;
	struct broker *b = c->b;
	const char *err = conn_error(b, ac);

	/* Once per outage: the breaker's transition is the loud message. */
	if (status != REDIS_OK && c->state == C_UP && c->backoff_ms == BACKOFF_MIN_MS)
		log_warn("lost Redis on '%s' (%s connection): %s", b->address,
			 c->name, err);
	if (c->subscriber)
		b->subscribed = false;
	if (!c->subscriber) {
		char why[240];

		b->scripts_ok = false;
		b->scripts_mask = 0;
		if (b->load_retry)
			loop_timer_cancel(b->load_retry);
		b->load_retry = NULL;
		/* Replies that will never come; and what Redis advised is
		 * about a server that may come back empty. */
		for (uint32_t i = 0; i < b->h.max_slots; i++) {
			b->slots[i].inflight = false;
			b->slots[i].refunding = 0;
			broker_slot_unwait(&b->slots[i]);
		}
		b->ring_len = 0;
		snprintf(why, sizeof(why), "lost Redis on '%.60s': %.120s", b->address,
			 err);
		breaker_open(b, why);
	}
	broker_sentinel_ask(b, true);
	conn_retry(c);
}

void broker_conn_start(struct conn *c)
{
	struct broker *b = c->b;
	redisAsyncContext *ac;
	char host[CLUSTER_HOST_MAX];
	int port = b->port;

	if (broker_sentinel_waiting(b)) {
		/* No master named yet: ask, and try again after the backoff. */
		broker_sentinel_ask(b, false);
		conn_retry(c);
		return;
	}
	snprintf(host, sizeof(host), "%s", b->host);
	if (b->cc) {
		/* Any node will do for pub/sub: a cluster passes every
		 * PUBLISH to all of them.  The next one after a failure. */
		uint16_t p;

		if (cc_pick_address(b->cc, b->sub_pick++, host, sizeof(host), &p) == 0)
			port = p;
	}
	snprintf(c->host, sizeof(c->host), "%s", host);
	c->port = port;
	ac = b->path[0] ? redisAsyncConnectUnix(b->path) :
			  redisAsyncConnect(host, port);
	if (!ac || ac->err) {
		char why[240];

		if (c->backoff_ms == BACKOFF_MIN_MS)
			log_warn("couldn't connect to Redis on '%s': %s (retrying)",
				 b->address, ac ? ac->errstr : "out of memory");
		snprintf(why, sizeof(why), "couldn't connect to Redis on '%.100s': %.80s",
			 b->address, ac ? ac->errstr : "out of memory");
		if (!c->subscriber)
			breaker_open(b, why);
		if (ac)
			redisAsyncFree(ac);
		conn_retry(c);
		return;
	}
	ac->data = c;
	if ((b->tls && redis_tls_wrap(b->tls, ac, host_loop(b), host)) ||
	    redis_loop_attach(ac, host_loop(b))) {
		redisAsyncFree(ac);
		conn_retry(c);
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	c->ac = ac;
	c->state = C_CONNECTING;
}
