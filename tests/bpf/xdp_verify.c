// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Verification (RL_F_VERIFY): a verifying tenant's SYNs pass uncharged,
 * whatever its bucket holds; the ACK that returns a valid SYN cookie is
 * charged once, its first data segment and a retransmission free (within
 * the retransmission window of the copy before), and gets the tenant's
 * action over the limit (a RST the client's open connection takes); ACKs
 * that return no cookie pass uncharged.  Cookies come from the kernel's own
 * generator (cookie.bpf.c), as the server's kernel makes them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/if_ether.h>
#include <bpf/libbpf.h>

#include "cookie.skel.h"
#include "xdp_test.h"

#define CLIENT4		"10.1.0.10"
#define CLIENT6		"2001:db8:1::10"

/* A verifying tenant 1 (10.1/16 and 2001:db8:1::/48) and the cookie
 * generator. */
struct vinst {
	struct inst in;
	struct cookie_bpf *gen;
	struct rl_tenant *t;
};

static void vinst_close(struct vinst *v)
{
	cookie_bpf__destroy(v->gen);
	inst_close(&v->in);
}

static int vinst_open_gap(struct vinst *v, __u64 gap_ns, __u32 action,
			  __u32 flags, __u64 burst)
{
	memset(v, 0, sizeof(*v));
	if (inst_open_gap(&v->in, RL_DEFAULT_RETRANS_WINDOW_NS, gap_ns))
		return -1;
	if (rule_add(&v->in.w, "10.1.0.0/16", 0, 1) ||
	    rule_add(&v->in.w, "2001:db8:1::/48", 0, 1)) {
		diag("couldn't add the rules");
		inst_close(&v->in);
		return -1;
	}
	v->gen = cookie_bpf__open_and_load();
	if (!v->gen) {
		diag("couldn't load the cookie generator: %s", strerror(errno));
		inst_close(&v->in);
		return -1;
	}
	v->t = &v->in.w.tenants[1];
	/* one token an hour: the bucket never refills during a test */
	tenant_standalone(v->t, action, flags | RL_F_VERIFY,
			  3600ull * SEC_NS, burst);
	v->in.skel->bss->verify_tenants = 1;
	return 0;
}

/* Most scenarios send copies back to back: no gap, as for SYNs. */
static int vinst_open(struct vinst *v, __u32 action, __u32 flags,
		      __u64 burst)
{
	return vinst_open_gap(v, 0, action, flags, burst);
}

/* A 4-tuple as the client sends it: the tenant's client addresses and the
 * default destination unless src and dst are set (ports host order; dport
 * 0: the default). */
struct tuple {
	int family;
	const char *src, *dst;
	__u16 sport, dport;
};

/* The segment of flow t with these flags, numbers and payload: its
 * verdict, and the frame that came out in out (*out_len). */
static int send_seg_at(struct vinst *v, const struct tuple *t, __u8 flags,
		       __u32 seq, __u32 ack, int payload, __u32 *verdict,
		       __u8 *out, __u32 *out_len)
{
	struct pkt p = { .family = t->family, .flags = flags,
			 .src = t->src ? t->src :
				t->family == 4 ? CLIENT4 : CLIENT6,
			 .dst = t->dst, .sport = t->sport, .dport = t->dport,
			 .seq = seq, .ack = ack, .payload = payload };
	__u8 buf[PKT_MAX], scratch[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), err;

	err = xdp_run(v->in.prog_fd, buf, len, out ? out : scratch, PKT_MAX, 1,
		      &r);
	CHECK(!err, "bpf_prog_test_run_opts: %s", strerror(-err));
	if (err)
		return err;
	*verdict = r.retval;
	if (out_len)
		*out_len = r.out_len;
	return 0;
}

/* The same from the tenant's client (family, sport) to the default
 * destination. */
static int send_seg(struct vinst *v, int family, __u8 flags, __u16 sport,
		    __u32 seq, __u32 ack, int payload, __u32 *verdict,
		    __u8 *out, __u32 *out_len)
{
	struct tuple t = { .family = family, .sport = sport };

	return send_seg_at(v, &t, flags, seq, ack, payload, verdict, out,
			   out_len);
}

/* The cookie the server's kernel answers the SYN (t, isn) with, host
 * order; 0 when the generator failed (a failed check). */
static __u32 cookie_at(struct vinst *v, const struct tuple *t, __u32 isn)
{
	struct pkt p = { .family = t->family, SYN,
			 .src = t->src ? t->src :
				t->family == 4 ? CLIENT4 : CLIENT6,
			 .dst = t->dst, .sport = t->sport, .dport = t->dport,
			 .seq = isn };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), l4 = pkt_l3_off(&p) +
						  (t->family == 4 ? 20 : 40);
	__u32 c;
	int err;

	err = xdp_run(bpf_program__fd(v->gen->progs.xdp_cookie), buf, len, out,
		      sizeof(out), 1, &r);
	CHECK(!err && r.retval == XDP_TX, "the cookie generator failed: %s, "
	      "verdict %u", strerror(-err), r.retval);
	if (err || r.retval != XDP_TX)
		return 0;
	memcpy(&c, out + l4 + 8, 4);
	return ntohl(c);
}

