/* test_opts: option tables as tables - argv in, the values stored or the
 * message naming the bad value out; the usage printed from the same rows
 * (ranges, values, defaults, wrapping), and command tables.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "check.h"

struct cfg {
	bool flag;
	uint64_t count;
	uint16_t port;
	uint64_t ttl_ms;
	double secs;
	int mode;
	const char *addr;
	const char *id;
	char *list;
	const char *custom;
	const char *name;
};

struct common {
	bool json;
};

static int parse_even(const char *s, void *dest, char *err, size_t len)
{
	if (strlen(s) % 2) {
		snprintf(err, len, "invalid even thing '%s': expected an even "
			 "length", s);
		return -EINVAL;
	}
	*(const char **)dest = s;
	return 0;
}

static const struct opt_value modes[] = {
	{ "a", 1 }, { "b", 2 }, { "c", 3 }, { NULL, 0 },
};

#define AT(f)	OPT_AT(struct cfg, f)

static const struct opt table[] = {
	{ "NAME", 0, OPT_STRING, OPT_POS, AT(name), .expect = "a NAME",
	  .help = "what to work on" },
	{ "flag", 'f', OPT_FLAG, AT(flag), .help = "a flag" },
	{ "count", 'n', OPT_U64, AT(count), .arg = "N", .min = 1, .max = 10,
	  .def = "3", .help = "how many" },
	{ "port", 0, OPT_U64, AT(port), .arg = "PORT", .min = 1, .max = 65535,
	  .help = "a port" },
	{ "ttl", 0, OPT_U64, AT(ttl_ms), .arg = "S", .min = 1, .max = 100,
	  .scale = 1000, .def = "5", .expect = "seconds", .help = "a time" },
	{ "secs", 's', OPT_NUMBER, OPT_ABOVE, AT(secs), .arg = "S", .lo = 0,
	  .hi = 10, .expect = "seconds", .help = "a decimal time" },
	{ "mode", 'm', OPT_ENUM, AT(mode), .values = modes, .def = "a",
	  .help = "how" },
	{ "addr", 0, OPT_HOSTPORT, AT(addr), .arg = "HOST:PORT",
	  .def = "127.0.0.1:1", .help = "where" },
	{ "id", 0, OPT_STRING, AT(id), .arg = "ID", .min = 1, .max = 4,
	  .def_doc = "the host name", .help = "who" },
	{ "list", 'l', OPT_LIST, AT(list), .arg = "X[,X...]",
	  .help = "things; may repeat" },
	{ "lists", 0, OPT_LIST, OPT_HIDDEN, AT(list), .arg = "X" },
	{ "even", 0, OPT_CUSTOM, OPT_ONCE, AT(custom), .arg = "E", .parse = parse_even,
	  .help = "a long help line that goes on and on so that it has to be "
		  "wrapped at least once, and maybe twice, before it ends" },
	{ "help", 'h', OPT_HELP, .help = "this help" },
	{ .name = "version", .short_opt = 'V', .kind = OPT_VERSION },
	{ .kind = OPT_END },
};

static const struct opt common_table[] = {
	{ "json", 'j', OPT_FLAG, OPT_AT(struct common, json) },
	{ .kind = OPT_END },
};

static struct common common;

static const struct opts_spec spec = {
	.prog = "prog [--json] thing",
	.cmd = "thing",
	.doc = "Does a thing.\n",
	.epilog = "Exit status: 0.\n",
	.opts = table,
	.common = common_table,
	.common_cfg = &common,
};

/* The same rows for a program without commands. */
static const struct opts_spec plain = {
	.prog = "prog",
	.opts = table,
};

#define ARGV(...)	((const char *const[]){ "thing", __VA_ARGS__, NULL })

static int run(const struct opts_spec *s, const char *const *args,
	       struct cfg *c, struct opts_result *res)
{
	char *argv[32];
	int argc = 0;

	while (args[argc] && argc < 31) {
		argv[argc] = (char *)args[argc];
		argc++;
	}
	argv[argc] = NULL;
	memset(c, 0, sizeof(*c));
	common.json = false;
	return opts_parse(s, argc, argv, c, res);
}

