/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent: loads, pins and attaches rlgate's kernel program, keeps the
 * tenant policy (state file, kernel maps) and serves rlctl and Prometheus,
 * all from one thread and one io_uring loop.
 */
#include <errno.h>
#include <grp.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "agent_shed.h"
#include "broker.h"
#include "conns.h"
#include "conntrack.h"
#include "ctl.h"
#include "log.h"
#include "metrics.h"
#include "opts.h"
#include "preload.h"
#include "wire.h"

#define DEFAULT_METRICS		"127.0.0.1:9464"
#define DEFAULT_STATE_DIR	"/var/lib/rlgate"
#define DEFAULT_PIN_DIR		"/sys/fs/bpf/rlgate"
#define TICK_MS			1000
/* Standalone at both points: how often the caps are shared again between
 * them (the broker's check does it in fleet mode) */
#define SHARE_MS		50

/* Everything the command line sets, for the option table to point into. */
struct cli {
	struct agent_opts agent;
	struct broker_opts broker;
	int log_level;
	char *ifaces;		/* every --iface, joined by ',' */
	const char *preload_pool;
	const char *preload_group;
};

#define CLI(field)	OPT_AT(struct cli, field)

static const struct opt_value modes[] = {
	{ "auto", KERN_MODE_AUTO }, { "native", KERN_MODE_NATIVE },
	{ "skb", KERN_MODE_SKB }, { "tc", KERN_MODE_TC }, { NULL, 0 },
};

static const struct opt_value levels[] = {
	{ "error", LOG_LVL_ERROR }, { "warn", LOG_LVL_WARN },
	{ "info", LOG_LVL_INFO }, { "debug", LOG_LVL_DEBUG }, { NULL, 0 },
};

static int parse_redis(const char *s, void *dest, char *err, size_t len)
{
	char host[256], path[256];
	int port;

	if (broker_parse_address(s, host, sizeof(host), &port, path,
				 sizeof(path))) {
		snprintf(err, len, "invalid --redis '%.64s': expected HOST:PORT, "
			 "[IPV6]:PORT, unix:/PATH, cluster:HOST:PORT[,HOST:PORT...] "
			 "or sentinel:NAME@HOST:PORT[,HOST:PORT...]", s);
		return -EINVAL;
	}
	*(const char **)dest = s;
	return 0;
}

