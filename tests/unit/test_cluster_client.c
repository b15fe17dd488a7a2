// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* test_cluster_client: the Redis Cluster client against three fake nodes on
 * 127.0.0.1 that speak just enough RESP (CLUSTER SLOTS, SCRIPT LOAD,
 * EVALSHA, ASKING) and answer as the test tells them: the map learnt from
 * one seed, calls routed by slot, MOVED followed and remembered, ASK
 * followed once and not remembered, TRYAGAIN and CLUSTERDOWN waited out or
 * given up on, NOSCRIPT answered by loading the script on that node, a
 * redirection loop cut short, a node that goes away reported down, and no
 * call sent from the callbacks cc_close() runs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <hiredis/hiredis.h>

#include "cluster_client.h"
#include "log.h"
#include "loop.h"
#include "check.h"

#define NODES	3

struct fake_node {
	int id;
	uint16_t port;
	int lfd;
	struct loop_watch *lw;
	int tryagain, down;	/* answers of that kind still to give */
	bool noscript;		/* EVALSHA answers NOSCRIPT until SCRIPT LOAD */
	bool ask_always;	/* ASK even after ASKING */
	int moved_to;		/* >= 0: MOVED there, whatever the slot */
	int evals, loads, slots_reqs, askings;
};

struct fake_conn {
	struct fake_node *node;
	int fd;
	struct loop_watch *w;
	redisReader *rd;
	bool asking;
	struct fake_conn *next;
};

static struct loop *l;
static struct fake_node nodes[NODES];
static struct fake_conn *conns;
static int truth[CLUSTER_SLOTS];	/* the node serving each slot */
static int migrating[CLUSTER_SLOTS];	/* -1, or where the slot is going */
static const char *const scripts[] = { "return 1", "return 2" };

static void sha_of(unsigned int i, char *out)
{
	memset(out, 'a' + (int)i, 40);
	out[40] = '\0';
}

static void say(struct fake_conn *c, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0 && write(c->fd, buf, (size_t)n) != n)
		fprintf(stderr, "fake node: short write\n");
}

static void say_slots(struct fake_conn *c)
{
	char buf[8192];
	size_t off = 0;
	int runs = 0;

	for (unsigned int s = 0; s < CLUSTER_SLOTS;) {
		unsigned int e = s;

		while (e + 1 < CLUSTER_SLOTS && truth[e + 1] == truth[s])
			e++;
		off += (size_t)snprintf(buf + off, sizeof(buf) - off,
					"*3\r\n:%u\r\n:%u\r\n*2\r\n$9\r\n127.0.0.1\r\n:%u\r\n",
					s, e, nodes[truth[s]].port);
		runs++;
		s = e + 1;
	}
	say(c, "*%d\r\n%s", runs, buf);
}

