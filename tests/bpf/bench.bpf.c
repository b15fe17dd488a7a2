// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The benchmark's own copy of rlgate (same maps, same decide()), plus an
 * entry point that makes every repetition of bpf_prog_test_run a new flow.
 * test_run with `repeat` feeds the same bytes again and again; without this,
 * every SYN after the first would be a retransmission of an admitted flow
 * and the "admit" figure would measure the retransmission path instead.
 */
#include "../../bpf/rlgate.bpf.c"

/* The last ISN given out.  Each test_run call starts again from the bytes
 * user space passed in, so the ISN cannot just be bumped in the frame: the
 * next call would repeat the previous call's flows, which the flow cache may
 * still hold, and they would take the retransmission path. */
__u32 bench_isn;

/* The TCP header of the benchmark's frame, or NULL when it is too short. */
static __always_inline struct tcphdr *bench_tcp(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tcphdr *tcp = data + sizeof(struct ethhdr) + sizeof(struct iphdr);

	return (void *)(tcp + 1) > data_end ? NULL : tcp;
}

/*
 * Gives the SYN a sequence number no earlier repetition or call has used,
 * then decides exactly as xdp_rlgate does.  Expects an untagged IPv4 frame
 * without IP options, which is what the benchmark sends; the figure includes
 * this load, add and two stores.
 */
SEC("xdp")
int xdp_bench_admit(struct xdp_md *ctx)
{
	struct tcphdr *tcp = bench_tcp(ctx);

	if (!tcp)
		return XDP_ABORTED;
	tcp->seq = bpf_htonl(++bench_isn);
	return xdp_decide(ctx);
}

/* The last source port given out by xdp_bench_flood. */
__u16 bench_port;

/*
 * A flood's SYN: a new source port as well as a new ISN each time, so that
 * every repetition is a 4-tuple no earlier one had and probes the flow
 * cache at a slot of its own, spread over the whole cache as a spoofed
 * flood's are (a new ISN alone keeps the 4-tuple, and so the slot, which
 * then stays in the nearest cache).  Then decides exactly as xdp_rlgate.
 */
SEC("xdp")
int xdp_bench_flood(struct xdp_md *ctx)
{
	struct tcphdr *tcp = bench_tcp(ctx);

	if (!tcp)
		return XDP_ABORTED;
	tcp->source = bpf_htons(++bench_port);
	tcp->seq = bpf_htonl(++bench_isn);
	return xdp_decide(ctx);
}

/* Reference costs, for reading the figures above: one read of the precise
 * clock, and one compare-and-swap on a cache line this CPU owns - the least
 * that taking a shared token costs.  Each is measured the way the floor is:
 * the figure includes test_run's own loop. */
__u64 bench_word;

SEC("xdp")
int xdp_ref_ktime(struct xdp_md *ctx)
{
	bench_word = bpf_ktime_get_ns();
	return XDP_PASS;
}

SEC("xdp")
int xdp_ref_cas(struct xdp_md *ctx)
{
	__u64 old = bench_word;

	__sync_val_compare_and_swap(&bench_word, old, old + 1);
	return XDP_PASS;
}

/*
 * The least an admitted SYN can cost: parse the frame, one walk of the
 * classifier, one read of the coarse clock, one compare-and-swap on the
 * tenant's shared word, one write of a flow-cache slot.  No statistics, no
 * retransmission check, no caps, no events.  The ISN is bumped as in
 * xdp_bench_admit so that every repetition writes the slot of a new flow.
 */
SEC("xdp")
int xdp_ref_irreducible(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tcphdr *tcp = data + sizeof(struct ethhdr) + sizeof(struct iphdr);
	struct rl_flow_slot *slot;
	struct rl_tenant *t;
	struct syn_info si;
	__u64 now, old;
	__u32 key;
	int id;

	if ((void *)(tcp + 1) > data_end)
		return XDP_ABORTED;
	tcp->seq = bpf_htonl(++bench_isn);
	if (parse_packet(data, data_end, &si) != P_SYN)
		return XDP_ABORTED;
	id = classify(&si);
	if (id < 0)
		return XDP_ABORTED;
	key = id;
	t = bpf_map_lookup_elem(&tenants, &key);
	if (!t)
		return XDP_ABORTED;
	now = bpf_ktime_get_coarse_ns();
	old = READ_ONCE(t->tat);
	__sync_val_compare_and_swap(&t->tat, old, old + 1);
	key = rl_flow_hash(&si.flow, flow_bits);
	slot = bpf_map_lookup_elem(&flow_cache_cpu, &key);
	if (slot)
		flow_remember(slot, &si.flow, now);
	return XDP_PASS;
}

