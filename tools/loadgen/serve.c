/* loadgen --serve: a TCP server that accepts every connection and closes it
 * at once, counting them.  The far end of every lab and e2e test, so tests
 * need nothing from the distribution beyond what rlgate builds. */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "loadgen.h"

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int open_listener(const struct lg_addr *a, int backlog)
{
	int one = 1, fd, err;

	fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	/* IPv4 and IPv6 listeners on one port must not collide over [::]. */
	if (a->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&a->ss, a->len) ||
	    listen(fd, backlog)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Accepts until the queue is empty.  The close is an ordinary one (FIN):
 * a RST from this side could reach the client before it has looked at its
 * connect() result and turn a success into ECONNRESET there. */
static int drain(int lfd, uint64_t *accepted)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd >= 0) {
			(*accepted)++;
			close(fd);
			continue;
		}
		switch (errno) {
		case EAGAIN:
			return 0;
		case EINTR:
		case ECONNABORTED:
		case EPROTO:
			/* the client gave up while queued: not our failure */
			continue;
		case EMFILE:
		case ENFILE:
		case ENOBUFS:
		case ENOMEM:
			/* leave the rest queued; epoll will wake us again */
			return 0;
		default:
			return -errno;
		}
	}
}

int serve_run(const struct lg_serve_opts *o, struct lg_serve_result *res)
{
	int fds[16], ep, ret = 0;
	size_t opened = 0;
	uint64_t t0, end;

	res->accepted = 0;
	res->elapsed_s = 0;
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0) {
		ret = -errno;
		fprintf(stderr, "Error: couldn't create epoll instance on 'serve': %s\n",
			strerror(errno));
		return ret;
	}
	for (; opened < o->n_listen; opened++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = opened };
		int fd = open_listener(&o->listen[opened], o->backlog);

		if (fd < 0) {
			ret = fd;
			fprintf(stderr, "Error: couldn't listen on '%s': %s\n",
				o->listen[opened].label, strerror(-fd));
			goto out;
		}
		fds[opened] = fd;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)) {
			ret = -errno;
			fprintf(stderr, "Error: couldn't watch listener on '%s': %s\n",
				o->listen[opened].label, strerror(errno));
			opened++;
			goto out;
		}
	}
	/* Scripts wait for these lines before they start the load. */
	for (size_t i = 0; i < o->n_listen; i++)
		fprintf(stderr, "loadgen: listening on %s\n", o->listen[i].label);

	t0 = mono_ns();
	end = o->duration_s > 0 ? t0 + (uint64_t)(o->duration_s * 1e9) : UINT64_MAX;
	while (!lg_stop) {
		struct epoll_event evs[16];
		uint64_t now = mono_ns();
		int timeout_ms = -1, nev;

		if (now >= end)
			break;
		if (end != UINT64_MAX)
			timeout_ms = (int)((end - now + 999999) / 1000000);
		nev = epoll_wait(ep, evs, 16, timeout_ms);
		if (nev < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			fprintf(stderr, "Error: couldn't wait for connections on 'epoll': %s\n",
				strerror(errno));
			break;
		}
		for (int k = 0; k < nev; k++) {
			size_t i = (size_t)evs[k].data.u64;
			int r = drain(fds[i], &res->accepted);

			if (r) {
				ret = r;
				fprintf(stderr, "Error: couldn't accept on '%s': %s\n",
					o->listen[i].label, strerror(-r));
				goto out;
			}
		}
	}
	/* A connection the kernel completed before the stop was accepted
	 * too: a server behind on its accepts (a loaded machine) still has
	 * some queued. */
	for (size_t i = 0; i < opened && !ret; i++) {
		ret = drain(fds[i], &res->accepted);
		if (ret)
			fprintf(stderr, "Error: couldn't accept on '%s': %s\n",
				o->listen[i].label, strerror(-ret));
	}
	res->elapsed_s = (double)(mono_ns() - t0) / 1e9;
out:
	for (size_t i = 0; i < opened; i++)
		close(fds[i]);
	close(ep);
	return ret;
}
