// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* rlgate's enforcement point: admits or refuses every new TCP connection
 * (a SYN without ACK) per tenant, at XDP or tc ingress.  Everything that is
 * not a SYN leaves after the fewest checks we can manage.
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
/* Groups per half of `cls`, whose max_entries the loader sets to twice it. */
const volatile __u32 cls_half = RL_CLS_GROUPS;
/* log2 of `flow_cache_cpu`'s slots, whose max_entries the loader sets to
 * match (rl_flow_bits()). */
const volatile __u32 flow_bits = RL_FLOW_BITS;

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
	__uint(max_entries, RL_CNT_MAX);
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

enum verdict { V_PASS, V_DROP, V_RST };

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
	__be16 frag_off;	/* offset in the top 13 bits */
	__be32 id;
};

#define IPV6_MAX_EXT	6

/* What parsing a SYN leaves behind for classification and the reply.  The
 * flow key comes first and 8-byte aligned, so it is read as whole words;
 * it is only built (build_flow()) once a rule has matched. */
struct syn_info {
	struct rl_flow flow;	/* addresses, ports, ISN, family */
	void *l3;		/* the IP header, bounds-checked */
	struct tcphdr *tcp;	/* the TCP header, bounds-checked */
	void *end_l3;		/* where the IP header says the packet ends */
	__u32 l3_off;		/* offset of the IP header */
	__u32 seg_len;		/* SYN (1) + TCP payload, for the RST's ack */
	__u32 family;		/* 4 or 6 */
};

static __always_inline void count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &idx);

	if (c)
		*c += 1;
}

#define TCP_FLAGS_OFF	13	/* the byte holding SYN and ACK */
#define TCP_FLAG_SYN	0x02
#define TCP_FLAG_ACK	0x10

/* Results of the parsing helpers below, besides a header pointer. */
enum parse { P_SYN, P_OTHER, P_UNPARSED };

/* Whether the TCP header at tcp is a SYN without ACK; records it if so. */
static __always_inline enum parse parse_tcp(struct tcphdr *tcp, void *data_end,
					    struct syn_info *si, __u32 family,
					    void *end_l3)
{
	if ((void *)(tcp + 1) > data_end)
		return P_UNPARSED;
	if ((((__u8 *)tcp)[TCP_FLAGS_OFF] & (TCP_FLAG_SYN | TCP_FLAG_ACK)) !=
	    TCP_FLAG_SYN)
		return P_OTHER;
	si->tcp = tcp;
	si->end_l3 = end_l3;
	si->family = family;
	return P_SYN;
}

/* The TCP header of an IPv4 packet at l3, if it is a SYN without ACK. */
static __always_inline enum parse parse_ipv4(void *l3, void *data_end,
					     struct syn_info *si)
{
	struct iphdr *ip = l3;
	__u32 ihl;

	if ((void *)(ip + 1) > data_end)
		return P_UNPARSED;
	if (ip->protocol != IPPROTO_TCP)
		return P_OTHER;
	/* A non-first fragment carries no TCP header to judge. */
	if (ip->frag_off & bpf_htons(0x1fff)) {
		count(RL_CNT_FRAGMENT);
		return P_OTHER;
	}
	ihl = ip->ihl * 4;
	if (ihl < sizeof(*ip))
		return P_UNPARSED;
	return parse_tcp(l3 + ihl, data_end, si, 4,
			 l3 + bpf_ntohs(ip->tot_len));
}

static __always_inline enum parse parse_ipv6(void *l3, void *data_end,
					     struct syn_info *si)
{
	struct ipv6hdr *ip6 = l3;
	void *p;
	__u8 nh;

	if ((void *)(ip6 + 1) > data_end)
		return P_UNPARSED;
	nh = ip6->nexthdr;
	p = ip6 + 1;
	for (int i = 0; i < IPV6_MAX_EXT; i++) {
		if (nh == IPPROTO_TCP)
			break;
		if (nh == IPPROTO_HOPOPTS || nh == IPPROTO_ROUTING ||
		    nh == IPPROTO_DSTOPTS) {
			struct ipv6_opt_hdr *oh = p;

			if ((void *)(oh + 1) > data_end)
				return P_UNPARSED;
			nh = oh->nexthdr;
			p += (oh->hdrlen + 1) * 8;
		} else if (nh == IPPROTO_FRAGMENT) {
			struct ipv6_frag_hdr *fh = p;

			if ((void *)(fh + 1) > data_end)
				return P_UNPARSED;
			if (fh->frag_off & bpf_htons(0xfff8)) {
				count(RL_CNT_FRAGMENT);
				return P_OTHER;
			}
			nh = fh->nexthdr;
			p = fh + 1;
		} else {
			return P_OTHER;
		}
	}
	/* More extension headers than we follow: it may be TCP. */
	if (nh != IPPROTO_TCP)
		return P_UNPARSED;
	return parse_tcp(p, data_end, si, 6,
			 (void *)(ip6 + 1) + bpf_ntohs(ip6->payload_len));
}

