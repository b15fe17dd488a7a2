/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* TLS under hiredis' asynchronous API: hiredis (0.14, which knows no TLS)
 * speaks plain RESP on one end of a socket pair, and a relay of ours on the
 * io_uring loop moves the bytes through an OpenSSL connection to Redis.
 */
#ifndef RL_REDIS_TLS_H
#define RL_REDIS_TLS_H

#include <hiredis/async.h>
#include "loop.h"

struct redis_tls_opts {
	const char *ca;			/* PEM CA bundle; NULL: the system's */
	const char *cert, *key;		/* client certificate, or NULL */
	const char *server_name;	/* name checked; NULL: the host dialled */
};

struct redis_tls;

/* Loads the CA and the client certificate: every connection wrapped later
 * shares them.  Errors are logged ("Error: ..." naming the file).  0 or
 * -errno (-EINVAL for a file OpenSSL cannot use). */
int redis_tls_new(const struct redis_tls_opts *o, struct redis_tls **out);

/* Drops the caller's reference: connections still open keep theirs.  NULL
 * is fine. */
void redis_tls_put(struct redis_tls *t);

/* At the owner's close, once every hiredis context wrapped is freed:
 * frees the relays still open (the loop will not run again for them to
 * see hiredis' end close), then drops the caller's reference.  NULL is
 * fine. */
void redis_tls_close(struct redis_tls *t);

/* Moves ac, just returned by redisAsyncConnect(host, ...), under TLS: the
 * TCP socket hiredis connected becomes the relay's, and ac's fd (the same
 * number) the plain end of a socket pair.  Call it before
 * redis_loop_attach().  A failed connect or handshake, a certificate the CA
 * does not vouch for, or a name that does not match closes the plain end:
 * hiredis sees the server close the connection, and redis_tls_error() says
 * why.  0 or -errno (ac untouched). */
int redis_tls_wrap(struct redis_tls *t, redisAsyncContext *ac, struct loop *l,
		   const char *host);

/* Why the last TLS connection failed ("" since one succeeded): the reason
 * to give for an outage instead of hiredis' "connection closed". */
const char *redis_tls_error(const struct redis_tls *t);

#endif /* RL_REDIS_TLS_H */
