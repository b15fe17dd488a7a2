// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Builds the frames the XDP tests feed rlgate and the replies they expect
 * back.  Written without the kernel's headers for the wire formats on
 * purpose: every byte is placed by hand, so a layout mistake shared with the
 * program under test cannot cancel itself out.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "pkt.h"

const __u8 pkt_client_mac[6] = { 0x02, 0x00, 0x00, 0x00, 0xc1, 0x01 };
const __u8 pkt_server_mac[6] = { 0x02, 0x00, 0x00, 0x00, 0x5e, 0x02 };

#define TCI_INNER	0x0064	/* VLAN 100 */
#define TCI_OUTER	0x20c8	/* VLAN 200, priority 1 */
#define IN_TTL		57	/* anything but the reply's 64 */
#define IN_TOS		0x28	/* the reply must clear it */
#define IN_FLOW		0x12345	/* IPv6 flow label, likewise */
#define IN_IP_ID	0x1234	/* the reply's id is 0 */
#define IN_ACK		0x01020304
#define IN_WINDOW	64240

/* A realistic SYN option block: MSS, SACK permitted, window scale, NOPs. */
static const __u8 tcp_opt_block[40] = {
	0x02, 0x04, 0x05, 0xb4, 0x01, 0x01, 0x04, 0x02,
	0x01, 0x03, 0x03, 0x07, 0x01, 0x01, 0x01, 0x01,
	0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
	0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
	0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00,
};

