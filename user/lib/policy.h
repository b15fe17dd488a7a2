/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tenant policy: the operator's model of a tenant (limits and match rules),
 * its parsing from rlctl arguments and JSON, its validation, and its JSON form.
 * Shared by rlctl (to reject bad input early) and rlagent (the authority).
 * Text forms and derived numbers are in policy.c, parsers in policy_parse.c,
 * validation in policy_check.c, the JSON form in policy_json.c.
 */
#ifndef RL_POLICY_H
#define RL_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#define POLICY_NAME_MAX		63
#define POLICY_MAX_PREFIXES	64
#define POLICY_MAX_PORTS	16
#define POLICY_RATE_MAX		1000000000ULL	/* per second */
#define POLICY_BURST_MAX	100000000ULL
#define POLICY_ERR_MAX		256
/* Connections in flight the caps of all tenants may add up to on one host:
 * the kernel's table of them (RL_CONNS_MAX in rlgate.h). */
#define POLICY_CONNS_MAX	(128 * 1024)
/* The longest a bucket may take to refill from empty, burst x interval: the
 * kernel keeps buckets as times in 64-bit nanoseconds (now + burst x
 * interval + interval must not wrap), about 146 years. */
#define POLICY_REFILL_MAX_NS	(1ULL << 62)
#define POLICY_REFILL_MAX_YEARS	146
/* The most sub-buckets a hot tenant's fleet bucket may be split into
 * (--shards, user/lib/hot.h). */
#define POLICY_SHARDS_MAX	16
/* The largest --weight (user/lib/shed.h). */
#define POLICY_WEIGHT_MAX	1000

enum policy_action { POLICY_ACT_DROP = 0, POLICY_ACT_RST = 1 };

/* Fleet mode: what the kernel does for a tenant once its leased tokens are
 * gone and Redis or the agent has failed. */
enum policy_fail {
	POLICY_FAIL_STATIC = 0,	/* local refill at rate / live agents */
	POLICY_FAIL_ALLOW = 1,	/* admit everything while degraded */
	POLICY_FAIL_DENY = 2,	/* refuse every new connection while degraded */
};

/* Which connections a tenant limits. */
enum policy_direction {
	POLICY_DIR_IN = 0,	/* to this host: prefixes are sources */
	POLICY_DIR_OUT = 1,	/* from this host (preloaded programs' connect):
				 * prefixes and ports are destinations */
};

/* Which SYNs spend a tenant's tokens. */
enum policy_verify {
	POLICY_VERIFY_NONE = 0,		/* every SYN, as it arrives */
	POLICY_VERIFY_SYNCOOKIE = 1,	/* only a handshake completed with a
					 * valid SYN cookie: its last ACK */
	POLICY_VERIFY_ANSWER = 2,	/* the same, the SYN-ACK with the
					 * cookie sent by rlgate itself */
};

/* A rate as the operator wrote it: count per period. */
struct policy_rate {
	uint64_t count;
	uint64_t period_s;	/* 1, 60 or 3600 */
};

/* 18 bytes, no padding: a tenant holds up to POLICY_MAX_PREFIXES of them. */
struct policy_prefix {
	uint8_t addr[16];	/* network byte order, host bits zero */
	uint8_t len;		/* prefix length */
	uint8_t family;		/* AF_INET or AF_INET6 */
};

struct policy_tenant {
	char name[POLICY_NAME_MAX + 1];
	struct policy_rate rate;
	uint64_t burst;
	/* n_match prefixes, out of line: a tenant may have
	 * POLICY_MAX_PREFIXES, most have a few, and a host holds 100,000
	 * tenants.  A copy of the struct shares them with the original.
	 * What the parsers below fill is allocated for the tenant alone and
	 * freed by policy_tenant_free(); the agent keeps its tenants' in a
	 * store of its own (user/lib/pfxstore.h). */
	struct policy_prefix *match;
	unsigned int n_match;
	uint16_t ports[POLICY_MAX_PORTS];	/* host order; none = any port */
	unsigned int n_ports;
	enum policy_action action;
	bool shadow;
	/* Fleet mode: how many connections the whole fleet may admit beyond
	 * rate x time + burst, at most (tokens leased out and not yet spent).
	 * 0 means policy_overshoot_budget()'s default. */
	uint64_t overshoot;
	enum policy_fail fail;
	enum policy_direction direction;
	/* Connections of this tenant in flight at once, at most (0: no cap). */
	uint64_t max_conns;
	/* Per source within the tenant: every source address, or its prefix
	 * of src_len4 (IPv4) or src_len6 (IPv6) bits, has a bucket of its
	 * own that a SYN must pass besides the tenant's.  src_rate.count 0:
	 * none (and src_burst, src_len4, src_len6 are 0). */
	struct policy_rate src_rate;
	uint64_t src_burst;
	uint8_t src_len4, src_len6;
	enum policy_verify verify;
	/* Fleet mode: the global bucket split into this many sub-buckets on
	 * different Redis slots (user/lib/hot.h); 0 and 1 both mean one
	 * bucket, as before the option existed. */
	uint64_t shards;
	/* Overload shedding (rlagent --shed-at): the tenant's part, against
	 * the others', of what a listener over its mark still admits; 0 and
	 * 1 both mean 1, as before the option existed. */
	uint64_t weight;
};

