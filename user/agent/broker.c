// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Fleet mode's lease broker.  The kernel spends leased tokens; this module
 * fetches the next lease while the last one is still being spent (low-water
 * events and a 50 ms check), sizes leases from the host's own traffic within
 * the tenant's overshoot budget, gives back tokens that sat idle, and keeps
 * the registry of live agents and the policy store.  Everything runs on the
 * agent's loop: no connection ever waits for Redis.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "agent.h"
#include "broker.h"
#include "lease.h"
#include "log.h"
#include "redis_loop.h"
#include "scripts.h"

#define CHECK_MS		50	/* lease check period */
#define HEARTBEAT_MS		1000
#define REGISTRY_TTL_MS		3000	/* three missed heartbeats: gone */
#define ID_CLASH_CLEAR_NS	(10ULL * 1000000000ULL)	/* no other agent seen */
#define CALL_TIMEOUT_NS		(2ULL * 1000000000ULL)
#define BACKOFF_MIN_MS		100
#define BACKOFF_MAX_MS		1000	/* the heartbeat's period: back as soon */
#define SHUTDOWN_MS		1000
#define CALL_RING		1024
#define SCRIPTS_ALL		((1u << S_COUNT) - 1)

enum script_id { S_LEASE, S_REFUND, S_HEARTBEAT, S_DEREGISTER, S_POLICY_SET,
		 S_POLICY_GET, S_COUNT };

static const char *const script_names[S_COUNT] = {
	[S_LEASE] = "lease", [S_REFUND] = "refund",
	[S_HEARTBEAT] = "heartbeat", [S_DEREGISTER] = "deregister",
	[S_POLICY_SET] = "policy_set", [S_POLICY_GET] = "policy_get",
};

enum conn_state { C_DOWN, C_CONNECTING, C_UP };

/* One Redis connection with reconnect and backoff: the command connection
 * and the subscriber (a subscribed connection takes no other commands). */
struct conn {
	struct broker *b;
	redisAsyncContext *ac;
	enum conn_state state;
	uint64_t backoff_ms;
	struct loop_timer *retry;
	bool subscriber;
	const char *name;
};

/* Lease state of one kernel slot. */
struct slot {
	char name[POLICY_NAME_MAX + 1];	/* "" while unused */
	uint64_t gen;			/* bumped when the slot changes tenant */
	bool inflight;
	uint64_t sent_ns;
	uint64_t wait_until_ns;		/* Redis advised to wait */
	uint64_t last_grant_ns;
	uint64_t last_active_ns;	/* last time the tenant's counters moved */
	uint64_t seen_count;		/* admitted + denied at that time */
	bool want_lease;		/* a low-water event asked for one */
	uint64_t lease;			/* current lease size */
	uint64_t lowwater;		/* prefetch when the kernel holds this few */
	uint64_t chunk;			/* when Redis is short: come back for this */
	struct policy_rate rate;	/* the limit the state above is about */
	uint64_t burst, budget;
	uint64_t refunding;		/* tokens in refunds not answered yet */
	uint64_t debt;			/* tokens admitted without a lease */
	uint64_t static_debt;		/* ...of those, by the static fail share */
	int64_t fail_seen;		/* fail_count() at the last look */
	bool fail_seen_ok;
	uint64_t meter_ns, meter_count;	/* demand at the last lease sizing */
	uint64_t sized_ns;		/* when the sizes above were set */
	bool scarce;			/* the last reply left less than a chunk */
	struct loop_timer *wait_timer;	/* fires when Redis said to come back */
	struct broker *b;
	uint32_t idx;
	struct broker_tenant_stats st;
};

struct broker {
	struct agent *a;
	struct broker_opts o;
	char host[256], path[256];
	int port;
	char address[300];
	char *password;
	char agent_id[257];
	char nonce[17];			/* this process's, in the registry */
	bool hb_first;			/* no heartbeat answered on this connection */
	bool id_clash;			/* another agent uses agent_id */
	uint64_t id_clash_seen_ns;
	uint64_t id_clashes;		/* episodes */
	struct conn cmd, sub;
	char sha[S_COUNT][41];
	unsigned int scripts_mask;	/* bit i: script i loaded */
	bool scripts_ok;
	uint64_t load_sent_ns;		/* the last SCRIPT LOADs went out */
	uint64_t load_backoff_ms;
	struct loop_timer *load_retry;
	bool load_warned;		/* once per episode */
	struct loop_timer *check, *heartbeat;
	/* policy store: tenants to read as one batch once POLICY_BATCH_MS
	 * passed, and the fleet's changes that wait for another one */
	char (*want)[POLICY_NAME_MAX + 1];
	size_t n_want, cap_want;
	struct loop_timer *want_timer;
	char (*waiting)[POLICY_NAME_MAX + 1];
	size_t n_waiting;
	bool sync_again;	/* a sync's call failed: sync once healthy */
	uint64_t live_agents;
	uint64_t live_low_since_ns;	/* a smaller count seen since then */
	uint64_t redis_calls, redis_errors;
	uint64_t lease_buckets[BROKER_LEASE_BUCKETS];
	double lease_sum_s;
	uint64_t lease_count;
	uint64_t rtt_ns;		/* lease round trip, a moving average */
	struct slot *slots;		/* RL_MAX_TENANTS */
	/* circuit breaker */
	bool open, ever_healthy, tokens_expired;
	unsigned int failures;
	uint64_t open_since_ns;
	time_t degraded_since;
	char reason[160];
	uint64_t transitions, redis_timeouts;
	uint64_t ring[CALL_RING];	/* send times of calls in flight */
	unsigned int ring_head, ring_len;
	/* clean shutdown */
	void (*done)(void *arg);
	void *done_arg;
	unsigned int pending;
	struct loop_timer *deadline;
};

static const double lease_bounds[BROKER_LEASE_BUCKETS] = {
	0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
	__builtin_inf(),
};

static void conn_start(struct conn *c);

/* --- addresses and options ------------------------------------------------ */

int broker_parse_address(const char *s, char *host, size_t host_len, int *port,
			 char *path, size_t path_len)
{
	const char *colon;
	char *end;
	long p;

	host[0] = path[0] = '\0';
	*port = 0;
	if (strncmp(s, "unix:", 5) == 0) {
		if (s[5] != '/' || strlen(s + 5) >= path_len)
			return -EINVAL;
		strcpy(path, s + 5);
		return 0;
	}
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':' || (size_t)(close - s - 1) >= host_len ||
		    close == s + 1)
			return -EINVAL;
		memcpy(host, s + 1, close - s - 1);
		host[close - s - 1] = '\0';
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || colon == s || (size_t)(colon - s) >= host_len ||
		    memchr(s, ':', colon - s))
			return -EINVAL;
		memcpy(host, s, colon - s);
		host[colon - s] = '\0';
	}
	errno = 0;
	p = strtol(colon + 1, &end, 10);
	if (errno || *end || end == colon + 1 || p < 1 || p > 65535)
		return -EINVAL;
	*port = (int)p;
	return 0;
}

static int read_password(const char *file, char **out)
{
	char buf[1024];
	FILE *f = fopen(file, "r");
	size_t n;

	if (!f) {
		int err = -errno;

		log_error("couldn't open Redis password file on '%s': %s", file,
			  strerror(-err));
		return err;
	}
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	if (!buf[0]) {
		log_error("couldn't use Redis password file on '%s': it is empty",
			  file);
		return -EINVAL;
	}
	*out = strdup(buf);
	return *out ? 0 : -ENOMEM;
}

/* --- calls ------------------------------------------------------------------ */

struct call {
	struct broker *b;
	enum script_id script;
	uint32_t slot;
	uint64_t gen;
	uint64_t sent_ns;
	uint64_t n;		/* lease: wanted; refund: tokens */
	uint64_t chunk;		/* lease: the min chunk asked for */
	redisCallbackFn *fn;	/* the script's own callback */
	char name[POLICY_NAME_MAX + 1];
	struct read_batch *batch;	/* policy_get: the batch, and which one */
	size_t idx;
};

/* --- circuit breaker ----------------------------------------------------------
 *
 * Closed: leasing.  It opens after BREAKER_FAILURES consecutive failures
 * (error replies, unusable replies, a call unanswered for the --redis-timeout)
 * or at once when the connection is lost or cannot be made.  Open: no leases;
 * the kernel is told the fleet is degraded and applies each tenant's fail
 * policy once its leased tokens are spent.  The heartbeat, every second, is
 * the half-open probe: its first good reply closes the breaker.
 */
#define BREAKER_FAILURES	3

static void debt_look(struct broker *b);
static void debt_begin(struct broker *b);
static void lease_all(struct broker *b, uint64_t now);

static void breaker_open(struct broker *b, const char *reason)
{
	b->failures = 0;
	if (b->open)
		return;
	/* Before the kernel turns to the fail policies: from here on, what
	 * they admit is counted. */
	debt_begin(b);
	b->open = true;
	b->open_since_ns = loop_now_ns();
	b->degraded_since = time(NULL);
	b->tokens_expired = false;
	snprintf(b->reason, sizeof(b->reason), "%s", reason);
	if (b->ever_healthy)
		b->transitions++;
	log_warn("fleet degraded: %s; each tenant's fail policy applies once its "
		 "leased tokens are spent", reason);
	kern_fleet_state(&b->a->kern, loop_now_ns(), b->o.stale_ms * 1000000ULL, true);
}

