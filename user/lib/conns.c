// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Connection caps from user space: the sweep's decision on an entry, and
 * giving back a connection the agent saw end (see conns.h).
 */
#include <errno.h>
#include <bpf/bpf.h>

#include "conns.h"
#include "policy.h"

_Static_assert(POLICY_CONNS_MAX == RL_CONNS_MAX,
	       "the caps rlctl accepts fit the kernel's table");

/* Whether t (a tenant's slot or the instance) still counts connections of
 * epoch. */
static bool rl_conn_counted(const struct rl_tenant *t, uint32_t epoch)
{
	return t && t->mode != RL_MODE_NONE && (t->flags & RL_F_CONNCAP) &&
	       __atomic_load_n(&t->conn_epoch, __ATOMIC_RELAXED) == epoch;
}

/* Gives one connection back to t of epoch, never below zero. */
static void rl_conn_give(struct rl_tenant *t, uint32_t epoch)
{
	if (__atomic_load_n(&t->conn_epoch, __ATOMIC_RELAXED) != epoch)
		return;
	if (__atomic_fetch_sub(&t->conns, 1, __ATOMIC_RELAXED) <= 0)
		__atomic_fetch_add(&t->conns, 1, __ATOMIC_RELAXED);
}

enum rl_conn_fate rl_conn_judge(const struct rl_conn *c,
				const struct rl_conn_view *v)
{
	uint64_t seen = c->seen_ns > c->opened_ns ? c->seen_ns : c->opened_ns;

	if (!rl_conn_counted(v->t, c->epoch) &&
	    !((c->flags & RL_CONN_F_INSTANCE) &&
	      rl_conn_counted(v->inst, c->inst_epoch)))
		return RL_CONN_STALE;
	if (v->local) {
		if (v->has_socket)
			return RL_CONN_KEEP;
		/* a clock behind the entry: too young to judge */
		if (v->now_ns > c->opened_ns &&
		    v->now_ns - c->opened_ns >= v->grace_ns)
			return RL_CONN_GONE;
		return RL_CONN_KEEP;
	}
	if (v->now_ns > seen && v->now_ns - seen >= v->ttl_ns)
		return RL_CONN_IDLE;
	return RL_CONN_KEEP;
}

void rl_conn_release(struct rl_tenant *tenants, uint32_t n_tenants, uint32_t id,
		     uint32_t epoch)
{
	if (id >= n_tenants)
		return;
	rl_conn_give(&tenants[id], epoch);
}

int rl_conn_forget(int conns_fd, struct rl_tenant *tenants, uint32_t n_tenants,
		   struct rl_tenant *inst, const struct rl_flow *k,
		   struct rl_conn *c)
{
	/* the value and the delete in one call, under the bucket's lock: what
	 * was read before may have gained the instance's place since */
	if (bpf_map_lookup_and_delete_elem(conns_fd, k, c) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (inst && (c->flags & RL_CONN_F_INSTANCE))
		rl_conn_give(inst, c->inst_epoch);
	rl_conn_release(tenants, n_tenants, c->tenant, c->epoch);
	return 1;
}
