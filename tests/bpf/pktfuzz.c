// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The packet-path fuzzer: one loaded rlgate (its XDP and tc programs) with
 * a world of tenants of every kind, frames generated in the shapes attackers
 * use (and mutated blindly), and the rules every verdict must keep, judged
 * against the independent reference in pktref.c and, for replayed SYNs, a
 * flow model.  See docs/testing.md.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#include "rlgate.skel.h"
#include "pkt.h"
#include "pktfuzz.h"
#include "pktref.h"

/* ------------------------------------------------------------------------
 * The world: a tenant of each kind, and rules that route the generator's
 * sources to them.  Buckets are put back as configured before every frame,
 * so each frame meets the same state: the full ones admit, the empty ones
 * refuse.
 */
enum {
	FZ_ADMIT = 1,		/* standalone, full */
	FZ_DROP = 2,		/* standalone, empty, drop */
	FZ_RST = 3,		/* standalone, empty, RST */
	FZ_SHADOW = 4,		/* standalone, empty, RST, shadow */
	FZ_LEASED = 5,		/* leased, 3 tokens */
	FZ_LEASED_EMPTY = 6,	/* leased, no token, RST */
	FZ_PORT = 7,		/* port 443 only, empty, RST */
	FZ_NESTED = 8,		/* a /24 inside FZ_ADMIT's /16, empty, drop */
};

static const struct {
	__u32 id;
	bool leased, full;
	__u32 action, flags;
} fz_tenants[] = {
	{ FZ_ADMIT, false, true, RL_ACT_DROP, 0 },
	{ FZ_DROP, false, false, RL_ACT_DROP, 0 },
	{ FZ_RST, false, false, RL_ACT_RST, 0 },
	{ FZ_SHADOW, false, false, RL_ACT_RST, RL_F_SHADOW },
	{ FZ_LEASED, true, true, RL_ACT_DROP, 0 },
	{ FZ_LEASED_EMPTY, true, false, RL_ACT_RST, 0 },
	{ FZ_PORT, false, false, RL_ACT_RST, 0 },
	{ FZ_NESTED, false, false, RL_ACT_DROP, 0 },
};
#define FZ_N_TENANTS	(sizeof(fz_tenants) / sizeof(fz_tenants[0]))

static const struct {
	const char *addr;
	int plen;
	__u16 port;
	__u32 tenant;
} fz_rules[] = {
	{ "10.1.0.0", 16, 0, FZ_ADMIT }, { "2001:db8:1::", 48, 0, FZ_ADMIT },
	{ "10.2.0.0", 16, 0, FZ_DROP }, { "2001:db8:2::", 48, 0, FZ_DROP },
	{ "10.3.0.0", 16, 0, FZ_RST }, { "2001:db8:3::", 48, 0, FZ_RST },
	{ "10.4.0.0", 16, 0, FZ_SHADOW }, { "2001:db8:4::", 48, 0, FZ_SHADOW },
	{ "10.5.0.0", 16, 0, FZ_LEASED }, { "2001:db8:5::", 48, 0, FZ_LEASED },
	{ "10.6.0.0", 16, 0, FZ_LEASED_EMPTY },
	{ "2001:db8:6::", 48, 0, FZ_LEASED_EMPTY },
	/* only port 443: other ports of these sources match nothing */
	{ "10.7.0.0", 16, 443, FZ_PORT }, { "2001:db8:7::", 48, 443, FZ_PORT },
	/* a port rule beside an any-port rule of the same length */
	{ "10.8.0.0", 16, 0, FZ_DROP }, { "10.8.0.0", 16, 80, FZ_RST },
	{ "2001:db8:8::", 48, 0, FZ_DROP }, { "2001:db8:8::", 48, 80, FZ_RST },
	/* nested prefixes */
	{ "10.9.0.0", 16, 0, FZ_ADMIT }, { "10.9.1.0", 24, 0, FZ_NESTED },
	{ "2001:db8:9::", 48, 0, FZ_ADMIT },
	{ "2001:db8:9:1::", 64, 0, FZ_NESTED },
};
#define FZ_N_RULES	(sizeof(fz_rules) / sizeof(fz_rules[0]))

/* Sources the generator picks from: one per rule, and some no rule has. */
static const char *const fz_src4[] = {
	"10.1.0.10", "10.2.0.10", "10.3.0.10", "10.4.0.10", "10.5.0.10",
	"10.6.0.10", "10.7.0.10", "10.8.0.10", "10.9.1.10", "10.9.2.10",
	"192.0.2.1", "10.10.0.1",
};
static const char *const fz_src6[] = {
	"2001:db8:1::10", "2001:db8:2::10", "2001:db8:3::10", "2001:db8:4::10",
	"2001:db8:5::10", "2001:db8:6::10", "2001:db8:7::10", "2001:db8:8::10",
	"2001:db8:9:1::10", "2001:db8:9:2::10", "2001:db8:ffff::1",
	"2001:db9::1",
};

/* ------------------------------------------------------------------------
 * The rules as the checks read them: a plain scan, no trie.
 */
static struct {
	int family;
	__u8 addr[16];
} fz_prefix[FZ_N_RULES];

static void rules_parse(void)
{
	size_t i;

	for (i = 0; i < FZ_N_RULES; i++) {
		fz_prefix[i].family = strchr(fz_rules[i].addr, ':') ? 6 : 4;
		inet_pton(fz_prefix[i].family == 6 ? AF_INET6 : AF_INET,
			  fz_rules[i].addr, fz_prefix[i].addr);
	}
}

static bool rule_covers(size_t i, int family, const __u8 *a)
{
	const __u8 *p = fz_prefix[i].addr;
	int bits = fz_rules[i].plen, k;

	if (fz_prefix[i].family != family)
		return false;
	for (k = 0; bits >= 8; k++, bits -= 8)
		if (a[k] != p[k])
			return false;
	return !bits || !((a[k] ^ p[k]) & (0xff00 >> bits));
}

/* The tenant rlgate's rules give (src, dport): the longest prefix, and on
 * equal length a rule for this port before an any-port rule.  0: none. */
static __u32 rules_lookup(int family, const __u8 *src, __u16 dport)
{
	int best = -1, best_port = 0;
	size_t i;

	for (i = 0; i < FZ_N_RULES; i++) {
		if (!rule_covers(i, family, src))
			continue;
		if (fz_rules[i].port && fz_rules[i].port != dport)
			continue;
		if (best < 0 || fz_rules[i].plen > fz_rules[best].plen ||
		    (fz_rules[i].plen == fz_rules[best].plen &&
		     fz_rules[i].port && !best_port)) {
			best = i;
			best_port = fz_rules[i].port;
		}
	}
	return best < 0 ? 0 : fz_rules[best].tenant;
}

/* Whether a rule for `tenant` (any tenant: 0) covers src, for any port. */
static bool rules_any(int family, const __u8 *src, __u32 tenant)
{
	size_t i;

	for (i = 0; i < FZ_N_RULES; i++)
		if (rule_covers(i, family, src) &&
		    (!tenant || fz_rules[i].tenant == tenant))
			return true;
	return false;
}

/* ------------------------------------------------------------------------
 * Loading and reading.
 */
