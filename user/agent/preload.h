/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent's side of the preload pool (--preload-pool): the second
 * enforcement point, where librlpreload.so spends inside unmodified
 * programs.  kern.c mirrors every slot, rule and heartbeat it writes into
 * the kernel here, and in fleet mode shares the host's lease between the
 * two (the sum of both never exceeds what was leased).
 */
#ifndef RL_AGENT_PRELOAD_H
#define RL_AGENT_PRELOAD_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "ledger.h"
#include "pool.h"

struct policy_tenant;
struct rl_cls_image;

/* A process the check looks at: its network namespace and the socket
 * inodes its fds hold (sorted, without repeats). */
struct heal_proc {
	uint64_t netns;
	uint64_t *inodes;
	size_t n;
};

/* The processes the check looks at: their pids in the agent's namespace,
 * their sockets. */
struct heal_set {
	struct heal_proc *procs;
	uint32_t *pids;
	size_t n, cap;
};

/* A check of the connections in flight under way (preload_heal): the
 * table as it was at its start, and how far it got. */
struct heal_state {
	enum { HEAL_IDLE, HEAL_SCAN, HEAL_TABLE, HEAL_COUNT } phase;
	struct {
		uint32_t pid;	/* as the table says, in pidns */
		uint64_t pidns;
		uint32_t host;	/* its pid here; 0: not found (yet) */
	} snap[RL_POOL_PROCS];
	uint32_t n_snap;
	uint64_t pidns;		/* the agent's own */
	bool want_ns;		/* entries of other pid namespaces to find */
	bool want_maps;		/* the table was full: every mapper counts */
	DIR *dir;		/* the scan of /proc, where it stopped */
	size_t reads;		/* reads of /proc of the step under way */
	size_t i;		/* the entry or process the step is at */
	struct heal_set set;
};

/* Reads of /proc one call of preload_heal() makes at most. */
#define PRELOAD_HEAL_BUDGET	512

struct preload {
	struct rl_pool pool;
	char path[4096];
	/* The agent's own sizes of the pool, never read back from it: the
	 * file is writable by every process of its group. */
	uint32_t max_tenants, cls_half;
	gid_t gid;
	int fd;			/* the pool's file, to see it truncated */
	/* The pool lost (truncated, replaced, its layout rewritten) and made
	 * anew: how often, why the last time, and when (CLOCK_MONOTONIC). */
	uint64_t remade;
	char lost_why[128];
	uint64_t lost_ns;
	bool lost;		/* lost and not made anew yet */
	int remake_err;		/* why the last try to make it failed */
	struct heal_state heal;
	size_t heal_budget;	/* PRELOAD_HEAL_BUDGET; tests set less */
	uint64_t heal_checks;	/* checks done to their end */
	size_t heal_reads;	/* reads of /proc of the last call */
	bool adopted;		/* the pool was there, with this layout */
	/* per slot, the demand each point had seen at the last grant */
	uint64_t *kern_seen;	/* max_tenants of each */
	uint64_t *pool_seen;
	/* per slot, the last check of the connections in flight: what the
	 * pool counted and what the processes were found to hold (and the
	 * check's own, as it runs) */
	int64_t *heal_counted, *heal_found, *heal_counted_now, *heal_found_now;
	uint64_t healed;	/* connections given back by the check */
	/* per slot, the ledger of leased tokens the agent gave the pool
	 * (user/lib/ledger.h): the pool is writable by every process of its
	 * group, so what it holds is never believed beyond it */
	struct rl_ledger *ledger;
	uint64_t *forged;	/* tokens found forged, since the slot's tenant
				 * came */
	uint64_t *forged_logged;	/* ... when last logged */
	uint64_t *forged_log_ns;	/* ... and then */
	bool forged_unlogged;	/* some slot has forged tokens not logged */
	/* per slot, connections in flight the last complete check found the
	 * processes holding; -1 when it could not tell */
	int64_t *conns_found;
	/* per slot, the overdraft the agent gave the pool (fleet mode, an
	 * agent that attaches nowhere): its own word of what the pool may
	 * owe, whatever the pool's copy says */
	uint64_t *overdraft;
	/* standalone: how long the heartbeat may be silent before the caps
	 * shared with the kernel fall to the fail policies (rl_pool_hdr) */
	uint64_t stale_ns;
};

/* Makes or adopts the pool at path (mode 0660, group gid unless -1) with
 * the kernel's classifier size and tenant slots (a pool of other sizes is
 * made again).  0 or -errno (logged). */
int preload_open(struct preload **out, const char *path, gid_t gid,
		 uint32_t cls_half, uint32_t max_tenants);
void preload_close(struct preload *p);

/*
 * Every tick: whether the pool in use is still the agent's (its file as
 * long as the layout, still at the path, its header's layout the agent's
 * own).  One that is not is never followed: the loss is logged once,
 * counted (remade) and shown (lost_why), and a new pool is made in its
 * place (renamed over the path).  1 when a new pool was made, which the
 * caller must then fill (tenants, rules, heartbeat) as at start; 0
 * otherwise (nothing lost, or not made anew yet: tried at the next call).
 * A SIGBUS on the pool's mapping (the file truncated under it) is turned
 * into such a loss, never a crash.
 */
int preload_watch(struct preload *p, uint64_t now_ns);

/* The pool's slot, as kern.c writes it alongside the kernel's. */
struct rl_tenant *preload_slot(struct preload *p, uint32_t slot);

/* Resets a fresh slot's counts (and its ledger); then configure it with
 * rl_slot_configure. */
void preload_slot_fresh(struct preload *p, uint32_t slot);

/* Tells readers the slots or rules changed. */
void preload_changed(struct preload *p);

/* Publishes the rules of dir, n_rules compiled into img (logged on
 * failure). */
