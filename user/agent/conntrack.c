// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The agent's sweep of `conns`: ends the counted connections the kernel
 * could not see end - a connection to a local server whose socket is gone
 * (the kernel's socket table, read through sock_diag), a connection through
 * the host idle past the TTL, and entries of tenants that are gone.
 */
#include <errno.h>
#include <ifaddrs.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "conntrack.h"
#include "conns.h"
#include "log.h"
#include "rlgate.skel.h"

/* TCP states a connection is still in flight in: every state but LISTEN,
 * TIME_WAIT and CLOSE (the server is done with it), request sockets
 * (SYN_RECV, NEW_SYN_RECV) included. */
enum {
	ST_ESTABLISHED = 1, ST_SYN_SENT, ST_SYN_RECV, ST_FIN_WAIT1,
	ST_FIN_WAIT2, ST_TIME_WAIT, ST_CLOSE, ST_CLOSE_WAIT, ST_LAST_ACK,
	ST_LISTEN, ST_CLOSING, ST_NEW_SYN_RECV,
};
#define IN_FLIGHT_STATES \
	(((1u << (ST_NEW_SYN_RECV + 1)) - 2) & \
	 ~((1u << ST_TIME_WAIT) | (1u << ST_CLOSE) | (1u << ST_LISTEN)))

#define BATCH	512

struct entry {
	struct rl_flow k;
	struct rl_conn c;
};

struct addrs {
	struct rl_flow *v;	/* only family and daddr used */
	size_t n;
};

static uint64_t coarse_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * RL_NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

static int flow_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(struct rl_flow));
}

/* Every entry of `conns`, copied out in batches.  0 or -errno. */
static int read_entries(int fd, struct entry **out, size_t *n)
{
	struct rl_flow keys[BATCH];
	struct rl_conn vals[BATCH];
	__u32 token = 0, count;
	struct entry *v = NULL;
	size_t cap = 0, len = 0;
	bool first = true;
	int err;

	for (;;) {
		count = BATCH;
		err = bpf_map_lookup_batch(fd, first ? NULL : &token, &token,
					   keys, vals, &count, NULL);
		if (err && errno != ENOENT) {
			err = -errno;
			free(v);
			return err;
		}
		first = false;
		if (len + count > cap) {
			struct entry *nv;

			cap = (len + count) * 2;
			nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				free(v);
				return -ENOMEM;
			}
			v = nv;
		}
		for (__u32 i = 0; i < count; i++) {
			v[len].k = keys[i];
			v[len].c = vals[i];
			len++;
		}
		if (err)	/* ENOENT: that was the last batch */
			break;
	}
	*out = v;
	*n = len;
	return 0;
}

/* This host's addresses, as the daddr of a key.  0 or -errno. */
static int local_addrs(struct addrs *a)
{
	struct ifaddrs *ifa, *p;
	size_t n = 0;

	a->v = NULL;
	a->n = 0;
	if (getifaddrs(&ifa) < 0)
		return -errno;
	for (p = ifa; p; p = p->ifa_next)
		n++;
	a->v = calloc(n ? n : 1, sizeof(*a->v));
	if (!a->v) {
		freeifaddrs(ifa);
		return -ENOMEM;
	}
	for (p = ifa; p; p = p->ifa_next) {
		struct rl_flow *f = &a->v[a->n];

		if (!p->ifa_addr)
			continue;
		if (p->ifa_addr->sa_family == AF_INET) {
			f->family = 4;
			memcpy(f->daddr, &((struct sockaddr_in *)p->ifa_addr)->sin_addr, 4);
		} else if (p->ifa_addr->sa_family == AF_INET6) {
			f->family = 6;
			memcpy(f->daddr, &((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr, 16);
		} else {
			continue;
		}
		a->n++;
	}
	freeifaddrs(ifa);
	return 0;
}

static bool is_local(const struct addrs *a, const struct rl_flow *k)
{
	for (size_t i = 0; i < a->n; i++)
		if (a->v[i].family == k->family &&
		    memcmp(a->v[i].daddr, k->daddr, k->family == 4 ? 4 : 16) == 0)
			return true;
	return false;
}

/* The key of a socket in the kernel's table, in the client's direction
 * (its remote end is the client).  An IPv4 peer of an IPv6 socket is an
 * IPv4 connection on the wire. */
static void socket_key(const struct inet_diag_msg *m, struct rl_flow *k)
{
	static const __u8 mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memset(k, 0, sizeof(*k));
	if (m->idiag_family == AF_INET ||
	    (memcmp(m->id.idiag_src, mapped, 12) == 0 &&
	     memcmp(m->id.idiag_dst, mapped, 12) == 0)) {
		int w = m->idiag_family == AF_INET ? 0 : 3;

		k->family = 4;
		memcpy(k->saddr, &m->id.idiag_dst[w], 4);
		memcpy(k->daddr, &m->id.idiag_src[w], 4);
	} else {
		k->family = 6;
		memcpy(k->saddr, m->id.idiag_dst, 16);
		memcpy(k->daddr, m->id.idiag_src, 16);
	}
	k->sport = m->id.idiag_dport;
	k->dport = m->id.idiag_sport;
}

int conntrack_diag_dump(int family, uint32_t states, conntrack_diag_fn fn,
			void *arg)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = {
			.nlmsg_len = sizeof(msg),
			.nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP,
		},
		.req = {
			.sdiag_family = (__u8)family,
			.sdiag_protocol = IPPROTO_TCP,
			.idiag_states = states,
		},
	};
	static char buf[32768];
	int fd, err = 0;
	bool done = false;

	fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	if (send(fd, &msg, sizeof(msg), 0) < 0) {
		err = -errno;
		goto out;
	}
	while (!done) {
		ssize_t len = recv(fd, buf, sizeof(buf), 0);
		struct nlmsghdr *h;

		if (len < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		for (h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len);
		     h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_type == NLMSG_DONE) {
				done = true;
				break;
			}
			if (h->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = NLMSG_DATA(h);

				err = e->error ? e->error : -EIO;
				done = true;
				break;
			}
			if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
				continue;
			err = fn(NLMSG_DATA(h), arg);
			if (err) {
				done = true;
				break;
			}
		}
	}
