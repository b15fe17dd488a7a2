/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The io_uring event loop behind loop.h.  Every watch and timer is the
 * user_data of at most one request in flight; requests that only cancel
 * another carry user_data 0 and their completions are ignored.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <liburing.h>

#include "log.h"
#include "loop.h"

#define LOOP_DEFAULT_ENTRIES	256

enum obj_kind { OBJ_WATCH = 1, OBJ_TIMER = 2 };

/* Common head of watches and timers: the list of everything the loop owns
 * (so loop_free can release it) and the state every request shares. */
struct obj {
	enum obj_kind kind;
	struct loop *l;
	struct obj *prev, *next;
	bool in_flight;		/* a request with this user_data is pending */
	bool removing;		/* a cancel for it has been submitted */
	bool in_cb;		/* its callback is running */
	bool dead;		/* deleted by the owner; free when idle */
};

struct loop_watch {
	struct obj o;
	int fd;
	unsigned int want;	/* interest, LOOP_READ|LOOP_WRITE */
	unsigned int armed;	/* the interest of the poll in flight */
	loop_watch_fn fn;
	void *arg;
};

struct loop_timer {
	struct obj o;
	struct __kernel_timespec ts;	/* must outlive the submission */
	uint64_t deadline_ns;
	uint64_t period_ns;
	loop_timer_fn fn;
	void *arg;
};

/* The longest turn begun in one second of CLOCK_MONOTONIC. */
struct loop_second {
	uint64_t sec;
	uint64_t wall_ns, cpu_ns;
};

struct loop {
	struct io_uring ring;
	struct obj *objs;
	bool stop;
	int err;		/* sticky: the ring failed us */
	/* by the second the turn began in, modulo LOOP_TURN_SECONDS */
	struct loop_second turns[LOOP_TURN_SECONDS];
};

uint64_t loop_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* This thread's CPU time: what a turn took of the CPU, which other
 * processes taking it do not lengthen. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int loop_new(unsigned int entries, struct loop **out)
{
	struct loop *l;
	int err;

	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	err = io_uring_queue_init(entries ? entries : LOOP_DEFAULT_ENTRIES,
				  &l->ring, 0);
	if (err < 0) {
		log_error("couldn't set up io_uring on 'loop': %s", strerror(-err));
		free(l);
		return err;
	}
	*out = l;
	return 0;
}

static void obj_link(struct loop *l, struct obj *o)
{
	o->l = l;
	o->next = l->objs;
	if (l->objs)
		l->objs->prev = o;
	l->objs = o;
}

static void obj_free(struct obj *o)
{
	struct loop *l = o->l;

	if (o->prev)
		o->prev->next = o->next;
	else
		l->objs = o->next;
	if (o->next)
		o->next->prev = o->prev;
	free(o);
}

/* Frees o if nothing refers to it any more: deleted, no request in flight,
 * not inside its own callback. */
static bool obj_reap(struct obj *o)
{
	if (o->dead && !o->in_flight && !o->in_cb) {
		obj_free(o);
		return true;
	}
	return false;
}

void loop_free(struct loop *l)
{
	if (!l)
		return;
	/* The ring goes first: after it is gone no completion can refer to
	 * the objects any more. */
	io_uring_queue_exit(&l->ring);
	while (l->objs)
		obj_free(l->objs);
	free(l);
}

/* A free submission slot.  A full queue is flushed to the kernel first;
 * only a broken ring leaves us without one, and that is sticky. */
static struct io_uring_sqe *get_sqe(struct loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
	int err;

	if (sqe)
		return sqe;
	err = io_uring_submit(&l->ring);
	if (err < 0) {
		log_error("couldn't submit to io_uring on 'loop': %s",
			  strerror(-err));
		l->err = err;
		return NULL;
	}
	sqe = io_uring_get_sqe(&l->ring);
	if (!sqe)
		l->err = -EBUSY;
	return sqe;
}

static void submit_cancel(struct obj *o)
{
	struct io_uring_sqe *sqe;

	if (!o->in_flight || o->removing)
		return;
	sqe = get_sqe(o->l);
	if (!sqe)
		return;
	if (o->kind == OBJ_WATCH)
		io_uring_prep_poll_remove(sqe, (__u64)(uintptr_t)o);
	else
		io_uring_prep_timeout_remove(sqe, (__u64)(uintptr_t)o, 0);
	io_uring_sqe_set_data(sqe, NULL);
	o->removing = true;
}

/* --- watches ------------------------------------------------------------- */

