/* Unit test of user/lib/persource.c: the masks of source prefix lengths, src_conf written from a policy (and cleared), the reclaim rule, each tenant's share of the table, sources as text, and the heaviest refused sources picked from src_top. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "persource.h"
#include "check.h"

static void test_masks(void)
{
	static const struct {
		uint8_t len4, len6;
		uint8_t m4[4];
		uint8_t m6[16];
	} cases[] = {
		{ 32, 64, { 255, 255, 255, 255 },
		  { 255, 255, 255, 255, 255, 255, 255, 255 } },
		{ 24, 56, { 255, 255, 255, 0 },
		  { 255, 255, 255, 255, 255, 255, 255, 0 } },
		{ 1, 1, { 128, 0, 0, 0 }, { 128 } },
		{ 20, 127, { 255, 255, 240, 0 },
		  { 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
		    255, 255, 255, 254 } },
	};
	uint8_t m4[16], m6[16];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		src_masks(cases[i].len4, cases[i].len6, m4, m6);
		CHECK(!memcmp(m4, cases[i].m4, 4) && !m4[4] && !m4[15],
		      "/%u: IPv4 mask %u.%u.%u.%u", cases[i].len4, m4[0], m4[1],
		      m4[2], m4[3]);
		CHECK(!memcmp(m6, cases[i].m6, 16), "/%u: IPv6 mask wrong",
		      cases[i].len6);
	}
}

static void test_conf(void)
{
	struct policy_tenant t = { .src_rate = { 10, 1 }, .src_burst = 20,
				   .src_len4 = 24, .src_len6 = 64 };
	struct rl_src_conf c;

	memset(&c, 0xff, sizeof(c));
	c.overflow_tat = 12345;
	src_conf_write(&c, &t, false);
	CHECK(c.interval_ns == 100000000ULL && c.tolerance_ns == 2000000000ULL,
	      "10/s burst 20: interval %llu tolerance %llu",
	      (unsigned long long)c.interval_ns,
	      (unsigned long long)c.tolerance_ns);
	CHECK(c.mask4[2] == 255 && c.mask4[3] == 0 && c.mask6[7] == 255 &&
	      c.mask6[8] == 0, "masks /24,/64 not written");
	CHECK(c.overflow_tat == 12345, "a change refilled the overflow bucket");
	src_conf_write(&c, &t, true);
	CHECK(c.overflow_tat == 0, "a new tenant's overflow bucket is not full");
	t.src_rate.count = 0;
	c.overflow_tat = 5;
	src_conf_write(&c, &t, false);
	CHECK(c.interval_ns == 0 && c.tolerance_ns == 0 && !c.mask4[0] &&
	      !c.mask6[0] && c.overflow_tat == 0, "off did not clear the entry");
}

static void test_reclaimable(void)
{
	struct rl_src s = { .tat = 1000 };

	CHECK(!src_reclaimable(&s, 999), "a bucket in debt reclaimed");
	CHECK(src_reclaimable(&s, 1000), "a full bucket (tat = now) kept");
	s.tat = 0;
	CHECK(src_reclaimable(&s, 1), "a never-used entry kept");
}

static struct rl_src_key key(uint32_t tenant, int family, const char *addr)
{
	struct rl_src_key k = { .tenant = tenant, .family = (uint32_t)family };

	inet_pton(family == 4 ? AF_INET : AF_INET6, addr, k.addr);
	return k;
}

/* Each tenant's share of the table: an equal part, rounded down, so the
 * shares never add up to more than the table while it has an entry per
 * tenant; the whole table for one tenant or none; never 0 (no share). */
static void test_share(void)
{
	static const struct {
		uint32_t table, tenants;
		uint64_t want;
	} cases[] = {
		{ 65536, 0, 65536 }, { 65536, 1, 65536 }, { 65536, 4, 16384 },
		{ 16, 2, 8 }, { 16, 3, 5 }, { 16, 16, 1 }, { 16, 17, 1 },
		{ 16u << 20, 1u << 20, 16 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t got = src_share(cases[i].table, cases[i].tenants);

		CHECK(got == cases[i].want, "table %u over %u tenants: %llu, "
		      "want %llu", cases[i].table, cases[i].tenants,
		      (unsigned long long)got, (unsigned long long)cases[i].want);
		CHECK(got > 0, "table %u over %u tenants: no share",
		      cases[i].table, cases[i].tenants);
		CHECK(cases[i].tenants > cases[i].table ||
		      got * cases[i].tenants <= cases[i].table,
		      "table %u over %u tenants: shares overfill it",
		      cases[i].table, cases[i].tenants);
	}
}

static void test_format(void)
{
	static const struct {
		int family;
		const char *addr;
		uint8_t len4, len6;
		const char *want;
	} cases[] = {
		{ 4, "192.0.2.7", 32, 64, "192.0.2.7" },
		{ 4, "192.0.2.0", 24, 64, "192.0.2.0/24" },
		{ 6, "2001:db8:1:2::", 32, 64, "2001:db8:1:2::/64" },
		{ 6, "2001:db8::5", 32, 128, "2001:db8::5" },
	};
	char buf[64];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rl_src_key k = key(1, cases[i].family, cases[i].addr);

		src_key_format(&k, cases[i].len4, cases[i].len6, buf, sizeof(buf));
		CHECK(!strcmp(buf, cases[i].want), "%s: '%s', want '%s'",
		      cases[i].addr, buf, cases[i].want);
	}
}

static void test_top_pick(void)
{
	struct rl_src_top slots[8] = { 0 };
	struct src_top_row rows[8];
	size_t n;

	slots[1] = (struct rl_src_top){ key(1, 4, "192.0.2.1"), 5 };
	slots[3] = (struct rl_src_top){ key(1, 4, "192.0.2.2"), 50 };
	slots[4] = (struct rl_src_top){ key(2, 4, "192.0.2.3"), 500 };
	slots[6] = (struct rl_src_top){ key(1, 4, "192.0.2.4"), 5 };
	slots[7] = (struct rl_src_top){ key(1, 4, "192.0.2.9"), 0 };
	n = src_top_pick(slots, 8, 1, rows, 8);
	CHECK(n == 3, "%zu rows of tenant 1, want 3 (a slot with no refusal "
	      "is empty)", n);
	CHECK(n == 3 && rows[0].denied == 50 && rows[1].denied == 5 &&
	      rows[1].key.addr[3] == 1 && rows[2].key.addr[3] == 4,
	      "not heaviest first, ties by key");
	n = src_top_pick(slots, 8, UINT32_MAX, rows, 2);
	CHECK(n == 2 && rows[0].denied == 500 && rows[1].denied == 50,
	      "any tenant, at most 2: %zu rows", n);
	CHECK(src_top_pick(slots, 8, 3, rows, 8) == 0, "tenant 3 has none");
}

int main(void)
{
	CHECK_RUN(test_masks);
	CHECK_RUN(test_conf);
	CHECK_RUN(test_reclaimable);
	CHECK_RUN(test_share);
	CHECK_RUN(test_format);
	CHECK_RUN(test_top_pick);
	return check_exit();
}
