/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl: the operator's command line for rlagent.  This file holds the global
 * options, command dispatch, error output and the connection to the agent.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "rlctl.h"

struct rlctl rlctl = { .timeout_ms = CTL_CLIENT_TIMEOUT_MS };

const struct opt rlctl_common_opts[] = {
	{ "socket", 's', OPT_STRING, OPT_AT(struct rlctl, socket),
	  .arg = "PATH", .def_doc = "$RLCTL_SOCKET, else " CTL_DEFAULT_SOCKET,
	  .help = "rlagent's control socket" },
	{ "json", 'j', OPT_FLAG, OPT_AT(struct rlctl, json),
	  .help = "print only JSON on stdout, errors as {\"error\": ...}" },
	{ "timeout", 0, OPT_U64, OPT_AT(struct rlctl, timeout_ms), .arg = "SECONDS",
	  .min = 1, .max = 3600, .scale = 1000, .def_doc = "10", .expect = "seconds",
	  .help = "how long to wait for rlagent's answer (a change it has not "
		  "answered in time may still be made)" },
	{ "help", 'h', OPT_HELP,
	  .help = "this help; 'rlctl COMMAND --help' for a command" },
	{ .kind = OPT_END },
};

static const struct opts_command commands[] = {
	{ "tenant", NULL, "one tenant at a time", NULL, rlctl_tenant_cmds },
	{ "instance", NULL, "the host-wide limit over all tenants", NULL,
	  rlctl_instance_cmds },
	{ "apply", "FILE", "make the policy exactly the tenants in FILE",
	  cmd_apply, NULL },
	{ "status", NULL, "agent version, uptime, interfaces, mode", cmd_status,
	  NULL },
	{ "stats", "[NAME]", "per-tenant counters and rates", cmd_stats, NULL },
	{ "top", NULL, "live view of per-tenant rates", cmd_top, NULL },
	{ "detach", "IF", "detach the XDP program from interface IF",
	  cmd_detach, NULL },
	{ "version", NULL, "rlctl's version and the agent's", cmd_version, NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static const struct opt main_opts[] = {
	{ .kind = OPT_SECTION, .help = "Options:" },
	{ "version", 'V', OPT_VERSION,
	  .help = "rlctl's version and the agent's (as 'rlctl version')" },
	{ "COMMAND", 0, OPT_STRING, OPT_POS | OPT_OPTIONAL | OPT_REST, .arg = NULL },
	{ .kind = OPT_END },
};

static const struct opts_spec main_spec = {
	.prog = "rlctl",
	.synopsis = "rlctl [--socket PATH] [--json] [--timeout SECONDS] COMMAND [ARGS]",
	.doc = "Set and inspect per-tenant TCP new-connection rate limits on "
	       "this host.\n",
	.commands = commands,
	.opts = main_opts,
	RLCTL_COMMON,
	.list_common = true,
	/* the command's own options follow it */
	.stop_at_arg = true,
	.epilog = "Exit status: 0 success, 1 failure (e.g. rlagent not running),\n"
		  "2 bad command line or input (nothing was changed).\n",
};

void rlctl_error(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (rlctl.json) {
		json_t *j;

		policy_clean_utf8(msg);	/* it may quote any bytes of argv */
		j = json_pack("{s:s}", "error", msg);

		if (j) {
			json_dumpf(j, stdout, JSON_COMPACT);
			fputc('\n', stdout);
			json_decref(j);
		}
		fflush(stdout);
	} else {
		fprintf(stderr, "Error: %s\n", msg);
	}
}

void rlctl_warn(const char *fmt, ...)
{
	va_list ap;

	/* on stderr in both modes: --json's stdout stays the answer alone */
	fputs("Warning: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void rlctl_print_warnings(const json_t *reply)
{
	size_t i;
	json_t *w;

	json_array_foreach(json_object_get(reply, "warnings"), i, w)
		if (json_is_string(w))
			rlctl_warn("%s", json_string_value(w));
}

int rlctl_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	rlctl_error("%s; see 'rlctl %s%s--help'", msg, cmd ? cmd : "",
		    cmd ? " " : "");
	return RLCTL_EXIT_USAGE;
}

void rlctl_keep(json_t *arr, const char *key, const char *glob,
		const char *after, uint64_t limit)
{
	size_t i = 0, kept = 0;

	while (i < json_array_size(arr)) {
		const char *name = json_string_value(json_object_get(
					json_array_get(arr, i), key)) ?: "";

		if ((glob && fnmatch(glob, name, 0) != 0) ||
		    (after && after[0] && strcmp(name, after) <= 0) ||
		    (limit && kept >= limit)) {
			json_array_remove(arr, i);
			continue;
		}
		kept++;
		i++;
	}
}

void rlctl_page_request(json_t *req, const char *after, uint64_t limit)
{
	if (req && after[0])
		json_object_set_new(req, "after", json_string(after));
	if (req && limit)
		json_object_set_new(req, "limit", json_integer((json_int_t)
				    (limit > INT64_MAX ? 0 : limit)));
}

int rlctl_parse(const struct opts_spec *spec, int argc, char **argv, void *cfg,
		struct opts_result *res)
{
	int r = opts_parse(spec, argc, argv, cfg, res);

	if (r == OPTS_HELP) {
		opts_usage(spec, stdout);
		return RLCTL_EXIT_OK;
	}
	if (r == -ENOMEM) {
		rlctl_error("out of memory");
		return RLCTL_EXIT_FAIL;
	}
	if (r < 0 || r == OPTS_VERSION)
		return rlctl_usage_error(spec->cmd, "%s", res->err);
	return RLCTL_CONTINUE;
}

void rlctl_print_json(json_t *v)
{
	if (v) {
		json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', stdout);
	}
	json_decref(v);
}

/* Connects to the agent unless connected: 0, or the exit code after
 * saying why not. */
static int connect_agent(void)
{
	int ret;

	if (rlctl.connected)
		return RLCTL_EXIT_OK;
	ret = ctl_client_connect(&rlctl.client, rlctl.socket, rlctl.timeout_ms);
	if (ret < 0) {
		rlctl_error("%s", rlctl.client.err);
		ctl_client_close(&rlctl.client);
		return RLCTL_EXIT_FAIL;
	}
	rlctl.connected = true;
	return RLCTL_EXIT_OK;
}

/* After a failed exchange: says why, and drops the connection. */
static int exchange_failed(void)
{
	rlctl_error("%s", rlctl.client.err);
	rlctl_disconnect();
	return RLCTL_EXIT_FAIL;
}

int rlctl_request(json_t *req, json_t **reply)
{
	int ret;

	*reply = NULL;
	if (!req) {
		rlctl_error("out of memory");
		return RLCTL_EXIT_FAIL;
	}
	ret = connect_agent();
	if (ret != RLCTL_EXIT_OK) {
		json_decref(req);
		return ret;
	}
	ret = ctl_client_request(&rlctl.client, req, reply);
	json_decref(req);
	return ret < 0 ? exchange_failed() : RLCTL_EXIT_OK;
}

int rlctl_send(const char *line)
{
	int ret = connect_agent();

	if (ret != RLCTL_EXIT_OK)
		return ret;
	return ctl_client_send_line(&rlctl.client, line) < 0 ?
	       exchange_failed() : RLCTL_EXIT_OK;
}

int rlctl_refused(json_t *reply)
{
	json_t *v = json_object_get(reply, "error");
	enum ctl_code code = ctl_code_parse(json_string_value(
					json_object_get(reply, "code")));

	rlctl_error("%s", json_is_string(v) ? json_string_value(v) :
		    "rlagent refused the request without saying why");
	/* The agent's codes for bad input map to the same exit code as bad
	 * input caught here, so scripts need not care who noticed; a refusal
	 * is never success, whatever the code says. */
	return code == CTL_OK ? RLCTL_EXIT_FAIL : ctl_code_exit(code);
}

/* A reply received: 0 with it in *reply (or dropped), or the exit code
 * of a refusal, said. */
static int answered(json_t *rep, json_t **reply)
{
	int ret;

	if (!json_is_true(json_object_get(rep, "ok"))) {
		ret = rlctl_refused(rep);
		json_decref(rep);
		return ret;
	}
	json_object_del(rep, "ok");
	if (reply)
		*reply = rep;
	else
		json_decref(rep);
	return RLCTL_EXIT_OK;
}

int rlctl_call(json_t *req, json_t **reply)
{
	json_t *rep;
	int ret;

	if (reply)
		*reply = NULL;
	ret = rlctl_request(req, &rep);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	return answered(rep, reply);
}

int rlctl_reply(json_t **reply)
{
	json_t *rep;

	if (reply)
		*reply = NULL;
	if (ctl_client_reply(&rlctl.client, &rep) < 0)
		return exchange_failed();
	return answered(rep, reply);
}

int rlctl_call_get(json_t *req, const char *key, bool array, json_t **reply,
		   json_t **field)
{
	char cmd[32];
	int ret;

	snprintf(cmd, sizeof(cmd), "%s",
		 json_string_value(json_object_get(req, "cmd")) ?: "?");
	ret = rlctl_call(req, reply);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	*field = json_object_get(*reply, key);
	if (array ? !json_is_array(*field) : !json_is_object(*field)) {
		rlctl_error("rlagent's reply to %s has no %s %s", cmd, key,
			    array ? "array" : "object");
		json_decref(*reply);
		*reply = NULL;
		return RLCTL_EXIT_FAIL;
	}
	return RLCTL_EXIT_OK;
}

void rlctl_disconnect(void)
{
	if (rlctl.connected)
		ctl_client_close(&rlctl.client);
	rlctl.connected = false;
}

/* Runs the command argv[0] of cmds; group is the command group's name
 * ("tenant"), or NULL for rlctl's own commands. */
static int run(const struct opts_command *cmds, const char *group, int argc,
	       char **argv)
{
	const struct opts_command *c = opts_command_find(cmds, argv[0]);
	char names[256];

	if (!c) {
		const char *near = opts_command_suggest(cmds, argv[0]);

		opts_command_names(cmds, names, sizeof(names));
		if (near)
			rlctl_error("unknown %s%scommand '%.64s'; did you mean "
				    "'%s'? (expected %s)", group ? group : "",
				    group ? " " : "", argv[0], near, names);
		else
			rlctl_error("unknown %s%scommand '%.64s': expected %s; see "
				    "'rlctl %s%s--help'", group ? group : "",
				    group ? " " : "", argv[0], names,
				    group ? group : "", group ? " " : "");
		return RLCTL_EXIT_USAGE;
	}
	if (!c->subs)
		return c->fn(argc, argv);
	/* a group: its own usage, made from its table */
	if (argc < 2) {
		opts_command_names(c->subs, names, sizeof(names));
		rlctl_error("'%s' needs a command: %s; see 'rlctl %s --help'",
			    c->name, names, c->name);
		return RLCTL_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		char synopsis[64], epilog[96];
		struct opts_spec spec = {
			.synopsis = synopsis,
			.commands = c->subs,
			.epilog = epilog,
		};

		snprintf(synopsis, sizeof(synopsis), "rlctl [--json] %s COMMAND "
			 "[ARGS]", c->name);
		snprintf(epilog, sizeof(epilog), "'rlctl %s COMMAND --help' for "
			 "each command's options.\n", c->name);
		opts_usage(&spec, stdout);
		return RLCTL_EXIT_OK;
	}
	return run(c->subs, c->name, argc - 1, argv + 1);
}

int main(int argc, char **argv)
{
	const char *env = getenv("RLCTL_SOCKET");
	struct opts_result res;
	int ret;

	if (env && *env)
		rlctl.socket = env;
	ret = opts_parse(&main_spec, argc, argv, NULL, &res);
	if (ret == OPTS_HELP) {
		opts_usage(&main_spec, stdout);
		return RLCTL_EXIT_OK;
	}
	if (ret == OPTS_VERSION)
		return cmd_version(1, (char *[]){ "version", NULL });
	if (ret < 0)
		return rlctl_usage_error(NULL, "%s", res.err);
	if (res.n_rest == 0) {
		rlctl_error("no command given; see 'rlctl --help'");
		return RLCTL_EXIT_USAGE;
	}
	if (!strcmp(res.rest[0], "help")) {
		opts_usage(&main_spec, stdout);
		return RLCTL_EXIT_OK;
	}
	ret = run(commands, NULL, res.n_rest, res.rest);
	rlctl_disconnect();
	fflush(stdout);
	return ret;
}
