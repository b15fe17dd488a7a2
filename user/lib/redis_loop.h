/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* hiredis' asynchronous API on rlgate's io_uring loop: the five hooks
 * (addRead, delRead, addWrite, delWrite, cleanup) mapped onto a loop watch,
 * in the manner of hiredis' own adapters for libev or libuv.
 */
#ifndef RL_REDIS_LOOP_H
#define RL_REDIS_LOOP_H

#include <hiredis/async.h>
#include "loop.h"

/* Attaches ac to l: from now on the loop drives its socket.  The adapter is
 * released by hiredis' cleanup hook when the context is freed or
 * disconnected.  It also makes ac drop the connection, instead of aborting
 * the process, on replies hiredis cannot place (unsolicited, or malformed
 * pub/sub pushes).  0, or -errno (-EEXIST if ac already has an adapter). */
int redis_loop_attach(redisAsyncContext *ac, struct loop *l);

#endif /* RL_REDIS_LOOP_H */