static const struct opt options[] = {
	{ .kind = OPT_SECTION, .help = "Options:" },
	{ "iface", 'i', OPT_LIST, CLI(ifaces), .arg = "IF[,IF...]",
	  .help = "interfaces to protect (required without --preload-pool; "
		  "may repeat)" },
	{ "mode", 'm', OPT_ENUM, CLI(agent.mode), .arg = "MODE",
	  .values = modes, .def = "auto",
	  .help = "how to attach; auto tries native XDP, then generic XDP" },
	{ "control", 'c', OPT_STRING, CLI(agent.control), .arg = "PATH",
	  .def = CTL_DEFAULT_SOCKET, .help = "control socket" },
	{ "control-group", 'g', OPT_STRING, CLI(agent.control_group),
	  .arg = "GROUP", .help = "group allowed to use the control socket" },
	{ "metrics", 'M', OPT_HOSTPORT, CLI(agent.metrics), .arg = "HOST:PORT",
	  .def = DEFAULT_METRICS,
	  .help = "Prometheus endpoint, [V6]:PORT for IPv6" },
	{ "metrics-tenants", 0, OPT_U64, CLI(agent.metrics_tenants),
	  .arg = "N", .min = 0, .max = RL_TENANTS_LIMIT, .def = "1000",
	  .expect = "tenants",
	  .help = "only the N busiest tenants (admitted + denied since the "
		  "last scrape) get per-tenant series; totals always; 0: none" },
	{ "state-dir", 's', OPT_STRING, CLI(agent.state_dir), .arg = "DIR",
	  .def = DEFAULT_STATE_DIR, .help = "policy state" },
	{ "pin-dir", 'p', OPT_STRING, CLI(agent.pin_dir), .arg = "DIR",
	  .def = DEFAULT_PIN_DIR, .help = "bpffs pins" },
	{ "log-level", 'l', OPT_ENUM, CLI(log_level), .arg = "LEVEL",
	  .values = levels, .def = "info", .help = "what to log" },
	{ "rule-memory", 0, OPT_U64, CLI(agent.rule_memory_mib), .arg = "MIB",
	  .min = 2, .max = 1024, .expect = "MiB",
	  .def_doc = "the pins' size, else 1 MiB per 8,192 of --max-tenants, "
		     "at least 16",
	  .help = "kernel memory for the compiled rules; a change needs a "
		  "detach" },
	{ "max-tenants", 0, OPT_U64, CLI(agent.max_tenants), .arg = "N",
	  .min = 1, .max = RL_TENANTS_LIMIT, .def = "4096",
	  .expect = "tenants",
	  .help = "tenant slots in the kernel's maps, the preload pool and "
		  "the agent's tables; a change needs a detach" },
	{ "per-source-table", 0, OPT_U64, CLI(agent.src_table), .arg = "N",
	  .min = RL_SRC_TABLE_MIN, .max = RL_SRC_TABLE_MAX, .def = "65536",
	  .expect = "sources",
	  .help = "sources the kernel keeps a bucket for, over every tenant "
		  "with a per-source limit (about 100 bytes each); while it is "
		  "full, a tenant's new sources share one overflow bucket.  A change "
		  "needs a detach" },
	{ "tombstone-ttl", 0, OPT_U64, CLI(agent.tomb_ttl_ms), .arg = "S",
	  .min = 1, .max = 315360000, .scale = 1000, .def = "604800",
	  .expect = "seconds",
	  .help = "a deleted tenant is remembered (in the state file and the "
		  "fleet's store) this many seconds; 604800 is a week" },
	{ "shed-at", 0, OPT_U64, CLI(agent.shed_at), .arg = "PERCENT",
	  .min = 0, .max = 100, .def = "0", .expect = "percent",
	  .help = "overload shedding: while a listener's accept queue is at "
		  "PERCENT of its backlog or more, hold the tenants to what the "
		  "server accepts, shared by the tenants' weights; 0: never" },
	{ "shed-port", 0, OPT_U64, CLI(agent.shed_port), .arg = "PORT",
	  .min = 1, .max = 65535, .def_doc = "every listener",
	  .help = "with --shed-at: watch only the listeners of this port" },
	{ "help", 'h', OPT_HELP, .help = "this help" },
	{ "version", 'V', OPT_VERSION, .help = "print the version" },
	{ .kind = OPT_SECTION,
	  .help = "Fleet mode (tokens leased from one global bucket per tenant "
		  "in Redis):" },
	{ "redis", 'r', OPT_CUSTOM, OPT_ONCE, CLI(broker.redis), .arg = "ADDR",
	  .parse = parse_redis,
	  .help = "HOST:PORT, [IPV6]:PORT or unix:PATH; a Redis Cluster: "
		  "cluster:HOST:PORT[,HOST:PORT...] (seeds); the master named "
		  "NAME by Redis Sentinels: sentinel:NAME@HOST:PORT[,...]; "
		  "without it the agent runs standalone" },
	{ "redis-user", 0, OPT_STRING, CLI(broker.user), .arg = "USER",
	  .help = "ACL user name for AUTH" },
	{ "redis-password-file", 0, OPT_STRING, CLI(broker.password_file),
	  .arg = "F", .help = "AUTH password: the first line of F" },
	{ "redis-sentinel-user", 0, OPT_STRING, CLI(broker.sentinel_user),
	  .arg = "USER", .help = "ACL user name for AUTH to the sentinels" },
	{ "redis-sentinel-password-file", 0, OPT_STRING,
	  CLI(broker.sentinel_password_file), .arg = "F",
	  .help = "AUTH password of the sentinels (their requirepass): the "
		  "first line of F; without it they are asked without AUTH" },
	{ "redis-tls", 0, OPT_FLAG, CLI(broker.tls),
	  .help = "TLS to Redis (and to the sentinels), the server's "
		  "certificate checked; not with unix:" },
	{ "redis-ca", 0, OPT_STRING, CLI(broker.tls_ca), .arg = "F",
	  .def_doc = "the system's CA certificates",
	  .help = "PEM CA certificates that vouch for Redis' certificate" },
	{ "redis-cert", 0, OPT_STRING, CLI(broker.tls_cert), .arg = "F",
	  .help = "PEM client certificate (chain), for a Redis that asks for "
		  "one; needs --redis-key" },
	{ "redis-key", 0, OPT_STRING, CLI(broker.tls_key), .arg = "F",
	  .help = "PEM private key of --redis-cert" },
	{ "redis-server-name", 0, OPT_STRING, CLI(broker.tls_server_name),
	  .arg = "NAME", .def_doc = "the host of --redis",
	  .help = "the name (or address) Redis' certificate must carry" },
	{ "agent-id", 0, OPT_STRING, CLI(broker.agent_id), .arg = "ID",
	  .min = 1, .max = 256, .def_doc = "the host name",
	  .help = "this agent in the registry" },
	{ "lease-ttl", 0, OPT_U64, CLI(broker.lease_ttl_ms), .arg = "MS",
	  .min = 10, .max = 3600000, .def = "1000", .expect = "milliseconds",
	  .help = "leased tokens idle this long go back to Redis" },
	{ "redis-timeout", 0, OPT_U64, CLI(broker.timeout_ms), .arg = "MS",
	  .min = 1, .max = 60000, .def = "50", .expect = "milliseconds",
	  .help = "a Redis call unanswered this long has failed; three "
		  "failures in a row degrade the fleet" },
	{ "heartbeat-stale", 0, OPT_U64, CLI(broker.stale_ms), .arg = "MS",
	  .min = 100, .max = 3600000, .def = "2000", .expect = "milliseconds",
	  .help = "the kernel (and the preload pool) applies the fail "
		  "policies when this agent has been silent this long" },
	{ "expected-agents", 0, OPT_U64, CLI(broker.expected_agents),
	  .arg = "N", .min = 1, .max = 100000, .expect = "a count",
	  .def_doc = "what the agent before knew, else 1",
	  .help = "fleet size for the static fail share until Redis has told "
		  "the real one" },
	{ .kind = OPT_SECTION,
	  .help = "Preloaded programs (librlpreload.so, where XDP cannot be "
		  "attached):" },
	{ "preload-pool", 0, OPT_STRING, CLI(preload_pool), .arg = "PATH",
	  .help = "shared-memory pool the library spends from (e.g. "
		  RL_POOL_DEFAULT_PATH "); with it, --iface may be left out" },
	{ "preload-group", 0, OPT_STRING, CLI(preload_group), .arg = "GROUP",
	  .help = "group allowed to read and write the pool" },
	{ .kind = OPT_END },
};

