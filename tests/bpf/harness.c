// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Map plumbing for the XDP tests and benchmark.  Works on a bpf_object
 * rather than a skeleton type so that the rlgate program and the benchmark's
 * copy of it (which has its own maps) are set up by the same code.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>

#include "harness.h"
#include "policy.h"

static int map_fd(struct bpf_object *obj, const char *name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, name);

	return m ? bpf_map__fd(m) : -ENOENT;
}

int world_init(struct world *w, struct bpf_object *obj)
{
	struct bpf_map *tm;
	long page = sysconf(_SC_PAGESIZE);
	int cls_fd, cls_state_fd, cls_sync_fd, err;
	void *p;

	memset(w, 0, sizeof(*w));
	w->obj = obj;
	w->ncpus = libbpf_num_possible_cpus();
	if (w->ncpus <= 0)
		return w->ncpus ? w->ncpus : -EINVAL;
	w->stats_fd = map_fd(obj, "tenant_stats");
	w->counters_fd = map_fd(obj, "counters");
	w->events_fd = map_fd(obj, "events");
	w->flow_cache_fd = map_fd(obj, "flow_cache_cpu");
	w->flow_tags_fd = map_fd(obj, "flow_tags_cpu");
	cls_fd = map_fd(obj, "cls");
	cls_state_fd = map_fd(obj, "cls_state");
	cls_sync_fd = map_fd(obj, "cls_sync");
	tm = bpf_object__find_map_by_name(obj, "tenants");
	if (!tm || w->stats_fd < 0 || w->counters_fd < 0 || w->events_fd < 0 ||
	    w->flow_cache_fd < 0 || w->flow_tags_fd < 0 || cls_fd < 0 || cls_state_fd < 0 ||
	    cls_sync_fd < 0)
		return -ENOENT;
	/* both halves, as the loader sized them */
	err = rl_cls_map_open(&w->cls, cls_fd, cls_state_fd, cls_sync_fd,
			      bpf_map__max_entries(
				      bpf_object__find_map_by_name(obj, "cls")) / 2);
	if (err) {
		fprintf(stderr, "couldn't mmap map 'cls': %s\n", strerror(-err));
		return err;
	}

	/* The kernel rounds an mmapable array's value area up to pages. */
	w->tenants_len = (size_t)bpf_map__max_entries(tm) *
			 sizeof(struct rl_tenant);
	w->tenants_len = (w->tenants_len + page - 1) / page * page;
	p = mmap(NULL, w->tenants_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 bpf_map__fd(tm), 0);
	if (p == MAP_FAILED) {
		int err = -errno;

		fprintf(stderr, "couldn't mmap map 'tenants': %s\n",
			strerror(-err));
		return err;
	}
	w->tenants = p;
	return 0;
}

int world_size(struct bpf_object *obj, __u32 tenants, __u32 cls_half)
{
	/* the maps rlagent's --max-tenants sizes (kern_tenant_sized) */
	static const char *const per_tenant[] = {
		"tenants", "tenant_stats", "conn_stats", "src_conf", "src_stats",
	};
	struct bpf_map *m;
	size_t i;
	int err;

	for (i = 0; i < sizeof(per_tenant) / sizeof(per_tenant[0]); i++) {
		m = bpf_object__find_map_by_name(obj, per_tenant[i]);
		if (!m)
			return -ENOENT;
		err = bpf_map__set_max_entries(m, tenants);
		if (err)
			return err;
	}
	m = bpf_object__find_map_by_name(obj, "cls");
	return m ? bpf_map__set_max_entries(m, 2 * cls_half) : -ENOENT;
}

void world_fini(struct world *w)
{
	if (w->tenants)
		munmap(w->tenants, w->tenants_len);
	w->tenants = NULL;
	rl_cls_map_close(&w->cls);
	free(w->rules);
	w->rules = NULL;
	w->n_rules = w->cap_rules = 0;
}

__u64 now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

__u64 now_coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (__u64)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

int rule_add(struct world *w, const char *cidr, __u16 port, __u32 tenant)
{
	struct policy_tenant t = { .n_ports = port ? 1 : 0 };
	char err[POLICY_ERR_MAX];
	int e;

	if (policy_parse_prefixes(cidr, &t, err)) {
		fprintf(stderr, "rule_add: %s\n", err);
		return -EINVAL;
	}
	t.ports[0] = port;
	e = rl_cls_rules_add(&w->rules, &w->n_rules, &w->cap_rules, &t, tenant);
	policy_tenant_free(&t);
	if (e)
		return -ENOMEM;
	return w->rules_batch ? 0 : rules_publish(w);
}

int rules_publish(struct world *w)
{
	struct rl_cls_image img;
	char err[256];
	int ret;

	ret = rl_cls_compile(w->rules, w->n_rules, w->cls.half, &img, err,
			     sizeof(err));
	if (ret) {
		fprintf(stderr, "couldn't compile the rules: %s\n", err);
		return ret;
	}
	ret = rl_cls_publish(&w->cls, &img);
	rl_cls_image_free(&img);
	return ret;
}

/* CPU cpu's copy of key's value in a per-CPU map whose values are size
 * bytes (a multiple of 8, so the kernel packs the copies).  0 or -errno. */
static int percpu_get(struct world *w, int fd, __u32 key, int cpu, void *out,
		      size_t size)
{
	char *v = calloc(w->ncpus, size);
	int err = 0;

	if (!v)
		return -ENOMEM;
	if (cpu < 0 || cpu >= w->ncpus)
		err = -EINVAL;
	else if (bpf_map_lookup_elem(fd, &key, v))
		err = -errno;
	else
		memcpy(out, v + (size_t)cpu * size, size);
	free(v);
	return err;
}

