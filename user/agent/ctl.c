/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The control socket (see ctl.h and docs/control-protocol.md): line framing
 * with bounded per-client buffers, JSON requests dispatched to the agent's
 * all-or-nothing operations, one JSON line back per request.
 */
#include <errno.h>
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
#include "broker.h"
#include "ctl.h"
#include "log.h"
#include "state.h"

struct ctl_client {
	struct ctl *ctl;
	int fd;
	struct loop_watch *w;
	char *in;		/* CTL_LINE_MAX bytes */
	size_t in_len;
	char *out;
	size_t out_len, out_cap;
	uint64_t last_ns;	/* last byte moved in either direction */
	bool closing;		/* close once out is flushed */
	bool exit_after;	/* stop the agent once out is flushed */
	struct ctl_client *next;
};

struct ctl {
	struct agent *a;
	int fd;
	struct loop_watch *w;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct ctl_client *clients;
	unsigned int n_clients;
	/* Armed while a client has requests left over from its turn: their
	 * next turn, after the rest of the loop has had one. */
	struct loop_timer *resume;
};

static void client_free(struct ctl_client *cl)
{
	struct ctl *c = cl->ctl;
	struct ctl_client **pp;

	for (pp = &c->clients; *pp; pp = &(*pp)->next) {
		if (*pp == cl) {
			*pp = cl->next;
			break;
		}
	}
	c->n_clients--;
	loop_watch_del(cl->w);
	close(cl->fd);
	free(cl->in);
	free(cl->out);
	free(cl);
}

static int queue(struct ctl_client *cl, const char *data, size_t len)
{
	if (cl->out_len + len > cl->out_cap) {
		size_t cap = cl->out_cap ? cl->out_cap : 4096;
		char *p;

		while (cap < cl->out_len + len)
			cap *= 2;
		p = realloc(cl->out, cap);
		if (!p)
			return -ENOMEM;
		cl->out = p;
		cl->out_cap = cap;
	}
	memcpy(cl->out + cl->out_len, data, len);
	cl->out_len += len;
	return 0;
}

static void reply(struct ctl_client *cl, json_t *r)
{
	char *s;

	/* A reply jansson could not build (say, a string that is not UTF-8)
	 * still gets an answer rather than a silent close. */
	if (!r)
		r = json_pack("{s:b,s:s,s:s}", "ok", 0, "error", "couldn't encode "
			      "the reply", "code", "internal");
	s = json_dumps(r, JSON_COMPACT);

	json_decref(r);
	if (!s || queue(cl, s, strlen(s)) || queue(cl, "\n", 1))
		cl->closing = true;	/* out of memory: give up on it */
	free(s);
}

static void reply_err(struct ctl_client *cl, enum agent_code code,
		      const char *msg)
{
	char clean[POLICY_ERR_MAX * 2];

	/* Every message gets an answer: one quoting a cut-off character of
	 * the client's input would not be a JSON string otherwise. */
	snprintf(clean, sizeof(clean), "%s", msg);
	policy_clean_utf8(clean);
	reply(cl, json_pack("{s:b,s:s,s:s}", "ok", 0, "error", clean, "code",
			    agent_code_name(code)));
}

static json_t *ok(void)
{
	return json_pack("{s:b}", "ok", 1);
}

/* Reads a tenant object from a request.  "id" is read-only: a client may
 * send back what tenant.get returned, so it is ignored rather than
 * refused. */
static int tenant_arg(const json_t *j, struct policy_tenant *t, char *err)
{
	json_t *copy;
	int r;

	if (!json_is_object(j)) {
		snprintf(err, POLICY_ERR_MAX, "a tenant must be a JSON object");
		return -EINVAL;
	}
	copy = json_copy((json_t *)j);
	if (!copy) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return -ENOMEM;
	}
	json_object_del(copy, "id");
	r = policy_tenant_from_json(copy, t, err);
	json_decref(copy);
	return r;
}

static const char *name_arg(struct ctl_client *cl, const json_t *req)
{
	json_t *v = json_object_get(req, "name");

	if (!json_is_string(v)) {
		reply_err(cl, AGENT_INVALID, "field 'name' is missing or not a "
			  "string");
		return NULL;
	}
	return json_string_value(v);
}

static void cmd_version(struct ctl_client *cl, const json_t *req)
{
	(void)req;
	reply(cl, json_pack("{s:b,s:s}", "ok", 1, "version", RLGATE_VERSION));
}