static void watch_arm(struct loop_watch *w)
{
	struct io_uring_sqe *sqe;
	unsigned int mask = 0;

	if (w->o.dead || w->o.in_flight || !w->want)
		return;
	sqe = get_sqe(w->o.l);
	if (!sqe)
		return;
	if (w->want & LOOP_READ)
		mask |= POLLIN;
	if (w->want & LOOP_WRITE)
		mask |= POLLOUT;
	io_uring_prep_poll_add(sqe, w->fd, mask);
	io_uring_sqe_set_data(sqe, w);
	w->armed = w->want;
	w->o.in_flight = true;
	w->o.removing = false;
}

int loop_watch_add(struct loop *l, int fd, unsigned int events,
		   loop_watch_fn fn, void *arg, struct loop_watch **out)
{
	struct loop_watch *w;

	if (fd < 0 || !fn)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->o.kind = OBJ_WATCH;
	w->fd = fd;
	w->want = events & (LOOP_READ | LOOP_WRITE);
	w->fn = fn;
	w->arg = arg;
	obj_link(l, &w->o);
	watch_arm(w);
	if (out)
		*out = w;
	return 0;
}

void loop_watch_set(struct loop_watch *w, unsigned int events)
{
	w->want = events & (LOOP_READ | LOOP_WRITE);
	if (w->o.in_flight) {
		/* A poll for another interest is out: take it back, and its
		 * completion re-arms with the new one. */
		if (w->armed != w->want)
			submit_cancel(&w->o);
		return;
	}
	if (!w->o.in_cb)
		watch_arm(w);
}

unsigned int loop_watch_events(const struct loop_watch *w)
{
	return w->want;
}

void loop_watch_del(struct loop_watch *w)
{
	if (!w)
		return;
	w->o.dead = true;
	w->want = 0;
	submit_cancel(&w->o);
	obj_reap(&w->o);
}

static void watch_complete(struct loop_watch *w, int res)
{
	unsigned int ev = 0;

	w->o.in_flight = false;
	w->o.removing = false;
	if (obj_reap(&w->o))
		return;
	if (res == -ECANCELED) {
		/* Taken back because the interest changed. */
		watch_arm(w);
		return;
	}
	if (res < 0) {
		/* The fd cannot be polled (closed under us?).  Tell the owner
		 * once and wait for it to set an interest again rather than
		 * spinning on an error that will not go away. */
		log_debug("poll on fd %d failed: %s", w->fd, strerror(-res));
		ev = LOOP_HUP;
		w->want = 0;
	} else {
		if (res & POLLIN)
			ev |= LOOP_READ;
		if (res & POLLOUT)
			ev |= LOOP_WRITE;
		ev &= w->want;
		if (res & (POLLERR | POLLHUP | POLLNVAL))
			ev |= LOOP_HUP;
	}
	if (ev) {
		w->o.in_cb = true;
		w->fn(w, w->fd, ev, w->arg);
		w->o.in_cb = false;
		if (obj_reap(&w->o))
			return;
	}
	watch_arm(w);
}

/* --- timers -------------------------------------------------------------- */

static void timer_arm(struct loop_timer *t)
{
	struct io_uring_sqe *sqe;

	if (t->o.dead || t->o.in_flight)
		return;
	sqe = get_sqe(t->o.l);
	if (!sqe)
		return;
	t->ts.tv_sec = (long long)(t->deadline_ns / 1000000000ULL);
	t->ts.tv_nsec = (long long)(t->deadline_ns % 1000000000ULL);
	/* Absolute CLOCK_MONOTONIC deadlines: a periodic timer re-armed late
	 * still fires on its grid. */
	io_uring_prep_timeout(sqe, &t->ts, 0, IORING_TIMEOUT_ABS);
	io_uring_sqe_set_data(sqe, t);
	t->o.in_flight = true;
	t->o.removing = false;
}

int loop_timer_add(struct loop *l, uint64_t delay_ms, uint64_t period_ms,
		   loop_timer_fn fn, void *arg, struct loop_timer **out)
{
	struct loop_timer *t;

	if (!fn)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->o.kind = OBJ_TIMER;
	t->deadline_ns = loop_now_ns() + delay_ms * 1000000ULL;
	t->period_ns = period_ms * 1000000ULL;
	t->fn = fn;
	t->arg = arg;
	obj_link(l, &t->o);
	timer_arm(t);
	if (out)
		*out = t;
	return 0;
}

