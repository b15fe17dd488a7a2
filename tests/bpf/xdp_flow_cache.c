// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The flow cache and free retransmissions: a copy of an admitted SYN (same
 * 4-tuple and ISN) passes free within the window, a bounded number of times
 * and never after the client's RST or FIN; two flows in one slot; one cache
 * per CPU.  Most cases are replays: segments sent in order against one
 * token, each verdict and the counts at the end checked.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "xdp_test.h"

/* Retransmitted SYN: same 4-tuple and ISN, free within the window. */
static int scen_retransmit(const void *arg)
{
	struct inst in;
	struct rl_tenant *t;
	__u32 v[4] = { 0 };
	__u64 tat;
	int err;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_standalone(t, RL_ACT_DROP, 0, SEC_NS, 1);
	err = send_syn(&in, 1000, 0xabcd, &v[0]);
	tat = t->tat;
	err = err || send_syn(&in, 1000, 0xabcd, &v[1]) ||
	      send_syn(&in, 1000, 0xabce, &v[2]) ||
	      send_syn(&in, 1001, 0xabcd, &v[3]);
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS, "retransmission with no token left: verdict "
	      "%u, want pass", v[1]);
	CHECK(t->tat == tat || err, "the retransmission spent a token");
	CHECK(v[2] == XDP_DROP, "same tuple, new ISN: verdict %u, want drop "
	      "(charged)", v[2]);
	CHECK(v[3] == XDP_DROP, "other source port, same ISN: verdict %u, "
	      "want drop (charged)", v[3]);
	EXPECT_STATS(&in.w, 1, "admitted=2 retransmits=1 denied=2");
	inst_close(&in);
	return 0;
}

/* Two flows in one slot of the direct-mapped flow cache: the second
 * admission overwrites the first, whose retransmission is then charged, and
 * neither flow is ever admitted free as the other. */
static int scen_flow_collision(const void *arg)
{
	struct inst in;
	struct rl_flow a, b;
	struct rl_flow_slot slot;
	__u32 idx, port, v[4] = { 0 };

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
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
		return -1;
	}

	if (!send_syn(&in, 1000, 0xabcd, &v[0]))
		send_syn(&in, port, 0xabcd, &v[1]);
	CHECK(v[0] == XDP_PASS && v[1] == XDP_PASS,
	      "two new flows with two tokens: verdicts %u, %u, want pass, pass",
	      v[0], v[1]);
	/* The collision happened in the kernel, not only in our copy of the
	 * hash: the slot now holds the second flow. */
	CHECK(!flow_slot_cpu(&in.w, idx, test_cpu, &slot) &&
	      !memcmp(&slot.flow, &b, sizeof(b)),
	      "slot %u of CPU %d does not hold the second flow", idx, test_cpu);

	if (!send_syn(&in, 1000, 0xabcd, &v[2]))
		send_syn(&in, port, 0xabcd, &v[3]);
	CHECK(v[2] == XDP_DROP, "the overwritten flow's retransmission: "
	      "verdict %u, want drop (charged, no token left)", v[2]);
	CHECK(v[3] == XDP_PASS, "the slot holder's retransmission: verdict "
	      "%u, want pass (free)", v[3]);
	EXPECT_STATS(&in.w, 1, "admitted=3 retransmits=1 denied=1");
	inst_close(&in);
	return 0;
}

/* The slots of CPU cpu that hold a flow, each tag checked against its
 * slot's key (unknown, 0, or that key's tag: never another).  -1 when one
 * could not be read. */
static int slots_held(struct inst *in, int cpu)
{
	struct rl_flow_slot slot;
	__u32 idx;
	int n = 0;
	__u8 tag;

	for (idx = 0; idx < (1u << RL_FLOW_BITS); idx++) {
		if (flow_slot_cpu(&in->w, idx, cpu, &slot) ||
		    flow_tag_cpu(&in->w, idx, cpu, &tag))
			return -1;
		CHECK(!tag || tag == rl_flow_tag(rl_flow_mix(&slot.flow),
						 RL_FLOW_BITS),
		      "slot %u's tag %u is not its key's", idx, tag);
		n += slot.flow.family != 0;
	}
	return n;
}