static void breaker_failure(struct broker *b, const char *reason)
{
	if (++b->failures >= BREAKER_FAILURES)
		breaker_open(b, reason);
}

static void breaker_success(struct broker *b)
{
	b->failures = 0;
	if (!b->open || b->cmd.state != C_UP || !b->scripts_ok)
		return;
	b->open = false;
	if (b->ever_healthy)
		b->transitions++;
	if (b->ever_healthy)
		log_warn("fleet healthy again after %.1f s degraded (%s): leasing",
			 (double)(loop_now_ns() - b->open_since_ns) / 1e9, b->reason);
	else
		log_info("Redis on '%s' ready: leasing", b->address);
	b->ever_healthy = true;
	b->reason[0] = '\0';
	/* The spell's last look, while every refusal is still the fail
	 * policy's. */
	debt_look(b);
	kern_fleet_state(&b->a->kern, loop_now_ns(), b->o.stale_ms * 1000000ULL, false);
	/* At once, not at the next check: the kernel spends leased tokens
	 * only from here on. */
	lease_all(b, loop_now_ns());
}

/* Leases and refunds go out only while the breaker is closed. */
static bool leasing(const struct broker *b)
{
	return b->cmd.state == C_UP && b->scripts_ok && !b->open && !b->done;
}

/* Every reply passes here first: it answers the oldest call in flight. */
static void on_reply(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;

	if (b->ring_len) {
		b->ring_head = (b->ring_head + 1) % CALL_RING;
		b->ring_len--;
	}
	c->fn(ac, reply, priv);
}

/* Called every CHECK_MS: the oldest call unanswered past the timeout counts
 * as one failure per check for as long as it stays unanswered. */
static void breaker_check_timeouts(struct broker *b, uint64_t now)
{
	char why[96];

	if (!b->ring_len || now - b->ring[b->ring_head] < b->o.timeout_ms * 1000000ULL)
		return;
	snprintf(why, sizeof(why), "Redis on '%.40s' did not answer within %llu ms",
		 b->address, (unsigned long long)b->o.timeout_ms);
	b->redis_timeouts++;
	breaker_failure(b, why);
}

