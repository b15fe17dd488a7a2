/* The connection engine: one thread, non-blocking connect() and epoll,
 * attempts paced on an absolute schedule, each one classified by how it
 * ended (connected, refused, timed out, other error) and closed at once. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "loadgen.h"

volatile int lg_stop;

/* One connection in flight.  Slots sit on a FIFO ordered by start time:
 * every connection has the same timeout, so the oldest is always the next
 * to expire and no timer heap is needed. */
struct slot {
	int fd;
	uint32_t target;
	uint64_t start_ns;
	int32_t prev, next;
};

struct engine {
	const struct lg_client_opts *o;
	struct lg_target *t;
	size_t n;
	int64_t weight_sum;
	struct slot *slots;
	int32_t *free_stack;
	uint32_t n_free;
	int32_t head, tail;	/* FIFO of busy slots, oldest at head */
	uint32_t inflight;
	int ep;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Raises RLIMIT_NOFILE to at least @need, the hard limit too when we may
 * (root), since every connection in flight holds a descriptor. */
int raise_nofile(unsigned long need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	if (rl.rlim_cur >= need)
		return 0;
	rl.rlim_cur = need;
	if (rl.rlim_max < need)
		rl.rlim_max = need;
	if (setrlimit(RLIMIT_NOFILE, &rl))
		return -errno;
	return 0;
}

/* Smooth weighted round-robin (as in nginx): deterministic, and spreads a
 * target's turns evenly instead of in bursts of @weight. */
static uint32_t pick_target(struct engine *e)
{
	uint32_t best = 0;

	for (size_t i = 0; i < e->n; i++) {
		e->t[i].wrr_current += e->t[i].weight;
		if (e->t[i].wrr_current > e->t[best].wrr_current)
			best = (uint32_t)i;
	}
	e->t[best].wrr_current -= e->weight_sum;
	return best;
}

static void lat_add(struct lg_target *t, uint64_t ns)
{
	uint64_t us = ns / 1000;

	if (t->lat_len == t->lat_cap) {
		size_t cap = t->lat_cap ? t->lat_cap * 2 : 1024;
		uint32_t *p = realloc(t->lat_us, cap * sizeof(*p));

		/* Losing a latency sample is better than losing the run. */
		if (!p)
			return;
		t->lat_us = p;
		t->lat_cap = cap;
	}
	t->lat_us[t->lat_len++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void count_result(struct lg_target *t, int err, uint64_t elapsed_ns)
{
	switch (err) {
	case 0:
		t->c.connected++;
		lat_add(t, elapsed_ns);
		break;
	case ECONNREFUSED:
		t->c.refused++;
		break;
	case ETIMEDOUT:
		/* the kernel gave up first (only with --timeout past its retries) */
		t->c.timed_out++;
		break;
	default:
		t->c.errors++;
		t->last_errno = err;
		break;
	}
}

/* SO_LINGER {1,0} turns close() into an abort: a RST instead of a FIN, so
 * this side keeps no TIME_WAIT and the ephemeral ports stay free at
 * thousands of connections per second. */
static void close_abort(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static void fifo_unlink(struct engine *e, int32_t i)
{
	struct slot *s = &e->slots[i];

	if (s->prev >= 0)
		e->slots[s->prev].next = s->next;
	else
		e->head = s->next;
	if (s->next >= 0)
		e->slots[s->next].prev = s->prev;
	else
		e->tail = s->prev;
}

/* Whether connected socket fd's kernel retransmitted its SYN before the
 * handshake completed (the connection's only segment sent so far). */
static bool syn_retried(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len))
		return false;
	return ti.tcpi_total_retrans > 0;
}

static void slot_finish(struct engine *e, int32_t i, int err, uint64_t now)
{
	struct slot *s = &e->slots[i];

	count_result(&e->t[s->target], err, now - s->start_ns);
	if (!err && syn_retried(s->fd))
		e->t[s->target].c.retried++;
	close_abort(s->fd);
	fifo_unlink(e, i);
	e->free_stack[e->n_free++] = i;
	e->inflight--;
}

static void launch(struct engine *e)
{
	uint64_t now = now_ns();
	uint32_t ti = pick_target(e);
	struct lg_target *t = &e->t[ti];
	const struct sockaddr *sa = (const struct sockaddr *)&t->addr.ss;
	struct epoll_event ev;
	struct slot *s;
	int32_t i;
	int fd, err;

	t->c.attempts++;
	if (e->o->times)
		fprintf(e->o->times, "%" PRIu64 "\n", now);
	fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		count_result(t, errno, 0);
		return;
	}
	if (e->o->have_bind) {
		int one = 1;

		/* Defer the port choice to connect(), which can reuse a local
		 * port towards different destinations; bind() alone would
		 * reserve one port per socket for all of them. */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(fd, (const struct sockaddr *)&e->o->bind.ss, e->o->bind.len)) {
			count_result(t, errno, 0);
			close(fd);
			return;
		}
	}
	if (connect(fd, sa, t->addr.len) == 0) {
		count_result(t, 0, now_ns() - now);
		close_abort(fd);
		return;
	}
	if (errno != EINPROGRESS) {
		count_result(t, errno, 0);
		close_abort(fd);
		return;
	}

	i = e->free_stack[--e->n_free];
	s = &e->slots[i];
	s->fd = fd;
	s->target = ti;
	s->start_ns = now;
	s->next = -1;
	s->prev = e->tail;
	if (e->tail >= 0)
		e->slots[e->tail].next = i;
	else
		e->head = i;
	e->tail = i;
	e->inflight++;

