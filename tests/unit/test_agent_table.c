/* test_agent_table: the tenant set's changes of one tenant on the tables
 * (agent_table_put(), user/agent/agent.c, linked in), with malloc failing
 * on demand (the link wraps it): a change whose indexes cannot grow leaves
 * the tenant as it was, found by name and by its claims, and says so.  The
 * tombstones (agent_tombs.c) through deletions and re-creations are those
 * of a walk over a plain list, found by their hash; the fleet's versions
 * are found in its batch.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../user/agent/agent_int.h"
#include "check.h"
#include "malloc_fail.h"

/* Tenant name in slot 0: prefixes 10.k.0.0/16 for k < n_match, on ports
 * 1 .. n_ports (none: any port). */
static void tenant_of(const char *name, unsigned int n_match,
		      unsigned int n_ports, struct policy_prefix *m,
		      struct agent_tenant *t)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->pol.name, sizeof(t->pol.name), "%s", name);
	t->pol.rate.count = 100;
	t->pol.rate.period_s = 1;
	t->pol.burst = 100;
	for (unsigned int k = 0; k < n_match; k++) {
		memset(&m[k], 0, sizeof(m[k]));
		m[k].family = AF_INET;
		m[k].addr[0] = 10;
		m[k].addr[1] = (uint8_t)k;
		m[k].len = 16;
	}
	t->pol.match = m;
	t->pol.n_match = n_match;
	for (unsigned int p = 0; p < n_ports; p++)
		t->pol.ports[p] = (uint16_t)(p + 1);
	t->pol.n_ports = n_ports;
}

static void test_put_without_memory_keeps_the_tenant(void)
{
	struct policy_prefix m1[1], m2[POLICY_MAX_PREFIXES], mo[1];
	struct agent_tenant one, big, other;
	char err[POLICY_ERR_MAX] = "";
	struct agent a;
	struct agent_tenant *t;
	int e;

	memset(&a, 0, sizeof(a));
	a.kern.max_tenants = 16;
	CHECK(agent_index_build(&a) == 0, "index");
	tenant_of("alpha", 1, 0, m1, &one);
	CHECK(agent_table_put(&a, &one, err) == 0, "put: '%s'", err);
	/* its prefixes' room taken before, so that only the index grows */
	CHECK(pfx_store_reserve(&a.prefixes, POLICY_MAX_PREFIXES) == 0, "room");
	tenant_of("alpha", POLICY_MAX_PREFIXES, POLICY_MAX_PORTS, m2, &big);
	malloc_fails = true;
	e = agent_table_put(&a, &big, err);
	malloc_fails = false;
	CHECK(e == -ENOMEM && strcmp(err, "out of memory") == 0,
	      "a change the index has no room for: %d '%s'", e, err);
	t = agent_find(&a, "alpha");
	CHECK(t && t->pol.n_match == 1 && t->pol.n_ports == 0 && a.n_tenants == 1,
	      "alpha as it was: %s, %u prefixes, %u ports", t ? "found" : "not found",
	      t ? t->pol.n_match : 0, t ? t->pol.n_ports : 0);
	/* its claim still known: another tenant on its prefix conflicts */
	tenant_of("beta", 1, 0, mo, &other);
	other.slot = 1;
	CHECK(agent_table_put(&a, &other, err) == -EEXIST && strstr(err, "alpha"),
	      "beta on alpha's prefix: '%s'", err);
	CHECK(agent_table_put(&a, &big, err) == 0, "with memory: '%s'", err);
	t = agent_find(&a, "alpha");
	CHECK(t && t->pol.n_match == POLICY_MAX_PREFIXES, "alpha changed");
	agent_index_free(&a);
	pfx_store_free(&a.prefixes);
	free(a.tenants);
}

/* The tombstones as a walk would have them: oldest first, a name once. */
struct ref_tombs {
	struct agent_tomb t[AGENT_MAX_TOMBS + 1];
	size_t n;
};

static size_t ref_find(const struct ref_tombs *r, const char *name)
{
	for (size_t i = 0; i < r->n; i++)
		if (strcmp(r->t[i].name, name) == 0)
			return i;
	return SIZE_MAX;
}

static void ref_forget(struct ref_tombs *r, const char *name)
{
	size_t i = ref_find(r, name);

	if (i == SIZE_MAX)
		return;
	memmove(&r->t[i], &r->t[i + 1], (r->n - i - 1) * sizeof(r->t[0]));
	r->n--;
}