/* Options that mean nothing without --redis. */
static const char *const fleet_only[] = {
	"redis-user", "redis-password-file", "redis-sentinel-user",
	"redis-sentinel-password-file", "redis-tls", "agent-id", "redis-timeout",
	"heartbeat-stale", "expected-agents", NULL,
};

/* Options that mean nothing without --redis sentinel:... */
static const char *const sentinel_only[] = {
	"redis-sentinel-user", "redis-sentinel-password-file", NULL,
};

/* Options that mean nothing without --redis-tls. */
static const char *const tls_only[] = {
	"redis-ca", "redis-cert", "redis-key", "redis-server-name", NULL,
};

static const struct opts_spec spec = {
	.prog = "rlagent",
	.synopsis = "rlagent --iface IF[,IF...] | --preload-pool PATH [OPTIONS]",
	.doc =
"Per-tenant TCP new-connection rate limiter agent.  Attaches rlgate's XDP (or\n"
"tc) program to the interfaces, keeps the tenant policy and serves rlctl.\n"
"Runs in the foreground and logs to stderr.  Stopping it (SIGTERM, SIGINT,\n"
"even SIGKILL) leaves the program attached and enforcing; a restarted agent\n"
"adopts the pinned maps and replaces the program without a gap.\n",
	.epilog = "Exit status: 0 clean exit, 1 failure, 2 usage error.\n",
	.opts = options,
	.col = 30,
};

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
	return 0;
}

/* Reads the command line into c (c->ifaces is the caller's to free).  -1 to
 * go on; otherwise the exit code, after printing the help, the version or
 * a usage error. */
