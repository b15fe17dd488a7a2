// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* rlgate's enforcement point: admits or refuses every new TCP connection
 * (a SYN without ACK) per tenant, at XDP or tc ingress, and sees the
 * connections of capped tenants end (tc egress for the server's side).
 * Everything that is not a SYN leaves after the fewest checks we can manage.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include <stdbool.h>

#include "rlgate.h"

/* Set by the loader between open and load. */
const volatile __u64 retrans_window_ns = RL_DEFAULT_RETRANS_WINDOW_NS;
/* The least time between an admitted SYN and its first free repeat,
 * doubling for the next (see RL_FLOW_MAX_REPEATS). */
const volatile __u64 retrans_gap_ns = RL_DEFAULT_RETRANS_GAP_NS;
/* Free repeats per admitted SYN. */
const volatile __u32 retrans_max_repeats = RL_FLOW_MAX_REPEATS;
/* Groups per half of `cls`, whose max_entries the loader sets to twice it. */
const volatile __u32 cls_half = RL_CLS_GROUPS;
/* log2 of `flow_cache_cpu`'s slots, whose max_entries the loader sets to
 * match (rl_flow_bits()). */
const volatile __u32 flow_bits = RL_FLOW_BITS;

/* Tenants with RL_F_VERIFY, as the agent last wrote it (it writes it before
 * it attaches this program): while none, an ACK leaves after its flags as
 * before, with nothing else read.  Not a pinned map: the agent that loads a
 * program sets it anew from its policy. */
__u32 verify_tenants;

/* 1 while the instance has a cap (conn_ctl.instance), as the agent last
 * wrote it, before it attaches this program: ACKs are read then too, for
 * connections take the instance's place where their handshakes complete
 * (judge_inst_ack()).  Not pinned, as verify_tenants. */
__u32 inst_capped;

/* RL_COOKIE_*: what a SYN-ACK answered here (RL_F_ANSWER) offers, as the
 * agent last read the server's sysctls. */
__u32 cookie_opts;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RL_MAX_TENANTS);
	__type(key, __u32);
	__type(value, struct rl_tenant);
} tenants SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RL_MAX_TENANTS);
	__type(key, __u32);
	__type(value, struct rl_stats);
} tenant_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RL_CNT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* The compiled classifier (see rlgate.h): 2 x 8 MiB by default, written
 * through mmap by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 2 * RL_CLS_GROUPS);
	__type(key, __u32);
	__type(value, struct rl_cls_group);
} cls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rl_cls_state);
} cls_state SEC(".maps");

/* Never read by the program.  Updating a map-in-map waits until every
 * program that could still hold the old value has returned (an RCU grace
 * period): after switching `cls_state.active`, user space updates this one
 * to learn that no walk of the old half is left. */
struct cls_sync_inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct cls_sync_inner);
} cls_sync SEC(".maps");

/* Direct-mapped rather than an LRU hash: an LRU insert (locking, eviction,
 * a 48-byte jhash) cost hundreds of ns per admitted SYN; a slot here is one
 * multiply-hash and one cache line, on this CPU only (see rlgate.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1u << RL_FLOW_BITS);
	__type(key, __u32);
	__type(value, struct rl_flow_slot);
} flow_cache_cpu SEC(".maps");

/* The slots' tags (see struct rl_flow_tags), RL_FLOW_TAG_LINE slots' to an
 * entry; the loader sizes it to match flow_cache_cpu.  Not pinned: a
 * program starts with every tag 0, unknown, and learns each from its slot
 * the first time a packet looks there. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (1u << RL_FLOW_BITS) / RL_FLOW_TAG_LINE);
	__type(key, __u32);
	__type(value, struct rl_flow_tags);
} flow_tags_cpu SEC(".maps");

/* The ends of flows, for every CPU to see (see flow_end()): a word per
 * place (see RL_FLOW_END_BITS).  The program's own global data, read and
 * written in place, with no lookup: a program starts with no end marked,
 * so an end judged on another CPU in the last seconds before the agent
 * replaced its program is forgotten, and a copy of that flow on the CPU
 * that admitted it can pass free once more. */
__u64 flow_ends[1u << RL_FLOW_END_BITS];

/* The coarse clock as this CPU last read it, and the tick (jiffies) it read
 * it in: see tick_now(). */
struct rl_tick_clock {
	__u64 jiffies;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rl_tick_clock);
} clock_cpu SEC(".maps");

/* Never read by the program: the layout version of these maps, for the
 * next agent that finds them pinned (see RL_ABI_VERSION). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rl_abi);
} abi SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, RL_EVENTS_BYTES);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rl_agent_state);
} agent_state SEC(".maps");

/* Connections in flight of capped tenants (see RL_CONNS_MAX).  A plain
 * hash, preallocated: an LRU would evict counted connections, and an insert
 * in the packet path should never wait for memory. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RL_CONNS_MAX);
	__type(key, struct rl_flow);
	__type(value, struct rl_conn);
} conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RL_MAX_TENANTS);
	__type(key, __u32);
	__type(value, struct rl_conn_stats);
} conn_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rl_conn_ctl);
} conn_ctl SEC(".maps");

/* The host-wide instance limit (see rl_conn_ctl). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rl_tenant);
} instance SEC(".maps");

/* Per-source limits (see RL_F_PERSOURCE): the buckets, preallocated, with
 * max_entries set by the loader (--per-source-table). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RL_SRC_TABLE);
	__type(key, struct rl_src_key);
	__type(value, struct rl_src);
} sources SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RL_MAX_TENANTS);
	__type(key, __u32);
	__type(value, struct rl_src_conf);
} src_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RL_MAX_TENANTS);
	__type(key, __u32);
	__type(value, struct rl_src_stats);
} src_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rl_src_ctl);
} src_ctl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, RL_SRC_TOP);
	__type(key, __u32);
	__type(value, struct rl_src_top);
} src_top SEC(".maps");

/* V_LOOKUP: judge_open() needs the server's socket table (si->sk) and has
 * changed nothing but si's classification; the entry point, which alone
 * may call the lookup helper, fills si->sk in and calls it again. */
enum verdict { V_PASS, V_DROP, V_RST, V_LOOKUP, V_COOKIE };

#ifndef READ_ONCE
#define READ_ONCE(x)		(*(volatile typeof(x) *)&(x))
#define WRITE_ONCE(x, v)	(*(volatile typeof(x) *)&(x) = (v))
#endif

static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

#define ETH_P_8021Q_BE	bpf_htons(0x8100)
#define ETH_P_8021AD_BE	bpf_htons(0x88A8)
#define ETH_P_IP_BE	bpf_htons(0x0800)
#define ETH_P_IPV6_BE	bpf_htons(0x86DD)

struct vlan_hdr {
	__be16 tci;
	__be16 proto;
};

struct ipv6_frag_hdr {
	__u8 nexthdr;
	__u8 reserved;
	__be16 frag_off;	/* offset in the top 13 bits, M in bit 0 */
	__be32 id;
};

/*
 * What parsing leaves behind for the decision: plain values only, no
 * pointer into the packet.  The decision is in separate BPF functions
 * (judge_open(), judge()) that the verifier checks once, whatever way the
 * parser took; with pointers it would walk the whole decision again for
 * every shape of header chain.  Only the common SYN is decided inline
 * (judge_syn()), at the price of that walk for its short path.  The flow
 * key comes first and 8-byte aligned, so it is read as whole words.
 */
struct syn_info {
	struct rl_flow flow;	/* addresses, ports, ISN, family */
	__u32 kind;		/* enum parse */
	__u32 l3_off;		/* offset of the IP header */
	__u32 seg_len;		/* SYN (1) + TCP payload, for the RST's ack */
	__u32 tenant;		/* set by the decision for a V_RST */
	__u8 has_port;		/* flow.sport and flow.dport were readable */
	__u8 fragment;		/* part of a fragmented datagram: never a RST */
	__u8 tcp_flags;		/* P_SYN, P_END, P_ACK: the TCP flags byte */
	__u8 classified;	/* cls holds classify()'s answer */
	__u8 sk;		/* enum sk_seen: the server's socket table */
	__u8 srv_end;		/* enum srv_end: sk_seen()'s answer to server_ends() */
	__be32 ack_seq;		/* P_ACK: the acknowledgement number */
	__s32 cls;		/* set by judge_syn() when it passes the SYN
				 * on to judge_open(), which then need not
				 * walk the classifier again */
};

/*
 * What the server's socket table holds for a packet's 4-tuple, as the
 * entry point looked it up (sk_seen()) for a decision that needs it: a
 * handshake ACK of a verifying tenant, a client's RST or FIN.  The table
 * is the truth of what the server's kernel will do with the packet: a
 * segment that meets a socket of its own never goes through the cookie
 * check, and one that meets a request socket completes that socket's
 * handshake, cookie or none.
 */
enum sk_seen {
	SK_UNKNOWN,	/* not looked up */
	SK_NOTHING,	/* no socket at all: no server listens on this host */
	SK_LISTEN,	/* only a listener: a cookie's ACK opens a connection */
	SK_OPEN,	/* a full socket or TIME_WAIT of the 4-tuple */
	SK_REQ,		/* a request socket whose handshake this ACK completes */
	SK_REQ_OTHER,	/* a request socket, other numbers: opens nothing */
};

/* Whether the server's stack ends the connection at a RST or FIN, as the
 * lookup of sk_seen() found it, so that server_ends() need not look the
 * socket up again: one lookup a segment. */
enum srv_end {
	SRV_END_UNKNOWN,	/* not looked up, or not a RST or FIN */
	SRV_END_NO,
	SRV_END_YES,
};

/* What the parser reads from the TCP header once it knows the packet is
 * worth a decision: written whole (suspect(), parse_tcp() past the flag
 * test), never for P_OTHER, the path of almost every packet. */
struct l4_info {
	__be16 sport;
	__be16 dport;
	__be32 isn;
	__u32 seg_len;
	__u32 tcp_flags;
	__u8 has_port;
	__u8 fragment;
	__u8 _pad[2];
	__be32 ack_seq;
};

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		*c += 1;
}

#define TCP_FLAGS_OFF	13	/* the byte holding SYN and ACK */
#define TCP_FLAG_FIN	0x01
#define TCP_FLAG_SYN	0x02
#define TCP_FLAG_RST	0x04
#define TCP_FLAG_ACK	0x10

#ifndef EEXIST
#define EEXIST		17
#endif

/* The longest IPv6 header chain followed, in bytes (a chain must fit in the
 * first fragment, so no real one comes near). */
#define IPV6_CHAIN_MAX		0xfff

/*
 * Returns v with everything the verifier knew of it forgotten: it sees two
 * XORs with an unknown value and an opaque move in between, and the caller
 * masks the result back into bounds.  The IPv6 walk needs it: every chain of
 * header kinds leaves the offset with other known bits, the verifier keeps
 * those states apart, and their number doubles with every header followed.
 * Forgotten, they are one state per header.
 */
static __always_inline __u32 verifier_forget(__u32 v, __u32 noise)
{
	v ^= noise;
	asm volatile("" : "+r"(v));
	return v ^ noise;
}

/* The fragment offset, in bytes, below which a fragment overlaps the TCP
 * header (RFC 1858): only a crafted datagram has one. */
#define FRAG_OVERLAP_BYTES	24

/*
 * What a packet is to the limiter.  P_SUSPECT is what could open a
 * connection but cannot be judged - a SYN's flags left to another fragment,
 * a header chain longer than we follow, a TCP header cut short.  Passing it
 * would be a way around the limit (the stack reassembles a fragmented SYN,
 * and walks any IPv6 chain), so it is refused when its source belongs to a
 * tenant (judge_unparsed()).
 */
enum parse {
	P_OTHER,	/* cannot open a connection: passes */
	P_SYN,		/* SYN without ACK, whole header read: judged */
	P_END,		/* RST or FIN: the client ends a flow */
	P_SUSPECT,	/* might open a connection, cannot be judged */
	P_SHORT,	/* the IP header itself is cut short: the stack drops it */
	P_ACK,		/* an ACK while some tenant verifies or the instance
			 * has a cap: it may complete a handshake whose SYN
			 * passed uncharged (verify_passes()) or without its
			 * instance place (judge_inst_ack()) */
	P_DEEP,		/* more than RL_VLAN_MAX VLAN tags: no IP header found,
			 * no source to classify, refused whatever it is */
};

/* A packet that might open a connection and cannot be judged; the ports
 * are kept when the first four bytes of TCP are there (the classifier may
 * need the destination port). */
static __always_inline enum parse suspect(void *tcp, __s32 l4_len,
					  void *data_end, struct l4_info *si)
{
	struct tcphdr *th = tcp;

	__builtin_memset(si, 0, sizeof(*si));
	if (tcp && l4_len >= 4 && tcp + 4 <= data_end) {
		si->sport = th->source;
		si->dport = th->dest;
		si->has_port = 1;
	}
	return P_SUSPECT;
}

/*
 * An ACK without SYN or RST (with FIN or without) while some tenant
 * verifies or the instance has a cap.  Only the fixed header is needed: the cookie lies in the
 * sequence numbers.  A
 * header length the IP length cannot hold makes a segment the stack drops,
 * one that completes nothing: P_OTHER.  seg_len is what a RST acknowledges
 * of it, the client's ISN counted (see verify_passes()).  A function of its
 * own: inlined, it let the compiler carry l4_info's unwritten fields into
 * the P_OTHER path as registers the verifier finds never written.
 */
static __noinline enum parse parse_ack(struct tcphdr *tcp,
					    struct l4_info *si, __s32 l4_len,
					    __u8 flags)
{
	__u32 hlen = tcp->doff * 4;

	if (hlen < sizeof(*tcp) || (__s32)hlen > l4_len)
		return P_OTHER;
	__builtin_memset(si, 0, sizeof(*si));
	si->sport = tcp->source;
	si->dport = tcp->dest;
	si->has_port = 1;
	si->isn = tcp->seq;
	si->ack_seq = tcp->ack_seq;
	si->tcp_flags = flags;
	/* the ISN, the data and a FIN */
	si->seg_len = 1 + l4_len - hlen + !!(flags & TCP_FLAG_FIN);
	return P_ACK;
}

