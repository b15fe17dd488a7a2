/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlgate: every struct and constant shared by the XDP program and user space.
 * Both sides include this file, so a layout change is one edit here.
 */
#ifndef RLGATE_H
#define RLGATE_H

#ifdef __BPF__
#include <linux/types.h>
#else
#include <linux/types.h>
#endif

/*
 * The layout of everything shared with the kernel, as a whole: the structs
 * below, the maps' sizes and what each field means.  A change to any of them
 * bumps RL_ABI_VERSION, and the agent learns (user/agent/kern_migrate.c)
 * how to bring pins of the previous layout forward in place.  The version is recorded in the pinned map `abi`; pins without it
 * were made by layout 1.  tests/e2e/upgrade.bats builds the last commit of
 * each earlier layout from git history and upgrades its pins under load: a
 * bump adds the last commit of the layout it replaces there.
 *   1  the first release
 *   2  `counters` grows to RL_CNT_SLOTS; rl_stats.unparsed and
 *      rl_flow_slot.repeats take padding that was zero
 *   3  connection caps: rl_tenant.conn_epoch, conns and conn_slots take
 *      state padding that was zero (0 slots with RL_F_CONNCAP clear: no
 *      cap), RL_F_CONNCAP, counters RL_CNT_CONN_FULL; new maps `conns`,
 *      `conn_stats` and `conn_ctl`, created empty on adoption (nothing
 *      to migrate: connections opened before are not counted).
 *      RL_F_DEGRADED came later within 3, without a bump: it is clear in
 *      every slot pinned before it, which is what it means there, and
 *      only the agent of the same build sets it.  So did
 *      rl_tenant.conn_fail_slots, in state padding that was zero: a
 *      capped leased tenant of an older agent, static, admits no new
 *      connection once that agent's heartbeat is stale, until an agent
 *      of this build configures the slot
 *   4  the host-wide instance limit: a new map `instance` (one
 *      struct rl_tenant); rl_conn grows by inst_epoch and flags (`conns`
 *      is created anew, empty: every capped tenant's epoch is bumped and
 *      its count zeroed, so connections open across the upgrade are not
 *      counted); rl_conn_ctl.instance takes padding that was zero;
 *      counters RL_CNT_INST_FULL and RL_CNT_INST_RATE.
 *      Per-source limits came later within 4, without a bump: the maps
 *      `sources`, `src_conf`, `src_stats`, `src_ctl` and `src_top` are new
 *      (created empty on adoption, nothing to bring forward),
 *      RL_F_PERSOURCE is clear in every slot pinned before them, and
 *      counters RL_CNT_SRC_* take slots that were zero.  So did
 *      rl_tenant.overdraft, in state padding that was zero (no
 *      overdraft: a slot pinned before it refuses at its last token, as
 *      it did, until an agent of this build sets it), and counter
 *      RL_CNT_OVERDRAWN in a slot that was zero.  So did a standalone
 *      agent's heartbeat in `agent_state`, stamped (stale_ns non-zero)
 *      while it shares connection caps with a preload pool, and zeroed at
 *      its start otherwise: a program of before keeps the kernel's part
 *      of such a cap whatever the fail policy once the agent is dead, as
 *      it did; an agent of before never wrote it standalone, and the
 *      first agent of this build to start on the pins does.  So did each
 *      tenant's share of `sources`: rl_src_ctl.share and
 *      rl_src_conf.used take padding that was zero (share 0: the whole
 *      table, as before, until an agent of this build writes it).  The
 *      entries a program of before inserted were never counted in
 *      `used`; user space never lowers a count below 0, so such a tenant
 *      may go over its share by at most its entries of before, once,
 *      until the sweep has reclaimed them
 *   5  classifier port rows are packed tables of their own ports instead
 *      of a column per distinct port in whole groups (the global port
 *      table at groups 512..767 is gone: the trie starts there).  `cls`
 *      and `cls_state` are created anew on adoption: the old program keeps
 *      reading its own until the new one replaces it, and the agent
 *      publishes the rules into the new ones before it attaches
 */
#define RL_ABI_VERSION		5
#define RL_ABI_MAGIC		0x61676c72	/* "rlga" */

struct rl_abi {
	__u32 magic;		/* RL_ABI_MAGIC */
	__u32 version;		/* RL_ABI_VERSION of the build that pinned */
};

_Static_assert(sizeof(struct rl_abi) == 8 &&
	       __builtin_offsetof(struct rl_abi, version) == 4,
	       "rl_abi: the layout record");

/* Tenant slots: `tenants`, `tenant_stats` and `conn_stats` are loaded with
 * rlagent --max-tenants entries, RL_MAX_TENANTS by default (and in this
 * object as compiled), at most RL_TENANTS_LIMIT.  The size is not part of
 * the layout: pins of another size are refused, naming both (a resize needs
 * a detach).  A classifier entry holds 30 bits of tenant. */
#define RL_MAX_TENANTS		4096
#define RL_TENANTS_LIMIT	(1u << 20)
/* `flow_cache_cpu` holds 2^bits slots per CPU: RL_FLOW_BITS unless the
 * loader picks fewer for a machine with many CPUs (rl_flow_bits()). */
#define RL_FLOW_BITS		14	/* 16,384 slots, 1 MiB per CPU */
#define RL_FLOW_BITS_MIN	11	/* 2,048 slots, 128 KiB per CPU */
#define RL_FLOW_SLOTS_TOTAL	(1u << 17)	/* what rl_flow_bits() aims at */
#define RL_EVENTS_BYTES		(64 * 1024)

#define RL_NSEC_PER_SEC		1000000000ULL

/* Tenant modes.  A slot with mode RL_MODE_NONE is unused: a rule that still
 * points at it (a race while a tenant is deleted) lets the SYN pass. */
enum rl_mode {
	RL_MODE_NONE = 0,
	RL_MODE_STANDALONE = 1,	/* kernel refills lazily from elapsed time */
	RL_MODE_LEASED = 2,	/* only user space adds tokens */
};

