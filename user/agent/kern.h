/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent's side of the kernel: loading the XDP/tc program with its maps
 * pinned (and adopted on restart), attaching it without a gap in
 * enforcement, and writing tenants and rules into the maps.  kern.c loads
 * and pins, kern_migrate.c brings pins of an older layout forward,
 * kern_attach.c attaches and detaches, kern_maps.c reads and writes the
 * maps.  Functions that can fail return 0 or -errno, as said at each.
 */
#ifndef RL_KERN_H
#define RL_KERN_H

#include <limits.h>
#include <net/if.h>
#include <stdbool.h>
#include <stdint.h>

#include "policy.h"
#include "rlgate.h"
#include "classify.h"
#include "instance.h"

#define KERN_MAX_IFACES	32

enum kern_mode {
	KERN_MODE_AUTO = 0,	/* native XDP, else generic XDP */
	KERN_MODE_NATIVE,
	KERN_MODE_SKB,
	KERN_MODE_TC,
};

struct kern_iface {
	char name[IF_NAMESIZE];
	int ifindex;
	enum kern_mode mode;	/* as attached: native, skb or tc */
};

struct rlgate_bpf;
struct ring_buffer;
struct preload;

struct kern {
	struct rlgate_bpf *skel;
	char pin_dir[PATH_MAX];
	int lock_fd;
	bool use_tc;		/* the tc program was loaded, not the XDP one */
	int prog_fd;
	struct rl_tenant *tenants;	/* the mmap'ed `tenants` map */
	size_t tenants_len;
	uint32_t max_tenants;	/* slots in `tenants` (--max-tenants) */
	int ncpus;
	struct ring_buffer *rb;
	struct kern_iface ifaces[KERN_MAX_IFACES];
	unsigned int n_ifaces;
	/* interfaces about to be attached at start: the tenants configured
	 * before then already share their caps with the pool */
	unsigned int ifaces_planned;
	bool maps_adopted;	/* pinned maps existed and were reused */
	/* the ends of flows the program replaced had marked were copied
	 * into ours (or could not be): done once, at the first replace */
	bool ends_taken;
	/* this agent made the pin dir; a failed start removes only such a
	 * one (kern_unpin_failed), a last detach any (kern_unpin) */
	bool pin_dir_made;
	/* slots from here on were never configured since this agent made
	 * the maps: their counters are still the new maps' zeros */
	uint32_t pristine_from;
	bool leased;		/* fleet mode: tenants spend leased tokens only */
	struct rl_agent_state *agent;	/* the mmap'ed `agent_state` map */
	size_t agent_len;
	uint64_t fail_agents;	/* divisor of the static fail share (>= 1) */
	struct rl_cls_map cls;	/* the mmap'ed classifier */
	char rules_err[256];	/* why kern_rules_sync() last failed */
	uint32_t cls_used;	/* groups the rules in force take */
	/* The preload pool (--preload-pool), or NULL: every slot, rule and
	 * heartbeat written into the kernel is mirrored there, and in fleet
	 * mode the leased tokens are shared between the two (the functions
	 * below count both). */
	struct preload *preload;
	/* per slot: connections the agent's sweep forgot (conntrack.c) */
	uint64_t *conns_forgotten;	/* max_tenants of them */
	/* per slot: the refusals each point had counted (kernel, pool) when
	 * the host's last free connection slot was placed (kern_conn_slots) */
	uint64_t (*conn_refused)[2];	/* max_tenants of them */
	struct rl_tenant *instance;	/* the mmap'ed `instance` map */
	uint64_t instance_forgotten;	/* ... of those, counted in it */
	bool gate_instance;		/* conn_ctl.instance as last written */
	bool conns_reset_pending;	/* `conns` made anew: see
					 * kern_conns_upgraded() */
	uint32_t gate_capped;		/* conn_ctl.capped as last written */
	/* net.ipv4.tcp_syncookies as last read for a verifying tenant
	 * (kern_syncookies_mode()); KERN_SYNCOOKIES_UNREAD before */
	int syncookies;
	/* when it was read (loop_now_ns()); 0: read it again at the next
	 * verifying tenant */
	uint64_t syncookies_ns;
	/* the read (syncookies_ns) the last warning was about: one line for
	 * the tenants configured under a read, not one per tenant */
	uint64_t syncookies_warned_ns;
	/* per-source limits (kern_sources.c) */
	struct rl_src_conf *src_conf;	/* the mmap'ed `src_conf` map */
	size_t src_conf_len;
	struct rl_src_ctl *src_ctl;	/* the mmap'ed `src_ctl` map */
	struct rl_src_top *src_top;	/* the mmap'ed `src_top` map */
	size_t src_top_len;
	uint32_t src_table;		/* entries of `sources` */
	bool *src_on;			/* per slot: has a per-source limit */
	uint32_t src_tenants;		/* slots with one: the table's sharers */
	uint64_t src_next_sweep_ns;	/* kern_src_sweep() runs from then */
	uint64_t src_reclaimed;		/* entries it deleted */
};

