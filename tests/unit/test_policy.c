/* Unit test of user/lib/policy*.c: every parser's accept and reject cases, JSON round-trip, single-tenant and set validation. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "policy.h"
#include "check.h"

/* The tests' tenants keep their prefixes in rooms of POLICY_MAX_PREFIXES,
 * kept until the end: they copy tenants by value and add prefixes in
 * place. */
static struct policy_prefix **rooms;
static size_t n_rooms;

static struct policy_prefix *room(void)
{
	struct policy_prefix *r = calloc(POLICY_MAX_PREFIXES, sizeof(*r)), **grown;

	grown = realloc(rooms, (n_rooms + 1) * sizeof(*rooms));
	if (!r || !grown) {
		printf("FAIL: out of memory\n");
		exit(1);
	}
	rooms = grown;
	return rooms[n_rooms++] = r;
}

/* t's prefixes (a parser's) moved into a room. */
static void own(struct policy_tenant *t)
{
	struct policy_prefix *r = room();
	unsigned int n = t->n_match;

	memcpy(r, t->match, n * sizeof(*r));
	policy_tenant_free(t);
	t->match = r;
	t->n_match = n;
}

/* *u = *t, with prefixes of its own to change. */
static void twin(struct policy_tenant *u, const struct policy_tenant *t)
{
	*u = *t;
	u->match = room();
	memcpy(u->match, t->match, t->n_match * sizeof(*u->match));
}

static void rooms_free(void)
{
	for (size_t i = 0; i < n_rooms; i++)
		free(rooms[i]);
	free(rooms);
}

static void test_name(void)
{
	static const char *good[] = {
		"a", "Z", "0", "web", "web-1", "a.b_c-d", "9lives",
		"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk", /* 63 */
	};
	static const char *bad[] = {
		"", "-web", "_web", ".web", "we b", "web/1", "wéb", "web\n",
		"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijkl", /* 64 */
		"a:b", "a*",
	};
	char out[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int ret = policy_parse_name(good[i], out, err);

		CHECK(ret == 0 && !strcmp(out, good[i]), "name '%s' rejected: %s",
		      good[i], err);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(policy_parse_name(bad[i], out, err) == -EINVAL,
		      "name '%s' accepted", bad[i]);
		CHECK(strstr(err, "tenant name"), "name '%s': message '%s' does "
		      "not say what was wrong", bad[i], err);
	}
}

/* Error messages quote user input cut to a length: what reaches JSON must be
 * UTF-8, so broken characters become '?' and whole ones stay. */
static void test_clean_utf8(void)
{
	char cut[] = "name 'ab\xe9\x88'", lone[] = "x\x80y\xffz",
	     whole[] = "\xe9\x88\xa3 ok \xf0\x9f\x98\x80", overlong[] = "\xc0\xaf";
	char err[POLICY_ERR_MAX], name[POLICY_NAME_MAX + 1], *s;
	json_t *j;

	policy_clean_utf8(cut);
	CHECK(!strcmp(cut, "name 'ab?" "?'"), "cut character: '%s'", cut);
	policy_clean_utf8(lone);
	CHECK(!strcmp(lone, "x?y?z"), "lone bytes: '%s'", lone);
	policy_clean_utf8(whole);
	CHECK(!strcmp(whole, "\xe9\x88\xa3 ok \xf0\x9f\x98\x80"), "whole characters "
	      "changed: '%s'", whole);
	policy_clean_utf8(overlong);
	CHECK(!strcmp(overlong, "??"), "overlong form kept: '%s'", overlong);

	/* A name of 63 'e' then a CJK character: the message cuts it. */
	s = malloc(200);
	memset(s, 'e', 63);
	strcpy(s + 63, "\xe9\x88\xa3tail");
	CHECK(policy_parse_name(s, name, err) == -EINVAL, "bad name accepted");
	j = json_string(err);
	CHECK(j != NULL, "message is not UTF-8: '%s'", err);
	json_decref(j);
	free(s);
}

/* The fleet's overshoot budget: explicit, or the larger of the burst and
 * half a second of the rate; carried through JSON, rejected when bad. */
static void test_overshoot(void)
{
	struct policy_tenant t = { .name = "web", .rate = { 200, 1 }, .burst = 20 };
	char err[POLICY_ERR_MAX];
	json_t *j, *bad;

	t.match = room();
	t.n_match = 1;
	policy_parse_prefix("192.0.2.0/24", &t.match[0], err);
	CHECK(policy_overshoot_budget(&t) == 100, "default budget of 200/s burst "
	      "20: %llu", (unsigned long long)policy_overshoot_budget(&t));
	t.burst = 500;
	CHECK(policy_overshoot_budget(&t) == 500, "burst above half a second");
	t.rate = (struct policy_rate){ 3, 60 };
	t.burst = 1;
	CHECK(policy_overshoot_budget(&t) == 1, "3/m: budget %llu",
	      (unsigned long long)policy_overshoot_budget(&t));
	t.overshoot = 7;
	CHECK(policy_overshoot_budget(&t) == 7, "explicit overshoot ignored");

	j = policy_tenant_to_json(&t);
	CHECK(json_integer_value(json_object_get(j, "overshoot")) == 7,
	      "overshoot missing from JSON");
	memset(&t, 0, sizeof(t));
	CHECK(policy_tenant_from_json(j, &t, err) == 0 && t.overshoot == 7,
	      "overshoot lost in a JSON round trip: %s", err);
	policy_tenant_free(&t);
	bad = json_deep_copy(j);
	json_object_set_new(bad, "overshoot", json_integer(-1));
	CHECK(policy_tenant_from_json(bad, &t, err) == -EINVAL &&
	      strstr(err, "overshoot"), "overshoot -1 accepted");
	json_object_set_new(bad, "overshoot", json_string("lots"));
	CHECK(policy_tenant_from_json(bad, &t, err) == -EINVAL, "overshoot "
	      "\"lots\" accepted");
	json_decref(bad);
	json_decref(j);
}

static void test_rate(void)
{
	static const struct {
		const char *s;
		uint64_t count, period;
	} good[] = {
		{ "1/s", 1, 1 }, { "100/s", 100, 1 }, { "5/m", 5, 60 },
		{ "1/h", 1, 3600 }, { "1000000000/s", 1000000000, 1 },
		{ "60000000000/m", 60000000000ULL, 60 },
		{ "3600000000000/h", 3600000000000ULL, 3600 },
		{ "007/s", 7, 1 },
	};
	static const char *bad[] = {
		"0/s", "10", "10/x", "-5/s", "1e3/s", "+5/s", " 5/s", "5/s ",
		"5 /s", "/s", "5/", "5/ss", "5/S", "0x10/s", "1.5/s",
		"1000000001/s", "60000000001/m", "3600000000001/h",
		"18446744073709551616/s", "99999999999999999999999/s", "",
		"5/s/s", "10/sec",
	};
	struct policy_rate r;
	char err[POLICY_ERR_MAX];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int ret = policy_parse_rate(good[i].s, &r, err);

		CHECK(ret == 0 && r.count == good[i].count &&
		      r.period_s == good[i].period, "rate '%s' -> %d %llu/%llu",
		      good[i].s, ret, (unsigned long long)r.count,
		      (unsigned long long)r.period_s);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(policy_parse_rate(bad[i], &r, err) == -EINVAL,
		      "rate '%s' accepted", bad[i]);
		CHECK(strstr(err, "invalid rate") && strstr(err, bad[i]),
		      "rate '%s': message '%s' does not name the value", bad[i],
		      err);
	}
	policy_parse_rate("10", &r, err);
	CHECK(strstr(err, "N/s, N/m or N/h"), "message for '10' does not say "
	      "what is accepted: %s", err);
}

static void test_format_rate_and_defaults(void)
{
	struct policy_rate r;
	char buf[64];

	policy_parse_rate("250/m", &r, NULL);
	policy_format_rate(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "250/m"), "format 250/m gave %s", buf);
	CHECK(policy_default_burst(&r) == 4, "default burst of 250/m: %llu",
	      (unsigned long long)policy_default_burst(&r));
	CHECK(policy_interval_ns(&r) == 240000000ULL, "interval of 250/m: %llu",
	      (unsigned long long)policy_interval_ns(&r));

	policy_parse_rate("1/h", &r, NULL);
	CHECK(policy_default_burst(&r) == 1, "default burst of 1/h is not 1");
	CHECK(policy_interval_ns(&r) == 3600000000000ULL, "interval of 1/h");
	policy_format_rate(&r, buf, sizeof(buf));
	CHECK(!strcmp(buf, "1/h"), "format 1/h gave %s", buf);

	policy_parse_rate("100/s", &r, NULL);
	CHECK(policy_default_burst(&r) == 100, "default burst of 100/s");
	CHECK(policy_interval_ns(&r) == 10000000, "interval of 100/s");

	policy_parse_rate("1000000000/s", &r, NULL);
	CHECK(policy_default_burst(&r) == POLICY_BURST_MAX,
	      "default burst of 1e9/s not capped to the burst maximum");
	CHECK(policy_interval_ns(&r) == 1, "interval of 1e9/s");
	policy_parse_rate("3/s", &r, NULL);
	CHECK(policy_interval_ns(&r) == 333333333, "interval of 3/s");
}

static void test_burst(void)
{
	static const char *bad[] = {
		"0", "-1", "100000001", "1e3", "", "12a", " 1", "18446744073709551617",
		"0x10",
	};
	char err[POLICY_ERR_MAX];
	uint64_t b;

	CHECK(policy_parse_burst("1", &b, err) == 0 && b == 1, "burst 1");
	CHECK(policy_parse_burst("100000000", &b, err) == 0 && b == 100000000,
	      "burst 1e8");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(policy_parse_burst(bad[i], &b, err) == -EINVAL,
		      "burst '%s' accepted", bad[i]);
		CHECK(strstr(err, "100000000"), "burst '%s': no accepted range "
		      "in '%s'", bad[i], err);
	}
}

