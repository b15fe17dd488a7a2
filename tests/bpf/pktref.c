// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The packet fuzzer's reference parser.  For one Ethernet frame it answers
 * one question: could this frame, alone or as a piece of a datagram the
 * sender completes with other frames, make the Linux stack open a TCP
 * connection?  Each rule below says which part of Linux's receive path it
 * follows (net/ethernet, net/8021q, net/ipv4/ip_input.c and ip_fragment.c,
 * net/ipv6/ip6_input.c, exthdrs.c and reassembly.c, tcp_ipv4.c/tcp_ipv6.c).
 *
 * Where following Linux exactly would take more than the frame holds, the
 * reference errs towards "may open": such a frame must then be decided by a
 * tenant's bucket, which is stricter for rlgate, never looser.  "Harmless"
 * is only ever said of a frame Linux provably cannot turn into a new
 * connection.
 */
#include <string.h>

#include "pkt.h"
#include "pktref.h"
#include "rlgate.h"

#define IPPROTO_HOPOPTS_	0
#define IPPROTO_TCP_		6
#define IPPROTO_UDP_		17
#define IPPROTO_ROUTING_	43
#define IPPROTO_FRAGMENT_	44
#define IPPROTO_AH_		51
#define IPPROTO_ICMPV6_		58
#define IPPROTO_DSTOPTS_	60
#define IPPROTO_ICMP_		1

#define F_SYN	0x02
#define F_ACK	0x10

static __u16 be16(const __u8 *p)
{
	return (__u16)(p[0] << 8 | p[1]);
}

static __u32 be32(const __u8 *p)
{
	return (__u32)p[0] << 24 | (__u32)p[1] << 16 | (__u32)p[2] << 8 | p[3];
}

/* The ports, when the first 4 bytes of TCP are in the packet. */
static void read_ports(struct ref *r, const __u8 *seg, size_t seglen)
{
	if (seglen < 4)
		return;
	r->have_ports = true;
	r->sport = be16(seg);
	r->dport = be16(seg + 2);
}

static void decide(struct ref *r, enum ref_kind k, const char *why)
{
	r->kind = k;
	r->why = why;
}

/* The TCP flags byte says whether this can start a connection: Linux's
 * listener (tcp_rcv_state_process in TCP_LISTEN) answers a segment with ACK
 * by a reset and ignores one without SYN; only SYN without ACK reaches
 * conn_request.  (It also discards SYN|RST; the reference does not count on
 * that and calls every SYN without ACK a possible opening.) */
static void judge_flags(struct ref *r, const __u8 *seg, const char *what)
{
	__u8 flags = seg[13];

	r->have_flags = true;
	r->flags = flags;
	r->have_isn = true;
	r->isn = be32(seg + 4);
	if (!(flags & F_SYN) || (flags & F_ACK))
		decide(r, REF_NOT_SYN, "TCP flags are not SYN without ACK");
	else
		decide(r, REF_MAY_OPEN, what);
}

/* An unfragmented TCP segment of seglen bytes at seg: tcp_v4_rcv and
 * tcp_v6_rcv drop it unless the 20-byte header is there (pskb_may_pull),
 * doff is at least 5 and the doff*4 bytes of header and options are all
 * inside the packet. */
static void judge_whole_tcp(struct ref *r, const __u8 *seg, size_t seglen)
{
	size_t doff;

	read_ports(r, seg, seglen);
	if (seglen < 20) {
		decide(r, REF_DROPPED, "TCP header cut short (tcp_v*_rcv drops it)");
		return;
	}
	doff = (seg[12] >> 4) * 4;
	if (doff < 20) {
		decide(r, REF_DROPPED, "TCP doff below 5 (tcp_v*_rcv drops it)");
		return;
	}
	if (doff > seglen) {
		decide(r, REF_DROPPED, "TCP options past the packet's end "
		       "(tcp_v*_rcv drops it)");
		return;
	}
	judge_flags(r, seg, "a whole SYN");
	if (r->kind == REF_MAY_OPEN) {
		r->syn = true;
		r->seg_data = seglen - doff;
	}
}

