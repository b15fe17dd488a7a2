/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl: the operator's command line for rlagent.  This file holds the global
 * options, command dispatch, error output and the connection to the agent.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "rlctl.h"

struct rlctl rlctl = { .timeout_ms = CTL_CLIENT_TIMEOUT_MS };

static const char usage_main[] =
"Usage: rlctl [--socket PATH] [--json] COMMAND [ARGS]\n"
"\n"
"Set and inspect per-tenant TCP new-connection rate limits on this host.\n"
"\n"
"Commands:\n"
"  tenant set NAME --rate RATE --match PREFIX[,...] [options]\n"
"                       create or update a tenant\n"
"  tenant get NAME      show one tenant\n"
"  tenant list          show every tenant\n"
"  tenant del NAME      delete a tenant\n"
"  apply FILE           make the policy exactly the tenants in FILE\n"
"  status               agent version, uptime, interfaces, mode\n"
"  stats [NAME]         per-tenant counters and rates\n"
"  top                  live view of per-tenant rates\n"
"  detach IF            detach the XDP program from interface IF\n"
"  version              rlctl's version and the agent's\n"
"\n"
"Options:\n"
"  -s, --socket PATH    rlagent's control socket (default: $RLCTL_SOCKET,\n"
"                       else " CTL_DEFAULT_SOCKET ")\n"
"  -j, --json           print only JSON on stdout, errors as {\"error\": ...}\n"
"  -h, --help           this help; 'rlctl COMMAND --help' for a command\n"
"  -V, --version        rlctl's version and the agent's (as 'rlctl version')\n"
"\n"
"Exit status: 0 success, 1 failure (e.g. rlagent not running),\n"
"2 bad command line or input (nothing was changed).\n";

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

int rlctl_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	rlctl_error("%s; see 'rlctl %s--help'", msg, cmd ? cmd : "");
	return RLCTL_EXIT_USAGE;
}

int rlctl_common_opt(int opt, char **argv, const char *cmd, const char *usage)
{
	char sub[128];

	/* the top level's help is plain 'rlctl --help' */
	if (strcmp(cmd, "rlctl"))
		snprintf(sub, sizeof(sub), "%s ", cmd);
	else
		sub[0] = '\0';
	switch (opt) {
	case 'j':
		rlctl.json = true;
		return RLCTL_CONTINUE;
	case 'S':
		rlctl.socket = optarg;
		return RLCTL_CONTINUE;
	case 'h':
		fputs(usage, stdout);
		return RLCTL_EXIT_OK;
	case ':':
		return rlctl_usage_error(sub, "option '%s' of '%s' needs a value",
					 argv[optind - 1], cmd);
	default:
		return rlctl_usage_error(sub, "unknown option '%s' for '%s'",
					 argv[optind - 1], cmd);
	}
}

int rlctl_positional(int argc, char **argv, int min, int max, const char *cmd,
		     const char *what)
{
	char sub[128];
	int n = argc - optind;

	snprintf(sub, sizeof(sub), "%s ", cmd);
	if (n < min)
		return rlctl_usage_error(sub, "'%s' needs %s", cmd, what);
	if (n > max)
		return rlctl_usage_error(sub, "unexpected argument '%s' for '%s'",
					 argv[optind + max], cmd);
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

int rlctl_request(json_t *req, json_t **reply)
{
	int ret;

	*reply = NULL;
	if (!req) {
		rlctl_error("out of memory");
		return RLCTL_EXIT_FAIL;
	}
	if (!rlctl.connected) {
		ret = ctl_client_connect(&rlctl.client, rlctl.socket,
					 rlctl.timeout_ms);
		if (ret < 0) {
			json_decref(req);
			rlctl_error("%s", rlctl.client.err);
			ctl_client_close(&rlctl.client);
			return RLCTL_EXIT_FAIL;
		}
		rlctl.connected = true;
	}
	ret = ctl_client_request(&rlctl.client, req, reply);
	json_decref(req);
	if (ret < 0) {
		rlctl_error("%s", rlctl.client.err);
		rlctl_disconnect();
		return RLCTL_EXIT_FAIL;
	}
	return RLCTL_EXIT_OK;
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

int rlctl_call(json_t *req, json_t **reply)
{
	json_t *rep;
	int ret;

	if (reply)
		*reply = NULL;
	ret = rlctl_request(req, &rep);
	if (ret != RLCTL_EXIT_OK)
		return ret;
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

void rlctl_disconnect(void)
{
	if (rlctl.connected)
		ctl_client_close(&rlctl.client);
	rlctl.connected = false;
}

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
} commands[] = {
	{ "tenant", cmd_tenant },
	{ "apply", cmd_apply },
	{ "status", cmd_status },
	{ "stats", cmd_stats },
	{ "top", cmd_top },
	{ "detach", cmd_detach },
	{ "version", cmd_version },
};

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "version", no_argument, NULL, 'V' },
		RLCTL_COMMON_OPTS
	};
	const char *env = getenv("RLCTL_SOCKET");
	int opt, ret;

	if (env && *env)
		rlctl.socket = env;
	opterr = 0;
	/* '+': stop at the command, whose own options follow it. */
	while ((opt = getopt_long(argc, argv, "+:hjs:S:V", opts, NULL)) != -1) {
		if (opt == 's')
			opt = 'S';
		if (opt == 'V') {
			/* a fresh getopt for the command's own, as below */
			optind = 0;
			return cmd_version(1, (char *[]){ "version", NULL });
		}
		ret = rlctl_common_opt(opt, argv, "rlctl", usage_main);
		if (ret != RLCTL_CONTINUE)
			return ret;
	}
	if (optind >= argc) {
		rlctl_error("no command given; see 'rlctl --help'");
		return RLCTL_EXIT_USAGE;
	}
	if (!strcmp(argv[optind], "help")) {
		fputs(usage_main, stdout);
		return RLCTL_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(argv[optind], commands[i].name))
			continue;
		argc -= optind;
		argv += optind;
		optind = 0;
		ret = commands[i].fn(argc, argv);
		rlctl_disconnect();
		fflush(stdout);
		return ret;
	}
	rlctl_error("unknown command '%.64s': expected tenant, apply, status, "
		    "stats, top, detach or version; see 'rlctl --help'",
		    argv[optind]);
	return RLCTL_EXIT_USAGE;
}