static void answer(struct fake_conn *c, redisReply *q)
{
	struct fake_node *n = c->node;
	const char *cmd = q->element[0]->str;
	bool asking = c->asking;

	c->asking = false;
	if (!strcasecmp(cmd, "ASKING")) {
		n->askings++;
		c->asking = true;
		say(c, "+OK\r\n");
	} else if (!strcasecmp(cmd, "CLUSTER")) {
		n->slots_reqs++;
		say_slots(c);
	} else if (!strcasecmp(cmd, "SCRIPT")) {
		char sha[41] = "";

		n->loads++;
		for (unsigned int i = 0; i < 2; i++)
			if (!strcmp(q->element[2]->str, scripts[i]))
				sha_of(i, sha);
		n->noscript = false;
		say(c, "$40\r\n%s\r\n", sha);
	} else if (!strcasecmp(cmd, "EVALSHA") || !strcasecmp(cmd, "GET")) {
		const char *key = q->element[!strcasecmp(cmd, "GET") ? 1 : 3]->str;
		unsigned int slot = cluster_key_slot(key, strlen(key));

		n->evals++;
		if (n->noscript && !strcasecmp(cmd, "EVALSHA")) {
			say(c, "-NOSCRIPT No matching script. Please use EVAL.\r\n");
		} else if (n->moved_to >= 0) {
			say(c, "-MOVED %u 127.0.0.1:%u\r\n", slot, nodes[n->moved_to].port);
		} else if (n->tryagain) {
			n->tryagain--;
			say(c, "-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
		} else if (n->down) {
			n->down--;
			say(c, "-CLUSTERDOWN The cluster is down\r\n");
		} else if (truth[slot] == n->id && migrating[slot] >= 0) {
			say(c, "-ASK %u 127.0.0.1:%u\r\n", slot, nodes[migrating[slot]].port);
		} else if (migrating[slot] == n->id && asking && !n->ask_always) {
			say(c, ":%d\r\n", n->id);
		} else if (migrating[slot] == n->id && n->ask_always) {
			say(c, "-ASK %u 127.0.0.1:%u\r\n", slot, n->port);
		} else if (truth[slot] != n->id) {
			say(c, "-MOVED %u 127.0.0.1:%u\r\n", slot, nodes[truth[slot]].port);
		} else {
			say(c, ":%d\r\n", n->id);
		}
	} else {
		say(c, "+OK\r\n");
	}
}

static void conn_free(struct fake_conn *c)
{
	struct fake_conn **p;

	for (p = &conns; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	loop_watch_del(c->w);
	close(c->fd);
	redisReaderFree(c->rd);
	free(c);
}

static void on_conn(struct loop_watch *w, int fd, unsigned int events, void *arg)
{
	struct fake_conn *c = arg;
	char buf[4096];
	ssize_t n = read(fd, buf, sizeof(buf));
	void *q;

	(void)w;
	(void)events;
	if (n <= 0) {
		conn_free(c);
		return;
	}
	redisReaderFeed(c->rd, buf, (size_t)n);
	while (redisReaderGetReply(c->rd, &q) == REDIS_OK && q) {
		answer(c, q);
		freeReplyObject(q);
	}
}

static void on_accept(struct loop_watch *w, int fd, unsigned int events, void *arg)
{
	struct fake_conn *c = calloc(1, sizeof(*c));

	(void)w;
	(void)events;
	if (!c)
		return;
	c->node = arg;
	c->fd = accept(fd, NULL, NULL);
	c->rd = redisReaderCreate();
	if (c->fd < 0 || !c->rd ||
	    loop_watch_add(l, c->fd, LOOP_READ, on_conn, c, &c->w)) {
		if (c->fd >= 0)
			close(c->fd);
		if (c->rd)
			redisReaderFree(c->rd);
		free(c);
		return;
	}
	c->next = conns;
	conns = c;
}

static int node_start(struct fake_node *n, int id)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int one = 1;

	memset(n, 0, sizeof(*n));
	n->id = id;
	n->moved_to = -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	n->lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (n->lfd < 0 ||
	    setsockopt(n->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(n->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(n->lfd, 16) ||
	    getsockname(n->lfd, (struct sockaddr *)&a, &len))
		return -errno;
	n->port = ntohs(a.sin_port);
	return loop_watch_add(l, n->lfd, LOOP_READ, on_accept, n, &n->lw);
}

/* The node stops answering: its listener and connections close. */
static void node_stop(struct fake_node *n)
{
	struct fake_conn *c = conns, *next;

	loop_watch_del(n->lw);
	close(n->lfd);
	for (; c; c = next) {
		next = c->next;
		if (c->node == n)
			conn_free(c);
	}
}

/* --- the client's side --------------------------------------------------------- */

static int ups, downs, map_changes;
static struct { bool done; int node; int type; long long integer; char err[128]; } res;

static void on_up(void *arg, int n) { (void)arg; (void)n; ups++; }
static void on_down(void *arg, int n, const char *why) { (void)arg; (void)n; (void)why; downs++; }
static void on_map(void *arg) { (void)arg; map_changes++; }

static void on_reply(void *priv, int n, redisReply *r)
{
	(void)priv;
	res.done = true;
	res.node = n;
	res.type = r ? r->type : -1;
	res.integer = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
	snprintf(res.err, sizeof(res.err), "%s",
		 r && r->type == REDIS_REPLY_ERROR ? r->str : "");
}

static bool run_until(bool (*cond)(void), int ms)
{
	uint64_t end = loop_now_ns() + (uint64_t)ms * 1000000ULL;

	while (!cond() && loop_now_ns() < end)
		loop_run_once(l, 10);
	return cond();
}

static struct cc *cc;
static bool three_up(void) { return ups >= 3 && cc_covered(cc) == CLUSTER_SLOTS; }
static bool replied(void) { return res.done; }
static int node_index(int id);
static bool c_on_1(void) { return cc_node_of(cc, "c") == node_index(1); }
static bool one_down(void) { return downs >= 1; }
static bool two_thirds(void) { return cc_covered(cc) == CLUSTER_SLOTS - 5462; }

/* Runs script 0 with key; the answer in res.  0, or cc_eval's error. */
static int eval(const char *key)
{
	const char *args[] = { key, "x" };
	int err;

	memset(&res, 0, sizeof(res));
	err = cc_eval(cc, 0, 1, args, 2, on_reply, NULL);
	if (!err)
		CHECK(run_until(replied, 5000), "no reply for '%s'", key);
	return err;
}

static int node_index(int id)
{
	char name[32];

	snprintf(name, sizeof(name), "127.0.0.1:%u", nodes[id].port);
	for (int i = 0; i < cc_nodes(cc); i++)
		if (!strcmp(cc_node_name(cc, i), name))
			return i;
	return -1;
}

/* Keys in each third of the slots: "a" 15495 (node 2), "b" 3300 (node 0),
 * "c" 7365 (node 1), "d" 11298 (node 2); the slots of "a" and "c". */
static unsigned int sa, sc;

/* One seed is enough: the map names the others. */
static void test_connect(void)
{
	char seeds[64];
	struct cc_opts o = {
		.scripts = scripts, .n_scripts = 2,
		.ops = { .node_up = on_up, .node_down = on_down, .map_changed = on_map },
	};

	snprintf(seeds, sizeof(seeds), "127.0.0.1:%u", nodes[0].port);
	o.seeds = seeds;
	CHECK(cc_open(l, &o, &cc) == 0, "cc_open");
	CHECK(run_until(three_up, 5000), "three nodes ready: %d up, %u slots", ups,
	      cc_covered(cc));
	CHECK(map_changes == 1, "one map change, %d", map_changes);
}

/* Routed by slot. */
static void test_routed_by_slot(void)
{
	CHECK(eval("b") == 0 && res.integer == 0 && res.node == node_index(0),
	      "'b' ran on node %lld", res.integer);
	CHECK(eval("c") == 0 && res.integer == 1 && res.node == node_index(1),
	      "'c' ran on node %lld", res.integer);
	CHECK(eval("a") == 0 && res.integer == 2, "'a' ran on node %lld", res.integer);
}

/* A stale map: MOVED is followed, and remembered. */
static void test_moved(void)
{
	int before;

	truth[sc] = 2;
	before = nodes[1].evals;
	CHECK(eval("c") == 0 && res.integer == 2 && res.node == node_index(2),
	      "'c' after its slot moved to node 2: ran on %lld (%s)", res.integer,
	      res.err);
	CHECK(nodes[1].evals == before + 1, "node 1 asked once: %d",
	      nodes[1].evals - before);
	CHECK(cc_node_of(cc, "c") == node_index(2), "the slot of 'c' is node 2's now");
	before = nodes[1].evals;
	CHECK(eval("c") == 0 && res.integer == 2 && nodes[1].evals == before,
	      "the next call for 'c' goes straight to node 2");
}

/* ASK: ASKING and the call on the slot's next owner; not remembered. */
static void test_ask(void)
{
	int before;

	migrating[sa] = 0;
	before = nodes[2].evals;
	CHECK(eval("a") == 0 && res.integer == 0 && nodes[0].askings == 1,
	      "'a' while its slot migrates to node 0: ran on %lld, %d ASKING (%s)",
	      res.integer, nodes[0].askings, res.err);
	CHECK(eval("a") == 0 && res.integer == 0 && nodes[2].evals == before + 2,
	      "the next call for 'a' asks node 2 first again");
	/* ...once per call. */
	nodes[0].ask_always = true;
	CHECK(eval("a") == 0 && res.type == REDIS_REPLY_ERROR &&
	      !strncmp(res.err, "ASK ", 4), "a second ASK is the caller's: '%s'",
	      res.err);
	nodes[0].ask_always = false;
	migrating[sa] = -1;
}

/* TRYAGAIN waited out; CLUSTERDOWN for longer than the waits is the
 * caller's. */
static void test_tryagain_clusterdown(void)
{
	int before;

	nodes[0].tryagain = 2;
	before = nodes[0].evals;
	CHECK(eval("b") == 0 && res.integer == 0 && nodes[0].evals == before + 3,
	      "two TRYAGAIN then the answer: %lld after %d calls", res.integer,
	      nodes[0].evals - before);
	/* CLUSTERDOWN for longer than the waits: the caller gets it. */
	nodes[0].down = 100;
	before = nodes[0].evals;
	CHECK(eval("b") == 0 && !strncmp(res.err, "CLUSTERDOWN", 11) &&
	      nodes[0].evals == before + 1 + CLUSTER_DOWN_WAITS,
	      "CLUSTERDOWN given up after %d calls: '%s'", nodes[0].evals - before,
	      res.err);
	nodes[0].down = 0;
}

/* NOSCRIPT: the script is loaded on that node and the call sent
 * again. */
static void test_noscript(void)
{
	int before;
	int e;

	nodes[1].noscript = true;
	truth[sc] = 1;
	before = nodes[1].loads;
	CHECK(run_until(c_on_1, 5000), "the map refreshed: 'c' on node 1");
	e = eval("c");
	CHECK(e == 0 && res.integer == 1 && nodes[1].loads == before + 1,
	      "NOSCRIPT on node 1: %lld (%s), %d load(s)", res.integer, res.err,
	      nodes[1].loads - before);
}

/* Two nodes sending a slot to each other: given up on after
 * CLUSTER_REDIRECTS_MAX redirections. */
static void test_moved_loop(void)
{
	int before;

	nodes[1].moved_to = 2;
	nodes[2].moved_to = 1;
	before = nodes[1].evals + nodes[2].evals;
	CHECK(eval("c") == 0 && !strncmp(res.err, "MOVED", 5) &&
	      nodes[1].evals + nodes[2].evals == before + 1 + CLUSTER_REDIRECTS_MAX,
	      "a MOVED loop: '%s' after %d calls", res.err,
	      nodes[1].evals + nodes[2].evals - before);
	nodes[1].moved_to = nodes[2].moved_to = -1;
	CHECK(eval("c") == 0 && res.integer == 1, "'c' on node 1 again: %lld (%s)",
	      res.integer, res.err);
}

/* A node that goes away is reported down, and its slots take no
 * calls. */
static void test_node_down(void)
{
	node_stop(&nodes[1]);
	CHECK(run_until(one_down, 5000), "node 1 reported down");
	CHECK(!cc_node_ready(cc, node_index(1)), "node 1 not ready");
	{
		const char *args[] = { "c" };

		CHECK(cc_eval(cc, 0, 1, args, 1, on_reply, NULL) == -ENOTCONN,
		      "a call for node 1's slot is refused at once");
	}
	CHECK(run_until(two_thirds, 5000), "%u slots served by ready nodes",
	      cc_covered(cc));
	CHECK(eval("b") == 0 && res.integer == 0, "node 0 still answers");
}

/* What the calls answered by cc_close() did: how many were answered, with
 * a reply, and how many calls their callbacks could still send. */
static int closed_answers, closed_replies, closed_sent;

static void on_closing_reply(void *priv, int n, redisReply *r)
{
	const char *keys[] = { "a", "b" };

	(void)priv;
	(void)n;
	closed_answers++;
	closed_replies += r != NULL;
	/* What a caller's callback does on a lost call: send the next one.
	 * One key on each node still up, so that whichever node is closed
	 * first, the other would take it. */
	for (int i = 0; i < 2; i++) {
		const char *args[] = { keys[i] };

		closed_sent += cc_eval(cc, 0, 1, args, 1, on_closing_reply, NULL) == 0;
	}
}

/* cc_close() answers each call in flight once with no reply, and refuses
 * every call sent from those callbacks: none goes out on a node not freed
 * yet (to be answered again by its freeing, or to outlive the client). */
static void test_close_refuses_calls(void)
{
	const char *a[] = { "a" }, *b[] = { "b" };

	CHECK(cc_eval(cc, 0, 1, a, 1, on_closing_reply, NULL) == 0 &&
	      cc_eval(cc, 0, 1, b, 1, on_closing_reply, NULL) == 0,
	      "two calls in flight, on nodes 2 and 0");
	cc_close(cc);
	cc = NULL;
	CHECK(closed_answers == 2, "each call answered once: %d answers",
	      closed_answers);
	CHECK(closed_replies == 0, "%d answers with a reply", closed_replies);
	CHECK(closed_sent == 0, "%d calls sent while the client closed", closed_sent);
}

int main(void)
{
	log_set_level(LOG_LVL_ERROR);
	if (loop_new(64, &l)) {
		fprintf(stderr, "no io_uring here\n");
		return 77;
	}
	for (int i = 0; i < NODES; i++)
		if (node_start(&nodes[i], i)) {
			fprintf(stderr, "couldn't listen on 127.0.0.1\n");
			return 77;
		}
	for (unsigned int s = 0; s < CLUSTER_SLOTS; s++) {
		truth[s] = s < 5461 ? 0 : s < 10923 ? 1 : 2;
		migrating[s] = -1;
	}
	sa = cluster_key_slot("a", 1);
	sc = cluster_key_slot("c", 1);

	/* Each test goes on from the state the one before left. */
	if (!CHECK_RUN(test_connect)) {
		CHECK_RUN(test_routed_by_slot);
		CHECK_RUN(test_moved);
		CHECK_RUN(test_ask);
		CHECK_RUN(test_tryagain_clusterdown);
		CHECK_RUN(test_noscript);
		CHECK_RUN(test_moved_loop);
		CHECK_RUN(test_node_down);
		CHECK_RUN(test_close_refuses_calls);
	}
	cc_close(cc);
	for (int i = 0; i < NODES; i++)
		if (i != 1)
			node_stop(&nodes[i]);
	loop_free(l);
	return check_exit();
}
