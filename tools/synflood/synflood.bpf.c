// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* synflood's XDP sender: run by BPF_PROG_RUN in live-frame mode on one
 * template SYN, it gives each frame the next source of the prefix, a port and
 * a sequence number of its own, fixes both checksums incrementally, and
 * redirects it out of the given interface, whose veth peer receives it as an
 * XDP frame (ndo_xdp_xmit) the way a NIC's driver hands its ring's pages to
 * XDP: no socket buffer is built unless the receiver passes the frame. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Set by synflood before the load (host order). */
const volatile __u32 src_base;
const volatile __u32 src_hosts = 1;
const volatile __u32 out_ifindex;

/* The frames built so far and the sequence numbers' generator.  BPF_PROG_RUN
 * runs the program on one CPU at a time with migration off: plain updates. */
__u64 built;
__u32 rnd = 0x2545f491;

/* RFC 1624: a 16-bit word of a ones'-complement sum changes from old to new,
 * HC' = ~(~HC + ~m + m').  The sum is indifferent to byte order, so the
 * words are taken as they lie in memory. */
static __always_inline void csum_replace2(__u16 *sum, __u16 old, __u16 new)
{
	__u32 c = (__u16)~*sum;

	c += (__u16)~old;
	c += new;
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	*sum = (__u16)~c;
}

static __always_inline void csum_replace4(__u16 *sum, __u32 old, __u32 new)
{
	csum_replace2(sum, (__u16)old, (__u16)new);
	csum_replace2(sum, (__u16)(old >> 16), (__u16)(new >> 16));
}

SEC("xdp")
int xdp_flood(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip = data + sizeof(struct ethhdr);
	struct tcphdr *tcp = (void *)(ip + 1);
	__u64 n = built++;
	__u32 saddr, seq;
	__u16 sport;

	if ((void *)(tcp + 1) > end)
		return XDP_ABORTED;
	rnd ^= rnd << 13;
	rnd ^= rnd >> 17;
	rnd ^= rnd << 5;
	saddr = bpf_htonl(src_base + (__u32)(n % src_hosts));
	sport = bpf_htons(1024 + (__u16)((n / src_hosts) % 64000));
	seq = bpf_htonl(rnd);
	/* the source address is in the TCP checksum's pseudo-header too */
	csum_replace4(&ip->check, ip->saddr, saddr);
	csum_replace4(&tcp->check, ip->saddr, saddr);
	csum_replace2(&tcp->check, tcp->source, sport);
	csum_replace4(&tcp->check, tcp->seq, seq);
	ip->saddr = saddr;
	tcp->source = sport;
	tcp->seq = seq;
	return bpf_redirect(out_ifindex, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
