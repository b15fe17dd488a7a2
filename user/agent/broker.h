/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The lease broker of fleet mode: keeps every tenant's kernel bucket topped up
 * with tokens leased from the tenant's global bucket in Redis, gives back what
 * sits idle, registers this agent among the live ones, and keeps the policy in
 * step with the fleet's policy store.
 */
#ifndef RL_BROKER_H
#define RL_BROKER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "rlgate.h"

struct agent;
struct agent_tenant;
struct broker;

struct broker_opts {
	const char *redis;		/* HOST:PORT, [V6]:PORT or unix:PATH */
	const char *user;		/* ACL user for AUTH, or NULL */
	const char *password_file;	/* AUTH password, or NULL */
	const char *agent_id;		/* default: the host name */
	uint64_t lease_ttl_ms;		/* idle leased tokens go back after this */
	uint64_t timeout_ms;		/* a Redis call unanswered this long failed */
	uint64_t stale_ms;		/* the kernel's deadline for our heartbeat */
	uint64_t expected_agents;	/* static share until the registry answers */
};

/* Per tenant, for rlctl stats and metrics. */
struct broker_tenant_stats {
	uint64_t leases;		/* lease calls that granted tokens */
	uint64_t tokens_leased;
	uint64_t tokens_refunded;
	uint64_t redis_calls;		/* lease and refund calls */
	uint64_t lease_size;		/* current lease size */
	uint64_t owed;			/* tokens admitted without a lease yet */
	uint64_t static_charged;	/* static share admissions owed, ever */
	uint64_t overshoot_bound;	/* lease_bound() */
};

#define BROKER_LEASE_BUCKETS	12

struct broker_stats {
	const char *address;
	const char *state;		/* "connected", "connecting", "down" */
	bool healthy;			/* leasing: connected, breaker closed */
	time_t degraded_since;		/* 0 while healthy */
	const char *reason;		/* why degraded, "" while healthy */
	uint64_t transitions;		/* into and out of degraded */
	uint64_t timeouts;		/* calls unanswered past the timeout */
	uint64_t live_agents;
	const char *agent_id;
	const char *nonce;		/* this agent process's, in the registry */
	bool agent_id_conflict;		/* another live agent uses agent_id */
	uint64_t agent_id_conflicts;	/* times that began */
	uint64_t redis_calls;		/* every script call */
	uint64_t redis_errors;
	/* lease round trips: cumulative counts per upper bound, then the sum */
	const double *lease_bounds;	/* BROKER_LEASE_BUCKETS, last is +Inf */
	uint64_t lease_buckets[BROKER_LEASE_BUCKETS];
	double lease_sum_s;
	uint64_t lease_count;
};

/* Checks --redis without connecting.  0 or -EINVAL. */
int broker_parse_address(const char *s, char *host, size_t host_len, int *port,
			 char *path, size_t path_len);

/* Starts the broker: puts the kernel in leased mode and connects (in the
 * background; failures are retried with backoff).  0 or -errno (a bad
 * option, an unreadable password file). */
int broker_open(struct agent *a, const struct broker_opts *o, struct broker **out);

/* Stops at once: nothing is refunded.  NULL is fine. */
void broker_close(struct broker *b);

/* Clean shutdown: takes back every leased token from the kernel, refunds them
 * and leaves the registry, then calls done (also after a second at most, or
 * at once when Redis is out of reach). */
void broker_shutdown(struct broker *b, void (*done)(void *arg), void *arg);

/* A low-water event from the kernel for a slot. */
void broker_lowwater(struct broker *b, uint32_t slot);

/* The tenant set changed (through rlctl or from the fleet): tenants new
 * here start on credit, and a changed limit is leased for at once. */
void broker_tenants_changed(struct broker *b);

/* Slot now holds tenant p in the kernel, and no rule points at it yet: a
 * tenant new to the slot gets its credit now, so that its first SYN finds
 * a token.  NULL b is fine. */
void broker_slot_ready(struct broker *b, uint32_t slot, const struct policy_tenant *p);

/* The local policy changed through rlctl: publish each changed tenant (and a
 * tombstone for each removed one) to the fleet's policy store. */
void broker_policy_changed(struct broker *b, const struct agent_tenant *old,
			   size_t n_old, const struct agent_tenant *now,
			   size_t n_now);

void broker_tenant_stats(const struct broker *b, const struct agent_tenant *t,
			 struct broker_tenant_stats *out);
void broker_stats(const struct broker *b, struct broker_stats *out);

#endif /* RL_BROKER_H */