/* What happens to a SYN that finds no token. */
enum rl_action {
	RL_ACT_DROP = 0,	/* XDP_DROP: the client retries after its RTO */
	RL_ACT_RST = 1,		/* XDP_TX a RST|ACK: the client fails at once */
};

#define RL_F_SHADOW		(1U << 0)	/* count would-deny, admit anyway */
#define RL_F_CONNCAP		(1U << 1)	/* connections in flight are capped
						 * at conn_slots (see `conns`) */
/* Leased: this tenant's own Redis is out of reach (its Redis Cluster shard
 * failed) while the rest of the fleet's is not: its fail policy applies
 * once its tokens are spent, as when the whole fleet is degraded. */
#define RL_F_DEGRADED		(1U << 2)
/* Verify: a SYN is passed uncharged, for the server's kernel to answer with
 * a SYN cookie (net.ipv4.tcp_syncookies=2), and the handshake's last ACK
 * is charged instead, once the cookie it returns checks out: a source that
 * does not receive what is sent to it never completes one.  Clear in every
 * slot pinned before it: no verification, what it means there. */
#define RL_F_VERIFY		(1U << 3)

/* Each source of the tenant also passes a bucket of its own: the tenant's
 * entry of `src_conf` says how, `sources` holds the buckets. */
#define RL_F_PERSOURCE		(1U << 4)

/* With RL_F_VERIFY: the tenant's SYNs are answered here, with the kernel's
 * own SYN cookie (a SYN-ACK sent back through the interface), rather than
 * passed to the server's kernel to answer: a forged source costs what a
 * refusal costs.  One SYN per listener now and then still goes to the
 * kernel, which keeps its listener taking cookie ACKs (see cookie_opts). */
#define RL_F_ANSWER		(1U << 5)

/* cookie_opts, as the agent writes it from the server's sysctls: what a
 * SYN-ACK answered here may offer for the server's kernel to take back from
 * the cookie.  Options ride in the timestamp's low bits, as the kernel's
 * own cookies carry them: only where the kernel adds no secret offset to
 * its timestamps (net.ipv4.tcp_timestamps=2).  Without RL_COOKIE_TS the
 * SYN-ACK offers the MSS alone, as the kernel's cookie does to a client
 * without timestamps. */
#define RL_COOKIE_TS		(1U << 0)	/* timestamps, options in them */
#define RL_COOKIE_SACK		(1U << 1)	/* net.ipv4.tcp_sack */
#define RL_COOKIE_WSCALE	(1U << 2)	/* net.ipv4.tcp_window_scaling */
#define RL_COOKIE_RCV_WSCALE(o)	(((o) >> 8) & 0xf)	/* the server's shift */
#define RL_COOKIE_RCV_WSCALE_SET(w)	(((__u32)(w) & 0xf) << 8)

/* Leased tenants, once their tokens are spent while the fleet is degraded
 * (the agent's Redis breaker is open, or the agent's heartbeat is stale). */
enum rl_fail {
	RL_FAIL_STATIC = 0,	/* refill locally: rate and burst / live agents */
	RL_FAIL_ALLOW = 1,	/* admit */
	RL_FAIL_DENY = 2,	/* refuse */
};

/*
 * One tenant, one slot of the `tenants` array (BPF_F_MMAPABLE, so user space
 * reads and updates it in place with atomics).  The first cache line is
 * configuration, written only by user space and read on every SYN; the second
 * holds the bucket, written by every CPU.  Keeping them apart stops the
 * writes from evicting the configuration from the other CPUs' caches.
 */
struct rl_tenant {
	/* configuration: user space writes, the kernel reads */
	__u32 mode;		/* enum rl_mode */
	__u32 action;		/* enum rl_action */
	__u32 flags;		/* RL_F_* */
	__u32 generation;	/* bumped by user space on every change */
	__u64 interval_ns;	/* standalone: nanoseconds per token (1/rate) */
	__u64 burst;		/* bucket capacity in tokens */
	__u64 tolerance_ns;	/* standalone: burst * interval_ns */
	__s64 lowwater;		/* leased: notify when tokens fall to this */
	__u32 fail;		/* leased: enum rl_fail */
	__u32 fail_burst;	/* RL_FAIL_STATIC: burst / live agents, >= 1 */
	__u64 fail_interval_ns;	/* RL_FAIL_STATIC: interval * live agents */

