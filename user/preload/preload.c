// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * librlpreload.so: rlgate's tenant limits inside an unmodified program, for
 * hosts where XDP cannot be attached.  accept and accept4 are wrapped: each
 * TCP connection accepted is classified as the kernel would classify its
 * SYN and spends a token of the shared pool rlagent keeps (pool.h); over
 * the limit it is reset before the program sees it, and the next one is
 * accepted, so the program only ever sees what accept could have returned
 * anyway.  connect spends from outbound tenants (by destination), failing
 * with ECONNREFUSED over the limit.  listen is wrapped to list the process
 * in the pool.
 * docs/preload.md is the operator's side.
 *
 * Everything on the accept path is async-signal-safe and fork-safe: no
 * allocation, no locks, no stdio; a replaced pool file is mapped anew and
 * the old mapping kept (never unmapped while another thread may read it).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "fdtab.h"
#include "pool.h"

#define EXPORT __attribute__((visibility("default")))

#define LOOK_EVERY_NS	RL_NSEC_PER_SEC	/* for a new or replaced pool */
#define MAX_VIEWS	16		/* pool files mapped in one life */

typedef int (*accept_fn)(int, struct sockaddr *, socklen_t *);
typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);
typedef int (*listen_fn)(int, int);
typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*close_fn)(int);
typedef int (*dup_fn)(int);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*fcntl_fn)(int, int, ...);
typedef int (*close_range_fn)(unsigned int, unsigned int, int);
typedef void (*closefrom_fn)(int);
typedef int (*shutdown_fn)(int, int);
typedef int (*fclose_fn)(FILE *);

static accept_fn real_accept;
static accept4_fn real_accept4;
static listen_fn real_listen;
static connect_fn real_connect;
static close_fn real_close;
static dup_fn real_dup;
static dup2_fn real_dup2;
static dup3_fn real_dup3;
static fcntl_fn real_fcntl, real_fcntl64;
static close_range_fn real_close_range;
static closefrom_fn real_closefrom;
static shutdown_fn real_shutdown;
static fclose_fn real_fclose;

/* The connections of capped tenants this process holds (fdtab.h): 448 KiB
 * of zeroes until used. */
static struct rl_fdtab fdtab;

static char pool_path[PATH_MAX] = RL_POOL_DEFAULT_PATH;
static bool fail_allow;		/* RLGATE_POOL_FAIL=allow */
static char comm[16];

static struct rl_pool views[MAX_VIEWS];
static unsigned int n_views;	/* written only by the thread in look() */
/* Views whose file was truncated under them (bit by index): anonymous
 * memory stands in their place (on_sigbus), and none is used again. */
static uint32_t views_dead;
static struct rl_pool *cur;	/* the pool in use, or NULL */
static uint64_t next_look_ns;
static int looking;
static int said_err;		/* the last failure told on stderr */
static dev_t bad_dev;		/* a pool file refused for its layout */
static ino_t bad_ino;

/* What the library did without a pool, for a debugger or a core file:
 * connections admitted or refused by RLGATE_POOL_FAIL. */
EXPORT uint64_t rlpreload_unpooled_total;

static pid_t my_pid;		/* getpid(), renewed in a forked child */
static uint64_t my_pidns;	/* the pid namespace my_pid belongs to */
static struct rl_pool_proc *my_proc;
static const struct rl_pool *my_proc_view;
static pid_t my_proc_pid;

/* --- stderr, without stdio ------------------------------------------------ */

static void say(const char *const *parts)
{
	char buf[1024];
	size_t n = 0;

	for (; *parts; parts++)
		for (const char *s = *parts; *s && n < sizeof(buf) - 1; s++)
			buf[n++] = *s;
	buf[n++] = '\n';
	while (write(STDERR_FILENO, buf, n) < 0 && errno == EINTR)
		;
}

static const char *reason(int err)
{
	switch (-err) {
	case ENOENT:
		return "it does not exist (does rlagent run with --preload-pool?)";
	case EACCES:
		return "permission denied (is the program in the pool's group?)";
	case EPERM:
		return "it is not owned by root (only rlagent makes pools)";
	case EPROTO:
		return "it has another layout (librlpreload.so and rlagent "
		       "are not of one version)";
	case EBADMSG:
		return "it is damaged";
	default:
		return "it cannot be mapped";
	}
}

