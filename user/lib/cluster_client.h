/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A small Redis Cluster client on rlgate's loop (prefix cc_): learns the slot
 * map from seed nodes, keeps one hiredis async connection per master that
 * serves slots, routes each call by its key's slot, follows MOVED and ASK,
 * waits out TRYAGAIN and CLUSTERDOWN (user/lib/cluster.c decides), and runs
 * scripts by SHA, loading them into a node that answers NOSCRIPT.  Health
 * (breakers, fail policies) is the caller's: it hears of each node going up
 * or down and of the node that answered each call.
 */
#ifndef RL_CLUSTER_CLIENT_H
#define RL_CLUSTER_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#include "cluster.h"
#include "loop.h"
#include "redis_tls.h"

#define CC_SEEDS_MAX		16
#define CC_SCRIPTS_MAX		16
#define CC_REFRESH_MS		5000	/* the map is read again this often */
#define CC_REFRESH_DOWN_MS	500	/* ...and this often while a node is down */

struct cc;

/* What the caller hears (arg is cc_opts.arg). */
struct cc_ops {
	/* Node n can take calls now (connected, authenticated, every script
	 * loaded), or no longer (why: the connection's error). */
	void (*node_up)(void *arg, int n);
	void (*node_down)(void *arg, int n, const char *why);
	/* The slot map changed: tenants may have moved between nodes. */
	void (*map_changed)(void *arg);
};

struct cc_opts {
	const char *seeds;		/* "HOST:PORT[,HOST:PORT...]" */
	const char *user, *password;	/* AUTH, or NULL */
	struct redis_tls *tls;		/* every node over TLS, or NULL; the
					 * caller's, kept for as long as cc */
	const char *const *scripts;	/* Lua sources, called by index */
	unsigned int n_scripts;
	struct cc_ops ops;
	void *arg;
};

/* The final reply to a call, from node n: the answer, or an error reply
 * that is the caller's (a script's error, a redirection given up on).  r
 * NULL: the call was lost - its node's connection went while it was in
 * flight (it may or may not have run), or it could not be sent again after
 * a redirection or a wait (it did not run).  r is freed after the call. */
typedef void cc_reply_fn(void *priv, int n, redisReply *r);

/* Checks a seed list: 0, or -EINVAL (err says which part, and why). */
int cc_parse_seeds(const char *s, char *err, size_t errlen);

/* Starts connecting to the seeds (in the background; retried with
 * backoff).  0 or -errno (-EINVAL: bad seeds or too many scripts). */
int cc_open(struct loop *l, const struct cc_opts *o, struct cc **out);

/* Closes every connection; calls in flight get r NULL, and a call sent
 * from such a callback is refused (-ENOTCONN).  NULL is fine. */
void cc_close(struct cc *cc);

/* Runs script s (an index into cc_opts.scripts) with args[0..nargs) -
 * the nkeys keys first - on the master of args[0]'s slot.  0, -ENOTCONN
 * (no master for that slot can take calls: fn is not called) or -ENOMEM. */
int cc_eval(struct cc *cc, unsigned int s, int nkeys, const char **args,
	    int nargs, cc_reply_fn *fn, void *priv);

/* Sends a plain command (argv[0] the command) routed by key. */
int cc_command(struct cc *cc, const char *key, int argc, const char **argv,
	       cc_reply_fn *fn, void *priv);

/* Sends a command to node n itself, not followed anywhere. */
int cc_node_command(struct cc *cc, int n, int argc, const char **argv,
		    cc_reply_fn *fn, void *priv);

/* The node serving key's slot (CLUSTER_NO_NODE: none known). */
int cc_node_of(const struct cc *cc, const char *key);

/* Nodes known so far (indices stay valid for the client's life). */
int cc_nodes(const struct cc *cc);

/* Node n can take calls (see cc_ops.node_up). */
bool cc_node_ready(const struct cc *cc, int n);

/* Node n serves at least one slot in the current map. */
bool cc_node_serves(const struct cc *cc, int n);

/* "HOST:PORT" of node n. */
const char *cc_node_name(const struct cc *cc, int n);

/* Send time (loop_now_ns) of the oldest call node n has not answered;
 * 0: none. */
uint64_t cc_node_oldest_ns(const struct cc *cc, int n);

/* Slots a ready node serves (16384: all of them). */
unsigned int cc_covered(const struct cc *cc);

/* Reads the slot map again soon (rate-limited). */
void cc_refresh(struct cc *cc);

/* The i-th address worth connecting to for something that needs any node
 * (pub/sub): masters serving slots, else the seeds, in turn.  0 or
 * -ENOENT. */
int cc_pick_address(const struct cc *cc, unsigned int i, char *host,
		    size_t hostlen, uint16_t *port);

#endif /* RL_CLUSTER_CLIENT_H */