static void cmd_status(struct ctl_client *cl, const json_t *req)
{
	struct agent *a = cl->ctl->a;
	json_t *ifs = json_array();

	(void)req;
	for (unsigned int i = 0; i < a->kern.n_ifaces; i++)
		json_array_append_new(ifs, json_pack("{s:s,s:s}", "name",
			a->kern.ifaces[i].name, "attach",
			kern_mode_name(a->kern.ifaces[i].mode)));
	json_t *r = json_pack("{s:b,s:s,s:I,s:s,s:o,s:I,s:s,s:s,s:I}",
			      "ok", 1, "version", RLGATE_VERSION,
			      "uptime_s", (json_int_t)((loop_now_ns() -
						       a->start_mono_ns) / 1000000000ULL),
			      "mode", a->broker ? "fleet" : "standalone",
			      "interfaces", ifs,
			      "tenants", (json_int_t)a->n_tenants,
			      "pin_dir", a->kern.pin_dir,
			      "state_dir", a->opts.state_dir,
			      "policy_version", (json_int_t)a->policy_version);

	if (r && a->broker) {
		struct broker_stats bs;

		broker_stats(a->broker, &bs);
		json_object_set_new(r, "redis", json_pack("{s:s,s:s,s:I,s:I}",
				    "address", bs.address, "state", bs.state,
				    "calls", (json_int_t)bs.redis_calls,
				    "errors", (json_int_t)bs.redis_errors));
		json_object_set_new(r, "live_agents", json_integer((json_int_t)bs.live_agents));
		json_object_set_new(r, "agent_id", json_string(bs.agent_id));
		json_object_set_new(r, "agent_instance", json_string(bs.nonce));
		json_object_set_new(r, "agent_id_conflict", json_boolean(bs.agent_id_conflict));
		json_object_set_new(r, "broker", json_string(bs.healthy ? "healthy" :
							     "degraded"));
		json_object_set_new(r, "broker_transitions",
				    json_integer((json_int_t)bs.transitions));
		if (!bs.healthy) {
			json_object_set_new(r, "degraded_since",
					    json_integer((json_int_t)bs.degraded_since));
			json_object_set_new(r, "degraded_reason", json_string(bs.reason));
		}
	}
	reply(cl, r);
}

static void cmd_tenant_set(struct ctl_client *cl, const json_t *req)
{
	struct agent *a = cl->ctl->a;
	char err[POLICY_ERR_MAX];
	struct policy_tenant t;
	enum agent_code c;

	if (!json_object_get(req, "tenant")) {
		reply_err(cl, AGENT_INVALID, "field 'tenant' is missing");
		return;
	}
	if (tenant_arg(json_object_get(req, "tenant"), &t, err)) {
		reply_err(cl, AGENT_INVALID, err);
		return;
	}
	c = agent_tenant_set(a, &t, err);
	if (c != AGENT_OK) {
		reply_err(cl, c, err);
		return;
	}
	log_info("tenant %s set (slot %u)", t.name, agent_find(a, t.name)->slot);
	reply(cl, json_pack("{s:b,s:o}", "ok", 1, "tenant",
			    agent_tenant_json(agent_find(a, t.name))));
}

static void cmd_tenant_get(struct ctl_client *cl, const json_t *req)
{
	const char *name = name_arg(cl, req);
	struct agent_tenant *t;
	char err[POLICY_ERR_MAX];

	if (!name)
		return;
	t = agent_find(cl->ctl->a, name);
	if (!t) {
		snprintf(err, sizeof(err), "no tenant named '%.64s'", name);
		reply_err(cl, AGENT_NOT_FOUND, err);
		return;
	}
	reply(cl, json_pack("{s:b,s:o}", "ok", 1, "tenant", agent_tenant_json(t)));
}

static void cmd_tenant_list(struct ctl_client *cl, const json_t *req)
{
	struct agent *a = cl->ctl->a;
	json_t *arr = json_array();

	(void)req;
	for (size_t i = 0; i < a->n_tenants; i++)
		json_array_append_new(arr, agent_tenant_json(&a->tenants[i]));
	reply(cl, json_pack("{s:b,s:o}", "ok", 1, "tenants", arr));
}

static void cmd_tenant_del(struct ctl_client *cl, const json_t *req)
{
	const char *name = name_arg(cl, req);
	char err[POLICY_ERR_MAX];
	enum agent_code c;

	if (!name)
		return;
	c = agent_tenant_del(cl->ctl->a, name, err);
	if (c != AGENT_OK) {
		reply_err(cl, c, err);
		return;
	}
	log_info("tenant %s deleted", name);
	reply(cl, ok());
}

