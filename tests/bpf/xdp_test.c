// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The helpers every feature test of test_xdp uses (see xdp_test.h): they
 * fail the running test themselves when a load or a run fails, so that a
 * scenario reads as what it sends and what it expects.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/if_ether.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "xdp_test.h"

int test_cpu;

int other_cpu(void)
{
	if (libbpf_num_possible_cpus() < 2) {
		check_skip("one CPU");
		return -1;
	}
	return test_cpu == 0 ? 1 : 0;
}

/* Loading rlgate costs the verifier about a second, and most tests start
 * from a fresh load: a closed instance is kept instead, and the next open of
 * the same configuration (its read-only data) gets it back with every map as
 * a load leaves it - arrays zeroed, hashes emptied, the event ring drained.
 * An instance with a map of a type not handled here is not reused. */
#define INST_KEPT 4

static struct kept {
	struct rlgate_bpf *skel;
	struct ring_buffer *events;	/* to drain the ring */
	__u64 window_ns, gap_ns;
	bool busy;
} kept[INST_KEPT];

static int drop_event(void *ctx, void *data, size_t size)
{
	(void)ctx, (void)data, (void)size;
	return 0;
}

/* Zeroes entries [0, n) of array map m (per CPU or not), in batches. */
static int array_zero(struct bpf_map *m, int ncpus)
{
	enum bpf_map_type type = bpf_map__type(m);
	__u32 n = bpf_map__max_entries(m), batch = 1024, i, k, count;
	size_t vs = bpf_map__value_size(m), len;
	long page = sysconf(_SC_PAGESIZE);
	__u32 *keys;
	void *vals, *p;
	int fd = bpf_map__fd(m), err = 0;

	if (bpf_map__map_flags(m) & BPF_F_MMAPABLE) {
		len = ((size_t)n * vs + page - 1) / page * page;
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED)
			return -errno;
		memset(p, 0, len);
		munmap(p, len);
		return 0;
	}
	if (type == BPF_MAP_TYPE_PERCPU_ARRAY)
		vs = (vs + 7) / 8 * 8 * ncpus;
	keys = calloc(batch, sizeof(*keys));
	vals = calloc(batch, vs);
	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (i = 0; i < n && !err; i += count) {
		count = n - i < batch ? n - i : batch;
		for (k = 0; k < count; k++)
			keys[k] = i + k;
		if (bpf_map_update_batch(fd, keys, vals, &count, NULL))
			err = -errno;
	}
	free(keys);
	free(vals);
	return err;
}

/* Deletes every entry of hash map m. */
static int hash_empty(struct bpf_map *m)
{
	char key[256];
	int fd = bpf_map__fd(m);

	if (bpf_map__key_size(m) > sizeof(key))
		return -E2BIG;
	while (!bpf_map_get_next_key(fd, NULL, key))
		if (bpf_map_delete_elem(fd, key))
			return -errno;
	return errno == ENOENT ? 0 : -errno;
}

/* Puts every map of kept instance k back as a fresh load leaves it. */
static int kept_reset(struct kept *k)
{
	struct bpf_map *m;
	int ncpus = libbpf_num_possible_cpus(), err;
	__u32 i;

	bpf_object__for_each_map(m, k->skel->obj) {
		const char *name = bpf_map__name(m);

		if (bpf_map__is_internal(m) && strstr(name, ".rodata"))
			continue;	/* frozen: the configuration */
		if (bpf_map__is_internal(m) && !strstr(name, ".bss"))
			return -ENOTSUP; /* .data: its initial values */
		switch (bpf_map__type(m)) {
		case BPF_MAP_TYPE_ARRAY:
		case BPF_MAP_TYPE_PERCPU_ARRAY:
			err = array_zero(m, ncpus);
			break;
		case BPF_MAP_TYPE_HASH:
			err = hash_empty(m);
			break;
		case BPF_MAP_TYPE_ARRAY_OF_MAPS:
			err = 0;
			for (i = 0; i < bpf_map__max_entries(m); i++)
				if (bpf_map_delete_elem(bpf_map__fd(m), &i) &&
				    errno != ENOENT)
					err = -errno;
			break;
		case BPF_MAP_TYPE_RINGBUF:
			err = ring_buffer__consume(k->events);
			err = err < 0 ? err : 0;
			break;
		default:
			err = -ENOTSUP;
		}
		if (err) {
			diag("couldn't reset map '%s' for reuse: %s", name,
			     strerror(-err));
			return err;
		}
	}
	return 0;
}

/* A kept instance of this configuration, reset; NULL when there is none. */
static struct rlgate_bpf *kept_take(__u64 window_ns, __u64 gap_ns)
{
	struct kept *k;