	ev.events = EPOLLOUT;
	ev.data.u64 = (uint64_t)i;
	if (epoll_ctl(e->ep, EPOLL_CTL_ADD, fd, &ev)) {
		err = errno;
		/* counted as an error of this attempt, not of the run */
		slot_finish(e, i, err, now);
	}
}

static void on_event(struct engine *e, int32_t i, uint64_t now)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(e->slots[i].fd, SOL_SOCKET, SO_ERROR, &err, &len))
		err = errno;
	slot_finish(e, i, err, now);
}

static int engine_init(struct engine *e, const struct lg_client_opts *o,
		       struct lg_target *t, size_t n)
{
	memset(e, 0, sizeof(*e));
	e->o = o;
	e->t = t;
	e->n = n;
	e->head = e->tail = -1;
	e->ep = -1;
	for (size_t i = 0; i < n; i++)
		e->weight_sum += t[i].weight;
	e->slots = calloc(o->max_inflight, sizeof(*e->slots));
	e->free_stack = calloc(o->max_inflight, sizeof(*e->free_stack));
	if (!e->slots || !e->free_stack)
		return -ENOMEM;
	/* hand out low slot numbers first: their memory is already warm */
	for (uint32_t k = 0; k < o->max_inflight; k++)
		e->free_stack[k] = (int32_t)(o->max_inflight - 1 - k);
	e->n_free = o->max_inflight;
	e->ep = epoll_create1(EPOLL_CLOEXEC);
	if (e->ep < 0)
		return -errno;
	return 0;
}

static void engine_free(struct engine *e)
{
	if (e->ep >= 0)
		close(e->ep);
	free(e->slots);
	free(e->free_stack);
}

/* Runs the whole load: attempt k is due at start + k / rate (an absolute
 * schedule, so a late wake-up is caught up rather than shifting every later
 * attempt).  Every attempt is due within the duration, and one due at its
 * very end is caught up like any other: a loaded machine that wakes the
 * sender a few milliseconds after its last slot still makes the
 * round(rate x duration) attempts asked for.  Only a sender still behind a
 * timeout after the duration (stopped that long, or held back by
 * max_inflight) gives up the rest, counted as skipped.  The run ends when
 * the last attempt has finished, and in any case by duration + 2 x timeout
 * + 1 s. */
int client_run(const struct lg_client_opts *o, struct lg_target *t, size_t n,
	       struct lg_client_result *res)
{
	const uint64_t timeout_ns = (uint64_t)o->timeout_ms * 1000000ull;
	const uint64_t total = (uint64_t)llround(o->rate * o->duration_s);
	const double ns_per_attempt = 1e9 / o->rate;
	struct epoll_event evs[256];
	uint64_t t0, send_end, hard_end, now, issued = 0, last_issue = 0;
	bool sending = true;
	struct engine e;
	int ret;

	ret = engine_init(&e, o, t, n);
	if (ret)
		goto out;

	t0 = now_ns();
	/* the last slot is due before the duration; late ones until then */
	send_end = t0 + (uint64_t)(o->duration_s * 1e9) + timeout_ns;
	hard_end = send_end + timeout_ns + 1000000000ull;

	for (;;) {
		uint64_t wake, due = 0;
		struct timespec ts;
		int nev;

		now = now_ns();
		if (lg_stop || now >= send_end || issued >= total)
			sending = false;
		while (sending && e.inflight < o->max_inflight) {
			due = t0 + (uint64_t)((double)issued * ns_per_attempt);
			if (due > now)
				break;
			launch(&e);
			last_issue = now;
			if (++issued >= total) {
				sending = false;
				break;
			}
		}

		while (e.head >= 0 && e.slots[e.head].start_ns + timeout_ns <= now)
			slot_finish(&e, e.head, ETIMEDOUT, now);

		if (!sending && e.inflight == 0)
			break;
		if (now >= hard_end) {
			/* Something kept sockets past their timeout; count them
			 * rather than wait. */
			while (e.head >= 0)
				slot_finish(&e, e.head, ETIMEDOUT, now);
			break;
		}

		wake = hard_end;
		if (e.head >= 0 && e.slots[e.head].start_ns + timeout_ns < wake)
			wake = e.slots[e.head].start_ns + timeout_ns;
		if (sending && e.inflight < o->max_inflight && due < wake)
			wake = due;
		if (sending && send_end < wake)
			wake = send_end;
		wake = wake > now ? wake - now : 0;
		ts.tv_sec = (time_t)(wake / 1000000000ull);
		ts.tv_nsec = (long)(wake % 1000000000ull);

		nev = epoll_pwait2(e.ep, evs, (int)(sizeof(evs) / sizeof(evs[0])),
				   &ts, NULL);
		if (nev < 0) {
			if (errno == EINTR)
				continue;
			ret = -errno;
			fprintf(stderr, "Error: couldn't wait for connections on 'epoll': %s\n",
				strerror(errno));
			goto out;
		}
		now = now_ns();
		for (int k = 0; k < nev; k++)
			on_event(&e, (int32_t)evs[k].data.u64, now);
	}

	res->elapsed_s = (double)(now_ns() - t0) / 1e9;
	res->skipped = total - issued;
	res->interrupted = lg_stop != 0;
	/* A run that kept its schedule offered exactly the rate; one that
	 * fell behind (max-inflight, a slow machine) offered less. */
	{
		double window = (double)(last_issue - t0) / 1e9 + ns_per_attempt / 1e9;

		if (window < o->duration_s && !res->interrupted)
			window = o->duration_s;
		res->offered_rate = issued ? (double)issued / window : 0.0;
	}
out:
	/* Only a failed run leaves sockets behind; close them so the caller
	 * can still report what was counted. */
	while (e.head >= 0)
		slot_finish(&e, e.head, ETIMEDOUT, now_ns());
	engine_free(&e);
	return ret;
}