out:
	close(fd);
	return err;
}

struct socket_keys {
	struct rl_flow *v;
	size_t n, cap;
};

static int socket_keep(const struct inet_diag_msg *m, void *arg)
{
	struct socket_keys *s = arg;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		struct rl_flow *nv = realloc(s->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->cap = cap;
	}
	socket_key(m, &s->v[s->n++]);
	return 0;
}

void conntrack_sweep(struct kern *k, uint64_t ttl_ns)
{
	int fd = bpf_map__fd(k->skel->maps.conns);
	struct socket_keys sk = { 0 };
	size_t n = 0, gone = 0;
	struct addrs local = { 0 };
	struct entry *v = NULL;
	bool any_local = false, have_socks = false;
	int err;

	err = read_entries(fd, &v, &n);
	if (err) {
		log_warn("couldn't read map on '%s/conns': %s", k->pin_dir,
			 strerror(-err));
		return;
	}
	if (!n)
		goto out;
	if (local_addrs(&local))
		log_warn("couldn't list local addresses on 'getifaddrs': %s",
			 strerror(errno));
	for (size_t i = 0; i < n && !any_local; i++)
		any_local = is_local(&local, &v[i].k);
	if (any_local) {
		err = conntrack_diag_dump(AF_INET, IN_FLIGHT_STATES,
					  socket_keep, &sk);
		if (!err)
			err = conntrack_diag_dump(AF_INET6, IN_FLIGHT_STATES,
						  socket_keep, &sk);
		if (err)
			/* without the socket table, nothing local is judged */
			log_warn("couldn't read the socket table on 'sock_diag': %s",
				 strerror(-err));
		else
			have_socks = true;
		if (sk.n)
			qsort(sk.v, sk.n, sizeof(*sk.v), flow_cmp);
	}
	for (size_t i = 0; i < n; i++) {
		struct rl_conn *c = &v[i].c;
		struct rl_conn_view view = {
			.t = c->tenant < k->max_tenants ? &k->tenants[c->tenant] : NULL,
			.inst = k->instance,
			.local = is_local(&local, &v[i].k),
			.now_ns = coarse_ns(),
			.grace_ns = RL_CONN_GRACE_NS,
			.ttl_ns = ttl_ns,
		};
		enum rl_conn_fate fate;

		if (view.local && !have_socks)
			continue;
		view.has_socket = view.local &&
			bsearch(&v[i].k, sk.v, sk.n, sizeof(*sk.v), flow_cmp);
		fate = rl_conn_judge(c, &view);
		if (fate == RL_CONN_KEEP)
			continue;
		if (rl_conn_forget(fd, k->tenants, k->max_tenants, k->instance,
				   &v[i].k, c) == 1 &&
		    fate != RL_CONN_STALE) {
			if (c->tenant < k->max_tenants)
				k->conns_forgotten[c->tenant]++;
			if (c->flags & RL_CONN_F_INSTANCE)
				k->instance_forgotten++;
			gone++;
		}
	}
	if (gone)
		log_debug("sweep: %zu connections ended unseen (no socket, or "
			  "idle)", gone);
out:
	free(local.v);
	free(sk.v);
	free(v);
}