/*
 * Reads the TCP header at tcp: a SYN without ACK, a RST or FIN, or anything
 * else.  A SYN is P_SYN only when its whole header, options included, lies
 * inside the frame and inside l4_len, the segment length the IP header gives;
 * a header cut short is P_SUSPECT.  Nothing is written for P_OTHER: that is
 * the path of almost every packet.  What the decision needs is copied into
 * si (see struct syn_info).
 */
static __always_inline enum parse parse_tcp(struct tcphdr *tcp, void *data_end,
					    struct l4_info *si, __s32 l4_len)
{
	__u32 hlen;
	__u8 flags;

	if ((void *)(tcp + 1) > data_end)
		return suspect(tcp, l4_len, data_end, si);
	flags = ((__u8 *)tcp)[TCP_FLAGS_OFF];
	if ((flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_SYN &&
	    !(flags & (TCP_FLAG_RST | TCP_FLAG_FIN))) {
		if ((flags & (TCP_FLAG_SYN | TCP_FLAG_ACK)) != TCP_FLAG_ACK ||
		    !(READ_ONCE(verify_tenants) | READ_ONCE(inst_capped)))
			return P_OTHER;
		return parse_ack(tcp, si, l4_len, flags);
	}
	/* a FIN with ACK may complete a handshake as well as end a flow */
	if ((flags & (TCP_FLAG_SYN | TCP_FLAG_ACK | TCP_FLAG_RST |
		      TCP_FLAG_FIN)) == (TCP_FLAG_ACK | TCP_FLAG_FIN) &&
	    (READ_ONCE(verify_tenants) | READ_ONCE(inst_capped)))
		return parse_ack(tcp, si, l4_len, flags);

	__builtin_memset(si, 0, sizeof(*si));
	si->sport = tcp->source;
	si->dport = tcp->dest;
	si->has_port = 1;
	si->isn = tcp->seq;
	si->tcp_flags = flags;
	if (!(flags & TCP_FLAG_SYN) || (flags & TCP_FLAG_ACK))
		return P_END;

	hlen = tcp->doff * 4;
	if (hlen < sizeof(*tcp) || (__s32)hlen > l4_len ||
	    (void *)tcp + hlen > data_end)
		return P_SUSPECT;
	/* A SYN may carry data (TCP Fast Open); the RST must acknowledge it. */
	si->seg_len = 1 + l4_len - hlen;
	return P_SYN;
}

/*
 * An IPv4 fragment of a TCP datagram.  A non-first fragment passes unless it
 * lands inside the TCP header; a first fragment is judged like a whole
 * packet once its TCP header is complete inside it.  (Linux drops a datagram
 * whose fragments overlap, so what the first fragment says is what the
 * server gets.)
 */
static __always_inline enum parse parse_ipv4_frag(struct iphdr *ip, __u32 ihl,
						  void *data_end,
						  struct l4_info *si)
{
	__u32 off = (bpf_ntohs(ip->frag_off) & 0x1fff) * 8;
	__s32 l4_len = (__s32)bpf_ntohs(ip->tot_len) - (__s32)ihl;
	struct tcphdr *tcp = (void *)ip + ihl;
	enum parse r;

	if (off) {
		if (off < FRAG_OVERLAP_BYTES)
			return suspect(NULL, 0, data_end, si);
		count(RL_CNT_FRAGMENT);
		return P_OTHER;
	}
	if (l4_len < (__s32)sizeof(*tcp))
		/* the flags are in another fragment (or Ethernet padding) */
		r = suspect(tcp, l4_len, data_end, si);
	else
		r = parse_tcp(tcp, data_end, si, l4_len);
	if (r != P_OTHER)
		si->fragment = 1;
	return r;
}

/* The TCP header of an IPv4 packet at l3. */
static __always_inline enum parse parse_ipv4(void *l3, void *data_end,
					     struct l4_info *si)
{
	struct iphdr *ip = l3;
	__u32 ihl;

	if ((void *)(ip + 1) > data_end)
		return P_SHORT;
	if (ip->protocol != IPPROTO_TCP)
		return P_OTHER;
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return suspect(NULL, 0, data_end, si);
	if (ip->frag_off & bpf_htons(0x3fff))	/* MF or an offset */
		return parse_ipv4_frag(ip, ihl, data_end, si);
	return parse_tcp(l3 + ihl, data_end, si,
			 (__s32)bpf_ntohs(ip->tot_len) - (__s32)ihl);
}

/*
 * The TCP header of an IPv6 packet, behind up to RL_IPV6_MAX_EXT extension
 * headers of the kinds Linux walks before TCP (hop-by-hop, routing,
 * destination options, fragment, AH), in any order and repeated - the stack
 * accepts all of those.  A longer chain, or one that runs past the frame, is
 * P_SUSPECT.  ESP and the rest end the walk: nothing TCP can be read behind
 * them here (a tunnel's inner packets are judged where they are decapsulated,
 * see docs/architecture.md).
 */
static __always_inline enum parse parse_ipv6(void *l3, void *data_end,
					     struct l4_info *si)
{
	struct ipv6hdr *ip6 = l3;
	__u32 off = 0, len, noise;	/* off: bytes of chain walked */
	bool frag = false;
	enum parse r;
	__s32 l4_len;
	void *p = ip6 + 1;
	__u8 nh;

	if ((void *)(ip6 + 1) > data_end)
		return P_SHORT;
	nh = ip6->nexthdr;
	noise = ip6->payload_len;
	if (nh == IPPROTO_TCP)
		return parse_tcp(p, data_end, si, bpf_ntohs(ip6->payload_len));

	for (int i = 0; i < RL_IPV6_MAX_EXT; i++) {
		p = (void *)(ip6 + 1) + off;
		if (nh == IPPROTO_TCP)
			break;
		if (nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING ||
		    nh == IPPROTO_DSTOPTS || nh == IPPROTO_AH) {
			struct ipv6_opt_hdr *oh = p;

			if ((void *)(oh + 1) > data_end)
				return suspect(NULL, 0, data_end, si);
			if (nh == IPPROTO_AH)
				len = (oh->hdrlen + 2) * 4;
			else
				len = (oh->hdrlen + 1) * 8;
			nh = oh->nexthdr;
		} else if (nh == IPPROTO_FRAGMENT) {
			struct ipv6_frag_hdr *fh = p;
			__u32 foff;

			if ((void *)(fh + 1) > data_end)
				return suspect(NULL, 0, data_end, si);
			foff = bpf_ntohs(fh->frag_off) & 0xfff8;
			if (foff) {
				if (foff < FRAG_OVERLAP_BYTES)
					return suspect(NULL, 0, data_end, si);
				count(RL_CNT_FRAGMENT);
				return P_OTHER;
			}
			/* offset 0 with M clear is an atomic fragment: a
			 * whole packet */
			if (fh->frag_off & bpf_htons(1))
				frag = true;
			len = sizeof(*fh);
			nh = fh->nexthdr;
		} else {
			return P_OTHER;
		}
		off += len;
		if (off > IPV6_CHAIN_MAX)
			return suspect(NULL, 0, data_end, si);
		off = verifier_forget(off, noise) & IPV6_CHAIN_MAX;
	}
	if (nh != IPPROTO_TCP)
		return suspect(NULL, 0, data_end, si);	/* a longer chain */
	p = (void *)(ip6 + 1) + off;
	l4_len = (__s32)bpf_ntohs(ip6->payload_len) - (__s32)off;
	if (frag && l4_len < (__s32)sizeof(struct tcphdr))
		/* the TCP header is not all in the first fragment */
		r = suspect(p, l4_len, data_end, si);
	else
		r = parse_tcp(p, data_end, si, l4_len);
	if (r != P_OTHER && frag)
		si->fragment = 1;
	return r;
}

/*
 * Finds the TCP header and says what the packet is to the limiter (enum
 * parse).  Bounds are checked against data_end before every read.  For
 * every result but P_OTHER and P_SHORT, si is filled in for the decision:
 * the addresses, what could be read of the TCP header, and si->kind.
 *
 * The untagged IPv4 non-SYN (the bulk of all traffic) is the path this is
 * shaped for: its ethertype is tested first, and it touches nothing but the
 * headers - si is only written once the flags (or the fragment bits) say
 * the packet needs a decision.
 */
static __always_inline enum parse parse_packet(void *data, void *data_end,
					       struct syn_info *si)
{
	struct l4_info l4;	/* written by the parser unless P_OTHER */
	enum parse r;
	void *l3;
	__be16 proto;

	l3 = data + sizeof(struct ethhdr);
	if (l3 > data_end)
		return P_OTHER;
	proto = *(__be16 *)(data + __builtin_offsetof(struct ethhdr, h_proto));

	if (proto == ETH_P_IP_BE) {
		r = parse_ipv4(l3, data_end, &l4);
	} else {
		/* Stacked tags, 802.1Q or 802.1ad in any order: Linux strips
		 * one per VLAN device, as deep as devices are stacked.  Up to
		 * RL_VLAN_MAX are walked; the offset is then forgotten, so the
		 * verifier walks the IP parsers once, not once per depth. */
		__u32 off = 0, noise = *(__u8 *)data;

#pragma unroll
		for (int i = 0; i < RL_VLAN_MAX; i++) {
			struct vlan_hdr *vh = l3 + off;

			if (proto != ETH_P_8021Q_BE && proto != ETH_P_8021AD_BE)
				break;
			if ((void *)(vh + 1) > data_end)
				return P_OTHER;
			proto = vh->proto;
			off += sizeof(*vh);
		}
		if (proto == ETH_P_8021Q_BE || proto == ETH_P_8021AD_BE)
			return P_DEEP;
		/* off <= 4 * RL_VLAN_MAX: kept by a mask of twice that */
		l3 += verifier_forget(off, noise) & (8 * RL_VLAN_MAX - 1);
		if (proto == ETH_P_IP_BE) {
			r = parse_ipv4(l3, data_end, &l4);
		} else if (proto == ETH_P_IPV6_BE) {
			r = parse_ipv6(l3, data_end, &l4);
		} else {
			return P_OTHER;
		}
	}
	if (r == P_OTHER || r == P_SHORT)
		return r;

	__builtin_memset(si, 0, sizeof(*si));
	si->flow.family = proto == ETH_P_IP_BE ? 4 : 6;
	si->flow.sport = l4.sport;
	si->flow.dport = l4.dport;
	si->flow.isn = l4.isn;
	si->has_port = l4.has_port;
	si->fragment = l4.fragment;
	si->tcp_flags = l4.tcp_flags;
	si->seg_len = l4.seg_len;
	si->ack_seq = l4.ack_seq;
	/* The fixed IP header was bounds-checked by the parser. */
	if (si->flow.family == 4) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return P_SHORT;
		__builtin_memcpy(si->flow.saddr, &ip->saddr, 4);
		__builtin_memcpy(si->flow.daddr, &ip->daddr, 4);
	} else {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return P_SHORT;
		__builtin_memcpy(si->flow.saddr, &ip6->saddr, 16);
		__builtin_memcpy(si->flow.daddr, &ip6->daddr, 16);
	}
	si->l3_off = l3 - data;
	si->kind = r;
	return r;
}

/* One entry of the classifier: an inlined array lookup and a load. */
static __always_inline __u32 cls_entry(__u32 group, __u32 idx)
{
	struct rl_cls_group *g = bpf_map_lookup_elem(&cls, &group);

	return g ? g->e[idx & (RL_CLS_FANOUT - 1)] : RL_CLS_NONE;
}

/* The classifier's entry for a packet's source address: a tenant, a port
 * row, or RL_CLS_NONE. */
static __always_inline __u32 cls_walk(const struct syn_info *si, __u32 base)
{
	__u32 e;

	const __u8 *a = si->flow.saddr;

	if (si->flow.family == 4) {
		e = cls_entry(base + RL_CLS_ROOT4 + a[0], a[1]);
		if (RL_CLS_TYPE(e) == RL_CLS_T_GROUP) {
			e = cls_entry(base + RL_CLS_VAL(e), a[2]);
			if (RL_CLS_TYPE(e) == RL_CLS_T_GROUP)
				e = cls_entry(base + RL_CLS_VAL(e), a[3]);
		}
	} else {
		e = cls_entry(base + RL_CLS_ROOT6 + a[0], a[1]);
		for (int i = 2; i < 16; i++) {
			if (RL_CLS_TYPE(e) != RL_CLS_T_GROUP)
				break;
			e = cls_entry(base + RL_CLS_VAL(e), a[i]);
		}
	}
	return e;
}

/* Entry idx of `cls`, counted from its first entry. */
static __always_inline __u32 cls_flat(__u32 idx)
{
	return cls_entry(idx >> 8, idx);
}

/*
 * A port row's answer for a port (see rlgate.h): its slot if that holds
 * the port, else the header's answer for every other port.  `first` is the
 * row's header, counted from the map's first entry.  A slot's key and
 * answer share a group (headers are at odd entries): one lookup reads both.
 */
static __always_inline __u32 cls_row(__u32 first, __u32 port)
{
	__u32 i, group;
	struct rl_cls_group *g;

	i = RL_CLS_ROW_SLOT(first, cls_flat(first), port);
	group = i >> 8;
	g = bpf_map_lookup_elem(&cls, &group);
	if (g && g->e[i & 0xfe] == port + 1)
		return g->e[(i & 0xfe) + 1];
	return RL_CLS_ROW_ANY(cls_flat(first));
}

#define CLS_NO_TENANT	(-1)	/* no rule matches */
#define CLS_SOME_TENANT	(-2)	/* rules for this source name ports, and
				 * the packet's port could not be read */

/* The tenant a packet belongs to: the longest prefix wins, and on equal
 * length a rule for this port beats an any-port rule (the compiler has
 * worked that out; this only walks).  CLS_NO_TENANT when nothing matches,
 * CLS_SOME_TENANT when only the missing port could tell. */
static __always_inline int classify(const struct syn_info *si)
{
	struct rl_cls_state *st;
	__u32 zero = 0, base, e;

	st = bpf_map_lookup_elem(&cls_state, &zero);
	if (!st)
		return CLS_NO_TENANT;
	base = (READ_ONCE(st->active) & 1) * cls_half;

	e = cls_walk(si, base);
	if (RL_CLS_TYPE(e) == RL_CLS_T_PORTS) {
		if (!si->has_port)
			return CLS_SOME_TENANT;
		e = cls_row(base * RL_CLS_FANOUT + RL_CLS_VAL(e),
			    bpf_ntohs(si->flow.dport));
	}
	return RL_CLS_TYPE(e) == RL_CLS_T_TENANT ? (int)RL_CLS_VAL(e) :
						    CLS_NO_TENANT;
}

