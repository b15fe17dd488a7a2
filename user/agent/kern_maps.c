// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The kernel's maps as the agent reads and writes them: tenants configured
 * in place through the mmap'ed table (user/lib/slot.c), leased tokens added
 * and taken back with atomics, the fleet's state, connection caps' counts,
 * counters summed over CPUs, rules compiled and published in one switch,
 * and the events ring; with a preload pool, each write mirrored there and
 * the lease shared.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kern_int.h"
#include "lease.h"
#include "log.h"
#include "loop.h"
#include "preload.h"
#include "slot.h"

/* An integer sysctl of the agent's network namespace (the first of its
 * numbers), or -errno. */
static long sysctl_num(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = -EIO;

	if (!f)
		return -errno;
	if (fscanf(f, "%ld", &v) != 1)
		v = -EIO;
	fclose(f);
	return v;
}

int kern_syncookies_mode(void)
{
	return (int)sysctl_num("/proc/sys/net/ipv4/tcp_syncookies");
}

/* The fail policies' static shares of a leased tenant (rl_slot_fail) are
 * the host's share of the fleet's limit, among fail_agents hosts.  A host
 * enforcing at two points (XDP and the pool) gives each half of it: each
 * point refills its own share, and two whole ones would have the host
 * admit twice its share while degraded - above all once its agent is
 * dead, when nothing moves between the points. */
static uint64_t fail_shares(const struct kern *k)
{
	return k->leased && kern_conn_points(k) == 2 ? 2 * k->fail_agents :
						       k->fail_agents;
}

/* The host's overdraft for a leased tenant: a quarter of the host's cap
 * at the current fleet size (lease_overdraft()).  One point has it, never
 * both (the host owes at most one): the pool when the agent attaches
 * nowhere (it spends every lease there), else the kernel. */
static void kern_overdraft(struct kern *k, uint32_t slot, const struct policy_tenant *t)
{
	uint64_t od = k->leased ? lease_overdraft(t, k->fail_agents) : 0;
	bool pool = k->preload && kern_conn_points(k) == 1;

	__atomic_store_n(&k->tenants[slot].overdraft, pool ? 0 : (int64_t)od,
			 __ATOMIC_RELAXED);
	if (k->preload)
		preload_overdraft(k->preload, slot, pool ? od : 0);
}

/* How long a read of net.ipv4.tcp_syncookies stands for the tenants
 * configured after it. */
#define SYNCOOKIES_FRESH_NS	(100 * 1000000ULL)

/*
 * Verification passes a tenant's SYNs uncharged and charges the ACK that
 * returns a SYN cookie: only when the server's kernel answers every SYN
 * with one (net.ipv4.tcp_syncookies=2).  Otherwise its handshakes return
 * no cookie and would never be charged, so the tenant's SYNs are charged
 * as without verify, and the log says why.  Returns the tenant to write.
 */
static const struct policy_tenant *verify_usable(struct kern *k,
						 const struct policy_tenant *t,
						 struct policy_tenant *copy)
{
	int mode;

	if (t->verify == POLICY_VERIFY_NONE)
		return t;
	/* One read serves the tenants configured together (a start or an
	 * apply of 100,000 of them), not three system calls each; a change
	 * of the sysctl is seen by agent_verify_watch, which has it read
	 * again. */
	if (!k->syncookies_ns ||
	    loop_now_ns() - k->syncookies_ns > SYNCOOKIES_FRESH_NS) {
		k->syncookies = kern_syncookies_mode();
		k->syncookies_ns = loop_now_ns();
	}
	mode = k->syncookies;
	if (mode == 2)
		return t;
	/* the first tenant configured under this read names the rest: a
	 * start or an apply of 100,000 logs a line, not 100,000 */
	if (k->syncookies_warned_ns != k->syncookies_ns && mode < 0)
		log_warn("tenant '%s': couldn't read net.ipv4.tcp_syncookies: %s; "
			 "its SYNs are charged, not verified, as are those of "
			 "every tenant with verify syncookie (rlctl status)",
			 t->name, strerror(-mode));
	else if (k->syncookies_warned_ns != k->syncookies_ns)
		log_warn("tenant '%s': verify syncookie needs "
			 "net.ipv4.tcp_syncookies=2 on this host (it is %d); its "
			 "SYNs are charged, not verified, as are those of every "
			 "tenant with verify syncookie until it is 2 (rlctl status)",
			 t->name, mode);
	k->syncookies_warned_ns = k->syncookies_ns;
	*copy = *t;
	copy->verify = POLICY_VERIFY_NONE;
	return copy;
}

