/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl tenant set|get|list|del: one tenant at a time.  Every argument is
 * checked here first, so bad input never reaches the agent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_opts.h"
#include "rlctl.h"

static int opt_overshoot(const char *s, void *dest, char *err, size_t len)
{
	if (!strcmp(s, "auto")) {
		*(uint64_t *)dest = 0;
		return 0;
	}
	if (policy_parse_burst(s, dest, err) < 0) {
		snprintf(err, len, "invalid --overshoot '%.32s': expected 'auto' "
			 "or a whole number of connections from 1 to %llu", s,
			 (unsigned long long)POLICY_BURST_MAX);
		return -EINVAL;
	}
	return 0;
}

/* --per-source RATE[,BURST] or off; the mask follows in finish_set(). */
static int opt_per_source(const char *s, void *dest, char *err, size_t len)
{
	struct policy_tenant *t = dest;

	(void)len;
	if (!strcmp(s, "off")) {
		t->src_rate = (struct policy_rate){ 0, 0 };
		t->src_burst = 0;
		return 0;
	}
	return policy_parse_rate_burst(s, &t->src_rate, &t->src_burst, err);
}

static int opt_source_mask(const char *s, void *dest, char *err, size_t len)
{
	struct policy_tenant *t = dest;

	(void)len;
	return policy_parse_source_mask(s, &t->src_len4, &t->src_len6, err);
}

/* The options land on the tenant they change: on a blank one to check them,
 * then on the agent's copy (or a new one), where only those given change
 * it.  A new option of the tenant is one row. */
struct set_args {
	struct policy_tenant t;
	char *match, *ports;	/* every --match, --port: replace the lists */
	bool shadow, enforce;
};

#define SET(field)	OPT_AT(struct set_args, field)

