// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Mutation fuzzer for a running rlagent's control socket, and a generator
 * of mutated policy.json files.
 *
 *   ctl_fuzz --socket PATH --pid PID [--seconds N] [--seed N]
 *       Sends batches of mutated requests (valid requests of the read-only
 *       commands and tenant.set, with bytes flipped, cut, duplicated, numbers
 *       made huge, values nested deep, invalid UTF-8, NULs) and checks after
 *       each batch: one JSON object back per line, the agent's PID alive,
 *       `status` answered within 1 s, and the tenant list exactly the
 *       tenants it had plus those a mutated tenant.set validly created or
 *       changed.  Also sends one line over the 64 MiB limit (error, then
 *       closed) and one half line left hanging.  Exit 0 ok, 1 failed.
 *
 *   ctl_fuzz --mutate-state SEED FILE
 *       Writes one mutated policy.json (from a valid one, pretty-printed
 *       or laid out as the agent writes it) to FILE.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>

#include "ctl_proto.h"

#define LINE_MAX_BYTES	CTL_LINE_MAX
#define BATCH		64

static unsigned long long rng = 0x9e3779b97f4a7c15ULL;
static const char *sock_path;
static pid_t agent_pid;

static unsigned long long rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- mutation ------------------------------------------------------------- */

struct buf {
	char *p;
	size_t len, cap;
};

static void buf_reserve(struct buf *b, size_t n)
{
	if (b->len + n + 1 <= b->cap)
		return;
	while (b->cap < b->len + n + 1)
		b->cap = b->cap ? b->cap * 2 : 256;
	b->p = realloc(b->p, b->cap);
	if (!b->p) {
		perror("realloc");
		exit(1);
	}
}

static void buf_insert(struct buf *b, size_t at, const char *s, size_t n)
{
	buf_reserve(b, n);
	memmove(b->p + at + n, b->p + at, b->len - at);
	memcpy(b->p + at, s, n);
	b->len += n;
}

static void buf_delete(struct buf *b, size_t at, size_t n)
{
	memmove(b->p + at, b->p + at + n, b->len - at - n);
	b->len -= n;
}

static const char *const huge_numbers[] = {
	"18446744073709551616", "9223372036854775807", "-9223372036854775809",
	"-1", "0", "1e400", "-0", "4096", "100000001", "99999999999999999999999999",
	"1.5", "0x10",
};

static const char *const bad_utf8[] = {
	"\xc3\x28", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80", "\xff", "\xc0\xaf",
	"\xe2\x82",
};

static const char *const tokens[] = {
	"null", "true", "[]", "{}", "\"\"", "\"\\u0000\"", "\\u0000", ",", ":",
	"\"cmd\"", "\"tenant\"", "\"name\"", "{\"a\":1,\"a\":2}", "\"rate\":\"1/s\"",
};

/* One random change of b. */
static void mutate_once(struct buf *b)
{
	size_t at = b->len ? rnd() % b->len : 0, n, i;

	switch (rnd() % 11) {
	case 0:		/* bit flips */
		for (i = 0; b->len && i < 1 + rnd() % 6; i++)
			b->p[rnd() % b->len] ^= (char)(1u << (rnd() % 8));
		break;
	case 1:		/* a byte set to something interesting */
		if (b->len)
			b->p[at] = "\x00\xff\"{}[]\\\r:,0\x7f"[rnd() % 14];
		break;
	case 2:		/* truncation */
		b->len = at;
		break;
	case 3:		/* duplication of a chunk */
		n = b->len - at ? 1 + rnd() % (b->len - at) : 0;
		if (n) {
			char *tmp = malloc(n);

			memcpy(tmp, b->p + at, n);
			buf_insert(b, at + n, tmp, n);
			free(tmp);
		}
		break;
	case 4:		/* deletion of a chunk */
		n = b->len - at ? 1 + rnd() % (b->len - at) : 0;
		buf_delete(b, at, n);
		break;
	case 5: {	/* a number replaced by a huge or odd one */
		const char *h = huge_numbers[rnd() % (sizeof(huge_numbers) /
						      sizeof(huge_numbers[0]))];
		size_t s = at;

		while (s < b->len && (b->p[s] < '0' || b->p[s] > '9'))
			s++;
		n = 0;
		while (s + n < b->len && b->p[s + n] >= '0' && b->p[s + n] <= '9')
			n++;
		buf_delete(b, s, n);
		buf_insert(b, s, h, strlen(h));
		break;
	}
	case 6: {	/* deep nesting */
		size_t depth = 1 + rnd() % 5000;
		char *open = malloc(depth);

		memset(open, rnd() % 2 ? '[' : '{', depth);
		buf_insert(b, at, open, depth);
		free(open);
		break;
	}
	case 7: {	/* invalid UTF-8 */
		const char *u = bad_utf8[rnd() % (sizeof(bad_utf8) / sizeof(bad_utf8[0]))];

		buf_insert(b, at, u, strlen(u));
		break;
	}
	case 8:		/* an embedded NUL, raw or escaped */
		if (rnd() % 2)
			buf_insert(b, at, "", 1);
		else
			buf_insert(b, at, "\\u0000", 6);
		break;
	case 9: {	/* a JSON token out of place */
		const char *t = tokens[rnd() % (sizeof(tokens) / sizeof(tokens[0]))];

		buf_insert(b, at, t, strlen(t));
		break;
	}
	default: {	/* a long string */
		size_t len = rnd() % 2 ? 64 + rnd() % 64 : 1 + rnd() % 70000;
		char *s = malloc(len);

		memset(s, 'a' + (char)(rnd() % 26), len);
		buf_insert(b, at, s, len);
		free(s);
		break;
	}
	}
}