static int parse_args(int argc, char **argv, struct cli *c, gid_t *gid,
		      gid_t *pool_gid)
{
	struct opts_result res;
	int r = opts_parse(&spec, argc, argv, c, &res);

	if (r == OPTS_HELP) {
		opts_usage(&spec, stdout);
		return 0;
	}
	if (r == OPTS_VERSION) {
		printf("rlagent %s\n", RLGATE_VERSION);
		return 0;
	}
	if (r < 0)
		return usage_error("%s", res.err);
	log_set_level((enum log_level)c->log_level);
	if (c->ifaces && (r = parse_ifaces(c->ifaces, &c->agent)))
		return r;
	if (c->agent.n_ifaces == 0 && !c->preload_pool)
		return usage_error("missing --iface%s: which interfaces to protect?",
				   "");
	if (c->preload_pool && c->preload_pool[0] != '/')
		return usage_error("invalid --preload-pool '%s': expected an "
				   "absolute path", c->preload_pool);
	if (c->preload_group && !c->preload_pool)
		return usage_error("invalid options: --preload-group needs "
				   "--preload-pool%s", "");
	if (c->agent.shed_port && !c->agent.shed_at)
		return usage_error("invalid options: --shed-port needs "
				   "--shed-at%s", "");
	if (c->preload_group) {
		struct group *g = getgrnam(c->preload_group);

		if (!g)
			return usage_error("invalid --preload-group '%s': no such "
					   "group", c->preload_group);
		*pool_gid = g->gr_gid;
	}
	for (size_t i = 0; !c->broker.redis && fleet_only[i]; i++)
		/* standalone, the pool's heartbeat has the same deadline */
		if (opts_given(&res, fleet_only[i]) &&
		    !(c->preload_pool && !strcmp(fleet_only[i], "heartbeat-stale")))
			return usage_error("invalid options: --%s needs --redis",
					   fleet_only[i]);
	for (size_t i = 0; !c->broker.tls && tls_only[i]; i++)
		if (opts_given(&res, tls_only[i]))
			return usage_error("invalid options: --%s needs --redis-tls",
					   tls_only[i]);
	for (size_t i = 0; c->broker.redis && sentinel_only[i]; i++)
		if (strncmp(c->broker.redis, "sentinel:", 9) != 0 &&
		    opts_given(&res, sentinel_only[i]))
			return usage_error("invalid options: --%s needs --redis "
					   "sentinel:NAME@HOST:PORT[,...]",
					   sentinel_only[i]);
	if (!c->broker.tls_cert != !c->broker.tls_key)
		return usage_error("invalid options: %s", "--redis-cert and "
				   "--redis-key go together");
	if (c->agent.control_group) {
		struct group *g = getgrnam(c->agent.control_group);

		if (!g)
			return usage_error("invalid --control-group '%s': no such "
					   "group", c->agent.control_group);
		*gid = g->gr_gid;
	}
	if (c->agent.state_dir[0] != '/' || c->agent.pin_dir[0] != '/' ||
	    c->agent.control[0] != '/')
		return usage_error("%s: --state-dir, --pin-dir and --control "
				   "must be absolute paths", "invalid path");
	return -1;
}

static void on_tick(struct loop_timer *t, void *arg)
{
	struct agent *a = arg;
	uint64_t now = loop_now_ns();

	(void)t;
	agent_sample(a);
	agent_prune_tombs(a);
	agent_verify_watch(a);
	conntrack_sweep(&a->kern, RL_CONN_TTL_NS);
	kern_src_sweep(&a->kern, now);
	if (a->kern.preload) {
		if (preload_watch(a->kern.preload, now))
			agent_preload_refill(a);
		preload_heal(a->kern.preload);
		if (preload_forged_pending(a->kern.preload))
			for (size_t i = 0; i < a->n_tenants; i++)
				preload_forged_log(a->kern.preload,
						   a->tenants[i].slot,
						   a->tenants[i].pol.name, now);
	}
	ctl_tick(a->ctl, now);
	metrics_tick(a->metrics, now);
}

/* Standalone, with the kernel and the pool both enforcing: each capped
 * tenant's cap shared again by what each point has in flight and wants.
 * The heartbeat goes with it (fleet mode's goes with its checks,
 * kern_fleet_state): once it is stale, a cap shared between the points is
 * no longer moved, and the fail policies decide at both (kern_alive). */