static const struct opts_spec set_spec = {
	RLCTL_CMD("tenant set"),
	.doc =
"Create tenant NAME, or update it.  On update, options not given keep their\n"
"current values (except --burst, which follows a new --rate unless given).\n"
"Takes effect within one second.\n",
	.epilog =
"Example:\n"
"  rlctl tenant set web --rate 100/s --burst 200 \\\n"
"        --match 192.0.2.0/24,2001:db8::/32 --port 80,443 --action rst\n",
	.opts = (const struct opt[]){
		{ "NAME", 0, OPT_CUSTOM, OPT_POS, SET(t.name),
		  .parse = policy_opt_name, .expect = "a tenant NAME",
		  .help = "1-63 of A-Z a-z 0-9 _ . -, from a letter or digit" },
		{ "rate", 'r', OPT_CUSTOM, SET(t.rate), .arg = "RATE",
		  .parse = policy_opt_rate,
		  .help = "N/s, N/m or N/h, N from 1, at most 1e9/s "
			  "(required to create, unless --max-conns is given)" },
		{ "burst", 'b', OPT_U64, SET(t.burst), .arg = "N", .min = 1,
		  .max = POLICY_BURST_MAX,
		  .def_doc = "one second of the rate, at least 1",
		  .help = "bucket size" },
		{ "match", 'm', OPT_LIST, SET(match), .arg = "PREFIX[,...]",
		  .help = "source prefixes, comma-separated IPv4/IPv6 addresses or "
			  "CIDRs, at most 64 (required to create; may repeat)" },
		{ "port", 'p', OPT_LIST, SET(ports), .arg = "PORT[,...]",
		  .help = "destination ports 1-65535, at most 16 (may repeat); 'any' "
			  "(the default on create) for every port" },
		{ "ports", 0, OPT_LIST, OPT_HIDDEN, SET(ports), .arg = "PORT[,...]" },
		{ "action", 'a', OPT_ENUM, SET(t.action), .arg = "ACTION",
		  .values = policy_action_values,
		  .help = "over the limit: drop refuses silently (the default on "
			  "create), rst makes the client fail at once" },
		{ "shadow", 0, OPT_FLAG, SET(shadow),
		  .help = "count would-deny but admit everything" },
		{ "enforce", 0, OPT_FLAG, SET(enforce),
		  .help = "refuse over the limit (the default on create)" },
		{ "overshoot", 0, OPT_CUSTOM, SET(t.overshoot), .arg = "N|auto",
		  .parse = opt_overshoot,
		  .help = "fleet mode: tokens the hosts may hold between them, leased "
			  "and not yet spent (the overshoot bound adds what static fail "
			  "shares may owe); 'auto' (the default): the larger of the "
			  "burst and half a second of the rate" },
		{ "fail", 0, OPT_ENUM, SET(t.fail), .arg = "POLICY",
		  .values = policy_fail_values,
		  .help = "fleet mode, when Redis or the agent fails and the leased "
			  "tokens are spent: static is a local share, rate / live "
			  "agents (the default on create); allow or deny admit or "
			  "refuse everything" },
		{ "direction", 0, OPT_ENUM, SET(t.direction), .arg = "DIR",
		  .values = policy_direction_values,
		  .help = "in (the default on create): connections to this host, "
			  "--match and --port name their sources and local ports; "
			  "out: connections preloaded programs (librlpreload.so) "
			  "open, --match and --port name their destinations" },
		{ "max-conns", 0, OPT_U64, SET(t.max_conns), .arg = "N", .min = 0,
		  .max = POLICY_CONNS_MAX,
		  .help = "connections of the tenant open at once, at most: a SYN "
			  "past it gets the action; 0 (the default on create) for no "
			  "cap.  The caps of all tenants add up to at most 131072" },
		{ "verify", 0, OPT_ENUM, SET(t.verify), .arg = "HOW",
		  .values = policy_verify_values,
		  .help = "which SYNs spend tokens: none (the default on create) "
			  "charges every SYN; syncookie charges only a handshake "
			  "its client completed with a valid SYN cookie, so SYNs "
			  "from forged sources cost nothing (needs "
			  "net.ipv4.tcp_syncookies=2 on the server); "
			  "syncookie-answer does the same and sends the cookie "
			  "SYN-ACK itself, so that forged SYNs cost the server "
			  "nothing either" },
		{ "shards", 0, OPT_U64, SET(t.shards), .arg = "K", .min = 1,
		  .max = POLICY_SHARDS_MAX,
		  .help = "fleet mode: split the tenant's bucket in Redis into K "
			  "sub-buckets on different slots, each with rate/K and "
			  "burst/K, for a tenant too hot for one Redis node; 1 (the "
			  "default on create) is one bucket, at most 16, and at most "
			  "the rate count and the burst" },
		{ "weight", 0, OPT_U64, SET(t.weight), .arg = "W", .min = 1,
		  .max = POLICY_WEIGHT_MAX,
		  .help = "overload shedding (when the agent sheds): the tenant's "
			  "part of what a listener over its mark still admits, "
			  "against the other tenants' weights; 1 (the default on "
			  "create) to 1000" },
		{ "per-source", 0, OPT_CUSTOM, SET(t), .arg = "RATE[,BURST]|off",
		  .parse = opt_per_source,
		  .help = "each source of the tenant (an address, or a prefix: "
			  "--source-mask) gets a bucket of its own, which its "
			  "SYNs must pass besides the tenant's; BURST defaults to "
			  "one second of RATE; off removes it" },
		{ "source-mask", 0, OPT_CUSTOM, SET(t), .arg = "/N4,/N6",
		  .parse = opt_source_mask, .def_doc = "/32,/64",
		  .help = "what one source is for --per-source: the IPv4 and "
			  "IPv6 prefix lengths (an IPv6 client normally owns a "
			  "whole /64)" },
		{ .kind = OPT_END },
	},
};

struct name_args {
	char name[POLICY_NAME_MAX + 1];
};

static const struct opt name_opts[] = {
	{ "NAME", 0, OPT_CUSTOM, OPT_POS, OPT_AT(struct name_args, name),
	  .parse = policy_opt_name, .expect = "a tenant NAME" },
	{ .kind = OPT_END },
};

static const struct opts_spec get_spec = {
	RLCTL_CMD("tenant get"),
	.doc = "Show tenant NAME as the agent holds it.\n",
	.opts = name_opts,
};

struct list_args {
	char *name;
	char after[POLICY_NAME_MAX + 1];
	uint64_t limit;
};

static const struct opts_spec list_spec = {
	RLCTL_CMD("tenant list"),
	.doc =
"Show every tenant, or those whose name matches --name, by name (byte\n"
"order).  --after and --limit page through them: --after the last name\n"
"of one page gives the next.  With --json, an array of tenant objects\n"
"(name, rate, burst, match, ports, action, shadow, id), in the same order.\n",
	.opts = (const struct opt[]){
		{ "name", 0, OPT_STRING, OPT_AT(struct list_args, name),
		  .arg = "GLOB", .min = 1, .max = 256,
		  .help = "only tenants whose name matches the shell pattern GLOB" },
		{ "after", 0, OPT_CUSTOM, OPT_AT(struct list_args, after),
		  .arg = "NAME", .parse = policy_opt_name,
		  .help = "only tenants whose name sorts after NAME (byte order)" },
		{ "limit", 0, OPT_U64, OPT_AT(struct list_args, limit),
		  .arg = "N", .min = 1, .max = 1048576, .def_doc = "all",
		  .help = "at most the first N of them by name" },
		{ .kind = OPT_END },
	},
};