static void test_prefix(void)
{
	static const struct {
		const char *in, *canon;
		int family;
	} good[] = {
		{ "192.0.2.0/24", "192.0.2.0/24", AF_INET },
		{ "198.51.100.7", "198.51.100.7/32", AF_INET },
		{ "10.0.0.0/8", "10.0.0.0/8", AF_INET },
		{ "0.0.0.0/0", "0.0.0.0/0", AF_INET },
		{ "203.0.113.128/25", "203.0.113.128/25", AF_INET },
		{ "2001:db8::/32", "2001:db8::/32", AF_INET6 },
		{ "2001:DB8:0:0::/64", "2001:db8::/64", AF_INET6 },
		{ "::1", "::1/128", AF_INET6 },
		{ "::/0", "::/0", AF_INET6 },
		{ "2001:db8::8000:0/97", "2001:db8::8000:0/97", AF_INET6 },
		{ "::ffff:192.0.2.1", "::ffff:192.0.2.1/128", AF_INET6 },
	};
	static const char *bad[] = {
		"", "/24", "192.0.2.0/", "192.0.2.0/33", "192.0.2.0/-1",
		"192.0.2.0/2x", "192.0.2", "10.1", "256.0.0.0", "0x0a.0.0.1",
		"192.0.2.0/24/1", "2001:db8::/129", "2001:db8:::/32", "host",
		"192.0.2.0 /24", "192.0.2.0/ 24", "1.2.3.4/+8",
		"192.0.2.0/999999999999999999999",
	};
	struct policy_prefix p;
	char err[POLICY_ERR_MAX], buf[64];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		int ret = policy_parse_prefix(good[i].in, &p, err);

		CHECK(ret == 0, "prefix '%s' rejected: %s", good[i].in, err);
		if (ret)
			continue;
		policy_format_prefix(&p, buf, sizeof(buf));
		CHECK(p.family == good[i].family && !strcmp(buf, good[i].canon),
		      "prefix '%s' -> '%s', want '%s'", good[i].in, buf,
		      good[i].canon);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(policy_parse_prefix(bad[i], &p, err) == -EINVAL,
		      "prefix '%s' accepted", bad[i]);
		CHECK(strstr(err, "invalid prefix"), "prefix '%s': message '%s'",
		      bad[i], err);
	}
	CHECK(policy_parse_prefix("192.0.2.1/24", &p, err) == -EINVAL &&
	      strstr(err, "did you mean 192.0.2.0/24?"),
	      "host bits: message '%s' does not suggest the network", err);
	CHECK(policy_parse_prefix("2001:db8::1/32", &p, err) == -EINVAL &&
	      strstr(err, "did you mean 2001:db8::/32?"),
	      "IPv6 host bits: message '%s'", err);
	CHECK(policy_parse_prefix("11.0.0.0/7", &p, err) == -EINVAL &&
	      strstr(err, "did you mean 10.0.0.0/7?"), "11.0.0.0/7: %s", err);
	CHECK(policy_parse_prefix("10.0.0.0/7", &p, err) == 0, "10.0.0.0/7: %s",
	      err);
	policy_parse_prefix("192.0.2.0/33", &p, err);
	CHECK(strstr(err, "0 to 32"), "bad v4 length message: %s", err);
	policy_parse_prefix("2001:db8::/129", &p, err);
	CHECK(strstr(err, "0 to 128"), "bad v6 length message: %s", err);
}

static void test_prefix_list(void)
{
	struct policy_tenant t = { 0 };
	char err[POLICY_ERR_MAX], list[64 * 20];
	size_t off = 0;

	CHECK(policy_parse_prefixes("192.0.2.0/24,2001:db8::/32,198.51.100.7",
				    &t, err) == 0 && t.n_match == 3,
	      "three prefixes: %s", err);
	CHECK(policy_parse_prefixes("192.0.2.0/24,192.0.2.0/24", &t, err) ==
	      -EINVAL && strstr(err, "duplicate prefix 192.0.2.0/24"),
	      "duplicate prefix: %s", err);
	CHECK(t.n_match == 3, "failed parse changed the tenant");
	CHECK(policy_parse_prefixes("198.51.100.7,198.51.100.7/32", &t, err) ==
	      -EINVAL, "address and its /32 not seen as duplicates");
	CHECK(policy_parse_prefixes("192.0.2.0/24,", &t, err) == -EINVAL,
	      "trailing comma accepted");
	CHECK(policy_parse_prefixes("", &t, err) == -EINVAL, "empty list accepted");
	CHECK(policy_parse_prefixes("192.0.2.0/24,,10.0.0.0/8", &t, err) == -EINVAL,
	      "empty item accepted");
	CHECK(policy_parse_prefixes("192.0.2.0/24,bogus", &t, err) == -EINVAL &&
	      strstr(err, "'bogus'"), "bad item not named: %s", err);
	for (int i = 0; i < POLICY_MAX_PREFIXES; i++)
		off += (size_t)snprintf(list + off, sizeof(list) - off, "%s10.%d.0.0/16",
					i ? "," : "", i);
	CHECK(policy_parse_prefixes(list, &t, err) == 0 &&
	      t.n_match == POLICY_MAX_PREFIXES, "64 prefixes: %s", err);
	snprintf(list + off, sizeof(list) - off, ",11.0.0.0/8");
	CHECK(policy_parse_prefixes(list, &t, err) == -EINVAL &&
	      strstr(err, "at most 64"), "65 prefixes: %s", err);
	CHECK(t.n_match == POLICY_MAX_PREFIXES && t.match[63].addr[1] == 63,
	      "a failed parse changed the prefixes");
	policy_tenant_free(&t);
	CHECK(!t.match && !t.n_match, "freed prefixes left behind");
	policy_tenant_free(&t);
}

/* A copy has prefixes of its own; a tenant's prefixes replaced, or set to
 * none. */
static void test_prefix_copy(void)
{
	struct policy_tenant t = { 0 }, u;
	char err[POLICY_ERR_MAX];

	CHECK(policy_parse_prefixes("192.0.2.0/24,2001:db8::/32", &t, err) == 0,
	      "parse: %s", err);
	CHECK(policy_tenant_copy(&u, &t) == 0 && u.n_match == 2 &&
	      u.match != t.match && !memcmp(u.match, t.match, 2 * sizeof(*u.match)),
	      "copy");
	u.match[0].len = 25;
	CHECK(t.match[0].len == 24, "a copy's change reached the original");
	CHECK(policy_set_prefixes(&u, t.match + 1, 1) == 0 && u.n_match == 1 &&
	      u.match[0].family == AF_INET6, "set one prefix");
	CHECK(policy_set_prefixes(&u, NULL, 0) == 0 && !u.match && !u.n_match,
	      "set none");
	policy_tenant_free(&u);
	policy_tenant_free(&t);
}

static void test_ports(void)
{
	static const char *bad[] = {
		"0", "65536", "-1", "80,", ",80", "80,,443", "", "http", "80 ",
		"1e2", "80,80", "443,80,443", "99999999999999999999",
	};
	struct policy_tenant t = { 0 };
	char err[POLICY_ERR_MAX];

	CHECK(policy_parse_ports("80", &t, err) == 0 && t.n_ports == 1 &&
	      t.ports[0] == 80, "port 80");
	CHECK(policy_parse_ports("1,65535,443", &t, err) == 0 && t.n_ports == 3 &&
	      t.ports[0] == 1 && t.ports[1] == 65535 && t.ports[2] == 443,
	      "port list");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		CHECK(policy_parse_ports(bad[i], &t, err) == -EINVAL,
		      "ports '%s' accepted", bad[i]);
		CHECK(err[0], "ports '%s': no message", bad[i]);
	}
	CHECK(t.n_ports == 3, "failed parse changed the ports");
	policy_parse_ports("80,80", &t, err);
	CHECK(strstr(err, "duplicate port 80"), "duplicate message: %s", err);
	policy_parse_ports("65536", &t, err);
	CHECK(strstr(err, "'65536'") && strstr(err, "1 to 65535"),
	      "range message: %s", err);
	CHECK(policy_parse_ports("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", &t,
				 err) == 0 && t.n_ports == 16, "16 ports");
	CHECK(policy_parse_ports("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", &t,
				 err) == -EINVAL && strstr(err, "at most 16"),
	      "17 ports: %s", err);
}

static void test_action(void)
{
	enum policy_action a;
	char err[POLICY_ERR_MAX];

	CHECK(policy_parse_action("drop", &a, err) == 0 && a == POLICY_ACT_DROP,
	      "drop");
	CHECK(policy_parse_action("rst", &a, err) == 0 && a == POLICY_ACT_RST,
	      "rst");
	CHECK(policy_parse_action("reset", &a, err) == -EINVAL &&
	      strstr(err, "drop or rst"), "reset accepted or bad message");
	CHECK(policy_parse_action("DROP", &a, err) == -EINVAL, "DROP accepted");
	CHECK(policy_parse_action("", &a, err) == -EINVAL, "empty accepted");
	CHECK(!strcmp(policy_action_name(POLICY_ACT_RST), "rst") &&
	      !strcmp(policy_action_name(POLICY_ACT_DROP), "drop"), "names");
}

/* A valid tenant built through the parsers. */
static void make(struct policy_tenant *t, const char *name, const char *rate,
		 const char *match, const char *ports)
{
	char err[POLICY_ERR_MAX];

	memset(t, 0, sizeof(*t));
	if (policy_parse_name(name, t->name, err) ||
	    policy_parse_rate(rate, &t->rate, err) ||
	    policy_parse_prefixes(match, t, err) ||
	    (ports && policy_parse_ports(ports, t, err))) {
		printf("FAIL: fixture %s: %s\n", name, err);
		exit(1);
	}
	own(t);
	t->burst = policy_default_burst(&t->rate);
}

