/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Prometheus text exposition over HTTP/1.0 (see metrics.h).  One request
 * per connection, bounded in size and time; the reply is built whole and
 * then written as the socket accepts it.
 */
#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "agent_shed.h"
#include "broker.h"
#include "log.h"
#include "metrics.h"
#include "parse.h"
#include "preload.h"
#include "server.h"
#include "topn.h"

/* One request, one reply: the client's deadline runs from its accept. */
struct metrics_client {
	struct server_client sc;
	char req[METRICS_REQ_MAX];
	size_t req_len;
	char *out;
	size_t out_len, out_off;
	bool waiting;		/* for a scrape's answer */
	bool in_job;		/* ...from the job running */
};

struct scrape;

struct metrics {
	struct agent *a;
	struct server *srv;
	/* Per tenant slot: admitted + denied at the previous scrape, against
	 * which the next one ranks the tenants (--metrics-tenants). */
	uint64_t *last;
	struct scrape *job;	/* the scrape running, if any */
	/* for status: scrapes answered, the last one's time and turns of
	 * the loop, and the longest a slice of one held the loop */
	uint64_t scrapes, last_scrape_ns, hold_max_ns;
	/* ...and in CPU time: what the scrape itself took of that, without
	 * the time other processes had the CPU while it ran */
	uint64_t hold_max_cpu_ns;
	unsigned int last_turns;
};

int metrics_parse_addr(const char *s, char *host, size_t hostlen,
		       char *port, size_t portlen)
{
	uint16_t p;

	if (portlen < 6 || parse_hostport(s, host, hostlen, &p) < 0)
		return -EINVAL;
	snprintf(port, portlen, "%u", p);
	return 0;
}

/* A scrape of this many tenants or more leaves megabytes free in the
 * heap. */
#define METRICS_TRIM_TENANTS	10000

static void scrape_free(struct scrape *s);
static void scrape_leave(struct metrics *m);

static void client_close(struct server_client *sc)
{
	struct metrics_client *cl = (struct metrics_client *)sc;

	free(cl->out);
	if (cl->in_job) {
		cl->in_job = false;
		scrape_leave(server_ctx(sc->srv));
	}
}

/* Label values may hold any byte; the format wants \\, \" and \n escaped.
 * Tenant names cannot contain them today, but the exposition must stay
 * parseable if that ever changes. */
static void put_label(FILE *f, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			fputc('\\', f);
		if (*v == '\n') {
			fputs("\\n", f);
			continue;
		}
		fputc(*v, f);
	}
}

static void header(FILE *f, const char *name, const char *type,
		   const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The start of a tenant's row of metric name, up to its value. */
static void tenant_row(FILE *f, const char *name, const char *tenant)
{
	fprintf(f, "%s{tenant=\"", name);
	put_label(f, tenant);
	fputs("\"} ", f);
}

/* A uint64_t at offset off in a stats struct. */
static unsigned long long field_at(const void *stats, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)stats + off, sizeof(v));
	return (unsigned long long)v;
}

/* A metric without labels: its header and its one line. */
static void scalar(FILE *f, const char *name, const char *type, const char *help,
		   unsigned long long v)
{
	header(f, name, type, help);
	fprintf(f, "%s %llu\n", name, v);
}

/* A per-tenant counter's sum over every tenant, series or not:
 * rlgate_host_X for rlgate_X. */
static void host_total(FILE *f, const char *name, unsigned long long sum)
{
	const char *rest = name + strlen("rlgate_");

	fprintf(f, "# HELP rlgate_host_%s Sum of %s over every tenant of this "
		"host, whether it has its own series or not.\n"
		"# TYPE rlgate_host_%s counter\nrlgate_host_%s %llu\n",
		rest, name, rest, rest, sum);
}

/* Per tenant metrics: a uint64_t of the tenant's stats, at its offset in
 * struct agent_tenant_stats, or one of the tenant's limits. */
#define STAT(f)		offsetof(struct agent_tenant_stats, f)
#define FROM_RATE	((size_t)-1)
#define FROM_BURST	((size_t)-2)

static const struct {
	const char *name, *type, *help;
	size_t from;
} tenant_metrics[] = {
	{ "rlgate_admitted_total", "counter",
	  "New connections admitted (retransmitted SYNs included).", STAT(s.admitted) },
	{ "rlgate_denied_total", "counter",
	  "New connections refused (dropped or answered by RST).", STAT(s.denied) },
	{ "rlgate_shadow_denied_total", "counter",
	  "Shadow tenants: connections that would have been refused.",
	  STAT(s.shadow_denied) },
	{ "rlgate_retransmits_total", "counter",
	  "Retransmitted SYNs of admitted connections, admitted free.",
	  STAT(s.retransmits) },
	{ "rlgate_rst_sent_total", "counter",
	  "TCP RST replies sent to refused clients.", STAT(s.rst_sent) },
	{ "rlgate_tenant_unparsed_total", "counter",
	  "Packets from the tenant's sources that might have opened a "
	  "connection but could not be judged (fragmented or cut-short "
	  "TCP headers, long IPv6 header chains): refused, or for a "
	  "shadow tenant passed.", STAT(s.unparsed) },
	{ "rlgate_tokens", "gauge",
	  "Tokens currently in the tenant's bucket.", STAT(tokens) },
	{ "rlgate_limit_rate", "gauge",
	  "Configured limit in new connections per second.", FROM_RATE },
	{ "rlgate_limit_burst", "gauge",
	  "Configured bucket capacity (burst) in connections.", FROM_BURST },
	{ "rlgate_limit_conns", "gauge",
	  "Configured cap on connections in flight (0: none).", STAT(max_conns) },
	{ "rlgate_conns", "gauge",
	  "Connections of a capped tenant in flight, as the kernel counts them.",
	  STAT(conns) },
	{ "rlgate_conn_slots", "gauge",
	  "Connections this host may have in flight for the tenant: the cap, "
	  "standalone; in a fleet, the slots held and those free at the last "
	  "call to Redis.", STAT(conn_slots) },
	{ "rlgate_conn_denied_total", "counter",
	  "SYNs refused because the tenant's cap was reached (also in "
	  "rlgate_denied_total).", STAT(conn_denied) },
	{ "rlgate_conns_opened_total", "counter",
	  "Connections of a capped tenant counted in.", STAT(conns_opened) },
	{ "rlgate_conns_closed_total", "counter",
	  "Connections of a capped tenant seen to end by the kernel (a RST, or "
	  "FINs from both sides).", STAT(conns_closed) },
	{ "rlgate_denied_source_total", "counter",
	  "SYNs of a tenant with a per-source limit refused by their source's "
	  "bucket, or by the overflow bucket while the per-source table was "
	  "full (also in rlgate_denied_total).", STAT(src_denied) },
	{ "rlgate_source_overflow_total", "counter",
	  "SYNs of new sources judged by the tenant's overflow bucket: the "
	  "per-source table was full.", STAT(src_overflow) },
	{ "rlgate_conns_forgotten_total", "counter",
	  "Connections of a capped tenant ended by the agent's sweep: no socket "
	  "left for them, or idle past the TTL.", STAT(conns_forgotten) },
};

