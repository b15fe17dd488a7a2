/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The lease broker's insides, shared by the broker's files and by
 * nothing else; which file holds what is docs/architecture.md's source
 * map's to say.  Everything here runs on the agent's loop.
 */
#ifndef RL_BROKER_INT_H
#define RL_BROKER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <hiredis/hiredis.h>
#include <hiredis/async.h>

#include "broker.h"
#include "circuit.h"
#include "cluster_client.h"
#include "loop.h"
#include "namepool.h"
#include "redis_tls.h"
#include "wake.h"

#define CHECK_MS		50	/* lease check period */
#define WARM_LEASES_PER_CHECK	50	/* first leases without demand (1000/s) */
#define HEARTBEAT_MS		1000
#define REGISTRY_TTL_MS		3000	/* three missed heartbeats: gone */
#define ID_CLASH_CLEAR_NS	(10ULL * 1000000000ULL)	/* no other agent seen */
#define CALL_TIMEOUT_NS		(2ULL * 1000000000ULL)
#define BACKOFF_MIN_MS		100
#define BACKOFF_MAX_MS		1000	/* the heartbeat's period: back as soon */
#define SHUTDOWN_MS		1000
#define CALL_RING		1024
#define BREAKER_FAILURES	3	/* consecutive failures that open a breaker */
#define SCRIPTS_ALL		((1u << S_COUNT) - 1)
#define SENTINEL_NAME_MAX	128

enum script_id { S_LEASE, S_REFUND, S_HEARTBEAT, S_DEREGISTER, S_POLICY_SET,
		 S_POLICY_GET, S_SLOTS, S_COUNT };

extern const char *const broker_script_names[S_COUNT];

enum conn_state { C_DOWN, C_CONNECTING, C_UP };

/* One Redis connection with reconnect and backoff: the command connection
 * and the subscriber (a subscribed connection takes no other commands). */
struct conn {
	struct broker *b;
	redisAsyncContext *ac;
	enum conn_state state;
	uint64_t backoff_ms;
	struct loop_timer *retry;
	bool subscriber;
	const char *name;
	char host[256];			/* where it went (Sentinel: which master) */
	int port;
	/* Redis answered on this connection since it was opened: hiredis'
	 * "connected" is only the TCP connect, and under TLS only the plain
	 * end of the relay (a handshake refused comes after it) */
	bool answered;
};

/* A reply (any, errors included) came on c: the first one says the
 * connection is up. */
void broker_conn_answered(struct conn *c);

struct hot_ledger;

/* A slot's counts for rlctl stats and metrics (the rest of struct
 * broker_tenant_stats is worked out when asked). */
struct slot_counts {
	uint64_t leases;		/* lease calls that granted tokens */
	uint64_t tokens_leased;
	uint64_t tokens_refunded;
	uint64_t redis_calls;		/* lease, refund and slots calls */
	uint64_t static_charged;	/* static share admissions owed, ever */
};

/* Lease state of one kernel slot.  One for every slot (--max-tenants), so
 * kept small: the tenant's name in the broker's name pool (b->names), what
 * few tenants use in b->rare, the flags together at the end. */
struct slot {
	uint64_t gen;			/* bumped when the slot changes tenant */
	uint64_t sent_ns;
	uint64_t wait_until_ns;		/* Redis advised to wait */
	uint64_t last_grant_ns;
	uint64_t last_active_ns;	/* last time the tenant's counters moved */
	uint64_t seen_count;		/* admitted + denied at that time */
	uint64_t lease;			/* current lease size */
	uint64_t lowwater;		/* prefetch when the kernel holds this few */
	uint64_t chunk;			/* when Redis is short: come back for this */
	struct policy_rate rate;	/* the limit the state above is about */
	uint64_t burst, budget;
	uint64_t refunding;		/* tokens in refunds not answered yet */
	uint64_t debt;			/* tokens admitted without a lease */
	uint64_t static_debt;		/* ...of those, by the static fail share */
	int64_t fail_seen;		/* fail_count() at the last look */
	uint64_t meter_ns, meter_count;	/* demand at the last lease sizing */
	uint64_t sized_ns;		/* when the sizes above were set */
	struct loop_timer *wait_timer;	/* fires when Redis said to come back */
	struct broker *b;
	struct slot_counts st;
	uint32_t idx;
	uint32_t name;			/* in b->names; 0: "", unused */
	/* a hot tenant (--shards): how many sub-buckets the state above is
	 * about (the ledger in b->rare) */
	uint16_t shards;
	bool inflight;
	bool want_lease;		/* a low-water event asked for one */
	bool fail_seen_ok;
	bool scarce;			/* the last reply left less than a chunk */
	/* Redis Cluster: the tenant's shard is out of reach (the kernel's
	 * RL_F_DEGRADED), and past the lease TTL (an outage) */
	bool shard_down, shard_expired;
	/* Redis (or the shard) is back, but the kernel holds no token of
	 * the tenant: it keeps its fail policy (RL_F_DEGRADED) until the
	 * first lease is answered (broker_rejoin_begin()) */
	bool rejoin;
	bool conn_inflight;		/* a slots call is in flight */
};