static void test_validate(void)
{
	struct policy_tenant t, u;
	char err[POLICY_ERR_MAX];

	make(&t, "web", "100/s", "192.0.2.0/24", "80,443");
	CHECK(policy_validate(&t, err) == 0, "valid tenant rejected: %s", err);

	u = t; u.burst = 0;
	CHECK(policy_validate(&u, err) == -EINVAL, "burst 0 accepted");
	u = t; u.burst = POLICY_BURST_MAX + 1;
	CHECK(policy_validate(&u, err) == -EINVAL, "burst 1e8+1 accepted");
	u = t; u.rate.count = 0;
	CHECK(policy_validate(&u, err) == -EINVAL, "rate 0 accepted");
	u = t; u.rate.period_s = 2;
	CHECK(policy_validate(&u, err) == -EINVAL, "period 2 accepted");
	u = t; u.rate.count = POLICY_RATE_MAX + 1;
	CHECK(policy_validate(&u, err) == -EINVAL, "rate above max accepted");
	u = t; u.n_match = 0;
	CHECK(policy_validate(&u, err) == -EINVAL && strstr(err, "prefix"),
	      "no prefix accepted");
	twin(&u, &t); u.match[0].addr[3] = 1;
	CHECK(policy_validate(&u, err) == -EINVAL, "host bits accepted");
	twin(&u, &t); u.match[0].len = 33;
	CHECK(policy_validate(&u, err) == -EINVAL, "/33 accepted");
	twin(&u, &t); u.match[0].family = 99;
	CHECK(policy_validate(&u, err) == -EINVAL, "family 99 accepted");
	twin(&u, &t); u.match[0].addr[8] = 1;
	CHECK(policy_validate(&u, err) == -EINVAL, "IPv4 junk past 4 bytes");
	twin(&u, &t); u.match[1] = u.match[0]; u.n_match = 2;
	CHECK(policy_validate(&u, err) == -EINVAL && strstr(err, "duplicate"),
	      "duplicate prefix accepted");
	u = t; u.ports[1] = 80;
	CHECK(policy_validate(&u, err) == -EINVAL && strstr(err, "duplicate"),
	      "duplicate port accepted");
	u = t; u.ports[0] = 0;
	CHECK(policy_validate(&u, err) == -EINVAL, "port 0 accepted");
	u = t; u.n_ports = POLICY_MAX_PORTS + 1;
	CHECK(policy_validate(&u, err) == -EINVAL, "17 ports accepted");
	u = t; u.action = 7;
	CHECK(policy_validate(&u, err) == -EINVAL, "action 7 accepted");
	u = t; strcpy(u.name, "-x");
	CHECK(policy_validate(&u, err) == -EINVAL, "bad name accepted");
	u = t; memset(u.name, 'a', sizeof(u.name));
	CHECK(policy_validate(&u, err) == -EINVAL, "unterminated name accepted");
}

#define RL_TEST_PROBLEMS	4096

struct collected {
	int n;
	size_t index[RL_TEST_PROBLEMS];
	char msg[RL_TEST_PROBLEMS][POLICY_ERR_MAX];
};

static void collect(void *ctx, size_t index, const char *msg)
{
	struct collected *c = ctx;

	if (c->n < RL_TEST_PROBLEMS) {
		c->index[c->n] = index;
		snprintf(c->msg[c->n], POLICY_ERR_MAX, "%s", msg);
	}
	c->n++;
}

/* Connection caps: parsed from 0 (none) to POLICY_CONNS_MAX, carried by
 * JSON only when set, and all tenants' caps together fit one host's table. */
static void test_max_conns(void)
{
	struct policy_tenant ts[3];
	char err[POLICY_ERR_MAX];
	uint64_t v = 7;
	json_t *j, *bad;

	CHECK(policy_parse_max_conns("0", &v, err) == 0 && v == 0, "0 refused");
	CHECK(policy_parse_max_conns("131072", &v, err) == 0 && v == 131072,
	      "131072 refused: %s", err);
	CHECK(policy_parse_max_conns("131073", &v, err) == -EINVAL &&
	      strstr(err, "'131073'") && strstr(err, "0 (no cap) to 131072"),
	      "131073 accepted or badly worded: %s", err);
	CHECK(policy_parse_max_conns("-1", &v, err) == -EINVAL, "-1 accepted");
	CHECK(policy_parse_max_conns("ten", &v, err) == -EINVAL, "ten accepted");

	make(&ts[0], "a", "10/s", "192.0.2.0/24", NULL);
	j = policy_tenant_to_json(&ts[0]);
	CHECK(!json_object_get(j, "max_conns"), "no cap written as max_conns");
	json_decref(j);
	ts[0].max_conns = 50;
	j = policy_tenant_to_json(&ts[0]);
	memset(&ts[1], 0, sizeof(ts[1]));
	CHECK(policy_tenant_from_json(j, &ts[1], err) == 0 &&
	      ts[1].max_conns == 50, "max_conns lost in a JSON round trip: %s",
	      err);
	policy_tenant_free(&ts[1]);
	bad = json_deep_copy(j);
	json_object_set_new(bad, "max_conns", json_integer(POLICY_CONNS_MAX + 1));
	CHECK(policy_tenant_from_json(bad, &ts[1], err) == -EINVAL &&
	      strstr(err, "max_conns"), "max_conns past the table accepted");
	json_object_set_new(bad, "max_conns", json_string("50"));
	CHECK(policy_tenant_from_json(bad, &ts[1], err) == -EINVAL,
	      "max_conns as a string accepted");
	/* what tenant.get adds is read-only, not refused */
	json_object_set_new(j, "conns", json_integer(12));
	CHECK(policy_tenant_from_json(j, &ts[1], err) == 0, "conns refused: %s",
	      err);
	policy_tenant_free(&ts[1]);
	json_decref(bad);
	json_decref(j);

	/* a cap alone, no rate: as `rlctl tenant set --max-conns` makes it */
	j = json_pack("{s:s,s:[s],s:i}", "name", "capped", "match",
		      "192.0.2.0/24", "max_conns", 40);
	CHECK(policy_tenant_from_json(j, &ts[1], err) == 0 &&
	      ts[1].rate.count == POLICY_RATE_MAX && ts[1].rate.period_s == 1 &&
	      ts[1].burst == POLICY_BURST_MAX && ts[1].max_conns == 40,
	      "a cap without a rate refused or not as tenant set: %s", err);
	policy_tenant_free(&ts[1]);
	json_object_set_new(j, "burst", json_integer(5));
	CHECK(policy_tenant_from_json(j, &ts[1], err) == 0 && ts[1].burst == 5,
	      "a cap without a rate, with a burst: %s", err);
	policy_tenant_free(&ts[1]);
	json_object_del(j, "max_conns");
	CHECK(policy_tenant_from_json(j, &ts[1], err) == -EINVAL &&
	      strstr(err, "'rate' is missing") && strstr(err, "max_conns"),
	      "no rate and no cap accepted or badly worded: %s", err);
	json_object_set_new(j, "max_conns", json_integer(0));
	CHECK(policy_tenant_from_json(j, &ts[1], err) == -EINVAL,
	      "no rate and a cap of 0 accepted");
	json_decref(j);

	make(&ts[0], "a", "10/s", "192.0.2.0/24", NULL);
	make(&ts[1], "b", "10/s", "198.51.100.0/24", NULL);
	make(&ts[2], "c", "10/s", "203.0.113.0/24", NULL);
	ts[0].max_conns = 100000;
	ts[1].max_conns = 31072;
	CHECK(policy_validate_set(ts, 3, err) == 0, "caps of 131072 in all "
	      "refused: %s", err);
	ts[2].max_conns = 1;
	CHECK(policy_validate_set(ts, 3, err) == -EINVAL && strstr(err, "'c'") &&
	      strstr(err, "131073"), "caps of 131073 in all accepted: %s", err);
	ts[2].max_conns = 1;
	ts[2].direction = POLICY_DIR_OUT;
	CHECK(policy_validate(&ts[2], err) == -EINVAL && strstr(err, "outbound"),
	      "a cap on an outbound tenant accepted: %s", err);
	ts[2].direction = POLICY_DIR_IN;
	ts[2].max_conns = POLICY_CONNS_MAX + 1;
	CHECK(policy_validate(&ts[2], err) == -EINVAL && strstr(err, "max-conns"),
	      "a cap past the table accepted alone");
}

/* verify: parsed as none, syncookie or syncookie-answer, carried by JSON
 * only when set, refused for outbound tenants. */
static void test_verify(void)
{
	struct policy_tenant t, back;
	enum policy_verify v = POLICY_VERIFY_NONE;
	char err[POLICY_ERR_MAX];
	json_t *j;

	CHECK(policy_parse_verify("syncookie", &v, err) == 0 &&
	      v == POLICY_VERIFY_SYNCOOKIE, "syncookie refused: %s", err);
	CHECK(policy_parse_verify("syncookie-answer", &v, err) == 0 &&
	      v == POLICY_VERIFY_ANSWER, "syncookie-answer refused: %s", err);
	CHECK(policy_parse_verify("none", &v, err) == 0 &&
	      v == POLICY_VERIFY_NONE, "none refused: %s", err);
	CHECK(policy_parse_verify("cookie", &v, err) == -EINVAL &&
	      strstr(err, "'cookie'") && strstr(err, "syncookie"),
	      "cookie accepted or badly worded: %s", err);

	make(&t, "a", "10/s", "192.0.2.0/24", NULL);
	j = policy_tenant_to_json(&t);
	CHECK(!json_object_get(j, "verify"), "verify none written");
	json_decref(j);
	t.verify = POLICY_VERIFY_SYNCOOKIE;
	j = policy_tenant_to_json(&t);
	CHECK(!strcmp(json_string_value(json_object_get(j, "verify")),
		      "syncookie"), "verify syncookie not written");
	memset(&back, 0, sizeof(back));
	CHECK(policy_tenant_from_json(j, &back, err) == 0 &&
	      back.verify == POLICY_VERIFY_SYNCOOKIE,
	      "verify lost in a JSON round trip: %s", err);
	policy_tenant_free(&back);
	json_decref(j);
	t.verify = POLICY_VERIFY_ANSWER;
	j = policy_tenant_to_json(&t);
	CHECK(!strcmp(json_string_value(json_object_get(j, "verify")),
		      "syncookie-answer"), "verify syncookie-answer not written");
	memset(&back, 0, sizeof(back));
	CHECK(policy_tenant_from_json(j, &back, err) == 0 &&
	      back.verify == POLICY_VERIFY_ANSWER,
	      "verify syncookie-answer lost in a JSON round trip: %s", err);
	policy_tenant_free(&back);
	json_object_set_new(j, "verify", json_string("always"));
	CHECK(policy_tenant_from_json(j, &back, err) == -EINVAL &&
	      strstr(err, "always"), "verify 'always' accepted: %s", err);
	json_decref(j);
	t.direction = POLICY_DIR_OUT;
	CHECK(policy_validate(&t, err) == -EINVAL && strstr(err, "outbound"),
	      "verify on an outbound tenant accepted: %s", err);
}