static void say(struct pktfuzz *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void say(struct pktfuzz *f, const char *fmt, ...)
{
	size_t n = strlen(f->msg);
	va_list ap;

	if (n >= sizeof(f->msg) - 1)
		return;
	va_start(ap, fmt);
	vsnprintf(f->msg + n, sizeof(f->msg) - n, fmt, ap);
	va_end(ap);
}

static int open_world(struct pktfuzz *f, bool flows)
{
	__u64 far = now_ns() + 100ull * 24 * 3600 * 1000000000ull;
	char cidr[64];
	size_t i;
	int err;

	memset(f, 0, sizeof(*f));
	rules_parse();
	f->skel = rlgate_bpf__open();
	if (!f->skel) {
		err = -errno;
		say(f, "couldn't open the rlgate skeleton: %s\n", strerror(-err));
		return err;
	}
	/* Stateless: every copy of a SYN is charged, nothing carries from
	 * one frame to the next.  With flows: copies may repeat free, as
	 * often as the program allows, whatever the time between them. */
	f->flows = flows;
	f->skel->rodata->retrans_window_ns = flows ? 3600 * 1000000000ull : 0;
	f->skel->rodata->retrans_gap_ns = 0;
	f->max_repeats = f->skel->rodata->retrans_max_repeats;
	err = rlgate_bpf__load(f->skel);
	if (err) {
		say(f, "couldn't load the rlgate skeleton: %s\n", strerror(-err));
		goto fail;
	}
	err = world_init(&f->w, f->skel->obj);
	if (err) {
		say(f, "couldn't find rlgate's maps: %s\n", strerror(-err));
		goto fail;
	}
	f->prog_fd = bpf_program__fd(f->skel->progs.xdp_rlgate);
	f->tc_fd = bpf_program__fd(f->skel->progs.tc_rlgate);
	for (i = 0; i < FZ_N_TENANTS; i++) {
		struct rl_tenant *t = &f->w.tenants[fz_tenants[i].id];

		if (fz_tenants[i].leased) {
			tenant_leased(t, fz_tenants[i].action,
				      fz_tenants[i].full ? 3 : 0, -1, false);
			continue;
		}
		tenant_standalone(t, fz_tenants[i].action, fz_tenants[i].flags,
				  1000000000ull, 10);
		/* empty: the next token is months away */
		t->tat = fz_tenants[i].full ? 0 : far;
	}
	f->w.rules_batch = true;
	for (i = 0; i < FZ_N_RULES; i++) {
		snprintf(cidr, sizeof(cidr), "%s/%d", fz_rules[i].addr,
			 fz_rules[i].plen);
		err = rule_add(&f->w, cidr, fz_rules[i].port, fz_rules[i].tenant);
		if (err) {
			say(f, "couldn't add rule %s: %s\n", cidr, strerror(-err));
			goto fail;
		}
	}
	err = rules_publish(&f->w);
	if (err) {
		say(f, "couldn't publish the rules: %s\n", strerror(-err));
		goto fail;
	}
	memcpy(f->init, f->w.tenants, sizeof(f->init));
	return 0;
fail:
	pktfuzz_close(f);
	return err;
}

int pktfuzz_open(struct pktfuzz *f)
{
	return open_world(f, false);
}

int pktfuzz_open_flows(struct pktfuzz *f)
{
	return open_world(f, true);
}

void pktfuzz_close(struct pktfuzz *f)
{
	world_fini(&f->w);
	rlgate_bpf__destroy(f->skel);
	f->skel = NULL;
}

#define STAT_WORDS	(sizeof(struct rl_stats) / sizeof(__u64))

/* Per-CPU sums of one tenant's stats, word by word (every field counts). */
static int stats_read(struct pktfuzz *f, __u32 id, struct rl_stats *out)
{
	__u64 v[f->w.ncpus * STAT_WORDS], *o = (__u64 *)out;
	int c;
	size_t k;

	if (bpf_map_lookup_elem(f->w.stats_fd, &id, v))
		return -errno;
	memset(out, 0, sizeof(*out));
	for (c = 0; c < f->w.ncpus; c++)
		for (k = 0; k < STAT_WORDS; k++)
			o[k] += v[c * STAT_WORDS + k];
	return 0;
}

/* ------------------------------------------------------------------------
 * What one frame did: counters and stats moved, buckets moved.
 */
struct delta {
	__u64 cnt[RL_CNT_MAX];
	struct rl_stats st[FZ_N_TENANTS];
	bool moved[FZ_N_TENANTS];	/* tat, tokens or fail_tat changed */
};

/* The outcomes the contract allows, each with its verdict. */
enum outcome {
	OC_NONE,		/* not a SYN: nothing counted */
	OC_FRAGMENT,		/* a fragment passed, counted as such */
	OC_UNPARSED,		/* not judged, no tenant's: passed */
	OC_UNPARSED_SHADOW,	/* not judged, a shadow tenant's: passed,
				 * counted in its `unparsed` */
	OC_UNPARSED_DROP,	/* not judged, a tenant's: refused, counted
				 * in its `unparsed` when it is known */
	OC_NOMATCH,		/* a SYN no rule matched, passed */
	OC_ADMIT,		/* a SYN admitted by tenant `t` */
	OC_REPEAT,		/* a copy of an admitted SYN passed free */
	OC_DENY,		/* a SYN refused by tenant `t` */
	OC_BAD,
};

static const char *const outcome_name[] = {
	"nothing counted", "fragment", "unparsed, passed",
	"unparsed, passed by a shadow tenant", "unparsed, refused",
	"SYN, no match", "SYN admitted", "SYN repeated free", "SYN refused",
	"inconsistent",
};

static const char *const cnt_name[RL_CNT_MAX] = {
	[RL_CNT_SYN] = "syn", [RL_CNT_NOMATCH] = "nomatch",
	[RL_CNT_UNPARSED] = "unparsed", [RL_CNT_FRAGMENT] = "fragment",
	[RL_CNT_RST_FAILED] = "rst_failed",
	[RL_CNT_UNPARSED_DROP] = "unparsed_drop",
	[RL_CNT_REPEAT_CHARGED] = "repeat_charged",
};

static bool stats_zero(const struct rl_stats *s)
{
	static const struct rl_stats zero;

	return !memcmp(s, &zero, sizeof(zero));
}

/* A not-judged packet's outcome, once no SYN was counted: *t is the tenant
 * whose `unparsed` moved, if any.  OC_BAD with *why when it fits none. */
static enum outcome unparsed_outcome(const struct delta *d, int t,
				     const char **why)
{
	const struct rl_stats *s = t >= 0 ? &d->st[t] : NULL;

	if (s && (s->admitted || s->denied || s->shadow_denied || s->rst_sent ||
		  d->moved[t])) {
		*why = "a tenant was charged without a SYN";
		return OC_BAD;
	}
	if (s && s->unparsed != 1) {
		*why = "a tenant's stats moved outside its unparsed count";
		return OC_BAD;
	}
	if (d->cnt[RL_CNT_UNPARSED_DROP])
		return OC_UNPARSED_DROP;
	if (d->cnt[RL_CNT_UNPARSED] && s) {
		if (!(fz_tenants[t].flags & RL_F_SHADOW)) {
			*why = "a tenant counted an unparsed packet that "
			       "passed, and it is not a shadow tenant";
			return OC_BAD;
		}
		return OC_UNPARSED_SHADOW;
	}
	if (s) {
		*why = "a tenant counted an unparsed packet that was not "
		       "counted as one";
		return OC_BAD;
	}
	return d->cnt[RL_CNT_UNPARSED] ? OC_UNPARSED :
	       d->cnt[RL_CNT_FRAGMENT] ? OC_FRAGMENT : OC_NONE;
}

/* Sorts the counter and stats moves into one outcome; *t is the tenant
 * index whose stats moved (-1: none).  OC_BAD with *why when they fit
 * none. */
static enum outcome classify_delta(const struct delta *d, bool flows,
				   int *t, const char **why)
{
	const struct rl_stats *s;
	int n = 0, events;
	size_t i;

	*t = -1;
	for (i = 0; i < FZ_N_TENANTS; i++) {
		if (stats_zero(&d->st[i]) && !d->moved[i])
			continue;
		*t = i;
		n++;
	}
	for (i = 0; i < RL_CNT_MAX; i++) {
		if (d->cnt[i] > 1) {
			*why = "a counter moved by more than one";
			return OC_BAD;
		}
	}
	if (n > 1) {
		*why = "two tenants' stats or buckets moved";
		return OC_BAD;
	}
	if (d->cnt[RL_CNT_REPEAT_CHARGED] && !flows) {
		*why = "a repeat was counted with free repeats off";
		return OC_BAD;
	}
	if (*t >= 0 && ((d->st[*t].retransmits && !flows) ||
			d->st[*t].lowwater_events || d->st[*t].degraded)) {
		*why = "stats this world never moves moved";
		return OC_BAD;
	}
	events = d->cnt[RL_CNT_SYN] + d->cnt[RL_CNT_FRAGMENT] +
		 d->cnt[RL_CNT_UNPARSED] + d->cnt[RL_CNT_UNPARSED_DROP];
	if (events > 1) {
		*why = "counters of two outcomes moved";
		return OC_BAD;
	}
	if (!d->cnt[RL_CNT_SYN]) {
		if (d->cnt[RL_CNT_NOMATCH] || d->cnt[RL_CNT_RST_FAILED] ||
		    d->cnt[RL_CNT_REPEAT_CHARGED]) {
			*why = "SYN counters moved without a SYN";
			return OC_BAD;
		}
		return unparsed_outcome(d, *t, why);
	}
	if (d->cnt[RL_CNT_NOMATCH]) {
		if (n || d->cnt[RL_CNT_RST_FAILED] ||
		    d->cnt[RL_CNT_REPEAT_CHARGED]) {
			*why = "a SYN with no match moved a tenant";
			return OC_BAD;
		}
		return OC_NOMATCH;
	}
	if (!n) {
		*why = "a SYN counted without a match or a tenant";
		return OC_BAD;
	}
	s = &d->st[*t];
	if (s->unparsed) {
		*why = "a SYN counted as unparsed by its tenant";
		return OC_BAD;
	}
	if (s->retransmits) {
		if (s->retransmits != 1 || s->admitted != 1 || s->denied ||
		    s->shadow_denied || s->rst_sent || d->moved[*t] ||
		    d->cnt[RL_CNT_REPEAT_CHARGED] || d->cnt[RL_CNT_RST_FAILED]) {
			*why = "a free repeat moved more than admitted and "
			       "retransmits";
			return OC_BAD;
		}
		return OC_REPEAT;
	}
	if (s->admitted == 1 && !s->denied && !s->rst_sent &&
	    !d->cnt[RL_CNT_RST_FAILED]) {
		if (s->shadow_denied == 1 ? d->moved[*t] :
		    s->shadow_denied || !d->moved[*t]) {
			*why = "admitted, but the bucket moved and the shadow "
			       "count do not agree";
			return OC_BAD;
		}
		return OC_ADMIT;
	}
	if (s->denied == 1 && !s->admitted && !s->shadow_denied &&
	    s->rst_sent + d->cnt[RL_CNT_RST_FAILED] <= 1) {
		if (d->moved[*t]) {
			*why = "a refused SYN moved the bucket";
			return OC_BAD;
		}
		return OC_DENY;
	}
	*why = "the tenant's stats fit neither admitted nor refused";
	return OC_BAD;
}

static const char *verdict_name(__u32 v)
{
	switch (v) {
	case XDP_ABORTED: return "ABORTED";
	case XDP_DROP: return "DROP";
	case XDP_PASS: return "PASS";
	case XDP_TX: return "TX";
	case XDP_REDIRECT: return "REDIRECT";
	}
	return "?";
}

/* ------------------------------------------------------------------------
 * The reply check: a bare RST|ACK back to the sender, checksums verified.
 * Ports and ack are checked against the reference's view of the SYN when
 * it has one: a SYN Linux would drop anyway (say its IP length runs past
 * the frame) may still be refused with a RST, but then only its framing
 * can be checked.  NULL when the reply is right.
 */
static const char *check_rst(const __u8 *in, const __u8 *out, __u32 out_len,
			     const struct ref *r)
{
	int l3 = r->l3_off, l4 = l3 + (r->family == 4 ? 20 : 40);
	__u32 ack;

	if (r->family != 4 && r->family != 6)
		return "the reference sees no IP header to answer";
	if (out_len != (__u32)l4 + 20)
		return "length is not the headers of a bare RST";
	if (memcmp(out, in + 6, 6) || memcmp(out + 6, in, 6))
		return "MAC addresses are not swapped";
	if (memcmp(out + 12, in + 12, l3 - 12))
		return "VLAN tags or ethertype changed";
	if (r->family == 4) {
		if (out[l3] != 0x45 || (out[l3 + 2] << 8 | out[l3 + 3]) != 40 ||
		    out[l3 + 9] != 6 || ((out[l3 + 6] << 8 | out[l3 + 7]) & 0x3fff))
			return "IPv4 header is not a bare, unfragmented TCP one";
		if (r->have_src && (memcmp(out + l3 + 12, r->dst, 4) ||
				    memcmp(out + l3 + 16, r->src, 4)))
			return "IPv4 addresses are not swapped";
	} else {
		if ((out[l3] >> 4) != 6 || (out[l3 + 4] << 8 | out[l3 + 5]) != 20 ||
		    out[l3 + 6] != 6)
			return "IPv6 header is not a bare TCP one";
		if (r->have_src && (memcmp(out + l3 + 8, r->dst, 16) ||
				    memcmp(out + l3 + 24, r->src, 16)))
			return "IPv6 addresses are not swapped";
	}
	if (out[l4 + 12] >> 4 != 5 || out[l4 + 13] != (TH_RST | TH_ACK))
		return "TCP header is not doff 5, RST|ACK";
	if (r->syn) {
		if ((out[l4] << 8 | out[l4 + 1]) != r->dport ||
		    (out[l4 + 2] << 8 | out[l4 + 3]) != r->sport)
			return "TCP ports are not swapped";
		ack = (__u32)out[l4 + 8] << 24 | out[l4 + 9] << 16 |
		      out[l4 + 10] << 8 | out[l4 + 11];
		if (ack != r->isn + 1 + r->seg_data)
			return "ack is not the SYN's sequence + 1 + its data";
	}
	return pkt_check_csums(out, out_len, l3);
}

/* ------------------------------------------------------------------------
 * One frame.
 */
static void report(struct pktfuzz *f, bool tc, const char *rule,
		   const __u8 *in, size_t len, const struct ref *r,
		   __u32 verdict, enum outcome oc, int t, const struct delta *d)
{
	char hex[8192];
	size_t i;

	f->msg[0] = '\0';
	say(f, "broken rule: %s\n", rule);
	say(f, "program: %s\n", tc ? "tc_rlgate (verdicts in XDP's terms)" :
	    "xdp_rlgate");
	say(f, "reference: %s (%s)", ref_kind_name(r->kind), r->why);
	if (r->have_src) {
		char a[INET6_ADDRSTRLEN];

		inet_ntop(r->family == 6 ? AF_INET6 : AF_INET, r->src, a,
			  sizeof(a));
		say(f, ", source %s", a);
		if (r->have_ports)
			say(f, " port %u", r->dport);
	}
	say(f, "\nverdict %s, outcome %s", verdict_name(verdict),
	    outcome_name[oc]);
	if (t >= 0)
		say(f, " (tenant %u)", fz_tenants[t].id);
	say(f, "; moved:");
	for (i = 0; i < RL_CNT_MAX; i++)
		if (d->cnt[i])
			say(f, " %s+%llu", cnt_name[i] ? cnt_name[i] : "?",
			    (unsigned long long)d->cnt[i]);
	for (i = 0; i < FZ_N_TENANTS; i++) {
		const struct rl_stats *s = &d->st[i];

		if (stats_zero(s) && !d->moved[i])
			continue;
		say(f, " tenant %u{admitted+%llu denied+%llu shadow+%llu "
		    "rst+%llu%s}", fz_tenants[i].id,
		    (unsigned long long)s->admitted,
		    (unsigned long long)s->denied,
		    (unsigned long long)s->shadow_denied,
		    (unsigned long long)s->rst_sent,
		    d->moved[i] ? " bucket moved" : "");
	}
	pkt_hex(hex, sizeof(hex), "\nframe", in, len, NULL, 0);
	say(f, "%s\n", hex);
}

/* ------------------------------------------------------------------------
 * The flow model: which copies of a SYN may pass free.
 */
static bool model_same_conn(const struct pktfuzz_flow *m, const struct ref *r)
{
	size_t alen = r->family == 6 ? 16 : 4;

	return m->family == r->family && m->sport == r->sport &&
	       m->dport == r->dport && !memcmp(m->src, r->src, alen) &&
	       !memcmp(m->dst, r->dst, alen);
}

static struct pktfuzz_flow *model_find(struct pktfuzz *f, const struct ref *r)
{
	int i;

	for (i = 0; i < f->n_model; i++)
		if (model_same_conn(&f->model[i], r) && f->model[i].isn == r->isn)
			return &f->model[i];
	return NULL;
}

/*
 * Moves the model by one frame's outcome; returns the rule broken, or NULL.
 * An admitted SYN (a token spent, or a shadow tenant's pass) is remembered
 * with no repeats taken; a free copy needs one remembered, under the most
 * repeats and not ended; a plain RST or FIN of the same 4-tuple from the
 * client ends it.  The program forgets flows the model keeps (its cache is
 * direct-mapped, and one slot holds one ISN of a 4-tuple): it then charges
 * copies the model would let pass, which is never wrong.
 */
static const char *model_step(struct pktfuzz *f, const struct ref *r,
			      enum outcome oc, const struct delta *d)
{
	bool keyed = r->have_src && r->have_ports && r->have_isn;
	struct pktfuzz_flow *m = keyed ? model_find(f, r) : NULL;
	int i;

	if (oc == OC_REPEAT) {
		if (!keyed)
			return "a packet without a whole SYN passed free as a "
			       "repeat";
		if (!m)
			return "a SYN passed free as a repeat of one never "
			       "admitted";
		if (m->ended)
			return "a copy of a SYN passed free after the client's "
			       "RST or FIN";
		if (m->repeats >= f->max_repeats)
			return "a copy of a SYN passed free beyond the most "
			       "repeats";
		m->repeats++;
		return NULL;
	}
	if (d->cnt[RL_CNT_REPEAT_CHARGED] && !m)
		return "a repeat was counted for a SYN never admitted";
	if (oc == OC_ADMIT && keyed) {
		if (!m) {
			m = &f->model[f->n_model < PKTFUZZ_FLOWS ? f->n_model++ :
				      f->n_model - 1];
			m->family = r->family;
			memcpy(m->src, r->src, 16);
			memcpy(m->dst, r->dst, 16);
			m->sport = r->sport;
			m->dport = r->dport;
			m->isn = r->isn;
		}
		m->repeats = 0;
		m->ended = false;
	}
	/* Only a plain RST or FIN is sure to be read as one by the program. */
	if (r->plain && r->have_flags && r->have_ports &&
	    (r->flags & (TH_RST | TH_FIN)))
		for (i = 0; i < f->n_model; i++)
			if (model_same_conn(&f->model[i], r))
				f->model[i].ended = true;
	return NULL;
}

/* The tc program's verdict in XDP's terms, so that one set of rules reads
 * both: TC_ACT_OK passes, TC_ACT_SHOT drops, a redirect back out of the
 * interface (bpf_redirect) is the reply.  Anything else stays invalid. */
static __u32 tc_as_xdp(__u32 v)
{
	switch (v) {
	case TC_ACT_OK: return XDP_PASS;
	case TC_ACT_SHOT: return XDP_DROP;
	case TC_ACT_REDIRECT: return XDP_TX;
	}
	return 100 + v;
}

/* Runs in through one program from fresh buckets and checks the rules
 * against the reference's reading r.  0, 1 (f->msg says what broke) or
 * -errno. */
static int check_prog(struct pktfuzz *f, bool tc, const __u8 *in, size_t len,
		      const struct ref *rp)
{
	static const size_t state = offsetof(struct rl_tenant, tat);
	const struct ref r = *rp;
	__u8 out[4096];
	struct run_result res;
	struct rl_stats now;
	struct delta d;
	enum outcome oc;
	const char *why = NULL;
	__u32 want = 0;
	__u64 cnt[RL_CNT_MAX];
	size_t i;
	int t, err;

	for (i = 0; i < FZ_N_TENANTS; i++) {
		__u32 id = fz_tenants[i].id;

		memcpy((char *)&f->w.tenants[id] + state,
		       (char *)&f->init[id] + state,
		       sizeof(struct rl_tenant) - state);
	}
	err = xdp_run(tc ? f->tc_fd : f->prog_fd, in, len, out, sizeof(out),
		      1, &res);
	/* An skb test run refuses an untagged IPv4 or IPv6 frame shorter
	 * than its IP header, as the stack would never hand one to tc. */
	if (err == -EINVAL && tc &&
	    (((in[12] << 8 | in[13]) == 0x0800 && len < 14 + 20) ||
	     ((in[12] << 8 | in[13]) == 0x86dd && len < 14 + 40)))
		return 0;
	if (err) {
		f->msg[0] = '\0';
		say(f, "bpf_prog_test_run_opts of %s on %zu bytes: %s\n",
		    tc ? "tc_rlgate" : "xdp_rlgate", len, strerror(-err));
		return err;
	}
	if (tc)
		res.retval = tc_as_xdp(res.retval);

	memset(&d, 0, sizeof(d));
	counters_sum(&f->w, cnt);
	for (i = 0; i < RL_CNT_MAX; i++) {
		d.cnt[i] = cnt[i] - f->cnt[i];
		f->cnt[i] = cnt[i];
	}
	for (i = 0; i < FZ_N_TENANTS; i++) {
		__u32 id = fz_tenants[i].id;
		__u64 *a = (__u64 *)&now, *b = (__u64 *)&f->stats[id];
		__u64 *o = (__u64 *)&d.st[i];
		size_t k;

		if ((err = stats_read(f, id, &now))) {
			f->msg[0] = '\0';
			say(f, "couldn't read tenant %u's stats: %s\n", id,
			    strerror(-err));
			return err;
		}
		for (k = 0; k < STAT_WORDS; k++)
			o[k] = a[k] - b[k];
		f->stats[id] = now;
		d.moved[i] = memcmp((char *)&f->w.tenants[id] + state,
				    (char *)&f->init[id] + state,
				    sizeof(struct rl_tenant) - state) != 0;
	}
	oc = classify_delta(&d, f->flows, &t, &why);
	f->repeats += oc == OC_REPEAT;
	f->repeats_charged += d.cnt[RL_CNT_REPEAT_CHARGED];
	if (!tc)
		f->by_verdict[res.retval < 5 ? res.retval : 0]++;

#define BROKEN(rule) do {						\
	report(f, tc, rule, in, len, &r, res.retval, oc, t, &d);	\
	return 1;							\
} while (0)

	/* 1. Only the three verdicts the program means. */
	if (res.retval != XDP_PASS && res.retval != XDP_DROP &&
	    res.retval != XDP_TX)
		BROKEN("the verdict is not PASS, DROP or TX");
	/* 2. Only a reply is rewritten. */
	if (res.retval != XDP_TX &&
	    (res.out_len != len || memcmp(out, in, len)))
		BROKEN("a frame that was not answered came out modified");
	/* 3. Each frame moves the counters of exactly one outcome, and the
	 *    verdict is that outcome's. */
	if (oc == OC_BAD) {
		static char buf[160];

		snprintf(buf, sizeof(buf), "the counters do not add up: %s", why);
		BROKEN(buf);
	}
	if (oc == OC_DENY)
		want = d.st[t].rst_sent ? XDP_TX : XDP_DROP;
	else if (oc == OC_UNPARSED_DROP)
		want = XDP_DROP;
	else
		want = XDP_PASS;
	if (res.retval != want)
		BROKEN("the verdict is not the one the counters record");
	/* 4. A reply is a well-formed RST|ACK, never to a fragment. */
	if (res.retval == XDP_TX) {
		const char *bad;

		if (r.fragment)
			BROKEN("a fragment was answered with a RST");
		bad = check_rst(in, out, res.out_len, &r);
		if (bad) {
			static char buf[160];

			snprintf(buf, sizeof(buf), "the RST reply is wrong: %s",
				 bad);
			BROKEN(buf);
		}
	}
	if (r.kind == REF_DEEP_VLAN) {
		if (res.retval != XDP_DROP || oc != OC_UNPARSED_DROP)
			BROKEN("a frame with more than RL_VLAN_MAX VLAN tags was "
			       "not refused as unparsed");
		return 0;
	}

	/* 5. Traffic from a source no rule covers passes untouched; and
	 *    no tenant is charged for a port no rule of it names.  (A frame
	 *    whose port the program cannot find may still be refused for a
	 *    port rule of its address: the contract says so.) */
	if (r.have_src && !rules_any(r.family, r.src, 0) &&
	    (res.retval != XDP_PASS || oc == OC_ADMIT || oc == OC_REPEAT ||
	     oc == OC_DENY))
		BROKEN("traffic from a source no rule covers was not passed "
		       "untouched");
	if (r.have_src && r.have_ports &&
	    !rules_lookup(r.family, r.src, r.dport) &&
	    (oc == OC_ADMIT || oc == OC_REPEAT || oc == OC_DENY))
		BROKEN("a SYN to a port no rule of its source names was charged");
	if (!r.have_src && res.retval != XDP_PASS)
		BROKEN("a frame whose source cannot be read was refused");
	/* 6. A charge, or an unparsed count, goes to the tenant the rules
	 *    give. */
	if (t >= 0 && r.have_src) {
		__u32 id = fz_tenants[t].id;

		if (r.have_ports ? rules_lookup(r.family, r.src, r.dport) != id :
		    !rules_any(r.family, r.src, id))
			BROKEN("a tenant its rules do not give was charged or "
			       "counted the packet");
	}
	/* 10. With free repeats on: a copy passes free only as the flow
	 *     model allows, and a charged repeat is of an admitted SYN. */
	if (f->flows) {
		const char *bad = model_step(f, &r, oc, &d);

		if (bad)
			BROKEN(bad);
	}
	/* 7. What may open a connection from a tenant's source passes only
	 *    with that tenant's token spent (or, for a shadow tenant, its
	 *    shadow or unparsed count). */
	if (r.kind == REF_MAY_OPEN && res.retval == XDP_PASS &&
	    oc != OC_ADMIT && oc != OC_UNPARSED_SHADOW && oc != OC_REPEAT &&
	    (r.have_ports ? rules_lookup(r.family, r.src, r.dport) :
	     rules_any(r.family, r.src, 0)))
		BROKEN("a frame that may open a connection from a tenant's "
		       "source passed without a token");
	/* 8. What cannot open one is never charged or counted as refused. */
	if ((r.kind == REF_NOT_IP || r.kind == REF_NOT_TCP ||
	     r.kind == REF_LATE_FRAGMENT || r.kind == REF_NOT_SYN) &&
	    (oc == OC_ADMIT || oc == OC_REPEAT || oc == OC_DENY))
		BROKEN("a frame that cannot open a connection was charged");
	/* 9. Plain traffic that is not a SYN passes. */
	if (r.plain && res.retval != XDP_PASS)
		BROKEN("plain traffic that is not a SYN was refused");
#undef BROKEN
	return 0;
}

