/* loadgen: command line.  Client mode opens TCP connections at a paced rate
 * across weighted targets and reports how each ended; --serve mode accepts
 * and closes connections.  Used by the lab, the e2e tests, demo and bench. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"
#include "opts.h"
#include "parse.h"

#define MAX_LISTEN 16
#define MAX_INFLIGHT_LIMIT 1000000u
#define DEFAULT_TIMEOUT_MS "500"

static bool json_mode;

static void __attribute__((format(printf, 1, 2))) fail_usage(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "Error: %s\nTry 'loadgen --help'.\n", msg);
	if (json_mode)
		report_error_json(msg);
	exit(2);
}

/* Every --serve address, in order. */
struct listen_list {
	struct lg_addr addr[MAX_LISTEN];
	size_t n;
};

static int parse_listen(const char *s, void *dest, char *err, size_t len)
{
	struct listen_list *l = dest;

	if (l->n == MAX_LISTEN) {
		snprintf(err, len, "too many --serve addresses: at most %d",
			 MAX_LISTEN);
		return -EINVAL;
	}
	if (addr_parse(s, true, &l->addr[l->n])) {
		snprintf(err, len, "invalid --serve address '%.64s': expected "
			 "A.B.C.D:PORT or [IPV6]:PORT", s);
		return -EINVAL;
	}
	l->n++;
	return 0;
}

struct cli {
	struct lg_client_opts client;
	const char *bind;
	const char *times;
	struct listen_list listen;
	int backlog;
	bool json;
};

#define CLI(field)	OPT_AT(struct cli, field)

static const struct opts_spec spec = {
	.prog = "loadgen",
	.synopsis =
"loadgen --rate N --duration SECONDS [OPTIONS] TARGET[@WEIGHT]...\n"
"       loadgen --serve ADDR:PORT [--serve ADDR:PORT]... [--duration SECONDS]",
	.doc =
"Opens new TCP connections at N per second (in total, split over the targets\n"
"by weight) for SECONDS, closes each at once with a RST, and reports per\n"
"target how many were attempted, connected, refused (answered with a RST),\n"
"timed out and failed otherwise, with connect latency percentiles.\n",
	.epilog = "Exit status: 0 done, 1 failure, 2 bad arguments.\n",
	.opts = (const struct opt[]){
		{ "TARGET", 0, OPT_STRING, OPT_POS | OPT_OPTIONAL | OPT_REST,
		  .help = "A.B.C.D:PORT or [IPV6]:PORT; @WEIGHT an integer from 1 "
			  "to 1000000 (default 1)" },
		{ "rate", 'r', OPT_NUMBER, OPT_ABOVE, CLI(client.rate),
		  .arg = "N", .lo = 0, .hi = 1e7,
		  .expect = "connections per second",
		  .help = "connections per second over all targets" },
		{ "duration", 'd', OPT_NUMBER, OPT_ABOVE, CLI(client.duration_s),
		  .arg = "S", .lo = 0, .hi = 86400 * 7, .expect = "seconds",
		  .help = "seconds to open connections for, decimals ok" },
		{ "timeout", 't', OPT_U64, CLI(client.timeout_ms), .arg = "MS",
		  .min = 1, .max = 600000, .def = DEFAULT_TIMEOUT_MS,
		  .expect = "milliseconds",
		  .help = "connect timeout; below the kernel's 1 s SYN retransmit, "
			  "so a dropped SYN counts as timed out" },
		{ "max-inflight", 'm', OPT_U64, CLI(client.max_inflight),
		  .arg = "N", .min = 1, .max = MAX_INFLIGHT_LIMIT,
		  .def_doc = "enough for rate x timeout, plus 64",
		  .help = "connections pending at once; when reached, attempts "
			  "wait" },
		{ "bind", 'b', OPT_STRING, CLI(bind), .arg = "ADDR",
		  .help = "source address for every connection" },
		{ "times", 0, OPT_STRING, CLI(times), .arg = "FILE",
		  .help = "write when each attempt started to FILE, one a line: "
			  "CLOCK_MONOTONIC nanoseconds, the same clock in every "
			  "network namespace, so runs side by side can be merged" },
		{ "json", 'j', OPT_FLAG, CLI(json),
		  .help = "print only JSON on stdout" },
		{ "serve", 's', OPT_CUSTOM, CLI(listen), .arg = "ADDR:PORT",
		  .parse = parse_listen,
		  .help = "server mode: accept and close connections on ADDR:PORT "
			  "until SIGINT/SIGTERM or --duration; prints 'loadgen: "
			  "listening on ADDR:PORT' on stderr when ready and the "
			  "number accepted at exit (may repeat)" },
		{ "backlog", 0, OPT_U64, CLI(backlog), .arg = "N", .min = 1,
		  .max = INT_MAX, .def = "4096",
		  .help = "listen backlog in server mode" },
		{ "help", 'h', OPT_HELP, .help = "this help" },
		{ .kind = OPT_END },
	},
};

