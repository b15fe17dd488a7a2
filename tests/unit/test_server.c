/* test_server: the socket server of the control socket and /metrics accepts
 * clients up to its limit (the one over it gets the refusal and is closed),
 * hands each one's readiness to its owner with its state set up, drops
 * clients that stall, and idle ones only after longer, lets a new client
 * take the place of the one that made no progress for longest when asked
 * to, and releases everything it holds.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "loop.h"
#include "server.h"
#include "check.h"

#define MAX_CLIENTS	3

struct echo_client {
	struct server_client sc;
	char *state;		/* set by open, freed by close */
	bool idle;
};

static int opened, closed, refused, events;

static int on_open(struct server_client *sc)
{
	struct echo_client *cl = (struct echo_client *)sc;

	cl->state = strdup("state");
	opened++;
	return cl->state ? 0 : -ENOMEM;
}

static void on_close(struct server_client *sc)
{
	free(((struct echo_client *)sc)->state);
	closed++;
}

static void on_refuse(int fd)
{
	refused++;
	if (send(fd, "busy\n", 5, MSG_NOSIGNAL) != 5)
		fprintf(stderr, "couldn't send the refusal\n");
}

/* Echoes what it reads; a client that sends "idle" may stall forever; EOF
 * disconnects. */
static void on_event(struct server_client *sc, unsigned int ev)
{
	struct echo_client *cl = (struct echo_client *)sc;
	char buf[64];
	ssize_t n;

	(void)ev;
	events++;
	CHECK(cl->state && strcmp(cl->state, "state") == 0,
	      "event before the owner's state was set up");
	n = read(sc->fd, buf, sizeof(buf));
	if (n <= 0) {
		if (n == 0 || errno != EAGAIN)
			server_client_free(sc);
		return;
	}
	cl->idle = n >= 4 && memcmp(buf, "idle", 4) == 0;
	if (send(sc->fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
		fprintf(stderr, "couldn't echo\n");
}

static bool is_idle(const struct server_client *sc)
{
	return ((const struct echo_client *)sc)->idle;
}

/* Not const: the eviction test turns evict_ns on. */
static struct server_ops ops = {
	.client_size = sizeof(struct echo_client),
	.max_clients = MAX_CLIENTS,
	.stall_ns = 1000000000ULL,
	.idle_ns = 5000000000ULL,
	.open = on_open,
	.event = on_event,
	.close = on_close,
	.refuse = on_refuse,
	.idle = is_idle,
};

static unsigned int n_clients(const struct server *s)
{
	unsigned int n = 0;

	for (struct server_client *c = server_clients(s); c; c = c->next)
		n++;
	return n;
}

/* Turns the loop until nothing happens for 50 ms. */
static void settle(struct loop *l)
{
	int before;

	do {
		before = events + opened + closed + refused;
		loop_run_once(l, 50);
	} while (before != events + opened + closed + refused);
}

static int connect_to(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Reads what the server sent back, waiting up to 1 s. */
static ssize_t answer(struct loop *l, int fd, char *buf, size_t len)
{
	struct timeval tv = { .tv_sec = 1 };

	settle(l);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return recv(fd, buf, len, 0);
}

static struct loop *the_loop;
static struct server *srv;
static char dir[] = "/tmp/test_server.XXXXXX", path[64];
static int c[MAX_CLIENTS + 1] = { -1, -1, -1, -1 };
static int ctx = 42;

static void test_serves_up_to_the_limit(void)
{
	char buf[64];
	ssize_t n;

	CHECK(server_ctx(srv) == &ctx, "server_ctx is not the ctx given");
	for (int i = 0; i < MAX_CLIENTS; i++)
		c[i] = connect_to(path);
	settle(the_loop);
	CHECK(opened == MAX_CLIENTS && n_clients(srv) == MAX_CLIENTS,
	      "%d opened, %u listed; expected %d", opened, n_clients(srv),
	      MAX_CLIENTS);
	CHECK(send(c[0], "hello", 5, 0) == 5, "send");
	n = answer(the_loop, c[0], buf, sizeof(buf));
	CHECK(n == 5 && memcmp(buf, "hello", 5) == 0, "no echo (%zd bytes)", n);
}

/* One over the limit: refused with a word, closed, never opened. */
static void test_refuses_one_over(void)
{
	char buf[64];
	ssize_t n;

	c[MAX_CLIENTS] = connect_to(path);
	n = answer(the_loop, c[MAX_CLIENTS], buf, sizeof(buf));
	CHECK(refused == 1 && n == 5 && memcmp(buf, "busy\n", 5) == 0,
	      "client over the limit: %d refused, %zd bytes", refused, n);
	n = recv(c[MAX_CLIENTS], buf, sizeof(buf), 0);
	CHECK(n == 0, "refused client not closed (recv %zd)", n);
	CHECK(opened == MAX_CLIENTS, "refused client was opened");
}

/* A stalled client is dropped, an idle one is not; the clock is the
 * caller's, so a tick far ahead stands for the wait. */
static void test_drops_stalled_not_idle(void)
{
	char buf[64];
	ssize_t n;

	CHECK(send(c[1], "idle", 4, 0) == 4, "send");
	CHECK(answer(the_loop, c[1], buf, sizeof(buf)) == 4, "no echo of idle");
	server_tick(srv, loop_now_ns() + ops.stall_ns / 2);
	CHECK(n_clients(srv) == MAX_CLIENTS, "dropped before stall_ns");
	server_tick(srv, loop_now_ns() + 2 * ops.stall_ns);
	CHECK(n_clients(srv) == 1 && closed == MAX_CLIENTS - 1,
	      "after a stall: %u clients left, %d closed; expected the idle "
	      "one alone", n_clients(srv), closed);
	/* a closed fd is let go once the ring has dropped its poll */
	settle(the_loop);
	n = recv(c[0], buf, sizeof(buf), 0);
	CHECK(n == 0, "stalled client not disconnected (recv %zd: %s)", n,
	      n < 0 ? strerror(errno) : "data");
}

/* With evict_ns, a client over the limit takes the place of the one that
 * made no progress for longest (the idle one, accepted first), instead of
 * being refused: held connections cannot keep a new client out. */
static void test_evicts_longest_without_progress(void)
{
	char buf[64];
	ssize_t n;

	close(c[0]);
	close(c[2]);
	close(c[3]);
	c[0] = connect_to(path);
	settle(the_loop);
	c[2] = connect_to(path);
	settle(the_loop);
	CHECK(n_clients(srv) == MAX_CLIENTS, "%u clients", n_clients(srv));
	ops.evict_ns = 1;
	c[3] = connect_to(path);
	settle(the_loop);
	ops.evict_ns = 0;
	CHECK(refused == 1 && n_clients(srv) == MAX_CLIENTS,
	      "one over the limit: %d refused in all, %u clients", refused,
	      n_clients(srv));
	n = recv(c[1], buf, sizeof(buf), 0);
	CHECK(n == 0, "the oldest client was not the one disconnected (recv %zd)", n);
	CHECK(send(c[3], "hello", 5, MSG_NOSIGNAL) == 5, "send");
	n = answer(the_loop, c[3], buf, sizeof(buf));
	CHECK(n == 5, "the new client is not served (%zd bytes)", n);
}

/* An idle client goes too, after idle_ns. */
static void test_drops_idle_after_idle_ns(void)
{
	char buf[64];

	CHECK(send(c[0], "idle", 4, MSG_NOSIGNAL) == 4, "send");
	CHECK(answer(the_loop, c[0], buf, sizeof(buf)) == 4, "no echo of idle");
	server_tick(srv, loop_now_ns() + 2 * ops.stall_ns);
	CHECK(n_clients(srv) == 1, "%u clients after a stall; expected the idle "
	      "one alone", n_clients(srv));
	server_tick(srv, loop_now_ns() + ops.idle_ns + ops.stall_ns);
	CHECK(n_clients(srv) == 0 && closed == opened,
	      "after idle_ns: %u clients, %d of %d closed", n_clients(srv),
	      closed, opened);
}

/* A peer that hangs up is freed by its owner; stop frees the rest and
 * closes the listening socket. */
static void test_hangup_and_stop_release_everything(void)
{
	close(c[1]);
	c[1] = connect_to(path);
	settle(the_loop);
	CHECK(n_clients(srv) == 1, "%u clients", n_clients(srv));
	close(c[1]);
	settle(the_loop);
	CHECK(n_clients(srv) == 0 && closed == opened,
	      "after EOF: %u clients, %d of %d closed", n_clients(srv), closed,
	      opened);
	c[1] = connect_to(path);
	settle(the_loop);
	server_stop(srv);
	settle(the_loop);
	CHECK(closed == opened, "%d opened, %d closed after server_stop",
	      opened, closed);
	CHECK(connect_to(path) < 0, "still accepting after server_stop");
}

int main(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	log_set_ident("test_server");
	err = loop_new(0, &the_loop);
	if (err == -ENOSYS || err == -EPERM) {
		fprintf(stderr, "SKIP: io_uring unavailable: %s\n", strerror(-err));
		return 77;
	}
	if (err || !mkdtemp(dir))
		return 1;
	snprintf(path, sizeof(path), "%s/sock", dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    server_start(the_loop, fd, path, &ops, &ctx, &srv) < 0) {
		fprintf(stderr, "couldn't serve %s: %s\n", path, strerror(errno));
		return 1;
	}
	/* in order: each test goes on from where the last one left */
	CHECK_RUN(test_serves_up_to_the_limit);
	CHECK_RUN(test_refuses_one_over);
	CHECK_RUN(test_drops_stalled_not_idle);
	CHECK_RUN(test_evicts_longest_without_progress);
	CHECK_RUN(test_drops_idle_after_idle_ns);
	CHECK_RUN(test_hangup_and_stop_release_everything);
	for (int i = 0; i <= MAX_CLIENTS; i++)
		if (c[i] >= 0)
			close(c[i]);
	unlink(path);
	rmdir(dir);
	loop_free(the_loop);
	return check_exit();
}
