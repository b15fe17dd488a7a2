// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Overload shedding (rlagent --shed-at): every SHED_PERIOD_MS the accept
 * queues of the host's listeners are read through sock_diag; while the
 * fullest stands at or above the mark, each standalone tenant's bucket is
 * held to its weight's share of what the server accepts (user/lib/shed.h
 * decides), and given back its policy's rate and burst once the queue has
 * drained and the demand fits.  The kernel program is not changed: a held
 * tenant is refused as by its own rate, with its own action.
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <linux/inet_diag.h>
#include <linux/sock_diag.h>

#include "agent_shed.h"
#include "conntrack.h"
#include "log.h"
#include "shed.h"
#include "slot.h"

#define TCP_LISTEN_STATE	10	/* TCP_LISTEN of the kernel's tcp_states.h */

struct shed_slot {
	uint64_t admitted, denied;	/* counters at the last sample */
	double demand;			/* SYNs offered per second, averaged */
	uint64_t shed;			/* refused while held */
	double limit;			/* per second while held, else < 0 */
};

struct agent_shed {
	unsigned int mark_pct;
	uint16_t port;			/* 0: every listener */
	struct loop_timer *timer;
	struct shed_ctl ctl;
	uint64_t last_ns;
	/* the fullest listener at the last sample */
	struct agent_shed_listener top;
	uint64_t starts;		/* times shedding started */
	bool warned;
	struct shed_slot *slots;	/* per tenant slot */
	uint32_t *w;			/* scratch: per tenant in order */
	double *d;
};

/* Whether shedding holds t: it holds the kernel's standalone buckets of
 * tenants that limit connections to this host and are enforced (a shadow
 * tenant admits anyway; a leased one spends the fleet's tokens). */
static bool sheddable(const struct agent *a, const struct agent_tenant *t)
{
	return !a->kern.leased && t->pol.direction == POLICY_DIR_IN &&
	       !t->pol.shadow && t->slot < a->kern.max_tenants;
}

static int listener_seen(const struct inet_diag_msg *m, void *arg)
{
	struct agent_shed *s = arg;
	uint16_t port = ntohs(m->id.idiag_sport);
	struct agent_shed_listener *top = &s->top;

	if (s->port && port != s->port)
		return 0;
	/* the fullest by fill, len / max, compared without division; the
	 * first one seen until another is fuller */
	if (!top->port ||
	    (uint64_t)m->idiag_rqueue * top->max >
	    (uint64_t)top->len * m->idiag_wqueue) {
		top->port = port;
		top->len = m->idiag_rqueue;
		top->max = m->idiag_wqueue;
	}
	return 0;
}

static int read_listeners(struct agent_shed *s)
{
	int err;

	memset(&s->top, 0, sizeof(s->top));
	err = conntrack_diag_dump(AF_INET, 1u << TCP_LISTEN_STATE,
				  listener_seen, s);
	if (!err)
		err = conntrack_diag_dump(AF_INET6, 1u << TCP_LISTEN_STATE,
					  listener_seen, s);
	return err;
}

/* Holds t to limit connections per second (its policy's limits when
 * limit < 0 or infinite), never above its policy's rate or burst. */
static void hold(struct agent *a, const struct agent_tenant *t, double limit,
		 uint64_t now)
{
	uint64_t interval = policy_interval_ns(&t->pol.rate), burst = t->pol.burst;
	uint64_t cur;

	if (limit >= 0 && !isinf(limit)) {
		/* no limit at all is one token an hour: a burst of 1 over
		 * it stays far within POLICY_REFILL_MAX_NS */
		double ns = limit > 0 ? 1e9 / limit : 3600e9;
		double b = ceil(limit * SHED_HORIZON_S);

		if (ns > 3600e9)
			ns = 3600e9;
		if ((double)interval < ns)
			interval = (uint64_t)ns;
		if (b < 1)
			b = 1;
		if ((double)burst > b)
			burst = (uint64_t)b;
	}
	/* a held limit that moved by less than a sixteenth is left as it
	 * is: the demand's average wobbles from sample to sample */
	cur = __atomic_load_n(&a->kern.tenants[t->slot].interval_ns,
			      __ATOMIC_RELAXED);
	if (limit >= 0 && !isinf(limit) && interval != cur &&
	    burst == a->kern.tenants[t->slot].burst &&
	    (interval > cur ? interval - cur : cur - interval) < cur / 16)
		return;
	rl_slot_retune(&a->kern.tenants[t->slot], interval, burst, now);
}

