/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl status, stats, top, detach and version: looking at the agent and the
 * traffic it limits, and taking an interface out of its hands.
 */
#include <errno.h>
#include <math.h>
#include <net/if.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "policy_opts.h"
#include "rlctl.h"
#include "rlgate.h"

static const struct opts_spec status_spec = {
	RLCTL_CMD("status"),
	.doc =
"Show rlagent's version, uptime, mode, the interfaces it is attached to\n"
"(with the attach mode: native, skb or tc) and the number of tenants.\n",
};

struct stats_args {
	char name[POLICY_NAME_MAX + 1];
	char *glob;
	char after[POLICY_NAME_MAX + 1];
	uint64_t limit;
	uint64_t top;
	uint64_t sources;
	bool wide;
};

static const struct opts_spec stats_spec = {
	RLCTL_CMD("stats"),
	.doc =
"Per-tenant counters beside each tenant's limit (RATE,BURST): admit and\n"
"deny rates per second over the last 3 to 4 seconds (the window is shown),\n"
"connections admitted and denied, tokens left, and where some tenant has\n"
"them would-deny (shadow mode), retransmitted SYNs not charged again,\n"
"unparsed packets and RSTs sent, by tenant name (byte order).  NAME limits the output to one tenant, --name to those whose\n"
"name matches, --after and --limit to a page of them, --top to the\n"
"busiest.\n",
	.opts = (const struct opt[]){
		{ "NAME", 0, OPT_CUSTOM, OPT_POS | OPT_OPTIONAL,
		  OPT_AT(struct stats_args, name), .parse = policy_opt_name },
		{ "name", 0, OPT_STRING, OPT_AT(struct stats_args, glob),
		  .arg = "GLOB", .min = 1, .max = 256,
		  .help = "only tenants whose name matches the shell pattern GLOB" },
		{ "after", 0, OPT_CUSTOM, OPT_AT(struct stats_args, after),
		  .arg = "NAME", .parse = policy_opt_name,
		  .help = "only tenants whose name sorts after NAME (byte order): "
			  "the last NAME of one page gives the next" },
		{ "limit", 0, OPT_U64, OPT_AT(struct stats_args, limit),
		  .arg = "N", .min = 1, .max = 1048576, .def_doc = "all",
		  .help = "at most the first N of them by name" },
		{ "top", 0, OPT_U64, OPT_AT(struct stats_args, top),
		  .arg = "N", .min = 1, .max = 1048576, .def_doc = "all",
		  .help = "only the N busiest (admit and deny rates), busiest first" },
		{ "sources", 0, OPT_U64, OPT_AT(struct stats_args, sources),
		  .arg = "N", .min = 1, .max = RL_SRC_TOP,
		  .help = "then the N sources refused most by their per-source "
			  "limit (of NAME, or of every tenant), most first" },
		{ "wide", 'w', OPT_FLAG, OPT_AT(struct stats_args, wide),
		  .help = "every column, whatever the width (default: within "
			  "100 columns, counters that are 0 everywhere left out)" },
		{ .kind = OPT_END },
	},
};

struct top_args {
	double interval;
	uint64_t iterations;
	char *glob;
	uint64_t top;
	bool wide;
};

static const struct opts_spec top_spec = {
	RLCTL_CMD("top"),
	.doc =
"A live view of per-tenant rates, busiest first, refreshed every second.\n"
"Quit with q or Ctrl-C.  With --json, one line of JSON per refresh.\n"
"--name and --top choose the tenants as for stats, in the agent: with\n"
"100,000 tenants only those are read and sent each time.\n",
	.opts = (const struct opt[]){
		{ "interval", 'i', OPT_NUMBER, OPT_AT(struct top_args, interval),
		  .arg = "S", .lo = 0.1, .hi = 3600, .def = "1", .expect = "seconds",
		  .help = "seconds between refreshes" },
		{ "iterations", 'n', OPT_U64, OPT_AT(struct top_args, iterations),
		  .arg = "N", .min = 1, .max = 1000000000, .def_doc = "run until quit",
		  .help = "stop after N refreshes" },
		{ "name", 0, OPT_STRING, OPT_AT(struct top_args, glob),
		  .arg = "GLOB", .min = 1, .max = 256,
		  .help = "only tenants whose name matches the shell pattern GLOB" },
		{ "top", 0, OPT_U64, OPT_AT(struct top_args, top),
		  .arg = "N", .min = 1, .max = 1048576, .def_doc = "all",
		  .help = "only the N busiest (admit and deny rates)" },
		{ "wide", 'w', OPT_FLAG, OPT_AT(struct top_args, wide),
		  .help = "every column, whatever the width (default: within "
			  "100 columns)" },
		{ .kind = OPT_END },
	},
};

struct detach_args {
	const char *ifname;
};

