/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The preload pool: the shared memory through which rlagent hands rules,
 * limits and tokens to librlpreload.so inside unmodified programs - the
 * second enforcement point, for hosts where XDP cannot be attached.  This
 * header is the layout both sides map; pool.c is the reader's side (what the
 * library runs on every accept), pool_write.c the agent's.
 */
#ifndef RL_POOL_H
#define RL_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "rlgate.h"

/*
 * The pool is one file (on tmpfs: /run or /dev/shm), mapped shared by the
 * agent and by every preloaded process:
 *
 *   header      one page: struct rl_pool_hdr
 *   tenants     max_tenants x struct rl_tenant, the kernel's own slot
 *               layout: configuration line, then the bucket line
 *   stats       max_tenants x struct rl_stats, added to with atomics by
 *               every process (admitted, denied, shadow_denied, degraded)
 *   procs       max_procs x struct rl_pool_proc: the processes seen
 *   classifiers two of 2 x cls_half x struct rl_cls_group, the kernel's
 *               compiled trie in two halves (see rlgate.h,
 *               "Classification"): the inbound rules (source prefix x
 *               local port, accept), then the outbound ones (destination
 *               prefix x port, connect), which the kernel never sees
 *
 * Offsets follow from the three counts (rl_pool_layout()), and a reader
 * checks them, so a damaged header is refused, never trusted.
 *
 * The first 32 bytes (struct rl_pool_preamble) never change meaning
 * between layouts: a library of another version still finds the magic and
 * the versions there (the pool's and the kernel structs' it embeds),
 * refuses the rest, and counts itself in `foreign`.
 * Any other change to what follows bumps RL_POOL_VERSION; the agent then
 * makes a new file, renamed over the old one.
 *   1  the first layout
 *   2  a second classifier, for outbound rules (the header's cls and
 *      off_cls become pairs)
 *   3  the classifiers' port rows are tables of their own ports (map
 *      layout 5), and the trie starts at group 512
 */
#define RL_POOL_MAGIC		0x6c6f6f70	/* "pool" */
#define RL_POOL_VERSION		3
#define RL_POOL_DEFAULT_PATH	"/run/rlgate.pool"
#define RL_POOL_HDR_BYTES	4096
#define RL_POOL_PROCS		256

struct rl_pool_preamble {
	__u32 magic;		/* RL_POOL_MAGIC */
	__u32 version;		/* RL_POOL_VERSION of the agent that made it */
	__u64 size;		/* bytes of the layout (the file is no shorter) */
	__u32 foreign;		/* processes of another layout that found it */
	__u32 abi;		/* RL_ABI_VERSION whose struct rl_tenant and
				 * rl_stats the pool holds: theirs is its
				 * layout too */
	__u32 _pad[2];
};

_Static_assert(sizeof(struct rl_pool_preamble) == 32,
	       "rl_pool_preamble: the same in every layout");

/* The two rule sets of a pool. */
enum rl_pool_dir {
	RL_POOL_IN = 0,		/* accept: source prefix x local port */
	RL_POOL_OUT = 1,	/* connect: destination prefix x port */
};

/*
 * One classifier's switch.  It is switched as the kernel's is, except that
 * no grace period can be waited for in processes the agent does not know:
 * seq is a sequence count the writer makes odd while it writes a half and
 * even again once `active` names it.  A reader takes the count, walks the
 * active half and takes the count again: if it grew by more than one, the
 * half it walked may have been rewritten under it, and it walks again.
 * (The half in use is only ever written two switches later.)
 *
 * The orderings, which hold on weakly ordered CPUs (ARM64) as on x86:
 *   writer  seq += 1 (relaxed); release fence; the half's groups,
 *           groups/columns/rules[next] (relaxed atomic stores);
 *           active = next (release); seq += 1 (release)
 *   reader  s1 = seq (acquire); act = active (acquire); groups[act] and
 *           the walk (relaxed atomic loads); acquire fence;
 *           s2 = seq (relaxed); the walk stands if s2 - s1 <= 1
 * The release fence keeps the odd count ahead of every store into the
 * half; the acquire fence keeps every load of the walk ahead of the second
 * look: a walk that read a store of a change begun after s1 finds s2
 * moved by two or more.  The acquire load of `active` sees what the
 * writer stored into the half before naming it.  The half's entries are
 * atomics on both sides: a torn entry is never read, only a stale one,
 * which the count then refuses.
 */
struct rl_pool_cls {
	__u32 seq;
	__u32 active;		/* 0 or 1 */
	__u32 groups[2];	/* groups each half's rules take */
	__u32 columns[2];	/* ports its rules name: 0, no need to look
				 * up a connection's port */
	__u32 rules[2];		/* its rules: 0, nothing to look up at all */
	__u32 _pad;
};