/* A flow whose slot and tag are both an admitted flow's (another source and
 * port): the tag only lets the slot be read, and the whole key decides, so
 * it is charged, never free as the other.  Its refusal writes neither the
 * slot nor the tag: the admitted flow's retransmission is still free. */
static int scen_tag_collision(const void *arg)
{
	struct rl_flow a, b, check;
	struct rl_flow_slot slot;
	struct inst in;
	__u32 idx, i, v[3] = { 0 };
	__u8 want, tag = 0;
	char src[32] = "";
	__u16 port = 0;
	__u64 h;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 1);
	syn_flow(1000, 77, &a);
	h = rl_flow_mix(&a);
	idx = h >> (64 - RL_FLOW_BITS);
	want = rl_flow_tag(h, RL_FLOW_BITS);
	/* sources 10.1.0.0 to 10.1.255.255, ports 1 to 256 (never a's 1000):
	 * one in 2^22 shares both, about 4 to expect */
	b = a;
	for (i = 0; i < (1u << 24); i++) {
		b.saddr[2] = (i >> 8) & 0xff;
		b.saddr[3] = i & 0xff;
		port = (i >> 16) + 1;
		b.sport = htons(port);
		h = rl_flow_mix(&b);
		if (h >> (64 - RL_FLOW_BITS) == idx &&
		    rl_flow_tag(h, RL_FLOW_BITS) == want)
			break;
	}
	if (i == (1u << 24)) {
		diag("no flow shares slot %u and tag %u", idx, want);
		inst_close(&in);
		return -1;
	}
	snprintf(src, sizeof(src), "10.1.%u.%u", b.saddr[2], b.saddr[3]);
	syn_flow_from(src, port, 77, &check);
	CHECK(!memcmp(&check, &b, sizeof(b)), "the SYN from %s:%u is not the "
	      "colliding key", src, port);

	if (!send_syn(&in, 1000, 77, &v[0]) &&
	    !send_syn_from(&in, src, port, 77, &v[1]))
		send_syn(&in, 1000, 77, &v[2]);
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_DROP, "%s:%u, same slot and tag: verdict %u, want "
	      "drop (charged, no token left)", src, port, v[1]);
	CHECK(v[2] == XDP_PASS, "the admitted flow's retransmission: verdict "
	      "%u, want pass (free)", v[2]);
	CHECK(!flow_slot_cpu(&in.w, idx, test_cpu, &slot) &&
	      !memcmp(&slot.flow, &a, sizeof(a)),
	      "slot %u no longer holds the admitted flow", idx);
	CHECK(!flow_tag_cpu(&in.w, idx, test_cpu, &tag) && tag == want,
	      "slot %u's tag is %u, want %u", idx, tag, want);
	EXPECT_STATS(&in.w, 1, "admitted=2 retransmits=1 denied=1");
	inst_close(&in);
	return 0;
}

/* Slots survive a restart (they are pinned) and the tags do not: a slot a
 * program before this one wrote has tag 0, unknown; its flow's
 * retransmission reads the slot, is free and leaves the tag learned;
 * another ISN in it is still charged. */
