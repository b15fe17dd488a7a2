/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The control socket (see ctl.h and docs/control-protocol.md): line framing
 * with bounded per-client buffers, each client's turn on the loop, one JSON
 * line back per request (the commands are in ctl_cmd.c).
 */
#include <errno.h>
#include <malloc.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent.h"
#include "ctl.h"
#include "ctl_cmd.h"
#include "log.h"
#include "server.h"
#include "state.h"

/* A control client; sc.last_ns is when the last byte moved either way. */
struct ctl_client {
	struct server_client sc;
	struct ctl *ctl;
	char *in;		/* CTL_LINE_MAX bytes */
	size_t in_len;
	size_t scanned;		/* in[0..scanned) holds no newline */
	/* Replies not yet sent: out[out_off .. out_off + out_len).  Sent
	 * bytes are left in front until queue() needs the room. */
	char *out;
	size_t out_off, out_len, out_cap;
	bool closing;		/* close once out is flushed */
	bool exit_after;	/* stop the agent once out is flushed */
	uid_t uid;		/* the peer's (SO_PEERCRED) */
};

struct ctl {
	struct agent *a;
	struct server *srv;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	/* Armed while a client has requests left over from its turn: their
	 * next turn, after the rest of the loop has had one. */
	struct loop_timer *resume;
};

static void client_free(struct ctl_client *cl)
{
	server_client_free(&cl->sc);
}

static int queue(struct ctl_client *cl, const char *data, size_t len)
{
	/* A reply of megabytes goes out in many sends: moving the rest to
	 * the front after each would copy it over and over.  The sent bytes
	 * are dropped when the end is reached, and only once there are at
	 * least as many of them as there are bytes to move. */
	if (cl->out_off + cl->out_len + len > cl->out_cap &&
	    cl->out_off && cl->out_off >= cl->out_len) {
		memmove(cl->out, cl->out + cl->out_off, cl->out_len);
		cl->out_off = 0;
	}
	if (cl->out_off + cl->out_len + len > cl->out_cap) {
		size_t cap = cl->out_cap ? cl->out_cap : 4096;
		char *p;

		while (cap < cl->out_off + cl->out_len + len)
			cap *= 2;
		p = realloc(cl->out, cap);
		if (!p)
			return -ENOMEM;
		cl->out = p;
		cl->out_cap = cap;
	}
	memcpy(cl->out + cl->out_off + cl->out_len, data, len);
	cl->out_len += len;
	return 0;
}

/* Queues the reply r (taken over).  Returns its length. */
static size_t reply(struct ctl_client *cl, json_t *r)
{
	size_t len = 0;
	char *s;

	/* A reply jansson could not build (say, a string that is not UTF-8)
	 * still gets an answer rather than a silent close. */
	if (!r)
		r = json_pack("{s:b,s:s,s:s}", "ok", 0, "error", "couldn't encode "
			      "the reply", "code", "internal");
	s = json_dumps(r, JSON_COMPACT);

	json_decref(r);
	if (s)
		len = strlen(s);
	if (!s || queue(cl, s, len) || queue(cl, "\n", 1))
		cl->closing = true;	/* out of memory: give up on it */
	free(s);
	return len;
}

/* A request or reply this long (an apply or a list of 100,000 tenants)
 * leaves many small pieces in the heap, between what stays. */
#define CTL_TRIM_BYTES	(1u << 20)

/* Answers one line of input; blank lines get no answer. */
static void handle_line(struct ctl_client *cl, const char *line, size_t len)
{
	struct ctl_call call = { .a = cl->ctl->a };

	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (len == 0)
		return;
	if (reply(cl, ctl_answer(&call, line, len)) >= CTL_TRIM_BYTES ||
	    len >= CTL_TRIM_BYTES)
		malloc_trim(0);	/* their pages back to the system */
	if (call.exit_after)
		cl->exit_after = true;
}

/* Whether a whole request waits in the input buffer. */
static bool line_pending(struct ctl_client *cl)
{
	/* a request of megabytes comes in many reads: each is searched
	 * once, not the whole request again after every one */
	if (memchr(cl->in + cl->scanned, '\n', cl->in_len - cl->scanned))
		return true;
	cl->scanned = cl->in_len;
	return false;
}

/* Writes what the socket takes now.  Sets closing if the client is gone. */
static void send_some(struct ctl_client *cl)
{
	while (cl->out_len > 0) {
		ssize_t n = send(cl->sc.fd, cl->out + cl->out_off, cl->out_len,
				 MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				log_debug("control client write failed: %s",
					  strerror(errno));
				cl->out_off = cl->out_len = 0;
				cl->closing = true;
			}
			return;
		}
		cl->out_off += (size_t)n;
		cl->out_len -= (size_t)n;
		cl->sc.last_ns = loop_now_ns();
	}
	cl->out_off = 0;
}