/*
 * Finds the TCP header and decides whether this is a new connection.
 * Returns true for a SYN without ACK, false for everything else (which
 * passes).  Bounds are checked against data_end before every read, so a
 * truncated packet is simply "not a SYN"; one that the ethertype called
 * IPv4 or IPv6 is also counted as unparsed.
 *
 * The untagged IPv4 non-SYN (the bulk of all traffic) is the path this is
 * shaped for: its ethertype is tested first, and it touches nothing but the
 * headers - the flow key is only written once a SYN matched a rule.
 */
static __always_inline bool parse_syn(void *data, void *data_end,
				      struct syn_info *si)
{
	struct tcphdr *tcp;
	enum parse r;
	void *l3;
	__be16 proto;
	__u32 l4_len;

	l3 = data + sizeof(struct ethhdr);
	if (l3 > data_end)
		return false;
	proto = *(__be16 *)(data + __builtin_offsetof(struct ethhdr, h_proto));

	if (proto == ETH_P_IP_BE) {
		r = parse_ipv4(l3, data_end, si);
	} else {
#pragma unroll
		for (int i = 0; i < 2; i++) {
			struct vlan_hdr *vh = l3;

			if (proto != ETH_P_8021Q_BE && proto != ETH_P_8021AD_BE)
				break;
			if ((void *)(vh + 1) > data_end)
				return false;
			proto = vh->proto;
			l3 = vh + 1;
		}
		if (proto == ETH_P_IP_BE)
			r = parse_ipv4(l3, data_end, si);
		else if (proto == ETH_P_IPV6_BE)
			r = parse_ipv6(l3, data_end, si);
		else
			return false;
	}
	if (r == P_OTHER)
		return false;
	if (r == P_UNPARSED)
		goto unparsed;

	tcp = si->tcp;
	si->l3_off = l3 - data;
	si->l3 = l3;
	/* A SYN may carry data (TCP Fast Open); the RST must acknowledge it. */
	l4_len = si->end_l3 - (void *)tcp;
	if (tcp->doff * 4 < sizeof(*tcp) ||
	    si->end_l3 < (void *)tcp + tcp->doff * 4)
		goto unparsed;
	/* The options must be in the frame too, not only inside the length
	 * the IP header claims: a frame cut short is not a SYN to charge. */
	if ((void *)tcp + tcp->doff * 4 > data_end)
		goto unparsed;
	si->seg_len = 1 + l4_len - tcp->doff * 4;
	return true;

unparsed:
	count(RL_CNT_UNPARSED);
	return false;
}

/* The flow key of a SYN that matched a rule: the whole key, padding
 * included, since it is hashed and compared as words. */
static __always_inline void build_flow(struct syn_info *si)
{
	__builtin_memset(&si->flow, 0, sizeof(si->flow));
	if (si->family == 4) {
		struct iphdr *ip = si->l3;

		__builtin_memcpy(si->flow.saddr, &ip->saddr, 4);
		__builtin_memcpy(si->flow.daddr, &ip->daddr, 4);
	} else {
		struct ipv6hdr *ip6 = si->l3;

		__builtin_memcpy(si->flow.saddr, &ip6->saddr, 16);
		__builtin_memcpy(si->flow.daddr, &ip6->daddr, 16);
	}
	si->flow.family = si->family;
	si->flow.sport = si->tcp->source;
	si->flow.dport = si->tcp->dest;
	si->flow.isn = si->tcp->seq;
}

/* One entry of the classifier: an inlined array lookup and a load. */
static __always_inline __u32 cls_entry(__u32 group, __u32 idx)
{
	struct rl_cls_group *g = bpf_map_lookup_elem(&cls, &group);

	return g ? g->e[idx & (RL_CLS_FANOUT - 1)] : RL_CLS_NONE;
}

/* The tenant a SYN belongs to: the longest prefix wins, and on equal length a
 * rule for this port beats an any-port rule (the compiler has worked that
 * out; this only walks).  -1 when nothing matches. */