static bool reply_is_noscript(const redisReply *r)
{
	return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static void load_scripts(struct broker *b);
static void script_loads_check(struct broker *b, uint64_t now);

/* A script error or an unexpected reply: logged, counted; NOSCRIPT (Redis
 * restarted or flushed) reloads every script. */
static void call_failed(struct broker *b, enum script_id s, const redisReply *r)
{
	b->redis_errors++;
	if (!r) {
		log_debug("%s call lost: connection closed", script_names[s]);
		return;
	}
	{
		char why[128];

		snprintf(why, sizeof(why), "Redis on '%.60s' gave %s an unusable reply",
			 b->address, script_names[s]);
		breaker_failure(b, why);
	}
	if (reply_is_noscript(r)) {
		/* Every call in flight says so: one reload is enough. */
		if (b->scripts_ok) {
			log_warn("Redis on '%s' lost rlgate's scripts (restarted or "
				 "flushed): loading them again", b->address);
			load_scripts(b);
		}
		return;
	}
	if (r->type == REDIS_REPLY_ERROR)
		log_warn("couldn't run %s on '%s': %.200s", script_names[s],
			 b->address, r->str);
	else
		log_warn("couldn't use %s's reply from '%s': unexpected type %d",
			 script_names[s], b->address, r->type);
}

static bool int_array(const redisReply *r, size_t n)
{
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (r->element[i]->type != REDIS_REPLY_INTEGER ||
		    r->element[i]->integer < 0)
			return false;
	return true;
}

/* Sends EVALSHA of script s with the key(s) and argv.  The callback gets c
 * (freed by the callback).  0 or -ENOTCONN. */
static int eval(struct broker *b, enum script_id s, int nkeys, const char **args,
		int nargs, redisCallbackFn *fn, struct call *c)
{
	const char *argv[16];
	int argc = 0;
	char nk[4];

	if (b->cmd.state != C_UP || !b->scripts_ok)
		return -ENOTCONN;
	snprintf(nk, sizeof(nk), "%d", nkeys);
	argv[argc++] = "EVALSHA";
	argv[argc++] = b->sha[s];
	argv[argc++] = nk;
	for (int i = 0; i < nargs && argc < 16; i++)
		argv[argc++] = args[i];
	c->b = b;
	c->script = s;
	c->sent_ns = loop_now_ns();
	c->fn = fn;
	if (redisAsyncCommandArgv(b->cmd.ac, on_reply, c, argc, argv, NULL) != REDIS_OK)
		return -ENOTCONN;
	if (b->ring_len < CALL_RING)
		b->ring[(b->ring_head + b->ring_len++) % CALL_RING] = c->sent_ns;
	b->redis_calls++;
	return 0;
}

/* The key and the limit arguments every bucket script takes first. */
struct bucket_args {
	char key[128], count[24], period[24], burst[24];
};

static void bucket_args(const struct policy_tenant *p, struct bucket_args *ba)
{
	snprintf(ba->key, sizeof(ba->key), "rl:{t:%s}:bucket", p->name);
	snprintf(ba->count, sizeof(ba->count), "%llu", (unsigned long long)p->rate.count);
	snprintf(ba->period, sizeof(ba->period), "%llu",
		 (unsigned long long)p->rate.period_s);
	snprintf(ba->burst, sizeof(ba->burst), "%llu", (unsigned long long)p->burst);
}

/* --- leasing ------------------------------------------------------------------ */

/*
 * What a host holds of a tenant's tokens, and what it owes.
 *
 * held = tokens in the kernel + in a refund on its way to Redis; a lease on
 * its way is never more than the cap allows on top (lease_topup()).  So a
 * host never holds more than its lease cap, whatever the low-water events,
 * the prefetch and the replies in flight do.
 *
 * debt = tokens admitted that no lease paid for: the credit a host starts a
 * tenant with (so that no SYN is refused before its first lease is back),
 * and what the static fail share admitted during a degraded spell shorter
 * than a lease TTL (so that a Redis that flaps does not add a fresh share
 * each time while its bucket keeps refilling).  Every lease asks for the
 * debt on top and pays it first; tokens taken back from the kernel (refund,
 * expiry) pay it too.  A spell longer than a lease TTL is an outage: the fail
 * policy alone decides, and what it admitted is not paid back.
 * Together: lease_bound() (docs/operations.md).
 */

#define LEAD_MIN_MS	20	/* a lease's lead time: at least this, */
#define LEAD_MAX_MS	100	/* at most this, else four round trips */
#define METER_MIN_MS	5	/* demand since the last sizing: once this old, */
#define METER_MAX_MS	500	/* and no older than this */
#define RESIZE_MS	250	/* sizes of a busy tenant: at least this often */

static uint64_t agents_of(const struct broker *b)
{
	return b->live_agents ? b->live_agents : 1;
}

static uint64_t held_of(const struct broker *b, const struct slot *s)
{
	return kern_tenant_tokens(&b->a->kern, s->idx, loop_now_ns()) + s->refunding;
}

/* Tokens that leave the kernel unspent pay the debt first; returns what is
 * left over. */
static uint64_t pay_debt(struct slot *s, uint64_t n)
{
	uint64_t pay = n < s->debt ? n : s->debt;

	s->debt -= pay;
	if (s->static_debt > s->debt)
		s->static_debt = s->debt;
	return n - pay;
}

/* The host's demand (admitted + refused per second): the largest of the
 * rate over the last few seconds, the rate since the last one-second sample
 * and the rate since the last sizing, so that traffic moving to this host
 * gets big leases at once, not after the window has caught up.  Traffic that
 * starts after a quiet spell, before a recent sizing could measure it, is
 * not measured yet (negative): the two longer rates would average the quiet
 * spell in.  *refused: the part of the demand refused over the window. */
static double demand(const struct agent_tenant *t, struct slot *s,
		     const struct rl_stats *now_st, uint64_t now, double *refused)
{
	uint64_t count = now_st->admitted + now_st->denied, age = now - s->meter_ns;
	const struct agent_sample *o, *l;
	double dt, rate = -1, meter = -1;

	*refused = 0;
	if (t->n_samples >= 2) {
		o = &t->samples[0];
		l = &t->samples[t->n_samples - 1];
		dt = (double)(l->t_ns - o->t_ns) / 1e9;
		if (dt > 0 && l->admitted >= o->admitted && l->denied >= o->denied &&
		    l->admitted + l->denied > o->admitted + o->denied) {
			rate = (double)(l->admitted + l->denied - o->admitted -
					o->denied) / dt;
			*refused = (double)(l->denied - o->denied) /
				   (double)(l->admitted + l->denied - o->admitted -
					    o->denied);
		}
	}
	if (s->meter_ns && age >= METER_MIN_MS * 1000000ULL &&
	    age <= METER_MAX_MS * 1000000ULL && count >= s->meter_count)
		meter = (double)(count - s->meter_count) / ((double)age / 1e9);
	if (rate <= 0 && meter < 0)
		return -1;
	if (t->n_samples >= 1) {
		l = &t->samples[t->n_samples - 1];
		dt = (double)(now - l->t_ns) / 1e9;
		if (dt >= 0.05 && count >= l->admitted + l->denied &&
		    (double)(count - l->admitted - l->denied) / dt > rate)
			rate = (double)(count - l->admitted - l->denied) / dt;
	}
	return meter > rate ? meter : rate;
}

/* Sizes the next lease and the low-water mark (lease_plan()). */
static void size_lease(const struct broker *b, const struct agent_tenant *t,
		       struct slot *s, uint64_t now)
{
	struct rl_stats st;
	struct lease_plan p;
	struct lease_in in = {
		.rate = -1, .t = &t->pol, .agents = agents_of(b),
		.ttl_ms = b->o.lease_ttl_ms,
	};
	uint64_t lead = LEAD_MIN_MS + 4 * b->rtt_ns / 1000000ULL;

	in.lead_ms = lead > LEAD_MAX_MS ? LEAD_MAX_MS : lead;
	if (kern_tenant_stats(&b->a->kern, t->slot, &st) == 0) {
		in.rate = demand(t, s, &st, now, &in.refused);
		s->meter_ns = now;
		s->meter_count = st.admitted + st.denied;
	}
	lease_plan(&in, &p);
	s->lease = p.size;
	s->lowwater = p.lowwater;
	s->chunk = p.chunk;
	s->sized_ns = now;
}

static void observe_lease_rtt(struct broker *b, uint64_t ns)
{
	double s = (double)ns / 1e9;

	for (int i = 0; i < BROKER_LEASE_BUCKETS; i++)
		if (s <= lease_bounds[i])
			b->lease_buckets[i]++;
	b->lease_sum_s += s;
	b->lease_count++;
	/* a slow average: one slow reply does not double every lead time */
	b->rtt_ns = b->rtt_ns ? (b->rtt_ns * 7 + ns) / 8 : ns;
}

static void maybe_lease(struct broker *b, const struct agent_tenant *t,
			uint64_t now, bool force);

static void on_wait(struct loop_timer *tm, void *arg)
{
	struct slot *s = arg;
	struct broker *b = s->b;

	(void)tm;
	s->wait_timer = NULL;
	for (size_t i = 0; i < b->a->n_tenants; i++) {
		const struct agent_tenant *t = &b->a->tenants[i];

		if (t->slot == s->idx && strcmp(t->pol.name, s->name) == 0 &&
		    leasing(b))
			maybe_lease(b, t, loop_now_ns(), false);
	}
}

/* Forgets Redis's advice to wait: the limit changed, or Redis did. */
static void slot_unwait(struct slot *s)
{
	if (s->wait_timer)
		loop_timer_cancel(s->wait_timer);
	s->wait_timer = NULL;
	s->wait_until_ns = 0;
}

static void on_lease(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	struct slot *s = &b->slots[c->slot];
	redisReply *r = reply;
	uint64_t now = loop_now_ns(), granted, remaining, wait_ms, add, held, cap;
	struct agent_tenant *t;

	(void)ac;
	if (s->gen == c->gen)
		s->inflight = false;
	if (!int_array(r, 3)) {
		call_failed(b, S_LEASE, r);
		free(c);
		return;
	}
	observe_lease_rtt(b, now - c->sent_ns);
	log_debug("lease '%s': asked %llu, granted %lld, bucket %lld, wait %lld ms, "
		  "owed %llu", c->name, (unsigned long long)c->n,
		  r->element[0]->integer, r->element[1]->integer,
		  r->element[2]->integer, (unsigned long long)s->debt);
	granted = (uint64_t)r->element[0]->integer;
	remaining = (uint64_t)r->element[1]->integer;
	wait_ms = (uint64_t)r->element[2]->integer;
	t = agent_find(b->a, c->name);
	if (s->gen != c->gen || !t || t->slot != c->slot) {
		/* The tenant went away (or its slot changed) while we asked.
		 * Its limit is gone with it, so there is nothing to refund
		 * against: the tokens lapse, erring on the side of fewer
		 * admissions. */
		if (granted)
			log_debug("lease of %llu for departed tenant '%s' dropped",
				  (unsigned long long)granted, c->name);
		free(c);
		breaker_success(b);
		return;
	}
	if (granted) {
		s->st.leases++;
		s->st.tokens_leased += granted;
		s->last_grant_ns = now;
	}
	/* The debt first; the kernel gets the rest, within the cap (which
	 * may have shrunk while we asked: the excess lapses). */
	add = pay_debt(s, granted);
	held = held_of(b, s);
	cap = lease_cap(&t->pol, agents_of(b));
	if (add > (held < cap ? cap - held : 0)) {
		log_debug("lease '%s': %llu token(s) beyond the cap dropped", c->name,
			  (unsigned long long)(add - (held < cap ? cap - held : 0)));
		add = held < cap ? cap - held : 0;
	}
	kern_tokens_add(&b->a->kern, c->slot, add, (int64_t)s->lowwater);
	s->scarce = remaining < c->chunk;
	if (granted == c->n && remaining < c->chunk) {
		/* Granted in full, but the global bucket cannot serve the
		 * next chunk yet: the fleet is at its limit.  Prefetching
		 * now would only fetch crumbs; come back when a chunk has
		 * refilled (ignoring other hosts, who only make it later).
		 * The low-water mark covers that long (lease_plan()). */
		uint64_t per_ms = t->pol.rate.period_s * 1000;

		wait_ms = ((c->chunk - remaining) * per_ms + t->pol.rate.count - 1) /
			  t->pol.rate.count;
	}
	if (wait_ms) {
		/* Saturated: come back exactly when a worthwhile chunk is
		 * there.  Late, the bucket overflows its burst and the fleet
		 * admits less than the limit; early, it costs a call. */
		s->wait_until_ns = now + wait_ms * 1000000ULL;
		if (s->wait_timer)
			loop_timer_cancel(s->wait_timer);
		if (loop_timer_add(b->a->loop, wait_ms, 0, on_wait, s, &s->wait_timer))
			s->wait_timer = NULL;
	}
	free(c);
	/* Last: closing the breaker leases for every tenant, this one with
	 * its grant already counted. */
	breaker_success(b);
}

/* Asks for a lease for t when it is at its low-water mark (or force: a
 * low-water event, a first lease) or owes tokens, unless one is in flight or
 * Redis said to wait.  The lease tops the host up to at most its cap, plus
 * the debt. */
static void maybe_lease(struct broker *b, const struct agent_tenant *t,
			uint64_t now, bool force)
{
	struct slot *s = &b->slots[t->slot];
	struct bucket_args ba;
	char want[24], chunk[24];
	const char *args[] = { ba.key, ba.count, ba.period, ba.burst, want, chunk };
	uint64_t held, n, topup;
	struct call *c;

	if (s->inflight) {
		/* A reply that never comes (a hung Redis) must not stop this
		 * tenant's leasing for good. */
		if (now - s->sent_ns < CALL_TIMEOUT_NS)
			return;
		s->inflight = false;
		s->gen++;
	}
	if (now < s->wait_until_ns)
		return;
	/* Sizing reads the kernel's counters: at each lease, and every
	 * RESIZE_MS in between, so that the low-water mark follows traffic
	 * that grows while the host still holds plenty. */
	held = held_of(b, s);
	if (held > s->lowwater && !force && !s->debt) {
		if (now - s->sized_ns >= RESIZE_MS * 1000000ULL) {
			size_lease(b, t, s, now);
			kern_tokens_add(&b->a->kern, t->slot, 0, (int64_t)s->lowwater);
		}
		if (held > s->lowwater)
			return;
	}
	size_lease(b, t, s, now);
	topup = lease_topup(lease_cap(&t->pol, agents_of(b)), held, s->lease);
	/* The bucket was short at the last reply: other hosts want it too.
	 * Two chunks, not a whole lease: what one host takes at once while
	 * it is scarce, another one waits for. */
	if (s->scarce && topup > 2 * s->chunk)
		topup = 2 * s->chunk;
	n = topup + s->debt;
	if (!n)
		return;
	/* lease.lua's largest want; the bucket never holds more anyway */
	if (n > POLICY_BURST_MAX)
		n = POLICY_BURST_MAX;
	c = calloc(1, sizeof(*c));
	if (!c)
		return;
	c->slot = t->slot;
	c->gen = s->gen;
	c->n = n;
	c->chunk = s->chunk < t->pol.burst ? s->chunk : t->pol.burst;
	snprintf(c->name, sizeof(c->name), "%s", t->pol.name);
	bucket_args(&t->pol, &ba);
	snprintf(want, sizeof(want), "%llu", (unsigned long long)n);
	snprintf(chunk, sizeof(chunk), "%llu", (unsigned long long)c->chunk);
	if (eval(b, S_LEASE, 1, args, 6, on_lease, c)) {
		free(c);
		return;
	}
	s->inflight = true;
	s->sent_ns = now;
	s->want_lease = false;
	s->st.redis_calls++;
}

static void on_refund(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	struct slot *s = &b->slots[c->slot];
	redisReply *r = reply;

	(void)ac;
	if (s->gen == c->gen)
		s->refunding -= c->n < s->refunding ? c->n : s->refunding;
	if (!r || r->type != REDIS_REPLY_INTEGER)
		call_failed(b, S_REFUND, r);
	else
		breaker_success(b);
	if (b->done && b->pending && --b->pending == 0) {
		void (*done)(void *) = b->done;

		b->done = NULL;
		done(b->done_arg);
	}
	free(c);
}

/* Takes up to max idle tokens (0: all) back from the kernel; they pay the
 * debt first, and the rest is refunded to the tenant's global bucket.
 * Returns 0 if a refund is under way. */
static int refund(struct broker *b, const struct agent_tenant *t, uint64_t max)
{
	struct bucket_args ba;
	char n[24];
	const char *args[] = { ba.key, ba.count, ba.period, ba.burst, n };
	struct slot *s = &b->slots[t->slot];
	uint64_t taken, give;
	struct call *c;

	if (b->cmd.state != C_UP || !b->scripts_ok || (b->open && !b->done))
		return -ENOTCONN;
	taken = kern_tokens_take(&b->a->kern, t->slot, max);
	if (!taken)
		return -ENOENT;
	give = pay_debt(s, taken);
	if (!give)
		return -ENOENT;
	c = calloc(1, sizeof(*c));
	if (!c) {
		kern_tokens_add(&b->a->kern, t->slot, give, (int64_t)s->lowwater);
		return -ENOMEM;
	}
	c->slot = t->slot;
	c->gen = s->gen;
	c->n = give;
	bucket_args(&t->pol, &ba);
	snprintf(n, sizeof(n), "%llu", (unsigned long long)give);
	if (eval(b, S_REFUND, 1, args, 5, on_refund, c)) {
		kern_tokens_add(&b->a->kern, t->slot, give, (int64_t)s->lowwater);
		free(c);
		return -ENOTCONN;
	}
	s->refunding += give;
	s->st.tokens_refunded += give;
	s->st.redis_calls++;
	return 0;
}

/*
 * What the fail policy admitted on a slot, as a running count.  While the
 * kernel is told the fleet is degraded, every SYN that finds no leased token
 * goes to the fail policy (counted in `degraded`), and each it refuses is
 * counted in `denied` (a shadow tenant's in `shadow_denied`): so degraded -
 * denied - shadow_denied grows by one for each admission of the fail policy
 * and by nothing else.  Outside a spell it falls with ordinary refusals;
 * only its growth within a spell counts.
 */
static int fail_count(struct broker *b, uint32_t slot, int64_t *out)
{
	struct rl_stats st;
	int err = kern_tenant_stats(&b->a->kern, slot, &st);

	if (!err)
		*out = (int64_t)(st.degraded - st.denied - st.shadow_denied);
	return err;
}

/* Where a spell's count starts: now, before the kernel is told. */
static void debt_baseline(struct broker *b, struct slot *s)
{
	s->fail_seen_ok = fail_count(b, s->idx, &s->fail_seen) == 0;
}

/* What the static fail share admitted since the last look becomes debt,
 * up to what a spell shorter than a lease TTL can admit; past that (an
 * outage, b->tokens_expired) nothing is counted.  The count is read CPU by
 * CPU while SYNs are decided, so it may run one or two ahead for a moment:
 * only growth beyond the highest value seen counts, never a token twice. */
static void count_static_debt(struct broker *b, const struct policy_tenant *p,
			      struct slot *s)
{
	uint64_t add, max;
	int64_t n;

	if (!s->fail_seen_ok || fail_count(b, s->idx, &n) || n <= s->fail_seen)
		return;
	add = (uint64_t)(n - s->fail_seen);
	s->fail_seen = n;
	max = lease_static_debt_max(p, agents_of(b), b->o.lease_ttl_ms);
	if (b->tokens_expired || p->fail != POLICY_FAIL_STATIC || s->static_debt >= max)
		return;
	if (add > max - s->static_debt)
		add = max - s->static_debt;
	s->static_debt += add;
	s->debt += add;
	s->st.static_charged += add;
}

/* Brings every tenant's count of fail-policy admissions up to date. */
static void debt_look(struct broker *b)
{
	for (size_t i = 0; i < b->a->n_tenants; i++)
		count_static_debt(b, &b->a->tenants[i].pol,
				  &b->slots[b->a->tenants[i].slot]);
}

static void debt_begin(struct broker *b)
{
	for (size_t i = 0; i < b->a->n_tenants; i++)
		debt_baseline(b, &b->slots[b->a->tenants[i].slot]);
}

/* Keeps the slot table in step with the tenant set.  A slot that changed
 * tenant starts over, and when the kernel holds nothing for it, on credit
 * (lease_credit()): no SYN waits for the first lease.  A changed limit
 * forgets Redis's advice to wait, which was about the old one. */
static struct slot *slot_sync(struct broker *b, uint32_t idx,
			      const struct policy_tenant *p)
{
	struct slot *s = &b->slots[idx];

	if (strcmp(s->name, p->name) != 0) {
		uint64_t gen = s->gen + 1, credit;

		slot_unwait(s);
		memset(s, 0, sizeof(*s));
		s->gen = gen;
		s->b = b;
		s->idx = idx;
		snprintf(s->name, sizeof(s->name), "%s", p->name);
		s->rate = p->rate;
		s->burst = p->burst;
		s->budget = policy_overshoot_budget(p);
		if (kern_tenant_tokens(&b->a->kern, idx, loop_now_ns()) == 0) {
			credit = lease_credit(p, agents_of(b));
			s->debt = credit;
			kern_tokens_add(&b->a->kern, idx, credit, 0);
		}
		debt_baseline(b, s);
	}
	if (s->rate.count != p->rate.count || s->rate.period_s != p->rate.period_s ||
	    s->burst != p->burst || s->budget != policy_overshoot_budget(p)) {
		s->rate = p->rate;
		s->burst = p->burst;
		s->budget = policy_overshoot_budget(p);
		slot_unwait(s);
	}
	return s;
}

static struct slot *slot_of(struct broker *b, const struct agent_tenant *t)
{
	return slot_sync(b, t->slot, &t->pol);
}

void broker_slot_ready(struct broker *b, uint32_t slot, const struct policy_tenant *p)
{
	if (b)
		slot_sync(b, slot, p);
}

/* Degraded for longer than a lease TTL: an outage.  What is left of the
 * leases is stale budget and is dropped (paying the debt as far as it
 * goes); the fail policy alone decides from now on, and what the static
 * share admitted so far is not paid back. */
static void expire_leases(struct broker *b)
{
	uint64_t dropped = 0;

	for (size_t i = 0; i < b->a->n_tenants; i++) {
		const struct agent_tenant *t = &b->a->tenants[i];
		struct slot *s = slot_of(b, t);
		uint64_t n = kern_tokens_take(&b->a->kern, t->slot, 0);

		count_static_debt(b, &t->pol, s);
		pay_debt(s, n);
		s->debt -= s->static_debt;
		s->static_debt = 0;
		dropped += n;
	}
	b->tokens_expired = true;
	if (dropped)
		log_info("degraded past the lease TTL: %llu leased token(s) "
			 "expired", (unsigned long long)dropped);
}

/*
 * For each tenant: fetch a lease if its kernel bucket is at or below the
 * low-water mark and it has demand (a low-water event, or its counters
 * moved within the lease TTL; a tenant that never had a lease gets one so
 * that its credit is paid back), or if it owes tokens; give back what sat
 * idle for longer than the lease TTL beyond the credit.
 */
static void lease_all(struct broker *b, uint64_t now)
{
	uint64_t ttl_ns = b->o.lease_ttl_ms * 1000000ULL;

	for (size_t i = 0; i < b->a->n_tenants; i++) {
		const struct agent_tenant *t = &b->a->tenants[i];
		struct slot *s = slot_of(b, t);
		uint64_t count = 0, tokens, keep, cap = lease_cap(&t->pol, agents_of(b));

		if (t->n_samples) {
			const struct agent_sample *l = &t->samples[t->n_samples - 1];

			count = l->admitted + l->denied;
		}
		if (count != s->seen_count) {
			s->seen_count = count;
			s->last_active_ns = now;
		}
		/* A lowered limit (or a grown fleet) shrinks the cap: what a
		 * host holds beyond it goes back at once rather than being
		 * spent under the old limit. */
		tokens = kern_tenant_tokens(&b->a->kern, t->slot, now);
		if (tokens + s->refunding > cap) {
			refund(b, t, tokens + s->refunding - cap);
			continue;
		}
		if (s->want_lease || !s->last_grant_ns || s->debt ||
		    now - s->last_active_ns < ttl_ns) {
			maybe_lease(b, t, now, !s->last_grant_ns);
			continue;
		}
		/* Idle: back to the credit (or one token), so that the first
		 * connections after a quiet spell are admitted at once, even on
		 * every host together. */
		keep = lease_credit(&t->pol, agents_of(b));
		if (!keep)
			keep = 1;
		if (tokens > keep && now - s->last_grant_ns > ttl_ns)
			refund(b, t, tokens - keep);
	}
}

/* Every CHECK_MS: the heartbeat to the kernel, the breaker's timeouts, the
 * static share's debt while degraded, the outage rule, then leasing. */
static void on_check(struct loop_timer *tm, void *arg)
{
	struct broker *b = arg;
	uint64_t now = loop_now_ns(), ttl_ns = b->o.lease_ttl_ms * 1000000ULL;

	(void)tm;
	/* The kernel's view of this agent: alive, and whether Redis is. */
	kern_fleet_state(&b->a->kern, now, b->o.stale_ms * 1000000ULL,
			 b->open || b->done);
	breaker_check_timeouts(b, now);
	script_loads_check(b, now);
	/* While degraded, and once more after: what the fail policy admitted. */
	for (size_t i = 0; i < b->a->n_tenants; i++)
		slot_of(b, &b->a->tenants[i]);
	if (b->open)
		debt_look(b);
	/* The time again: the breaker may have opened just now, after now
	 * was read. */
	if (b->open && !b->tokens_expired && loop_now_ns() - b->open_since_ns > ttl_ns)
		expire_leases(b);
	if (leasing(b))
		lease_all(b, now);
}

void broker_lowwater(struct broker *b, uint32_t slot)
{
	struct agent_tenant *t = NULL;

	for (size_t i = 0; i < b->a->n_tenants; i++)
		if (b->a->tenants[i].slot == slot)
			t = &b->a->tenants[i];
	if (!t)
		return;
	slot_of(b, t)->want_lease = true;
	slot_of(b, t)->last_active_ns = loop_now_ns();
	if (leasing(b))
		maybe_lease(b, t, loop_now_ns(), true);
}

void broker_tenants_changed(struct broker *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->a->n_tenants; i++)
		slot_of(b, &b->a->tenants[i]);
	if (leasing(b))
		lease_all(b, loop_now_ns());
}