/* The same for the tenant's client (family, sport). */
static __u32 cookie_for(struct vinst *v, int family, __u16 sport, __u32 isn)
{
	struct tuple t = { .family = family, .sport = sport };

	return cookie_at(v, &t, isn);
}

/* A SYN, then the handshake's ACK with its cookie: the ACK's verdict. */
static __u32 handshake(struct vinst *v, int family, __u16 sport, __u32 isn)
{
	__u32 verdict = ~0u, cookie;

	if (send_seg(v, family, TH_SYN, sport, isn, 0, 0, &verdict, NULL, NULL))
		return ~0u;
	CHECK(verdict == XDP_PASS, "the SYN of a verifying tenant: verdict %u, "
	      "want XDP_PASS", verdict);
	cookie = cookie_for(v, family, sport, isn);
	if (send_seg(v, family, TH_ACK, sport, isn + 1, cookie + 1, 0, &verdict,
		     NULL, NULL))
		return ~0u;
	return verdict;
}

static __u64 counter(struct vinst *v, int idx)
{
	__u64 c[RL_CNT_MAX];

	counters_sum(&v->in.w, c);
	return c[idx];
}

/* SYNs pass uncharged with the bucket empty; the cookie ACKs are the
 * connections, refused over the limit; IPv4 and IPv6. */
static int scen_charged_at_ack(const void *arg)
{
	int family = *(const int *)arg;
	struct vinst v;
	__u32 verdict;
	int i;

	if (vinst_open(&v, RL_ACT_DROP, 0, 2))
		return -1;
	for (i = 0; i < 50; i++) {
		if (send_seg(&v, family, TH_SYN, 2000 + i, 7000 + i, 0, 0,
			     &verdict, NULL, NULL))
			break;
		CHECK(verdict == XDP_PASS, "SYN %d of a verifying tenant: "
		      "verdict %u", i, verdict);
	}
	EXPECT_STATS(&v.in.w, 1, "admitted=0 denied=0");
	CHECK(counter(&v, RL_CNT_VERIFY_SYN) == 50, "%llu SYNs counted as "
	      "passed to cookies, want 50",
	      (unsigned long long)counter(&v, RL_CNT_VERIFY_SYN));
	for (i = 0; i < 3; i++) {
		verdict = handshake(&v, family, 1000 + i, 5000 + i);
		CHECK(verdict == (i < 2 ? XDP_PASS : XDP_DROP), "handshake %d: "
		      "verdict %u with a bucket of 2", i, verdict);
	}
	EXPECT_STATS(&v.in.w, 1, "admitted=2 denied=1");
	CHECK(counter(&v, RL_CNT_VERIFY_ACK) == 3, "%llu cookie ACKs counted, "
	      "want 3", (unsigned long long)counter(&v, RL_CNT_VERIFY_ACK));
	vinst_close(&v);
	return 0;
}

/* ACKs that return no cookie - forged, or of open connections - pass and
 * cost nothing, with the bucket full or empty. */
static int scen_no_cookie(const void *arg)
{
	struct vinst v;
	__u32 verdict, cookie;

	(void)arg;
	if (vinst_open(&v, RL_ACT_RST, 0, 1))
		return -1;
	cookie = cookie_for(&v, 4, 1000, 5000);
	/* a cookie for another ISN, another port, and an arbitrary number */
	send_seg(&v, 4, TH_ACK, 1000, 6001, cookie + 1, 0, &verdict, NULL, NULL);
	CHECK(verdict == XDP_PASS, "ACK with another ISN: verdict %u", verdict);
	send_seg(&v, 4, TH_ACK, 1001, 5001, cookie + 1, 0, &verdict, NULL, NULL);
	CHECK(verdict == XDP_PASS, "ACK from another port: verdict %u", verdict);
	send_seg(&v, 4, TH_ACK | TH_PSH, 1000, 5001, 12345, 100, &verdict, NULL,
		 NULL);
	CHECK(verdict == XDP_PASS, "data of an open connection: verdict %u",
	      verdict);
	EXPECT_STATS(&v.in.w, 1, "admitted=0 denied=0");
	CHECK(v.t->tat == 0, "a bucket spent by ACKs without a cookie");
	vinst_close(&v);
	return 0;
}