/* Tells once per kind of failure, and once when the pool is back. */
static void tell(int err)
{
	int was = __atomic_exchange_n(&said_err, err, __ATOMIC_RELAXED);

	if (err == was)
		return;
	if (!err) {
		say((const char *[]){ "rlpreload: limiting by pool '", pool_path,
				      "'", NULL });
		return;
	}
	say((const char *[]){ "rlpreload: couldn't use pool '", pool_path,
			      "': ", reason(err), "; ",
			      fail_allow ? "admitting" : "refusing",
			      " every connection until it can (RLGATE_POOL_FAIL=",
			      fail_allow ? "allow" : "deny", ")", NULL });
}

/* --- the pool in use --------------------------------------------------------- */

/* Whether view v was truncated under this process (see on_sigbus). */
static bool dead(const struct rl_pool *v)
{
	return __atomic_load_n(&views_dead, __ATOMIC_ACQUIRE) &
	       (1U << (unsigned int)(v - views));
}

/*
 * A process of the pool's group may truncate the pool's file: a page past
 * its new end then raises SIGBUS in every process that touches it, which
 * would kill the program.  Where the program left SIGBUS at its default
 * (the library installs this only then), a fault inside a view puts
 * anonymous memory in place of the view (zeroes: nothing is classified or
 * counted through it again), marks it dead and returns, so that the access
 * is made again and completes; the connections then fall to
 * RLGATE_POOL_FAIL until the agent's new pool is mapped.  A fault anywhere
 * else is not the library's: the default action is put back, and the
 * access made again raises it as without the library.
 */
static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	unsigned int n = __atomic_load_n(&n_views, __ATOMIC_ACQUIRE);

	(void)uc;
	for (unsigned int i = 0; i < n && i < MAX_VIEWS; i++) {
		uintptr_t b = (uintptr_t)views[i].base;

		if (!b || a < b || a - b >= views[i].len)
			continue;
		if (mmap((void *)b, views[i].len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
			 0) == MAP_FAILED)
			break;
		__atomic_fetch_or(&views_dead, 1U << i, __ATOMIC_RELEASE);
		return;
	}
	signal(sig, SIG_DFL);
}

static void bus_install(void)
{
	struct sigaction old, sa;

	if (sigaction(SIGBUS, NULL, &old) < 0 ||
	    (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
		return;		/* the program's own: left alone */
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, NULL);
}

/* At most once per LOOK_EVERY_NS, by one thread: maps the pool if there is
 * none yet, or a new file put in place of the one mapped. */
static void look(uint64_t now, struct rl_pool *v)
{
	uint64_t next = __atomic_load_n(&next_look_ns, __ATOMIC_RELAXED);
	struct stat st;
	int err;

	if (now < next || __atomic_exchange_n(&looking, 1, __ATOMIC_ACQUIRE))
		return;
	if (__atomic_load_n(&next_look_ns, __ATOMIC_RELAXED) != next)
		goto out;	/* another thread just looked */
	__atomic_store_n(&next_look_ns, now + LOOK_EVERY_NS, __ATOMIC_RELAXED);
	if (lstat(pool_path, &st) < 0) {
		if (!v)
			tell(-errno);
		goto out;	/* none, or none to replace the one in use */
	}
	if (v && dead(v))
		v = NULL;	/* truncated: whatever is there next is new */
	if (v && st.st_dev == v->dev && st.st_ino == v->ino)
		goto out;	/* the same file */
	/* A file of another layout or damaged is never fixed in place (the
	 * agent puts a new one there): refused once, not every second. */
	if (st.st_dev == bad_dev && st.st_ino == bad_ino)
		goto out;
	if (n_views == MAX_VIEWS)
		goto out;
	err = rl_pool_map(&views[n_views], pool_path);
	if (err) {
		if (err == -EPROTO || err == -EBADMSG) {
			bad_dev = st.st_dev;
			bad_ino = st.st_ino;
		}
		/* a pool in use stays in use: its rules and buckets are
		 * the last the agent wrote */
		tell(err);
		goto out;
	}
	__atomic_store_n(&n_views, n_views + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&cur, &views[n_views - 1], __ATOMIC_RELEASE);
	tell(0);
out:
	__atomic_store_n(&looking, 0, __ATOMIC_RELEASE);
}

static struct rl_pool *view(uint64_t now)
{
	struct rl_pool *v = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);

	if (now >= __atomic_load_n(&next_look_ns, __ATOMIC_RELAXED)) {
		look(now, v);
		v = __atomic_load_n(&cur, __ATOMIC_ACQUIRE);
	}
	if (v && dead(v)) {
		tell(-EBADMSG);
		return NULL;
	}
	return v;
}

