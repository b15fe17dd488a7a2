// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Redis Sentinel (--redis sentinel:NAME@HOST:PORT,...): which master the
 * broker's connections go to.  A sentinel is asked (SENTINEL
 * get-master-addr-by-name) before the first connection and every second on
 * the same connection, and the next sentinel after every lost connection
 * to Redis (a sentinel cut off with the old master would name it for
 * ever); when the answer changes - a failover - the connections are
 * dropped and made again to the new master.  Between the old master's loss
 * and the new one's first answer the broker is degraded, as in any outage.
 * Sentinels that require a password (their requirepass) get AUTH first on
 * every connection.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker_int.h"
#include "log.h"
#include "parse.h"
#include "redis_loop.h"

#define ASK_LOST_NS	(2ULL * 1000000000ULL)	/* a question unanswered */

struct sentinel {
	struct broker *b;
	char name[SENTINEL_NAME_MAX + 1];
	char host[CC_SEEDS_MAX][CLUSTER_HOST_MAX];
	uint16_t port[CC_SEEDS_MAX];
	unsigned int n, next;
	redisAsyncContext *ac;		/* to the sentinel asked */
	bool pending;			/* a question unanswered on it */
	const char *asked;		/* that sentinel */
	uint64_t asked_ns;
	bool warned;
	char *password;			/* AUTH to the sentinels, or NULL */
	const char *user;
};

int broker_sentinel_parse(const char *s, char *name, size_t namelen, char *err,
			  size_t errlen)
{
	const char *at = strchr(s, '@');

	if (!at || at == s || (size_t)(at - s) >= namelen ||
	    (size_t)(at - s) > SENTINEL_NAME_MAX) {
		snprintf(err, errlen, "expected NAME@HOST:PORT[,HOST:PORT...] with "
			 "a master name of 1 to %d bytes", SENTINEL_NAME_MAX);
		return -EINVAL;
	}
	for (const char *p = s; p < at; p++)
		if (*p <= ' ' || *p == ',') {
			snprintf(err, errlen, "the master name may not contain "
				 "spaces or commas");
			return -EINVAL;
		}
	if (cc_parse_seeds(at + 1, err, errlen))
		return -EINVAL;
	memcpy(name, s, (size_t)(at - s));
	name[at - s] = '\0';
	return 0;
}

int broker_sentinel_open(struct broker *b, const char *spec)
{
	struct sentinel *sn = calloc(1, sizeof(*sn));
	char err[160];
	const char *p;

	if (!sn)
		return -ENOMEM;
	if (broker_sentinel_parse(spec, sn->name, sizeof(sn->name), err, sizeof(err))) {
		log_error("couldn't use Sentinel '%s': %s", spec, err);
		free(sn);
		return -EINVAL;
	}
	for (p = strchr(spec, '@') + 1; p && sn->n < CC_SEEDS_MAX;
	     p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
		char one[CLUSTER_HOST_MAX + 16];
		size_t len = strcspn(p, ",");

		memcpy(one, p, len);
		one[len] = '\0';
		if (parse_hostport(one, sn->host[sn->n], sizeof(sn->host[0]),
				   &sn->port[sn->n]) == 0)
			sn->n++;
	}
	if (b->o.sentinel_password_file &&
	    broker_read_password(b->o.sentinel_password_file, &sn->password)) {
		free(sn);
		return -EINVAL;
	}
	sn->user = b->o.sentinel_user;
	sn->b = b;
	b->sen = sn;
	return 0;
}

static void ask_done(struct sentinel *sn)
{
	redisAsyncContext *ac = sn->ac;

	sn->ac = NULL;
	if (ac) {
		ac->onDisconnect = NULL;
		redisAsyncFree(ac);
	}
}

void broker_sentinel_close(struct broker *b)
{
	if (!b->sen)
		return;
	ask_done(b->sen);
	free(b->sen->password);
	free(b->sen);
	b->sen = NULL;
}

static void leave_old(struct broker *b, struct conn *c)
{
	if (c->state == C_UP && c->ac &&
	    (strcmp(c->host, b->host) || c->port != b->port))
		redisAsyncDisconnect(c->ac);
}

/* The sentinels' answer: {ip, port} of the master, or nil for a name they
 * do not monitor. */