/* The handshake's ACK, then the first data segment and its retransmission
 * with the same numbers: one charge.  A fourth copy is charged, and after
 * the client's FIN even the first free copy would be. */
static int scen_copies(const void *arg)
{
	struct vinst v;
	__u32 verdict, cookie;

	(void)arg;
	if (vinst_open(&v, RL_ACT_DROP, 0, 10))
		return -1;
	CHECK(handshake(&v, 4, 1000, 5000) == XDP_PASS, "handshake refused");
	cookie = cookie_for(&v, 4, 1000, 5000);
	for (int i = 0; i < 3; i++) {
		send_seg(&v, 4, TH_ACK | TH_PSH, 1000, 5001, cookie + 1, 100,
			 &verdict, NULL, NULL);
		CHECK(verdict == XDP_PASS, "copy %d: verdict %u", i, verdict);
	}
	EXPECT_STATS(&v.in.w, 1, "admitted=4 retransmits=2");

	CHECK(handshake(&v, 4, 1001, 6000) == XDP_PASS, "handshake refused");
	cookie = cookie_for(&v, 4, 1001, 6000);
	/* the FIN is a free copy, and ends the flow: the ACK after it is
	 * charged */
	send_seg(&v, 4, TH_ACK | TH_FIN, 1001, 6001, cookie + 1, 0, &verdict,
		 NULL, NULL);
	send_seg(&v, 4, TH_ACK, 1001, 6001, cookie + 1, 0, &verdict, NULL, NULL);
	EXPECT_STATS(&v.in.w, 1, "admitted=7 retransmits=3");
	CHECK(v.t->tat != 0, "no token spent");
	vinst_close(&v);
	return 0;
}

/* The client's end reaches every CPU.  On a veth a packet is judged on the
 * CPU that sent it: two handshakes charged on this CPU, each with its data
 * free there, the first ended by the client's RST and the second by its
 * FIN (after its request, so no cookie's) on another CPU, then a late copy
 * of each one's data on this CPU.  The server, whose connections the RST
 * and the FIN closed, would open new ones from the copies' cookies: they
 * are charged, and refused with the bucket of two spent. */
static int scen_end_other_cpu(const void *arg)
{
	__u32 verdict[2] = { ~0u, ~0u }, cookie[2];
	struct vinst v;
	int other, i;

	(void)arg;
	other = other_cpu();
	if (other < 0)
		return 0;
	if (vinst_open(&v, RL_ACT_DROP, 0, 2))
		return -1;
	for (i = 0; i < 2; i++) {
		CHECK(handshake(&v, 4, 1000 + i, 5000 + i) == XDP_PASS,
		      "handshake %d refused with a bucket of 2", i);
		cookie[i] = cookie_for(&v, 4, 1000 + i, 5000 + i);
		/* its data, a free copy: the flow is held on this CPU */
		send_seg(&v, 4, TH_ACK | TH_PSH, 1000 + i, 5001 + i,
			 cookie[i] + 1, 100, &verdict[i], NULL, NULL);
		CHECK(verdict[i] == XDP_PASS, "handshake %d's data: verdict %u, "
		      "want XDP_PASS (free)", i, verdict[i]);
	}
	CHECK(!pin_to_cpu(other), "couldn't pin to CPU %d", other);
	send_seg(&v, 4, TH_RST | TH_ACK, 1000, 5001 + 100, cookie[0] + 1, 0,
		 &verdict[0], NULL, NULL);
	send_seg(&v, 4, TH_FIN | TH_ACK, 1001, 5002 + 100, cookie[1] + 1, 0,
		 &verdict[1], NULL, NULL);
	CHECK(!pin_to_cpu(test_cpu), "couldn't pin back to CPU %d", test_cpu);
	CHECK(verdict[0] == XDP_PASS && verdict[1] == XDP_PASS, "the RST and "
	      "the FIN on CPU %d: verdicts %u and %u, want XDP_PASS", other,
	      verdict[0], verdict[1]);
	for (i = 0; i < 2; i++) {
		send_seg(&v, 4, TH_ACK | TH_PSH, 1000 + i, 5001 + i,
			 cookie[i] + 1, 100, &verdict[i], NULL, NULL);
		CHECK(verdict[i] == XDP_DROP, "a copy of handshake %d's data on "
		      "CPU %d after its %s on CPU %d: verdict %u, want XDP_DROP "
		      "(charged, no token left)", i, test_cpu,
		      i ? "FIN" : "RST", other, verdict[i]);
	}
	EXPECT_STATS(&v.in.w, 1, "admitted=4 retransmits=2 denied=2");
	vinst_close(&v);
	return 0;
}

