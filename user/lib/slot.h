/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A tenant slot (struct rl_tenant) written from a policy, and read back:
 * the same for the kernel's `tenants` map and the preload pool, which hold
 * slots of one layout and spend from them the same way.
 */
#ifndef RL_SLOT_H
#define RL_SLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "policy.h"
#include "rlgate.h"

/*
 * Writes the configuration of tenant t into rt at monotonic time now_ns.
 * fresh: the slot is new to this tenant, so its bucket starts full;
 * otherwise the bucket state is kept (changing a limit never refills or
 * empties a bucket).  leased: fleet mode, where only leased tokens are
 * spent; fail_agents divides the static fail share.  The mode is written
 * last, so a reader never sees a half-configured tenant go live.  Safe
 * while readers spend from rt.
 */
void rl_slot_configure(struct rl_tenant *rt, const struct policy_tenant *t,
		       bool fresh, bool leased, uint64_t fail_agents,
		       uint64_t now_ns);

/* Writes t's fail policy and its static share among fail_agents. */
void rl_slot_fail(struct rl_tenant *rt, const struct policy_tenant *t,
		  uint64_t fail_agents);

/* Whole tokens the slot holds at now_ns: leased ones, or what the
 * standalone bucket has refilled to. */
uint64_t rl_slot_tokens(const struct rl_tenant *rt, uint64_t now_ns);

#endif /* RL_SLOT_H */