static const struct opts_spec del_spec = {
	RLCTL_CMD("tenant del"),
	.doc = "Delete tenant NAME; its connections are no longer limited.\n",
	.opts = name_opts,
};

static void join_strings(json_t *arr, char *buf, size_t len, const char *none)
{
	size_t i, off = 0;
	json_t *v;

	buf[0] = '\0';
	if (!json_is_array(arr) || json_array_size(arr) == 0) {
		snprintf(buf, len, "%s", none);
		return;
	}
	json_array_foreach(arr, i, v) {
		int n;

		if (json_is_string(v))
			n = snprintf(buf + off, len - off, "%s%s", i ? "," : "",
				     json_string_value(v));
		else
			n = snprintf(buf + off, len - off, "%s%" JSON_INTEGER_FORMAT,
				     i ? "," : "", json_integer_value(v));
		if (n < 0 || (size_t)n >= len - off)
			break;
		off += (size_t)n;
	}
}

static const char *str_field(json_t *t, const char *key)
{
	const char *s = json_string_value(json_object_get(t, key));

	return s ? s : "?";
}

static void print_tenant(json_t *t)
{
	char buf[4096];
	json_t *id = json_object_get(t, "id");

	printf("name:    %s\n", str_field(t, "name"));
	printf("rate:    %s\n", str_field(t, "rate"));
	printf("burst:   %" JSON_INTEGER_FORMAT "\n",
	       json_integer_value(json_object_get(t, "burst")));
	join_strings(json_object_get(t, "match"), buf, sizeof(buf), "-");
	printf("match:   %s\n", buf);
	join_strings(json_object_get(t, "ports"), buf, sizeof(buf), "any");
	printf("ports:   %s\n", buf);
	printf("action:  %s\n", str_field(t, "action"));
	printf("mode:    %s\n", json_is_true(json_object_get(t, "shadow")) ?
	       "shadow (would-deny is counted, every connection admitted)" :
	       "enforce");
	if (json_is_string(json_object_get(t, "fail")))
		printf("fail:    %s\n", str_field(t, "fail"));
	if (json_is_string(json_object_get(t, "direction")))
		printf("direction: %s\n", str_field(t, "direction"));
	if (json_is_string(json_object_get(t, "verify")))
		printf("verify:  %s\n", str_field(t, "verify"));
	if (json_integer_value(json_object_get(t, "overshoot")) > 0)
		printf("overshoot: %" JSON_INTEGER_FORMAT "\n",
		       json_integer_value(json_object_get(t, "overshoot")));
	if (json_integer_value(json_object_get(t, "max_conns")) > 0) {
		printf("max-conns: %" JSON_INTEGER_FORMAT "\n",
		       json_integer_value(json_object_get(t, "max_conns")));
		if (json_is_integer(json_object_get(t, "conns")))
			printf("in flight: %" JSON_INTEGER_FORMAT "\n",
			       json_integer_value(json_object_get(t, "conns")));
		if (json_is_integer(json_object_get(t, "conn_overshoot_bound")))
			printf("conn overshoot bound: %" JSON_INTEGER_FORMAT "\n",
			       json_integer_value(json_object_get(t,
						  "conn_overshoot_bound")));
		else if (json_is_null(json_object_get(t, "conn_overshoot_bound")))
			printf("conn overshoot bound: none (fail allow)\n");
	}
	if (json_integer_value(json_object_get(t, "shards")) > 1)
		printf("shards:  %" JSON_INTEGER_FORMAT "\n",
		       json_integer_value(json_object_get(t, "shards")));
	if (json_integer_value(json_object_get(t, "weight")) > 1)
		printf("weight:  %" JSON_INTEGER_FORMAT "\n",
		       json_integer_value(json_object_get(t, "weight")));
	if (json_is_string(json_object_get(t, "per_source")))
		printf("per source: %s, burst %" JSON_INTEGER_FORMAT ", mask %s\n",
		       str_field(t, "per_source"),
		       json_integer_value(json_object_get(t, "per_source_burst")),
		       str_field(t, "source_mask"));
	if (json_is_integer(id))
		printf("id:      %" JSON_INTEGER_FORMAT "\n", json_integer_value(id));
}

/* What the table alone cannot do: a new rate brings its default burst
 * unless --burst is given, the lists are parsed against the tenant, and
 * --shadow or --enforce set one flag. */
