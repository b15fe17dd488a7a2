/* test_agent_index: the agent's indexes of its tenant set (names,
 * (prefix, port) claims, slots; user/agent/agent_index.c, included here),
 * against the set itself after thousands of random additions, changes and
 * deletions made as the agent makes them (the last tenant moved into a
 * deleted one's place): every tenant found by name at its place, every
 * claim by its rule (a prefix with port rules said to have them), no
 * deleted name or claim left; conflicts named with both tenants; the caps
 * summed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../../user/agent/agent_index.c"
#include "check.h"

#define MAX	2048

static uint64_t rng = 0x2545f4914f6cdd1dULL;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

/* Tenant number k: one IPv4 /24 and one IPv6 /48 of its own; every third
 * names port 443 on the IPv4 one's rule too. */
static struct agent a;

static void tenant_of(uint32_t k, uint32_t slot, uint64_t cap,
		      struct agent_tenant *t)
{
	struct policy_prefix m[2] = { 0 };

	memset(t, 0, sizeof(*t));
	snprintf(t->pol.name, sizeof(t->pol.name), "t%u", k);
	m[0].family = AF_INET;
	m[0].addr[0] = 10;
	m[0].addr[1] = (uint8_t)(k >> 8);
	m[0].addr[2] = (uint8_t)k;
	m[0].len = 24;
	m[1].family = AF_INET6;
	m[1].addr[0] = 0x20;
	m[1].addr[1] = 0x01;
	m[1].addr[4] = (uint8_t)(k >> 8);
	m[1].addr[5] = (uint8_t)k;
	m[1].len = 48;
	/* in the set's store, as the agent keeps them */
	t->pol.match = m;
	t->pol.n_match = 2;
	if (pfx_store_put(&a.prefixes, &t->pol)) {
		printf("FAIL: out of memory\n");
		exit(1);
	}
	t->pol.n_ports = k % 3 == 0;
	t->pol.ports[0] = 443;
	t->pol.max_conns = cap;
	t->slot = slot;
}

static uint32_t number[MAX];	/* per position: the tenant's k */

/* Every tenant of the set found where it is: by name, by its slot, by its
 * any-port rules, and by a claim of its ports (a conflict). */
static int check_all(void)
{
	char err[POLICY_ERR_MAX];
	int bad = 0;

	for (size_t i = 0; i < a.n_tenants; i++) {
		const struct agent_tenant *t = &a.tenants[i];
		struct policy_tenant other = t->pol;

		if (agent_index_name(&a, t->pol.name) != t ||
		    !agent_index_slot_used(&a, t->slot))
			bad++;
		int64_t want = t->pol.n_ports ? RL_CLS_PORTED : (int64_t)t->slot;

		if (agent_index_rule(&a, AF_INET, t->pol.match[0].addr, 24) != want ||
		    agent_index_rule(&a, AF_INET6, t->pol.match[1].addr, 48) != want)
			bad++;
		snprintf(other.name, sizeof(other.name), "other");
		if (agent_index_conflict(&a, &other, err) != t)
			bad++;
	}
	return bad;
}

static void test_random_changes(void)
{
	bool live[4 * MAX] = { false };
	uint64_t caps = 0;
	char err[POLICY_ERR_MAX];
	int bad = 0;

	a.kern.max_tenants = MAX;
	a.tenants = calloc(MAX, sizeof(*a.tenants));
	a.cap_tenants = MAX;
	CHECK(agent_index_build(&a) == 0, "index of an empty set");
	for (int step = 0; step < 20000 && a.ix; step++) {
		uint32_t op = rnd() % 3;

		if (op < 2 && a.n_tenants < MAX) {
			/* a new tenant in the lowest free slot */
			uint32_t k = rnd() % (4 * MAX), slot = 0;
			struct agent_tenant t;
			uint64_t cap = rnd() % 4;

			if (live[k])
				continue;
			while (agent_index_slot_used(&a, slot))
				slot++;
			tenant_of(k, slot, cap, &t);
			CHECK(!agent_index_conflict(&a, &t.pol, err),
			      "new tenant t%u conflicts: %s", k, err);
			a.tenants[a.n_tenants] = t;
			number[a.n_tenants] = k;
			CHECK(agent_index_put(&a, a.n_tenants) == 0, "put");
			a.n_tenants++;
			live[k] = true;
			caps += cap;
		} else if (a.n_tenants) {
			/* a deletion: the last tenant takes its place */
			size_t i = rnd() % a.n_tenants, last = a.n_tenants - 1;

			caps -= a.tenants[i].pol.max_conns;
			live[number[i]] = false;
			agent_index_drop(&a, i);
			if (i != last) {
				a.tenants[i] = a.tenants[last];
				number[i] = number[last];
				agent_index_moved(&a, last, i);
			}
			a.n_tenants--;
		}
		if (step % 97 == 0)
			bad += check_all();
	}
	bad += check_all();
	CHECK(bad == 0, "%d lookups missed their tenant", bad);
	for (uint32_t k = 0; k < 4 * MAX; k++) {
		char name[16];

		snprintf(name, sizeof(name), "t%u", k);
		if (!live[k] && agent_index_name(&a, name))
			bad++;
	}
	CHECK(bad == 0, "%d deleted names still found", bad);
	CHECK(agent_index_caps(&a, NULL, NULL) == caps, "caps %llu, want %llu",
	      (unsigned long long)agent_index_caps(&a, NULL, NULL),
	      (unsigned long long)caps);
}

/* A tenant claiming another's rule is refused naming both; its own
 * claims, and a port rule beside an any-port one, are no conflict. */
static void test_conflicts(void)
{
	struct agent_tenant t;
	char err[POLICY_ERR_MAX] = "";
	const struct agent_tenant *o;
	size_t i;

	for (i = 0; i < a.n_tenants && a.tenants[i].pol.n_ports; i++)
		;
	if (i == a.n_tenants)
		return;
	t = a.tenants[i];
	CHECK(!agent_index_conflict(&a, &t.pol, err), "a tenant against "
	      "itself: %s", err);
	snprintf(t.pol.name, sizeof(t.pol.name), "intruder");
	o = agent_index_conflict(&a, &t.pol, err);
	CHECK(o == &a.tenants[i], "the intruder's conflict names no tenant");
	CHECK(strstr(err, "intruder") && strstr(err, a.tenants[i].pol.name) &&
	      strstr(err, "on any port"), "message: %s", err);
	/* the same prefixes on port 80 only meet the any-port rule: no
	 * conflict */
	t.pol.n_ports = 1;
	t.pol.ports[0] = 80;
	CHECK(!agent_index_conflict(&a, &t.pol, err), "port 80 beside any "
	      "port: %s", err);
	CHECK(agent_index_rule(&a, AF_INET, a.tenants[i].pol.match[0].addr, 24) ==
	      (int64_t)a.tenants[i].slot, "the any-port rule's slot");
	for (i = 0; i < a.n_tenants && !a.tenants[i].pol.n_ports; i++)
		;
	CHECK(i < a.n_tenants && agent_index_rule(&a, AF_INET,
	      a.tenants[i].pol.match[0].addr, 24) == RL_CLS_PORTED,
	      "a prefix with a port rule is not said to have one");
}

int main(void)
{
	CHECK_RUN(test_random_changes);
	CHECK_RUN(test_conflicts);
	agent_index_free(&a);
	free(a.tenants);
	pfx_store_free(&a.prefixes);
	return check_exit();
}
