// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Truncation, as a generated verdict table: each shape cut at the start of
 * every header and in the middle of it, each cut a test of its own.
 */
#include <stdio.h>
#include <linux/if_ether.h>

#include "xdp_table.h"

/*
 * A cut inside the Ethernet header or a VLAN tag is not known to be IP at
 * all and passes uncounted; one inside the fixed IP header passes as
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

void truncation_tests(void)
{
	char name[192];
	size_t s;
	int i;

	for (s = 0; s < ARRAY_SIZE(trunc_shapes); s++) {
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
				struct trunc_case tc = { s, cuts[k] };
				__u32 v;

				if (cuts[k] == 0 || cuts[k] <= last ||
				    (cuts[k] < ETH_HLEN && s > 0))
					continue;
				last = cuts[k];
				snprintf(name, sizeof(name),
					 "%s cut at %d bytes, %s the %s, %s",
					 trunc_shapes[s].label, cuts[k],
					 where[k], lay.what[i],
					 trunc_outcome(s, cuts[k], &v) ==
					 O_UNPARSED_DROP ? "is refused" :
					 "passes untouched");
				check_run_arg(name, run_trunc, &tc);
			}
		}
	}
}
