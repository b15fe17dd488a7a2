/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The policy's parsers as option-table parsers (OPT_CUSTOM rows of
 * opts.h), so that a command line and a policy file accept the same values
 * with the same messages.  Each returns 0, or -EINVAL with the message in
 * err (errlen at least POLICY_ERR_MAX).
 */
#ifndef RL_POLICY_OPTS_H
#define RL_POLICY_OPTS_H

#include "opts.h"
#include "policy.h"

/* dest: char[POLICY_NAME_MAX + 1] */
int policy_opt_name(const char *s, void *dest, char *err, size_t errlen);
/* dest: struct policy_rate */
int policy_opt_rate(const char *s, void *dest, char *err, size_t errlen);
/* dest: struct policy_tenant, whose prefixes or ports s replaces */
int policy_opt_prefixes(const char *s, void *dest, char *err, size_t errlen);
int policy_opt_ports(const char *s, void *dest, char *err, size_t errlen);

/* The values of an OPT_ENUM row for enum policy_action, policy_fail,
 * policy_direction and policy_verify. */
extern const struct opt_value policy_action_values[];
extern const struct opt_value policy_fail_values[];
extern const struct opt_value policy_direction_values[];
extern const struct opt_value policy_verify_values[];

#endif /* RL_POLICY_OPTS_H */
