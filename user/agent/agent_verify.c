// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Verification follows net.ipv4.tcp_syncookies: a verifying tenant is
 * verified while it is 2 and charged at its SYNs otherwise (see
 * kern_tenant_configure), and a change of the sysctl is seen within a tick,
 * not only at the next change of the policy.
 */
#include "agent_int.h"
#include "log.h"

/* How many tenants verify. */
static uint32_t verifying(const struct agent *a)
{
	uint32_t n = 0;

	for (size_t i = 0; i < a->n_tenants; i++)
		n += a->tenants[i].pol.verify != POLICY_VERIFY_NONE;
	return n;
}

json_t *agent_verify_json(const struct agent *a)
{
	uint32_t n = verifying(a);
	int mode;

	if (!n)
		return NULL;
	mode = kern_syncookies_mode();
	return json_pack("{s:I,s:I,s:b}", "tenants", (json_int_t)n,
			 "tcp_syncookies", (json_int_t)mode, "verified", mode == 2);
}

/*
 * Reads the sysctl while some tenant verifies; when it differs from what
 * the tenants were configured under, configures every verifying tenant
 * again (which logs once for them all why their SYNs are charged).  Called
 * every second.
 */
void agent_verify_watch(struct agent *a)
{
	int mode, was = a->kern.syncookies;

	if (!verifying(a))
		return;
	mode = kern_syncookies_mode();
	if (mode == was)
		return;
	if (mode == 2 && was != KERN_SYNCOOKIES_UNREAD)
		log_info("net.ipv4.tcp_syncookies is 2 (was %d): tenants with "
			 "verify syncookie are verified again", was);
	/* configured under this read, not one kern_tenant_configure kept */
	a->kern.syncookies = mode;
	a->kern.syncookies_ns = loop_now_ns();
	for (size_t i = 0; i < a->n_tenants; i++)
		if (a->tenants[i].pol.verify != POLICY_VERIFY_NONE)
			kern_tenant_configure(&a->kern, a->tenants[i].slot,
					      &a->tenants[i].pol, false);
}
