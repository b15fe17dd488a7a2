// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* test_redis_tls: the TLS layer under hiredis, without a Redis: certificate
 * files OpenSSL cannot use are refused at the start, and a peer that is no
 * TLS server (it answers in clear text and hangs up) ends the connection the
 * way hiredis reports a closed one, with the reason kept for the breaker,
 * through the io_uring loop and without blocking it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

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

int main(void)
{
	log_set_level(LOG_LVL_ERROR);
	CHECK_RUN(test_unusable_files);
	CHECK_RUN(test_not_a_tls_server);
	return check_exit();
}