static void cmd_apply(struct ctl_client *cl, const json_t *req)
{
	json_t *arr = json_object_get(req, "tenants"), *item;
	char err[POLICY_ERR_MAX], msg[POLICY_ERR_MAX + 32];
	struct policy_tenant *ts;
	unsigned int counts[3] = { 0 };
	enum agent_code c;
	size_t i;

	if (!json_is_array(arr)) {
		reply_err(cl, AGENT_INVALID, "field 'tenants' is missing or not "
			  "an array");
		return;
	}
	ts = calloc(json_array_size(arr) + 1, sizeof(*ts));
	if (!ts) {
		reply_err(cl, AGENT_INTERNAL, "out of memory");
		return;
	}
	json_array_foreach(arr, i, item) {
		if (tenant_arg(item, &ts[i], err)) {
			snprintf(msg, sizeof(msg), "tenant #%zu: %s", i, err);
			reply_err(cl, AGENT_INVALID, msg);
			goto cleanup;
		}
	}
	c = agent_apply(cl->ctl->a, ts, json_array_size(arr), counts, err);
	if (c != AGENT_OK) {
		reply_err(cl, c, err);
		goto cleanup;
	}
	log_info("policy applied: %u added, %u updated, %u removed", counts[0],
		 counts[1], counts[2]);
	reply(cl, json_pack("{s:b,s:i,s:i,s:i}", "ok", 1, "added", counts[0],
			    "updated", counts[1], "removed", counts[2]));
cleanup:
	free(ts);
}

static json_t *stats_json(struct agent *a, const struct agent_tenant *t)
{
	struct agent_tenant_stats st;

	json_t *j;

	agent_tenant_stats(a, t, &st);
	j = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f}",
			 "tenant", t->pol.name,
			 "admitted", (json_int_t)st.s.admitted,
			 "denied", (json_int_t)st.s.denied,
			 "shadow_denied", (json_int_t)st.s.shadow_denied,
			 "retransmits", (json_int_t)st.s.retransmits,
			 "unparsed", (json_int_t)st.s.unparsed,
			 "rst_sent", (json_int_t)st.s.rst_sent,
			 "tokens", (json_int_t)st.tokens,
			 "admit_rate", st.admit_rate,
			 "deny_rate", st.deny_rate);
	if (j && a->broker) {
		struct broker_tenant_stats bt;

		broker_tenant_stats(a->broker, t, &bt);
		json_object_set_new(j, "leases", json_integer((json_int_t)bt.leases));
		json_object_set_new(j, "degraded", json_integer((json_int_t)st.s.degraded));
		json_object_set_new(j, "tokens_leased", json_integer((json_int_t)bt.tokens_leased));
		json_object_set_new(j, "tokens_refunded", json_integer((json_int_t)bt.tokens_refunded));
		json_object_set_new(j, "redis_calls", json_integer((json_int_t)bt.redis_calls));
		json_object_set_new(j, "lease_size", json_integer((json_int_t)bt.lease_size));
		json_object_set_new(j, "overshoot_bound", json_integer((json_int_t)bt.overshoot_bound));
		json_object_set_new(j, "tokens_owed", json_integer((json_int_t)bt.owed));
		json_object_set_new(j, "static_charged", json_integer((json_int_t)bt.static_charged));
	}
	return j;
}

static void cmd_stats(struct ctl_client *cl, const json_t *req)
{
	struct agent *a = cl->ctl->a;
	json_t *v = json_object_get(req, "name"), *arr;
	char err[POLICY_ERR_MAX];

	if (v && !json_is_null(v)) {
		struct agent_tenant *t;

		if (!json_is_string(v)) {
			reply_err(cl, AGENT_INVALID, "field 'name' is not a string");
			return;
		}
		t = agent_find(a, json_string_value(v));
		if (!t) {
			snprintf(err, sizeof(err), "no tenant named '%.64s'",
				 json_string_value(v));
			reply_err(cl, AGENT_NOT_FOUND, err);
			return;
		}
		arr = json_array();
		json_array_append_new(arr, stats_json(a, t));
	} else {
		arr = json_array();
		for (size_t i = 0; i < a->n_tenants; i++)
			json_array_append_new(arr, stats_json(a, &a->tenants[i]));
	}
	reply(cl, json_pack("{s:b,s:o}", "ok", 1, "stats", arr));
}