/* A count that 0 and 1 both leave at its default (--shards, --weight),
 * at *f of t: carried by JSON only when above 1, 3 round trips, and JSON's
 * max + 1 and 0 are refused naming the field and the range. */
static void check_count_above_one(struct policy_tenant *t, uint64_t *f,
				  const char *key, uint64_t max,
				  const char *range)
{
	size_t off = (size_t)((char *)f - (char *)t);
	struct policy_tenant back;
	char err[POLICY_ERR_MAX], quoted[32];
	json_t *j, *bad;
	uint64_t got;

	snprintf(quoted, sizeof(quoted), "'%s'", key);
	*f = 1;
	j = policy_tenant_to_json(t);
	CHECK(!json_object_get(j, key), "%s 1 written", key);
	json_decref(j);
	*f = 3;
	CHECK(policy_validate(t, err) == 0, "%s 3 refused: %s", key, err);
	j = policy_tenant_to_json(t);
	CHECK(policy_tenant_from_json(j, &back, err) == 0, "%s 3: %s", key, err);
	memcpy(&got, (char *)&back + off, sizeof(got));
	CHECK(got == 3, "%s lost in a JSON round trip: %llu", key,
	      (unsigned long long)got);
	policy_tenant_free(&back);
	bad = json_deep_copy(j);
	json_object_set_new(bad, key, json_integer((json_int_t)max + 1));
	CHECK(policy_tenant_from_json(bad, &back, err) == -EINVAL &&
	      strstr(err, quoted) && strstr(err, range),
	      "%s %llu accepted from JSON: %s", key, (unsigned long long)max + 1,
	      err);
	json_object_set_new(bad, key, json_integer(0));
	CHECK(policy_tenant_from_json(bad, &back, err) == -EINVAL,
	      "%s 0 accepted from JSON", key);
	json_decref(bad);
	json_decref(j);
}

/* Hot tenants: --shards from 1 to POLICY_SHARDS_MAX, and never more than
 * the rate count or the burst. */
static void test_shards(void)
{
	struct policy_tenant t;
	char err[POLICY_ERR_MAX];

	make(&t, "hot", "100/s", "192.0.2.0/24", NULL);
	check_count_above_one(&t, &t.shards, "shards", POLICY_SHARDS_MAX, "1 to 16");
	t.shards = POLICY_SHARDS_MAX + 1;
	CHECK(policy_validate(&t, err) == -EINVAL && strstr(err, "'17'"),
	      "17 shards accepted: %s", err);
	t.shards = 3;
	t.burst = 2;
	CHECK(policy_validate(&t, err) == -EINVAL && strstr(err, "burst 2") &&
	      strstr(err, "'hot'"), "3 shards of a burst of 2 accepted: %s", err);
}

/* Overload shedding's --weight, from 1 to POLICY_WEIGHT_MAX. */
static void test_weight(void)
{
	struct policy_tenant t;
	char err[POLICY_ERR_MAX];

	make(&t, "gold", "100/s", "192.0.2.0/24", NULL);
	check_count_above_one(&t, &t.weight, "weight", POLICY_WEIGHT_MAX,
			      "1 to 1000");
	t.weight = POLICY_WEIGHT_MAX + 1;
	CHECK(policy_validate(&t, err) == -EINVAL && strstr(err, "weight 1001") &&
	      strstr(err, "'gold'"), "weight 1001 accepted: %s", err);
}

static void test_set(void)
{
	struct policy_tenant ts[4];
	static struct collected c;
	char err[POLICY_ERR_MAX];

	make(&ts[0], "a", "10/s", "192.0.2.0/24", NULL);
	make(&ts[1], "b", "10/s", "192.0.2.0/25", NULL);
	CHECK(policy_validate_set(ts, 2, err) == 0,
	      "different prefix lengths conflict: %s", err);

	make(&ts[1], "b", "10/s", "192.0.2.0/24", "80");
	CHECK(policy_validate_set(ts, 2, err) == 0,
	      "any-port and a port rule on one prefix conflict: %s", err);

	make(&ts[0], "a", "10/s", "192.0.2.0/24", "443,80");
	CHECK(policy_validate_set(ts, 2, err) == -EEXIST &&
	      strstr(err, "'a'") && strstr(err, "'b'") &&
	      strstr(err, "192.0.2.0/24 port 80"),
	      "overlapping ports not a conflict: %s", err);

	make(&ts[0], "a", "10/s", "192.0.2.0/24", "443");
	CHECK(policy_validate_set(ts, 2, err) == 0,
	      "disjoint ports conflict: %s", err);

	make(&ts[0], "a", "10/s", "10.0.0.0/8,192.0.2.0/24", NULL);
	make(&ts[1], "b", "10/s", "2001:db8::/32,192.0.2.0/24", NULL);
	CHECK(policy_validate_set(ts, 2, err) == -EEXIST &&
	      strstr(err, "any port"), "any-port vs any-port: %s", err);

	make(&ts[1], "b", "10/s", "2001:db8::/32", NULL);
	make(&ts[2], "a", "10/s", "198.51.100.0/24", NULL);
	CHECK(policy_validate_set(ts, 3, err) == -EINVAL &&
	      strstr(err, "duplicate tenant name 'a'"), "duplicate name: %s", err);

	/* every problem is reported, each with its tenant's index */
	memset(&c, 0, sizeof(c));
	make(&ts[0], "a", "10/s", "192.0.2.0/24", NULL);
	make(&ts[1], "b", "10/s", "192.0.2.0/24", NULL);
	make(&ts[2], "a", "10/s", "198.51.100.0/24", NULL);
	make(&ts[3], "d", "10/s", "203.0.113.0/24", NULL);
	ts[3].burst = 0;
	CHECK(policy_check_set(ts, 4, collect, &c) == 3 && c.n == 3,
	      "want 3 problems, got %d", c.n);
	CHECK(c.n >= 3 && c.index[0] == 3 && c.index[1] == 1 && c.index[2] == 2,
	      "problem indexes %zu %zu %zu", c.index[0], c.index[1], c.index[2]);
	CHECK(policy_validate_set(ts, 0, err) == 0, "empty set invalid");
}

/* The policies inside larger records, checked where they lie: the same
 * answers as the array of them. */
static void test_set_at(void)
{
	struct rec {
		uint32_t slot;
		struct policy_tenant pol;
		char tail[40];
	} rs[3];
	struct policy_tenant flat[3];
	char err[POLICY_ERR_MAX], want[POLICY_ERR_MAX];

	memset(rs, 0xa5, sizeof(rs));
	make(&rs[0].pol, "a", "10/s", "192.0.2.0/24", NULL);
	make(&rs[1].pol, "b", "10/s", "198.51.100.0/24", "80");
	make(&rs[2].pol, "c", "10/s", "203.0.113.0/24", NULL);
	CHECK(policy_validate_set_at(&rs->pol, sizeof(*rs), 3, err) == 0,
	      "a valid set refused: %s", err);
	make(&rs[2].pol, "c", "10/s", "198.51.100.0/24", "80,443");
	for (size_t i = 0; i < 3; i++)
		flat[i] = rs[i].pol;
	CHECK(policy_validate_set(flat, 3, want) == -EEXIST, "no conflict in "
	      "the array");
	CHECK(policy_validate_set_at(&rs->pol, sizeof(*rs), 3, err) == -EEXIST &&
	      strcmp(err, want) == 0, "records: '%s', the array: '%s'", err, want);
	make(&rs[2].pol, "a", "10/s", "203.0.113.0/24", NULL);
	CHECK(policy_validate_set_at(&rs->pol, sizeof(*rs), 3, err) == -EINVAL &&
	      strstr(err, "duplicate tenant name 'a'"), "duplicate name in "
	      "records: %s", err);
	CHECK(policy_validate_set_at(&rs->pol, sizeof(*rs), 2, err) == 0,
	      "the first two records refused: %s", err);
}

#define RL_TEST_TENANTS	4096

/* The definition policy_check_set must agree with: every pair of tenants
 * compared, names first, then each prefix of the later one against each of
 * the earlier one's, with the first of the earlier one's ports that both
 * have. */
static void reference_check(const struct policy_tenant *ts, size_t n,
			    struct collected *out)
{
	char err[POLICY_ERR_MAX], pb[64];

	for (size_t i = 0; i < n; i++)
		if (policy_validate(&ts[i], err) < 0)
			collect(out, i, err);
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < i; j++) {
			const struct policy_tenant *a = &ts[j], *b = &ts[i];

			if (!strcmp(a->name, b->name)) {
				snprintf(err, sizeof(err), "duplicate tenant name "
					 "'%.63s' (also tenant #%zu)", b->name, j);
				collect(out, i, err);
				continue;
			}
			for (unsigned int x = 0; x < b->n_match; x++) {
				for (unsigned int y = 0; y < a->n_match; y++) {
					int port = -1;

					if (a->match[y].family != b->match[x].family ||
					    a->match[y].len != b->match[x].len ||
					    memcmp(a->match[y].addr, b->match[x].addr, 16))
						continue;
					if (!a->n_ports || !b->n_ports)
						port = !a->n_ports && !b->n_ports ? 0 : -1;
					for (unsigned int p = 0; p < a->n_ports && port < 0; p++)
						for (unsigned int q = 0; q < b->n_ports; q++)
							if (a->ports[p] == b->ports[q]) {
								port = a->ports[p];
								break;
							}
					if (port < 0)
						continue;
					policy_format_prefix(&b->match[x], pb, sizeof(pb));
					if (port)
						snprintf(err, sizeof(err), "conflict: tenants "
							 "'%.63s' and '%.63s' both claim %s port %d",
							 a->name, b->name, pb, port);
					else
						snprintf(err, sizeof(err), "conflict: tenants "
							 "'%.63s' and '%.63s' both claim %s on any port",
							 a->name, b->name, pb);
					collect(out, i, err);
				}
			}
		}
	}
}

