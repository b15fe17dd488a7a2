// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* hiredis async adapter for the io_uring loop.  hiredis asks for read and
 * write interest through idempotent hooks; we keep one loop watch per
 * context and change its interest.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/hiredis.h>

#include "log.h"
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

/*
 * Reply constructors that refuse what hiredis' async layer would abort on.
 * hiredis asserts, rather than fails, on a reply nobody asked for and on a
 * pub/sub push too short to name its kind and channel: a broken server or
 * proxy could kill the agent.  Refusing to build such a reply makes the
 * reader fail, and hiredis then drops the connection the normal way (the
 * breaker opens, the agent reconnects).  Everything else is built exactly as
 * hiredis would, so freeReplyObject frees it.
 */
static bool refuse(const redisReadTask *task, int type, int elements)
{
	const redisAsyncContext *ac = task->privdata;
	bool subscribed;

	if (!ac)
		return false;
	subscribed = ac->c.flags & REDIS_SUBSCRIBED;
	if (!task->parent) {
		/* A reply to a command still waiting for one is fine. */
		if (ac->replies.head)
			return false;
		if (!subscribed) {
			log_warn("Redis sent a reply nobody asked for: dropping the "
				 "connection");
			return true;
		}
		if (type != REDIS_REPLY_ARRAY || elements < 3) {
			log_warn("Redis sent a malformed pub/sub message: dropping "
				 "the connection");
			return true;
		}
		return false;
	}
	/* The kind and the channel of a pub/sub push must be strings. */
	if (subscribed && !ac->replies.head && !task->parent->parent &&
	    task->idx < 2 && type != REDIS_REPLY_STRING) {
		log_warn("Redis sent a malformed pub/sub message: dropping the "
			 "connection");
		return true;
	}
	return false;
}

/* elements: of an array (hiredis fills in task->elements only after this
 * call), else 0. */
static void *new_reply(const redisReadTask *task, int type, int elements)
{
	redisReply *r;

	if (refuse(task, type, elements))
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->type = type;
	if (task->parent) {
		redisReply *parent = task->parent->obj;

		parent->element[task->idx] = r;
	}
	return r;
}

static void *create_string(const redisReadTask *task, char *str, size_t len)
{
	redisReply *r;
	char *buf = malloc(len + 1);

	if (!buf)
		return NULL;
	r = new_reply(task, task->type, 0);
	if (!r) {
		free(buf);
		return NULL;
	}
	memcpy(buf, str, len);
	buf[len] = '\0';
	r->str = buf;
	r->len = len;
	return r;
}

static void *create_array(const redisReadTask *task, int elements)
{
	redisReply *r;
	redisReply **el = NULL;

	if (elements > 0) {
		el = calloc((size_t)elements, sizeof(*el));
		if (!el)
			return NULL;
	}
	r = new_reply(task, REDIS_REPLY_ARRAY, elements);
	if (!r) {
		free(el);
		return NULL;
	}
	r->element = el;
	r->elements = elements > 0 ? (size_t)elements : 0;
	return r;
}

static void *create_integer(const redisReadTask *task, long long value)
{
	redisReply *r = new_reply(task, REDIS_REPLY_INTEGER, 0);

	if (r)
		r->integer = value;
	return r;
}

static void *create_nil(const redisReadTask *task)
{
	return new_reply(task, REDIS_REPLY_NIL, 0);
}

static redisReplyObjectFunctions guarded_fns = {
	.createString = create_string,
	.createArray = create_array,
	.createInteger = create_integer,
	.createNil = create_nil,
	.freeObject = freeReplyObject,
};

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
	ac->c.reader->fn = &guarded_fns;
	ac->c.reader->privdata = ac;
	ac->ev.data = rl;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	return 0;
}