int tenant_stats_cpu(struct world *w, __u32 tenant, int cpu,
		     struct rl_stats *out)
{
	return percpu_get(w, w->stats_fd, tenant, cpu, out, sizeof(*out));
}

int flow_slot_cpu(struct world *w, __u32 idx, int cpu,
		  struct rl_flow_slot *out)
{
	return percpu_get(w, w->flow_cache_fd, idx, cpu, out, sizeof(*out));
}

int flow_slot_set_cpu(struct world *w, __u32 idx, int cpu,
		      const struct rl_flow_slot *s)
{
	struct rl_flow_slot *v = calloc(w->ncpus, sizeof(*v));
	int err = 0;

	if (!v)
		return -ENOMEM;
	if (cpu < 0 || cpu >= w->ncpus)
		err = -EINVAL;
	else if (bpf_map_lookup_elem(w->flow_cache_fd, &idx, v))
		err = -errno;
	if (!err) {
		v[cpu] = *s;
		if (bpf_map_update_elem(w->flow_cache_fd, &idx, v, BPF_EXIST))
			err = -errno;
	}
	free(v);
	return err;
}

int flow_tag_cpu(struct world *w, __u32 idx, int cpu, __u8 *out)
{
	struct rl_flow_tags t;
	int err;

	err = percpu_get(w, w->flow_tags_fd, idx / RL_FLOW_TAG_LINE, cpu, &t,
			 sizeof(t));
	if (!err)
		*out = t.tag[idx % RL_FLOW_TAG_LINE];
	return err;
}

int flow_slot_age_cpu(struct world *w, __u32 idx, int cpu, __u64 ns)
{
	struct rl_flow_slot v;
	int err = flow_slot_cpu(w, idx, cpu, &v);

	if (err)
		return err;
	if (v.seen_ns < ns)
		return -ERANGE;
	v.seen_ns -= ns;
	return flow_slot_set_cpu(w, idx, cpu, &v);
}

void tenant_stats_sum(struct world *w, __u32 tenant, struct rl_stats *out)
{
	struct rl_stats one = { 0 };
	int c;

	memset(out, 0, sizeof(*out));
	for (c = 0; c < w->ncpus; c++) {
		if (tenant_stats_cpu(w, tenant, c, &one))
			continue;
		rl_stats_add(out, &one);
	}
}

void counters_sum(struct world *w, __u64 out[RL_CNT_MAX])
{
	__u64 v[w->ncpus];
	__u32 i;
	int c;

	for (i = 0; i < RL_CNT_MAX; i++) {
		out[i] = 0;
		if (bpf_map_lookup_elem(w->counters_fd, &i, v))
			continue;
		for (c = 0; c < w->ncpus; c++)
			out[i] += v[c];
	}
}

int xdp_run(int prog_fd, const void *in, __u32 in_len, void *out,
	    __u32 out_cap, __u32 repeat, struct run_result *res)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts,
		.data_in = in,
		.data_size_in = in_len,
		.data_out = out,
		.data_size_out = out_cap,
		.repeat = repeat,
	);

	if (bpf_prog_test_run_opts(prog_fd, &opts))
		return -errno;
	res->retval = opts.retval;
	res->duration_ns = opts.duration;
	res->out_len = opts.data_size_out;
	return 0;
}

int pin_to_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		return -errno;
	return 0;
}

/* What every mode sets; the caller bumps the generation once it is done. */
static void tenant_mode(struct rl_tenant *t, __u32 mode, __u32 action,
			__u64 burst)
{
	t->mode = mode;
	t->action = action;
	t->burst = burst;
}

void tenant_standalone(struct rl_tenant *t, __u32 action, __u32 flags,
		       __u64 interval_ns, __u64 burst)
{
	tenant_mode(t, RL_MODE_STANDALONE, action, burst);
	t->flags = flags;
	t->interval_ns = interval_ns;
	t->tolerance_ns = burst * interval_ns;
	t->generation++;
}

void tenant_leased(struct rl_tenant *t, __u32 action, __s64 tokens,
		   __s64 lowwater, bool armed)
{
	tenant_mode(t, RL_MODE_LEASED, action, tokens);
	t->lowwater = lowwater;
	t->lowwater_armed = armed;
	t->tokens = tokens;
	t->generation++;
}

void tenant_fail(struct rl_tenant *t, __u32 fail, __u32 fail_burst,
		 __u64 fail_interval_ns)
{
	t->fail = fail;
	t->fail_burst = fail_burst;
	t->fail_interval_ns = fail_interval_ns;
	t->generation++;
}

int agent_state_set(struct world *w, __u64 heartbeat_ns, __u64 stale_ns,
		    __u32 degraded)
{
	struct rl_agent_state st = {
		.heartbeat_ns = heartbeat_ns,
		.stale_ns = stale_ns,
		.degraded = degraded,
	};
	__u32 zero = 0;
	int fd = map_fd(w->obj, "agent_state");

	if (fd < 0)
		return fd;
	if (bpf_map_update_elem(fd, &zero, &st, BPF_ANY))
		return -errno;
	return 0;
}

static int quiet_print(enum libbpf_print_level level, const char *fmt,
		       va_list ap)
{
	if (level == LIBBPF_WARN || getenv("RLGATE_TEST_VERBOSE"))
		return vfprintf(stderr, fmt, ap);
	return 0;
}

void harness_quiet_libbpf(void)
{
	libbpf_set_print(quiet_print);
}
