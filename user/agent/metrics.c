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
#include <unistd.h>

#include "agent.h"
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
};

struct metrics {
	struct agent *a;
	struct server *srv;
	/* Per tenant slot: admitted + denied at the previous scrape, against
	 * which the next one ranks the tenants (--metrics-tenants). */
	uint64_t *last;
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

static void client_close(struct server_client *sc)
{
	struct metrics *m = server_ctx(sc->srv);

	free(((struct metrics_client *)sc)->out);
	/* the figures of 100,000 tenants, gone in small pieces, and the
	 * answer sent: their pages back to the system */
	if (m->a->n_tenants >= METRICS_TRIM_TENANTS)
		malloc_trim(0);
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

/* Fleet mode: per tenant leasing, then the broker's own figures. */
static void render_fleet(FILE *f, struct agent *a, const bool *keep)
{
#define BT(f)	offsetof(struct broker_tenant_stats, f)
	static const struct {
		const char *name, *type, *help;
		size_t from;
	} per_tenant[] = {
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
	struct broker_stats bs;
	unsigned long long degraded = 0;

	for (size_t m = 0; m < sizeof(per_tenant) / sizeof(per_tenant[0]); m++) {
		unsigned long long sum = 0;

		header(f, per_tenant[m].name, per_tenant[m].type, per_tenant[m].help);
		for (size_t i = 0; i < a->n_tenants; i++) {
			struct broker_tenant_stats bt;

			broker_tenant_stats(a->broker, a->tenants[i].slot,
					    &a->tenants[i].pol, &bt);
			sum += field_at(&bt, per_tenant[m].from);
			if (!keep[i])
				continue;
			tenant_row(f, per_tenant[m].name, a->tenants[i].pol.name);
			fprintf(f, "%llu\n", field_at(&bt, per_tenant[m].from));
		}
		if (strcmp(per_tenant[m].type, "counter") == 0)
			host_total(f, per_tenant[m].name, sum);
	}
	header(f, "rlgate_conn_overshoot_bound", "gauge",
	       "Capped tenants: most connections the fleet can have in flight "
	       "above the cap beyond those a host had when it stopped renewing "
	       "its slots: (live agents - 1) x fail share; +Inf with fail allow.");
	for (size_t i = 0; i < a->n_tenants; i++) {
		struct broker_tenant_stats bt;

		if (!a->tenants[i].pol.max_conns || !keep[i])
			continue;
		broker_tenant_stats(a->broker, a->tenants[i].slot,
				    &a->tenants[i].pol, &bt);
		tenant_row(f, "rlgate_conn_overshoot_bound", a->tenants[i].pol.name);
		if (bt.conn_bound == UINT64_MAX)
			fprintf(f, "+Inf\n");
		else
			fprintf(f, "%llu\n", (unsigned long long)bt.conn_bound);
	}
	broker_stats(a->broker, &bs);
	broker_scalars(f, &bs);
	header(f, "rlgate_degraded_total", "counter",
	       "SYNs decided by the tenant's fail policy while degraded.");
	for (size_t i = 0; i < a->n_tenants; i++) {
		struct agent_tenant_stats ts;

		agent_tenant_stats(a, &a->tenants[i], &ts);
		degraded += ts.s.degraded;
		if (!keep[i])
			continue;
		tenant_row(f, "rlgate_degraded_total", a->tenants[i].pol.name);
		fprintf(f, "%llu\n", (unsigned long long)ts.s.degraded);
	}
	host_total(f, "rlgate_degraded_total", degraded);
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

/* With a preload pool: each tenant's verdicts by enforcement point, the
 * kernel (XDP or tc) or the preloaded processes (librlpreload.so), and the
 * tokens forged in the pool. */
static void render_points(FILE *f, struct agent *a,
			  const struct agent_tenant_stats *st, const bool *keep)
{
	static const char *const names[] = {
		"rlgate_point_admitted_total", "rlgate_point_denied_total",
	};
	static const char *const points[] = { "kernel", "preload" };
	unsigned long long forged = 0;

	for (int m = 0; m < 2; m++) {
		header(f, names[m], "counter", m ? "Connections refused, by "
		       "enforcement point: kernel (XDP or tc) or preload "
		       "(librlpreload.so)." : "Connections admitted, by "
		       "enforcement point: kernel (XDP or tc) or preload "
		       "(librlpreload.so).");
		for (size_t i = 0; i < a->n_tenants; i++) {
			if (!keep[i])
				continue;
			for (int p = 0; p < 2; p++) {
				const struct rl_stats *s = p ? &st[i].preload :
							       &st[i].kernel;

				fprintf(f, "%s{tenant=\"", names[m]);
				put_label(f, a->tenants[i].pol.name);
				fprintf(f, "\",point=\"%s\"} %llu\n", points[p],
					(unsigned long long)(m ? s->denied :
							     s->admitted));
			}
		}
	}
	header(f, "rlgate_preload_forged_tokens_total", "counter", "Leased "
	       "tokens found in the preload pool beyond what this agent gave "
	       "it (written by a process of the pool's group), taken out and "
	       "dropped.");
	for (size_t i = 0; i < a->n_tenants; i++) {
		uint64_t n = preload_forged(a->kern.preload, a->tenants[i].slot);

		forged += n;
		if (!keep[i])
			continue;
		tenant_row(f, "rlgate_preload_forged_tokens_total",
			   a->tenants[i].pol.name);
		fprintf(f, "%llu\n", (unsigned long long)n);
	}
	host_total(f, "rlgate_preload_forged_tokens_total", forged);
	header(f, "rlgate_preload_pool_remade_total", "counter", "Times the "
	       "preload pool was found truncated, replaced or with its layout "
	       "rewritten, and made anew.");
	fprintf(f, "rlgate_preload_pool_remade_total %llu\n",
		(unsigned long long)a->kern.preload->remade);
	header(f, "rlgate_preload_pool_lost", "gauge", "1 while the preload "
	       "pool is lost and not made anew yet.");
	fprintf(f, "rlgate_preload_pool_lost %d\n", a->kern.preload->lost);
}

/* The host-wide instance limit: its cap (0: none), what is in flight, and
 * its refusals by reason. */
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

/* Which tenants get their own series: the --metrics-tenants busiest by
 * admitted + denied since the previous scrape, in keep[].  Remembers this
 * scrape's counts for the next one.  0 or -ENOMEM. */
static int pick_tenants(struct metrics *m, const struct agent_tenant_stats *st,
			bool *keep)
{
	struct agent *a = m->a;
	uint64_t *score = calloc(a->n_tenants + 1, sizeof(*score));
	const char **name = calloc(a->n_tenants + 1, sizeof(*name));
	int err = -ENOMEM;

	if (score && name) {
		for (size_t i = 0; i < a->n_tenants; i++) {
			uint64_t now = st[i].s.admitted + st[i].s.denied;
			uint32_t slot = a->tenants[i].slot;
			uint64_t before = slot < a->kern.max_tenants ?
					  m->last[slot] : 0;

			/* a slot given to another tenant starts again */
			score[i] = now >= before ? now - before : now;
			if (slot < a->kern.max_tenants)
				m->last[slot] = now;
			name[i] = a->tenants[i].pol.name;
		}
		err = topn_pick(score, name, a->n_tenants,
				a->opts.metrics_tenants, keep);
	}
	free(score);
	free(name);
	return err;
}

/* Renders the whole exposition into a malloc'ed buffer. */
static int render(struct metrics *mt, char **buf, size_t *len)
{
	struct agent *a = mt->a;
	struct agent_tenant_stats *st;
	bool *keep;
	uint64_t cnt[RL_CNT_MAX];
	char ifs[KERN_MAX_IFACES * (IF_NAMESIZE + 1) + 1] = "";
	const char *mode = "none";
	FILE *f;

	st = calloc(a->n_tenants + 1, sizeof(*st));
	keep = calloc(a->n_tenants + 1, sizeof(*keep));
	if (!st || !keep) {
		free(st);
		free(keep);
		return -ENOMEM;
	}
	{
		/* every tenant's counters in a few system calls, not one each */
		uint32_t n_all = 0;
		struct rl_stats *all = agent_stats_all(a, &n_all);

		for (size_t i = 0; i < a->n_tenants; i++)
			agent_tenant_stats_from(a, &a->tenants[i],
						all && a->tenants[i].slot < n_all ?
						&all[a->tenants[i].slot] : NULL, &st[i]);
		free(all);
	}
	if (pick_tenants(mt, st, keep)) {
		free(st);
		free(keep);
		return -ENOMEM;
	}
	f = open_memstream(buf, len);
	if (!f) {
		free(st);
		free(keep);
		return -ENOMEM;
	}

	for (size_t m = 0; m < sizeof(tenant_metrics) / sizeof(tenant_metrics[0]); m++) {
		unsigned long long sum = 0;
		bool counter = strcmp(tenant_metrics[m].type, "counter") == 0;

		header(f, tenant_metrics[m].name, tenant_metrics[m].type,
		       tenant_metrics[m].help);
		for (size_t i = 0; i < a->n_tenants; i++) {
			const struct policy_tenant *p = &a->tenants[i].pol;

			if (counter)
				sum += field_at(&st[i], tenant_metrics[m].from);
			if (!keep[i])
				continue;
			tenant_row(f, tenant_metrics[m].name, p->name);
			if (tenant_metrics[m].from == FROM_RATE)
				fprintf(f, "%.9g\n", (double)p->rate.count /
					(double)p->rate.period_s);
			else if (tenant_metrics[m].from == FROM_BURST)
				fprintf(f, "%llu\n", (unsigned long long)p->burst);
			else
				fprintf(f, "%llu\n",
					field_at(&st[i], tenant_metrics[m].from));
		}
		if (counter)
			host_total(f, tenant_metrics[m].name, sum);
	}

	if (a->broker)
		render_fleet(f, a, keep);
	if (a->kern.preload)
		render_points(f, a, st, keep);

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
	render_sources(f, a);

	header(f, "rlgate_tenants", "gauge", "Tenants in the policy.");
	fprintf(f, "rlgate_tenants %zu\n", a->n_tenants);
	header(f, "rlgate_metrics_tenants", "gauge", "Tenants with their own "
	       "series in this scrape (--metrics-tenants busiest).");
	fprintf(f, "rlgate_metrics_tenants %zu\n",
		a->n_tenants < a->opts.metrics_tenants ? a->n_tenants :
		(size_t)a->opts.metrics_tenants);
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
	free(keep);
	if (fclose(f) != 0) {
		free(st);
		free(*buf);
		*buf = NULL;
		return -ENOMEM;
	}
	free(st);
	return 0;
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

/* Answers once the request head is complete (or cannot become valid). */
static void handle_request(struct metrics_client *cl)
{
	struct metrics *m = server_ctx(cl->sc.srv);
	char method[8], path[256];
	char *body = NULL;
	size_t len = 0;

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
	if (render(m, &body, &len)) {
		respond(cl, 500, "Internal Server Error", "out of memory\n", 14);
		return;
	}
	respond(cl, 200, "OK", body, len);
	free(body);
}

static void on_client(struct server_client *sc, unsigned int events)
{
	struct metrics_client *cl = (struct metrics_client *)sc;

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
			if (cl->req_len > 0 && (cl->req_len == sizeof(cl->req) - 1))
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
	server_stop(m->srv);
	free(m->last);
	free(m);
}