	for (k = kept; k < kept + INST_KEPT; k++) {
		if (!k->skel || k->busy || k->window_ns != window_ns ||
		    k->gap_ns != gap_ns)
			continue;
		if (kept_reset(k)) {
			ring_buffer__free(k->events);
			rlgate_bpf__destroy(k->skel);
			memset(k, 0, sizeof(*k));
			return NULL;
		}
		k->busy = true;
		return k->skel;
	}
	return NULL;
}

/* Keeps a new instance in a free place, if there is one. */
static void kept_add(struct rlgate_bpf *skel, __u64 window_ns, __u64 gap_ns)
{
	struct kept *k;

	for (k = kept; k < kept + INST_KEPT; k++) {
		if (k->skel)
			continue;
		k->events = ring_buffer__new(bpf_map__fd(skel->maps.events),
					     drop_event, NULL, NULL);
		if (!k->events)
			return;
		k->skel = skel;
		k->window_ns = window_ns;
		k->gap_ns = gap_ns;
		k->busy = true;
		return;
	}
}

struct rlgate_bpf *rlgate_get(__u64 retrans_window_ns, __u64 retrans_gap_ns)
{
	struct rlgate_bpf *skel = kept_take(retrans_window_ns, retrans_gap_ns);
	int err;

	if (skel)
		return skel;
	skel = rlgate_bpf__open();
	if (!skel) {
		diag("couldn't open the rlgate skeleton: %s", strerror(errno));
		return NULL;
	}
	skel->rodata->retrans_window_ns = retrans_window_ns;
	skel->rodata->retrans_gap_ns = retrans_gap_ns;
	err = rlgate_bpf__load(skel);
	if (err) {
		diag("couldn't load the rlgate skeleton: %s", strerror(-err));
		rlgate_bpf__destroy(skel);
		return NULL;
	}
	kept_add(skel, retrans_window_ns, retrans_gap_ns);
	return skel;
}

void rlgate_put(struct rlgate_bpf *skel)
{
	struct kept *k;

	for (k = kept; k < kept + INST_KEPT; k++) {
		if (k->skel && k->skel == skel) {
			k->busy = false;
			return;
		}
	}
	rlgate_bpf__destroy(skel);
}

void inst_close(struct inst *in)
{
	world_fini(&in->w);
	rlgate_put(in->skel);
	in->skel = NULL;
}

int inst_open_gap(struct inst *in, __u64 retrans_window_ns,
		  __u64 retrans_gap_ns)
{
	int err;

	memset(in, 0, sizeof(*in));
	in->skel = rlgate_get(retrans_window_ns, retrans_gap_ns);
	if (!in->skel)
		return -ENOENT;
	err = world_init(&in->w, in->skel->obj);
	if (err) {
		diag("couldn't find rlgate's maps: %s", strerror(-err));
		inst_close(in);
		return err;
	}
	in->prog_fd = bpf_program__fd(in->skel->progs.xdp_rlgate);
	return 0;
}

int inst_open(struct inst *in, __u64 retrans_window_ns)
{
	return inst_open_gap(in, retrans_window_ns, 0);
}

int small_world(struct inst *in, __u64 retrans_window_ns)
{
	if (inst_open(in, retrans_window_ns))
		return -1;
	if (rule_add(&in->w, "10.1.0.0/16", 0, 1)) {
		diag("couldn't add a rule");
		inst_close(in);
		return -1;
	}
	return 0;
}

int send_tcp_from(struct inst *in, const char *src, __u8 flags,
			 __u16 sport, __u32 seq, __u32 *verdict)
{
	struct pkt p = { V4, .flags = flags, .src = src, .sport = sport,
			 .seq = seq };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), err;

	err = xdp_run(in->prog_fd, buf, len, out, sizeof(out), 1, &r);
	CHECK(!err, "bpf_prog_test_run_opts: %s", strerror(-err));
	if (err)
		return err;
	*verdict = r.retval;
	return 0;
}

int send_tcp(struct inst *in, __u8 flags, __u16 sport, __u32 seq,
	     __u32 *verdict)
{
	return send_tcp_from(in, "10.1.0.10", flags, sport, seq, verdict);
}

int send_syn(struct inst *in, __u16 sport, __u32 seq, __u32 *verdict)
{
	return send_tcp(in, TH_SYN, sport, seq, verdict);
}

int send_syn_from(struct inst *in, const char *src, __u16 sport, __u32 seq,
		  __u32 *verdict)
{
	return send_tcp_from(in, src, TH_SYN, sport, seq, verdict);
}

