// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The broker on a Redis Cluster: calls handed to cluster_client.c (which
 * routes them by slot and follows redirections), a circuit breaker per
 * master fed by its replies and probed with CLUSTER INFO, and the client's
 * node and slot-map events turned into shard state.  The single Redis's
 * connections and breaker are in broker_redis.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "log.h"
#include "scripts.h"

/* --- Redis Cluster ---------------------------------------------------------------
 *
 * cluster_client.c routes each call to its key's master and follows it
 * through redirections; here each master (node) has a breaker of its own,
 * fed by the replies it gives, and a tenant leases while its node's is
 * closed.  A node's breaker opens on a lost connection or three failures,
 * as the single Redis's does; its half-open probe is CLUSTER INFO, every
 * second: a master that answers but cannot serve (cluster_state:fail, its
 * slots lost to a failover) is not healthy.
 */

/* A reply from the cluster, passed on to a broker callback with the node
 * it came from in b->reply_node. */
struct cluster_req {
	struct broker *b;
	redisCallbackFn *fn;
	void *priv;
	int node;		/* a probe: the node probed */
};

static void on_cluster_reply(void *priv, int n, redisReply *r)
{
	struct cluster_req *q = priv;
	struct broker *b = q->b;
	int prev = b->reply_node;

	b->reply_node = n;
	q->fn(NULL, r, q->priv);
	b->reply_node = prev;
	free(q);
}

/* Script s (key args[0]), or the plain command argv routed by key (s
 * S_COUNT: key is args[0], argv is args).  0 or -ENOTCONN. */
int broker_cluster_send(struct broker *b, enum script_id s, int nkeys,
			const char **args, int nargs, const char *key,
			redisCallbackFn *fn, void *priv)
{
	struct cluster_req *q;
	int err;

	if (!broker_may_start(b))
		return -ENOTCONN;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOTCONN;
	q->b = b;
	q->fn = fn;
	q->priv = priv;
	err = s == S_COUNT ? cc_command(b->cc, key, nargs, args, on_cluster_reply, q) :
			     cc_eval(b->cc, s, nkeys, args, nargs, on_cluster_reply, q);
	if (err) {
		free(q);
		return -ENOTCONN;
	}
	b->redis_calls++;
	return 0;
}

void broker_shard_step(struct broker *b, int n, enum circuit_event ev,
		       const char *reason)
{
	struct shard *sh;
	enum circuit_change ch;
	bool first;

	if (!b->cc || n < 0 || n >= CLUSTER_NODES_MAX)
		return;
	sh = &b->shards[n];
	first = !sh->circ.ever_healthy;
	ch = circuit_step(&sh->circ, ev, cc_node_ready(b->cc, n), BREAKER_FAILURES);
	if (ch == CIRCUIT_OPENED) {
		sh->open_since_ns = loop_now_ns();
		sh->degraded_since = time(NULL);
		snprintf(sh->reason, sizeof(sh->reason), "%s", reason);
		log_warn("Redis Cluster node '%s' degraded: %s; tenants in its "
			 "slots use their fail policy once their leased tokens "
			 "are spent", cc_node_name(b->cc, n), reason);
		broker_shards_update(b, loop_now_ns());
	} else if (ch == CIRCUIT_CLOSED) {
		if (first)
			log_info("Redis Cluster node '%s' ready: leasing",
				 cc_node_name(b->cc, n));
		else
			log_warn("Redis Cluster node '%s' healthy again after %.1f s "
				 "degraded (%s): leasing", cc_node_name(b->cc, n),
				 (double)(loop_now_ns() - sh->open_since_ns) / 1e9,
				 sh->reason);
		sh->reason[0] = '\0';
		broker_shards_update(b, loop_now_ns());
		broker_lease_all(b, loop_now_ns());
	}
}

static void on_probe(redisAsyncContext *ac, void *reply, void *priv)
{
	struct cluster_req *q = priv;
	struct broker *b = q->b;
	redisReply *r = reply;
	char why[160];

	(void)ac;
	b->shards[q->node].probing = false;
	if (!r)
		return;
	if (r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok")) {
		broker_shard_step(b, q->node, CIRCUIT_SUCCESS, "");
		return;
	}
	snprintf(why, sizeof(why), "Redis Cluster node '%.60s' cannot serve its "
		 "slots (cluster_state not ok)", cc_node_name(b->cc, q->node));
	broker_shard_step(b, q->node, CIRCUIT_FAILURE, why);
	if (b->shards[q->node].circ.open)
		snprintf(b->shards[q->node].reason, sizeof(b->shards[q->node].reason),
			 "%s", why);
}

