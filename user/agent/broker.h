/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The lease broker of fleet mode: keeps every tenant's kernel bucket topped up
 * with tokens leased from the tenant's global bucket in Redis, gives back what
 * sits idle, registers this agent among the live ones, and keeps the policy in
 * step with the fleet's policy store.  It knows its host (the loop, the kernel
 * maps, the tenant set) only through struct broker_host, which main.c fills.
 */
#ifndef RL_BROKER_H
#define RL_BROKER_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <time.h>

#include "lease.h"
#include "loop.h"
#include "policy.h"
#include "rlgate.h"

struct broker;

/* What the broker sees of one tenant of its host's set.  Valid until the set
 * changes: the broker keeps none across a return to the loop. */
struct broker_tenant {
	const struct policy_tenant *pol;
	uint32_t slot;			/* its slot in the kernel's tables */
	uint64_t version;		/* of pol, for the fleet's store */
	unsigned int n_samples;		/* 1 s samples of its counters kept */
	struct lease_sample first, last;	/* the oldest and latest of them */
};

/* One tenant's policy as the fleet's store holds it: json "" is a deletion,
 * json NULL a read that failed. */
struct broker_fleet_update {
	char name[POLICY_NAME_MAX + 1];
	uint64_t version;
	char *json;
};

/*
 * The broker's host, in the spirit of hiredis's adapter table: the loop it
 * runs on, the kernel-map operations it needs and the tenant set it serves.
 * Every hook gets ctx first and must be set.  The kernel hooks have the
 * contracts of their kern.h namesakes.
 */
struct broker_host {
	void *ctx;
	struct loop *loop;
	uint32_t max_slots;	/* tenant slots, as the kernel's (--max-tenants) */

	/* Leased tokens: whole tokens held, added (re-arming the low-water
	 * event at lowwater), taken back (up to max, 0: all; returns how many). */
	uint64_t (*tokens)(void *ctx, uint32_t slot, uint64_t now_ns);
	void (*tokens_add)(void *ctx, uint32_t slot, uint64_t n, int64_t lowwater);
	uint64_t (*tokens_take)(void *ctx, uint32_t slot, uint64_t max);
	/* What the kernel admitted past its last token on the overdraft and
	 * no lease has paid back yet (0 while it holds tokens). */
	uint64_t (*overdrawn)(void *ctx, uint32_t slot);
	/* A tenant's counters summed over CPUs.  0 or -errno. */
	int (*counters)(void *ctx, uint32_t slot, struct rl_stats *out);
	/* This agent alive at now_ns, and whether the fleet is degraded. */
	void (*fleet_state)(void *ctx, uint64_t now_ns, uint64_t stale_ns,
			    bool degraded);
	/* Redis Cluster: the tenant in slot is degraded on its own (its
	 * shard is), or no longer. */
	void (*tenant_degraded)(void *ctx, uint32_t slot, bool on);
	/* Connection caps: the connections slot may have in flight (the
	 * slots held of the fleet's cap), and how many it has. */
	void (*conn_slots)(void *ctx, uint32_t slot, int64_t n);
	int64_t (*conns_in_flight)(void *ctx, uint32_t slot);
	/* The points that share those slots: 2 with both the kernel and
	 * the preload pool enforcing, else 1. */
	unsigned int (*conn_points)(void *ctx);
	/* The fleet size the static fail shares divide by: with n 0 only
	 * read (what a previous agent left in the kernel, 0 if none); else set,
	 * with every tenant's share written again.  Returns the size stored. */
	uint64_t (*fleet_agents)(void *ctx, uint64_t n);