/* A metric with a label is one row per label value; the help goes with
 * the first row only. */
static const struct {
	enum rl_counter idx;
	const char *name, *label, *help;
} global_metrics[] = {
	{ RL_CNT_SYN, "rlgate_syn_total", NULL, "TCP SYNs (without ACK) seen." },
	{ RL_CNT_NOMATCH, "rlgate_syn_nomatch_total", NULL,
	  "SYNs no tenant rule matched (passed)." },
	{ RL_CNT_UNPARSED, "rlgate_unparsed_total", "verdict=\"pass\"",
	  "Packets that might open a TCP connection but could not be judged: "
	  "passed (no tenant's source, or an IP header cut short) or refused "
	  "(a tenant's source)." },
	{ RL_CNT_UNPARSED_DROP, "rlgate_unparsed_total", "verdict=\"drop\"", NULL },
	{ RL_CNT_FRAGMENT, "rlgate_fragments_total", NULL,
	  "Non-first IP fragments passed unjudged (past the TCP header)." },
	{ RL_CNT_REPEAT_CHARGED, "rlgate_syn_repeats_charged_total", NULL,
	  "Copies of an admitted SYN charged as new connections: more or sooner "
	  "than a client's retransmissions, or after the client ended the flow." },
	{ RL_CNT_RST_FAILED, "rlgate_rst_failed_total", NULL,
	  "RST replies wanted but not possible (packet dropped instead)." },
	{ RL_CNT_CONN_FULL, "rlgate_conns_full_total", NULL,
	  "SYNs of capped tenants refused because the table of connections "
	  "was full." },
	{ RL_CNT_VERIFY_SYN, "rlgate_verify_syn_total", NULL,
	  "SYNs of tenants with verify syncookie, passed uncharged to the "
	  "server's SYN cookies." },
	{ RL_CNT_VERIFY_ACK, "rlgate_verify_ack_total", NULL,
	  "Handshake ACKs of tenants with verify syncookie whose SYN cookie "
	  "checked out: charged as connections (free copies included)." },
	{ RL_CNT_OVERDRAWN, "rlgate_syn_overdrawn_total", NULL,
	  "SYNs of fleet tenants admitted past the host's last leased token, "
	  "on its overdraft, while the next lease was on its way; the lease "
	  "pays them back." },
	{ RL_CNT_COOKIE_SENT, "rlgate_verify_answered_total", NULL,
	  "SYNs of tenants with verify syncookie-answer answered with a SYN "
	  "cookie by rlgate itself (of rlgate_verify_syn_total)." },
};

/* Verification, while some tenant verifies: how many, and whether they are
 * verified (net.ipv4.tcp_syncookies is 2) or charged at their SYNs. */
static void render_verify(FILE *f, const struct agent *a)
{
	json_t *v = agent_verify_json(a);

	if (!v)
		return;
	scalar(f, "rlgate_verify_tenants", "gauge", "Tenants with verify "
	       "syncookie.", (unsigned long long)json_integer_value(
			json_object_get(v, "tenants")));
	scalar(f, "rlgate_verify_in_force", "gauge", "1 while tenants with "
	       "verify syncookie are verified; 0: net.ipv4.tcp_syncookies is "
	       "not 2 and their SYNs are charged.",
	       json_is_true(json_object_get(v, "verified")));
	json_decref(v);
}

/* Overload shedding, while on (rlagent --shed-at): the fullest listener's
 * accept queue, whether it sheds and at what budget; per tenant, what it
 * is held to and its SYNs refused while held, for the tenants held now or
 * ever (at most --metrics-tenants of them, in slot order). */
static void render_shed(FILE *f, struct agent *a)
{
	struct agent_shed_status st;
	uint64_t shed;
	double limit;
	size_t shown = 0;

	if (!agent_shed_state(a, &st))
		return;
	scalar(f, "rlgate_shed_active", "gauge", "1 while the tenants are held "
	       "to what the fullest listener accepts (its accept queue reached "
	       "--shed-at).", st.on);
	scalar(f, "rlgate_shed_listen_queue", "gauge", "Connections in the "
	       "fullest watched listener's accept queue.", st.top.len);
	scalar(f, "rlgate_shed_listen_backlog", "gauge", "That listener's "
	       "backlog: the most its accept queue holds.", st.top.max);
	scalar(f, "rlgate_shed_starts_total", "counter", "Times shedding "
	       "started.", st.starts);
	header(f, "rlgate_shed_budget", "gauge", "Admissions per second the "
	       "tenants share by weight while shedding (0 otherwise).");
	fprintf(f, "rlgate_shed_budget %.3f\n", st.on ? st.budget : 0.0);
	header(f, "rlgate_shed_accept_rate", "gauge", "The server's accepts "
	       "per second, as the agent measures them.");
	fprintf(f, "rlgate_shed_accept_rate %.3f\n", st.accept_rate);
	header(f, "rlgate_shed_denied_total", "counter", "SYNs of the tenant "
	       "refused while it was held by shedding.");
	for (size_t i = 0; i < a->n_tenants && shown < a->opts.metrics_tenants; i++)
		if (agent_shed_tenant(a, &a->tenants[i], &shed, &limit) &&
		    (shed || limit >= 0)) {
			tenant_row(f, "rlgate_shed_denied_total",
				   a->tenants[i].pol.name);
			fprintf(f, "%llu\n", (unsigned long long)shed);
			shown++;
		}
	header(f, "rlgate_shed_limit", "gauge", "Connections per second the "
	       "tenant is held to while shedding.");
	shown = 0;
	for (size_t i = 0; i < a->n_tenants && shown < a->opts.metrics_tenants; i++)
		if (agent_shed_tenant(a, &a->tenants[i], &shed, &limit) &&
		    limit >= 0) {
			tenant_row(f, "rlgate_shed_limit", a->tenants[i].pol.name);
			fprintf(f, "%.3f\n", limit);
			shown++;
		}
}

