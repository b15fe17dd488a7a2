// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* rlctl instance set|get|del: the host-wide instance limit. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "instance.h"
#include "rlctl.h"

#define SET(f)	OPT_AT(struct rl_instance_limit, f)

static int opt_rate(const char *arg, void *dest, char *err, size_t errlen)
{
	char msg[POLICY_ERR_MAX];
	/* dest is the rate field: the limit starts there */
	struct rl_instance_limit *il = (struct rl_instance_limit *)
		((char *)dest - offsetof(struct rl_instance_limit, rate));

	if (instance_parse_rate(arg, il, msg)) {
		snprintf(err, errlen, "%s", msg);
		return -EINVAL;
	}
	return 0;
}

static const struct opts_spec set_spec = {
	RLCTL_CMD("instance set"),
	.doc =
"Set the host-wide instance limit: a cap on TCP connections in flight to\n"
"this host, over every tenant and every connection no tenant matches, and\n"
"optionally a rate of new connections.  The kernel enforces it on its own:\n"
"it holds while Redis is unreachable.  A SYN over it is dropped.  Replaces\n"
"the limit in force (a cap that only changes its number keeps what is in\n"
"flight).\n",
	.epilog =
"Example:\n"
"  rlctl instance set --max-conns 10000 --rate 2000/s,4000\n",
	.opts = (const struct opt[]){
		{ "max-conns", 0, OPT_U64, SET(max_conns), .arg = "N", .min = 0,
		  .max = POLICY_CONNS_MAX,
		  .help = "connections to this host open at once, at most; 0 for "
			  "no cap (then --rate is required)" },
		{ "rate", 'r', OPT_CUSTOM, SET(rate), .arg = "RATE[,BURST]",
		  .parse = opt_rate,
		  .help = "new connections to this host: N/s, N/m or N/h, and the "
			  "bucket size (default one second of the rate)" },
		{ .kind = OPT_END },
	},
};

static const struct opts_spec get_spec = {
	RLCTL_CMD("instance get"),
	.doc = "Show the instance limit, its connections in flight and its "
	       "refusals.\n",
};

static const struct opts_spec del_spec = {
	RLCTL_CMD("instance del"),
	.doc = "Remove the instance limit.\n",
};

static long long int_field(const json_t *j, const char *key)
{
	return (long long)json_integer_value(json_object_get(j, key));
}

void rlctl_print_instance(const json_t *in)
{
	const char *rate = json_string_value(json_object_get(in, "rate"));

	if (!json_is_object(in)) {
		printf("instance: no limit\n");
		return;
	}
	if (int_field(in, "max_conns") > 0)
		printf("instance: max-conns %lld, %lld in flight", int_field(in,
		       "max_conns"), int_field(in, "conns"));
	else
		printf("instance: no cap");
	if (rate)
		printf(", rate %s burst %lld", rate, int_field(in, "burst"));
	printf("; denied %lld at the cap, %lld by the rate\n",
	       int_field(in, "denied_cap"), int_field(in, "denied_rate"));
	if (json_is_false(json_object_get(in, "enforced")))
		printf("  not enforced: %s\n",
		       json_string_value(json_object_get(in, "not_enforced")) ?
		       json_string_value(json_object_get(in, "not_enforced")) : "?");
}

static int instance_set(int argc, char **argv)
{
	struct rl_instance_limit il = { 0 };
	char err[POLICY_ERR_MAX];
	struct opts_result res;
	json_t *reply, *in;
	int ret;

	ret = rlctl_parse(&set_spec, argc, argv, &il, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	if (instance_validate(&il, err))
		return rlctl_usage_error("instance set", "%s", err);
	ret = rlctl_call_get(json_pack("{s:s,s:o}", "cmd", "instance.set",
				       "instance", instance_to_json(&il)),
			     "instance", false, &reply, &in);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	if (rlctl.json)
		rlctl_print_json(json_incref(in));
	else
		rlctl_print_instance(in);
	json_decref(reply);
	return RLCTL_EXIT_OK;
}

static int instance_get(int argc, char **argv)
{
	struct opts_result res;
	json_t *reply;
	int ret;

	ret = rlctl_parse(&get_spec, argc, argv, NULL, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	ret = rlctl_call(json_pack("{s:s}", "cmd", "instance.get"), &reply);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	if (rlctl.json && !json_is_object(json_object_get(reply, "instance")))
		printf("null\n");	/* none: jansson encodes no bare null */
	else if (rlctl.json)
		rlctl_print_json(json_incref(json_object_get(reply, "instance")));
	else
		rlctl_print_instance(json_object_get(reply, "instance"));
	json_decref(reply);
	return RLCTL_EXIT_OK;
}

static int instance_del(int argc, char **argv)
{
	struct opts_result res;
	int ret;

	ret = rlctl_parse(&del_spec, argc, argv, NULL, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	ret = rlctl_call(json_pack("{s:s}", "cmd", "instance.del"), NULL);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	if (rlctl.json)
		rlctl_print_json(json_pack("{s:b}", "deleted", 1));
	else
		printf("instance limit deleted\n");
	return RLCTL_EXIT_OK;
}

const struct opts_command rlctl_instance_cmds[] = {
	{ "set", "--max-conns N [--rate RATE[,BURST]]",
	  "set the host-wide limit", instance_set, NULL },
	{ "get", NULL, "show the host-wide limit", instance_get, NULL },
	{ "del", NULL, "remove the host-wide limit", instance_del, NULL },
	{ "delete", NULL, NULL, instance_del, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};