/* The retransmission window of a charged handshake ACK's copies, with the
 * shipped window and gap (RL_DEFAULT_RETRANS_*), the bucket empty after
 * the handshakes: a copy right after the ACK is free (no gap as for SYNs:
 * the data follows at once); one just inside the window of the previous
 * copy is free, however long after the ACK itself; one a whole window
 * after is charged (refused, counted as a charged repeat).  The flow's
 * slot is aged in place instead of waiting the window out. */
static int scen_copy_window(const void *arg)
{
	const __u64 window = RL_DEFAULT_RETRANS_WINDOW_NS;
	struct rl_flow_slot slot;
	struct rl_flow f;
	struct vinst v;
	__u32 verdict = ~0u, cookie, idx[3];
	int i;

	(void)arg;
	_Static_assert(RL_DEFAULT_RETRANS_WINDOW_NS > 2 * SEC_NS &&
		       RL_DEFAULT_RETRANS_GAP_NS > 0,
		       "the scenario ages by the window less a second and "
		       "checks that ACK copies need no gap");
	if (vinst_open_gap(&v, RL_DEFAULT_RETRANS_GAP_NS, RL_ACT_DROP, 0, 3))
		return -1;
	for (i = 0; i < 3; i++) {
		CHECK(handshake(&v, 4, 1000 + i, 5000 + i) == XDP_PASS,
		      "handshake %d refused with a bucket of 3", i);
		syn_flow(1000 + i, 5000 + i, &f);
		idx[i] = rl_flow_hash(&f, RL_FLOW_BITS);
		CHECK(!flow_slot_cpu(&v.in.w, idx[i], test_cpu, &slot) &&
		      !memcmp(&slot.flow, &f, sizeof(f)), "slot %u of CPU %d "
		      "does not hold handshake %d's flow", idx[i], test_cpu, i);
	}
	CHECK(idx[0] != idx[1] && idx[1] != idx[2] && idx[0] != idx[2],
	      "two of the flows share a slot");

	/* right after the ACK, sooner than retrans_gap_ns: free */
	cookie = cookie_for(&v, 4, 1000, 5000);
	send_seg(&v, 4, TH_ACK | TH_PSH, 1000, 5001, cookie + 1, 100, &verdict,
		 NULL, NULL);
	CHECK(verdict == XDP_PASS, "a copy right after the ACK: verdict %u, "
	      "want XDP_PASS (free)", verdict);

	/* a second short of the window, twice: each copy within the window
	 * of the one before it, the second well past a window after the ACK */
	cookie = cookie_for(&v, 4, 1001, 5001);
	for (i = 0; i < 2; i++) {
		CHECK(!flow_slot_age_cpu(&v.in.w, idx[1], test_cpu,
					 window - SEC_NS), "couldn't age slot %u",
		      idx[1]);
		send_seg(&v, 4, TH_ACK | TH_PSH, 1001, 5002, cookie + 1, 100,
			 &verdict, NULL, NULL);
		CHECK(verdict == XDP_PASS, "copy %d a second inside the window: "
		      "verdict %u, want XDP_PASS (free)", i, verdict);
	}

	/* a whole window after the ACK: charged, and no token left */
	cookie = cookie_for(&v, 4, 1002, 5002);
	CHECK(!flow_slot_age_cpu(&v.in.w, idx[2], test_cpu, window),
	      "couldn't age slot %u", idx[2]);
	send_seg(&v, 4, TH_ACK | TH_PSH, 1002, 5003, cookie + 1, 100, &verdict,
		 NULL, NULL);
	CHECK(verdict == XDP_DROP, "a copy a window after the ACK: verdict %u, "
	      "want XDP_DROP (charged, the bucket empty)", verdict);

	EXPECT_STATS(&v.in.w, 1, "admitted=6 retransmits=3 denied=1");
	CHECK(counter(&v, RL_CNT_REPEAT_CHARGED) == 1, "%llu copies charged, "
	      "want 1", (unsigned long long)counter(&v, RL_CNT_REPEAT_CHARGED));
	vinst_close(&v);
	return 0;
}

/* Over the limit with action rst: the reply resets the connection the
 * client believes open - RST|ACK at the sequence number it expects next
 * (the cookie + 1), acknowledging its data. */
