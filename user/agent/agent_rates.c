// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The tenants' rates: every second the kernel's counters of each tenant
 * are sampled (the last AGENT_RATE_SAMPLES kept), and rates are the
 * difference over the samples kept - for rlctl, metrics and lease sizing.
 */
#include <stdlib.h>
#include <string.h>

#include "agent.h"

struct rl_stats *agent_stats_all(struct agent *a, uint32_t *n_out)
{
	struct rl_stats *buf;
	uint32_t n = 0;

	for (size_t i = 0; i < a->n_tenants; i++)
		if (a->tenants[i].slot < a->kern.max_tenants && a->tenants[i].slot >= n)
			n = a->tenants[i].slot + 1;
	if (!n)
		return NULL;
	buf = malloc((size_t)n * sizeof(*buf));
	if (!buf || kern_tenant_stats_all(&a->kern, n, buf)) {
		free(buf);
		return NULL;
	}
	*n_out = n;
	return buf;
}

void agent_sample(struct agent *a)
{
	uint64_t now = loop_now_ns();
	uint32_t n_all = 0;
	struct rl_stats *all = agent_stats_all(a, &n_all);

	if (a->n_sample_ns == AGENT_RATE_SAMPLES) {
		memmove(a->sample_ns, a->sample_ns + 1,
			(AGENT_RATE_SAMPLES - 1) * sizeof(a->sample_ns[0]));
		a->n_sample_ns--;
	}
	a->sample_ns[a->n_sample_ns++] = now;
	for (size_t i = 0; i < a->n_tenants; i++) {
		struct agent_tenant *t = &a->tenants[i];
		struct rl_stats s;

		if (all && t->slot < n_all) {
			s = all[t->slot];
		} else if (kern_tenant_stats(&a->kern, t->slot, &s)) {
			/* its samples are of the latest times, one each */
			t->n_samples = 0;
			continue;
		}
		if (a->hooks.tenant_moved &&
		    (t->n_samples ? t->samples[t->n_samples - 1].admitted != s.admitted ||
				    t->samples[t->n_samples - 1].denied != s.denied :
				    s.admitted || s.denied))
			a->hooks.tenant_moved(a->hooks.ctx, t->slot);
		if (t->n_samples == AGENT_RATE_SAMPLES) {
			memmove(t->samples, t->samples + 1,
				(AGENT_RATE_SAMPLES - 1) * sizeof(t->samples[0]));
			t->n_samples--;
		}
		t->samples[t->n_samples++] = (struct agent_sample){
			.admitted = s.admitted, .denied = s.denied,
		};
	}
	free(all);
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
	agent_tenant_rates_now(a, t, &out->s, &out->admit_rate, &out->deny_rate,
			       &out->rate_window_s);
}

void agent_tenant_rates_now(const struct agent *a, const struct agent_tenant *t,
			    const struct rl_stats *s, double *admit, double *deny,
			    double *window)
{
	const struct agent_sample *o = &t->samples[0];
	uint64_t now = loop_now_ns(), then;

	*admit = *deny = *window = 0;
	if (!t->n_samples)
		return;
	then = agent_sample_ns(a, t, 0);
	/* a slot reset on re-creation could make counters fall: no
	 * negative rates */
	if (now <= then || s->admitted < o->admitted || s->denied < o->denied)
		return;
	*window = (double)(now - then) / 1e9;
	*admit = (double)(s->admitted - o->admitted) / *window;
	*deny = (double)(s->denied - o->denied) / *window;
}

void agent_tenant_rates(const struct agent *a, const struct agent_tenant *t,
			double *admit, double *deny)
{
	*admit = *deny = 0;
	if (t->n_samples >= 2) {
		const struct agent_sample *o = &t->samples[0];
		const struct agent_sample *l = &t->samples[t->n_samples - 1];
		double dt = (double)(agent_sample_ns(a, t, t->n_samples - 1) -
				     agent_sample_ns(a, t, 0)) / 1e9;

		/* Counters only grow, but a slot reset on re-creation could
		 * make them fall: no negative rates. */
		if (dt > 0 && l->admitted >= o->admitted && l->denied >= o->denied) {
			*admit = (double)(l->admitted - o->admitted) / dt;
			*deny = (double)(l->denied - o->denied) / dt;
		}
	}
}
