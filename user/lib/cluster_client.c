// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The Redis Cluster client: connections to the masters, the slot map kept
 * fresh, calls routed by slot and followed through redirections.  The
 * protocol's decisions are user/lib/cluster.c's; this file does the I/O.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/async.h>

#include "cluster_client.h"
#include "log.h"
#include "parse.h"
#include "redis_loop.h"

#define RING		1024	/* send times of calls in flight, per node */
#define BACKOFF_MIN_MS	100
#define BACKOFF_MAX_MS	1000
#define TICK_MS		100
#define REFRESH_GAP_MS	100	/* between two reads of the map, at least */
#define REFRESH_LOST_MS	2000	/* a read unanswered this long is retried */

enum node_state { N_DOWN, N_CONNECTING, N_UP };

struct cc_node {
	struct cc *cc;
	int idx;
	char host[CLUSTER_HOST_MAX];
	uint16_t port;
	char name[CLUSTER_HOST_MAX + 8];
	bool seed;
	redisAsyncContext *ac;
	enum node_state state;
	bool ready;			/* up, and every script loaded */
	unsigned int loads;		/* SCRIPT LOAD replies to come */
	unsigned int load_next;		/* the script the next one is for */
	bool load_failed;
	uint64_t backoff_ms;
	struct loop_timer *retry;
	bool warned;			/* a failure logged, this outage */
	uint64_t ring[RING];
	unsigned int ring_head, ring_len;
};

/* One call, kept until its final reply: it may be sent again. */
struct cc_call {
	struct cc *cc;
	int script;			/* -1: a plain command */
	unsigned int slot;
	int node;			/* -1: to the slot's master; else only there */
	int argc;
	char **argv;
	size_t *lens;
	cc_reply_fn *fn;
	void *priv;
	struct cluster_attempt at;
	bool reloaded;			/* NOSCRIPT answered once */
	struct loop_timer *wait;
	struct cc_call *prev, *next;	/* while waiting */
};

struct cc {
	struct loop *l;
	struct cc_ops ops;
	void *arg;
	char *user, *password;
	struct redis_tls *tls;
	const char *const *scripts;
	unsigned int n_scripts;
	char sha[CC_SCRIPTS_MAX][41];
	struct cc_node *node[CLUSTER_NODES_MAX];
	int n_nodes;
	int16_t owner[CLUSTER_SLOTS];	/* node index, or CLUSTER_NO_NODE */
	bool have_map;
	unsigned int covered;		/* slots a ready node serves */
	bool refresh_wanted, refreshing;
	uint64_t refresh_sent_ns;
	unsigned int rr;		/* the next node asked for the map */
	struct loop_timer *tick;
	struct cc_call *waiting;
	bool parse_warned;
	/* cc_close() runs: the calls it answers with no reply may not send
	 * others, and no node connects or sets a timer again */
	bool closing;
};

static void node_connect(struct cc_node *n);

