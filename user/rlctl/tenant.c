/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl tenant set|get|list|del: one tenant at a time.  Every argument is
 * checked here first, so bad input never reaches the agent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "rlctl.h"

static const char usage_tenant[] =
"Usage: rlctl tenant set NAME --rate RATE --match PREFIX[,...] [options]\n"
"       rlctl tenant get NAME\n"
"       rlctl tenant list\n"
"       rlctl tenant del NAME\n"
"\n"
"'rlctl tenant COMMAND --help' for each command's options.\n";

static const char usage_set[] =
"Usage: rlctl tenant set NAME [--rate RATE] [--burst N] [--match PREFIX[,...]]\n"
"                       [--port PORT[,...]|any] [--action drop|rst]\n"
"                       [--shadow|--enforce] [--overshoot N|auto]\n"
"                       [--fail static|allow|deny]\n"
"\n"
"Create tenant NAME, or update it.  On update, options not given keep their\n"
"current values (except --burst, which follows a new --rate unless given).\n"
"Takes effect within one second.\n"
"\n"
"  NAME                 1-63 of A-Z a-z 0-9 _ . -, starting with a letter\n"
"                       or digit\n"
"  -r, --rate RATE      N/s, N/m or N/h, N from 1, at most 1e9/s\n"
"                       (required to create)\n"
"  -b, --burst N        bucket size, 1 to 100000000 (default: one second of\n"
"                       the rate, at least 1)\n"
"  -m, --match LIST     source prefixes, comma-separated IPv4/IPv6 addresses\n"
"                       or CIDRs, at most 64 (required to create; may repeat)\n"
"  -p, --port LIST      destination ports 1-65535, at most 16 (may repeat);\n"
"                       'any' (the default on create) for every port\n"
"  -a, --action ACTION  drop (silent; the default on create) or rst (the\n"
"                       client fails at once)\n"
"      --shadow         count would-deny but admit everything\n"
"      --enforce        refuse over the limit (the default on create)\n"
"      --overshoot N    fleet mode: tokens the hosts may hold between them,\n"
"                       leased and not yet spent (the overshoot bound adds\n"
"                       what static fail shares may owe); 'auto' (the\n"
"                       default): the larger of the burst and half a second\n"
"                       of the rate\n"
"      --fail POLICY    fleet mode, when Redis or the agent fails and the\n"
"                       leased tokens are spent: static (the default: a\n"
"                       local share, rate / live agents), allow or deny\n"
"\n"
"Example:\n"
"  rlctl tenant set web --rate 100/s --burst 200 \\\n"
"        --match 192.0.2.0/24,2001:db8::/32 --port 80,443 --action rst\n";

static const char usage_get[] =
"Usage: rlctl [--json] tenant get NAME\n"
"\n"
"Show tenant NAME as the agent holds it.\n";

static const char usage_list[] =
"Usage: rlctl [--json] tenant list\n"
"\n"
"Show every tenant.  With --json, an array of tenant objects\n"
"(name, rate, burst, match, ports, action, shadow, id).\n";

static const char usage_del[] =
"Usage: rlctl [--json] tenant del NAME\n"
"\n"
"Delete tenant NAME; its connections are no longer limited.\n";

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
	if (json_integer_value(json_object_get(t, "overshoot")) > 0)
		printf("overshoot: %" JSON_INTEGER_FORMAT "\n",
		       json_integer_value(json_object_get(t, "overshoot")));
	if (json_is_integer(id))
		printf("id:      %" JSON_INTEGER_FORMAT "\n", json_integer_value(id));
}

static int need_name(int argc, char **argv, const char *cmd, char *name)
{
	char err[POLICY_ERR_MAX];
	int ret = rlctl_positional(argc, argv, 1, 1, cmd, "a tenant NAME");

	if (ret != RLCTL_CONTINUE)
		return ret;
	if (policy_parse_name(argv[optind], name, err) < 0) {
		rlctl_error("%s", err);
		return RLCTL_EXIT_USAGE;
	}
	return RLCTL_CONTINUE;
}

/* Appends one occurrence of a repeatable list option, so that "--port 80
 * --port 443" means "80,443" and duplicates across them are still caught. */
static int append_list(char **list, const char *item)
{
	char *s;

	if (asprintf(&s, "%s%s%s", *list ? *list : "", *list ? "," : "",
		     item) < 0)
		return -1;
	free(*list);
	*list = s;
	return 0;
}