static void test_values(void)
{
	struct opts_result res;
	struct cfg c;
	int r;

	r = run(&spec, ARGV("web"), &c, &res);
	CHECK(r == OPTS_OK && !strcmp(c.name, "web") && c.count == 3 &&
	      c.ttl_ms == 5000 && c.mode == 1 && !strcmp(c.addr, "127.0.0.1:1") &&
	      !c.flag && !c.list && !c.id,
	      "defaults: %d '%s' count %llu ttl %llu mode %d", r, res.err,
	      (unsigned long long)c.count, (unsigned long long)c.ttl_ms, c.mode);
	CHECK(!opts_given(&res, "count") && !opts_given(&res, "flag"),
	      "a default is not 'given'");

	r = run(&spec, ARGV("-f", "web", "-n", "10", "--ttl=100", "--secs", "0.5",
			    "-m", "c", "--addr", "[::1]:80", "--id", "abcd",
			    "--port", "65535", "-j"), &c, &res);
	CHECK(r == OPTS_OK && c.flag && c.count == 10 && c.ttl_ms == 100000 &&
	      c.secs == 0.5 && c.mode == 3 && !strcmp(c.addr, "[::1]:80") &&
	      !strcmp(c.id, "abcd") && c.port == 65535 && common.json &&
	      !strcmp(c.name, "web"), "every kind: %d '%s'", r, res.err);
	CHECK(opts_given(&res, "count") && opts_given(&res, "flag") &&
	      opts_given(&res, "json") && !opts_given(&res, "list") &&
	      !opts_given(&res, "nosuch"), "given");

	r = run(&spec, ARGV("-l", "a", "web", "--list", "b,c", "--lists", "d"),
		&c, &res);
	CHECK(r == OPTS_OK && c.list && !strcmp(c.list, "a,b,c,d"),
	      "a list joins every occurrence, old spellings too: '%s'",
	      c.list ? c.list : "(null)");
	opts_free(&spec, &c);
	CHECK(!c.list, "opts_free clears the list");

	r = run(&spec, ARGV("--cou", "4", "web", "-n", "5"), &c, &res);
	CHECK(r == OPTS_OK && c.count == 5, "abbreviated, and the last wins: "
	      "%d %llu", r, (unsigned long long)c.count);

	r = run(&spec, ARGV("--", "--flag"), &c, &res);
	CHECK(r == OPTS_OK && !c.flag && !strcmp(c.name, "--flag"),
	      "after --, an argument: %d '%s'", r, res.err);

	r = run(&spec, ARGV("--even", "ab", "x"), &c, &res);
	CHECK(r == OPTS_OK && !strcmp(c.custom, "ab"), "custom: %d", r);

	r = run(&spec, ARGV("--bogus", "--help"), &c, &res);
	CHECK(r == -EINVAL, "an error before --help is an error: %d", r);
	r = run(&spec, ARGV("--help", "--bogus"), &c, &res);
	CHECK(r == OPTS_HELP, "--help stops at once: %d", r);
	r = run(&spec, ARGV("-V"), &c, &res);
	CHECK(r == OPTS_VERSION, "-V: %d", r);
}