/* The broker's own figures, one line each. */
static void broker_scalars(FILE *f, const struct broker_stats *bs)
{
	const struct {
		const char *name, *type, *help;
		unsigned long long v;
	} broker[] = {
		{ "rlgate_redis_calls_total", "counter", "Calls to Redis (leases, "
		  "refunds, heartbeats, policy, script loads).", bs->redis_calls },
		{ "rlgate_redis_errors_total", "counter", "Redis calls that failed "
		  "or returned something unusable.", bs->redis_errors },
		{ "rlgate_live_agents", "gauge", "Agents alive in the fleet "
		  "registry, this one included.", bs->live_agents },
		{ "rlgate_agent_id_conflict", "gauge", "1 while another live agent "
		  "heartbeats with this agent's --agent-id.", bs->agent_id_conflict },
		{ "rlgate_agent_id_conflicts_total", "counter", "Times another live "
		  "agent was found using this agent's --agent-id.",
		  bs->agent_id_conflicts },
		{ "rlgate_redis_connected", "gauge", "1 while connected to Redis "
		  "with every script loaded.", strcmp(bs->state, "connected") == 0 },
		{ "rlgate_broker_state", "gauge", "0 healthy (leasing), 1 degraded "
		  "(fail policies apply once leased tokens are spent).", !bs->healthy },
		{ "rlgate_broker_transitions_total", "counter", "Switches between "
		  "healthy and degraded.", bs->transitions },
		{ "rlgate_redis_timeouts_total", "counter", "Checks that found a "
		  "Redis call unanswered past --redis-timeout.", bs->timeouts },
	};

	for (size_t m = 0; m < sizeof(broker) / sizeof(broker[0]); m++)
		scalar(f, broker[m].name, broker[m].type, broker[m].help,
		       broker[m].v);
}

/* Fleet mode's per tenant leasing figures: a uint64_t of struct
 * broker_tenant_stats at its offset. */
#define BT(f)	offsetof(struct broker_tenant_stats, f)
static const struct {
	const char *name, *type, *help;
	size_t from;
} fleet_metrics[] = {
	{ "rlgate_tokens_leased_total", "counter",
	  "Tokens leased from the tenant's global bucket in Redis.",
	  BT(tokens_leased) },
	{ "rlgate_tokens_refunded_total", "counter",
	  "Leased tokens given back unspent (idle past the lease TTL, or at shutdown).",
	  BT(tokens_refunded) },
	{ "rlgate_leases_total", "counter", "Lease calls that granted tokens.",
	  BT(leases) },
	{ "rlgate_tenant_redis_calls_total", "counter",
	  "Lease and refund calls to Redis for the tenant.", BT(redis_calls) },
	{ "rlgate_lease_size", "gauge", "Tokens this agent asks for per lease.",
	  BT(lease_size) },
	{ "rlgate_overshoot_bound", "gauge",
	  "Most connections the fleet can admit beyond rate x time + burst: "
	  "live agents x lease cap.", BT(overshoot_bound) },
};
#undef BT

/* The instance limit's figures, the verification's, the per-source
 * table's and the agent's own: what follows the tenants. */
static void render_instance(FILE *f, struct agent *a)
{
	struct kern_instance ki;

	kern_instance_read(&a->kern, &ki);
	scalar(f, "rlgate_instance_limit_conns", "gauge", "The instance "
	       "limit's cap on connections in flight to the host (0: none).",
	       a->instance_on ? a->instance.max_conns : 0);
	scalar(f, "rlgate_instance_conns", "gauge", "Connections in flight "
	       "counted in the instance limit's cap.",
	       a->instance_on ? (unsigned long long)ki.in_flight : 0);
	header(f, "rlgate_instance_denied_total", "counter", "SYNs the instance "
	       "limit refused, by reason: cap or rate.");
	fprintf(f, "rlgate_instance_denied_total{reason=\"cap\"} %llu\n",
		(unsigned long long)ki.denied_cap);
	fprintf(f, "rlgate_instance_denied_total{reason=\"rate\"} %llu\n",
		(unsigned long long)ki.denied_rate);
}

/* The per-source table: its size, its fill, and what the sweep reclaimed. */
static void render_sources(FILE *f, struct agent *a)
{
	uint64_t size, used, reclaimed;

	kern_src_fill(&a->kern, &size, &used, &reclaimed);
	scalar(f, "rlgate_per_source_table_size", "gauge", "Sources the kernel "
	       "can hold a bucket for (--per-source-table).", size);
	scalar(f, "rlgate_per_source_table_entries", "gauge", "Sources holding "
	       "a bucket now; at the size, new sources share their tenant's "
	       "overflow bucket.", used);
	scalar(f, "rlgate_per_source_reclaimed_total", "counter", "Entries of "
	       "the per-source table deleted once their bucket was full again.",
	       reclaimed);
}

/* --- a scrape, a slice at a time -------------------------------------- */

/*
 * A scrape of 100,000 tenants reads and sums some 35 MB of counters: done
 * at once it would hold the event loop (leases, heartbeats, the control
 * socket) for tens of milliseconds.  So it is a job that works for at most
 * SCRAPE_SLICE_NS per turn of the loop and then yields to it through a
 * timer of no delay, in phases:
 *
 *   NAMES    each tenant's slot and name, copied in the policy's order;
 *            begun again if the policy changes before the copy is whole
 *   READ     the kernel's counters of every slot up to the highest copied,
 *            a few thousand slots per system call
 *   TENANTS  each tenant's figures, its rank by activity since the
 *            previous scrape, and the sums over every tenant
 *   PICK     which tenants get their own series (--metrics-tenants)
 *   RENDER   the exposition, family by family
 *
 * From NAMES on the tenants are the job's: a tenant deleted (or moved to
 * another slot) before TENANTS reads it is left out of this scrape, series
 * and sums; one added after NAMES is in the next.  One job serves every
 * client whose request came before it began; those that ask while it runs
 * wait for the next one, so what a client gets was read after it asked.
 */
