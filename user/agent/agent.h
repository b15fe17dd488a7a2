/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent's shared state: options, the tenant set with kernel slots, and the
 * all-or-nothing operations on it that the control commands serve and the
 * metrics read (the files that hold them: docs/architecture.md's source
 * map).  None of them calls the broker: changes are told through struct
 * agent_hooks (main.c and wire.c point them at it); the broker pointer
 * below is for the control commands and the metrics.
 */
#ifndef RL_AGENT_H
#define RL_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <jansson.h>

#include "kern.h"
#include "loop.h"
#include "pfxstore.h"
#include "policy.h"
#include "ctl_proto.h"
#include "namehash.h"
#include "statelines.h"

#define AGENT_POLICY_FILE	"policy.json"
#define AGENT_JOURNAL_FILE	"policy.journal"	/* one-tenant changes since */
#define AGENT_INSTANCE_FILE	"instance.json"
#define AGENT_RATE_SAMPLES	4	/* 1 s apart: rates over the last 3 s */

struct ctl;
struct metrics;
struct broker;
struct agent_index;
struct agent_policy_read;
struct agent_sweep;

struct agent_opts {
	const char *ifaces[KERN_MAX_IFACES];
	unsigned int n_ifaces;
	enum kern_mode mode;
	const char *control;
	const char *control_group;
	const char *metrics;
	const char *state_dir;
	const char *pin_dir;
	uint32_t rule_memory_mib;	/* the classifier, both halves */
	uint32_t max_tenants;		/* tenant slots (--max-tenants) */
	uint32_t src_table;		/* --per-source-table */
	uint32_t metrics_tenants;	/* tenants with their own series */
	uint64_t tomb_ttl_ms;		/* deletions are remembered this long */
	uint64_t shed_at;		/* --shed-at percent, 0: no shedding */
	uint64_t shed_port;		/* --shed-port, 0: every listener */
};

#define AGENT_TOMB_TTL_MS	(7ULL * 24 * 3600 * 1000)	/* a week */

/* A tenant's counters at one of the agent's samples, and when they were
 * read (the sweep reaches each tenant at its own time: agent_rates.c). */
struct agent_sample {
	uint64_t admitted, denied;
	uint64_t ns;
};

struct agent_tenant {
	struct policy_tenant pol;	/* its prefixes in a->prefixes */
	uint64_t version;	/* of this tenant's policy, for the fleet store */
	/* valid samples, oldest first, about a second apart */
	struct agent_sample samples[AGENT_RATE_SAMPLES];
	uint32_t slot;
	unsigned int n_samples;
};

/* A tenant deleted here, remembered with the version of its deletion so
 * that the fleet's store cannot bring it back: published whenever Redis is
 * reachable (a deletion made during an outage is not lost) and weighed
 * against the store's copies. */
struct agent_tomb {
	char name[POLICY_NAME_MAX + 1];
	uint64_t version;
};

#define AGENT_MAX_TOMBS		4096

/* One tenant's policy as the fleet's store holds it: json "" is a deletion. */
struct agent_fleet_update {
	char name[POLICY_NAME_MAX + 1];
	uint64_t version;
	char *json;
};

/* Error codes of the control protocol. */
/* What a change to the policy came to: the control protocol's codes. */
enum agent_code {
	AGENT_OK = CTL_OK,
	AGENT_INVALID = CTL_INVALID,
	AGENT_NOT_FOUND = CTL_NOT_FOUND,
	AGENT_CONFLICT = CTL_CONFLICT,
	AGENT_INTERNAL = CTL_INTERNAL,
};

/*
 * What the agent tells of its policy to whoever main.c installs (in fleet
 * mode, the lease broker), in the spirit of hiredis's adapter hooks: the
 * agent knows nothing of its listeners.  Each may be NULL.
 */
struct agent_hooks {
	void *ctx;
	/* before a change is made that puts the tenants ts[0..n) in their
	 * slots: what it will need of the listener, made sure of (so that
	 * slot_ready() cannot fail).  0, or -errno with err (POLICY_ERR_MAX)
	 * saying why not: the change is refused. */
	int (*slots_reserve)(void *ctx, const struct agent_tenant *ts, size_t n,
			     char *err);
	/* slot now holds tenant p in the kernel; no rule points at it yet */
	void (*slot_ready)(void *ctx, uint32_t slot, const struct policy_tenant *p);
	/* the policy changed by a local request (rlctl), not by the fleet's
	 * change: old and now are the tenant sets before and after */
	void (*policy_changed)(void *ctx, const struct agent_tenant *old,
			       size_t n_old, const struct agent_tenant *now,
			       size_t n_now);
	/* the tenant set in force changed (a->tenants is the new one) */
	void (*tenants_changed)(void *ctx);
	/* the counters of slot's tenant moved since its last sample (or
	 * were sampled for the first time, not at zero) */
	void (*tenant_moved)(void *ctx, uint32_t slot);
};