/* The source prefix lengths --per-source takes unless --source-mask says. */
#define POLICY_SRC_LEN4		32
#define POLICY_SRC_LEN6		64

/* Parsers for one rlctl argument each.  0 on success; -EINVAL with a message
 * in err (naming the value and what would be accepted) otherwise.
 * policy_parse_prefixes replaces t's prefixes with a list of its own
 * (freeing the one it had: see policy_tenant_free); a bad list leaves
 * them as they were. */
int policy_parse_name(const char *s, char *out, char *err);
int policy_parse_rate(const char *s, struct policy_rate *out, char *err);
int policy_parse_burst(const char *s, uint64_t *out, char *err);
int policy_parse_prefix(const char *s, struct policy_prefix *out, char *err);
int policy_parse_prefixes(const char *list, struct policy_tenant *t, char *err);
int policy_parse_ports(const char *list, struct policy_tenant *t, char *err);
int policy_parse_action(const char *s, enum policy_action *out, char *err);
int policy_parse_fail(const char *s, enum policy_fail *out, char *err);
/* RATE[,BURST]: the burst defaults to policy_default_burst(). */
int policy_parse_rate_burst(const char *s, struct policy_rate *rate,
			    uint64_t *burst, char *err);
/* --source-mask /N4,/N6 (the slashes optional): IPv4 1-32, IPv6 1-128. */
int policy_parse_source_mask(const char *s, uint8_t *len4, uint8_t *len6,
			     char *err);
/* --max-conns: 0 (no cap) to POLICY_CONNS_MAX. */
int policy_parse_max_conns(const char *s, uint64_t *out, char *err);
const char *policy_fail_name(enum policy_fail f);
int policy_parse_direction(const char *s, enum policy_direction *out, char *err);
const char *policy_direction_name(enum policy_direction d);
int policy_parse_verify(const char *s, enum policy_verify *out, char *err);
const char *policy_verify_name(enum policy_verify v);

/* t's prefixes replaced by a copy of p[0..n) allocated for t alone (the
 * list it had freed; n 0: none).  0, or -ENOMEM with t unchanged. */
int policy_set_prefixes(struct policy_tenant *t, const struct policy_prefix *p,
			unsigned int n);
/* Frees the prefixes allocated for t (by the parsers, policy_set_prefixes
 * or policy_tenant_copy) and leaves it none; t may be all zero. */
void policy_tenant_free(struct policy_tenant *t);
/* *dst = *src with prefixes of dst's own (dst's are not freed first).
 * 0, or -ENOMEM with dst holding none. */
int policy_tenant_copy(struct policy_tenant *dst, const struct policy_tenant *src);
/* Frees the prefixes of ts[0..n), as policy_tenant_free, then ts. */
void policy_tenants_free(struct policy_tenant *ts, size_t n);

/* Replaces, in place, every byte of s that is not part of a whole UTF-8
 * character with '?': error messages quote user input, cut to a length, and
 * travel as JSON strings, which must be valid UTF-8. */
void policy_clean_utf8(char *s);

/* Canonical text forms, for output and JSON: "100/s", "192.0.2.0/24". */
void policy_format_rate(const struct policy_rate *r, char *buf, size_t len);
void policy_format_prefix(const struct policy_prefix *p, char *buf, size_t len);

/* Default burst for a rate: one second of it, at least 1. */
uint64_t policy_default_burst(const struct policy_rate *r);

/* The fleet's overshoot budget for t: t->overshoot, or by default the
 * larger of the burst and half a second of the rate.  Smaller budgets mean
 * smaller leases and more Redis calls: with hosts competing for a saturated
 * bucket, half a second keeps calls near one per ten admissions. */
uint64_t policy_overshoot_budget(const struct policy_tenant *t);

/* Nanoseconds per token (at least 1). */
uint64_t policy_interval_ns(const struct policy_rate *r);

/* The largest burst rate r may have: one that refills from empty within
 * POLICY_REFILL_MAX_NS (and at most POLICY_BURST_MAX).  1/h allows
 * 1,281,023. */
uint64_t policy_burst_max(const struct policy_rate *r);

/* The static fail share of t among `agents` live agents (0 counts as 1):
 * the kernel's interval and burst, burst at least 1, interval x burst at
 * most POLICY_REFILL_MAX_NS however many agents there are (beyond that the
 * share is one token per 146 years: none). */
void policy_fail_share(const struct policy_tenant *t, uint64_t agents,
		       uint64_t *interval_ns, uint32_t *burst);