/* This process's line in v's table, claimed on first use (and again in a
 * forked child, or in a new pool). */
static struct rl_pool_proc *proc_entry(struct rl_pool *v)
{
	pid_t pid = __atomic_load_n(&my_pid, __ATOMIC_RELAXED);
	struct rl_pool_proc *s;

	if (__atomic_load_n(&my_proc_view, __ATOMIC_ACQUIRE) == v &&
	    __atomic_load_n(&my_proc_pid, __ATOMIC_RELAXED) == pid)
		return __atomic_load_n(&my_proc, __ATOMIC_RELAXED);
	s = rl_pool_proc_claim(v, (uint32_t)pid, my_pidns, comm);
	__atomic_store_n(&my_proc, s, __ATOMIC_RELAXED);
	__atomic_store_n(&my_proc_pid, pid, __ATOMIC_RELAXED);
	__atomic_store_n(&my_proc_view, v, __ATOMIC_RELEASE);
	return s;
}

/* --- the decision --------------------------------------------------------- */

/* The address of sa as the classifier takes it: IPv4 as 4 bytes, a
 * v4-mapped IPv6 address included (the kernel sees an IPv4 packet), and its
 * port.  false for anything but IPv4 and IPv6. */
static bool ip_of(const struct sockaddr *sa, int *family, const uint8_t **addr,
		  uint16_t *port)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

	if (sa->sa_family == AF_INET) {
		*family = AF_INET;
		*addr = (const uint8_t *)&s4->sin_addr;
		*port = ntohs(s4->sin_port);
		return true;
	}
	if (sa->sa_family != AF_INET6)
		return false;
	*family = IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) ? AF_INET : AF_INET6;
	*addr = s6->sin6_addr.s6_addr + (*family == AF_INET ? 12 : 0);
	*port = ntohs(s6->sin6_port);
	return true;
}

/* Gives back a connection counted in views[c->view]. */
static void give_back(const struct rl_fdconn *c)
{
	if (c->view < MAX_VIEWS)
		rl_pool_conn_close(&views[c->view], c->slot, c->epoch);
}

/*
 * Spends a token of the tenant of (family, addr, port) in p's rules of
 * dir, counted for this process; true unless refused.  An accepted
 * connection (fd >= 0) of a capped tenant also takes a place in flight
 * first, as the kernel does for a SYN, and is recorded in fdtab so that
 * its last close gives it back.
 */
static bool spend(struct rl_pool *p, enum rl_pool_dir dir, int family,
		  const uint8_t *addr, uint16_t port, uint64_t now, int fd)
{
	uint32_t flag = dir == RL_POOL_OUT ? RL_POOL_P_CONNECT : RL_POOL_P_ACCEPT;
	enum rl_pool_verdict v, cap = RL_POOL_PASS;
	struct rl_pool_proc *me;
	uint32_t epoch = 0;
	int t;

	t = rl_pool_classify(p, dir, family, addr, port);
	if (t < 0)
		return true;
	if (fd >= 0)
		cap = rl_pool_conn_open(p, (uint32_t)t, now, &epoch);
	v = cap == RL_POOL_REFUSE ? RL_POOL_REFUSE :
				    rl_pool_take(p, (uint32_t)t, now);
	if (cap == RL_POOL_ADMIT) {
		struct rl_fdconn gone;
		int r = -1;

		if (v == RL_POOL_ADMIT)
			r = rl_fdtab_open(&fdtab, fd, (uint32_t)(p - views),
					  (uint32_t)t, epoch, &gone);
		if (r == 1)
			give_back(&gone);
		/* refused by the bucket, or past the table: not counted */
		if (r < 0)
			rl_pool_conn_close(p, (uint32_t)t, epoch);
	}
	if (v == RL_POOL_PASS)
		return true;
	me = proc_entry(p);
	if (me) {
		__atomic_fetch_add(v == RL_POOL_ADMIT ? &me->admitted : &me->denied,
				   1, __ATOMIC_RELAXED);
		__atomic_store_n(&me->seen_ns, now, __ATOMIC_RELAXED);
		if (!(__atomic_load_n(&me->flags, __ATOMIC_RELAXED) & flag))
			__atomic_fetch_or(&me->flags, flag, __ATOMIC_RELAXED);
	}
	return v == RL_POOL_ADMIT;
}