/* The pool's side of a tenant's configuration: its slot written as the
 * kernel's (fresh: its counts start from zero), the cap shared with the
 * kernel, and what the pool held when the agent started bounded. */
static void pool_configure(struct kern *k, uint32_t slot,
			   const struct policy_tenant *t, bool fresh, bool shared)
{
	if (fresh)
		preload_slot_fresh(k->preload, slot);
	rl_slot_configure(preload_slot(k->preload, slot), t, fresh,
			  k->leased, shared, fail_shares(k), loop_now_ns());
	if (shared && t->max_conns)
		kern_conn_slots(k, slot, (int64_t)t->max_conns);
	/* what the pool held when the agent started: no more than a
	 * host may hold of the tenant */
	if (k->leased)
		preload_tokens_bound(k->preload, slot,
				     policy_overshoot_budget(t));
	preload_changed(k->preload);
}

void kern_tenant_configure(struct kern *k, uint32_t slot,
			   const struct policy_tenant *t, bool fresh)
{
	struct rl_tenant *rt = &k->tenants[slot];
	struct policy_tenant copy;
	/* standalone at both points: the cap is shared between them
	 * (kern_conns_share), never the whole of it at each */
	bool shared = !k->leased && kern_conn_points(k) == 2;

	t = verify_usable(k, t, &copy);

	if (fresh) {
		size_t sz = (size_t)k->ncpus * sizeof(struct rl_stats);
		/* A slot never configured in these maps has nothing to reset:
		 * three syscalls fewer per tenant when 100,000 arrive at once. */
		void *zero = slot < k->pristine_from ? calloc(1, sz) : NULL;

		/* Out of service while the counters are reset (and the bucket,
		 * by rl_slot_configure): no SYN counts for a half-reset slot. */
		__atomic_store_n(&rt->mode, RL_MODE_NONE, __ATOMIC_RELEASE);
		if (slot >= k->pristine_from)
			k->pristine_from = slot + 1;
		if (zero) {
			if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.tenant_stats),
						&slot, zero, BPF_ANY) < 0)
				log_warn("couldn't reset counters on 'tenant_stats' "
					 "slot %u: %s", slot, strerror(errno));
			/* rl_conn_stats is no larger than rl_stats, */
			if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.conn_stats),
						&slot, zero, BPF_ANY) < 0)
				log_warn("couldn't reset counters on 'conn_stats' "
					 "slot %u: %s", slot, strerror(errno));
			/* and so is rl_src_stats */
			if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.src_stats),
						&slot, zero, BPF_ANY) < 0)
				log_warn("couldn't reset counters on 'src_stats' "
					 "slot %u: %s", slot, strerror(errno));
			free(zero);
		}
		k->conns_forgotten[slot] = 0;
		k->conn_refused[slot][0] = k->conn_refused[slot][1] = 0;
	}
	kern_src_configure(k, slot, t, fresh);
	rl_slot_configure(rt, t, fresh, k->leased, shared, fail_shares(k),
			  loop_now_ns());
	if (k->preload)
		pool_configure(k, slot, t, fresh, shared);
	kern_overdraft(k, slot, t);
}

void kern_preload_configure(struct kern *k, uint32_t slot,
			    const struct policy_tenant *t)
{
	struct policy_tenant copy;

	if (!k->preload)
		return;
	t = verify_usable(k, t, &copy);
	pool_configure(k, slot, t, true, !k->leased && kern_conn_points(k) == 2);
	kern_overdraft(k, slot, t);
}

void kern_tenant_fail(struct kern *k, uint32_t slot, const struct policy_tenant *t)
{
	rl_slot_fail(&k->tenants[slot], t, fail_shares(k));
	kern_overdraft(k, slot, t);
	if (k->preload)
		rl_slot_fail(preload_slot(k->preload, slot), t, fail_shares(k));
}

static void tokens_balance(struct kern *k);

void kern_fleet_state(struct kern *k, uint64_t now_ns, uint64_t stale_ns,
		      bool degraded)
{
	if (!k->agent)
		return;
	rl_agent_stamp(k->agent, now_ns, stale_ns, degraded);
	if (k->preload) {
		preload_heartbeat(k->preload, now_ns, stale_ns, degraded);
		tokens_balance(k);
	}
}

