// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The verdict tables' world and their one check (see xdp_table.h): every
 * row runs against a fresh copy of the maps, so that what it moved can be
 * compared with the world as it was set up.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <linux/if_ether.h>

#include "xdp_table.h"

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
#define N_TENANTS ARRAY_SIZE(world_tenants)

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
	for (i = 0; i < ARRAY_SIZE(world_rules); i++) {
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

int check_frame(const __u8 *in, int in_len, __u32 verdict, enum outcome out,
		__u32 tenant, const __u8 *reply, int reply_len, int l3_off)
{
	static struct rl_tenant before[RL_MAX_TENANTS];
	__u8 got[PKT_MAX * 2];
	struct run_result r;
	struct inst in_;
	__u64 cnt[RL_CNT_MAX], want[RL_CNT_MAX] = { 0 };
	__u64 t0, t1;
	bool same;
	size_t i;
	int err;

	if (inst_open(&in_, RL_DEFAULT_RETRANS_WINDOW_NS))
		return -1;
	if (world_populate(&in_)) {
		inst_close(&in_);
		return -1;
	}
	memcpy(before, in_.w.tenants, sizeof(before));

	/* the bucket reads the coarse clock: it may lag now_ns() by a tick */
	t0 = now_coarse_ns();
	err = xdp_run(in_.prog_fd, in, in_len, got, sizeof(got), 1, &r);
	t1 = now_ns();
	if (err == -EINVAL && in_len < ETH_HLEN) {
		check_skip("test_run refuses frames shorter than %d bytes",
			   ETH_HLEN);
		inst_close(&in_);
		return 0;
	}
	if (err) {
		diag("bpf_prog_test_run_opts: %s", strerror(-err));
		inst_close(&in_);
		return -1;
	}

	CHECK(r.retval == verdict, "verdict %u, want %u", r.retval, verdict);
	if (reply) {
		const char *bad = pkt_check_csums(got, r.out_len, l3_off);

		same = r.out_len == (__u32)reply_len &&
		       !memcmp(got, reply, reply_len);
		CHECK(same, "reply differs from the expected RST|ACK "
		      "(* marks differing bytes)");
		if (!same) {
			diag_hex("got", got, r.out_len, reply, reply_len);
			diag_hex("want", reply, reply_len, NULL, 0);
		}
		CHECK(!bad, "reply's %s does not verify", bad);
	} else {
		same = r.out_len == (__u32)in_len && !memcmp(got, in, in_len);
		CHECK(same, "frame was modified but the verdict is not XDP_TX");
		if (!same)
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
			CHECK(stats_zero(&s), "tenant %u was charged", id);
			if (!stats_zero(&s))
				diag_stats("tenant", id, &s);
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
		same = !memcmp(&s, &w, sizeof(s));
		CHECK(same, "tenant %u's stats are wrong", id);
		if (!same) {
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
	return 0;
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

void run_cases(const struct xdp_case *c, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		check_run_arg(c[i].name, run_case, &c[i]);
}