static __always_inline int classify(const struct syn_info *si)
{
	struct rl_cls_state *st;
	__u32 zero = 0, base, e;

	st = bpf_map_lookup_elem(&cls_state, &zero);
	if (!st)
		return -1;
	base = (READ_ONCE(st->active) & 1) * cls_half;

	if (si->family == 4) {
		const __u8 *a = (const __u8 *)&((struct iphdr *)si->l3)->saddr;

		e = cls_entry(base + RL_CLS_ROOT4 + a[0], a[1]);
		if (RL_CLS_TYPE(e) == RL_CLS_T_GROUP) {
			e = cls_entry(base + RL_CLS_VAL(e), a[2]);
			if (RL_CLS_TYPE(e) == RL_CLS_T_GROUP)
				e = cls_entry(base + RL_CLS_VAL(e), a[3]);
		}
	} else {
		__u8 a[16];

		__builtin_memcpy(a, &((struct ipv6hdr *)si->l3)->saddr, 16);
		e = cls_entry(base + RL_CLS_ROOT6 + a[0], a[1]);
		for (int i = 2; i < 16; i++) {
			if (RL_CLS_TYPE(e) != RL_CLS_T_GROUP)
				break;
			e = cls_entry(base + RL_CLS_VAL(e), a[i]);
		}
	}
	if (RL_CLS_TYPE(e) == RL_CLS_T_PORTS) {
		__u32 port = bpf_ntohs(si->tcp->dest);
		__u32 col = cls_entry(base + RL_CLS_PORTS + (port >> 8), port);

		e = cls_entry(base + RL_CLS_VAL(e) + (col >> 8), col);
	}
	return RL_CLS_TYPE(e) == RL_CLS_T_TENANT ? (int)RL_CLS_VAL(e) : -1;
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

/* Fleet mode is degraded when the agent says so (its Redis breaker is open)
 * or has stopped saying anything (its heartbeat is stale: it died). */
static __always_inline bool fleet_degraded(__u64 now)
{
	__u32 zero = 0;
	struct rl_agent_state *a = bpf_map_lookup_elem(&agent_state, &zero);

	if (!a)
		return false;
	if (READ_ONCE(a->degraded))
		return true;
	return a->stale_ns && now > a->heartbeat_ns &&
	       now - READ_ONCE(a->heartbeat_ns) > a->stale_ns;
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

/* Leased bucket: user space adds whole tokens, the kernel spends them.
 * fetch-and-add never loses or mints a token: a failed take is put back.
 * While it is out, a concurrent SYN may see one token fewer than there is and
 * be refused; it is never admitted without one. */
static __always_inline bool take_leased(struct rl_tenant *t, __u32 id,
					struct rl_stats *st, __u64 now)
{
	__s64 old = __sync_fetch_and_add(&t->tokens, -1);
	__s64 left = old - 1;

	if (old <= 0) {
		__sync_fetch_and_add(&t->tokens, 1);
		left = 0;
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
	return old > 0;
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

/* The slot this flow lives in on this CPU, if it was admitted here. */
static __always_inline struct rl_flow_slot *flow_slot(const struct rl_flow *f)
{
	__u32 idx = rl_flow_hash(f, flow_bits);

	return bpf_map_lookup_elem(&flow_cache_cpu, &idx);
}

/* True when this very SYN was admitted less than retrans_window_ns ago.
 * Only this CPU writes the slot, and not while this runs: plain reads. */
static __always_inline bool flow_recent(struct rl_flow_slot *s,
					const struct rl_flow *f, __u64 now)
{
	return flow_equal(&s->flow, f) &&
	       now - s->admitted_ns < retrans_window_ns;
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
	s->admitted_ns = now;
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
	union {
		struct { __u8 saddr[4], daddr[4], zero, proto; __be16 len; } v4;
		struct { __u8 saddr[16], daddr[16]; __be32 len; __u8 zero[3], next; } v6;
	} ph = {};
	void *l3 = data + (si->l3_off & 0xff);

	if ((void *)(eth + 1) > data_end)
		return -1;
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);

	ack_seq = bpf_htonl(bpf_ntohl(si->flow.isn) + si->seg_len);

	if (si->flow.family == 4) {
		struct iphdr *ip = l3;

		tcp = (void *)(ip + 1);
		if ((void *)(tcp + 1) > data_end)
			return -1;
		ip->version = 4;
		ip->ihl = 5;
		ip->tos = 0;
		ip->tot_len = bpf_htons(sizeof(*ip) + sizeof(*tcp));
		ip->id = 0;
		ip->frag_off = bpf_htons(0x4000);	/* DF */
		ip->ttl = 64;
		ip->protocol = IPPROTO_TCP;
		ip->check = 0;
		__builtin_memcpy(&ip->saddr, si->flow.daddr, 4);
		__builtin_memcpy(&ip->daddr, si->flow.saddr, 4);
		ip->check = csum_fold(bpf_csum_diff(0, 0, (__be32 *)ip,
						    sizeof(*ip), 0));
		__builtin_memcpy(ph.v4.saddr, si->flow.daddr, 4);
		__builtin_memcpy(ph.v4.daddr, si->flow.saddr, 4);
		ph.v4.proto = IPPROTO_TCP;
		ph.v4.len = bpf_htons(sizeof(*tcp));
		csum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph.v4), 0);
	} else {
		struct ipv6hdr *ip6 = l3;

		tcp = (void *)(ip6 + 1);
		if ((void *)(tcp + 1) > data_end)
			return -1;
		ip6->version = 6;
		ip6->priority = 0;
		ip6->flow_lbl[0] = 0;
		ip6->flow_lbl[1] = 0;
		ip6->flow_lbl[2] = 0;
		ip6->payload_len = bpf_htons(sizeof(*tcp));
		ip6->nexthdr = IPPROTO_TCP;
		ip6->hop_limit = 64;
		__builtin_memcpy(&ip6->saddr, si->flow.daddr, 16);
		__builtin_memcpy(&ip6->daddr, si->flow.saddr, 16);
		__builtin_memcpy(ph.v6.saddr, si->flow.daddr, 16);
		__builtin_memcpy(ph.v6.daddr, si->flow.saddr, 16);
		ph.v6.len = bpf_htonl(sizeof(*tcp));
		ph.v6.next = IPPROTO_TCP;
		csum = bpf_csum_diff(0, 0, (__be32 *)&ph, sizeof(ph.v6), 0);
	}

	tcp->source = si->flow.dport;
	tcp->dest = si->flow.sport;
	tcp->seq = 0;
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
 * The decision, shared by the XDP and tc entry points.  Returns the verdict;
 * for V_RST the packet has been rewritten and *reply_len is the length to trim
 * it to.
 */
static __always_inline enum verdict decide(void *data, void *data_end,
					   int *reply_len)
{
	struct syn_info si;
	struct rl_flow_slot *slot = NULL;
	struct rl_tenant *t;
	struct rl_stats *st;
	__u64 now;
	bool ok;
	int id;
	__u32 key;

	if (!parse_syn(data, data_end, &si))
		return V_PASS;
	count(RL_CNT_SYN);

	id = classify(&si);
	if (id < 0) {
		count(RL_CNT_NOMATCH);
		return V_PASS;
	}
	key = id;
	t = bpf_map_lookup_elem(&tenants, &key);
	st = bpf_map_lookup_elem(&tenant_stats, &key);
	if (!t || !st || t->mode == RL_MODE_NONE)
		return V_PASS;
	build_flow(&si);

	/* The coarse clock: a few ns where the precise one can cost tens.
	 * Recent flows and a stale heartbeat are judged in seconds; the
	 * buckets that need better re-read it (take_gcra()). */
	now = bpf_ktime_get_coarse_ns();
	/* Before the bucket: a retransmission must not take a token. */
	if (retrans_window_ns) {
		slot = flow_slot(&si.flow);
		if (slot && flow_recent(slot, &si.flow, now)) {
			st->admitted++;
			st->retransmits++;
			return V_PASS;
		}
	}

	if (t->mode == RL_MODE_STANDALONE) {
		ok = take_gcra(&t->tat, t->interval_ns, t->tolerance_ns, now);
	} else {
		/* Leased tokens first, even while degraded: a Redis blip
		 * shorter than a lease changes nothing. */
		ok = take_leased(t, key, st, now);
		if (!ok && fleet_degraded(now))
			ok = take_failed(t, st, now);
	}

	if (!ok && (t->flags & RL_F_SHADOW)) {
		st->shadow_denied++;
		ok = true;
	}
	if (ok) {
		st->admitted++;
		if (slot)
			flow_remember(slot, &si.flow, now);
		return V_PASS;
	}

	st->denied++;
	if (t->action == RL_ACT_RST) {
		*reply_len = make_rst(data, data_end, &si);
		if (*reply_len > 0) {
			st->rst_sent++;
			return V_RST;
		}
		count(RL_CNT_RST_FAILED);
	}
	return V_DROP;
}

/* The decision as an XDP verdict; shared with the benchmark's wrapper. */
static __always_inline int xdp_decide(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	int reply_len;

	switch (decide(data, data_end, &reply_len)) {
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

	switch (decide(data, data_end, &reply_len)) {
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

char LICENSE[] SEC("license") = "Dual BSD/GPL";
