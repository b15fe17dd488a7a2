/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The accept loop, client list and stall check that rlagent's control
 * socket and /metrics endpoint share (see server.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

/* Connections the kernel may queue before they are accepted. */
#define SERVER_BACKLOG	64

struct server {
	struct loop *loop;
	int fd;
	struct loop_watch *w;
	char name[128];
	const struct server_ops *ops;
	void *ctx;
	struct server_client *clients;
	unsigned int n_clients;
};

void *server_ctx(const struct server *s)
{
	return s->ctx;
}

struct server_client *server_clients(const struct server *s)
{
	return s->clients;
}

void server_client_free(struct server_client *cl)
{
	struct server *s = cl->srv;
	struct server_client **pp;

	for (pp = &s->clients; *pp; pp = &(*pp)->next) {
		if (*pp == cl) {
			*pp = cl->next;
			break;
		}
	}
	s->n_clients--;
	if (s->ops->close)
		s->ops->close(cl);
	loop_watch_del(cl->w);
	close(cl->fd);
	free(cl);
}

static void on_client(struct loop_watch *w, int fd, unsigned int events,
		      void *arg)
{
	struct server_client *cl = arg;

	(void)w;
	(void)fd;
	cl->srv->ops->event(cl, events);
}

/* A place for one more client: the server is below its limit, or the
 * client that made no progress for longest, evict_ns or more, goes. */
static bool make_room(struct server *s)
{
	struct server_client *cl, *oldest = NULL;
	uint64_t now = loop_now_ns();

	if (s->n_clients < s->ops->max_clients)
		return true;
	if (!s->ops->evict_ns)
		return false;
	for (cl = s->clients; cl; cl = cl->next)
		if (!oldest || cl->last_ns < oldest->last_ns)
			oldest = cl;
	if (!oldest || now - oldest->last_ns < s->ops->evict_ns)
		return false;
	log_debug("client of '%s' made no progress for %llu ms; disconnecting "
		  "it for a new one", s->name,
		  (unsigned long long)((now - oldest->last_ns) / 1000000));
	server_client_free(oldest);
	return true;
}

static void on_accept(struct loop_watch *w, int fd, unsigned int events,
		      void *arg)
{
	struct server *s = arg;

	(void)w;
	(void)events;
	for (;;) {
		struct server_client *cl;
		int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (cfd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				log_warn("couldn't accept connection on '%s': %s",
					 s->name, strerror(errno));
			return;
		}
		if (!make_room(s)) {
			if (s->ops->refuse)
				s->ops->refuse(cfd);
			close(cfd);
			continue;
		}
		cl = calloc(1, s->ops->client_size);
		if (cl) {
			cl->srv = s;
			cl->fd = cfd;
			cl->last_ns = loop_now_ns();
		}
		if (!cl || (s->ops->open && s->ops->open(cl))) {
			free(cl);
			close(cfd);
			continue;
		}
		if (loop_watch_add(s->loop, cfd, LOOP_READ, on_client, cl,
				   &cl->w)) {
			if (s->ops->close)
				s->ops->close(cl);
			free(cl);
			close(cfd);
			continue;
		}
		cl->next = s->clients;
		s->clients = cl;
		s->n_clients++;
	}
}

void server_tick(struct server *s, uint64_t now_ns)
{
	struct server_client *cl, *next;

	if (!s)
		return;
	for (cl = s->clients; cl; cl = next) {
		next = cl->next;
		if (s->ops->idle && s->ops->idle(cl)) {
			if (s->ops->idle_ns && now_ns - cl->last_ns > s->ops->idle_ns) {
				log_debug("client of '%s' idle for %llu s; "
					  "disconnecting", s->name,
					  (unsigned long long)(s->ops->idle_ns /
							       1000000000ULL));
				server_client_free(cl);
			}
			continue;
		}
		if (now_ns - cl->last_ns > s->ops->stall_ns) {
			log_debug("client of '%s' stalled for %llu s; "
				  "disconnecting", s->name,
				  (unsigned long long)(s->ops->stall_ns / 1000000000ULL));
			server_client_free(cl);
		}
	}
}

int server_start(struct loop *l, int fd, const char *name,
		 const struct server_ops *ops, void *ctx, struct server **out)
{
	struct server *s = calloc(1, sizeof(*s));
	int err = 0;

	if (!s) {
		err = -ENOMEM;
	} else if (listen(fd, SERVER_BACKLOG) < 0) {
		err = -errno;
		log_error("couldn't listen on '%s': %s", name, strerror(-err));
	} else {
		s->loop = l;
		s->fd = fd;
		s->ops = ops;
		s->ctx = ctx;
		snprintf(s->name, sizeof(s->name), "%s", name);
		err = loop_watch_add(l, fd, LOOP_READ, on_accept, s, &s->w);
		if (err)
			log_error("couldn't watch socket on '%s': %s", name,
				  strerror(-err));
	}
	if (err) {
		close(fd);
		free(s);
		return err;
	}
	*out = s;
	return 0;
}

void server_stop(struct server *s)
{
	if (!s)
		return;
	while (s->clients)
		server_client_free(s->clients);
	loop_watch_del(s->w);
	close(s->fd);
	free(s);
}