/* --- registry ------------------------------------------------------------------ */

/*
 * The registry's count of live agents.  A larger count is taken at once (the
 * static share and the lease cap only shrink); a smaller one only once it has
 * held for the registry's TTL: a Redis restarted empty counts 1, 2, 3 as the
 * agents' heartbeats come in, and the shares must not jump to the whole limit
 * meanwhile.
 */
static void set_live_agents(struct broker *b, uint64_t n)
{
	uint64_t now = loop_now_ns();

	if (n < b->live_agents) {
		if (!b->live_low_since_ns)
			b->live_low_since_ns = now;
		if (now - b->live_low_since_ns < REGISTRY_TTL_MS * 1000000ULL)
			return;
	}
	b->live_low_since_ns = 0;
	if (n == b->live_agents)
		return;
	log_info("live agents: %llu", (unsigned long long)n);
	b->live_agents = n;
	/* The static fail share follows the fleet's size, and a restarted
	 * agent finds it in the kernel. */
	b->a->kern.fail_agents = n;
	kern_fleet_agents(&b->a->kern, n);
	for (size_t i = 0; i < b->a->n_tenants; i++)
		kern_tenant_fail(&b->a->kern, b->a->tenants[i].slot,
				 &b->a->tenants[i].pol);
}

/*
 * Two agents with one --agent-id (two hosts with the same host name).  The
 * registry counts running agents by id and nonce, so both are counted; but
 * an operator reading the registry, logs or metrics by id would take them
 * for one, so it is reported loudly for as long as it lasts: each heartbeat
 * after the first on a connection that finds another nonce under our id
 * means another agent heartbeated with it in between.
 */