void kern_alive(struct kern *k, uint64_t now_ns)
{
	unsigned int points = kern_conn_points(k);

	if (k->leased)
		return;
	if (k->agent)
		rl_agent_stamp(k->agent, now_ns, points == 2 && k->preload ?
			       k->preload->stale_ns : 0, false);
	if (k->preload)
		preload_alive(k->preload, now_ns, points);
}

static void flag_degraded(struct rl_tenant *rt, bool on)
{
	if (on)
		__atomic_fetch_or(&rt->flags, RL_F_DEGRADED, __ATOMIC_RELAXED);
	else
		__atomic_fetch_and(&rt->flags, ~RL_F_DEGRADED, __ATOMIC_RELAXED);
}

void kern_tenant_degraded(struct kern *k, uint32_t slot, bool on)
{
	flag_degraded(&k->tenants[slot], on);
	if (k->preload)
		flag_degraded(preload_slot(k->preload, slot), on);
}

uint64_t kern_fleet_agents(struct kern *k, uint64_t n)
{
	if (!k->agent)
		return 0;
	if (n)
		__atomic_store_n(&k->agent->live_agents,
				 (uint32_t)(n < UINT32_MAX ? n : UINT32_MAX),
				 __ATOMIC_RELAXED);
	return __atomic_load_n(&k->agent->live_agents, __ATOMIC_RELAXED);
}

/* The kernel's own counts of slot (without the pool's).  0 or -errno. */
static int kern_own_stats(struct kern *k, uint32_t slot, struct rl_stats *out);

void kern_tokens_add(struct kern *k, uint32_t slot, uint64_t n, int64_t lowwater)
{
	if (k->preload && n) {
		struct rl_stats st;
		uint64_t count = 0, give;

		if (kern_own_stats(k, slot, &st) == 0)
			count = st.admitted + st.denied;
		/* a host that attaches nowhere enforces only in the pool */
		give = preload_split(k->preload, slot, n, count, k->n_ifaces == 0);
		preload_tokens_add(k->preload, slot, give, lowwater);
		n -= give;
	} else if (k->preload) {
		preload_tokens_add(k->preload, slot, 0, lowwater);
	}
	rl_slot_tokens_add(&k->tenants[slot], n, lowwater);
}

uint64_t kern_tokens_take(struct kern *k, uint32_t slot, uint64_t max)
{
	uint64_t got = 0;

	/* never more from the pool than the agent gave it: its count may
	 * be forged */
	if (k->preload)
		got = preload_tokens_take(k->preload, slot, max);
	if (!max || got < max)
		got += rl_slot_tokens_take(&k->tenants[slot], max ? max - got : 0);
	return got;
}

/* Every fleet check: the pool's tokens are brought back to the agent's
 * ledger (what a process of its group forged there is taken out), then
 * tokens move to the point that ran dry with demand from the one that
 * holds them (see rl_share_balance).  Whether a point had demand is what
 * its low-water flag says: spending down to the mark disarms it, and a
 * grant re-arms it. */
static void tokens_balance(struct kern *k)
{
	for (uint32_t slot = 0; slot < k->max_tenants; slot++) {
		struct rl_tenant *kt = &k->tenants[slot];
		struct rl_tenant *pt = preload_slot(k->preload, slot);
		int64_t kn, pn, move;

		if (__atomic_load_n(&kt->mode, __ATOMIC_ACQUIRE) != RL_MODE_LEASED)
			continue;
		preload_tokens_trim(k->preload, slot);
		kn = __atomic_load_n(&kt->tokens, __ATOMIC_ACQUIRE);
		pn = (int64_t)preload_tokens(k->preload, slot);
		move = rl_share_balance(kn, pn,
					!__atomic_load_n(&kt->lowwater_armed,
							 __ATOMIC_RELAXED),
					!__atomic_load_n(&pt->lowwater_armed,
							 __ATOMIC_RELAXED));
		if (move > 0)
			preload_tokens_add(k->preload, slot,
					   rl_slot_tokens_take(kt, (uint64_t)move),
					   __atomic_load_n(&pt->lowwater,
							   __ATOMIC_RELAXED));
		else if (move < 0)
			rl_slot_tokens_add(kt, preload_tokens_take(k->preload, slot,
								   (uint64_t)-move),
					   __atomic_load_n(&kt->lowwater,
							   __ATOMIC_RELAXED));
	}
}

/* Whether each point refused a connection since the last look: asked
 * only when the host has one free slot left, where it decides which point
 * gets it (the kernel's count costs a system call). */
