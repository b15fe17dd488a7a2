/* test_classify: the rule compiler against a brute-force reference.  Random
 * rule sets (IPv4 and IPv6, nested prefixes, port and any-port rules) are
 * compiled, and random addresses and ports - chosen near the rules, where
 * the answers differ - must get the same tenant from the compiled table as
 * from reading the rules directly: the longest prefix wins, and on equal
 * length a rule for the port beats an any-port rule.  Then the errors: a
 * conflict, a bad rule, a full table.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "classify.h"
#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 11);
}

static bool in_prefix(const struct rl_cls_rule *r, int family,
		      const uint8_t *a)
{
	if (r->family != family)
		return false;
	for (unsigned int b = 0; b < r->plen; b++) {
		uint8_t m = 0x80 >> (b % 8);

		if ((r->addr[b / 8] & m) != (a[b / 8] & m))
			return false;
	}
	return true;
}

/* The definition, read straight off the rules. */
static int reference(const struct rl_cls_rule *rules, size_t n, int family,
		     const uint8_t *a, uint16_t port)
{
	int best = -1, best_len = -1;
	bool best_port = false;

	for (size_t i = 0; i < n; i++) {
		const struct rl_cls_rule *r = &rules[i];
		bool is_port = r->port != 0;

		if (!in_prefix(r, family, a) || (is_port && r->port != port))
			continue;
		if ((int)r->plen > best_len ||
		    ((int)r->plen == best_len && is_port && !best_port)) {
			best = (int)r->tenant;
			best_len = (int)r->plen;
			best_port = is_port;
		}
	}
	return best;
}

static const uint16_t ports[] = { 22, 80, 443, 5432, 8080, 65535 };

/* A rule set where prefixes nest: each new prefix is, half the time, a
 * longer prefix inside an earlier one. */
static size_t make_rules(struct rl_cls_rule *rules, size_t max, int family)
{
	unsigned int bits = family == AF_INET ? 32 : 128;
	size_t n = 0;

	while (n < max) {
		struct rl_cls_rule r = { .family = family };
		bool dup = false;

		if (n && rnd() % 2) {
			const struct rl_cls_rule *p = &rules[rnd() % n];

			memcpy(r.addr, p->addr, 16);
			r.plen = p->plen + rnd() % (bits - p->plen + 1);
			for (unsigned int b = p->plen; b < bits; b++)
				if (rnd() % 2)
					r.addr[b / 8] ^= 0x80 >> (b % 8);
		} else {
			for (unsigned int i = 0; i < bits / 8; i++)
				r.addr[i] = rnd();
			r.addr[0] = 10 + rnd() % 3;	/* keep them close */
			r.plen = rnd() % (bits + 1);
		}
		for (unsigned int b = r.plen; b < bits; b++)
			r.addr[b / 8] &= ~(0x80 >> (b % 8));
		r.port = rnd() % 3 ? 0 : ports[rnd() % 6];
		r.tenant = 1 + rnd() % 200;
		for (size_t i = 0; i < n && !dup; i++)
			dup = rules[i].plen == r.plen && rules[i].port == r.port &&
			      !memcmp(rules[i].addr, r.addr, 16);
		if (!dup)
			rules[n++] = r;
	}
	return n;
}

static void check_random(int family, size_t n_rules, int rounds)
{
	struct rl_cls_rule rules[400];
	unsigned int bytes = family == AF_INET ? 4 : 16;
	struct rl_cls_image img;
	char err[256];
	int bad = 0;

	n_rules = make_rules(rules, n_rules, family);
	CHECK(rl_cls_compile(rules, n_rules, 0, &img, err, sizeof(err)) == 0,
	      "compile %zu rules: %s", n_rules, err);
	if (!img.groups)
		return;
	for (int k = 0; k < rounds; k++) {
		const struct rl_cls_rule *near = &rules[rnd() % n_rules];
		uint8_t a[16];
		uint16_t port = rnd() % 4 ? ports[rnd() % 6] : rnd();
		int want, got;

		/* an address inside a rule's prefix, the rest random */
		memcpy(a, near->addr, 16);
		for (unsigned int b = near->plen; b < bytes * 8; b++)
			if (rnd() % 2)
				a[b / 8] ^= 0x80 >> (b % 8);
		if (rnd() % 8 == 0)
			a[rnd() % bytes] ^= 1 << (rnd() % 8);
		want = reference(rules, n_rules, family, a, port);
		got = rl_cls_lookup(&img, family, a, port);
		if (got != want && bad++ < 5)
			CHECK(got == want, "IPv%d lookup port %u: got tenant %d, "
			      "want %d", family == AF_INET ? 4 : 6, port, got,
			      want);
	}
	CHECK(bad == 0, "%d of %d IPv%d lookups differ from the reference",
	      bad, rounds, family == AF_INET ? 4 : 6);
	rl_cls_image_free(&img);
}

