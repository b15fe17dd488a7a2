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

/*
 * Gives the SYN a sequence number no earlier repetition or call has used,
 * then decides exactly as xdp_rlgate does.  Expects an untagged IPv4 frame
 * without IP options, which is what the benchmark sends; the figure includes
 * this load, add and two stores.
 */
SEC("xdp")
int xdp_bench_admit(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct tcphdr *tcp = data + sizeof(struct ethhdr) + sizeof(struct iphdr);

	if ((void *)(tcp + 1) > data_end)
		return XDP_ABORTED;
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