#define SCRAPE_SLICE_NS		(2ULL * 1000000ULL)
/* Rows between two looks at the clock: a few tens of microseconds */
#define SCRAPE_STEP		128
/* Per-CPU values read per system call: a quarter of a millisecond */
#define SCRAPE_READ_VALUES	4096
/* Restarts of NAMES under a policy that keeps changing, after which the
 * copy is made whole in one turn (a few milliseconds at 100,000 tenants) */
#define SCRAPE_RESTARTS		3

enum scrape_phase { SC_NAMES, SC_READ, SC_TENANTS, SC_PICK, SC_RENDER, SC_DONE };

struct scrape_row {
	uint32_t slot;
	uint32_t name;		/* offset in scrape.names */
	bool gone;		/* not the same tenant any more: left out */
	bool capped;		/* its policy has a cap on connections */
	uint64_t burst;
	double rate;		/* connections per second */
};

/* What the exposition is made of: a family of per tenant series (a header,
 * the kept tenants' rows, and their sum over every tenant if `total`), or
 * lines that do not depend on the tenants. */
enum item_kind {
	IT_STAT,	/* a uint64_t of struct agent_tenant_stats at off */
	IT_RATE, IT_BURST,	/* the tenant's limits */
	IT_BROKER,	/* a uint64_t of struct broker_tenant_stats at off */
	IT_BOUND,	/* the conn bound of capped tenants */
	IT_DEGRADED,	/* stats' s.degraded */
	IT_POINT,	/* by enforcement point: off 0 admitted, 1 denied */
	IT_FORGED,	/* tokens forged in the preload pool */
	IT_TEXT,	/* text() */
};

struct scrape;

struct item {
	enum item_kind kind;
	const char *name, *type, *help;
	size_t off;
	bool total;
	void (*text)(FILE *f, struct scrape *s);
};

#define SCRAPE_MAX_ITEMS	48

struct scrape {
	struct metrics *m;
	struct loop_timer *timer;	/* the next slice, if one is due */
	unsigned int n_clients;		/* waiting for this job */
	enum scrape_phase phase;
	size_t cur;			/* the phase's cursor */
	unsigned int restarts;
	int err;
	uint64_t start_ns;
	unsigned int turns;
	/* the policy NAMES copied */
	uint64_t version;
	const struct agent_tenant *tenants_at;
	size_t n;
	struct scrape_row *rows;
	char *names;
	size_t names_len, names_cap;
	uint32_t n_slots;
	struct rl_stats *all;		/* the counters of slots [0, n_slots) */
	struct agent_tenant_stats *st;
	struct broker_tenant_stats *bt;	/* fleet mode */
	uint64_t *forged;		/* with a preload pool */
	struct topn top;
	uint32_t *kept;			/* rows with their own series, in order */
	size_t n_kept;
	struct item items[SCRAPE_MAX_ITEMS];
	unsigned long long sums[SCRAPE_MAX_ITEMS];
	size_t n_items, item;
	FILE *f;
	char *body;
	size_t len;
};

static const char *row_name(const struct scrape *s, size_t i)
{
	return s->names + s->rows[i].name;
}

static void add_item(struct scrape *s, struct item it)
{
	if (s->n_items < SCRAPE_MAX_ITEMS)
		s->items[s->n_items++] = it;
}

/* Fleet mode's lines between its per tenant families. */
static void text_broker(FILE *f, struct scrape *s)
{
	struct broker_stats bs;

	broker_stats(s->m->a->broker, &bs);
	broker_scalars(f, &bs);
}

static void text_lease(FILE *f, struct scrape *s)
{
	struct broker_stats bs;

	broker_stats(s->m->a->broker, &bs);
	header(f, "rlgate_lease_seconds", "histogram", "Round trip of lease calls.");
	for (int i = 0; i < BROKER_LEASE_BUCKETS; i++) {
		if (i == BROKER_LEASE_BUCKETS - 1)
			fprintf(f, "rlgate_lease_seconds_bucket{le=\"+Inf\"} %llu\n",
				(unsigned long long)bs.lease_count);
		else
			fprintf(f, "rlgate_lease_seconds_bucket{le=\"%g\"} %llu\n",
				bs.lease_bounds[i], (unsigned long long)bs.lease_buckets[i]);
	}
	fprintf(f, "rlgate_lease_seconds_sum %.6f\n", bs.lease_sum_s);
	fprintf(f, "rlgate_lease_seconds_count %llu\n", (unsigned long long)bs.lease_count);
}

static void text_pool(FILE *f, struct scrape *s)
{
	struct preload *p = s->m->a->kern.preload;

	header(f, "rlgate_preload_pool_remade_total", "counter", "Times the "
	       "preload pool was found truncated, replaced or with its layout "
	       "rewritten, and made anew.");
	fprintf(f, "rlgate_preload_pool_remade_total %llu\n",
		(unsigned long long)p->remade);
	header(f, "rlgate_preload_pool_lost", "gauge", "1 while the preload "
	       "pool is lost and not made anew yet.");
	fprintf(f, "rlgate_preload_pool_lost %d\n", p->lost);
}

/* Everything after the tenants: the global counters, the instance limit,
 * verification, the per-source table and the agent itself. */