static int scen_rst(const void *arg)
{
	int family = *(const int *)arg;
	struct vinst v;
	__u8 out[PKT_MAX];
	__u32 verdict, len = 0, cookie, seq, ack;
	int l4;

	if (vinst_open(&v, RL_ACT_RST, 0, 1))
		return -1;
	CHECK(handshake(&v, family, 1000, 5000) == XDP_PASS, "first refused");
	cookie = cookie_for(&v, family, 1001, 9000);
	send_seg(&v, family, TH_ACK | TH_PSH, 1001, 9001, cookie + 1, 10,
		 &verdict, out, &len);
	CHECK(verdict == XDP_TX, "over the limit: verdict %u, want XDP_TX",
	      verdict);
	l4 = ETH_HLEN + (family == 4 ? 20 : 40);
	CHECK(len == (__u32)l4 + 20, "reply of %u bytes", len);
	if (len == (__u32)l4 + 20) {
		memcpy(&seq, out + l4 + 4, 4);
		memcpy(&ack, out + l4 + 8, 4);
		CHECK(out[l4 + 13] == (TH_RST | TH_ACK), "flags 0x%x",
		      out[l4 + 13]);
		CHECK(ntohl(seq) == cookie + 1 && ntohl(ack) == 9001 + 10,
		      "seq %u ack %u, want %u and %u", ntohl(seq), ntohl(ack),
		      cookie + 1, 9001 + 10);
		CHECK(!pkt_check_csums(out, len, ETH_HLEN), "checksum: %s",
		      pkt_check_csums(out, len, ETH_HLEN));
	}
	EXPECT_STATS(&v.in.w, 1, "admitted=1 denied=1 rst_sent=1");
	vinst_close(&v);
	return 0;
}

/* A handshake completed by a FIN, with the request in it: the server's
 * kernel opens a connection from it as from an ACK, so it is charged as
 * one - and refused over the limit, by a RST acknowledging data and FIN. */
static int scen_fin(const void *arg)
{
	struct vinst v;
	__u8 out[PKT_MAX];
	__u32 verdict, len = 0, cookie, ack;
	int l4 = ETH_HLEN + 20;

	(void)arg;
	if (vinst_open(&v, RL_ACT_RST, 0, 1))
		return -1;
	cookie = cookie_for(&v, 4, 1000, 5000);
	send_seg(&v, 4, TH_ACK | TH_PSH | TH_FIN, 1000, 5001, cookie + 1, 40,
		 &verdict, NULL, NULL);
	CHECK(verdict == XDP_PASS, "first FIN handshake: verdict %u", verdict);
	cookie = cookie_for(&v, 4, 1001, 6000);
	send_seg(&v, 4, TH_ACK | TH_PSH | TH_FIN, 1001, 6001, cookie + 1, 40,
		 &verdict, out, &len);
	CHECK(verdict == XDP_TX, "second FIN handshake over the limit: verdict "
	      "%u, want XDP_TX", verdict);
	if (len == (__u32)l4 + 20) {
		memcpy(&ack, out + l4 + 8, 4);
		CHECK(ntohl(ack) == 6001 + 40 + 1, "RST acknowledges %u, want %u",
		      ntohl(ack), 6001 + 40 + 1);
	}
	EXPECT_STATS(&v.in.w, 1, "admitted=1 denied=1 rst_sent=1");
	CHECK(counter(&v, RL_CNT_VERIFY_ACK) == 2, "%llu cookie ACKs, want 2",
	      (unsigned long long)counter(&v, RL_CNT_VERIFY_ACK));
	vinst_close(&v);
	return 0;
}

/* Shadow: every handshake completes, the one over the limit counted. */
static int scen_shadow(const void *arg)
{
	struct vinst v;

	(void)arg;
	if (vinst_open(&v, RL_ACT_DROP, RL_F_SHADOW, 1))
		return -1;
	CHECK(handshake(&v, 4, 1000, 5000) == XDP_PASS, "first refused");
	CHECK(handshake(&v, 4, 1001, 6000) == XDP_PASS, "shadow refused");
	EXPECT_STATS(&v.in.w, 1, "admitted=2 shadow_denied=1 denied=0");
	vinst_close(&v);
	return 0;
}

/* Fleet mode: the cookie ACK spends a leased token, the SYN none. */
static int scen_leased(const void *arg)
{
	struct vinst v;

	(void)arg;
	if (vinst_open(&v, RL_ACT_DROP, 0, 1))
		return -1;
	tenant_leased(v.t, RL_ACT_DROP, 1, -1, false);
	v.t->flags |= RL_F_VERIFY;
	CHECK(handshake(&v, 4, 1000, 5000) == XDP_PASS, "leased token unused");
	CHECK(v.t->tokens == 0, "tokens %lld, want 0", (long long)v.t->tokens);
	CHECK(handshake(&v, 4, 1001, 6000) == XDP_DROP, "admitted past 0");
	EXPECT_STATS(&v.in.w, 1, "admitted=1 denied=1");
	vinst_close(&v);
	return 0;
}