	/* state: every CPU writes (its own cache line) */
	/* standalone, GCRA form of the token bucket: the "theoretical arrival
	 * time" - each admission moves it one interval later, and the bucket
	 * is full once it lies burst intervals or more in the past (tat <= now
	 * counts as now).  Tokens now = min(burst, (now + tolerance -
	 * max(tat, now)) / interval).  One compare-and-swap admits. */
	__u64 tat;
	/* leased: whole tokens granted by user space and not yet spent */
	__s64 tokens;
	/* leased: 1 while a low-water event may be sent; the kernel clears it
	 * when it sends one, user space sets it again after a refill */
	__u32 lowwater_armed;
	/* RL_F_CONNCAP: set by user space whenever the slot gets a new
	 * tenant.  An entry of `conns` records the epoch it was counted in,
	 * and its end gives back a connection only to the same epoch, so an
	 * entry left by a tenant deleted earlier never lowers the count of
	 * the tenant that took its slot. */
	__u32 conn_epoch;
	/* RL_FAIL_STATIC while degraded: a GCRA bucket like tat */
	__u64 fail_tat;
	/* RL_F_CONNCAP: connections in flight, one per entry of `conns` of
	 * this slot and epoch.  Raised only by the CPU that inserts the entry
	 * (after reserving below conn_slots), lowered only by whoever deletes
	 * it (a delete succeeds once); never below zero.  A reservation is an
	 * atomic add undone when it finds the cap reached, so a reader may
	 * see it above conn_slots by the CPUs refusing at that moment; no
	 * connection is admitted past it. */
	__s64 conns;
	/* RL_F_CONNCAP: how many connections may be in flight.  Written by
	 * user space: the cap (standalone), or the slots held (fleet). */
	__s64 conn_slots;
	/* RL_F_CONNCAP, leased, RL_FAIL_STATIC: what may be in flight while
	 * the fleet is degraded - above all once the agent's heartbeat is
	 * stale, when nobody renews nor gives back conn_slots and Redis hands
	 * them to other hosts after their TTL.  Set by user space in advance:
	 * the host's share of the cap (cap / live agents, at least 1).  Fail
	 * allow sets no cap, fail deny admits no new connection. */
	__s64 conn_fail_slots;
	/* leased, while the fleet is not degraded: how far below zero
	 * `tokens` may go.  A SYN that finds no leased token is admitted on
	 * this overdraft instead of refused, so that a host whose traffic
	 * jumps, or whose agent is late, does not refuse while the next
	 * lease is on its way; the next lease pays it back first (user
	 * space adds to the negative count).  Written by user space: a
	 * quarter of the host's lease cap, which what it holds leaves room
	 * for.  0: none. */
	__s64 overdraft;
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct rl_tenant) == 128 &&
	       __builtin_offsetof(struct rl_tenant, generation) == 12 &&
	       __builtin_offsetof(struct rl_tenant, interval_ns) == 16 &&
	       __builtin_offsetof(struct rl_tenant, burst) == 24 &&
	       __builtin_offsetof(struct rl_tenant, tolerance_ns) == 32 &&
	       __builtin_offsetof(struct rl_tenant, lowwater) == 40 &&
	       __builtin_offsetof(struct rl_tenant, fail) == 48 &&
	       __builtin_offsetof(struct rl_tenant, fail_burst) == 52 &&
	       __builtin_offsetof(struct rl_tenant, fail_interval_ns) == 56 &&
	       __builtin_offsetof(struct rl_tenant, tat) == 64 &&
	       __builtin_offsetof(struct rl_tenant, tokens) == 72 &&
	       __builtin_offsetof(struct rl_tenant, lowwater_armed) == 80 &&
	       __builtin_offsetof(struct rl_tenant, conn_epoch) == 84 &&
	       __builtin_offsetof(struct rl_tenant, fail_tat) == 88 &&
	       __builtin_offsetof(struct rl_tenant, conns) == 96 &&
	       __builtin_offsetof(struct rl_tenant, conn_slots) == 104 &&
	       __builtin_offsetof(struct rl_tenant, conn_fail_slots) == 112 &&
	       __builtin_offsetof(struct rl_tenant, overdraft) == 120,
	       "rl_tenant: one cache line of configuration, one of state");

/* The agent's side of fleet mode, for the kernel (ARRAY `agent_state`, one
 * entry, mmapable).  The kernel applies each leased tenant's fail policy when
 * degraded is set or the heartbeat is older than stale_ns: a dead agent
 * never leaves its tenants without a policy.  Standalone, so do the
 * connection caps the agent shares with a preload pool (conn_limit()).
 * The agent stores the heartbeat, then stale_ns; readers load stale_ns
 * first (rl_agent_stamp). */
struct rl_agent_state {
	__u64 heartbeat_ns;	/* bpf_ktime_get_ns() clock */
	__u64 stale_ns;		/* 0: no heartbeat expected (standalone,
				 * unless the agent shares caps with a
				 * preload pool) */
	__u32 degraded;		/* the agent's Redis breaker is open */
	__u32 live_agents;	/* last fleet size the agent knew: a restarted
				 * agent keeps the static share it had */
};

_Static_assert(sizeof(struct rl_agent_state) == 24 &&
	       __builtin_offsetof(struct rl_agent_state, stale_ns) == 8 &&
	       __builtin_offsetof(struct rl_agent_state, degraded) == 16 &&
	       __builtin_offsetof(struct rl_agent_state, live_agents) == 20,
	       "rl_agent_state: layout shared with the kernel");

/* Per tenant, per CPU (BPF_MAP_TYPE_PERCPU_ARRAY `tenant_stats`): counting
 * never makes two CPUs fight over one cache line.  User space sums. */
struct rl_stats {
	__u64 admitted;		/* SYNs let through, retransmits included */
	__u64 denied;		/* SYNs refused (dropped or answered by RST) */
	__u64 shadow_denied;	/* shadow tenants: would have been refused */
	__u64 retransmits;	/* admitted free: SYN of a flow just admitted */
	__u64 rst_sent;		/* RST replies sent */
	__u64 lowwater_events;	/* low-water notifications sent */
	__u64 degraded;		/* SYNs decided by the fail policy */
	__u64 unparsed;		/* packets that might open a connection but
				 * could not be judged: refused (or, for a
				 * shadow tenant, would have been) */
};

_Static_assert(sizeof(struct rl_stats) == 64 &&
	       __builtin_offsetof(struct rl_stats, denied) == 8 &&
	       __builtin_offsetof(struct rl_stats, rst_sent) == 32 &&
	       __builtin_offsetof(struct rl_stats, degraded) == 48 &&
	       __builtin_offsetof(struct rl_stats, unparsed) == 56,
	       "rl_stats: one cache line of __u64 counters");

#ifndef __BPF__
/* Adds one CPU's stats to a sum (user space sums the per-CPU copies):
 * every field is a __u64 counter. */
static inline void rl_stats_add(struct rl_stats *sum, const struct rl_stats *one)
{
	__u64 *s = (__u64 *)sum;
	const __u64 *o = (const __u64 *)one;

	for (unsigned int i = 0; i < sizeof(*sum) / sizeof(__u64); i++)
		s[i] += o[i];
}
#endif

