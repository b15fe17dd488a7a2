/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A single-threaded event loop on io_uring: fd readiness watches (one-shot
 * polls, re-armed for as long as the interest lasts), one-shot and periodic
 * timers, and cancellation.  Small enough to sit under a hiredis adapter:
 * addRead/delRead/addWrite/delWrite map to loop_watch_set(), cleanup to
 * loop_watch_del().
 */
#ifndef RL_LOOP_H
#define RL_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#define LOOP_READ	(1U << 0)
#define LOOP_WRITE	(1U << 1)
/* Only ever passed to callbacks: the peer hung up or the fd is in error.
 * A read or write then tells the details. */
#define LOOP_HUP	(1U << 2)

struct loop;
struct loop_watch;
struct loop_timer;

/* events is what is ready, a subset of the interest plus LOOP_HUP.  The
 * callback may change the interest, delete the watch (and close the fd), or
 * stop the loop. */
typedef void (*loop_watch_fn)(struct loop_watch *w, int fd, unsigned int events,
			      void *arg);
typedef void (*loop_timer_fn)(struct loop_timer *t, void *arg);

/* Creates a loop with room for `entries` submissions in flight per
 * iteration (0 for a default).  0 or -errno. */
int loop_new(unsigned int entries, struct loop **out);

/* Frees the loop and every watch and timer still registered.  Does not close
 * the watched fds: they belong to the caller. */
void loop_free(struct loop *l);

/* Starts watching fd for `events` (LOOP_READ|LOOP_WRITE, may be 0 to
 * register now and arm later).  The watch is level-triggered in effect: the
 * callback is called again for as long as the fd stays ready and the
 * interest stays set.  0 or -errno. */
int loop_watch_add(struct loop *l, int fd, unsigned int events,
		   loop_watch_fn fn, void *arg, struct loop_watch **out);

/* Replaces the interest of a watch.  Safe from any callback. */
void loop_watch_set(struct loop_watch *w, unsigned int events);
unsigned int loop_watch_events(const struct loop_watch *w);

/* Stops watching and releases the watch (memory is reclaimed once the
 * kernel has let go of its poll).  No callback for it runs after this
 * returns; the caller may close the fd right away. */
void loop_watch_del(struct loop_watch *w);

/* Fires fn after delay_ms milliseconds, and then every period_ms if that is
 * not 0 (a periodic timer keeps its phase: a slow callback does not make it
 * drift).  0 or -errno. */
int loop_timer_add(struct loop *l, uint64_t delay_ms, uint64_t period_ms,
		   loop_timer_fn fn, void *arg, struct loop_timer **out);

/* Cancels a timer: fn will not run again.  A one-shot timer that has fired
 * is already gone and must not be cancelled. */
void loop_timer_cancel(struct loop_timer *t);

/* Runs callbacks until loop_stop() is called.  0, or -errno if the ring
 * fails. */
int loop_run(struct loop *l);

/* Waits for at most one batch of completions (up to timeout_ms, or forever
 * if negative) and runs their callbacks.  0 (also on timeout) or -errno. */
int loop_run_once(struct loop *l, int timeout_ms);

void loop_stop(struct loop *l);

/* Seconds of turns the loop remembers: loop_longest_turn() looks back at
 * most this far. */
#define LOOP_TURN_SECONDS	64

/* The longest turn of the loop (its callbacks, one batch of completions)
 * begun in the second of CLOCK_MONOTONIC now_ns is in or the seconds - 1
 * before it: in wall time, and in the CPU time of the
 * loop's thread.  Every callback that ran in one, whatever it was, counts:
 * while a turn runs, nothing else on the loop does. */
void loop_longest_turn(const struct loop *l, unsigned int seconds,
		       uint64_t now_ns, uint64_t *wall_ns, uint64_t *cpu_ns);

/* CLOCK_MONOTONIC in nanoseconds: the clock of bpf_ktime_get_ns() and of
 * the loop's timers. */
uint64_t loop_now_ns(void);

#endif /* RL_LOOP_H */