static int opt_ifname(const char *s, void *dest, char *err, size_t len)
{
	if (!*s || strlen(s) >= IF_NAMESIZE || strchr(s, '/') ||
	    strpbrk(s, " \t\n:") || !strcmp(s, ".") || !strcmp(s, "..")) {
		snprintf(err, len, "invalid interface name '%.64s': expected "
			 "1-%d characters without '/', ':' or spaces (e.g. eth0)",
			 s, IF_NAMESIZE - 1);
		return -EINVAL;
	}
	*(const char **)dest = s;
	return 0;
}

static const struct opts_spec detach_spec = {
	RLCTL_CMD("detach"),
	.doc =
"Detach rlgate's program from network interface IF: its new connections\n"
"are no longer limited.  When the last interface is detached, rlagent\n"
"removes its pins and exits.\n",
	.opts = (const struct opt[]){
		{ "IF", 0, OPT_CUSTOM, OPT_POS, OPT_AT(struct detach_args, ifname),
		  .expect = "an interface IF", .parse = opt_ifname },
		{ .kind = OPT_END },
	},
};

static const struct opts_spec version_spec = {
	RLCTL_CMD("version"),
	.doc = "Print rlctl's version and, if it can be reached, rlagent's.\n",
};

static void format_uptime(long long s, char *buf, size_t len)
{
	if (s < 0)
		snprintf(buf, len, "?");
	else if (s >= 86400)
		snprintf(buf, len, "%lldd %lldh %lldm", s / 86400,
			 s % 86400 / 3600, s % 3600 / 60);
	else if (s >= 3600)
		snprintf(buf, len, "%lldh %lldm %llds", s / 3600, s % 3600 / 60,
			 s % 60);
	else if (s >= 60)
		snprintf(buf, len, "%lldm %llds", s / 60, s % 60);
	else
		snprintf(buf, len, "%llds", s);
}

/* The preload pool's part of the status: the processes the library runs
 * in, and whether it governs their accepts. */
static void print_preload(json_t *p)
{
	json_t *procs = json_object_get(p, "processes"), *v;
	size_t i;

	printf("preload:     %s, %zu process(es)\n",
	       json_string_value(json_object_get(p, "pool")) ?: "?",
	       json_array_size(procs));
	if (json_integer_value(json_object_get(p, "other_layout")))
		printf("             %" JSON_INTEGER_FORMAT " process(es) found a "
		       "pool of another layout (library and agent of different "
		       "versions) and limit nothing\n",
		       json_integer_value(json_object_get(p, "other_layout")));
	if (json_integer_value(json_object_get(p, "table_full")))
		printf("             %" JSON_INTEGER_FORMAT " process(es) found "
		       "the process table full (they are limited, not listed)\n",
		       json_integer_value(json_object_get(p, "table_full")));
	if (json_integer_value(json_object_get(p, "remade")) ||
	    json_string_value(json_object_get(p, "lost")))
		printf("             pool %s %" JSON_INTEGER_FORMAT " s ago (a "
		       "process of its group?): made anew %" JSON_INTEGER_FORMAT
		       " time(s)%s\n",
		       json_string_value(json_object_get(p, "lost")) ?: "lost",
		       json_integer_value(json_object_get(p, "lost_s")),
		       json_integer_value(json_object_get(p, "remade")),
		       json_integer_value(json_object_get(p, "remade")) ? "" :
		       "; not yet, the agent tries again every second");
	if (json_integer_value(json_object_get(p, "forged_tokens")))
		printf("             %" JSON_INTEGER_FORMAT " leased token(s) "
		       "written into the pool by a process of its group, beyond "
		       "what the agent gave it: taken out (the log names the "
		       "tenants)\n",
		       json_integer_value(json_object_get(p, "forged_tokens")));
	if (json_array_size(procs)) {
		printf("  %8s  %-16s  %-13s  %10s  %10s\n", "PID", "NAME", "STATE",
		       "ADMITTED", "DENIED");
		json_array_foreach(procs, i, v)
			printf("  %8" JSON_INTEGER_FORMAT "%s %-16s  %-13s  %10"
			       JSON_INTEGER_FORMAT "  %10" JSON_INTEGER_FORMAT "\n",
			       json_integer_value(json_object_get(v, "pid")),
			       json_is_true(json_object_get(v, "other_pid_namespace")) ?
			       "*" : " ",
			       json_string_value(json_object_get(v, "name")) ?: "?",
			       json_string_value(json_object_get(v, "state")) ?: "?",
			       json_integer_value(json_object_get(v, "admitted")),
			       json_integer_value(json_object_get(v, "denied")));
		printf("  (* a pid of another pid namespace: a container's)\n");
	}
	procs = json_object_get(p, "ungoverned");
	if (!json_array_size(procs))
		return;
	printf("not governed (listening on TCP here without the library):\n");
	json_array_foreach(procs, i, v)
		printf("  %8" JSON_INTEGER_FORMAT "  %-16s  %s\n",
		       json_integer_value(json_object_get(v, "pid")),
		       json_string_value(json_object_get(v, "name")) ?: "?",
		       json_string_value(json_object_get(v, "state")) ?: "?");
}