struct rl_pool_hdr {
	struct rl_pool_preamble pre;
	__u32 max_tenants;	/* slots in tenants and stats */
	__u32 cls_half;		/* classifier groups per half */
	__u32 max_procs;	/* slots in procs */
	/* Standalone: 2 while the agent shares each capped tenant's cap
	 * between the kernel and the pool (XDP attached too), so that the
	 * pool's conn_slots are its part, which only a live agent moves;
	 * else 0 or 1.  (Padding that was zero before: no new layout.) */
	__u32 points;
	__u64 off_tenants, off_stats, off_procs;
	__u64 off_cls[2];	/* by enum rl_pool_dir */
	struct rl_pool_cls cls[2];
	__u64 generation;	/* bumped on every change of rules or tenants */
	/* The agent's heartbeat on CLOCK_MONOTONIC (the kernel's clock), as in
	 * the kernel's `agent_state`: leased tenants apply their fail policy
	 * once it is older than stale_ns, or while degraded is set, and so do
	 * the connection caps a standalone agent shares with the kernel
	 * (points).  stale_ns 0: never stale (an agent of before). */
	struct rl_agent_state agent;
	__u32 agent_pid;	/* the agent that last wrote the pool */
	__u32 procs_full;	/* processes that found the table full */
	__u64 made_ns;		/* CLOCK_REALTIME when the file was made */
};

_Static_assert(sizeof(struct rl_pool_hdr) <= RL_POOL_HDR_BYTES,
	       "rl_pool_hdr: fits its page");

/* One process that loaded the library and listened, accepted or connected
 * through it. */
struct rl_pool_proc {
	__u32 pid;		/* 0: a free slot (in the pool's pid namespace
				 * as the process sees it) */
	__u32 flags;		/* RL_POOL_P_* */
	__u64 start_ns;		/* CLOCK_MONOTONIC when it registered */
	__u64 seen_ns;		/* ... when it last accepted or connected */
	__u64 admitted;		/* connections of a tenant it was handed, or
				 * let open */
	__u64 denied;		/* ... reset before it saw them, or whose
				 * connect failed */
	char comm[16];		/* /proc/self/comm, NUL-terminated */
	__u64 pidns;		/* the inode of its pid namespace: its pid
				 * means something only there (a container's
				 * process is pid 1 in its own) */
};

_Static_assert(sizeof(struct rl_pool_proc) == 64, "rl_pool_proc: a cache line");

#define RL_POOL_P_LISTEN	(1U << 0)	/* called listen() */
#define RL_POOL_P_ACCEPT	(1U << 1)	/* accepted through the library */
#define RL_POOL_P_CONNECT	(1U << 2)	/* connected to an outbound
						 * tenant through it */

/*
 * How the rest of the pool is shared (the agent writes, the processes
 * read and spend; every word both sides touch is read and written with
 * __atomic builtins, so no access is torn and none is a data race):
 *   tenant slots  rl_slot_configure stores the configuration, then the
 *                 mode with release; readers load the mode with acquire
 *                 first (rl_pool_take, rl_pool_conn_open).  The fail
 *                 policy likewise: its static share, then `fail` with
 *                 release, loaded with acquire before the share.
 *   buckets       tat, tokens, fail_tat, conns and the stats are counters
 *                 changed only by read-modify-writes of their own word:
 *                 relaxed, nothing else is published through them.
 *   low water     lowwater_armed is a flag about the count (spent down to
 *                 the mark) and publishes nothing: relaxed.
 *   slots         a reservation (an add to conns, then a load of
 *                 conn_slots) against the agent's lowering (a store of
 *                 conn_slots, then a load of conns): sequentially
 *                 consistent on both sides (rl_share_store).
 *   heartbeat     heartbeat_ns, then stale_ns with release; readers load
 *                 stale_ns with acquire first (rl_pool_degraded).
 *   processes     a slot is claimed by a compare-and-swap of its pid, its
 *                 other fields stored after: a reader may see a new pid
 *                 with the last process's figures for a moment (display
 *                 only).
 */

/* A mapped pool, as either side holds it.  Its sizes are taken from the
 * header once, when it is mapped, and checked against the file then: every
 * process of the pool's group can write the header, so no reader ever looks
 * at the header's sizes or offsets again (the layout is the mapper's own). */
struct rl_pool {
	void *base;
	size_t len;		/* bytes mapped: the layout's size */
	uint32_t n_tenants;	/* slots in tenants and stats */
	uint32_t cls_half;	/* classifier groups per half */
	uint32_t n_procs;	/* slots in procs */
	struct rl_pool_hdr *hdr;
	struct rl_tenant *tenants;
	struct rl_stats *stats;
	struct rl_pool_proc *procs;
	struct rl_cls_group *cls[2];	/* both halves, by enum rl_pool_dir */
	dev_t dev;			/* the file mapped, to notice a new one */
	ino_t ino;
};

/* The offsets and size of the layout for these counts.  0, or -EINVAL for
 * counts no pool may have. */