static void id_clash_seen(struct broker *b, const char *other)
{
	b->id_clash_seen_ns = loop_now_ns();
	if (b->id_clash)
		return;
	b->id_clash = true;
	b->id_clashes++;
	log_warn("another agent runs with agent id '%s' (instance %.16s; this "
		 "one is %s): the registry counts both, but give each host its "
		 "own --agent-id", b->agent_id, other, b->nonce);
}

static void id_clash_check(struct broker *b)
{
	if (b->id_clash && loop_now_ns() - b->id_clash_seen_ns > ID_CLASH_CLEAR_NS) {
		b->id_clash = false;
		log_info("no other agent has run with agent id '%s' for %llu s",
			 b->agent_id, ID_CLASH_CLEAR_NS / 1000000000ULL);
	}
}

static void on_heartbeat(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	redisReply *r = reply;

	(void)ac;
	if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_INTEGER &&
	    r->element[0]->integer > 0 &&
	    r->element[1]->type == REDIS_REPLY_STRING) {
		set_live_agents(b, (uint64_t)r->element[0]->integer);
		/* On the first, another nonce is this host's previous agent. */
		if (r->element[1]->len && !c->n)
			id_clash_seen(b, r->element[1]->str);
		if (c->n)
			b->hb_first = false;
		id_clash_check(b);
		breaker_success(b);
	} else {
		call_failed(b, S_HEARTBEAT, r);
	}
	free(c);
}

static void heartbeat(struct broker *b)
{
	char ttl[24];
	const char *args[] = { "rl:agents", "rl:agent_ids", b->agent_id, ttl,
			       b->nonce, b->hb_first ? "1" : "0" };
	struct call *c = calloc(1, sizeof(*c));

	if (!c)
		return;
	c->n = b->hb_first;
	snprintf(ttl, sizeof(ttl), "%d", REGISTRY_TTL_MS);
	if (eval(b, S_HEARTBEAT, 2, args, 6, on_heartbeat, c))
		free(c);
}

static void want_policy(struct broker *b, const char *name);
static void policy_sync(struct broker *b);

static void on_heartbeat_timer(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	heartbeat(b);
	/* The fleet's changes that wait for a conflict to go: read again. */
	if (b->n_waiting && !b->want_timer)
		want_policy(b, b->waiting[0]);
	/* A sync that failed half-way (an error reply, not a lost
	 * connection): again, once Redis is healthy. */
	if (b->sync_again && leasing(b) && b->sub.state == C_UP) {
		b->sync_again = false;
		policy_sync(b);
	}
}

/* --- policy store -------------------------------------------------------------- */

static void on_policy_set(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	redisReply *r = reply;

	(void)ac;
	if (!int_array(r, 2)) {
		/* Not stored (say, -BUSY): the fleet would never hear of
		 * this change; the next sync offers it again. */
		if (r)
			c->b->sync_again = true;
		call_failed(c->b, S_POLICY_SET, r);
	} else {
		breaker_success(c->b);
	}
	if (int_array(r, 2) && r->element[0]->integer == 0)
		log_debug("policy of '%s': the fleet has a newer version (%lld)",
			  c->name, r->element[1]->integer);
	free(c);
}

/* Stores one tenant's policy (t NULL: a tombstone, kept in Redis for what
 * is left of its time, and not at all once that is over) with its version. */
static void policy_publish(struct broker *b, const char *name, uint64_t version,
			   const struct agent_tenant *t)
{
	char key[128], ver[24], ttl[24], *json = NULL;
	const char *args[] = { key, "rl:tenants", name, ver, "", ttl };
	uint64_t left = agent_tomb_left_ms(b->a, version);
	struct call *c;

	if (!t && !left)
		return;
	/* Ignored for a policy, but it must be valid. */
	snprintf(ttl, sizeof(ttl), "%llu", (unsigned long long)(left ? left : 1));
	if (t) {
		json_t *j = policy_tenant_to_json(&t->pol);

		json = j ? json_dumps(j, JSON_COMPACT) : NULL;
		json_decref(j);
		if (!json)
			return;
		args[4] = json;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		free(json);
		return;
	}
	snprintf(c->name, sizeof(c->name), "%s", name);
	snprintf(key, sizeof(key), "rl:{t:%s}:policy", name);
	snprintf(ver, sizeof(ver), "%llu", (unsigned long long)version);
	if (eval(b, S_POLICY_SET, 2, args, 6, on_policy_set, c))
		free(c);
	free(json);
}

void broker_policy_changed(struct broker *b, const struct agent_tenant *old,
			   size_t n_old, const struct agent_tenant *now,
			   size_t n_now)
{
	if (!b)
		return;
	for (size_t i = 0; i < n_now; i++) {
		const struct agent_tenant *o = NULL;

		for (size_t j = 0; j < n_old; j++)
			if (strcmp(old[j].pol.name, now[i].pol.name) == 0)
				o = &old[j];
		if (!o || o->version != now[i].version)
			policy_publish(b, now[i].pol.name, now[i].version, &now[i]);
	}
	for (size_t j = 0; j < n_old; j++) {
		bool kept = false;

		for (size_t i = 0; i < n_now && !kept; i++)
			kept = strcmp(old[j].pol.name, now[i].pol.name) == 0;
		if (!kept) {
			const struct agent_tomb *tomb = agent_find_tomb(b->a,
								       old[j].pol.name);

			policy_publish(b, old[j].pol.name, tomb ? tomb->version :
				       agent_next_version(b->a, old[j].version), NULL);
		}
	}
}

/*
 * Reading the store.  Tenants announced together (one `rlctl apply` that
 * renames a tenant publishes the new name and the old one's tombstone), or
 * all of them after a reconnect, are read as one batch and applied as one
 * change: applied one at a time, the new tenant would conflict with the old
 * one that still holds its prefix and be refused, and the old one's
 * deletion would then leave the host with neither.  A change that cannot
 * be applied yet waits, and is read again with every batch and every
 * second until it goes in (or the store has moved on).
 */
#define POLICY_BATCH_MS		20

struct read_batch {
	size_t n, left;
	bool lost;		/* the connection went: the next sync reads it all */
	struct agent_fleet_update *u;
};

static void policy_read(struct broker *b);

static void on_want_timer(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	b->want_timer = NULL;
	policy_read(b);
}