/* Random sets drawn from few names, prefixes and ports, so that names,
 * prefixes and ports collide often: policy_check_set reports exactly the
 * problems, in the order, that comparing every pair does. */
static void test_set_against_reference(void)
{
	static struct collected want, got;
	static struct policy_tenant ts[40];
	static const char *const pfx[] = {
		"192.0.2.0/24", "192.0.2.0/25", "198.51.100.0/24", "10.0.0.0/8",
		"2001:db8::/32", "2001:db8::/48", "0.0.0.0/0", "::/0",
	};
	unsigned int seed = 12345;
	int total = 0;

	for (int round = 0; round < 300; round++) {
		size_t n = 1 + rand_r(&seed) % 40;

		for (size_t i = 0; i < n; i++) {
			struct policy_tenant *t = &ts[i];
			char name[24];

			memset(t, 0, sizeof(*t));
			snprintf(name, sizeof(name), "t%d", rand_r(&seed) % 30);
			make(t, name, "10/s", pfx[rand_r(&seed) % 8], NULL);
			for (unsigned int k = 0; k < 8; k++)
				if (rand_r(&seed) % 3 == 0 &&
				    policy_parse_prefix(pfx[k], &t->match[t->n_match],
							NULL) == 0) {
					bool dup = false;

					for (unsigned int m = 0; m < t->n_match; m++)
						dup |= !memcmp(&t->match[m],
							       &t->match[t->n_match],
							       sizeof(t->match[m]));
					t->n_match += !dup;
				}
			for (unsigned int k = 0; k < 5; k++)
				if (rand_r(&seed) % 2 == 0)
					t->ports[t->n_ports++] = (uint16_t)(80 + k);
			if (rand_r(&seed) % 50 == 0)
				t->burst = 0;	/* a problem of the tenant alone */
		}
		want.n = got.n = 0;
		reference_check(ts, n, &want);
		total += want.n;
		CHECK(policy_check_set(ts, n, collect, &got) == got.n,
		      "round %d: the count returned differs from the reports",
		      round);
		CHECK(got.n == want.n, "round %d: %d problems, want %d", round,
		      got.n, want.n);
		for (int k = 0; k < got.n && k < want.n && k < RL_TEST_PROBLEMS; k++) {
			if (got.index[k] == want.index[k] &&
			    !strcmp(got.msg[k], want.msg[k]))
				continue;
			CHECK(0, "round %d problem %d: #%zu '%s', want #%zu '%s'",
			      round, k, got.index[k], got.msg[k], want.index[k],
			      want.msg[k]);
			break;
		}
	}
	/* the draws do collide: the comparison is not of empty lists */
	CHECK(total > 1000, "only %d problems in 300 random sets", total);
}

/* What policy_find_overlaps reports: how many, the first few messages,
 * and a sum over (wide, narrow) pairs and messages that any other pairs
 * would change. */
struct overlaps {
	long n;
	uint64_t sum;
	char msg[4][POLICY_OVERLAP_MAX];
};

static uint64_t overlap_key(size_t wide, size_t narrow, const char *msg)
{
	uint64_t h = 1469598103934665603ULL ^ (wide * 1000003 + narrow);

	for (; *msg; msg++)
		h = (h ^ (unsigned char)*msg) * 1099511628211ULL;
	return h;
}

static void on_overlap(void *ctx, size_t wide, size_t narrow, const char *msg)
{
	struct overlaps *o = ctx;

	if (o->n < 4)
		snprintf(o->msg[o->n], POLICY_OVERLAP_MAX, "%s", msg);
	o->n++;
	o->sum += overlap_key(wide, narrow, msg);
}

static struct overlaps overlaps_of(const struct policy_tenant *ts, size_t n,
				   size_t focus)
{
	struct overlaps o = { 0 };
	long r = policy_find_overlaps(ts, sizeof(*ts), n, focus, on_overlap, &o);

	CHECK(r == o.n, "returned %ld, reported %ld", r, o.n);
	return o;
}

/* A wider prefix holding another tenant's is found, named with both
 * tenants, both prefixes and the ports the wider one loses; equal
 * prefixes (conflicts or a port rule beside an any-port one), one tenant's
 * own nested prefixes, port lists that do not meet, another direction or
 * family are not overlaps. */
static void test_overlaps(void)
{
	struct policy_tenant ts[6];
	struct overlaps o;

	make(&ts[0], "all", "10/s", "192.0.2.0/24", NULL);
	make(&ts[1], "web", "10/s", "192.0.2.16/28", NULL);
	o = overlaps_of(ts, 2, SIZE_MAX);
	CHECK(o.n == 1 && !strcmp(o.msg[0], "overlap: tenant 'all' claims "
				 "192.0.2.0/24, but connections from 192.0.2.16/28 "
				 "go to tenant 'web' (the longest prefix wins)"),
	      "nested any-port: %ld '%s'", o.n, o.msg[0]);
	/* the same the other way round in the set */
	ts[2] = ts[0];
	o = overlaps_of(ts + 1, 2, SIZE_MAX);
	CHECK(o.n == 1 && strstr(o.msg[0], "tenant 'all' claims 192.0.2.0/24"),
	      "narrow first: %ld '%s'", o.n, o.msg[0]);

	/* ports: the narrow one's, the wide one's, or those both name */
	make(&ts[1], "web", "10/s", "192.0.2.16/28", "80,443");
	o = overlaps_of(ts, 2, SIZE_MAX);
	CHECK(o.n == 1 && strstr(o.msg[0], "from 192.0.2.16/28 on ports 80,443 go "
				 "to tenant 'web'"), "narrow ports: '%s'", o.msg[0]);
	make(&ts[0], "all", "10/s", "192.0.2.0/24", "22,443");
	o = overlaps_of(ts, 2, SIZE_MAX);
	CHECK(o.n == 1 && strstr(o.msg[0], "on port 443 go"), "both: '%s'",
	      o.msg[0]);
	make(&ts[0], "all", "10/s", "192.0.2.0/24", "22");
	o = overlaps_of(ts, 2, SIZE_MAX);
	CHECK(o.n == 0, "ports that do not meet: %ld '%s'", o.n, o.msg[0]);

	/* equal prefixes, a tenant's own nesting, other families, another
	 * direction */
	make(&ts[0], "all", "10/s", "192.0.2.0/24,2001:db8::/32", NULL);
	make(&ts[1], "web", "10/s", "192.0.2.0/24,198.51.100.0/24", "80");
	make(&ts[2], "v6", "10/s", "2001:db8:1::/48,2001:db8:1:2::/64", NULL);
	ts[2].direction = POLICY_DIR_OUT;
	make(&ts[3], "v4", "10/s", "0.0.0.0/0", NULL);
	ts[3].direction = POLICY_DIR_OUT;
	o = overlaps_of(ts, 4, SIZE_MAX);
	CHECK(o.n == 0, "none expected: %ld '%s'", o.n, o.msg[0]);
	/* outbound: destinations */
	make(&ts[4], "db", "10/s", "192.0.2.7", "5432");
	ts[4].direction = POLICY_DIR_OUT;
	o = overlaps_of(ts, 5, SIZE_MAX);
	CHECK(o.n == 1 && !strcmp(o.msg[0], "overlap: tenant 'v4' claims 0.0.0.0/0, "
				 "but connections to 192.0.2.7/32 on port 5432 go "
				 "to tenant 'db' (the longest prefix wins)"),
	      "outbound: %ld '%s'", o.n, o.msg[0]);

	/* a chain: each wider one loses to each narrower one; a focus sees
	 * only its own pairs */
	make(&ts[0], "a", "10/s", "10.0.0.0/8", NULL);
	make(&ts[1], "b", "10/s", "10.1.0.0/16", NULL);
	make(&ts[2], "c", "10/s", "10.1.2.0/24", NULL);
	make(&ts[3], "d", "10/s", "10.2.0.0/16", NULL);
	make(&ts[4], "e", "10/s", "11.0.0.0/8", NULL);
	o = overlaps_of(ts, 5, SIZE_MAX);
	CHECK(o.n == 4, "chain: %ld pairs, want a>b a>c b>c a>d", o.n);
	o = overlaps_of(ts, 5, 1);
	CHECK(o.n == 2, "focus on b: %ld pairs, want a>b b>c", o.n);
	o = overlaps_of(ts, 5, 4);
	CHECK(o.n == 0, "focus on e: %ld pairs", o.n);
	o = overlaps_of(ts, 0, SIZE_MAX);
	CHECK(o.n == 0, "no tenants: %ld", o.n);
}

/* The definition: every pair of tenants, every prefix of one against
 * every prefix of the other. */
static struct overlaps overlaps_reference(const struct policy_tenant *ts,
					  size_t n, size_t focus)
{
	struct overlaps o = { 0 };
	char msg[POLICY_OVERLAP_MAX];

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			const struct policy_tenant *w = &ts[i], *t = &ts[j];

			if (i == j || (focus < n && i != focus && j != focus) ||
			    w->direction != t->direction)
				continue;
			for (unsigned int x = 0; x < w->n_match; x++)
				for (unsigned int y = 0; y < t->n_match; y++) {
					struct policy_tenant one = *w, two = *t;
					struct overlaps pair = { 0 };
					const struct policy_prefix *p = &w->match[x],
								   *q = &t->match[y];
					uint8_t a[16];

					if (p->family != q->family || p->len >= q->len)
						continue;
					memcpy(a, q->addr, 16);
					for (unsigned int b = p->len; b < 128; b++)
						a[b / 8] &= (uint8_t)~(0x80 >> (b % 8));
					if (memcmp(a, p->addr, 16))
						continue;
					/* the message of this pair alone */
					one.match = (struct policy_prefix *)p;
					one.n_match = 1;
					two.match = (struct policy_prefix *)q;
					two.n_match = 1;
					struct policy_tenant two_set[2] = { one, two };

					policy_find_overlaps(two_set, sizeof(*two_set), 2,
							     SIZE_MAX, on_overlap, &pair);
					if (pair.n != 1) {
						/* ports that do not meet */
						bool meet = !w->n_ports || !t->n_ports;

						for (unsigned int k = 0; k < w->n_ports; k++)
							for (unsigned int l = 0; l < t->n_ports; l++)
								meet |= w->ports[k] == t->ports[l];
						CHECK(!meet, "pair %zu/%zu not found alone",
						      i, j);
						continue;
					}
					snprintf(msg, sizeof(msg), "%s", pair.msg[0]);
					o.n++;
					o.sum += overlap_key(i, j, msg);
				}
		}
	return o;
}

