/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Command lines declared once: a program's options (and positional
 * arguments) are a table of rows, each with its name, short letter, kind of
 * value, range, default and help line.  opts_parse reads argv by the table
 * and opts_usage prints the help from it, so help and parsing cannot drift
 * apart; every error message names the option, the bad value and what would
 * be accepted.  A command table does the same for a program's commands.
 * Pure apart from getopt's globals and the FILE opts_usage prints to.
 */
#ifndef RL_OPTS_H
#define RL_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define OPTS_ERR_MAX	320
#define OPTS_MAX	64	/* rows in a table, with the common ones */

enum opt_kind {
	OPT_END = 0,	/* ends a table */
	OPT_SECTION,	/* no option: help is a heading line in the usage */
	OPT_FLAG,	/* no value: sets a bool */
	OPT_HELP,	/* no value: opts_parse stops and returns OPTS_HELP */
	OPT_VERSION,	/* no value: opts_parse stops and returns OPTS_VERSION */
	OPT_U64,	/* unsigned integer in [min, max], stored times scale
			 * (if set) in an unsigned field of any size */
	OPT_NUMBER,	/* decimal number in [lo, hi] (above lo with
			 * OPT_ABOVE), stored as a double */
	OPT_ENUM,	/* one of values, stored as its value (an int field) */
	OPT_HOSTPORT,	/* HOST:PORT or [IPV6]:PORT, the string is stored */
	OPT_STRING,	/* stored as is; min to max bytes when max is set */
	OPT_LIST,	/* may repeat: the values joined with ',', in a char *
			 * that opts_free frees */
	OPT_CUSTOM,	/* parse() checks and stores it */
};

enum {
	OPT_HIDDEN = 1 << 0,	/* accepted, not listed (an old spelling) */
	OPT_POS = 1 << 1,	/* a positional argument, in table order;
				 * name is how the usage shows it */
	OPT_OPTIONAL = 1 << 2,	/* OPT_POS: may be left out */
	OPT_REST = 1 << 3,	/* OPT_POS: this and every argument after it
				 * are left to the caller (opts_result.rest) */
	OPT_ABOVE = 1 << 4,	/* OPT_NUMBER: lo itself is not accepted */
	OPT_ONCE = 1 << 5,	/* given twice is an error, not the last one
				 * winning (two places to send to) */
};

struct opt_value {
	const char *name;
	int value;
};

struct opt {
	const char *name;	/* long name without "--"; for OPT_POS, its
				 * name in the usage ("NAME") */
	char short_opt;		/* 0: none */
	enum opt_kind kind;
	unsigned int flags;	/* OPT_HIDDEN, OPT_POS, ... */
	size_t off, size;	/* where the value goes in cfg: OPT_AT() */
	const char *arg;	/* the value's name in the usage ("MS") */
	const char *help;	/* a sentence without the range or default:
				 * those are added from the row */
	const char *def;	/* parsed before argv, and shown as the default */
	const char *def_doc;	/* or the default in words ("the host name"),
				 * when the program works it out later */
	uint64_t min, max;	/* OPT_U64; OPT_STRING: length (max 0: any) */
	uint64_t scale;		/* OPT_U64: stored value = parsed x scale */
	double lo, hi;		/* OPT_NUMBER */
	const char *expect;	/* OPT_U64, OPT_NUMBER: what the value is, in
				 * messages ("milliseconds"); OPT_POS: how a
				 * missing one is named ("a tenant NAME") */
	const struct opt_value *values;	/* OPT_ENUM, ends with a NULL name */
	/* OPT_CUSTOM: 0, or -EINVAL with the whole message in err. */
	int (*parse)(const char *arg, void *dest, char *err, size_t errlen);
};

/* Where an option's value goes: a field of the cfg struct. */
#define OPT_AT(type, field) \
	.off = offsetof(type, field), .size = sizeof(((type *)0)->field)

/* A program's commands.  A row with subs is a group of commands (its own
 * table, e.g. "tenant set"); a row without summary is an alias, accepted and
 * not listed. */