/*
 * Sources for xdp_bench_spread: bench_srcs_per_family IPv4 addresses (in
 * the first 4 bytes of an entry), then as many IPv6 ones, in the order a
 * run takes them.  The loader sizes the map and sets the count (a power of
 * two) and writes it through mmap; the other figures never read it.
 */
const volatile __u32 bench_srcs_per_family = 1;

struct bench_src {
	__u8 a[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct bench_src);
} bench_srcs SEC(".maps");

__u32 bench_src_next;

/* Gives the frame the next source of its family (the first one over and
 * over with mask 0) and a new ISN, as xdp_bench_admit does.  Expects an
 * untagged IPv4 frame without options, or an IPv6 one without extension
 * headers.  0, or -1 when the frame is not one of those.  A function of its
 * own, not inlined: the stack of the entry point that calls it and then
 * xdp_decide() stays xdp_rlgate's, which the verifier's 512 bytes fit. */
static __noinline int bench_next_source(struct xdp_md *ctx, __u32 mask)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct bench_src *s;
	struct tcphdr *tcp;
	__u32 k = bench_src_next++ & mask;

	if ((void *)(eth + 1) > data_end)
		return -1;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		tcp = (void *)(ip + 1);
		if ((void *)(tcp + 1) > data_end)
			return -1;
		s = bpf_map_lookup_elem(&bench_srcs, &k);
		if (!s)
			return -1;
		__builtin_memcpy(&ip->saddr, s->a, 4);
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		tcp = (void *)(ip6 + 1);
		if ((void *)(tcp + 1) > data_end)
			return -1;
		k += bench_srcs_per_family;
		s = bpf_map_lookup_elem(&bench_srcs, &k);
		if (!s)
			return -1;
		__builtin_memcpy(&ip6->saddr, s->a, 16);
	}
	tcp->seq = bpf_htonl(++bench_isn);
	return 0;
}

/* A SYN from each source of the table in turn: the tenants and tables of
 * a large policy, far apart in memory. */
SEC("xdp")
int xdp_bench_spread(struct xdp_md *ctx)
{
	if (bench_next_source(ctx, bench_srcs_per_family - 1))
		return XDP_ABORTED;
	return xdp_decide(ctx);
}

/* The same work from one source: the same large policy, one hot path. */
SEC("xdp")
int xdp_bench_one_source(struct xdp_md *ctx)
{
	if (bench_next_source(ctx, 0))
		return XDP_ABORTED;
	return xdp_decide(ctx);
}

/* The classifier's share of xdp_bench_spread: the same sources, parsed and
 * classified, nothing charged or remembered.  XDP_PASS when the source has
 * a tenant. */
SEC("xdp")
int xdp_bench_classify_spread(struct xdp_md *ctx)
{
	void *data, *data_end;
	struct syn_info si;

	if (bench_next_source(ctx, bench_srcs_per_family - 1))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (parse_packet(data, data_end, &si) != P_SYN)
		return XDP_ABORTED;
	return classify(&si) >= 0 ? XDP_PASS : XDP_DROP;
}

/*
 * The SYN xdp_bench_answer answers: an IPv4 frame with timestamps, SACK
 * and window scale (BENCH_ANSWER_LEN bytes), written by user space.  The
 * answer rewrites the frame into its SYN-ACK, and test_run's repetitions
 * run on what the one before left: each starts by writing the SYN back,
 * with a source port and ISN of its own, as a forged flood's.
 */
#define BENCH_ANSWER_LEN	74
__u8 bench_answer_syn[BENCH_ANSWER_LEN];

static __noinline int bench_answer_restore(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int delta = BENCH_ANSWER_LEN - (int)(data_end - data);
	struct tcphdr *tcp;

	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + BENCH_ANSWER_LEN > data_end)
		return -1;
	__builtin_memcpy(data, bench_answer_syn, BENCH_ANSWER_LEN);
	tcp = data + sizeof(struct ethhdr) + sizeof(struct iphdr);
	tcp->source = bpf_htons(++bench_port);
	tcp->seq = bpf_htonl(++bench_isn);
	return 0;
}

/* A verifying tenant's SYN answered with a cookie SYN-ACK, as xdp_rlgate
 * does it (XDP_TX), the restore included. */
SEC("xdp")
int xdp_bench_answer(struct xdp_md *ctx)
{
	if (bench_answer_restore(ctx))
		return XDP_ABORTED;
	return xdp_decide(ctx);
}

/* The restore alone: what xdp_bench_answer's figure holds beyond the
 * answer. */
SEC("xdp")
int xdp_bench_answer_restore(struct xdp_md *ctx)
{
	if (bench_answer_restore(ctx))
		return XDP_ABORTED;
	return XDP_TX;
}