/*
 * Classification: a multibit trie that user space compiles from the rules
 * and the kernel walks with plain array lookups (which the verifier inlines),
 * in place of LPM tries whose every lookup is a pointer-chasing walk.
 *
 * `cls` is an array of 256-entry groups, in two halves of `cls_half` groups
 * (RL_CLS_GROUPS unless the loader sets another size, which it must also
 * give the map); `cls_state.active` names the half the kernel reads.  User space
 * writes the other half, flips `active`, then waits for an RCU grace period
 * (by updating `cls_sync`, a map-in-map)
 * before it may write the old half again, so a walk never sees a half-built
 * table.  Within a half:
 *
 *   groups   0..255  IPv4 root: group = first address byte, entry = second
 *   groups 256..511  IPv6 root, the same
 *   groups 512..     the rest of the trie (8 address bits per level), then
 *                    the port rows, packed entry by entry
 *
 * An entry is RL_CLS_NONE (no rule matches), a tenant, a group one level
 * deeper, or a port row: for addresses whose rules differ by port, the
 * value is the row's first entry, counted from the half's first entry (a
 * row may straddle groups).  A row is a small hash table of its own
 * ports, so it costs what its ports do, whatever other rows name:
 *
 *   entry 0          the header: the answer for every other port (NONE or
 *                    a tenant), with log2 of the row's slots in bits
 *                    RL_CLS_ROW_SHIFT.. of the value (tenants fit below)
 *   entries 1 + 2s   slot s: the port + 1 (0: an empty slot), then its
 *   and 2 + 2s       answer (a tenant, or NONE)
 *
 * A port's slot is rl_cls_port_hash(port) & (slots - 1): the compiler
 * makes a row as many slots as its ports need to take one each (65,536
 * always do), so a lookup reads one slot and no more.  Headers are at odd
 * entries, so that a slot's two entries never straddle groups.  Rows of
 * identical rules are one row.  Every entry already holds the final answer
 * for its addresses (the longest prefix; a rule for the port beats an
 * any-port rule of the same length): the compiler pushes the result of
 * shorter prefixes down into the groups below them.
 */
#define RL_CLS_FANOUT		256
#define RL_CLS_GROUPS		8192	/* per half by default: 8 MiB */
#define RL_CLS_GROUPS_MIN	1024	/* per half: room past RL_CLS_POOL */
#define RL_CLS_GROUPS_MAX	(512 * 1024)	/* per half: 512 MiB */
#define RL_CLS_ROOT4		0
#define RL_CLS_ROOT6		256
#define RL_CLS_POOL		512

#define RL_CLS_NONE		0u
#define RL_CLS_T_TENANT		1u
#define RL_CLS_T_GROUP		2u
#define RL_CLS_T_PORTS		3u
#define RL_CLS_TYPE(e)		((e) >> 30)
#define RL_CLS_VAL(e)		((e) & 0x3fffffffu)
#define RL_CLS_ENTRY(t, v)	(((__u32)(t) << 30) | (__u32)(v))

/* The default size of a half: RL_CLS_TENANT_ENTRIES entries a tenant of
 * --max-tenants past the roots (room for a dense /30 and a few ports
 * each), at least RL_CLS_GROUPS, so that --rule-memory (both halves) is
 * whole MiB. */
#define RL_CLS_TENANT_ENTRIES	16
static inline __u32 rl_cls_default_half(__u32 max_tenants)
{
	__u64 g = RL_CLS_POOL + ((__u64)max_tenants * RL_CLS_TENANT_ENTRIES +
				 RL_CLS_FANOUT - 1) / RL_CLS_FANOUT;

	g = (g + 511) / 512 * 512;
	return g < RL_CLS_GROUPS ? RL_CLS_GROUPS :
	       g > RL_CLS_GROUPS_MAX ? RL_CLS_GROUPS_MAX : (__u32)g;
}

#define RL_CLS_ROW_SHIFT	24
#define RL_CLS_ROW_BITS(h)	(((h) >> RL_CLS_ROW_SHIFT) & 0x1f)	/* 0..16 */
#define RL_CLS_ROW_ANY(h)	((h) & ~(0x1fu << RL_CLS_ROW_SHIFT))
/* The key entry of port's slot in the row whose header is entry `first`
 * and reads hdr (the slot's answer entry follows it). */
#define RL_CLS_ROW_SLOT(first, hdr, port) \
	((first) + 1 + 2 * (rl_cls_port_hash(port) & \
			    ((1u << RL_CLS_ROW_BITS(hdr)) - 1)))

_Static_assert(RL_TENANTS_LIMIT <= (1u << RL_CLS_ROW_SHIFT),
	       "a row header holds a tenant below its size bits");

/* A port's first slot in a row: a bijection of the 16 port bits (an odd
 * multiplier, then an xorshift), so a row of 65,536 slots never collides
 * and smaller rows spread neighbouring ports. */
static inline __u32 rl_cls_port_hash(__u32 port)
{
	__u32 x = (port * 0x9e37u) & 0xffffu;

	return x ^ (x >> 8);
}

struct rl_cls_group {
	__u32 e[RL_CLS_FANOUT];
};

_Static_assert(sizeof(struct rl_cls_group) == 1024, "rl_cls_group: 1 KiB");

/* `cls_state`, one entry, mmapable. */
struct rl_cls_state {
	__u32 active;		/* the half the kernel reads: 0 or 1 */
	__u32 generation;	/* bumped on every publish */
};

_Static_assert(sizeof(struct rl_cls_state) == 8 &&
	       __builtin_offsetof(struct rl_cls_state, generation) == 4,
	       "rl_cls_state: two words");

/*
 * The bucket clock.  Reading the precise clock costs several times what the
 * rest of a SYN's decision does on some machines (tens of ns in a VM), so
 * buckets run on the tick-granular coarse clock, which lags the precise one
 * by at most a tick.  That only ever delays a token (never grants an extra
 * one), and loses none as long as a tick's worth of tokens fits in the
 * bucket; a bucket whose whole capacity refills faster than
 * RL_FINE_CLOCK_NS (twice the longest tick, HZ=100) reads the precise clock.
 */