/*
 * Answers the whole requests in the input buffer for at most CTL_SLICE_NS
 * (at least one), then gives the loop back; on_resume comes back for the
 * rest after one turn of the loop.  A client with CTL_OUT_MAX of replies
 * unread that still has requests waiting is cut off: it is pipelining
 * without reading, and its replies would otherwise grow without bound.
 * Returns false if the client was freed.
 */
static bool process_input(struct ctl_client *cl)
{
	uint64_t start = loop_now_ns();
	size_t pos = 0, from = cl->scanned;
	char *nl = NULL;

	while (!cl->closing &&
	       (nl = memchr(cl->in + from, '\n', cl->in_len - from))) {
		size_t len = (size_t)(nl - (cl->in + pos));

		if (pos > 0 && loop_now_ns() - start >= CTL_SLICE_NS)
			break;
		if (cl->out_len >= CTL_OUT_MAX)
			send_some(cl);
		if (cl->out_len >= CTL_OUT_MAX) {
			log_warn("control client has %zu bytes of replies unread "
				 "and sends more requests; disconnecting it",
				 cl->out_len);
			client_free(cl);
			return false;
		}
		handle_line(cl, cl->in + pos, len);
		pos += len + 1;
		from = pos;
	}
	memmove(cl->in, cl->in + pos, cl->in_len - pos);
	cl->in_len -= pos;
	cl->scanned = nl || cl->closing ? 0 : cl->in_len;
	if (cl->in_len == CTL_LINE_MAX && !line_pending(cl)) {
		char msg[96];

		snprintf(msg, sizeof(msg), "request longer than %d bytes; closing "
			 "the connection", CTL_LINE_MAX);
		reply(cl, ctl_error(AGENT_INVALID, msg));
		cl->closing = true;
		cl->in_len = cl->scanned = 0;
	}
	return true;
}

/* Writes what it can.  Returns false if the client is gone (freed). */
static bool flush(struct ctl_client *cl)
{
	send_some(cl);
	if (cl->out_len == 0 && cl->exit_after) {
		cl->ctl->a->exit_code = 0;
		loop_stop(cl->ctl->a->loop);
	}
	if (cl->out_len == 0 && cl->closing) {
		client_free(cl);
		return false;
	}
	return true;
}

static void on_resume(struct loop_timer *t, void *arg);

/* Sets what the client waits for after its turn: more requests once those
 * read are answered (a client that sends faster than it is served waits in
 * its socket buffer), the socket's room for replies, and, for requests left
 * over, the next turn (whether or not it reads its replies: one that does
 * not is cut off by process_input, not left waiting). */
static void update_interest(struct ctl_client *cl)
{
	struct ctl *c = cl->ctl;
	bool pending = !cl->closing && line_pending(cl);
	unsigned int ev = 0;

	if (!cl->closing && !pending)
		ev |= LOOP_READ;
	if (cl->out_len)
		ev |= LOOP_WRITE;
	loop_watch_set(cl->sc.w, ev);
	if (pending && !c->resume &&
	    loop_timer_add(c->a->loop, 0, 0, on_resume, c, &c->resume))
		c->resume = NULL;
}

/* The next turn of every client with requests left over. */
static void on_resume(struct loop_timer *t, void *arg)
{
	struct ctl *c = arg;
	struct server_client *sc, *next;

	(void)t;
	c->resume = NULL;	/* one-shot: gone once fired */
	for (sc = server_clients(c->srv); sc; sc = next) {
		struct ctl_client *cl = (struct ctl_client *)sc;

		next = sc->next;
		if (cl->closing || !line_pending(cl))
			continue;
		if (!process_input(cl) || !flush(cl))
			continue;
		update_interest(cl);
	}
}

static void on_client(struct server_client *sc, unsigned int events)
{
	struct ctl_client *cl = (struct ctl_client *)sc;

	if ((events & LOOP_READ) ||
	    ((events & LOOP_HUP) && !cl->closing && !line_pending(cl))) {
		ssize_t n = read(sc->fd, cl->in + cl->in_len,
				 CTL_LINE_MAX - cl->in_len);

		if (n > 0) {
			cl->in_len += (size_t)n;
			sc->last_ns = loop_now_ns();
		} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			/* Peer gone: answers still queued may be read after
			 * a half-close, so flush before closing. */
			cl->closing = true;
			cl->in_len = cl->scanned = 0;
		}
	}
	if (!process_input(cl) || !flush(cl))
		return;
	update_interest(cl);
}

/* Sets up a new client; refuses it (-EUSERS) when its user, other than
 * root, already holds CTL_MAX_PER_UID connections. */