/* Whether the connection fd, from peer ss, may be handed to the program. */
static bool admit(int fd, const struct sockaddr_storage *ss)
{
	uint64_t now = rl_pool_now_ns();
	const uint8_t *addr;
	struct rl_pool *p;
	uint16_t port;
	int family;

	if (!ip_of((const struct sockaddr *)ss, &family, &addr, &port))
		return true;	/* not TCP over IP: nothing to limit */
	p = view(now);
	if (!p) {
		__atomic_fetch_add(&rlpreload_unpooled_total, 1, __ATOMIC_RELAXED);
		return fail_allow;
	}
	/* the rules name the local port, not the client's */
	port = 0;
	if (rl_pool_needs_port(p, RL_POOL_IN)) {
		struct sockaddr_storage local;
		socklen_t len = sizeof(local);
		const uint8_t *a;
		int f;

		if (getsockname(fd, (struct sockaddr *)&local, &len) == 0)
			ip_of((struct sockaddr *)&local, &f, &a, &port);
	}
	return spend(p, RL_POOL_IN, family, addr, port, now, fd);
}

/* Whether fd may connect to sa: a TCP connection to an outbound tenant's
 * destination spends its token.  Without a pool nothing is refused: no
 * outbound limit is known then. */
static bool may_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	uint64_t now = rl_pool_now_ns();
	socklen_t plen = sizeof(int);
	const uint8_t *addr;
	struct rl_pool *p;
	int family, proto;
	uint16_t port;

	if (!sa || len < sizeof(struct sockaddr_in) ||
	    (sa->sa_family == AF_INET6 && len < sizeof(struct sockaddr_in6)) ||
	    !ip_of(sa, &family, &addr, &port))
		return true;
	p = view(now);
	if (!p || !rl_pool_has_rules(p, RL_POOL_OUT))
		return true;
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &plen) < 0 ||
	    proto != IPPROTO_TCP)
		return true;
	return spend(p, RL_POOL_OUT, family, addr, port, now, -1);
}

/* A refused connection: reset (SO_LINGER 0 makes close send a RST), so the
 * client fails at once, as with the kernel's RST. */
static void reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	real_close(fd);
}

static void resolve(void)
{
	/* dlsym may allocate: done in the constructor, and here only for a
	 * call from another library's constructor that ran before ours */
	if (!real_accept)
		real_accept = (accept_fn)dlsym(RTLD_NEXT, "accept");
	if (!real_accept4)
		real_accept4 = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
	if (!real_listen)
		real_listen = (listen_fn)dlsym(RTLD_NEXT, "listen");
	if (!real_connect)
		real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
	if (!real_close)
		real_close = (close_fn)dlsym(RTLD_NEXT, "close");
	if (!real_dup)
		real_dup = (dup_fn)dlsym(RTLD_NEXT, "dup");
	if (!real_dup2)
		real_dup2 = (dup2_fn)dlsym(RTLD_NEXT, "dup2");
	if (!real_dup3)
		real_dup3 = (dup3_fn)dlsym(RTLD_NEXT, "dup3");
	if (!real_fcntl)
		real_fcntl = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl");
	if (!real_fcntl64)
		real_fcntl64 = (fcntl_fn)dlsym(RTLD_NEXT, "fcntl64");
	if (!real_close_range)
		real_close_range = (close_range_fn)dlsym(RTLD_NEXT,
							 "close_range");
	if (!real_closefrom)
		real_closefrom = (closefrom_fn)dlsym(RTLD_NEXT, "closefrom");
	if (!real_shutdown)
		real_shutdown = (shutdown_fn)dlsym(RTLD_NEXT, "shutdown");
	if (!real_fclose)
		real_fclose = (fclose_fn)dlsym(RTLD_NEXT, "fclose");
}

