// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A lossy path for the end-to-end tests: a tc ingress program that drops
 * every second TCP SYN without ACK (IPv4 without options, or IPv6 without
 * extension headers) and passes everything else.  Attached behind rlgate's
 * XDP program, it loses SYNs that rlgate has already judged, the same way
 * every time, so that the client's kernel retransmits them. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} syns_seen SEC(".maps");

SEC("tc")
int drop_alternate_syn(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct tcphdr *tcp;
	__u32 key = 0;
	__u64 *n;

	if ((void *)(eth + 1) > end)
		return TC_ACT_OK;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);

		if ((void *)(ip + 1) > end || ip->ihl != 5 ||
		    ip->protocol != IPPROTO_TCP)
			return TC_ACT_OK;
		tcp = (void *)(ip + 1);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);

		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_TCP)
			return TC_ACT_OK;
		tcp = (void *)(ip6 + 1);
	} else {
		return TC_ACT_OK;
	}
	if ((void *)(tcp + 1) > end || !tcp->syn || tcp->ack)
		return TC_ACT_OK;
	n = bpf_map_lookup_elem(&syns_seen, &key);
	if (!n)
		return TC_ACT_OK;
	return __sync_fetch_and_add(n, 1) & 1 ? TC_ACT_SHOT : TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