static void put16(__u8 *p, __u16 v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static void put32(__u8 *p, __u32 v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static const char *default_src(const struct pkt *p)
{
	if (p->src)
		return p->src;
	return p->family == 6 ? "2001:db8:1::10" : "10.1.0.10";
}

static const char *default_dst(const struct pkt *p)
{
	if (p->dst)
		return p->dst;
	return p->family == 6 ? "2001:db8:100::1" : "198.51.100.1";
}

__u16 pkt_sport(const struct pkt *p)
{
	return htons(p->sport ? p->sport : 40000);
}

__u16 pkt_dport(const struct pkt *p)
{
	return htons(p->dport ? p->dport : 443);
}

static void addr(const struct pkt *p, const char *s, __u8 *out)
{
	if (inet_pton(p->family == 6 ? AF_INET6 : AF_INET, s, out) != 1) {
		fprintf(stderr, "bad address '%s' in a test packet\n", s);
		memset(out, 0, 16);
	}
}

int pkt_l3_off(const struct pkt *p)
{
	return 14 + 4 * p->vlans;
}

static void mark(struct pkt_layout *lay, int off, const char *what)
{
	if (lay && lay->n < PKT_MAX_LAYERS) {
		lay->off[lay->n] = off;
		lay->what[lay->n] = what;
		lay->n++;
	}
}

/* Ethernet and VLAN tags; returns the offset of the L3 header. */
static int put_l2(const struct pkt *p, __u8 *b, __u16 type,
		  const __u8 *dst, const __u8 *src, struct pkt_layout *lay)
{
	int off = 12;

	memcpy(b, dst, 6);
	memcpy(b + 6, src, 6);
	mark(lay, 0, "Ethernet header");
	for (int i = 1; i < p->vlans; i++) {
		put16(b + off, 0x88a8);
		put16(b + off + 2, TCI_OUTER);
		mark(lay, off + 2, "802.1ad tag");
		off += 4;
	}
	if (p->vlans >= 1) {
		put16(b + off, 0x8100);
		put16(b + off + 2, TCI_INNER);
		mark(lay, off + 2, "802.1Q tag");
		off += 4;
	}
	put16(b + off, type);
	return off + 2;
}

/* Length of the IPv6 extension header named by c, and its protocol number. */
static int ext_len(char c, __u8 *proto)
{
	switch (c) {
	case 'H': *proto = 0; return 8;
	case 'R': *proto = 43; return 24;
	case 'D': *proto = 60; return 16;
	case 'F': *proto = 44; return 8;
	case 'A': *proto = 51; return 16;
	}
	*proto = 255;
	return 0;
}

static const char *ext_name(char c)
{
	switch (c) {
	case 'H': return "hop-by-hop header";
	case 'R': return "routing header";
	case 'D': return "destination options";
	case 'F': return "fragment header";
	case 'A': return "authentication header";
	}
	return "?";
}

/* The L4 header and payload at b; returns its length. */
static int put_l4(const struct pkt *p, __u8 *b, __u8 proto,
		  struct pkt_layout *lay, int off)
{
	int i, n;

	if (proto == IPPROTO_TCP) {
		n = 20 + p->tcp_opts;
		memset(b, 0, n);
		put16(b, ntohs(pkt_sport(p)));
		put16(b + 2, ntohs(pkt_dport(p)));
		put32(b + 4, p->seq);
		put32(b + 8, !(p->flags & TH_ACK) ? 0 : p->ack ? p->ack : IN_ACK);
		b[12] = (n / 4) << 4;
		b[13] = p->flags;
		put16(b + 14, IN_WINDOW);
		memcpy(b + 20, p->opt_bytes ? p->opt_bytes : tcp_opt_block,
		       p->tcp_opts);
		mark(lay, off, "TCP header");
		if (p->tcp_opts)
			mark(lay, off + 20, "TCP options");
	} else {
		/* UDP: ports and length; ICMP: echo request.  Both 8 bytes. */
		n = 8;
		memset(b, 0, n);
		if (proto == IPPROTO_UDP) {
			put16(b, ntohs(pkt_sport(p)));
			put16(b + 2, ntohs(pkt_dport(p)));
			put16(b + 4, 8 + p->payload);
			mark(lay, off, "UDP header");
		} else {
			b[0] = p->family == 6 ? 128 : 8;
			mark(lay, off, "ICMP header");
		}
	}
	if (p->payload)
		mark(lay, off + n, "payload");
	for (i = 0; i < p->payload; i++)
		b[n + i] = 'a' + i % 26;
	return n + p->payload;
}

/* Checksum of an L4 segment over its pseudo-header, or plain for ICMPv4. */
static __u16 l4_csum(const struct pkt *p, const __u8 *src, const __u8 *dst,
		     __u8 proto, const __u8 *seg, int len)
{
	__u32 s = 0;
	__u8 ph[8] = { 0 };

	if (proto == IPPROTO_ICMP)
		return csum_fold16(csum_add(0, seg, len));
	if (p->family == 6) {
		s = csum_add(s, src, 16);
		s = csum_add(s, dst, 16);
		put32(ph, len);
		ph[7] = proto;
		s = csum_add(s, ph, 8);
	} else {
		s = csum_add(s, src, 4);
		s = csum_add(s, dst, 4);
		ph[1] = proto;
		put16(ph + 2, len);
		s = csum_add(s, ph, 4);
	}
	return csum_fold16(csum_add(s, seg, len));
}

int pkt_build(const struct pkt *p, __u8 *b, struct pkt_layout *lay)
{
	__u8 proto = p->proto ? p->proto : IPPROTO_TCP;
	__u8 src[16], dst[16];
	int off, l3, l4, l4len, i;
	__u16 ck;

	if (lay)
		memset(lay, 0, sizeof(*lay));
	memset(b, 0, PKT_MAX);

	if (p->family == 0) {
		/* An ARP request, or any other ethertype: 28 opaque bytes. */
		off = put_l2(p, b, p->ethertype, pkt_server_mac,
			     pkt_client_mac, lay);
		mark(lay, off, "payload");
		for (i = 0; i < 28; i++)
			b[off + i] = i;
		off += 28;
		if (lay)
			lay->len = off;
		return off;
	}

	addr(p, default_src(p), src);
	addr(p, default_dst(p), dst);
	if (p->family == 6 && proto == IPPROTO_ICMP)
		proto = IPPROTO_ICMPV6;

	l3 = put_l2(p, b, p->family == 6 ? 0x86dd : 0x0800, pkt_server_mac,
		    pkt_client_mac, lay);
	if (p->family == 4) {
		int ihl = 20 + p->ip_opts;

		mark(lay, l3, "IPv4 header");
		if (p->ip_opts)
			mark(lay, l3 + 20, "IPv4 options");
		l4 = l3 + ihl;
		l4len = put_l4(p, b + l4, proto, lay, l4);
		b[l3] = 0x40 | ihl / 4;
		b[l3 + 1] = IN_TOS;
		put16(b + l3 + 2, ihl + l4len);
		put16(b + l3 + 4, IN_IP_ID);
		put16(b + l3 + 6, p->frag);
		b[l3 + 8] = IN_TTL;
		b[l3 + 9] = proto;
		memcpy(b + l3 + 12, src, 4);
		memcpy(b + l3 + 16, dst, 4);
		if (p->ip_opts) {
			memset(b + l3 + 20, 0x01, p->ip_opts - 1);	/* NOP */
			b[l3 + ihl - 1] = 0x00;				/* EOL */
		}
		put16(b + l3 + 10, csum_fold16(csum_add(0, b + l3, ihl)));
	} else {
		const char *ext = p->ext ? p->ext : "";
		__u8 nh[PKT_MAX_EXT + 1];
		int n = strlen(ext), elen = 0;

		mark(lay, l3, "IPv6 header");
		if (n > PKT_MAX_EXT)
			n = PKT_MAX_EXT;
		for (i = 0; i < n; i++)
			elen += ext_len(ext[i], &nh[i]);
		nh[n] = proto;
		l4 = l3 + 40 + elen;
		off = l3 + 40;
		for (i = 0; i < n; i++) {
			__u8 self;
			int len = ext_len(ext[i], &self);

			mark(lay, off, ext_name(ext[i]));
			memset(b + off, 0, len);
			b[off] = nh[i + 1];
			if (ext[i] == 'F') {
				put16(b + off + 2, p->frag6);
				put32(b + off + 4, 0xcafe0001);
			} else if (ext[i] == 'A') {
				b[off + 1] = len / 4 - 2;	/* AH counts 4-byte units */
				put32(b + off + 4, 0x00001000);	/* SPI */
				put32(b + off + 8, 1);		/* sequence */
			} else {
				b[off + 1] = len / 8 - 1;
				if (ext[i] == 'R') {
					b[off + 2] = 4;	/* segment routing */
				} else {
					b[off + 2] = 1;	/* PadN */
					b[off + 3] = len - 4;
				}
			}
			off += len;
		}
		l4len = put_l4(p, b + l4, proto, lay, l4);
		put32(b + l3, 0x60000000u | IN_TOS << 20 | IN_FLOW);
		put16(b + l3 + 4, elen + l4len);
		b[l3 + 6] = nh[0];
		b[l3 + 7] = IN_TTL;
		memcpy(b + l3 + 8, src, 16);
		memcpy(b + l3 + 24, dst, 16);
	}
	ck = l4_csum(p, src, dst, proto, b + l4, l4len);
	put16(b + l4 + (proto == IPPROTO_UDP ? 6 :
			proto == IPPROTO_TCP ? 16 : 2), ck);
	if (p->l4_cut && p->l4_cut < l4len) {
		/* A first fragment: the IP length covers l4_cut bytes of the
		 * segment, the rest is gone (padding stays zero). */
		memset(b + l4 + p->l4_cut, 0, l4len - p->l4_cut);
		if (p->family == 4) {
			put16(b + l3 + 2, l4 - l3 + p->l4_cut);
			put16(b + l3 + 10, 0);
			put16(b + l3 + 10, csum_fold16(csum_add(0, b + l3, l4 - l3)));
		} else {
			put16(b + l3 + 4, l4 - l3 - 40 + p->l4_cut);
		}
		l4len = p->l4_cut;
	}
	off = l4 + l4len + p->pad;	/* padding stays zero */
	if (lay)
		lay->len = off;
	return off;
}

int pkt_build_rst(const struct pkt *p, __u8 *b)
{
	__u8 src[16], dst[16];
	int l3, l4;

	memset(b, 0, PKT_MAX);
	addr(p, default_src(p), src);
	addr(p, default_dst(p), dst);

	/* Back to the client: MACs and addresses swapped, tags as they were. */
	l3 = put_l2(p, b, p->family == 6 ? 0x86dd : 0x0800, pkt_client_mac,
		    pkt_server_mac, NULL);
	if (p->family == 4) {
		b[l3] = 0x45;
		put16(b + l3 + 2, 40);
		put16(b + l3 + 6, 0x4000);	/* DF, id 0 */
		b[l3 + 8] = 64;
		b[l3 + 9] = IPPROTO_TCP;
		memcpy(b + l3 + 12, dst, 4);
		memcpy(b + l3 + 16, src, 4);
		put16(b + l3 + 10, csum_fold16(csum_add(0, b + l3, 20)));
		l4 = l3 + 20;
	} else {
		b[l3] = 0x60;
		put16(b + l3 + 4, 20);
		b[l3 + 6] = IPPROTO_TCP;
		b[l3 + 7] = 64;
		memcpy(b + l3 + 8, dst, 16);
		memcpy(b + l3 + 24, src, 16);
		l4 = l3 + 40;
	}
	put16(b + l4, ntohs(pkt_dport(p)));
	put16(b + l4 + 2, ntohs(pkt_sport(p)));
	/* seq 0; ack covers the SYN and any data it carried */
	put32(b + l4 + 8, p->seq + 1 + p->payload);
	b[l4 + 12] = 5 << 4;
	b[l4 + 13] = TH_RST | TH_ACK;
	put16(b + l4 + 16, l4_csum(p, dst, src, IPPROTO_TCP, b + l4, 20));
	return l4 + 20;
}

const char *pkt_check_csums(const __u8 *f, int len, int l3)
{
	__u32 s = 0;
	__u8 ph[8] = { 0 };
	int l4, seg;

	if ((f[l3] >> 4) == 4) {
		int ihl = (f[l3] & 15) * 4;

		if (l3 + ihl > len)
			return "IPv4 header past the end";
		if (csum_fold16(csum_add(0, f + l3, ihl)) != 0)
			return "IPv4 header checksum";
		l4 = l3 + ihl;
		seg = (f[l3 + 2] << 8 | f[l3 + 3]) - ihl;
		s = csum_add(s, f + l3 + 12, 8);
		ph[1] = f[l3 + 9];
		put16(ph + 2, seg);
		s = csum_add(s, ph, 4);
	} else {
		l4 = l3 + 40;
		seg = f[l3 + 4] << 8 | f[l3 + 5];
		s = csum_add(s, f + l3 + 8, 32);
		put32(ph, seg);
		ph[7] = f[l3 + 6];
		s = csum_add(s, ph, 8);
	}
	if (seg < 20 || l4 + seg > len)
		return "TCP segment length";
	if (csum_fold16(csum_add(s, f + l4, seg)) != 0)
		return "TCP checksum";
	return NULL;
}

int pkt_hex(char *out, size_t cap, const char *label, const __u8 *b,
	    int len, const __u8 *other, int other_len)
{
	size_t n = 0;
	int i;

#define EMIT(...) do {							\
	int w_ = snprintf(out + n, n < cap ? cap - n : 0, __VA_ARGS__);	\
	if (w_ > 0)							\
		n += w_;						\
} while (0)
	EMIT("%s (%d bytes):", label, len);
	for (i = 0; i < len; i++) {
		bool diff = other && (i >= other_len || b[i] != other[i]);

		if (i % 16 == 0)
			EMIT("\n  %04x:", i);
		EMIT(" %02x%s", b[i], diff ? "*" : " ");
	}
#undef EMIT
	return n < cap ? (int)n : (int)cap - 1;
}
