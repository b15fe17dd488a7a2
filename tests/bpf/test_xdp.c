// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Verdict tests for xdp_rlgate: a table of crafted frames run through
 * bpf_prog_test_run_opts against a fresh copy of the maps each, then the
 * multi-packet scenarios (refill, leases, low water, retransmissions).
 * Prints TAP.  `--bench` runs the per-packet benchmark instead (bench.c).
 */
#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/if_ether.h>
#include <netinet/in.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "rlgate.skel.h"
#include "harness.h"
#include "pkt.h"
#include "pktfuzz.h"

#define SEC_NS		1000000000ull

/* ------------------------------------------------------------------------
 * Diagnostics collected while a test runs, printed after its TAP line.
 */
static char diag_buf[16384];
static size_t diag_len;
static char skip_reason[128];
static int test_cpu;		/* every test runs pinned here */

static void diag(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void diag(const char *fmt, ...)
{
	va_list ap;
	int n;

	if (diag_len >= sizeof(diag_buf) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(diag_buf + diag_len, sizeof(diag_buf) - diag_len, fmt, ap);
	va_end(ap);
	if (n > 0)
		diag_len += (size_t)n < sizeof(diag_buf) - diag_len ?
			    (size_t)n : sizeof(diag_buf) - diag_len - 1;
	if (diag_len < sizeof(diag_buf) - 1)
		diag_buf[diag_len++] = '\n';
}

static void diag_hex(const char *label, const __u8 *b, int len,
		     const __u8 *other, int other_len)
{
	char buf[4096];

	pkt_hex(buf, sizeof(buf), label, b, len, other, other_len);
	diag("%s", buf);
}

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		diag(__VA_ARGS__);					\
		ok = false;						\
	}								\
} while (0)

enum { T_PASS, T_FAIL, T_SKIP };

/* ------------------------------------------------------------------------
 * The world every table case starts from: tenants that admit, drop, answer
 * with RST, shadow, lease, and the rules that route sources to them.
 */
enum {
	T_ADMIT = 1,		/* standalone, full bucket */
	T_DROP = 2,		/* standalone, empty, drop */
	T_SHADOW = 4,		/* standalone, empty, drop, shadow */
	T_LEASED = 5,		/* leased, 3 tokens */
	T_LEASED_EMPTY = 6,	/* leased, no token, drop */
	T_PORT_ANY = 7,		/* 10.7/16 any port */
	T_PORT_443 = 8,		/* 10.7/16 port 443 */
	T_LONG_ANY = 9,		/* 10.8.0/24 any port */
	T_SHORT_PORT = 10,	/* 10.8/16 port 443 */
	T_L16 = 11,
	T_L24 = 12,
	T_L25 = 13,
	T_UNUSED = 14,		/* a rule points here, the slot is free */
	/* The last slot, to catch an off-by-one in the mmap'd layout. */
	T_RST = RL_MAX_TENANTS - 1,
};

enum bucket { FULL, EMPTY };

struct tenant_init {
	__u32 id;
	__u32 mode, action, flags;
	enum bucket bucket;	/* standalone */
	__s64 tokens;		/* leased */
};

static const struct tenant_init world_tenants[] = {
	{ T_ADMIT, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_DROP, RL_MODE_STANDALONE, RL_ACT_DROP, 0, EMPTY, 0 },
	{ T_RST, RL_MODE_STANDALONE, RL_ACT_RST, 0, EMPTY, 0 },
	{ T_SHADOW, RL_MODE_STANDALONE, RL_ACT_RST, RL_F_SHADOW, EMPTY, 0 },
	{ T_LEASED, RL_MODE_LEASED, RL_ACT_DROP, 0, FULL, 3 },
	{ T_LEASED_EMPTY, RL_MODE_LEASED, RL_ACT_DROP, 0, FULL, 0 },
	{ T_PORT_ANY, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_PORT_443, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_LONG_ANY, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_SHORT_PORT, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_L16, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_L24, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_L25, RL_MODE_STANDALONE, RL_ACT_DROP, 0, FULL, 0 },
	{ T_UNUSED, RL_MODE_NONE, RL_ACT_DROP, 0, FULL, 0 },
};
#define N_TENANTS (sizeof(world_tenants) / sizeof(world_tenants[0]))

static const struct {
	const char *cidr;
	__u16 port;
	__u32 tenant;
} world_rules[] = {
	{ "10.1.0.0/16", 0, T_ADMIT },
	{ "2001:db8:1::/48", 0, T_ADMIT },
	{ "10.2.0.0/16", 0, T_DROP },
	{ "2001:db8:2::/48", 0, T_DROP },
	{ "10.3.0.0/16", 0, T_RST },
	{ "2001:db8:3::/48", 0, T_RST },
	{ "10.4.0.0/16", 0, T_SHADOW },
	{ "2001:db8:4::/48", 0, T_SHADOW },
	{ "10.5.0.0/16", 0, T_LEASED },
	{ "2001:db8:5::/48", 0, T_LEASED },
	{ "10.6.0.0/16", 0, T_LEASED_EMPTY },
	{ "2001:db8:6::/48", 0, T_LEASED_EMPTY },
	/* equal length: the port rule must win for its port only */
	{ "10.7.0.0/16", 0, T_PORT_ANY },
	{ "10.7.0.0/16", 443, T_PORT_443 },
	{ "2001:db8:7::/48", 0, T_PORT_ANY },
	{ "2001:db8:7::/48", 443, T_PORT_443 },
	/* a longer any-port prefix beats a shorter port rule */
	{ "10.8.0.0/24", 0, T_LONG_ANY },
	{ "10.8.0.0/16", 443, T_SHORT_PORT },
	{ "2001:db8:8::/64", 0, T_LONG_ANY },
	{ "2001:db8:8::/48", 443, T_SHORT_PORT },
	/* nested any-port prefixes */
	{ "10.9.0.0/16", 0, T_L16 },
	{ "10.9.1.0/24", 0, T_L24 },
	{ "10.9.1.128/25", 0, T_L25 },
	{ "2001:db8:9::/48", 0, T_L16 },
	{ "2001:db8:9:1::/64", 0, T_L24 },
	{ "2001:db8:9:1:8000::/65", 0, T_L25 },
	{ "10.10.0.0/16", 0, T_UNUSED },
	{ "2001:db8:a::/48", 0, T_UNUSED },
};

/* Standalone tenants of the world: one token per second, burst 10. */
#define W_INTERVAL	SEC_NS
#define W_BURST		10

/* One freshly loaded copy of rlgate with empty maps. */
struct inst {
	struct rlgate_bpf *skel;
	struct world w;
	int prog_fd;
};

static void inst_close(struct inst *in)
{
	world_fini(&in->w);
	rlgate_bpf__destroy(in->skel);
	in->skel = NULL;
}

/* Loads rlgate with a retransmission window and the least gap before a
 * free repeat (see RL_FLOW_MAX_REPEATS). */
static int inst_open_gap(struct inst *in, __u64 retrans_window_ns,
			 __u64 retrans_gap_ns)
{
	int err;

	memset(in, 0, sizeof(*in));
	in->skel = rlgate_bpf__open();
	if (!in->skel) {
		diag("couldn't open the rlgate skeleton: %s", strerror(errno));
		return -errno;
	}
	in->skel->rodata->retrans_window_ns = retrans_window_ns;
	in->skel->rodata->retrans_gap_ns = retrans_gap_ns;
	err = rlgate_bpf__load(in->skel);
	if (err) {
		diag("couldn't load the rlgate skeleton: %s", strerror(-err));
		rlgate_bpf__destroy(in->skel);
		in->skel = NULL;
		return err;
	}
	err = world_init(&in->w, in->skel->obj);
	if (err) {
		diag("couldn't find rlgate's maps: %s", strerror(-err));
		inst_close(in);
		return err;
	}
	in->prog_fd = bpf_program__fd(in->skel->progs.xdp_rlgate);
	return 0;
}

/* Most scenarios send a SYN's copies back to back: no gap required. */
static int inst_open(struct inst *in, __u64 retrans_window_ns)
{
	return inst_open_gap(in, retrans_window_ns, 0);
}

static int world_populate(struct inst *in)
{
	__u64 now = now_ns();
	size_t i;
	int err;

	for (i = 0; i < N_TENANTS; i++) {
		const struct tenant_init *ti = &world_tenants[i];
		struct rl_tenant *t = &in->w.tenants[ti->id];

		if (ti->mode == RL_MODE_LEASED) {
			tenant_leased(t, ti->action, ti->tokens, -1, false);
			continue;
		}
		tenant_standalone(t, ti->action, ti->flags, W_INTERVAL,
				  W_BURST);
		t->mode = ti->mode;
		/* Empty: the bucket would only hold a token an hour from now. */
		t->tat = ti->bucket == FULL ? 0 : now + 3600 * SEC_NS;
	}
	in->w.rules_batch = true;
	for (i = 0; i < sizeof(world_rules) / sizeof(world_rules[0]); i++) {
		err = rule_add(&in->w, world_rules[i].cidr, world_rules[i].port,
			       world_rules[i].tenant);
		if (err) {
			diag("couldn't add rule %s port %u: %s",
			     world_rules[i].cidr, world_rules[i].port,
			     strerror(-err));
			return err;
		}
	}
	in->w.rules_batch = false;
	err = rules_publish(&in->w);
	if (err)
		diag("couldn't publish the rules: %s", strerror(-err));
	return err;
}

/* ------------------------------------------------------------------------
 * The table.
 */
enum outcome {
	O_IGNORED,	/* not a SYN: nothing counted, nothing spent */
	O_FRAGMENT,	/* a non-first fragment: counted as such only */
	O_UNPARSED,	/* could not be judged, no tenant's: passed, counted
			 * as unparsed only */
	O_UNPARSED_DROP, /* could not be judged, a tenant's source: dropped,
			 * counted globally and in the tenant's stats */
	O_UNPARSED_SHADOW, /* ... of a shadow tenant: passed, counted as
			 * unparsed and in the tenant's stats */
	O_NOMATCH,	/* a SYN no rule matched */
	O_NO_TENANT,	/* a SYN whose rule points at a free slot */
	O_ADMIT,	/* a token spent, admitted */
	O_DENY,		/* refused, dropped */
	O_RST,		/* refused, answered with RST|ACK */
	O_SHADOW,	/* would be refused, admitted */
};

struct xdp_case {
	const char *name;
	struct pkt pkt;
	__u32 verdict;
	enum outcome out;
	__u32 tenant;	/* the tenant whose bucket and stats move */
};