/* What few slots use, in a table of its own (b->rare, one for every slot,
 * zero while unused) whose pages only the slots that use it touch. */
struct slot_rare {
	/* Redis Cluster: since when the tenant's shard is out of reach
	 * (shard_down) */
	uint64_t shard_down_ns;
	/* connection caps: the slots held of the fleet's cap (slots.lua),
	 * the slots no live holder held at its last answer (what the kernel
	 * may admit into beyond the holding: broker_conns.c), when the
	 * holding was last renewed */
	uint64_t conn_held;
	uint64_t conn_free;
	uint64_t conn_renewed_ns;
	uint64_t conn_starved_ns;	/* the last ask got less than it wanted */
	/* a hot tenant (--shards): where the tokens the kernel holds came
	 * from (NULL: unsplit, or nothing leased yet) */
	struct hot_ledger *ledger;
};

/* Redis Cluster: the breaker of one master (a cc node), as the breaker of
 * a single Redis is for the whole fleet. */
struct shard {
	struct circuit circ;
	uint64_t open_since_ns;
	time_t degraded_since;
	char reason[160];
	bool probing;			/* a probe is in flight */
};

struct broker {
	struct broker_host h;		/* the loop, the kernel, the tenants */
	/* Redis Cluster mode (--redis cluster:SEEDS): the client, one
	 * breaker per node, and the node whose reply is being handled
	 * (-1 outside of one).  NULL for a single Redis. */
	struct cc *cc;
	struct shard *shards;		/* CLUSTER_NODES_MAX */
	int reply_node;
	unsigned int sub_pick;		/* the node the subscriber tries next */
	const char *reg_agents, *reg_ids;	/* the registry's keys */
	/* Redis Sentinel mode: who says where host and port are (host ""
	 * until the first answer).  NULL otherwise. */
	struct sentinel *sen;
	const char *script_src[S_COUNT];
	struct broker_opts o;
	char host[256], path[256];
	int port;
	char address[300];
	char *password;
	struct redis_tls *tls;		/* NULL without --redis-tls */
	char agent_id[257];
	char nonce[17];			/* this process's, in the registry */
	bool hb_first;			/* no heartbeat answered on this connection */
	bool id_clash;			/* another agent uses agent_id */
	uint64_t id_clash_seen_ns;
	uint64_t id_clashes;		/* episodes */
	struct conn cmd, sub;
	char sha[S_COUNT][41];
	unsigned int scripts_mask;	/* bit i: script i loaded */
	bool scripts_ok;
	uint64_t load_sent_ns;		/* the last SCRIPT LOADs went out */
	uint64_t load_backoff_ms;
	struct loop_timer *load_retry;
	bool load_warned;		/* once per episode */
	struct loop_timer *check, *heartbeat;
	/* policy store: tenants to read as one batch once POLICY_BATCH_MS
	 * passed, and the fleet's changes that wait for another one */
	char (*want)[POLICY_NAME_MAX + 1];
	size_t n_want, cap_want;
	struct loop_timer *want_timer;
	char (*waiting)[POLICY_NAME_MAX + 1];	/* sorted by name */
	size_t n_waiting;
	bool sync_again;	/* a sync's call failed: sync once healthy */
	bool subscribed;	/* the subscription to rl:policy is confirmed */
	/* a sync's read of rl:tenants, page by page (SSCAN), and which sync
	 * it is: the pages of an older one are dropped */
	char (*scan)[POLICY_NAME_MAX + 1];
	size_t n_scan, cap_scan;
	uint64_t sync_gen;
	bool reading;		/* a batch of policies is being read */
	bool read_sync;		/* ...and a sync's read waits for it */
	/* policy changes to publish, from pub_head on, and the calls out */
	struct pub *pubq;
	size_t pub_head, n_pub, cap_pub;
	unsigned int pub_inflight;
	uint64_t live_agents;
	size_t n_rejoin;		/* slots with rejoin set */
	uint64_t live_low_since_ns;	/* a smaller count seen since then */
	uint64_t redis_calls, redis_errors;
	uint64_t lease_buckets[BROKER_LEASE_BUCKETS];
	double lease_sum_s;
	uint64_t lease_count;
	uint64_t rtt_ns;		/* lease round trip, a moving average */
	struct slot *slots;		/* h.max_slots */
	struct slot_rare *rare;		/* h.max_slots */
	struct name_pool names;		/* the slots' tenant names */
	bool names_short;	/* a tenant's name could not be kept (logged) */
	/* The slots a check visits (broker_lease_due()): idle tenants cost
	 * it nothing.  walk_all: the next check visits every tenant (the
	 * fleet's size changed, and with it every lease cap). */
	struct wake wake;
	bool walk_all;
	/* While degraded or rejoining: the slots whose counters the agent's
	 * sampling saw move since the last check, whose fail-policy
	 * admissions that check counts (broker_debt_look_moved()); the rest
	 * admitted nothing.  debt_all: a slot could not be listed (out of
	 * memory), and the check counts every one. */
	uint32_t *debt_moved;
	size_t n_debt_moved, cap_debt_moved;
	bool debt_all;
	/* some tenant may have a connection cap or hold slots of one: the
	 * check looks at the caps (broker_conns_check()) */
	bool conns_any;
	/* circuit breaker */
	struct circuit circ;		/* user/lib/circuit.h */
	bool tokens_expired;
	uint64_t open_since_ns;
	time_t degraded_since;
	char reason[160];
	uint64_t redis_timeouts;
	uint64_t ring[CALL_RING];	/* send times of calls in flight */
	unsigned int ring_head, ring_len;
	/* clean shutdown */
	/* broker_close() runs: hiredis and the cluster client call back
	 * every call in flight with no reply while they free their
	 * connections, and nothing those callbacks do may send, connect or
	 * set a timer (broker_may_start()) */
	bool closing;
	void (*done)(void *arg);
	void *done_arg;
	unsigned int pending;
	struct loop_timer *deadline;
};