/* Reads name with the next batch. */
static void want_policy(struct broker *b, const char *name)
{
	if (b->n_want == b->cap_want) {
		size_t cap = b->cap_want ? b->cap_want * 2 : 64;
		void *p = realloc(b->want, cap * sizeof(*b->want));

		if (!p)
			return;
		b->want = p;
		b->cap_want = cap;
	}
	snprintf(b->want[b->n_want++], sizeof(*b->want), "%s", name);
	if (!b->want_timer &&
	    loop_timer_add(b->a->loop, POLICY_BATCH_MS, 0, on_want_timer, b,
			   &b->want_timer))
		b->want_timer = NULL;
}

static bool name_in(char (*names)[POLICY_NAME_MAX + 1], size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

/* The fleet's changes that could not be applied: kept for the next read.
 * Logged when one starts to wait (it is normal for a moment, while a
 * rename's second half is on its way; for long, it means two tenants of the
 * store claim the same prefix). */
static void set_waiting(struct broker *b, const struct agent_fleet_update *u,
			size_t n, const bool *wait)
{
	size_t k = 0, cap = b->n_waiting + n;
	char (*next)[POLICY_NAME_MAX + 1] = calloc(cap ? cap : 1, sizeof(*next));

	if (!next)
		return;
	for (size_t i = 0; i < b->n_waiting; i++) {
		bool read = false;

		for (size_t j = 0; j < n && !read; j++)
			read = strcmp(u[j].name, b->waiting[i]) == 0;
		if (!read)
			snprintf(next[k++], sizeof(*next), "%s", b->waiting[i]);
	}
	for (size_t j = 0; j < n; j++) {
		if (!wait[j] || name_in(next, k, u[j].name))
			continue;
		/* read errors (no json) wait silently */
		if (u[j].json && !name_in(b->waiting, b->n_waiting, u[j].name))
			log_info("the fleet's policy of '%s' (version %llu) conflicts "
				 "with this host's other tenants: applied once the "
				 "conflict is gone", u[j].name,
				 (unsigned long long)u[j].version);
		snprintf(next[k++], sizeof(*next), "%s", u[j].name);
	}
	free(b->waiting);
	b->waiting = next;
	b->n_waiting = k;
}

static void read_batch_free(struct read_batch *rb)
{
	for (size_t i = 0; i < rb->n; i++)
		free(rb->u[i].json);
	free(rb->u);
	free(rb);
}

static void on_policy_get(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;
	struct read_batch *rb = c->batch;
	struct agent_fleet_update *u = &rb->u[c->idx];
	redisReply *r = reply;
	bool *wait;

	(void)ac;
	if (!r) {
		rb->lost = true;
	} else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
		   r->element[0]->type != REDIS_REPLY_INTEGER ||
		   r->element[0]->integer < 0 ||
		   r->element[1]->type != REDIS_REPLY_STRING) {
		call_failed(b, S_POLICY_GET, r);
	} else {
		breaker_success(b);
		u->json = strdup(r->element[1]->str);
		if (u->json)
			u->version = (uint64_t)r->element[0]->integer;
	}
	free(c);
	if (--rb->left)
		return;
	wait = calloc(rb->n ? rb->n : 1, sizeof(*wait));
	if (!rb->lost && wait) {
		agent_fleet_apply(b->a, rb->u, rb->n, wait);
		/* Not read (an error reply): read again with the waiting ones. */
		for (size_t i = 0; i < rb->n; i++)
			wait[i] = wait[i] || !rb->u[i].json;
		set_waiting(b, rb->u, rb->n, wait);
	}
	free(wait);
	read_batch_free(rb);
}

static int name_cmp(const void *x, const void *y)
{
	return strcmp(x, y);
}

/* Reads every wanted tenant, and every waiting one, as one batch. */
static void policy_read(struct broker *b)
{
	struct read_batch *rb;
	size_t n = 0;

	for (size_t i = 0; i < b->n_waiting; i++)
		want_policy(b, b->waiting[i]);
	if (b->want_timer) {
		/* armed again by the waiting ones: this read covers them */
		loop_timer_cancel(b->want_timer);
		b->want_timer = NULL;
	}
	qsort(b->want, b->n_want, sizeof(*b->want), name_cmp);
	for (size_t i = 0; i < b->n_want; i++)
		if (!n || strcmp(b->want[n - 1], b->want[i]) != 0)
			memmove(b->want[n++], b->want[i], sizeof(*b->want));
	b->n_want = 0;
	rb = calloc(1, sizeof(*rb));
	if (!rb || !n || !(rb->u = calloc(n, sizeof(*rb->u)))) {
		free(rb);
		return;
	}
	rb->n = n;
	rb->left = 1;		/* held until every call is out */
	for (size_t i = 0; i < n; i++) {
		char key[128];
		const char *args[] = { key };
		struct call *c = calloc(1, sizeof(*c));

		snprintf(rb->u[i].name, sizeof(rb->u[i].name), "%s", b->want[i]);
		if (!c)
			continue;
		snprintf(c->name, sizeof(c->name), "%s", b->want[i]);
		c->batch = rb;
		c->idx = i;
		snprintf(key, sizeof(key), "rl:{t:%s}:policy", b->want[i]);
		if (eval(b, S_POLICY_GET, 1, args, 1, on_policy_get, c)) {
			free(c);
			rb->lost = true;
			continue;
		}
		rb->left++;
	}
	if (--rb->left == 0)
		read_batch_free(rb);
}

static void on_members(redisAsyncContext *ac, void *reply, void *priv)
{
	struct broker *b = priv;
	redisReply *r = reply;

	(void)ac;
	if (!r || r->type != REDIS_REPLY_ARRAY) {
		/* No reply: the connection went, and the next one syncs. */
		if (r)
			b->sync_again = true;
		call_failed(b, S_POLICY_GET, r);
		return;
	}
	for (size_t i = 0; i < r->elements; i++) {
		char name[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX];

		if (r->element[i]->type != REDIS_REPLY_STRING ||
		    policy_parse_name(r->element[i]->str, name, err))
			continue;
		want_policy(b, name);
	}
	/* This host's own tenants too: one deleted by the fleet while this
	 * agent was away is no longer in the index. */
	for (size_t i = 0; i < b->a->n_tenants; i++)
		want_policy(b, b->a->tenants[i].pol.name);
}

/* After (re)connecting: offer every local tenant (the store keeps the newest
 * version, so this re-seeds a Redis that lost its data and changes nothing
 * otherwise), then read every tenant the fleet has. */
static void policy_sync(struct broker *b)
{
	b->sync_again = false;
	for (size_t i = 0; i < b->a->n_tenants; i++)
		policy_publish(b, b->a->tenants[i].pol.name,
			       b->a->tenants[i].version, &b->a->tenants[i]);
	for (size_t i = 0; i < b->a->n_tombs; i++)
		policy_publish(b, b->a->tombs[i].name, b->a->tombs[i].version, NULL);
	if (redisAsyncCommand(b->cmd.ac, on_members, b, "SMEMBERS rl:tenants") == REDIS_OK)
		b->redis_calls++;
}

static void on_message(redisAsyncContext *ac, void *reply, void *priv)
{
	struct broker *b = priv;
	redisReply *r = reply;
	char name[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX];

	(void)ac;
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING)
		return;
	if (strcmp(r->element[0]->str, "message") != 0) {
		/* the subscribe confirmation: catch up on what we missed */
		if (strcmp(r->element[0]->str, "subscribe") == 0) {
			b->sub.backoff_ms = BACKOFF_MIN_MS;
			if (b->cmd.state == C_UP && b->scripts_ok)
				policy_sync(b);
		}
		return;
	}
	if (r->element[2]->type != REDIS_REPLY_STRING ||
	    policy_parse_name(r->element[2]->str, name, err))
		return;
	want_policy(b, name);
}

/* --- connections ----------------------------------------------------------------- */

static void send_script_loads(struct broker *b);

static void on_load_retry(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	b->load_retry = NULL;
	send_script_loads(b);
}

/*
 * A SCRIPT LOAD that failed: Redis answers, but cannot take the script yet
 * (-LOADING while it loads its dataset, -BUSY behind a long script,
 * -MASTERDOWN on a replica cut off from its master, or anything else).
 * Without its scripts the agent cannot lease, so the breaker opens; the
 * missing scripts are asked for again after a backoff (100 ms doubling to
 * 1 s) on the same connection, which is healthy as such.
 */
static void script_load_failed(struct broker *b, int idx, const redisReply *r)
{
	char why[160], what[64];

	b->redis_errors++;
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(what, sizeof(what), "%.60s", r->str);
	else
		snprintf(what, sizeof(what), "unexpected reply type %d", r->type);
	if (!b->load_warned)
		log_warn("couldn't load script '%s' into Redis on '%s': %s "
			 "(retrying)", script_names[idx], b->address, what);
	b->load_warned = true;
	snprintf(why, sizeof(why), "Redis on '%.40s' couldn't load rlgate's "
		 "scripts: %.60s", b->address, what);
	breaker_open(b, why);
	/* Already open: the reason an operator sees is the current one. */
	snprintf(b->reason, sizeof(b->reason), "%s", why);
	if (b->load_retry)
		return;
	if (loop_timer_add(b->a->loop, b->load_backoff_ms, 0, on_load_retry, b,
			   &b->load_retry))
		b->load_retry = NULL;
	b->load_backoff_ms = b->load_backoff_ms * 2 > BACKOFF_MAX_MS ?
			     BACKOFF_MAX_MS : b->load_backoff_ms * 2;
}