#define RL_FINE_CLOCK_NS	(20ULL * 1000 * 1000)

/* A SYN as the retransmission check knows it: the 4-tuple and the ISN.
 * IPv4 addresses use the first four bytes and leave the rest zero; `_pad` is
 * always zero, so the key is six whole 64-bit words to hash and compare. */
struct rl_flow {
	__u8 saddr[16];
	__u8 daddr[16];
	__u16 sport;
	__u16 dport;
	__u32 isn;
	__u32 family;		/* 4 or 6 */
	__u32 _pad;
} __attribute__((aligned(8)));

_Static_assert(sizeof(struct rl_flow) == 48 &&
	       __builtin_offsetof(struct rl_flow, sport) == 32 &&
	       __builtin_offsetof(struct rl_flow, dport) == 34 &&
	       __builtin_offsetof(struct rl_flow, isn) == 36,
	       "rl_flow: six words, the ports in the ninth half-word pair");

/*
 * One slot of `flow_cache_cpu`, a direct-mapped cache per CPU of the SYNs
 * admitted in the last retrans_window_ns: a SYN whose hash picks this slot
 * and whose whole key equals `flow` is a retransmission and is admitted
 * without a token.  An admission simply overwrites its slot, so a flow that
 * shares a slot with a later admission is forgotten early and its
 * retransmission charged - what an LRU table does to everything under a
 * flood, here at random.
 *
 * Per CPU, because a retransmission arrives where its SYN did: the NIC's
 * receive hash (and RPS) send one 4-tuple to one queue and so one CPU.  No
 * other CPU ever writes a slot, so a slot needs no lock and no atomic, and
 * no cache line moves between CPUs.  (When the queue's interrupt moves to
 * another CPU, flows admitted just before are forgotten: a retransmission
 * then takes a token.)  A flow's end is the exception: its RST or FIN may
 * be judged on another CPU than its SYN (on a veth each packet is judged
 * where it was sent), so it is marked where every CPU sees it, in
 * `flow_ends` (see RL_FLOW_END_BITS).
 */
struct rl_flow_slot {
	struct rl_flow flow;
	__u64 seen_ns;		/* the coarse clock at admission, then at
				 * each free repeat */
	__u32 repeats;		/* free repeats taken; the most allowed once
				 * the client ended the flow */
	__u32 _pad;
};

/*
 * Retransmissions are free, replays are not.  A copy of an admitted SYN (same
 * 4-tuple and ISN) passes without a token only as a client kernel's
 * retransmission would arrive: at most RL_FLOW_MAX_REPEATS of them (the
 * loader may set another number: retrans_max_repeats), each
 * within retrans_window_ns of the previous copy and no sooner than
 * retrans_gap_ns << (repeats so far) after it (kernels back off from an
 * initial timeout of 1 s: Linux retransmits at 1 s and 3 s).  A RST or FIN
 * from the client's side of the flow ends it, so the same SYN sent again
 * after a reset is charged as the new connection it is for the server.
 */
_Static_assert(sizeof(struct rl_flow_slot) == 64 &&
	       __builtin_offsetof(struct rl_flow_slot, seen_ns) == 48 &&
	       __builtin_offsetof(struct rl_flow_slot, repeats) == 56,
	       "rl_flow_slot: one cache line");

#define RL_FLOW_MAX_REPEATS		2
#define RL_DEFAULT_RETRANS_GAP_NS	(500ULL * 1000 * 1000)

/*
 * The slot of `flow_cache_cpu` a flow lives in, of 2^bits: the top bits of a
 * sum of products of the key's words, which depend on every bit of the
 * 4-tuple and the family.  The ISN is left out so that a RST or FIN of the
 * flow, whose sequence number is not the ISN, finds the slot to end it.
 * Shared so that tests can find flows that collide.  Not keyed: filling slots
 * at random only does what any flood does to a cache of recent flows, and
 * ending someone else's flow needs its 4-tuple and only costs that client a
 * token for its next retransmission.
 */
typedef __u64 __attribute__((may_alias)) rl_flow_word;
typedef __u32 __attribute__((may_alias)) rl_flow_half;

#define RL_FLOW_PORTS_HALF	8	/* sport and dport, as one __u32 */

static inline __u64 rl_flow_mix(const struct rl_flow *f)
{
	const rl_flow_word *w = (const rl_flow_word *)f;
	const rl_flow_half *h32 = (const rl_flow_half *)f;
	__u64 h;

	h = w[0] * 0x9e3779b97f4a7c15ULL + w[1] * 0xc2b2ae3d27d4eb4fULL +
	    w[2] * 0x165667b19e3779f9ULL + w[3] * 0xd6e8feb86659fd93ULL +
	    (__u64)h32[RL_FLOW_PORTS_HALF] * 0xff51afd7ed558ccdULL + w[5];
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h;
}

static inline __u32 rl_flow_hash(const struct rl_flow *f, __u32 bits)
{
	return rl_flow_mix(f) >> (64 - bits);
}

/*
 * Each slot's tag, in `flow_tags_cpu` beside the slots: 8 bits of the same
 * hash below the slot's (h being rl_flow_mix()) of the key the slot holds,
 * never 0, written with the slot.  A SYN whose tag differs from its slot's
 * cannot be that slot's flow, and is known new without reading the slot:
 * what every SYN of a spoofed flood is, and what would otherwise cost it a
 * cache miss in a megabyte of slots, where the tags are 16 KiB.  A tag of 0
 * is unknown: the tags are not pinned and the slots are, so a program
 * starts with every tag 0 while the slots may hold flows a previous program
 * admitted.  The first packet to look at a slot with an unknown tag reads
 * the slot and writes its key's tag (an empty slot's too), so each slot is
 * read once more per program and a tag never hides the flow its slot holds.
 * That takes one program writing the slots at a time, which an agent's
 * replacement of its program keeps: on a CPU, the new one runs only after
 * the old one's last packet there.
 */