static void cmd_detach(struct ctl_client *cl, const json_t *req)
{
	struct agent *a = cl->ctl->a;
	json_t *v = json_object_get(req, "iface");
	char err[POLICY_ERR_MAX];
	int e;

	if (!json_is_string(v)) {
		reply_err(cl, AGENT_INVALID, "field 'iface' is missing or not a "
			  "string");
		return;
	}
	e = kern_detach(&a->kern, json_string_value(v));
	if (e == -ENOENT) {
		snprintf(err, sizeof(err), "interface '%.32s' is not attached",
			 json_string_value(v));
		reply_err(cl, AGENT_NOT_FOUND, err);
		return;
	}
	if (e) {
		snprintf(err, sizeof(err), "couldn't detach from '%.32s': %s",
			 json_string_value(v), strerror(-e));
		reply_err(cl, AGENT_INTERNAL, err);
		return;
	}
	if (a->kern.n_ifaces == 0) {
		/* Nothing enforces any more: the pins would only keep dead
		 * state alive.  The policy file stays for the next start. */
		kern_unpin(&a->kern);
		log_info("last interface detached; pins removed, exiting");
		cl->exit_after = true;
	}
	reply(cl, json_pack("{s:b,s:i}", "ok", 1, "remaining",
			    (int)a->kern.n_ifaces));
}

static const struct {
	const char *name;
	void (*fn)(struct ctl_client *cl, const json_t *req);
} commands[] = {
	{ "version", cmd_version },
	{ "status", cmd_status },
	{ "tenant.set", cmd_tenant_set },
	{ "tenant.get", cmd_tenant_get },
	{ "tenant.list", cmd_tenant_list },
	{ "tenant.del", cmd_tenant_del },
	{ "apply", cmd_apply },
	{ "stats", cmd_stats },
	{ "detach", cmd_detach },
};

static void handle_line(struct ctl_client *cl, const char *line, size_t len)
{
	json_error_t jerr;
	json_t *req, *cmd;
	char msg[256];

	if (len > 0 && line[len - 1] == '\r')
		len--;
	if (len == 0)
		return;
	req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!req || !json_is_object(req)) {
		snprintf(msg, sizeof(msg), "request is not a JSON object%s%s",
			 req ? "" : ": ", req ? "" : jerr.text);
		reply_err(cl, AGENT_INVALID, msg);
		json_decref(req);
		return;
	}
	cmd = json_object_get(req, "cmd");
	if (!json_is_string(cmd)) {
		reply_err(cl, AGENT_INVALID, "field 'cmd' is missing or not a "
			  "string");
		json_decref(req);
		return;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(commands[i].name, json_string_value(cmd)) == 0) {
			log_debug("control: %s", commands[i].name);
			commands[i].fn(cl, req);
			json_decref(req);
			return;
		}
	}
	snprintf(msg, sizeof(msg), "unknown command '%.64s': expected version, "
		 "status, tenant.set, tenant.get, tenant.list, tenant.del, "
		 "apply, stats or detach", json_string_value(cmd));
	reply_err(cl, AGENT_INVALID, msg);
	json_decref(req);
}

/* Whether a whole request waits in the input buffer. */
static bool line_pending(const struct ctl_client *cl)
{
	return memchr(cl->in, '\n', cl->in_len) != NULL;
}

/* Writes what the socket takes now.  Sets closing if the client is gone. */
static void send_some(struct ctl_client *cl)
{
	while (cl->out_len > 0) {
		ssize_t n = send(cl->fd, cl->out, cl->out_len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				log_debug("control client write failed: %s",
					  strerror(errno));
				cl->out_len = 0;
				cl->closing = true;
			}
			return;
		}
		memmove(cl->out, cl->out + n, cl->out_len - (size_t)n);
		cl->out_len -= (size_t)n;
		cl->last_ns = loop_now_ns();
	}
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
	size_t pos = 0;
	char *nl;

	while (!cl->closing &&
	       (nl = memchr(cl->in + pos, '\n', cl->in_len - pos))) {
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
	}
	memmove(cl->in, cl->in + pos, cl->in_len - pos);
	cl->in_len -= pos;
	if (cl->in_len == CTL_LINE_MAX && !line_pending(cl)) {
		char msg[96];

		snprintf(msg, sizeof(msg), "request longer than %d bytes; closing "
			 "the connection", CTL_LINE_MAX);
		reply_err(cl, AGENT_INVALID, msg);
		cl->closing = true;
		cl->in_len = 0;
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
	loop_watch_set(cl->w, ev);
	if (pending && !c->resume &&
	    loop_timer_add(c->a->loop, 0, 0, on_resume, c, &c->resume))
		c->resume = NULL;
}