static void on_master(redisAsyncContext *ac, void *reply, void *priv)
{
	struct sentinel *sn = priv;
	struct broker *b = sn->b;
	redisReply *r = reply;
	uint64_t port;
	bool moved;

	(void)ac;
	sn->pending = false;
	if (!r)
		return;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[0]->len >= sizeof(b->host) ||
	    parse_u64(r->element[1]->str, 1, 65535, &port)) {
		if (!sn->warned)
			log_error("Sentinel on '%s' does not name a master '%s': %s",
				  sn->asked, sn->name,
				  r->type == REDIS_REPLY_ERROR ? r->str :
				  r->type == REDIS_REPLY_NIL ? "no such master" :
							       "unexpected reply");
		sn->warned = true;
		redisAsyncDisconnect(sn->ac);
		return;
	}
	sn->warned = false;
	moved = b->host[0] && (strcmp(b->host, r->element[0]->str) ||
			       b->port != (int)port);
	if (moved)
		log_warn("Sentinel: master '%s' is now %s:%llu (was %s:%d): "
			 "reconnecting", sn->name, r->element[0]->str,
			 (unsigned long long)port, b->host, b->port);
	else if (!b->host[0])
		log_info("Sentinel: master '%s' is %s:%llu", sn->name,
			 r->element[0]->str, (unsigned long long)port);
	snprintf(b->host, sizeof(b->host), "%s", r->element[0]->str);
	b->port = (int)port;
	/* A connection to another node - the old master, which may still
	 * answer, as a replica that refuses every write - must go.  One still
	 * connecting is looked at again at the next answer, once it is up. */
	leave_old(b, &b->cmd);
	leave_old(b, &b->sub);
}

static void on_sentinel_connect(const redisAsyncContext *ac, int status)
{
	struct sentinel *sn = ac->data;

	if (status == REDIS_OK)
		return;
	if (!sn->warned)
		log_warn("couldn't ask Sentinel on '%s': %s (asking the next)",
			 sn->asked, ac->errstr);
	sn->ac = NULL;
	sn->pending = false;
}

static void on_sentinel_disconnect(const redisAsyncContext *ac, int status)
{
	struct sentinel *sn = ac->data;

	(void)status;
	sn->ac = NULL;
	sn->pending = false;
}

/* AUTH refused (a wrong password, or none set on the sentinel): said once
 * per episode, and the next sentinel is asked at the next question. */
static void on_sentinel_auth(redisAsyncContext *ac, void *reply, void *priv)
{
	struct sentinel *sn = priv;
	redisReply *r = reply;

	(void)ac;
	if (!r || r->type != REDIS_REPLY_ERROR)
		return;
	if (!sn->warned)
		log_error("couldn't authenticate to Sentinel on '%s': %s", sn->asked,
			  r->str);
	sn->warned = true;
	if (sn->ac)
		redisAsyncDisconnect(sn->ac);
}

static void ask_on(struct sentinel *sn)
{
	sn->asked_ns = loop_now_ns();
	if (redisAsyncCommand(sn->ac, on_master, sn, "SENTINEL get-master-addr-by-name %s",
			      sn->name) == REDIS_OK)
		sn->pending = true;
	else
		ask_done(sn);
}

/* Asks a sentinel for the master: the one asked last, on its connection;
 * the next one when next is set, the last one's connection is gone, or a
 * question has gone unanswered for ASK_LOST_NS.  Nothing while a question
 * is on its way.  The answer lands in b->host and b->port. */
void broker_sentinel_ask(struct broker *b, bool next)
{
	struct sentinel *sn = b->sen;
	unsigned int i;
	redisAsyncContext *ac;

	if (!sn || b->done || !broker_may_start(b))
		return;
	if (sn->ac) {
		if (sn->pending && loop_now_ns() - sn->asked_ns < ASK_LOST_NS)
			return;
		if (!sn->pending && !next) {
			ask_on(sn);
			return;
		}
		ask_done(sn);
		sn->pending = false;
	}
	i = sn->next++ % sn->n;
	sn->asked = sn->host[i];
	ac = redisAsyncConnect(sn->host[i], sn->port[i]);
	if (!ac || ac->err) {
		if (ac)
			redisAsyncFree(ac);
		return;
	}
	ac->data = sn;
	/* With --redis-tls the sentinels are asked over TLS too. */
	if ((b->tls && redis_tls_wrap(b->tls, ac, host_loop(b), sn->host[i])) ||
	    redis_loop_attach(ac, host_loop(b))) {
		redisAsyncFree(ac);
		return;
	}
	redisAsyncSetConnectCallback(ac, on_sentinel_connect);
	redisAsyncSetDisconnectCallback(ac, on_sentinel_disconnect);
	sn->ac = ac;
	/* Ahead of the question on the same connection: answered first. */
	if (sn->password &&
	    (sn->user ? redisAsyncCommand(ac, on_sentinel_auth, sn, "AUTH %s %s",
					  sn->user, sn->password) :
			redisAsyncCommand(ac, on_sentinel_auth, sn, "AUTH %s",
					  sn->password)) != REDIS_OK) {
		ask_done(sn);
		return;
	}
	ask_on(sn);
}

/* No master known yet: connections wait for the sentinels' answer. */
bool broker_sentinel_waiting(const struct broker *b)
{
	return b->sen && !b->host[0];
}
