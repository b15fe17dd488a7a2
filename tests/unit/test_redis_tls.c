// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* test_redis_tls: the TLS layer under hiredis, without a Redis: certificate
 * files OpenSSL cannot use are refused at the start, and a peer that is no
 * TLS server (it answers in clear text and hangs up) ends the connection the
 * way hiredis reports a closed one, with the reason kept for the breaker,
 * through the io_uring loop and without blocking it.  A TLS server that
 * drops one of two connections (as a killed Redis Cluster node does) ends
 * that one only: the other keeps answering, whatever the thread's OpenSSL
 * error queue holds. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "log.h"
#include "loop.h"
#include "redis_loop.h"
#include "redis_tls.h"
#include "check.h"

static void test_unusable_files(void)
{
	struct redis_tls *t = NULL;
	struct redis_tls_opts o = { .ca = "/nonexistent/ca.pem" };

	CHECK(redis_tls_new(&o, &t) == -EINVAL, "a missing CA file is refused");
	CHECK(!t, "nothing returned");
	o = (struct redis_tls_opts){ .ca = "/dev/null" };
	CHECK(redis_tls_new(&o, &t) == -EINVAL, "a CA file that holds no PEM is refused");
	o = (struct redis_tls_opts){ .cert = "/nonexistent/c.pem", .key = "/nonexistent/k.pem" };
	CHECK(redis_tls_new(&o, &t) == -EINVAL, "a missing client certificate is refused");
	o = (struct redis_tls_opts){ 0 };
	CHECK(redis_tls_new(&o, &t) == 0, "the system's CAs will do");
	redis_tls_put(t);
}

struct peer {
	struct loop *loop;
	int listener;
	struct loop_watch *w;
	int connected;		/* 1 ok, -1 failed */
	int disconnected;	/* 1 clean, -1 error */
	int replies;		/* replies to PING, errors included */
};

/* Accepts, answers in clear text as a plain Redis would, hangs up. */
static void on_accept(struct loop_watch *w, int fd, unsigned int events, void *arg)
{
	static const char junk[] = "-ERR not TLS\r\n";
	int c = accept(fd, NULL, NULL);

	(void)events;
	(void)arg;
	if (c >= 0) {
		if (write(c, junk, sizeof(junk) - 1) < 0)
			perror("write");
		close(c);
	}
	loop_watch_set(w, 0);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct peer *p = ac->data;

	p->connected = status == REDIS_OK ? 1 : -1;
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct peer *p = ac->data;

	p->disconnected = status == REDIS_OK ? 1 : -1;
	loop_stop(p->loop);
}

static void on_reply(redisAsyncContext *ac, void *r, void *priv)
{
	struct peer *p = ac->data;

	(void)priv;
	if (r)
		p->replies++;
}

static void on_timeout(struct loop_timer *t, void *arg)
{
	(void)t;
	fprintf(stderr, "timed out\n");
	loop_stop(arg);
}

static void test_not_a_tls_server(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	struct redis_tls_opts o = { 0 };
	struct redis_tls *t;
	struct loop_timer *tm;
	struct peer p = { 0 };
	redisAsyncContext *ac;

	if (loop_new(0, &p.loop)) {
		CHECK(0, "loop");
		return;
	}
	p.listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (p.listener < 0 || bind(p.listener, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(p.listener, 4) || getsockname(p.listener, (struct sockaddr *)&sa, &sl) ||
	    loop_watch_add(p.loop, p.listener, LOOP_READ, on_accept, &p, &p.w) ||
	    redis_tls_new(&o, &t)) {
		CHECK(0, "set up a listener on the loopback: %s", strerror(errno));
		return;
	}
	ac = redisAsyncConnect("127.0.0.1", ntohs(sa.sin_port));
	if (!ac || ac->err) {
		CHECK(0, "connect");
		return;
	}
	ac->data = &p;
	CHECK(redis_tls_wrap(t, ac, p.loop, "127.0.0.1") == 0, "wrap");
	CHECK(redis_loop_attach(ac, p.loop) == 0, "attach");
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	redisAsyncCommand(ac, on_reply, NULL, "PING");
	CHECK(loop_timer_add(p.loop, 5000, 0, on_timeout, p.loop, &tm) == 0, "timer");
	CHECK(loop_run(p.loop) == 0, "loop runs");
	CHECK(p.disconnected == -1, "hiredis sees the connection end with an error (%d)",
	      p.disconnected);
	CHECK(p.replies == 0, "the clear-text answer never reaches hiredis");
	CHECK(strncmp(redis_tls_error(t), "TLS: ", 5) == 0 && strlen(redis_tls_error(t)) > 5,
	      "the reason is kept: '%s'", redis_tls_error(t));
	loop_timer_cancel(tm);
	loop_watch_del(p.w);
	close(p.listener);
	/* The relay is gone: this was the last reference. */
	redis_tls_put(t);
	loop_free(p.loop);
}

/* --- one of two connections dropped -------------------------------------- */

/* A TLS server on the loopback, in a thread of its own (OpenSSL's error
 * queue is per thread: the server's errors are not the relay's). */
struct srv {
	SSL_CTX *ctx;
	int listener;
	uint16_t port;
	int done[2];		/* a pipe: written once the thread is done */
	char why[160];		/* "": the script ran to its end */
};

/* A self-signed certificate for 127.0.0.1, written to pem as the client's
 * CA, and its key; 0 or -1. */
static int make_cert(const char *pem, EVP_PKEY **key, X509 **crt)
{
	EVP_PKEY *k = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	X509_EXTENSION *ext = NULL;
	X509V3_CTX v3;
	FILE *f = NULL;
	int ok;

	ok = k && x && X509_set_version(x, 2) &&
	     ASN1_INTEGER_set(X509_get_serialNumber(x), 1) &&
	     X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
	     X509_gmtime_adj(X509_getm_notAfter(x), 3600) && X509_set_pubkey(x, k) &&
	     X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
					(const unsigned char *)"rlgate-test", -1, -1, 0) &&
	     X509_set_issuer_name(x, X509_get_subject_name(x));
	if (ok) {
		X509V3_set_ctx(&v3, x, x, NULL, NULL, 0);
		ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name,
					  "IP:127.0.0.1");
		ok = ext && X509_add_ext(x, ext, -1) && X509_sign(x, k, EVP_sha256()) &&
		     (f = fopen(pem, "w")) && PEM_write_X509(f, x);
	}
	X509_EXTENSION_free(ext);
	if (f && fclose(f))
		ok = 0;
	if (!ok) {
		EVP_PKEY_free(k);
		X509_free(x);
		return -1;
	}
	*key = k;
	*crt = x;
	return 0;
}