	/* The tenant set: by position (0 .. tenant_count), by name. */
	size_t (*tenant_count)(void *ctx);
	void (*tenant_at)(void *ctx, size_t i, struct broker_tenant *out);
	bool (*tenant_find)(void *ctx, const char *name, struct broker_tenant *out);
	/* Tenants deleted here, remembered with the version of the deletion:
	 * by position, by name; and how long one of version is kept still
	 * (0: no longer). */
	size_t (*tomb_count)(void *ctx);
	void (*tomb_at)(void *ctx, size_t i, const char **name, uint64_t *version);
	bool (*tomb_find)(void *ctx, const char *name, uint64_t *version);
	uint64_t (*tomb_left_ms)(void *ctx, uint64_t version);
	/* A version for a tenant's next change, above prev. */
	uint64_t (*next_version)(void *ctx, uint64_t prev);
	/* Applies the fleet's policies u[0..n) that are newer than the host's
	 * tenants and tombstones, as one change (or the largest part of them
	 * that fits); wait[i] set for each that conflicts with the rest of the
	 * policy for now, to be offered again with the next batch.  Returns
	 * how many wait. */
	size_t (*fleet_apply)(void *ctx, const struct broker_fleet_update *u,
			      size_t n, bool *wait);
};

struct broker_opts {
	const char *redis;		/* HOST:PORT, [V6]:PORT or unix:PATH */
	const char *user;		/* ACL user for AUTH, or NULL */
	const char *password_file;	/* AUTH password, or NULL */
	const char *sentinel_user;	/* the sentinels' ACL user, or NULL */
	const char *sentinel_password_file;	/* the sentinels' password */
	bool tls;			/* TLS to Redis (not unix:) */
	const char *tls_ca;		/* CA bundle; NULL: the system's */
	const char *tls_cert, *tls_key;	/* client certificate, or NULL */
	const char *tls_server_name;	/* NULL: the host of --redis */
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
	uint64_t conn_bound;		/* policy_conn_bound(): UINT64_MAX none */
	uint64_t conn_held;		/* slots held of the fleet's cap */
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

/* Starts the broker for host h (copied): puts the kernel in leased mode and
 * connects (in the background; failures are retried with backoff).  0 or
 * -errno (a bad option, an unreadable password file). */
int broker_open(const struct broker_host *h, const struct broker_opts *o,
		struct broker **out);

/* Stops at once: nothing is refunded.  NULL is fine. */
void broker_close(struct broker *b);

/* Clean shutdown: takes back every leased token from the kernel, refunds them
 * and leaves the registry, then calls done (also after a second at most, or
 * at once when Redis is out of reach). */
void broker_shutdown(struct broker *b, void (*done)(void *arg), void *arg);

/* A low-water event from the kernel for a slot. */
void broker_lowwater(struct broker *b, uint32_t slot);

/* The counters of slot's tenant moved since the last sample (its demand
 * is looked at from the next check on).  NULL b is fine. */
void broker_slot_moved(struct broker *b, uint32_t slot);

/* The tenant set changed (through rlctl or from the fleet): tenants new
 * here start on credit, and a changed limit is leased for at once. */
void broker_tenants_changed(struct broker *b);

/* Slot now holds tenant p in the kernel, and no rule points at it yet: a
 * tenant new to the slot gets its credit now, so that its first SYN finds
 * a token.  NULL b is fine. */
void broker_slot_ready(struct broker *b, uint32_t slot, const struct policy_tenant *p);

/* What the broker needs to keep tenant name's lease state in slot: 0 when
 * it is the slot's tenant already, else the bytes of its name (+ 1).  NULL b
 * is fine. */
size_t broker_slot_name_need(const struct broker *b, uint32_t slot,
			     const char *name);

/* Before a change of the tenant set is made: room for the names of its n
 * tenants new to their slots, need bytes (broker_slot_name_need() summed),
 * first the first of them.  The broker_slot_ready() of each then cannot fail
 * for want of memory, which would leave the tenant's lease state unkept.
 * 0, or -ENOMEM with err (POLICY_ERR_MAX) naming first and the bytes: the
 * change must not be made.  NULL b is fine. */
int broker_names_reserve(struct broker *b, size_t need, size_t n,
			 const char *first, char *err);

/* The local policy changed through rlctl: publish each changed tenant (and a
 * tombstone for each removed one) to the fleet's policy store. */
void broker_policy_changed(struct broker *b, const struct broker_tenant *old,
			   size_t n_old, const struct broker_tenant *now,
			   size_t n_now);

/* Leasing figures of tenant p in slot. */
void broker_tenant_stats(const struct broker *b, uint32_t slot,
			 const struct policy_tenant *p,
			 struct broker_tenant_stats *out);
void broker_stats(const struct broker *b, struct broker_stats *out);

#endif /* RL_BROKER_H */