struct read_batch;

/* A policy change waiting to be published (broker_fleet.c). */
struct pub {
	char name[POLICY_NAME_MAX + 1];
	uint64_t version, ttl_ms;
	char *json;		/* NULL: a deletion */
};

/* One script call in flight: what its reply is about. */
struct call {
	struct broker *b;
	enum script_id script;
	uint32_t slot;
	uint64_t gen;
	uint64_t sent_ns;
	uint64_t n;		/* lease: wanted; refund: tokens */
	uint64_t chunk;		/* lease: the min chunk asked for */
	/* lease of a split tenant: its sub-bucket count, the sub-bucket
	 * asked, its place in the agent's order (hot_order()), and the
	 * top-up so far: wanted in all, granted, the shortest wait a
	 * sub-bucket advised, and whether one fell short */
	unsigned int shards, sub, nth;
	uint64_t want, got, wait_ms;
	bool fell_short;
	redisCallbackFn *fn;	/* the script's own callback */
	char name[POLICY_NAME_MAX + 1];
	struct read_batch *batch;	/* policy_get: the batch, and which of */
	size_t idx, count;		/* its tenants: count from idx */
	bool tomb;			/* policy_set: a deletion */
};

/* A tenant's bucket as the lease and refund scripts take it. */
struct bucket_args {
	char key[128], count[24], period[24], burst[24];
};

extern const double broker_lease_bounds[BROKER_LEASE_BUCKETS];

/* The host's hooks, called as the broker's files call them. */
static inline struct loop *host_loop(const struct broker *b)
{
	return b->h.loop;
}

static inline uint64_t host_tokens(const struct broker *b, uint32_t slot,
				   uint64_t now_ns)
{
	return b->h.tokens(b->h.ctx, slot, now_ns);
}

static inline void host_tokens_add(const struct broker *b, uint32_t slot,
				   uint64_t n, int64_t lowwater)
{
	b->h.tokens_add(b->h.ctx, slot, n, lowwater);
}

static inline uint64_t host_overdrawn(const struct broker *b, uint32_t slot)
{
	return b->h.overdrawn(b->h.ctx, slot);
}

static inline uint64_t host_tokens_take(const struct broker *b, uint32_t slot,
					uint64_t max)
{
	return b->h.tokens_take(b->h.ctx, slot, max);
}

static inline int host_counters(const struct broker *b, uint32_t slot,
				struct rl_stats *out)
{
	return b->h.counters(b->h.ctx, slot, out);
}

/* The kernel's word on this agent (alive at now_ns) and on Redis. */
static inline void host_fleet_state(const struct broker *b, uint64_t now_ns,
				    bool degraded)
{
	b->h.fleet_state(b->h.ctx, now_ns, b->o.stale_ms * 1000000ULL, degraded);
}

/* Redis Cluster: the tenant in slot is degraded on its own shard. */
static inline void host_tenant_degraded(const struct broker *b, uint32_t slot,
					bool on)
{
	b->h.tenant_degraded(b->h.ctx, slot, on);
}

static inline void host_conn_slots(const struct broker *b, uint32_t slot,
				   int64_t n)
{
	b->h.conn_slots(b->h.ctx, slot, n);
}