static void test_errors(void)
{
	static const struct {
		const struct opts_spec *spec;
		const char *args[6];
		const char *err;
	} cases[] = {
		{ &spec, { "web", "--count", "0" },
		  "invalid --count '0': expected a whole number from 1 to 10" },
		{ &spec, { "web", "-n", "11" },
		  "invalid --count '11': expected a whole number from 1 to 10" },
		{ &spec, { "web", "-n", "-1" },
		  "invalid --count '-1': expected a whole number from 1 to 10" },
		{ &spec, { "web", "--ttl", "1e3" },
		  "invalid --ttl '1e3': expected seconds from 1 to 100" },
		{ &spec, { "web", "--port", "65536" },
		  "invalid --port '65536': expected a whole number from 1 to 65535" },
		{ &spec, { "web", "--secs", "0" },
		  "invalid --secs '0': expected seconds above 0, at most 10" },
		{ &spec, { "web", "--secs", "nan" },
		  "invalid --secs 'nan': expected seconds above 0, at most 10" },
		{ &spec, { "web", "--secs", "1s" },
		  "invalid --secs '1s': expected seconds above 0, at most 10" },
		{ &spec, { "web", "-m", "d" },
		  "invalid --mode 'd': expected a, b or c" },
		{ &spec, { "web", "--addr", "192.0.2.1" },
		  "invalid --addr '192.0.2.1': expected HOST:PORT or [IPV6]:PORT, "
		  "e.g. 127.0.0.1:1" },
		{ &spec, { "web", "--id", "" },
		  "invalid --id '': expected 1 to 4 characters" },
		{ &spec, { "web", "--id", "abcde" },
		  "invalid --id 'abcde': expected 1 to 4 characters" },
		{ &spec, { "web", "--even", "abc" },
		  "invalid even thing 'abc': expected an even length" },
		{ &spec, { "web", "--even", "ab", "--even", "cd" },
		  "option '--even' of 'thing' given twice: it takes one value" },
		{ &spec, { "web", "--bogus" }, "unknown option '--bogus' for 'thing'" },
		{ &spec, { "web", "--cuont", "3" }, "unknown option '--cuont' for "
		  "'thing'; did you mean '--count'?" },
		{ &spec, { "web", "--TTL", "3" }, "unknown option '--TTL' for "
		  "'thing'; did you mean '--ttl'?" },
		{ &spec, { "web", "-z" }, "unknown option '-z' for 'thing'" },
		{ &spec, { "web", "-fz" }, "unknown option '-z' for 'thing'" },
		{ &spec, { "web", "--count" },
		  "option '--count' of 'thing' needs a value" },
		{ &spec, { "web", "-n" }, "option '-n' of 'thing' needs a value" },
		{ &spec, { "web", "--flag=1" }, "option '--flag' takes no value" },
		{ &spec, { "--flag" }, "'thing' needs a NAME" },
		{ &spec, { "web", "more" }, "unexpected argument 'more' for 'thing'" },
		{ &plain, { "--bogus" }, "unknown option '--bogus'" },
		{ &plain, { "-n" }, "option '-n' needs a value" },
		{ &plain, { "-j" }, "unknown option '-j'" },
		{ &plain, { }, "missing a NAME" },
		{ &plain, { "web", "more" }, "unexpected argument 'more'" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[8] = { "thing" };
		struct opts_result res;
		struct cfg c;
		int r;

		for (int k = 0; k < 6 && cases[i].args[k]; k++)
			args[k + 1] = cases[i].args[k];
		r = run(cases[i].spec, args, &c, &res);
		CHECK(r == -EINVAL && !strcmp(res.err, cases[i].err),
		      "case %zu: %d '%s', want '%s'", i, r, res.err, cases[i].err);
		opts_free(cases[i].spec, &c);
	}
}

/* A typo's likely meaning: the nearest name, near enough, and no guess
 * between two equally near or for a word nothing like any. */
static void test_suggest(void)
{
	static const char *const names[] = {
		"tenant", "instance", "apply", "status", "stats", "top",
		"detach", "version", "burst", "rate", "web", NULL,
	};
	static const struct {
		const char *word, *want;
	} cases[] = {
		{ "stat", "stats" },		/* one missing */
		{ "brust", "burst" },		/* two neighbours swapped */
		{ "Web", "web" },		/* case */
		{ "WEB", "web" },
		{ "verison", "version" },
		{ "tenat", "tenant" },
		{ "detahc", "detach" },
		{ "stauts", NULL },		/* status and stats: one each */
		{ "xyz", NULL },
		{ "to", "top" },
		{ "op", "top" },
		{ "rt", NULL },			/* short words: one edit at most */
		{ "instanceses", NULL },	/* three away */
		{ "", NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *got = opts_suggest(cases[i].word, names,
					       sizeof(names) / sizeof(names[0]));

		CHECK((!got && !cases[i].want) ||
		      (got && cases[i].want && !strcmp(got, cases[i].want)),
		      "'%s': got '%s', want '%s'", cases[i].word, got ? got : "(none)",
		      cases[i].want ? cases[i].want : "(none)");
	}
}

/* The same one name at a time, over 20,000 tenant-like names: a case
 * difference or a swap of two neighbours deep in a long name is found, a
 * word equally near ten names is not guessed, and the search stops early
 * on names that are far (a third edit found late is still refused). */
static void test_near(void)
{
	static char names[20000][24];
	static const struct {
		const char *word, *want;
	} cases[] = {
		{ "Tenant-04242", "tenant-04242" },
		{ "tenant-04224x", "tenant-04224" },	/* others: two away */
		{ "tenatn-17001", "tenant-17001" },
		{ "tenant-0424", NULL },	/* 04240 to 04249: one each */
		{ "tnant-1700", NULL },
		{ "tenant-19999-abc", NULL },	/* four characters longer */
		{ "TENANT-00000", "tenant-00000" },
	};

	for (int i = 0; i < 20000; i++)
		snprintf(names[i], sizeof(names[i]), "tenant-%05d", i);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct opts_near near;
		const char *got;

		opts_near_init(&near, cases[c].word);
		for (int i = 0; i < 20000; i++)
			opts_near_offer(&near, names[i]);
		got = opts_near_best(&near);
		CHECK((!got && !cases[c].want) ||
		      (got && cases[c].want && !strcmp(got, cases[c].want)),
		      "'%s': got '%s', want '%s'", cases[c].word,
		      got ? got : "(none)", cases[c].want ? cases[c].want : "(none)");
	}
}

static char *usage_text(const struct opts_spec *s)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	opts_usage(s, f);
	fclose(f);
	return buf;
}