/* The static fail share of t's connection cap among `agents` live agents
 * (0 counts as 1): max_conns / agents, at least 1; 0 without a cap. */
uint64_t policy_conn_fail_share(const struct policy_tenant *t, uint64_t agents);

/* The most connections a fleet of `agents` live agents may have in flight
 * above t's cap: each host's kernel admits no more than the cap (its
 * holding and the slots it last saw free, or its fail share once cut off),
 * so every host but one filling the same free slots at once, before any
 * sees the others' claims, is the worst case: (agents - 1) x cap.  0
 * without a cap or with one agent; UINT64_MAX (no bound) with fail allow.
 * A host whose agent is dead and no longer counted in `agents` adds what it
 * still has in flight (docs/operations.md, "The bound above the cap"). */
uint64_t policy_conn_bound(const struct policy_tenant *t, uint64_t agents);

/* Checks one tenant on its own (name, rate, burst within policy_burst_max,
 * at least one prefix, no duplicate prefix or port, a shard count its rate
 * and burst can be split into: hot_check()). */
int policy_validate(const struct policy_tenant *t, char *err);

/* Checks a whole set: names unique, no two tenants claim the same
 * (prefix, port) — for any-port rules, the same prefix with no ports — and
 * the caps add up to at most POLICY_CONNS_MAX.
 * 0; -EEXIST when the first problem is such a conflict; -EINVAL for any
 * other problem.  The first problem's message is in err. */
int policy_validate_set(const struct policy_tenant *ts, size_t n, char *err);
/* The same of the n tenants found `stride` bytes apart from `first` (the
 * policies inside larger records), without copying them out. */
int policy_validate_set_at(const struct policy_tenant *first, size_t stride,
			   size_t n, char *err);

/* Reports every problem of a set, each through fn with the index of the
 * tenant it concerns: what policy_validate finds in each tenant, then
 * duplicate names and conflicts.  Returns the number of problems (0: valid).
 * policy_validate_set is this, keeping only the first message. */
typedef void (*policy_problem_fn)(void *ctx, size_t index, const char *msg);
int policy_check_set(const struct policy_tenant *ts, size_t n,
		     policy_problem_fn fn, void *ctx);

/* A prefix of one tenant wider than, and holding, a prefix of another, in
 * the same direction, on ports both cover: not an error, but the classifier
 * gives each connection to the longest prefix that matches it, so the wider
 * tenant never sees the narrower one's addresses.  policy_find_overlaps
 * calls fn for every such pair among the n tenants `stride` bytes apart
 * from first (an array of them, or the policies inside the agent's
 * records), with the index of the wider and of the narrower tenant and a
 * message naming both tenants, both prefixes and the ports; with focus < n,
 * only for the pairs tenant focus is part of.  Returns how many pairs, or
 * -ENOMEM.  O(R log R) in the rules R; with a focus, R times focus's
 * prefixes, and the sort of those that nest with them. */
#define POLICY_OVERLAP_MAX	512
typedef void (*policy_overlap_fn)(void *ctx, size_t wide, size_t narrow,
				  const char *msg);
long policy_find_overlaps(const struct policy_tenant *first, size_t stride,
			  size_t n, size_t focus, policy_overlap_fn fn,
			  void *ctx);

/* "drop" or "rst". */
const char *policy_action_name(enum policy_action a);

/* JSON form: {"name","rate":"100/s","burst","match":[...],"ports":[...],
 * "action":"drop"|"rst","shadow":bool}, and each optional field when it is
 * not its default.  from_json validates the tenant; on success t's
 * prefixes are its own (policy_tenant_free), on failure t holds none. */
json_t *policy_tenant_to_json(const struct policy_tenant *t);

/* Whether x and y have the same JSON form (json_equal() of their
 * policy_tenant_to_json()), compared field by field without making it:
 * an apply of a set of 100,000 tenants asks it of each. */
bool policy_same(const struct policy_tenant *x, const struct policy_tenant *y);

/* Room for the longest text policy_tenant_text() writes. */
#define POLICY_TEXT_MAX		8192

/* Integer fields a tenant's text may carry besides its policy (the
 * agent's "id" and "version"); has_ids false leaves them out. */
struct policy_text_ids {
	bool has_ids;
	uint64_t id, version;
};

/* The text json_dumps(JSON_COMPACT | JSON_SORT_KEYS) makes of
 * policy_tenant_to_json(t) (with ids, if any, added), written straight into
 * buf (at least POLICY_TEXT_MAX bytes) for sets too large to build as
 * objects first.  Returns the length, the text NUL-terminated. */
size_t policy_tenant_text(const struct policy_tenant *t,
			  const struct policy_text_ids *ids, char *buf);
int policy_tenant_from_json(const json_t *j, struct policy_tenant *t, char *err);

#endif /* RL_POLICY_H */