static void text_host(FILE *f, struct scrape *s)
{
	struct agent *a = s->m->a;
	uint64_t cnt[RL_CNT_MAX];
	char ifs[KERN_MAX_IFACES * (IF_NAMESIZE + 1) + 1] = "";
	const char *mode = "none";

	kern_counters(&a->kern, cnt);
	for (size_t g = 0; g < sizeof(global_metrics) / sizeof(global_metrics[0]); g++) {
		if (global_metrics[g].help)
			header(f, global_metrics[g].name, "counter",
			       global_metrics[g].help);
		if (global_metrics[g].label)
			fprintf(f, "%s{%s} %llu\n", global_metrics[g].name,
				global_metrics[g].label,
				(unsigned long long)cnt[global_metrics[g].idx]);
		else
			fprintf(f, "%s %llu\n", global_metrics[g].name,
				(unsigned long long)cnt[global_metrics[g].idx]);
	}

	render_instance(f, a);
	render_verify(f, a);
	render_shed(f, a);
	render_sources(f, a);

	header(f, "rlgate_tenants", "gauge", "Tenants in the policy.");
	fprintf(f, "rlgate_tenants %zu\n", a->n_tenants);
	header(f, "rlgate_metrics_tenants", "gauge", "Tenants with their own "
	       "series in this scrape (--metrics-tenants busiest).");
	fprintf(f, "rlgate_metrics_tenants %zu\n", s->n_kept);
	header(f, "rlgate_rule_tables", "gauge",
	       "Tables of 256 entries the compiled rules take.");
	fprintf(f, "rlgate_rule_tables %u\n", a->kern.cls_used);
	header(f, "rlgate_rule_tables_max", "gauge",
	       "Tables the classifier holds (--rule-memory).");
	fprintf(f, "rlgate_rule_tables_max %u\n", a->kern.cls.half);

	for (unsigned int i = 0; i < a->kern.n_ifaces; i++) {
		if (i)
			strcat(ifs, ",");
		strcat(ifs, a->kern.ifaces[i].name);
	}
	if (a->kern.n_ifaces)
		mode = kern_mode_name(a->kern.ifaces[0].mode);
	header(f, "rlgate_agent_info", "gauge",
	       "rlagent build and attachment; always 1.");
	fprintf(f, "rlgate_agent_info{version=\"%s\",interfaces=\"", RLGATE_VERSION);
	put_label(f, ifs);
	fprintf(f, "\",attach_mode=\"%s\",mode=\"%s\"} 1\n", mode,
		a->broker ? "fleet" : "standalone");
	header(f, "rlgate_agent_start_time_seconds", "gauge",
	       "Start time of rlagent since the Unix epoch, in seconds.");
	fprintf(f, "rlgate_agent_start_time_seconds %lld\n",
		(long long)a->start_wall);
}

/* The exposition's plan, in its order: the tenants' families, fleet
 * mode's, the preload pool's, then the host's lines. */
static void plan_items(struct scrape *s)
{
	struct agent *a = s->m->a;

	for (size_t m = 0; m < sizeof(tenant_metrics) / sizeof(tenant_metrics[0]); m++) {
		size_t from = tenant_metrics[m].from;

		add_item(s, (struct item){
			from == FROM_RATE ? IT_RATE : from == FROM_BURST ? IT_BURST :
			IT_STAT, tenant_metrics[m].name, tenant_metrics[m].type,
			tenant_metrics[m].help, from,
			strcmp(tenant_metrics[m].type, "counter") == 0, NULL });
	}
	if (a->broker) {
		for (size_t m = 0; m < sizeof(fleet_metrics) / sizeof(fleet_metrics[0]); m++)
			add_item(s, (struct item){ IT_BROKER, fleet_metrics[m].name,
				fleet_metrics[m].type, fleet_metrics[m].help,
				fleet_metrics[m].from,
				strcmp(fleet_metrics[m].type, "counter") == 0, NULL });
		add_item(s, (struct item){ IT_BOUND, "rlgate_conn_overshoot_bound",
			"gauge", "Capped tenants: most connections the fleet can "
			"have in flight above the cap beyond those a host had when "
			"it stopped renewing its slots: (live agents - 1) x fail "
			"share; +Inf with fail allow.", 0, false, NULL });
		add_item(s, (struct item){ .kind = IT_TEXT, .text = text_broker });
		add_item(s, (struct item){ IT_DEGRADED, "rlgate_degraded_total",
			"counter", "SYNs decided by the tenant's fail policy while "
			"degraded.", 0, true, NULL });
		add_item(s, (struct item){ .kind = IT_TEXT, .text = text_lease });
	}
	if (a->kern.preload) {
		add_item(s, (struct item){ IT_POINT, "rlgate_point_admitted_total",
			"counter", "Connections admitted, by enforcement point: "
			"kernel (XDP or tc) or preload (librlpreload.so).", 0,
			false, NULL });
		add_item(s, (struct item){ IT_POINT, "rlgate_point_denied_total",
			"counter", "Connections refused, by enforcement point: "
			"kernel (XDP or tc) or preload (librlpreload.so).", 1,
			false, NULL });
		add_item(s, (struct item){ IT_FORGED,
			"rlgate_preload_forged_tokens_total", "counter", "Leased "
			"tokens found in the preload pool beyond what this agent "
			"gave it (written by a process of the pool's group), taken "
			"out and dropped.", 0, true, NULL });
		add_item(s, (struct item){ .kind = IT_TEXT, .text = text_pool });
	}
	add_item(s, (struct item){ .kind = IT_TEXT, .text = text_host });
}

/* Row i's figure in a family that sums over the tenants. */
static unsigned long long item_value(const struct scrape *s,
				     const struct item *it, size_t i)
{
	switch (it->kind) {
	case IT_STAT:
		return field_at(&s->st[i], it->off);
	case IT_BROKER:
		return field_at(&s->bt[i], it->off);
	case IT_DEGRADED:
		return (unsigned long long)s->st[i].s.degraded;
	case IT_FORGED:
		return (unsigned long long)s->forged[i];
	default:
		return 0;
	}
}

/* Row i's line(s) in family it. */
static void item_row(FILE *f, const struct scrape *s, const struct item *it,
		     size_t i)
{
	static const char *const points[] = { "kernel", "preload" };
	const struct scrape_row *r = &s->rows[i];

	switch (it->kind) {
	case IT_RATE:
		tenant_row(f, it->name, row_name(s, i));
		fprintf(f, "%.9g\n", r->rate);
		return;
	case IT_BURST:
		tenant_row(f, it->name, row_name(s, i));
		fprintf(f, "%llu\n", (unsigned long long)r->burst);
		return;
	case IT_BOUND:
		if (!r->capped)
			return;
		tenant_row(f, it->name, row_name(s, i));
		if (s->bt[i].conn_bound == UINT64_MAX)
			fprintf(f, "+Inf\n");
		else
			fprintf(f, "%llu\n", (unsigned long long)s->bt[i].conn_bound);
		return;
	case IT_POINT:
		for (int p = 0; p < 2; p++) {
			const struct rl_stats *st = p ? &s->st[i].preload :
						       &s->st[i].kernel;

			fprintf(f, "%s{tenant=\"", it->name);
			put_label(f, row_name(s, i));
			fprintf(f, "\",point=\"%s\"} %llu\n", points[p],
				(unsigned long long)(it->off ? st->denied :
						     st->admitted));
		}
		return;
	default:
		tenant_row(f, it->name, row_name(s, i));
		fprintf(f, "%llu\n", item_value(s, it, i));
	}
}

