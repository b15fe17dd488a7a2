// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Verdict table: the four decisions in both families, segments that open no
 * connection, VLAN tags, IPv4 options, other protocols, and the RST|ACK a
 * refused SYN is answered with.  Each row runs against a fresh world
 * (xdp_table.c).
 */
#include <linux/if_ether.h>
#include <netinet/in.h>

#include "xdp_table.h"

static const struct xdp_case cases[] = {
	/* the four decisions, both families */
	{ "IPv4 SYN within the rate is admitted",
	  { V4, SYN, .src = "10.1.0.10" }, XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv4 SYN over the rate, action drop, is dropped",
	  { V4, SYN, .src = "10.2.0.10" }, XDP_DROP, O_DENY, T_DROP },
	{ "IPv4 SYN over the rate, action rst, is answered with RST|ACK",
	  { V4, SYN, .src = "10.3.0.10", .seq = 0x11223344 },
	  XDP_TX, O_RST, T_RST },
	{ "IPv4 SYN over the rate of a shadow tenant is admitted, counted",
	  { V4, SYN, .src = "10.4.0.10" }, XDP_PASS, O_SHADOW, T_SHADOW },
	{ "IPv6 SYN within the rate is admitted",
	  { V6, SYN, .src = "2001:db8:1::10" }, XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv6 SYN over the rate, action drop, is dropped",
	  { V6, SYN, .src = "2001:db8:2::10" }, XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN over the rate, action rst, is answered with RST|ACK",
	  { V6, SYN, .src = "2001:db8:3::10", .seq = 0x55667788 },
	  XDP_TX, O_RST, T_RST },
	{ "IPv6 SYN over the rate of a shadow tenant is admitted, counted",
	  { V6, SYN, .src = "2001:db8:4::10" }, XDP_PASS, O_SHADOW, T_SHADOW },
	{ "IPv4 SYN of a leased tenant spends one granted token",
	  { V4, SYN, .src = "10.5.0.10" }, XDP_PASS, O_ADMIT, T_LEASED },
	{ "IPv6 SYN of a leased tenant spends one granted token",
	  { V6, SYN, .src = "2001:db8:5::10" }, XDP_PASS, O_ADMIT, T_LEASED },
	{ "IPv4 SYN of a leased tenant with no token is dropped",
	  { V4, SYN, .src = "10.6.0.10" }, XDP_DROP, O_DENY, T_LEASED_EMPTY },

	/* not new connections, from a source that would be refused */
	{ "IPv4 ACK passes uncounted",
	  { V4, .flags = TH_ACK, .src = "10.2.0.10" }, XDP_PASS, O_IGNORED, 0 },
	{ "IPv4 SYN+ACK passes uncounted",
	  { V4, .flags = TH_SYN | TH_ACK, .src = "10.2.0.10" },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv4 RST passes uncounted",
	  { V4, .flags = TH_RST, .src = "10.2.0.10" }, XDP_PASS, O_IGNORED, 0 },
	{ "IPv4 FIN|ACK passes uncounted",
	  { V4, .flags = TH_FIN | TH_ACK, .src = "10.2.0.10" },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv4 PSH|ACK with data passes uncounted",
	  { V4, .flags = TH_PSH | TH_ACK, .src = "10.2.0.10", .payload = 100 },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv6 ACK passes uncounted",
	  { V6, .flags = TH_ACK, .src = "2001:db8:2::10" },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv6 SYN+ACK passes uncounted",
	  { V6, .flags = TH_SYN | TH_ACK, .src = "2001:db8:2::10" },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv6 RST passes uncounted",
	  { V6, .flags = TH_RST, .src = "2001:db8:2::10" },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv6 FIN|ACK passes uncounted",
	  { V6, .flags = TH_FIN | TH_ACK, .src = "2001:db8:2::10" },
	  XDP_PASS, O_IGNORED, 0 },

	/* VLAN tags */
	{ "IPv4 SYN in an 802.1Q tag is admitted",
	  { V4, SYN, .vlans = 1, .src = "10.1.0.10" }, XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv4 SYN in 802.1ad+802.1Q tags is admitted",
	  { V4, SYN, .vlans = 2, .src = "10.1.0.10" }, XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv4 SYN in an 802.1Q tag gets a RST in the same tag",
	  { V4, SYN, .vlans = 1, .src = "10.3.0.10", .seq = 1 },
	  XDP_TX, O_RST, T_RST },
	{ "IPv4 SYN in 802.1ad+802.1Q tags gets a RST in the same tags",
	  { V4, SYN, .vlans = 2, .src = "10.3.0.10", .seq = 2 },
	  XDP_TX, O_RST, T_RST },
	{ "IPv6 SYN in 802.1ad+802.1Q tags is dropped",
	  { V6, SYN, .vlans = 2, .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN in 802.1ad+802.1Q tags gets a RST in the same tags",
	  { V6, SYN, .vlans = 2, .src = "2001:db8:3::10", .seq = 3 },
	  XDP_TX, O_RST, T_RST },

	/* IPv4 options */
	{ "IPv4 SYN with 8 bytes of IP options is classified (dropped)",
	  { V4, SYN, .ip_opts = 8, .src = "10.2.0.10" }, XDP_DROP, O_DENY, T_DROP },
	{ "IPv4 SYN with 40 bytes of IP options is classified (admitted)",
	  { V4, SYN, .ip_opts = 40, .src = "10.1.0.10" },
	  XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv4 SYN with IP options gets a RST with ihl 5",
	  { V4, SYN, .ip_opts = 12, .src = "10.3.0.10", .seq = 4 },
	  XDP_TX, O_RST, T_RST },
	{ "IPv4 SYN with IP and TCP options gets a RST with doff 5",
	  { V4, SYN, .ip_opts = 4, .tcp_opts = 20, .src = "10.3.0.10", .seq = 5 },
	  XDP_TX, O_RST, T_RST },

	/* other protocols */
	{ "ARP passes uncounted",
	  { .ethertype = ETH_P_ARP }, XDP_PASS, O_IGNORED, 0 },
	{ "ARP in an 802.1Q tag passes uncounted",
	  { .ethertype = ETH_P_ARP, .vlans = 1 }, XDP_PASS, O_IGNORED, 0 },
	{ "IPv4 SYN behind three stacked VLAN tags is admitted",
	  { V4, SYN, .vlans = 3, .src = "10.1.0.10" }, XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv6 SYN behind eight stacked VLAN tags (RL_VLAN_MAX) gets a RST in the same tags",
	  { V6, SYN, .vlans = 8, .src = "2001:db8:3::10", .seq = 3 },
	  XDP_TX, O_RST, T_RST },
	{ "IPv4 SYN behind nine stacked VLAN tags is refused, counted as unparsed",
	  { V4, SYN, .vlans = 9, .src = "10.1.0.10" }, XDP_DROP, O_UNPARSED_DROP, 0 },
	{ "ARP behind nine stacked VLAN tags is refused, counted as unparsed",
	  { .ethertype = ETH_P_ARP, .vlans = 9 }, XDP_DROP, O_UNPARSED_DROP, 0 },
	{ "IPv4 UDP from a refused source passes",
	  { V4, .proto = IPPROTO_UDP, .src = "10.2.0.10", .payload = 12 },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv4 ICMP from a refused source passes",
	  { V4, .proto = IPPROTO_ICMP, .src = "10.2.0.10" },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv6 UDP from a refused source passes",
	  { V6, .proto = IPPROTO_UDP, .src = "2001:db8:2::10" },
	  XDP_PASS, O_IGNORED, 0 },
	{ "IPv6 ICMPv6 from a refused source passes",
	  { V6, .proto = IPPROTO_ICMP, .src = "2001:db8:2::10" },
	  XDP_PASS, O_IGNORED, 0 },

	/* what the RST acknowledges */
	{ "IPv4 SYN with 10 bytes of data: RST acks isn+11 (wrapping)",
	  { V4, SYN, .src = "10.3.0.10", .seq = 0xfffffffa, .payload = 10 },
	  XDP_TX, O_RST, T_RST },
	{ "IPv6 SYN with 100 bytes of data: RST acks isn+101",
	  { V6, SYN, .src = "2001:db8:3::10", .seq = 1000, .payload = 100,
	    .tcp_opts = 12 }, XDP_TX, O_RST, T_RST },
	{ "IPv4 SYN with Ethernet padding: RST acks isn+1, padding trimmed",
	  { V4, SYN, .src = "10.3.0.10", .seq = 7, .pad = 6 },
	  XDP_TX, O_RST, T_RST },
};

void verdict_tests(void)
{
	run_cases(cases, ARRAY_SIZE(cases));
}