static void mutate(struct buf *b, const char *seed)
{
	unsigned int k = 1 + rnd() % 3;

	b->len = 0;
	buf_insert(b, 0, seed, strlen(seed));
	while (k--)
		mutate_once(b);
	/* One line: a newline inside would split it into two requests. */
	for (size_t i = 0; i < b->len; i++)
		if (b->p[i] == '\n')
			b->p[i] = ' ';
}

/* --- requests -------------------------------------------------------------- */

/* Only commands that change nothing, and tenant.set of names the baseline
 * does not use; tenant.get and stats name tenants that do not exist, so
 * that even a command name mutated into tenant.del finds nothing. */
static const char *const seeds[] = {
	"{\"cmd\":\"version\"}",
	"{\"cmd\":\"status\"}",
	"{\"cmd\":\"tenant.list\"}",
	"{\"cmd\":\"tenant.get\",\"name\":\"nope\"}",
	"{\"cmd\":\"stats\"}",
	"{\"cmd\":\"stats\",\"name\":\"nope\"}",
	"{\"cmd\":\"tenant.set\",\"tenant\":{\"name\":\"fzq\",\"rate\":\"5/s\","
	"\"burst\":5,\"match\":[\"203.0.113.0/24\",\"2001:db8:f::/48\"],"
	"\"ports\":[80,443],\"action\":\"rst\",\"shadow\":false,\"overshoot\":10,"
	"\"fail\":\"allow\"}}",
	"{\"cmd\":\"tenant.set\",\"tenant\":{\"name\":\"fzr\",\"rate\":\"100/m\","
	"\"match\":[\"203.0.113.128/25\"]}}",
};

static int connect_agent(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static bool send_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		p += n;
		len -= (size_t)n;
	}
	return true;
}

/* Reads one reply line within timeout_ms into *out (caller frees).  Lines
 * already read past the first stay in rb. */
static struct buf rb;

static int read_line(int fd, int timeout_ms, char **out)
{
	double deadline = now_s() + timeout_ms / 1000.0;

	for (;;) {
		char *nl = rb.len ? memchr(rb.p, '\n', rb.len) : NULL;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		double left;
		ssize_t n;

		if (nl) {
			size_t len = (size_t)(nl - rb.p);

			*out = strndup(rb.p, len);
			buf_delete(&rb, 0, len + 1);
			return 0;
		}
		left = deadline - now_s();
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(&p, 1, (int)(left * 1000) + 1) <= 0)
			continue;
		buf_reserve(&rb, 65536);
		n = read(fd, rb.p + rb.len, 65536);
		if (n == 0)
			return -EPIPE;
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			rb.len += (size_t)n;
	}
}

static int failures;