int pktfuzz_check(struct pktfuzz *f, const __u8 *in, size_t len)
{
	struct ref r;
	int rc;

	if (len < 14 || len > PKTFUZZ_MAX)
		return 0;
	ref_judge(in, len, &r);
	f->frames++;
	f->by_kind[r.kind]++;
	rc = check_prog(f, false, in, len, &r);
	return rc ? rc : check_prog(f, true, in, len, &r);
}

/* ------------------------------------------------------------------------
 * Frames.
 */
__u64 pktfuzz_rand(struct pktfuzz_rng *r)
{
	__u64 z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static __u32 below(struct pktfuzz_rng *r, __u32 n)
{
	return n ? pktfuzz_rand(r) % n : 0;
}

static __u32 pick(struct pktfuzz_rng *r, const __u32 *v, size_t n)
{
	return v[below(r, n)];
}
#define PICK(r, ...) ({							\
	static const __u32 v_[] = { __VA_ARGS__ };			\
	pick(r, v_, sizeof(v_) / sizeof(v_[0]));			\
})

static void put16(__u8 *p, __u16 v)
{
	p[0] = v >> 8;
	p[1] = v;
}

static void put32(__u8 *p, __u32 v)
{
	put16(p, v >> 16);
	put16(p + 2, v);
}