#define KERN_SYNCOOKIES_UNREAD	(-1000)

/* A tenant as the kernel sees it: its slot and its policy. */
struct kern_binding {
	uint32_t slot;
	const struct policy_tenant *t;
};

const char *kern_mode_name(enum kern_mode m);
int kern_parse_mode(const char *s, enum kern_mode *out);

/*
 * Locks pin_dir (creating it on bpffs), opens and loads the program,
 * reusing every map already pinned there and pinning the ones that were
 * not, pins the program, maps the tenant table.  Nothing is attached yet.
 * The classifier gets rule_memory_mib MiB (both halves; 0: the default),
 * the tenant maps max_tenants slots (0: RL_MAX_TENANTS), the per-source
 * table src_table entries (0: RL_SRC_TABLE); pinned maps of another size
 * are refused, naming both.
 * On a verifier rejection the tail of the verifier log is logged at error
 * level.  0 or -errno (logged); on failure k is left closed.
 */
int kern_open(struct kern *k, const char *pin_dir, bool use_tc,
	      uint32_t rule_memory_mib, uint32_t max_tenants,
	      uint32_t src_table);

/* Releases what kern_open took.  Attachments and pins stay: the kernel
 * keeps enforcing after the agent is gone. */
void kern_close(struct kern *k);

/* Attaches to ifname.  If rlgate's program from this pin dir already runs
 * there it is replaced atomically (in the mode it runs in); another
 * program is never replaced.  0 or -errno (logged, naming the interface). */
int kern_attach(struct kern *k, const char *ifname, enum kern_mode mode);

/* Detaches from ifname (only our program).  -ENOENT if not attached. */
int kern_detach(struct kern *k, const char *ifname);

/* Whether the RSTs the program sends back on an interface reach clients
 * (kern_reach.c): a veth in native mode delivers them only while its peer
 * runs an XDP program or has GRO on. */
enum kern_rst_reach {
	KERN_RST_DELIVERED,
	KERN_RST_LOST,		/* the kernel drops them: rst acts as drop */
	KERN_RST_UNKNOWN,	/* a veth on a kernel that does not say */
};

/* Asks the kernel now, so a peer changed since attach is seen. */
enum kern_rst_reach kern_rst_reach(const struct kern_iface *ifc);
/* "delivered", "lost" or "unknown". */
const char *kern_rst_reach_name(enum kern_rst_reach r);
/* What is wrong and what to do, in one sentence; NULL when delivered. */
const char *kern_rst_advice(enum kern_rst_reach r);

/* The keys and values of every pinned map, per-CPU ones once per possible
 * CPU (mem_map_bytes): what the kernel holds for this pin dir. */
uint64_t kern_map_bytes(const struct kern *k);

