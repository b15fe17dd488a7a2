/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent: loads, pins and attaches rlgate's kernel program, keeps the
 * tenant policy (state file, kernel maps) and serves rlctl and Prometheus,
 * all from one thread and one io_uring loop.
 */
#include <errno.h>
#include <getopt.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "broker.h"
#include "ctl.h"
#include "log.h"
#include "metrics.h"
#include "parse.h"

#define DEFAULT_METRICS		"127.0.0.1:9464"
#define DEFAULT_STATE_DIR	"/var/lib/rlgate"
#define DEFAULT_PIN_DIR		"/sys/fs/bpf/rlgate"
#define TICK_MS			1000

static void usage(FILE *f)
{
	fprintf(f,
"Usage: rlagent --iface IF[,IF...] [OPTIONS]\n"
"\n"
"Per-tenant TCP new-connection rate limiter agent.  Attaches rlgate's XDP (or\n"
"tc) program to the interfaces, keeps the tenant policy and serves rlctl.\n"
"Runs in the foreground and logs to stderr.  Stopping it (SIGTERM, SIGINT,\n"
"even SIGKILL) leaves the program attached and enforcing; a restarted agent\n"
"adopts the pinned maps and replaces the program without a gap.\n"
"\n"
"Options:\n"
"  -i, --iface IF[,IF...]      interfaces to protect (required)\n"
"  -m, --mode MODE             auto (native XDP, else generic), native, skb, tc\n"
"                              (default auto)\n"
"  -c, --control PATH          control socket (default " CTL_DEFAULT_SOCKET ")\n"
"  -g, --control-group GROUP   group allowed to use the control socket\n"
"  -M, --metrics HOST:PORT     Prometheus endpoint, [V6]:PORT for IPv6\n"
"                              (default " DEFAULT_METRICS ")\n"
"  -s, --state-dir DIR         policy state (default " DEFAULT_STATE_DIR ")\n"
"  -p, --pin-dir DIR           bpffs pins (default " DEFAULT_PIN_DIR ")\n"
"  -l, --log-level LEVEL       error, warn, info or debug (default info)\n"
"      --rule-memory MIB       kernel memory for the compiled rules, 2 to\n"
"                              1024 (default 16); a change needs a detach\n"
"      --tombstone-ttl S       a deleted tenant is remembered (in the state\n"
"                              file and the fleet's store) this many seconds,\n"
"                              1 to 315360000 (default 604800, a week)\n"
"\n"
"Fleet mode (tokens leased from one global bucket per tenant in Redis):\n"
"  -r, --redis ADDR            HOST:PORT, [IPV6]:PORT or unix:PATH; without it\n"
"                              the agent runs standalone\n"
"      --redis-user USER       ACL user name for AUTH\n"
"      --redis-password-file F AUTH password: the first line of F\n"
"      --agent-id ID           this agent in the registry (default: host name)\n"
"      --lease-ttl MS          leased tokens idle this long go back to Redis\n"
"                              (default 1000)\n"
"      --redis-timeout MS      a Redis call unanswered this long has failed;\n"
"                              three failures in a row degrade the fleet\n"
"                              (default 50)\n"
"      --heartbeat-stale MS    the kernel applies the fail policies when this\n"
"                              agent has been silent this long (default 2000)\n"
"      --expected-agents N     fleet size for the static fail share until\n"
"                              Redis has told the real one (default 1)\n"
"  -h, --help                  this help\n"
"  -V, --version               print the version\n"
"\n"
"Exit status: 0 clean exit, 1 failure, 2 usage error.\n");
}

static int usage_error(const char *fmt, const char *val)
{
	fprintf(stderr, "rlagent: ");
	fprintf(stderr, fmt, val);
	fprintf(stderr, "\nTry 'rlagent --help'.\n");
	return 2;
}

/* Splits "eth0,eth1" into opts->ifaces (pointing into list, which is
 * modified).  0, or 2 after printing a usage error. */
static int parse_ifaces(char *list, struct agent_opts *o)
{
	char *save = NULL;

	for (char *tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (strlen(tok) >= IF_NAMESIZE)
			return usage_error("invalid interface name '%s': at most "
					   "15 characters", tok);
		for (unsigned int i = 0; i < o->n_ifaces; i++)
			if (strcmp(o->ifaces[i], tok) == 0)
				return usage_error("interface '%s' given twice", tok);
		if (o->n_ifaces >= KERN_MAX_IFACES)
			return usage_error("too many interfaces (at most %s)", "32");
		o->ifaces[o->n_ifaces++] = tok;
	}
	if (o->n_ifaces == 0)
		return usage_error("invalid --iface '%s': expected IF[,IF...]", "");
	return 0;
}