/* A TCP segment (or UDP/ICMP header) into s; returns its length. */
static size_t gen_l4(struct pktfuzz_rng *r, __u8 proto, __u8 *s)
{
	size_t doff, data, i;

	if (proto != 6) {
		for (i = 0; i < 8; i++)
			s[i] = pktfuzz_rand(r);
		if (proto == 17)
			put16(s + 4, 8);
		return 8;
	}
	doff = 20 + (below(r, 4) ? 0 : 4 * below(r, 11));
	data = below(r, 3) ? 0 : below(r, 64);
	memset(s, 0, doff + data);
	put16(s, 1024 + below(r, 64000));
	put16(s + 2, PICK(r, 443, 443, 80, 80, 22, 8080, 0, 65535));
	put32(s + 4, pktfuzz_rand(r));
	s[13] = PICK(r, TH_SYN, TH_SYN, TH_SYN, TH_SYN, TH_ACK, TH_ACK,
		     TH_SYN | TH_ACK, TH_RST, TH_FIN | TH_ACK, TH_SYN | TH_FIN,
		     TH_SYN | TH_RST, TH_SYN | TH_PSH, 0, 0xff, 0xef);
	if (s[13] & TH_ACK)
		put32(s + 8, pktfuzz_rand(r));
	s[12] = (below(r, 30) ? doff / 4 : below(r, 5)) << 4;
	put16(s + 14, 64240);
	for (i = 20; i < doff; i++)
		s[i] = 1;		/* NOP */
	if (doff >= 24) {
		s[20] = 2;		/* MSS 1460 */
		s[21] = 4;
		put16(s + 22, 1460);
	}
	for (i = 0; i < data; i++)
		s[doff + i] = 'a' + i % 26;
	return doff + data;
}