/* Below this many tenants the fixed maps (the classifier, the flow cache,
 * conns: tens of MiB) make a per-tenant figure meaningless. */
#define MEMORY_PER_TENANT_FROM	1000

/* One figure of the memory line: MiB, and per tenant where it means
 * something. */
static void print_mib(const char *what, json_t *m, const char *key,
		      const char *after, const char *per_key, bool per)
{
	printf("%s %.1f MiB%s", what,
	       (double)json_integer_value(json_object_get(m, key)) / 1048576.0,
	       after);
	if (per && json_object_get(m, per_key))
		printf(" (%" JSON_INTEGER_FORMAT " bytes per tenant)",
		       json_integer_value(json_object_get(m, per_key)));
}

/* The memory line of the status: the kernel's maps, the agent's resident
 * set and its own part of it, per tenant only from MEMORY_PER_TENANT_FROM
 * tenants on (--json has the figures whenever there are tenants). */
static void print_memory(json_t *m, json_int_t tenants)
{
	bool per = tenants >= MEMORY_PER_TENANT_FROM;

	print_mib("memory:      kernel maps", m, "kernel_map_bytes", "",
		  "kernel_bytes_per_tenant", per);
	print_mib(", agent", m, "agent_rss_bytes", " resident",
		  "agent_bytes_per_tenant", per);
	/* an older agent does not say */
	if (json_object_get(m, "agent_anon_bytes"))
		print_mib(",", m, "agent_anon_bytes", " of it its own",
			  "agent_anon_bytes_per_tenant", per);
	putchar('\n');
	/* an older agent does not say */
	if (json_integer_value(json_object_get(m, "rule_tables_max")) > 0) {
		json_int_t used = json_integer_value(json_object_get(m, "rule_tables"));
		json_int_t max = json_integer_value(json_object_get(m, "rule_tables_max"));

		printf("rules:       %" JSON_INTEGER_FORMAT " of %"
		       JSON_INTEGER_FORMAT " tables (%d%%; --rule-memory %"
		       JSON_INTEGER_FORMAT " MiB)\n", used, max,
		       (int)(used * 100 / max), max / 512);
	}
}

/* Overload shedding (rlagent --shed-at), when on: the fullest listener's
 * accept queue against the mark, and what the tenants are held to. */
static void print_shed(json_t *v)
{
	json_t *l = json_object_get(v, "listener");
	json_int_t len = json_integer_value(json_object_get(l, "queue"));
	json_int_t max = json_integer_value(json_object_get(l, "backlog"));

	if (!json_is_object(v))
		return;
	printf("shed:        at %" JSON_INTEGER_FORMAT "%% of the accept queue; ",
	       json_integer_value(json_object_get(v, "mark_pct")));
	if (!max)
		printf("no listener%s\n", json_is_integer(json_object_get(v, "port")) ?
		       " on --shed-port" : "");
	else if (json_is_true(json_object_get(v, "shedding")))
		printf("port %" JSON_INTEGER_FORMAT " at %" JSON_INTEGER_FORMAT
		       " of %" JSON_INTEGER_FORMAT ", SHEDDING: tenants held to "
		       "%.0f/s in all (the server accepts %.0f/s)\n",
		       json_integer_value(json_object_get(l, "port")), len, max,
		       json_number_value(json_object_get(v, "budget")),
		       json_number_value(json_object_get(v, "accept_rate")));
	else
		printf("port %" JSON_INTEGER_FORMAT " at %" JSON_INTEGER_FORMAT
		       " of %" JSON_INTEGER_FORMAT ", not shedding\n",
		       json_integer_value(json_object_get(l, "port")), len, max);
}