static void on_script_load(redisAsyncContext *ac, void *reply, void *priv)
{
	struct broker *b = ac->data ? ((struct conn *)ac->data)->b : NULL;
	redisReply *r = reply;
	int idx = (int)(intptr_t)priv;

	/* No reply: the connection is going, and its loss is handled there. */
	if (!b || !r)
		return;
	if (r->type != REDIS_REPLY_STRING || r->len != 40) {
		script_load_failed(b, idx, r);
		return;
	}
	memcpy(b->sha[idx], r->str, 40);
	b->sha[idx][40] = '\0';
	b->scripts_mask |= 1u << idx;
	if (b->scripts_mask == SCRIPTS_ALL && !b->scripts_ok) {
		b->scripts_ok = true;
		b->cmd.backoff_ms = BACKOFF_MIN_MS;
		b->load_backoff_ms = BACKOFF_MIN_MS;
		if (b->load_warned)
			log_info("Redis on '%s': scripts loaded", b->address);
		else
			log_debug("Redis on '%s': scripts loaded", b->address);
		b->load_warned = false;
		if (b->load_retry)
			loop_timer_cancel(b->load_retry);
		b->load_retry = NULL;
		heartbeat(b);
		if (b->sub.state == C_UP)
			policy_sync(b);
	}
}

/* Sends SCRIPT LOAD for every script not loaded yet. */
static void send_script_loads(struct broker *b)
{
	if (b->cmd.state != C_UP)
		return;
	b->load_sent_ns = loop_now_ns();
	for (int i = 0; i < S_COUNT; i++) {
		const char *src = NULL;

		if (b->scripts_mask & (1u << i))
			continue;
		for (unsigned int j = 0; j < lua_scripts_count; j++)
			if (strcmp(lua_scripts[j].name, script_names[i]) == 0)
				src = lua_scripts[j].src;
		if (!src) {
			log_error("couldn't find script '%s' in this build", script_names[i]);
			continue;
		}
		if (redisAsyncCommand(b->cmd.ac, on_script_load, (void *)(intptr_t)i,
				      "SCRIPT LOAD %s", src) == REDIS_OK)
			b->redis_calls++;
	}
}

/* Loads every script (a new connection, or Redis lost them). */
static void load_scripts(struct broker *b)
{
	b->scripts_ok = false;
	b->scripts_mask = 0;
	send_script_loads(b);
}

/* Called every CHECK_MS while the scripts are missing: loads that went
 * unanswered for CALL_TIMEOUT_NS (a Redis frozen or blocked) are sent
 * again.  A late answer to the first ones is as good as any. */
static void script_loads_check(struct broker *b, uint64_t now)
{
	if (b->cmd.state != C_UP || b->scripts_ok || b->load_retry ||
	    now - b->load_sent_ns < CALL_TIMEOUT_NS)
		return;
	log_debug("Redis on '%s': no answer to SCRIPT LOAD within %llu ms: "
		  "sending it again", b->address,
		  (unsigned long long)(CALL_TIMEOUT_NS / 1000000));
	if (b->open)
		snprintf(b->reason, sizeof(b->reason), "Redis on '%.40s' did not "
			 "answer SCRIPT LOAD within %llu ms", b->address,
			 (unsigned long long)(CALL_TIMEOUT_NS / 1000000));
	send_script_loads(b);
}

static void on_auth(redisAsyncContext *ac, void *reply, void *priv)
{
	struct conn *c = priv;
	redisReply *r = reply;

	(void)ac;
	if (r && r->type == REDIS_REPLY_ERROR)
		log_error("couldn't authenticate to Redis on '%s': %.200s",
			  c->b->address, r->str);
}

static void on_retry(struct loop_timer *t, void *arg)
{
	struct conn *c = arg;

	(void)t;
	c->retry = NULL;
	conn_start(c);
}

static void conn_retry(struct conn *c)
{
	c->state = C_DOWN;
	c->ac = NULL;
	if (c->b->done)
		return;
	/* Up to a quarter more, at random: a fleet that lost Redis together
	 * does not come back in lockstep. */
	if (loop_timer_add(c->b->a->loop, c->backoff_ms +
			   (uint64_t)rand() % (c->backoff_ms / 4 + 1), 0, on_retry, c,
			   &c->retry))
		c->retry = NULL;
	c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS :
							    c->backoff_ms * 2;
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;
	struct broker *b = c->b;

	if (status != REDIS_OK) {
		char why[240];

		if (c->backoff_ms == BACKOFF_MIN_MS)
			log_warn("couldn't connect to Redis on '%s': %s (retrying)",
				 b->address, ac->errstr);
		snprintf(why, sizeof(why), "couldn't connect to Redis on '%.100s': %.80s",
			 b->address, ac->errstr);
		if (!c->subscriber)
			breaker_open(b, why);
		conn_retry(c);
		return;
	}
	/* The backoff is reset only once the connection proved useful (scripts
	 * loaded, subscription confirmed): a server that accepts and then
	 * breaks every connection must not be hammered ten times a second. */
	c->state = C_UP;
	if (c->backoff_ms == BACKOFF_MIN_MS)
		log_info("Redis on '%s': %s connection up", b->address, c->name);
	else
		log_debug("Redis on '%s': %s connection up", b->address, c->name);
	if (b->password) {
		if (b->o.user)
			redisAsyncCommand(c->ac, on_auth, c, "AUTH %s %s", b->o.user,
					  b->password);
		else
			redisAsyncCommand(c->ac, on_auth, c, "AUTH %s", b->password);
	}
	if (c->subscriber) {
		redisAsyncCommand(c->ac, on_message, b, "SUBSCRIBE rl:policy");
	} else {
		b->hb_first = true;
		load_scripts(b);
	}
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct conn *c = ac->data;
	struct broker *b = c->b;

	/* Once per outage: the breaker's transition is the loud message. */
	if (status != REDIS_OK && c->state == C_UP && c->backoff_ms == BACKOFF_MIN_MS)
		log_warn("lost Redis on '%s' (%s connection): %s", b->address,
			 c->name, ac->errstr);
	if (!c->subscriber) {
		char why[240];

		b->scripts_ok = false;
		b->scripts_mask = 0;
		if (b->load_retry)
			loop_timer_cancel(b->load_retry);
		b->load_retry = NULL;
		/* Replies that will never come; and what Redis advised is
		 * about a server that may come back empty. */
		for (int i = 0; i < RL_MAX_TENANTS; i++) {
			b->slots[i].inflight = false;
			b->slots[i].refunding = 0;
			slot_unwait(&b->slots[i]);
		}
		b->ring_len = 0;
		snprintf(why, sizeof(why), "lost Redis on '%.100s': %.80s", b->address,
			 ac->errstr);
		breaker_open(b, why);
	}
	conn_retry(c);
}

static void conn_start(struct conn *c)
{
	struct broker *b = c->b;
	redisAsyncContext *ac;

	ac = b->path[0] ? redisAsyncConnectUnix(b->path) :
			  redisAsyncConnect(b->host, b->port);
	if (!ac || ac->err) {
		char why[240];

		if (c->backoff_ms == BACKOFF_MIN_MS)
			log_warn("couldn't connect to Redis on '%s': %s (retrying)",
				 b->address, ac ? ac->errstr : "out of memory");
		snprintf(why, sizeof(why), "couldn't connect to Redis on '%.100s': %.80s",
			 b->address, ac ? ac->errstr : "out of memory");
		if (!c->subscriber)
			breaker_open(b, why);
		if (ac)
			redisAsyncFree(ac);
		conn_retry(c);
		return;
	}
	ac->data = c;
	if (redis_loop_attach(ac, b->a->loop)) {
		redisAsyncFree(ac);
		conn_retry(c);
		return;
	}
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	c->ac = ac;
	c->state = C_CONNECTING;
}

/* --- life cycle ------------------------------------------------------------------ */