struct opts_command {
	const char *name;
	const char *args;	/* its arguments in the list ("NAME", "[NAME]") */
	const char *summary;
	int (*fn)(int argc, char **argv);
	const struct opts_command *subs;
};

struct opts_spec {
	const char *prog;	/* how the generated synopsis starts
				 * ("rlctl [--json] top") */
	const char *cmd;	/* the command in messages ("tenant set"), or
				 * NULL for a program without commands */
	const char *synopsis;	/* after "Usage: "; NULL: generated from prog,
				 * the positional rows and the options */
	const char *doc;	/* what it does, after the synopsis */
	const char *epilog;	/* after the options (exit status, examples) */
	const struct opts_command *commands;	/* listed before the options */
	const struct opt *opts;	/* listed in the usage */
	/* Accepted too but not listed (a command's share of the program's
	 * global options), with their own cfg. */
	const struct opt *common;
	void *common_cfg;
	int col;		/* where help lines start (default 23) */
	bool list_common;	/* the common rows are listed too, after opts */
	bool stop_at_arg;	/* options end at the first argument: a
				 * command with its own options follows */
};

struct opts_result {
	const struct opts_spec *spec;
	uint64_t seen;		/* bit i: row i of opts (then of common) was
				 * on the command line */
	char **rest;		/* the arguments left after the positional
				 * rows (OPT_REST or stop_at_arg) */
	int n_rest;
	char err[OPTS_ERR_MAX];	/* why opts_parse failed */
};

enum {
	OPTS_OK = 0,
	OPTS_HELP = 1,		/* an OPT_HELP option: print opts_usage */
	OPTS_VERSION = 2,	/* an OPT_VERSION option */
};

/* Parses argv[1..argc-1] (argv[0] is the program or command) by spec into
 * cfg (and spec->common_cfg): defaults first, then options in order, then
 * the positional rows.  OPTS_OK, OPTS_HELP or OPTS_VERSION; -EINVAL with the
 * message in res->err (a bad or missing value, an unknown option, too few
 * or too many arguments); -ENOMEM.  Values stored before an error stay. */
int opts_parse(const struct opts_spec *spec, int argc, char **argv, void *cfg,
	       struct opts_result *res);

/* Whether the option named name (long name) was given. */
bool opts_given(const struct opts_result *res, const char *name);

/* Frees what OPT_LIST rows of spec->opts allocated in cfg. */
void opts_free(const struct opts_spec *spec, void *cfg);

/* Prints the whole usage: synopsis, doc, commands, the rows with their
 * help, ranges, values and defaults, and the epilog. */
void opts_usage(const struct opts_spec *spec, FILE *f);

/* The row named name, or NULL. */
const struct opts_command *opts_command_find(const struct opts_command *cmds,
					     const char *name);

/* "set, get, list or del": the listed commands, for "expected ...". */
void opts_command_names(const struct opts_command *cmds, char *buf, size_t len);

/* The name of names[0..n) that word is most likely a typo of: the
 * nearest by edit distance (a swap of two neighbours counts one; case is
 * ignored, so "Web" finds "web"), at most 1 away for words of up to four
 * characters and 2 beyond; NULL when none is that near or two are equally
 * near.  For "did you mean ...?" after an unknown name. */
const char *opts_suggest(const char *word, const char *const *names, size_t n);

/* opts_suggest() one name at a time, for names that are not in an array
 * (the agent's tenants): init with the word, offer each name (which must
 * outlive the search), then the best, or NULL. */
struct opts_near {
	const char *word;
	size_t limit, best;
	const char *found;
	bool tie;
};
void opts_near_init(struct opts_near *n, const char *word);
void opts_near_offer(struct opts_near *n, const char *name);
const char *opts_near_best(const struct opts_near *n);

/* opts_suggest() over the listed commands of cmds. */
const char *opts_command_suggest(const struct opts_command *cmds,
				 const char *word);

/* Lists the commands, a line each with its summary at col (0: the default);
 * a group's commands under its name ("tenant set NAME ..."). */
void opts_command_list(const struct opts_command *cmds, int col, FILE *f);

#endif /* RL_OPTS_H */
