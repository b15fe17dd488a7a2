/* test_broker_names: the lease broker (user/agent/broker*.c, linked in) on
 * a host of this test's own, with malloc failing on demand (the link wraps
 * it): a tenant whose name cannot be kept leaves its slot as it was and is
 * never credited again by the syncs that follow; room reserved before a
 * change names every tenant of it without allocating; a reservation that
 * cannot be made names the tenant and the bytes; a broker that cannot name
 * its host's tenants does not open.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../user/agent/broker_int.h"
#include "check.h"
#include "malloc_fail.h"

/* --- the host: a tenant set and the kernel's tokens ------------------------ */

#define SLOTS	16

static struct {
	struct policy_tenant pol[SLOTS];
	uint32_t slot[SLOTS];
	size_t n;
	uint64_t tokens[SLOTS];
	unsigned int credits[SLOTS];	/* tokens_add() calls */
} host;

static uint64_t h_tokens(void *ctx, uint32_t slot, uint64_t now_ns)
{
	(void)ctx;
	(void)now_ns;
	return host.tokens[slot];
}

static void h_tokens_add(void *ctx, uint32_t slot, uint64_t n, int64_t lowwater)
{
	(void)ctx;
	(void)lowwater;
	host.tokens[slot] += n;
	host.credits[slot]++;
}

static uint64_t h_tokens_take(void *ctx, uint32_t slot, uint64_t max)
{
	uint64_t n = max && max < host.tokens[slot] ? max : host.tokens[slot];

	(void)ctx;
	host.tokens[slot] -= n;
	return n;
}

static uint64_t h_overdrawn(void *ctx, uint32_t slot)
{
	(void)ctx;
	(void)slot;
	return 0;
}

static int h_counters(void *ctx, uint32_t slot, struct rl_stats *out)
{
	(void)ctx;
	(void)slot;
	memset(out, 0, sizeof(*out));
	return 0;
}

static void h_fleet_state(void *ctx, uint64_t now_ns, uint64_t stale_ns, bool degraded)
{
	(void)ctx;
	(void)now_ns;
	(void)stale_ns;
	(void)degraded;
}

static void h_tenant_degraded(void *ctx, uint32_t slot, bool on)
{
	(void)ctx;
	(void)slot;
	(void)on;
}

static void h_conn_slots(void *ctx, uint32_t slot, int64_t n)
{
	(void)ctx;
	(void)slot;
	(void)n;
}

static int64_t h_conns_in_flight(void *ctx, uint32_t slot)
{
	(void)ctx;
	(void)slot;
	return 0;
}

static unsigned int h_conn_points(void *ctx)
{
	(void)ctx;
	return 1;
}

static uint64_t h_fleet_agents(void *ctx, uint64_t n)
{
	(void)ctx;
	return n;
}

static size_t h_tenant_count(void *ctx)
{
	(void)ctx;
	return host.n;
}

static void h_tenant_at(void *ctx, size_t i, struct broker_tenant *out)
{
	(void)ctx;
	memset(out, 0, sizeof(*out));
	out->pol = &host.pol[i];
	out->slot = host.slot[i];
	out->version = 1;
}

static bool h_tenant_find(void *ctx, const char *name, struct broker_tenant *out)
{
	for (size_t i = 0; i < host.n; i++)
		if (strcmp(host.pol[i].name, name) == 0) {
			h_tenant_at(ctx, i, out);
			return true;
		}
	return false;
}

static size_t h_tomb_count(void *ctx)
{
	(void)ctx;
	return 0;
}

static void h_tomb_at(void *ctx, size_t i, const char **name, uint64_t *version)
{
	(void)ctx;
	(void)i;
	*name = "";
	*version = 0;
}

static bool h_tomb_find(void *ctx, const char *name, uint64_t *version)
{
	(void)ctx;
	(void)name;
	(void)version;
	return false;
}

static uint64_t h_tomb_left_ms(void *ctx, uint64_t version)
{
	(void)ctx;
	(void)version;
	return 0;
}

static uint64_t h_next_version(void *ctx, uint64_t prev)
{
	(void)ctx;
	return prev + 1;
}

static size_t h_fleet_apply(void *ctx, const struct broker_fleet_update *u,
			    size_t n, bool *wait)
{
	(void)ctx;
	(void)u;
	memset(wait, 0, n * sizeof(*wait));
	return 0;
}

static struct loop *loop;

/* A host holding no tenant, and a broker on it (its Redis never reached:
 * the loop is not run). */
static struct broker *open_broker(int *err)
{
	struct broker_host h = {
		.loop = loop, .max_slots = SLOTS,
		.tokens = h_tokens, .tokens_add = h_tokens_add,
		.tokens_take = h_tokens_take, .overdrawn = h_overdrawn,
		.counters = h_counters, .fleet_state = h_fleet_state,
		.tenant_degraded = h_tenant_degraded, .conn_slots = h_conn_slots,
		.conns_in_flight = h_conns_in_flight, .conn_points = h_conn_points,
		.fleet_agents = h_fleet_agents, .tenant_count = h_tenant_count,
		.tenant_at = h_tenant_at, .tenant_find = h_tenant_find,
		.tomb_count = h_tomb_count, .tomb_at = h_tomb_at,
		.tomb_find = h_tomb_find, .tomb_left_ms = h_tomb_left_ms,
		.next_version = h_next_version, .fleet_apply = h_fleet_apply,
	};
	struct broker_opts o = {
		.redis = "unix:/nonexistent/redis.sock", .agent_id = "test",
		.lease_ttl_ms = 1000, .expected_agents = 1,
	};
	struct broker *b = NULL;