#define RL_FLOW_TAG_LINE	64	/* tags per entry of flow_tags_cpu */

struct rl_flow_tags {
	__u8 tag[RL_FLOW_TAG_LINE];
};

static inline __u8 rl_flow_tag(__u64 h, __u32 bits)
{
	__u8 t = (__u8)(h >> (56 - bits));

	return t ? t : 1;
}

/* Slots per CPU as a power of two: about RL_FLOW_SLOTS_TOTAL over all CPUs
 * (a flow is remembered on its own CPU, and traffic spreads over them), so
 * the cache costs about 8 MiB on any machine, between RL_FLOW_BITS_MIN and
 * RL_FLOW_BITS per CPU. */
static inline __u32 rl_flow_bits(int ncpus)
{
	__u32 bits = RL_FLOW_BITS;

	while (bits > RL_FLOW_BITS_MIN && ncpus > 0 &&
	       ((__u64)ncpus << bits) > RL_FLOW_SLOTS_TOTAL)
		bits--;
	return bits;
}

/*
 * `flow_ends`: a 64-bit word per place, 2^RL_FLOW_END_BITS places shared by
 * every CPU, the place the top bits of the flow's hash (rl_flow_mix(), the
 * ISN left out, so a RST or FIN finds it).  A client's RST or FIN stores
 * there, in one compare-and-swap, the fingerprint of its 4-tuple (high 32
 * bits: other bits of the hash, never 0) and the time of the end (low 32
 * bits: the coarse clock in units of 2^20 ns, about a millisecond, modulo
 * 2^32).  A copy that a CPU's slot would pass free is charged instead when
 * its flow's fingerprint - or RL_FLOW_END_ANY - is marked at its place no
 * earlier than the slot's stamp.  When a place still holds another flow's
 * end from within the retransmission window, the new end is marked
 * RL_FLOW_END_ANY, which ends every flow of that place stamped before it:
 * its copies are charged a token each, and no end is lost to a flow that
 * shares, or was made to share, its place.  Only an end that a socket of
 * this host backs does so; one that meets a bare listener marks nothing, and
 * one that meets no socket at all only its own fingerprint in a free or old
 * place, so that a blind flood cannot end other flows (see flow_end()).  Half a MiB, whatever the CPUs,
 * in the program's global data: not pinned, so a new program starts with
 * no end marked.
 */
#define RL_FLOW_END_BITS	16
#define RL_FLOW_END_ANY		0xffffffffu

static inline __u32 rl_flow_end_place(__u64 h)
{
	return h >> (64 - RL_FLOW_END_BITS);
}

static inline __u32 rl_flow_end_fp(__u64 h)
{
	__u32 fp = (__u32)h;

	return fp && fp != RL_FLOW_END_ANY ? fp : 1;
}

static inline __u32 rl_flow_end_time(__u64 ns)
{
	return (__u32)(ns >> 20);
}

/* Events on the `events` ring buffer. */
enum rl_event_type {
	RL_EV_LOWWATER = 1,
};

struct rl_event {
	__u32 type;		/* enum rl_event_type */
	__u32 tenant;
	__s64 tokens;		/* tokens left when the event was sent */
	__u64 ts_ns;		/* bpf_ktime_get_ns() */
};

_Static_assert(sizeof(struct rl_event) == 24 &&
	       __builtin_offsetof(struct rl_event, tenant) == 4 &&
	       __builtin_offsetof(struct rl_event, tokens) == 8 &&
	       __builtin_offsetof(struct rl_event, ts_ns) == 16,
	       "rl_event: layout read by the agent");

/* Global counters (PERCPU_ARRAY `counters`), indexed by this enum. */
enum rl_counter {
	RL_CNT_SYN = 0,		/* SYNs seen */
	RL_CNT_NOMATCH,		/* SYNs no rule matched */
	RL_CNT_UNPARSED,	/* IPv4/IPv6 packets that could not be judged,
				 * passed: their source matches no tenant, or
				 * the IP header itself is cut short */
	RL_CNT_FRAGMENT,	/* non-first fragments passed */
	RL_CNT_RST_FAILED,	/* RST wanted but the packet could not be trimmed */
	RL_CNT_UNPARSED_DROP,	/* ... could not be judged, and refused: they
				 * might open a connection from a tenant */
	RL_CNT_REPEAT_CHARGED,	/* copies of an admitted SYN charged as new */
	RL_CNT_CONN_FULL,	/* SYNs of capped tenants refused: `conns`
				 * was full */
	RL_CNT_INST_FULL,	/* SYNs refused at the instance's cap */
	RL_CNT_INST_RATE,	/* SYNs refused by the instance's rate */
	RL_CNT_VERIFY_SYN,	/* SYNs of RL_F_VERIFY tenants, passed
				 * uncharged to the server's SYN cookies */
	RL_CNT_VERIFY_ACK,	/* handshake ACKs of RL_F_VERIFY tenants whose
				 * SYN cookie checked out, or that complete
				 * a request socket's handshake: charged as
				 * the connection (free copies included) */
	RL_CNT_SRC_DENIED,	/* SYNs refused by their source's bucket */
	RL_CNT_SRC_OVERFLOW,	/* SYNs of a new source while `sources` was
				 * full: judged by the tenant's overflow
				 * bucket */
	RL_CNT_OVERDRAWN,	/* SYNs of leased tenants admitted on the
				 * overdraft (rl_tenant.overdraft) */
	RL_CNT_COOKIE_SENT,	/* SYNs of RL_F_ANSWER tenants answered here
				 * with a SYN cookie (of RL_CNT_VERIFY_SYN) */
	RL_CNT_MAX,
};

/* The `counters` map has room to grow without a layout change. */
#define RL_CNT_SLOTS		16
_Static_assert(RL_CNT_MAX <= RL_CNT_SLOTS, "counters: RL_CNT_SLOTS too small");