static void conn_wants(struct kern *k, uint32_t slot, bool *kern_wants,
		       bool *pool_wants)
{
	struct kern_conns kc;
	uint64_t pd = preload_denied(k->preload, slot);

	*kern_wants = false;
	if (!kern_tenant_conns(k, slot, &kc)) {
		*kern_wants = kc.s.denied != k->conn_refused[slot][0];
		k->conn_refused[slot][0] = kc.s.denied;
	}
	*pool_wants = pd != k->conn_refused[slot][1];
	k->conn_refused[slot][1] = pd;
}

/* With a preload pool the host's slots are shared with it (rl_share_slots,
 * rl_share_store).  The pool's connections in flight are what the agent
 * counts of them (preload_conns): a release forged in the pool moves no
 * slot the processes still fill to the kernel. */
void kern_conn_slots(struct kern *k, uint32_t slot, int64_t n)
{
	struct rl_tenant *kt = &k->tenants[slot], *pt;
	int64_t pn, kc, pc, ps, in_flight;
	bool kw = false, pw = false, prefer_pool = kern_conn_points(k) == 1;

	if (!k->preload) {
		__atomic_store_n(&kt->conn_slots, n, __ATOMIC_RELEASE);
		return;
	}
	pt = preload_slot(k->preload, slot);
	kc = __atomic_load_n(&kt->conns, __ATOMIC_RELAXED);
	pc = preload_conns_found(k->preload, slot);
	ps = __atomic_load_n(&pt->conn_slots, __ATOMIC_RELAXED);
	if (n < 0)
		n = 0;
	in_flight = (kc > 0 ? kc : 0) + (pc > 0 ? pc : 0);
	if (!prefer_pool && n - in_flight == 1)
		conn_wants(k, slot, &kw, &pw);
	pn = rl_share_slots(n, kc, pc, ps, kw, pw, prefer_pool);
	rl_share_store(kt, pt, n, pn);
}

void kern_point_conns(const struct kern *k, uint32_t slot, int64_t *kernel,
		      int64_t *preload, int64_t *kernel_slots,
		      int64_t *preload_slots)
{
	const struct rl_tenant *pt;

	*kernel = __atomic_load_n(&k->tenants[slot].conns, __ATOMIC_RELAXED);
	*kernel_slots = __atomic_load_n(&k->tenants[slot].conn_slots,
					__ATOMIC_RELAXED);
	*preload = *preload_slots = 0;
	if (!k->preload)
		return;
	pt = preload_slot(k->preload, slot);
	*preload = __atomic_load_n(&pt->conns, __ATOMIC_RELAXED);
	*preload_slots = __atomic_load_n(&pt->conn_slots, __ATOMIC_RELAXED);
}

/* Both points' connections in flight: the host's slots hold them all (the
 * pool's as the agent counts them, so that no slot a process still fills
 * goes back to Redis on a forged release). */
int64_t kern_conns_in_flight(const struct kern *k, uint32_t slot)
{
	int64_t n = __atomic_load_n(&k->tenants[slot].conns, __ATOMIC_RELAXED);

	if (n < 0)
		n = 0;
	if (k->preload)
		n += preload_conns(k->preload, slot);
	return n;
}

unsigned int kern_conn_points(const struct kern *k)
{
	return k->preload && (k->n_ifaces || k->ifaces_planned) ? 2 : 1;
}

static void conn_ctl_write(struct kern *k)
{
	struct rl_conn_ctl c = { .capped = k->gate_capped,
				 .instance = k->gate_instance };
	__u32 zero = 0;

	if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.conn_ctl), &zero,
				&c, BPF_ANY) < 0)
		log_warn("couldn't write map on '%s/conn_ctl': %s", k->pin_dir,
			 strerror(errno));
	/* the program's own gate for reading ACKs (the handshakes of
	 * connections no tenant takes), set as verify_tenants is */
	__atomic_store_n(&k->skel->bss->inst_capped, c.instance,
			 __ATOMIC_RELEASE);
}

void kern_conn_gate(struct kern *k, uint32_t capped)
{
	k->gate_capped = capped;
	conn_ctl_write(k);
}

/* The largest of the numbers of a sysctl (net.ipv4.tcp_rmem's three). */
static long sysctl_max(const char *path)
{
	FILE *f = fopen(path, "re");
	long v, max = -EIO;

	if (!f)
		return -errno;
	while (fscanf(f, "%ld", &v) == 1)
		if (v > max)
			max = v;
	fclose(f);
	return max;
}

