// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A fake Redis for rlagent's fleet mode: speaks enough RESP to look healthy
 * (SCRIPT LOAD, EVALSHA of rlgate's scripts, SMEMBERS, SUBSCRIBE, AUTH,
 * PING), then, from SIGUSR1 on, misbehaves in one chosen way.
 *
 *   fake_redis --unix PATH --mode MODE [--seed N]
 *
 * Modes (what replaces the replies once SIGUSR1 arrived):
 *   error     every command: -ERR
 *   string    EVALSHA: a bulk string where integers are expected
 *   negative  EVALSHA: negative integers
 *   wronglen  EVALSHA: integer arrays of the wrong length
 *   nested    EVALSHA: nested arrays
 *   truncated every command: half a reply, then the connection is closed
 *   huge      every command: a 64 MiB bulk string declared, 1 MiB sent, then
 *             nothing more
 *   garbage   every command: random bytes
 *   silent    no reply to anything, ever again
 *   pubsub    the subscriber gets malformed and hostile messages
 *   pubsub-short  the subscriber gets arrays too short for a message
 *   policy    the subscriber announces tenants whose stored policy (from
 *             policy_get) is mutated JSON
 *   extra     EVALSHA: the right reply, then an unsolicited second one
 * Before SIGUSR1 (and for commands a mode leaves alone) the replies are
 * those of a healthy Redis with plenty of tokens.
 *
 * Modes that heal instead: they misbehave from the start until SIGUSR1,
 * as a Redis that is not ready yet, and are healthy from then on:
 *   loading     SCRIPT, EVALSHA, SMEMBERS: -LOADING (loading its dataset)
 *   busy        the same with -BUSY (a long script runs)
 *   masterdown  the same with -MASTERDOWN (a replica without its master)
 *   stall       reads nothing from its clients (DEBUG SLEEP): the commands
 *               wait in the socket and are answered after SIGUSR1
 * Logs one line per connection and per command to stderr.  Exits on
 * SIGTERM.
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
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CLIENTS	64
#define MAX_ARGS	32
#define IN_MAX		(1 << 20)

struct client {
	int fd;
	char *in;
	size_t in_len;
	bool subscriber;
	bool dead;		/* stop replying, keep the connection */
};

static volatile sig_atomic_t bad, stop;
static const char *mode = "error";
static bool heals;		/* a mode that misbehaves until SIGUSR1 */
static struct client clients[MAX_CLIENTS];
static unsigned int scripts_loaded;
static unsigned long long rng = 88172645463325252ULL;

static unsigned long long rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		bad = 1;
	else
		stop = 1;
}

/* Whether the misbehaviour is in force now. */
static bool sick(void)
{
	return heals ? !bad : bad;
}

static bool is(const char *m)
{
	return sick() && strcmp(mode, m) == 0;
}

static void out(struct client *c, const void *buf, size_t len)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			c->dead = true;
			return;
		}
		p += n;
		len -= (size_t)n;
	}
}