/* A bucket in GCRA form (standalone tenants, and the static share of a
 * degraded leased one): one compare-and-swap of the theoretical arrival time
 * admits.  Lazy refill falls out of max(tat, now); the burst cap out of the
 * tolerance.  A lost race retries with the fresh value. */
static __always_inline bool take_gcra(__u64 *tatp, __u64 interval, __u64 tol,
				      __u64 now)
{
	/* now is the coarse clock; see RL_FINE_CLOCK_NS for when it won't do */
	if (tol < RL_FINE_CLOCK_NS)
		now = bpf_ktime_get_ns();
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u64 tat = READ_ONCE(*tatp);
		__u64 base = tat > now ? tat : now;
		__u64 next = base + interval;

		if (next - now > tol)
			return false;
		if (__sync_val_compare_and_swap(tatp, tat, next) == tat)
			return true;
	}
	/* Four CPUs beat us to it in a row: the bucket is hot, refuse. */
	return false;
}

/*
 * The coarse clock without a call, for the SYNs of a flood: bpf_jiffies64()
 * is a load the verifier inlines, where a helper's call costs its return -
 * with AMD's Safe RET a mispredicted one, about 10 ns, as much as the rest
 * of a refused SYN.  The coarse clock moves when the tick updates the
 * timekeeper, just after the tick advances jiffies; so this CPU keeps what
 * it read in the current tick and reads anew once jiffies moved, keeping
 * the new value only if it moved too (one read between the two updates
 * would otherwise stand for the whole tick).  At worst a tick behind
 * bpf_ktime_get_coarse_ns(), itself up to a tick behind the precise clock:
 * for what it times, a heartbeat judged in seconds and a retransmission's
 * spacing in hundreds of milliseconds.
 */
static __always_inline __u64 tick_now(void)
{
	__u32 zero = 0;
	struct rl_tick_clock *c = bpf_map_lookup_elem(&clock_cpu, &zero);
	__u64 j = bpf_jiffies64(), ns;

	if (c && c->jiffies == j)
		return c->ns;
	ns = bpf_ktime_get_coarse_ns();
	if (c && ns != c->ns) {
		c->ns = ns;
		c->jiffies = j;
	}
	return ns;
}

/* Fleet mode is degraded when the agent says so (its Redis breaker is open)
 * or has stopped saying anything (its heartbeat is stale: it died). */
static __always_inline bool fleet_degraded(__u64 now)
{
	__u32 zero = 0;
	struct rl_agent_state *a = bpf_map_lookup_elem(&agent_state, &zero);
	__u64 hb, stale;

	if (!a)
		return false;
	if (READ_ONCE(a->degraded))
		return true;
	/* One read each, the agent rewriting them while we look: stale_ns
	 * first, then the heartbeat, the other half of the agent's order
	 * (rl_agent_stamp: the heartbeat, then stale_ns with release), as the
	 * pool's readers do (rl_pool_degraded).  A stale_ns the agent has just
	 * made non-zero then comes with its heartbeat, never with the zero one
	 * of fresh pins, which would read as a dead agent.  Volatile loads
	 * keep their order in the program and the JIT, and x86 does not
	 * reorder loads with one another; a weakly ordered CPU may, and
	 * there the race is one SYN judged by the fail policy when an agent
	 * first stamps fresh pins. */
	stale = READ_ONCE(a->stale_ns);
	if (!stale)
		return false;
	hb = READ_ONCE(a->heartbeat_ns);
	return now > hb && now - hb > stale;
}

/* A leased tenant whose tokens are spent while the fleet is degraded: its
 * fail policy decides. */
static __always_inline bool take_failed(struct rl_tenant *t, struct rl_stats *st,
					__u64 now)
{
	st->degraded++;
	switch (t->fail) {
	case RL_FAIL_ALLOW:
		return true;
	case RL_FAIL_DENY:
		return false;
	default:
		return take_gcra(&t->fail_tat, t->fail_interval_ns,
				 t->fail_interval_ns * t->fail_burst, now);
	}
}

/* Leased bucket: user space adds whole tokens, the kernel spends them,
 * down to floor (0: to the last token; -overdraft: into the overdraft).
 * The count is read before anything is written: a bucket at its floor is
 * refused without a locked instruction on the tenant's line, which the
 * CPUs would otherwise pass back and forth under a flood.
 * fetch-and-add never loses or mints a token: a take that finds the floor
 * after all is put back.  While it is out, a concurrent SYN may see one
 * token fewer than there is and be refused; it is never admitted beyond the
 * floor. */
static __always_inline bool take_leased(struct rl_tenant *t, __u32 id,
					struct rl_stats *st, __u64 now,
					__s64 floor)
{
	__s64 old = READ_ONCE(t->tokens);
	__s64 left = old;

	if (old > floor) {
		old = __sync_fetch_and_add(&t->tokens, -1);
		left = old - 1;
		if (old <= floor) {
			__sync_fetch_and_add(&t->tokens, 1);
			left = old;
		}
	}
	/* Once per refill cycle: user space re-arms after adding tokens. */
	if (left <= t->lowwater && READ_ONCE(t->lowwater_armed) &&
	    __sync_val_compare_and_swap(&t->lowwater_armed, 1, 0) == 1) {
		struct rl_event *ev;

		ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
		if (ev) {
			ev->type = RL_EV_LOWWATER;
			ev->tenant = id;
			ev->tokens = left;
			ev->ts_ns = now;
			bpf_ringbuf_submit(ev, 0);
			st->lowwater_events++;
		} else {
			/* Ring full: leave it armed so the next SYN tries. */
			WRITE_ONCE(t->lowwater_armed, 1);
		}
	}
	return old > floor;
}

/* The retransmission check: struct rl_flow is six 64-bit words. */
#define FLOW_WORDS	(sizeof(struct rl_flow) / sizeof(__u64))

typedef rl_flow_word flow_word;

static __always_inline bool flow_equal(const struct rl_flow *a,
				       const struct rl_flow *b)
{
	const flow_word *x = (const flow_word *)a, *y = (const flow_word *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) |
		(x[3] ^ y[3]) | (x[4] ^ y[4]) | (x[5] ^ y[5])) == 0;
}

/* Where a flow lives on this CPU: its slot (looked up only when needed),
 * its slot's tag, and the tag it would have there. */
struct flow_at {
	struct rl_flow_slot *slot;
	__u8 *tag;
	__u32 idx;
	__u8 want;
	__u8 found;	/* idx, tag and want are set */
};

/* Finds where the flow lives, reading nothing of the slot or the tag, nor
 * even the slot's address: a percpu map finds that in a table of a pointer
 * per slot, a cache miss of its own for a new flow (flow_slot()). */
static __always_inline void flow_find(const struct rl_flow *f,
				      struct flow_at *at)
{
	__u64 h = rl_flow_mix(f);
	__u32 line;
	struct rl_flow_tags *tl;

	at->idx = h >> (64 - flow_bits);
	at->want = rl_flow_tag(h, flow_bits);
	line = at->idx / RL_FLOW_TAG_LINE;
	tl = bpf_map_lookup_elem(&flow_tags_cpu, &line);
	at->tag = tl ? &tl->tag[at->idx % RL_FLOW_TAG_LINE] : NULL;
	at->slot = NULL;
	at->found = 1;
}

/* The flow's slot: NULL when the map has none for it, or nothing was
 * found (flow_find() not called). */
static __always_inline struct rl_flow_slot *flow_slot(struct flow_at *at)
{
	__u32 idx = at->idx;

	if (!at->slot && at->found)
		at->slot = bpf_map_lookup_elem(&flow_cache_cpu, &idx);
	return at->slot;
}

/* Whether the slot may hold the flow, from its tag: a new flow's differs
 * 255 times in 256, and its slot is not looked up.  A tag still unknown
 * (0) is learned from the slot, once a slot and program (see struct
 * rl_flow_tags).  True only with at->slot set. */
static __always_inline bool flow_maybe(struct flow_at *at)
{
	struct rl_flow_slot *s;
	__u8 t;

	if (at->tag) {
		t = *at->tag;
		if (t && t != at->want)
			return false;
	}
	s = flow_slot(at);
	if (!s)
		return false;
	if (!at->tag)
		return true;
	if (!t) {
		t = rl_flow_tag(rl_flow_mix(&s->flow), flow_bits);
		*at->tag = t;
	}
	return t == at->want;
}

/* Whether two keys are the same connection: everything but the ISN. */
static __always_inline bool flow_same_conn(const struct rl_flow *a,
					   const struct rl_flow *b)
{
	const flow_word *x = (const flow_word *)a, *y = (const flow_word *)b;
	const rl_flow_half *hx = (const rl_flow_half *)a;
	const rl_flow_half *hy = (const rl_flow_half *)b;

	return ((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) |
		(x[3] ^ y[3]) | (x[5] ^ y[5]) |
		(hx[RL_FLOW_PORTS_HALF] ^ hy[RL_FLOW_PORTS_HALF])) == 0;
}

/* The word of `flow_ends` for a flow's hash. */
static __always_inline __u64 *flow_end_word(__u64 h)
{
	return &flow_ends[rl_flow_end_place(h)];
}

/* Marks the flow ended at now (see RL_FLOW_END_BITS): with its own
 * fingerprint, or with RL_FLOW_END_ANY when its place holds another flow's
 * end still young enough to matter, so that neither end is lost.  Two ends
 * marked at once on two CPUs: the one that loses the compare-and-swap
 * stores RL_FLOW_END_ANY, which stands for both.  An end that no socket of
 * this host backs (`backed` false: the server is elsewhere) never marks
 * RL_FLOW_END_ANY and never takes a place from a young end: a blind flood
 * of RSTs with made-up 4-tuples then marks only its own fingerprints, which
 * no real flow's copy matches, where it would otherwise end every flow of
 * every place it reaches. */
static __always_inline void flow_end_mark(const struct rl_flow *f, __u64 now,
					  bool backed)
{
	__u64 h = rl_flow_mix(f), old, mark, *w = flow_end_word(h);
	__u32 fp = rl_flow_end_fp(h), t = rl_flow_end_time(now), ofp;

	old = READ_ONCE(*w);
	ofp = old >> 32;
	if (ofp && ofp != fp &&
	    (__s32)(t - (__u32)old) <= (__s32)rl_flow_end_time(retrans_window_ns)) {
		if (!backed)
			return;
		fp = RL_FLOW_END_ANY;
	}
	mark = (__u64)fp << 32 | t;
	if (__sync_val_compare_and_swap(w, old, mark) != old && backed)
		WRITE_ONCE(*w, (__u64)RL_FLOW_END_ANY << 32 | t);
}

/* Whether the flow in slot s ended since the slot was last stamped, on
 * whatever CPU its end was judged.  An end in the same unit of time as the
 * stamp counts: a copy then is charged, never passed on a doubt. */
static __always_inline bool flow_ended(const struct rl_flow_slot *s)
{
	__u64 h = rl_flow_mix(&s->flow), m = READ_ONCE(*flow_end_word(h));
	__u32 fp = m >> 32;

	if (fp != rl_flow_end_fp(h) && fp != RL_FLOW_END_ANY)
		return false;
	return (__s32)((__u32)m - rl_flow_end_time(s->seen_ns)) >= 0;
}

/*
 * Whether this SYN is a free repeat of one admitted here: the same key, and
 * timed as a client's retransmission (see RL_FLOW_MAX_REPEATS).  Takes the
 * repeat if so.  A copy that fails the timing is a replay as far as the
 * limit is concerned: charged like any new SYN, and counted.  Only this CPU
 * writes the slot, and not while this runs: plain reads and writes.
 */
static __always_inline bool flow_repeat(struct rl_flow_slot *s,
					const struct rl_flow *f, __u64 now)
{
	__u32 n;
	__u64 since;

	if (!flow_equal(&s->flow, f))
		return false;
	n = s->repeats;
	/* a clock a tick behind the one that stamped the slot: too soon */
	since = now > s->seen_ns ? now - s->seen_ns : 0;
	if (n >= retrans_max_repeats || since >= retrans_window_ns ||
	    since < (retrans_gap_ns << (n & 7))) {
		count(RL_CNT_REPEAT_CHARGED);
		return false;
	}
	s->repeats = n + 1;
	s->seen_ns = now;
	return true;
}

/* Remembers an admitted SYN, overwriting whatever held its slot. */
static __always_inline void flow_remember(struct rl_flow_slot *s,
					  const struct rl_flow *f, __u64 now)
{
	const flow_word *src = (const flow_word *)f;
	flow_word *dst = (flow_word *)&s->flow;

#pragma unroll
	for (int i = 0; i < (int)FLOW_WORDS; i++)
		dst[i] = src[i];
	s->seen_ns = now;
	s->repeats = 0;
}

/* The same, and the slot's tag with it. */
static __always_inline void flow_keep(struct flow_at *at,
				      const struct rl_flow *f, __u64 now)
{
	struct rl_flow_slot *s = flow_slot(at);

	if (!s)
		return;
	flow_remember(s, f, now);
	if (at->tag)
		*at->tag = at->want;
}

/* Writes the IP header of a reply to si at l3 (addresses swapped), for a
 * TCP segment of tcp_len bytes: 0, or -1 when the frame is too short for
 * it.  A RST (make_rst()) and a cookie SYN-ACK (answer_syn()). */
static __always_inline int reply_ip(void *l3, void *data_end,
				     const struct syn_info *si, __u32 tcp_len)
{
	if (si->flow.family == 4) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return -1;
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = 0;
		ip->tot_len = bpf_htons(sizeof(*ip) + tcp_len);
		ip->id = 0;
		ip->frag_off = bpf_htons(0x4000);	/* DF */
		ip->ttl = 64;
		ip->protocol = IPPROTO_TCP;
		ip->check = 0;
		__builtin_memcpy(&ip->saddr, si->flow.daddr, 4);
		__builtin_memcpy(&ip->daddr, si->flow.saddr, 4);
		ip->check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)ip,
						    sizeof(*ip), 0));
		return 0;
	} else {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end)
			return -1;
		ip6->version = 6;
		ip6->priority = 0;
		ip6->flow_lbl[0] = 0;
		ip6->flow_lbl[1] = 0;
		ip6->flow_lbl[2] = 0;
		ip6->payload_len = bpf_htons(tcp_len);
		ip6->nexthdr = IPPROTO_TCP;
		ip6->hop_limit = 64;
		__builtin_memcpy(&ip6->saddr, si->flow.daddr, 16);
		__builtin_memcpy(&ip6->daddr, si->flow.saddr, 16);
		return 0;
	}
}