	*err = broker_open(&h, &o, &b);
	return b;
}

/* Tenant name, 100/s with a burst of 100, in slot: the host's i-th. */
static const struct policy_tenant *put_tenant(size_t i, const char *name,
					      uint32_t slot)
{
	struct policy_tenant *p = &host.pol[i];

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "%s", name);
	p->rate.count = 100;
	p->rate.period_s = 1;
	p->burst = 100;
	p->fail = POLICY_FAIL_STATIC;
	host.slot[i] = slot;
	if (i >= host.n)
		host.n = i + 1;
	return p;
}

static void host_reset(void)
{
	memset(&host, 0, sizeof(host));
}

/* The change's syncs, each after the kernel spent what it held. */
static void syncs(struct broker *b, uint32_t slot, int n)
{
	for (int k = 0; k < n; k++) {
		host.tokens[slot] = 0;
		broker_tenants_changed(b);
	}
}

static void test_unnamed_slot_never_credited_again(void)
{
	struct broker *b;
	int err;

	host_reset();
	b = open_broker(&err);
	CHECK(b && !err, "open: %d", err);
	if (!b)
		return;
	/* The pool is empty: the first name needs it to grow. */
	malloc_fails = true;
	broker_slot_ready(b, 3, put_tenant(0, "alpha", 3));
	syncs(b, 3, 5);
	malloc_fails = false;
	CHECK(host.credits[3] <= 1, "a slot whose name could not be kept credited "
	      "%u times by 5 syncs", host.credits[3]);
	syncs(b, 3, 1);
	CHECK(strcmp(broker_slot_name(&b->slots[3]), "alpha") == 0,
	      "named once memory is back: '%s'", broker_slot_name(&b->slots[3]));
	CHECK(host.credits[3] == 1, "credited once in all: %u", host.credits[3]);
	syncs(b, 3, 3);
	CHECK(host.credits[3] == 1, "not again after: %u", host.credits[3]);
	broker_close(b);
}

static void test_reserved_room_names_without_allocating(void)
{
	const struct policy_tenant *p[3];
	char err[POLICY_ERR_MAX] = "";
	size_t need = 0;
	struct broker *b;
	int e;

	host_reset();
	b = open_broker(&e);
	CHECK(b && !e, "open: %d", e);
	if (!b)
		return;
	p[0] = put_tenant(0, "alpha", 0);
	p[1] = put_tenant(1, "beta", 5);
	p[2] = put_tenant(2, "gamma-delta", 9);
	for (int i = 0; i < 3; i++)
		need += broker_slot_name_need(b, host.slot[i], p[i]->name);
	CHECK(need == 6 + 5 + 12, "the three names need %zu bytes", need);
	malloc_fails = true;
	e = broker_names_reserve(b, need, 3, "alpha", err);
	malloc_fails = false;
	CHECK(e == -ENOMEM && strstr(err, "'alpha' and 2 more (23 bytes)"),
	      "no room: %d '%s'", e, err);
	CHECK(broker_names_reserve(b, need, 3, "alpha", err) == 0, "room: '%s'", err);
	malloc_fails = true;
	for (int i = 0; i < 3; i++)
		broker_slot_ready(b, host.slot[i], p[i]);
	syncs(b, 0, 3);
	malloc_fails = false;
	for (int i = 0; i < 3; i++) {
		const struct slot *s = &b->slots[host.slot[i]];

		CHECK(strcmp(broker_slot_name(s), p[i]->name) == 0 &&
		      host.credits[host.slot[i]] == 1,
		      "slot %u: '%s', credited %u times", host.slot[i],
		      broker_slot_name(s), host.credits[host.slot[i]]);
		CHECK(broker_slot_name_need(b, host.slot[i], p[i]->name) == 0,
		      "slot %u needs nothing more", host.slot[i]);
	}
	broker_close(b);
}

/* Tenants the broker cannot name when it starts: it does not. */
static void test_open_without_room_fails(void)
{
	struct broker *b;
	int err;

	host_reset();
	put_tenant(0, "alpha", 0);
	malloc_fails = true;
	b = open_broker(&err);
	malloc_fails = false;
	CHECK(!b && err == -ENOMEM, "opened: %p %d", (void *)b, err);
	CHECK(host.credits[0] == 0, "credited %u times", host.credits[0]);
	broker_close(b);
}

int main(void)
{
	int err = loop_new(64, &loop);

	if (err) {
		fprintf(stderr, "couldn't make a loop: %s\n", strerror(-err));
		return 1;
	}
	CHECK_RUN(test_unnamed_slot_never_credited_again);
	CHECK_RUN(test_reserved_room_names_without_allocating);
	CHECK_RUN(test_open_without_room_fails);
	loop_free(loop);
	return check_exit();
}