/* The next turn of every client with requests left over. */
static void on_resume(struct loop_timer *t, void *arg)
{
	struct ctl *c = arg;
	struct ctl_client *cl, *next;

	(void)t;
	c->resume = NULL;	/* one-shot: gone once fired */
	for (cl = c->clients; cl; cl = next) {
		next = cl->next;
		if (cl->closing || !line_pending(cl))
			continue;
		if (!process_input(cl) || !flush(cl))
			continue;
		update_interest(cl);
	}
}

static void on_client(struct loop_watch *w, int fd, unsigned int events,
		      void *arg)
{
	struct ctl_client *cl = arg;

	(void)w;
	if ((events & LOOP_READ) ||
	    ((events & LOOP_HUP) && !cl->closing && !line_pending(cl))) {
		ssize_t n = read(fd, cl->in + cl->in_len, CTL_LINE_MAX - cl->in_len);

		if (n > 0) {
			cl->in_len += (size_t)n;
			cl->last_ns = loop_now_ns();
		} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
			/* Peer gone: answers still queued may be read after
			 * a half-close, so flush before closing. */
			cl->closing = true;
			cl->in_len = 0;
		}
	}
	if (!process_input(cl) || !flush(cl))
		return;
	update_interest(cl);
}

static void on_accept(struct loop_watch *w, int fd, unsigned int events,
		      void *arg)
{
	struct ctl *c = arg;

	(void)w;
	(void)events;
	for (;;) {
		struct ctl_client *cl;
		int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (cfd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				log_warn("couldn't accept connection on '%s': %s",
					 c->path, strerror(errno));
			return;
		}
		if (c->n_clients >= CTL_MAX_CLIENTS) {
			static const char busy[] = "{\"ok\":false,\"error\":\"too many "
				"control connections\",\"code\":\"internal\"}\n";

			if (send(cfd, busy, sizeof(busy) - 1, MSG_NOSIGNAL) < 0)
				log_debug("couldn't refuse a client: %s",
					  strerror(errno));
			close(cfd);
			continue;
		}
		cl = calloc(1, sizeof(*cl));
		if (cl)
			cl->in = malloc(CTL_LINE_MAX);
		if (!cl || !cl->in ||
		    loop_watch_add(c->a->loop, cfd, LOOP_READ, on_client, cl,
				   &cl->w)) {
			if (cl)
				free(cl->in);
			free(cl);
			close(cfd);
			continue;
		}
		cl->ctl = c;
		cl->fd = cfd;
		cl->last_ns = loop_now_ns();
		cl->next = c->clients;
		c->clients = cl;
		c->n_clients++;
	}
}

void ctl_tick(struct ctl *c, uint64_t now_ns)
{
	struct ctl_client *cl = c->clients, *next;

	for (; cl; cl = next) {
		next = cl->next;
		if ((cl->in_len || cl->out_len) &&
		    now_ns - cl->last_ns > CTL_STALL_NS) {
			log_debug("control client stalled for 10 s; disconnecting");
			client_free(cl);
		}
	}
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
	int err, old_gid = 0;
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
	c->fd = -1;
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

	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
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
	err = bind(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	if (gid != (gid_t)-1)
		setfsgid((gid_t)old_gid);
	umask(old);
	if (err) {
		log_error("couldn't bind control socket on '%s': %s", path,
			  strerror(-err));
		goto cleanup;
	}
	if (listen(c->fd, CTL_MAX_CLIENTS) < 0) {
		err = -errno;
		log_error("couldn't listen on '%s': %s", path, strerror(-err));
		goto cleanup;
	}
	err = loop_watch_add(a->loop, c->fd, LOOP_READ, on_accept, c, &c->w);
	if (err)
		goto cleanup;
	log_info("control socket %s", path);
	*out = c;
	return 0;
cleanup:
	if (c->fd >= 0) {
		close(c->fd);
		unlink(path);
	}
	free(c);
	return err;
}

void ctl_close(struct ctl *c)
{
	if (!c)
		return;
	while (c->clients) {
		struct ctl_client *cl = c->clients;

		/* Best effort for a reply still queued (detach's). */
		if (flush(cl))
			client_free(cl);
	}
	if (c->resume)
		loop_timer_cancel(c->resume);
	loop_watch_del(c->w);
	close(c->fd);
	unlink(c->path);
	free(c);
}