/* The counters of slots 0 up to the highest in use, malloc'ed, their count
 * in *n_out; NULL without tenants or on a failed read. */
static struct rl_stats *stats_in_use(struct agent *a, uint32_t *n_out)
{
	struct rl_stats *buf;
	uint32_t n = 0;

	for (size_t i = 0; i < a->n_tenants; i++)
		if (a->tenants[i].slot < a->kern.max_tenants && a->tenants[i].slot >= n)
			n = a->tenants[i].slot + 1;
	if (!n)
		return NULL;
	buf = malloc((size_t)n * sizeof(*buf));
	if (!buf || kern_tenant_stats_range(&a->kern, 0, n, buf)) {
		free(buf);
		return NULL;
	}
	*n_out = n;
	return buf;
}

/* The counters of every sheddable tenant since the last sample: its demand
 * averaged, what was refused while it was held; the sum of admissions.
 * The counters of every slot in use come in a few system calls (one per
 * tenant would cost a hundred every 10 ms at a hundred tenants). */
static uint64_t sample_tenants(struct agent *a, struct agent_shed *s,
			       double dt, double *demand)
{
	uint64_t admitted = 0;
	struct rl_stats *all;
	uint32_t n = 0;

	*demand = 0;
	all = stats_in_use(a, &n);
	if (!all)
		return 0;
	for (size_t i = 0; i < a->n_tenants; i++) {
		const struct agent_tenant *t = &a->tenants[i];
		const struct rl_stats *st;
		struct shed_slot *ss;
		uint64_t da, dd;

		if (!sheddable(a, t) || t->slot >= n)
			continue;
		st = &all[t->slot];
		ss = &s->slots[t->slot];
		/* counters that went back: a new tenant in the slot */
		if (st->admitted < ss->admitted || st->denied < ss->denied) {
			memset(ss, 0, sizeof(*ss));
			ss->limit = -1;
		}
		da = st->admitted - ss->admitted;
		dd = st->denied - ss->denied;
		ss->admitted = st->admitted;
		ss->denied = st->denied;
		if (ss->limit >= 0)
			ss->shed += dd;
		if (dt > 0)
			ss->demand = shed_ewma(ss->demand, (double)(da + dd) / dt);
		admitted += da;
		*demand += ss->demand;
	}
	free(all);
	return admitted;
}

static void apply(struct agent *a, struct agent_shed *s, uint64_t now)
{
	double level = INFINITY;
	size_t n = 0;

	if (s->ctl.on) {
		for (size_t i = 0; i < a->n_tenants; i++) {
			const struct agent_tenant *t = &a->tenants[i];

			if (!sheddable(a, t))
				continue;
			s->w[n] = (uint32_t)(t->pol.weight ? t->pol.weight : 1);
			s->d[n++] = s->slots[t->slot].demand;
		}
		level = shed_level(s->ctl.budget, n, s->w, s->d);
	}
	for (size_t i = 0; i < a->n_tenants; i++) {
		const struct agent_tenant *t = &a->tenants[i];
		double w = t->pol.weight ? (double)t->pol.weight : 1;

		if (!sheddable(a, t))
			continue;
		s->slots[t->slot].limit = isinf(level) ? -1 : w * level;
		hold(a, t, s->slots[t->slot].limit, now);
	}
}

static void on_sample(struct loop_timer *timer, void *arg)
{
	struct agent *a = arg;
	struct agent_shed *s = a->shed;
	uint64_t now = loop_now_ns(), admitted;
	double dt = s->last_ns ? (double)(now - s->last_ns) / 1e9 : 0, demand;
	bool was = s->ctl.on;
	int err;

	(void)timer;
	s->last_ns = now;
	err = read_listeners(s);
	if (err) {
		/* as if no listener: nobody is held on a queue not seen */
		if (!s->warned)
			log_warn("couldn't read the listeners' queues on "
				 "'sock_diag': %s; nothing is shed until they "
				 "can be read", strerror(-err));
		memset(&s->top, 0, sizeof(s->top));
	}
	s->warned = err != 0;
	admitted = sample_tenants(a, s, dt, &demand);
	shed_sample(&s->ctl, s->top.len, s->top.max, s->mark_pct, admitted,
		    demand, dt);
	if (s->ctl.on != was) {
		if (s->ctl.on)
			s->starts++;
		log_info("shedding %s: listener port %u, accept queue %u of %u "
			 "(mark %u%%), accepting %.0f/s, offered %.0f/s",
			 s->ctl.on ? "starts" : "ends", s->top.port,
			 s->top.len, s->top.max, s->mark_pct,
			 s->ctl.accept_rate, demand);
	}
	if (s->ctl.on || was)
		apply(a, s, now);
}

