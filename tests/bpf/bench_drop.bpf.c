// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Drops every frame: the floor of the peer benchmark's SYN flood, what any
 * XDP program costs on the lab's veth before it does any work of its own
 * (tools/bench-peers.sh). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_drop_all(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
