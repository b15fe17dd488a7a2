/* test_loop: io_uring loop timers fire in deadline order, fd readiness is
 * reported (and re-armed while ready), cancelled timers and deleted watches
 * never call back, a periodic timer keeps firing, the longest turn of the
 * loop is remembered by the second it began in.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "loop.h"
#include "check.h"

/* The loop every test runs on. */
static struct loop *the_loop;

static int order[8];
static int n_order;

static void record(struct loop_timer *t, void *arg)
{
	(void)t;
	if (n_order < 8)
		order[n_order++] = (int)(long)arg;
}

static void stop_loop(struct loop_timer *t, void *arg)
{
	(void)t;
	loop_stop(arg);
}

static void test_timer_order(void)
{
	struct loop *l = the_loop;
	struct loop_timer *cancelled, *stopper;

	n_order = 0;
	loop_timer_add(l, 30, 0, record, (void *)3L, NULL);
	loop_timer_add(l, 10, 0, record, (void *)1L, NULL);
	loop_timer_add(l, 20, 0, record, (void *)2L, NULL);
	loop_timer_add(l, 25, 0, record, (void *)99L, &cancelled);
	loop_timer_cancel(cancelled);
	loop_timer_add(l, 60, 0, stop_loop, l, &stopper);
	CHECK(loop_run(l) == 0, "loop_run failed");
	CHECK(n_order == 3, "expected 3 timers, got %d", n_order);
	CHECK(order[0] == 1 && order[1] == 2 && order[2] == 3,
	      "timers out of order: %d %d %d", order[0], order[1], order[2]);
}

static int ticks;

static void tick(struct loop_timer *t, void *arg)
{
	(void)arg;
	if (++ticks == 3)
		loop_timer_cancel(t);	/* from inside its own callback */
}

static void test_periodic(void)
{
	struct loop *l = the_loop;
	uint64_t start = loop_now_ns();

	ticks = 0;
	loop_timer_add(l, 5, 5, tick, NULL, NULL);
	loop_timer_add(l, 60, 0, stop_loop, l, NULL);
	CHECK(loop_run(l) == 0, "loop_run failed");
	CHECK(ticks == 3, "periodic timer fired %d times, expected 3 (cancel "
	      "from its callback)", ticks);
	CHECK(loop_now_ns() - start >= 55000000ULL, "loop stopped early");
}

struct rd {
	int reads;
	int bytes;
	struct loop_watch *w;
	struct loop *l;
};

static void on_read(struct loop_watch *w, int fd, unsigned int ev, void *arg)
{
	struct rd *r = arg;
	char buf[4];
	ssize_t n;

	(void)w;
	CHECK(ev & LOOP_READ, "callback without LOOP_READ (ev %#x)", ev);
	/* Read less than is there: the watch must report it again. */
	n = read(fd, buf, 1);
	if (n > 0)
		r->bytes += (int)n;
	r->reads++;
	if (r->bytes == 3) {
		loop_watch_del(r->w);
		loop_stop(r->l);
	}
}

static void never(struct loop_watch *w, int fd, unsigned int ev, void *arg)
{
	(void)w; (void)fd; (void)ev;
	*(int *)arg += 1;
}

static void on_write(struct loop_watch *w, int fd, unsigned int ev, void *arg)
{
	(void)fd;
	CHECK(ev & LOOP_WRITE, "callback without LOOP_WRITE (ev %#x)", ev);
	*(int *)arg += 1;
	loop_watch_set(w, 0);
}