static int client_open(struct server_client *sc)
{
	struct ctl_client *cl = (struct ctl_client *)sc;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	unsigned int held = 0;

	if (getsockopt(sc->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	cl->uid = cred.uid;
	for (struct server_client *o = server_clients(sc->srv); o && cl->uid; o = o->next)
		held += ((struct ctl_client *)o)->uid == cl->uid;
	if (held >= CTL_MAX_PER_UID) {
		log_debug("control client of uid %u refused: it holds %u "
			  "connections", (unsigned int)cl->uid, held);
		return -EUSERS;
	}
	cl->ctl = server_ctx(sc->srv);
	cl->in = malloc(CTL_LINE_MAX);
	return cl->in ? 0 : -ENOMEM;
}

static void client_close(struct server_client *sc)
{
	struct ctl_client *cl = (struct ctl_client *)sc;

	free(cl->in);
	free(cl->out);
	/* the pieces a long reply was built from sat below it in the heap */
	if (cl->out_cap >= CTL_TRIM_BYTES)
		malloc_trim(0);
}

/* Waiting for a request is not stalling; a line half-read or replies
 * unread are. */
static bool client_idle(const struct server_client *sc)
{
	const struct ctl_client *cl = (const struct ctl_client *)sc;

	return !cl->in_len && !cl->out_len;
}

static void refuse(int fd)
{
	static const char busy[] = "{\"ok\":false,\"error\":\"too many "
		"control connections\",\"code\":\"internal\"}\n";

	if (send(fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL) < 0)
		log_debug("couldn't refuse a client: %s", strerror(errno));
}

static const struct server_ops ctl_ops = {
	.client_size = sizeof(struct ctl_client),
	.max_clients = CTL_MAX_CLIENTS,
	.stall_ns = CTL_STALL_NS,
	.idle_ns = CTL_IDLE_NS,
	.evict_ns = CTL_EVICT_NS,
	.open = client_open,
	.event = on_client,
	.close = client_close,
	.refuse = refuse,
	.idle = client_idle,
};

void ctl_tick(struct ctl *c, uint64_t now_ns)
{
	server_tick(c->srv, now_ns);
}

/* True if something accepts connections on path: an agent is running. */
static bool socket_live(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool live;

	if (fd < 0)
		return false;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return live;
}

int ctl_open(struct agent *a, const char *path, gid_t gid, struct ctl **out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[sizeof(sa.sun_path)], msg[STATE_ERR_MAX];
	struct ctl *c;
	struct stat st;
	int err, fd = -1, old_gid = 0;
	mode_t old;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		log_error("couldn't create control socket on '%s': path longer "
			  "than %zu bytes", path, sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->a = a;
	snprintf(c->path, sizeof(c->path), "%s", path);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	snprintf(dir, sizeof(dir), "%s", path);
	/* 0750: the control group, if any, may reach the socket; nobody
	 * else may put anything next to it. */
	err = state_secure_dir(dirname(dir), 0750, gid, msg, sizeof(msg));
	if (err) {
		log_error("couldn't create control socket on '%s': %s", path, msg);
		goto cleanup;
	}
	if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
		log_error("couldn't create control socket on '%s': something that "
			  "is not a socket is there; remove it or choose another "
			  "--control", path);
		err = -EEXIST;
		goto cleanup;
	}
	if (socket_live(path)) {
		log_error("couldn't create control socket on '%s': another "
			  "rlagent answers there (use --control for a second "
			  "agent)", path);
		err = -EADDRINUSE;
		goto cleanup;
	}
	unlink(path);	/* a stale socket, from an agent that was killed */

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		err = -errno;
		log_error("couldn't create socket on '%s': %s", path,
			  strerror(-err));
		goto cleanup;
	}
	/* Created 0660 and in its group from the start, by the umask and
	 * the file-system group bind creates it with: no window in which
	 * anyone else could connect, and no chmod or chown by path after
	 * the fact, which would follow whatever was put there meanwhile. */
	old = umask(0117);
	if (gid != (gid_t)-1)
		old_gid = setfsgid(gid);
	err = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	if (gid != (gid_t)-1)
		setfsgid((gid_t)old_gid);
	umask(old);
	if (err) {
		log_error("couldn't bind control socket on '%s': %s", path,
			  strerror(-err));
		goto cleanup;
	}
	err = server_start(a->loop, fd, path, &ctl_ops, c, &c->srv);
	if (err) {
		unlink(path);
		fd = -1;	/* closed by server_start */
		goto cleanup;
	}
	log_info("control socket %s", path);
	*out = c;
	return 0;
cleanup:
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	free(c);
	return err;
}

void ctl_close(struct ctl *c)
{
	if (!c)
		return;
	while (server_clients(c->srv)) {
		struct ctl_client *cl = (struct ctl_client *)server_clients(c->srv);

		/* Best effort for a reply still queued (detach's). */
		if (flush(cl))
			client_free(cl);
	}
	if (c->resume)
		loop_timer_cancel(c->resume);
	server_stop(c->srv);
	unlink(c->path);
	free(c);
}