static int scen_tag_unknown(const void *arg)
{
	struct rl_flow_slot slot = { 0 };
	struct rl_flow a, c;
	struct inst in;
	__u32 idx, v[3] = { 0 };
	__u8 tag = 1;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 1);
	syn_flow(1000, 77, &a);
	syn_flow(2000, 5, &c);
	idx = rl_flow_hash(&a, RL_FLOW_BITS);
	if (rl_flow_hash(&c, RL_FLOW_BITS) == idx) {
		diag("the two flows share slot %u", idx);
		inst_close(&in);
		return -1;
	}
	slot.flow = a;
	slot.seen_ns = now_coarse_ns() - 10 * 1000000ull;
	CHECK(!flow_slot_set_cpu(&in.w, idx, test_cpu, &slot),
	      "couldn't write slot %u", idx);
	CHECK(!flow_tag_cpu(&in.w, idx, test_cpu, &tag) && tag == 0,
	      "slot %u's tag is %u, want 0 (unknown)", idx, tag);
	/* the one token, on another flow */
	if (!send_syn(&in, 2000, 5, &v[0]) && !send_syn(&in, 1000, 77, &v[1]))
		send_syn(&in, 1000, 78, &v[2]);
	CHECK(v[0] == XDP_PASS, "another flow: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS, "the slot's flow, tag unknown: verdict %u, "
	      "want pass (free)", v[1]);
	CHECK(v[2] == XDP_DROP, "the same tuple, another ISN: verdict %u, want "
	      "drop (charged, no token left)", v[2]);
	CHECK(!flow_tag_cpu(&in.w, idx, test_cpu, &tag) &&
	      tag == rl_flow_tag(rl_flow_mix(&a), RL_FLOW_BITS),
	      "slot %u's tag is %u, not learned from its flow", idx, tag);
	EXPECT_STATS(&in.w, 1, "admitted=2 retransmits=1 denied=1");
	inst_close(&in);
	return 0;
}

/* A flood of new flows on a spent lease (the refusal decided inline): every
 * SYN refused, none written to the flow cache, and a flow admitted before
 * the lease ran dry still has its retransmission free. */
static int scen_tag_flood_leased(const void *arg)
{
	struct rl_tenant *t;
	struct rl_flow a;
	struct inst in;
	__u32 idx, v[2] = { 0 }, w;
	int i, refused = 0, held;
	__u8 tag = 0;

	(void)arg;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	t = &in.w.tenants[1];
	tenant_leased(t, RL_ACT_DROP, 1, -1, false);
	syn_flow(1000, 77, &a);
	idx = rl_flow_hash(&a, RL_FLOW_BITS);
	send_syn(&in, 1000, 77, &v[0]);
	for (i = 0; i < 1000; i++) {
		if (send_syn(&in, 2000 + i, 5000 + i, &w))
			break;
		refused += w == XDP_DROP;
	}
	send_syn(&in, 1000, 77, &v[1]);
	CHECK(v[0] == XDP_PASS, "the lease's last token: verdict %u, want "
	      "pass", v[0]);
	CHECK(refused == 1000, "%d of 1000 new flows refused on the spent "
	      "lease, want all", refused);
	CHECK(v[1] == XDP_PASS, "the admitted flow's retransmission amid "
	      "them: verdict %u, want pass (free)", v[1]);
	CHECK(t->tokens == 0, "tokens %lld, want 0", (long long)t->tokens);
	CHECK(!flow_tag_cpu(&in.w, idx, test_cpu, &tag) &&
	      tag == rl_flow_tag(rl_flow_mix(&a), RL_FLOW_BITS),
	      "slot %u's tag is %u, not the admitted flow's", idx, tag);
	held = slots_held(&in, test_cpu);
	CHECK(held == 1, "%d slots hold a flow, want 1 (the admitted one)",
	      held);
	EXPECT_STATS(&in.w, 1, "admitted=2 retransmits=1 denied=1000");
	inst_close(&in);
	return 0;
}

/* A retransmission that reaches another CPU than its SYN did finds that
 * CPU's cache empty and is charged: the caches are per CPU, with no
 * cross-CPU traffic for admissions and copies.  On this CPU it is free -
 * until the client's RST, which ends the flow on every CPU, wherever it is
 * judged (on a veth each packet is judged on the CPU that sent it): a copy
 * after it is a new connection, charged. */