#define V4	.family = 4
#define V6	.family = 6
#define SYN	.flags = TH_SYN

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

	/* IPv6 extension headers */
	{ "IPv6 SYN behind hop-by-hop options is classified",
	  { V6, SYN, .ext = "H", .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN behind a routing header is classified",
	  { V6, SYN, .ext = "R", .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN behind destination options is classified",
	  { V6, SYN, .ext = "D", .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN behind hop-by-hop, routing, dest options is admitted",
	  { V6, SYN, .ext = "HRD", .src = "2001:db8:1::10" },
	  XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv6 first fragment (offset 0, M set) is classified",
	  { V6, SYN, .ext = "F", .frag6 = 0x0001, .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 first fragment of a RST tenant is dropped, never answered",
	  { V6, SYN, .ext = "HRDF", .frag6 = 0x0001, .src = "2001:db8:3::10",
	    .seq = 6 }, XDP_DROP, O_DENY, T_RST },
	{ "IPv6 atomic fragment (offset 0, M clear) gets a RST",
	  { V6, SYN, .ext = "F", .frag6 = 0, .src = "2001:db8:3::10",
	    .seq = 6 }, XDP_TX, O_RST, T_RST },
	{ "IPv6 non-first fragment passes, counted as fragment",
	  { V6, SYN, .ext = "F", .frag6 = 185 << 3 | 1, .src = "2001:db8:2::10" },
	  XDP_PASS, O_FRAGMENT, 0 },
	{ "IPv6 fragment at offset 8 (inside the TCP header) from a tenant is refused",
	  { V6, SYN, .ext = "F", .frag6 = 8 | 1, .src = "2001:db8:2::10" },
	  XDP_DROP, O_UNPARSED_DROP, T_DROP },
	{ "IPv6 fragment at offset 16 from a tenant is refused",
	  { V6, SYN, .ext = "HF", .frag6 = 16, .src = "2001:db8:1::10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv6 fragment at offset 24 passes, counted as fragment",
	  { V6, SYN, .ext = "F", .frag6 = 24 | 1, .src = "2001:db8:2::10" },
	  XDP_PASS, O_FRAGMENT, 0 },
	{ "IPv6 last fragment behind hop-by-hop passes",
	  { V6, SYN, .ext = "HF", .frag6 = 64 << 3, .src = "2001:db8:2::10" },
	  XDP_PASS, O_FRAGMENT, 0 },
	{ "IPv6 first fragment with 8 bytes of TCP from a tenant is refused",
	  { V6, SYN, .ext = "F", .frag6 = 1, .l4_cut = 8,
	    .src = "2001:db8:1::10" }, XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv6 first fragment with 8 bytes of TCP from no tenant passes",
	  { V6, SYN, .ext = "F", .frag6 = 1, .l4_cut = 8,
	    .src = "2001:db8:ffff::1" }, XDP_PASS, O_UNPARSED, 0 },
	{ "IPv6 SYN behind six extension headers is classified",
	  { V6, SYN, .ext = "HDDDDD", .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN behind seven extension headers is classified",
	  { V6, SYN, .ext = "HDDDDDD", .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN behind eight extension headers (the most followed) is admitted",
	  { V6, SYN, .ext = "HRDDFDAD", .frag6 = 0, .src = "2001:db8:1::10" },
	  XDP_PASS, O_ADMIT, T_ADMIT },
	{ "IPv6 SYN behind repeated, out-of-order headers is classified",
	  { V6, SYN, .ext = "DRDHF", .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN behind AH is classified",
	  { V6, SYN, .ext = "A", .src = "2001:db8:2::10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv6 SYN behind nine extension headers from a tenant is refused",
	  { V6, SYN, .ext = "HDDDDDDDD", .src = "2001:db8:1::10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv6 SYN behind sixteen extension headers from a tenant is refused",
	  { V6, SYN, .ext = "DDDDDDDDDDDDDDDD", .src = "2001:db8:1::10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv6 SYN behind nine extension headers from no tenant passes",
	  { V6, SYN, .ext = "HDDDDDDDD", .src = "2001:db8:ffff::1" },
	  XDP_PASS, O_UNPARSED, 0 },
	{ "IPv6 SYN past the walk limit from a source with port rules is refused",
	  { V6, SYN, .ext = "HDDDDDDDD", .src = "2001:db8:7::10", .dport = 80 },
	  XDP_DROP, O_UNPARSED_DROP, 0 },
	{ "IPv6 SYN past the walk limit of a shadow tenant passes, counted",
	  { V6, SYN, .ext = "HDDDDDDDD", .src = "2001:db8:4::10" },
	  XDP_PASS, O_UNPARSED_SHADOW, T_SHADOW },
	{ "IPv6 ACK behind nine extension headers from a tenant is refused",
	  { V6, .flags = TH_ACK, .ext = "HDDDDDDDD", .src = "2001:db8:1::10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },

	/* IPv4 fragments */
	{ "IPv4 first fragment (MF, offset 0) is classified",
	  { V4, SYN, .frag = 0x2000, .src = "10.2.0.10" },
	  XDP_DROP, O_DENY, T_DROP },
	{ "IPv4 first fragment of a RST tenant is dropped, never answered",
	  { V4, SYN, .frag = 0x2000, .src = "10.3.0.10" },
	  XDP_DROP, O_DENY, T_RST },
	{ "IPv4 first fragment with 8 bytes of TCP (flags in the next) is refused",
	  { V4, SYN, .frag = 0x2000, .l4_cut = 8, .src = "10.1.0.10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv4 first fragment with 8 bytes of TCP and padding is refused",
	  { V4, .flags = 0, .frag = 0x2000, .l4_cut = 8, .pad = 12,
	    .src = "10.1.0.10" }, XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv4 first fragment with 16 bytes of TCP is refused",
	  { V4, SYN, .frag = 0x2000, .l4_cut = 16, .src = "10.1.0.10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv4 first fragment with 8 bytes of TCP from no tenant passes",
	  { V4, SYN, .frag = 0x2000, .l4_cut = 8, .src = "192.0.2.1" },
	  XDP_PASS, O_UNPARSED, 0 },
	{ "IPv4 first fragment ACK with a whole TCP header passes uncounted",
	  { V4, .flags = TH_ACK, .frag = 0x2000, .l4_cut = 24,
	    .payload = 100, .src = "10.2.0.10" }, XDP_PASS, O_IGNORED, 0 },
	{ "IPv4 fragment at offset 8 (inside the TCP header) from a tenant is refused",
	  { V4, SYN, .frag = 1, .src = "10.2.0.10" },
	  XDP_DROP, O_UNPARSED_DROP, T_DROP },
	{ "IPv4 fragment at offset 16 with MF from a tenant is refused",
	  { V4, SYN, .frag = 0x2000 | 2, .src = "10.1.0.10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },
	{ "IPv4 fragment at offset 8 from no tenant passes",
	  { V4, SYN, .frag = 1, .src = "192.0.2.1" },
	  XDP_PASS, O_UNPARSED, 0 },
	{ "IPv4 non-first fragment passes, counted as fragment",
	  { V4, SYN, .frag = 0x2000 | 185, .src = "10.2.0.10" },
	  XDP_PASS, O_FRAGMENT, 0 },
	{ "IPv4 last fragment at offset 24 passes",
	  { V4, SYN, .frag = 3, .src = "10.2.0.10" }, XDP_PASS, O_FRAGMENT, 0 },
	{ "IPv4 UDP fragment at offset 8 passes uncounted",
	  { V4, .proto = IPPROTO_UDP, .frag = 1, .src = "10.2.0.10",
	    .payload = 12 }, XDP_PASS, O_IGNORED, 0 },

	/* malformed headers */
	{ "IPv4 SYN whose TCP options run past the IP length is refused",
	  { V4, SYN, .tcp_opts = 12, .l4_cut = 28, .src = "10.1.0.10" },
	  XDP_DROP, O_UNPARSED_DROP, T_ADMIT },

	/* other protocols */
	{ "ARP passes uncounted",
	  { .ethertype = ETH_P_ARP }, XDP_PASS, O_IGNORED, 0 },
	{ "ARP in an 802.1Q tag passes uncounted",
	  { .ethertype = ETH_P_ARP, .vlans = 1 }, XDP_PASS, O_IGNORED, 0 },
	{ "three stacked VLAN tags (unsupported) pass uncounted",
	  { .ethertype = ETH_P_8021Q, .vlans = 2 }, XDP_PASS, O_IGNORED, 0 },
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

	/* classification */
	{ "IPv4 port rule beats an any-port rule of equal length",
	  { V4, SYN, .src = "10.7.0.10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_PORT_443 },
	{ "IPv4 any-port rule takes the ports without a port rule",
	  { V4, SYN, .src = "10.7.0.10", .dport = 80 },
	  XDP_PASS, O_ADMIT, T_PORT_ANY },
	{ "IPv4 longer any-port prefix beats a shorter port rule",
	  { V4, SYN, .src = "10.8.0.10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_LONG_ANY },
	{ "IPv4 shorter port rule applies outside the longer prefix",
	  { V4, SYN, .src = "10.8.1.10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_SHORT_PORT },
	{ "IPv6 port rule beats an any-port rule of equal length",
	  { V6, SYN, .src = "2001:db8:7::10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_PORT_443 },
	{ "IPv6 any-port rule takes the ports without a port rule",
	  { V6, SYN, .src = "2001:db8:7::10", .dport = 8443 },
	  XDP_PASS, O_ADMIT, T_PORT_ANY },
	{ "IPv6 longer any-port prefix beats a shorter port rule",
	  { V6, SYN, .src = "2001:db8:8::10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_LONG_ANY },
	{ "IPv6 shorter port rule applies outside the longer prefix",
	  { V6, SYN, .src = "2001:db8:8:1::10", .dport = 443 },
	  XDP_PASS, O_ADMIT, T_SHORT_PORT },
	{ "IPv4 longest prefix wins: /25 inside /24 inside /16",
	  { V4, SYN, .src = "10.9.1.200" }, XDP_PASS, O_ADMIT, T_L25 },
	{ "IPv4 longest prefix wins: /24 inside /16",
	  { V4, SYN, .src = "10.9.1.10" }, XDP_PASS, O_ADMIT, T_L24 },
	{ "IPv4 longest prefix wins: only the /16",
	  { V4, SYN, .src = "10.9.2.10" }, XDP_PASS, O_ADMIT, T_L16 },
	{ "IPv6 longest prefix wins: /65 inside /64 inside /48",
	  { V6, SYN, .src = "2001:db8:9:1:8000::1" }, XDP_PASS, O_ADMIT, T_L25 },
	{ "IPv6 longest prefix wins: /64 inside /48",
	  { V6, SYN, .src = "2001:db8:9:1::1" }, XDP_PASS, O_ADMIT, T_L24 },
	{ "IPv6 longest prefix wins: only the /48",
	  { V6, SYN, .src = "2001:db8:9:2::1" }, XDP_PASS, O_ADMIT, T_L16 },
	{ "IPv4 SYN from an unmatched source passes, counted as no match",
	  { V4, SYN, .src = "192.0.2.1" }, XDP_PASS, O_NOMATCH, 0 },
	{ "IPv6 SYN from an unmatched source passes, counted as no match",
	  { V6, SYN, .src = "2001:db8:ffff::1" }, XDP_PASS, O_NOMATCH, 0 },
	{ "IPv4 SYN whose rule points at a free tenant slot passes",
	  { V4, SYN, .src = "10.10.0.10" }, XDP_PASS, O_NO_TENANT, 0 },
	{ "IPv6 SYN whose rule points at a free tenant slot passes",
	  { V6, SYN, .src = "2001:db8:a::10" }, XDP_PASS, O_NO_TENANT, 0 },

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
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

/* The frame, the world and the checks one table case or truncation needs. */
static const char *counter_name[RL_CNT_MAX] = {
	"syn", "nomatch", "unparsed", "fragment", "rst_failed",
	"unparsed_drop", "repeat_charged",
};

static bool stats_zero(const struct rl_stats *s)
{
	return !s->admitted && !s->denied && !s->shadow_denied &&
	       !s->retransmits && !s->rst_sent && !s->lowwater_events &&
	       !s->unparsed;
}

static void diag_stats(const char *who, __u32 id, const struct rl_stats *s)
{
	diag("  %s %u: admitted %llu denied %llu shadow_denied %llu "
	     "retransmits %llu rst_sent %llu lowwater %llu unparsed %llu",
	     who, id,
	     (unsigned long long)s->admitted, (unsigned long long)s->denied,
	     (unsigned long long)s->shadow_denied,
	     (unsigned long long)s->retransmits,
	     (unsigned long long)s->rst_sent,
	     (unsigned long long)s->lowwater_events,
	     (unsigned long long)s->unparsed);
}

/* Runs one frame against a fresh world and checks verdict, bytes, counters,
 * every tenant's stats and bucket.  `reply` is the expected RST or NULL. */
static int check_frame(const __u8 *in, int in_len, __u32 verdict,
		       enum outcome out, __u32 tenant, const __u8 *reply,
		       int reply_len, int l3_off)
{
	static struct rl_tenant before[RL_MAX_TENANTS];
	__u8 got[PKT_MAX * 2];
	struct run_result r;
	struct inst in_;
	__u64 cnt[RL_CNT_MAX], want[RL_CNT_MAX] = { 0 };
	__u64 t0, t1;
	bool ok = true;
	size_t i;
	int err;

	if (inst_open(&in_, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	if (world_populate(&in_)) {
		inst_close(&in_);
		return T_FAIL;
	}
	memcpy(before, in_.w.tenants, sizeof(before));

	/* the bucket reads the coarse clock: it may lag now_ns() by a tick */
	t0 = now_coarse_ns();
	err = xdp_run(in_.prog_fd, in, in_len, got, sizeof(got), 1, &r);
	t1 = now_ns();
	if (err == -EINVAL && in_len < ETH_HLEN) {
		snprintf(skip_reason, sizeof(skip_reason),
			 "test_run refuses frames shorter than %d bytes",
			 ETH_HLEN);
		inst_close(&in_);
		return T_SKIP;
	}
	if (err) {
		diag("bpf_prog_test_run_opts: %s", strerror(-err));
		inst_close(&in_);
		return T_FAIL;
	}

	CHECK(r.retval == verdict, "verdict %u, want %u", r.retval, verdict);
	if (reply) {
		const char *bad = pkt_check_csums(got, r.out_len, l3_off);

		if (r.out_len != (__u32)reply_len ||
		    memcmp(got, reply, reply_len)) {
			ok = false;
			diag("reply differs from the expected RST|ACK "
			     "(* marks differing bytes)");
			diag_hex("got", got, r.out_len, reply, reply_len);
			diag_hex("want", reply, reply_len, NULL, 0);
		}
		CHECK(!bad, "reply's %s does not verify", bad);
	} else if (r.out_len != (__u32)in_len || memcmp(got, in, in_len)) {
		ok = false;
		diag("frame was modified but the verdict is not XDP_TX");
		diag_hex("got", got, r.out_len, in, in_len);
	}

	/* Global counters */
	switch (out) {
	case O_IGNORED:
		break;
	case O_FRAGMENT:
		want[RL_CNT_FRAGMENT] = 1;
		break;
	case O_UNPARSED:
		want[RL_CNT_UNPARSED] = 1;
		break;
	case O_UNPARSED_DROP:
		want[RL_CNT_UNPARSED_DROP] = 1;
		break;
	case O_UNPARSED_SHADOW:
		want[RL_CNT_UNPARSED] = 1;
		break;
	case O_NOMATCH:
		want[RL_CNT_NOMATCH] = 1;
		/* fall through */
	default:
		want[RL_CNT_SYN] = 1;
	}
	counters_sum(&in_.w, cnt);
	for (i = 0; i < RL_CNT_MAX; i++)
		CHECK(cnt[i] == want[i], "counter %s = %llu, want %llu",
		      counter_name[i], (unsigned long long)cnt[i],
		      (unsigned long long)want[i]);

	/* Every tenant but the one this frame belongs to is untouched. */
	for (i = 0; i < N_TENANTS; i++) {
		__u32 id = world_tenants[i].id;
		const struct rl_tenant *a = &before[id], *b = &in_.w.tenants[id];
		struct rl_stats s, w = { 0 };

		tenant_stats_sum(&in_.w, id, &s);
		if (id != tenant) {
			if (!stats_zero(&s)) {
				ok = false;
				diag("tenant %u was charged", id);
				diag_stats("tenant", id, &s);
			}
			CHECK(!memcmp(a, b, sizeof(*a)),
			      "tenant %u's slot changed: tat %llu -> %llu, "
			      "tokens %lld -> %lld", id,
			      (unsigned long long)a->tat,
			      (unsigned long long)b->tat,
			      (long long)a->tokens, (long long)b->tokens);
			continue;
		}

		CHECK(!memcmp(a, b, offsetof(struct rl_tenant, tat)),
		      "tenant %u's configuration changed", id);

		switch (out) {
		case O_ADMIT:
			w.admitted = 1;
			break;
		case O_DENY:
			w.denied = 1;
			break;
		case O_RST:
			w.denied = 1;
			w.rst_sent = 1;
			break;
		case O_SHADOW:
			w.admitted = 1;
			w.shadow_denied = 1;
			break;
		case O_UNPARSED_DROP:
		case O_UNPARSED_SHADOW:
			w.unparsed = 1;
			break;
		default:
			break;
		}
		if (memcmp(&s, &w, sizeof(s))) {
			ok = false;
			diag("tenant %u's stats are wrong", id);
			diag_stats("got tenant", id, &s);
			diag_stats("want tenant", id, &w);
		}
		if (out == O_ADMIT && a->mode == RL_MODE_STANDALONE) {
			/* GCRA from a full bucket: tat = now + interval */
			CHECK(b->tat >= t0 + a->interval_ns &&
			      b->tat <= t1 + a->interval_ns,
			      "tat %llu, want now + interval in [%llu, %llu]",
			      (unsigned long long)b->tat,
			      (unsigned long long)(t0 + a->interval_ns),
			      (unsigned long long)(t1 + a->interval_ns));
		} else if (out == O_ADMIT) {
			CHECK(b->tokens == a->tokens - 1,
			      "tokens %lld, want %lld", (long long)b->tokens,
			      (long long)a->tokens - 1);
		} else {
			CHECK(b->tat == a->tat && b->tokens == a->tokens,
			      "a refused SYN changed the bucket: tat %llu -> "
			      "%llu, tokens %lld -> %lld",
			      (unsigned long long)a->tat,
			      (unsigned long long)b->tat,
			      (long long)a->tokens, (long long)b->tokens);
		}
	}
	inst_close(&in_);
	return ok ? T_PASS : T_FAIL;
}

static int run_case(const void *arg)
{
	const struct xdp_case *c = arg;
	__u8 in[PKT_MAX], reply[PKT_MAX];
	int len, rlen = 0;

	len = pkt_build(&c->pkt, in, NULL);
	if (c->out == O_RST)
		rlen = pkt_build_rst(&c->pkt, reply);
	return check_frame(in, len, c->verdict, c->out, c->tenant,
			   c->out == O_RST ? reply : NULL, rlen,
			   pkt_l3_off(&c->pkt));
}

/* ------------------------------------------------------------------------
 * Truncation: each shape cut at the start of every header and in the middle
 * of it.  A cut inside the Ethernet header or a VLAN tag is not known to be
 * IP at all and passes uncounted; one inside the fixed IP header passes as
 * unparsed (the stack drops it); any later cut leaves a packet that might
 * be a SYN and cannot be judged: refused when its source is a tenant's,
 * passed as unparsed otherwise.  None may spend a token.
 */
static const struct {
	const char *label;
	struct pkt pkt;
	__u32 tenant;	/* the source's tenant, 0 for none */
} trunc_shapes[] = {
	{ "IPv4 SYN", { V4, SYN, .src = "10.1.0.10" }, T_ADMIT },
	{ "IPv4 SYN in 802.1ad+802.1Q", { V4, SYN, .vlans = 2, .src = "10.1.0.10" },
	  T_ADMIT },
	{ "IPv4 SYN with IP and TCP options",
	  { V4, SYN, .ip_opts = 8, .tcp_opts = 12, .src = "10.1.0.10" }, T_ADMIT },
	{ "IPv4 SYN from no tenant's source", { V4, SYN, .src = "192.0.2.1" }, 0 },
	{ "IPv6 SYN", { V6, SYN, .src = "2001:db8:1::10" }, T_ADMIT },
	{ "IPv6 SYN in 802.1Q", { V6, SYN, .vlans = 1, .src = "2001:db8:1::10" },
	  T_ADMIT },
	{ "IPv6 first fragment behind H,R,D with TCP options",
	  { V6, SYN, .ext = "HRDF", .frag6 = 1, .tcp_opts = 12,
	    .src = "2001:db8:1::10" }, T_ADMIT },
	{ "IPv6 SYN behind H,R,D from no tenant's source",
	  { V6, SYN, .ext = "HRD", .src = "2001:db8:ffff::1" }, 0 },
};

struct trunc_case {
	int shape;
	int cut;
};

/* What a cut at `cut` bytes must come to. */
static enum outcome trunc_outcome(int shape, int cut, __u32 *verdict)
{
	const struct pkt *p = &trunc_shapes[shape].pkt;
	int l3 = pkt_l3_off(p);

	*verdict = XDP_PASS;
	if (cut < l3)
		return O_IGNORED;
	if (cut < l3 + (p->family == 6 ? 40 : 20) || !trunc_shapes[shape].tenant)
		return O_UNPARSED;
	*verdict = XDP_DROP;
	return O_UNPARSED_DROP;
}

static int run_trunc(const void *arg)
{
	const struct trunc_case *t = arg;
	const struct pkt *p = &trunc_shapes[t->shape].pkt;
	enum outcome out;
	__u8 in[PKT_MAX];
	__u32 verdict;

	pkt_build(p, in, NULL);
	out = trunc_outcome(t->shape, t->cut, &verdict);
	return check_frame(in, t->cut, verdict, out,
			   out == O_UNPARSED_DROP ? trunc_shapes[t->shape].tenant : 0,
			   NULL, 0, 0);
}

/* ------------------------------------------------------------------------
 * Scenarios: several packets against one world.
 */

/* A SYN from 10.1.x to tenant 1 of a small world; distinct sports make
 * distinct flows so that nothing takes the retransmission path. */
/* A TCP segment with these flags from 10.1.x to tenant 1 of a small world. */
static int send_tcp(struct inst *in, __u8 flags, __u16 sport, __u32 seq,
		    __u32 *verdict)
{
	struct pkt p = { V4, .flags = flags, .src = "10.1.0.10",
			 .sport = sport, .seq = seq };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), err;

	err = xdp_run(in->prog_fd, buf, len, out, sizeof(out), 1, &r);
	if (err) {
		diag("bpf_prog_test_run_opts: %s", strerror(-err));
		return err;
	}
	*verdict = r.retval;
	return 0;
}

static int send_syn(struct inst *in, __u16 sport, __u32 seq, __u32 *verdict)
{
	return send_tcp(in, TH_SYN, sport, seq, verdict);
}

/* Sends n SYNs; returns how many passed, and fails the test when a pass
 * follows a refusal (a bucket does not refill within microseconds). */
static int count_admits(struct inst *in, int n, __u16 sport0, bool *ok)
{
	int i, admits = 0;
	bool refused = false;
	__u32 v;

	for (i = 0; i < n; i++) {
		if (send_syn(in, sport0 + i, 1000 + i, &v)) {
			*ok = false;
			return -1;
		}
		if (v == XDP_PASS) {
			admits++;
			if (refused) {
				diag("SYN %d admitted after a refusal", i);
				*ok = false;
			}
		} else {
			refused = true;
		}
	}
	return admits;
}

static int small_world(struct inst *in, __u64 retrans_ns)
{
	if (inst_open(in, retrans_ns))
		return -1;
	if (rule_add(&in->w, "10.1.0.0/16", 0, 1)) {
		diag("couldn't add a rule");
		inst_close(in);
		return -1;
	}
	return 0;
}

/* tat = now + (b - k) * interval: the bucket was empty k intervals ago. */
static int scen_refill(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 5);
	/* the coarse clock, the bucket's: now_ns() may be a tick ahead of it
	 * and the bucket would look a fraction of a token short */
	t->tat = now_coarse_ns() + (5 - 3) * SEC_NS;
	n = count_admits(&in, 8, 1000, &ok);
	CHECK(n == 3, "bucket empty 3 intervals ago (burst 5) admitted %d, "
	      "want 3", n);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

static int scen_burst_cap(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 5);
	/* empty 10 intervals ago: 10 tokens earned, 5 kept */
	t->tat = now_ns() + 5 * SEC_NS - 10 * SEC_NS;
	n = count_admits(&in, 12, 1000, &ok);
	CHECK(n == 5, "idle for 2x burst admitted %d, want burst 5", n);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

static int scen_partial_token(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 5);
	/* empty half an interval ago: no whole token yet */
	t->tat = now_ns() + 5 * SEC_NS - SEC_NS / 2;
	n = count_admits(&in, 3, 1000, &ok);
	CHECK(n == 0, "half a token admitted %d SYNs, want 0", n);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

#define REALTIME_INTERVAL_NS	(100 * 1000000ull)

/* Real elapsed time, with margins of tens of milliseconds: a GCRA bucket
 * (*tatp) of one token per REALTIME_INTERVAL_NS and burst 1, empty now,
 * refuses, admits one SYN 160 ms later, and refuses the next.  Closes in. */
static bool refill_realtime(struct inst *in, __u64 *tatp, const char *what)
{
	__u32 v1 = 0, v2 = 0, v3 = 0;
	bool ok = true;

	*tatp = now_ns() + REALTIME_INTERVAL_NS;	/* empty now */
	if (send_syn(in, 1000, 1, &v1))
		ok = false;
	usleep(160 * 1000);
	if (send_syn(in, 1001, 2, &v2) || send_syn(in, 1002, 3, &v3))
		ok = false;
	CHECK(v1 == XDP_DROP, "SYN on an empty %s: verdict %u, want drop", what,
	      v1);
	CHECK(v2 == XDP_PASS, "SYN 160 ms later (interval 100 ms): verdict "
	      "%u, want pass", v2);
	CHECK(v3 == XDP_DROP, "SYN right after: verdict %u, want drop", v3);
	inst_close(in);
	return ok;
}

/*
 * A bucket that one tick's worth of tokens would overflow (burst 1 at
 * 1,000/s: on the coarse clock it could admit at most one SYN per tick,
 * 250/s at HZ=250) reads the precise clock (RL_FINE_CLOCK_NS) and keeps its
 * rate.  SYNs back to back for 200 ms: never more than rate x time + burst,
 * and at least 60 % of the milliseconds in which the test got to send a SYN
 * at all (a tick-bound bucket gets 25 % at HZ=250).  Counting only those
 * milliseconds keeps a loaded machine, which deschedules the sender and
 * wastes the tokens of the gaps, from failing the test.
 */
static int scen_fine_clock(const void *arg)
{
	const __u64 interval = 1000000, span = 200 * 1000000ull;
	__u64 t0, elapsed, admits = 0, bound, slot, last = ~0ull, slots = 0;
	struct inst in;
	bool ok = true;
	__u32 v, i;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, interval, 1);
	t0 = now_ns();
	for (i = 0; i < 2000000 && now_ns() - t0 < span; i++) {
		if (send_syn(&in, 1000 + (i & 0x3fff), i, &v)) {
			ok = false;
			break;
		}
		admits += v == XDP_PASS;
		slot = (now_ns() - t0) / interval;
		slots += slot != last;
		last = slot;
	}
	elapsed = now_ns() - t0;
	bound = elapsed / interval + 1;
	CHECK(admits <= bound, "admitted %llu in %llu ms, more than rate x "
	      "time + burst = %llu", (unsigned long long)admits,
	      (unsigned long long)(elapsed / 1000000), (unsigned long long)bound);
	CHECK(admits * 10 >= slots * 6, "admitted %llu in %llu ms at 1,000/s, "
	      "SYNs sent in %llu of them (%u SYNs): the bucket ran on the tick",
	      (unsigned long long)admits,
	      (unsigned long long)(elapsed / 1000000),
	      (unsigned long long)slots, i);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

static int scen_refill_realtime(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, REALTIME_INTERVAL_NS, 1);
	return refill_realtime(&in, &t->tat, "bucket") ? T_PASS : T_FAIL;
}

static int scen_leased_zero(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	struct rl_stats s;
	bool ok = true;
	int n;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 3, -1, false);
	n = count_admits(&in, 6, 1000, &ok);
	CHECK(n == 3, "3 tokens admitted %d SYNs", n);
	CHECK(t->tokens == 0, "tokens %lld after denials, want 0",
	      (long long)t->tokens);
	tenant_stats_sum(&in.w, 1, &s);
	CHECK(s.admitted == 3 && s.denied == 3,
	      "admitted %llu denied %llu, want 3 and 3",
	      (unsigned long long)s.admitted, (unsigned long long)s.denied);
	/* More tokens from user space are spent again. */
	__atomic_fetch_add(&t->tokens, 2, __ATOMIC_SEQ_CST);
	n = count_admits(&in, 4, 2000, &ok);
	CHECK(n == 2, "2 more tokens admitted %d SYNs", n);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/*
 * Rules republished while SYNs are being classified on another CPU: every
 * SYN is classified by one whole rule set or the other, never by a mix.
 * The two sets put the SYN's /24 in different tables (set B's fillers sort
 * before it and take the first table), so a SYN that read the root of one
 * set and a table of the other would land on the filler tenant or none.
 */
struct republisher {
	struct world *w;
	struct rl_cls_image img[2];
	int cpu;
	volatile int stop;
	int err;
	unsigned int publishes;
};

static void *cls_republish(void *arg)
{
	struct republisher *rp = arg;

	if (rp->cpu >= 0 && pin_to_cpu(rp->cpu))
		rp->cpu = -1;	/* unpinned: still a second thread */
	while (!rp->stop && !rp->err) {
		rp->err = rl_cls_publish(&rp->w->cls,
					 &rp->img[rp->publishes & 1]);
		rp->publishes++;
		usleep(rand() % 3000);
	}
	return NULL;
}

static int scen_republish_under_traffic(const void *arg)
{
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = 4242 };
	struct republisher rp = { .cpu = -1 };
	struct rl_cls_rule rules[2][65];
	struct rl_stats s1, s2, s3;
	__u64 cnt[RL_CNT_MAX], sent = 0, t0;
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	struct inst in;
	pthread_t th;
	char err[256];
	bool ok = true;
	int len, k, i;

	(void)arg;
	if (inst_open(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	for (i = 1; i <= 3; i++)
		tenant_standalone(&in.w.tenants[i], RL_ACT_DROP, 0, 1,
				  1000000000000ull);
	for (k = 0; k < 2; k++) {
		for (i = 0; i < 65; i++) {
			struct rl_cls_rule *r = &rules[k][i];

			memset(r, 0, sizeof(*r));
			r->family = AF_INET;
			r->plen = 24;
			r->addr[0] = 10;
			if (i == 64) {		/* the SYN's own rule */
				r->addr[1] = 1;
				r->tenant = 1 + k;
			} else {		/* 10.2/16 in A, 10.0/16 in B */
				r->addr[1] = k ? 0 : 2;
				r->addr[2] = i;
				r->tenant = 3;
			}
		}
		if (rl_cls_compile(rules[k], 65, 0, &rp.img[k], err,
				   sizeof(err))) {
			diag("couldn't compile set %d: %s", k, err);
			ok = false;
		}
	}
	rp.w = &in.w;
	/* set A in force before the first SYN, then B, A, B... */
	if (ok && rl_cls_publish(&in.w.cls, &rp.img[0])) {
		diag("couldn't publish set A");
		ok = false;
	}
	rp.publishes = 1;
	if (libbpf_num_possible_cpus() > 1)
		rp.cpu = test_cpu == 0 ? 1 : 0;
	if (!ok || pthread_create(&th, NULL, cls_republish, &rp)) {
		diag("couldn't start the republishing thread");
		ok = false;
		goto out;
	}
	len = pkt_build(&p, buf, NULL);
	t0 = now_ns();
	while (now_ns() - t0 < 1000 * 1000000ull && sent < 100000000ull) {
		/* long runs: a test_run call waits for grace periods of its
		 * own, and short ones fall into step with the publisher's */
		if (xdp_run(in.prog_fd, buf, len, out, sizeof(out), 1000000,
			    &r)) {
			ok = false;
			break;
		}
		sent += 1000000;
	}
	rp.stop = 1;
	pthread_join(th, NULL);

	tenant_stats_sum(&in.w, 1, &s1);
	tenant_stats_sum(&in.w, 2, &s2);
	tenant_stats_sum(&in.w, 3, &s3);
	counters_sum(&in.w, cnt);
	CHECK(!rp.err, "publishing failed: %s", strerror(-rp.err));
	CHECK(rp.publishes >= 10, "only %u publishes in a second", rp.publishes);
	CHECK(s1.admitted > 0 && s2.admitted > 0, "set A classified %llu, set "
	      "B %llu: the switch did not happen under traffic (%u publishes)",
	      (unsigned long long)s1.admitted, (unsigned long long)s2.admitted,
	      rp.publishes);
	CHECK(s1.admitted + s2.admitted == sent && s3.admitted == 0 &&
	      cnt[RL_CNT_NOMATCH] == 0,
	      "%llu SYNs: %llu by set A, %llu by set B, %llu by a filler, %llu "
	      "unmatched (%u publishes)", (unsigned long long)sent,
	      (unsigned long long)s1.admitted, (unsigned long long)s2.admitted,
	      (unsigned long long)s3.admitted,
	      (unsigned long long)cnt[RL_CNT_NOMATCH], rp.publishes);
out:
	rl_cls_image_free(&rp.img[0]);
	rl_cls_image_free(&rp.img[1]);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Two CPUs spending, a third thread granting: nothing lost or minted. */
struct lease_run {
	struct inst *in;
	int cpu;
	int err;
	__u64 runs;
};

#define LEASE_REPEAT	2000
#define LEASE_ROUNDS	100

static void *lease_spender(void *arg)
{
	struct lease_run *lr = arg;
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = 1000 + lr->cpu };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), i;

	lr->err = pin_to_cpu(lr->cpu);
	if (lr->err)
		return NULL;
	for (i = 0; i < LEASE_ROUNDS; i++) {
		lr->err = xdp_run(lr->in->prog_fd, buf, len, out, sizeof(out),
				  LEASE_REPEAT, &r);
		if (lr->err)
			return NULL;
		lr->runs += LEASE_REPEAT;
	}
	return NULL;
}

struct lease_granter {
	struct rl_tenant *t;
	volatile int *stop;
	__u64 added;
};

static void *lease_grant(void *arg)
{
	struct lease_granter *g = arg;

	/* Small grants, often, so that the balance stays near zero and
	 * spends, refusals (take and put back) and grants race on the same
	 * word all the time.  Sleeping between grants leaves the spender
	 * that shares our CPU its share of the tokens. */
	while (!*g->stop) {
		__atomic_fetch_add(&g->t->tokens, 3, __ATOMIC_SEQ_CST);
		g->added += 3;
		usleep(20);
	}
	return NULL;
}

static int scen_leased_concurrent(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	struct lease_run lr[2];
	struct lease_granter g;
	struct rl_stats s, c0, c1;
	volatile int stop = 0;
	pthread_t th[2], gt;
	bool ok = true;
	int i;

	(void)arg;
	if (libbpf_num_possible_cpus() < 2 || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		snprintf(skip_reason, sizeof(skip_reason), "needs two CPUs");
		return T_SKIP;
	}
	/* Identical repeated SYNs would be retransmissions: turn that off. */
	if (small_world(&in, 0))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 0, -1, false);

	g = (struct lease_granter){ .t = t, .stop = &stop };
	pthread_create(&gt, NULL, lease_grant, &g);
	for (i = 0; i < 2; i++) {
		lr[i] = (struct lease_run){ .in = &in, .cpu = i };
		pthread_create(&th[i], NULL, lease_spender, &lr[i]);
	}
	for (i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	stop = 1;
	pthread_join(gt, NULL);

	for (i = 0; i < 2; i++)
		CHECK(!lr[i].err, "spender on CPU %d: %s", i,
		      strerror(-lr[i].err));
	tenant_stats_sum(&in.w, 1, &s);
	tenant_stats_cpu(&in.w, 1, 0, &c0);
	tenant_stats_cpu(&in.w, 1, 1, &c1);
	diag("granted %llu, admitted %llu (cpu0 %llu, cpu1 %llu), left %lld, "
	     "denied %llu", (unsigned long long)g.added,
	     (unsigned long long)s.admitted, (unsigned long long)c0.admitted,
	     (unsigned long long)c1.admitted, (long long)t->tokens,
	     (unsigned long long)s.denied);
	CHECK(s.admitted + t->tokens == g.added,
	      "admitted + left = %lld, granted %llu: tokens %s",
	      (long long)(s.admitted + t->tokens),
	      (unsigned long long)g.added,
	      s.admitted + t->tokens > g.added ? "minted" : "lost");
	CHECK(t->tokens >= 0, "balance went negative: %lld",
	      (long long)t->tokens);
	CHECK(s.admitted + s.denied == lr[0].runs + lr[1].runs,
	      "admitted + denied = %llu, runs %llu",
	      (unsigned long long)(s.admitted + s.denied),
	      (unsigned long long)(lr[0].runs + lr[1].runs));
	CHECK(c0.admitted && c1.admitted,
	      "both CPUs must have spent tokens for this to test anything");
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Low water: one event per arming. */
struct ev_seen {
	int n;
	struct rl_event last;
};

static int on_event(void *ctx, void *data, size_t len)
{
	struct ev_seen *es = ctx;

	if (len >= sizeof(struct rl_event))
		memcpy(&es->last, data, sizeof(es->last));
	es->n++;
	return 0;
}

static int scen_lowwater(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	struct ring_buffer *rb;
	struct ev_seen es = { 0 };
	struct rl_stats s;
	bool ok = true;
	__u32 v;
	int i;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 5, 2, true);
	rb = ring_buffer__new(in.w.events_fd, on_event, &es, NULL);
	if (!rb) {
		diag("couldn't create a ring buffer reader: %s", strerror(errno));
		inst_close(&in);
		return T_FAIL;
	}

	/* 5 -> 4, 3: above the mark, silent. */
	for (i = 0; i < 2; i++)
		send_syn(&in, 1000 + i, i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 0, "%d events above the low-water mark", es.n);
	/* -> 2: at the mark, one event. */
	send_syn(&in, 1002, 2, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 1, "%d events on reaching the mark, want 1", es.n);
	CHECK(es.last.type == RL_EV_LOWWATER && es.last.tenant == 1 &&
	      es.last.tokens == 2,
	      "event type %u tenant %u tokens %lld, want %u, 1, 2",
	      es.last.type, es.last.tenant, (long long)es.last.tokens,
	      RL_EV_LOWWATER);
	CHECK(t->lowwater_armed == 0, "still armed after the event");
	/* -> 1, 0, refused, refused: disarmed, silent. */
	for (i = 0; i < 4; i++)
		send_syn(&in, 1003 + i, 3 + i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 1, "%d events before re-arming, want 1", es.n);

	/* User space refills and re-arms: fires again at the mark. */
	__atomic_fetch_add(&t->tokens, 5, __ATOMIC_SEQ_CST);
	__atomic_store_n(&t->lowwater_armed, 1, __ATOMIC_SEQ_CST);
	for (i = 0; i < 2; i++)
		send_syn(&in, 1010 + i, 10 + i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 1, "%d events above the mark after re-arming, want 1",
	      es.n);
	send_syn(&in, 1012, 12, &v);
	for (i = 0; i < 4; i++)
		send_syn(&in, 1013 + i, 13 + i, &v);
	ring_buffer__consume(rb);
	CHECK(es.n == 2, "%d events after re-arming, want 2", es.n);
	CHECK(es.last.tokens == 2, "second event tokens %lld, want 2",
	      (long long)es.last.tokens);
	tenant_stats_sum(&in.w, 1, &s);
	CHECK(s.lowwater_events == 2, "lowwater_events %llu, want 2",
	      (unsigned long long)s.lowwater_events);
	ring_buffer__free(rb);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Retransmitted SYN: same 4-tuple and ISN, free within the window. */
static int scen_retransmit(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	struct rl_stats s;
	bool ok = true;
	__u32 v[4];
	__u64 tat;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 1);
	if (send_syn(&in, 1000, 0xabcd, &v[0]))
		ok = false;
	tat = t->tat;
	if (send_syn(&in, 1000, 0xabcd, &v[1]) ||
	    send_syn(&in, 1000, 0xabce, &v[2]) ||
	    send_syn(&in, 1001, 0xabcd, &v[3]))
		ok = false;
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS, "retransmission with no token left: verdict "
	      "%u, want pass", v[1]);
	CHECK(t->tat == tat || !ok, "the retransmission spent a token");
	CHECK(v[2] == XDP_DROP, "same tuple, new ISN: verdict %u, want drop "
	      "(charged)", v[2]);
	CHECK(v[3] == XDP_DROP, "other source port, same ISN: verdict %u, "
	      "want drop (charged)", v[3]);
	tenant_stats_sum(&in.w, 1, &s);
	CHECK(s.admitted == 2 && s.retransmits == 1 && s.denied == 2,
	      "admitted %llu retransmits %llu denied %llu, want 2, 1, 2",
	      (unsigned long long)s.admitted,
	      (unsigned long long)s.retransmits,
	      (unsigned long long)s.denied);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

static int scen_retransmit_expired(const void *arg)
{
	struct inst in;
	struct rl_stats s;
	bool ok = true;
	__u32 v1 = 0, v2 = 0;

	(void)arg;
	if (small_world(&in, 50 * 1000000ull))
		return T_FAIL;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 10 * SEC_NS, 1);
	send_syn(&in, 1000, 77, &v1);
	usleep(100 * 1000);
	send_syn(&in, 1000, 77, &v2);
	CHECK(v1 == XDP_PASS, "first SYN: verdict %u, want pass", v1);
	CHECK(v2 == XDP_DROP, "same SYN after the 50 ms window: verdict %u, "
	      "want drop (charged)", v2);
	tenant_stats_sum(&in.w, 1, &s);
	CHECK(s.retransmits == 0, "retransmits %llu, want 0",
	      (unsigned long long)s.retransmits);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

static int scen_retransmit_off(const void *arg)
{
	struct inst in;
	bool ok = true;
	__u32 v1 = 0, v2 = 0;

	(void)arg;
	if (small_world(&in, 0))
		return T_FAIL;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, SEC_NS, 1);
	send_syn(&in, 1000, 77, &v1);
	send_syn(&in, 1000, 77, &v2);
	CHECK(v1 == XDP_PASS && v2 == XDP_DROP,
	      "verdicts %u, %u, want pass then drop", v1, v2);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* The flow key the program builds for send_syn(sport, seq): read back from
 * the frame itself (untagged IPv4, no options), so that the test and the
 * program agree on addresses and byte order by construction. */
static void syn_flow(__u16 sport, __u32 seq, struct rl_flow *f)
{
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = sport,
			 .seq = seq };
	__u8 buf[PKT_MAX];
	const __u8 *ip = buf + ETH_HLEN, *tcp = ip + 20;

	pkt_build(&p, buf, NULL);
	memset(f, 0, sizeof(*f));
	memcpy(f->saddr, ip + 12, 4);
	memcpy(f->daddr, ip + 16, 4);
	memcpy(&f->sport, tcp, 2);
	memcpy(&f->dport, tcp + 2, 2);
	memcpy(&f->isn, tcp + 4, 4);
	f->family = 4;
}

/* Two flows in one slot of the direct-mapped flow cache: the second
 * admission overwrites the first, whose retransmission is then charged, and
 * neither flow is ever admitted free as the other. */
static int scen_flow_collision(const void *arg)
{
	struct inst in;
	struct rl_flow a, b;
	struct rl_flow_slot slot;
	struct rl_stats s;
	__u32 idx, port, v[4] = { 0 };
	bool ok = true;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 2);

	syn_flow(1000, 0xabcd, &a);
	idx = rl_flow_hash(&a, RL_FLOW_BITS);
	/* the slot depends on the 4-tuple, not on the ISN */
	for (port = 1001; port < 65536; port++) {
		syn_flow(port, 0xabcd, &b);
		if (rl_flow_hash(&b, RL_FLOW_BITS) == idx)
			break;
	}
	if (port == 65536) {
		diag("no flow from another port shares slot %u", idx);
		inst_close(&in);
		return T_FAIL;
	}

	if (send_syn(&in, 1000, 0xabcd, &v[0]) ||
	    send_syn(&in, port, 0xabcd, &v[1]))
		ok = false;
	CHECK(v[0] == XDP_PASS && v[1] == XDP_PASS,
	      "two new flows with two tokens: verdicts %u, %u, want pass, pass",
	      v[0], v[1]);
	/* The collision happened in the kernel, not only in our copy of the
	 * hash: the slot now holds the second flow. */
	CHECK(!flow_slot_cpu(&in.w, idx, test_cpu, &slot) &&
	      !memcmp(&slot.flow, &b, sizeof(b)),
	      "slot %u of CPU %d does not hold the second flow", idx, test_cpu);

	if (send_syn(&in, 1000, 0xabcd, &v[2]) ||
	    send_syn(&in, port, 0xabcd, &v[3]))
		ok = false;
	CHECK(v[2] == XDP_DROP, "the overwritten flow's retransmission: "
	      "verdict %u, want drop (charged, no token left)", v[2]);
	CHECK(v[3] == XDP_PASS, "the slot holder's retransmission: verdict "
	      "%u, want pass (free)", v[3]);
	tenant_stats_sum(&in.w, 1, &s);
	CHECK(s.admitted == 3 && s.retransmits == 1 && s.denied == 1,
	      "admitted %llu retransmits %llu denied %llu, want 3, 1, 1",
	      (unsigned long long)s.admitted,
	      (unsigned long long)s.retransmits,
	      (unsigned long long)s.denied);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Sends a SYN's copies and what the client sends between them; checks the
 * verdicts and the tenant's admitted / retransmits / denied counts and the
 * global count of charged repeats.  A step with flags 0 sleeps `sleep_ms`. */
struct replay_step {
	__u8 flags;
	__u16 sport;
	__u32 seq;
	__u32 want;		/* verdict */
	int sleep_ms;
};

static int run_replay(__u64 window_ns, __u64 gap_ns,
		      const struct replay_step *steps, int n,
		      __u64 admitted, __u64 retransmits, __u64 denied,
		      __u64 charged)
{
	struct inst in;
	struct rl_stats s;
	__u64 cnt[RL_CNT_MAX];
	bool ok = true;
	int i;

	if (inst_open_gap(&in, window_ns, gap_ns))
		return T_FAIL;
	if (rule_add(&in.w, "10.1.0.0/16", 0, 1)) {
		diag("couldn't add a rule");
		inst_close(&in);
		return T_FAIL;
	}
	/* one token, none back within the test */
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 1);
	for (i = 0; i < n && ok; i++) {
		__u32 v = 0;

		if (!steps[i].flags) {
			usleep(steps[i].sleep_ms * 1000);
			continue;
		}
		if (send_tcp(&in, steps[i].flags, steps[i].sport, steps[i].seq,
			     &v)) {
			ok = false;
			break;
		}
		CHECK(v == steps[i].want, "step %d (flags 0x%02x, port %u): "
		      "verdict %u, want %u", i, steps[i].flags, steps[i].sport,
		      v, steps[i].want);
	}
	tenant_stats_sum(&in.w, 1, &s);
	counters_sum(&in.w, cnt);
	CHECK(s.admitted == admitted && s.retransmits == retransmits &&
	      s.denied == denied, "admitted %llu retransmits %llu denied %llu, "
	      "want %llu, %llu, %llu", (unsigned long long)s.admitted,
	      (unsigned long long)s.retransmits, (unsigned long long)s.denied,
	      (unsigned long long)admitted, (unsigned long long)retransmits,
	      (unsigned long long)denied);
	CHECK(cnt[RL_CNT_REPEAT_CHARGED] == charged,
	      "repeats charged %llu, want %llu",
	      (unsigned long long)cnt[RL_CNT_REPEAT_CHARGED],
	      (unsigned long long)charged);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

#define STEP(f, port, seq, v)	{ (f), (port), (seq), (v), 0 }
#define SLEEP(ms)		{ 0, 0, 0, 0, (ms) }

static int scen_repeats_bounded(const void *arg)
{
	static const struct replay_step st[] = {
		STEP(TH_SYN, 1000, 77, XDP_PASS),	/* the token */
		STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free */
		STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free */
		STEP(TH_SYN, 1000, 77, XDP_DROP),	/* past the bound */
	};

	(void)arg;
	_Static_assert(RL_FLOW_MAX_REPEATS == 2, "the steps assume 2");
	return run_replay(RL_DEFAULT_RETRANS_WINDOW_NS, 0, st, 4, 3, 2, 1, 1);
}

static int scen_replay_after_rst(const void *arg)
{
	static const struct replay_step st[] = {
		STEP(TH_SYN, 1000, 77, XDP_PASS),
		STEP(TH_RST, 1000, 78, XDP_PASS),	/* the client resets */
		STEP(TH_SYN, 1000, 77, XDP_DROP),	/* a new connection */
		STEP(TH_SYN, 1000, 77, XDP_DROP),
	};

	(void)arg;
	return run_replay(RL_DEFAULT_RETRANS_WINDOW_NS, 0, st, 4, 1, 0, 2, 2);
}

static int scen_replay_after_fin(const void *arg)
{
	static const struct replay_step st[] = {
		STEP(TH_SYN, 1000, 77, XDP_PASS),
		STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free before the FIN */
		STEP(TH_FIN | TH_ACK, 1000, 5000, XDP_PASS),
		STEP(TH_SYN, 1000, 77, XDP_DROP),
	};

	(void)arg;
	return run_replay(RL_DEFAULT_RETRANS_WINDOW_NS, 0, st, 4, 2, 1, 1, 1);
}

static int scen_rst_other_flow(const void *arg)
{
	static const struct replay_step st[] = {
		STEP(TH_SYN, 1000, 77, XDP_PASS),
		STEP(TH_RST, 1001, 78, XDP_PASS),	/* another flow's */
		STEP(TH_SYN, 1000, 77, XDP_PASS),	/* still free */
	};

	(void)arg;
	return run_replay(RL_DEFAULT_RETRANS_WINDOW_NS, 0, st, 3, 2, 1, 0, 0);
}

/* With a 1 s gap: a copy right after the SYN is charged; one 1.1 s later is
 * free; the next right after it is charged (the second needs 2 s). */
static int scen_repeat_schedule(const void *arg)
{
	static const struct replay_step st[] = {
		STEP(TH_SYN, 1000, 77, XDP_PASS),
		STEP(TH_SYN, 1001, 90, XDP_DROP),	/* another flow, no token */
	};
	static const struct replay_step st2[] = {
		STEP(TH_SYN, 1000, 77, XDP_PASS),
		STEP(TH_SYN, 1000, 77, XDP_DROP),	/* too soon */
	};
	static const struct replay_step st3[] = {
		STEP(TH_SYN, 1000, 77, XDP_PASS),
		SLEEP(1100),
		STEP(TH_SYN, 1000, 77, XDP_PASS),	/* as a kernel would */
		STEP(TH_SYN, 1000, 77, XDP_DROP),	/* sooner than 2 s */
	};
	int r;

	(void)arg;
	r = run_replay(30 * SEC_NS, SEC_NS, st, 2, 1, 0, 1, 0);
	if (r == T_PASS)
		r = run_replay(30 * SEC_NS, SEC_NS, st2, 2, 1, 0, 1, 1);
	if (r == T_PASS)
		r = run_replay(30 * SEC_NS, SEC_NS, st3, 4, 2, 1, 1, 1);
	return r;
}

/* A retransmission that reaches another CPU than its SYN did finds that
 * CPU's cache empty and is charged: the caches are per CPU, with no
 * cross-CPU traffic.  On this CPU it is free. */
static int scen_flow_per_cpu(const void *arg)
{
	struct inst in;
	struct rl_flow_slot slot;
	struct rl_flow a;
	__u32 idx, v[3] = { 0 };
	int other;
	bool ok = true;

	(void)arg;
	if (libbpf_num_possible_cpus() < 2) {
		snprintf(skip_reason, sizeof(skip_reason), "one CPU");
		return T_SKIP;
	}
	other = test_cpu == 0 ? 1 : 0;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 2);
	syn_flow(1000, 77, &a);
	idx = rl_flow_hash(&a, RL_FLOW_BITS);

	if (send_syn(&in, 1000, 77, &v[0]))
		ok = false;
	CHECK(!flow_slot_cpu(&in.w, idx, test_cpu, &slot) &&
	      !memcmp(&slot.flow, &a, sizeof(a)),
	      "slot %u of CPU %d does not hold the admitted flow", idx,
	      test_cpu);
	CHECK(!flow_slot_cpu(&in.w, idx, other, &slot) &&
	      memcmp(&slot.flow, &a, sizeof(a)),
	      "the flow was written on CPU %d too", other);
	if (pin_to_cpu(other) || send_syn(&in, 1000, 77, &v[1]) ||
	    pin_to_cpu(test_cpu) || send_syn(&in, 1000, 77, &v[2]))
		ok = false;
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS, "on CPU %d: verdict %u, want pass (charged, "
	      "the last token)", other, v[1]);
	CHECK(v[2] == XDP_PASS, "back on CPU %d: verdict %u, want pass "
	      "(free, no token left)", test_cpu, v[2]);
	CHECK(in.w.tenants[1].tat > now_ns() + 3600 * SEC_NS,
	      "the tenant was charged fewer than two tokens");
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* ------------------------------------------------------------------------
 * Fail policy of leased tenants: what decides once the leased tokens are
 * spent while the fleet is degraded (the agent's breaker is open, or its
 * heartbeat is stale).  Tenant 1 of a small world, leased, with 0 or a few
 * tokens; `agent_state` set per scenario.
 */
#define STALE_NS	(2 * SEC_NS)

/* A small world whose tenant 1 is leased with `tokens` and the fail policy
 * given, and `agent_state` as given.  NULL (and a diagnostic) on failure. */
static struct rl_tenant *fail_world(struct inst *in, __u32 action,
				    __s64 tokens, __u32 fail, __u32 fail_burst,
				    __u64 fail_interval_ns, __u64 heartbeat_ns,
				    __u64 stale_ns, __u32 degraded)
{
	struct rl_tenant *t;
	int err;

	if (small_world(in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return NULL;
	t = &in->w.tenants[1];
	tenant_leased(t, action, tokens, -1, false);
	tenant_fail(t, fail, fail_burst, fail_interval_ns);
	err = agent_state_set(&in->w, heartbeat_ns, stale_ns, degraded);
	if (err) {
		diag("couldn't set agent_state: %s", strerror(-err));
		inst_close(in);
		return NULL;
	}
	return t;
}

/* Checks tenant 1's counters: admitted, denied and decided by the fail
 * policy. */
static void check_fail_stats(struct inst *in, __u64 admitted, __u64 denied,
			     __u64 degraded, bool *okp)
{
	struct rl_stats s;
	bool ok = *okp;

	tenant_stats_sum(&in->w, 1, &s);
	CHECK(s.admitted == admitted && s.denied == denied &&
	      s.degraded == degraded,
	      "admitted %llu denied %llu degraded %llu, want %llu %llu %llu",
	      (unsigned long long)s.admitted, (unsigned long long)s.denied,
	      (unsigned long long)s.degraded, (unsigned long long)admitted,
	      (unsigned long long)denied, (unsigned long long)degraded);
	*okp = ok;
}

/* Degraded, fail policy deny: the 3 leased tokens still admit 3, and only
 * the 4th SYN meets the fail policy. */
static int scen_fail_tokens_first(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 3, RL_FAIL_DENY, 1, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return T_FAIL;
	n = count_admits(&in, 3, 1000, &ok);
	CHECK(n == 3, "3 leased tokens while degraded admitted %d, want 3", n);
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	check_fail_stats(&in, 3, 0, 0, &ok);
	n = count_admits(&in, 2, 2000, &ok);
	CHECK(n == 0, "fail deny after the tokens admitted %d, want 0", n);
	check_fail_stats(&in, 3, 2, 2, &ok);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Healthy fleet (fresh heartbeat, not degraded), fail policy allow: an
 * empty leased bucket refuses; the fail policy is not consulted. */
static int scen_fail_not_degraded(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_ALLOW, 1, SEC_NS,
		       now_ns(), STALE_NS, 0);
	if (!t)
		return T_FAIL;
	n = count_admits(&in, 3, 1000, &ok);
	CHECK(n == 0, "empty leased bucket, healthy fleet admitted %d, want 0",
	      n);
	check_fail_stats(&in, 0, 3, 0, &ok);
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

static int scen_fail_allow(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_ALLOW, 1, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return T_FAIL;
	n = count_admits(&in, 5, 1000, &ok);
	CHECK(n == 5, "degraded, fail allow admitted %d of 5", n);
	check_fail_stats(&in, 5, 0, 5, &ok);
	CHECK(t->tokens == 0, "fail allow moved tokens to %lld, want 0",
	      (long long)t->tokens);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Degraded, fail deny, action rst: refused with the RST|ACK the SYN's
 * description calls for. */
static int scen_fail_deny_rst(const void *arg)
{
	struct pkt p = { V4, SYN, .src = "10.1.0.10", .sport = 1000,
			 .seq = 4242 };
	__u8 buf[PKT_MAX], out[PKT_MAX * 2], want[PKT_MAX];
	struct run_result r;
	struct inst in;
	struct rl_tenant *t;
	struct rl_stats s;
	bool ok = true;
	int len, wlen, err;

	(void)arg;
	t = fail_world(&in, RL_ACT_RST, 0, RL_FAIL_DENY, 1, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return T_FAIL;
	len = pkt_build(&p, buf, NULL);
	wlen = pkt_build_rst(&p, want);
	err = xdp_run(in.prog_fd, buf, len, out, sizeof(out), 1, &r);
	if (err) {
		diag("bpf_prog_test_run_opts: %s", strerror(-err));
		inst_close(&in);
		return T_FAIL;
	}
	CHECK(r.retval == XDP_TX, "verdict %u, want XDP_TX (RST)", r.retval);
	if (r.retval == XDP_TX && (r.out_len != (__u32)wlen ||
				   memcmp(out, want, wlen))) {
		ok = false;
		diag("the RST differs from the expected reply");
		diag_hex("got", out, r.out_len, want, wlen);
		diag_hex("want", want, wlen, out, r.out_len);
	}
	tenant_stats_sum(&in.w, 1, &s);
	CHECK(s.denied == 1 && s.rst_sent == 1 && s.degraded == 1 &&
	      s.admitted == 0,
	      "admitted %llu denied %llu rst_sent %llu degraded %llu, want "
	      "0 1 1 1", (unsigned long long)s.admitted,
	      (unsigned long long)s.denied, (unsigned long long)s.rst_sent,
	      (unsigned long long)s.degraded);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Degraded, fail static: a full local share (fail_tat 0) admits exactly
 * fail_burst, and every SYN it decided counts as degraded. */
static int scen_fail_static_burst(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	__u64 tat;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_STATIC, 3, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return T_FAIL;
	t->fail_tat = 0;
	n = count_admits(&in, 7, 1000, &ok);
	CHECK(n == 3, "static share of burst 3 admitted %d, want 3", n);
	check_fail_stats(&in, 3, 4, 7, &ok);
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	/* Three admissions from a full share: fail_tat = now + 3 intervals. */
	tat = t->fail_tat;
	CHECK(tat > now_ns() + 2 * SEC_NS && tat <= now_ns() + 3 * SEC_NS,
	      "fail_tat %llu is not now + 3 intervals (now %llu)",
	      (unsigned long long)tat, (unsigned long long)now_ns());
	CHECK(t->tat == 0, "the static share moved the standalone tat to %llu",
	      (unsigned long long)t->tat);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* fail_tat = now + (burst - k) * interval: the share was empty k intervals
 * ago and admits k; the cap at fail_burst holds after a long idle spell. */
static int scen_fail_static_refill(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_STATIC, 5, SEC_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return T_FAIL;
	t->fail_tat = now_coarse_ns() + (5 - 3) * SEC_NS;
	n = count_admits(&in, 8, 1000, &ok);
	CHECK(n == 3, "share empty 3 intervals ago (burst 5) admitted %d, "
	      "want 3", n);
	/* idle for 10 intervals: 10 earned, 5 kept */
	t->fail_tat = now_ns() + 5 * SEC_NS - 10 * SEC_NS;
	n = count_admits(&in, 8, 2000, &ok);
	CHECK(n == 5, "share idle for 2x burst admitted %d, want 5", n);
	/* half an interval: no whole token */
	t->fail_tat = now_ns() + 5 * SEC_NS - SEC_NS / 2;
	n = count_admits(&in, 3, 3000, &ok);
	CHECK(n == 0, "half a token admitted %d, want 0", n);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Real elapsed time: an empty share of one token per 100 ms. */
static int scen_fail_static_realtime(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_STATIC, 1, REALTIME_INTERVAL_NS,
		       now_ns(), STALE_NS, 1);
	if (!t)
		return T_FAIL;
	return refill_realtime(&in, &t->fail_tat, "share") ? T_PASS : T_FAIL;
}

/* Not degraded, but the heartbeat is 3 s old with a 2 s deadline: the
 * agent is presumed dead and the fail policy decides.  1 s old: alive. */
static int scen_fail_stale_heartbeat(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_ALLOW, 1, SEC_NS,
		       now_ns() - SEC_NS, STALE_NS, 0);
	if (!t)
		return T_FAIL;
	n = count_admits(&in, 2, 1000, &ok);
	CHECK(n == 0, "heartbeat 1 s old (stale after 2 s) admitted %d, want 0",
	      n);
	check_fail_stats(&in, 0, 2, 0, &ok);
	if (agent_state_set(&in.w, now_ns() - 3 * SEC_NS, STALE_NS, 0))
		ok = false;
	n = count_admits(&in, 2, 2000, &ok);
	CHECK(n == 2, "heartbeat 3 s old (stale after 2 s) admitted %d, want 2",
	      n);
	check_fail_stats(&in, 2, 2, 2, &ok);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* A heartbeat ahead of the kernel's clock (written just after the SYN read
 * the time) is fresh, not 2^64 ns old. */
static int scen_fail_heartbeat_ahead(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_ALLOW, 1, SEC_NS,
		       now_ns() + 10 * SEC_NS, STALE_NS, 0);
	if (!t)
		return T_FAIL;
	n = count_admits(&in, 2, 1000, &ok);
	CHECK(n == 0, "heartbeat 10 s ahead admitted %d, want 0", n);
	check_fail_stats(&in, 0, 2, 0, &ok);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* stale_ns 0 (a standalone agent expects no heartbeat): an ancient or
 * absent heartbeat never makes the fleet degraded. */
static int scen_fail_stale_zero(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	t = fail_world(&in, RL_ACT_DROP, 0, RL_FAIL_ALLOW, 1, SEC_NS,
		       0, 0, 0);
	if (!t)
		return T_FAIL;
	n = count_admits(&in, 3, 1000, &ok);
	CHECK(n == 0, "stale_ns 0, heartbeat 0 admitted %d, want 0", n);
	check_fail_stats(&in, 0, 3, 0, &ok);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* Standalone tenants never look at agent_state or the fail fields: an
 * empty bucket still refuses with fail allow and a degraded fleet, and a
 * bucket with 2 tokens still admits 2 with fail deny. */
static int scen_fail_standalone_ignores(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	bool ok = true;
	int n;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return T_FAIL;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 2);
	tenant_fail(t, RL_FAIL_ALLOW, 5, SEC_NS);
	t->tat = now_ns() + 3600 * SEC_NS;	/* empty */
	if (agent_state_set(&in.w, now_ns() - 3 * SEC_NS, STALE_NS, 1)) {
		inst_close(&in);
		return T_FAIL;
	}
	n = count_admits(&in, 3, 1000, &ok);
	CHECK(n == 0, "empty standalone bucket, degraded, fail allow admitted "
	      "%d, want 0", n);
	check_fail_stats(&in, 0, 3, 0, &ok);
	tenant_fail(t, RL_FAIL_DENY, 5, SEC_NS);
	t->tat = 0;				/* full: 2 tokens */
	n = count_admits(&in, 4, 2000, &ok);
	CHECK(n == 2, "full standalone bucket of 2, degraded, fail deny "
	      "admitted %d, want 2", n);
	check_fail_stats(&in, 2, 5, 0, &ok);
	CHECK(t->fail_tat == 0, "a standalone tenant moved fail_tat to %llu",
	      (unsigned long long)t->fail_tat);
	inst_close(&in);
	return ok ? T_PASS : T_FAIL;
}

/* ------------------------------------------------------------------------
 * The packet fuzzer (pktfuzz.c), bounded: the regression corpus, then
 * seeded random and mutated frames, each checked against the independent
 * reference, then copies of a few SYNs with free repeats on, against the
 * flow model.  RLGATE_FUZZ_SEED, RLGATE_PKTFUZZ_FRAMES,
 * RLGATE_PKTFUZZ_SECONDS and RLGATE_PKTFUZZ_FLOWS change the run;
 * `test_xdp --fuzz [--flows]` runs it alone.
 */
#define FUZZ_FRAMES	400000
#define FUZZ_SECONDS	25
#define FUZZ_FLOW_FRAMES	100000
#define FUZZ_FLOW_SECONDS	10

/* tests/fuzz/corpus/xdp of the tree this binary was built from. */
static void fuzz_corpus_dir(char *out, size_t cap)
{
	const char *top = getenv("RLGATE_TOP");
	char exe[4096];
	ssize_t n;

	char path[4096];

	if (top) {
		snprintf(out, cap, "%s/tests/fuzz/corpus/xdp", top);
		return;
	}
	/* BUILD/tests/test_xdp, BUILD in the tree */
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	exe[n > 0 ? n : 0] = '\0';
	snprintf(path, sizeof(path), "%s/../../tests/fuzz/corpus/xdp",
		 dirname(exe));
	if (!realpath(path, out))
		snprintf(out, cap, "%s", path);
}

static long env_long(const char *name, long def)
{
	const char *v = getenv(name);

	return v && *v ? strtol(v, NULL, 0) : def;
}

static int scen_fuzz(const void *arg)
{
	struct pktfuzz *f = calloc(1, sizeof(*f));
	char dir[4096], *log = NULL, *line, *save = NULL;
	size_t log_len = 0;
	__u64 seed = env_long("RLGATE_FUZZ_SEED", 1);
	long frames = env_long("RLGATE_PKTFUZZ_FRAMES", FUZZ_FRAMES), bad, n;
	long bad_flows = 0;
	int files = 0, bad_files;
	bool ran;
	FILE *fp;

	(void)arg;
	if (!f || !(fp = open_memstream(&log, &log_len))) {
		free(f);
		return T_FAIL;
	}
	if (pktfuzz_open(f)) {
		diag("%s", f->msg);
		fclose(fp);
		free(log);
		free(f);
		return T_FAIL;
	}
	fuzz_corpus_dir(dir, sizeof(dir));
	bad_files = pktfuzz_corpus(f, dir, 2, fp, &files);
	fprintf(fp, "%d frames of %s\n", files, dir);
	n = pktfuzz_seeded(f, seed, frames,
			   env_long("RLGATE_PKTFUZZ_SECONDS", FUZZ_SECONDS),
			   NULL, 3, fp, &bad);
	fprintf(fp, "%ld frames of seed %llu (RLGATE_FUZZ_SEED), %ld broke a "
		"rule\n", n, (unsigned long long)seed, bad);
	ran = n > 0;
	pktfuzz_summary(f, fp);
	pktfuzz_close(f);

	/* Copies of admitted SYNs with free repeats on, against the model. */
	memset(f, 0, sizeof(*f));
	if (pktfuzz_open_flows(f)) {
		fprintf(fp, "%s", f->msg);
		bad++;
	} else {
		n = pktfuzz_flows(f, seed,
				  env_long("RLGATE_PKTFUZZ_FLOWS", FUZZ_FLOW_FRAMES),
				  FUZZ_FLOW_SECONDS, 3, fp, &bad_flows);
		fprintf(fp, "%ld frames of the flows of seed %llu, %ld broke a "
			"rule\n", n, (unsigned long long)seed, bad_flows);
		pktfuzz_summary(f, fp);
		pktfuzz_close(f);
		bad += bad_flows + (n == 0);
	}
	fclose(fp);
	for (line = strtok_r(log, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save))
		diag("%s", line);
	free(log);
	free(f);
	return bad_files || bad || !ran ? T_FAIL : T_PASS;
}

/* ------------------------------------------------------------------------
 * Runner.
 */
struct test {
	char name[192];
	int (*fn)(const void *arg);
	const void *arg;
};

static const struct {
	const char *name;
	int (*fn)(const void *arg);
} scenarios[] = {
	{ "standalone bucket emptied 3 intervals ago admits exactly 3 SYNs",
	  scen_refill },
	{ "standalone bucket idle for twice its burst admits exactly burst",
	  scen_burst_cap },
	{ "standalone bucket half an interval past empty admits nothing",
	  scen_partial_token },
	{ "standalone bucket refills in real time (empty, 160 ms later 1)",
	  scen_refill_realtime },
	{ "a bucket smaller than a tick of tokens keeps its rate (precise clock)",
	  scen_fine_clock },
	{ "leased tokens are spent one by one, refused at zero, never below",
	  scen_leased_zero },
	{ "leased tokens spent from two CPUs while granted: none lost or minted",
	  scen_leased_concurrent },
	{ "low-water event fires once per arming, again after re-arming",
	  scen_lowwater },
	{ "retransmitted SYN (same tuple and ISN) is free; a new ISN is charged",
	  scen_retransmit },
	{ "retransmitted SYN after the window is charged", scen_retransmit_expired },
	{ "retrans_window_ns 0 charges an identical SYN twice",
	  scen_retransmit_off },
	{ "free repeats are bounded: the third copy of an admitted SYN is "
	  "charged", scen_repeats_bounded },
	{ "replayed SYN after the client's RST is charged as a new connection",
	  scen_replay_after_rst },
	{ "replayed SYN after the client's FIN is charged as a new connection",
	  scen_replay_after_fin },
	{ "a RST of another flow leaves a SYN's retransmission free",
	  scen_rst_other_flow },
	{ "repeats follow a kernel's schedule: too soon is charged, after the "
	  "gap is free, the next needs twice the gap", scen_repeat_schedule },
	{ "flow-cache collision: the overwritten flow is charged again, "
	  "neither flow passes free as the other", scen_flow_collision },
	{ "rules republished under traffic: every SYN sees one whole rule set",
	  scen_republish_under_traffic },
	{ "flow cache is per CPU: a retransmission on another CPU is charged",
	  scen_flow_per_cpu },
	{ "fail policy: degraded leased tenant spends its leased tokens first "
	  "(fail deny, 3 tokens admit 3, none counted degraded)",
	  scen_fail_tokens_first },
	{ "fail policy: empty leased bucket on a healthy fleet refuses "
	  "(fail allow not consulted, degraded 0)", scen_fail_not_degraded },
	{ "fail policy allow: degraded, empty bucket admits every SYN, each "
	  "counted degraded", scen_fail_allow },
	{ "fail policy deny with action rst: degraded, empty bucket answers "
	  "RST|ACK", scen_fail_deny_rst },
	{ "fail policy static: full share admits exactly fail_burst (GCRA on "
	  "fail_tat), the standalone tat untouched", scen_fail_static_burst },
	{ "fail policy static: share empty 3 intervals ago admits 3, capped at "
	  "fail_burst, half a token admits 0", scen_fail_static_refill },
	{ "fail policy static: share refills in real time (empty, 160 ms later "
	  "1)", scen_fail_static_realtime },
	{ "fail policy: heartbeat 3 s old with stale_ns 2 s applies it; 1 s old "
	  "does not", scen_fail_stale_heartbeat },
	{ "fail policy: heartbeat ahead of the kernel clock is fresh",
	  scen_fail_heartbeat_ahead },
	{ "fail policy: stale_ns 0 never makes an old heartbeat stale",
	  scen_fail_stale_zero },
	{ "fail policy: standalone tenants ignore agent_state and the fail "
	  "fields", scen_fail_standalone_ignores },
	{ "packet fuzz: the regression corpus and seeded random and mutated "
	  "frames keep every verdict rule of an independent reference; "
	  "copies of admitted SYNs pass free only as its flow model allows",
	  scen_fuzz },
};

static struct test *tests;
static int n_tests;

static void add_test(const char *name, int (*fn)(const void *),
		     const void *arg)
{
	struct test *t;

	tests = realloc(tests, (n_tests + 1) * sizeof(*tests));
	if (!tests) {
		perror("realloc");
		exit(1);
	}
	t = &tests[n_tests++];
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->fn = fn;
	t->arg = arg;
}

static void add_truncations(void)
{
	static struct trunc_case tc[256];
	static int ntc;
	char name[192];
	size_t s;
	int i;

	for (s = 0; s < sizeof(trunc_shapes) / sizeof(trunc_shapes[0]); s++) {
		struct pkt_layout lay;
		__u8 buf[PKT_MAX];
		int last = -1;

		pkt_build(&trunc_shapes[s].pkt, buf, &lay);
		for (i = 0; i < lay.n; i++) {
			int start = lay.off[i];
			int end = i + 1 < lay.n ? lay.off[i + 1] : lay.len;
			int cuts[2] = { start, start + (end - start) / 2 };
			const char *where[2] = { "before", "in the middle of" };
			int k;

			for (k = 0; k < 2; k++) {
				/* An empty frame says nothing; one short
				 * Ethernet header is enough. */
				if (cuts[k] == 0 || cuts[k] <= last ||
				    (cuts[k] < ETH_HLEN && s > 0))
					continue;
				__u32 v;

				last = cuts[k];
				tc[ntc] = (struct trunc_case){ s, cuts[k] };
				snprintf(name, sizeof(name),
					 "%s cut at %d bytes, %s the %s, %s",
					 trunc_shapes[s].label, cuts[k],
					 where[k], lay.what[i],
					 trunc_outcome(s, cuts[k], &v) ==
					 O_UNPARSED_DROP ? "is refused" :
					 "passes untouched");
				add_test(name, run_trunc, &tc[ntc++]);
			}
		}
	}
}

int main(int argc, char **argv)
{
	int i, failed = 0;
	size_t k;

	if (argc > 1 && !strcmp(argv[1], "--bench"))
		return bench_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "--fuzz"))
		return pktfuzz_main(argc - 1, argv + 1);
	if (argc > 1) {
		fprintf(stderr, "usage: %s [--bench | --fuzz ...]\n", argv[0]);
		return 2;
	}
	harness_quiet_libbpf();
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* The flow cache is per CPU, as a NIC queue's flows are: a
	 * retransmission must be run where its SYN was. */
	test_cpu = sched_getcpu();
	if (test_cpu < 0 || pin_to_cpu(test_cpu)) {
		fprintf(stderr, "Error: couldn't pin to a CPU: %s\n",
			strerror(errno));
		return 1;
	}

	for (k = 0; k < N_CASES; k++)
		add_test(cases[k].name, run_case, &cases[k]);
	add_truncations();
	for (k = 0; k < sizeof(scenarios) / sizeof(scenarios[0]); k++)
		add_test(scenarios[k].name, scenarios[k].fn, NULL);

	printf("1..%d\n", n_tests);
	for (i = 0; i < n_tests; i++) {
		int rc;

		diag_len = 0;
		skip_reason[0] = '\0';
		rc = tests[i].fn(tests[i].arg);
		diag_buf[diag_len] = '\0';
		if (rc == T_SKIP) {
			printf("ok %d - %s # SKIP %s\n", i + 1, tests[i].name,
			       skip_reason);
			continue;
		}
		printf("%sok %d - %s\n", rc == T_PASS ? "" : "not ",
		       i + 1, tests[i].name);
		failed += rc != T_PASS;
		/* Passing tests may leave a summary worth keeping in a log. */
		{
			char *line, *save = NULL;

			for (line = strtok_r(diag_buf, "\n", &save); line;
			     line = strtok_r(NULL, "\n", &save))
				printf("# %s\n", line);
		}
	}
	if (failed)
		printf("# %d of %d failed\n", failed, n_tests);
	free(tests);
	return failed ? 1 : 0;
}