static inline int64_t host_conns_in_flight(const struct broker *b, uint32_t slot)
{
	return b->h.conns_in_flight(b->h.ctx, slot);
}

static inline unsigned int host_conn_points(const struct broker *b)
{
	return b->h.conn_points(b->h.ctx);
}

static inline size_t host_tenant_count(const struct broker *b)
{
	return b->h.tenant_count(b->h.ctx);
}

static inline void host_tenant_at(const struct broker *b, size_t i,
				  struct broker_tenant *out)
{
	b->h.tenant_at(b->h.ctx, i, out);
}


/* New work (a call, a connection, a timer) may start: false from
 * broker_close() on, when every callback that runs is a call in flight
 * answered with no reply by a connection being freed. */
static inline bool broker_may_start(const struct broker *b)
{
	return !b->closing;
}

/* broker_redis.c */
void broker_conn_start(struct conn *c);
bool broker_leasing(const struct broker *b);
bool broker_slot_leasing(const struct broker *b, const struct slot *s);
bool broker_slot_reachable(const struct broker *b, const struct slot *s);
bool broker_key_leasing(const struct broker *b, const char *key);
bool broker_key_reachable(const struct broker *b, const char *key);
bool broker_store_ready(const struct broker *b);
int broker_command(struct broker *b, const char *key, int argc, const char **argv,
		   redisCallbackFn *fn, void *priv);
void breaker_success(struct broker *b);
void breaker_check_timeouts(struct broker *b, uint64_t now);
void broker_call_failed(struct broker *b, enum script_id s, const redisReply *r);
bool broker_int_array(const redisReply *r, size_t n);
int broker_eval(struct broker *b, enum script_id s, int nkeys, const char **args,
		int nargs, redisCallbackFn *fn, struct call *c);
void broker_bucket_args(const struct policy_tenant *p, struct bucket_args *ba);
void broker_script_loads_check(struct broker *b, uint64_t now);

/* broker_cluster.c */
int broker_cluster_open(struct broker *b);
void broker_cluster_check(struct broker *b, uint64_t now);
void broker_cluster_probe(struct broker *b);
int broker_cluster_send(struct broker *b, enum script_id s, int nkeys,
			const char **args, int nargs, const char *key,
			redisCallbackFn *fn, void *priv);
void broker_shard_step(struct broker *b, int n, enum circuit_event ev,
		       const char *reason);

/* broker_sentinel.c */
int broker_sentinel_parse(const char *s, char *name, size_t namelen, char *err,
			  size_t errlen);
int broker_sentinel_open(struct broker *b, const char *spec);
int broker_read_password(const char *file, char **out);
void broker_sentinel_close(struct broker *b);
void broker_sentinel_ask(struct broker *b, bool next);
bool broker_sentinel_waiting(const struct broker *b);

/* broker_lease.c */
uint64_t broker_agents_of(const struct broker *b);
void broker_debt_look(struct broker *b);
void broker_debt_look_moved(struct broker *b);
void broker_debt_begin(struct broker *b);
void broker_lease_all(struct broker *b, uint64_t now);
void broker_lease_due(struct broker *b, uint64_t now);
void broker_slot_unwait(struct slot *s);
int broker_refund(struct broker *b, const struct broker_tenant *t, uint64_t max);
void broker_on_refund(redisAsyncContext *ac, void *reply, void *priv);
void broker_on_check(struct loop_timer *tm, void *arg);
void broker_shards_update(struct broker *b, uint64_t now);
void broker_rejoin_begin(struct broker *b);
void broker_rejoin_end(struct broker *b);
void broker_home_args(const struct broker *b, const struct policy_tenant *p,
		      struct bucket_args *ba);
void broker_slot_free(struct slot *s);
/* The name of the tenant slot s is about ("": none), valid until the next
 * broker_slot_name_set(); which it is about now: 0 or -ENOMEM (none). */
const char *broker_slot_name(const struct slot *s);
int broker_slot_name_set(struct slot *s, const char *name);
/* broker_names_reserve() for every tenant of the host's set: 0, or -ENOMEM
 * with err (POLICY_ERR_MAX) saying whose names and how many bytes. */
int broker_names_reserve_all(struct broker *b, char *err);

static inline struct slot_rare *slot_rare(const struct slot *s)
{
	return &s->b->rare[s->idx];
}

/* broker_fleet.c */
void broker_heartbeat(struct broker *b);
void broker_on_heartbeat_timer(struct loop_timer *t, void *arg);
void broker_policy_sync(struct broker *b);
/* Forgets the policy changes not yet sent (the next sync offers them). */
void broker_publish_drop(struct broker *b);
void broker_on_message(redisAsyncContext *ac, void *reply, void *priv);

/* broker_conns.c */
void broker_conns_check(struct broker *b, uint64_t now);

#endif /* RL_BROKER_INT_H */
