/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl internals shared by its command files: global options, output in
 * text or JSON, and the one connection to rlagent.
 */
#ifndef RLCTL_H
#define RLCTL_H

#include <getopt.h>
#include <stdbool.h>
#include <jansson.h>

#include "ctl_client.h"

enum {
	RLCTL_EXIT_OK = 0,
	RLCTL_EXIT_FAIL = 1,	/* no agent, agent failed, I/O error */
	RLCTL_EXIT_USAGE = 2,	/* bad command line or input, unknown tenant */
};

/* Returned by rlctl_common_opt when the option loop should go on. */
#define RLCTL_CONTINUE	(-1)

struct rlctl {
	bool json;
	const char *socket;
	int timeout_ms;
	bool connected;
	struct ctl_client client;
};

extern struct rlctl rlctl;

/* Options every command accepts, for the end of each option table. */
#define RLCTL_COMMON_OPTS					\
	{ "json", no_argument, NULL, 'j' },			\
	{ "help", no_argument, NULL, 'h' },			\
	{ "socket", required_argument, NULL, 'S' },		\
	{ NULL, 0, NULL, 0 }

/* Handles --json, --help (printing usage) and getopt's errors for the command
 * named cmd; RLCTL_CONTINUE, or the exit code to return at once. */
int rlctl_common_opt(int opt, char **argv, const char *cmd, const char *usage);

/* Checks the number of positional arguments left after the options. */
int rlctl_positional(int argc, char **argv, int min, int max, const char *cmd,
		     const char *what);

void rlctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* rlctl_error, returning RLCTL_EXIT_USAGE, with a pointer to the help. */
int rlctl_usage_error(const char *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Prints v as pretty JSON on stdout and drops the reference. */
void rlctl_print_json(json_t *v);

/* Sends req (reference stolen) and waits for the reply, connecting first if
 * needed.  On success returns 0 with the reply in *reply (NULL allowed).
 * Otherwise prints the error and returns the exit code: 1 if the agent is
 * unreachable or failed, 2 if it refused the request as bad input. */
int rlctl_call(json_t *req, json_t **reply);
/* The same, but a reply with "ok":false is returned too (0, not printed):
 * for callers to whom a refusal is an answer, like tenant.get on a name
 * that may not exist yet. */
int rlctl_request(json_t *req, json_t **reply);
/* The exit code and message for a reply with "ok":false (printed). */
int rlctl_refused(json_t *reply);
void rlctl_disconnect(void);

int cmd_tenant(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_stats(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_detach(int argc, char **argv);
int cmd_version(int argc, char **argv);

/* Table output of the stats array, shared by `stats` and `top`. */
void rlctl_print_stats_table(json_t *stats, bool sort_by_rate);

#endif /* RLCTL_H */