static void outf(struct client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void outf(struct client *c, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0)
		out(c, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

static void bulk(struct client *c, const char *s, size_t len)
{
	outf(c, "$%zu\r\n", len);
	out(c, s, len);
	out(c, "\r\n", 2);
}

static void drop(struct client *c)
{
	close(c->fd);
	free(c->in);
	memset(c, 0, sizeof(*c));
	c->fd = -1;
}

/* Mutations of a valid tenant policy, for mode policy. */
static const char *const policies[] = {
	"{\"name\":\"fz\",\"rate\":\"10/s\",\"burst\":10,\"match\":[\"198.51.100.0/24\"],"
	"\"ports\":[],\"action\":\"drop\",\"shadow\":false,\"fail\":\"static\"}",
};

static size_t mutate_policy(char *buf, size_t cap)
{
	const char *src = policies[0];
	size_t n = strlen(src), i, k;

	if (n >= cap)
		n = cap - 1;
	memcpy(buf, src, n);
	switch (rnd() % 8) {
	case 0:		/* bit flips */
		for (k = 0; k < 1 + rnd() % 4; k++)
			buf[rnd() % n] ^= (char)(1 << (rnd() % 8));
		break;
	case 1:		/* truncation */
		n = rnd() % n;
		break;
	case 2:		/* a huge number where the burst was */
		n = (size_t)snprintf(buf, cap, "{\"name\":\"fz\",\"rate\":\"%llu/s\","
				     "\"burst\":%llu%s,\"match\":[\"198.51.100.0/24\"]}",
				     rnd(), rnd(), rnd() % 2 ? "e999" : "");
		break;
	case 3:		/* deep nesting */
		k = 0;
		for (i = 0; i < 5000 && k < cap - 2; i++)
			buf[k++] = '[';
		n = k;
		break;
	case 4:		/* invalid UTF-8 in the name */
		n = (size_t)snprintf(buf, cap, "{\"name\":\"fz\xc3\x28\xff\",\"rate\":"
				     "\"1/s\",\"match\":[\"198.51.100.0/24\"]}");
		break;
	case 5:		/* embedded NUL */
		n = (size_t)snprintf(buf, cap, "{\"name\":\"fz\\u0000x\",\"rate\":"
				     "\"1/s\",\"match\":[\"198.51.100.0/24\"]}");
		break;
	case 6:		/* another tenant's name */
		n = (size_t)snprintf(buf, cap, "{\"name\":\"other\",\"rate\":\"1/s\","
				     "\"match\":[\"198.51.100.0/24\"]}");
		break;
	default:	/* random bytes */
		n = rnd() % 64;
		for (i = 0; i < n; i++)
			buf[i] = (char)rnd();
		break;
	}
	return n;
}

/* The reply a healthy Redis with rlgate's scripts would give. */
static void reply_good(struct client *c, int argc, char **argv, size_t *lens)
{
	const char *cmd = argv[0];

	if (!strcasecmp(cmd, "PING")) {
		outf(c, "+PONG\r\n");
	} else if (!strcasecmp(cmd, "AUTH") || !strcasecmp(cmd, "SELECT")) {
		outf(c, "+OK\r\n");
	} else if (!strcasecmp(cmd, "SCRIPT")) {
		char sha[41];

		snprintf(sha, sizeof(sha), "%040u", scripts_loaded++ % 6);
		bulk(c, sha, 40);
	} else if (!strcasecmp(cmd, "SMEMBERS")) {
		if (is("policy"))
			outf(c, "*1\r\n$2\r\nfz\r\n");
		else
			outf(c, "*0\r\n");
	} else if (!strcasecmp(cmd, "SUBSCRIBE") && argc >= 2) {
		c->subscriber = true;
		outf(c, "*3\r\n$9\r\nsubscribe\r\n");
		bulk(c, argv[1], lens[1]);
		outf(c, ":1\r\n");
	} else if (!strcasecmp(cmd, "EVALSHA") && argc >= 4) {
		int nkeys = atoi(argv[2]);
		const char *key = argv[3];
		int nargs = argc - 3 - nkeys;

		if (!strcmp(key, "rl:agents") && nargs == 4) {
			outf(c, "*2\r\n:1\r\n$0\r\n\r\n");	/* heartbeat */
		} else if (!strcmp(key, "rl:agents")) {
			outf(c, ":1\r\n");			/* deregister */
		} else if (nkeys == 2) {
			outf(c, "*2\r\n:1\r\n:%s\r\n", argc > 6 ? argv[6] : "1");
		} else if (strstr(key, ":policy")) {
			if (is("policy")) {
				char buf[8192];
				size_t n = mutate_policy(buf, sizeof(buf));

				/* Newer than any version the agent made
				 * (milliseconds since 1970), so it is read. */
				static unsigned long long version = 4000000000000ULL;

				outf(c, "*2\r\n:%llu\r\n", ++version);
				bulk(c, buf, n);
			} else {
				outf(c, "*2\r\n:0\r\n$0\r\n\r\n");
			}
		} else if (nargs == 5) {
			/* lease: grant what was asked, plenty left */
			outf(c, "*3\r\n:%s\r\n:1000000\r\n:0\r\n", argv[7]);
		} else {
			outf(c, ":0\r\n");			/* refund */
		}
	} else {
		outf(c, "-ERR unknown command '%s'\r\n", cmd);
	}
}

static void reply_bad(struct client *c, int argc, char **argv, size_t *lens)
{
	bool evalsha = !strcasecmp(argv[0], "EVALSHA");
	char junk[256];
	size_t i, n;

	if (is("silent")) {
		return;
	} else if (is("loading") || is("busy") || is("masterdown")) {
		static const char *const why[] = {
			"LOADING Redis is loading the dataset in memory",
			"BUSY Redis is busy running a script. You can only call "
			"SCRIPT KILL or SHUTDOWN NOSCRIPT.",
			"MASTERDOWN Link with MASTER is down and "
			"replica-serve-stale-data is set to 'no'.",
		};

		if (evalsha || !strcasecmp(argv[0], "SCRIPT") ||
		    !strcasecmp(argv[0], "SMEMBERS"))
			outf(c, "-%s\r\n", why[is("loading") ? 0 : is("busy") ? 1 : 2]);
		else
			reply_good(c, argc, argv, lens);
	} else if (is("error")) {
		outf(c, "-ERR fake failure\r\n");
	} else if (is("truncated")) {
		static const char *const halves[] = {
			"*3\r\n:1\r\n:", "$40\r\n0000", "*2\r\n", ":12", "$5\r\nab",
		};

		outf(c, "%s", halves[rnd() % 5]);
		c->dead = true;
		shutdown(c->fd, SHUT_RDWR);
	} else if (is("huge")) {
		static char mib[1 << 20];

		memset(mib, 'x', sizeof(mib));
		outf(c, "$%d\r\n", 64 << 20);
		out(c, mib, sizeof(mib));
		c->dead = true;
	} else if (is("garbage")) {
		n = 1 + rnd() % sizeof(junk);
		for (i = 0; i < n; i++)
			junk[i] = (char)rnd();
		junk[0] = (char)"\x00\xff!@ "[rnd() % 5];
		out(c, junk, n);
	} else if (evalsha && is("string")) {
		outf(c, "$5\r\nhello\r\n");
	} else if (evalsha && is("negative")) {
		outf(c, "*3\r\n:-5\r\n:-1\r\n:-100\r\n");
	} else if (evalsha && is("wronglen")) {
		if (rnd() % 2)
			outf(c, "*2\r\n:1\r\n:1\r\n");
		else
			outf(c, "*4\r\n:1\r\n:1\r\n:1\r\n:1\r\n");
	} else if (evalsha && is("nested")) {
		outf(c, "*3\r\n*1\r\n:1\r\n*0\r\n*2\r\n:1\r\n$1\r\nx\r\n");
	} else if (evalsha && is("extra")) {
		reply_good(c, argc, argv, lens);
		outf(c, ":7\r\n");
	} else {
		reply_good(c, argc, argv, lens);
	}
}

/* Messages pushed to subscribers in mode pubsub, one per tick. */
static void push_pubsub(struct client *c)
{
	static const char *const msgs[] = {
		"*3\r\n$7\r\nmessage\r\n$9\r\nrl:policy\r\n:5\r\n",
		"*3\r\n$7\r\nmessage\r\n$9\r\nrl:policy\r\n$5\r\n../..\r\n",
		"*3\r\n$7\r\nmessage\r\n$9\r\nrl:policy\r\n$0\r\n\r\n",
		"*3\r\n$7\r\nmessage\r\n$9\r\nrl:policy\r\n*1\r\n:1\r\n",
		"*3\r\n$7\r\nmessage\r\n$9\r\nrl:policy\r\n$70\r\n"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
		"*4\r\n$7\r\nmessage\r\n$9\r\nrl:policy\r\n$2\r\nfz\r\n$1\r\nx\r\n",
		"*3\r\n$8\r\nmessages\r\n$9\r\nrl:policy\r\n$2\r\nfz\r\n",
		"*3\r\n$9\r\nsubscribe\r\n$8\r\nrl:other\r\n:2\r\n",
		":5\r\n",
		"$3\r\nabc\r\n",
	};
	/* Arrays too short for a pub/sub message. */
	static const char *const short_msgs[] = {
		"*0\r\n", "*1\r\n$7\r\nmessage\r\n",
	};
	static unsigned int k;
	const char *m;

	if (is("pubsub-short"))
		m = short_msgs[k % (sizeof(short_msgs) / sizeof(short_msgs[0]))];
	else
		m = msgs[k % (sizeof(msgs) / sizeof(msgs[0]))];
	out(c, m, strlen(m));
	k++;
}

/* Pushes to subscribers at most every 20 ms: a push answered by a fetch
 * must not turn into a busy loop between the two processes. */
static bool push_due(void)
{
	static struct timespec last;
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if ((now.tv_sec - last.tv_sec) * 1000000000L +
	    (now.tv_nsec - last.tv_nsec) < 20000000L)
		return false;
	last = now;
	return true;
}

/* Parses one RESP multibulk request from the front of c->in.  Returns the
 * bytes it used, 0 if incomplete, -1 if it is not RESP. */
static long parse(struct client *c, int *argc, char **argv, size_t *lens)
{
	char *p = c->in, *end = c->in + c->in_len, *nl;
	long n, i;

	if (c->in_len == 0)
		return 0;
	if (*p != '*')
		return -1;
	nl = memchr(p, '\n', (size_t)(end - p));
	if (!nl)
		return 0;
	n = strtol(p + 1, NULL, 10);
	if (n < 1 || n > MAX_ARGS)
		return -1;
	p = nl + 1;
	for (i = 0; i < n; i++) {
		long len;

		if (p >= end)
			return 0;
		if (*p != '$')
			return -1;
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			return 0;
		len = strtol(p + 1, NULL, 10);
		if (len < 0 || len > IN_MAX)
			return -1;
		p = nl + 1;
		if (end - p < len + 2)
			return 0;
		argv[i] = p;
		lens[i] = (size_t)len;
		p[len] = '\0';	/* overwrites the \r */
		p += len + 2;
	}
	*argc = (int)n;
	return p - c->in;
}

static void on_input(struct client *c)
{
	for (;;) {
		char *argv[MAX_ARGS];
		size_t lens[MAX_ARGS];
		int argc = 0;
		long used = parse(c, &argc, argv, lens);

		if (used < 0) {
			fprintf(stderr, "fake_redis: not RESP from client %d\n", c->fd);
			drop(c);
			return;
		}
		if (used == 0)
			return;
		fprintf(stderr, "fake_redis: %s%s %s%s\n", sick() ? "[bad] " : "",
			c->subscriber ? "sub" : "cmd", argv[0],
			argc > 1 ? "" : "");
		if (!c->dead) {
			if (sick() && !is("pubsub") && !is("policy"))
				reply_bad(c, argc, argv, lens);
			else
				reply_good(c, argc, argv, lens);
		}
		if (c->fd < 0)
			return;
		memmove(c->in, c->in + used, c->in_len - (size_t)used);
		c->in_len -= (size_t)used;
	}
}

int main(int argc, char **argv)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = NULL;
	struct sigaction act = { .sa_handler = on_signal };
	int lfd, i;

	for (i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--unix"))
			path = argv[i + 1];
		else if (!strcmp(argv[i], "--mode"))
			mode = argv[i + 1];
		else if (!strcmp(argv[i], "--seed"))
			rng = strtoull(argv[i + 1], NULL, 0) | 1;
		else
			break;
	}
	heals = !strcmp(mode, "loading") || !strcmp(mode, "busy") ||
		!strcmp(mode, "masterdown") || !strcmp(mode, "stall");
	if (!path || i != argc) {
		fprintf(stderr, "usage: fake_redis --unix PATH --mode MODE [--seed N]\n");
		return 2;
	}
	sigaction(SIGUSR1, &act, NULL);
	sigaction(SIGTERM, &act, NULL);
	sigaction(SIGINT, &act, NULL);
	signal(SIGPIPE, SIG_IGN);
	for (i = 0; i < MAX_CLIENTS; i++)
		clients[i].fd = -1;

	lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	unlink(path);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(lfd, 16) < 0) {
		fprintf(stderr, "fake_redis: couldn't listen on '%s': %s\n", path,
			strerror(errno));
		return 1;
	}
	fprintf(stderr, "fake_redis: listening on %s, mode %s\n", path, mode);

	while (!stop) {
		struct pollfd pfd[MAX_CLIENTS + 1];
		int idx[MAX_CLIENTS + 1], n = 0, r;

		pfd[n] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		idx[n++] = -1;
		for (i = 0; i < MAX_CLIENTS; i++) {
			/* stalled: requests wait in the socket */
			if (clients[i].fd < 0 || is("stall"))
				continue;
			pfd[n] = (struct pollfd){ .fd = clients[i].fd, .events = POLLIN };
			idx[n++] = i;
		}
		r = poll(pfd, (nfds_t)n, 20);
		if (r < 0 && errno != EINTR)
			break;
		if (bad && (is("pubsub") || is("pubsub-short") || is("policy")) && push_due()) {
			for (i = 0; i < MAX_CLIENTS; i++) {
				struct client *c = &clients[i];

				if (c->fd < 0 || !c->subscriber)
					continue;
				if (!is("policy"))
					push_pubsub(c);
				else
					outf(c, "*3\r\n$7\r\nmessage\r\n$9\r\nrl:policy\r\n"
					     "$2\r\nfz\r\n");
			}
		}
		if (r <= 0)
			continue;
		for (int k = 0; k < n; k++) {
			if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			if (idx[k] < 0) {
				int cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
				struct timeval tv = { .tv_sec = 2 };

				if (cfd < 0)
					continue;
				for (i = 0; i < MAX_CLIENTS && clients[i].fd >= 0; i++)
					;
				if (i == MAX_CLIENTS) {
					close(cfd);
					continue;
				}
				setsockopt(cfd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
				clients[i] = (struct client){ .fd = cfd,
							      .in = malloc(IN_MAX) };
				fprintf(stderr, "fake_redis: client %d connected\n", cfd);
				continue;
			} else {
				struct client *c = &clients[idx[k]];
				ssize_t got;

				got = read(c->fd, c->in + c->in_len, IN_MAX - c->in_len);
				if (got <= 0) {
					fprintf(stderr, "fake_redis: client %d gone\n", c->fd);
					drop(c);
					continue;
				}
				c->in_len += (size_t)got;
				on_input(c);
				if (c->fd >= 0 && c->in_len == IN_MAX)
					drop(c);
			}
		}
	}
	for (i = 0; i < MAX_CLIENTS; i++)
		if (clients[i].fd >= 0)
			drop(&clients[i]);
	close(lfd);
	unlink(path);
	return 0;
}