int cc_parse_seeds(const char *s, char *err, size_t errlen)
{
	unsigned int count = 0;

	for (const char *p = s;; count++) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char one[CLUSTER_HOST_MAX + 16], host[CLUSTER_HOST_MAX];
		uint16_t port;

		if (count == CC_SEEDS_MAX) {
			snprintf(err, errlen, "more than %d seed nodes", CC_SEEDS_MAX);
			return -EINVAL;
		}
		if (len >= sizeof(one)) {
			snprintf(err, errlen, "seed '%.40s...' is too long", p);
			return -EINVAL;
		}
		memcpy(one, p, len);
		one[len] = '\0';
		if (parse_hostport(one, host, sizeof(host), &port)) {
			snprintf(err, errlen, "seed '%s' is not HOST:PORT or [IPV6]:PORT",
				 one);
			return -EINVAL;
		}
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/* --- nodes --------------------------------------------------------------------- */

/* The node host:port, made (not connected) if new; NULL when full. */
static struct cc_node *node_get(struct cc *cc, const char *host, uint16_t port)
{
	struct cc_node *n;

	for (int i = 0; i < cc->n_nodes; i++)
		if (cc->node[i]->port == port && !strcmp(cc->node[i]->host, host))
			return cc->node[i];
	if (cc->n_nodes == CLUSTER_NODES_MAX || strlen(host) >= CLUSTER_HOST_MAX)
		return NULL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	n->cc = cc;
	n->idx = cc->n_nodes;
	snprintf(n->host, sizeof(n->host), "%s", host);
	n->port = port;
	snprintf(n->name, sizeof(n->name), strchr(host, ':') ? "[%s]:%u" : "%s:%u",
		 host, port);
	n->backoff_ms = BACKOFF_MIN_MS;
	cc->node[cc->n_nodes++] = n;
	return n;
}

/* Counts the slots a ready node serves again: the map, or a node's
 * readiness, changed. */
static void recount(struct cc *cc)
{
	unsigned int k = 0;

	for (unsigned int s = 0; s < CLUSTER_SLOTS; s++)
		k += cc->owner[s] != CLUSTER_NO_NODE && cc->node[cc->owner[s]]->ready;
	cc->covered = k;
}

static bool serves(const struct cc *cc, int idx)
{
	for (unsigned int s = 0; s < CLUSTER_SLOTS; s++)
		if (cc->owner[s] == idx)
			return true;
	return false;
}

/* Worth a connection: serves slots, or is a seed while no map is known. */
static bool wanted(const struct cc_node *n)
{
	return serves(n->cc, n->idx) || (n->seed && !n->cc->have_map);
}

static void on_retry(struct loop_timer *t, void *arg)
{
	struct cc_node *n = arg;

	(void)t;
	n->retry = NULL;
	if (wanted(n))
		node_connect(n);
}

static void node_retry(struct cc_node *n)
{
	n->state = N_DOWN;
	n->ready = false;
	recount(n->cc);
	n->ac = NULL;
	n->ring_len = 0;
	if (n->retry || !wanted(n) || n->cc->closing)
		return;
	/* Up to a quarter more, at random: agents that lost a node together
	 * do not come back in lockstep. */
	if (loop_timer_add(n->cc->l, n->backoff_ms +
			   (uint64_t)rand() % (n->backoff_ms / 4 + 1), 0, on_retry, n,
			   &n->retry))
		n->retry = NULL;
	n->backoff_ms = n->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS :
							    n->backoff_ms * 2;
}

/* Closes n's connection without calling it an outage; calls in flight
 * there get r NULL. */
static void node_close(struct cc_node *n)
{
	redisAsyncContext *ac = n->ac;

	if (n->retry)
		loop_timer_cancel(n->retry);
	n->retry = NULL;
	n->state = N_DOWN;
	n->ready = false;
	recount(n->cc);
	n->ring_len = 0;
	n->ac = NULL;
	if (ac) {
		ac->onDisconnect = NULL;
		redisAsyncFree(ac);
	}
}

static void node_lost(struct cc_node *n, const char *why)
{
	bool was_ready = n->ready;

	if (!n->warned)
		log_warn("Redis Cluster node '%s': %s (retrying)", n->name, why);
	n->warned = true;
	node_retry(n);
	if (was_ready && n->cc->ops.node_down)
		n->cc->ops.node_down(n->cc->arg, n->idx, why);
	/* A master gone may be a failover under way: the map will say. */
	cc_refresh(n->cc);
}

static void on_load(redisAsyncContext *ac, void *reply, void *priv)
{
	struct cc_node *n = priv;
	struct cc *cc = n->cc;
	redisReply *r = reply;
	unsigned int i = n->load_next++;

	(void)ac;
	if (!r || n->ac != ac || i >= cc->n_scripts)
		return;
	n->loads--;
	if (r->type != REDIS_REPLY_STRING || r->len != 40) {
		if (!n->load_failed && !n->warned)
			log_warn("Redis Cluster node '%s': couldn't load a script: "
				 "%.100s (reconnecting)", n->name,
				 r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
		n->load_failed = true;
	} else {
		memcpy(cc->sha[i], r->str, 40);
		cc->sha[i][40] = '\0';
	}
	if (n->loads)
		return;
	if (n->load_failed) {
		/* -LOADING, -NOAUTH, ...: again after the backoff, on a new
		 * connection. */
		n->warned = true;
		redisAsyncDisconnect(n->ac);
		return;
	}
	n->ready = true;
	recount(cc);
	n->backoff_ms = BACKOFF_MIN_MS;
	if (n->warned)
		log_info("Redis Cluster node '%s' ready", n->name);
	else
		log_debug("Redis Cluster node '%s' ready", n->name);
	n->warned = false;
	if (cc->ops.node_up)
		cc->ops.node_up(cc->arg, n->idx);
}

static void on_auth(redisAsyncContext *ac, void *reply, void *priv)
{
	struct cc_node *n = priv;
	redisReply *r = reply;

	(void)ac;
	if (r && r->type == REDIS_REPLY_ERROR && !n->warned)
		log_error("couldn't authenticate to Redis Cluster node '%s': %.200s",
			  n->name, r->str);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct cc_node *n = ac->data;
	struct cc *cc = n->cc;

	if (status != REDIS_OK) {
		node_lost(n, ac->errstr);
		return;
	}
	/* N_UP lets commands queue; the node counts (ready) only once its
	 * scripts are loaded - Redis answered: under TLS hiredis' "connected"
	 * is the relay's plain end, before the handshake. */
	n->state = N_UP;
	log_debug("Redis Cluster node '%s': connect done, waiting for its answer",
		  n->name);
	if (cc->password) {
		if (cc->user)
			redisAsyncCommand(n->ac, on_auth, n, "AUTH %s %s", cc->user,
					  cc->password);
		else
			redisAsyncCommand(n->ac, on_auth, n, "AUTH %s", cc->password);
	}
	n->loads = 0;
	n->load_next = 0;
	n->load_failed = false;
	for (unsigned int i = 0; i < cc->n_scripts; i++)
		if (redisAsyncCommand(n->ac, on_load, n, "SCRIPT LOAD %s",
				      cc->scripts[i]) == REDIS_OK)
			n->loads++;
	if (!cc->n_scripts) {
		n->ready = true;
		recount(cc);
		if (cc->ops.node_up)
			cc->ops.node_up(cc->arg, n->idx);
	}
	if (cc->refresh_wanted && !cc->refreshing)
		cc_refresh(cc);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct cc_node *n = ac->data;

	(void)status;
	/* Under TLS the relay knows why its connection went. */
	if (n->cc->tls && redis_tls_error(n->cc->tls)[0])
		node_lost(n, redis_tls_error(n->cc->tls));
	else
		node_lost(n, ac->errstr[0] ? ac->errstr : "connection closed");
}

static void node_connect(struct cc_node *n)
{
	redisAsyncContext *ac;

	if (n->state != N_DOWN)
		return;
	if (n->retry)
		loop_timer_cancel(n->retry);
	n->retry = NULL;
	ac = redisAsyncConnect(n->host, n->port);
	if (!ac || ac->err) {
		char why[128];

		snprintf(why, sizeof(why), "%s", ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		node_lost(n, why);
		return;
	}
	ac->data = n;
	if (n->cc->tls && redis_tls_wrap(n->cc->tls, ac, n->cc->l, n->host)) {
		redisAsyncFree(ac);
		node_lost(n, "couldn't set up TLS");
		return;
	}
	if (redis_loop_attach(ac, n->cc->l)) {
		redisAsyncFree(ac);
		node_lost(n, "couldn't watch the socket");
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	n->ac = ac;
	n->state = N_CONNECTING;
}

/* --- the slot map ------------------------------------------------------------- */

static void apply_map(struct cc *cc, const struct cluster_map *m)
{
	int16_t *owner = malloc(sizeof(cc->owner));
	int idx[CLUSTER_NODES_MAX];
	bool changed;

	if (!owner)
		return;
	for (unsigned int i = 0; i < m->n_nodes; i++) {
		struct cc_node *n = node_get(cc, m->node[i].host, m->node[i].port);

		idx[i] = n ? n->idx : CLUSTER_NO_NODE;
	}
	for (unsigned int s = 0; s < CLUSTER_SLOTS; s++)
		owner[s] = m->slot[s] == CLUSTER_NO_NODE ? CLUSTER_NO_NODE :
			   (int16_t)idx[m->slot[s]];
	changed = !cc->have_map || memcmp(owner, cc->owner, sizeof(cc->owner));
	memcpy(cc->owner, owner, sizeof(cc->owner));
	free(owner);
	cc->have_map = true;
	recount(cc);
	for (int i = 0; i < cc->n_nodes; i++) {
		struct cc_node *n = cc->node[i];

		if (wanted(n)) {
			if (n->state == N_DOWN && !n->retry)
				node_connect(n);
		} else if (n->state != N_DOWN || n->retry) {
			log_debug("Redis Cluster node '%s' serves no slot: closing",
				  n->name);
			node_close(n);
		}
	}
	if (changed) {
		log_info("Redis Cluster map: %u of %u slots served by %d node(s)",
			 cluster_map_covered(m), CLUSTER_SLOTS, (int)m->n_nodes);
		if (cc->ops.map_changed)
			cc->ops.map_changed(cc->arg);
	}
}

static void on_slots(redisAsyncContext *ac, void *reply, void *priv)
{
	struct cc_node *n = priv;
	struct cc *cc = n->cc;
	struct cluster_map *m;
	int err;

	(void)ac;
	cc->refreshing = false;
	if (!reply)
		return;
	m = malloc(sizeof(*m));
	if (!m)
		return;
	err = cluster_map_from_slots(m, reply, n->host);
	if (err) {
		if (!cc->parse_warned)
			log_warn("couldn't read the slot map from Redis Cluster node "
				 "'%s': %s", n->name, strerror(-err));
		cc->parse_warned = true;
		cc->refresh_wanted = true;
	} else if (!cluster_map_covered(m)) {
		/* A node that has not joined yet knows of no slot. */
		cc->refresh_wanted = true;
	} else {
		cc->parse_warned = false;
		apply_map(cc, m);
	}
	free(m);
}

static void send_refresh(struct cc *cc)
{
	for (int k = 0; k < cc->n_nodes; k++) {
		struct cc_node *n = cc->node[(cc->rr + (unsigned int)k) % (unsigned int)cc->n_nodes];

		if (n->state != N_UP)
			continue;
		cc->rr = (unsigned int)n->idx + 1;
		if (redisAsyncCommand(n->ac, on_slots, n, "CLUSTER SLOTS") != REDIS_OK)
			continue;
		cc->refreshing = true;
		cc->refresh_wanted = false;
		cc->refresh_sent_ns = loop_now_ns();
		return;
	}
}

void cc_refresh(struct cc *cc)
{
	if (cc->closing)
		return;
	cc->refresh_wanted = true;
	if (!cc->refreshing &&
	    loop_now_ns() - cc->refresh_sent_ns >= REFRESH_GAP_MS * 1000000ULL)
		send_refresh(cc);
}

static void on_tick(struct loop_timer *t, void *arg)
{
	struct cc *cc = arg;
	uint64_t now = loop_now_ns(), since = now - cc->refresh_sent_ns;
	bool any = false, down = false;

	(void)t;
	if (cc->refreshing && since >= REFRESH_LOST_MS * 1000000ULL)
		cc->refreshing = false;
	for (int i = 0; i < cc->n_nodes; i++) {
		any = any || cc->node[i]->state != N_DOWN;
		down = down || (!cc->node[i]->ready && serves(cc, i));
	}
	if (since >= CC_REFRESH_MS * 1000000ULL ||
	    (down && since >= CC_REFRESH_DOWN_MS * 1000000ULL))
		cc->refresh_wanted = true;
	/* Every node known is out of reach: start again from the seeds. */
	if (!any)
		for (int i = 0; i < cc->n_nodes; i++)
			if (cc->node[i]->seed && !cc->node[i]->retry)
				node_connect(cc->node[i]);
	if (cc->refresh_wanted)
		cc_refresh(cc);
}

/* --- calls ------------------------------------------------------------------------ */

static void call_free(struct cc_call *c)
{
	for (int i = 0; i < c->argc; i++)
		free(c->argv[i]);
	free(c->argv);
	free(c->lens);
	free(c);
}

static void finish(struct cc_call *c, int node, redisReply *r)
{
	c->fn(c->priv, node, r);
	call_free(c);
}

static void on_call_reply(redisAsyncContext *ac, void *reply, void *priv);

/* Sends c on n (after ASKING when asking).  0 or -ENOTCONN. */
static int send_on(struct cc_call *c, struct cc_node *n, bool asking)
{
	if (!n->ready)
		return -ENOTCONN;
	if (asking && redisAsyncCommand(n->ac, NULL, NULL, "ASKING") != REDIS_OK)
		return -ENOTCONN;
	if (c->script >= 0)
		c->argv[1] = memcpy(c->argv[1], c->cc->sha[c->script], 41);
	if (redisAsyncCommandArgv(n->ac, on_call_reply, c, c->argc,
				  (const char **)c->argv, c->lens) != REDIS_OK)
		return -ENOTCONN;
	if (n->ring_len < RING)
		n->ring[(n->ring_head + n->ring_len++) % RING] = loop_now_ns();
	return 0;
}

static struct cc_node *target_of(struct cc *cc, const struct cc_call *c)
{
	int idx = c->node >= 0 ? c->node : cc->owner[c->slot];

	return idx == CLUSTER_NO_NODE ? NULL : cc->node[idx];
}

static void wait_then_send(struct cc_call *c, uint64_t delay_ms);

static void on_wait(struct loop_timer *t, void *arg)
{
	struct cc_call *c = arg;
	struct cc *cc = c->cc;
	struct cc_node *n;

	(void)t;
	c->wait = NULL;
	if (c->prev)
		c->prev->next = c->next;
	else
		cc->waiting = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->prev = c->next = NULL;
	n = target_of(cc, c);
	if (n && send_on(c, n, false) == 0)
		return;
	/* The slot's master is not ready yet (a new one, connecting). */
	if (c->at.waits < CLUSTER_WAITS) {
		struct cluster_redirect r = { .kind = CLUSTER_ERR_TRYAGAIN };
		struct cluster_step st = cluster_next(&r, &c->at);

		wait_then_send(c, st.delay_ms);
		return;
	}
	finish(c, n ? n->idx : CLUSTER_NO_NODE, NULL);
}

static void wait_then_send(struct cc_call *c, uint64_t delay_ms)
{
	struct cc *cc = c->cc;

	if (loop_timer_add(cc->l, delay_ms, 0, on_wait, c, &c->wait)) {
		finish(c, CLUSTER_NO_NODE, NULL);
		return;
	}
	c->next = cc->waiting;
	if (c->next)
		c->next->prev = c;
	cc->waiting = c;
}

static void on_reload(redisAsyncContext *ac, void *reply, void *priv)
{
	struct cc_node *n = priv;
	redisReply *r = reply;

	(void)ac;
	if (r && (r->type != REDIS_REPLY_STRING || r->len != 40))
		log_warn("Redis Cluster node '%s': couldn't load a script again: "
			 "%.100s", n->name,
			 r->type == REDIS_REPLY_ERROR ? r->str : "bad reply");
}

/*
 * Every reply of a call passes here.  A redirection or a wait is followed
 * as cluster_next() says; NOSCRIPT (the node restarted, or a replica was
 * promoted that never saw SCRIPT LOAD) loads the script on that node and
 * sends the call again behind it on the same connection, once.  None of
 * these replies ran the script, so sending again never runs it twice.
 */
static void on_call_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct cc_call *c = priv;
	struct cc *cc = c->cc;
	struct cc_node *n = ac->data, *to;
	redisReply *r = reply;
	struct cluster_redirect rd;
	struct cluster_step st;

	if (n->ring_len) {
		n->ring_head = (n->ring_head + 1) % RING;
		n->ring_len--;
	}
	if (!r || r->type != REDIS_REPLY_ERROR) {
		finish(c, n->idx, r);
		return;
	}
	if (c->script >= 0 && !c->reloaded && !strncmp(r->str, "NOSCRIPT", 8)) {
		c->reloaded = true;
		log_info("Redis Cluster node '%s' lost rlgate's scripts (restarted, "
			 "flushed or promoted): loading them again", n->name);
		if (redisAsyncCommand(n->ac, on_reload, n, "SCRIPT LOAD %s",
				      cc->scripts[c->script]) == REDIS_OK &&
		    send_on(c, n, false) == 0)
			return;
		finish(c, n->idx, r);
		return;
	}
	if (cluster_parse_error(r->str, r->len, n->host, &rd) ||
	    rd.kind == CLUSTER_ERR_NONE || c->node >= 0) {
		finish(c, n->idx, r);
		return;
	}
	st = cluster_next(&rd, &c->at);
	if (st.refresh)
		cc_refresh(cc);
	switch (st.action) {
	case CLUSTER_RESEND:
	case CLUSTER_ASKING:
		to = node_get(cc, rd.host, rd.port);
		if (!to)
			break;
		if (st.action == CLUSTER_RESEND) {
			/* The slot is there from now on; the map refresh
			 * confirms it for the others. */
			cc->owner[rd.slot] = (int16_t)to->idx;
			recount(cc);
			if (to->state == N_DOWN && !to->retry)
				node_connect(to);
		}
		if (send_on(c, to, st.action == CLUSTER_ASKING) == 0)
			return;
		if (st.action == CLUSTER_RESEND && c->at.waits < CLUSTER_WAITS) {
			/* A master new to us: connecting. */
			struct cluster_redirect w = { .kind = CLUSTER_ERR_TRYAGAIN };

			wait_then_send(c, cluster_next(&w, &c->at).delay_ms);
			return;
		}
		break;
	case CLUSTER_WAIT:
		wait_then_send(c, st.delay_ms);
		return;
	case CLUSTER_DONE:
	case CLUSTER_GIVE_UP:
		finish(c, n->idx, r);
		return;
	}
	finish(c, n->idx, NULL);
}

static struct cc_call *call_new(struct cc *cc, int script, int node,
				const char *key, int argc, cc_reply_fn *fn,
				void *priv)
{
	struct cc_call *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->argv = calloc((size_t)argc, sizeof(*c->argv));
	c->lens = calloc((size_t)argc, sizeof(*c->lens));
	if (!c->argv || !c->lens) {
		call_free(c);
		return NULL;
	}
	c->cc = cc;
	c->script = script;
	c->node = node;
	c->slot = key ? cluster_key_slot(key, strlen(key)) : 0;
	c->fn = fn;
	c->priv = priv;
	return c;
}

static int call_arg(struct cc_call *c, const char *s)
{
	size_t len = strlen(s);

	c->argv[c->argc] = malloc(len < 41 ? 41 : len + 1);
	if (!c->argv[c->argc])
		return -ENOMEM;
	memcpy(c->argv[c->argc], s, len + 1);
	c->lens[c->argc++] = len;
	return 0;
}

static int call_start(struct cc *cc, struct cc_call *c)
{
	struct cc_node *n = cc->closing ? NULL : target_of(cc, c);

	if (!n || send_on(c, n, false)) {
		call_free(c);
		return -ENOTCONN;
	}
	return 0;
}

int cc_eval(struct cc *cc, unsigned int s, int nkeys, const char **args,
	    int nargs, cc_reply_fn *fn, void *priv)
{
	struct cc_call *c;
	char nk[12];
	int err = 0;

	if (s >= cc->n_scripts || nkeys < 1 || nkeys > nargs)
		return -EINVAL;
	c = call_new(cc, (int)s, -1, args[0], nargs + 3, fn, priv);
	if (!c)
		return -ENOMEM;
	snprintf(nk, sizeof(nk), "%d", nkeys);
	err = call_arg(c, "EVALSHA");
	if (!err)
		err = call_arg(c, cc->sha[s]);
	if (!err)
		err = call_arg(c, nk);
	for (int i = 0; i < nargs && !err; i++)
		err = call_arg(c, args[i]);
	if (err) {
		call_free(c);
		return err;
	}
	c->lens[1] = 40;
	return call_start(cc, c);
}

static int command(struct cc *cc, int node, const char *key, int argc,
		   const char **argv, cc_reply_fn *fn, void *priv)
{
	struct cc_call *c = call_new(cc, -1, node, key, argc, fn, priv);
	int err = 0;

	if (!c)
		return -ENOMEM;
	for (int i = 0; i < argc && !err; i++)
		err = call_arg(c, argv[i]);
	if (err) {
		call_free(c);
		return err;
	}
	return call_start(cc, c);
}

int cc_command(struct cc *cc, const char *key, int argc, const char **argv,
	       cc_reply_fn *fn, void *priv)
{
	return command(cc, -1, key, argc, argv, fn, priv);
}

int cc_node_command(struct cc *cc, int n, int argc, const char **argv,
		    cc_reply_fn *fn, void *priv)
{
	if (n < 0 || n >= cc->n_nodes)
		return -EINVAL;
	return command(cc, n, NULL, argc, argv, fn, priv);
}

/* --- life cycle and questions -------------------------------------------------- */

int cc_open(struct loop *l, const struct cc_opts *o, struct cc **out)
{
	char err[160];
	struct cc *cc;
	const char *p;
	int ret;

	if (cc_parse_seeds(o->seeds, err, sizeof(err))) {
		log_error("couldn't use Redis Cluster seeds '%s': %s", o->seeds, err);
		return -EINVAL;
	}
	if (o->n_scripts > CC_SCRIPTS_MAX)
		return -EINVAL;
	cc = calloc(1, sizeof(*cc));
	if (!cc)
		return -ENOMEM;
	cc->l = l;
	cc->ops = o->ops;
	cc->arg = o->arg;
	cc->tls = o->tls;
	cc->scripts = o->scripts;
	cc->n_scripts = o->n_scripts;
	for (unsigned int s = 0; s < CLUSTER_SLOTS; s++)
		cc->owner[s] = CLUSTER_NO_NODE;
	if ((o->user && !(cc->user = strdup(o->user))) ||
	    (o->password && !(cc->password = strdup(o->password)))) {
		ret = -ENOMEM;
		goto fail;
	}
	for (p = o->seeds; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
		char one[CLUSTER_HOST_MAX + 16], host[CLUSTER_HOST_MAX];
		size_t len = strcspn(p, ",");
		struct cc_node *n;
		uint16_t port;

		memcpy(one, p, len);
		one[len] = '\0';
		parse_hostport(one, host, sizeof(host), &port);
		n = node_get(cc, host, port);
		if (!n) {
			ret = -ENOMEM;
			goto fail;
		}
		n->seed = true;
	}
	ret = loop_timer_add(l, TICK_MS, TICK_MS, on_tick, cc, &cc->tick);
	if (ret)
		goto fail;
	cc->refresh_wanted = true;
	for (int i = 0; i < cc->n_nodes; i++)
		node_connect(cc->node[i]);
	*out = cc;
	return 0;
fail:
	cc_close(cc);
	return ret;
}

void cc_close(struct cc *cc)
{
	if (!cc)
		return;
	cc->closing = true;
	if (cc->tick)
		loop_timer_cancel(cc->tick);
	while (cc->waiting) {
		struct cc_call *c = cc->waiting;

		cc->waiting = c->next;
		loop_timer_cancel(c->wait);
		finish(c, CLUSTER_NO_NODE, NULL);
	}
	/* Every node closed before any is freed: closing one counts the
	 * others' slots. */
	for (int i = 0; i < cc->n_nodes; i++)
		node_close(cc->node[i]);
	for (int i = 0; i < cc->n_nodes; i++)
		free(cc->node[i]);
	free(cc->user);
	free(cc->password);
	free(cc);
}

int cc_node_of(const struct cc *cc, const char *key)
{
	return cc->owner[cluster_key_slot(key, strlen(key))];
}

int cc_nodes(const struct cc *cc)
{
	return cc->n_nodes;
}

bool cc_node_ready(const struct cc *cc, int n)
{
	return n >= 0 && n < cc->n_nodes && cc->node[n]->ready;
}

bool cc_node_serves(const struct cc *cc, int n)
{
	return n >= 0 && n < cc->n_nodes && serves(cc, n);
}

const char *cc_node_name(const struct cc *cc, int n)
{
	return n >= 0 && n < cc->n_nodes ? cc->node[n]->name : "none";
}

uint64_t cc_node_oldest_ns(const struct cc *cc, int n)
{
	const struct cc_node *nd;

	if (n < 0 || n >= cc->n_nodes)
		return 0;
	nd = cc->node[n];
	return nd->ring_len ? nd->ring[nd->ring_head] : 0;
}

unsigned int cc_covered(const struct cc *cc)
{
	return cc->covered;
}

int cc_pick_address(const struct cc *cc, unsigned int i, char *host,
		    size_t hostlen, uint16_t *port)
{
	int cand[CLUSTER_NODES_MAX], k = 0;

	for (int j = 0; j < cc->n_nodes; j++)
		if (serves(cc, j))
			cand[k++] = j;
	if (!k)
		for (int j = 0; j < cc->n_nodes; j++)
			if (cc->node[j]->seed)
				cand[k++] = j;
	if (!k)
		return -ENOENT;
	snprintf(host, hostlen, "%s", cc->node[cand[i % (unsigned int)k]]->host);
	*port = cc->node[cand[i % (unsigned int)k]]->port;
	return 0;
}
