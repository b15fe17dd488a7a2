// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The kernel's SYN cookie for a SYN, as the server's kernel would answer it
 * (same helper, same secret): written over the SYN's acknowledgement field,
 * so that a test can build the client's ACK that returns it.  Frames without
 * VLAN tags, IP options, extension headers or TCP options.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

SEC("xdp")
int xdp_cookie(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct tcphdr *th;
	__s64 c;

	if ((void *)(eth + 1) > data_end)
		return XDP_ABORTED;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		th = (void *)(ip + 1);
		if ((void *)(th + 1) > data_end)
			return XDP_ABORTED;
		c = bpf_tcp_raw_gen_syncookie_ipv4(ip, th, sizeof(*th));
	} else {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		th = (void *)(ip6 + 1);
		if ((void *)(th + 1) > data_end)
			return XDP_ABORTED;
		c = bpf_tcp_raw_gen_syncookie_ipv6(ip6, th, sizeof(*th));
	}
	if (c < 0)
		return XDP_ABORTED;
	th->ack_seq = bpf_htonl((__u32)c);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
