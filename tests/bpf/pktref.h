/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The packet fuzzer's reference: what the Linux receive path would make of
 * one Ethernet frame, decided from its bytes alone.  Written apart from
 * rlgate's parser and sharing nothing with it, so that a mistake in one is
 * not repeated in the other.
 */
#ifndef RL_TEST_PKTREF_H
#define RL_TEST_PKTREF_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>

/* What a frame is, from the point of view of opening a TCP connection. */
enum ref_kind {
	REF_NOT_IP,		/* no IPv4 or IPv6 behind at most two tags */
	REF_DEEP_VLAN,		/* more than RL_VLAN_MAX tags: refused */
	REF_DROPPED,		/* Linux drops it before TCP sees it */
	REF_NOT_TCP,		/* IP, but its upper layer is not TCP */
	REF_LATE_FRAGMENT,	/* a fragment at offset >= 24 bytes */
	REF_NOT_SYN,		/* TCP flags known: SYN clear or ACK set */
	REF_MAY_OPEN,		/* may open a connection: must be decided */
};

struct ref {
	enum ref_kind kind;
	const char *why;	/* the rule that decided, for reports */
	int family;		/* 4 or 6 once an IP ethertype is seen */
	int vlans;		/* tags before the IP header */
	int l3_off;		/* offset of the IP header */
	bool have_src;		/* the fixed IP header is in the frame */
	__u8 src[16], dst[16];	/* IPv4 in the first four bytes */
	bool have_ports;	/* the first 4 TCP bytes are in the packet */
	__u16 sport, dport;	/* host order */
	bool fragment;		/* a piece of a fragmented datagram */
	bool syn;		/* a whole SYN (not a fragment) whose TCP
				 * header is complete: what a RST answers */
	bool have_flags;	/* the TCP flags byte Linux will use is known */
	__u8 flags;
	bool have_isn;		/* the sequence number is in the packet */
	__u32 isn;
	__u32 seg_data;		/* for a whole SYN: TCP payload bytes */
	bool plain;		/* unfragmented IPv4 or IPv6 with no extension
				 * headers, well formed to the end of TCP/UDP/
				 * ICMP header: nothing about it to refuse
				 * unless it is a SYN */
};

/* Judges frame[0..len).  Never reads outside it. */
void ref_judge(const __u8 *frame, size_t len, struct ref *r);

/* The name of a kind, for reports. */
const char *ref_kind_name(enum ref_kind k);

#endif /* RL_TEST_PKTREF_H */