static bool out_of_time(uint64_t start_ns, bool whole)
{
	return !whole && loop_now_ns() - start_ns >= SCRAPE_SLICE_NS;
}

/* Whether the tenants are still those NAMES began to copy. */
static bool tenants_unchanged(const struct scrape *s)
{
	const struct agent *a = s->m->a;

	return a->policy_version == s->version && a->tenants == s->tenants_at &&
	       a->n_tenants == s->n;
}

/* NAMES: returns true when the copy is whole. */
static bool step_names(struct scrape *s, uint64_t t0)
{
	struct agent *a = s->m->a;
	bool whole = s->restarts >= SCRAPE_RESTARTS;

	if (s->cur && !tenants_unchanged(s)) {
		s->restarts++;
		s->cur = 0;
		whole = s->restarts >= SCRAPE_RESTARTS;
	}
	if (!s->cur) {
		struct scrape_row *rows = realloc(s->rows, (a->n_tenants + 1) *
						  sizeof(*rows));

		if (!rows) {
			s->err = -ENOMEM;
			return true;
		}
		s->rows = rows;
		s->version = a->policy_version;
		s->tenants_at = a->tenants;
		s->n = a->n_tenants;
		s->names_len = 0;
		s->n_slots = 0;
	}
	while (s->cur < s->n) {
		const struct agent_tenant *t = &a->tenants[s->cur];
		size_t len = strlen(t->pol.name) + 1;

		if (s->names_len + len > s->names_cap) {
			size_t cap = s->names_cap ? 2 * s->names_cap : 4096;
			char *names;

			while (cap < s->names_len + len)
				cap *= 2;
			names = realloc(s->names, cap);
			if (!names) {
				s->err = -ENOMEM;
				return true;
			}
			s->names = names;
			s->names_cap = cap;
		}
		memcpy(s->names + s->names_len, t->pol.name, len);
		s->rows[s->cur] = (struct scrape_row){ .slot = t->slot,
						       .name = (uint32_t)s->names_len };
		s->names_len += len;
		if (t->slot < a->kern.max_tenants && t->slot >= s->n_slots)
			s->n_slots = t->slot + 1;
		if (++s->cur % SCRAPE_STEP == 0 && out_of_time(t0, whole))
			return false;
	}
	return true;
}

/* READ: true when every slot is read (or reading failed: TENANTS then
 * reads each tenant's own). */
static bool step_read(struct scrape *s, uint64_t t0)
{
	struct kern *k = &s->m->a->kern;
	uint32_t per = SCRAPE_READ_VALUES / (uint32_t)(k->ncpus > 0 ? k->ncpus : 1);

	if (per < 64)
		per = 64;
	if (!s->all && !s->cur && s->n_slots) {
		s->all = malloc((size_t)s->n_slots * sizeof(*s->all));
		if (!s->all)
			return true;
	}
	while (s->all && s->cur < s->n_slots) {
		uint32_t n = s->n_slots - (uint32_t)s->cur < per ?
			     s->n_slots - (uint32_t)s->cur : per;

		if (kern_tenant_stats_range(k, (uint32_t)s->cur, n,
					    s->all + s->cur)) {
			free(s->all);
			s->all = NULL;
			return true;
		}
		s->cur += n;
		if (out_of_time(t0, false))
			return false;
	}
	return true;
}

/* The tenant row i was copied from, if it still holds the same slot. */
static struct agent_tenant *row_tenant(struct scrape *s, size_t i)
{
	struct agent *a = s->m->a;
	struct agent_tenant *t = NULL;

	if (tenants_unchanged(s))
		t = &a->tenants[i];
	else if (a->ix)
		t = agent_find_slot(a, s->rows[i].slot);
	if (!t || t->slot != s->rows[i].slot ||
	    strcmp(t->pol.name, row_name(s, i)) != 0)
		return NULL;
	return t;
}

/* Row i's figures, its rank, and its part of the sums. */
static void read_row(struct scrape *s, size_t i)
{
	struct metrics *m = s->m;
	struct agent *a = m->a;
	struct scrape_row *r = &s->rows[i];
	struct agent_tenant *t = row_tenant(s, i);
	uint64_t now, before;

	if (!t) {
		r->gone = true;
		memset(&s->st[i], 0, sizeof(s->st[i]));
		if (s->bt)
			memset(&s->bt[i], 0, sizeof(s->bt[i]));
		if (s->forged)
			s->forged[i] = 0;
		return;
	}
	agent_tenant_stats_from(a, t, s->all && r->slot < s->n_slots ?
				&s->all[r->slot] : NULL, &s->st[i]);
	r->rate = (double)t->pol.rate.count / (double)t->pol.rate.period_s;
	r->burst = t->pol.burst;
	r->capped = t->pol.max_conns > 0;
	if (a->broker)
		broker_tenant_stats(a->broker, r->slot, &t->pol, &s->bt[i]);
	if (a->kern.preload)
		s->forged[i] = preload_forged(a->kern.preload, r->slot);
	/* ranked by admitted + denied since the previous scrape; a slot
	 * given to another tenant starts again */
	now = s->st[i].s.admitted + s->st[i].s.denied;
	before = r->slot < a->kern.max_tenants ? m->last[r->slot] : 0;
	if (r->slot < a->kern.max_tenants)
		m->last[r->slot] = now;
	topn_add(&s->top, now >= before ? now - before : now, row_name(s, i), i);
	for (size_t x = 0; x < s->n_items; x++)
		if (s->items[x].total)
			s->sums[x] += item_value(s, &s->items[x], i);
}

static bool step_tenants(struct scrape *s, uint64_t t0)
{
	struct agent *a = s->m->a;

	/* not calloc: 35 MB at 100,000 tenants, which a heap with room
	 * would zero in one go; read_row fills each row */
	if (!s->cur) {
		s->st = malloc((s->n + 1) * sizeof(*s->st));
		s->bt = a->broker ? malloc((s->n + 1) * sizeof(*s->bt)) : NULL;
		s->forged = a->kern.preload ? malloc((s->n + 1) * sizeof(*s->forged)) :
			    NULL;
		if (!s->st || (a->broker && !s->bt) || (a->kern.preload && !s->forged) ||
		    topn_init(&s->top, a->opts.metrics_tenants, s->n)) {
			s->err = -ENOMEM;
			return true;
		}
	}
	while (s->cur < s->n) {
		read_row(s, s->cur);
		if (++s->cur % SCRAPE_STEP == 0 && out_of_time(t0, false))
			return false;
	}
	return true;
}