/* Twenty random rule sets of each family, each looked up 5,000 times. */
static void check_against_reference(void)
{
	for (int i = 0; i < 20; i++) {
		check_random(AF_INET, 20 + rnd() % 300, 5000);
		check_random(AF_INET6, 20 + rnd() % 300, 5000);
	}
}

static struct rl_cls_rule v4(const char *a, unsigned int plen, uint16_t port,
			     uint32_t tenant)
{
	struct rl_cls_rule r = { .family = AF_INET, .plen = plen,
				 .port = port, .tenant = tenant };
	unsigned int x[4];

	sscanf(a, "%u.%u.%u.%u", &x[0], &x[1], &x[2], &x[3]);
	for (int i = 0; i < 4; i++)
		r.addr[i] = x[i];
	return r;
}

static void check_cases(void)
{
	struct rl_cls_rule rules[] = {
		v4("10.0.0.0", 8, 0, 1),
		v4("10.1.0.0", 16, 443, 2),	/* shorter port rule */
		v4("10.1.2.0", 24, 0, 3),	/* longer any-port rule */
		v4("10.1.2.0", 24, 22, 4),	/* equal length, port wins */
		v4("0.0.0.0", 0, 80, 5),	/* a default for port 80 */
	};
	static const struct { const char *a; uint16_t port; int want; } q[] = {
		{ "10.9.9.9", 443, 1 },
		{ "10.1.9.9", 443, 2 },
		{ "10.1.9.9", 444, 1 },
		{ "10.1.2.3", 443, 3 },	/* the /24 beats the /16 port rule */
		{ "10.1.2.3", 22, 4 },
		{ "10.1.2.3", 80, 3 },
		{ "192.0.2.1", 80, 5 },
		{ "192.0.2.1", 81, -1 },
	};
	struct rl_cls_image img;
	char err[256];

	CHECK(rl_cls_compile(rules, 5, 0, &img, err, sizeof(err)) == 0,
	      "compile: %s", err);
	for (size_t i = 0; img.groups && i < sizeof(q) / sizeof(q[0]); i++) {
		struct rl_cls_rule r = v4(q[i].a, 32, 0, 0);
		int got = rl_cls_lookup(&img, AF_INET, r.addr, q[i].port);

		CHECK(got == q[i].want, "%s port %u: tenant %d, want %d",
		      q[i].a, q[i].port, got, q[i].want);
	}
	CHECK(img.n_columns == 3, "%u port columns, want 3 (22, 80, 443)",
	      img.n_columns);
	rl_cls_image_free(&img);

	/* no rules: everything passes */
	CHECK(rl_cls_compile(NULL, 0, 0, &img, err, sizeof(err)) == 0,
	      "compile nothing: %s", err);
	if (img.groups) {
		struct rl_cls_rule r = v4("10.0.0.1", 32, 0, 0);

		CHECK(rl_cls_lookup(&img, AF_INET, r.addr, 80) == -1,
		      "an empty table matched");
	}
	rl_cls_image_free(&img);
}