/*
 * What a SYN-ACK sent by the program (verify syncookie-answer) may offer,
 * from the server's sysctls, so that the server's kernel takes the
 * options back from the cookie as from its own (RL_COOKIE_*).  The
 * server's window scale is the kernel's choice for a cookie connection
 * (tcp_select_initial_window()): the largest receive buffer it may grow
 * to, in 64 KiB windows.
 */
uint32_t kern_cookie_opts(void)
{
	long ts = sysctl_num("/proc/sys/net/ipv4/tcp_timestamps");
	long sack = sysctl_num("/proc/sys/net/ipv4/tcp_sack");
	long ws = sysctl_num("/proc/sys/net/ipv4/tcp_window_scaling");
	long rmem = sysctl_max("/proc/sys/net/ipv4/tcp_rmem");
	long core = sysctl_num("/proc/sys/net/core/rmem_max");
	uint32_t o = 0;
	int shift = 0;

	if (core > rmem)
		rmem = core;
	while (shift < 14 && rmem >> (shift + 16) > 0)
		shift++;
	/* only without the kernel's secret offset can options ride in the
	 * timestamp: net.ipv4.tcp_timestamps=2 */
	if (ts == 2)
		o |= RL_COOKIE_TS;
	if (sack > 0)
		o |= RL_COOKIE_SACK;
	if (ws > 0)
		o |= RL_COOKIE_WSCALE;
	return o | RL_COOKIE_RCV_WSCALE_SET(shift);
}

void kern_verify_gate(struct kern *k, uint32_t verifying)
{
	/* the program's own variables, which live as long as it does: set
	 * anew by every agent that loads one, before it attaches it */
	__atomic_store_n(&k->skel->bss->cookie_opts,
			 verifying ? kern_cookie_opts() : 0, __ATOMIC_RELEASE);
	__atomic_store_n(&k->skel->bss->verify_tenants, verifying,
			 __ATOMIC_RELEASE);
}

void kern_instance_set(struct kern *k, const struct rl_instance_limit *il)
{
	if (il) {
		instance_configure(k->instance, il);
	} else {
		instance_clear(k->instance);
		k->instance_forgotten = 0;
	}
	k->gate_instance = il && il->max_conns;
	conn_ctl_write(k);
}

int kern_instance_read(struct kern *k, struct kern_instance *out)
{
	uint64_t c[RL_CNT_MAX];
	int64_t n = __atomic_load_n(&k->instance->conns, __ATOMIC_RELAXED);
	int err = kern_counters(k, c);

	memset(out, 0, sizeof(*out));
	out->in_flight = n > 0 ? n : 0;
	out->forgotten = k->instance_forgotten;
	if (err)
		return err;
	out->denied_cap = c[RL_CNT_INST_FULL];
	out->denied_rate = c[RL_CNT_INST_RATE];
	return 0;
}

int kern_tenant_conns(struct kern *k, uint32_t slot, struct kern_conns *out)
{
	const struct rl_tenant *rt = &k->tenants[slot];
	struct rl_conn_stats *per;
	int err = 0;

	memset(out, 0, sizeof(*out));
	out->in_flight = __atomic_load_n(&rt->conns, __ATOMIC_RELAXED);
	out->slots = __atomic_load_n(&rt->conn_slots, __ATOMIC_RELAXED);
	out->forgotten = k->conns_forgotten[slot];
	per = calloc((size_t)k->ncpus, sizeof(*per));
	if (!per)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(k->skel->maps.conn_stats), &slot,
				per) < 0)
		err = -errno;
	for (int c = 0; !err && c < k->ncpus; c++) {
		out->s.opened += per[c].opened;
		out->s.closed += per[c].closed;
		out->s.denied += per[c].denied;
		out->s.shadow_denied += per[c].shadow_denied;
		out->s.repeats += per[c].repeats;
		out->s.reused += per[c].reused;
		out->s.full += per[c].full;
	}
	free(per);
	return err;
}