static int scen_flow_per_cpu(const void *arg)
{
	struct inst in;
	struct rl_flow_slot slot;
	struct rl_flow a;
	__u32 idx, v[5] = { 0 };
	int other;

	(void)arg;
	other = other_cpu();
	if (other < 0)
		return 0;
	if (small_world(&in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 2);
	syn_flow(1000, 77, &a);
	idx = rl_flow_hash(&a, RL_FLOW_BITS);

	send_syn(&in, 1000, 77, &v[0]);
	CHECK(!flow_slot_cpu(&in.w, idx, test_cpu, &slot) &&
	      !memcmp(&slot.flow, &a, sizeof(a)),
	      "slot %u of CPU %d does not hold the admitted flow", idx,
	      test_cpu);
	CHECK(!flow_slot_cpu(&in.w, idx, other, &slot) &&
	      memcmp(&slot.flow, &a, sizeof(a)),
	      "the flow was written on CPU %d too", other);
	CHECK(!pin_to_cpu(other), "couldn't pin to CPU %d", other);
	send_syn(&in, 1000, 77, &v[1]);
	CHECK(!pin_to_cpu(test_cpu), "couldn't pin back to CPU %d", test_cpu);
	send_syn(&in, 1000, 77, &v[2]);
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS, "on CPU %d: verdict %u, want pass (charged, "
	      "the last token)", other, v[1]);
	CHECK(v[2] == XDP_PASS, "back on CPU %d: verdict %u, want pass "
	      "(free, no token left)", test_cpu, v[2]);
	CHECK(in.w.tenants[1].tat > now_ns() + 3600 * SEC_NS,
	      "the tenant was charged fewer than two tokens");

	CHECK(!pin_to_cpu(other), "couldn't pin to CPU %d", other);
	send_tcp(&in, TH_RST, 1000, 78, &v[3]);
	CHECK(!pin_to_cpu(test_cpu), "couldn't pin back to CPU %d", test_cpu);
	send_syn(&in, 1000, 77, &v[4]);
	CHECK(v[3] == XDP_PASS, "the RST on CPU %d: verdict %u, want pass",
	      other, v[3]);
	CHECK(v[4] == XDP_DROP, "a copy on CPU %d after the RST on CPU %d: "
	      "verdict %u, want drop (charged, no token left)", test_cpu,
	      other, v[4]);
	EXPECT_STATS(&in.w, 1, "admitted=3 retransmits=1 denied=1");
	inst_close(&in);
	return 0;
}

/* One segment of a replay (flags 0: a pause of sleep_ms instead; flags 0
 * and no pause: the end). */
struct replay_step {
	__u8 flags;
	__u16 sport;
	__u32 seq;
	__u32 want;		/* verdict */
	int sleep_ms;
};

#define STEP(f, port, seq, v)	{ (f), (port), (seq), (v), 0 }
#define SLEEP(ms)		{ 0, 0, 0, 0, (ms) }
#define STEPS(...)	((const struct replay_step[]){ __VA_ARGS__, { 0 } })

/* A replay against tenant 1 of a small world with one token and none back
 * within the test. */
struct replay {
	__u64 window_ns, gap_ns;	/* retrans_window_ns, retrans_gap_ns */
	const struct replay_step *steps;
	const char *stats;	/* tenant 1's at the end (EXPECT_STATS) */
	long charged;		/* RL_CNT_REPEAT_CHARGED; -1: unchecked */
};

static int run_replay(const void *arg)
{
	const struct replay *rp = arg;
	const struct replay_step *st;
	struct inst in;
	__u64 cnt[RL_CNT_MAX];
	int i;

	if (inst_open_gap(&in, rp->window_ns, rp->gap_ns))
		return -1;
	if (rule_add(&in.w, "10.1.0.0/16", 0, 1)) {
		diag("couldn't add a rule");
		inst_close(&in);
		return -1;
	}
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 1);
	for (i = 0, st = rp->steps; st->flags || st->sleep_ms; i++, st++) {
		__u32 v = 0;

		if (!st->flags) {
			usleep(st->sleep_ms * 1000);
			continue;
		}
		if (send_tcp(&in, st->flags, st->sport, st->seq, &v))
			break;
		CHECK(v == st->want, "step %d (flags 0x%02x, port %u): verdict "
		      "%u, want %u", i, st->flags, st->sport, v, st->want);
	}
	EXPECT_STATS(&in.w, 1, rp->stats);
	counters_sum(&in.w, cnt);
	CHECK(rp->charged < 0 ||
	      cnt[RL_CNT_REPEAT_CHARGED] == (__u64)rp->charged,
	      "repeats charged %llu, want %ld",
	      (unsigned long long)cnt[RL_CNT_REPEAT_CHARGED], rp->charged);
	inst_close(&in);
	return 0;
}