/* A tenant without verify next to one with: its SYNs are charged as ever
 * and its ACKs, cookie or not, cost nothing. */
static int scen_other_tenant(const void *arg)
{
	struct vinst v;
	__u32 verdict, cookie;

	(void)arg;
	if (vinst_open(&v, RL_ACT_DROP, 0, 1))
		return -1;
	v.t->flags &= ~RL_F_VERIFY;
	send_seg(&v, 4, TH_SYN, 1000, 5000, 0, 0, &verdict, NULL, NULL);
	CHECK(verdict == XDP_PASS, "first SYN refused");
	send_seg(&v, 4, TH_SYN, 1001, 5000, 0, 0, &verdict, NULL, NULL);
	CHECK(verdict == XDP_DROP, "second SYN admitted");
	cookie = cookie_for(&v, 4, 1002, 5000);
	send_seg(&v, 4, TH_ACK, 1002, 5001, cookie + 1, 0, &verdict, NULL, NULL);
	CHECK(verdict == XDP_PASS, "a cookie ACK refused");
	EXPECT_STATS(&v.in.w, 1, "admitted=1 denied=1");
	CHECK(counter(&v, RL_CNT_VERIFY_ACK) == 0, "a cookie counted");
	vinst_close(&v);
	return 0;
}

/* Random ACKs of a verifying tenant - any ports, numbers, payload, PSH
 * or URG, IPv4 or IPv6 - with its bucket empty: none is a cookie's, so
 * every one passes and none is charged or counted. */
static int scen_random_acks(const void *arg)
{
	static const __u8 extra[] = { 0, TH_PSH, 0x20 /* URG */, TH_PSH | 0x20 };
	struct vinst v;
	__u32 verdict, x = 0x9e3779b9;
	int i, bad = 0;

	(void)arg;
	if (vinst_open(&v, RL_ACT_RST, 0, 1))
		return -1;
	v.t->tat = now_ns() + 1000 * SEC_NS;	/* empty */
	for (i = 0; i < 2000; i++) {
		__u32 r[4];

		for (int k = 0; k < 4; k++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			r[k] = x;
		}
		if (send_seg(&v, r[0] & 1 ? 6 : 4, TH_ACK | extra[r[0] >> 1 & 3],
			     1024 + (r[0] >> 8) % 60000, r[1], r[2], r[3] % 200,
			     &verdict, NULL, NULL))
			return -1;
		bad += verdict != XDP_PASS;
	}
	CHECK(bad == 0, "%d of 2000 random ACKs refused", bad);
	EXPECT_STATS(&v.in.w, 1, "admitted=0 denied=0 rst_sent=0");
	CHECK(counter(&v, RL_CNT_VERIFY_ACK) == 0, "a random ACK's cookie "
	      "checked out");
	vinst_close(&v);
	return 0;
}

/*
 * Real connections on this network namespace's loopback, which the
 * program's socket lookup sees: a test run's frames arrive on lo.  The
 * client is put in repair mode once connected, which gives its sequence
 * numbers and keeps it from sending anything, even at close.
 */
struct lo_conn {
	int lfd, cfd, sfd;	/* listener, client, accepted (or -1) */
	struct tuple t;		/* the client's 4-tuple */
	__u32 snd_nxt, rcv_nxt;	/* the client's next to send and to get */
	char addr[INET6_ADDRSTRLEN];
};

static void lo_close(struct lo_conn *c)
{
	if (c->sfd >= 0)
		close(c->sfd);
	if (c->cfd >= 0)
		close(c->cfd);
	if (c->lfd >= 0)
		close(c->lfd);
	c->lfd = c->cfd = c->sfd = -1;
}

/* The port of socket fd, host order. */
static __u16 lo_port(int fd)
{
	struct sockaddr_in6 a = {};
	socklen_t len = sizeof(a);

	if (getsockname(fd, (struct sockaddr *)&a, &len))
		return 0;
	return ntohs(a.sin6_port);	/* sin_port sits at the same place */
}

/* A listener on family's loopback address and a client connected to it:
 * accepted when defer_s is 0, else left to the server as a request socket
 * (TCP_DEFER_ACCEPT keeps it until data comes).  0 or -1. */