static void ref_add(struct ref_tombs *r, const char *name, uint64_t version)
{
	ref_forget(r, name);
	if (r->n >= AGENT_MAX_TOMBS) {
		memmove(&r->t[0], &r->t[1], (r->n - 1) * sizeof(r->t[0]));
		r->n--;
	}
	snprintf(r->t[r->n].name, sizeof(r->t[0].name), "%s", name);
	r->t[r->n++].version = version;
}

/* Deletions and re-creations of 6,000 names (more than AGENT_MAX_TOMBS:
 * the oldest go), the list replaced now and then as a change of the whole
 * set does: the tombstones are those of the walk above, in its order, and
 * each name is found (by its hash) where the walk finds it. */
static void test_tombs_follow_their_changes(void)
{
	static struct ref_tombs ref;
	struct agent a;
	unsigned int seed = 5;
	bool ok = true;

	memset(&a, 0, sizeof(a));
	ref.n = 0;
	agent_tombs_take(&a, NULL, 0);
	for (int round = 0; ok && round < 30000; round++) {
		char name[32];
		const struct agent_tomb *t;
		size_t i;

		snprintf(name, sizeof(name), "d%d", rand_r(&seed) % 6000);
		if (rand_r(&seed) % 4) {
			ok = agent_tomb_add(&a, name, (uint64_t)round + 1) == 0;
			ref_add(&ref, name, (uint64_t)round + 1);
		} else {
			agent_tomb_forget(&a, name);
			ref_forget(&ref, name);
		}
		if (round % 5000 == 4999) {
			struct agent_tomb *copy = malloc((a.n_tombs + 1) * sizeof(*copy));

			ok = ok && copy;
			if (copy) {
				memcpy(copy, a.tombs, a.n_tombs * sizeof(*copy));
				agent_tombs_take(&a, copy, a.n_tombs);
			}
		}
		snprintf(name, sizeof(name), "d%d", rand_r(&seed) % 6100);
		t = agent_find_tomb(&a, name);
		i = ref_find(&ref, name);
		ok = ok && a.n_tombs == ref.n && a.tomb_names.cap &&
		     (t ? (size_t)(t - a.tombs) : SIZE_MAX) == i &&
		     (!t || t->version == ref.t[i].version);
		for (size_t j = 0; ok && j < ref.n; j += round % 1000 ? ref.n : 1)
			ok = strcmp(a.tombs[j].name, ref.t[j].name) == 0 &&
			     a.tombs[j].version == ref.t[j].version &&
			     agent_find_tomb(&a, ref.t[j].name) == &a.tombs[j];
		if (!ok)
			diag("round %d: %zu tombstones, %zu by the walk", round,
			     a.n_tombs, ref.n);
	}
	CHECK(ok, "the tombstones of the walk, each found where it is");
	CHECK(ref.n == AGENT_MAX_TOMBS, "the walk filled the list (%zu)", ref.n);
	free(a.tombs);
	name_hash_free(&a.tomb_names);
}

/* The fleet's version of a name in the batch being applied, and none
 * before or after it. */
static void test_fleet_version(void)
{
	static struct agent_fleet_update u[2000];
	struct agent a;
	bool ok = true;

	memset(&a, 0, sizeof(a));
	for (size_t i = 0; i < 2000; i++) {
		snprintf(u[i].name, sizeof(u[i].name), "f%zu", i);
		u[i].version = 1000 + i;
	}
	CHECK(agent_fleet_version(&a, "f7") == 0, "no batch: 0");
	agent_fleet_begin(&a, u, 2000);
	CHECK(a.fleet_update && a.fleet_names.cap, "applying, indexed");
	for (size_t i = 0; i < 2000; i++) {
		char name[32];

		ok = ok && agent_fleet_version(&a, u[i].name) == 1000 + i;
		snprintf(name, sizeof(name), "g%zu", i);
		ok = ok && agent_fleet_version(&a, name) == 0;
	}
	CHECK(ok, "each name's version; 0 for names not in it");
	agent_fleet_end(&a);
	CHECK(!a.fleet_update && agent_fleet_version(&a, "f7") == 0 &&
	      !a.fleet_names.cap, "after it: 0, no index");
}

int main(void)
{
	CHECK_RUN(test_put_without_memory_keeps_the_tenant);
	CHECK_RUN(test_tombs_follow_their_changes);
	CHECK_RUN(test_fleet_version);
	return check_exit();
}