/* Random sets of nested prefixes and ports in both directions: every pair
 * found as comparing every pair finds it, with and without a focus. */
static void test_overlaps_against_reference(void)
{
	static const char *const pfx[] = {
		"0.0.0.0/0", "10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24",
		"10.1.2.3", "10.2.0.0/16", "11.0.0.0/8", "::/0", "2001:db8::/32",
		"2001:db8:1::/48", "2001:db8:2::/48",
	};
	enum { NP = sizeof(pfx) / sizeof(pfx[0]) };
	struct policy_tenant ts[12];
	unsigned int seed = 4242;
	long total = 0;

	for (int round = 0; round < 300; round++) {
		size_t n = 1 + rand_r(&seed) % 12;

		for (size_t i = 0; i < n; i++) {
			struct policy_tenant *t = &ts[i];
			char name[24];

			snprintf(name, sizeof(name), "t%zu", i);
			make(t, name, "10/s", pfx[rand_r(&seed) % NP], NULL);
			for (unsigned int k = 0; k < NP; k++) {
				bool dup = false;

				if (rand_r(&seed) % 4 ||
				    policy_parse_prefix(pfx[k], &t->match[t->n_match],
							NULL))
					continue;
				for (unsigned int m = 0; m < t->n_match; m++)
					dup |= !memcmp(&t->match[m],
						       &t->match[t->n_match],
						       sizeof(t->match[m]));
				t->n_match += !dup;
			}
			for (unsigned int k = 0; k < 3; k++)
				if (rand_r(&seed) % 3 == 0)
					t->ports[t->n_ports++] = (uint16_t)(80 + k);
			t->direction = rand_r(&seed) % 5 == 0 ? POLICY_DIR_OUT :
				       POLICY_DIR_IN;
		}
		for (size_t focus = SIZE_MAX, k = 0; k <= n; focus = k++) {
			struct overlaps got = overlaps_of(ts, n, focus);
			struct overlaps want = overlaps_reference(ts, n, focus);

			CHECK(got.n == want.n && got.sum == want.sum,
			      "round %d focus %zu: %ld pairs, want %ld%s", round,
			      focus, got.n, want.n, got.n == want.n ?
			      " (other pairs or messages)" : "");
			total += focus == SIZE_MAX ? got.n : 0;
		}
	}
	CHECK(total > 1000, "only %ld overlaps in 300 random sets", total);
}

/* 4,096 tenants of 64 prefixes, one conflict at the end: found (a check
 * comparing every pair would take minutes here). */
static void test_set_large(void)
{
	struct policy_tenant *ts = calloc(RL_TEST_TENANTS, sizeof(*ts));
	static struct collected c;

	if (!ts) {
		CHECK(0, "out of memory");
		return;
	}
	for (size_t i = 0; i < RL_TEST_TENANTS; i++) {
		snprintf(ts[i].name, sizeof(ts[i].name), "t%zu", i);
		ts[i].match = room();
		ts[i].rate = (struct policy_rate){ 100, 1 };
		ts[i].burst = 100;
		for (unsigned int x = 0; x < POLICY_MAX_PREFIXES; x++) {
			size_t k = i * POLICY_MAX_PREFIXES + x;
			struct policy_prefix *p = &ts[i].match[x];

			p->family = AF_INET;
			p->len = 24;
			p->addr[0] = (uint8_t)(10 + (k >> 16));
			p->addr[1] = (uint8_t)(k >> 8);
			p->addr[2] = (uint8_t)k;
		}
		ts[i].n_match = POLICY_MAX_PREFIXES;
	}
	memset(&c, 0, sizeof(c));
	CHECK(policy_check_set(ts, RL_TEST_TENANTS, collect, &c) == 0,
	      "a valid large set has %d problems: %s", c.n, c.msg[0]);
	ts[RL_TEST_TENANTS - 1].match[7] = ts[3].match[40];
	memset(&c, 0, sizeof(c));
	CHECK(policy_check_set(ts, RL_TEST_TENANTS, collect, &c) == 1 &&
	      c.index[0] == RL_TEST_TENANTS - 1 &&
	      strstr(c.msg[0], "'t3' and 't4095' both claim 10.0.0.0/24") == NULL &&
	      strstr(c.msg[0], "'t3' and 't4095' both claim 10.0.0.232/24") == NULL &&
	      strstr(c.msg[0], "'t3' and 't4095'"),
	      "the conflict in a large set: %d problems, '%s'", c.n, c.msg[0]);
	free(ts);
}

/* Bursts whose bucket would wrap the kernel's 64-bit clock are refused,
 * naming the burst and the largest one the rate allows; the edges of every
 * period are accepted, and every product the kernel makes stays in range. */
static void test_burst_overflow(void)
{
	static const struct {
		const char *rate;
		uint64_t burst;
		bool ok;
	} cases[] = {
		{ "1/h", 1281023, true },	/* 2^62 / 3.6e12 */
		{ "1/h", 1281024, false },
		{ "1/h", 5124096, false },	/* burst x interval wraps 2^64 */
		{ "1/h", 100000000, false },
		{ "1/m", 76861433, true },	/* 2^62 / 6e10 */
		{ "1/m", 76861434, false },
		{ "2/m", 100000000, true },
		{ "1/s", 100000000, true },	/* 1e17 ns: fine */
		{ "1000000000/s", 100000000, true },
		{ "3600000000000/h", 100000000, true },
		{ "7/h", 8967167, true },	/* interval 514285714285 ns */
		{ "7/h", 8967168, false },
	};
	struct policy_tenant t;
	char err[POLICY_ERR_MAX];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t interval;
		int r;

		make(&t, "web", cases[i].rate, "192.0.2.0/24", NULL);
		t.burst = cases[i].burst;
		r = policy_validate(&t, err);
		interval = policy_interval_ns(&t.rate);
		CHECK((r == 0) == cases[i].ok, "%s burst %llu: %s", cases[i].rate,
		      (unsigned long long)cases[i].burst, r ? err : "accepted");
		CHECK(cases[i].ok == (t.burst <= policy_burst_max(&t.rate)),
		      "%s: policy_burst_max %llu", cases[i].rate,
		      (unsigned long long)policy_burst_max(&t.rate));
		if (!cases[i].ok) {
			char want[64];

			snprintf(want, sizeof(want), "at most %llu",
				 (unsigned long long)policy_burst_max(&t.rate));
			CHECK(r == -EINVAL && strstr(err, "burst") &&
			      strstr(err, want) && strstr(err, cases[i].rate),
			      "%s burst %llu: message '%s'", cases[i].rate,
			      (unsigned long long)cases[i].burst, err);
		} else {
			/* what the kernel computes from an accepted tenant */
			CHECK(t.burst <= UINT64_MAX / interval &&
			      t.burst * interval <= POLICY_REFILL_MAX_NS,
			      "%s burst %llu: tolerance wraps", cases[i].rate,
			      (unsigned long long)t.burst);
		}
	}
	/* the same through JSON (what the agent reads) */
	make(&t, "web", "1/h", "192.0.2.0/24", NULL);
	{
		json_t *j = policy_tenant_to_json(&t);

		json_object_set_new(j, "burst", json_integer(5124096));
		CHECK(policy_tenant_from_json(j, &t, err) == -EINVAL &&
		      strstr(err, "5124096") && strstr(err, "1281023"),
		      "JSON burst 5124096 at 1/h: %s", err);
		json_decref(j);
	}
}

/* The static fail share: rate and burst split over the agents, burst at
 * least 1, and interval x burst within the kernel's clock for any count of
 * agents, however large. */
static void test_fail_share(void)
{
	static const struct {
		const char *rate;
		uint64_t burst, agents;
		uint64_t interval;	/* expected; 0: saturated */
		uint32_t fail_burst;
	} cases[] = {
		{ "100/s", 100, 1, 10000000, 100 },
		{ "100/s", 100, 0, 10000000, 100 },	/* 0 counts as 1 */
		{ "100/s", 100, 4, 40000000, 25 },
		{ "100/s", 100, 1000, 10000000000ULL, 1 },
		{ "1/h", 1281023, 1, 3600000000000ULL, 1281023 },
		{ "1/h", 1281023, 3, 10800000000000ULL, 427007 },
		{ "1/h", 1, 5124096, 0, 1 },		/* x agents would wrap */
		{ "1/h", 1, UINT64_MAX, 0, 1 },
		{ "1000000000/s", 100000000, UINT32_MAX, UINT32_MAX, 1 },
	};
	struct policy_tenant t;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t interval;
		uint32_t burst;

		make(&t, "web", cases[i].rate, "192.0.2.0/24", NULL);
		t.burst = cases[i].burst;
		policy_fail_share(&t, cases[i].agents, &interval, &burst);
		CHECK(burst == cases[i].fail_burst, "case %zu: burst %u, want %u",
		      i, burst, cases[i].fail_burst);
		CHECK(cases[i].interval ? interval == cases[i].interval :
		      interval == POLICY_REFILL_MAX_NS / burst,
		      "case %zu: interval %llu", i, (unsigned long long)interval);
		CHECK(interval >= 1 && (uint64_t)burst <= POLICY_REFILL_MAX_NS / interval,
		      "case %zu: interval x burst beyond the clock", i);
	}
}

