// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The seam between the agent and the lease broker, as main.c sets it up:
 * struct broker_host filled from struct agent (kernel maps through kern.h,
 * the tenant set through agent.h), and struct agent_hooks pointed at the
 * broker.  The shapes each side owns are translated here, nowhere else.
 */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "wire.h"

/* --- the agent as the broker's host ---------------------------------------- */

static uint64_t host_tokens(void *ctx, uint32_t slot, uint64_t now_ns)
{
	struct agent *a = ctx;

	return kern_tenant_tokens(&a->kern, slot, now_ns);
}

static uint64_t host_overdrawn(void *ctx, uint32_t slot)
{
	struct agent *a = ctx;

	return kern_tenant_overdrawn(&a->kern, slot);
}

static void host_tokens_add(void *ctx, uint32_t slot, uint64_t n, int64_t lowwater)
{
	struct agent *a = ctx;

	kern_tokens_add(&a->kern, slot, n, lowwater);
}

static uint64_t host_tokens_take(void *ctx, uint32_t slot, uint64_t max)
{
	struct agent *a = ctx;

	return kern_tokens_take(&a->kern, slot, max);
}

static int host_counters(void *ctx, uint32_t slot, struct rl_stats *out)
{
	struct agent *a = ctx;

	return kern_tenant_stats(&a->kern, slot, out);
}

static void host_fleet_state(void *ctx, uint64_t now_ns, uint64_t stale_ns,
			     bool degraded)
{
	struct agent *a = ctx;

	kern_fleet_state(&a->kern, now_ns, stale_ns, degraded);
}

static void host_tenant_degraded(void *ctx, uint32_t slot, bool on)
{
	struct agent *a = ctx;

	kern_tenant_degraded(&a->kern, slot, on);
}

static void host_conn_slots(void *ctx, uint32_t slot, int64_t n)
{
	struct agent *a = ctx;

	kern_conn_slots(&a->kern, slot, n);
}

static int64_t host_conns_in_flight(void *ctx, uint32_t slot)
{
	struct agent *a = ctx;

	return kern_conns_in_flight(&a->kern, slot);
}

static unsigned int host_conn_points(void *ctx)
{
	struct agent *a = ctx;

	return kern_conn_points(&a->kern);
}

/* The static fail share of every tenant divides by the fleet's size; the
 * kernel keeps the size for the next agent. */
static uint64_t host_fleet_agents(void *ctx, uint64_t n)
{
	struct agent *a = ctx;

	if (!n)
		return kern_fleet_agents(&a->kern, 0);
	a->kern.fail_agents = n;
	n = kern_fleet_agents(&a->kern, n);
	for (size_t i = 0; i < a->n_tenants; i++)
		kern_tenant_fail(&a->kern, a->tenants[i].slot, &a->tenants[i].pol);
	return n;
}

/* What the broker sees of t; its samples only with the agent they were
 * taken by (a NULL: none, for a set the broker only publishes). */
static void view_of(const struct agent *a, const struct agent_tenant *t,
		    struct broker_tenant *out)
{
	out->pol = &t->pol;
	out->slot = t->slot;
	out->version = t->version;
	out->n_samples = a ? t->n_samples : 0;
	memset(&out->first, 0, sizeof(out->first));
	memset(&out->last, 0, sizeof(out->last));
	if (out->n_samples) {
		unsigned int n = t->n_samples;
		const struct agent_sample *f = &t->samples[0];
		const struct agent_sample *l = &t->samples[n - 1];

		out->first = (struct lease_sample){ f->ns,
						    f->admitted, f->denied };
		out->last = (struct lease_sample){ l->ns,
						   l->admitted, l->denied };
	}
}

static size_t host_tenant_count(void *ctx)
{
	struct agent *a = ctx;

	return a->n_tenants;
}

static void host_tenant_at(void *ctx, size_t i, struct broker_tenant *out)
{
	struct agent *a = ctx;

	view_of(a, &a->tenants[i], out);
}

static bool host_tenant_find(void *ctx, const char *name, struct broker_tenant *out)
{
	const struct agent_tenant *t = agent_find(ctx, name);

	if (t)
		view_of(ctx, t, out);
	return t != NULL;
}

static size_t host_tomb_count(void *ctx)
{
	struct agent *a = ctx;

	return a->n_tombs;
}

static void host_tomb_at(void *ctx, size_t i, const char **name, uint64_t *version)
{
	struct agent *a = ctx;

	*name = a->tombs[i].name;
	*version = a->tombs[i].version;
}