void kern_tenant_clear(struct kern *k, uint32_t slot)
{
	struct rl_tenant *rt = &k->tenants[slot];

	__atomic_store_n(&rt->mode, RL_MODE_NONE, __ATOMIC_RELEASE);
	__atomic_fetch_add(&rt->generation, 1, __ATOMIC_RELEASE);
	/* the sweep then deletes the slot's sources, debts and all: they
	 * were the deleted tenant's, not the next one's */
	kern_src_configure(k, slot, &(struct policy_tenant){ .name = "" }, true);
	if (k->preload) {
		__atomic_store_n(&preload_slot(k->preload, slot)->mode,
				 RL_MODE_NONE, __ATOMIC_RELEASE);
		preload_changed(k->preload);
	}
}

bool kern_slot_live(const struct kern *k, uint32_t slot)
{
	return __atomic_load_n(&k->tenants[slot].mode, __ATOMIC_ACQUIRE) !=
	       RL_MODE_NONE;
}

uint64_t kern_tenant_tokens(const struct kern *k, uint32_t slot,
			    uint64_t now_ns)
{
	uint64_t n = rl_slot_tokens(&k->tenants[slot], now_ns);

	/* leased tokens are one lease wherever they lie (the pool's as far
	 * as the agent's ledger goes); standalone, the bucket that counts is
	 * the pool's when nothing is attached */
	if (k->preload && k->leased)
		n += preload_tokens(k->preload, slot);
	else if (k->preload && !k->n_ifaces)
		n = rl_slot_tokens(preload_slot(k->preload, slot), now_ns);
	return n;
}

uint64_t kern_tenant_overdrawn(const struct kern *k, uint32_t slot)
{
	int64_t n = __atomic_load_n(&k->tenants[slot].tokens, __ATOMIC_RELAXED);

	if (__atomic_load_n(&k->tenants[slot].mode, __ATOMIC_ACQUIRE) != RL_MODE_LEASED)
		return 0;
	/* the pool's debt too, where the overdraft is the pool's */
	return (n < 0 ? (uint64_t)-n : 0) +
	       (k->preload ? preload_overdrawn(k->preload, slot) : 0);
}

int kern_tenant_stats(struct kern *k, uint32_t slot, struct rl_stats *out)
{
	struct rl_stats pool;
	int err = kern_point_stats(k, slot, out, &pool);

	rl_stats_add(out, &pool);
	return err;
}

int kern_point_stats(struct kern *k, uint32_t slot, struct rl_stats *kernel,
		     struct rl_stats *preload)
{
	memset(preload, 0, sizeof(*preload));
	if (k->preload)
		preload_stats(k->preload, slot, preload);
	return kern_own_stats(k, slot, kernel);
}

void kern_point_tokens(const struct kern *k, uint32_t slot, uint64_t now_ns,
		       uint64_t *kernel, uint64_t *preload)
{
	*kernel = rl_slot_tokens(&k->tenants[slot], now_ns);
	*preload = !k->preload ? 0 : k->leased ? preload_spendable(k->preload, slot) :
		   rl_slot_tokens(preload_slot(k->preload, slot), now_ns);
}

static int kern_own_stats(struct kern *k, uint32_t slot, struct rl_stats *out)
{
	struct rl_stats *per;
	int err = 0;

	memset(out, 0, sizeof(*out));
	per = calloc((size_t)k->ncpus, sizeof(*per));
	if (!per)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(k->skel->maps.tenant_stats), &slot,
				per) < 0) {
		err = -errno;
		goto cleanup;
	}
	for (int c = 0; c < k->ncpus; c++)
		rl_stats_add(out, &per[c]);
cleanup:
	free(per);
	return err;
}

/* Keys read per system call by kern_tenant_stats_range(). */
#define STATS_BATCH	4096

/* One lookup per slot: for a kernel without batch lookups of per-CPU
 * arrays (before 5.6). */
static int stats_one_by_one(struct kern *k, uint32_t from, uint32_t n,
			    struct rl_stats *out)
{
	for (uint32_t i = 0; i < n; i++)
		if (kern_own_stats(k, from + i, &out[i]))
			memset(&out[i], 0, sizeof(out[i]));
	return 0;
}

int kern_tenant_stats_range(struct kern *k, uint32_t from, uint32_t n,
			    struct rl_stats *out)
{
	int fd = bpf_map__fd(k->skel->maps.tenant_stats);
	struct rl_stats *per;
	/* a batch starts after the key it is given: from - 1, or the map's
	 * start for slot 0 */
	uint32_t *keys, next = from - 1, done = 0;
	bool first = true;
	int err = 0;