int cmd_status(int argc, char **argv)
{
	struct opts_result res;
	json_t *reply, *ifs, *v;
	char up[64];
	size_t i;
	int ret = rlctl_parse(&status_spec, argc, argv, NULL, &res);

	if (ret != RLCTL_CONTINUE)
		return ret;
	ret = rlctl_call(json_pack("{s:s}", "cmd", "status"), &reply);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	if (rlctl.json) {
		rlctl_print_json(reply);
		return RLCTL_EXIT_OK;
	}
	v = json_object_get(reply, "uptime_s");
	format_uptime(json_is_number(v) ? (long long)json_number_value(v) : -1,
		      up, sizeof(up));
	printf("rlagent:     %s, up %s\n",
	       json_string_value(json_object_get(reply, "version")) ?: "?", up);
	printf("mode:        %s\n",
	       json_string_value(json_object_get(reply, "mode")) ?: "?");
	printf("interfaces:  ");
	ifs = json_object_get(reply, "interfaces");
	if (!json_array_size(ifs))
		printf("none");
	json_array_foreach(ifs, i, v) {
		const char *name = json_string_value(json_object_get(v, "name"));
		const char *how = json_string_value(json_object_get(v, "attach"));

		printf("%s%s (%s)", i ? ", " : "", name ?: "?", how ?: "?");
	}
	printf("\n");
	/* an older agent does not say */
	json_array_foreach(ifs, i, v) {
		const char *w = json_string_value(json_object_get(v, "rst_warning"));

		if (w)
			printf("warning:     RSTs sent on %s %s reach clients: %s\n",
			       json_string_value(json_object_get(v, "name")) ?: "?",
			       strcmp(json_string_value(json_object_get(v, "rst")) ?: "",
				      "lost") == 0 ? "do not" : "may not", w);
	}
	printf("tenants:     %" JSON_INTEGER_FORMAT "\n",
	       json_integer_value(json_object_get(reply, "tenants")));
	rlctl_print_instance(json_object_get(reply, "instance"));
	if ((v = json_object_get(reply, "verify")) && json_is_object(v)) {
		json_int_t mode = json_integer_value(json_object_get(v,
						     "tcp_syncookies"));

		printf("verify:      %" JSON_INTEGER_FORMAT " tenant(s) with "
		       "syncookie, net.ipv4.tcp_syncookies %s%" JSON_INTEGER_FORMAT
		       ": %s\n", json_integer_value(json_object_get(v, "tenants")),
		       mode < 0 ? "unreadable " : "", mode,
		       json_is_true(json_object_get(v, "verified")) ?
		       "verified" : "not verified, their SYNs are charged");
	}
	print_shed(json_object_get(reply, "shed"));
	rlctl_print_src_table(json_object_get(reply, "per_source_table"));
	if ((v = json_object_get(reply, "memory")) && json_is_object(v))
		print_memory(v, json_integer_value(json_object_get(reply, "tenants")));
	if ((v = json_object_get(reply, "pin_dir")) && json_is_string(v))
		printf("pin dir:     %s\n", json_string_value(v));
	if ((v = json_object_get(reply, "state_dir")) && json_is_string(v))
		printf("state dir:   %s\n", json_string_value(v));
	if ((v = json_object_get(reply, "redis")) && json_is_object(v)) {
		printf("redis:       %s (%s)\n",
		       json_string_value(json_object_get(v, "address")) ?: "?",
		       json_string_value(json_object_get(v, "state")) ?: "?");
		printf("live agents: %" JSON_INTEGER_FORMAT "\n",
		       json_integer_value(json_object_get(reply, "live_agents")));
		if ((v = json_object_get(reply, "agent_id")) && json_is_string(v))
			printf("agent id:    %s%s\n", json_string_value(v),
			       json_is_true(json_object_get(reply, "agent_id_conflict")) ?
			       " (CONFLICT: another live agent uses this id; give each "
			       "host its own --agent-id)" : "");
		v = json_object_get(reply, "degraded_since");
		if (json_is_integer(v)) {
			time_t since = (time_t)json_integer_value(v);
			char when[64];
			struct tm tm;

			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z",
				 localtime_r(&since, &tm));
			printf("broker:      degraded since %s: %s\n", when,
			       json_string_value(json_object_get(reply,
					"degraded_reason")) ?: "?");
		} else {
			printf("broker:      %s\n",
			       json_string_value(json_object_get(reply, "broker")) ?: "?");
		}
	}
	if ((v = json_object_get(reply, "preload")) && json_is_object(v))
		print_preload(v);
	json_decref(reply);
	return RLCTL_EXIT_OK;
}