static void check_errors(void)
{
	struct rl_cls_rule r[2] = { v4("10.1.0.0", 16, 0, 1),
				    v4("10.1.0.0", 16, 0, 2) };
	struct rl_cls_rule *many;
	struct rl_cls_image img;
	char err[256];
	int ret;

	ret = rl_cls_compile(r, 2, 0, &img, err, sizeof(err));
	CHECK(ret == -EEXIST && strstr(err, "10.1.0.0/16"),
	      "one prefix, two tenants: %d '%s'", ret, err);
	/* host bits do not make it another prefix */
	r[1] = v4("10.1.7.7", 16, 0, 2);
	ret = rl_cls_compile(r, 2, 0, &img, err, sizeof(err));
	CHECK(ret == -EEXIST, "host bits hid a conflict: %d '%s'", ret, err);
	/* the same rule twice is harmless */
	r[1] = r[0];
	ret = rl_cls_compile(r, 2, 0, &img, err, sizeof(err));
	CHECK(ret == 0, "a repeated rule: %d '%s'", ret, err);
	rl_cls_image_free(&img);

	r[0].plen = 33;
	ret = rl_cls_compile(r, 1, 0, &img, err, sizeof(err));
	CHECK(ret == -EINVAL && strstr(err, "33"), "/33: %d '%s'", ret, err);
	r[0] = v4("10.0.0.0", 8, 0, RL_TENANTS_LIMIT);
	ret = rl_cls_compile(r, 1, 0, &img, err, sizeof(err));
	CHECK(ret == -EINVAL, "tenant slot out of range: %d '%s'", ret, err);

	/* /32s spread so that each needs two tables of its own: the pool
	 * runs out, and the error says so instead of truncating */
	many = calloc(RL_CLS_GROUPS, sizeof(*many));
	if (!many)
		return;
	for (int i = 0; i < RL_CLS_GROUPS; i++) {
		many[i] = v4("10.0.0.1", 32, 0, 1);
		many[i].addr[1] = i >> 8;
		many[i].addr[2] = i & 0xff;
	}
	ret = rl_cls_compile(many, RL_CLS_GROUPS, 0, &img, err, sizeof(err));
	CHECK(ret == -ENOSPC && strstr(err, "full") && strstr(err, "8 MiB"),
	      "a full table: %d '%s'", ret, err);
	/* a smaller classifier fills sooner; the same rules fit a bigger one */
	ret = rl_cls_compile(many, 600, RL_CLS_GROUPS_MIN, &img, err,
			     sizeof(err));
	CHECK(ret == -ENOSPC && strstr(err, "1 MiB"),
	      "600 spread /32s in the smallest classifier: %d '%s'", ret, err);
	ret = rl_cls_compile(many, RL_CLS_GROUPS, 4 * RL_CLS_GROUPS, &img, err,
			     sizeof(err));
	CHECK(ret == 0, "a classifier four times the default: %d '%s'", ret,
	      err);
	if (!ret) {
		CHECK(rl_cls_lookup(&img, AF_INET, many[RL_CLS_GROUPS - 1].addr,
				    80) == 1, "the last /32 is not matched");
		rl_cls_image_free(&img);
	}
	ret = rl_cls_compile(many, 1, RL_CLS_GROUPS_MIN - 1, &img, err,
			     sizeof(err));
	CHECK(ret == -EINVAL, "a classifier below the minimum: %d '%s'", ret,
	      err);
	free(many);
}

/* More distinct ports than a table has entries, under one prefix: its row
 * spans several tables, and every port is found in it. */
static void check_wide_rows(void)
{
	static struct rl_cls_rule rules[702];
	struct rl_cls_image img;
	size_t n = 0;
	char err[256];
	int bad = 0;

	rules[n++] = v4("10.0.0.0", 8, 0, 1);
	rules[n++] = v4("10.9.0.0", 16, 0, 2);
	for (uint16_t p = 1; p <= 700; p++)
		rules[n++] = v4("10.0.0.0", 16, p * 7, 3 + p % 50);
	CHECK(rl_cls_compile(rules, n, 0, &img, err, sizeof(err)) == 0,
	      "compile 700 port rules: %s", err);
	if (!img.groups)
		return;
	CHECK(img.n_columns == 700, "%u columns, want 700", img.n_columns);
	for (uint32_t port = 0; port <= 6000; port++) {
		static const char *const src[] = { "10.0.3.4", "10.9.3.4",
						   "10.1.3.4" };

		for (int s = 0; s < 3; s++) {
			struct rl_cls_rule a = v4(src[s], 32, 0, 0);
			int want = reference(rules, n, AF_INET, a.addr, port);
			int got = rl_cls_lookup(&img, AF_INET, a.addr, port);

			if (got != want && bad++ < 5)
				CHECK(got == want, "%s port %u: tenant %d, want "
				      "%d", src[s], port, got, want);
		}
	}
	rl_cls_image_free(&img);
}

/* 100,000 tenants, each a /30 of its own and one port (half of them port
 * 80, the others a port each of their own, 1 to 50,000): a row of one slot
 * each, so they fit the default classifier with room to spare, and each
 * tenant's port and no other finds it. */