static int gate(int lfd, struct sockaddr *addr, socklen_t *addrlen, int flags,
		bool four)
{
	int saved = errno;

	if (!real_accept || !real_accept4)
		resolve();
	/* the kernel's EFAULT for an address without a length, untouched */
	if (addr && !addrlen)
		return four ? real_accept4(lfd, addr, addrlen, flags) :
			      real_accept(lfd, addr, addrlen);
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd;

		memset(&ss, 0, sizeof(ss));
		fd = four ? real_accept4(lfd, (struct sockaddr *)&ss, &len, flags) :
			    real_accept(lfd, (struct sockaddr *)&ss, &len);
		if (fd < 0)
			return fd;
		if (admit(fd, &ss)) {
			if (addr) {
				memcpy(addr, &ss, len < *addrlen ? len : *addrlen);
				*addrlen = len;
			}
			errno = saved;
			return fd;
		}
		reset(fd);
	}
}

EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
	return gate(fd, addr, addrlen, 0, false);
}

EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *addrlen, int flags)
{
	return gate(fd, addr, addrlen, flags, true);
}

/* Over an outbound limit connect fails at once, as a refused connection
 * does: every client already handles ECONNREFUSED (curl: "Couldn't
 * connect"), where EAGAIN would mean something else for a socket. */
EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int saved = errno;

	if (!real_connect)
		resolve();
	if (!may_connect(fd, addr, len)) {
		errno = ECONNREFUSED;
		return -1;
	}
	errno = saved;
	return real_connect(fd, addr, len);
}

EXPORT int listen(int fd, int backlog)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct rl_pool *p;
	int ret, saved;

	if (!real_listen)
		resolve();
	ret = real_listen(fd, backlog);
	if (ret < 0)
		return ret;
	saved = errno;
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
	    (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)) {
		p = view(rl_pool_now_ns());
		if (p) {
			struct rl_pool_proc *me = proc_entry(p);

			if (me)
				__atomic_fetch_or(&me->flags, RL_POOL_P_LISTEN,
						  __ATOMIC_RELAXED);
		}
	}
	errno = saved;
	return ret;
}

/* --- closes and copies -------------------------------------------------- */

/*
 * A counted connection ends with the last of the process's fds that refer
 * to it: close, fclose of a stream on it, dup2/dup3 over it, close_range
 * and closefrom.  The table entry goes before the real close: once closed,
 * the number may come back from another thread's accept at once.  A
 * forked child holds copies of its parent's, counted again (after_fork).
 */
static void forget(int fd)
{
	struct rl_fdconn c;

	if (rl_fdtab_close(&fdtab, fd, &c))
		give_back(&c);
}

static void copied(int oldfd, int newfd)
{
	struct rl_fdconn c;

	if (rl_fdtab_dup(&fdtab, oldfd, newfd, &c))
		give_back(&c);
}

EXPORT int close(int fd)
{
	if (!real_close)
		resolve();
	forget(fd);
	return real_close(fd);
}

EXPORT int fclose(FILE *f)
{
	if (!real_fclose)
		resolve();
	/* glibc closes the fd inside, where no wrapper reaches */
	if (f)
		forget(fileno(f));
	return real_fclose(f);
}

EXPORT int dup(int fd)
{
	int r;

	if (!real_dup)
		resolve();
	r = real_dup(fd);
	if (r >= 0)
		copied(fd, r);
	return r;
}

EXPORT int dup2(int fd, int newfd)
{
	int r;

	if (!real_dup2)
		resolve();
	r = real_dup2(fd, newfd);
	if (r >= 0)
		copied(fd, r);
	return r;
}

EXPORT int dup3(int fd, int newfd, int flags)
{
	int r;

	if (!real_dup3)
		resolve();
	r = real_dup3(fd, newfd, flags);
	if (r >= 0)
		copied(fd, r);
	return r;
}

static int fcntl_any(fcntl_fn fn, int fd, int cmd, void *arg)
{
	int r = fn(fd, cmd, arg);

	if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		copied(fd, r);
	return r;
}

/* glibc takes the third argument as a pointer whatever the command */
EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real_fcntl)
		resolve();
	return fcntl_any(real_fcntl, fd, cmd, arg);
}

EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!real_fcntl64)
		resolve();
	return fcntl_any(real_fcntl64 ? real_fcntl64 : real_fcntl, fd, cmd, arg);
}

EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	if (!real_close_range)
		resolve();
	/* CLOSE_RANGE_CLOEXEC closes nothing now (an exec will: the new
	 * program's copies are left to the agent's check) */
	if (!(flags & CLOSE_RANGE_CLOEXEC))
		for (unsigned int fd = first; fd <= last && fd < RL_FDTAB_FDS; fd++)
			forget((int)fd);
	if (!real_close_range) {
		errno = ENOSYS;
		return -1;
	}
	return real_close_range(first, last, flags);
}

EXPORT void closefrom(int lowfd)
{
	if (!real_closefrom)
		resolve();
	for (int fd = lowfd < 0 ? 0 : lowfd; fd < RL_FDTAB_FDS; fd++)
		forget(fd);
	if (real_closefrom)
		real_closefrom(lowfd);
}

/*
 * shutdown(SHUT_RDWR) ends the connection for every fd and process that
 * holds it: its place is given back at once.  SHUT_WR and SHUT_RD keep it
 * counted (a half-closed connection still carries the other way, as the
 * kernel's count keeps it until both FINs) until the last close.
 */
EXPORT int shutdown(int fd, int how)
{
	struct rl_fdconn c;
	int r;

	if (!real_shutdown)
		resolve();
	r = real_shutdown(fd, how);
	if (r == 0 && how == SHUT_RDWR && rl_fdtab_end(&fdtab, fd, &c))
		give_back(&c);
	return r;
}

/* --- life cycle ---------------------------------------------------------- */

/* Counts a forked child's copy of c; *arg notes the views it was counted
 * in (a bit each). */
static void hold(const struct rl_fdconn *c, void *arg)
{
	if (c->view < MAX_VIEWS &&
	    rl_pool_conn_hold(&views[c->view], c->slot, c->epoch))
		*(uint32_t *)arg |= 1U << c->view;
}

static void give_back_each(const struct rl_fdconn *c, void *arg)
{
	(void)arg;
	give_back(c);
}

/* Normal exit gives back what the process held; _exit and a kill leave it
 * to the agent's check against the kernel. */
__attribute__((destructor)) static void rlpreload_fini(void)
{
	rl_fdtab_each(&fdtab, true, give_back_each, NULL);
}

static void after_fork(void)
{
	uint32_t held = 0;

	/* both processes hold the parent's connections now: the child's
	 * copies are counted until it closes them too */
	rl_fdtab_each(&fdtab, false, hold, &held);
	/* the child shares the mapping; its table line is its own */
	__atomic_store_n(&my_pid, getpid(), __ATOMIC_RELAXED);
	/* a thread of the parent may have been looking for a new pool: it
	 * does not exist here, so nobody would ever look again */
	__atomic_store_n(&looking, 0, __ATOMIC_RELEASE);
	/* in the table at once: the agent's check counts what a process
	 * holds by its fds, and a child that only serves (never accepts)
	 * would otherwise hold its copies out of its sight */
	for (unsigned int v = 0; v < MAX_VIEWS; v++)
		if (held & (1U << v))
			proc_entry(&views[v]);
}

__attribute__((constructor)) static void rlpreload_init(void)
{
	const char *e;
	int fd;

	resolve();
	/* secure_getenv: in a setuid or setgid program (the library in
	 * /etc/ld.so.preload reaches those too) the environment is the
	 * caller's, who must not choose the pool it maps nor its failure
	 * policy: the defaults then */
	e = secure_getenv("RLGATE_POOL");
	if (e && *e) {
		if (strlen(e) < sizeof(pool_path))
			memcpy(pool_path, e, strlen(e) + 1);
		else
			say((const char *[]){ "rlpreload: RLGATE_POOL is longer "
					      "than a path: using "
					      RL_POOL_DEFAULT_PATH, NULL });
	}
	e = secure_getenv("RLGATE_POOL_FAIL");
	if (e && strcmp(e, "allow") == 0)
		fail_allow = true;
	else if (e && *e && strcmp(e, "deny") != 0)
		say((const char *[]){ "rlpreload: RLGATE_POOL_FAIL '", e,
				      "' is neither 'allow' nor 'deny': deny",
				      NULL });
	fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, comm, sizeof(comm) - 1);

		comm[n > 0 ? n : 0] = '\0';
		if (n > 0 && comm[n - 1] == '\n')
			comm[n - 1] = '\0';
		close(fd);
	}
	my_pid = getpid();
	my_pidns = rl_pool_pidns();
	pthread_atfork(NULL, NULL, after_fork);
	bus_install();
	look(rl_pool_now_ns(), NULL);
}