/* The sum of the pseudo header of a reply to si (addresses swapped) for a
 * TCP segment of tcp_len bytes, the seed of its checksum. */
static __always_inline __u32 reply_pseudo_sum(const struct syn_info *si,
					      __u32 tcp_len)
{
	if (si->flow.family == 4) {
		struct { __u8 saddr[4], daddr[4], zero, proto; __be16 len; } ph = {};

		__builtin_memcpy(ph.saddr, si->flow.daddr, 4);
		__builtin_memcpy(ph.daddr, si->flow.saddr, 4);
		ph.proto = IPPROTO_TCP;
		ph.len = bpf_htons(tcp_len);
		return bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	} else {
		struct { __u8 saddr[16], daddr[16]; __be32 len; __u8 zero[3], next; } ph = {};

		__builtin_memcpy(ph.saddr, si->flow.daddr, 16);
		__builtin_memcpy(ph.daddr, si->flow.saddr, 16);
		ph.len = bpf_htonl(tcp_len);
		ph.next = IPPROTO_TCP;
		return bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph), 0);
	}
}

/* Rewrites the SYN in place into a RST|ACK back to its sender and returns the
 * reply's length.  The reply is never longer than the SYN, so every byte we
 * write was already bounds-checked as part of the SYN; the caller trims the
 * tail.  VLAN tags stay as they were.  */
static __always_inline int make_rst(void *data, void *data_end,
				    struct syn_info *si)
{
	struct ethhdr *eth = data;
	__u8 mac[ETH_ALEN];
	struct tcphdr *tcp;
	__u32 csum, ack_seq;
	void *l3 = data + (si->l3_off & 0xff);

	if ((void *)(eth + 1) > data_end)
		return -1;
	tcp = l3 + (si->flow.family == 4 ? sizeof(struct iphdr) :
					   sizeof(struct ipv6hdr));
	if ((void *)(tcp + 1) > data_end ||
	    reply_ip(l3, data_end, si, sizeof(*tcp)))
		return -1;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);

	ack_seq = bpf_htonl(bpf_ntohl(si->flow.isn) + si->seg_len);
	csum = reply_pseudo_sum(si, sizeof(*tcp));

	tcp->source = si->flow.dport;
	tcp->dest = si->flow.sport;
	/* A refused handshake ACK: the client holds the connection open, and
	 * takes a RST only at the sequence number it expects next. */
	tcp->seq = si->kind == P_ACK ? si->ack_seq : 0;
	tcp->ack_seq = ack_seq;
	/* doff 5, flags RST|ACK, everything else zero */
	((__u16 *)tcp)[6] = bpf_htons(0x5000 | 0x0014);
	tcp->window = 0;
	tcp->check = 0;
	tcp->urg_ptr = 0;
	tcp->check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)tcp,
					     sizeof(*tcp), csum));

	return (void *)(tcp + 1) - data;
}

/*
 * A RST or FIN from the client's side ends its flow: no copy of the SYN, nor
 * of a verified handshake's ACK, is a retransmission any more (see
 * RL_FLOW_MAX_REPEATS).  On this CPU its slot says so; for every other CPU
 * the end is marked in `flow_ends`, which a copy found free in any CPU's
 * slot asks first (flow_ended()), as far as the server's socket table
 * backs it (si->sk, looked up by the entry point).  Where a flow's packets are not steered
 * to one queue (a veth judges each packet on the CPU that sent it), a copy
 * that comes after the end may be judged on the CPU that admitted the
 * flow, and found free there it would open a new connection on the server,
 * whose first one the end closed, without a token.  One store, whatever
 * the CPUs: a flood of FINs costs each the same.
 */
static __always_inline void flow_end(const struct syn_info *si)
{
	struct flow_at at;

	if (!retrans_window_ns)
		return;
	/* A listener alone: the server has no connection of this 4-tuple
	 * for the packet to end, and ignores it.  No socket at all: the
	 * server is not on this host, and the end is taken on trust, only
	 * where it removes no other end. */
	if (si->sk != SK_LISTEN)
		flow_end_mark(&si->flow, bpf_ktime_get_coarse_ns(),
			      si->sk >= SK_OPEN);
	/* the tag leaves the ISN out, as the slot does */
	flow_find(&si->flow, &at);
	if (flow_maybe(&at) && flow_same_conn(&at.slot->flow, &si->flow))
		at.slot->repeats = retrans_max_repeats;
}

/*
 * Connection caps (see RL_CONNS_MAX).  A connection is counted in by the CPU
 * that inserts its entry and out by whoever deletes it; the delete succeeds
 * once, so a RST seen twice, a RST after the FINs, or the agent's sweep
 * racing the kernel give a connection back exactly once.
 */

/* Whether any tenant or the instance has a cap: until one does, a RST or
 * FIN costs no hash lookup. */
static __always_inline bool caps_on(void)
{
	__u32 zero = 0;
	struct rl_conn_ctl *c = bpf_map_lookup_elem(&conn_ctl, &zero);

	return c && (READ_ONCE(c->capped) || READ_ONCE(c->instance));
}

/* The instance limit, when it is on (a cap, a rate or both), else NULL. */
static __always_inline struct rl_tenant *instance_on(void)
{
	__u32 zero = 0;
	struct rl_tenant *in = bpf_map_lookup_elem(&instance, &zero);

	if (!in || READ_ONCE(in->mode) == RL_MODE_NONE)
		return NULL;
	return in;
}

/* The key of a connection: its 4-tuple in the client's direction.  egress:
 * si is a packet from the server. */
static __always_inline void conn_key(const struct syn_info *si, bool egress,
				     struct rl_flow *k)
{
	const flow_word *src = (const flow_word *)&si->flow;
	flow_word *dst = (flow_word *)k;

	if (!egress) {
#pragma unroll
		for (int i = 0; i < (int)FLOW_WORDS; i++)
			dst[i] = src[i];
	} else {
		/* saddr and daddr are words 0-1 and 2-3 */
		dst[0] = src[2];
		dst[1] = src[3];
		dst[2] = src[0];
		dst[3] = src[1];
		dst[5] = src[5];
		k->sport = si->flow.dport;
		k->dport = si->flow.sport;
	}
	k->isn = 0;
	k->_pad = 0;
}

/* Gives one connection back to t (a tenant's slot or the instance), unless
 * it has been reset since (epoch).  Never below zero: a give-back that
 * finds none is undone. */
static __always_inline void conn_release(struct rl_tenant *t, __u32 epoch)
{
	if (!t || READ_ONCE(t->conn_epoch) != epoch)
		return;
	if (__sync_fetch_and_add(&t->conns, -1) <= 0)
		__sync_fetch_and_add(&t->conns, 1);
}

/* Deletes the entry of connection k and, if this delete is the one that
 * succeeded, gives the connection back to its tenant and to the instance.
 * c is read first: once deleted, a preallocated element may be reused at
 * once. */
static __always_inline void conn_delete(const struct rl_flow *k,
					const struct rl_conn *c)
{
	__u32 id = READ_ONCE(c->tenant), epoch = READ_ONCE(c->epoch);
	__u32 flags = READ_ONCE(c->flags), iepoch = READ_ONCE(c->inst_epoch);
	struct rl_conn_stats *cs;
	__u32 zero = 0;

	if (bpf_map_delete_elem(&conns, k))
		return;
	if (flags & RL_CONN_F_INSTANCE)
		conn_release(bpf_map_lookup_elem(&instance, &zero), iepoch);
	if (id == RL_CONN_NO_TENANT)
		return;
	conn_release(bpf_map_lookup_elem(&tenants, &id), epoch);
	cs = bpf_map_lookup_elem(&conn_stats, &id);
	if (cs)
		cs->closed++;
}

/*
 * What the server's own socket will make of a client's RST or FIN, read
 * where the server is local.  Only the fields needed, relocated against
 * the running kernel's BTF (CO-RE): no vmlinux.h.
 */
struct sock_reuseport {
	unsigned int synq_overflow_ts;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_reuseport *sk_reuseport_cb;
} __attribute__((preserve_access_index));

struct inet_sock {
	struct sock sk;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	struct inet_sock icsk_inet;
} __attribute__((preserve_access_index));

/* rx_opt.ts_recent_stamp of a listener: when (jiffies) it last answered a
 * SYN with a cookie, unless it is in a reuseport group, whose stamp is
 * then the group's (listener_takes_cookies()). */
struct tcp_options_received {
	int ts_recent_stamp;
} __attribute__((preserve_access_index));

struct tcp_sock {
	struct inet_connection_sock inet_conn;
	__u32 rcv_nxt;
	struct tcp_options_received rx_opt;
} __attribute__((preserve_access_index));

/* rcv_nxt for a half-open connection's RST; rcv_isn and snt_isn, the two
 * numbers its handshake's ACK must return (verify, req_completes()). */
struct tcp_request_sock {
	__u32 rcv_nxt;
	__u32 rcv_isn;
	__u32 snt_isn;
} __attribute__((preserve_access_index));

/* A global function's argument the verifier takes as the program's
 * context, whichever program (XDP or tc) calls it. */
#define __arg_ctx __attribute__((btf_decl_tag("arg:ctx")))

/* Linux's TCP states, as bpf_sock.state reads them. */
enum {
	SRV_ESTABLISHED = 1, SRV_FIN_WAIT1 = 4, SRV_FIN_WAIT2 = 5,
	SRV_TIME_WAIT = 6, SRV_CLOSE_WAIT = 8, SRV_LAST_ACK = 9,
	SRV_CLOSING = 11, SRV_NEW_SYN_RECV = 12,
};
/* A connection's socket that has the client's FIN already ... */
#define SRV_FIN_TAKEN	((1U << SRV_CLOSE_WAIT) | (1U << SRV_LAST_ACK) | \
			 (1U << SRV_CLOSING))
/* ... or not: never a listener, nor a socket closed or still opening. */
#define SRV_OPEN	((1U << SRV_ESTABLISHED) | (1U << SRV_FIN_WAIT1) | \
			 (1U << SRV_FIN_WAIT2) | SRV_FIN_TAKEN)

/* The server's socket of si's 4-tuple in this namespace (any state,
 * listeners included), or NULL; a socket found must be released
 * (bpf_sk_release()).  Only an entry point's callees may call it: the
 * lookup needs the program's context. */
static __always_inline struct bpf_sock *sk_lookup(void *ctx,
						  const struct syn_info *si)
{
	struct bpf_sock_tuple tup = {};

	if (si->flow.family == 4) {
		__builtin_memcpy(&tup.ipv4.saddr, si->flow.saddr, 4);
		__builtin_memcpy(&tup.ipv4.daddr, si->flow.daddr, 4);
		tup.ipv4.sport = si->flow.sport;
		tup.ipv4.dport = si->flow.dport;
		return bpf_skc_lookup_tcp(ctx, &tup, sizeof(tup.ipv4),
					  BPF_F_CURRENT_NETNS, 0);
	}
	__builtin_memcpy(tup.ipv6.saddr, si->flow.saddr, 16);
	__builtin_memcpy(tup.ipv6.daddr, si->flow.daddr, 16);
	tup.ipv6.sport = si->flow.sport;
	tup.ipv6.dport = si->flow.dport;
	return bpf_skc_lookup_tcp(ctx, &tup, sizeof(tup.ipv6),
				  BPF_F_CURRENT_NETNS, 0);
}

/*
 * Whether the server's TCP stack, local to this host, will end connection
 * si (a client's RST, or take a client's FIN in order): sk, the socket of
 * the 4-tuple looked up in the namespace of the interface, decides as
 * tcp_validate_incoming() and tcp_check_req() will.  A RST ends an open
 * socket only at rcv_nxt exactly (RFC 5961: one merely inside the window
 * earns a challenge ACK), or one before it once the server has the
 * client's FIN (tcp_reset_check()); a request socket's only without ACK
 * at rcv_nxt (an ACK it does not expect goes to the listener, which drops
 * a RST).  A FIN counts at rcv_nxt: anything later waits, out of order,
 * for bytes a forger never sends.  A socket in TIME_WAIT has ended.  No
 * socket of the connection (a listener only, or nothing: the server is
 * not on this host, or a cookie's connection not made yet) is not an end:
 * the server's own RST or FIN, or the sweep once the socket table shows
 * it gone, frees the place.
 * Asked only of a RST or FIN (a counted connection's, or any while the flow
 * cache is on), never of a SYN or an ordinary segment.  It reads rcv_nxt before the stack has taken the
 * segments of the same batch still held for GRO: a FIN behind data held
 * there is not counted (the sweep frees the place), and a RST sent right
 * behind data of its own, at the rcv_nxt before that data, is counted
 * though the stack, once the data is in, finds it below the window and
 * drops it: a client that sends data and at once a RST at the sequence
 * number before the data, in one batch, still has its place freed while
 * the server keeps the connection.  (At tc ingress, which runs after GRO,
 * neither happens.)
 */
static __always_inline bool sk_ends(struct bpf_sock *sk,
				    const struct syn_info *si)
{
	struct tcp_request_sock *rq;
	__u32 seq = bpf_ntohl(si->flow.isn), nxt, state = sk->state;
	bool rst = si->tcp_flags & TCP_FLAG_RST;
	struct tcp_sock *tp;

	if (state == SRV_TIME_WAIT)
		return true;
	if (state == SRV_NEW_SYN_RECV) {
		rq = bpf_skc_to_tcp_request_sock(sk);
		return rst && rq && !(si->tcp_flags & TCP_FLAG_ACK) &&
		       seq == rq->rcv_nxt;
	}
	if (!(SRV_OPEN & (1U << (state & 31))) || !(tp = bpf_skc_to_tcp_sock(sk)))
		return false;
	nxt = tp->rcv_nxt;
	if (SRV_FIN_TAKEN & (1U << (state & 31)))
		return rst && (seq == nxt || seq == nxt - 1);
	return seq == nxt;
}