/*
 * IPv4 (ip_rcv_core, then ip_local_deliver and ip_defrag).  n is what the
 * frame holds from the IP header on, Ethernet padding included.
 */
static void judge_ipv4(struct ref *r, const __u8 *ip, size_t n)
{
	size_t ihl, tot, seglen, kept;
	__u16 fo, off8;
	const __u8 *seg;

	r->family = 4;
	/* pskb_may_pull(skb, sizeof(struct iphdr)) */
	if (n < 20) {
		decide(r, REF_DROPPED, "IPv4 header cut short");
		return;
	}
	r->have_src = true;
	memcpy(r->src, ip + 12, 4);
	memcpy(r->dst, ip + 16, 4);
	ihl = (ip[0] & 15) * 4;
	/* "if (iph->ihl < 5 || iph->version != 4) goto inhdr_error" */
	if ((ip[0] >> 4) != 4) {
		decide(r, REF_DROPPED, "IPv4 version is not 4");
		return;
	}
	if (ihl < 20) {
		decide(r, REF_DROPPED, "IPv4 ihl below 5");
		return;
	}
	if (ihl > n) {
		decide(r, REF_DROPPED, "IPv4 options past the frame's end");
		return;
	}
	/* ip_fast_csum() is checked on every packet, offload or not. */
	if (csum_fold16(csum_add(0, ip, ihl)) != 0) {
		decide(r, REF_DROPPED, "IPv4 header checksum is wrong");
		return;
	}
	/* "if (skb->len < len) goto drop; else if (len < (iph->ihl*4))
	 * goto inhdr_error", then the packet is trimmed to tot_len. */
	/* Known from here on, even if Linux drops the packet below. */
	r->fragment = (be16(ip + 6) & 0x3fff) != 0;
	tot = be16(ip + 2);
	if (tot > n) {
		decide(r, REF_DROPPED, "IPv4 total length past the frame's end");
		return;
	}
	if (tot < ihl) {
		decide(r, REF_DROPPED, "IPv4 total length below the header");
		return;
	}
	/* Fragments are reassembled per (saddr, daddr, id, protocol): a
	 * piece that does not say TCP never becomes part of a TCP segment. */
	if (ip[9] != IPPROTO_TCP_) {
		r->plain = !(be16(ip + 6) & 0xbfff) &&
			   ((ip[9] == IPPROTO_UDP_ && tot - ihl >= 8) ||
			    (ip[9] == IPPROTO_ICMP_ && tot - ihl >= 8));
		decide(r, REF_NOT_TCP, "IPv4 protocol is not TCP");
		return;
	}
	seg = ip + ihl;
	seglen = tot - ihl;
	fo = be16(ip + 6);
	off8 = (fo & 0x1fff) * 8;	/* the reserved bit 0x8000 and DF
					 * change nothing on receipt */

	if (off8) {
		/*
		 * Since 4.19 (CVE-2018-5391) Linux drops a whole datagram
		 * when two of its fragments overlap, so the TCP flags (byte
		 * 13) come from exactly one fragment: the first, or one at
		 * offset 8.  rlgate's contract goes further and decides every
		 * fragment that overlaps the 20-byte TCP header (offset 8 or
		 * 16); from 24 bytes on, a fragment holds nothing of the
		 * header, and without a first fragment that was itself
		 * decided nothing reassembles.
		 */
		if (off8 >= 24)
			decide(r, REF_LATE_FRAGMENT, "IPv4 fragment at offset "
			       ">= 24 bytes");
		else
			decide(r, REF_MAY_OPEN, "IPv4 fragment at offset 8 or "
			       "16 carries TCP header bytes");
		return;
	}
	if (fo & 0x2000) {
		/*
		 * A first fragment (MF, offset 0).  ip_frag_queue() keeps
		 * only whole 8-byte units of a fragment that is not the last
		 * ("end &= ~7"): bytes past them are discarded and may be
		 * supplied again by a fragment at offset 8.  So the flags
		 * are this fragment's only if they lie inside the kept part.
		 */
		read_ports(r, seg, seglen);
		kept = seglen & ~(size_t)7;
		if (kept < 14) {
			decide(r, REF_MAY_OPEN, "IPv4 first fragment whose TCP "
			       "flags lie past the bytes Linux keeps");
			return;
		}
		judge_flags(r, seg, "IPv4 first fragment of a SYN");
		return;
	}
	judge_whole_tcp(r, seg, seglen);
	r->plain = !(fo & 0xbfff) && r->kind == REF_NOT_SYN;
}

