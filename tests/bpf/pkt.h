/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Crafted packets for the XDP tests: a declarative description of one frame,
 * a builder that lays it out byte by byte, and an independent builder of the
 * RST|ACK that rlgate must answer it with.
 */
#ifndef RL_TEST_PKT_H
#define RL_TEST_PKT_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>

#include "csum.h"

#define PKT_MAX		512
#define PKT_MAX_LAYERS	24
#define PKT_MAX_EXT	20	/* IPv6 extension headers in `ext` */

/* TCP flag bits as they sit in byte 13 of the header. */
#define TH_FIN	0x01
#define TH_SYN	0x02
#define TH_RST	0x04
#define TH_PSH	0x08
#define TH_ACK	0x10

/*
 * One frame.  Zero fields take sensible defaults, so a table entry names only
 * what makes it special: family 4, TCP, addresses and ports below.
 */
struct pkt {
	int family;		/* 4 or 6; 0 with `ethertype` for anything else */
	__u16 ethertype;	/* only when family is 0 (ARP, ...) */
	int vlans;		/* 0, 1 (802.1Q), or N: N - 1 802.1ad outer
				 * tags, then one 802.1Q */
	__u8 proto;		/* IPPROTO_*; 0 means TCP */
	__u8 flags;		/* TCP flags byte */
	const char *src;	/* source address; family default if NULL */
	const char *dst;
	__u16 sport, dport;	/* host order; 0 means 40000 and 443 */
	__u32 seq;		/* ISN, host order */
	__u32 ack;		/* with TH_ACK: the acknowledgement number,
				 * host order (0: a fixed one) */
	int ip_opts;		/* IPv4 option bytes (multiple of 4) */
	__u16 frag;		/* IPv4 frag_off field, host order (MF 0x2000) */
	const char *ext;	/* IPv6 extension chain: H hop-by-hop, R routing,
				 * D destination options, F fragment, A AH */
	__u16 frag6;		/* IPv6 fragment header's offset|M field */
	int tcp_opts;		/* TCP option bytes (multiple of 4) */
	const __u8 *opt_bytes;	/* those bytes, when not NULL: else MSS,
				 * SACK permitted, window scale and NOPs */
	int payload;		/* TCP payload bytes */
	int pad;		/* Ethernet padding after the IP packet */
	int l4_cut;		/* a first fragment: only this many bytes of
				 * the TCP segment are in it (0: all) */
};

/* Where each header of a built frame starts, for truncation cases. */
struct pkt_layout {
	int n;
	int off[PKT_MAX_LAYERS];
	const char *what[PKT_MAX_LAYERS];
	int len;		/* whole frame */
};

extern const __u8 pkt_client_mac[6], pkt_server_mac[6];

/* Lays `p` out into buf (PKT_MAX bytes) with valid IP and TCP checksums.
 * Returns the frame length; fills *lay when it is not NULL. */
int pkt_build(const struct pkt *p, __u8 *buf, struct pkt_layout *lay);

/* The reply rlgate must send to the SYN `p` describes, built from the
 * description alone (never from the SYN's bytes).  Returns its length. */
int pkt_build_rst(const struct pkt *p, __u8 *buf);


/* Checks the IP header checksum (IPv4) and the TCP checksum of a frame whose
 * IP header is at l3_off and TCP header follows without extension headers.
 * Returns NULL when both are right, else which one is wrong. */
const char *pkt_check_csums(const __u8 *frame, int len, int l3_off);

/* Offset of the IP header: 14 plus 4 per VLAN tag. */
int pkt_l3_off(const struct pkt *p);

/* Network byte order port of the description, with its default applied. */
__u16 pkt_dport(const struct pkt *p);
__u16 pkt_sport(const struct pkt *p);

/* Formats a frame as hex into out, 16 bytes a line, marking the bytes that
 * differ from `other` (may be NULL) with '*'.  Returns the length written. */
int pkt_hex(char *out, size_t cap, const char *label, const __u8 *buf,
	    int len, const __u8 *other, int other_len);

#endif /* RL_TEST_PKT_H */