int count_admits(struct inst *in, int n, __u16 sport0)
{
	int i, admits = 0;
	bool refused = false;
	__u32 v;

	for (i = 0; i < n; i++) {
		if (send_syn(in, sport0 + i, 1000 + i, &v))
			return -1;
		if (v != XDP_PASS) {
			refused = true;
			continue;
		}
		admits++;
		CHECK(!refused, "SYN %d admitted after a refusal", i);
	}
	return admits;
}

void expect_admits(const char *file, int line, struct inst *in, int n,
		   __u16 sport0, int want, const char *stats, const char *what)
{
	int got = count_admits(in, n, sport0);

	if (got != want)
		check_fail(file, line, "%s admitted %d, want %d", what, got,
			   want);
	if (stats)
		expect_stats(file, line, &in->w, 1, stats);
}

void expect_refill(struct inst *in, __u64 *tatp, __u64 burst,
		   __u64 earned_ns, int n, int want, __u16 sport0,
		   const char *what)
{
	*tatp = now_coarse_ns() + burst * SEC_NS - earned_ns;
	EXPECT_ADMITS(in, n, sport0, want, NULL, what);
}

void expect_refill_realtime(struct inst *in, __u64 *tatp, const char *what)
{
	__u32 v1 = 0, v2 = 0, v3 = 0;

	*tatp = now_ns() + REALTIME_INTERVAL_NS;	/* empty now */
	send_syn(in, 1000, 1, &v1);
	usleep(160 * 1000);
	if (!send_syn(in, 1001, 2, &v2))
		send_syn(in, 1002, 3, &v3);
	CHECK(v1 == XDP_DROP, "SYN on an empty %s: verdict %u, want drop", what,
	      v1);
	CHECK(v2 == XDP_PASS, "SYN 160 ms later (interval 100 ms): verdict "
	      "%u, want pass", v2);
	CHECK(v3 == XDP_DROP, "SYN right after: verdict %u, want drop", v3);
}

void syn_flow(__u16 sport, __u32 seq, struct rl_flow *f)
{
	syn_flow_from("10.1.0.10", sport, seq, f);
}

void syn_flow_from(const char *src, __u16 sport, __u32 seq, struct rl_flow *f)
{
	struct pkt p = { V4, SYN, .src = src, .sport = sport, .seq = seq };
	__u8 buf[PKT_MAX];
	const __u8 *ip = buf + ETH_HLEN, *tcp = ip + 20;

	pkt_build(&p, buf, NULL);
	memset(f, 0, sizeof(*f));
	memcpy(f->saddr, ip + 12, 4);
	memcpy(f->daddr, ip + 16, 4);
	memcpy(&f->sport, tcp, 2);
	memcpy(&f->dport, tcp + 2, 2);
	memcpy(&f->isn, tcp + 4, 4);
	f->family = 4;
}

/* rl_stats's fields in order: every one is a __u64 counter. */
static const char *const stat_names[] = {
	"admitted", "denied", "shadow_denied", "retransmits", "rst_sent",
	"lowwater_events", "degraded", "unparsed",
};
_Static_assert(ARRAY_SIZE(stat_names) * sizeof(__u64) ==
	       sizeof(struct rl_stats), "stat_names: one name a field");

void expect_stats(const char *file, int line, struct world *w, __u32 tenant,
		  const char *want)
{
	char name[32], got[256];
	unsigned long long v;
	struct rl_stats s;
	const __u64 *f = (const __u64 *)&s;
	const char *p = want;
	size_t i, len = 0;
	bool same = true;
	int n;

	tenant_stats_sum(w, tenant, &s);
	got[0] = '\0';
	while (sscanf(p, " %31[a-z_]=%llu%n", name, &v, &n) == 2) {
		p += n;
		for (i = 0; i < ARRAY_SIZE(stat_names); i++)
			if (!strcmp(name, stat_names[i]))
				break;
		if (i == ARRAY_SIZE(stat_names)) {
			check_fail(file, line, "no stat '%s'", name);
			return;
		}
		same = same && f[i] == v;
		len += snprintf(got + len, sizeof(got) - len, "%s%s=%llu",
				len ? " " : "", name,
				(unsigned long long)f[i]);
		if (len >= sizeof(got))
			len = sizeof(got) - 1;
	}
	if (*p && sscanf(p, " %1s", name) == 1)
		check_fail(file, line, "can't read stats '%s'", want);
	else if (!same)
		check_fail(file, line, "tenant %u: %s, want %s", tenant, got,
			   want);
}

void diag_hex(const char *label, const __u8 *b, int len, const __u8 *other,
	      int other_len)
{
	char buf[4096];

	pkt_hex(buf, sizeof(buf), label, b, len, other, other_len);
	diag("%s", buf);
}

void run_scenarios(const struct scenario *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		check_run_arg(s[i].name, s[i].fn, s[i].arg);
}