static void check_port_per_tenant(void)
{
	enum { N = 100000 };
	struct rl_cls_rule *rules = calloc(N, sizeof(*rules));
	struct rl_cls_image img;
	char err[256];
	int bad = 0;

	if (!rules)
		return;
	for (uint32_t t = 0; t < N; t++) {
		uint32_t a = 0x0a000000u + t * 4;	/* 10.0.0.0/30, ... */

		rules[t] = v4("0.0.0.0", 30, t % 2 ? 1 + t / 2 : 80, t);
		rules[t].addr[0] = a >> 24;
		rules[t].addr[1] = a >> 16;
		rules[t].addr[2] = a >> 8;
		rules[t].addr[3] = a;
	}
	CHECK(rl_cls_compile(rules, N, 0, &img, err, sizeof(err)) == 0,
	      "compile: %s", err);
	if (!img.groups) {
		free(rules);
		return;
	}
	CHECK(img.n_rows == N, "%u port rows, want %u", img.n_rows, N);
	/* a slot and a header, and at most one entry to align the header */
	CHECK(img.row_entries <= 4u * N, "rows take %u entries, want at most "
	      "%u", img.row_entries, 4u * N);
	/* the /24 groups the /30s fill, the roots, the rows: a quarter of
	 * the default */
	CHECK(img.n_groups < RL_CLS_GROUPS / 2, "%u groups", img.n_groups);
	for (uint32_t t = 0; t < N; t += 7) {
		uint16_t port = rules[t].port;
		uint8_t a[4];
		int got, other;

		memcpy(a, rules[t].addr, 4);
		a[3] |= t % 4;	/* any address of the /30 */
		got = rl_cls_lookup(&img, AF_INET, a, port);
		other = rl_cls_lookup(&img, AF_INET, a, (uint16_t)(port + 1));
		if ((got != (int)t || other != -1) && bad++ < 5)
			CHECK(false, "tenant %u port %u: %d, port %u: %d", t,
			      port, got, port + 1, other);
	}
	rl_cls_image_free(&img);
	free(rules);
}

/* A prefix with many ports (each its own tenant) under an any-port rule:
 * the row grows until each port has a slot of its own, and every other
 * port gets the any-port tenant. */
static void check_row_slots(void)
{
	struct rl_cls_rule rules[1 + 200];
	struct rl_cls_image img;
	char err[256];
	int bad = 0;

	rules[0] = v4("192.0.2.0", 24, 0, 1);
	for (int i = 0; i < 200; i++)
		rules[1 + i] = v4("192.0.2.0", 24, (uint16_t)(1000 + i * 257),
				  (uint32_t)(10 + i));
	CHECK(rl_cls_compile(rules, 201, 0, &img, err, sizeof(err)) == 0,
	      "compile: %s", err);
	if (!img.groups)
		return;
	CHECK(img.n_rows == 1, "%u rows, want 1", img.n_rows);
	for (uint32_t port = 0; port < 65536; port++) {
		struct rl_cls_rule a = v4("192.0.2.9", 32, 0, 0);
		int want = reference(rules, 201, AF_INET, a.addr, (uint16_t)port);
		int got = rl_cls_lookup(&img, AF_INET, a.addr, (uint16_t)port);

		if (got != want && bad++ < 5)
			CHECK(false, "port %u: tenant %d, want %d", port, got,
			      want);
	}
	rl_cls_image_free(&img);
}

static int repaints, repaints_given_up;

/* The rules the repaint asks about: rules[0..n) with live[i]. */
struct edit_rules {
	const struct rl_cls_rule *r;
	const bool *live;
	size_t n;
};

static int64_t edit_rule(void *ctx, int family, const uint8_t *addr,
			 unsigned int plen)
{
	const struct edit_rules *er = ctx;
	int64_t any = -1;

	for (size_t i = 0; i < er->n; i++)
		if (er->live[i] && er->r[i].family == family &&
		    er->r[i].plen == plen && !memcmp(er->r[i].addr, addr, 16)) {
			if (er->r[i].port)
				return RL_CLS_PORTED;
			any = er->r[i].tenant;
		}
	return any;
}

/* Rule sets changed one any-port prefix at a time by rl_cls_repaint
 * (added, removed, given to another tenant) answer as the reference over
 * the rules live after each change, for addresses near every rule and
 * ports with and without rules; a sixth of the rules name a port and stay,
 * and a repaint that meets one gives up (the set is then compiled anew). */