static bool host_tomb_find(void *ctx, const char *name, uint64_t *version)
{
	const struct agent_tomb *tomb = agent_find_tomb(ctx, name);

	if (tomb)
		*version = tomb->version;
	return tomb != NULL;
}

static uint64_t host_tomb_left_ms(void *ctx, uint64_t version)
{
	return agent_tomb_left_ms(ctx, version);
}

static uint64_t host_next_version(void *ctx, uint64_t prev)
{
	return agent_next_version(ctx, prev);
}

static size_t host_fleet_apply(void *ctx, const struct broker_fleet_update *u,
			       size_t n, bool *wait)
{
	struct agent_fleet_update *au = calloc(n ? n : 1, sizeof(*au));
	size_t left;

	if (!au) {
		/* offered again with the next batch */
		for (size_t i = 0; i < n; i++)
			wait[i] = true;
		return n;
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(au[i].name, u[i].name, sizeof(au[i].name));
		au[i].version = u[i].version;
		au[i].json = u[i].json;
	}
	left = agent_fleet_apply(ctx, au, n, wait);
	free(au);
	return left;
}

void wire_broker_host(struct agent *a, struct broker_host *h)
{
	*h = (struct broker_host){
		.ctx = a,
		.loop = a->loop,
		.max_slots = a->kern.max_tenants,
		.tokens = host_tokens,
		.tokens_add = host_tokens_add,
		.tokens_take = host_tokens_take,
		.overdrawn = host_overdrawn,
		.counters = host_counters,
		.fleet_state = host_fleet_state,
		.tenant_degraded = host_tenant_degraded,
		.conn_slots = host_conn_slots,
		.conns_in_flight = host_conns_in_flight,
		.conn_points = host_conn_points,
		.fleet_agents = host_fleet_agents,
		.tenant_count = host_tenant_count,
		.tenant_at = host_tenant_at,
		.tenant_find = host_tenant_find,
		.tomb_count = host_tomb_count,
		.tomb_at = host_tomb_at,
		.tomb_find = host_tomb_find,
		.tomb_left_ms = host_tomb_left_ms,
		.next_version = host_next_version,
		.fleet_apply = host_fleet_apply,
	};
}

/* --- the broker as the agent's listener ------------------------------------ */

/* Room in the broker for the names of the tenants new to their slots. */
static int hook_slots_reserve(void *ctx, const struct agent_tenant *ts, size_t n,
			      char *err)
{
	const char *first = NULL;
	size_t need = 0, k = 0;

	for (size_t i = 0; i < n; i++) {
		size_t b = broker_slot_name_need(ctx, ts[i].slot, ts[i].pol.name);

		if (b && !k++)
			first = ts[i].pol.name;
		need += b;
	}
	return broker_names_reserve(ctx, need, k, first, err);
}

static void hook_slot_ready(void *ctx, uint32_t slot, const struct policy_tenant *p)
{
	broker_slot_ready(ctx, slot, p);
}

/* The sets of a change, for the broker to publish: no samples. */
static struct broker_tenant *views_of(const struct agent_tenant *ts, size_t n)
{
	struct broker_tenant *v = calloc(n ? n : 1, sizeof(*v));

	for (size_t i = 0; v && i < n; i++)
		view_of(NULL, &ts[i], &v[i]);
	return v;
}

static void hook_policy_changed(void *ctx, const struct agent_tenant *old,
				size_t n_old, const struct agent_tenant *now,
				size_t n_now)
{
	struct broker_tenant *vo = views_of(old, n_old), *vn = views_of(now, n_now);

	if (vo && vn)
		broker_policy_changed(ctx, vo, n_old, vn, n_now);
	else
		log_warn("couldn't publish a policy change to the fleet's "
			 "store: out of memory");
	free(vo);
	free(vn);
}

static void hook_tenants_changed(void *ctx)
{
	broker_tenants_changed(ctx);
}

static void hook_tenant_moved(void *ctx, uint32_t slot)
{
	broker_slot_moved(ctx, slot);
}

void wire_agent_hooks(struct agent *a, struct broker *b)
{
	a->hooks = (struct agent_hooks){
		.ctx = b,
		.slots_reserve = hook_slots_reserve,
		.slot_ready = hook_slot_ready,
		.policy_changed = hook_policy_changed,
		.tenants_changed = hook_tenants_changed,
		.tenant_moved = hook_tenant_moved,
	};
}