static void on_share(struct loop_timer *t, void *arg)
{
	struct agent *a = arg;

	(void)t;
	kern_alive(&a->kern, loop_now_ns());
	if (kern_conn_points(&a->kern) != 2)
		return;
	for (size_t i = 0; i < a->n_tenants; i++)
		if (a->tenants[i].pol.max_conns)
			kern_conn_slots(&a->kern, a->tenants[i].slot,
					(int64_t)a->tenants[i].pol.max_conns);
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
	if (a->broker && ev->type == RL_EV_LOWWATER &&
	    ev->tenant < a->kern.max_tenants)
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
	struct agent a = { .exit_code = 1 };
	struct cli cli = { 0 };
	struct broker_opts bo;
	struct loop_watch *sig_w = NULL, *ev_w = NULL;
	struct loop_timer *tick = NULL, *share = NULL;
	bool kern_opened = false;
	gid_t gid = (gid_t)-1, pool_gid = (gid_t)-1;
	sigset_t mask;
	int r, sfd = -1;

	log_set_ident("rlagent");
	/* The big arrays of a change of the whole set (copies of 100,000
	 * tenants, their indexes, a fleet sync's batch) are mapped each on
	 * its own and unmapped when freed.  By default glibc raises this
	 * threshold to the size of the first such array freed, and cuts the
	 * next ones from the heap between allocations that outlive them:
	 * a fleet agent that joined 100,000 tenants kept 400 bytes a tenant
	 * of free heap resident. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	r = parse_args(argc, argv, &cli, &gid, &pool_gid);
	if (r >= 0) {
		free(cli.ifaces);
		return r;
	}
	a.opts = cli.agent;
	bo = cli.broker;

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

	/* The state file is read and checked while the kernel verifies the
	 * program: at 100,000 tenants each takes a good part of a start. */
	agent_policy_read(&a, a.opts.max_tenants ? a.opts.max_tenants :
			  RL_MAX_TENANTS);
	if (kern_open(&a.kern, a.opts.pin_dir, a.opts.mode == KERN_MODE_TC,
		      a.opts.rule_memory_mib, a.opts.max_tenants,
		      a.opts.src_table))
		goto cleanup;
	kern_opened = true;
	a.kern.leased = bo.redis != NULL;
	if (cli.preload_pool && preload_open(&a.kern.preload, cli.preload_pool,
					     pool_gid, a.kern.cls.half,
					     a.kern.max_tenants))
		goto cleanup;
	if (a.kern.preload)
		a.kern.preload->stale_ns = (bo.stale_ms ? bo.stale_ms : 2000) *
					   1000000ULL;
	a.kern.ifaces_planned = a.opts.n_ifaces;
	/* Standalone: alive before the policy splits any cap, and before our
	 * program replaces the one attached (kern_attach), which then never
	 * reads a fleet agent's last word as ours */
	kern_alive(&a.kern, loop_now_ns());
	/* Policy before attach: on a fresh pin dir the program then starts
	 * with its tenants in place instead of passing everything for a
	 * moment. */
	if (agent_policy_start(&a) || agent_instance_start(&a))
		goto cleanup;
	/* The broker before attach too: the kernel then starts in fleet mode
	 * with its tenants on credit, not refusing until the first lease. */
	if (bo.redis) {
		struct broker_host host;

		wire_broker_host(&a, &host);
		if (broker_open(&host, &bo, &a.broker))
			goto cleanup;
		/* the broker took the tenants the policy's start put in
		 * place; from here on it hears of every change */
		wire_agent_hooks(&a, a.broker);
	}
	for (unsigned int i = 0; i < a.opts.n_ifaces; i++)
		if (kern_attach(&a.kern, a.opts.ifaces[i], a.opts.mode))
			goto cleanup;
	a.kern.ifaces_planned = 0;
	kern_conns_upgraded(&a.kern);

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
	if (!a.broker && a.kern.preload &&
	    loop_timer_add(a.loop, SHARE_MS, SHARE_MS, on_share, &a, &share))
		goto cleanup;
	if (a.opts.shed_at && a.broker)
		log_warn("--shed-at: fleet mode's tenants spend leased tokens, "
			 "which shedding does not hold; it watches the queues "
			 "and holds nothing");
	if (agent_shed_open(&a, (unsigned int)a.opts.shed_at,
			    (uint16_t)a.opts.shed_port))
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
		kern_unpin_failed(&a.kern);
	}
	/* Otherwise never detaches: enforcement outlives the agent. */
	agent_shed_close(&a);
	if (tick)
		loop_timer_cancel(tick);
	if (share)
		loop_timer_cancel(share);
	agent_sample_stop(&a);
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
	free(cli.ifaces);
	return a.exit_code;
}