/*
 * IPv6 (ipv6_rcv, ip6_protocol_deliver_rcu and the extension header
 * handlers).  Linux sets no limit on the number of extension headers: the
 * chain is walked for as long as the packet holds it, in any order, each
 * type as often as it comes.  The reference does the same, and walks
 * hop-by-hop options wherever they stand (Linux accepts them only first:
 * treating them as walkable is the stricter choice).
 */
static void judge_ipv6(struct ref *r, const __u8 *ip6, size_t n)
{
	size_t end, p = 40, hl, seglen;
	bool first_frag = false;
	int ext = 0;
	__u8 nh;

	r->family = 6;
	if (n < 40) {
		decide(r, REF_DROPPED, "IPv6 header cut short");
		return;
	}
	r->have_src = true;
	memcpy(r->src, ip6 + 8, 16);
	memcpy(r->dst, ip6 + 24, 16);
	if ((ip6[0] >> 4) != 6) {
		decide(r, REF_DROPPED, "IPv6 version is not 6");
		return;
	}
	nh = ip6[6];
	end = 40 + (size_t)be16(ip6 + 4);
	/* payload_len 0 behind a hop-by-hop header is how a jumbogram
	 * looks: ipv6_rcv() does not trim it then.  Taking the whole frame
	 * as the packet is the stricter reading. */
	if (end == 40 && nh == IPPROTO_HOPOPTS_)
		end = n;
	if (end > n) {
		decide(r, REF_DROPPED, "IPv6 payload length past the frame's end");
		return;
	}

	for (;;) {
		switch (nh) {
		case IPPROTO_TCP_:
			goto tcp;
		case IPPROTO_HOPOPTS_:
		case IPPROTO_ROUTING_:
		case IPPROTO_DSTOPTS_:
		case IPPROTO_AH_:
			/* Each handler pulls the 2 bytes of next header and
			 * length, then the whole header (8-byte units; AH
			 * in 4-byte units, plus 2). */
			if (p + 2 > end) {
				decide(r, REF_DROPPED, "IPv6 extension header "
				       "past the packet's end");
				return;
			}
			hl = nh == IPPROTO_AH_ ? ((size_t)ip6[p + 1] + 2) * 4 :
						  ((size_t)ip6[p + 1] + 1) * 8;
			if (p + hl > end) {
				decide(r, REF_DROPPED, "IPv6 extension header "
				       "past the packet's end");
				return;
			}
			nh = ip6[p];
			p += hl;
			ext++;
			break;
		case IPPROTO_FRAGMENT_:
			if (p + 8 > end) {
				decide(r, REF_DROPPED, "IPv6 fragment header "
				       "past the packet's end");
				return;
			}
			ext++;
			if (be16(ip6 + p + 2) & 0xfff8) {
				/* RFC 8200 and Linux (ipv6frag_thdr_truncated)
				 * make the first fragment hold the whole
				 * chain and the TCP header, and overlaps drop
				 * the datagram (RFC 5722): a later fragment
				 * cannot change the flags.  The contract still
				 * decides those overlapping the TCP header,
				 * like IPv4's. */
				r->fragment = true;
				if ((be16(ip6 + p + 2) & 0xfff8) >= 24)
					decide(r, REF_LATE_FRAGMENT, "IPv6 "
					       "fragment at offset >= 24 bytes");
				else
					decide(r, REF_MAY_OPEN, "IPv6 fragment "
					       "at offset 8 or 16 carries TCP "
					       "header bytes");
				return;
			}
			/* Offset 0 with M set: a first fragment.  Offset 0
			 * without M: an atomic fragment, which ipv6_frag_rcv
			 * passes on as it is (RFC 6946). */
			if (ip6[p + 3] & 1) {
				first_frag = true;
				r->fragment = true;
			}
			nh = ip6[p];
			p += 8;
			break;
		default:
			/* No next header (59), ESP, UDP, ICMPv6, anything
			 * else: not a TCP segment. */
			r->plain = ext == 0 && end > 40 &&
				   ((nh == IPPROTO_UDP_ && end - p >= 8) ||
				    (nh == IPPROTO_ICMPV6_ && end - p >= 4));
			decide(r, REF_NOT_TCP, "IPv6 upper layer is not TCP");
			return;
		}
	}
tcp:
	seglen = end - p;
	if (!first_frag) {
		judge_whole_tcp(r, ip6 + p, seglen);
		r->plain = ext == 0 && end > 40 && r->kind == REF_NOT_SYN;
		return;
	}
	/* The first fragment must hold the whole chain and the TCP header
	 * (ipv6frag_thdr_truncated: offset + sizeof(struct tcphdr) <=
	 * skb->len) or ipv6_frag_rcv drops it. */
	read_ports(r, ip6 + p, seglen);
	if (seglen < 20) {
		decide(r, REF_DROPPED, "IPv6 first fragment without the whole "
		       "TCP header (RFC 8200: discarded)");
		return;
	}
	judge_flags(r, ip6 + p, "IPv6 first fragment of a SYN");
}