/* Outbound tenants: "direction" parsed, carried in JSON only when "out",
 * and their destinations never conflict with inbound sources. */
static void test_direction(void)
{
	struct policy_tenant ts[2], u;
	char err[POLICY_ERR_MAX], *str;
	enum policy_direction d;
	json_t *j;

	CHECK(policy_parse_direction("out", &d, err) == 0 && d == POLICY_DIR_OUT,
	      "out parses");
	CHECK(policy_parse_direction("in", &d, err) == 0 && d == POLICY_DIR_IN,
	      "in parses");
	CHECK(policy_parse_direction("up", &d, err) == -EINVAL &&
	      strstr(err, "invalid direction 'up'") && strstr(err, "expected in"),
	      "a bad direction named: %s", err);
	make(&ts[0], "down", "5/s", "192.0.2.0/24", "443");
	ts[0].direction = POLICY_DIR_OUT;
	j = policy_tenant_to_json(&ts[0]);
	str = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	CHECK(str && strstr(str, "\"direction\":\"out\""), "to_json: %s", str);
	free(str);
	CHECK(policy_tenant_from_json(j, &u, err) == 0 &&
	      u.direction == POLICY_DIR_OUT, "round trip: %s", err);
	policy_tenant_free(&u);
	json_decref(j);
	make(&ts[1], "up", "5/s", "192.0.2.0/24", "443");
	j = policy_tenant_to_json(&ts[1]);
	CHECK(!json_object_get(j, "direction"), "an inbound tenant reads as before");
	json_decref(j);
	CHECK(policy_validate_set(ts, 2, err) == 0,
	      "the same prefix and port, one in and one out, do not conflict: %s",
	      err);
	ts[1].direction = POLICY_DIR_OUT;
	CHECK(policy_validate_set(ts, 2, err) == -EEXIST,
	      "two outbound tenants on one destination conflict");
}

static void test_json(void)
{
	struct policy_tenant t, u;
	char err[POLICY_ERR_MAX], *s;
	json_error_t jerr;
	json_t *j;

	make(&t, "web", "250/m", "192.0.2.0/24,2001:db8::/32", "80,443");
	t.burst = 17;
	t.action = POLICY_ACT_RST;
	t.shadow = true;
	j = policy_tenant_to_json(&t);
	s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	CHECK(s && !strcmp(s, "{\"action\":\"rst\",\"burst\":17,\"fail\":\"static\",\"match\":"
			   "[\"192.0.2.0/24\",\"2001:db8::/32\"],\"name\":\"web\","
			   "\"ports\":[80,443],\"rate\":\"250/m\",\"shadow\":true}"),
	      "to_json gave %s", s);
	free(s);
	CHECK(policy_tenant_from_json(j, &u, err) == 0, "from_json: %s", err);
	CHECK(u.n_match == t.n_match &&
	      !memcmp(u.match, t.match, t.n_match * sizeof(*t.match)),
	      "round trip changed the prefixes");
	own(&u);
	u.match = t.match;
	CHECK(memcmp(&t, &u, sizeof(t)) == 0, "round trip changed the tenant");
	json_decref(j);

	/* defaults */
	j = json_loads("{\"name\":\"x\",\"rate\":\"20/s\",\"match\":[\"10.0.0.1\"]}",
		       0, &jerr);
	CHECK(policy_tenant_from_json(j, &u, err) == 0 && u.burst == 20 &&
	      u.n_ports == 0 && u.action == POLICY_ACT_DROP && !u.shadow &&
	      u.match[0].len == 32, "defaults: %s", err);
	policy_tenant_free(&u);
	json_decref(j);

	/* the agent's read-only id is accepted, so list output can be applied */
	j = json_loads("{\"name\":\"x\",\"rate\":\"20/s\",\"match\":[\"10.0.0.1\"],"
		       "\"id\":3,\"ports\":[],\"burst\":null}", 0, &jerr);
	CHECK(policy_tenant_from_json(j, &u, err) == 0, "with id: %s", err);
	policy_tenant_free(&u);
	json_decref(j);

	static const struct {
		const char *json, *want;
	} bad[] = {
		{ "[]", "object" },
		{ "{\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"]}", "name" },
		{ "{\"name\":\"x\",\"match\":[\"10.0.0.0/8\"]}", "rate" },
		{ "{\"name\":\"x\",\"rate\":100,\"match\":[\"10.0.0.0/8\"]}", "rate" },
		{ "{\"name\":\"x\",\"rate\":\"0/s\",\"match\":[\"10.0.0.0/8\"]}", "0/s" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\"}", "match" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[]}", "match" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":\"10.0.0.0/8\"}", "match" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.1/8\"]}", "10.0.0.0/8" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[8]}", "match" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\",\"10.0.0.0/8\"]}", "duplicate" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"burst\":0}", "burst" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"burst\":\"5\"}", "burst" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"burst\":100000001}", "burst" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"ports\":[0]}", "ports" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"ports\":[70000]}", "ports" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"ports\":[\"80\"]}", "ports" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"ports\":[80,80]}", "duplicate" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"ports\":80}", "ports" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"action\":\"reject\"}", "drop or rst" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"shadow\":\"yes\"}", "shadow" },
		{ "{\"name\":\"x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"],\"prots\":[80]}", "prots" },
		{ "{\"name\":\"-x\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"]}", "name" },
		{ "{\"name\":\"x\\u0000y\",\"rate\":\"1/s\",\"match\":[\"10.0.0.0/8\"]}", "NUL" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		j = json_loads(bad[i].json, JSON_ALLOW_NUL, &jerr);
		if (!j) {
			CHECK(0, "fixture %zu does not parse: %s", i, jerr.text);
			continue;
		}
		err[0] = '\0';
		CHECK(policy_tenant_from_json(j, &u, err) == -EINVAL &&
		      strstr(err, bad[i].want), "from_json %s: got '%s', want "
		      "mention of '%s'", bad[i].json, err, bad[i].want);
		json_decref(j);
	}
}