_Static_assert(RL_FLOW_MAX_REPEATS == 2, "the bounded replay assumes 2");

static const struct replay expired = {
	50 * 1000000ull, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	SLEEP(100),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* after the 50 ms window */
	"retransmits=0", -1,
}, window_off = {
	0, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),
	"", -1,
}, bounded = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* the token */
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free */
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free */
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* past the bound */
	"admitted=3 retransmits=2 denied=1", 1,
}, after_rst = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_RST, 1000, 78, XDP_PASS),	/* the client resets */
	STEP(TH_SYN, 1000, 77, XDP_DROP),	/* a new connection */
	STEP(TH_SYN, 1000, 77, XDP_DROP)),
	"admitted=1 retransmits=0 denied=2", 2,
}, after_fin = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* free before the FIN */
	STEP(TH_FIN | TH_ACK, 1000, 5000, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),
	"admitted=2 retransmits=1 denied=1", 1,
}, rst_other_flow = {
	RL_DEFAULT_RETRANS_WINDOW_NS, 0, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_RST, 1001, 78, XDP_PASS),	/* another flow's */
	STEP(TH_SYN, 1000, 77, XDP_PASS)),	/* still free */
	"admitted=2 retransmits=1 denied=0", 0,
},
/* With a 1 s gap: a copy right after the SYN is charged; one 1.1 s later is
 * free; the next right after it is charged (the second needs 2 s). */
gap_other_flow = {
	30 * SEC_NS, SEC_NS, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1001, 90, XDP_DROP)),	/* another flow, no token */
	"admitted=1 retransmits=0 denied=1", 0,
}, gap_too_soon = {
	30 * SEC_NS, SEC_NS, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* too soon */
	"admitted=1 retransmits=0 denied=1", 1,
}, gap_kept = {
	30 * SEC_NS, SEC_NS, STEPS(
	STEP(TH_SYN, 1000, 77, XDP_PASS),
	SLEEP(1100),
	STEP(TH_SYN, 1000, 77, XDP_PASS),	/* as a kernel would */
	STEP(TH_SYN, 1000, 77, XDP_DROP)),	/* sooner than 2 s */
	"admitted=2 retransmits=1 denied=1", 1,
};

/* A source (in src, of small_world()'s 10.1.0.0/16) and port whose flow has
 * its end marked at the same place of `flow_ends` as *a's, with another
 * fingerprint than *a's and than skip_fp's flow (0: none); 0 if none. */
static __u16 end_place_sharer_but(const struct rl_flow *a, __u32 skip_fp,
				  char *src, size_t len)
{
	__u64 ha = rl_flow_mix(a), hb;
	struct rl_flow b;
	__u32 port, host;

	for (host = 20; host < 40; host++) {
		snprintf(src, len, "10.1.0.%u", host);
		for (port = 1; port < 65536; port++) {
			syn_flow_from(src, port, 0, &b);
			hb = rl_flow_mix(&b);
			if (rl_flow_end_place(hb) == rl_flow_end_place(ha) &&
			    rl_flow_end_fp(hb) != rl_flow_end_fp(ha) &&
			    rl_flow_end_fp(hb) != skip_fp)
				return port;
		}
	}
	return 0;
}

static __u16 end_place_sharer(const struct rl_flow *a, char *src, size_t len)
{
	return end_place_sharer_but(a, 0, src, len);
}

/* One RST or FIN: from src (NULL: the client's own address), port, with
 * these flags and sequence number. */