/* TCP checksum of a whole segment, over the pseudo-header. */
static void tcp_csum(__u8 *seg, size_t len, const __u8 *src, const __u8 *dst,
		     int family)
{
	__u8 ph[12] = { 0 };
	__u32 s;

	if (len < 18)
		return;
	put16(seg + 16, 0);
	s = csum_add(0, src, family == 6 ? 16 : 4);
	s = csum_add(s, dst, family == 6 ? 16 : 4);
	if (family == 6) {
		put32(ph, len);
		ph[7] = 6;
		s = csum_add(s, ph, 8);
	} else {
		ph[1] = 6;
		put16(ph + 2, len);
		s = csum_add(s, ph, 4);
	}
	put16(seg + 16, csum_fold16(csum_add(s, seg, len)));
}

/* A length field that lies now and then. */
static size_t bend_len(struct pktfuzz_rng *r, size_t len)
{
	switch (below(r, 48)) {
	case 0: return len + 1 + below(r, 16);
	case 1: return len > 8 ? len - 1 - below(r, 8) : 0;
	case 2: return 0;
	case 3: return below(r, 65536);
	}
	return len;
}

/* The IPv4 packet; returns its length (header + payload). */
static size_t gen_ipv4(struct pktfuzz_rng *r, __u8 *ip, const __u8 *src,
		       const __u8 *dst)
{
	__u8 seg[256], proto = PICK(r, 6, 6, 6, 6, 6, 6, 6, 6, 17, 1);
	size_t ihl = 20 + (below(r, 5) ? 0 : 4 * below(r, 11));
	size_t slen = gen_l4(r, proto, seg), plen, off8, i;
	__u16 fo = below(r, 3) ? 0 : 0x4000;

	if (proto == 6)
		tcp_csum(seg, slen, src, dst, 4);
	plen = slen;
	switch (below(r, 20)) {
	case 0 ... 10:		/* whole */
		memcpy(ip + ihl, seg, slen);
		break;
	case 11 ... 14:		/* a first fragment, often a tiny one */
		fo = 0x2000;
		plen = PICK(r, 0, 4, 8, 8, 8, 12, 13, 14, 15, 16, 16, 20, 24, 32);
		if (plen > slen)
			plen = slen;
		memcpy(ip + ihl, seg, plen);
		break;
	case 15 ... 17:		/* a later fragment, often overlapping TCP */
		off8 = PICK(r, 1, 1, 2, 2, 3, 4, 185) * 8;
		fo = (below(r, 2) ? 0x2000 : 0) | off8 / 8;
		plen = 8 * (1 + below(r, 4));
		for (i = 0; i < plen; i++)
			ip[ihl + i] = off8 + i < slen ? seg[off8 + i] : i;
		break;
	default:		/* odd bits: reserved, MF with offset 0 and DF */
		fo = PICK(r, 0x8000, 0x6000, 0x3fff, 0x2001, 0x1fff);
		memcpy(ip + ihl, seg, slen);
		break;
	}
	ip[0] = 0x40 | ihl / 4;
	ip[1] = 0;
	put16(ip + 2, bend_len(r, ihl + plen));
	put16(ip + 4, pktfuzz_rand(r));
	put16(ip + 6, fo);
	ip[8] = 64;
	ip[9] = proto;
	put16(ip + 10, 0);
	memcpy(ip + 12, src, 4);
	memcpy(ip + 16, dst, 4);
	for (i = 20; i < ihl; i++)
		ip[i] = i + 1 < ihl ? 1 : 0;	/* NOPs, EOL */
	put16(ip + 10, csum_fold16(csum_add(0, ip, ihl)));
	return ihl + plen;
}