	if (from >= k->max_tenants)
		return 0;
	if (n > k->max_tenants - from)
		n = k->max_tenants - from;
	per = calloc((size_t)STATS_BATCH * (size_t)k->ncpus, sizeof(*per));
	keys = calloc(STATS_BATCH, sizeof(*keys));
	if (!per || !keys) {
		err = -ENOMEM;
		goto cleanup;
	}
	while (done < n) {
		__u32 count = n - done < STATS_BATCH ? n - done : STATS_BATCH;
		LIBBPF_OPTS(bpf_map_batch_opts, opts);
		int e = bpf_map_lookup_batch(fd, first && !from ? NULL : &next,
					     &next, keys, per, &count, &opts);

		if (e < 0 && errno != ENOENT) {
			e = -errno;
			if (first && (e == -EINVAL || e == -ENOTSUP || e == -EOPNOTSUPP))
				err = stats_one_by_one(k, from, n, out);
			else
				err = e;
			goto cleanup;
		}
		first = false;
		for (__u32 i = 0; i < count; i++) {
			struct rl_stats *o;

			if (keys[i] < from || keys[i] - from >= n)
				continue;
			o = &out[keys[i] - from];
			memset(o, 0, sizeof(*o));
			for (int c = 0; c < k->ncpus; c++)
				rl_stats_add(o, &per[(size_t)i * k->ncpus + c]);
		}
		done += count;
		if (e < 0 || !count)
			break;	/* the end of the map */
	}
cleanup:
	if (!err && k->preload)
		for (uint32_t i = 0; i < n; i++) {
			struct rl_stats pool;

			preload_stats(k->preload, from + i, &pool);
			rl_stats_add(&out[i], &pool);
		}
	free(per);
	free(keys);
	return err;
}

int kern_counters(struct kern *k, uint64_t *out)
{
	int fd = bpf_map__fd(k->skel->maps.counters);
	uint64_t *per;

	per = calloc((size_t)k->ncpus, sizeof(*per));
	if (!per)
		return -ENOMEM;
	for (__u32 i = 0; i < RL_CNT_MAX; i++) {
		out[i] = 0;
		if (bpf_map_lookup_elem(fd, &i, per) < 0)
			continue;
		for (int c = 0; c < k->ncpus; c++)
			out[i] += per[c];
	}
	free(per);
	return 0;
}

/* --- rules --------------------------------------------------------------- */

/* Compiles the rules of the tenants of direction dir among bs[0..n) into
 * img.  0 or -errno, worded for the operator in k->rules_err. */
/*
 * Ends the message of rules that do not fit with the --rule-memory they
 * need, learnt by compiling them into the largest classifier (only what
 * it uses is touched), so that no one has to find the size by trial.
 */
static void explain_full(const struct kern *k, const struct rl_cls_rule *rules,
			 size_t n, char *msg, size_t msg_len)
{
	struct rl_cls_image big;
	size_t len = strlen(msg);
	uint32_t mib;

	if (k->cls.half >= RL_CLS_GROUPS_MAX ||
	    rl_cls_compile(rules, n, RL_CLS_GROUPS_MAX, &big, NULL, 0)) {
		snprintf(msg + len, msg_len - len, "; the agent's --rule-memory "
			 "sets the size (%u MiB, at most %u)", k->cls.half / 512,
			 RL_CLS_GROUPS_MAX / 512);
		return;
	}
	/* --rule-memory M gives each half M * 512 tables */
	mib = (big.n_groups + 511) / 512;
	rl_cls_image_free(&big);
	snprintf(msg + len, msg_len - len, "; they need --rule-memory %u or "
		 "more (the agent has %u MiB; a change needs a detach)",
		 mib < 2 ? 2 : mib, k->cls.half / 512);
}

static int compile_dir(struct kern *k, const struct kern_binding *bs, size_t n,
		       enum policy_direction dir, struct rl_cls_image *img,
		       size_t *n_rules)
{
	struct rl_cls_rule *rules = NULL;
	char *msg = k->rules_err;
	size_t msg_len = sizeof(k->rules_err), cap = 0;
	int err = 0;

	*n_rules = 0;
	for (size_t b = 0; b < n && !err; b++)
		if (bs[b].t->direction == dir)
			err = rl_cls_rules_add(&rules, n_rules, &cap, bs[b].t,
					       bs[b].slot);
	if (!err)
		err = rl_cls_compile(rules, *n_rules, k->cls.half, img, msg,
				     msg_len);
	else
		snprintf(msg, msg_len, "out of memory");
	if (err == -ENOSPC)
		explain_full(k, rules, *n_rules, msg, msg_len);
	free(rules);
	if (err)
		log_error("couldn't compile %zu %s rules for '%s/cls': %s", *n_rules,
			  dir == POLICY_DIR_OUT ? "outbound" : "inbound",
			  k->pin_dir, msg);
	return err;
}