struct agent {
	struct agent_opts opts;
	struct agent_hooks hooks;
	struct loop *loop;
	struct kern kern;
	struct ctl *ctl;
	struct metrics *metrics;
	struct broker *broker;	/* fleet mode, else NULL */
	bool fleet_update;	/* applying the fleet's change: do not echo it */
	const struct agent_fleet_update *fleet_batch;	/* ...and its versions */
	size_t fleet_n;
	struct name_hash fleet_names;	/* of fleet_batch; none: walked */
	/* Deleted tenants, oldest first (agent_tombs.c keeps them). */
	struct agent_tomb *tombs;
	size_t n_tombs;
	struct name_hash tomb_names;	/* of tombs; none: walked */
	bool stopping;		/* a signal came: refunding before exit */
	struct agent_tenant *tenants;
	size_t n_tenants;
	size_t cap_tenants;	/* allocated in tenants */
	/* The prefixes of tenants (and of copies of them made during a
	 * change): a list each, never freed on its own.  A change of the
	 * whole set puts the new set's in a new store; after changes in
	 * place, agent_prefixes_tidy() drops those no tenant holds. */
	struct pfx_store prefixes;
	size_t prefixes_live;	/* of them in use when last counted */
	/* The sweep of the tenants' counters (agent_sample()) */
	struct agent_sweep *sweep;
	/* Names, claims and slots to positions in tenants (agent_index.c);
	 * NULL when it could not be built: changes then rebuild the set. */
	struct agent_index *ix;
	uint64_t policy_version;
	uint64_t start_mono_ns;
	time_t start_wall;
	int exit_code;
	bool policy_damaged;	/* state file was bad: kernel left as it was */
	bool rules_synced;	/* the kernel classifies by the rules of tenants */
	/* Per slot, where the state file last written (kept open) holds the
	 * line of the tenant it held then: writing the file whole again
	 * copies the lines of the tenants that did not change since. */
	struct state_lines lines;
	size_t journal_bytes;	/* in AGENT_JOURNAL_FILE since policy.json */
	/* the journal's end may be a line cut short: the next change writes
	 * policy.json whole rather than append after it */
	bool journal_whole;
	struct loop_timer *compact;	/* policy.json to be written whole */
	/* The host-wide instance limit (AGENT_INSTANCE_FILE), when on. */
	bool instance_on;
	struct rl_instance_limit instance;
	/* The state file being read while the kernel program loads
	 * (agent_policy_read), until agent_policy_start takes it. */
	struct agent_policy_read *policy_read;
	/* Overload shedding (agent_shed.c), NULL when off. */
	struct agent_shed *shed;
};

/* Frees what the tenant set holds (at exit). */
void agent_free(struct agent *a);

const char *agent_code_name(enum agent_code c);

/* Starts reading the state file of a->opts on a thread of its own, for
 * max_tenants slots, so that a start parses 100,000 tenants while the
 * kernel verifies the program instead of after it.  Nothing else runs on
 * that thread, and agent_policy_start (or agent_free) waits for it.  When
 * the thread cannot start, agent_policy_start reads the file itself. */
void agent_policy_read(struct agent *a, uint32_t max_tenants);

/* Reads the state file (or takes what agent_policy_read read) and makes
 * the kernel match it (rules not in the policy are removed).  A damaged
 * file is quarantined and the kernel is left as it is.  0 or -errno for
 * failures that should stop the agent. */
int agent_policy_start(struct agent *a);

/* The instance limit (agent_instance.c): read from its state file at start
 * and written into the kernel (none: the kernel's is turned off); set and
 * deleted from the control socket, the file first. */
int agent_instance_start(struct agent *a);
enum agent_code agent_instance_set(struct agent *a,
				   const struct rl_instance_limit *il, char *err);
enum agent_code agent_instance_del(struct agent *a, char *err);

struct agent_tenant *agent_find(struct agent *a, const char *name);
/* "no tenant named 'Web'", and "; did you mean 'web'?" when one tenant's
 * name is the nearest typo of it (opts_suggest()'s measure: case ignored,
 * one or two edits), into err (POLICY_ERR_MAX).  Scans every name: for
 * answers to a miss only. */
void agent_no_tenant(const struct agent *a, const char *name, char *err);
/* The tenant that holds kernel slot `slot`, or NULL. */
struct agent_tenant *agent_find_slot(struct agent *a, uint32_t slot);

/* The three changes the control protocol offers.  Each validates the whole
 * resulting set before the kernel or the state file is touched, and
 * changes nothing on failure.  err gets a message (POLICY_ERR_MAX). */
enum agent_code agent_tenant_set(struct agent *a, const struct policy_tenant *t,
				 char *err);
enum agent_code agent_tenant_del(struct agent *a, const char *name, char *err);
enum agent_code agent_apply(struct agent *a, const struct policy_tenant *ts,
			    size_t n, unsigned int counts[3], char *err);