/* --per-source RATE[,BURST] and --source-mask, their checks and JSON. */
static void test_per_source(void)
{
	struct policy_tenant t, u;
	char err[POLICY_ERR_MAX];
	json_t *j;

	make(&t, "a", "100/s", "192.0.2.0/24,2001:db8::/32", NULL);
	CHECK(policy_parse_rate_burst("5/s", &t.src_rate, &t.src_burst, err) == 0 &&
	      t.src_rate.count == 5 && t.src_burst == 5, "5/s: burst %llu: %s",
	      (unsigned long long)t.src_burst, err);
	CHECK(policy_parse_rate_burst("5/s,12", &t.src_rate, &t.src_burst, err) == 0 &&
	      t.src_burst == 12, "5/s,12: burst %llu",
	      (unsigned long long)t.src_burst);
	CHECK(policy_parse_rate_burst("5/s,0", &t.src_rate, &t.src_burst, err) ==
	      -EINVAL && strstr(err, "'0'"), "burst 0 accepted: %s", err);
	CHECK(policy_parse_rate_burst("5/x", &t.src_rate, &t.src_burst, err) ==
	      -EINVAL && strstr(err, "'5/x'"), "5/x accepted: %s", err);

	CHECK(policy_parse_source_mask("/24,/56", &t.src_len4, &t.src_len6, err)
	      == 0 && t.src_len4 == 24 && t.src_len6 == 56, "/24,/56: %s", err);
	CHECK(policy_parse_source_mask("32,128", &t.src_len4, &t.src_len6, err)
	      == 0 && t.src_len4 == 32 && t.src_len6 == 128, "32,128: %s", err);
	static const char *const bad[] = { "/24", "/33,/64", "/24,/129", "/0,/64",
					   "/24,", ",/64", "a,b", "" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(policy_parse_source_mask(bad[i], &u.src_len4, &u.src_len6,
					       err) == -EINVAL &&
		      strstr(err, "/N4,/N6"), "mask '%s' accepted: %s", bad[i], err);

	t.src_len4 = POLICY_SRC_LEN4;
	t.src_len6 = POLICY_SRC_LEN6;
	CHECK(policy_validate(&t, err) == 0, "valid per-source refused: %s", err);
	j = policy_tenant_to_json(&t);
	CHECK(policy_tenant_from_json(j, &u, err) == 0 && u.src_rate.count == 5 &&
	      u.src_rate.period_s == 1 && u.src_burst == 12 && u.src_len4 == 32 &&
	      u.src_len6 == 64, "per-source lost in a JSON round trip: %s", err);
	policy_tenant_free(&u);
	json_object_del(j, "per_source_burst");
	json_object_del(j, "source_mask");
	CHECK(policy_tenant_from_json(j, &u, err) == 0 && u.src_burst == 5 &&
	      u.src_len4 == 32 && u.src_len6 == 64,
	      "per-source defaults from JSON: burst %llu /%u,/%u",
	      (unsigned long long)u.src_burst, u.src_len4, u.src_len6);
	policy_tenant_free(&u);
	json_object_set_new(j, "source_mask", json_string("/33,/64"));
	CHECK(policy_tenant_from_json(j, &u, err) == -EINVAL &&
	      strstr(err, "/33,/64"), "bad mask from JSON accepted: %s", err);
	json_decref(j);

	u = t;
	u.direction = POLICY_DIR_OUT;
	CHECK(policy_validate(&u, err) == -EINVAL && strstr(err, "outbound"),
	      "per-source on an outbound tenant accepted: %s", err);
	u = t;
	u.src_rate.count = 0;
	CHECK(policy_validate(&u, err) == -EINVAL && strstr(err, "without"),
	      "a mask without a rate accepted: %s", err);
	u = t;
	u.src_len6 = 0;
	CHECK(policy_validate(&u, err) == -EINVAL && strstr(err, "mask"),
	      "a zero IPv6 mask accepted: %s", err);
	u = t;
	u.src_burst = POLICY_BURST_MAX + 1;
	CHECK(policy_validate(&u, err) == -EINVAL && strstr(err, "per-source burst"),
	      "an oversized per-source burst accepted: %s", err);

	make(&u, "b", "100/s", "192.0.2.0/24", NULL);
	j = policy_tenant_to_json(&u);
	CHECK(!json_object_get(j, "per_source") && !json_object_get(j, "source_mask"),
	      "a tenant without per-source writes it");
	json_decref(j);
}

/* policy_tenant_text() writes, byte for byte, what jansson makes of
 * policy_tenant_to_json() with sorted keys, for tenants with every optional
 * field on or off (and the agent's ids or not), up to the longest tenant. */
static void test_text(void)
{
	static const char *const pfx[] = {
		"192.0.2.0/24", "10.0.0.0/8", "2001:db8::/32", "0.0.0.0/0",
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0/124", "::/0",
		"255.255.255.255/32", "100.64.0.0/10",
	};
	static char buf[POLICY_TEXT_MAX];
	unsigned int seed = 4242;
	struct policy_tenant t;

	for (int round = 0; round < 2000; round++) {
		struct policy_text_ids ids = { rand_r(&seed) % 2,
					       (uint64_t)rand_r(&seed),
					       (uint64_t)rand_r(&seed) << 20 };
		bool big = round % 100 == 0;
		json_t *j;
		char *want;
		size_t len;

		make(&t, round % 2 ? "a.b-c_9" : "t", "10/s", pfx[round % 8], NULL);
		/* a second prefix, to be written after a comma */
		if (round % 3 == 0 &&
		    policy_parse_prefix(pfx[(round + 1) % 8], &t.match[t.n_match], NULL) == 0)
			t.n_match++;
		while (big && t.n_match < POLICY_MAX_PREFIXES) {
			struct policy_prefix *p = &t.match[t.n_match++];

			p->family = AF_INET6;
			p->len = 128;
			memset(p->addr, 0xff, sizeof(p->addr));
			p->addr[15] = (uint8_t)t.n_match;
		}
		if (big)
			memset(t.name, 'n', POLICY_NAME_MAX);
		for (unsigned int k = 0; k < POLICY_MAX_PORTS; k++)
			if (big || rand_r(&seed) % 4 == 0)
				t.ports[t.n_ports++] = (uint16_t)(big ? 65535 - k : 1 + k);
		t.rate = (struct policy_rate){ 1 + (uint64_t)rand_r(&seed), rand_r(&seed) % 2 ? 60 : 1 };
		t.burst = big ? POLICY_BURST_MAX : 1 + (uint64_t)rand_r(&seed);
		t.action = rand_r(&seed) % 2 ? POLICY_ACT_RST : POLICY_ACT_DROP;
		t.shadow = rand_r(&seed) % 2;
		t.overshoot = big || rand_r(&seed) % 2 ? POLICY_BURST_MAX : 0;
		t.fail = (enum policy_fail)(rand_r(&seed) % 3);
		t.direction = rand_r(&seed) % 2 ? POLICY_DIR_OUT : POLICY_DIR_IN;
		t.max_conns = big || rand_r(&seed) % 2 ? POLICY_CONNS_MAX : 0;
		t.verify = rand_r(&seed) % 2 ? POLICY_VERIFY_SYNCOOKIE : POLICY_VERIFY_NONE;
		t.shards = big ? POLICY_SHARDS_MAX : rand_r(&seed) % 3;
		t.weight = big ? POLICY_WEIGHT_MAX : rand_r(&seed) % 3;
		if (big || rand_r(&seed) % 2) {
			t.src_rate = (struct policy_rate){ 5, 3600 };
			t.src_burst = POLICY_BURST_MAX;
			t.src_len4 = 24;
			t.src_len6 = 128;
		}
		if (big)
			ids = (struct policy_text_ids){ true, UINT32_MAX, UINT64_MAX };
		j = policy_tenant_to_json(&t);
		if (ids.has_ids) {
			json_object_set_new(j, "id", json_integer((json_int_t)ids.id));
			json_object_set_new(j, "version",
					    json_integer((json_int_t)ids.version));
		}
		want = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
		len = policy_tenant_text(&t, &ids, buf);
		/* jansson prints a version past INT64_MAX negative */
		if (ids.version > INT64_MAX) {
			CHECK(strstr(buf, "\"version\":18446744073709551615,"
				     "\"weight\":1000}") &&
			      len < POLICY_TEXT_MAX - 1, "round %d: %s", round, buf);
		} else {
			CHECK(want && len == strlen(want) && !strcmp(buf, want),
			      "round %d: wrote\n%s\nwant\n%s", round, buf, want);
		}
		free(want);
		json_decref(j);
	}
}

/* policy_same() says what json_equal() of the two tenants' JSON says, for
 * tenants with every optional field on or off and a twin changed in one
 * field (or none), including fields the JSON leaves out. */
static void test_same(void)
{
	static const char *const pfx[] = {
		"192.0.2.0/24", "10.0.0.0/8", "2001:db8::/32", "0.0.0.0/0",
	};
	unsigned int seed = 777, n_same = 0, n_differ = 0;
	bool ok = true;

	for (int round = 0; ok && round < 4000; round++) {
		struct policy_tenant t, u;
		json_t *jt, *ju;
		bool want;

		make(&t, "t1", "10/s", pfx[round % 4], NULL);
		if (round % 3 == 0 &&
		    policy_parse_prefix(pfx[(round + 1) % 4], &t.match[t.n_match], NULL) == 0)
			t.n_match++;
		for (unsigned int k = 0; k < POLICY_MAX_PORTS; k++)
			if (rand_r(&seed) % 4 == 0)
				t.ports[t.n_ports++] = (uint16_t)(1 + k);
		t.rate = (struct policy_rate){ 1 + (uint64_t)(rand_r(&seed) % 3),
					       rand_r(&seed) % 2 ? 60 : 1 };
		t.burst = 1 + (uint64_t)(rand_r(&seed) % 3);
		t.overshoot = (uint64_t)(rand_r(&seed) % 2);
		t.max_conns = (uint64_t)(rand_r(&seed) % 2);
		t.shards = (uint64_t)(rand_r(&seed) % 3);
		t.weight = (uint64_t)(rand_r(&seed) % 3);
		if (rand_r(&seed) % 2) {
			t.src_rate = (struct policy_rate){ 5, 3600 };
			t.src_burst = 5;
			t.src_len4 = 24;
			t.src_len6 = 64;
		}
		twin(&u, &t);
		switch (rand_r(&seed) % 21) {
		case 0: u.name[1] = '2'; break;
		case 1: u.rate.count++; break;
		case 2: u.rate.period_s = u.rate.period_s == 1 ? 3600 : 1; break;
		case 3: u.burst++; break;
		case 4: u.match[0].len--; break;
		case 5: u.match[0].addr[u.match[0].family == AF_INET ? 3 : 15] ^= 1; break;
		/* past the family's address: not in its text */
		case 6: if (u.match[0].family == AF_INET) u.match[0].addr[4] = 1; break;
		case 7: u.n_match = 0; break;
		case 8: u.ports[0] = 9; u.n_ports = u.n_ports ? u.n_ports : 1; break;
		case 9: u.action = u.action == POLICY_ACT_RST ? POLICY_ACT_DROP : POLICY_ACT_RST; break;
		case 10: u.shadow = !u.shadow; break;
		case 11: u.overshoot = !u.overshoot; break;
		case 12: u.fail = (enum policy_fail)((u.fail + 1) % 3); break;
		case 13: u.direction = u.direction == POLICY_DIR_IN ? POLICY_DIR_OUT : POLICY_DIR_IN; break;
		case 14: u.max_conns += 2; break;
		case 15: u.verify = u.verify ? POLICY_VERIFY_NONE : POLICY_VERIFY_SYNCOOKIE; break;
		case 16: u.shards = u.shards == 0 ? 1 : u.shards == 1 ? 0 : 1; break;
		/* the source mask: in the JSON only with a per-source rate */
		case 17: u.src_len4 = 16; break;
		case 18: u.src_rate.count = u.src_rate.count ? 0 : 7; break;
		/* 0 and 1 are one weight, as they are one bucket */
		case 19: u.weight = u.weight == 0 ? 1 : u.weight == 1 ? 0 : 1; break;
		default: break;
		}
		jt = policy_tenant_to_json(&t);
		ju = policy_tenant_to_json(&u);
		want = jt && ju && json_equal(jt, ju);
		ok = policy_same(&t, &u) == want && policy_same(&u, &t) == want &&
		     policy_same(&t, &t);
		if (!ok)
			diag("round %d: policy_same %d, JSON equal %d", round,
			     policy_same(&t, &u), want);
		n_same += want;
		n_differ += !want;
		json_decref(jt);
		json_decref(ju);
	}
	CHECK(ok && n_same > 400 && n_differ > 400,
	      "policy_same() as JSON equality: %u alike, %u not", n_same, n_differ);
}

int main(void)
{
	CHECK_RUN(test_name);
	CHECK_RUN(test_same);
	CHECK_RUN(test_rate);
	CHECK_RUN(test_format_rate_and_defaults);
	CHECK_RUN(test_burst);
	CHECK_RUN(test_prefix);
	CHECK_RUN(test_prefix_list);
	CHECK_RUN(test_prefix_copy);
	CHECK_RUN(test_ports);
	CHECK_RUN(test_action);
	CHECK_RUN(test_validate);
	CHECK_RUN(test_set);
	CHECK_RUN(test_set_at);
	CHECK_RUN(test_set_against_reference);
	CHECK_RUN(test_set_large);
	CHECK_RUN(test_overlaps);
	CHECK_RUN(test_overlaps_against_reference);
	CHECK_RUN(test_json);
	CHECK_RUN(test_text);
	CHECK_RUN(test_direction);
	CHECK_RUN(test_overshoot);
	CHECK_RUN(test_max_conns);
	CHECK_RUN(test_verify);
	CHECK_RUN(test_per_source);
	CHECK_RUN(test_shards);
	CHECK_RUN(test_weight);
	CHECK_RUN(test_burst_overflow);
	CHECK_RUN(test_fail_share);
	CHECK_RUN(test_clean_utf8);
	rooms_free();
	return check_exit();
}