/*
 * Connection caps.  `conns` (a hash, BPF_MAP_TYPE_HASH: an LRU would evict
 * entries and lose counts) holds one entry per connection in flight of a
 * capped tenant, keyed by its 4-tuple in the client's direction (struct
 * rl_flow with isn zero).  The kernel inserts it (BPF_NOEXIST) when it
 * admits the SYN, and deletes it on a RST either way or once both sides
 * have sent a FIN - the server's side seen by the tc egress program.  User
 * space deletes what the kernel cannot see end: entries with no socket left
 * (for local servers), and entries idle past a TTL.  Whoever's delete
 * succeeds gives the connection back (rl_tenant.conns), so a close seen
 * twice is given back once.
 *
 * The table holds RL_CONNS_MAX entries in all; the agent refuses caps that
 * together exceed it, and a SYN that finds it full anyway is refused
 * (RL_CNT_CONN_FULL) rather than admitted uncounted.
 */
#define RL_CONNS_MAX		(128 * 1024)

/* A limit no count of `conns` reaches: fail allow's "no cap". */
#define RL_CONN_NO_CAP		((__s64)1 << 62)

#define RL_CONN_FIN_CLIENT	(1U << 0)
#define RL_CONN_FIN_SERVER	(1U << 1)

/* rl_conn.tenant of a connection counted in no tenant's cap (unmatched,
 * or its tenant has no cap): only in the instance's. */
#define RL_CONN_NO_TENANT	0xffffffffu
/* rl_conn.flags: counted in the instance's cap too */
#define RL_CONN_F_INSTANCE	(1U << 0)

struct rl_conn {
	__u32 tenant;		/* the slot it is counted in, or
				 * RL_CONN_NO_TENANT */
	__u32 epoch;		/* that slot's conn_epoch then */
	__u32 isn;		/* the client's ISN: a SYN with it is this
				 * connection again, never a second one */
	__u32 fin;		/* RL_CONN_FIN_*: FINs seen, atomically or'ed */
	__u64 opened_ns;	/* coarse clock at the SYN */
	__u64 seen_ns;		/* coarse clock at the SYN or a FIN since */
	__u32 inst_epoch;	/* RL_CONN_F_INSTANCE: the instance's
				 * conn_epoch then */
	__u32 flags;		/* RL_CONN_F_* */
};

_Static_assert(sizeof(struct rl_conn) == 40 &&
	       __builtin_offsetof(struct rl_conn, inst_epoch) == 32,
	       "rl_conn: layout shared");

/* Per tenant, per CPU (`conn_stats`): what the cap did. */
struct rl_conn_stats {
	__u64 opened;		/* connections counted in */
	__u64 closed;		/* ... and out, by the kernel (a RST or a
				 * FIN pair the server acts on) */
	__u64 denied;		/* SYNs refused at the cap (also in
				 * rl_stats.denied) */
	__u64 shadow_denied;	/* shadow tenants: admitted over the cap,
				 * counted in anyway */
	__u64 repeats;		/* SYNs of a connection already counted */
	__u64 reused;		/* an admitted SYN with a new ISN on a
				 * 4-tuple still counted (TIME_WAIT reuse):
				 * it took the old one's place */
	__u64 full;		/* SYNs refused: `conns` was full */
	__u64 _pad;
};

_Static_assert(sizeof(struct rl_conn_stats) == 64, "rl_conn_stats: one line");

/* `conn_ctl`, one entry, mmapable: while no tenant has a cap, a RST or FIN
 * costs no lookup in `conns`. */
struct rl_conn_ctl {
	__u32 capped;		/* tenants with RL_F_CONNCAP (0: none) */
	__u32 instance;		/* 1: the instance has a cap */
};

/*
 * The host-wide instance limit (ARRAY `instance`, one struct rl_tenant,
 * mmapable): a cap on connections in flight to the host, over every tenant
 * and every SYN no rule matches, and optionally a rate, both enforced by
 * the kernel alone (fleet state is never read: it holds while Redis is
 * down).  Of the struct, only these fields mean anything here: mode
 * (RL_MODE_STANDALONE: on; RL_MODE_NONE: off), flags (RL_F_CONNCAP: the
 * cap is on), conn_slots (the cap), conns and conn_epoch (as a tenant's,
 * see `conns`: an entry with RL_CONN_F_INSTANCE and the same epoch gives
 * back here), and interval_ns, tolerance_ns and tat (the rate as a GCRA
 * bucket; interval_ns 0: no rate).  A SYN over either is dropped and
 * counted (RL_CNT_INST_FULL, RL_CNT_INST_RATE, and in its tenant's
 * rl_stats.denied); there is no shadow mode for the instance.
 */

_Static_assert(sizeof(struct rl_conn_ctl) == 8, "rl_conn_ctl: two words");

/*
 * Per-source limits (RL_F_PERSOURCE).  Within such a tenant every source -
 * its address cut to a prefix of len4 (IPv4) or len6 (IPv6) bits - has a
 * GCRA bucket of its own in `sources`, a preallocated hash (never an LRU:
 * an LRU evicts the bucket of a source that is in debt the moment another
 * source arrives, and an abuser cycling addresses would start full every
 * time).  A SYN must pass its source's bucket, then the tenant's; one its
 * source refuses costs the tenant nothing.
 *
 * The table holds what the loader sized it to (rlagent --per-source-table;
 * RL_SRC_TABLE in this object as compiled) over every tenant, each tenant
 * at most its share of it (rl_src_ctl.share, counted in rl_src_conf.used).
 * The kernel only inserts: a new source gets an entry, full, while there
 * is room in the table and in its tenant's share, and otherwise it shares
 * its tenant's one overflow bucket (rl_src_conf.overflow_tat) with every
 * other source of that tenant without an entry.
 * User space deletes an entry only once its bucket is full again (tat at or
 * before now), when a fresh entry would hold exactly the same tokens: no
 * order of arrivals gives a source more than its own bucket, or the
 * overflow bucket, allows.  (A SYN that takes a token in the instant
 * between user space's read of a full bucket and its delete gets that one
 * token again from the fresh entry: at most one token a sweep.)
 */