/* The agent's hooks, wired to the broker in fleet mode. */
static void hook_slot_ready(void *ctx, uint32_t slot, const struct policy_tenant *p)
{
	broker_slot_ready(ctx, slot, p);
}

static void hook_policy_changed(void *ctx, const struct agent_tenant *old,
				size_t n_old, const struct agent_tenant *now,
				size_t n_now)
{
	broker_policy_changed(ctx, old, n_old, now, n_now);
}

static void hook_tenants_changed(void *ctx)
{
	broker_tenants_changed(ctx);
}

static void on_tick(struct loop_timer *t, void *arg)
{
	struct agent *a = arg;
	uint64_t now = loop_now_ns();

	(void)t;
	agent_sample(a);
	agent_prune_tombs(a);
	ctl_tick(a->ctl, now);
	metrics_tick(a->metrics, now);
}

static void stop_loop(void *arg)
{
	struct agent *a = arg;

	loop_stop(a->loop);
}

static void on_signal(struct loop_watch *w, int fd, unsigned int events,
		      void *arg)
{
	struct agent *a = arg;
	struct signalfd_siginfo si;

	(void)w;
	(void)events;
	while (read(fd, &si, sizeof(si)) == sizeof(si)) {
		log_info("%s: exiting; the program stays attached and enforcing",
			 strsignal((int)si.ssi_signo));
		a->exit_code = 0;
		/* Fleet mode gives its leased tokens back first (a second
		 * signal does not wait for that). */
		if (a->broker && !a->stopping) {
			a->stopping = true;
			broker_shutdown(a->broker, stop_loop, a);
		} else {
			loop_stop(a->loop);
		}
	}
}

/* Low-water events of leased tenants go to the broker; standalone mode has
 * none, but drains the ring anyway so that leftovers do not fill it. */
static int on_event(void *ctx, void *data, size_t size)
{
	const struct rl_event *ev = data;
	struct agent *a = ctx;

	if (size < sizeof(*ev))
		return 0;
	log_debug("event %u for slot %u (tokens %lld)", ev->type, ev->tenant,
		  (long long)ev->tokens);
	if (a->broker && ev->type == RL_EV_LOWWATER && ev->tenant < RL_MAX_TENANTS)
		broker_lowwater(a->broker, ev->tenant);
	return 0;
}

