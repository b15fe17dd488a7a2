/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl internals shared by its command files: global options, output in
 * text or JSON, and the one connection to rlagent.
 */
#ifndef RLCTL_H
#define RLCTL_H

#include <stdbool.h>
#include <jansson.h>

#include "ctl_client.h"
#include "opts.h"

enum {
	RLCTL_EXIT_OK = 0,
	RLCTL_EXIT_FAIL = 1,	/* no agent, agent failed, I/O error */
	RLCTL_EXIT_USAGE = 2,	/* bad command line or input, unknown tenant */
};

/* Returned by rlctl_parse when the command should go on. */
#define RLCTL_CONTINUE	(-1)

struct rlctl {
	bool json;
	const char *socket;
	int timeout_ms;
	bool connected;
	struct ctl_client client;
};

extern struct rlctl rlctl;

/* Options every command accepts (--json, --socket, --help). */
extern const struct opt rlctl_common_opts[];
#define RLCTL_COMMON	.common = rlctl_common_opts, .common_cfg = &rlctl

/* The start of command name's opts_spec ("tenant set"). */
#define RLCTL_CMD(name)	\
	.prog = "rlctl [--json] " name, .cmd = name, RLCTL_COMMON

/* Reads a command's argv by its table into cfg: RLCTL_CONTINUE, or the exit
 * code to return at once (after printing the usage for --help, or the usage
 * error). */
int rlctl_parse(const struct opts_spec *spec, int argc, char **argv, void *cfg,
		struct opts_result *res);

void rlctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "Warning: ..." on stderr, in text and --json alike: what was done but
 * may not be what was meant. */
void rlctl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* rlctl_warn for each string of the reply's "warnings" (none: nothing). */
void rlctl_print_warnings(const json_t *reply);
/* rlctl_error, returning RLCTL_EXIT_USAGE, with a pointer to the help of
 * command cmd ("tenant set"; NULL for rlctl's own). */
int rlctl_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prints v as pretty JSON on stdout and drops the reference. */
void rlctl_print_json(json_t *v);

/* Sends req (reference stolen) and waits for the reply, connecting first if
 * needed.  On success returns 0 with the reply in *reply (NULL allowed).
 * Otherwise prints the error and returns the exit code: 1 if the agent is
 * unreachable or failed, 2 if it refused the request as bad input. */
int rlctl_call(json_t *req, json_t **reply);
/* rlctl_call, then the reply's field key, which must be an array (else an
 * object): 0 with *reply (the caller's to drop) and *field in it, or the
 * exit code after saying what was wrong. */
int rlctl_call_get(json_t *req, const char *key, bool array, json_t **reply,
		   json_t **field);
/* The same as rlctl_call, but a reply with "ok":false is returned too (0, not printed):
 * for callers to whom a refusal is an answer, like tenant.get on a name
 * that may not exist yet. */
int rlctl_request(json_t *req, json_t **reply);
/* rlctl_call in two halves, for a request already written as one line of
 * JSON text: rlctl_send sends it (connecting first if needed), rlctl_reply
 * waits for the reply as rlctl_call does.  In between the caller can free
 * what it no longer needs while the agent works.  Each returns 0 or the
 * exit code after saying what was wrong. */
int rlctl_send(const char *line);
int rlctl_reply(json_t **reply);
/* The exit code and message for a reply with "ok":false (printed). */
int rlctl_refused(json_t *reply);
void rlctl_disconnect(void);

/* The commands, each in the file of its kind. */
extern const struct opts_command rlctl_tenant_cmds[];
extern const struct opts_command rlctl_instance_cmds[];
/* The instance limit's line in text output (status, stats, instance get):
 * in, the reply's "instance" (null: none). */
void rlctl_print_instance(const json_t *in);
/* Per-source limits (sources.c): the agent's `sources` reply (*reply, the
 * caller's to drop) with its rows of the sources refused most, of tenant
 * name (NULL: all), at most limit; 0 or the exit code, said.  Then the
 * rows as a table, and status's line for the table's fill. */
int rlctl_sources(const char *name, uint64_t limit, json_t **reply,
		  json_t **rows);
void rlctl_print_sources(const json_t *rows);
void rlctl_print_src_table(const json_t *t);
int cmd_apply(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_detach(int argc, char **argv);
int cmd_version(int argc, char **argv);

/* Keeps in the array of objects arr those whose string key matches the
 * shell pattern glob (all when NULL) and sorts after `after` (all when
 * NULL or empty), at most limit of them (all when 0), in their order:
 * tenant list and stats --name/--after/--limit, stats --top. */
void rlctl_keep(json_t *arr, const char *key, const char *glob,
		const char *after, uint64_t limit);

/* Sets req's "after" (when after is not empty) and "limit" (when not 0):
 * a page of tenant list or stats, by name. */
void rlctl_page_request(json_t *req, const char *after, uint64_t limit);

/* Table output of the stats array, shared by `stats` and `top`. */
void rlctl_print_stats_table(json_t *stats, bool sort_by_rate, bool wide);

#endif /* RLCTL_H */