static int finish_set(struct set_args *a, const struct opts_result *res,
		      char *err)
{
	struct policy_tenant *t = &a->t;

	if (opts_given(res, "rate") && !opts_given(res, "burst"))
		t->burst = policy_default_burst(&t->rate);
	if (a->match && policy_parse_prefixes(a->match, t, err) < 0)
		return -1;
	if (a->ports) {
		if (!strcmp(a->ports, "any"))
			t->n_ports = 0;
		else if (policy_parse_ports(a->ports, t, err) < 0)
			return -1;
	}
	if (a->shadow || a->enforce)
		t->shadow = a->shadow;
	/* --source-mask alone on a tenant without a per-source limit is
	 * left for policy_validate() to refuse */
	if (!t->src_rate.count && !opts_given(res, "source-mask")) {
		t->src_burst = 0;
		t->src_len4 = t->src_len6 = 0;
	} else if (t->src_rate.count && !t->src_len4) {
		t->src_len4 = POLICY_SRC_LEN4;
		t->src_len6 = POLICY_SRC_LEN6;
	}
	return 0;
}

static int tenant_set(int argc, char **argv)
{
	struct set_args a = { .t = { .name = "" } };
	struct opts_result res;
	char name[POLICY_NAME_MAX + 1], err[OPTS_ERR_MAX];
	struct policy_tenant t;
	json_t *reply = NULL, *req;
	bool exists;
	int ret;

	ret = rlctl_parse(&set_spec, argc, argv, &a, &res);
	if (ret != RLCTL_CONTINUE)
		goto out;
	ret = RLCTL_EXIT_USAGE;
	memcpy(name, a.t.name, sizeof(name));
	if (a.shadow && a.enforce) {
		ret = rlctl_usage_error("tenant set", "--shadow and --enforce "
					"exclude each other");
		goto out;
	}
	/* Check every argument before talking to the agent, so that bad
	 * input is reported whether or not NAME exists. */
	if (finish_set(&a, &res, err) < 0) {
		rlctl_error("%s", err);
		goto out;
	}

	ret = rlctl_request(json_pack("{s:s, s:s}", "cmd", "tenant.get",
				      "name", name), &reply);
	if (ret != RLCTL_EXIT_OK)
		goto out;
	exists = json_is_true(json_object_get(reply, "ok"));
	if (!exists && ctl_code_parse(str_field(reply, "code")) != CTL_NOT_FOUND) {
		ret = rlctl_refused(reply);
		goto out;
	}
	if (exists) {
		if (policy_tenant_from_json(json_object_get(reply, "tenant"), &t,
					    err) < 0) {
			rlctl_error("rlagent returned tenant '%s' in a form rlctl "
				    "does not understand: %s", name, err);
			ret = RLCTL_EXIT_FAIL;
			goto out;
		}
	} else {
		if ((!opts_given(&res, "rate") && !a.t.max_conns) || !a.match) {
			/* the agent's "no tenant named" says which name
			 * was meant when one is near */
			const char *why = json_string_value(
					json_object_get(reply, "error"));

			if (why && strstr(why, "did you mean"))
				ret = rlctl_usage_error("tenant set", "%s; creating "
							"tenant '%s' needs --match, "
							"and --rate or --max-conns",
							why, name);
			else
				ret = rlctl_usage_error("tenant set", "tenant '%s' "
							"does not exist; creating it "
							"needs --match, and --rate or "
							"--max-conns", name);
			goto out;
		}
		memset(&t, 0, sizeof(t));
		t.action = POLICY_ACT_DROP;
		/* A cap alone: the highest rate there is, which no host
		 * reaches, so that only the cap refuses. */
		t.rate = (struct policy_rate){ POLICY_RATE_MAX, 1 };
		t.burst = POLICY_BURST_MAX;
	}
	json_decref(reply);
	reply = NULL;
	/* the same command line again, onto the tenant it changes */
	opts_free(&set_spec, &a);
	policy_tenant_free(&a.t);
	memset(&a, 0, sizeof(a));
	a.t = t;
	if (opts_parse(&set_spec, argc, argv, &a, &res) < 0)
		snprintf(err, sizeof(err), "%s", res.err);
	else if (finish_set(&a, &res, err) == 0 &&
		 policy_validate(&a.t, err) == 0)
		err[0] = '\0';
	if (err[0]) {
		rlctl_error("%s", err);
		ret = RLCTL_EXIT_USAGE;
		goto out;
	}
	req = json_pack("{s:s, s:o}", "cmd", "tenant.set",
			"tenant", policy_tenant_to_json(&a.t));
	ret = rlctl_call(req, &reply);
	if (ret != RLCTL_EXIT_OK)
		goto out;
	rlctl_print_warnings(reply);
	if (!json_is_object(json_object_get(reply, "tenant")))
		json_object_set_new(reply, "tenant", policy_tenant_to_json(&a.t));
	if (rlctl.json) {
		rlctl_print_json(json_incref(json_object_get(reply, "tenant")));
	} else {
		printf("tenant '%s' %s\n", name, exists ? "updated" : "created");
		print_tenant(json_object_get(reply, "tenant"));
	}
out:
	json_decref(reply);
	opts_free(&set_spec, &a);
	policy_tenant_free(&a.t);
	return ret;
}