static void on_probe_reply(void *priv, int n, redisReply *r)
{
	(void)n;
	on_probe(NULL, r, priv);
	free(priv);
}

/* Every second, and when a node comes up: each master with an open breaker
 * that can take calls is asked whether it serves. */
void broker_cluster_probe(struct broker *b)
{
	const char *argv[] = { "CLUSTER", "INFO" };

	if (!broker_may_start(b))
		return;
	for (int n = 0; n < cc_nodes(b->cc) && n < CLUSTER_NODES_MAX; n++) {
		struct cluster_req *q;

		if (!b->shards[n].circ.open || b->shards[n].probing ||
		    !cc_node_ready(b->cc, n) || !cc_node_serves(b->cc, n))
			continue;
		q = calloc(1, sizeof(*q));
		if (!q)
			return;
		q->b = b;
		q->node = n;
		if (cc_node_command(b->cc, n, 2, argv, on_probe_reply, q)) {
			free(q);
			continue;
		}
		b->shards[n].probing = true;
		b->redis_calls++;
	}
}

/* Every CHECK_MS: the oldest call a node has not answered within the
 * timeout counts as one failure of its breaker per check. */
void broker_cluster_check(struct broker *b, uint64_t now)
{
	for (int n = 0; n < cc_nodes(b->cc) && n < CLUSTER_NODES_MAX; n++) {
		uint64_t oldest = cc_node_oldest_ns(b->cc, n);
		char why[160];

		if (!oldest || now - oldest < b->o.timeout_ms * 1000000ULL)
			continue;
		snprintf(why, sizeof(why), "Redis Cluster node '%.60s' did not answer "
			 "within %llu ms", cc_node_name(b->cc, n),
			 (unsigned long long)b->o.timeout_ms);
		b->redis_timeouts++;
		broker_shard_step(b, n, CIRCUIT_FAILURE, why);
	}
}

static void on_node_up(void *arg, int n)
{
	struct broker *b = arg;

	(void)n;
	/* A master back, or a replica promoted: it may have lost the
	 * policies; the next heartbeat tick offers them again. */
	b->sync_again = true;
	broker_cluster_probe(b);
}

static void on_node_down(void *arg, int n, const char *why)
{
	struct broker *b = arg;
	char reason[160];

	snprintf(reason, sizeof(reason), "lost Redis Cluster node '%.60s': %.70s",
		 cc_node_name(b->cc, n), why);
	broker_shard_step(b, n, CIRCUIT_LOST, reason);
	if (b->shards[n].circ.open)
		snprintf(b->shards[n].reason, sizeof(b->shards[n].reason), "%s",
			 reason);
}

static void on_map_changed(void *arg)
{
	struct broker *b = arg;

	broker_shards_update(b, loop_now_ns());
	broker_cluster_probe(b);
}

/* Cluster mode: the client and a breaker per node (all open until their
 * node has answered). */
int broker_cluster_open(struct broker *b)
{
	struct cc_opts co = {
		.seeds = b->o.redis + strlen("cluster:"),
		.user = b->o.user,
		.password = b->password,
		.tls = b->tls,
		.scripts = b->script_src,
		.n_scripts = S_COUNT,
		.ops = { .node_up = on_node_up, .node_down = on_node_down,
			 .map_changed = on_map_changed },
		.arg = b,
	};

	for (int i = 0; i < S_COUNT; i++) {
		for (unsigned int j = 0; j < lua_scripts_count; j++)
			if (strcmp(lua_scripts[j].name, broker_script_names[i]) == 0)
				b->script_src[i] = lua_scripts[j].src;
		if (!b->script_src[i]) {
			log_error("couldn't find script '%s' in this build",
				  broker_script_names[i]);
			return -ENOENT;
		}
	}
	b->shards = calloc(CLUSTER_NODES_MAX, sizeof(*b->shards));
	if (!b->shards)
		return -ENOMEM;
	for (int n = 0; n < CLUSTER_NODES_MAX; n++) {
		circuit_init(&b->shards[n].circ);
		b->shards[n].open_since_ns = loop_now_ns();
		b->shards[n].degraded_since = time(NULL);
		snprintf(b->shards[n].reason, sizeof(b->shards[n].reason),
			 "not connected to this Redis Cluster node yet");
	}
	b->reply_node = -1;
	return cc_open(host_loop(b), &co, &b->cc);
}