static void parse_target(const char *arg, struct lg_target *t)
{
	char buf[256];
	char *at;

	if (strlen(arg) >= sizeof(buf))
		fail_usage("invalid target '%s': too long", arg);
	strcpy(buf, arg);
	memset(t, 0, sizeof(*t));
	t->weight = 1;
	at = strrchr(buf, '@');
	if (at) {
		uint64_t w;

		*at = '\0';
		if (parse_u64(at + 1, 1, 1000000, &w) < 0)
			fail_usage("invalid weight in target '%s': expected an integer from 1 to 1000000",
				   arg);
		t->weight = (unsigned int)w;
	}
	if (addr_parse(buf, true, &t->addr))
		fail_usage("invalid target '%s': expected A.B.C.D:PORT or [IPV6]:PORT, optionally @WEIGHT",
			   arg);
}

static void on_signal(int sig)
{
	(void)sig;
	lg_stop = 1;
}

/* No SA_RESTART: the signal must break epoll_wait so the run winds down. */
static void install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static void fail_run(const char *msg)
{
	fprintf(stderr, "Error: %s\n", msg);
	if (json_mode)
		report_error_json(msg);
}

static int run_serve(struct lg_addr *listen, size_t n, double duration, int backlog)
{
	struct lg_serve_opts so = {
		.listen = listen, .n_listen = n, .duration_s = duration,
		.backlog = backlog,
	};
	struct lg_serve_result res;
	int ret;

	ret = serve_run(&so, &res);
	if (ret) {
		if (json_mode)
			report_error_json(strerror(-ret));
		return 1;
	}
	report_serve(&res, json_mode);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	struct cli c = { .client = { 0 } };
	struct lg_client_opts o;
	struct lg_client_result res;
	struct opts_result args;
	struct lg_target *targets;
	size_t n;
	int ret;
	char msg[512];

	/* --json changes how errors are printed, so find it before parsing. */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "-j"))
			json_mode = true;

	ret = opts_parse(&spec, argc, argv, &c, &args);
	if (ret == OPTS_HELP) {
		opts_usage(&spec, stdout);
		return 0;
	}
	if (ret < 0)
		fail_usage("%s", args.err);
	o = c.client;

	install_signals();

	if (c.listen.n) {
		if (opts_given(&args, "rate") || args.n_rest || c.bind)
			fail_usage("--serve takes no --rate, --bind or targets");
		return run_serve(c.listen.addr, c.listen.n, o.duration_s,
				 c.backlog);
	}

	if (!opts_given(&args, "rate"))
		fail_usage("missing --rate N");
	if (!opts_given(&args, "duration"))
		fail_usage("missing --duration SECONDS");
	if (!args.n_rest)
		fail_usage("missing TARGET: at least one A.B.C.D:PORT or [IPV6]:PORT");
	if (llround(o.rate * o.duration_s) < 1)
		fail_usage("rate %g x duration %g makes no connection at all", o.rate,
			   o.duration_s);

	n = (size_t)args.n_rest;
	targets = calloc(n, sizeof(*targets));
	if (!targets) {
		fail_run("couldn't allocate targets on 'loadgen': Cannot allocate memory");
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		parse_target(args.rest[i], &targets[i]);

	if (c.bind) {
		if (addr_parse(c.bind, false, &o.bind))
			fail_usage("invalid --bind address '%s': expected an IPv4 or IPv6 address",
				   c.bind);
		o.have_bind = true;
		for (size_t i = 0; i < n; i++)
			if (targets[i].addr.ss.ss_family != o.bind.ss.ss_family)
				fail_usage("target '%s' and --bind '%s' are not the same address family",
					   targets[i].addr.label, c.bind);
	}

	if (!o.max_inflight) {
		double need = ceil(o.rate * o.timeout_ms / 1000.0) + 64;

		o.max_inflight = need > MAX_INFLIGHT_LIMIT ? MAX_INFLIGHT_LIMIT
							    : (unsigned int)need;
	}
	ret = raise_nofile((unsigned long)o.max_inflight + 64);
	if (ret) {
		snprintf(msg, sizeof(msg),
			 "couldn't raise open file limit to %u on 'RLIMIT_NOFILE': %s (try a smaller --max-inflight)",
			 o.max_inflight + 64, strerror(-ret));
		fail_run(msg);
		return 1;
	}

	if (c.times) {
		o.times = fopen(c.times, "we");
		if (!o.times) {
			snprintf(msg, sizeof(msg), "couldn't open --times file '%.256s': %s",
				 c.times, strerror(errno));
			fail_run(msg);
			return 1;
		}
	}
	ret = client_run(&o, targets, n, &res);
	if (o.times && (ferror(o.times) | fclose(o.times)) && !ret) {
		snprintf(msg, sizeof(msg), "couldn't write --times file '%.256s': %s",
			 c.times, strerror(errno ? errno : EIO));
		fail_run(msg);
		return 1;
	}
	if (ret) {
		snprintf(msg, sizeof(msg), "couldn't run the load on 'loadgen': %s",
			 strerror(-ret));
		fail_run(msg);
		return 1;
	}
	if (json_mode) {
		ret = report_json(&o, targets, n, &res);
		if (ret) {
			fprintf(stderr, "Error: couldn't write JSON on 'stdout': %s\n",
				strerror(-ret));
			return 1;
		}
	} else {
		report_table(&o, targets, n, &res);
	}
	for (size_t i = 0; i < n; i++)
		free(targets[i].lat_us);
	free(targets);
	return fflush(stdout) ? 1 : 0;
}