struct set_args {
	const char *rate, *burst, *action, *overshoot, *fail;
	char *match, *ports;
	int shadow;		/* -1 not given, 0 --enforce, 1 --shadow */
};

/* Applies the options to t; t holds the current tenant, or defaults. */
static int apply_set_args(const struct set_args *a, struct policy_tenant *t,
			  char *err)
{
	if (a->rate) {
		if (policy_parse_rate(a->rate, &t->rate, err) < 0)
			return -1;
		t->burst = policy_default_burst(&t->rate);
	}
	if (a->burst && policy_parse_burst(a->burst, &t->burst, err) < 0)
		return -1;
	if (a->match && policy_parse_prefixes(a->match, t, err) < 0)
		return -1;
	if (a->ports) {
		if (!strcmp(a->ports, "any"))
			t->n_ports = 0;
		else if (policy_parse_ports(a->ports, t, err) < 0)
			return -1;
	}
	if (a->action && policy_parse_action(a->action, &t->action, err) < 0)
		return -1;
	if (a->shadow >= 0)
		t->shadow = a->shadow;
	if (a->fail && policy_parse_fail(a->fail, &t->fail, err) < 0)
		return -1;
	if (a->overshoot) {
		if (!strcmp(a->overshoot, "auto"))
			t->overshoot = 0;
		else if (policy_parse_burst(a->overshoot, &t->overshoot, err) < 0) {
			snprintf(err, POLICY_ERR_MAX, "invalid overshoot '%.32s': "
				 "expected 'auto' or a whole number of connections "
				 "from 1 to %llu", a->overshoot,
				 (unsigned long long)POLICY_BURST_MAX);
			return -1;
		}
	}
	return 0;
}

static int tenant_set(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "rate", required_argument, NULL, 'r' },
		{ "burst", required_argument, NULL, 'b' },
		{ "match", required_argument, NULL, 'm' },
		{ "port", required_argument, NULL, 'p' },
		{ "ports", required_argument, NULL, 'p' },
		{ "action", required_argument, NULL, 'a' },
		{ "shadow", no_argument, NULL, 'W' },
		{ "enforce", no_argument, NULL, 'E' },
		{ "overshoot", required_argument, NULL, 'O' },
		{ "fail", required_argument, NULL, 'F' },
		RLCTL_COMMON_OPTS
	};
	struct set_args a = { .shadow = -1 };
	struct policy_tenant t, scratch;
	char name[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX];
	json_t *reply = NULL, *req;
	bool exists;
	int opt, ret = RLCTL_EXIT_USAGE;

	while ((opt = getopt_long(argc, argv, ":hjr:b:m:p:a:", opts, NULL)) != -1) {
		switch (opt) {
		case 'r': a.rate = optarg; break;
		case 'b': a.burst = optarg; break;
		case 'a': a.action = optarg; break;
		case 'O': a.overshoot = optarg; break;
		case 'F': a.fail = optarg; break;
		case 'm':
		case 'p':
			if (append_list(opt == 'm' ? &a.match : &a.ports, optarg) < 0) {
				rlctl_error("out of memory");
				ret = RLCTL_EXIT_FAIL;
				goto out;
			}
			break;
		case 'W':
		case 'E':
			if (a.shadow == (opt == 'E')) {
				ret = rlctl_usage_error("tenant set ", "--shadow and "
							"--enforce exclude each other");
				goto out;
			}
			a.shadow = opt == 'W';
			break;
		default:
			ret = rlctl_common_opt(opt, argv, "tenant set", usage_set);
			if (ret != RLCTL_CONTINUE)
				goto out;
		}
	}
	ret = need_name(argc, argv, "tenant set", name);
	if (ret != RLCTL_CONTINUE)
		goto out;
	ret = RLCTL_EXIT_USAGE;
	/* Check every argument before talking to the agent: on a scratch
	 * tenant, so that bad input is reported whether or not NAME exists. */
	memset(&scratch, 0, sizeof(scratch));
	if (apply_set_args(&a, &scratch, err) < 0) {
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
		if (!a.rate || !a.match) {
			ret = rlctl_usage_error("tenant set ", "tenant '%s' does not "
						"exist; creating it needs --rate and "
						"--match", name);
			goto out;
		}
		memset(&t, 0, sizeof(t));
		memcpy(t.name, name, sizeof(name));
		t.action = POLICY_ACT_DROP;
	}
	json_decref(reply);
	reply = NULL;
	if (apply_set_args(&a, &t, err) < 0 || policy_validate(&t, err) < 0) {
		rlctl_error("%s", err);
		ret = RLCTL_EXIT_USAGE;
		goto out;
	}
	req = json_pack("{s:s, s:o}", "cmd", "tenant.set",
			"tenant", policy_tenant_to_json(&t));
	ret = rlctl_call(req, &reply);
	if (ret != RLCTL_EXIT_OK)
		goto out;
	if (!json_is_object(json_object_get(reply, "tenant")))
		json_object_set_new(reply, "tenant", policy_tenant_to_json(&t));
	if (rlctl.json) {
		rlctl_print_json(json_incref(json_object_get(reply, "tenant")));
	} else {
		printf("tenant '%s' %s\n", name, exists ? "updated" : "created");
		print_tenant(json_object_get(reply, "tenant"));
	}
