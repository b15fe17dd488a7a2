/* loadgen: command line.  Client mode opens TCP connections at a paced rate
 * across weighted targets and reports how each ended; --serve mode accepts
 * and closes connections.  Used by the lab, the e2e tests, demo and bench. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"
#include "parse.h"

#define MAX_LISTEN 16
#define MAX_INFLIGHT_LIMIT 1000000u
#define DEFAULT_TIMEOUT_MS 500u

static bool json_mode;

static void usage(FILE *f)
{
	fprintf(f,
"Usage: loadgen --rate N --duration SECONDS [OPTIONS] TARGET[@WEIGHT]...\n"
"       loadgen --serve ADDR:PORT [--serve ADDR:PORT]... [--duration SECONDS]\n"
"\n"
"Opens new TCP connections at N per second (in total, split over the targets\n"
"by weight) for SECONDS, closes each at once with a RST, and reports per\n"
"target how many were attempted, connected, refused (answered with a RST),\n"
"timed out and failed otherwise, with connect latency percentiles.\n"
"\n"
"  TARGET               A.B.C.D:PORT or [IPV6]:PORT; @WEIGHT an integer >= 1\n"
"                       (default 1)\n"
"  -r, --rate N         connections per second over all targets (> 0)\n"
"  -d, --duration S     seconds to open connections for (> 0, decimals ok)\n"
"  -t, --timeout MS     connect timeout (default %u; below the kernel's 1 s\n"
"                       SYN retransmit, so a dropped SYN counts as timed out)\n"
"  -m, --max-inflight N connections pending at once (default: enough for\n"
"                       rate x timeout, plus 64); when reached, attempts wait\n"
"  -b, --bind ADDR      source address for every connection\n"
"  -j, --json           print only JSON on stdout\n"
"  -s, --serve ADDR:PORT\n"
"                       server mode: accept and close connections on ADDR:PORT\n"
"                       until SIGINT/SIGTERM or --duration; prints\n"
"                       'loadgen: listening on ADDR:PORT' on stderr when ready\n"
"                       and the number accepted at exit\n"
"      --backlog N      listen backlog in server mode (default 4096)\n"
"  -h, --help           this help\n"
"\n"
"Exit status: 0 done, 1 failure, 2 bad arguments.\n",
		DEFAULT_TIMEOUT_MS);
}

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

static double parse_positive(const char *name, const char *s, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v <= 0 || v > max)
		fail_usage("invalid %s '%s': expected a number > 0 and <= %g", name, s, max);
	return v;
}

static unsigned long parse_uint(const char *name, const char *s,
				unsigned long min, unsigned long max)
{
	uint64_t v;

	if (parse_u64(s, min, max, &v) < 0)
		fail_usage("invalid %s '%s': expected an integer from %lu to %lu",
			   name, s, min, max);
	return (unsigned long)v;
}

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
		char *end;
		unsigned long w;

		*at = '\0';
		errno = 0;
		w = strtoul(at + 1, &end, 10);
		if (errno || end == at + 1 || *end || at[1] == '-' || w < 1 || w > 1000000)
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
	static const struct option longopts[] = {
		{ "rate", required_argument, NULL, 'r' },
		{ "duration", required_argument, NULL, 'd' },
		{ "timeout", required_argument, NULL, 't' },
		{ "max-inflight", required_argument, NULL, 'm' },
		{ "bind", required_argument, NULL, 'b' },
		{ "json", no_argument, NULL, 'j' },
		{ "serve", required_argument, NULL, 's' },
		{ "backlog", required_argument, NULL, 'B' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct lg_client_opts o = { .timeout_ms = DEFAULT_TIMEOUT_MS };
	struct lg_addr listen[MAX_LISTEN];
	struct lg_client_result res;
	struct lg_target *targets;
	const char *bind_arg = NULL;
	size_t n_listen = 0, n;
	bool have_rate = false, have_duration = false;
	int backlog = 4096, c, ret;
	char msg[512];

	/* --json changes how errors are printed, so find it before parsing. */
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--json") || !strcmp(argv[i], "-j"))
			json_mode = true;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":r:d:t:m:b:js:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'r':
			o.rate = parse_positive("rate", optarg, 1e7);
			have_rate = true;
			break;
		case 'd':
			o.duration_s = parse_positive("duration", optarg, 86400 * 7);
			have_duration = true;
			break;
		case 't':
			o.timeout_ms = (unsigned int)parse_uint("timeout", optarg, 1, 600000);
			break;
		case 'm':
			o.max_inflight = (unsigned int)parse_uint("max-inflight", optarg, 1,
								  MAX_INFLIGHT_LIMIT);
			break;
		case 'b':
			bind_arg = optarg;
			break;
		case 'j':
			json_mode = true;
			break;
		case 's':
			if (n_listen == MAX_LISTEN)
				fail_usage("too many --serve addresses: at most %d", MAX_LISTEN);
			if (addr_parse(optarg, true, &listen[n_listen]))
				fail_usage("invalid --serve address '%s': expected A.B.C.D:PORT or [IPV6]:PORT",
					   optarg);
			n_listen++;
			break;
		case 'B':
			backlog = (int)parse_uint("backlog", optarg, 1, INT_MAX);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case ':':
			fail_usage("option '%s' needs a value", argv[optind - 1]);
			break;
		default:
			fail_usage("unknown option '%s'", argv[optind - 1]);
		}
	}

	install_signals();

	if (n_listen) {
		if (have_rate || optind < argc || bind_arg)
			fail_usage("--serve takes no --rate, --bind or targets");
		return run_serve(listen, n_listen, have_duration ? o.duration_s : 0, backlog);
	}

	if (!have_rate)
		fail_usage("missing --rate N");
	if (!have_duration)
		fail_usage("missing --duration SECONDS");
	if (optind >= argc)
		fail_usage("missing TARGET: at least one A.B.C.D:PORT or [IPV6]:PORT");
	if (llround(o.rate * o.duration_s) < 1)
		fail_usage("rate %g x duration %g makes no connection at all", o.rate,
			   o.duration_s);

	n = (size_t)(argc - optind);
	targets = calloc(n, sizeof(*targets));
	if (!targets) {
		fail_run("couldn't allocate targets on 'loadgen': Cannot allocate memory");
		return 1;
	}
	for (size_t i = 0; i < n; i++)
		parse_target(argv[optind + i], &targets[i]);

	if (bind_arg) {
		if (addr_parse(bind_arg, false, &o.bind))
			fail_usage("invalid --bind address '%s': expected an IPv4 or IPv6 address",
				   bind_arg);
		o.have_bind = true;
		for (size_t i = 0; i < n; i++)
			if (targets[i].addr.ss.ss_family != o.bind.ss.ss_family)
				fail_usage("target '%s' and --bind '%s' are not the same address family",
					   targets[i].addr.label, bind_arg);
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

	ret = client_run(&o, targets, n, &res);
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