static void format_num(json_t *v, bool rate, char *buf, size_t len)
{
	if (json_is_integer(v) && !rate)
		snprintf(buf, len, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else if (json_is_number(v))
		snprintf(buf, len, "%.1f", json_number_value(v));
	else
		snprintf(buf, len, "-");
}

static double busy(json_t *s)
{
	return json_number_value(json_object_get(s, "admit_rate")) +
	       json_number_value(json_object_get(s, "deny_rate"));
}

static int by_rate(const void *a, const void *b)
{
	double x = busy(*(json_t *const *)a), y = busy(*(json_t *const *)b);

	if (x != y)
		return x < y ? 1 : -1;
	return strcmp(json_string_value(json_object_get(*(json_t *const *)a,
							"tenant")) ?: "",
		      json_string_value(json_object_get(*(json_t *const *)b,
							"tenant")) ?: "");
}

/* With a preload pool, each tenant's counts by enforcement point. */
static void print_points(json_t **rows, size_t n, int wname)
{
	bool any = false;

	for (size_t i = 0; i < n && !any; i++)
		any = json_array_size(json_object_get(rows[i], "points")) > 0;
	if (!any)
		return;
	printf("\n%-*s  %-8s  %12s  %12s  %12s  %12s  %9s\n", wname, "TENANT",
	       "POINT", "ADMITTED", "DENIED", "WOULD-DENY", "TOKENS", "IN-FLIGHT");
	for (size_t i = 0; i < n; i++) {
		json_t *pts = json_object_get(rows[i], "points"), *p;
		size_t k;

		json_array_foreach(pts, k, p) {
			json_t *c = json_object_get(p, "conns");
			char fl[24] = "-";

			/* capped tenants only: in flight / slots */
			if (c)
				snprintf(fl, sizeof(fl), "%" JSON_INTEGER_FORMAT
					 "/%" JSON_INTEGER_FORMAT,
					 json_integer_value(c),
					 json_integer_value(json_object_get(
						 p, "conn_slots")));
			printf("%-*s  %-8s  %12" JSON_INTEGER_FORMAT "  %12"
			       JSON_INTEGER_FORMAT "  %12" JSON_INTEGER_FORMAT
			       "  %12" JSON_INTEGER_FORMAT "  %9s\n", wname,
			       json_string_value(json_object_get(rows[i], "tenant")) ?: "?",
			       json_string_value(json_object_get(p, "point")) ?: "?",
			       json_integer_value(json_object_get(p, "admitted")),
			       json_integer_value(json_object_get(p, "denied")),
			       json_integer_value(json_object_get(p, "shadow_denied")),
			       json_integer_value(json_object_get(p, "tokens")), fl);
		}
	}
}

/* How wide a stats table may be unless --wide: what fits a terminal
 * beside another. */
#define STATS_COLUMNS	100

enum col_kind {
	COL_NUM,	/* an integer counter */
	COL_RATE,	/* per second, one decimal */
	COL_LIMIT,	/* RATE,BURST of the policy */
	COL_CONNS,	/* in flight / cap */
};

enum col_when {
	COL_ALWAYS,
	COL_NONZERO,	/* when some row has it above 0 */
	COL_PRESENT,	/* when some row has the key (caps, per-source, fleet) */
};

/* One cell of row as text. */
static void stats_cell(json_t *row, const char *key, enum col_kind kind,
		       char *buf, size_t len)
{
	json_t *v = json_object_get(row, key);

	switch (kind) {
	case COL_LIMIT:
		if (json_is_string(v))
			snprintf(buf, len, "%s,%" JSON_INTEGER_FORMAT,
				 json_string_value(v),
				 json_integer_value(json_object_get(row, "burst")));
		else
			snprintf(buf, len, "-");
		return;
	case COL_CONNS:
		if (json_is_integer(v))
			snprintf(buf, len, "%" JSON_INTEGER_FORMAT "/%"
				 JSON_INTEGER_FORMAT, json_integer_value(v),
				 json_integer_value(json_object_get(row, "max_conns")));
		else
			snprintf(buf, len, "-");
		return;
	default:
		/* the tokens of a tenant without a rate limit mean nothing */
		if (!strcmp(key, "tokens") && json_object_get(row, "rate") &&
		    !json_is_string(json_object_get(row, "rate")))
			snprintf(buf, len, "-");
		else
			format_num(v, kind == COL_RATE, buf, len);
	}
}

/*
 * The stats as a table: the limit beside the rates, each column as wide
 * as its widest cell, counters that are 0 for every tenant (would-deny,
 * retransmits, unparsed) and the features no tenant uses left out.  Unless
 * wide, it stays within STATS_COLUMNS by leaving out the least needed
 * columns first, and says which; then the window the rates are over.
 */
void rlctl_print_stats_table(json_t *stats, bool sort_by_rate, bool wide)
{
	/* in the order shown; drop: the order columns go in to fit (1 first,
	 * 0 never).  The bounds above the limit and the cap go last but for
	 * the tokens: they say what the limit is worth. */
	static const struct {
		const char *title, *key;
		enum col_kind kind;
		enum col_when when;
		int drop;
	} cols[] = {
		{ "LIMIT", "rate", COL_LIMIT, COL_ALWAYS, 0 },
		{ "ADMIT/S", "admit_rate", COL_RATE, COL_ALWAYS, 0 },
		{ "DENY/S", "deny_rate", COL_RATE, COL_ALWAYS, 0 },
		{ "ADMITTED", "admitted", COL_NUM, COL_ALWAYS, 0 },
		{ "DENIED", "denied", COL_NUM, COL_ALWAYS, 0 },
		{ "CONNS", "conns", COL_CONNS, COL_PRESENT, 0 },
		{ "SHED", "shed", COL_NUM, COL_PRESENT, 15 },
		{ "HELD/S", "shed_limit", COL_RATE, COL_PRESENT, 14 },
		{ "TOKENS", "tokens", COL_NUM, COL_ALWAYS, 13 },
		{ "WOULD-DENY", "shadow_denied", COL_NUM, COL_NONZERO, 10 },
		{ "OVERSHOOT", "overshoot_bound", COL_NUM, COL_PRESENT, 12 },
		{ "CONN-DENIED", "conn_denied", COL_NUM, COL_PRESENT, 9 },
		{ "DENIED-SRC", "denied_source", COL_NUM, COL_PRESENT, 8 },
		{ "UNPARSED", "unparsed", COL_NUM, COL_NONZERO, 7 },
		{ "RETRANS", "retransmits", COL_NUM, COL_NONZERO, 6 },
		{ "OVERFLOW", "source_overflow", COL_NUM, COL_PRESENT, 5 },
		{ "CONN-BOUND", "conn_overshoot_bound", COL_NUM, COL_PRESENT, 11 },
		{ "REDIS-CALLS", "redis_calls", COL_NUM, COL_PRESENT, 4 },
		{ "LEASED", "tokens_leased", COL_NUM, COL_PRESENT, 3 },
		{ "REFUNDED", "tokens_refunded", COL_NUM, COL_PRESENT, 2 },
		{ "RST-SENT", "rst_sent", COL_NUM, COL_NONZERO, 1 },
	};
	enum { NCOLS = sizeof(cols) / sizeof(cols[0]) };
	size_t n = json_array_size(stats), i;
	json_t **rows = calloc(n + 1, sizeof(*rows));
	int width[NCOLS], wname = 6, total;
	bool show[NCOLS];
	char buf[64], hidden[256] = "";
	double window = 0;

	if (!rows)
		return;
	for (i = 0; i < n; i++) {
		const char *name;

		rows[i] = json_array_get(stats, i);
		name = json_string_value(json_object_get(rows[i], "tenant"));
		if (name && (int)strlen(name) > wname)
			wname = (int)strlen(name);
		if (json_number_value(json_object_get(rows[i], "rate_window_s")) > window)
			window = json_number_value(json_object_get(rows[i],
								   "rate_window_s"));
	}
	total = wname;
	for (size_t c = 0; c < NCOLS; c++) {
		show[c] = cols[c].when == COL_ALWAYS || wide;
		width[c] = (int)strlen(cols[c].title);
		for (i = 0; i < n; i++) {
			json_t *v = json_object_get(rows[i], cols[c].key);

			if (cols[c].when == COL_PRESENT && v)
				show[c] = true;
			if (cols[c].when == COL_NONZERO &&
			    json_number_value(v) > 0)
				show[c] = true;
			stats_cell(rows[i], cols[c].key, cols[c].kind, buf, sizeof(buf));
			if ((int)strlen(buf) > width[c])
				width[c] = (int)strlen(buf);
		}
		if (show[c])
			total += 2 + width[c];
	}
	/* the least needed first, until it fits */
	for (int d = 1; !wide && total > STATS_COLUMNS && d <= NCOLS; d++)
		for (size_t c = 0; c < NCOLS; c++)
			if (show[c] && cols[c].drop == d) {
				show[c] = false;
				total -= 2 + width[c];
				snprintf(hidden + strlen(hidden),
					 sizeof(hidden) - strlen(hidden), "%s%s",
					 *hidden ? ", " : "", cols[c].title);
			}
	if (sort_by_rate)
		qsort(rows, n, sizeof(*rows), by_rate);
	printf("%-*s", wname, "TENANT");
	for (size_t c = 0; c < NCOLS; c++)
		if (show[c])
			printf("  %*s", width[c], cols[c].title);
	printf("\n");
	for (i = 0; i < n; i++) {
		printf("%-*s", wname, json_string_value(json_object_get(rows[i],
				"tenant")) ?: "?");
		for (size_t c = 0; c < NCOLS; c++) {
			if (!show[c])
				continue;
			stats_cell(rows[i], cols[c].key, cols[c].kind, buf, sizeof(buf));
			printf("  %*s", width[c], buf);
		}
		printf("\n");
	}
	/* an older agent does not say */
	if (window > 0)
		printf("LIMIT is RATE,BURST; ADMIT/S and DENY/S: admitted and "
		       "denied per second over the last %.1f s\n", window);
	if (*hidden) {
		int at = printf("not shown, to fit %d columns (--wide shows "
				"them):", STATS_COLUMNS);

		/* the names wrapped within the width too */
		for (char *w = strtok(hidden, " "); w; w = strtok(NULL, " ")) {
			if (at + 1 + (int)strlen(w) > STATS_COLUMNS) {
				printf("\n ");
				at = 1;
			}
			at += printf(" %s", w);
		}
		putchar('\n');
	}
	print_points(rows, n, wname);
	free(rows);
}

/* The stats array in place, busiest first. */
static void sort_busiest(json_t *stats)
{
	size_t n = json_array_size(stats);
	json_t **rows = calloc(n + 1, sizeof(*rows));

	if (!rows)
		return;
	for (size_t i = 0; i < n; i++)
		rows[i] = json_incref(json_array_get(stats, i));
	qsort(rows, n, sizeof(*rows), by_rate);
	json_array_clear(stats);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(stats, rows[i]);
	free(rows);
}

/* A stats request: the agent keeps the tenants matching glob (NULL: all)
 * and, with top, only the top busiest (rlctl_keep again is for older
 * agents). */
static json_t *stats_request(const char *glob, uint64_t top)
{
	json_t *req = json_pack("{s:s}", "cmd", "stats");

	if (req && glob)
		json_object_set_new(req, "match", json_string(glob));
	if (req && top)
		json_object_set_new(req, "top", json_integer((json_int_t)top));
	return req;
}

int cmd_stats(int argc, char **argv)
{
	struct stats_args args = { .name = "" };
	struct opts_result res;
	json_t *req, *reply, *stats;
	int ret;

	ret = rlctl_parse(&stats_spec, argc, argv, &args, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	if (args.top && args.limit)
		return rlctl_usage_error("stats", "--top and --limit exclude each "
					 "other: the busiest, or the first by name");
	req = stats_request(args.glob, args.top);
	if (req && args.name[0])
		json_object_set_new(req, "name", json_string(args.name));
	rlctl_page_request(req, args.after, args.limit);
	ret = rlctl_call_get(req, "stats", true, &reply, &stats);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	rlctl_keep(stats, "tenant", args.glob, args.after, args.limit);
	if (args.top) {
		sort_busiest(stats);
		rlctl_keep(stats, "tenant", NULL, NULL, args.top);
	}
	if (rlctl.json)
		rlctl_print_json(json_incref(stats));
	else if (json_array_size(stats) == 0)
		printf("no tenants\n");
	else
		rlctl_print_stats_table(stats, args.top != 0, args.wide);
	if (!rlctl.json && !args.name[0] &&
	    json_is_object(json_object_get(reply, "instance")))
		rlctl_print_instance(json_object_get(reply, "instance"));
	json_decref(reply);
	if (args.sources) {
		json_t *rows;

		ret = rlctl_sources(args.name, args.sources, &reply, &rows);
		if (ret != RLCTL_EXIT_OK)
			return ret;
		if (rlctl.json)
			rlctl_print_json(json_incref(rows));
		else
			rlctl_print_sources(rows);
		json_decref(reply);
	}
	return RLCTL_EXIT_OK;
}

static volatile sig_atomic_t top_stop;

static void on_signal(int sig)
{
	(void)sig;
	top_stop = 1;
}

static long long mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until deadline, returning early on q, Ctrl-C or a signal. */
static void top_wait(long long deadline, bool keys)
{
	while (!top_stop) {
		struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
		long long left = deadline - mono_ms();
		char c;

		if (left <= 0)
			return;
		if (poll(&pfd, keys ? 1 : 0, (int)left) <= 0)
			continue;
		if (read(STDIN_FILENO, &c, 1) != 1) {
			/* stdin closed: keep refreshing, stop reading it */
			keys = false;
			continue;
		}
		if (c == 'q' || c == 'Q' || c == 3)
			top_stop = 1;
	}
}

/* The sources refused most that top shows below the tenants. */
#define TOP_SOURCES	10

/* Whether a tenant of the stats has a per-source limit. */
static bool any_per_source(const json_t *stats)
{
	const json_t *r;
	size_t i;

	json_array_foreach(stats, i, r)
		if (json_object_get(r, "denied_source"))
			return true;
	return false;
}

int cmd_top(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };
	struct termios saved, raw;
	struct top_args args = { 0 };
	struct opts_result res;
	uint64_t done = 0;
	bool keys = false, clear;
	int ret;

	ret = rlctl_parse(&top_spec, argc, argv, &args, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	clear = !rlctl.json && isatty(STDOUT_FILENO);
	/* Without canonical mode a single q arrives at once; ISIG stays on so
	 * Ctrl-C is still a signal and still restores the terminal. */
	if (!rlctl.json && isatty(STDIN_FILENO) &&
	    tcgetattr(STDIN_FILENO, &saved) == 0) {
		raw = saved;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 1;
		raw.c_cc[VTIME] = 0;
		keys = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
	}

	while (!top_stop) {
		long long next = mono_ms() + (long long)(args.interval * 1000);
		json_t *reply, *stats, *sreply = NULL, *sources = NULL;
		char when[32];
		time_t now = time(NULL);

		ret = rlctl_call_get(stats_request(args.glob, args.top), "stats",
				     true, &reply, &stats);
		if (ret != RLCTL_EXIT_OK)
			break;
		/* an older agent sends every tenant */
		rlctl_keep(stats, "tenant", args.glob, NULL, 0);
		if (args.top) {
			sort_busiest(stats);
			rlctl_keep(stats, "tenant", NULL, NULL, args.top);
		}
		if (any_per_source(stats) &&
		    rlctl_sources(NULL, TOP_SOURCES, &sreply, &sources))
			sources = NULL;
		if (rlctl.json) {
			json_t *line = json_pack("{s:I, s:O}", "time",
						 (json_int_t)now, "stats", stats);

			if (sources)
				json_object_set(line, "sources", sources);
			json_dumpf(line, stdout, JSON_COMPACT | JSON_PRESERVE_ORDER);
			fputc('\n', stdout);
			json_decref(line);
		} else {
			strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
			if (clear)
				fputs("\033[H\033[2J", stdout);
			printf("rlgate top - %s - every %gs - %zu tenant%s%s\n\n",
			       when, args.interval, json_array_size(stats),
			       json_array_size(stats) == 1 ? "" : "s",
			       keys ? " - q to quit" : "");
			rlctl_print_stats_table(stats, true, args.wide);
			if (sources)
				rlctl_print_sources(sources);
		}
		fflush(stdout);
		json_decref(reply);
		json_decref(sreply);
		if (args.iterations && ++done >= args.iterations)
			break;
		top_wait(next, keys);
	}
	if (keys)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	return ret;
}

int cmd_detach(int argc, char **argv)
{
	struct detach_args args = { 0 };
	struct opts_result res;
	json_t *reply, *rem;
	const char *ifname;
	int ret;

	ret = rlctl_parse(&detach_spec, argc, argv, &args, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	ifname = args.ifname;
	ret = rlctl_call(json_pack("{s:s, s:s}", "cmd", "detach",
				   "iface", ifname), &reply);
	if (ret != RLCTL_EXIT_OK)
		return ret;
	if (rlctl.json) {
		json_object_set_new(reply, "detached", json_string(ifname));
		rlctl_print_json(reply);
		return RLCTL_EXIT_OK;
	}
	printf("detached from %s", ifname);
	rem = json_object_get(reply, "remaining");
	/* The protocol names the field but not its form: accept a count or a
	 * list of interface names. */
	if (json_is_integer(rem))
		printf("; %" JSON_INTEGER_FORMAT " interface%s still attached",
		       json_integer_value(rem),
		       json_integer_value(rem) == 1 ? "" : "s");
	else if (json_is_array(rem))
		printf("; %zu interface%s still attached",
		       json_array_size(rem), json_array_size(rem) == 1 ? "" : "s");
	if ((json_is_integer(rem) && json_integer_value(rem) == 0) ||
	    (json_is_array(rem) && json_array_size(rem) == 0))
		printf("; rlagent removed its pins and is exiting");
	printf("\n");
	json_decref(reply);
	return RLCTL_EXIT_OK;
}

int cmd_version(int argc, char **argv)
{
	struct ctl_client c;
	json_t *reply = NULL, *req;
	const char *agent = NULL;
	char why[CTL_CLIENT_ERR_MAX] = "";
	struct opts_result res;
	int ret = rlctl_parse(&version_spec, argc, argv, NULL, &res);

	if (ret != RLCTL_CONTINUE)
		return ret;
	/* The agent's version is a courtesy: a missing agent is no failure
	 * here, and waiting long for it would be. */
	if (ctl_client_connect(&c, rlctl.socket, 2000) == 0) {
		req = json_pack("{s:s}", "cmd", "version");
		if (ctl_client_request(&c, req, &reply) < 0)
			snprintf(why, sizeof(why), "%s", c.err);
		json_decref(req);
		agent = json_string_value(json_object_get(reply, "version"));
		if (!agent && !*why)
			snprintf(why, sizeof(why), "rlagent did not give a version");
	} else {
		snprintf(why, sizeof(why), "%s", c.err);
	}
	ctl_client_close(&c);
	if (rlctl.json) {
		rlctl_print_json(json_pack("{s:s, s:s?, s:s?}", "rlctl",
					   RLGATE_VERSION, "rlagent", agent,
					   "rlagent_error", *why ? why : NULL));
	} else {
		printf("rlctl %s\n", RLGATE_VERSION);
		if (agent)
			printf("rlagent %s\n", agent);
		else
			printf("rlagent: unknown (%s)\n", why);
	}
	json_decref(reply);
	return RLCTL_EXIT_OK;
}
