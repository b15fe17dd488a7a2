// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The tenants' rates: every second the kernel's counters of each tenant
 * are sampled (the last AGENT_RATE_SAMPLES kept), and rates are the
 * difference over the samples kept - for rlctl, metrics and lease sizing.
 */
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "log.h"

/*
 * The sample is a sweep over the slots, a few thousand per system call,
 * that works for at most SWEEP_SLICE_NS per turn of the event loop and
 * then yields to it through a timer of no delay: read at once, 100,000
 * tenants' per-CPU counters would hold the loop (leases, heartbeats, the
 * control socket) for some 20 ms every second.  Each tenant's sample keeps
 * the time its counters were read, so that rates are right whenever in the
 * sweep its turn came.  A tenant added behind the sweep is sampled by the
 * next one; one whose slot the sweep reaches twice in one (moved there) is
 * sampled once.
 */
#define SWEEP_SLICE_NS		(1ULL * 1000000ULL)
/* Per-CPU values read per system call, as a scrape reads them */
#define SWEEP_READ_VALUES	4096
/* A tenant sampled less than this long ago is not sampled again */
#define SWEEP_MIN_GAP_NS	(500ULL * 1000000ULL)

struct agent_sweep {
	struct loop_timer *timer;	/* the next slice, while one is due */
	uint32_t cur, end;		/* the next slot to read, the last + 1 */
	uint32_t per;			/* slots per read */
	struct rl_stats *buf;		/* per of them */
	uint64_t sweeps;		/* done since the start */
};

/* t's sample of its counters s, read at now_ns. */
static void sample_one(struct agent *a, struct agent_tenant *t,
		       const struct rl_stats *s, uint64_t now_ns)
{
	const struct agent_sample *l = t->n_samples ?
				       &t->samples[t->n_samples - 1] : NULL;

	if (l && now_ns - l->ns < SWEEP_MIN_GAP_NS)
		return;
	if (a->hooks.tenant_moved &&
	    (l ? l->admitted != s->admitted || l->denied != s->denied :
		 s->admitted || s->denied))
		a->hooks.tenant_moved(a->hooks.ctx, t->slot);
	if (t->n_samples == AGENT_RATE_SAMPLES) {
		memmove(t->samples, t->samples + 1,
			(AGENT_RATE_SAMPLES - 1) * sizeof(t->samples[0]));
		t->n_samples--;
	}
	t->samples[t->n_samples++] = (struct agent_sample){
		.admitted = s->admitted, .denied = s->denied, .ns = now_ns,
	};
}

/* The tenant in slot, or NULL.  Without the index, the tenants are walked
 * once per read rather than once per slot (sweep_read()). */
static struct agent_tenant *slot_tenant(struct agent *a, uint32_t slot)
{
	struct agent_tenant *t = a->ix ? agent_find_slot(a, slot) : NULL;

	return t && t->slot == slot ? t : NULL;
}

/* The next `per` slots of the sweep, read and sampled. */
static void sweep_read(struct agent *a, struct agent_sweep *w)
{
	uint32_t n = w->end - w->cur < w->per ? w->end - w->cur : w->per;
	uint64_t now = loop_now_ns();
	bool batch = !kern_tenant_stats_range(&a->kern, w->cur, n, w->buf);

	if (!a->ix) {
		for (size_t i = 0; i < a->n_tenants; i++) {
			struct agent_tenant *t = &a->tenants[i];
			struct rl_stats s;

			if (t->slot < w->cur || t->slot - w->cur >= n)
				continue;
			if (batch)
				sample_one(a, t, &w->buf[t->slot - w->cur], now);
			else if (!kern_tenant_stats(&a->kern, t->slot, &s))
				sample_one(a, t, &s, now);
			else
				t->n_samples = 0;	/* a gap: start again */
		}
		w->cur += n;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct agent_tenant *t = slot_tenant(a, w->cur + i);
		struct rl_stats s;

		if (!t)
			continue;
		if (batch)
			sample_one(a, t, &w->buf[i], now);
		else if (!kern_tenant_stats(&a->kern, t->slot, &s))
			sample_one(a, t, &s, now);
		else
			t->n_samples = 0;
	}
	w->cur += n;
}

static void sweep_slice(struct loop_timer *timer, void *arg)
{
	struct agent *a = arg;
	struct agent_sweep *w = a->sweep;
	uint64_t t0 = loop_now_ns();

	(void)timer;
	w->timer = NULL;	/* fired: gone */
	while (w->cur < w->end) {
		sweep_read(a, w);
		if (w->cur >= w->end || loop_now_ns() - t0 < SWEEP_SLICE_NS)
			continue;
		if (a->stopping) {
			w->cur = w->end;	/* no rates are read any more */
			return;
		}
		/* whole when the loop cannot take the next slice */
		if (a->loop &&
		    !loop_timer_add(a->loop, 0, 0, sweep_slice, a, &w->timer))
			return;
	}
	w->sweeps++;
}

static struct agent_sweep *sweep_get(struct agent *a)
{
	struct agent_sweep *w = a->sweep;
	uint32_t ncpus = a->kern.ncpus > 0 ? (uint32_t)a->kern.ncpus : 1;

