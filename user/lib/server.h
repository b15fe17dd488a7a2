/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A listening socket served from the event loop: accepts clients up to a
 * limit, keeps them in a list, watches each one's fd, and disconnects those
 * that stall.  Its owner (rlagent's control socket, its /metrics endpoint)
 * speaks the protocol in its callbacks and never blocks on a client.
 */
#ifndef RL_SERVER_H
#define RL_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "loop.h"

struct server;

/* The server's part of a client.  The owner's client struct starts with it
 * (server_ops.client_size is the whole struct's size). */
struct server_client {
	struct server *srv;
	int fd;
	struct loop_watch *w;	/* created with LOOP_READ interest */
	uint64_t last_ns;	/* accept time; the owner moves it on progress */
	struct server_client *next;
};

struct server_ops {
	size_t client_size;	/* at least sizeof(struct server_client) */
	unsigned int max_clients;
	uint64_t stall_ns;	/* server_tick drops clients stalled this long */
	/* server_tick drops idle clients (idle()) that made no progress for
	 * this long (0: idle clients stay) */
	uint64_t idle_ns;
	/* A client over max_clients takes the place of the one that made no
	 * progress for longest, if that is this long or more; else it is
	 * refused.  0: always refused.  So a few connections held open
	 * cannot keep the others out for longer than this. */
	uint64_t evict_ns;
	/* Optional: sets up a new client's state (zeroed before).  Non-zero
	 * refuses it: the connection is closed without a word. */
	int (*open)(struct server_client *cl);
	/* Readiness of the client's fd (see loop_watch_fn).  May free the
	 * client (server_client_free). */
	void (*event)(struct server_client *cl, unsigned int events);
	/* Optional: frees the owner's state, just before the fd is closed. */
	void (*close)(struct server_client *cl);
	/* Optional: a last word to a client over max_clients, before it is
	 * closed. */
	void (*refuse)(int fd);
	/* Optional: whether a client may wait without a deadline (nothing
	 * half-read or unsent); without it every client has stall_ns. */
	bool (*idle)(const struct server_client *cl);
};

/* Serves fd, a bound stream socket: listens, and accepts on l from now on.
 * name is for messages (a path, an address).  Takes fd even on failure.
 * 0 or -errno (logged). */
int server_start(struct loop *l, int fd, const char *name,
		 const struct server_ops *ops, void *ctx, struct server **out);

/* Disconnects every client and closes the listening socket. */
void server_stop(struct server *s);

/* Disconnects clients that made no progress for stall_ns (and are not
 * idle), and idle ones that made none for idle_ns. */
void server_tick(struct server *s, uint64_t now_ns);

/* Disconnects one client: the owner's close, the watch, the fd, the
 * memory. */
void server_client_free(struct server_client *cl);

/* The ctx given to server_start, and the first client (the others follow
 * through next; free one only after reading its next). */
void *server_ctx(const struct server *s);
struct server_client *server_clients(const struct server *s);

#endif /* RL_SERVER_H */
