/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the XDP test table and the benchmark share: one loaded copy of the
 * rlgate maps (from either skeleton), tenants set up through the mmap'd
 * array, rules, counters, and one call of bpf_prog_test_run_opts.
 */
#ifndef RL_TEST_HARNESS_H
#define RL_TEST_HARNESS_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include <bpf/libbpf.h>

#include "rlgate.h"
#include "classify.h"

/* The maps of one loaded object: rlgate_bpf or bench_bpf. */
struct world {
	struct bpf_object *obj;
	struct rl_tenant *tenants;	/* the mmap'd `tenants` array */
	size_t tenants_len;
	int stats_fd, counters_fd, events_fd, flow_cache_fd, flow_tags_fd;
	struct rl_cls_map cls;		/* the mmap'd classifier */
	struct rl_cls_rule *rules;	/* every rule added so far */
	size_t n_rules, cap_rules;
	bool rules_batch;		/* rule_add() leaves publishing to
					 * rules_publish() */
	int ncpus;
};

/* Finds the maps of a loaded object and maps `tenants`.  0 or -errno. */
int world_init(struct world *w, struct bpf_object *obj);
void world_fini(struct world *w);

/* Sizes an opened, not yet loaded object's maps as rlagent's --max-tenants
 * and --rule-memory do: `tenants` slots, and a classifier of `cls_half`
 * tables per half (the caller gives the program's cls_half the same).
 * 0 or -errno. */
int world_size(struct bpf_object *obj, __u32 tenants, __u32 cls_half);

/* CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns() reads. */
__u64 now_ns(void);
/* CLOCK_MONOTONIC_COARSE in ns: the clock bpf_ktime_get_coarse_ns() reads,
 * which the buckets run on (RL_FINE_CLOCK_NS); never ahead of now_ns(). */
__u64 now_coarse_ns(void);

/*
 * Adds one rule: source prefix `cidr` ("10.1.0.0/16", "2001:db8::/32"),
 * destination port `port` (host order, 0 for any port) -> tenant, and
 * compiles and publishes every rule so far (unless w->rules_batch).
 * 0 or -errno.
 */
int rule_add(struct world *w, const char *cidr, __u16 port, __u32 tenant);
/* Compiles and publishes every rule added so far.  0 or -errno. */
int rules_publish(struct world *w);

/* Per-CPU sums. */
void tenant_stats_sum(struct world *w, __u32 tenant, struct rl_stats *out);
int tenant_stats_cpu(struct world *w, __u32 tenant, int cpu,
		     struct rl_stats *out);
/* Slot idx of `flow_cache_cpu` as CPU cpu holds it.  0 or -errno. */
int flow_slot_cpu(struct world *w, __u32 idx, int cpu,
		  struct rl_flow_slot *out);
/* Writes slot idx of CPU cpu as a program before this one would have left
 * it, its tag unknown.  0 or -errno. */
int flow_slot_set_cpu(struct world *w, __u32 idx, int cpu,
		      const struct rl_flow_slot *s);
/* The tag of slot idx (struct rl_flow_tags) as CPU cpu holds it.  0 or
 * -errno. */
int flow_tag_cpu(struct world *w, __u32 idx, int cpu, __u8 *out);
/* Moves the time slot idx of CPU cpu was last seen (seen_ns) ns back, as
 * if that long had passed since: a window tested without waiting it out.
 * 0 or -errno (-ERANGE: the slot was seen less than ns after boot). */
int flow_slot_age_cpu(struct world *w, __u32 idx, int cpu, __u64 ns);
void counters_sum(struct world *w, __u64 out[RL_CNT_MAX]);

/* One test run.  *out_len is the buffer size on entry and the length of the
 * frame that came out on return.  0 or -errno. */
struct run_result {
	__u32 retval;
	__u32 duration_ns;	/* mean per repetition */
	__u32 out_len;
};
int xdp_run(int prog_fd, const void *in, __u32 in_len, void *out,
	    __u32 out_cap, __u32 repeat, struct run_result *res);

/* Pins the calling thread to one CPU.  0 or -errno. */
int pin_to_cpu(int cpu);

/* Configure a tenant slot in place (the mmap'd array), as the agent does:
 * standalone with tolerance = burst * interval, or leased with a balance.
 * Both bump the generation; neither touches tat. */
void tenant_standalone(struct rl_tenant *t, __u32 action, __u32 flags,
		       __u64 interval_ns, __u64 burst);
void tenant_leased(struct rl_tenant *t, __u32 action, __s64 tokens,
		   __s64 lowwater, bool armed);

/* Sets a leased tenant's fail policy (enum rl_fail) and, for
 * RL_FAIL_STATIC, its local share: fail_burst tokens, one per
 * fail_interval_ns.  Bumps the generation; does not touch fail_tat. */
void tenant_fail(struct rl_tenant *t, __u32 fail, __u32 fail_burst,
		 __u64 fail_interval_ns);

/* Writes the one `agent_state` entry as the agent does: its heartbeat
 * (CLOCK_MONOTONIC ns), the staleness deadline (0: none) and the breaker's
 * degraded flag.  0 or -errno (-ENOENT when the object has no such map). */
int agent_state_set(struct world *w, __u64 heartbeat_ns, __u64 stale_ns,
		    __u32 degraded);

/* `test_xdp --bench`: the per-packet benchmark (bench.c). */
int bench_main(int argc, char **argv);

/* Quiet libbpf unless RLGATE_TEST_VERBOSE is set. */
void harness_quiet_libbpf(void);

#endif /* RL_TEST_HARNESS_H */