	if (w)
		return w;
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->per = SWEEP_READ_VALUES / ncpus < 64 ? 64 : SWEEP_READ_VALUES / ncpus;
	w->buf = calloc(w->per, sizeof(*w->buf));
	if (!w->buf) {
		free(w);
		return NULL;
	}
	a->sweep = w;
	return w;
}

void agent_sample(struct agent *a)
{
	struct agent_sweep *w = sweep_get(a);
	uint32_t end = 0;

	if (!w) {
		log_warn("couldn't sample the tenants' counters: out of memory");
		return;
	}
	if (w->cur < w->end)
		return;		/* the last one still runs: it goes on */
	for (size_t i = 0; i < a->n_tenants; i++)
		if (a->tenants[i].slot < a->kern.max_tenants &&
		    a->tenants[i].slot >= end)
			end = a->tenants[i].slot + 1;
	w->cur = 0;
	w->end = end;
	/* its first slice in a turn of its own, not in the caller's (the
	 * tick's other work) */
	if (end && (!a->loop ||
		    loop_timer_add(a->loop, 0, 0, sweep_slice, a, &w->timer)))
		sweep_slice(NULL, a);
}

uint64_t agent_sweeps(const struct agent *a)
{
	return a->sweep ? a->sweep->sweeps : 0;
}

void agent_sample_stop(struct agent *a)
{
	struct agent_sweep *w = a->sweep;

	if (!w)
		return;
	if (w->timer)
		loop_timer_cancel(w->timer);
	free(w->buf);
	free(w);
	a->sweep = NULL;
}

void agent_tenant_stats(struct agent *a, const struct agent_tenant *t,
			struct agent_tenant_stats *out)
{
	agent_tenant_stats_from(a, t, NULL, out);
}

void agent_tenant_stats_from(struct agent *a, const struct agent_tenant *t,
			     const struct rl_stats *s, struct agent_tenant_stats *out)
{
	struct rl_src_stats ss;
	struct kern_conns kc;

	memset(out, 0, sizeof(*out));
	if (s)
		out->s = *s;
	else
		kern_tenant_stats(&a->kern, t->slot, &out->s);
	out->tokens = kern_tenant_tokens(&a->kern, t->slot, loop_now_ns());
	if (a->kern.preload) {
		out->points = true;
		kern_point_stats(&a->kern, t->slot, &out->kernel, &out->preload);
		kern_point_tokens(&a->kern, t->slot, loop_now_ns(),
				  &out->kernel_tokens, &out->preload_tokens);
		kern_point_conns(&a->kern, t->slot, &out->kernel_conns,
				 &out->preload_conns, &out->kernel_slots,
				 &out->preload_slots);
	}
	if (t->pol.max_conns && !kern_tenant_conns(&a->kern, t->slot, &kc)) {
		out->max_conns = t->pol.max_conns;
		/* the host's: both points', where they share the slots
		 * (kern_conn_slots) */
		if (a->kern.preload) {
			kc.in_flight = kern_conns_in_flight(&a->kern, t->slot);
			if (a->kern.leased || kern_conn_points(&a->kern) == 2)
				kc.slots += out->preload_slots;
		}
		out->conns = kc.in_flight > 0 ? (uint64_t)kc.in_flight : 0;
		out->conn_slots = kc.slots > 0 ? (uint64_t)kc.slots : 0;
		out->conn_denied = kc.s.denied;
		out->conns_opened = kc.s.opened;
		out->conns_closed = kc.s.closed;
		out->conns_forgotten = kc.forgotten;
	}
	if (t->pol.src_rate.count && !kern_src_stats(&a->kern, t->slot, &ss)) {
		out->src_denied = ss.denied;
		out->src_overflow = ss.overflow;
	}
	agent_tenant_rates_now(t, &out->s, &out->admit_rate, &out->deny_rate,
			       &out->rate_window_s);
}

void agent_tenant_rates_now(const struct agent_tenant *t, const struct rl_stats *s,
			    double *admit, double *deny, double *window)
{
	const struct agent_sample *o = &t->samples[0];
	uint64_t now = loop_now_ns(), then;

	*admit = *deny = *window = 0;
	if (!t->n_samples)
		return;
	then = o->ns;
	/* a slot reset on re-creation could make counters fall: no
	 * negative rates */
	if (now <= then || s->admitted < o->admitted || s->denied < o->denied)
		return;
	*window = (double)(now - then) / 1e9;
	*admit = (double)(s->admitted - o->admitted) / *window;
	*deny = (double)(s->denied - o->denied) / *window;
}

void agent_tenant_rates(const struct agent_tenant *t, double *admit, double *deny)
{
	*admit = *deny = 0;
	if (t->n_samples >= 2) {
		const struct agent_sample *o = &t->samples[0];
		const struct agent_sample *l = &t->samples[t->n_samples - 1];
		double dt = (double)(l->ns - o->ns) / 1e9;

		/* Counters only grow, but a slot reset on re-creation could
		 * make them fall: no negative rates. */
		if (dt > 0 && l->admitted >= o->admitted && l->denied >= o->denied) {
			*admit = (double)(l->admitted - o->admitted) / dt;
			*deny = (double)(l->denied - o->denied) / dt;
		}
	}
}
