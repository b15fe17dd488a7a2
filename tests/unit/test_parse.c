/* test_parse: the shared parsers as tables - unsigned integers (digits
 * only, bounds, 2^64 - 1 and one past it) and HOST:PORT (IPv4, names,
 * bracketed IPv6, and every way to get it wrong).
 */
#include <errno.h>
#include <string.h>

#include "parse.h"
#include "check.h"

static void test_parse_u64(void)
{
	static const struct {
		const char *s;
		uint64_t lo, hi;
		int ret;
		uint64_t v;
	} u[] = {
		{ "0", 0, 10, 0, 0 },
		{ "10", 0, 10, 0, 10 },
		{ "11", 0, 10, -ERANGE, 0 },
		{ "4", 5, 10, -ERANGE, 0 },
		{ "007", 0, 10, 0, 7 },
		{ "18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX },
		{ "18446744073709551616", 0, UINT64_MAX, -ERANGE, 0 },
		{ "99999999999999999999999", 0, UINT64_MAX, -ERANGE, 0 },
		{ "", 0, 10, -EINVAL, 0 },
		{ "-1", 0, 10, -EINVAL, 0 },
		{ "+1", 0, 10, -EINVAL, 0 },
		{ " 1", 0, 10, -EINVAL, 0 },
		{ "1 ", 0, 10, -EINVAL, 0 },
		{ "0x10", 0, 100, -EINVAL, 0 },
		{ "1e3", 0, 10000, -EINVAL, 0 },
	};

	for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
		uint64_t v = 12345;
		int ret = parse_u64(u[i].s, u[i].lo, u[i].hi, &v);

		CHECK(ret == u[i].ret, "'%s' in [%llu, %llu]: %d, want %d",
		      u[i].s, (unsigned long long)u[i].lo,
		      (unsigned long long)u[i].hi, ret, u[i].ret);
		CHECK(ret || v == u[i].v, "'%s': %llu, want %llu", u[i].s,
		      (unsigned long long)v, (unsigned long long)u[i].v);
		CHECK(!ret || v == 12345, "'%s': the output changed on failure",
		      u[i].s);
	}
}

/* A length-bounded number: the digits before a separator. */
static void test_parse_u64n(void)
{
	uint64_t v = 0;

	CHECK(parse_u64n("443,80", 3, 65535, &v) == 0 && v == 443,
	      "the first 3 bytes of '443,80': %llu", (unsigned long long)v);
}

static void test_parse_hostport(void)
{
	static const struct {
		const char *s;
		int ret;
		const char *host;
		uint16_t port;
	} hp[] = {
		{ "192.0.2.1:6379", 0, "192.0.2.1", 6379 },
		{ "redis.example:1", 0, "redis.example", 1 },
		{ "[2001:db8::1]:65535", 0, "2001:db8::1", 65535 },
		{ "[::1]:80", 0, "::1", 80 },
		{ "192.0.2.1", -EINVAL, NULL, 0 },
		{ "192.0.2.1:", -EINVAL, NULL, 0 },
		{ ":6379", -EINVAL, NULL, 0 },
		{ "192.0.2.1:0", -EINVAL, NULL, 0 },
		{ "192.0.2.1:65536", -EINVAL, NULL, 0 },
		{ "192.0.2.1:-1", -EINVAL, NULL, 0 },
		{ "192.0.2.1:80x", -EINVAL, NULL, 0 },
		{ "2001:db8::1:80", -EINVAL, NULL, 0 },
		{ "[2001:db8::1]80", -EINVAL, NULL, 0 },
		{ "[2001:db8::1:80", -EINVAL, NULL, 0 },
		{ "[]:80", -EINVAL, NULL, 0 },
		{ "a-host-name-longer-than-the-buffer-we-give:80", -EINVAL, NULL, 0 },
	};

	for (size_t i = 0; i < sizeof(hp) / sizeof(hp[0]); i++) {
		char host[32] = "unchanged";
		uint16_t port = 7;
		int ret = parse_hostport(hp[i].s, host, sizeof(host), &port);

		CHECK(ret == hp[i].ret, "'%s': %d, want %d", hp[i].s, ret,
		      hp[i].ret);
		if (!hp[i].ret)
			CHECK(!strcmp(host, hp[i].host) && port == hp[i].port,
			      "'%s': host '%s' port %u, want '%s' %u", hp[i].s,
			      host, port, hp[i].host, hp[i].port);
		else
			CHECK(!strcmp(host, "unchanged") && port == 7,
			      "'%s': outputs changed on failure", hp[i].s);
	}
}

int main(void)
{
	CHECK_RUN(test_parse_u64);
	CHECK_RUN(test_parse_u64n);
	CHECK_RUN(test_parse_hostport);
	return check_exit();
}