/* sk_ends() for si's socket: sk_seen()'s answer when the entry point looked
 * the socket up already, a lookup of its own otherwise. */
static __always_inline bool server_ends(void *ctx, const struct syn_info *si)
{
	struct bpf_sock *sk;
	bool ends;

	if (si->srv_end != SRV_END_UNKNOWN)
		return si->srv_end == SRV_END_YES;
	sk = sk_lookup(ctx, si);
	if (!sk)
		return false;
	ends = sk_ends(sk, si);
	bpf_sk_release(sk);
	return ends;
}

/*
 * A RST or FIN of a counted connection (ctx: the packet's, for the socket
 * lookup; unused at egress).  The server's own RST ends it when it is the
 * socket's: RST with ACK (tcp_send_active_reset()), or a RST without ACK
 * once the server has sent its FIN (its closing socket's answer to data
 * after the close).  A RST without ACK before that is a listener's reply
 * to an ACK it did not expect, which leaves a request socket as it was.
 * A client's RST ends it only if the server's socket takes it
 * (server_ends()).  A FIN ends it once the other side has sent
 * one too (a half-close keeps it counted); the client's counts only if
 * the server takes it in order.  Retransmitted FINs change nothing: the
 * bit is already set.  Anything else is left to the sweep.
 */
static __always_inline void conn_end(const struct syn_info *si, bool egress,
				     __u64 now, void *ctx)
{
	struct rl_flow k;
	struct rl_conn *c;
	__u32 bit, old;

	conn_key(si, egress, &k);
	c = bpf_map_lookup_elem(&conns, &k);
	if (!c)
		return;
	if (egress ? (si->tcp_flags & (TCP_FLAG_RST | TCP_FLAG_ACK)) ==
			     TCP_FLAG_RST &&
			     !(READ_ONCE(c->fin) & RL_CONN_FIN_SERVER) :
		     !server_ends(ctx, si))
		return;
	if (si->tcp_flags & TCP_FLAG_RST) {
		conn_delete(&k, c);
		return;
	}
	bit = egress ? RL_CONN_FIN_SERVER : RL_CONN_FIN_CLIENT;
	WRITE_ONCE(c->seen_ns, now);
	old = __sync_fetch_and_or(&c->fin, bit);
	/* only the FIN that completes the pair deletes */
	if (!(old & bit) && ((old | bit) == (RL_CONN_FIN_CLIENT |
					     RL_CONN_FIN_SERVER)))
		conn_delete(&k, c);
}

/* What the cap decided for a SYN, before the bucket is asked. */
enum conn_verdict {
	CONN_FREE,	/* not capped, or this connection is already counted */
	CONN_RESERVED,	/* a place is reserved: insert, or give it back */
	CONN_REFUSED,	/* at the cap */
};

/*
 * What a capped tenant may have in flight now: the slots user space set,
 * unless it is leased and its Redis is out of reach - above all when the
 * agent's heartbeat is stale, for a dead agent neither renews its holding
 * nor gives it back, and Redis hands it to other hosts after its TTL.  Then
 * the tenant's fail policy, as for tokens: the static share user space set
 * in advance, no cap (allow), or no new connection (deny).
 * Standalone, the cap is the kernel's alone and needs no agent, unless the
 * agent shares it with a preload pool: then conn_slots is the part the
 * agent last gave the kernel, moved to wherever connections wait only
 * while it lives, and it expects a heartbeat (stale_ns is 0 otherwise).
 * Once that is stale the fail policy decides, as it does in the pool
 * (rl_pool_conn_open): static keeps the kernel's part (the pool keeps the
 * rest), allow lifts the cap, deny admits nothing new.
 */
static __always_inline __s64 conn_limit(struct rl_tenant *t, __u64 now)
{
	bool leased = t->mode == RL_MODE_LEASED;

	if (!((leased && (READ_ONCE(t->flags) & RL_F_DEGRADED)) ||
	      fleet_degraded(now)))
		return READ_ONCE(t->conn_slots);
	switch (READ_ONCE(t->fail)) {
	case RL_FAIL_ALLOW:
		return RL_CONN_NO_CAP;
	case RL_FAIL_DENY:
		return 0;
	default:
		return leased ? READ_ONCE(t->conn_fail_slots) :
				READ_ONCE(t->conn_slots);
	}
}

/* What a SYN of a capped tenant or of the instance is to `conns`. */
enum conn_seen {
	CONN_NEW,	/* its 4-tuple holds no place */
	CONN_AGAIN,	/* the counted connection again (same ISN) */
	CONN_PORTS,	/* another ISN on a counted 4-tuple */
};

/*
 * Whether a SYN is a counted connection again.  A SYN with the ISN of a
 * counted connection is that connection again (a retransmission the flow
 * cache forgot, or a replay): never a second place.  A SYN with another ISN
 * on a counted 4-tuple (CONN_PORTS) frees nothing: the server holds one
 * connection per 4-tuple, so if it opens a new one from this SYN (the old
 * one in TIME_WAIT, or gone) the new one takes the old one's place
 * (conn_take_over()), and if the old one is still open it answers with a
 * challenge ACK and opens nothing.  Either way the count stays right, and a
 * SYN the bucket refuses changes nothing.  cs: the capped tenant's stats,
 * or NULL.
 */
static __always_inline enum conn_seen conn_repeat(const struct rl_flow *k,
						  const struct syn_info *si,
						  struct rl_conn_stats *cs)
{
	struct rl_conn *c = bpf_map_lookup_elem(&conns, k);

	if (!c)
		return CONN_NEW;
	if (READ_ONCE(c->isn) != si->flow.isn)
		return CONN_PORTS;
	if (cs)
		cs->repeats++;
	return CONN_AGAIN;
}

/* An admitted SYN with another ISN on counted 4-tuple k: the place is now
 * this SYN's connection, which starts with no FIN seen.  False when the
 * entry went meanwhile (ended on another CPU, or swept) and with it the
 * place: the SYN is refused, and its retransmission judged as new. */
static __always_inline bool conn_take_over(struct rl_conn_stats *cs,
					   const struct rl_flow *k,
					   const struct syn_info *si, __u64 now)
{
	struct rl_conn *c = bpf_map_lookup_elem(&conns, k);

	if (!c)
		return false;
	WRITE_ONCE(c->isn, si->flow.isn);
	WRITE_ONCE(c->fin, 0);
	WRITE_ONCE(c->opened_ns, now);
	WRITE_ONCE(c->seen_ns, now);
	if (cs)
		cs->reused++;
	return true;
}

/* Whether the instance's cap is full (counted): a SYN's check, which
 * reserves nothing - the place is taken where the server's kernel makes
 * the connection (judge_inst_ack()). */
static __always_inline bool inst_full(struct rl_tenant *in)
{
	if (!(READ_ONCE(in->flags) & RL_F_CONNCAP) ||
	    READ_ONCE(in->conns) < READ_ONCE(in->conn_slots))
		return false;
	count(RL_CNT_INST_FULL);
	return true;
}

/* A place below the instance's cap, or false (counted). */
static __always_inline bool inst_reserve(struct rl_tenant *in)
{
	if (__sync_fetch_and_add(&in->conns, 1) < READ_ONCE(in->conn_slots))
		return true;
	__sync_fetch_and_add(&in->conns, -1);
	count(RL_CNT_INST_FULL);
	return false;
}

/*
 * The cap's half of a SYN of a capped tenant, not a counted connection
 * again (conn_repeat()): a place is reserved below conn_limit(); a shadow
 * tenant reserves past it, so that what it counts is what is really in
 * flight.
 */
static __always_inline enum conn_verdict conn_reserve(struct rl_tenant *t,
						      struct rl_conn_stats *cs,
						      __u64 now)
{
	if (__sync_fetch_and_add(&t->conns, 1) < conn_limit(t, now))
		return CONN_RESERVED;
	if (t->flags & RL_F_SHADOW) {
		cs->shadow_denied++;
		return CONN_RESERVED;
	}
	__sync_fetch_and_add(&t->conns, -1);
	cs->denied++;
	return CONN_REFUSED;
}

/* Counts in an admitted connection whose places were reserved: in tenant
 * t (slot id, stats cs) unless t is NULL, in the instance in unless it is
 * NULL.  False when the table is full: the places are given back and the
 * SYN refused (never admitted uncounted).  Another CPU inserting the same
 * 4-tuple first means the same connection: our places go back and the SYN
 * passes. */
static __always_inline bool conn_insert(struct rl_tenant *t, __u32 id,
					struct rl_conn_stats *cs,
					struct rl_tenant *in,
					const struct rl_flow *k,
					const struct syn_info *si, __u64 now)
{
	struct rl_conn c = {
		.tenant = t ? id : RL_CONN_NO_TENANT,
		.epoch = t ? READ_ONCE(t->conn_epoch) : 0,
		.isn = si->flow.isn,
		.opened_ns = now,
		.seen_ns = now,
		.inst_epoch = in ? READ_ONCE(in->conn_epoch) : 0,
		.flags = in ? RL_CONN_F_INSTANCE : 0,
	};
	long err = bpf_map_update_elem(&conns, k, &c, BPF_NOEXIST);

	if (!err) {
		if (t && cs)
			cs->opened++;
		return true;
	}
	if (t)
		__sync_fetch_and_add(&t->conns, -1);
	if (in)
		__sync_fetch_and_add(&in->conns, -1);
	if (err == -EEXIST) {
		if (t && cs)
			cs->repeats++;
		return true;
	}
	if (t && cs)
		cs->full++;
	count(RL_CNT_CONN_FULL);
	return false;
}

/*
 * Per-source limits (see RL_F_PERSOURCE in rlgate.h).
 */

/* The key of a SYN's source within tenant id: its address cut to c's
 * prefix.  Two words of address, whatever the family. */
static __always_inline void src_key(const struct syn_info *si, __u32 id,
				    const struct rl_src_conf *c,
				    struct rl_src_key *k)
{
	const rl_src_word *a = (const rl_src_word *)si->flow.saddr;
	const rl_src_word *m = (const rl_src_word *)(si->flow.family == 4 ?
						     c->mask4 : c->mask6);
	rl_src_word *out = (rl_src_word *)k->addr;

	k->tenant = id;
	k->family = si->flow.family;
	out[0] = a[0] & m[0];
	out[1] = a[1] & m[1];
}

/* Writes a source refused `denied` times to its slot of `src_top`, unless
 * the slot holds another source refused more often.  Slots are written
 * without a lock: a torn one names some source, which user space checks
 * against `sources` before it shows it. */
static __always_inline void src_top_note(const struct rl_src_key *k,
					 __u64 denied)
{
	__u32 idx = rl_src_hash(k, RL_SRC_TOP_BITS);
	struct rl_src_top *t = bpf_map_lookup_elem(&src_top, &idx);
	const rl_src_word *w = (const rl_src_word *)k;
	rl_src_word *tw;

	if (!t)
		return;
	tw = (rl_src_word *)&t->key;
	if (((tw[0] ^ w[0]) | (tw[1] ^ w[1]) | (tw[2] ^ w[2])) != 0) {
		if (READ_ONCE(t->denied) >= denied)
			return;
		tw[0] = w[0];
		tw[1] = w[1];
		tw[2] = w[2];
	}
	WRITE_ONCE(t->denied, denied);
}

/*
 * The source's half of a SYN of a tenant with RL_F_PERSOURCE: takes a token
 * from its source's bucket - inserted, full, when the source is new and
 * `sources` has room, within the tenant's share of it (rl_src_ctl.share),
 * else the tenant's overflow bucket.  False when it
 * has none (counted, as would-deny for a shadow tenant: the caller's
 * shadow path then admits).  An entry is never evicted here (see
 * RL_SRC_TABLE).
 */
static __always_inline bool src_take(const struct syn_info *si, __u32 id,
				     __u32 tflags, __u64 now)
{
	struct rl_src_conf *c = bpf_map_lookup_elem(&src_conf, &id);
	struct rl_src_stats *ss = bpf_map_lookup_elem(&src_stats, &id);
	struct rl_src fresh = {};
	struct rl_src_ctl *ctl;
	struct rl_src_key k;
	__u64 interval, tol, share;
	struct rl_src *s;
	__u32 zero = 0;
	__s64 held;
	bool ok;

	if (!c || !ss)
		return true;
	interval = READ_ONCE(c->interval_ns);
	tol = READ_ONCE(c->tolerance_ns);
	if (!interval)
		return true;
	src_key(si, id, c, &k);
	s = bpf_map_lookup_elem(&sources, &k);
	ctl = s ? NULL : bpf_map_lookup_elem(&src_ctl, &zero);
	if (ctl) {
		/* The tenant's place is taken before the insert and given
		 * back when it fails: CPUs inserting at once never take it
		 * past its share. */
		share = READ_ONCE(ctl->share);
		held = __sync_fetch_and_add(&c->used, 1);
		if ((share && held >= (__s64)share) ||
		    bpf_map_update_elem(&sources, &k, &fresh, BPF_NOEXIST)) {
			__sync_fetch_and_sub(&c->used, 1);
		} else {
			ss->inserted++;
			__sync_fetch_and_add(&ctl->used, 1);
		}
	}
	/* ours, another CPU's of the same source, or none: the table or the
	 * tenant's share of it is full */
	if (!s)
		s = bpf_map_lookup_elem(&sources, &k);
	if (s) {
		ok = take_gcra(&s->tat, interval, tol, now);
		if (ok)
			__sync_fetch_and_add(&s->passed, 1);
		else
			src_top_note(&k, __sync_fetch_and_add(&s->denied, 1) + 1);
	} else {
		count(RL_CNT_SRC_OVERFLOW);
		ss->overflow++;
		ok = take_gcra(&c->overflow_tat, interval, tol, now);
		if (!ok)
			ss->overflow_denied++;
	}
	if (ok)
		return true;
	if (tflags & RL_F_SHADOW) {
		ss->shadow_denied++;
	} else {
		ss->denied++;
		count(RL_CNT_SRC_DENIED);
	}
	return false;
}