static void test_fd(void)
{
	struct loop *l = the_loop;
	struct loop_watch *deleted, *wr;
	struct rd r = { .l = l };
	int p[2], q[2], spurious = 0, writable = 0;

	if (pipe(p) < 0 || pipe(q) < 0) {
		check_skip("no pipes: %s", strerror(errno));
		return;
	}
	CHECK(loop_watch_add(l, p[0], LOOP_READ, on_read, &r, &r.w) == 0,
	      "watch_add failed");
	CHECK(loop_watch_add(l, q[0], LOOP_READ, never, &spurious, &deleted) == 0,
	      "watch_add failed");
	loop_watch_del(deleted);
	CHECK(loop_watch_add(l, q[1], 0, on_write, &writable, &wr) == 0,
	      "watch_add failed");
	/* Interest switched on after registration (hiredis' addWrite). */
	loop_watch_set(wr, LOOP_WRITE);
	CHECK(write(q[1], "x", 1) == 1, "write");
	CHECK(write(p[1], "abc", 3) == 3, "write");
	loop_timer_add(l, 1000, 0, stop_loop, l, NULL);
	CHECK(loop_run(l) == 0, "loop_run failed");
	CHECK(r.bytes == 3, "read %d bytes, expected 3", r.bytes);
	CHECK(r.reads == 3, "%d read callbacks, expected 3 (level-triggered)",
	      r.reads);
	CHECK(spurious == 0, "deleted watch called back %d times", spurious);
	CHECK(writable == 1, "write watch fired %d times, expected 1 (interest "
	      "cleared in callback)", writable);
	loop_watch_del(wr);
	close(p[0]); close(p[1]); close(q[0]); close(q[1]);
}

/* Burns 20 ms of this thread's CPU, then stops the loop. */
static void burn(struct loop_timer *t, void *arg)
{
	struct timespec a, b;

	(void)t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
	do
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
	while ((uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ULL + (uint64_t)b.tv_nsec -
	       (uint64_t)a.tv_nsec < 20000000ULL);
	loop_stop(arg);
}

/* The longest turn counts whatever callback ran in it, in wall time and in
 * the thread's CPU time, by the second it began in: seen from within its
 * window, not from a second past it. */
static void test_longest_turn(void)
{
	struct loop *l = the_loop;
	uint64_t wall, cpu, now;

	CHECK(loop_timer_add(l, 0, 0, burn, l, NULL) == 0, "loop_timer_add");
	CHECK(loop_run(l) == 0, "loop_run failed");
	now = loop_now_ns();
	loop_longest_turn(l, 2, now, &wall, &cpu);
	CHECK(cpu >= 20000000ULL, "longest turn %llu ns of CPU, burnt 20 ms",
	      (unsigned long long)cpu);
	CHECK(wall >= cpu, "longest turn %llu ns of wall time < %llu of CPU",
	      (unsigned long long)wall, (unsigned long long)cpu);
	loop_longest_turn(l, LOOP_TURN_SECONDS, now + 3000000000ULL, &wall, &cpu);
	CHECK(cpu >= 20000000ULL, "a turn 3 s back is in a window of %d s",
	      LOOP_TURN_SECONDS);
	loop_longest_turn(l, 1, now + 3000000000ULL, &wall, &cpu);
	CHECK(wall == 0 && cpu == 0, "a turn 3 s back counted in a 1 s window "
	      "(%llu ns)", (unsigned long long)wall);
	loop_longest_turn(l, 2, now + (LOOP_TURN_SECONDS + 2) * 1000000000ULL,
			  &wall, &cpu);
	CHECK(wall == 0 && cpu == 0, "a turn past the memory counted (%llu ns)",
	      (unsigned long long)wall);
}

int main(void)
{
	int err;

	log_set_ident("test_loop");
	err = loop_new(0, &the_loop);
	if (err == -ENOSYS || err == -EPERM) {
		fprintf(stderr, "SKIP: io_uring unavailable: %s\n", strerror(-err));
		return 77;
	}
	if (err)
		return 1;
	CHECK_RUN(test_timer_order);
	CHECK_RUN(test_periodic);
	CHECK_RUN(test_fd);
	CHECK_RUN(test_longest_turn);
	loop_free(the_loop);
	return check_exit();
}