/* PICK: the kept rows, in the policy's order. */
static void step_pick(struct scrape *s)
{
	bool *keep = calloc(s->n + 1, sizeof(*keep));

	s->kept = calloc(s->n + 1, sizeof(*s->kept));
	if (!keep || !s->kept) {
		free(keep);
		s->err = -ENOMEM;
		return;
	}
	topn_keep(&s->top, keep, s->n);
	for (size_t i = 0; i < s->n; i++)
		if (keep[i] && !s->rows[i].gone)
			s->kept[s->n_kept++] = (uint32_t)i;
	free(keep);
	topn_free(&s->top);
}

/* RENDER: true when the exposition is whole. */
static bool step_render(struct scrape *s, uint64_t t0)
{
	if (!s->f) {
		s->f = open_memstream(&s->body, &s->len);
		if (!s->f) {
			s->err = -ENOMEM;
			return true;
		}
	}
	while (s->item < s->n_items) {
		const struct item *it = &s->items[s->item];

		if (it->kind == IT_TEXT) {
			it->text(s->f, s);
		} else {
			if (!s->cur)
				header(s->f, it->name, it->type, it->help);
			while (s->cur < s->n_kept) {
				item_row(s->f, s, it, s->kept[s->cur]);
				if (++s->cur % SCRAPE_STEP == 0 &&
				    out_of_time(t0, false))
					return false;
			}
			if (it->total)
				host_total(s->f, it->name, s->sums[s->item]);
		}
		s->item++;
		s->cur = 0;
		if (out_of_time(t0, false))
			return false;
	}
	if (fclose(s->f) != 0) {
		free(s->body);
		s->body = NULL;
		s->err = -ENOMEM;
	}
	s->f = NULL;
	return true;
}

static void scrape_free(struct scrape *s)
{
	bool large;

	if (!s)
		return;
	large = s->n >= METRICS_TRIM_TENANTS;
	if (s->timer)
		loop_timer_cancel(s->timer);
	if (s->f)
		fclose(s->f);
	free(s->body);
	free(s->rows);
	free(s->names);
	free(s->all);
	free(s->st);
	free(s->bt);
	free(s->forged);
	free(s->kept);
	topn_free(&s->top);
	free(s);
	/* the figures of 100,000 tenants, gone in large pieces: their pages
	 * back to the system */
	if (large)
		malloc_trim(0);
}

/* A client gone while its scrape runs: the job stops with its last
 * client. */
static void scrape_leave(struct metrics *m)
{
	if (m->job && --m->job->n_clients == 0) {
		scrape_free(m->job);
		m->job = NULL;
	}
}

static void respond(struct metrics_client *cl, int code, const char *reason,
		    const char *body, size_t body_len)
{
	FILE *f = open_memstream(&cl->out, &cl->out_len);

	if (!f)
		return;
	fprintf(f, "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		"Connection: close\r\n\r\n", code, reason,
		code == 200 ? "text/plain; version=0.0.4; charset=utf-8" :
		"text/plain; charset=utf-8", body_len);
	fwrite(body, 1, body_len, f);
	if (fclose(f) != 0) {
		free(cl->out);
		cl->out = NULL;
		cl->out_len = 0;
	}
}

static void scrape_start(struct metrics *m);

/* The job is done: its answer to each client that waited for it, then the
 * next job for those that asked since. */
static void scrape_deliver(struct scrape *s)
{
	struct metrics *m = s->m;
	struct server_client *sc, *next;
	bool more = false;

	m->job = NULL;
	if (!s->err) {
		m->scrapes++;
		m->last_scrape_ns = loop_now_ns() - s->start_ns;
		m->last_turns = s->turns;
	}
	for (sc = server_clients(m->srv); sc; sc = next) {
		struct metrics_client *cl = (struct metrics_client *)sc;

		next = sc->next;
		if (!cl->in_job) {
			more |= cl->waiting;
			continue;
		}
		cl->in_job = cl->waiting = false;
		if (s->err)
			respond(cl, 500, "Internal Server Error", "out of memory\n", 14);
		else
			respond(cl, 200, "OK", s->body, s->len);
		if (!cl->out) {
			server_client_free(sc);
			continue;
		}
		sc->last_ns = loop_now_ns();
		loop_watch_set(sc->w, LOOP_WRITE);
	}
	scrape_free(s);
	if (more)
		scrape_start(m);
}

/* The CPU time of this thread, in nanoseconds. */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* One slice of a scrape: at most SCRAPE_SLICE_NS of work (plus one step
 * of it), then the loop's other work before the next. */
static void scrape_slice(struct loop_timer *timer, void *arg)
{
	struct scrape *s = arg;
	struct metrics *m = s->m;
	uint64_t t0 = loop_now_ns(), c0 = thread_cpu_ns(), held;
	bool done = false;

	(void)timer;
	s->timer = NULL;	/* fired: gone */
	s->turns++;
	switch (s->phase) {
	case SC_NAMES:
		done = step_names(s, t0);
		break;
	case SC_READ:
		done = step_read(s, t0);
		break;
	case SC_TENANTS:
		done = step_tenants(s, t0);
		break;
	case SC_PICK:
		step_pick(s);
		done = true;
		break;
	case SC_RENDER:
		done = step_render(s, t0);
		break;
	case SC_DONE:
		break;
	}
	if (done) {
		s->cur = 0;
		s->phase = s->err ? SC_DONE : s->phase + 1;
	}
	if (s->phase == SC_DONE)
		scrape_deliver(s);
	else if (loop_timer_add(m->a->loop, 0, 0, scrape_slice, s, &s->timer)) {
		s->err = -ENOMEM;
		scrape_deliver(s);
	}
	held = loop_now_ns() - t0;
	if (held > m->hold_max_ns)
		m->hold_max_ns = held;
	held = thread_cpu_ns() - c0;
	if (held > m->hold_max_cpu_ns)
		m->hold_max_cpu_ns = held;
}