struct end_pkt {
	const char *src;
	__u8 flags;
	__u16 port;
	__u32 seq;
};

/* Opens small_world() with tenant 1 at one token an hour, burst `burst`;
 * sends the SYN (1000, 77) on this CPU, then the two ends e on CPU other,
 * then the SYN's copy on this CPU again: the four verdicts in v.  0, or -1
 * with nothing open. */
static int syn_ends_copy(struct inst *in, __u64 burst, int other,
			 const struct end_pkt *e, __u32 *v)
{
	if (small_world(in, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	tenant_standalone(&in->w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS,
			  burst);
	send_syn(in, 1000, 77, &v[0]);
	CHECK(!pin_to_cpu(other), "couldn't pin to CPU %d", other);
	for (int i = 0; i < 2; i++)
		send_tcp_from(in, e[i].src ? e[i].src : "10.1.0.10", e[i].flags,
			      e[i].port, e[i].seq, &v[1 + i]);
	CHECK(!pin_to_cpu(test_cpu), "couldn't pin back to CPU %d", test_cpu);
	send_syn(in, 1000, 77, &v[3]);
	return 0;
}

/* A blind flood of RSTs and FINs with made-up 4-tuples, none a socket of
 * this host's: two of them land at the place of an admitted flow's end, on
 * another CPU, in its retransmission window.  Without a socket behind
 * them they mark only their own fingerprints, never RL_FLOW_END_ANY, so
 * the admitted flow's retransmission stays free with no token left. */
static int scen_blind_ends(const void *arg)
{
	char src1[32], src2[32];
	__u16 port1, port2;
	struct rl_flow a, b;
	__u32 v[4] = { 0 };
	struct inst in;
	int other;

	(void)arg;
	other = other_cpu();
	if (other < 0)
		return 0;
	syn_flow(1000, 77, &a);
	port1 = end_place_sharer(&a, src1, sizeof(src1));
	if (port1)
		syn_flow_from(src1, port1, 0, &b);
	port2 = port1 ? end_place_sharer_but(&a, rl_flow_end_fp(rl_flow_mix(&b)),
					     src2, sizeof(src2)) : 0;
	if (!port2) {
		diag("no two flows from other ports share the end's place");
		return -1;
	}
	if (syn_ends_copy(&in, 1, other, (const struct end_pkt[]){
		{ src1, TH_RST, port1, 5000 },
		{ src2, TH_FIN | TH_ACK, port2, 6000 } }, v))
		return -1;
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS && v[2] == XDP_PASS,
	      "the forged RST and FIN: verdicts %u, %u, want pass", v[1], v[2]);
	CHECK(v[3] == XDP_PASS, "the retransmission after the flood: verdict "
	      "%u, want pass (free, no token left)", v[3]);
	EXPECT_STATS(&in.w, 1, "admitted=2 retransmits=1 denied=0");
	inst_close(&in);
	return 0;
}

/* Two ends at one place of `flow_ends`, both from another CPU than the
 * first flow's SYN: the second end does not undo the first, whose copy on
 * the CPU that admitted it is charged.  Then a new connection of the same
 * 4-tuple, admitted after the end, has its retransmission free: an end
 * covers what was stamped before it, not what came after. */
static int scen_end_shared_place(const void *arg)
{
	struct inst in;
	struct rl_flow a;
	__u32 v[7] = { 0 };
	char src[32];
	__u16 port;
	int other;

	(void)arg;
	other = other_cpu();
	if (other < 0)
		return 0;
	syn_flow(1000, 77, &a);
	port = end_place_sharer(&a, src, sizeof(src));
	if (!port) {
		diag("no flow from another port shares the end's place");
		return -1;
	}
	if (syn_ends_copy(&in, 2, other, (const struct end_pkt[]){
		{ NULL, TH_RST, 1000, 78 },
		{ src, TH_FIN | TH_ACK, port, 5000 } }, v))
		return -1;
	CHECK(v[0] == XDP_PASS, "first SYN: verdict %u, want pass", v[0]);
	CHECK(v[1] == XDP_PASS && v[2] == XDP_PASS,
	      "the RST and the other flow's FIN: verdicts %u, %u, want pass",
	      v[1], v[2]);
	CHECK(v[3] == XDP_PASS, "a copy after the RST: verdict %u, want pass "
	      "(charged, the last token)", v[3]);
	CHECK(in.w.tenants[1].tat > now_ns() + 3600 * SEC_NS,
	      "the copy after the RST and another flow's FIN at its place "
	      "passed free");

	/* a new connection of the 4-tuple, a unit of the end's clock later */
	usleep(20 * 1000);
	tenant_standalone(&in.w.tenants[1], RL_ACT_DROP, 0, 3600 * SEC_NS, 1);
	in.w.tenants[1].tat = 0;	/* one token */
	send_syn(&in, 1000, 99, &v[4]);
	send_syn(&in, 1000, 99, &v[5]);
	send_syn(&in, 1000, 77, &v[6]);
	CHECK(v[4] == XDP_PASS, "the new connection: verdict %u, want pass",
	      v[4]);
	CHECK(v[5] == XDP_PASS, "its retransmission: verdict %u, want pass "
	      "(free, no token left)", v[5]);
	CHECK(v[6] == XDP_DROP, "the ended connection's copy: verdict %u, "
	      "want drop", v[6]);
	EXPECT_STATS(&in.w, 1, "admitted=4 retransmits=1 denied=1");
	inst_close(&in);
	return 0;
}

static const struct scenario scenarios[] = {
	{ "retransmitted SYN (same tuple and ISN) is free; a new ISN is charged",
	  scen_retransmit, NULL },
	{ "retransmitted SYN after the window is charged", run_replay,
	  &expired },
	{ "retrans_window_ns 0 charges an identical SYN twice", run_replay,
	  &window_off },
	{ "free repeats are bounded: the third copy of an admitted SYN is "
	  "charged", run_replay, &bounded },
	{ "replayed SYN after the client's RST is charged as a new connection",
	  run_replay, &after_rst },
	{ "replayed SYN after the client's FIN is charged as a new connection",
	  run_replay, &after_fin },
	{ "a RST of another flow leaves a SYN's retransmission free",
	  run_replay, &rst_other_flow },
	{ "repeats follow a kernel's schedule: with a 1 s gap another flow "
	  "without a token is charged", run_replay, &gap_other_flow },
	{ "repeats follow a kernel's schedule: a copy sooner than the gap is "
	  "charged", run_replay, &gap_too_soon },
	{ "repeats follow a kernel's schedule: a copy after the gap is free, "
	  "the next needs twice the gap", run_replay, &gap_kept },
	{ "flow-cache collision: the overwritten flow is charged again, "
	  "neither flow passes free as the other", scen_flow_collision, NULL },
	{ "flow cache is per CPU: a retransmission on another CPU is charged; "
	  "the client's RST there ends the flow on every CPU",
	  scen_flow_per_cpu, NULL },
	{ "two ends at one place of flow_ends, from another CPU: the first "
	  "flow's copy is still charged; a new connection of its 4-tuple has "
	  "its retransmission free", scen_end_shared_place, NULL },
	{ "a blind flood's RST and FIN at an admitted flow's end place, from "
	  "another CPU and backed by no socket: its retransmission stays "
	  "free", scen_blind_ends, NULL },
	{ "flow-cache tag collision: a flow with another's slot and tag is "
	  "charged, and its refusal leaves the other's retransmission free",
	  scen_tag_collision, NULL },
	{ "flow-cache tag unknown (a slot from the program before): its flow's "
	  "retransmission is free and the tag learned, another ISN charged",
	  scen_tag_unknown, NULL },
	{ "flood of new flows on a spent lease: all refused, nothing written "
	  "to the flow cache, an admitted flow's retransmission free",
	  scen_tag_flood_leased, NULL },
};

void flow_cache_tests(void)
{
	run_scenarios(scenarios, ARRAY_SIZE(scenarios));
}