int broker_open(struct agent *a, const struct broker_opts *o, struct broker **out)
{
	struct broker *b;
	int err;

	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->slots = calloc(RL_MAX_TENANTS, sizeof(*b->slots));
	if (!b->slots) {
		free(b);
		return -ENOMEM;
	}
	b->a = a;
	b->o = *o;
	srand((unsigned int)(getpid() ^ time(NULL)));
	for (uint32_t i = 0; i < RL_MAX_TENANTS; i++) {
		b->slots[i].b = b;
		b->slots[i].idx = i;
	}
	if (!b->o.lease_ttl_ms)
		b->o.lease_ttl_ms = 1000;
	err = broker_parse_address(o->redis, b->host, sizeof(b->host), &b->port,
				   b->path, sizeof(b->path));
	if (err)
		goto fail;
	snprintf(b->address, sizeof(b->address), "%s", o->redis);
	if (o->password_file) {
		err = read_password(o->password_file, &b->password);
		if (err)
			goto fail;
	}
	if (o->agent_id) {
		snprintf(b->agent_id, sizeof(b->agent_id), "%s", o->agent_id);
	} else if (gethostname(b->agent_id, sizeof(b->agent_id) - 1) < 0) {
		snprintf(b->agent_id, sizeof(b->agent_id), "rlagent-%d", getpid());
	}
	{
		uint8_t rnd[8];

		/* Only needs to differ between agents; time and PID if the
		 * kernel's pool cannot say. */
		if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != sizeof(rnd)) {
			uint64_t x = loop_now_ns() ^ ((uint64_t)getpid() << 32);

			memcpy(rnd, &x, sizeof(rnd));
		}
		for (int i = 0; i < 8; i++)
			snprintf(b->nonce + 2 * i, 3, "%02x", rnd[i]);
	}
	if (!b->o.timeout_ms)
		b->o.timeout_ms = 50;
	if (!b->o.stale_ms)
		b->o.stale_ms = 2000;
	/* The fleet size for static shares until the registry answers: what
	 * the operator said, else what the previous agent knew, else 1. */
	b->live_agents = b->o.expected_agents ? b->o.expected_agents :
			 kern_fleet_agents(&a->kern, 0) ? kern_fleet_agents(&a->kern, 0) : 1;
	kern_fleet_agents(&a->kern, b->live_agents);
	a->kern.fail_agents = b->live_agents;
	for (size_t i = 0; i < a->n_tenants; i++)
		kern_tenant_fail(&a->kern, a->tenants[i].slot, &a->tenants[i].pol);
	/* Degraded until Redis has answered once, a spell like any other:
	 * tenants the kernel holds nothing for start on credit, then the
	 * fail policies decide, not an empty leased bucket. */
	b->open = true;
	b->open_since_ns = loop_now_ns();
	b->degraded_since = time(NULL);
	snprintf(b->reason, sizeof(b->reason), "not connected to Redis yet");
	kern_fleet_state(&a->kern, loop_now_ns(), b->o.stale_ms * 1000000ULL, true);
	broker_tenants_changed(b);
	b->cmd = (struct conn){ .b = b, .backoff_ms = BACKOFF_MIN_MS, .name = "command" };
	b->load_backoff_ms = BACKOFF_MIN_MS;
	b->sub = (struct conn){ .b = b, .backoff_ms = BACKOFF_MIN_MS, .name = "policy",
				.subscriber = true };
	err = loop_timer_add(a->loop, CHECK_MS, CHECK_MS, on_check, b, &b->check);
	if (!err)
		err = loop_timer_add(a->loop, HEARTBEAT_MS, HEARTBEAT_MS,
				     on_heartbeat_timer, b, &b->heartbeat);
	if (err)
		goto fail;
	conn_start(&b->cmd);
	conn_start(&b->sub);
	log_info("fleet mode: agent '%s' (instance %s), Redis on '%s', lease TTL "
		 "%llu ms", b->agent_id, b->nonce, b->address,
		 (unsigned long long)b->o.lease_ttl_ms);
	*out = b;
	return 0;
fail:
	if (b->check)
		loop_timer_cancel(b->check);
	free(b->password);
	free(b->slots);
	free(b);
	return err;
}

static void conn_close(struct conn *c)
{
	if (c->retry)
		loop_timer_cancel(c->retry);
	c->retry = NULL;
	if (c->ac) {
		redisAsyncContext *ac = c->ac;

		c->ac = NULL;
		ac->data = c;
		/* Not redisAsyncSetDisconnectCallback(): hiredis only sets a
		 * callback where none is set.  Going away is not an outage. */
		ac->onDisconnect = NULL;
		redisAsyncFree(ac);
	}
	c->state = C_DOWN;
}

void broker_close(struct broker *b)
{
	if (!b)
		return;
	b->done = NULL;
	if (b->deadline)
		loop_timer_cancel(b->deadline);
	if (b->check)
		loop_timer_cancel(b->check);
	if (b->heartbeat)
		loop_timer_cancel(b->heartbeat);
	if (b->load_retry)
		loop_timer_cancel(b->load_retry);
	if (b->want_timer)
		loop_timer_cancel(b->want_timer);
	for (uint32_t i = 0; i < RL_MAX_TENANTS; i++)
		if (b->slots[i].wait_timer)
			loop_timer_cancel(b->slots[i].wait_timer);
	b->pending = 0;
	conn_close(&b->sub);
	conn_close(&b->cmd);
	free(b->want);
	free(b->waiting);
	free(b->password);
	free(b->slots);
	free(b);
}

static void on_deadline(struct loop_timer *t, void *arg)
{
	struct broker *b = arg;

	(void)t;
	b->deadline = NULL;
	if (b->done) {
		void (*done)(void *) = b->done;

		log_warn("Redis on '%s' did not confirm every refund within %d ms",
			 b->address, SHUTDOWN_MS);
		b->done = NULL;
		done(b->done_arg);
	}
}

static void on_deregister(redisAsyncContext *ac, void *reply, void *priv)
{
	on_refund(ac, reply, priv);
}

static void on_repaid(redisAsyncContext *ac, void *reply, void *priv)
{
	struct call *c = priv;
	struct broker *b = c->b;

	(void)ac;
	if (!int_array(reply, 3))
		call_failed(b, S_LEASE, reply);
	if (b->done && b->pending && --b->pending == 0) {
		void (*done)(void *) = b->done;

		b->done = NULL;
		done(b->done_arg);
	}
	free(c);
}

/* At shutdown: takes what t still owes from its global bucket (and drops
 * it), so that a stopped agent leaves no debt behind.  0 if under way. */
static int repay(struct broker *b, const struct agent_tenant *t)
{
	struct slot *s = &b->slots[t->slot];
	struct bucket_args ba;
	char want[24];
	const char *args[] = { ba.key, ba.count, ba.period, ba.burst, want, "1" };
	struct call *c;

	if (!s->debt || strcmp(s->name, t->pol.name) != 0)
		return -ENOENT;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->slot = t->slot;
	c->n = s->debt;
	bucket_args(&t->pol, &ba);
	snprintf(want, sizeof(want), "%llu", (unsigned long long)s->debt);
	if (eval(b, S_LEASE, 1, args, 6, on_repaid, c)) {
		free(c);
		return -ENOTCONN;
	}
	s->st.redis_calls++;
	return 0;
}

void broker_shutdown(struct broker *b, void (*done)(void *arg), void *arg)
{
	uint64_t total = 0;

	b->done = done;
	b->done_arg = arg;
	b->pending = 0;
	/* From here on the kernel runs on the fail policies: the tokens go
	 * back to Redis, and the next agent may take a while. */
	kern_fleet_state(&b->a->kern, loop_now_ns(), b->o.stale_ms * 1000000ULL, true);
	if (b->cmd.state != C_UP || !b->scripts_ok) {
		log_warn("Redis on '%s' is out of reach: leased tokens are not "
			 "refunded (they return when their bucket refills)", b->address);
		b->done = NULL;
		done(arg);
		return;
	}
	for (size_t i = 0; i < b->a->n_tenants; i++) {
		uint64_t before = b->slots[b->a->tenants[i].slot].st.tokens_refunded;

		if (refund(b, &b->a->tenants[i], 0) == 0) {
			b->pending++;
			total += b->slots[b->a->tenants[i].slot].st.tokens_refunded - before;
		}
		if (repay(b, &b->a->tenants[i]) == 0)
			b->pending++;
	}
	{
		const char *args[] = { "rl:agents", "rl:agent_ids", b->agent_id,
				       b->nonce };
		struct call *c = calloc(1, sizeof(*c));

		if (c && eval(b, S_DEREGISTER, 2, args, 4, on_deregister, c) == 0)
			b->pending++;
		else
			free(c);
	}
	log_info("refunding %llu leased token(s) to Redis on '%s'",
		 (unsigned long long)total, b->address);
	if (!b->pending) {
		b->done = NULL;
		done(arg);
		return;
	}
	loop_timer_add(b->a->loop, SHUTDOWN_MS, 0, on_deadline, b, &b->deadline);
}

/* --- stats ------------------------------------------------------------------------- */

void broker_tenant_stats(const struct broker *b, const struct agent_tenant *t,
			 struct broker_tenant_stats *out)
{
	const struct slot *s = &b->slots[t->slot];
	bool ours = strcmp(s->name, t->pol.name) == 0;

	memset(out, 0, sizeof(*out));
	if (ours) {
		*out = s->st;
		out->owed = s->debt;
	}
	out->lease_size = ours && s->lease ? s->lease :
			  lease_credit(&t->pol, agents_of(b));
	out->overshoot_bound = lease_bound(&t->pol, agents_of(b), b->o.lease_ttl_ms);
}

void broker_stats(const struct broker *b, struct broker_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->address = b->address;
	out->state = b->cmd.state == C_UP ? "connected" :
		     b->cmd.state == C_CONNECTING ? "connecting" : "down";
	out->healthy = b->cmd.state == C_UP && b->scripts_ok && !b->open;
	out->degraded_since = b->open ? b->degraded_since : 0;
	out->reason = b->open ? b->reason : "";
	out->transitions = b->transitions;
	out->timeouts = b->redis_timeouts;
	out->live_agents = b->live_agents;
	out->agent_id = b->agent_id;
	out->nonce = b->nonce;
	out->agent_id_conflict = b->id_clash;
	out->agent_id_conflicts = b->id_clashes;
	out->redis_calls = b->redis_calls;
	out->redis_errors = b->redis_errors;
	out->lease_bounds = lease_bounds;
	memcpy(out->lease_buckets, b->lease_buckets, sizeof(out->lease_buckets));
	out->lease_sum_s = b->lease_sum_s;
	out->lease_count = b->lease_count;
}