int preload_rules(struct preload *p, enum rl_pool_dir dir,
		  const struct rl_cls_image *img, size_t n_rules);

/* The agent's heartbeat (stale_ns 0: never stale). */
void preload_heartbeat(struct preload *p, uint64_t now_ns, uint64_t stale_ns,
		       bool degraded);

/* Standalone, every share: the heartbeat, stale after p->stale_ns, and
 * how many points share the caps (kern_conn_points()). */
void preload_alive(struct preload *p, uint64_t now_ns, unsigned int points);

/* The counts of the preloaded processes for slot. */
void preload_stats(const struct preload *p, uint32_t slot, struct rl_stats *out);

/*
 * The pool's leased tokens through the agent's ledger (user/lib/ledger.h).
 * preload_tokens_add gives n (0: only re-arms the low-water mark);
 * preload_tokens_take takes up to max back (0: all), never more than the
 * ledger holds; preload_tokens_trim takes out what a process of the
 * pool's group forged (counted, and logged by preload_forged_log), and
 * preload_tokens_bound what the pool held when the agent started beyond
 * max, the most a host may hold of the tenant.
 * preload_tokens: what the agent believes the pool holds of the host's
 * lease (in fleet mode, whatever mode the pool's slot says: that too a
 * process may write); preload_spendable: those and the tokens it found
 * in the pool when it started (spent there, never taken back).
 */
void preload_tokens_add(struct preload *p, uint32_t slot, uint64_t n,
			int64_t lowwater);
uint64_t preload_tokens_take(struct preload *p, uint32_t slot, uint64_t max);
void preload_tokens_trim(struct preload *p, uint32_t slot);
void preload_tokens_bound(struct preload *p, uint32_t slot, uint64_t max);
uint64_t preload_tokens(const struct preload *p, uint32_t slot);

/* The pool's overdraft for slot: set to n (0: none), and what the pool
 * owes on it - its count below zero, at most the overdraft given (a count
 * forged lower makes the host owe no more than that). */
void preload_overdraft(struct preload *p, uint32_t slot, uint64_t n);
uint64_t preload_overdrawn(const struct preload *p, uint32_t slot);
uint64_t preload_spendable(const struct preload *p, uint32_t slot);

/* Tokens found forged in slot since its tenant came. */
uint64_t preload_forged(const struct preload *p, uint32_t slot);

/* Logs, at most once a minute per slot, the tokens forged in slot since it
 * was last logged, naming its tenant. */
void preload_forged_log(struct preload *p, uint32_t slot, const char *tenant,
			uint64_t now_ns);

/* Whether some slot may have forged tokens preload_forged_log has not
 * told yet; clears it (preload_forged_log sets it again for what it puts
 * off). */
bool preload_forged_pending(struct preload *p);

/* The connections of slot in flight in the pool as the agent counts them:
 * the pool's count, or more if the last check found the processes holding
 * more (a release forged in the pool frees nothing they hold). */
int64_t preload_conns(const struct preload *p, uint32_t slot);

/* The connections of slot in flight in the pool as the share between the
 * kernel and the pool takes them: what the last complete check found the
 * processes holding, never the pool's count (which any process of the
 * group can write, again and again); the pool's count only while the
 * check cannot look.  A count forged higher than that moves none of the
 * kernel's slots to the pool; one forged lower frees none the processes
 * fill (rl_share_store reads the pool's count before it gives the kernel
 * slots). */
int64_t preload_conns_found(const struct preload *p, uint32_t slot);

/* Connections of slot the pool's processes refused (by the cap or the
 * rate), as they count them: only a sign of demand, never trusted more. */
uint64_t preload_denied(const struct preload *p, uint32_t slot);

/* Of n tokens granted to slot, how many go to the pool: by the demand of
 * each point since the last grant (kern_count: the kernel's admitted +
 * denied so far); with none anywhere, to the pool only if prefer_pool. */
uint64_t preload_split(struct preload *p, uint32_t slot, uint64_t n,
		       uint64_t kern_count, bool prefer_pool);

/*
 * The check of the pool's connections in flight against the kernel, every
 * second: the connections of capped tenants the table's processes hold
 * (their fds' sockets, in /proc/PID/fd and their namespace's
 * /proc/PID/net/tcp*, classified by the pool's rules; a dead process holds
 * none).  A tenant whose count stays above that for two checks in a row,
 * by the same amount, is lowered by it: closes the library never saw (a
 * process killed, _exit, a close outside libc) come back within 2 s.
 * Never raises a count.  A process of another pid namespace is found by
 * its NSpid when the agent runs in the initial one (a process not found
 * holds nothing); elsewhere the check is skipped while one is in the table
 * (its fds may be out of sight).  Once a process found the table full, the
 * check also takes every process that maps the pool's file (in
 * /proc/PID/maps), in the initial pid namespace only (elsewhere it is
 * skipped from then on).  What it found is also what preload_conns()
 * counts at least, and what preload_conns_found() gives the share.
 * Each call reads at most heal_budget files of /proc (PRELOAD_HEAL_BUDGET)
 * and the next call takes the check up where it stopped: a check of a
 * large or hostile table spans several seconds, and judges the counts once
 * it is whole.  The processes of other pid namespaces are found by one
 * walk over /proc per check.
 */
void preload_heal(struct preload *p);

/* The live processes in the pool's table (up to max in out), and how many
 * there are. */
size_t preload_procs(struct preload *p, struct rl_pool_proc *out, size_t max);

/* What `rlctl status` shows of the pool: its path, the processes seen
 * (pid, name, whether the library governs their accepts, their counts),
 * and those it could not serve (another layout, a full table). */
json_t *preload_status_json(struct preload *p, uint64_t now_ns);

#endif /* RL_AGENT_PRELOAD_H */