static void on_events(struct loop_watch *w, int fd, unsigned int events,
		      void *arg)
{
	struct agent *a = arg;

	(void)w;
	(void)fd;
	(void)events;
	kern_events_consume(&a->kern);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "iface", required_argument, NULL, 'i' },
		{ "mode", required_argument, NULL, 'm' },
		{ "control", required_argument, NULL, 'c' },
		{ "control-group", required_argument, NULL, 'g' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "state-dir", required_argument, NULL, 's' },
		{ "pin-dir", required_argument, NULL, 'p' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ "redis", required_argument, NULL, 'r' },
		{ "redis-user", required_argument, NULL, 'U' },
		{ "redis-password-file", required_argument, NULL, 'P' },
		{ "agent-id", required_argument, NULL, 'A' },
		{ "lease-ttl", required_argument, NULL, 'T' },
		{ "redis-timeout", required_argument, NULL, 'O' },
		{ "heartbeat-stale", required_argument, NULL, 'H' },
		{ "expected-agents", required_argument, NULL, 'N' },
		{ "rule-memory", required_argument, NULL, 'R' },
		{ "tombstone-ttl", required_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 },
	};
	struct agent a = {
		.opts = {
			.mode = KERN_MODE_AUTO,
			.control = CTL_DEFAULT_SOCKET,
			.metrics = DEFAULT_METRICS,
			.state_dir = DEFAULT_STATE_DIR,
			.pin_dir = DEFAULT_PIN_DIR,
		},
		.exit_code = 1,
	};
	struct broker_opts bo = { .lease_ttl_ms = 1000 };
	struct loop_watch *sig_w = NULL, *ev_w = NULL;
	struct loop_timer *tick = NULL;
	bool kern_opened = false;
	char host[96], port[8];
	gid_t gid = (gid_t)-1;
	enum log_level lvl;
	sigset_t mask;
	int opt, r, sfd = -1;

	log_set_ident("rlagent");
	while ((opt = getopt_long(argc, argv, "i:m:c:g:M:s:p:l:hVr:", longopts,
				  NULL)) != -1) {
		switch (opt) {
		case 'i':
			r = parse_ifaces(optarg, &a.opts);
			if (r)
				return r;
			break;
		case 'm':
			if (kern_parse_mode(optarg, &a.opts.mode))
				return usage_error("invalid --mode '%s': expected "
						   "auto, native, skb or tc", optarg);
			break;
		case 'c':
			a.opts.control = optarg;
			break;
		case 'g':
			a.opts.control_group = optarg;
			break;
		case 'M':
			a.opts.metrics = optarg;
			break;
		case 's':
			a.opts.state_dir = optarg;
			break;
		case 'p':
			a.opts.pin_dir = optarg;
			break;
		case 'l':
			if (log_parse_level(optarg, &lvl))
				return usage_error("invalid --log-level '%s': "
						   "expected error, warn, info or "
						   "debug", optarg);
			log_set_level(lvl);
			break;
		case 'r':
			bo.redis = optarg;
			break;
		case 'U':
			bo.user = optarg;
			break;
		case 'P':
			bo.password_file = optarg;
			break;
		case 'A':
			if (!optarg[0] || strlen(optarg) > 256)
				return usage_error("invalid --agent-id '%s': expected "
						   "1 to 256 characters", optarg);
			bo.agent_id = optarg;
			break;
		case 'T':
			if (parse_u64(optarg, 10, 3600000, &bo.lease_ttl_ms))
				return usage_error("invalid --lease-ttl '%s': expected "
						   "milliseconds from 10 to 3600000",
						   optarg);
			break;
		case 'O':
			if (parse_u64(optarg, 1, 60000, &bo.timeout_ms))
				return usage_error("invalid --redis-timeout '%s': "
						   "expected milliseconds from 1 to "
						   "60000", optarg);
			break;
		case 'H':
			if (parse_u64(optarg, 100, 3600000, &bo.stale_ms))
				return usage_error("invalid --heartbeat-stale '%s': "
						   "expected milliseconds from 100 to "
						   "3600000", optarg);
			break;
		case 'N':
			if (parse_u64(optarg, 1, 100000, &bo.expected_agents))
				return usage_error("invalid --expected-agents '%s': "
						   "expected a count from 1 to 100000",
						   optarg);
			break;
		case 'D':
			if (parse_u64(optarg, 1, 315360000, &a.opts.tomb_ttl_ms))
				return usage_error("invalid --tombstone-ttl '%s': "
						   "expected seconds from 1 to "
						   "315360000", optarg);
			a.opts.tomb_ttl_ms *= 1000;
			break;
		case 'R': {
			uint64_t mib;

			if (parse_u64(optarg, 2, 1024, &mib))
				return usage_error("invalid --rule-memory '%s': "
						   "expected MiB from 2 to 1024",
						   optarg);
			a.opts.rule_memory_mib = (uint32_t)mib;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("rlagent %s\n", RLGATE_VERSION);
			return 0;
		default:
			fprintf(stderr, "Try 'rlagent --help'.\n");
			return 2;
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (a.opts.n_ifaces == 0)
		return usage_error("missing --iface%s: which interfaces to protect?",
				   "");
	if (metrics_parse_addr(a.opts.metrics, host, sizeof(host), port,
			       sizeof(port)))
		return usage_error("invalid --metrics '%s': expected HOST:PORT "
				   "or [IPV6]:PORT, e.g. 127.0.0.1:9464", a.opts.metrics);
	if (bo.redis) {
		char h[256], path[256];
		int port;

		if (broker_parse_address(bo.redis, h, sizeof(h), &port, path,
					 sizeof(path)))
			return usage_error("invalid --redis '%s': expected HOST:PORT, "
					   "[IPV6]:PORT or unix:/PATH", bo.redis);
	} else if (bo.user || bo.password_file || bo.agent_id || bo.timeout_ms ||
		   bo.stale_ms || bo.expected_agents) {
		return usage_error("%s: --redis-user, --redis-password-file, "
				   "--agent-id, --redis-timeout, --heartbeat-stale "
				   "and --expected-agents need --redis",
				   "invalid options");
	}
	if (a.opts.control_group) {
		struct group *g = getgrnam(a.opts.control_group);

		if (!g)
			return usage_error("invalid --control-group '%s': no such "
					   "group", a.opts.control_group);
		gid = g->gr_gid;
	}
	if (a.opts.state_dir[0] != '/' || a.opts.pin_dir[0] != '/' ||
	    a.opts.control[0] != '/')
		return usage_error("%s: --state-dir, --pin-dir and --control "
				   "must be absolute paths", "invalid path");

	log_libbpf_init();
	a.start_mono_ns = loop_now_ns();
	a.start_wall = time(NULL);
	signal(SIGPIPE, SIG_IGN);

	/* Signals arrive through the loop, so a signal never interrupts a
	 * half-written map update or state file. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0) {
		log_error("couldn't block signals on 'rlagent': %s", strerror(errno));
		goto cleanup;
	}
	sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sfd < 0) {
		log_error("couldn't create signalfd on 'rlagent': %s",
			  strerror(errno));
		goto cleanup;
	}
	if (loop_new(0, &a.loop))
		goto cleanup;

	if (kern_open(&a.kern, a.opts.pin_dir, a.opts.mode == KERN_MODE_TC,
		      a.opts.rule_memory_mib))
		goto cleanup;
	kern_opened = true;
	a.kern.leased = bo.redis != NULL;
	/* Policy before attach: on a fresh pin dir the program then starts
	 * with its tenants in place instead of passing everything for a
	 * moment. */
	if (agent_policy_start(&a))
		goto cleanup;
	/* The broker before attach too: the kernel then starts in fleet mode
	 * with its tenants on credit, not refusing until the first lease. */
	if (bo.redis) {
		if (broker_open(&a, &bo, &a.broker))
			goto cleanup;
		/* the broker took the tenants the policy's start put in
		 * place; from here on it hears of every change */
		a.hooks = (struct agent_hooks){
			.ctx = a.broker,
			.slot_ready = hook_slot_ready,
			.policy_changed = hook_policy_changed,
			.tenants_changed = hook_tenants_changed,
		};
	}
	for (unsigned int i = 0; i < a.opts.n_ifaces; i++)
		if (kern_attach(&a.kern, a.opts.ifaces[i], a.opts.mode))
			goto cleanup;

	if (ctl_open(&a, a.opts.control, gid, &a.ctl))
		goto cleanup;
	if (metrics_open(&a, a.opts.metrics, &a.metrics))
		goto cleanup;
	if (loop_watch_add(a.loop, sfd, LOOP_READ, on_signal, &a, &sig_w))
		goto cleanup;
	if (kern_events_open(&a.kern, on_event, &a) == 0 &&
	    loop_watch_add(a.loop, kern_events_fd(&a.kern), LOOP_READ, on_events,
			   &a, &ev_w))
		goto cleanup;
	if (loop_timer_add(a.loop, TICK_MS, TICK_MS, on_tick, &a, &tick))
		goto cleanup;
	agent_sample(&a);

	log_info("rlagent %s running: %u interface(s), %zu tenant(s)",
		 RLGATE_VERSION, a.kern.n_ifaces, a.n_tenants);
	a.exit_code = 1;
	if (loop_run(a.loop) == 0 && a.exit_code == 1)
		a.exit_code = 0;
cleanup:
	/* A first start that failed half-way leaves nothing behind; a
	 * restart that fails leaves the adopted program enforcing. */
	if (kern_opened && a.exit_code != 0 && !a.kern.maps_adopted) {
		while (a.kern.n_ifaces)
			kern_detach(&a.kern, a.kern.ifaces[0].name);
		kern_unpin(&a.kern);
	}
	/* Otherwise never detaches: enforcement outlives the agent. */
	if (tick)
		loop_timer_cancel(tick);
	loop_watch_del(ev_w);
	loop_watch_del(sig_w);
	broker_close(a.broker);
	metrics_close(a.metrics);
	ctl_close(a.ctl);
	if (kern_opened)
		kern_close(&a.kern);
	loop_free(a.loop);
	if (sfd >= 0)
		close(sfd);
	agent_free(&a);
	return a.exit_code;
}