int rl_pool_layout(uint32_t max_tenants, uint32_t cls_half, uint32_t max_procs,
		   struct rl_pool_hdr *out);

/*
 * Maps the pool at path, read-write (the library spends tokens in it), and
 * checks its layout.  0; -ENOENT, -EACCES and other errors of open and mmap;
 * -EPERM for a file not owned by root (only the agent makes pools);
 * -EPROTO for a pool of another layout (after counting this process in its
 * preamble's `foreign`), -EBADMSG for a damaged one.  Only the layout's
 * bytes are mapped, and its sizes are copied into p (see struct rl_pool).
 * Async-signal-safe: no allocation, no locks; p is untouched on failure.
 */
int rl_pool_map(struct rl_pool *p, const char *path);
void rl_pool_unmap(struct rl_pool *p);

/* The tenant slot for a connection, or -1: inbound (RL_POOL_IN) from
 * (family, addr) to local `port`, as the kernel's classifier would answer;
 * outbound to (family, addr) and `port`.  IPv4 addresses are 4 bytes (a
 * v4-mapped IPv6 address is IPv4: the kernel sees an IPv4 packet). */
int rl_pool_classify(const struct rl_pool *p, enum rl_pool_dir dir, int family,
		     const uint8_t *addr, uint16_t port);

/* Whether the rules of dir in force name ports (so that the port matters);
 * rl_pool_has_rules: whether there are any. */
bool rl_pool_needs_port(const struct rl_pool *p, enum rl_pool_dir dir);
bool rl_pool_has_rules(const struct rl_pool *p, enum rl_pool_dir dir);

/* Whether the agent says it is degraded, or its heartbeat is stale, at
 * now_ns (CLOCK_MONOTONIC). */
bool rl_pool_degraded(const struct rl_pool *p, uint64_t now_ns);

enum rl_pool_verdict {
	RL_POOL_PASS = 0,	/* no tenant (a slot out of service) */
	RL_POOL_ADMIT = 1,
	RL_POOL_REFUSE = 2,
};

/*
 * Spends a token of tenant slot `slot` at now_ns, exactly as the kernel
 * does for a SYN: the standalone bucket (GCRA), or leased tokens and, once
 * they are gone, while the agent is degraded or silent the fail policy,
 * else the slot's overdraft (tokens below zero, down to -overdraft);
 * shadow tenants admit and count what they would refuse.  Counts the
 * verdict in the pool's stats.  Lock-free and async-signal-safe.
 */
enum rl_pool_verdict rl_pool_take(struct rl_pool *p, uint32_t slot,
				  uint64_t now_ns);

/*
 * The connection cap of tenant slot `slot` at now_ns, as the kernel's for a
 * SYN: a place in flight reserved below conn_slots (or, leased while the
 * agent is degraded or silent, the fail policy's limit: conn_fail_slots,
 * none, or nothing new; standalone with the cap shared with the kernel
 * while the agent is silent: the part the pool holds, none, or nothing
 * new) (RL_POOL_ADMIT, *epoch set: give
 * it back with rl_pool_conn_close), none at the cap (RL_POOL_REFUSE, counted
 * denied), or RL_POOL_PASS for a tenant without a cap.  A shadow tenant
 * reserves past the cap (counted shadow_denied).  Asked before the bucket;
 * a connection the bucket then refuses gives its place back.
 * Async-signal-safe.
 */
enum rl_pool_verdict rl_pool_conn_open(struct rl_pool *p, uint32_t slot,
				       uint64_t now_ns, uint32_t *epoch);

/* A connection counted in epoch ends: its place is given back, unless the
 * slot has had a new tenant (or lost its cap) since; never below zero. */
void rl_pool_conn_close(struct rl_pool *p, uint32_t slot, uint32_t epoch);

/* A forked child's copy of a counted connection: counted once more, past
 * the cap (the connection is already open), unless the epoch is over.
 * Whether it was counted. */
bool rl_pool_conn_hold(struct rl_pool *p, uint32_t slot, uint32_t epoch);

/* The monotonic clock both sides use, in ns. */
uint64_t rl_pool_now_ns(void);

/* A process table slot for pid of pid namespace pidns, claimed (or the one
 * it already holds), or NULL when the table is full (counted in
 * procs_full).  Free slots first, then those of processes of pidns that
 * died, then those of other namespaces idle for RL_POOL_PROC_IDLE_NS (whose
 * life cannot be checked from here). */
struct rl_pool_proc *rl_pool_proc_claim(struct rl_pool *p, uint32_t pid,
					uint64_t pidns, const char *comm);

#define RL_POOL_PROC_IDLE_NS	(3600ULL * RL_NSEC_PER_SEC)

/* The inode of this process's pid namespace (0 if /proc cannot say). */
uint64_t rl_pool_pidns(void);

#endif /* RL_POOL_H */