static void test_usage(void)
{
	static const char *const want[] = {
		"Usage: prog [--json] thing NAME [--flag] [--count N] [--port PORT] [--ttl S]\n"
		"                           [--secs S] [--mode a|b|c] [--addr HOST:PORT]\n"
		"                           [--id ID] [--list X[,X...]] [--even E]\n",
		"\nDoes a thing.\n\n  NAME                 what to work on\n",
		"  -f, --flag           a flag\n",
		"  -n, --count N        how many (1 to 10, default 3)\n",
		"      --ttl S          a time (1 to 100, default 5)\n",
		"  -s, --secs S         a decimal time (above 0, at most 10)\n",
		"  -m, --mode a|b|c     how (a, b or c; default a)\n",
		"      --addr HOST:PORT where (default 127.0.0.1:1)\n",
		"      --id ID          who (default: the host name)\n",
		"      --even E         a long help line that goes on and on so that it has to\n"
		"                       be wrapped at least once, and maybe twice, before it\n"
		"                       ends\n",
		"  -h, --help           this help\n\nExit status: 0.\n",
	};
	char *text = usage_text(&spec), *line;

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		CHECK(strstr(text, want[i]), "usage lacks '%s':\n%s", want[i], text);
	CHECK(!strstr(text, "--lists") && !strstr(text, "--json  ") &&
	      !strstr(text, "--version"), "hidden and common rows are not listed");
	for (line = text; line && *line; ) {
		char *nl = strchr(line, '\n');
		size_t n = nl ? (size_t)(nl - line) : strlen(line);

		CHECK(n < 80 && (n == 0 || line[n - 1] != ' '),
		      "line too long or with a trailing space: '%.*s'", (int)n, line);
		line = nl ? nl + 1 : NULL;
	}
	free(text);
}

static int cmd_nop(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static void test_commands(void)
{
	static const struct opts_command subs[] = {
		{ "set", "NAME [options]", "create or update", cmd_nop, NULL },
		{ "get", "NAME", "show one", cmd_nop, NULL },
		{ "show", NULL, NULL, cmd_nop, NULL },
		{ "del", "NAME", "delete one", cmd_nop, NULL },
		{ NULL, NULL, NULL, NULL, NULL },
	};
	static const struct opts_command cmds[] = {
		{ "tenant", NULL, "tenants", NULL, subs },
		{ "a-rather-long-command", "ARG", "overflows the column", cmd_nop,
		  NULL },
		{ "status", NULL, "how it is", cmd_nop, NULL },
		{ NULL, NULL, NULL, NULL, NULL },
	};
	static const struct opt top_opts[] = {
		{ .kind = OPT_SECTION, .help = "Options:" },
		{ "level", 'l', OPT_ENUM, AT(mode), .arg = "LEVEL",
		  .values = modes, .help = "how much" },
		{ .kind = OPT_END },
	};
	static const struct opt top_common[] = {
		{ "json", 'j', OPT_FLAG, OPT_AT(struct common, json),
		  .help = "JSON" },
		{ .kind = OPT_END },
	};
	const struct opts_spec top = {
		.prog = "prog",
		.commands = cmds,
		.opts = top_opts,
		.common = top_common,
		.common_cfg = &common,
		.list_common = true,
	};
	char names[128], *buf = NULL, *text;
	size_t len = 0;
	FILE *f;

	CHECK(opts_command_find(subs, "show") == &subs[2] &&
	      !opts_command_find(subs, "sho") && !opts_command_find(subs, ""),
	      "find");
	opts_command_names(subs, names, sizeof(names));
	CHECK(!strcmp(names, "set, get or del"), "names: '%s'", names);
	opts_command_names(cmds, names, sizeof(names));
	CHECK(!strcmp(names, "tenant, a-rather-long-command or status"),
	      "names: '%s'", names);

	f = open_memstream(&buf, &len);
	opts_command_list(cmds, 0, f);
	fclose(f);
	CHECK(!strcmp(buf,
		      "  tenant set NAME [options]\n"
		      "                       create or update\n"
		      "  tenant get NAME      show one\n"
		      "  tenant del NAME      delete one\n"
		      "  a-rather-long-command ARG\n"
		      "                       overflows the column\n"
		      "  status               how it is\n"), "list:\n%s", buf);
	free(buf);

	/* a program's usage: its commands, its options, then the common ones;
	 * an enum's values in the synopsis, its name in the list */
	text = usage_text(&top);
	CHECK(!strcmp(text,
		      "Usage: prog [--level a|b|c]\n"
		      "\nCommands:\n"
		      "  tenant set NAME [options]\n"
		      "                       create or update\n"
		      "  tenant get NAME      show one\n"
		      "  tenant del NAME      delete one\n"
		      "  a-rather-long-command ARG\n"
		      "                       overflows the column\n"
		      "  status               how it is\n"
		      "\nOptions:\n"
		      "  -l, --level LEVEL    how much (a, b or c)\n"
		      "  -j, --json           JSON\n"), "usage:\n%s", text);
	free(text);
}

int main(void)
{
	CHECK_RUN(test_values);
	CHECK_RUN(test_errors);
	CHECK_RUN(test_suggest);
	CHECK_RUN(test_near);
	CHECK_RUN(test_usage);
	CHECK_RUN(test_commands);
	return check_exit();
}