int agent_shed_open(struct agent *a, unsigned int mark_pct, uint16_t port)
{
	struct agent_shed *s;
	uint32_t n = a->kern.max_tenants;

	if (!mark_pct)
		return 0;
	s = calloc(1, sizeof(*s));
	if (!s || !(s->slots = calloc(n, sizeof(*s->slots))) ||
	    !(s->w = calloc(n, sizeof(*s->w))) ||
	    !(s->d = calloc(n, sizeof(*s->d)))) {
		log_error("couldn't allocate the shedding tables for %u tenants: %s",
			  n, strerror(ENOMEM));
		goto fail;
	}
	for (uint32_t i = 0; i < n; i++)
		s->slots[i].limit = -1;
	s->mark_pct = mark_pct;
	s->port = port;
	a->shed = s;
	if (loop_timer_add(a->loop, SHED_PERIOD_MS, SHED_PERIOD_MS, on_sample, a,
			   &s->timer)) {
		log_error("couldn't start the shedding timer");
		a->shed = NULL;
		goto fail;
	}
	log_info("shedding at %u%% of the accept queue of %s", mark_pct,
		 port ? "the listener of --shed-port" : "every listener");
	return 0;
fail:
	if (s) {
		free(s->slots);
		free(s->w);
		free(s->d);
	}
	free(s);
	return -ENOMEM;
}

void agent_shed_close(struct agent *a)
{
	struct agent_shed *s = a->shed;

	if (!s)
		return;
	if (s->timer)
		loop_timer_cancel(s->timer);
	/* the policy's limits back in the kernel: held ones must not
	 * outlive the agent that watches the queue */
	s->ctl.on = false;
	apply(a, s, loop_now_ns());
	free(s->slots);
	free(s->w);
	free(s->d);
	free(s);
	a->shed = NULL;
}

bool agent_shed_state(const struct agent *a, struct agent_shed_status *out)
{
	const struct agent_shed *s = a->shed;

	memset(out, 0, sizeof(*out));
	if (!s)
		return false;
	out->mark_pct = s->mark_pct;
	out->port = s->port;
	out->top = s->top;
	out->on = s->ctl.on;
	out->budget = s->ctl.budget;
	out->accept_rate = s->ctl.accept_rate;
	out->starts = s->starts;
	return true;
}

bool agent_shed_tenant(const struct agent *a, const struct agent_tenant *t,
		       uint64_t *shed, double *limit)
{
	const struct agent_shed *s = a->shed;

	if (!s || !sheddable(a, t))
		return false;
	*shed = s->slots[t->slot].shed;
	*limit = s->slots[t->slot].limit;
	return true;
}

json_t *agent_shed_json(const struct agent *a)
{
	struct agent_shed_status st;

	if (!agent_shed_state(a, &st))
		return NULL;
	return json_pack("{s:i,s:o,s:{s:i,s:i,s:i},s:b,s:f,s:f,s:I}",
			 "mark_pct", (int)st.mark_pct,
			 "port", st.port ? json_integer(st.port) : json_null(),
			 "listener", "port", (int)st.top.port,
			 "queue", (int)st.top.len, "backlog", (int)st.top.max,
			 "shedding", st.on, "budget", st.on ? st.budget : 0.0,
			 "accept_rate", st.accept_rate,
			 "starts", (json_int_t)st.starts);
}

void agent_shed_tenant_json(const struct agent *a, const struct agent_tenant *t,
			    json_t *j)
{
	uint64_t shed;
	double limit;

	if (!j || !agent_shed_tenant(a, t, &shed, &limit))
		return;
	json_object_set_new(j, "shed", json_integer((json_int_t)shed));
	json_object_set_new(j, "shed_limit",
			    limit >= 0 ? json_real(limit) : json_null());
	json_object_set_new(j, "weight", json_integer(
		(json_int_t)(t->pol.weight ? t->pol.weight : 1)));
}