/*
 * A SYN no tenant takes (no rule matches, or its rule's slot is being
 * cleared): only the instance limit judges it, and drops it over the rate,
 * or while the instance's cap is full.  It takes no place: the server's
 * kernel answers it with a request socket or a cookie, not a connection,
 * and a SYN from a forged source never becomes one (its request socket
 * lives a minute, retransmitting to nobody).  Its place is taken where the
 * server's kernel makes the connection, at the handshake's ACK
 * (judge_inst_ack()), as a tenant's connection's is, so forged SYNs cannot
 * fill the cap that the tenants share.  The full cap refuses here already
 * (inst_full()), so that a client over
 * it fails at connect as a tenant's does, rather than be refused at its
 * ACK (which it sees only when its data goes unanswered).
 */
static __always_inline enum verdict judge_nomatch(const struct syn_info *si)
{
	struct rl_tenant *in = instance_on();

	if (!in)
		return V_PASS;
	if (inst_full(in))
		return V_DROP;
	if (READ_ONCE(in->interval_ns) &&
	    !take_gcra(&in->tat, in->interval_ns, in->tolerance_ns,
		       bpf_ktime_get_coarse_ns())) {
		count(RL_CNT_INST_RATE);
		return V_DROP;
	}
	return V_PASS;
}

/*
 * A packet that might open a connection but cannot be judged (P_SUSPECT):
 * refused when its source belongs to a tenant, passed otherwise.  Not
 * charged - it is refused whole - and a shadow tenant lets it pass, counted,
 * as it does with every refusal.
 */
static __always_inline enum verdict judge_unparsed(const struct syn_info *si)
{
	struct rl_tenant *t = NULL;
	struct rl_stats *st = NULL;
	int id = classify(si);
	__u32 key;

	if (id >= 0) {
		key = id;
		t = bpf_map_lookup_elem(&tenants, &key);
		st = bpf_map_lookup_elem(&tenant_stats, &key);
		if (!t || !st || t->mode == RL_MODE_NONE)
			id = CLS_NO_TENANT;
	}
	if (id == CLS_NO_TENANT) {
		count(RL_CNT_UNPARSED);
		return V_PASS;
	}
	if (st)
		st->unparsed++;
	if (t && (t->flags & RL_F_SHADOW)) {
		count(RL_CNT_UNPARSED);
		return V_PASS;
	}
	count(RL_CNT_UNPARSED_DROP);
	return V_DROP;
}

/*
 * Verification (RL_F_VERIFY).  The SYN of a verifying tenant passes
 * uncharged: the server's kernel answers it with a SYN cookie and keeps
 * nothing (net.ipv4.tcp_syncookies=2), so a SYN from a forged source costs
 * one SYN-ACK sent to that source and nothing else.  The connection is
 * charged at the ACK that completes its handshake, as the server's kernel
 * will complete it, which the socket table of the 4-tuple says (sk_seen()):
 * with no socket of its own, the ACK must return a valid cookie (the
 * kernel's own check; the helper shares the kernel's secret); with a
 * request socket - a SYN that met a TIME_WAIT socket gets one, cookies
 * or not - it must return that socket's numbers.  A segment that meets an
 * open connection or a TIME_WAIT socket is never a handshake, whatever its
 * numbers (the cookie check depends on ack - seq alone, which the segments
 * of an open connection can line up again), and passes.
 */

/* The IP header of si as the client sent it, for the cookie helpers
 * (which read the addresses alone). */
static __always_inline void client_ip4(const struct syn_info *si,
				       struct iphdr *ip)
{
	ip->version = 4;
	ip->ihl = sizeof(*ip) / 4;
	ip->protocol = IPPROTO_TCP;
	__builtin_memcpy(&ip->saddr, si->flow.saddr, 4);
	__builtin_memcpy(&ip->daddr, si->flow.daddr, 4);
}

static __always_inline void client_ip6(const struct syn_info *si,
				       struct ipv6hdr *ip6)
{
	ip6->version = 6;
	ip6->nexthdr = IPPROTO_TCP;
	__builtin_memcpy(&ip6->saddr, si->flow.saddr, 16);
	__builtin_memcpy(&ip6->daddr, si->flow.daddr, 16);
}

/* Whether si's numbers are a SYN cookie ACK: the kernel's check, on
 * headers rebuilt from si (the helper reads addresses, ports and the
 * sequence numbers, nothing else). */
static __always_inline bool cookie_valid(const struct syn_info *si)
{
	struct tcphdr th = {};

	th.source = si->flow.sport;
	th.dest = si->flow.dport;
	th.seq = si->flow.isn;
	th.ack_seq = si->ack_seq;
	th.doff = sizeof(th) / 4;
	th.ack = 1;
	if (si->flow.family == 4) {
		struct iphdr ip = {};

		client_ip4(si, &ip);
		return bpf_tcp_raw_check_syncookie_ipv4(&ip, &th) == 0;
	} else {
		struct ipv6hdr ip6 = {};

		client_ip6(si, &ip6);
		return bpf_tcp_raw_check_syncookie_ipv6(&ip6, &th) == 0;
	}
}

/*
 * What verification makes of a packet of a verifying tenant, si->sk set for
 * an ACK: true when it passes here, uncharged (a SYN, a segment of an open
 * connection, an ACK that completes no handshake); false for a handshake
 * ACK to charge, whose si->flow.isn is then the client's ISN (the ACK's
 * sequence number less one), so that it is keyed as its SYN would have
 * been (flow cache, `conns`).
 */
static __always_inline bool verify_passes(struct syn_info *si)
{
	if (si->kind == P_SYN) {
		count(RL_CNT_VERIFY_SYN);
		return true;
	}
	if (si->sk != SK_REQ &&
	    ((si->sk != SK_LISTEN && si->sk != SK_NOTHING) ||
	     !cookie_valid(si)))
		return true;
	si->flow.isn = bpf_htonl(bpf_ntohl(si->flow.isn) - 1);
	count(RL_CNT_VERIFY_ACK);
	return false;
}

/* Whether a verifying tenant's SYN that verify_passes() passed is answered
 * here with a cookie (answer_syn()) rather than by the server's kernel: a
 * plain SYN (one with RST or FIN opens nothing, a fragment cannot be
 * answered whole) of an RL_F_ANSWER tenant out of shadow mode (which
 * changes no packet's fate). */
static __always_inline bool answer_here(const struct syn_info *si,
					const struct rl_tenant *t)
{
	__u32 flags = READ_ONCE(t->flags);

	return si->kind == P_SYN && (flags & RL_F_ANSWER) &&
	       !(flags & RL_F_SHADOW) && !si->fragment &&
	       !(si->tcp_flags & (TCP_FLAG_RST | TCP_FLAG_FIN));
}

/*
 * A handshake's ACK that passes, judged to complete the handshake on this
 * host's server (a request socket's numbers, or a cookie with only the
 * listener): with a FIN, the server's kernel makes the connection and then
 * takes the FIN, in order, so the FIN is the client's half of the close
 * (conn_end()), whatever sk_ends() said of the request socket or the
 * listener it met.
 */
static __always_inline void ack_fin_taken(struct syn_info *si)
{
	if ((si->tcp_flags & TCP_FLAG_FIN) &&
	    (si->sk == SK_REQ || si->sk == SK_LISTEN))
		si->srv_end = SRV_END_YES;
}

/*
 * An entry counted in a tenant only (its SYN's) takes the instance's place
 * its handshake ACK reserved: the flag says so from now on, and the place
 * goes back with the entry.  Where the flag was set already (another CPU's
 * ACK of the same connection), this place goes back at once.
 */
static __always_inline void inst_attach(struct rl_conn *c,
					struct rl_tenant *in)
{
	WRITE_ONCE(c->inst_epoch, READ_ONCE(in->conn_epoch));
	if (__sync_fetch_and_or(&c->flags, RL_CONN_F_INSTANCE) &
	    RL_CONN_F_INSTANCE)
		__sync_fetch_and_add(&in->conns, -1);
}

/*
 * An ACK that no verification judges (no tenant takes it, or its tenant
 * does not verify), while the instance has a cap: the instance's place of
 * its connection is taken here if it completes a handshake on the server,
 * as the server's socket table says (si->sk, looked up by the entry point
 * on V_LOOKUP): a request socket whose numbers it returns (SK_REQ), or a
 * valid SYN cookie where only the listener is (the kernel's own check).
 * A SYN takes none (its check of the cap is read-only, inst_full()): a
 * SYN from a forged source never becomes a connection, and its request
 * socket lives a minute, so counted at the SYN forged SYNs - a stranger's,
 * or a tenant's within its rate - would fill the cap all tenants share.
 * The connection's entry is the one its tenant's cap made at the SYN, if
 * any (inst_attach()), else one of its own (RL_CONN_NO_TENANT).  Over the
 * cap the ACK is dropped: the server makes no connection, and keeps its
 * request socket, or nothing for a cookie; the client's next segment,
 * which carries the same numbers, is judged again.  A segment of a
 * connection that holds its instance place costs one lookup in `conns`
 * and passes; any other (an open connection's, one the server would
 * refuse, one for a server this host's namespace does not hold) passes
 * uncounted.
 */
static __always_inline enum verdict judge_inst_ack(struct syn_info *si)
{
	struct rl_tenant *in = instance_on();
	struct rl_conn *c;
	struct rl_flow k;
	__be32 seq;
	bool ok;

	if (!in || !(READ_ONCE(in->flags) & RL_F_CONNCAP))
		return V_PASS;
	conn_key(si, false, &k);
	c = bpf_map_lookup_elem(&conns, &k);
	if (c && (READ_ONCE(c->flags) & RL_CONN_F_INSTANCE))
		return V_PASS;
	if (si->sk == SK_UNKNOWN)
		return V_LOOKUP;
	if (si->sk != SK_REQ && (si->sk != SK_LISTEN || !cookie_valid(si)))
		return V_PASS;
	if (!inst_reserve(in))
		return V_DROP;
	ack_fin_taken(si);
	if (c) {
		inst_attach(c, in);
		return V_PASS;
	}
	/* the entry holds the client's ISN, as a SYN's does; si keeps the
	 * ACK's own, which a FIN with it is judged by */
	seq = si->flow.isn;
	si->flow.isn = bpf_htonl(bpf_ntohl(seq) - 1);
	ok = conn_insert(NULL, 0, NULL, in, &k, si, bpf_ktime_get_coarse_ns());
	si->flow.isn = seq;
	return ok ? V_PASS : V_DROP;
}

/*
 * Whether a handshake ACK is a free copy of one admitted here: the same
 * 4-tuple and ISN (the client's first data segment carries the same numbers
 * as its ACK, and so do their retransmissions), at most
 * retrans_max_repeats of them, each within retrans_window_ns of the last,
 * and none once the client has ended the flow (flow_end()).  Takes it if so.
 * No spacing as for SYNs: the data follows the ACK at once.
 */
static __always_inline bool ack_repeat(struct rl_flow_slot *s,
				       const struct rl_flow *f, __u64 now)
{
	__u32 n;

	if (!flow_equal(&s->flow, f))
		return false;
	n = s->repeats;
	if (n >= retrans_max_repeats || now - s->seen_ns >= retrans_window_ns) {
		count(RL_CNT_REPEAT_CHARGED);
		return false;
	}
	s->repeats = n + 1;
	s->seen_ns = now;
	return true;
}

/* Finds the flow's slot in *at (nothing while the cache is off) and
 * whether it holds this very flow: the packet is a copy. */
static __always_inline bool open_copy(struct syn_info *si, struct flow_at *at)
{
	at->slot = NULL;
	at->tag = NULL;
	at->idx = 0;
	at->want = 0;
	at->found = 0;
	if (!retrans_window_ns)
		return false;
	flow_find(&si->flow, at);
	return flow_maybe(at) && flow_equal(&at->slot->flow, &si->flow);
}

/*
 * The retransmission check, before the bucket: a free copy of a flow
 * admitted here passes without a token (counted).  *at is where the flow
 * lives in the flow cache, for the admission to write (nothing found
 * while the cache is off).  A flow whose tag says it is new is not read
 * further.
 */
static __always_inline bool open_repeat(struct syn_info *si,
					struct rl_stats *st, __u64 now,
					struct flow_at *at)
{
	struct rl_flow_slot *s;

	if (!open_copy(si, at))
		return false;
	s = at->slot;
	/* its end may have been judged on another CPU */
	if (s->repeats < retrans_max_repeats && flow_ended(s))
		s->repeats = retrans_max_repeats;
	if (!(si->kind == P_ACK ? ack_repeat(s, &si->flow, now) :
				 flow_repeat(s, &si->flow, now)))
		return false;
	st->admitted++;
	st->retransmits++;
	return true;
}

/* An admission, counted and remembered in its flow's slot. */
static __always_inline int open_admit(struct syn_info *si, struct rl_stats *st,
				      struct flow_at *at, __u64 now)
{
	st->admitted++;
	flow_keep(at, &si->flow, now);
	return V_PASS;
}

/* A refusal, counted: V_RST with si->tenant set, or V_DROP. */
static __always_inline int open_refuse(struct syn_info *si,
				       const struct rl_tenant *t,
				       struct rl_stats *st, __u32 key)
{
	st->denied++;
	/* A fragment's RST could not acknowledge the whole SYN: drop it. */
	if (t->action == RL_ACT_RST && !si->fragment) {
		si->tenant = key;
		return V_RST;
	}
	return V_DROP;
}

/*
 * The decision on a packet that may open a connection (si->kind: P_SYN, or
 * P_ACK for verification): V_PASS, V_DROP, or V_RST with si->tenant set for
 * the caller, which builds the reply.  A global function: the verifier
 * checks it once, on its own, with si's contents unknown - so nothing here
 * may trust them beyond what it checks itself.
 */
