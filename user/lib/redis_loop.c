// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* hiredis async adapter for the io_uring loop.  hiredis asks for read and
 * write interest through idempotent hooks; we keep one loop watch per
 * context and change its interest.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "redis_loop.h"

struct redis_loop {
	redisAsyncContext *ac;
	struct loop_watch *watch;
	bool in_callback;	/* hiredis may free the context under us */
	bool dead;		/* cleanup ran while in_callback */
};

static void on_ready(struct loop_watch *w, int fd, unsigned int events, void *arg)
{
	struct redis_loop *rl = arg;

	(void)w;
	(void)fd;
	rl->in_callback = true;
	/* A hang-up is reported as readable: the read sees EOF or the error
	 * and hiredis disconnects with the reason in ac->errstr. */
	if (events & (LOOP_READ | LOOP_HUP))
		redisAsyncHandleRead(rl->ac);
	if (!rl->dead && (events & LOOP_WRITE))
		redisAsyncHandleWrite(rl->ac);
	rl->in_callback = false;
	if (rl->dead)
		free(rl);
}

static void set_interest(struct redis_loop *rl, unsigned int add, unsigned int del)
{
	unsigned int ev = loop_watch_events(rl->watch);

	loop_watch_set(rl->watch, (ev | add) & ~del);
}

static void add_read(void *p) { set_interest(p, LOOP_READ, 0); }
static void del_read(void *p) { set_interest(p, 0, LOOP_READ); }
static void add_write(void *p) { set_interest(p, LOOP_WRITE, 0); }
static void del_write(void *p) { set_interest(p, 0, LOOP_WRITE); }

static void cleanup(void *p)
{
	struct redis_loop *rl = p;

	loop_watch_del(rl->watch);
	rl->watch = NULL;
	rl->ac = NULL;
	if (rl->in_callback)
		rl->dead = true;
	else
		free(rl);
}

int redis_loop_attach(redisAsyncContext *ac, struct loop *l)
{
	struct redis_loop *rl;
	int err;

	if (ac->ev.data)
		return -EEXIST;
	rl = calloc(1, sizeof(*rl));
	if (!rl)
		return -ENOMEM;
	rl->ac = ac;
	err = loop_watch_add(l, ac->c.fd, 0, on_ready, rl, &rl->watch);
	if (err) {
		free(rl);
		return err;
	}
	ac->ev.data = rl;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	return 0;
}