static void check_repaint(int family, bool with_ports)
{
	unsigned int bytes = family == AF_INET ? 4 : 16;
	struct rl_cls_rule rules[300], *order;
	bool live[300];
	struct edit_rules er = { rules, live, 0 };
	struct rl_cls_image img;
	size_t n, n_live = 0;
	char err[256];
	int bad = 0;

	n = make_rules(rules, 300, family);
	for (size_t i = 0; i < n; i++) {
		rules[i].port = with_ports && rnd() % 6 == 0 ? ports[rnd() % 6] : 0;
		for (size_t j = 0; j < i; j++)
			if (rules[j].plen == rules[i].plen &&
			    rules[j].port == rules[i].port &&
			    !memcmp(rules[j].addr, rules[i].addr, 16))
				rules[i].plen = bytes * 8 + 1;	/* a duplicate: out */
	}
	order = calloc(n, sizeof(*order));
	for (size_t i = 0; i < n; i++) {
		live[i] = rules[i].plen <= bytes * 8 && (rules[i].port || rnd() % 2);
		if (live[i])
			order[n_live++] = rules[i];
	}
	er.n = n;
	CHECK(rl_cls_compile(order, n_live, 0, &img, err, sizeof(err)) == 0,
	      "compile %zu rules: %s", n_live, err);
	free(order);
	if (!img.groups)
		return;
	for (int step = 0; step < 200 && !bad; step++) {
		size_t x = rnd() % n;
		int e;

		if (rules[x].plen > bytes * 8 || rules[x].port)
			continue;
		if (live[x] && rnd() % 3 == 0)
			rules[x].tenant = 1 + rnd() % 200;
		else
			live[x] = !live[x];
		e = rl_cls_repaint(img.groups, &img.n_groups, RL_CLS_GROUPS,
				   family, rules[x].addr, rules[x].plen,
				   edit_rule, &er);
		if (e == -EAGAIN) {
			/* too short a prefix: compiled anew, as the agent does */
			struct rl_cls_rule now[300];
			size_t m = 0;

			for (size_t i = 0; i < n; i++)
				if (live[i])
					now[m++] = rules[i];
			rl_cls_image_free(&img);
			CHECK(rl_cls_compile(now, m, 0, &img, err, sizeof(err)) == 0,
			      "compile %zu rules: %s", m, err);
			if (!img.groups)
				return;
			repaints_given_up++;
		} else {
			CHECK(e == 0, "repaint step %d: %d", step, e);
			repaints++;
		}
		for (int k = 0; k < 300; k++) {
			const struct rl_cls_rule *near = &rules[rnd() % n];
			struct rl_cls_rule live_rules[300];
			size_t m = 0;
			uint8_t a[16];
			uint16_t port;
			int want, got;

			if (near->plen > bytes * 8)
				continue;
			memcpy(a, near->addr, 16);
			for (unsigned int b = near->plen; b < bytes * 8; b++)
				if (rnd() % 2)
					a[b / 8] ^= 0x80 >> (b % 8);
			for (size_t i = 0; i < n; i++)
				if (live[i])
					live_rules[m++] = rules[i];
			port = rnd() % 2 ? ports[rnd() % 6] : 1000;
			want = reference(live_rules, m, family, a, port);
			got = rl_cls_lookup(&img, family, a, port);
			if (got != want && bad++ < 5)
				CHECK(got == want, "IPv%d after step %d: tenant "
				      "%d, want %d", bytes == 4 ? 4 : 6, step,
				      got, want);
		}
	}
	rl_cls_image_free(&img);
}

static void check_repaints(void)
{
	for (int i = 0; i < 5; i++) {
		check_repaint(AF_INET, false);
		check_repaint(AF_INET6, false);
	}
	/* without port rules most prefixes are long enough to be repainted */
	CHECK(repaints > 4 * repaints_given_up, "%d repaints, %d given up",
	      repaints, repaints_given_up);
	repaints = 0;
	for (int i = 0; i < 5; i++) {
		check_repaint(AF_INET, true);
		check_repaint(AF_INET6, true);
	}
	/* with port rules among them, those no port rule decides */
	CHECK(repaints > 100, "%d repaints beside port rules", repaints);
}

int main(void)
{
	CHECK_RUN(check_repaints);
	CHECK_RUN(check_cases);
	CHECK_RUN(check_wide_rows);
	CHECK_RUN(check_port_per_tenant);
	CHECK_RUN(check_row_slots);
	CHECK_RUN(check_errors);
	CHECK_RUN(check_against_reference);
	return check_exit();
}