int kern_rules_compile(struct kern *k, const struct kern_binding *bs, size_t n,
		       struct kern_rules *r)
{
	int err;

	memset(r, 0, sizeof(*r));
	/* Outbound tenants only ever apply in preloaded programs: the kernel
	 * judges SYNs by their source, so their rules never reach it. */
	err = compile_dir(k, bs, n, POLICY_DIR_IN, &r->in, &r->n_in);
	if (!err && k->preload)
		err = compile_dir(k, bs, n, POLICY_DIR_OUT, &r->out, &r->n_out);
	if (err)
		kern_rules_free(r);
	else
		r->compiled = true;
	return err;
}

void kern_rules_free(struct kern_rules *r)
{
	rl_cls_image_free(&r->out);
	rl_cls_image_free(&r->in);
	memset(r, 0, sizeof(*r));
}

int kern_rules_publish(struct kern *k, struct kern_rules *r)
{
	int err;

	err = rl_cls_publish(&k->cls, &r->in);
	if (err) {
		snprintf(k->rules_err, sizeof(k->rules_err), "couldn't publish "
			 "the rules: %s", strerror(-err));
		log_error("couldn't publish rules on '%s/cls': %s", k->pin_dir,
			  strerror(-err));
	}
	else {
		k->cls_used = r->in.n_groups;
		log_debug("published %zu rules (%u tables, %u port columns, %u "
			  "port rows)", r->n_in, r->in.n_groups, r->in.n_columns,
			  r->in.n_rows);
		/* The pool has the kernel's size, so it takes whatever the
		 * kernel took; a failure is logged there. */
		if (k->preload) {
			preload_rules(k->preload, RL_POOL_IN, &r->in, r->n_in);
			preload_rules(k->preload, RL_POOL_OUT, &r->out, r->n_out);
			log_debug("published %zu outbound rules to the preload "
				  "pool", r->n_out);
		}
	}
	kern_rules_free(r);
	return err;
}

int kern_preload_rules(struct kern *k, const struct kern_binding *bs, size_t n)
{
	struct kern_rules r;
	int err;

	if (!k->preload)
		return 0;
	err = kern_rules_compile(k, bs, n, &r);
	if (err)
		return err;
	err = preload_rules(k->preload, RL_POOL_IN, &r.in, r.n_in);
	if (!err)
		err = preload_rules(k->preload, RL_POOL_OUT, &r.out, r.n_out);
	kern_rules_free(&r);
	return err;
}

int kern_rules_sync(struct kern *k, const struct kern_binding *bs, size_t n)
{
	struct kern_rules r;
	int err = kern_rules_compile(k, bs, n, &r);

	return err ? err : kern_rules_publish(k, &r);
}

int kern_rules_edit(struct kern *k, const struct rl_cls_rule *ps, size_t n,
		    rl_cls_rule_fn rule, void *ctx)
{
	uint32_t used = k->cls_used;
	int err;

	/* The pool holds its own copy of the rules, compiled whole. */
	if (k->preload || used < RL_CLS_POOL)
		return -EAGAIN;
	err = rl_cls_map_edit(&k->cls, &used, ps, n, rule, ctx);
	if (err) {
		log_debug("couldn't edit the rules of '%s/cls' in place (%s): "
			  "compiling them whole", k->pin_dir, strerror(-err));
		return err;
	}
	k->cls_used = used;
	return 0;
}

/* --- events -------------------------------------------------------------- */

int kern_events_open(struct kern *k, int (*fn)(void *ctx, void *data,
					       size_t size), void *ctx)
{
	k->rb = ring_buffer__new(bpf_map__fd(k->skel->maps.events), fn, ctx,
				 NULL);
	if (!k->rb) {
		int err = -errno;

		log_error("couldn't open ring buffer on '%s/events': %s",
			  k->pin_dir, strerror(-err));
		return err;
	}
	return 0;
}

int kern_events_fd(const struct kern *k)
{
	return k->rb ? ring_buffer__epoll_fd(k->rb) : -1;
}

int kern_events_consume(struct kern *k)
{
	return k->rb ? ring_buffer__consume(k->rb) : 0;
}