static void failf(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static void failf(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ctl_fuzz: FAIL: ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	failures++;
}

/* One request, one reply; NULL (and a failure) if none came in time. */
static json_t *request(int fd, const char *line, int timeout_ms)
{
	json_error_t jerr;
	char *reply = NULL;
	json_t *j;
	int err;

	if (!send_all(fd, line, strlen(line)) || !send_all(fd, "\n", 1)) {
		failf("couldn't send '%.60s': %s", line, strerror(errno));
		return NULL;
	}
	err = read_line(fd, timeout_ms, &reply);
	if (err) {
		failf("no reply to '%.60s' within %d ms: %s", line, timeout_ms,
		      strerror(-err));
		return NULL;
	}
	j = json_loads(reply, 0, &jerr);
	if (!j)
		failf("reply to '%.60s' is not JSON: %.100s", line, reply);
	free(reply);
	return j;
}

/* The tenant list, keyed by name, "id" and "version" included. */
static json_t *tenant_list(int fd)
{
	json_t *r = request(fd, "{\"cmd\":\"tenant.list\"}", 1000), *out, *t;
	size_t i;

	if (!r)
		return NULL;
	out = json_object();
	json_array_foreach(json_object_get(r, "tenants"), i, t)
		json_object_set(out, json_string_value(json_object_get(t, "name")), t);
	json_decref(r);
	return out;
}

static bool agent_alive(void)
{
	return kill(agent_pid, 0) == 0;
}

/* Status answers within 1 s and the agent's PID lives. */
static bool healthy(int fd, const char *when)
{
	double t0 = now_s();
	json_t *r = request(fd, "{\"cmd\":\"status\"}", 1000);
	bool ok = r && json_is_true(json_object_get(r, "ok"));

	if (!agent_alive()) {
		failf("agent %d died %s", (int)agent_pid, when);
		ok = false;
	} else if (!ok) {
		failf("status not answered ok %s (%.3f s)", when, now_s() - t0);
	}
	json_decref(r);
	return ok;
}

/* The line over the limit: one error reply, then the connection closes;
 * a half line left hanging: the agent still serves others meanwhile. */
static void limits(void)
{
	int fd = connect_agent(), fd2;
	size_t n = LINE_MAX_BYTES + 100;
	char *big = malloc(n), *reply = NULL;
	int err;

	if (fd < 0 || !big) {
		failf("couldn't connect for the oversized line");
		goto out;
	}
	memset(big, '[', n);
	/* The agent may close before it has read it all: no check. */
	(void)send_all(fd, big, n);
	err = read_line(fd, 2000, &reply);
	if (err || !strstr(reply, "\"ok\":false"))
		failf("oversized line: want an error reply, got %s",
		      err ? strerror(-err) : reply);
	free(reply);
	reply = NULL;
	rb.len = 0;
	fd2 = connect_agent();
	if (fd2 < 0) {
		failf("couldn't connect after the oversized line");
		goto out;
	}
	send_all(fd2, "{\"cmd\":\"sta", 11);	/* and nothing more */
	{
		int fd3 = connect_agent();

		if (fd3 < 0 || !healthy(fd3, "while a client hangs mid-line"))
			failf("a half line blocks other clients");
		if (fd3 >= 0)
			close(fd3);
	}
	rb.len = 0;
	close(fd2);
out:
	if (fd >= 0)
		close(fd);
	free(big);
}

static int run(double seconds)
{
	struct buf b = { 0 };
	json_t *expect, *got;
	unsigned long long lines = 0, oks = 0, sets = 0, batches = 0;
	double end = now_s() + seconds;
	int fd = connect_agent();

	if (fd < 0) {
		failf("couldn't connect to '%s': %s", sock_path, strerror(errno));
		return 1;
	}
	expect = tenant_list(fd);
	if (!expect)
		return 1;
	limits();

	while (now_s() < end && failures == 0) {
		const char *sent[BATCH];
		struct buf lines_b[BATCH];
		int n = 0;

		memset(lines_b, 0, sizeof(lines_b));
		/* A batch on one connection; every few batches a fresh one. */
		if (batches % 8 == 7) {
			close(fd);
			rb.len = 0;
			fd = connect_agent();
			if (fd < 0) {
				failf("couldn't reconnect: %s", strerror(errno));
				break;
			}
		}
		for (int i = 0; i < BATCH; i++) {
			const char *seed = seeds[rnd() % (sizeof(seeds) / sizeof(seeds[0]))];
			struct buf *l = &lines_b[n];
			size_t k;

			mutate(l, seed);
			/* An empty line (or a lone CR) gets no reply. */
			for (k = 0; k < l->len && (l->p[k] == '\r'); k++)
				;
			if (l->len == 0 || (k == l->len))
				continue;
			buf_reserve(l, 1);
			l->p[l->len] = '\0';
			sent[n++] = l->p;
		}
		/* Pipelined: all lines first, then all replies. */
		for (int i = 0; i < n; i++) {
			if (!send_all(fd, lines_b[i].p, lines_b[i].len) ||
			    !send_all(fd, "\n", 1)) {
				failf("couldn't send: %s", strerror(errno));
				break;
			}
		}
		for (int i = 0; i < n && failures == 0; i++) {
			json_error_t jerr;
			char *reply = NULL;
			int err = read_line(fd, 2000, &reply);
			json_t *r, *t;

			if (err) {
				failf("no reply to line %d of batch %llu within 2 s: %s; "
				      "line: %.200s", i, batches, strerror(-err), sent[i]);
				break;
			}
			r = json_loads(reply, 0, &jerr);
			if (!json_is_object(r) || !json_is_boolean(json_object_get(r, "ok"))) {
				failf("reply is not {\"ok\":...}: %.200s", reply);
			} else if (json_is_true(json_object_get(r, "ok"))) {
				oks++;
				t = json_object_get(r, "tenant");
				/* A valid tenant.set: expect it in the list. */
				if (json_is_object(t) && strstr(sent[i], "tenant.set") &&
				    !json_object_get(r, "tenants")) {
					json_object_set(expect, json_string_value(
						json_object_get(t, "name")), t);
					sets++;
				}
			}
			json_decref(r);
			free(reply);
			lines++;
		}
		for (int i = 0; i < BATCH; i++)
			free(lines_b[i].p);
		batches++;
		if (failures)
			break;
		if (!healthy(fd, "after a batch"))
			break;
		got = tenant_list(fd);
		if (!got)
			break;
		if (!json_equal(got, expect)) {
			char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
			char *e = json_dumps(expect, JSON_COMPACT | JSON_SORT_KEYS);

			failf("tenant list changed beyond the valid tenant.set "
			      "requests:\n  got    %.2000s\n  expect %.2000s", g, e);
			free(g);
			free(e);
		}
		json_decref(got);
	}
	printf("ctl_fuzz: %llu lines in %llu batches, %llu ok replies, %llu valid "
	       "tenant.set, %d failure(s)\n", lines, batches, oks, sets, failures);
	json_decref(expect);
	free(b.p);
	close(fd);
	return failures ? 1 : 0;
}

/* --- policy.json ------------------------------------------------------------ */

static const char state_seed[] =
	"{\n \"tenants\": [\n  {\n   \"action\": \"rst\",\n   \"burst\": 100,\n"
	"   \"fail\": \"static\",\n   \"id\": 0,\n   \"match\": [\n"
	"    \"192.0.2.0/24\",\n    \"2001:db8::/32\"\n   ],\n   \"name\": \"web\",\n"
	"   \"ports\": [\n    80,\n    443\n   ],\n   \"rate\": \"100/s\",\n"
	"   \"shadow\": false,\n   \"version\": 1764480000000\n  },\n  {\n"
	"   \"action\": \"drop\",\n   \"burst\": 5,\n   \"fail\": \"deny\",\n"
	"   \"id\": 7,\n   \"match\": [\n    \"198.51.100.0/24\"\n   ],\n"
	"   \"name\": \"api\",\n   \"ports\": [],\n   \"rate\": \"300/m\",\n"
	"   \"shadow\": true,\n   \"version\": 3\n  }\n ],\n \"version\": 12\n}\n";

/* The same policy as the agent writes it: a tenant a line, which a start
 * reads line by line. */
static const char state_seed_lines[] =
	"{\"version\":12,\"deleted\":[{\"name\":\"old\",\"version\":9}],"
	"\"tenants\":[\n"
	"{\"action\":\"rst\",\"burst\":100,\"fail\":\"static\",\"id\":0,"
	"\"match\":[\"192.0.2.0/24\",\"2001:db8::/32\"],\"name\":\"web\","
	"\"ports\":[80,443],\"rate\":\"100/s\",\"shadow\":false,"
	"\"version\":1764480000000},\n"
	"{\"action\":\"drop\",\"burst\":5,\"fail\":\"deny\",\"id\":7,"
	"\"match\":[\"198.51.100.0/24\"],\"name\":\"api\",\"ports\":[],"
	"\"rate\":\"300/m\",\"shadow\":true,\"version\":3}\n]}\n";

static int mutate_state(const char *file)
{
	const char *seed = rnd() % 2 ? state_seed : state_seed_lines;
	struct buf b = { 0 };
	unsigned int k = 1 + rnd() % 4;
	FILE *f;

	buf_insert(&b, 0, seed, strlen(seed));
	while (k--)
		mutate_once(&b);
	f = fopen(file, "w");
	if (!f || fwrite(b.p, 1, b.len, f) != b.len || fclose(f)) {
		fprintf(stderr, "ctl_fuzz: couldn't write '%s': %s\n", file,
			strerror(errno));
		return 1;
	}
	free(b.p);
	return 0;
}

int main(int argc, char **argv)
{
	double seconds = 8;
	int i;

	if (argc == 4 && !strcmp(argv[1], "--mutate-state")) {
		rng = strtoull(argv[2], NULL, 0) * 0x2545f4914f6cdd1dULL | 1;
		for (i = 0; i < 8; i++)
			rnd();
		return mutate_state(argv[3]);
	}
	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--socket"))
			sock_path = argv[i + 1];
		else if (!strcmp(argv[i], "--pid"))
			agent_pid = (pid_t)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--seconds"))
			seconds = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--seed"))
			rng = strtoull(argv[i + 1], NULL, 0) | 1;
		else
			break;
	}
	if (!sock_path || agent_pid <= 0 || i != argc) {
		fprintf(stderr, "usage: ctl_fuzz --socket PATH --pid PID [--seconds N] "
			"[--seed N]\n       ctl_fuzz --mutate-state SEED FILE\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ctl_fuzz: seed %llu, %.0f s against pid %d\n", rng, seconds,
	       (int)agent_pid);
	return run(seconds);
}
