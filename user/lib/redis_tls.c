// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* TLS to Redis under hiredis 0.14.  hiredis reads and writes its context's
 * fd with read(2) and write(2), with no hook to put a TLS library in
 * between, so the context is given a socket pair instead of the TCP socket:
 * hiredis keeps its reader, formatter, callbacks and timeouts unchanged on
 * the plain end, and the relay here pumps bytes between the other end and
 * an OpenSSL connection on the TCP socket, both watched by the same loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "log.h"
#include "redis_tls.h"

#define RELAY_BUF		16384
#define HANDSHAKE_MS		5000

struct redis_tls {
	SSL_CTX *ctx;
	char *server_name;
	unsigned int refs;
	char err[200];
	char logged[200];	/* the last error logged at warning level */
	struct relay *relays;	/* open, each holding a reference */
};

struct relay {
	struct redis_tls *t;
	SSL *ssl;
	int tcp, plain;
	struct loop_watch *wt, *wp;
	struct loop_timer *timer;	/* the handshake's deadline */
	struct relay *prev, *next;	/* in t->relays */
	char where[300];
	bool connected, up;
	char out[RELAY_BUF];		/* from hiredis, for Redis */
	size_t out_off, out_len;
	char in[RELAY_BUF];		/* from Redis, for hiredis */
	size_t in_off, in_len;
};

const char *redis_tls_error(const struct redis_tls *t)
{
	return t->err;
}

void redis_tls_put(struct redis_tls *t)
{
	if (!t || --t->refs)
		return;
	SSL_CTX_free(t->ctx);
	free(t->server_name);
	free(t);
}

static void relay_free(struct relay *r);

void redis_tls_close(struct redis_tls *t)
{
	if (!t)
		return;
	t->refs++;	/* t outlives the relays' puts */
	while (t->relays)
		relay_free(t->relays);
	t->refs--;
	redis_tls_put(t);
}

static int ssl_fail(const char *what, const char *file)
{
	char buf[160];

	ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
	log_error("couldn't use %s on '%s': %s", what, file, buf);
	return -EINVAL;
}

