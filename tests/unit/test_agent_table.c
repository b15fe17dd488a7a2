/* test_agent_table: the tenant set's changes of one tenant on the tables
 * (agent_table_put(), user/agent/agent.c, linked in), with malloc failing
 * on demand (the link wraps it): a change whose indexes cannot grow leaves
 * the tenant as it was, found by name and by its claims, and says so.
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

int main(void)
{
	CHECK_RUN(test_put_without_memory_keeps_the_tenant);
	return check_exit();
}