/* A version for a tenant's next change: milliseconds since the epoch, so
 * that across the fleet the latest change wins, and always above prev. */
uint64_t agent_next_version(const struct agent *a, uint64_t prev);

/* The tombstone of name, or NULL. */
const struct agent_tomb *agent_find_tomb(const struct agent *a, const char *name);

/* How much longer a deletion made at version (its time in ms since the
 * epoch) is remembered: --tombstone-ttl after it; 0 once that is past. */
uint64_t agent_tomb_left_ms(const struct agent *a, uint64_t version);

/* Forgets the tombstones whose time is up (and rewrites the state file
 * without them).  Called every second. */
void agent_prune_tombs(struct agent *a);

/* Configures the verifying tenants again when net.ipv4.tcp_syncookies has
 * changed since they were (agent_verify.c).  Called every second. */
void agent_verify_watch(struct agent *a);

/* A preload pool made anew (preload_watch): every tenant and the rules
 * written into it; the heartbeat follows with the next share or fleet
 * check. */
void agent_preload_refill(struct agent *a);

/* For status: {"tenants": verifying tenants, "tcp_syncookies": the sysctl
 * (-errno unread), "verified": whether they are}, or NULL when no tenant
 * verifies. */
json_t *agent_verify_json(const struct agent *a);

/*
 * Applies the fleet's stored policies u[0..n) (json "" deletes), each only
 * if its version is newer than the local tenant or tombstone, all in one
 * change: a tenant renamed, or a prefix moved from one tenant to another,
 * goes from the old set to the new one with no step between where the
 * rules conflict or where neither tenant holds the prefix.  If the whole
 * batch cannot be applied (it conflicts with tenants it does not touch),
 * the largest part of it that fits is applied, as one change.  wait[i] is
 * set for each update that could not be applied now because of the rest of
 * the policy (a conflict another update may resolve: the caller offers it
 * again with the next batch); updates that are invalid in themselves are
 * logged and dropped.  Returns how many updates wait.
 */
size_t agent_fleet_apply(struct agent *a, const struct agent_fleet_update *u,
			 size_t n, bool *wait);

/* A tenant as the protocol returns it: policy plus "id" and "version". */
json_t *agent_tenant_json(const struct agent_tenant *t);

struct agent_tenant_stats {
	struct rl_stats s;
	uint64_t tokens;
	/* connection caps (all 0 without one) */
	uint64_t max_conns;	/* the cap */
	uint64_t conns;		/* in flight */
	uint64_t conn_slots;	/* slots this host holds: the cap, standalone */
	uint64_t conn_denied;	/* SYNs refused at the cap (also in s.denied) */
	uint64_t conns_opened, conns_closed;	/* counted in, out by the kernel */
	uint64_t conns_forgotten;	/* ended by the agent's sweep */
	/* per-source limits (0 without one) */
	uint64_t src_denied;	/* SYNs refused by a source's bucket or the
				 * overflow bucket (also in s.denied) */
	uint64_t src_overflow;	/* SYNs of sources without an entry */
	/* admitted and denied per second over the last rate_window_s
	 * seconds: from the tenant's oldest sample kept to these counters */
	double admit_rate, deny_rate, rate_window_s;
	/* by enforcement point, with a preload pool (s is their sum) */
	bool points;
	struct rl_stats kernel, preload;
	uint64_t kernel_tokens, preload_tokens;
	/* connections in flight, and the slots each point may fill (capped
	 * tenants only) */
	int64_t kernel_conns, preload_conns, kernel_slots, preload_slots;
};

void agent_tenant_stats(struct agent *a, const struct agent_tenant *t,
			struct agent_tenant_stats *out);
/* The same with the counters s already read (NULL: read them). */
void agent_tenant_stats_from(struct agent *a, const struct agent_tenant *t,
			     const struct rl_stats *s, struct agent_tenant_stats *out);

/* A tenant's admit and deny rates over its samples (0 before two). */
void agent_tenant_rates(const struct agent_tenant *t, double *admit, double *deny);

/* A tenant's admit and deny rates from its oldest sample to the counters
 * s read now, over *window seconds (all 0 without a sample): what a reader
 * can check against the counters, the latest second included. */
void agent_tenant_rates_now(const struct agent_tenant *t, const struct rl_stats *s,
			    double *admit, double *deny, double *window);

/* Called every second: begins a sweep that samples every tenant's counters
 * for the rates, a slice per turn of the loop (unless the last sweep still
 * runs: it goes on).  agent_sample_stop() ends it for good, before the
 * loop is freed.  agent_sweeps(): how many sweeps were whole. */
void agent_sample(struct agent *a);
void agent_sample_stop(struct agent *a);
uint64_t agent_sweeps(const struct agent *a);

#endif /* RL_AGENT_H */
