/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Client side of the rlagent control protocol (docs/control-protocol.md):
 * connect to the Unix socket, send one request line, read one reply line,
 * each bounded by a timeout.  Used by rlctl and by tests.
 */
#ifndef RL_CTL_CLIENT_H
#define RL_CTL_CLIENT_H

#include <stddef.h>
#include <jansson.h>

#include "ctl_proto.h"

#define CTL_CLIENT_TIMEOUT_MS		10000
#define CTL_CLIENT_ERR_MAX		512

struct ctl_client {
	int fd;
	int timeout_ms;
	char *buf;		/* bytes received past the last reply line */
	size_t len;
	size_t cap;
	char path[108];
	char err[CTL_CLIENT_ERR_MAX];	/* why the last call failed */
};

/* Connects to path (CTL_DEFAULT_SOCKET if NULL).  0 or -errno, with a
 * message in c->err that names the socket and hints at the likely cause.
 * timeout_ms <= 0 means CTL_CLIENT_TIMEOUT_MS. */
int ctl_client_connect(struct ctl_client *c, const char *path, int timeout_ms);

/* Sends line (which must not contain '\n'; one is appended). */
int ctl_client_send_line(struct ctl_client *c, const char *line);

/* Reads one reply line, without its newline, into a malloc'ed string owned by
 * the caller.  -ETIMEDOUT if none arrives within the timeout, -ECONNRESET if
 * the agent closed the connection, -EMSGSIZE if the line is too long. */
int ctl_client_recv_line(struct ctl_client *c, char **line);

/* One request and its reply as JSON.  The reply is returned whether ok is
 * true or false (the caller decides); -EPROTO if it is not a JSON object. */
int ctl_client_request(struct ctl_client *c, json_t *req, json_t **reply);

/* The second half of ctl_client_request: the reply to a request sent with
 * ctl_client_send_line. */
int ctl_client_reply(struct ctl_client *c, json_t **reply);

void ctl_client_close(struct ctl_client *c);

#endif /* RL_CTL_CLIENT_H */