out:
	json_decref(reply);
	free(a.match);
	free(a.ports);
	return ret;
}

static int tenant_get(int argc, char **argv)
{
	static const struct option opts[] = { RLCTL_COMMON_OPTS };
	char name[POLICY_NAME_MAX + 1];
	json_t *reply, *t;
	int opt, ret;

	while ((opt = getopt_long(argc, argv, ":hj", opts, NULL)) != -1)
		if ((ret = rlctl_common_opt(opt, argv, "tenant get", usage_get)) !=
		    RLCTL_CONTINUE)
			return ret;
	ret = need_name(argc, argv, "tenant get", name);
	if (ret != RLCTL_CONTINUE)
		return ret;
	ret = rlctl_call(json_pack("{s:s, s:s}", "cmd", "tenant.get",
				   "name", name), &reply);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	t = json_object_get(reply, "tenant");
	if (!json_is_object(t)) {
		rlctl_error("rlagent's reply to tenant.get has no tenant object");
		json_decref(reply);
		return RLCTL_EXIT_FAIL;
	}
	if (rlctl.json)
		rlctl_print_json(json_incref(t));
	else
		print_tenant(t);
	json_decref(reply);
	return RLCTL_EXIT_OK;
}

static int tenant_list(int argc, char **argv)
{
	static const struct option opts[] = { RLCTL_COMMON_OPTS };
	int opt, ret, wname = 4, wrate = 4;
	json_t *reply, *ts, *t;
	size_t i;

	while ((opt = getopt_long(argc, argv, ":hj", opts, NULL)) != -1)
		if ((ret = rlctl_common_opt(opt, argv, "tenant list", usage_list)) !=
		    RLCTL_CONTINUE)
			return ret;
	ret = rlctl_positional(argc, argv, 0, 0, "tenant list", "");
	if (ret != RLCTL_CONTINUE)
		return ret;
	ret = rlctl_call(json_pack("{s:s}", "cmd", "tenant.list"), &reply);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	ts = json_object_get(reply, "tenants");
	if (!json_is_array(ts)) {
		rlctl_error("rlagent's reply to tenant.list has no tenants array");
		json_decref(reply);
		return RLCTL_EXIT_FAIL;
	}
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
	static const struct option opts[] = { RLCTL_COMMON_OPTS };
	char name[POLICY_NAME_MAX + 1];
	int opt, ret;

	while ((opt = getopt_long(argc, argv, ":hj", opts, NULL)) != -1)
		if ((ret = rlctl_common_opt(opt, argv, "tenant del", usage_del)) !=
		    RLCTL_CONTINUE)
			return ret;
	ret = need_name(argc, argv, "tenant del", name);
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

int cmd_tenant(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int argc, char **argv);
	} subs[] = {
		{ "set", tenant_set }, { "get", tenant_get },
		{ "show", tenant_get }, { "list", tenant_list },
		{ "ls", tenant_list }, { "del", tenant_del },
		{ "delete", tenant_del }, { "rm", tenant_del },
	};

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		if (argc < 2) {
			rlctl_error("'tenant' needs a command: set, get, list or "
				    "del; see 'rlctl tenant --help'");
			return RLCTL_EXIT_USAGE;
		}
		fputs(usage_tenant, stdout);
		return RLCTL_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		if (strcmp(argv[1], subs[i].name))
			continue;
		optind = 0;
		return subs[i].fn(argc - 1, argv + 1);
	}
	rlctl_error("unknown tenant command '%.64s': expected set, get, list or "
		    "del; see 'rlctl tenant --help'", argv[1]);
	return RLCTL_EXIT_USAGE;
}