/* Removes the pins and the pin dir.  For after the last detach.  0, or the
 * -errno of removing the pin dir (pins that would not go are logged). */
int kern_unpin(struct kern *k);
/* The same after a start that failed: the pin dir goes only if this
 * agent made it (an operator's empty directory stays). */
int kern_unpin_failed(struct kern *k);

/* Writes the configuration of tenant t into slot.  fresh: the slot is new
 * to this tenant, so its bucket starts full and its counters at zero;
 * otherwise the bucket state is kept (changing a limit never refills or
 * empties a bucket).  The mode is written last, so the kernel never sees a
 * half-configured tenant go live. */
void kern_tenant_configure(struct kern *k, uint32_t slot,
			   const struct policy_tenant *t, bool fresh);

/* Writes the fail policy of t, and its static share (rate and burst / the
 * fail_agents last set), into slot.  Called on every configure and whenever
 * the count of live agents changes. */
void kern_tenant_fail(struct kern *k, uint32_t slot, const struct policy_tenant *t);

/* A preload pool made anew (preload_watch): tenant t written into its
 * slot as into a fresh one, the kernel's slot untouched. */
void kern_preload_configure(struct kern *k, uint32_t slot,
			    const struct policy_tenant *t);

/* Fleet mode's word to the kernel: alive at now_ns (a heartbeat older than
 * stale_ns means the agent died), and whether Redis is failing.  Either way
 * the kernel applies each leased tenant's fail policy once its tokens are
 * spent. */
void kern_fleet_state(struct kern *k, uint64_t now_ns, uint64_t stale_ns,
		      bool degraded);

/* Standalone's word to the kernel and the pool: alive at now_ns.  While
 * the agent shares connection caps between them (kern_conn_points() 2),
 * each then expects the next within the pool's stale_ns, and once it is
 * stale each capped tenant's fail policy decides at both points (the
 * split is no longer moved); otherwise the kernel expects none (stale_ns
 * 0, whatever an agent of fleet mode left in its map). */
void kern_alive(struct kern *k, uint64_t now_ns);

/* Fleet mode on a Redis Cluster: the shard of the tenant in slot is out of
 * reach (on) or back (off); see RL_F_DEGRADED. */
void kern_tenant_degraded(struct kern *k, uint32_t slot, bool on);

/* The fleet size kept in the kernel for the next agent: sets it to n, or
 * with n 0 only reads it.  Returns the value now stored. */
uint64_t kern_fleet_agents(struct kern *k, uint64_t n);

/* Leased tokens (fleet mode), on the shared memory of the tenant table.
 * kern_tokens_add adds granted tokens and re-arms the low-water event;
 * kern_tokens_take takes up to max tokens back (all if max is 0), never
 * more than are there, and returns how many it took.  Neither can lose or
 * mint a token however the kernel's CPUs spend concurrently.  With a
 * preload pool, a grant is split between the kernel and the pool by their
 * demand, tokens come back from both, and kern_tenant_tokens counts both:
 * the host holds one lease whichever point spends it. */
void kern_tokens_add(struct kern *k, uint32_t slot, uint64_t n, int64_t lowwater);
uint64_t kern_tokens_take(struct kern *k, uint32_t slot, uint64_t max);

/* Connection caps: how many tenants have one.  While none does, the kernel
 * looks up no RST or FIN. */
void kern_conn_gate(struct kern *k, uint32_t capped);

/* Verification: how many tenants verify.  While none does, the kernel
 * reads nothing of an ACK past its flags. */
void kern_verify_gate(struct kern *k, uint32_t verifying);

/* net.ipv4.tcp_syncookies of the agent's network namespace (verification
 * needs 2), or -errno when it cannot be read. */
int kern_syncookies_mode(void);

/* RL_COOKIE_* for the program's cookie_opts, from the sysctls of the
 * agent's network namespace (verify syncookie-answer). */
uint32_t kern_cookie_opts(void);