__noinline int judge_open(struct syn_info *si)
{
	struct rl_tenant *in, *held = NULL, *iheld = NULL;
	struct flow_at at = { 0 };
	struct rl_conn_stats *cs = NULL;
	bool opens, tcap, icap, reserved = false, overdrawn = false;
	enum conn_seen seen = CONN_NEW;
	struct rl_tenant *t;
	struct rl_stats *st;
	struct rl_flow ck;
	__u64 now;
	bool ok;
	int id;
	__u32 key;

	if (!si)
		return V_PASS;
	if (si->kind == P_SYN)
		count(RL_CNT_SYN);
	else if (si->kind != P_ACK)
		return V_PASS;

	id = si->classified ? si->cls : classify(si);
	/* for V_LOOKUP: the second call takes the answer */
	si->cls = id;
	si->classified = 1;
	key = id;
	t = id >= 0 ? bpf_map_lookup_elem(&tenants, &key) : NULL;
	st = id >= 0 ? bpf_map_lookup_elem(&tenant_stats, &key) : NULL;
	if (!t || !st || t->mode == RL_MODE_NONE) {
		if (si->kind == P_ACK)
			goto inst_ack;
		if (id < 0)
			count(RL_CNT_NOMATCH);
		return judge_nomatch(si);
	}
	if (READ_ONCE(t->flags) & RL_F_VERIFY) {
		if (si->kind == P_ACK && si->sk == SK_UNKNOWN)
			return V_LOOKUP;
		if (verify_passes(si))
			return answer_here(si, t) ? V_COOKIE : V_PASS;
	} else if (si->kind == P_ACK) {
		goto inst_ack;
	}

	/* The coarse clock: a few ns where the precise one can cost tens.
	 * Recent flows and a stale heartbeat are judged in seconds; the
	 * buckets that need better re-read it (take_gcra()). */
	now = bpf_ktime_get_coarse_ns();
	/* Before the bucket: a retransmission must not take a token. */
	if (open_repeat(si, st, now, &at))
		return V_PASS;

	/* The caps before the bucket, so that a SYN refused at a cap costs
	 * no token: the instance's first, then the tenant's (which gives the
	 * instance's place back when it refuses).  A SYN only checks the
	 * instance's: its place is taken at the handshake's ACK
	 * (judge_inst_ack()); a verified ACK, which is where the server makes
	 * the connection, takes it here.  A SYN that also carries RST or FIN
	 * opens nothing on the server: it is not counted.  A verified ACK
	 * with FIN opens a connection as any (half-closed, and the server
	 * may send for as long as it likes): it is. */
	in = instance_on();
	opens = si->kind == P_ACK ||
		!(si->tcp_flags & (TCP_FLAG_RST | TCP_FLAG_FIN));
	icap = in && (READ_ONCE(in->flags) & RL_F_CONNCAP) && opens;
	tcap = (t->flags & RL_F_CONNCAP) && opens;
	if (tcap) {
		cs = bpf_map_lookup_elem(&conn_stats, &key);
		tcap = cs != NULL;
	}
	if (tcap || icap) {
		conn_key(si, false, &ck);
		seen = conn_repeat(&ck, si, cs);
		if (seen == CONN_NEW) {
			if (icap && si->kind == P_SYN) {
				if (inst_full(in))
					goto refuse;
			} else if (icap) {
				if (!inst_reserve(in))
					goto refuse;
				iheld = in;
				reserved = true;
			}
			if (tcap && cs) {
				if (conn_reserve(t, cs, now) == CONN_REFUSED) {
					if (iheld)
						__sync_fetch_and_add(&iheld->conns, -1);
					goto refuse;
				}
				held = t;
				reserved = true;
			}
		}
	}

	/* The source's bucket first: a SYN it refuses costs the tenant no
	 * token, so one source cannot spend the others' share. */
	if ((READ_ONCE(t->flags) & RL_F_PERSOURCE) &&
	    !src_take(si, key, t->flags, now)) {
		ok = false;
	} else if (t->mode == RL_MODE_STANDALONE) {
		ok = take_gcra(&t->tat, t->interval_ns, t->tolerance_ns, now);
	} else {
		/* Leased tokens first, even while degraded: a Redis blip
		 * shorter than a lease changes nothing.  Past the last one,
		 * the fail policy while degraded, else the overdraft, which
		 * the next lease pays back. */
		__s64 od;

		ok = take_leased(t, key, st, now, 0);
		if (!ok && ((READ_ONCE(t->flags) & RL_F_DEGRADED) ||
			    fleet_degraded(now))) {
			ok = take_failed(t, st, now);
		} else if (!ok && (od = READ_ONCE(t->overdraft)) > 0) {
			ok = overdrawn = take_leased(t, key, st, now, -od);
		}
	}

	if (!ok && (t->flags & RL_F_SHADOW)) {
		st->shadow_denied++;
		ok = true;
	}
	/* The instance's rate last: a SYN its tenant refuses spends none of
	 * the host's. */
	if (ok && in && READ_ONCE(in->interval_ns) &&
	    !take_gcra(&in->tat, in->interval_ns, in->tolerance_ns, now)) {
		count(RL_CNT_INST_RATE);
		ok = false;
	}
	if (ok && seen == CONN_PORTS && !conn_take_over(cs, &ck, si, now))
		ok = false;
	if (reserved) {
		if (!ok) {
			if (held)
				__sync_fetch_and_add(&held->conns, -1);
			if (iheld)
				__sync_fetch_and_add(&iheld->conns, -1);
		} else if (!conn_insert(held, key, cs, iheld, &ck, si, now) &&
			   !(t->flags & RL_F_SHADOW)) {
			ok = false;
		}
	}
	if (ok) {
		/* counted as admitted on the overdraft only once nothing
		 * after the bucket refused it */
		if (overdrawn)
			count(RL_CNT_OVERDRAWN);
		if (si->kind == P_ACK)
			ack_fin_taken(si);
		return open_admit(si, st, &at, now);
	}
refuse:
	return open_refuse(si, t, st, key);
inst_ack:
	return judge_inst_ack(si);
}

/*
 * Whether a leased tenant's bucket refuses a SYN whatever floor applies:
 * its count at or below zero and at or below the overdraft's floor, with no
 * low-water event to send and the tenant not degraded (flags: the SYN's one
 * read of them).  The fleet's own degraded state, which needs the clock, is
 * the caller's to check.  One read of each word and no write: what every
 * SYN of a flood on a spent lease meets.
 */
static __always_inline bool leased_dry(const struct rl_tenant *t, __u32 flags)
{
	__s64 tokens = READ_ONCE(t->tokens);
	__s64 od = READ_ONCE(t->overdraft);

	if (tokens > 0 || (od > 0 && tokens > -od) || (flags & RL_F_DEGRADED))
		return false;
	return !(tokens <= t->lowwater && READ_ONCE(t->lowwater_armed));
}

/*
 * The SYNs a host sees most, decided inline in the entry program rather
 * than by a call into judge_open(): those of a standalone tenant without
 * verification, caps or per-source limits, those of such a leased tenant
 * whose bucket is spent to its floor (a flood's), and those no rule
 * matches, while the instance limit is off.  A call costs its return, and
 * where the kernel guards returns (AMD's Safe RET) every return is
 * mispredicted on purpose: about 10 ns, as much as the rest of an
 * admission.  Decides exactly as judge_open() would; -1 for every other
 * SYN, having changed nothing but si->cls, the classifier's answer, which
 * judge_open() then takes.
 * Kept to what those SYNs need: the verifier walks it once per shape of
 * header chain the parser can leave.
 */
static __always_inline int judge_syn(struct syn_info *si)
{
	struct flow_at at;
	struct rl_tenant *t;
	struct rl_stats *st;
	__u32 key, flags;
	bool leased;
	__u64 now;
	int id;

	id = classify(si);
	if (instance_on())
		goto pass_on;
	if (id < 0) {
		count(RL_CNT_SYN);
		count(RL_CNT_NOMATCH);
		return V_PASS;
	}
	key = id;
	t = bpf_map_lookup_elem(&tenants, &key);
	st = bpf_map_lookup_elem(&tenant_stats, &key);
	if (!t || !st || t->mode == RL_MODE_NONE) {
		count(RL_CNT_SYN);
		return V_PASS;
	}
	/* One read of the flags: a SYN judged here sees one version of
	 * them, as a SYN judged a moment earlier or later would. */
	flags = READ_ONCE(t->flags);
	leased = t->mode == RL_MODE_LEASED;
	if ((!leased && t->mode != RL_MODE_STANDALONE) ||
	    (flags & (RL_F_VERIFY | RL_F_CONNCAP | RL_F_PERSOURCE)) ||
	    (leased && !leased_dry(t, flags)))
		goto pass_on;

	if (leased) {
		/* a degraded fleet's spent lease is the fail policy's to
		 * judge; a refused SYN's only clock, so no call for it */
		now = tick_now();
		if (fleet_degraded(now))
			goto pass_on;
	} else {
		now = bpf_ktime_get_coarse_ns();
	}
	/* a copy of a flow admitted here: judge_open() asks whether it
	 * ended on another CPU, and whether it passes free */
	if (open_copy(si, &at))
		goto pass_on;
	count(RL_CNT_SYN);
	if (!leased && take_gcra(&t->tat, t->interval_ns, t->tolerance_ns, now))
		return open_admit(si, st, &at, now);
	if (flags & RL_F_SHADOW) {
		st->shadow_denied++;
		return open_admit(si, st, &at, now);
	}
	return open_refuse(si, t, st, key);

pass_on:
	si->cls = id;
	si->classified = 1;
	return -1;
}

/*
 * What is left of the decision on a parsed packet: P_SUSPECT is judged
 * (judge_unparsed()), and P_END - or P_ACK with FIN, once its handshake was
 * judged - ends its flow.  A FIN with ACK, while some tenant verifies or
 * the instance has a cap, comes as P_ACK: it may complete a handshake (the
 * server's kernel takes a cookie from a FIN too, and the data it carries),
 * so decide() judges it as an ACK first, and then it ends its flow as any FIN does.  A global
 * function, as judge_open(), which it never calls: the stacks of the two
 * never add up.
 */
__noinline int judge(struct syn_info *si, void *ctx __arg_ctx)
{
	if (!si)
		return V_PASS;
	if (si->kind == P_SUSPECT)
		return judge_unparsed(si);
	flow_end(si);
	if (caps_on())
		conn_end(si, false, bpf_ktime_get_coarse_ns(), ctx);
	return V_PASS;
}

/* Whether an ACK completes the handshake of request socket sk: it
 * acknowledges the server's SYN-ACK and follows the client's SYN, as the
 * kernel's tcp_check_req() wants before it makes the connection.  si->isn
 * is still the ACK's own sequence number. */
static __always_inline bool req_completes(struct bpf_sock *sk,
					  const struct syn_info *si)
{
	struct tcp_request_sock *req = bpf_skc_to_tcp_request_sock(sk);

	if (!req)
		return false;
	return req->snt_isn + 1 == bpf_ntohl(si->ack_seq) &&
	       req->rcv_isn + 1 == bpf_ntohl(si->flow.isn);
}

/*
 * The server's socket table for si's 4-tuple, seen from the client (enum
 * sk_seen).  Only an entry point may call the lookup (it needs the program's
 * context), so judge_open() asks for it with V_LOOKUP; judge() gets it
 * before it is called.  The lookup takes the established table first, then
 * the listeners: a few tens of ns, paid only by a verifying tenant's ACKs,
 * while the instance has a cap by the ACKs no tenant matches that `conns`
 * does not hold, and, while the flow cache is on, by RSTs and FINs.
 */
static __always_inline __u8 sk_seen(void *ctx, struct syn_info *si)
{
	struct bpf_sock *sk;
	__u8 r;

	sk = sk_lookup(ctx, si);
	if (!sk) {
		si->srv_end = SRV_END_NO;
		return SK_NOTHING;
	}
	if (sk->state == BPF_TCP_LISTEN)
		r = SK_LISTEN;
	else if (sk->state != BPF_TCP_NEW_SYN_RECV)
		r = SK_OPEN;
	else if (si->kind == P_ACK && req_completes(sk, si))
		r = SK_REQ;
	else
		r = SK_REQ_OTHER;
	if (si->tcp_flags & (TCP_FLAG_RST | TCP_FLAG_FIN))
		si->srv_end = sk_ends(sk, si) ? SRV_END_YES : SRV_END_NO;
	bpf_sk_release(sk);
	return r;
}

/*
 * Answering a verifying tenant's SYN here (RL_F_ANSWER), as the server's
 * kernel would answer it with tcp_syncookies=2: a SYN-ACK whose sequence
 * number is the kernel's own cookie (same helper, same secret), so that the
 * client's ACK opens the connection on the server as the kernel's own
 * cookie would (verify_passes() charges it then).  The server's kernel
 * takes a cookie ACK only while its listener has sent cookies itself in
 * the last two minutes (tcp_synq_no_recent_overflow()): a SYN meets the
 * listener first, and goes to the kernel to answer when the listener's
 * last cookie is older than COOKIE_FRESH_JIFFIES.
 */

/* A listener's last cookie at most this old (jiffies): a SYN is answered
 * here.  Under any HZ (100 to 1000), 60 s at most, half the two minutes
 * the kernel takes cookie ACKs after its last cookie. */
#define COOKIE_FRESH_JIFFIES	6000

/* Whether the server's listener for si takes cookie ACKs for a while yet:
 * found by the lookup (no socket of the 4-tuple itself: a TIME_WAIT one
 * is the kernel's to judge), its last cookie recent. */
static __noinline bool listener_takes_cookies(void *ctx,
					      const struct syn_info *si)
{
	struct bpf_sock *sk = sk_lookup(ctx, si);
	struct sock_reuseport *reuse;
	struct tcp_sock *tp;
	__u32 stamp;

	if (!sk)
		return false;
	if (sk->state != BPF_TCP_LISTEN) {
		bpf_sk_release(sk);
		return false;
	}
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp) {
		bpf_sk_release(sk);
		return false;
	}
	reuse = tp->inet_conn.icsk_inet.sk.sk_reuseport_cb;
	stamp = reuse ? reuse->synq_overflow_ts :
			(__u32)tp->rx_opt.ts_recent_stamp;
	bpf_sk_release(sk);
	return (__u32)bpf_jiffies64() - stamp <= COOKIE_FRESH_JIFFIES;
}

/* The SYN's options a cookie SYN-ACK answers. */
struct syn_opts {
	__u32 tsval;		/* network order, as the SYN carried it */
	__u16 mss;		/* 0: none offered */
	__u8 wscale;		/* 0xff: none offered */
	__u8 sack;
	__u8 ts;
};

#define TCPOPT_EOL	0
#define TCPOPT_NOP	1
#define TCPOPT_MSS	2
#define TCPOPT_WSCALE	3
#define TCPOPT_SACK_OK	4
#define TCPOPT_TS	8
#define TCP_OPTS_MAX	40

/* The state of a walk through a SYN's options (syn_opt_step()). */
struct opt_walk {
	__u8 ob[64];		/* the options, zero past them */
	__u32 olen;		/* their length */
	__u32 i;		/* where the next one starts */
	struct syn_opts o;
};