int redis_tls_new(const struct redis_tls_opts *o, struct redis_tls **out)
{
	struct redis_tls *t = calloc(1, sizeof(*t));
	int err = -ENOMEM;

	if (!t)
		return -ENOMEM;
	t->refs = 1;
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (!t->ctx)
		goto fail;
	if (o->server_name && !(t->server_name = strdup(o->server_name)))
		goto fail;
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	/* The relay keeps what SSL_write did not take in its buffer, which
	 * does not move, but may retry with a shorter tail of it. */
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
				 SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	err = -EINVAL;
	if (o->ca) {
		if (SSL_CTX_load_verify_locations(t->ctx, o->ca, NULL) != 1) {
			err = ssl_fail("the CA certificates", o->ca);
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		err = ssl_fail("the system's CA certificates", X509_get_default_cert_file());
		goto fail;
	}
	if (o->cert && SSL_CTX_use_certificate_chain_file(t->ctx, o->cert) != 1) {
		err = ssl_fail("the client certificate", o->cert);
		goto fail;
	}
	if (o->key) {
		if (SSL_CTX_use_PrivateKey_file(t->ctx, o->key, SSL_FILETYPE_PEM) != 1) {
			err = ssl_fail("the client key", o->key);
			goto fail;
		}
		if (SSL_CTX_check_private_key(t->ctx) != 1) {
			err = ssl_fail("the client key (it does not match the "
				       "certificate)", o->key);
			goto fail;
		}
	}
	*out = t;
	return 0;
fail:
	redis_tls_put(t);
	return err;
}

static void relay_free(struct relay *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		r->t->relays = r->next;
	if (r->next)
		r->next->prev = r->prev;
	if (r->timer)
		loop_timer_cancel(r->timer);
	loop_watch_del(r->wt);
	loop_watch_del(r->wp);
	if (r->up) {
		/* Best effort: tell Redis we are done.  What it leaves in the
		 * thread's error queue is no other connection's business. */
		SSL_shutdown(r->ssl);
		ERR_clear_error();
	}
	SSL_free(r->ssl);
	close(r->tcp);
	/* hiredis reads EOF: the server "closed the connection". */
	close(r->plain);
	redis_tls_put(r->t);
	free(r);
}

/* A connection that never came up: say why once, in the log and for the
 * breaker's reason. */
static void relay_fail(struct relay *r, const char *why)
{
	struct redis_tls *t = r->t;

	snprintf(t->err, sizeof(t->err), "TLS: %s", why);
	if (strcmp(t->logged, t->err)) {
		log_warn("couldn't set up TLS with Redis on '%s': %s", r->where, why);
		snprintf(t->logged, sizeof(t->logged), "%s", t->err);
	} else {
		log_debug("couldn't set up TLS with Redis on '%s': %s", r->where, why);
	}
	relay_free(r);
}

/* Names what went wrong in an OpenSSL call that returned ret. */
static void ssl_why(struct relay *r, int ret, char *buf, size_t len)
{
	int e = SSL_get_error(r->ssl, ret);
	long v = SSL_get_verify_result(r->ssl);
	unsigned long q = ERR_get_error();

	if (v != X509_V_OK) {
		snprintf(buf, len, "certificate verify failed: %s",
			 X509_verify_cert_error_string(v));
	} else if (q) {
		char s[160];

		ERR_error_string_n(q, s, sizeof(s));
		snprintf(buf, len, "%s", s);
	} else if (e == SSL_ERROR_SYSCALL && errno) {
		snprintf(buf, len, "%s", strerror(errno));
	} else {
		snprintf(buf, len, "the server closed the connection");
	}
	ERR_clear_error();
}

/*
 * Every relay shares the thread's OpenSSL error queue, and SSL_get_error()
 * reads a failure from it whatever connection left it there: a queue not
 * empty before a read that would block makes it a fatal error, and a
 * healthy connection is dropped because another one broke (one Redis
 * Cluster node killed took its neighbours' connections along).  So the
 * queue is emptied before each SSL call whose result ssl_wait() judges.
 */
static void ssl_before(void)
{
	ERR_clear_error();
}

/* Adds what an SSL call that made no progress waits for to *ev; false for a
 * real failure. */
static bool ssl_wait(struct relay *r, int ret, unsigned int *ev)
{
	switch (SSL_get_error(r->ssl, ret)) {
	case SSL_ERROR_WANT_READ:
		*ev |= LOOP_READ;
		return true;
	case SSL_ERROR_WANT_WRITE:
		*ev |= LOOP_WRITE;
		return true;
	default:
		return false;
	}
}

/* An established connection ended: Redis closed it, or the stream broke.
 * hiredis sees its end close either way, as it would without TLS. */
static void relay_broke(struct relay *r, int ret)
{
	char why[200];

	ssl_why(r, ret, why, sizeof(why));
	log_debug("TLS to Redis on '%s': %s", r->where, why);
	/* No close_notify after a failed read or write: OpenSSL forbids
	 * SSL_shutdown() after a fatal error, and the TCP close says it. */
	r->up = false;
	relay_free(r);
}

/*
 * Moves whatever can move, in both directions, then arms the two watches
 * for what is left.  Bytes from hiredis are read before the handshake ends
 * (so that hiredis closing its end is seen at once) but sent only after it.
 * Frees r when either side is done.
 */
static void pump(struct relay *r)
{
	unsigned int tev, pev;
	char why[200];
	bool moved;
	ssize_t n;
	int ret;

	if (!r->connected) {
		int soerr = 0;
		socklen_t sl = sizeof(soerr);

		if (getsockopt(r->tcp, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		if (soerr) {
			snprintf(why, sizeof(why), "couldn't connect: %s",
				 strerror(soerr));
			relay_fail(r, why);
			return;
		}
		r->connected = true;
	}
	do {
		moved = false;
		tev = 0;
		pev = 0;
		if (r->out_off == r->out_len) {
			n = read(r->plain, r->out, sizeof(r->out));
			if (n > 0) {
				r->out_off = 0;
				r->out_len = (size_t)n;
				moved = true;
			} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
				/* hiredis let go of the connection. */
				relay_free(r);
				return;
			} else {
				pev |= LOOP_READ;
			}
		}
		if (!r->up) {
			ssl_before();
			ret = SSL_connect(r->ssl);
			if (ret == 1) {
				r->up = true;
				r->t->err[0] = '\0';
				r->t->logged[0] = '\0';
				loop_timer_cancel(r->timer);
				r->timer = NULL;
				moved = true;
				continue;
			}
			if (!ssl_wait(r, ret, &tev)) {
				ssl_why(r, ret, why, sizeof(why));
				relay_fail(r, why);
				return;
			}
			break;
		}
		if (r->out_off < r->out_len) {
			ssl_before();
			ret = SSL_write(r->ssl, r->out + r->out_off,
					(int)(r->out_len - r->out_off));
			if (ret > 0) {
				r->out_off += (size_t)ret;
				moved = true;
			} else if (!ssl_wait(r, ret, &tev)) {
				relay_broke(r, ret);
				return;
			}
		}
		if (r->in_off == r->in_len) {
			ssl_before();
			ret = SSL_read(r->ssl, r->in, sizeof(r->in));
			if (ret > 0) {
				r->in_off = 0;
				r->in_len = (size_t)ret;
				moved = true;
			} else if (!ssl_wait(r, ret, &tev)) {
				relay_broke(r, ret);
				return;
			}
		}
		if (r->in_off < r->in_len) {
			n = write(r->plain, r->in + r->in_off, r->in_len - r->in_off);
			if (n > 0) {
				r->in_off += (size_t)n;
				moved = true;
			} else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
				pev |= LOOP_WRITE;
			} else {
				relay_free(r);
				return;
			}
		}
	} while (moved);
	loop_watch_set(r->wt, tev);
	loop_watch_set(r->wp, pev);
}

static void on_ready(struct loop_watch *w, int fd, unsigned int events, void *arg)
{
	(void)w;
	(void)fd;
	(void)events;
	pump(arg);
}

static void on_deadline(struct loop_timer *tm, void *arg)
{
	struct relay *r = arg;

	(void)tm;
	r->timer = NULL;	/* a one-shot timer that fired is gone */
	relay_fail(r, r->connected ? "the TLS handshake timed out" :
				     "couldn't connect: timed out");
}

int redis_tls_wrap(struct redis_tls *t, redisAsyncContext *ac, struct loop *l,
		   const char *host)
{
	const char *name = t->server_name ? t->server_name : host;
	unsigned char addr[16];
	struct relay *r;
	int sv[2] = { -1, -1 };
	int err = -ENOMEM;

	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->tcp = -1;
	r->t = t;
	snprintf(r->where, sizeof(r->where), "%s:%d", host, ac->c.tcp.port);
	r->ssl = SSL_new(t->ctx);
	if (!r->ssl)
		goto fail;
	/* An address is checked against the certificate's IP entries, a name
	 * against its DNS ones (and sent as SNI). */
	if (inet_pton(AF_INET, name, addr) == 1 || inet_pton(AF_INET6, name, addr) == 1) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(r->ssl), name) != 1)
			goto fail;
	} else if (SSL_set1_host(r->ssl, name) != 1 ||
		   SSL_set_tlsext_host_name(r->ssl, name) != 1) {
		goto fail;
	}
	r->tcp = fcntl(ac->c.fd, F_DUPFD_CLOEXEC, 0);
	if (r->tcp < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
		err = -errno;
		goto fail;
	}
	if (SSL_set_fd(r->ssl, r->tcp) != 1) {
		err = -EINVAL;
		goto fail;
	}
	SSL_set_connect_state(r->ssl);
	r->plain = sv[1];
	err = loop_watch_add(l, r->tcp, LOOP_WRITE, on_ready, r, &r->wt);
	if (err)
		goto fail;
	err = loop_watch_add(l, r->plain, LOOP_READ, on_ready, r, &r->wp);
	if (err)
		goto fail_wt;
	err = loop_timer_add(l, HANDSHAKE_MS, 0, on_deadline, r, &r->timer);
	if (err)
		goto fail_wp;
	/* Last, as it cannot be undone: hiredis' fd number now names the
	 * plain end, and the TCP socket lives on as r->tcp. */
	if (dup3(sv[0], ac->c.fd, O_CLOEXEC) < 0) {
		err = -errno;
		goto fail_timer;
	}
	close(sv[0]);
	t->refs++;
	r->next = t->relays;
	if (r->next)
		r->next->prev = r;
	t->relays = r;
	return 0;
fail_timer:
	loop_timer_cancel(r->timer);
fail_wp:
	loop_watch_del(r->wp);
fail_wt:
	loop_watch_del(r->wt);
fail:
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	}
	if (r->tcp >= 0)
		close(r->tcp);
	SSL_free(r->ssl);
	free(r);
	return err;
}