/* The IPv6 packet with its extension chain; returns its length. */
static size_t gen_ipv6(struct pktfuzz_rng *r, __u8 *ip6, const __u8 *src,
		       const __u8 *dst)
{
	__u8 seg[256], proto = PICK(r, 6, 6, 6, 6, 6, 6, 6, 6, 17, 58);
	size_t slen = gen_l4(r, proto, seg), p = 40, n_ext, i, k, hl;
	__u8 *nhp = ip6 + 6;
	bool frag = false;

	if (proto == 6)
		tcp_csum(seg, slen, src, dst, 6);
	n_ext = PICK(r, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 7, 8, 8, 8, 9, 9, 10,
		     12, 16);
	for (i = 0; i < n_ext && p < 1200; i++) {
		__u8 *h = ip6 + p;

		switch (below(r, 14)) {
		case 0 ... 6:	/* destination options, hop-by-hop, routing */
			*nhp = PICK(r, 60, 60, 60, 0, 43, 43);
			k = below(r, 10) ? below(r, 2) : below(r, 32);
			hl = (k + 1) * 8;
			memset(h, 0, hl);
			h[1] = k;
			h[2] = 1;	/* PadN over the rest */
			h[3] = hl - 4;
			break;
		case 7:		/* AH */
			*nhp = 51;
			k = 1 + below(r, 5);
			hl = (k + 2) * 4;
			for (k = 0; k < hl; k++)
				h[k] = pktfuzz_rand(r);
			h[1] = hl / 4 - 2;
			break;
		default:	/* a fragment header: atomic, first or later */
			*nhp = 44;
			hl = 8;
			k = below(r, 14);
			put32(h + 4, pktfuzz_rand(r));
			if (k <= 9) {
				put16(h + 2, 0);
			} else if (k <= 12) {
				put16(h + 2, 1);
				frag = true;
			} else {
				size_t off8 = PICK(r, 1, 1, 2, 2, 3, 4, 185) * 8;
				size_t n = 8 * (1 + below(r, 4));

				put16(h + 2, off8 | below(r, 2));
				h[0] = proto;
				p += 8;
				for (k = 0; k < n; k++)
					ip6[p++] = off8 + k < slen ? seg[off8 + k] : k;
				goto done;
			}
			break;
		}
		nhp = h;
		p += hl;
	}
	*nhp = proto;
	if (frag && below(r, 2))	/* a first fragment without all of TCP */
		slen = PICK(r, 0, 4, 8, 12, 14, 16, 19, 20);
	memcpy(ip6 + p, seg, slen);
	p += slen;
done:
	put32(ip6, 0x60000000u | below(r, 1u << 20));
	put16(ip6 + 4, bend_len(r, p - 40));
	ip6[7] = 64;
	memcpy(ip6 + 8, src, 16);
	memcpy(ip6 + 24, dst, 16);
	return p;
}

