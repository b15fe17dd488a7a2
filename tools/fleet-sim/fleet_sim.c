// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* fleet-sim: N simulated agents leasing one tenant's tokens from a real Redis
 * through lua/lease.lua, each sizing its leases with user/lib/lease.c as the
 * agent does, under an offered load spread evenly or skewed.  Prints
 * `name value unit` lines: calls per second, tokens per call, accuracy and
 * the overshoot bound against what was observed.  With SHARDS k > 1 the
 * tenant is split into k sub-buckets (user/lib/hot.c): each agent leases
 * from its own first and asks the others in turn for what is missing; the
 * spread of the agents' admitted ratios shows what that costs in fairness.
 *   fleet-sim SOCKET SCRIPT AGENTS SECONDS RATE OFFERED_X even|skew PREFIX
 *             [SHARDS]
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hot.h"
#include "lease.h"
#include "policy.h"

#define TTL_MS		1000	/* the agent's default --lease-ttl */

struct agent {
	double share;		/* part of the offered load */
	double due;		/* arrivals not yet counted (fractions) */
	uint64_t held, admitted, refused, calls, granted;
	uint64_t wait_until_ns;
	uint64_t start_count;	/* admitted + refused */
	unsigned int home;	/* its own sub-bucket */
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

/* One lease call, as the broker makes it: want tokens, come back after
 * lease_wait_ms() when short.  0 or -EIO. */
static int lease(redisContext *c, const char *sha, const char *key,
		 const struct policy_tenant *t, struct agent *a,
		 const struct lease_plan *p, uint64_t want, uint64_t *rtt_ns,
		 uint64_t *wait_ms)
{
	uint64_t t0 = now_ns(), granted, remaining, advised;
	redisReply *r;

	r = redisCommand(c, "EVALSHA %s 1 %s %llu %llu %llu %llu %llu", sha, key,
			 (unsigned long long)t->rate.count,
			 (unsigned long long)t->rate.period_s,
			 (unsigned long long)t->burst, (unsigned long long)want,
			 (unsigned long long)p->chunk);
	if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
		fprintf(stderr, "Error: lease call failed: %s\n",
			r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
		if (r)
			freeReplyObject(r);
		return -EIO;
	}
	granted = (uint64_t)r->element[0]->integer;
	remaining = (uint64_t)r->element[1]->integer;
	advised = (uint64_t)r->element[2]->integer;
	freeReplyObject(r);
	*rtt_ns = now_ns() - t0;
	a->calls++;
	a->granted += granted;
	a->held += granted;
	*wait_ms = lease_wait_ms(t, want, granted, remaining, p->chunk, advised);
	return 0;
}

/* Tops agent a up by want tokens from the k sub-buckets: its own first,
 * then the others in turn for what is still missing, and waits before the
 * next one as hot_wait_ms() says.  0 or -EIO. */
static int lease_split(redisContext *c, const char *sha, char (*keys)[128],
		       const struct policy_tenant *subs, unsigned int k,
		       struct agent *a, const struct lease_plan *p, uint64_t want,
		       uint64_t *rtt_ns)
{
	uint64_t start = a->granted, wait = UINT64_MAX, w;

	for (unsigned int n = 0; n < k && a->granted - start < want; n++) {
		unsigned int i = hot_order(a->home, k, n);

		if (lease(c, sha, keys[i], &subs[i], a, p,
			  want - (a->granted - start), rtt_ns, &w))
			return -EIO;
		wait = w < wait ? w : wait;
	}
	wait = hot_wait_ms(k, a->granted - start, want, wait);
	a->wait_until_ns = wait ? now_ns() + wait * 1000000u : 0;
	return 0;
}

int main(int argc, char **argv)
{
	struct policy_tenant t = { .rate = { 0, 1 }, .fail = POLICY_FAIL_DENY };
	uint64_t n, secs, start, last, end, rtt_ns = 200000, admitted = 0;
	uint64_t calls = 0, granted = 0, held = 0, bound, refused = 0;
	double offered_x, elapsed, limit;
	struct policy_tenant subs[HOT_SHARDS_MAX];
	char keys[HOT_SHARDS_MAX][128], name[64], *script, *pfx;
	double ratio_min = 1, ratio_max = 0;
	unsigned int k = 1;
	struct agent *ag;
	redisContext *c;
	redisReply *r;
	char sha[64];
	bool skew;

	if (argc != 9 && argc != 10) {
		fprintf(stderr, "usage: fleet-sim SOCKET SCRIPT AGENTS SECONDS RATE "
				"OFFERED_X even|skew PREFIX [SHARDS]\n");
		return 2;
	}
	n = strtoull(argv[3], NULL, 10);
	secs = strtoull(argv[4], NULL, 10);
	t.rate.count = strtoull(argv[5], NULL, 10);
	offered_x = strtod(argv[6], NULL);
	skew = !strcmp(argv[7], "skew");
	pfx = argv[8];
	if (!n || !secs || !t.rate.count || offered_x <= 0) {
		fprintf(stderr, "Error: bad arguments: AGENTS, SECONDS, RATE and "
				"OFFERED_X must be above 0\n");
		return 2;
	}
	t.burst = policy_default_burst(&t.rate);
	snprintf(t.name, sizeof(t.name), "sim-%s", pfx);
	if (argc == 10) {
		char err[256];

		k = (unsigned int)strtoul(argv[9], NULL, 10);
		if (hot_check(&t, k, err)) {
			fprintf(stderr, "Error: %s\n", err);
			return 2;
		}
	}
	script = slurp(argv[2]);
	if (!script) {
		fprintf(stderr, "Error: couldn't read '%s'\n", argv[2]);
		return 1;
	}
	c = redisConnectUnix(argv[1]);
	if (!c || c->err) {
		fprintf(stderr, "Error: couldn't connect to '%s': %s\n", argv[1],
			c ? c->errstr : "out of memory");
		return 1;
	}
	r = redisCommand(c, "SCRIPT LOAD %s", script);
	if (!r || r->type != REDIS_REPLY_STRING) {
		fprintf(stderr, "Error: couldn't load '%s'\n", argv[2]);
		return 1;
	}
	snprintf(sha, sizeof(sha), "%s", r->str);
	freeReplyObject(r);
	for (unsigned int i = 0; i < k; i++) {
		hot_sub_tenant(&t, k, i, &subs[i]);
		hot_key(keys[i], sizeof(keys[i]), t.name, k, i, "bucket");
		freeReplyObject(redisCommand(c, "DEL %s", keys[i]));
	}

	ag = calloc(n, sizeof(*ag));
	for (uint64_t i = 0; i < n; i++) {
		ag[i].share = !skew || n == 1 ? 1.0 / (double)n :
			      i == 0 ? 0.9 : 0.1 / (double)(n - 1);
		snprintf(name, sizeof(name), "agent-%llu", (unsigned long long)i);
		ag[i].home = hot_home(name, k);
	}

	start = last = now_ns();
	end = start + secs * 1000000000u;
	for (uint64_t now = start; now < end; now = now_ns()) {
		double dt = (double)(now - last) / 1e9;

		last = now;
		for (uint64_t i = 0; i < n; i++) {
			struct agent *a = &ag[i];
			double since = (double)(now - start) / 1e9;
			uint64_t cap = lease_cap(&t, n), want;
			struct lease_in in = {
				.t = &t, .agents = n, .ttl_ms = TTL_MS,
				.lead_ms = lease_lead_ms(rtt_ns),
			};
			struct lease_plan p;

			a->due += offered_x * (double)t.rate.count * a->share * dt;
			for (; a->due >= 1; a->due -= 1) {
				if (a->held) {
					a->held--;
					a->admitted++;
				} else {
					a->refused++;
				}
			}
			/* The host's meter: demand since the start, and the
			 * part of it refused. */
			in.rate = since > 0.05 ? (double)(a->admitted + a->refused) / since : -1;
			in.refused = a->admitted + a->refused ?
				     (double)a->refused / (double)(a->admitted + a->refused) : 0;
			lease_plan(&in, &p);
			if (a->held > p.lowwater || (a->wait_until_ns && now < a->wait_until_ns))
				continue;
			want = lease_topup(cap, a->held, p.size);
			if (want && lease_split(c, sha, keys, subs, k, a, &p, want,
						&rtt_ns))
				return 1;
		}
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL);
	}
	elapsed = (double)(now_ns() - start) / 1e9;
	for (uint64_t i = 0; i < n; i++) {
		admitted += ag[i].admitted;
		refused += ag[i].refused;
		calls += ag[i].calls;
		granted += ag[i].granted;
		held += ag[i].held;
		if (ag[i].admitted + ag[i].refused) {
			double ratio = (double)ag[i].admitted /
				       (double)(ag[i].admitted + ag[i].refused);

			ratio_min = ratio < ratio_min ? ratio : ratio_min;
			ratio_max = ratio > ratio_max ? ratio : ratio_max;
		}
	}
	limit = (double)t.rate.count * elapsed + (double)t.burst;
	bound = lease_bound(&t, n, TTL_MS);
	printf("%s_agents %llu agents\n", pfx, (unsigned long long)n);
	printf("%s_calls_per_s %.0f calls/s\n", pfx, (double)calls / elapsed);
	printf("%s_tokens_per_call %.1f tokens\n", pfx,
	       calls ? (double)granted / (double)calls : 0);
	printf("%s_calls_per_admitted %.3f calls\n", pfx,
	       admitted ? (double)calls / (double)admitted : 0);
	printf("%s_accuracy %.3f ratio\n", pfx, (double)admitted / limit);
	printf("%s_admitted %llu conns\n", pfx, (unsigned long long)admitted);
	printf("%s_refused %llu conns\n", pfx, (unsigned long long)refused);
	printf("%s_limit %.0f conns\n", pfx, limit);
	printf("%s_overshoot_observed %.0f conns\n", pfx,
	       (double)admitted > limit ? (double)admitted - limit : 0);
	printf("%s_overshoot_bound %llu conns\n", pfx, (unsigned long long)bound);
	printf("%s_held_at_end %llu tokens\n", pfx, (unsigned long long)held);
	printf("%s_shards %u sub-buckets\n", pfx, k);
	printf("%s_admit_ratio_min %.3f ratio\n", pfx, ratio_min);
	printf("%s_admit_ratio_max %.3f ratio\n", pfx, ratio_max);
	redisFree(c);
	free(ag);
	free(script);
	return 0;
}
