// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The policy's parsers for option tables (see policy_opts.h). */
#include "policy_opts.h"

_Static_assert(OPTS_ERR_MAX >= POLICY_ERR_MAX, "room for a policy message");

/* Each policy parser has the same shape: only err's length differs, and
 * it is known to be enough. */
#define POLICY_OPT(name, parser, type)					\
int policy_opt_##name(const char *s, void *dest, char *err, size_t errlen) \
{									\
	(void)errlen;							\
	return parser(s, (type *)dest, err);				\
}

POLICY_OPT(name, policy_parse_name, char)
POLICY_OPT(rate, policy_parse_rate, struct policy_rate)
POLICY_OPT(prefixes, policy_parse_prefixes, struct policy_tenant)
POLICY_OPT(ports, policy_parse_ports, struct policy_tenant)

const struct opt_value policy_action_values[] = {
	{ "drop", POLICY_ACT_DROP }, { "rst", POLICY_ACT_RST }, { NULL, 0 },
};

const struct opt_value policy_fail_values[] = {
	{ "static", POLICY_FAIL_STATIC }, { "allow", POLICY_FAIL_ALLOW },
	{ "deny", POLICY_FAIL_DENY }, { NULL, 0 },
};

const struct opt_value policy_direction_values[] = {
	{ "in", POLICY_DIR_IN }, { "out", POLICY_DIR_OUT }, { NULL, 0 },
};

const struct opt_value policy_verify_values[] = {
	{ "none", POLICY_VERIFY_NONE }, { "syncookie", POLICY_VERIFY_SYNCOOKIE },
	{ "syncookie-answer", POLICY_VERIFY_ANSWER },
	{ NULL, 0 },
};