void loop_timer_cancel(struct loop_timer *t)
{
	if (!t)
		return;
	t->o.dead = true;
	submit_cancel(&t->o);
	obj_reap(&t->o);
}

static void timer_complete(struct loop_timer *t, int res)
{
	uint64_t now;

	t->o.in_flight = false;
	t->o.removing = false;
	if (obj_reap(&t->o))
		return;
	if (res != -ETIME) {
		/* Cancelled without being deleted cannot happen; anything
		 * else is the kernel refusing the timeout: retry later rather
		 * than lose a periodic tick. */
		if (res != -ECANCELED)
			log_debug("timer failed: %s", strerror(-res));
		t->deadline_ns = loop_now_ns() + 1000000ULL;
		timer_arm(t);
		return;
	}
	t->o.in_cb = true;
	t->fn(t, t->arg);
	t->o.in_cb = false;
	if (!t->period_ns)
		t->o.dead = true;
	if (obj_reap(&t->o))
		return;
	now = loop_now_ns();
	t->deadline_ns += t->period_ns;
	if (t->deadline_ns <= now)
		t->deadline_ns = now + t->period_ns -
				 (now - t->deadline_ns) % t->period_ns;
	timer_arm(t);
}

/* --- running ------------------------------------------------------------- */

static void dispatch(struct loop *l)
{
	struct io_uring_cqe *cqe;

	while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
		struct obj *o = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&l->ring, cqe);
		if (!o || cqe->user_data == LIBURING_UDATA_TIMEOUT)
			continue;
		if (o->kind == OBJ_WATCH)
			watch_complete((struct loop_watch *)o, res);
		else
			timer_complete((struct loop_timer *)o, res);
	}
}

/* A turn begun at t0 took wall_ns, cpu_ns of this thread's CPU. */
static void turn_note(struct loop *l, uint64_t t0, uint64_t wall_ns,
		      uint64_t cpu_ns)
{
	uint64_t sec = t0 / 1000000000ULL;
	struct loop_second *s = &l->turns[sec % LOOP_TURN_SECONDS];

	if (s->sec != sec)
		*s = (struct loop_second){ .sec = sec };
	if (wall_ns > s->wall_ns)
		s->wall_ns = wall_ns;
	if (cpu_ns > s->cpu_ns)
		s->cpu_ns = cpu_ns;
}

int loop_run_once(struct loop *l, int timeout_ms)
{
	struct io_uring_cqe *cqe;
	uint64_t t0, c0;
	int err;

	if (l->err)
		return l->err;
	if (timeout_ms < 0) {
		err = io_uring_submit_and_wait(&l->ring, 1);
	} else {
		struct __kernel_timespec ts = {
			.tv_sec = timeout_ms / 1000,
			.tv_nsec = (timeout_ms % 1000) * 1000000LL,
		};

		err = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts,
						       NULL);
		if (err == -ETIME)
			err = 0;
	}
	if (err < 0 && err != -EINTR && err != -EAGAIN && err != -EBUSY) {
		log_error("couldn't wait for io_uring on 'loop': %s",
			  strerror(-err));
		return err;
	}
	t0 = loop_now_ns();
	c0 = thread_cpu_ns();
	dispatch(l);
	turn_note(l, t0, loop_now_ns() - t0, thread_cpu_ns() - c0);
	return l->err;
}

void loop_longest_turn(const struct loop *l, unsigned int seconds,
		       uint64_t now_ns, uint64_t *wall_ns, uint64_t *cpu_ns)
{
	uint64_t sec = now_ns / 1000000000ULL;

	*wall_ns = *cpu_ns = 0;
	if (seconds > LOOP_TURN_SECONDS)
		seconds = LOOP_TURN_SECONDS;
	for (unsigned int i = 0; i < seconds && i <= sec; i++) {
		const struct loop_second *s = &l->turns[(sec - i) % LOOP_TURN_SECONDS];

		if (s->sec != sec - i)
			continue;
		if (s->wall_ns > *wall_ns)
			*wall_ns = s->wall_ns;
		if (s->cpu_ns > *cpu_ns)
			*cpu_ns = s->cpu_ns;
	}
}

int loop_run(struct loop *l)
{
	int err = 0;

	l->stop = false;
	while (!l->stop && !err)
		err = loop_run_once(l, -1);
	/* Hand the last submissions (cancels, mostly) to the kernel. */
	io_uring_submit(&l->ring);
	return err;
}

void loop_stop(struct loop *l)
{
	l->stop = true;
}