size_t pktfuzz_generate(struct pktfuzz_rng *r, __u8 *b)
{
	size_t p = 12, len, i;
	size_t tags = PICK(r, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3);
	__u8 src[16], dst[16];
	int family = PICK(r, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 6, 6, 6, 6, 6, 6,
			  6, 6, 6, 0);

	memcpy(b, pkt_server_mac, 6);
	memcpy(b + 6, pkt_client_mac, 6);
	for (i = 0; i < tags; i++) {
		put16(b + p, i == 0 && tags > 1 ? 0x88a8 : 0x8100);
		put16(b + p + 2, 100 + i);
		p += 4;
	}
	if (!family) {
		put16(b + p, PICK(r, 0x0806, 0x88cc, 0x8100, 0x0801, 0x86de));
		p += 2;
		for (i = 0; i < 28; i++)
			b[p++] = i;
		return p;
	}
	put16(b + p, family == 4 ? 0x0800 : 0x86dd);
	p += 2;
	if (family == 4) {
		inet_pton(AF_INET, fz_src4[below(r, sizeof(fz_src4) /
					       sizeof(fz_src4[0]))], src);
		inet_pton(AF_INET, "198.51.100.1", dst);
		if (!below(r, 16))
			put32(src, pktfuzz_rand(r));
		len = p + gen_ipv4(r, b + p, src, dst);
	} else {
		inet_pton(AF_INET6, fz_src6[below(r, sizeof(fz_src6) /
						sizeof(fz_src6[0]))], src);
		inet_pton(AF_INET6, "2001:db8:100::1", dst);
		len = p + gen_ipv6(r, b + p, src, dst);
	}
	if (!below(r, 12))		/* cut anywhere */
		len = 14 + below(r, len - 13);
	else if (!below(r, 16))		/* Ethernet padding */
		for (i = 1 + below(r, 20); i > 0 && len < PKTFUZZ_MAX; i--)
			b[len++] = 0;
	return len;
}

size_t pktfuzz_mutate(struct pktfuzz_rng *r, __u8 *b, size_t len, size_t cap)
{
	size_t n = 1 + below(r, 3), pos, k;

	while (n-- && len > 0) {
		/* most fields worth hitting are in the first 128 bytes */
		pos = below(r, 4) ? below(r, len < 128 ? len : 128) : below(r, len);
		switch (below(r, 8)) {
		case 0:
			b[pos] ^= 1 << below(r, 8);
			break;
		case 1:
			b[pos] = PICK(r, 0, 1, 2, 4, 5, 6, 0x0f, 0x10, 0x12, 0x20,
				      0x40, 0x45, 0x7f, 0x80, 0xff, 0, 43, 44, 51,
				      59, 60, 58, 17);
			break;
		case 2:
			if (pos + 1 < len)
				put16(b + pos, PICK(r, 0, 1, 8, 16, 24, 0x2000,
						    0x2001, 0x2002, 0x4000,
						    0x8100, 0x88a8, 0x0800,
						    0x86dd, 0xffff, 0xfff8));
			break;
		case 3:
			if (len > 14)
				len = 14 + below(r, len - 13);
			break;
		case 4:		/* insert */
			k = 1 + below(r, 16);
			if (len + k > cap)
				break;
			memmove(b + pos + k, b + pos, len - pos);
			for (size_t i = 0; i < k; i++)
				b[pos + i] = below(r, 2) ? 0 : pktfuzz_rand(r);
			len += k;
			break;
		case 5:		/* delete */
			k = 1 + below(r, 16);
			if (pos + k > len || len - k < 14)
				break;
			memmove(b + pos, b + pos + k, len - pos - k);
			len -= k;
			break;
		case 6:		/* repeat a chunk, e.g. an extension header */
			k = 8 * (1 + below(r, 3));
			if (pos + k > len || len + k > cap)
				break;
			memmove(b + pos + k, b + pos, len - pos);
			len += k;
			break;
		default:
			b[pos] = pktfuzz_rand(r);
			break;
		}
	}
	return len;
}

void pktfuzz_fix_csum(__u8 *b, size_t len)
{
	size_t off = 12, ihl;
	int tags = 0;

	while (off + 2 <= len && tags < 3 &&
	       ((b[off] << 8 | b[off + 1]) == 0x8100 ||
		(b[off] << 8 | b[off + 1]) == 0x88a8)) {
		off += 4;
		tags++;
	}
	if (off + 2 + 20 > len || (b[off] << 8 | b[off + 1]) != 0x0800)
		return;
	off += 2;
	ihl = (b[off] & 15) * 4;
	if (ihl < 20 || off + ihl > len)
		return;
	put16(b + off + 10, 0);
	put16(b + off + 10, csum_fold16(csum_add(0, b + off, ihl)));
}

size_t pktfuzz_frame(__u64 seed, __u64 i, __u8 *buf)
{
	struct pktfuzz_rng r = { seed * 0x2545f4914f6cdd1dULL + i };
	size_t len;

	pktfuzz_rand(&r);
	len = pktfuzz_generate(&r, buf);
	if (below(&r, 2)) {
		len = pktfuzz_mutate(&r, buf, len, PKTFUZZ_MAX);
		if (below(&r, 8))
			pktfuzz_fix_csum(buf, len);
	}
	return len;
}

/* ------------------------------------------------------------------------
 * Flows: copies of a few SYNs, and their RSTs, FINs and ACKs, in many clean
 * shapes (the model can only follow frames whose every byte the reference
 * reads as Linux would: no mutations here).
 */
static const char *const flow_src[] = {
	"10.1.0.10", "10.4.0.10", "10.5.0.10", "10.2.0.10",
	"2001:db8:1::10", "2001:db8:4::10", "2001:db8:5::10",
};

/* IPv6 chains of the shapes the program follows, up to its 8 headers, and
 * a first or atomic fragment among them. */
static const char *const flow_chain[] = {
	"", "", "", "H", "HRD", "A", "HRDA", "DDDDDDD", "ADDDDDDD", "F", "HF",
	"DDDDDDF", "DDDDDDDF",
};

static size_t flow_frame(struct pktfuzz_rng *r, __u8 *buf)
{
	struct pkt p = { 0 };

	p.src = flow_src[below(r, sizeof(flow_src) / sizeof(flow_src[0]))];
	p.family = strchr(p.src, ':') ? 6 : 4;
	p.sport = 1000 + below(r, 2);
	p.dport = 443;
	p.seq = below(r, 2) ? 100 : 200;
	p.flags = PICK(r, TH_SYN, TH_SYN, TH_SYN, TH_SYN, TH_SYN, TH_SYN,
		       TH_RST, TH_FIN | TH_ACK, TH_ACK, TH_RST | TH_ACK,
		       TH_SYN | TH_ACK, TH_FIN);
	p.vlans = PICK(r, 0, 0, 0, 1, 2);
	if (p.family == 4) {
		p.ip_opts = PICK(r, 0, 0, 0, 8);
		if (!below(r, 6))
			p.frag = 0x2000;	/* a first fragment, whole TCP */
	} else {
		p.ext = flow_chain[below(r, sizeof(flow_chain) /
					    sizeof(flow_chain[0]))];
		p.frag6 = below(r, 2);		/* first, or atomic */
	}
	p.tcp_opts = PICK(r, 0, 0, 12);
	p.payload = PICK(r, 0, 0, 0, 10);
	return pkt_build(&p, buf, NULL);
}