static int tenant_get(int argc, char **argv)
{
	struct name_args args = { "" };
	struct opts_result res;
	const char *name = args.name;
	json_t *reply, *t;
	int ret;

	ret = rlctl_parse(&get_spec, argc, argv, &args, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	ret = rlctl_call_get(json_pack("{s:s, s:s}", "cmd", "tenant.get",
					"name", name), "tenant", false, &reply, &t);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	if (rlctl.json)
		rlctl_print_json(json_incref(t));
	else
		print_tenant(t);
	json_decref(reply);
	return RLCTL_EXIT_OK;
}

static int tenant_list(int argc, char **argv)
{
	int ret, wname = 4, wrate = 4;
	struct list_args args = { 0 };
	struct opts_result res;
	json_t *req, *reply, *ts, *t;
	size_t i;

	ret = rlctl_parse(&list_spec, argc, argv, &args, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	/* the agent filters (rlctl_keep again is for older agents) */
	req = json_pack("{s:s}", "cmd", "tenant.list");
	if (req && args.name)
		json_object_set_new(req, "match", json_string(args.name));
	rlctl_page_request(req, args.after, args.limit);
	ret = rlctl_call_get(req, "tenants", true, &reply, &ts);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	rlctl_keep(ts, "name", args.name, args.after, args.limit);
	if (rlctl.json) {
		rlctl_print_json(json_incref(ts));
		json_decref(reply);
		return RLCTL_EXIT_OK;
	}
	if (json_array_size(ts) == 0) {
		printf("no tenants\n");
		json_decref(reply);
		return RLCTL_EXIT_OK;
	}
	json_array_foreach(ts, i, t) {
		int n = (int)strlen(str_field(t, "name"));
		int r = (int)strlen(str_field(t, "rate"));

		wname = n > wname ? n : wname;
		wrate = r > wrate ? r : wrate;
	}
	printf("%-*s  %-*s  %9s  %-6s  %-7s  %-15s  %s\n", wname, "NAME", wrate,
	       "RATE", "BURST", "ACTION", "MODE", "PORTS", "MATCH");
	json_array_foreach(ts, i, t) {
		char ports[512], match[4096];

		join_strings(json_object_get(t, "ports"), ports, sizeof(ports),
			     "any");
		join_strings(json_object_get(t, "match"), match, sizeof(match),
			     "-");
		printf("%-*s  %-*s  %9" JSON_INTEGER_FORMAT "  %-6s  %-7s  %-15s  %s\n",
		       wname, str_field(t, "name"), wrate, str_field(t, "rate"),
		       json_integer_value(json_object_get(t, "burst")),
		       str_field(t, "action"),
		       json_is_true(json_object_get(t, "shadow")) ? "shadow" :
		       "enforce", ports, match);
	}
	json_decref(reply);
	return RLCTL_EXIT_OK;
}

static int tenant_del(int argc, char **argv)
{
	struct name_args args = { "" };
	struct opts_result res;
	const char *name = args.name;
	int ret;

	ret = rlctl_parse(&del_spec, argc, argv, &args, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	ret = rlctl_call(json_pack("{s:s, s:s}", "cmd", "tenant.del",
				   "name", name), NULL);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	if (rlctl.json)
		rlctl_print_json(json_pack("{s:s}", "deleted", name));
	else
		printf("tenant '%s' deleted\n", name);
	return RLCTL_EXIT_OK;
}

const struct opts_command rlctl_tenant_cmds[] = {
	{ "set", "NAME --rate RATE --match PREFIX[,...] [options]",
	  "create or update a tenant", tenant_set, NULL },
	{ "get", "NAME", "show one tenant", tenant_get, NULL },
	{ "show", NULL, NULL, tenant_get, NULL },
	{ "list", NULL, "show every tenant", tenant_list, NULL },
	{ "ls", NULL, NULL, tenant_list, NULL },
	{ "del", "NAME", "delete a tenant", tenant_del, NULL },
	{ "delete", NULL, NULL, tenant_del, NULL },
	{ "rm", NULL, NULL, tenant_del, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};