static int lo_open(struct lo_conn *c, int family, int defer_s)
{
	struct sockaddr_storage ss = {};
	struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
	socklen_t len = family == 4 ? sizeof(*a4) : sizeof(*a6);
	int af = family == 4 ? AF_INET : AF_INET6, on = 1, q;
	socklen_t ql = sizeof(__u32);

	memset(c, 0, sizeof(*c));
	c->lfd = c->cfd = c->sfd = -1;
	strcpy(c->addr, family == 4 ? "127.0.0.1" : "::1");
	if (family == 4) {
		a4->sin_family = AF_INET;
		a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	} else {
		a6->sin6_family = AF_INET6;
		a6->sin6_addr = in6addr_loopback;
	}
	c->lfd = socket(af, SOCK_STREAM, 0);
	if (c->lfd < 0 || bind(c->lfd, (struct sockaddr *)&ss, len) ||
	    (defer_s && setsockopt(c->lfd, IPPROTO_TCP, TCP_DEFER_ACCEPT,
				   &defer_s, sizeof(defer_s))) ||
	    listen(c->lfd, 8))
		goto fail;
	if (family == 4)
		a4->sin_port = htons(lo_port(c->lfd));
	else
		a6->sin6_port = htons(lo_port(c->lfd));
	c->cfd = socket(af, SOCK_STREAM, 0);
	if (c->cfd < 0 || connect(c->cfd, (struct sockaddr *)&ss, len))
		goto fail;
	if (!defer_s && (c->sfd = accept(c->lfd, NULL, NULL)) < 0)
		goto fail;
	q = TCP_SEND_QUEUE;
	if (setsockopt(c->cfd, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)) ||
	    setsockopt(c->cfd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &q, sizeof(q)) ||
	    getsockopt(c->cfd, IPPROTO_TCP, TCP_QUEUE_SEQ, &c->snd_nxt, &ql))
		goto fail;
	q = TCP_RECV_QUEUE;
	if (setsockopt(c->cfd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &q, sizeof(q)) ||
	    getsockopt(c->cfd, IPPROTO_TCP, TCP_QUEUE_SEQ, &c->rcv_nxt, &ql))
		goto fail;
	c->t.family = family;
	c->t.src = c->t.dst = c->addr;
	c->t.sport = lo_port(c->cfd);
	c->t.dport = lo_port(c->lfd);
	return 0;
fail:
	diag("couldn't open a loopback connection on '%s': %s", c->addr,
	     strerror(errno));
	lo_close(c);
	return -1;
}

/* A verifying tenant that owns the loopback sources too. */
static int vinst_open_lo(struct vinst *v, __u32 action, __u64 burst)
{
	if (vinst_open(v, action, 0, burst))
		return -1;
	if (rule_add(&v->in.w, "127.0.0.0/8", 0, 1) ||
	    rule_add(&v->in.w, "::1/128", 0, 1)) {
		diag("couldn't add the loopback rules");
		vinst_close(v);
		return -1;
	}
	return 0;
}

/* Segments of an open connection whose numbers pass the cookie check (the
 * check depends on ack - seq alone, which a request and its answer of equal
 * length line up) meet the server's socket and pass uncharged, never
 * refused nor reset, with the bucket of one spent by the first; while a
 * cookie ACK of a 4-tuple with only the listener is charged. */
static int scen_open_conn(const void *arg)
{
	int family = *(const int *)arg;
	struct lo_conn c;
	struct tuple alone;
	struct vinst v;
	__u32 verdict, cookie, isn;
	int i, bad = 0;

	if (vinst_open_lo(&v, RL_ACT_RST, 1))
		return -1;
	if (lo_open(&c, family, 0)) {
		vinst_close(&v);
		return -1;
	}
	for (i = 0; i < 4; i++) {
		isn = c.snd_nxt + 1000 * i - 1;
		cookie = cookie_at(&v, &c.t, isn);
		if (send_seg_at(&v, &c.t, TH_ACK | TH_PSH, isn + 1, cookie + 1,
				100, &verdict, NULL, NULL))
			break;
		bad += verdict != XDP_PASS;
	}
	CHECK(bad == 0, "%d of 4 segments of an open connection refused", bad);
	EXPECT_STATS(&v.in.w, 1, "admitted=0 denied=0 rst_sent=0");
	CHECK(counter(&v, RL_CNT_VERIFY_ACK) == 0, "%llu segments of an open "
	      "connection charged as handshakes",
	      (unsigned long long)counter(&v, RL_CNT_VERIFY_ACK));

	/* the control: port 1 of the client has no socket of its own */
	alone = c.t;
	alone.sport = 1;
	cookie = cookie_at(&v, &alone, 5000);
	send_seg_at(&v, &alone, TH_ACK, 5001, cookie + 1, 0, &verdict, NULL,
		    NULL);
	CHECK(verdict == XDP_PASS, "a cookie ACK to the listener: verdict %u",
	      verdict);
	EXPECT_STATS(&v.in.w, 1, "admitted=1 denied=0");
	CHECK(counter(&v, RL_CNT_VERIFY_ACK) == 1, "a cookie ACK to the "
	      "listener not charged");
	lo_close(&c);
	vinst_close(&v);
	return 0;
}