/* Writes the instance limit into the kernel (NULL: none), and turns the
 * kernel's lookups of connection ends on while it has a cap. */
void kern_instance_set(struct kern *k, const struct rl_instance_limit *il);

/* What the instance limit did. */
struct kern_instance {
	int64_t in_flight;	/* connections counted in it now */
	uint64_t denied_cap;	/* SYNs refused at its cap */
	uint64_t denied_rate;	/* SYNs refused by its rate */
	uint64_t forgotten;	/* ended by the agent's sweep */
};
int kern_instance_read(struct kern *k, struct kern_instance *out);

/* After `conns` was made anew for this layout (kern_migrate.c), once the
 * new program is attached: every count restarts at zero. */
void kern_conns_upgraded(struct kern *k);

/* A tenant's connections: in flight, the slots it may fill (the cap), and
 * what the kernel and the agent's sweep counted. */
struct kern_conns {
	int64_t in_flight;
	int64_t slots;
	struct rl_conn_stats s;	/* summed over CPUs */
	uint64_t forgotten;	/* ended by the sweep, not seen by the kernel */
};

int kern_tenant_conns(struct kern *k, uint32_t slot, struct kern_conns *out);

/* Fleet mode: the connections slot may have in flight (the slots the broker
 * holds of the fleet's cap, or the fail policy's), and how many it has. */
void kern_conn_slots(struct kern *k, uint32_t slot, int64_t n);
int64_t kern_conns_in_flight(const struct kern *k, uint32_t slot);
/* The points that share a tenant's slots: 2 with a preload pool and an
 * interface attached, else 1. */
unsigned int kern_conn_points(const struct kern *k);

/* The connections in flight and slots of each point (the pool's 0 without
 * one). */
void kern_point_conns(const struct kern *k, uint32_t slot, int64_t *kernel,
		      int64_t *preload, int64_t *kernel_slots,
		      int64_t *preload_slots);

/* Takes slot out of service (mode none).  Call after its rules are gone. */
void kern_tenant_clear(struct kern *k, uint32_t slot);

/* True if the kernel's slot is configured (mode not none). */
bool kern_slot_live(const struct kern *k, uint32_t slot);

/* Makes the kernel classify by exactly the rules of bs[0..n): compiles them
 * and publishes the result in one switch, so no SYN sees a mix of the old
 * and new rules.  0 or -errno (logged, and worded for the operator in
 * k->rules_err); on failure the previous rules stay in force.  -ENOSPC: the
 * rules do not fit the classifier. */
int kern_rules_sync(struct kern *k, const struct kern_binding *bs, size_t n);

/* The rules of bs[0..n) compiled and published to the preload pool alone
 * (one made anew).  0 or -errno. */
int kern_preload_rules(struct kern *k, const struct kern_binding *bs, size_t n);

/* kern_rules_sync in two steps, so that rules which do not fit are refused
 * before anything else of a change is done: kern_rules_compile builds the
 * images of bs[0..n) into r (0, or -errno as kern_rules_sync, r then
 * empty); kern_rules_publish switches the kernel to them and frees r (0 or
 * -errno as kern_rules_sync); kern_rules_free drops r unpublished. */
struct kern_rules {
	struct rl_cls_image in, out;	/* out: only with a preload pool */
	size_t n_in, n_out;		/* the rules in each */
	bool compiled;
};

int kern_rules_compile(struct kern *k, const struct kern_binding *bs, size_t n,
		       struct kern_rules *r);
int kern_rules_publish(struct kern *k, struct kern_rules *r);
void kern_rules_free(struct kern_rules *r);

/* Makes the kernel's rules answer as `rule` says over the prefixes of
 * ps[0..n) (rl_cls_map_edit), in one switch.  0; -EAGAIN when they must be
 * compiled whole instead (a port row, a preload pool, too much to
 * repaint), or another -errno: the kernel's rules are then unchanged. */
int kern_rules_edit(struct kern *k, const struct rl_cls_rule *ps, size_t n,
		    rl_cls_rule_fn rule, void *ctx);