/* A job for every client waiting, begun at the next turn of the loop. */
static void scrape_start(struct metrics *m)
{
	struct scrape *s = calloc(1, sizeof(*s));
	struct server_client *sc, *next;

	if (s && loop_timer_add(m->a->loop, 0, 0, scrape_slice, s, &s->timer)) {
		free(s);
		s = NULL;
	}
	for (sc = server_clients(m->srv); sc; sc = next) {
		struct metrics_client *cl = (struct metrics_client *)sc;

		next = sc->next;
		if (!cl->waiting)
			continue;
		if (s) {
			cl->in_job = true;
			s->n_clients++;
			continue;
		}
		cl->waiting = false;
		respond(cl, 500, "Internal Server Error", "out of memory\n", 14);
		if (!cl->out)
			server_client_free(sc);
		else
			loop_watch_set(sc->w, LOOP_WRITE);
	}
	if (!s)
		return;
	s->m = m;
	s->start_ns = loop_now_ns();
	plan_items(s);
	m->job = s;
}

/* Answers once the request head is complete (or cannot become valid); a
 * scrape's answer comes when its job is done. */
static void handle_request(struct metrics_client *cl)
{
	struct metrics *m = server_ctx(cl->sc.srv);
	char method[8], path[256];

	if (sscanf(cl->req, "%7s %255s", method, path) != 2) {
		respond(cl, 400, "Bad Request", "bad request\n", 12);
		return;
	}
	if (strcmp(method, "GET") != 0) {
		respond(cl, 405, "Method Not Allowed", "only GET\n", 9);
		return;
	}
	if (strcmp(path, "/metrics") != 0 && strncmp(path, "/metrics?", 9) != 0) {
		respond(cl, 404, "Not Found", "not found; try /metrics\n", 24);
		return;
	}
	cl->waiting = true;
	if (!m->job)
		scrape_start(m);
}

/* While its scrape runs, a client has nothing more to say: bytes it sends
 * are dropped, and its leaving frees its place in the job. */
static void on_waiting(struct server_client *sc)
{
	char buf[512];
	ssize_t n = read(sc->fd, buf, sizeof(buf));

	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
		server_client_free(sc);
}

static void on_client(struct server_client *sc, unsigned int events)
{
	struct metrics_client *cl = (struct metrics_client *)sc;

	if (cl->waiting) {
		if (events & (LOOP_READ | LOOP_HUP))
			on_waiting(sc);
		return;
	}
	if (!cl->out && (events & (LOOP_READ | LOOP_HUP))) {
		ssize_t n = read(sc->fd, cl->req + cl->req_len,
				 sizeof(cl->req) - 1 - cl->req_len);

		if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) {
			server_client_free(sc);
			return;
		}
		if (n > 0)
			cl->req_len += (size_t)n;
		cl->req[cl->req_len] = '\0';
		if (strstr(cl->req, "\r\n\r\n") || strstr(cl->req, "\n\n"))
			handle_request(cl);
		else if (cl->req_len == sizeof(cl->req) - 1)
			respond(cl, 431, "Request Header Fields Too Large",
				"request too large\n", 18);
		if (!cl->out) {
			if (!cl->waiting && cl->req_len > 0 &&
			    cl->req_len == sizeof(cl->req) - 1)
				server_client_free(sc);
			return;
		}
		loop_watch_set(sc->w, LOOP_WRITE);
	}
	if (cl->out && (events & (LOOP_WRITE | LOOP_HUP) || cl->out_off == 0)) {
		while (cl->out_off < cl->out_len) {
			ssize_t n = send(sc->fd, cl->out + cl->out_off,
					 cl->out_len - cl->out_off, MSG_NOSIGNAL);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				return;
			if (n < 0) {
				server_client_free(sc);
				return;
			}
			cl->out_off += (size_t)n;
		}
		server_client_free(sc);
	}
}

static const struct server_ops metrics_ops = {
	.client_size = sizeof(struct metrics_client),
	.max_clients = METRICS_MAX_CLIENTS,
	.stall_ns = METRICS_STALL_NS,
	.evict_ns = METRICS_EVICT_NS,
	.event = on_client,
	.close = client_close,
};

json_t *metrics_status_json(const struct metrics *m)
{
	return json_pack("{s:I,s:b,s:I,s:I,s:I,s:I}",
			 "scrapes", (json_int_t)m->scrapes,
			 "scraping", m->job != NULL,
			 "last_scrape_us", (json_int_t)(m->last_scrape_ns / 1000),
			 "last_scrape_turns", (json_int_t)m->last_turns,
			 "longest_hold_us", (json_int_t)(m->hold_max_ns / 1000),
			 "longest_hold_cpu_us",
			 (json_int_t)(m->hold_max_cpu_ns / 1000));
}

void metrics_tick(struct metrics *m, uint64_t now_ns)
{
	if (m)
		server_tick(m->srv, now_ns);
}

/* A TCP socket bound to addr, in *fd.  0 or -errno (logged). */
static int bind_addr(const char *addr, int *fd)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	char host[96], port[8];
	int err, one = 1;

	if (metrics_parse_addr(addr, host, sizeof(host), port, sizeof(port)))
		return -EINVAL;
	err = getaddrinfo(host, port, &hints, &res);
	if (err) {
		log_error("couldn't resolve address on '%s': %s", addr,
			  gai_strerror(err));
		return -EINVAL;
	}
	*fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (*fd < 0) {
		err = -errno;
		log_error("couldn't create socket on '%s': %s", addr,
			  strerror(-err));
	} else {
		setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(*fd, res->ai_addr, res->ai_addrlen) < 0) {
			err = -errno;
			log_error("couldn't bind metrics socket on '%s': %s",
				  addr, strerror(-err));
			close(*fd);
		}
	}
	freeaddrinfo(res);
	return err;
}

int metrics_open(struct agent *a, const char *addr, struct metrics **out)
{
	struct metrics *m = calloc(1, sizeof(*m));
	int err, fd;

	if (!m)
		return -ENOMEM;
	m->a = a;
	m->last = calloc(a->kern.max_tenants + 1, sizeof(*m->last));
	if (!m->last) {
		free(m);
		return -ENOMEM;
	}
	err = bind_addr(addr, &fd);
	/* the server takes fd, even when it fails */
	if (!err)
		err = server_start(a->loop, fd, addr, &metrics_ops, m, &m->srv);
	if (err) {
		free(m->last);
		free(m);
		return err;
	}
	log_info("metrics on http://%s/metrics", addr);
	*out = m;
	return 0;
}

void metrics_close(struct metrics *m)
{
	if (!m)
		return;
	/* its clients' going frees the job */
	server_stop(m->srv);
	scrape_free(m->job);
	free(m->last);
	free(m);
}