/* A handshake the server holds in a request socket, not a cookie (what a
 * SYN that meets a TIME_WAIT socket gets): the ACK that completes it is
 * charged, though it returns no cookie, and its copy is free; one with
 * other numbers, which the server refuses, passes uncharged. */
static int scen_request_sock(const void *arg)
{
	int family = *(const int *)arg;
	struct lo_conn c;
	struct vinst v;
	__u32 verdict;

	if (vinst_open_lo(&v, RL_ACT_DROP, 1))
		return -1;
	if (lo_open(&c, family, 30)) {
		vinst_close(&v);
		return -1;
	}
	send_seg_at(&v, &c.t, TH_ACK, c.snd_nxt, c.rcv_nxt + 7, 10, &verdict,
		    NULL, NULL);
	CHECK(verdict == XDP_PASS, "an ACK with other numbers: verdict %u",
	      verdict);
	EXPECT_STATS(&v.in.w, 1, "admitted=0 denied=0");
	for (int i = 0; i < 2; i++) {
		send_seg_at(&v, &c.t, TH_ACK | TH_PSH, c.snd_nxt, c.rcv_nxt, 10,
			    &verdict, NULL, NULL);
		CHECK(verdict == XDP_PASS, "the request socket's ACK %d: "
		      "verdict %u", i, verdict);
	}
	EXPECT_STATS(&v.in.w, 1, "admitted=2 retransmits=1 denied=0");
	/* the counter counts the copy too, as it does a cookie's */
	CHECK(counter(&v, RL_CNT_VERIFY_ACK) == 2, "%llu handshake ACKs of a "
	      "request socket counted, want 2",
	      (unsigned long long)counter(&v, RL_CNT_VERIFY_ACK));
	CHECK(v.t->tat != 0, "no token spent");
	lo_close(&c);
	vinst_close(&v);
	return 0;
}

static const int v4 = 4, v6 = 6;

static const struct scenario verify_scenarios[] = {
	{ "verify: SYNs free, cookie ACKs charged (IPv4)", scen_charged_at_ack, &v4 },
	{ "verify: SYNs free, cookie ACKs charged (IPv6)", scen_charged_at_ack, &v6 },
	{ "verify: ACKs without a cookie pass uncharged", scen_no_cookie, NULL },
	{ "verify: data after the ACK is free twice, not after a FIN", scen_copies, NULL },
	{ "verify: a copy of a charged ACK after the client's RST or FIN on another CPU is charged", scen_end_other_cpu, NULL },
	{ "verify: a copy of a charged ACK is free within the window of the one before, with no gap; one a window later is charged", scen_copy_window, NULL },
	{ "verify: over the limit, RST at the client's next sequence (IPv4)", scen_rst, &v4 },
	{ "verify: over the limit, RST at the client's next sequence (IPv6)", scen_rst, &v6 },
	{ "verify: a handshake completed by a FIN with data is charged, and reset over the limit", scen_fin, NULL },
	{ "verify: shadow admits and counts would-deny at the ACK", scen_shadow, NULL },
	{ "verify: leased tokens spent by the cookie ACK", scen_leased, NULL },
	{ "verify: a tenant without it charges SYNs, not ACKs", scen_other_tenant, NULL },
	{ "verify: 2,000 random ACKs of a verifying tenant pass uncharged", scen_random_acks, NULL },
	{ "verify: segments of an open connection that pass the cookie check are never charged nor reset (IPv4)", scen_open_conn, &v4 },
	{ "verify: segments of an open connection that pass the cookie check are never charged nor reset (IPv6)", scen_open_conn, &v6 },
	{ "verify: the ACK that completes a request socket's handshake is charged once (IPv4)", scen_request_sock, &v4 },
	{ "verify: the ACK that completes a request socket's handshake is charged once (IPv6)", scen_request_sock, &v6 },
};

void verify_tests(void)
{
	run_scenarios(verify_scenarios, ARRAY_SIZE(verify_scenarios));
}