void ref_judge(const __u8 *f, size_t len, struct ref *r)
{
	size_t type_off = 12;
	__u16 type;

	memset(r, 0, sizeof(*r));
	if (len < 14) {
		decide(r, REF_NOT_IP, "shorter than an Ethernet header");
		return;
	}
	/* 802.1Q and 802.1ad tags, in either order: Linux strips one per
	 * VLAN device (vlan_do_receive), as deep as devices are stacked.
	 * rlgate walks RL_VLAN_MAX; a frame with more is refused whatever
	 * it carries. */
	type = be16(f + type_off);
	while (type == 0x8100 || type == 0x88a8) {
		if (r->vlans == RL_VLAN_MAX) {
			decide(r, REF_DEEP_VLAN, "more than RL_VLAN_MAX VLAN tags");
			return;
		}
		if (type_off + 6 > len) {
			decide(r, REF_NOT_IP, "cut inside a VLAN tag");
			return;
		}
		type_off += 4;
		r->vlans++;
		type = be16(f + type_off);
	}
	r->l3_off = type_off + 2;
	if (type == 0x0800)
		judge_ipv4(r, f + r->l3_off, len - r->l3_off);
	else if (type == 0x86dd)
		judge_ipv6(r, f + r->l3_off, len - r->l3_off);
	else
		decide(r, REF_NOT_IP, "ethertype is neither IPv4 nor IPv6");
}

const char *ref_kind_name(enum ref_kind k)
{
	static const char *names[] = {
		[REF_NOT_IP] = "not IP",
		[REF_DEEP_VLAN] = "too many VLAN tags",
		[REF_DROPPED] = "dropped by Linux",
		[REF_NOT_TCP] = "not TCP",
		[REF_LATE_FRAGMENT] = "late fragment",
		[REF_NOT_SYN] = "not a SYN",
		[REF_MAY_OPEN] = "may open a connection",
	};

	return k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}
