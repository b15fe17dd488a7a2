// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* test_redis_loop: hiredis async commands driven by the io_uring loop against
 * a real redis-server (skipped without one): replies arrive, pipelined
 * replies arrive in order, a server that goes away is reported as a
 * disconnect, and a refused connection is reported, not hung on. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "loop.h"
#include "redis_loop.h"
#include "check.h"

struct state {
	struct loop *loop;
	int replies;
	long long last;
	int order_ok;
	int connected;		/* 1 ok, -1 failed */
	int disconnected;	/* 1 clean, -1 error */
};

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct state *s = ac->data;

	s->connected = status == REDIS_OK ? 1 : -1;
	if (status != REDIS_OK)
		loop_stop(s->loop);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct state *s = ac->data;

	s->disconnected = status == REDIS_OK ? 1 : -1;
	loop_stop(s->loop);
}

static void on_incr(redisAsyncContext *ac, void *r, void *priv)
{
	struct state *s = ac->data;
	redisReply *reply = r;

	(void)priv;
	if (reply && reply->type == REDIS_REPLY_INTEGER) {
		if (reply->integer != s->last + 1)
			s->order_ok = 0;
		s->last = reply->integer;
		s->replies++;
	}
	if (s->replies == 100)
		loop_stop(s->loop);
}

static void on_timeout(struct loop_timer *t, void *arg)
{
	struct state *s = arg;

	(void)t;
	fprintf(stderr, "timed out\n");
	loop_stop(s->loop);
}

static pid_t start_redis(const char *dir, const char *sock)
{
	pid_t pid = fork();

	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, 1);
		dup2(null, 2);
		execlp("redis-server", "redis-server", "--port", "0",
		       "--unixsocket", sock, "--save", "", "--appendonly", "no",
		       "--dir", dir, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 100; i++) {
		struct stat st;

		if (stat(sock, &st) == 0)
			return pid;
		usleep(20000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

/* What the tests share: one loop, one server, its socket. */
static struct state s = { .order_ok = 1 };
static char sock[128];
static pid_t server;
static redisAsyncContext *ac;

/* 100 pipelined INCRs: every reply, in order. */
static void test_pipelined_replies(void)
{
	struct loop_timer *guard;

	ac = redisAsyncConnectUnix(sock);
	CHECK(ac && !ac->err, "connect: %s", ac ? ac->errstr : "oom");
	ac->data = &s;
	CHECK(redis_loop_attach(ac, s.loop) == 0, "attach");
	CHECK(redis_loop_attach(ac, s.loop) == -EEXIST, "second attach refused");
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	for (int i = 0; i < 100; i++)
		redisAsyncCommand(ac, on_incr, NULL, "INCR n");
	loop_timer_add(s.loop, 5000, 0, on_timeout, &s, &guard);
	loop_run(s.loop);
	loop_timer_cancel(guard);
	CHECK(s.connected == 1, "connect callback: %d", s.connected);
	CHECK(s.replies == 100, "replies: %d of 100", s.replies);
	CHECK(s.order_ok && s.last == 100, "replies out of order (last %lld)", s.last);
}

/* The server goes away: hiredis reports a disconnect through us. */
static void test_server_gone(void)
{
	struct loop_timer *guard;

	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	loop_timer_add(s.loop, 5000, 0, on_timeout, &s, &guard);
	redisAsyncCommand(ac, on_incr, NULL, "INCR n");
	loop_run(s.loop);
	CHECK(s.disconnected == -1, "disconnect with error reported: %d", s.disconnected);
	loop_timer_cancel(guard);
}

/* Nobody listening: a failed connect, reported, not a hang. */
static void test_refused_connect(void)
{
	struct loop_timer *guard;

	s.connected = 0;
	ac = redisAsyncConnectUnix(sock);
	if (ac && !ac->err) {
		ac->data = &s;
		redis_loop_attach(ac, s.loop);
		redisAsyncSetConnectCallback(ac, on_connect);
		redisAsyncSetDisconnectCallback(ac, on_disconnect);
		loop_timer_add(s.loop, 5000, 0, on_timeout, &s, &guard);
		loop_run(s.loop);
		loop_timer_cancel(guard);
		CHECK(s.connected == -1, "refused connect reported: %d", s.connected);
	} else {
		/* hiredis may notice at once for a Unix socket: fine too. */
		CHECK(ac && ac->err, "refused connect has an error");
		redisAsyncFree(ac);
	}
}

int main(void)
{
	char dir[] = "/tmp/rl-redis-loop.XXXXXX";
	int status;

	if (system("command -v redis-server >/dev/null 2>&1") != 0) {
		printf("redis-server not installed\n");
		return 77;
	}
	if (!mkdtemp(dir))
		return 1;
	snprintf(sock, sizeof(sock), "%s/redis.sock", dir);
	server = start_redis(dir, sock);
	if (server < 0) {
		fprintf(stderr, "redis-server did not start\n");
		return 1;
	}
	if (loop_new(0, &s.loop))
		return 1;
	CHECK_RUN(test_pipelined_replies);
	CHECK_RUN(test_server_gone);
	CHECK_RUN(test_refused_connect);
	status = check_exit();
	loop_free(s.loop);
	unlink(sock);
	rmdir(dir);
	return status;
}