/* One option of the walk: 1 once the walk is over.  A bpf_loop()
 * callback, which the verifier checks once, not once per option. */
static long syn_opt_step(__u32 idx, struct opt_walk *w)
{
	__u32 i = w->i;
	__u8 kind, len;

	if (i >= w->olen || i >= TCP_OPTS_MAX)
		return 1;
	kind = w->ob[i & 63];
	if (kind == TCPOPT_EOL)
		return 1;
	if (kind == TCPOPT_NOP) {
		w->i = i + 1;
		return 0;
	}
	len = w->ob[(i + 1) & 63];
	if (len < 2 || i + len > w->olen)
		return 1;
	if (kind == TCPOPT_MSS && len == 4)
		w->o.mss = w->ob[(i + 2) & 63] << 8 | w->ob[(i + 3) & 63];
	else if (kind == TCPOPT_WSCALE && len == 3)
		w->o.wscale = w->ob[(i + 2) & 63];
	else if (kind == TCPOPT_SACK_OK && len == 2)
		w->o.sack = 1;
	else if (kind == TCPOPT_TS && len == 10) {
		w->o.ts = 1;
		w->o.tsval = (__u32)w->ob[(i + 2) & 63] |
			     (__u32)w->ob[(i + 3) & 63] << 8 |
			     (__u32)w->ob[(i + 4) & 63] << 16 |
			     (__u32)w->ob[(i + 5) & 63] << 24;
	}
	w->i = i + len;
	return 0;
}

/* Reads the options of the SYN whose header is at th into w->o: 0, or -1
 * when the header does not lie whole in the frame. */
static __always_inline int syn_opts_read(struct tcphdr *th, void *data_end,
					 struct opt_walk *w)
{
	__u8 *p = (void *)(th + 1);
	__u32 i;

	__builtin_memset(w, 0, sizeof(*w));
	w->o.wscale = 0xff;
	if ((void *)(th + 1) > data_end)
		return -1;
	w->olen = th->doff * 4 - sizeof(*th);
	if (w->olen > TCP_OPTS_MAX)
		return -1;
	for (i = 0; i < TCP_OPTS_MAX; i++) {
		if (i >= w->olen)
			break;
		if ((void *)(p + i + 1) > data_end)
			return -1;
		w->ob[i] = p[i];
	}
	bpf_loop(TCP_OPTS_MAX, syn_opt_step, w, 0);
	return 0;
}

/* The kernel's cookie for the SYN of si, client MSS mss (0: none offered,
 * the kernel's default then).  Negative when the helper fails. */
static __always_inline __s64 cookie_gen(const struct syn_info *si, __u16 mss)
{
	struct {
		struct tcphdr th;
		__u8 opt[4];
	} syn = {};
	__s64 c;

	syn.th.source = si->flow.sport;
	syn.th.dest = si->flow.dport;
	syn.th.seq = si->flow.isn;
	syn.th.doff = sizeof(syn) / 4;
	syn.th.syn = 1;
	mss = mss ?: 536;	/* the kernel's TCP_MSS_DEFAULT */
	syn.opt[0] = TCPOPT_MSS;
	syn.opt[1] = 4;
	syn.opt[2] = mss >> 8;
	syn.opt[3] = mss & 0xff;
	if (si->flow.family == 4) {
		struct iphdr ip = {};

		client_ip4(si, &ip);
		c = bpf_tcp_raw_gen_syncookie_ipv4(&ip, &syn.th, sizeof(syn));
	} else {
		struct ipv6hdr ip6 = {};

		client_ip6(si, &ip6);
		c = bpf_tcp_raw_gen_syncookie_ipv6(&ip6, &syn.th, sizeof(syn));
	}
	return c;
}

/* The timestamp of a cookie SYN-ACK: the kernel's millisecond clock with
 * the options in its low 6 bits, never ahead of the clock, as the kernel's
 * cookie_init_timestamp() makes it: the server's own later timestamps
 * (net.ipv4.tcp_timestamps=2: no offset) then never run backwards. */
static __always_inline __u32 cookie_ts(const struct syn_opts *o, __u32 cfg)
{
	__u32 now = bpf_ktime_get_ns() / 1000000, opt, ts;

	opt = o->wscale != 0xff && (cfg & RL_COOKIE_WSCALE) ?
		(o->wscale > 14 ? 14 : o->wscale) : 0xf;
	if (o->sack && (cfg & RL_COOKIE_SACK))
		opt |= 0x10;
	ts = (now & ~0x3fU) | opt;
	if ((__s32)(ts - now) > 0)
		ts -= 0x40;
	return ts;
}

/* The reply's TCP header, options and all, in w (40 bytes, zero past it):
 * its length.  mss is the server's to offer. */
static __always_inline __u32 synack_tcp(__u32 *w, const struct syn_info *si,
					const struct syn_opts *o, __u32 cookie,
					__u16 mss)
{
	struct tcphdr *th = (void *)w;
	__u32 cfg = READ_ONCE(cookie_opts), n = 5;
	bool ts = o->ts && (cfg & RL_COOKIE_TS);

	th->source = si->flow.dport;
	th->dest = si->flow.sport;
	th->seq = bpf_htonl(cookie);
	th->ack_seq = bpf_htonl(bpf_ntohl(si->flow.isn) + 1);
	th->syn = 1;
	th->ack = 1;
	th->window = bpf_htons(65535 / mss * mss);
	if (o->mss)
		w[n++] = bpf_htonl(TCPOPT_MSS << 24 | 4 << 16 | mss);
	if (ts) {
		w[n++] = bpf_htonl(o->sack && (cfg & RL_COOKIE_SACK) ?
				   TCPOPT_SACK_OK << 24 | 2 << 16 | TCPOPT_TS << 8 | 10 :
				   TCPOPT_NOP << 24 | TCPOPT_NOP << 16 | TCPOPT_TS << 8 | 10);
		w[n++] = bpf_htonl(cookie_ts(o, cfg));
		w[n++] = o->tsval;
		if (o->wscale != 0xff && (cfg & RL_COOKIE_WSCALE))
			w[n++] = bpf_htonl(TCPOPT_NOP << 24 | TCPOPT_WSCALE << 16 |
					   3 << 8 | RL_COOKIE_RCV_WSCALE(cfg));
	}
	th->doff = n & 0xf;
	return n * 4;
}

/* The MSS the server offers on the interface the SYN came in on. */
static __always_inline __u16 server_mss(void *ctx, const struct syn_info *si)
{
	__u32 mtu = 0, hdrs = si->flow.family == 4 ? 40 : 60;

	if (bpf_check_mtu(ctx, 0, &mtu, 0, 0) < 0 || mtu <= hdrs + 64)
		return 536;
	mtu -= hdrs;
	return mtu > 0xffff ? 0xffff : mtu;
}

/*
 * Rewrites si's SYN in place into its cookie SYN-ACK and returns the
 * reply's length, for the caller to trim the frame to; 0 when the SYN is
 * left for the server's kernel to answer: an IPv6 SYN behind extension headers,
 * a reply longer than the SYN (the reply offers only what the SYN offered,
 * so a SYN's own options always leave room).  VLAN tags stay as they were.
 * A function of its own: its frame is not the entry point's.
 */
static __noinline int answer_syn(void *ctx, void *data, void *data_end,
				 const struct syn_info *si)
{
	__u32 l3_off = si->l3_off & 0xff, tcp_len, csum = 0, w[10] = {};
	void *l3 = data + l3_off;
	struct ethhdr *eth = data;
	struct opt_walk wk;
	struct syn_opts *o = &wk.o;
	struct tcphdr *th;
	__u8 mac[ETH_ALEN];
	__u32 *dst;
	__s64 c;
	__u16 mss;
	__u32 i;

	if (si->flow.family == 4) {
		struct iphdr *ip = l3;

		if ((void *)(ip + 1) > data_end)
			return 0;
		th = l3 + ((ip->ihl * 4) & 0x3c);
	} else {
		struct ipv6hdr *ip6 = l3;

		if ((void *)(ip6 + 1) > data_end || ip6->nexthdr != IPPROTO_TCP)
			return 0;
		th = (void *)(ip6 + 1);
	}
	if (syn_opts_read(th, data_end, &wk))
		return 0;
	mss = server_mss(ctx, si);
	c = cookie_gen(si, o->mss);
	if (c < 0)
		return 0;
	tcp_len = synack_tcp(w, si, o, (__u32)c, mss);
	csum = reply_pseudo_sum(si, tcp_len);
	((struct tcphdr *)w)->check =
		csum_fold(bpf_csum_diff(0, 0, (__be32 *)w, sizeof(w), csum));

	if ((void *)(eth + 1) > data_end)
		return 0;
	dst = l3 + (si->flow.family == 4 ? sizeof(struct iphdr) :
					   sizeof(struct ipv6hdr));
	/* every word the reply needs lies inside the SYN's frame, or the
	 * kernel answers: nothing is written before that is known */
	if ((void *)dst + tcp_len > data_end)
		return 0;
	for (i = 0; i < 10; i++) {
		if (i * 4 >= tcp_len)
			break;
		if ((void *)(dst + i + 1) > data_end)
			return 0;
		dst[i] = w[i];
	}
	if (reply_ip(l3, data_end, si, tcp_len))
		return 0;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	count(RL_CNT_COOKIE_SENT);
	return (void *)dst + tcp_len - data;
}

/* The cookie SYN-ACK's length (answer_syn()), or 0 when the server's
 * kernel answers the SYN.  The two steps' frames never add up. */
static __noinline int cookie_reply(void *ctx, void *data, void *data_end,
				   const struct syn_info *si)
{
	if (!listener_takes_cookies(ctx, si))
		return 0;
	return answer_syn(ctx, data, data_end, si);
}

/*
 * The decision, shared by the XDP and tc entry points.  Returns the verdict;
 * for V_RST the packet has been rewritten into a reply (a RST, or a cookie
 * SYN-ACK: answer_syn()) and *reply_len is the length to trim it to.
 */
static __always_inline enum verdict decide(void *ctx, void *data,
					   void *data_end, int *reply_len)
{
	struct syn_info si;
	struct rl_stats *st;
	int v;

	switch (parse_packet(data, data_end, &si)) {
	case P_OTHER:
		return V_PASS;
	case P_SHORT:
		count(RL_CNT_UNPARSED);
		return V_PASS;
	case P_DEEP:
		count(RL_CNT_UNPARSED_DROP);
		return V_DROP;
	case P_SYN:
		v = judge_syn(&si);
		if (v < 0)
			v = judge_open(&si);
		break;
	case P_ACK:
		v = judge_open(&si);
		if (v == V_LOOKUP) {
			si.sk = sk_seen(ctx, &si);
			v = judge_open(&si);
		}
		/* a FIN with ACK ends its flow too, whatever the verdict */
		if (si.tcp_flags & TCP_FLAG_FIN) {
			if (!si.sk && retrans_window_ns)
				si.sk = sk_seen(ctx, &si);
			judge(&si, ctx);
		}
		break;
	default:
		/* an end is marked only as the socket table backs it */
		if (si.kind == P_END && retrans_window_ns)
			si.sk = sk_seen(ctx, &si);
		v = judge(&si, ctx);
		break;
	}
	if (v == V_COOKIE) {
		/* a reply, as for V_RST, or the kernel answers */
		*reply_len = cookie_reply(ctx, data, data_end, &si);
		return *reply_len > 0 ? V_RST : V_PASS;
	}
	if (v != V_RST)
		return v == V_DROP ? V_DROP : V_PASS;

	*reply_len = make_rst(data, data_end, &si);
	if (*reply_len <= 0) {
		count(RL_CNT_RST_FAILED);
		return V_DROP;
	}
	st = bpf_map_lookup_elem(&tenant_stats, &si.tenant);
	if (st)
		st->rst_sent++;
	return V_RST;
}

/* The decision as an XDP verdict; shared with the benchmark's wrapper. */
static __always_inline int xdp_decide(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int reply_len;

	switch (decide(ctx, data, data_end, &reply_len)) {
	case V_PASS:
		return XDP_PASS;
	case V_RST:
		if (bpf_xdp_adjust_tail(ctx, reply_len - (int)(data_end - data)))
			return XDP_DROP;
		return XDP_TX;
	default:
		return XDP_DROP;
	}
}

SEC("xdp")
int xdp_rlgate(struct xdp_md *ctx)
{
	return xdp_decide(ctx);
}

/* The same decision at tc ingress, for drivers without XDP.  A RST leaves
 * through the interface it came in on. */
SEC("tc")
int tc_rlgate(struct __sk_buff *skb)
{
	void *data, *data_end;
	int reply_len;

	/* Headers up to a maximal IPv6 chain must be in the linear area. */
	bpf_skb_pull_data(skb, skb->len < 256 ? skb->len : 256);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;

	switch (decide(skb, data, data_end, &reply_len)) {
	case V_PASS:
		return TC_ACT_OK;
	case V_RST:
		if (bpf_skb_change_tail(skb, reply_len, 0))
			return TC_ACT_SHOT;
		return bpf_redirect(skb->ifindex, 0);
	default:
		return TC_ACT_SHOT;
	}
}

/*
 * The server's side of capped connections: its FIN or RST leaves through tc
 * egress, which XDP never sees.  A global function, verified once like
 * judge().  Never changes a packet's fate.
 */
__noinline int egress_end(struct syn_info *si)
{
	/* a FIN with ACK comes as P_ACK while some tenant verifies or the
	 * instance has a cap */
	if (!si || (si->kind != P_END &&
		    !(si->kind == P_ACK && (si->tcp_flags & TCP_FLAG_FIN))))
		return 0;
	conn_end(si, true, bpf_ktime_get_coarse_ns(), NULL);
	return 0;
}

/* tc egress on the protected interfaces: sees the server end connections
 * (its FIN, its RST, its refusal of a SYN).  Everything passes; while no
 * tenant has a cap, nothing is even parsed. */
SEC("tc")
int tc_rlgate_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct syn_info si;

	if (!caps_on())
		return TC_ACT_OK;
	/* A local stack's headers are in the linear area: no pull. */
	switch (parse_packet(data, data_end, &si)) {
	case P_END:
	case P_ACK:
		egress_end(&si);
		break;
	default:
		break;
	}
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
