/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Client side of the rlagent control protocol: one JSON object per line each
 * way over a Unix stream socket, every wait bounded by a timeout.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl_client.h"

static int set_err(struct ctl_client *c, int ret, const char *what)
{
	const char *hint = "";

	if (ret == -ENOENT || ret == -ECONNREFUSED)
		hint = " (is rlagent running?)";
	else if (ret == -EACCES || ret == -EPERM)
		hint = " (run as root or as a member of rlagent's --control-group)";
	else if (ret == -ETIMEDOUT || ret == -EAGAIN)
		hint = " (rlagent did not answer in time)";
	snprintf(c->err, sizeof(c->err), "couldn't %s rlagent on '%s': %s%s",
		 what, c->path, strerror(-ret), hint);
	return ret;
}

int ctl_client_connect(struct ctl_client *c, const char *path, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv;
	int ret;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->timeout_ms = timeout_ms > 0 ? timeout_ms : CTL_CLIENT_TIMEOUT_MS;
	if (!path)
		path = CTL_DEFAULT_SOCKET;
	snprintf(c->path, sizeof(c->path), "%s", path);
	if (strlen(path) >= sizeof(sa.sun_path))
		return set_err(c, -ENAMETOOLONG, "connect to");
	memcpy(sa.sun_path, path, strlen(path) + 1);

	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return set_err(c, -errno, "create a socket for");
	/* A Unix connect waits for room in the listen backlog; the send
	 * timeout bounds that wait (and every later send) on Linux. */
	tv.tv_sec = c->timeout_ms / 1000;
	tv.tv_usec = (c->timeout_ms % 1000) * 1000;
	setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		ret = -errno;
		close(c->fd);
		c->fd = -1;
		return set_err(c, ret == -EINPROGRESS ? -ETIMEDOUT : ret,
			       "connect to");
	}
	return 0;
}

int ctl_client_send_line(struct ctl_client *c, const char *line)
{
	size_t n = strlen(line), off = 0;
	char *msg;
	int ret = 0;

	if (c->fd < 0)
		return set_err(c, -ENOTCONN, "send to");
	if (n + 1 > CTL_LINE_MAX || memchr(line, '\n', n)) {
		snprintf(c->err, sizeof(c->err), "request of %zu bytes is not "
			 "one line of at most %d bytes, the protocol's limit",
			 n + 1, CTL_LINE_MAX);
		return -EMSGSIZE;
	}
	msg = malloc(n + 1);
	if (!msg)
		return set_err(c, -ENOMEM, "send to");
	memcpy(msg, line, n);
	msg[n++] = '\n';
	while (off < n) {
		ssize_t w = send(c->fd, msg + off, n - off, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			ret = set_err(c, -errno, "send to");
			break;
		}
		off += (size_t)w;
	}
	free(msg);
	return ret;
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ctl_client_recv_line(struct ctl_client *c, char **line)
{
	long long deadline = now_ms() + c->timeout_ms;

	*line = NULL;
	if (c->fd < 0)
		return set_err(c, -ENOTCONN, "read from");
	for (;;) {
		char *nl = c->len ? memchr(c->buf, '\n', c->len) : NULL;
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		long long left;
		ssize_t r;

		if (nl) {
			size_t n = (size_t)(nl - c->buf);

			*line = malloc(n + 1);
			if (!*line)
				return set_err(c, -ENOMEM, "read from");
			memcpy(*line, c->buf, n);
			(*line)[n] = '\0';
			c->len -= n + 1;
			memmove(c->buf, nl + 1, c->len);
			return 0;
		}
		if (c->len >= CTL_REPLY_MAX) {
			snprintf(c->err, sizeof(c->err), "reply from rlagent on "
				 "'%s' is longer than %d bytes", c->path,
				 CTL_REPLY_MAX);
			return -EMSGSIZE;
		}
		if (c->cap - c->len < 4096) {
			size_t cap = c->cap ? c->cap * 2 : 8192;
			char *b = realloc(c->buf, cap);

			if (!b)
				return set_err(c, -ENOMEM, "read from");
			c->buf = b;
			c->cap = cap;
		}
		left = deadline - now_ms();
		if (left <= 0) {
			snprintf(c->err, sizeof(c->err), "rlagent on '%s' did not "
				 "answer within %d.%03d s: a change it was sent may "
				 "still be made (a longer --timeout waits for it)",
				 c->path, c->timeout_ms / 1000, c->timeout_ms % 1000);
			return -ETIMEDOUT;
		}
		r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			return set_err(c, -EINTR, "read a reply from");
		if (r < 0)
			return set_err(c, -errno, "read a reply from");
		if (r == 0)
			continue;
		r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0)
			return set_err(c, -errno, "read a reply from");
		if (r == 0) {
			snprintf(c->err, sizeof(c->err), "rlagent on '%s' closed "
				 "the connection without a reply", c->path);
			return -ECONNRESET;
		}
		c->len += (size_t)r;
	}
}

int ctl_client_request(struct ctl_client *c, json_t *req, json_t **reply)
{
	char *out;
	int ret;

	*reply = NULL;
	out = json_dumps(req, JSON_COMPACT);
	if (!out)
		return set_err(c, -ENOMEM, "encode a request for");
	ret = ctl_client_send_line(c, out);
	free(out);
	if (ret < 0)
		return ret;
	return ctl_client_reply(c, reply);
}

int ctl_client_reply(struct ctl_client *c, json_t **reply)
{
	json_error_t jerr;
	char *line;
	int ret;

	*reply = NULL;
	ret = ctl_client_recv_line(c, &line);
	if (ret < 0)
		return ret;
	*reply = json_loads(line, JSON_REJECT_DUPLICATES, &jerr);
	free(line);
	if (!json_is_object(*reply)) {
		json_decref(*reply);
		*reply = NULL;
		snprintf(c->err, sizeof(c->err), "rlagent on '%s' sent a reply "
			 "that is not a JSON object", c->path);
		return -EPROTO;
	}
	return 0;
}

void ctl_client_close(struct ctl_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->buf);
	c->buf = NULL;
	c->len = c->cap = 0;
}