long pktfuzz_flows(struct pktfuzz *f, __u64 seed, long frames,
		   double seconds, int reports, FILE *log, long *bad)
{
	__u8 b[PKT_MAX];
	__u64 t0 = now_ns();
	long i;

	*bad = 0;
	for (i = 0; i < frames; i++) {
		struct pktfuzz_rng r = { seed * 0x2545f4914f6cdd1dULL + i };
		size_t len;
		int rc;

		if ((i & 255) == 0 && now_ns() - t0 > seconds * 1e9)
			break;
		pktfuzz_rand(&r);
		len = flow_frame(&r, b);
		rc = pktfuzz_check(f, b, len);
		if (rc < 0) {
			fprintf(log, "frame %ld: %s", i, f->msg);
			(*bad)++;
			break;
		}
		if (rc && (*bad)++ < reports)
			fprintf(log, "frame %ld of the flows of seed %llu (test_xdp "
				"--fuzz --flows --seed %llu --frames %ld):\n%s",
				i, (unsigned long long)seed,
				(unsigned long long)seed, i + 1, f->msg);
	}
	return i;
}

/* ------------------------------------------------------------------------
 * `test_xdp --fuzz`.
 */
static int save_frame(const char *dir, const char *name, const __u8 *b,
		      size_t len)
{
	char path[4096];
	FILE *fp;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fp = fopen(path, "wb");
	if (!fp || fwrite(b, 1, len, fp) != len) {
		int err = -errno;

		fprintf(stderr, "Error: couldn't write '%s': %s\n", path,
			strerror(-err));
		if (fp)
			fclose(fp);
		return err;
	}
	return fclose(fp) ? -errno : 0;
}

static int run_file(struct pktfuzz *f, const char *path, FILE *log,
		    bool quiet)
{
	__u8 b[PKTFUZZ_MAX + 1];
	FILE *fp = fopen(path, "rb");
	size_t len;
	int rc;

	if (!fp) {
		fprintf(log, "Error: couldn't open '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	len = fread(b, 1, sizeof(b), fp);
	fclose(fp);
	rc = pktfuzz_check(f, b, len);
	if (rc && !quiet)
		fprintf(log, "%s:\n%s", path, f->msg);
	else if (rc)
		fprintf(log, "%s broke a rule too\n", path);
	return rc;
}

int pktfuzz_corpus(struct pktfuzz *f, const char *dir, int reports,
		   FILE *log, int *files)
{
	struct dirent **ents;
	char path[4096];
	int n, i, bad = 0;

	n = scandir(dir, &ents, NULL, alphasort);
	if (n < 0) {
		fprintf(log, "Error: couldn't read '%s': %s\n", dir,
			strerror(errno));
		return -1;
	}
	*files = 0;
	for (i = 0; i < n; i++) {
		if (ents[i]->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", dir,
				 ents[i]->d_name);
			bad += run_file(f, path, log, bad >= reports) != 0;
			(*files)++;
		}
		free(ents[i]);
	}
	free(ents);
	return bad;
}

long pktfuzz_seeded(struct pktfuzz *f, __u64 seed, long frames,
		    double seconds, const char *save_dir, int reports,
		    FILE *log, long *bad)
{
	__u8 b[PKTFUZZ_MAX];
	__u64 t0 = now_ns();
	long i;

	*bad = 0;
	for (i = 0; i < frames; i++) {
		size_t len = pktfuzz_frame(seed, i, b);
		int rc;

		if ((i & 255) == 0 && now_ns() - t0 > seconds * 1e9)
			break;
		rc = pktfuzz_check(f, b, len);
		if (rc < 0) {
			fprintf(log, "frame %ld: %s", i, f->msg);
			(*bad)++;
			break;
		}
		if (!rc)
			continue;
		if ((*bad)++ < reports)
			fprintf(log, "frame %ld of seed %llu:\n%s", i,
				(unsigned long long)seed, f->msg);
		if (save_dir) {
			char name[64];

			snprintf(name, sizeof(name), "seed%llu-frame%ld",
				 (unsigned long long)seed, i);
			save_frame(save_dir, name, b, len);
		}
	}
	return i;
}

void pktfuzz_summary(const struct pktfuzz *f, FILE *log)
{
	int k;

	fprintf(log, "%lu frames; reference:", f->frames);
	for (k = REF_NOT_IP; k <= REF_MAY_OPEN; k++)
		fprintf(log, " %s %lu%s", ref_kind_name(k), f->by_kind[k],
			k < REF_MAY_OPEN ? "," : "");
	fprintf(log, "; verdicts: PASS %lu, DROP %lu, TX %lu",
		f->by_verdict[XDP_PASS], f->by_verdict[XDP_DROP],
		f->by_verdict[XDP_TX]);
	if (f->flows)
		fprintf(log, "; repeats free %lu, charged %lu", f->repeats,
			f->repeats_charged);
	fprintf(log, "\n");
}

static void usage(FILE *fp)
{
	fprintf(fp, "usage: test_xdp --fuzz [--flows] [--seed N] [--frames N] "
		"[--seconds S] [--save DIR] [--reports N] [FILE|DIR...]\n"
		"  seeded random and mutated frames through xdp_rlgate and "
		"tc_rlgate, or the frames in FILEs;\n"
		"  --flows: copies of a few SYNs with free repeats on\n");
}

int pktfuzz_main(int argc, char **argv)
{
	struct pktfuzz *f;
	__u64 seed = time(NULL);
	long frames = 1000000, bad = 0, n;
	double seconds = 60;
	const char *save = NULL;
	int reports = 5, i, files = 0, rc = 0, cpu;
	bool flows = false;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--flows")) {
			flows = true;
			continue;
		}
		if (!v) {
			fprintf(stderr, "Error: '%s' needs a value\n", argv[i]);
			usage(stderr);
			return 2;
		}
		if (!strcmp(argv[i], "--seed"))
			seed = strtoull(v, NULL, 0);
		else if (!strcmp(argv[i], "--frames"))
			frames = strtol(v, NULL, 0);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = strtod(v, NULL);
		else if (!strcmp(argv[i], "--save"))
			save = v;
		else if (!strcmp(argv[i], "--reports"))
			reports = atoi(v);
		else {
			fprintf(stderr, "Error: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
		i++;
	}
	harness_quiet_libbpf();
	/* The flow cache is per CPU: every frame on this one. */
	cpu = sched_getcpu();
	if (cpu < 0 || pin_to_cpu(cpu)) {
		fprintf(stderr, "Error: couldn't pin to a CPU: %s\n",
			strerror(errno));
		return 1;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return 1;
	if (flows ? pktfuzz_open_flows(f) : pktfuzz_open(f)) {
		fprintf(stderr, "Error: %s", f->msg);
		free(f);
		return 1;
	}
	if (i < argc) {
		for (; i < argc; i++) {
			DIR *d = opendir(argv[i]);

			if (d) {
				int nf;

				closedir(d);
				bad += pktfuzz_corpus(f, argv[i], reports,
						      stdout, &nf);
				files += nf;
			} else {
				bad += run_file(f, argv[i], stdout,
						bad >= reports) != 0;
				files++;
			}
		}
		printf("%d files, %ld broke a rule\n", files, bad);
	} else if (flows) {
		printf("seed %llu\n", (unsigned long long)seed);
		n = pktfuzz_flows(f, seed, frames, seconds, reports, stdout,
				  &bad);
		printf("%ld frames of the flows of seed %llu, %ld broke a "
		       "rule\n", n, (unsigned long long)seed, bad);
	} else {
		printf("seed %llu\n", (unsigned long long)seed);
		n = pktfuzz_seeded(f, seed, frames, seconds, save, reports,
				   stdout, &bad);
		printf("%ld frames of seed %llu, %ld broke a rule\n", n,
		       (unsigned long long)seed, bad);
	}
	pktfuzz_summary(f, stdout);
	rc = bad ? 1 : 0;
	pktfuzz_close(f);
	free(f);
	return rc;
}
