// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The flood generator's XDP sender (tools/synflood/synflood.bpf.c): every
 * frame it builds comes from the next source of the prefix with the next
 * port, both checksums still right after its incremental updates, and is
 * redirected.  The peer benchmark's XDP-frame rows rest on this: a SYN with
 * a wrong checksum would be dropped by the stack before any filter's work.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <linux/if_ether.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "pkt.h"
#include "synflood.skel.h"
#include "xdp_test.h"

#define PREFIX		"192.0.2.192"
#define HOSTS		32
#define FRAMES		200	/* more than the prefix: the port moves on */

static void synflood_sources_and_checksums(void)
{
	struct pkt p = { .family = 4, .flags = TH_SYN, .src = "192.0.2.1",
			 .dst = "192.0.2.11", .dport = 8080, .tcp_opts = 4 };
	__u8 in[PKT_MAX], out[PKT_MAX];
	struct synflood_bpf *skel;
	struct in_addr base;
	const char *bad;
	int len, fd, i, err;

	len = pkt_build(&p, in, NULL);
	inet_pton(AF_INET, PREFIX, &base);
	skel = synflood_bpf__open();
	CHECK(skel, "open synflood.bpf.o: %s", strerror(errno));
	if (!skel)
		return;
	skel->rodata->src_base = ntohl(base.s_addr);
	skel->rodata->src_hosts = HOSTS;
	skel->rodata->out_ifindex = 1;
	err = synflood_bpf__load(skel);
	CHECK(!err, "load synflood.bpf.o: %s", strerror(-err));
	if (err)
		goto out;
	fd = bpf_program__fd(skel->progs.xdp_flood);
	/* Each frame built from the last one's bytes, as live frames whose
	 * page is reused keep what the program wrote. */
	for (i = 0; i < FRAMES; i++) {
		LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = in,
			    .data_size_in = len, .data_out = out,
			    .data_size_out = sizeof(out), .repeat = 1);
		__u32 saddr;
		__u16 sport;

		err = bpf_prog_test_run_opts(fd, &o);
		CHECK(!err, "frame %d: run: %s", i, strerror(errno));
		if (err)
			break;
		CHECK(o.retval == XDP_REDIRECT, "frame %d: verdict %u, want "
		      "XDP_REDIRECT", i, o.retval);
		CHECK((int)o.data_size_out == len, "frame %d: %u bytes, want %d",
		      i, o.data_size_out, len);
		bad = pkt_check_csums(out, len, ETH_HLEN);
		CHECK(!bad, "frame %d: %s wrong", i, bad);
		memcpy(&saddr, out + ETH_HLEN + 12, 4);
		memcpy(&sport, out + ETH_HLEN + 20, 2);
		CHECK(ntohl(saddr) == ntohl(base.s_addr) + i % HOSTS,
		      "frame %d: source %08x, want %08x", i, ntohl(saddr),
		      ntohl(base.s_addr) + i % HOSTS);
		CHECK(ntohs(sport) == 1024 + i / HOSTS, "frame %d: port %u, "
		      "want %u", i, ntohs(sport), 1024 + i / HOSTS);
		memcpy(in, out, len);
	}
	CHECK(skel->bss->built == (__u64)FRAMES, "frames counted %llu, want %d",
	      (unsigned long long)skel->bss->built, FRAMES);
out:
	synflood_bpf__destroy(skel);
}

void synflood_tests(void)
{
	CHECK_RUN(synflood_sources_and_checksums);
}