#define RL_SRC_TABLE		65536
#define RL_SRC_TABLE_MIN	16
#define RL_SRC_TABLE_MAX	(16u << 20)

/* A source's key: its tenant's slot and its address cut to the tenant's
 * prefix (IPv4 in the first four bytes, the rest zero). */
struct rl_src_key {
	__u32 tenant;
	__u32 family;		/* 4 or 6 */
	__u8 addr[16];
};

_Static_assert(sizeof(struct rl_src_key) == 24 &&
	       __builtin_offsetof(struct rl_src_key, addr) == 8,
	       "rl_src_key: three words");

/* One source's bucket (`sources`).  tat 0: full. */
struct rl_src {
	__u64 tat;		/* GCRA, as rl_tenant.tat */
	__u64 passed;		/* SYNs its bucket let on to the tenant's */
	__u64 denied;		/* SYNs its bucket refused (shadow: would
				 * have) */
	__u64 _pad;
};

_Static_assert(sizeof(struct rl_src) == 32, "rl_src: four words");

/* Per tenant slot (ARRAY `src_conf`, mmapable, sized as `tenants`): the
 * per-source limit, written by user space before it sets RL_F_PERSOURCE,
 * and the overflow bucket, spent by the kernel only while `sources` is full
 * (one cache line: at --max-tenants 1048576 a second line would be 64 MiB
 * more for a word written that rarely). */
struct rl_src_conf {
	__u64 interval_ns;	/* nanoseconds per token; 0: no limit */
	__u64 tolerance_ns;	/* burst * interval_ns */
	__u8 mask4[16];		/* ANDed with an IPv4 source (4 bytes) */
	__u8 mask6[16];		/* ANDed with an IPv6 source */
	__u64 overflow_tat;	/* new sources while `sources` is full, or
				 * this tenant holds its share of it */
	__s64 used;		/* entries of `sources` this tenant holds:
				 * raised by the kernel on each insert,
				 * lowered by user space on each delete */
} __attribute__((aligned(64)));

_Static_assert(sizeof(struct rl_src_conf) == 64 &&
	       __builtin_offsetof(struct rl_src_conf, mask4) == 16 &&
	       __builtin_offsetof(struct rl_src_conf, mask6) == 32 &&
	       __builtin_offsetof(struct rl_src_conf, overflow_tat) == 48 &&
	       __builtin_offsetof(struct rl_src_conf, used) == 56,
	       "rl_src_conf: one cache line");

/* Per tenant, per CPU (`src_stats`): what the per-source limit did. */
struct rl_src_stats {
	__u64 denied;		/* SYNs refused by a source's bucket or the
				 * overflow bucket (also in rl_stats.denied) */
	__u64 shadow_denied;	/* shadow tenants: would have been */
	__u64 overflow;		/* SYNs judged by the overflow bucket */
	__u64 overflow_denied;	/* ... of those, refused (or would be) */
	__u64 inserted;		/* sources given an entry */
	__u64 _pad[3];
};

_Static_assert(sizeof(struct rl_src_stats) == 64, "rl_src_stats: one line");

/* `src_ctl`, one entry, mmapable: entries of `sources` in use, raised by
 * the kernel on each insert and lowered by user space on each delete; and
 * the most entries one tenant may hold (0: no share, the whole table),
 * written by user space: the table over the tenants with a per-source
 * limit, so that one tenant's flood of new (or forged) sources fills only
 * its own share and sends only its own new sources to its overflow
 * bucket, never another tenant's. */
struct rl_src_ctl {
	__s64 used;
	__u64 share;
};

_Static_assert(sizeof(struct rl_src_ctl) == 16 &&
	       __builtin_offsetof(struct rl_src_ctl, share) == 8,
	       "rl_src_ctl: two words");

/*
 * The sources refused most (ARRAY `src_top`, RL_SRC_TOP slots, mmapable):
 * a source refused by its bucket is written, with its refusals so far, to
 * the slot its key hashes to, unless that slot holds another source refused
 * more often.  Reading the heaviest refused sources is reading these slots,
 * never the whole table.  A source that shares its slot with a heavier one
 * is not shown; user space clears slots whose source has no entry left.
 */
#define RL_SRC_TOP		1024

struct rl_src_top {
	struct rl_src_key key;
	__u64 denied;		/* its rl_src.denied when last written */
};

_Static_assert(sizeof(struct rl_src_top) == 32, "rl_src_top: four words");

typedef __u64 __attribute__((may_alias)) rl_src_word;

static inline __u32 rl_src_hash(const struct rl_src_key *k, __u32 bits)
{
	const rl_src_word *w = (const rl_src_word *)k;
	__u64 h;

	h = w[0] * 0x9e3779b97f4a7c15ULL + w[1] * 0xc2b2ae3d27d4eb4fULL +
	    w[2] * 0x165667b19e3779f9ULL;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h >> (64 - bits);
}

#define RL_SRC_TOP_BITS		10
_Static_assert((1u << RL_SRC_TOP_BITS) == RL_SRC_TOP, "src_top: 2^bits");

/* IPv6 extension headers followed before TCP; a longer chain from a tenant's
 * source is refused (see parse_ipv6()). */
#define RL_IPV6_MAX_EXT		8

/* VLAN tags (802.1Q, 802.1ad, in any order) the parser walks to find the IP
 * header; a frame with more is refused and counted as unparsed, since no
 * source can be read to tell whose it is (Linux would need VLAN devices
 * stacked that deep to deliver it).  A power of two. */
#define RL_VLAN_MAX		8
_Static_assert((RL_VLAN_MAX & (RL_VLAN_MAX - 1)) == 0, "RL_VLAN_MAX: 2^n");

#define RL_DEFAULT_RETRANS_WINDOW_NS	(5ULL * RL_NSEC_PER_SEC)

#endif /* RLGATE_H */
