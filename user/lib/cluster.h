/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The Redis Cluster protocol as far as rlgate needs it, without I/O: a key's
 * hash slot, the slot map read from CLUSTER SLOTS, and what to do with a
 * MOVED, ASK, TRYAGAIN or CLUSTERDOWN reply.  The agent does the sending;
 * tests/unit/test_cluster.c states these as tables.
 */
#ifndef RL_CLUSTER_H
#define RL_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <hiredis/hiredis.h>

#define CLUSTER_SLOTS		16384
#define CLUSTER_NODES_MAX	256	/* masters a map can name */
#define CLUSTER_HOST_MAX	256	/* host names and addresses, with the NUL */
#define CLUSTER_NO_NODE		(-1)

/* Redirections one call follows before it fails (a map that keeps moving
 * is a cluster in trouble), and the waits for TRYAGAIN and CLUSTERDOWN:
 * CLUSTER_WAIT_MIN_MS doubling up to CLUSTER_WAIT_MAX_MS, CLUSTER_WAITS
 * times for TRYAGAIN (a slot in migration: milliseconds), CLUSTER_DOWN_WAITS
 * for CLUSTERDOWN (a master lost: a failover takes seconds, longer than a
 * call should wait - the caller's breaker is the answer to that). */
#define CLUSTER_REDIRECTS_MAX	5
#define CLUSTER_WAITS		4
#define CLUSTER_DOWN_WAITS	2
#define CLUSTER_WAIT_MIN_MS	50
#define CLUSTER_WAIT_MAX_MS	400

/* CRC16 of the cluster specification (XMODEM: polynomial 0x1021, initial
 * value 0, no reflection): "123456789" gives 0x31C3. */
uint16_t cluster_crc16(const char *buf, size_t len);

/* The hash slot of a key: CRC16 mod 16384 of its hash tag - the bytes
 * between its first '{' and the first '}' after it - when that is not
 * empty, else of the whole key.  "{t:acme}" makes every key of a tenant
 * share a slot. */
unsigned int cluster_key_slot(const char *key, size_t len);

struct cluster_node {
	char host[CLUSTER_HOST_MAX];
	uint16_t port;
};

/* Which master serves each slot.  Nodes are masters only (replicas take
 * no writes); a slot no master serves is CLUSTER_NO_NODE. */
struct cluster_map {
	struct cluster_node node[CLUSTER_NODES_MAX];
	unsigned int n_nodes;
	int16_t slot[CLUSTER_SLOTS];
};

/* An empty map: no nodes, every slot unserved. */
void cluster_map_init(struct cluster_map *m);

/*
 * Replaces m with the map in a CLUSTER SLOTS reply r, got from the node at
 * from_host.  Each entry is {first slot, last slot, {host, port, ...},
 * replicas...}; a master's host that is nil or "" is from_host (the node
 * does not know its own address, or sits behind an address it was not
 * told), one of "?" is unknown: its slots stay unserved.  Slots no entry
 * names stay unserved too.  0; -EBADMSG for a reply of another shape (a
 * range out of order or beyond the last slot, overlapping ranges, a bad
 * port), -E2BIG for more than CLUSTER_NODES_MAX masters.  m is left alone
 * on failure.
 */
int cluster_map_from_slots(struct cluster_map *m, const redisReply *r,
			   const char *from_host);

/* The index of the node host:port in m, adding it if new.  The index, or
 * -E2BIG when m is full, -EINVAL for an empty or too long host or port 0. */
int cluster_map_node(struct cluster_map *m, const char *host, uint16_t port);

/* A MOVED reply: slot is served by host:port from now on (added to m if
 * new).  0, or cluster_map_node()'s error; m is left alone on failure. */
int cluster_map_move(struct cluster_map *m, unsigned int slot, const char *host,
		     uint16_t port);

/* The master serving slot: its index in m->node, or CLUSTER_NO_NODE. */
int cluster_map_owner(const struct cluster_map *m, unsigned int slot);

/* Slots some master serves (16384: the whole key space). */
unsigned int cluster_map_covered(const struct cluster_map *m);

enum cluster_error {
	CLUSTER_ERR_NONE,	/* not a cluster redirection: the caller's own */
	CLUSTER_ERR_MOVED,	/* the slot lives elsewhere for good */
	CLUSTER_ERR_ASK,	/* the slot is moving: this one key is there */
	CLUSTER_ERR_TRYAGAIN,	/* a slot in migration; try again shortly */
	CLUSTER_ERR_DOWN,	/* CLUSTERDOWN: the slot (or cluster) unserved */
};

struct cluster_redirect {
	enum cluster_error kind;
	unsigned int slot;		/* MOVED, ASK */
	char host[CLUSTER_HOST_MAX];	/* MOVED, ASK */
	uint16_t port;
};

/*
 * Reads the error reply text s (len bytes) of a call sent to the node at
 * from_host.  "MOVED <slot> <host>:<port>" and "ASK <slot> <host>:<port>"
 * name the node to go to; the address splits at its last ':' (an IPv6
 * address comes without brackets) and an empty host is from_host.
 * "TRYAGAIN ..." and "CLUSTERDOWN ..." are waited out.  Anything else is
 * CLUSTER_ERR_NONE.  0, or -EBADMSG for a MOVED or ASK that names no slot
 * or no node (out is then CLUSTER_ERR_NONE).
 */
int cluster_parse_error(const char *s, size_t len, const char *from_host,
			struct cluster_redirect *out);

/* What one call has been through so far; zeroed when it is first sent. */
struct cluster_attempt {
	unsigned int redirects;	/* MOVED and ASK followed */
	unsigned int waits;	/* TRYAGAIN and CLUSTERDOWN waited out */
	bool asked;		/* an ASK was followed */
};

enum cluster_action {
	CLUSTER_DONE,		/* the reply is the call's answer */
	CLUSTER_RESEND,		/* to the node the redirection names */
	CLUSTER_ASKING,		/* ASKING, then the call, to the named node */
	CLUSTER_WAIT,		/* send again after delay_ms, as the map says */
	CLUSTER_GIVE_UP,	/* the call failed: count it against the shard */
};

struct cluster_step {
	enum cluster_action action;
	bool refresh;		/* read the slot map again (soon, once) */
	uint64_t delay_ms;	/* CLUSTER_WAIT */
};

/*
 * The next step of a call whose reply was r (from cluster_parse_error),
 * updating *at.  MOVED: the map is stale - refresh it, and resend to the
 * named node.  ASK: ASKING and resend to the named node, once per call
 * (the slot's new owner answers it or redirects for good).  TRYAGAIN: wait
 * and resend, CLUSTER_WAITS times; CLUSTERDOWN: CLUSTER_DOWN_WAITS times
 * (waits of either kind counted together), and refresh the map (a replica
 * may have been promoted).  Past
 * CLUSTER_REDIRECTS_MAX redirections, a second ASK or the last wait: give
 * up.  Nothing a redirection answers has run, so resending never runs a
 * script twice.
 */
struct cluster_step cluster_next(const struct cluster_redirect *r,
				 struct cluster_attempt *at);

#endif /* RL_CLUSTER_H */