static SSL *srv_accept(struct srv *s)
{
	int fd = accept(s->listener, NULL, NULL);
	SSL *ssl;

	if (fd < 0)
		return NULL;
	ssl = SSL_new(s->ctx);
	if (!ssl || SSL_set_fd(ssl, fd) != 1 || SSL_accept(ssl) != 1) {
		SSL_free(ssl);
		close(fd);
		return NULL;
	}
	return ssl;
}

/* Reads one PING as hiredis sends it and answers +PONG: 0 or -1. */
static int srv_pong(SSL *ssl)
{
	char buf[64];
	size_t got = 0;

	while (got < sizeof("*1\r\n$4\r\nPING\r\n") - 1) {
		int n = SSL_read(ssl, buf + got, (int)(sizeof(buf) - got));

		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return SSL_write(ssl, "+PONG\r\n", 7) == 7 ? 0 : -1;
}

static void srv_drop(SSL *ssl)
{
	int fd = SSL_get_fd(ssl);

	SSL_free(ssl);
	close(fd);
}

/* Two connections, one after the other, a PING answered on each; then the
 * first goes as a killed server's does (no close_notify, the kernel's FIN),
 * and the second answers one more PING and waits for the client to hang
 * up. */
static void *srv_run(void *arg)
{
	struct srv *s = arg;
	SSL *a = srv_accept(s), *b = NULL;
	char buf[16];

	if (!a || srv_pong(a) || !(b = srv_accept(s)) || srv_pong(b))
		snprintf(s->why, sizeof(s->why), "the first PINGs were not answered");
	if (a)
		srv_drop(a);
	if (b && !s->why[0]) {
		if (srv_pong(b))
			snprintf(s->why, sizeof(s->why), "the second connection ended "
				 "when the first was dropped");
		else
			/* the client's close_notify, or its FIN */
			while (SSL_read(b, buf, sizeof(buf)) > 0)
				;
	}
	if (b)
		srv_drop(b);
	if (write(s->done[1], "x", 1) != 1)
		perror("write");
	return NULL;
}

struct conn2 {
	struct loop *loop;
	struct redis_tls *t;
	uint16_t port;
	redisAsyncContext *a, *b;
	int replies_a, replies_b;
	int lost_a, lost_b;	/* 1 clean, -1 error */
	unsigned long left;	/* in OpenSSL's error queue once A was gone */
	bool asked;		/* B asked again */
};

static redisAsyncContext *connect2(struct conn2 *p);
static void on_reply2(redisAsyncContext *ac, void *r, void *priv);

/* Once A is gone and B answered its first PING (its TLS session settled,
 * tickets read): B is asked once more, with an error in the thread's
 * queue.  A's relay should have left it empty, but some other code of the
 * thread may not (this one is what a shutdown after a failure leaves). */
static void ask_b_again(struct conn2 *p)
{
	if (p->asked || !p->lost_a || p->replies_b != 1 || p->lost_b)
		return;
	p->asked = true;
	ERR_raise(ERR_LIB_SSL, SSL_R_SHUTDOWN_WHILE_IN_INIT);
	redisAsyncCommand(p->b, on_reply2, p, "PING");
}

static void on_reply2(redisAsyncContext *ac, void *r, void *priv)
{
	struct conn2 *p = priv;

	if (!r)
		return;
	if (ac == p->a) {
		/* B once A is answered: the server tells them by their order. */
		if (++p->replies_a == 1 && !(p->b = connect2(p)))
			loop_stop(p->loop);
		return;
	}
	/* The second PONG: done, hang up. */
	if (++p->replies_b == 2)
		redisAsyncDisconnect(ac);
	ask_b_again(p);
}

static void on_disconnect2(const redisAsyncContext *ac, int status)
{
	struct conn2 *p = ac->data;

	if (ac == p->a) {
		p->lost_a = status == REDIS_OK ? 1 : -1;
		p->left = ERR_peek_error();
		ask_b_again(p);
	} else {
		p->lost_b = status == REDIS_OK ? 1 : -1;
	}
}

static void on_srv_done(struct loop_watch *w, int fd, unsigned int events, void *arg)
{
	(void)fd;
	(void)events;
	loop_watch_set(w, 0);
	loop_stop(arg);
}

static redisAsyncContext *connect2(struct conn2 *p)
{
	redisAsyncContext *ac = redisAsyncConnect("127.0.0.1", p->port);

	if (!ac || ac->err)
		return NULL;
	ac->data = p;
	if (redis_tls_wrap(p->t, ac, p->loop, "127.0.0.1") ||
	    redis_loop_attach(ac, p->loop)) {
		redisAsyncFree(ac);
		return NULL;
	}
	redisAsyncSetDisconnectCallback(ac, on_disconnect2);
	redisAsyncCommand(ac, on_reply2, p, "PING");
	return ac;
}

static void test_one_dropped_keeps_the_other(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	char pem[] = "/tmp/test_redis_tls.XXXXXX";
	socklen_t sl = sizeof(sa);
	struct srv s = { .listener = -1, .done = { -1, -1 } };
	struct redis_tls_opts o = { .ca = pem };
	struct redis_tls *t = NULL;
	struct loop_watch *w = NULL;
	struct loop_timer *tm = NULL;
	struct conn2 p = { 0 };
	EVP_PKEY *key = NULL;
	X509 *crt = NULL;
	pthread_t th;
	int fd = mkstemp(pem);

	if (fd < 0 || close(fd) || make_cert(pem, &key, &crt) ||
	    !(s.ctx = SSL_CTX_new(TLS_server_method())) ||
	    SSL_CTX_use_certificate(s.ctx, crt) != 1 ||
	    SSL_CTX_use_PrivateKey(s.ctx, key) != 1 || redis_tls_new(&o, &t) ||
	    loop_new(0, &p.loop)) {
		CHECK(0, "set up a certificate, a server context and the client's");
		goto out;
	}
	s.listener = socket(AF_INET, SOCK_STREAM, 0);
	if (s.listener < 0 || bind(s.listener, (struct sockaddr *)&sa, sizeof(sa)) ||
	    listen(s.listener, 4) ||
	    getsockname(s.listener, (struct sockaddr *)&sa, &sl) || pipe(s.done) ||
	    loop_watch_add(p.loop, s.done[0], LOOP_READ, on_srv_done, p.loop, &w)) {
		CHECK(0, "set up a listener on the loopback: %s", strerror(errno));
		goto out;
	}
	s.port = ntohs(sa.sin_port);
	if (pthread_create(&th, NULL, srv_run, &s)) {
		CHECK(0, "start the server's thread");
		goto out;
	}
	p.t = t;
	p.port = s.port;
	p.a = connect2(&p);
	/* Only if the server's thread hangs (it ends once the relays are
	 * gone). */
	CHECK(loop_timer_add(p.loop, 20000, 0, on_timeout, p.loop, &tm) == 0, "timer");
	if (p.a)
		CHECK(loop_run(p.loop) == 0, "loop runs");
	CHECK(p.a && p.b, "two connections wrapped");
	shutdown(s.listener, SHUT_RDWR);
	pthread_join(th, NULL);
	CHECK(!s.why[0], "server: %s", s.why);
	CHECK(p.replies_a == 1 && p.lost_a == -1,
	      "the dropped connection answered once and ended with an error "
	      "(%d replies, ended %d)", p.replies_a, p.lost_a);
	CHECK(!p.left, "the dropped connection left the thread's error queue empty "
	      "(%s)", ERR_error_string(p.left, NULL));
	CHECK(p.replies_b == 2 && p.lost_b == 1,
	      "the other answered again and ended only when hung up "
	      "(%d replies, ended %d)", p.replies_b, p.lost_b);
	ERR_clear_error();
	loop_timer_cancel(tm);
out:
	if (w)
		loop_watch_del(w);
	if (s.listener >= 0)
		close(s.listener);
	if (s.done[0] >= 0) {
		close(s.done[0]);
		close(s.done[1]);
	}
	/* Both relays are gone: this is the last reference. */
	redis_tls_put(t);
	if (p.loop)
		loop_free(p.loop);
	SSL_CTX_free(s.ctx);
	EVP_PKEY_free(key);
	X509_free(crt);
	unlink(pem);
}

int main(void)
{
	log_set_level(LOG_LVL_ERROR);
	/* as in rlagent: a peer gone is an error returned, not a signal */
	signal(SIGPIPE, SIG_IGN);
	CHECK_RUN(test_unusable_files);
	CHECK_RUN(test_not_a_tls_server);
	CHECK_RUN(test_one_dropped_keeps_the_other);
	return check_exit();
}
