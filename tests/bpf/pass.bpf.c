// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The smallest XDP program: passes everything.  The benchmark's floor, and
 * what the lab attaches to the peer end of a veth so that XDP_TX frames from
 * the protected end are delivered. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
