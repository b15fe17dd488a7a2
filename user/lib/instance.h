/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The host-wide instance limit (see the `instance` map in rlgate.h): a cap
 * on connections in flight to the host over every tenant and every
 * unmatched SYN, and an optional rate.  Parsing, its JSON form (control
 * protocol and state file), and writing it into the kernel's slot.
 */
#ifndef RL_INSTANCE_H
#define RL_INSTANCE_H
#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>
#include "policy.h"
#include "rlgate.h"

struct rl_instance_limit {
	uint64_t max_conns;		/* 0: no cap */
	struct policy_rate rate;	/* count 0: no rate */
	uint64_t burst;			/* with a rate: >= 1 */
};

/* --rate R[,BURST] (the burst defaults to policy_default_burst()).  0, or
 * -EINVAL with a message naming the value in err (POLICY_ERR_MAX). */
int instance_parse_rate(const char *s, struct rl_instance_limit *il, char *err);

/* A cap or a rate (or both), within what the kernel can hold. */
int instance_validate(const struct rl_instance_limit *il, char *err);

/* {"max_conns": N, "rate": "R/s", "burst": B}: no "rate" nor "burst"
 * without a rate, "max_conns" 0 without a cap. */
json_t *instance_to_json(const struct rl_instance_limit *il);
/* The inverse, validated.  0 or -EINVAL with err. */
int instance_from_json(const json_t *j, struct rl_instance_limit *il,
		       char *err);

/* Writes il into the kernel's slot (mmap'ed) while CPUs spend from it: a
 * cap turned on starts a new epoch with nothing in flight; a cap that only
 * changes its number keeps what is in flight; a new rate starts full. */
void instance_configure(struct rl_tenant *in, const struct rl_instance_limit *il);
/* Turns the instance limit off; its connections give nothing back. */
void instance_clear(struct rl_tenant *in);

#endif /* RL_INSTANCE_H */