/* Sum over CPUs of a tenant's counters, and over the preloaded
 * processes when there is a pool: what the host decided.  0 or -errno. */
int kern_tenant_stats(struct kern *k, uint32_t slot, struct rl_stats *out);

/* kern_tenant_stats() of slots from .. from+n-1 into out[0 .. n), read a
 * few thousand slots per system call (one per slot on a kernel without
 * batch lookups): a part of the table at a time, for a reader that must
 * not hold the event loop.  0 or -errno. */
int kern_tenant_stats_range(struct kern *k, uint32_t from, uint32_t n,
			    struct rl_stats *out);

/* The same, by enforcement point: the kernel's (XDP or tc) and the preload
 * pool's (zero without a pool).  0 or -errno. */
int kern_point_stats(struct kern *k, uint32_t slot, struct rl_stats *kernel,
		     struct rl_stats *preload);

/* Whole tokens at each point: the kernel's slot and the pool's. */
void kern_point_tokens(const struct kern *k, uint32_t slot, uint64_t now_ns,
		       uint64_t *kernel, uint64_t *preload);

/* Whole tokens a standalone tenant holds at monotonic time now_ns. */
/* Leased: the tokens the host admitted past its last one on the
 * overdraft (rl_tenant.overdraft: the kernel's, or the pool's when the
 * agent attaches nowhere, at most what the agent gave it) and no lease has
 * paid back yet; 0 when it holds tokens. */
uint64_t kern_tenant_overdrawn(const struct kern *k, uint32_t slot);

uint64_t kern_tenant_tokens(const struct kern *k, uint32_t slot,
			    uint64_t now_ns);

/* Global counters summed over CPUs, RL_CNT_MAX of them.  0 or -errno. */
int kern_counters(struct kern *k, uint64_t *out);

/* The `events` ring buffer: an fd to poll and a consumer to call when it is
 * readable.  fn gets each event.  kern_events_open: 0 or -errno (logged);
 * kern_events_fd: the fd, or -1 before a successful open;
 * kern_events_consume: the events consumed, or -errno. */
int kern_events_open(struct kern *k, int (*fn)(void *ctx, void *data,
					       size_t size), void *ctx);
int kern_events_fd(const struct kern *k);
int kern_events_consume(struct kern *k);

/* Per-source limits (kern_sources.c; see RL_SRC_TABLE). */

/* Writes t's per-source limit into slot's `src_conf` (before the slot's
 * flags say to use it: call ahead of the tenant's own configuration), and
 * each tenant's share of `sources` anew when the number of tenants with a
 * per-source limit changes.  fresh: the overflow bucket starts full. */
void kern_src_configure(struct kern *k, uint32_t slot,
			const struct policy_tenant *t, bool fresh);

/* Deletes the entries of `sources` whose bucket is full again at now (the
 * coarse monotonic clock), and those of slots without a per-source limit;
 * clears the slots of `src_top` whose source has no entry left.  Runs at
 * most every second while the table is a quarter full or more, every ten
 * seconds below, never while empty.  Returns the entries deleted. */
uint64_t kern_src_sweep(struct kern *k, uint64_t now_ns);

/* The table: entries, entries in use, entries the sweep deleted. */
void kern_src_fill(const struct kern *k, uint64_t *size, uint64_t *used,
		   uint64_t *reclaimed);

/* What slot's per-source limit did, summed over CPUs.  0 or -errno. */
int kern_src_stats(struct kern *k, uint32_t slot, struct rl_src_stats *out);

/* The sources refused most, of slot (UINT32_MAX: of every tenant),
 * heaviest first, at most max: read from `src_top`, never the whole
 * table.  Returns how many rows. */
struct src_top_row;
size_t kern_src_top(const struct kern *k, uint32_t slot,
		    struct src_top_row *rows, size_t max);

#endif /* RL_KERN_H */
