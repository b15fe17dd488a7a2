// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Connection caps: counts in flight as the kernel keeps them (`conns`, the
 * tenant's conns) through the orders of SYNs, FINs and RSTs that broke
 * other limiters' counters - a refused connection's close, two RSTs, a lost
 * FIN healed by the agent's sweep, TIME_WAIT reuse, simultaneous close -
 * and the forged ones a server ignores (a RST or FIN off its sequence
 * numbers, a new ISN on an open 4-tuple).  The server's side runs through
 * tc_rlgate_egress; the client's RSTs and FINs are judged against real
 * sockets of the same 4-tuples, in a network namespace of the test's own.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "conns.h"
#include "cookie.skel.h"
#include "instance.h"
#include "sockets.h"
#include "xdp_test.h"

#define CLIENT		"10.1.0.10"
#define STRANGER	"10.9.0.10"	/* matches no rule */
#define SERVER		"192.0.2.1"
#define SPORT		40000

#define REAL_PORTS	128	/* connections SPORT + 0 .. 127, per client */

/* A real connection of the lab: the client's and the server's socket, and
 * the server's rcv_nxt, where an honest RST or FIN of the client starts. */
struct real {
	int cfd, sfd;
	__u32 rcv_nxt;
};

/* One copy of rlgate: tenant 1 (10.1/16) capped, a full bucket of 100. */
struct cinst {
	struct rlgate_bpf *skel;
	struct world w;
	int xdp_fd, egress_fd, conns_fd, conn_stats_fd;
	struct rl_conn_ctl *ctl;
	struct rl_tenant *t;
	struct rl_tenant *instance;	/* the mmap'ed `instance` map */
	int listen_fd;			/* the server, SERVER:443 in the lab */
	bool no_server;			/* no socket: the server is elsewhere */
	pthread_mutex_t lock;		/* over real */
	struct real real[2][REAL_PORTS];	/* CLIENT, STRANGER */
};

/*
 * The lab: a network namespace where CLIENT, STRANGER and SERVER are
 * addresses of lo, so that a connection between them has real sockets,
 * which the program's socket lookup finds (test_run judges on the lo of
 * the namespace it is called in).  Made once; a scenario enters it in
 * cinst_open() and leaves it in cinst_close(), so the other parts of
 * test_xdp run where they always did.  0 or -1.
 */
static int lab_fd = -1, home_fd = -1;

static int lab_enter(void)
{
	static const char *const addrs[] = { CLIENT, STRANGER, SERVER, NULL };

	if (home_fd < 0)
		home_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (home_fd < 0) {
		diag("couldn't open netns on '/proc/self/ns/net': %s",
		     strerror(errno));
		return -1;
	}
	if (lab_fd >= 0)
		return setns(lab_fd, CLONE_NEWNET) ? -1 : 0;
	lab_fd = lab_netns(addrs);
	return lab_fd < 0 ? -1 : 0;
}

static void lab_leave(void)
{
	if (home_fd >= 0 && setns(home_fd, CLONE_NEWNET))
		diag("couldn't return to netns on 'test_xdp': %s",
		     strerror(errno));
}

/* The real connection client:sport, opened on first use.  NULL (said)
 * when it cannot be. */
static struct real *real_conn(struct cinst *in, const char *client,
			      __u16 sport)
{
	unsigned int idx = sport - SPORT;
	struct real *r;
	int err;

	if (idx >= REAL_PORTS)
		return NULL;
	r = &in->real[strcmp(client, CLIENT) != 0][idx];
	pthread_mutex_lock(&in->lock);
	if (r->cfd >= 0)
		goto out;
	if (tcp_pair(client, sport, SERVER, 443, in->listen_fd, &r->cfd,
		     &r->sfd))
		goto fail;
	err = tcp_rcv_nxt(r->sfd, &r->rcv_nxt);
	if (err) {
		diag("couldn't read rcv_nxt on '%s:%u': %s", client, sport,
		     strerror(-err));
		goto fail;
	}
out:
	pthread_mutex_unlock(&in->lock);
	return r;
fail:
	close_rst(r->cfd);
	close_rst(r->sfd);
	r->cfd = r->sfd = -1;
	pthread_mutex_unlock(&in->lock);
	return NULL;
}

static void cinst_close(struct cinst *in)
{
	for (int c = 0; c < 2; c++)
		for (int i = 0; i < REAL_PORTS; i++) {
			close_rst(in->real[c][i].cfd);
			close_rst(in->real[c][i].sfd);
			in->real[c][i].cfd = in->real[c][i].sfd = -1;
		}
	close_rst(in->listen_fd);
	in->listen_fd = -1;
	lab_leave();
	if (in->instance)
		munmap(in->instance, (size_t)sysconf(_SC_PAGESIZE));
	in->instance = NULL;
	if (in->skel)
		world_fini(&in->w);
	rlgate_put(in->skel);
	in->skel = NULL;
}

/* retrans_window_ns 0: every copy of a SYN reaches the cap's own check,
 * as one the flow cache forgot would. */
static int cinst_open(struct cinst *in, __s64 cap, __u32 action, __u32 flags)
{
	__u32 zero = 0;
	struct rl_conn_ctl ctl = { .capped = 1 };

	memset(in, 0, sizeof(*in));
	pthread_mutex_init(&in->lock, NULL);
	for (int c = 0; c < 2; c++)
		for (int i = 0; i < REAL_PORTS; i++)
			in->real[c][i].cfd = in->real[c][i].sfd = -1;
	in->listen_fd = -1;
	if (lab_enter())
		return -1;
	in->listen_fd = tcp_listen(SERVER, 443);
	if (in->listen_fd < 0) {
		cinst_close(in);
		return -1;
	}
	in->skel = rlgate_get(0, RL_DEFAULT_RETRANS_GAP_NS);
	if (!in->skel) {
		cinst_close(in);
		return -1;
	}
	if (world_init(&in->w, in->skel->obj) ||
	    rule_add(&in->w, "10.1.0.0/16", 0, 1)) {
		diag("couldn't set up the maps");
		cinst_close(in);
		return -1;
	}
	in->xdp_fd = bpf_program__fd(in->skel->progs.xdp_rlgate);
	in->egress_fd = bpf_program__fd(in->skel->progs.tc_rlgate_egress);
	in->conns_fd = bpf_map__fd(in->skel->maps.conns);
	in->conn_stats_fd = bpf_map__fd(in->skel->maps.conn_stats);
	if (bpf_map_update_elem(bpf_map__fd(in->skel->maps.conn_ctl), &zero,
				&ctl, 0)) {
		diag("couldn't write conn_ctl: %s", strerror(errno));
		cinst_close(in);
		return -1;
	}
	in->instance = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE),
			    PROT_READ | PROT_WRITE, MAP_SHARED,
			    bpf_map__fd(in->skel->maps.instance), 0);
	if (in->instance == MAP_FAILED) {
		diag("couldn't mmap instance: %s", strerror(errno));
		in->instance = NULL;
		cinst_close(in);
		return -1;
	}
	in->t = &in->w.tenants[1];
	tenant_standalone(in->t, action, flags | RL_F_CONNCAP, SEC_NS, 100);
	in->t->conn_epoch = 1;
	in->t->conn_slots = cap;
	return 0;
}

/* The instance limit il switched on in in, with its cap told to the
 * program as the agent tells it (conn_ctl.instance, inst_capped). */
static void inst_on(struct cinst *in, const struct rl_instance_limit *il)
{
	struct rl_conn_ctl ctl = { .capped = 1, .instance = 1 };
	__u32 zero = 0;

	instance_configure(in->instance, il);
	bpf_map_update_elem(bpf_map__fd(in->skel->maps.conn_ctl), &zero, &ctl, 0);
	in->skel->bss->inst_capped = 1;
}

/* A segment from the client (ingress, XDP) or from the server (egress, tc),
 * on connection sport.  A client's RST or FIN (without SYN) is sent at
 * the server's rcv_nxt of the real connection plus seq, unless the server
 * is elsewhere (in->no_server); everything else at seq. */
static int seg_from(struct cinst *in, const char *client, bool from_server,
		    __u8 flags, __u16 sport, __u32 seq, __u32 *verdict)
{
	struct pkt p = { .family = 4, .flags = flags, .src = client,
			 .dst = SERVER, .sport = sport, .dport = 443,
			 .seq = seq };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	struct real *rc;
	int len, err;

	if (!from_server && !in->no_server && !(flags & TH_SYN) &&
	    (flags & (TH_RST | TH_FIN))) {
		rc = real_conn(in, client, sport);
		if (!rc)
			return -EIO;
		p.seq = rc->rcv_nxt + seq;
	}

	if (from_server) {
		p.src = SERVER;
		p.dst = client;
		p.sport = 443;
		p.dport = sport;
	}
	len = pkt_build(&p, buf, NULL);
	err = xdp_run(from_server ? in->egress_fd : in->xdp_fd, buf, len, out,
		      sizeof(out), 1, &r);
	if (err) {
		diag("bpf_prog_test_run_opts: %s", strerror(-err));
		return err;
	}
	if (verdict)
		*verdict = r.retval;
	if (from_server && r.retval != TC_ACT_OK) {
		diag("egress returned %u, not TC_ACT_OK", r.retval);
		return -EINVAL;
	}
	return 0;
}

static int seg(struct cinst *in, bool from_server, __u8 flags, __u16 sport,
	       __u32 seq, __u32 *verdict)
{
	return seg_from(in, CLIENT, from_server, flags, sport, seq, verdict);
}

/* A segment with ACK and flags from client on connection sport with these
 * numbers (host order) and payload bytes: its verdict.  0 or -errno. */
static int acks_from(struct cinst *in, const char *client, __u16 sport,
		     __u8 flags, __u32 seq, __u32 ack, int payload,
		     __u32 *verdict)
{
	struct pkt p = { .family = 4, .flags = TH_ACK | flags, .src = client,
			 .dst = SERVER, .sport = sport, .dport = 443,
			 .seq = seq, .ack = ack, .payload = payload };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), err;

	err = xdp_run(in->xdp_fd, buf, len, out, sizeof(out), 1, &r);
	if (err) {
		diag("bpf_prog_test_run_opts: %s", strerror(-err));
		return err;
	}
	*verdict = r.retval;
	return 0;
}

/* An ACK alone (acks_from()). */
static int ack_from(struct cinst *in, const char *client, __u16 sport,
		    __u32 seq, __u32 ack, int payload, __u32 *verdict)
{
	return acks_from(in, client, sport, 0, seq, ack, payload, verdict);
}

/* The SYN cookie the server's kernel answers client:sport's SYN (isn) to
 * SERVER:443 with, host order, from the kernel's own generator
 * (cookie.bpf.c), loaded once.  0 or -1 (said). */
static int syn_cookie(const char *client, __u16 sport, __u32 isn,
		      __u32 *cookie)
{
	static struct cookie_bpf *gen;
	struct pkt p = { .family = 4, .flags = TH_SYN, .src = client,
			 .dst = SERVER, .sport = sport, .dport = 443,
			 .seq = isn };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL), err;
	__u32 c;

	if (!gen && !(gen = cookie_bpf__open_and_load())) {
		diag("couldn't load the cookie generator: %s", strerror(errno));
		return -1;
	}
	err = xdp_run(bpf_program__fd(gen->progs.xdp_cookie), buf, len, out,
		      sizeof(out), 1, &r);
	if (err || r.retval != XDP_TX) {
		diag("the cookie generator failed: %s, verdict %u",
		     strerror(-err), r.retval);
		return -1;
	}
	memcpy(&c, out + pkt_l3_off(&p) + 20 + 8, 4);
	*cookie = ntohl(c);
	return 0;
}

/* A connection of client:sport opened as the server's kernel opens it with
 * a SYN cookie (a 4-tuple with only the listener): its SYN (isn) and, if
 * that passes, the ACK that returns the cookie.  *verdict: the last
 * segment's.  0 or -1. */
static int handshake_from(struct cinst *in, const char *client, __u16 sport,
			  __u32 isn, __u32 *verdict)
{
	__u32 cookie;

	if (seg_from(in, client, false, TH_SYN, sport, isn, verdict))
		return -1;
	if (*verdict != XDP_PASS)
		return 0;
	if (syn_cookie(client, sport, isn, &cookie))
		return -1;
	return ack_from(in, client, sport, isn + 1, cookie + 1, 0, verdict);
}

static void conn_stats_sum(struct cinst *in, struct rl_conn_stats *out)
{
	struct rl_conn_stats per[256];
	__u32 key = 1;

	memset(out, 0, sizeof(*out));
	if (in->w.ncpus > 256 ||
	    bpf_map_lookup_elem(in->conn_stats_fd, &key, per))
		return;
	for (int c = 0; c < in->w.ncpus; c++) {
		out->opened += per[c].opened;
		out->closed += per[c].closed;
		out->denied += per[c].denied;
		out->shadow_denied += per[c].shadow_denied;
		out->repeats += per[c].repeats;
		out->reused += per[c].reused;
		out->full += per[c].full;
	}
}

static unsigned int entries(struct cinst *in)
{
	struct rl_flow k, next;
	unsigned int n = 0;
	void *prev = NULL;

	while (!bpf_map_get_next_key(in->conns_fd, prev, &next)) {
		k = next;
		prev = &k;
		n++;
	}
	return n;
}

/* One step of a scenario: a segment, and the count in flight after it. */
struct cstep {
	int side;		/* C (client, XDP) or S (server, tc egress) */
	__u8 flags;
	__u16 sport;		/* the connection: SPORT + this */
	__u32 seq;
	__u32 verdict;		/* XDP verdict (client side only) */
	__s64 conns;		/* in flight after it */
	int sweep;		/* instead of a segment: the agent forgets the
				 * connection sport as its sweep would */
};

#define C		1
#define S		2
#define SYN_(p, seq, v, n)	{ C, TH_SYN, (p), (seq), (v), (n), 0 }
#define CLI(f, p, n)		{ C, (f), (p), 0, XDP_PASS, (n), 0 }
/* a client's segment `off` past the server's rcv_nxt */
#define CLI_AT(f, p, off, n)	{ C, (f), (p), (off), XDP_PASS, (n), 0 }
#define SRV(f, p, n)		{ S, (f), (p), 9, 0, (n), 0 }
#define SWEEP(p, n)		{ 0, 0, (p), 0, 0, (n), 1 }
#define END			{ 0 }

/* Forgets connection sport as the agent's sweep does. */
static int sweep_one(struct cinst *in, __u16 sport)
{
	struct pkt p = { .family = 4, .src = CLIENT, .dst = SERVER,
			 .sport = SPORT + sport, .dport = 443 };
	struct rl_flow k = { .family = 4 };
	struct rl_conn c;

	inet_pton(AF_INET, CLIENT, k.saddr);
	inet_pton(AF_INET, SERVER, k.daddr);
	k.sport = pkt_sport(&p);
	k.dport = pkt_dport(&p);
	if (bpf_map_lookup_elem(in->conns_fd, &k, &c))
		return 0;
	return rl_conn_forget(in->conns_fd, in->w.tenants, RL_MAX_TENANTS, NULL,
			      &k, &c);
}

static const char *side_name(const struct cstep *st)
{
	if (st->sweep)
		return "sweep";
	return st->side == S ? "server" : "client";
}

/* Runs steps against a fresh copy with a cap; checks the verdicts and the
 * count after every step, and that the count never went below zero. */
static void run_steps(struct cinst *in, const struct cstep *steps)
{
	int failed = failures;

	for (int i = 0; steps[i].side || steps[i].sweep; i++) {
		const struct cstep *st = &steps[i];
		__u32 v = 0;
		int err;

		if (st->sweep) {
			err = sweep_one(in, st->sport);
			CHECK(err >= 0, "step %d: sweep: %s", i,
			      strerror(-err));
		} else if (seg(in, st->side == S, st->flags, SPORT + st->sport,
			       st->seq, &v)) {
			CHECK(0, "step %d: the segment could not be run", i);
		}
		if (st->side == C && !st->sweep)
			CHECK(v == st->verdict, "step %d (%s flags 0x%02x conn "
			      "%u): verdict %u, want %u", i, side_name(st),
			      st->flags, st->sport, v, st->verdict);
		CHECK(in->t->conns == st->conns, "step %d (%s flags 0x%02x "
		      "conn %u): %lld in flight, want %lld", i, side_name(st),
		      st->flags, st->sport, (long long)in->t->conns,
		      (long long)st->conns);
		if (failures != failed)
			break;
	}
	CHECK(entries(in) == (unsigned int)in->t->conns, "%u entries in "
	      "conns, the tenant counts %lld", entries(in),
	      (long long)in->t->conns);
}

struct cscen {
	const char *name;
	__s64 cap;
	__u32 action, flags;
	struct cstep steps[16];
	/* what conn_stats must say at the end */
	__u64 opened, closed, denied, repeats, reused, shadow_denied;
	bool no_server;		/* the server is not on this host */
};

#define FA	(TH_FIN | TH_ACK)
#define RA	(TH_RST | TH_ACK)

static const struct cscen cscens[] = {
	{ "caps: SYNs over the cap are refused, counted denied at the cap; the "
	  "refused connection's close gives nothing back", 2, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(2, 200, XDP_PASS, 2),
	    SYN_(3, 300, XDP_DROP, 2), CLI(TH_RST, 3, 2), CLI(FA, 3, 2),
	    SRV(FA, 3, 2), SRV(RA, 3, 2), END },
	  .opened = 2, .denied = 1 },
	{ "caps: a refusal at the cap with action rst answers RST|ACK", 1,
	  RL_ACT_RST, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(2, 200, XDP_TX, 1), END },
	  .opened = 1, .denied = 1 },
	{ "caps: a SYN with the ISN of a counted connection is that "
	  "connection again, never a second place", 1, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(1, 100, XDP_PASS, 1),
	    SYN_(1, 100, XDP_PASS, 1), END },
	  .opened = 1, .repeats = 2 },
	{ "caps: two RSTs for one connection give it back once", 2,
	  RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(2, 200, XDP_PASS, 2),
	    CLI(TH_RST, 1, 1), CLI(TH_RST, 1, 1), SRV(RA, 1, 1), END },
	  .opened = 2, .closed = 1 },
	{ "caps: FIN from the client alone (a half-close, retransmitted) keeps "
	  "it counted; the server's FIN ends it", 3, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), CLI(FA, 1, 1), CLI(FA, 1, 1),
	    CLI(TH_ACK, 1, 1), SRV(FA, 1, 0), CLI(TH_ACK, 1, 0), END },
	  .opened = 1, .closed = 1 },
	{ "caps: server closes first, then the client; a RST after both FINs "
	  "gives nothing more back", 3, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SRV(FA, 1, 1), SRV(FA, 1, 1),
	    CLI(FA, 1, 0), CLI(TH_RST, 1, 0), END },
	  .opened = 1, .closed = 1 },
	{ "caps: simultaneous close (both FINs cross) ends it once", 2,
	  RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(2, 200, XDP_PASS, 2),
	    CLI(FA, 1, 2), SRV(FA, 1, 1), SRV(FA, 2, 1), CLI(FA, 2, 0),
	    CLI(FA, 2, 0), SRV(FA, 1, 0), END },
	  .opened = 2, .closed = 2 },
	{ "caps: a server refusing the connection (RST|ACK on egress) gives "
	  "its place back", 1, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SRV(RA, 1, 0),
	    SYN_(2, 200, XDP_PASS, 1), END },
	  .opened = 2, .closed = 1 },
	{ "caps: lost FIN healed by the sweep; the late FIN and the kernel's "
	  "RST find nothing to give back", 1, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), CLI(FA, 1, 1), SYN_(2, 200, XDP_DROP, 1),
	    SWEEP(1, 0), SWEEP(1, 0), SRV(FA, 1, 0), SRV(RA, 1, 0),
	    SYN_(2, 200, XDP_PASS, 1), END },
	  .opened = 2, .denied = 1 },
	{ "caps: TIME_WAIT reuse (a new ISN on a counted 4-tuple) takes the old "
	  "connection's place, which the new one's close gives back", 1,
	  RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), CLI(FA, 1, 1),
	    SYN_(1, 5000, XDP_PASS, 1), SRV(FA, 1, 1), CLI(FA, 1, 0), END },
	  .opened = 1, .closed = 1, .reused = 1 },
	{ "caps: a client's RST the server ignores frees nothing (in the "
	  "window past rcv_nxt: a challenge ACK; past the window; before "
	  "it); one at rcv_nxt, with ACK or without, ends it", 2,
	  RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(2, 200, XDP_PASS, 2),
	    CLI_AT(TH_RST, 1, 1, 2), CLI_AT(RA, 1, 1000, 2),
	    CLI_AT(TH_RST, 1, 0x40000000, 2), CLI_AT(TH_RST, 1, -1, 2),
	    SYN_(3, 300, XDP_DROP, 2), CLI(TH_RST, 1, 1),
	    CLI(RA, 2, 0), SYN_(3, 300, XDP_PASS, 1), END },
	  .opened = 3, .closed = 2, .denied = 1 },
	{ "caps: a client's FIN out of order (the server waits for bytes "
	  "before it) does not pair with the server's; one at rcv_nxt does",
	  1, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), CLI_AT(FA, 1, 1000, 1),
	    CLI_AT(FA, 1, 0x40000000, 1), SRV(FA, 1, 1),
	    SYN_(2, 200, XDP_DROP, 1), CLI(FA, 1, 0),
	    SYN_(2, 200, XDP_PASS, 1), END },
	  .opened = 2, .closed = 1, .denied = 1 },
	{ "caps: the server's RST without ACK (its listener's answer to an "
	  "ACK no socket expected) frees nothing; its socket's RST|ACK ends "
	  "it, and so does its RST without ACK after its FIN (data after "
	  "its close)", 2, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(3, 300, XDP_PASS, 2),
	    SRV(TH_RST, 1, 2), SYN_(2, 200, XDP_DROP, 2), SRV(RA, 1, 1),
	    SYN_(2, 200, XDP_PASS, 2), SRV(FA, 3, 2), SRV(TH_RST, 3, 1),
	    END },
	  .opened = 3, .closed = 2, .denied = 1 },
	{ "caps: a client's RST or FIN where the server has no socket of the "
	  "connection (a listener only, or not on this host) frees nothing: "
	  "the server's RST|ACK or the sweep does",
	  2, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(2, 200, XDP_PASS, 2),
	    CLI(TH_RST, 1, 2), CLI(FA, 2, 2), SRV(FA, 2, 2),
	    SRV(RA, 1, 1), SWEEP(2, 0), END },
	  .opened = 2, .closed = 1, .no_server = true },
	{ "caps: shadow admits past the cap and counts what is really in "
	  "flight", 1, RL_ACT_DROP, RL_F_SHADOW,
	  { SYN_(1, 100, XDP_PASS, 1), SYN_(2, 200, XDP_PASS, 2),
	    SYN_(3, 300, XDP_PASS, 3), CLI(TH_RST, 2, 2), END },
	  .opened = 3, .closed = 1, .shadow_denied = 2 },
	{ "caps: cap 0 with the flag set refuses every SYN (fleet: no slots "
	  "held)", 0, RL_ACT_DROP, 0,
	  { SYN_(1, 100, XDP_DROP, 0), CLI(TH_RST, 1, 0), END },
	  .denied = 1 },
};

static int run_cscen(const void *arg)
{
	const struct cscen *sc = arg;
	struct rl_conn_stats cs;
	struct rl_stats st;
	struct cinst in;

	if (cinst_open(&in, sc->cap, sc->action, sc->flags))
		return -1;
	in.no_server = sc->no_server;
	run_steps(&in, sc->steps);
	conn_stats_sum(&in, &cs);
	tenant_stats_sum(&in.w, 1, &st);
	CHECK(cs.opened == sc->opened && cs.closed == sc->closed &&
	      cs.denied == sc->denied && cs.repeats == sc->repeats &&
	      cs.reused == sc->reused && cs.shadow_denied == sc->shadow_denied,
	      "conn_stats opened %llu closed %llu denied %llu repeats %llu "
	      "reused %llu shadow %llu; want %llu %llu %llu %llu %llu %llu",
	      (unsigned long long)cs.opened, (unsigned long long)cs.closed,
	      (unsigned long long)cs.denied, (unsigned long long)cs.repeats,
	      (unsigned long long)cs.reused,
	      (unsigned long long)cs.shadow_denied,
	      (unsigned long long)sc->opened, (unsigned long long)sc->closed,
	      (unsigned long long)sc->denied, (unsigned long long)sc->repeats,
	      (unsigned long long)sc->reused,
	      (unsigned long long)sc->shadow_denied);
	CHECK(st.denied == sc->denied, "rl_stats.denied %llu, want the cap's "
	      "%llu", (unsigned long long)st.denied,
	      (unsigned long long)sc->denied);
	cinst_close(&in);
	return 0;
}

/* The same with ACKs and FINs read as verification reads them (some other
 * tenant verifies): a FIN with ACK then comes as P_ACK, on either side, and
 * must end connections as before. */
static int run_cscen_verifying(const void *arg)
{
	const struct cscen *sc = arg;
	struct cinst in;

	if (cinst_open(&in, sc->cap, sc->action, sc->flags))
		return -1;
	in.no_server = sc->no_server;
	in.skel->bss->verify_tenants = 1;
	run_steps(&in, sc->steps);
	cinst_close(&in);
	return 0;
}

/* A SYN the bucket refuses gives its reserved place back and costs the cap
 * nothing; a SYN the cap refuses costs the bucket no token. */
static int scen_cap_and_rate(const void *arg)
{
	struct rl_conn_stats cs;
	struct cinst in;
	__u64 tat;
	__u32 v;

	(void)arg;
	if (cinst_open(&in, 1, RL_ACT_DROP, 0))
		return -1;
	/* empty bucket: nothing for an hour */
	in.t->tat = now_ns() + 3600 * SEC_NS;
	if (seg(&in, false, TH_SYN, SPORT + 1, 1, &v))
		goto fail;
	CHECK(v == XDP_DROP && in.t->conns == 0, "rate refusal: verdict %u, "
	      "%lld in flight; want drop, 0", v, (long long)in.t->conns);
	conn_stats_sum(&in, &cs);
	CHECK(cs.denied == 0 && cs.opened == 0, "rate refusal counted at the "
	      "cap: denied %llu opened %llu", (unsigned long long)cs.denied,
	      (unsigned long long)cs.opened);
	/* full bucket, cap reached: the refusal must leave tat alone */
	in.t->tat = 0;
	if (seg(&in, false, TH_SYN, SPORT + 1, 1, &v))
		goto fail;
	tat = in.t->tat;
	if (seg(&in, false, TH_SYN, SPORT + 2, 2, &v))
		goto fail;
	CHECK(v == XDP_DROP && in.t->tat == tat && in.t->conns == 1,
	      "cap refusal: verdict %u, tat moved %d, %lld in flight", v,
	      in.t->tat != tat, (long long)in.t->conns);
	cinst_close(&in);
	return 0;
fail:
	cinst_close(&in);
	return -1;
}

/*
 * A SYN with a new ISN on a counted 4-tuple whose connection is still open
 * (a hostile client's way to a second place): refused by the bucket, it
 * leaves the place and the entry as they were; admitted, it takes the
 * place over and adds none.  The cap still refuses another 4-tuple, and
 * the instance limit (no tenant: the stranger's SYNs) does the same.
 */
static int scen_new_isn(const void *arg)
{
	struct rl_instance_limit il = { .max_conns = 1,
					.rate = { 1, 3600 }, .burst = 1 };
	struct rl_flow k = { .family = 4 };
	struct pkt p = { .family = 4, .src = CLIENT, .dst = SERVER,
			 .sport = SPORT + 1, .dport = 443 };
	struct rl_conn c;
	struct cinst in;
	__u32 v;

	(void)arg;
	if (cinst_open(&in, 1, RL_ACT_DROP, 0))
		return -1;
	inet_pton(AF_INET, CLIENT, k.saddr);
	inet_pton(AF_INET, SERVER, k.daddr);
	k.sport = pkt_sport(&p);
	k.dport = pkt_dport(&p);
	if (seg(&in, false, TH_SYN, SPORT + 1, 100, &v))
		goto fail;
	/* empty bucket: nothing for an hour */
	in.t->tat = now_ns() + 3600 * SEC_NS;
	for (__u32 isn = 5000; isn < 5003; isn++) {
		if (seg(&in, false, TH_SYN, SPORT + 1, isn, &v))
			goto fail;
		CHECK(v == XDP_DROP && in.t->conns == 1 && entries(&in) == 1,
		      "new ISN %u refused by the bucket: verdict %u, %lld in "
		      "flight, %u entries; want drop, 1, 1", isn, v,
		      (long long)in.t->conns, entries(&in));
	}
	CHECK(!bpf_map_lookup_elem(in.conns_fd, &k, &c) && c.isn == htonl(100),
	      "the entry holds ISN %u, want the admitted 100", ntohl(c.isn));
	in.t->tat = 0;
	if (seg(&in, false, TH_SYN, SPORT + 1, 6000, &v) ||
	    seg(&in, false, TH_SYN, SPORT + 2, 200, NULL))
		goto fail;
	CHECK(v == XDP_PASS && in.t->conns == 1 && entries(&in) == 1,
	      "new ISN admitted: verdict %u, %lld in flight, %u entries; want "
	      "pass, 1, 1", v, (long long)in.t->conns, entries(&in));

	/* the instance's own: a stranger's connection, the rate spent */
	inst_on(&in, &il);
	if (handshake_from(&in, STRANGER, SPORT + 1, 100, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 1, "stranger: verdict "
	      "%u, instance %lld; want pass, 1", v,
	      (long long)in.instance->conns);
	if (seg_from(&in, STRANGER, false, TH_SYN, SPORT + 1, 7000, &v))
		goto fail;
	CHECK(v == XDP_DROP && in.instance->conns == 1, "stranger's new ISN "
	      "refused (the cap full, the rate spent): verdict %u, instance "
	      "%lld; want drop, 1",
	      v, (long long)in.instance->conns);
	if (seg_from(&in, STRANGER, false, TH_SYN, SPORT + 2, 100, &v))
		goto fail;
	CHECK(v == XDP_DROP && in.instance->conns == 1, "another stranger "
	      "4-tuple: verdict %u, instance %lld; want drop at the cap, 1",
	      v, (long long)in.instance->conns);
	cinst_close(&in);
	return 0;
fail:
	cinst_close(&in);
	return -1;
}

/* An entry counted in an earlier epoch of the slot (a deleted tenant's)
 * never lowers the count of the tenant there now, nor below zero. */
static int scen_epoch(const void *arg)
{
	struct cinst in;

	(void)arg;
	if (cinst_open(&in, 2, RL_ACT_DROP, 0))
		return -1;
	if (seg(&in, false, TH_SYN, SPORT + 1, 1, NULL))
		goto fail;
	/* the slot gets a new tenant: a new epoch, nothing in flight */
	in.t->conn_epoch = 2;
	in.t->conns = 0;
	if (seg(&in, false, TH_RST, SPORT + 1, 0, NULL))
		goto fail;
	CHECK(in.t->conns == 0 && entries(&in) == 0, "old epoch's RST: %lld "
	      "in flight, %u entries; want 0, 0", (long long)in.t->conns,
	      entries(&in));
	cinst_close(&in);
	return 0;
fail:
	cinst_close(&in);
	return -1;
}

/*
 * A leased capped tenant holding `slots`, `open` connections in flight, when
 * its agent's heartbeat is `age` old (stale after 2 s) or the agent says
 * it is degraded: SYNs of new connections, of which `want` pass.  A dead
 * agent's slots are not its to use once Redis may have handed them on.
 * Standalone rows: the cap shared with a preload pool, `slots` the
 * kernel's part of it, which only a live agent moves: once its heartbeat
 * is stale the fail policy decides, as in the pool; an agent that expects
 * no heartbeat (stale_ns 0: no pool) leaves the cap to the kernel alone.
 */
static const struct stale_row {
	const char *what;
	__u32 fail;
	__s64 slots, fail_slots, open;
	__u64 age_ns;
	__u32 degraded;
	int want;
	enum {
		LEASED,
		SHARED,		/* standalone, split with a preload pool */
		ALONE,		/* standalone, no pool: stale_ns 0 */
	} cap;
} stale_rows[] = {
	{ "fresh heartbeat: the slots held", RL_FAIL_STATIC, 3, 1, 0,
	  0, 0, 3, LEASED },
	{ "stale, static: the share set in advance, not the slots held",
	  RL_FAIL_STATIC, 5, 2, 0, 10 * SEC_NS, 0, 2, LEASED },
	{ "stale, static, more in flight than the share: nothing new",
	  RL_FAIL_STATIC, 5, 2, 3, 10 * SEC_NS, 0, 0, LEASED },
	{ "stale, static, a share above the slots held", RL_FAIL_STATIC, 1, 4,
	  0, 10 * SEC_NS, 0, 4, LEASED },
	{ "stale, static, a share of 0 (slot of an older agent): nothing new",
	  RL_FAIL_STATIC, 5, 0, 0, 10 * SEC_NS, 0, 0, LEASED },
	{ "stale, allow: no cap", RL_FAIL_ALLOW, 1, 1, 0, 10 * SEC_NS, 0, 6,
	  LEASED },
	{ "stale, deny: nothing new however many slots held", RL_FAIL_DENY,
	  5, 5, 0, 10 * SEC_NS, 0, 0, LEASED },
	{ "degraded (breaker open), static: the share", RL_FAIL_STATIC, 5, 1,
	  0, 0, 1, 1, LEASED },
	{ "split with a preload pool, fresh heartbeat, deny: the kernel's "
	  "part", RL_FAIL_DENY, 3, 1, 0, 0, 0, 3, SHARED },
	{ "split with a pool, the agent dead (stale), static: the kernel's "
	  "part, not a fleet's fail share", RL_FAIL_STATIC, 2, 1, 0,
	  10 * SEC_NS, 0, 2, SHARED },
	{ "split with a pool, stale, static, its part in flight: nothing new",
	  RL_FAIL_STATIC, 2, 1, 2, 10 * SEC_NS, 0, 0, SHARED },
	{ "split with a pool, stale, allow: no cap", RL_FAIL_ALLOW, 2, 1, 0,
	  10 * SEC_NS, 0, 6, SHARED },
	{ "split with a pool, stale, deny: nothing new", RL_FAIL_DENY, 2, 2, 0,
	  10 * SEC_NS, 0, 0, SHARED },
	{ "no pool (no heartbeat expected), deny: the whole cap however old "
	  "the heartbeat", RL_FAIL_DENY, 2, 0, 0, 10 * SEC_NS, 0, 2,
	  ALONE },
};

static int run_stale_row(const void *arg)
{
	const struct stale_row *row = arg;
	__u64 stale = row->cap == ALONE ? 0 : 2 * SEC_NS;
	struct cinst in;
	int passed = 0, err;
	__u32 v;

	if (cinst_open(&in, 0, RL_ACT_DROP, 0))
		return -1;
	/* tokens to spare: only the cap decides (standalone: a burst of 100) */
	if (row->cap == LEASED)
		tenant_leased(in.t, RL_ACT_DROP, 1000, -1, false);
	tenant_fail(in.t, row->fail, 1000, 1);
	in.t->flags = RL_F_CONNCAP;
	in.t->conn_slots = row->open > row->slots ? row->open : row->slots;
	in.t->conn_fail_slots = row->fail_slots;
	err = agent_state_set(&in.w, now_ns(), stale, 0);
	for (int i = 0; !err && i < row->open; i++)
		err = seg(&in, false, TH_SYN, SPORT + 100 + i, 1, NULL);
	in.t->conn_slots = row->slots;
	if (!err)
		err = agent_state_set(&in.w, now_ns() - row->age_ns, stale,
				      row->degraded);
	for (int i = 0; !err && i < 6; i++) {
		err = seg(&in, false, TH_SYN, SPORT + i, 1, &v);
		passed += !err && v == XDP_PASS;
	}
	CHECK(!err, "%s: couldn't run: %s", row->what, strerror(-err));
	CHECK(in.t->conns == row->open + passed && entries(&in) ==
	      (unsigned int)in.t->conns, "%s: %lld in flight, %u entries; "
	      "want %lld", row->what, (long long)in.t->conns, entries(&in),
	      (long long)(row->open + passed));
	CHECK(passed == row->want, "%s: %d of 6 new connections admitted, "
	      "want %d", row->what, passed, row->want);
	cinst_close(&in);
	return 0;
}

/* With no tenant capped (conn_ctl.capped 0) ends are not looked up: the
 * fast path of uncapped hosts does no hash lookup. */
static int scen_gate(const void *arg)
{
	struct rl_conn_ctl off = { 0 };
	__u32 zero = 0;
	struct cinst in;

	(void)arg;
	if (cinst_open(&in, 2, RL_ACT_DROP, 0))
		return -1;
	if (seg(&in, false, TH_SYN, SPORT + 1, 1, NULL) ||
	    bpf_map_update_elem(bpf_map__fd(in.skel->maps.conn_ctl), &zero,
				&off, 0) ||
	    seg(&in, false, TH_RST, SPORT + 1, 0, NULL) ||
	    seg(&in, true, RA, SPORT + 1, 7, NULL))
		goto fail;
	CHECK(in.t->conns == 1, "ends seen with the gate closed: %lld in "
	      "flight, want 1", (long long)in.t->conns);
	cinst_close(&in);
	return 0;
fail:
	cinst_close(&in);
	return -1;
}

/* The sweep's decisions (user/lib/conns.c) on the entries it meets. */
static int scen_judge(const void *arg)
{
	struct rl_tenant t = { .mode = RL_MODE_STANDALONE,
			       .flags = RL_F_CONNCAP, .conn_epoch = 3 };
	struct rl_conn c = { .tenant = 1, .epoch = 3, .opened_ns = 10 * SEC_NS,
			     .seen_ns = 20 * SEC_NS };
	struct rl_conn_view v = { .t = &t, .grace_ns = 2 * SEC_NS,
				  .ttl_ns = 60 * SEC_NS };
	static const struct {
		bool local, sock;
		__u64 now;
		__u32 epoch;
		enum rl_conn_fate want;
	} rows[] = {
		{ true, true, 1000 * SEC_NS, 3, RL_CONN_KEEP },
		{ true, false, 11 * SEC_NS, 3, RL_CONN_KEEP },	/* in grace */
		{ true, false, 12 * SEC_NS, 3, RL_CONN_GONE },
		{ true, false, 5 * SEC_NS, 3, RL_CONN_KEEP },	/* clock behind */
		{ false, false, 79 * SEC_NS, 3, RL_CONN_KEEP },	/* idle 59 s */
		{ false, false, 80 * SEC_NS, 3, RL_CONN_IDLE },
		{ true, true, 11 * SEC_NS, 2, RL_CONN_STALE },
	};

	(void)arg;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		enum rl_conn_fate f;

		v.local = rows[i].local;
		v.has_socket = rows[i].sock;
		v.now_ns = rows[i].now;
		c.epoch = rows[i].epoch;
		f = rl_conn_judge(&c, &v);
		CHECK(f == rows[i].want, "row %zu: fate %d, want %d", i, f,
		      rows[i].want);
	}
	c.epoch = 3;
	t.flags = 0;
	CHECK(rl_conn_judge(&c, &v) == RL_CONN_STALE, "a tenant without a cap "
	      "keeps its entries");
	return 0;
}

/*
 * Two CPUs on the same 64 connections at once: one opens them (SYNs with a
 * new ISN each round, so some reuse a counted 4-tuple), the other ends them
 * (the client's RST, the client's FIN, the server's FIN), while a third
 * thread watches the count.  A place is taken only by an insert and given
 * back only by a delete that succeeded: in flight is never below zero, and
 * above the cap only by the one reservation the opening CPU is undoing
 * when it finds the cap reached; at the end it equals the entries in the
 * table and opened - closed.
 */
#define RACE_CONNS	64
#define RACE_ROUNDS	300
#define RACE_CAP	40

struct race {
	struct cinst *in;
	int cpu, err;
	bool opener;
	volatile int *ender_done;
};

/* The opener goes on past its rounds while the ender still runs (up to
 * 20 times as many), so the two overlap however a loaded machine
 * schedules them. */
static void *race_run(void *arg)
{
	struct race *r = arg;
	int rounds = r->opener ? 20 * RACE_ROUNDS : RACE_ROUNDS;

	r->err = pin_to_cpu(r->cpu);
	for (int k = 0; !r->err && k < rounds; k++) {
		if (r->opener && k >= RACE_ROUNDS && *r->ender_done)
			break;
		for (int c = 0; !r->err && c < RACE_CONNS; c++) {
			__u16 port = SPORT + c;

			if (r->opener)
				r->err = seg(r->in, false, TH_SYN, port, k + 1, NULL);
			else if (c % 3 == 0)
				r->err = seg(r->in, false, TH_RST, port, 0, NULL);
			else
				r->err = seg(r->in, c % 3 == 2, TH_FIN | TH_ACK,
					     port, 0, NULL);
		}
	}
	if (!r->opener)
		*r->ender_done = 1;
	return NULL;
}

struct watch {
	struct rl_tenant *t;
	volatile int *stop;
	__s64 lo, hi;
};

static void *race_watch(void *arg)
{
	struct watch *w = arg;

	w->lo = w->hi = 0;
	while (!*w->stop) {
		__s64 n = __atomic_load_n(&w->t->conns, __ATOMIC_RELAXED);

		if (n < w->lo)
			w->lo = n;
		if (n > w->hi)
			w->hi = n;
	}
	return NULL;
}

static int scen_race(const void *arg)
{
	struct race r[2];
	struct watch w;
	struct rl_conn_stats cs;
	volatile int stop = 0, ender_done = 0;
	pthread_t th[2], wt;
	struct cinst in;

	(void)arg;
	if (libbpf_num_possible_cpus() < 2 || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		check_skip("needs two CPUs");
		return 0;
	}
	if (cinst_open(&in, RACE_CAP, RL_ACT_DROP, 0))
		return -1;
	/* a bucket that never refuses: only the cap decides */
	tenant_standalone(in.t, RL_ACT_DROP, RL_F_CONNCAP, 1, 1000000000000ull);
	/* the server's sockets the client's RSTs and FINs are judged
	 * against, made before the race so the ender runs at full speed */
	for (int c = 0; c < RACE_CONNS; c++) {
		if (!in.no_server && !real_conn(&in, CLIENT, SPORT + c)) {
			cinst_close(&in);
			return -1;
		}
	}
	w = (struct watch){ .t = in.t, .stop = &stop };
	pthread_create(&wt, NULL, race_watch, &w);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct race){ .in = &in, .cpu = i, .opener = i == 0,
				      .ender_done = &ender_done };
		pthread_create(&th[i], NULL, race_run, &r[i]);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	stop = 1;
	pthread_join(wt, NULL);
	for (int i = 0; i < 2; i++)
		CHECK(!r[i].err, "thread on CPU %d: %s", i, strerror(-r[i].err));
	conn_stats_sum(&in, &cs);
	diag("opened %llu, closed %llu, reused %llu, denied %llu, repeats %llu, "
	     "in flight %lld (seen from %lld to %lld)",
	     (unsigned long long)cs.opened, (unsigned long long)cs.closed,
	     (unsigned long long)cs.reused, (unsigned long long)cs.denied,
	     (unsigned long long)cs.repeats, (long long)in.t->conns,
	     (long long)w.lo, (long long)w.hi);
	CHECK(w.lo >= 0 && w.hi <= RACE_CAP + 1, "in flight left [0, %d + 1]: "
	      "seen from %lld to %lld", RACE_CAP, (long long)w.lo,
	      (long long)w.hi);
	CHECK(in.t->conns == (__s64)entries(&in), "in flight %lld, %u entries",
	      (long long)in.t->conns, entries(&in));
	CHECK(cs.opened - cs.closed == (__u64)in.t->conns, "opened - closed = "
	      "%lld, in flight %lld", (long long)(cs.opened - cs.closed),
	      (long long)in.t->conns);
	/* places given back and taken again: a client's RST ends only the
	 * connection its server socket holds, so each port's place is given
	 * back once, and taken again by a new ISN's SYN */
	CHECK(cs.opened > RACE_CAP && cs.closed > 0, "the race did not run: "
	      "opened %llu, closed %llu", (unsigned long long)cs.opened,
	      (unsigned long long)cs.closed);
	cinst_close(&in);
	return 0;
}

/*
 * The host-wide instance limit: one cap (and rate) over the tenant's
 * connections and those no rule matches.  A step is a segment from the
 * tenant's client (T) or a stranger no rule matches (U), a handshake of
 * either (TH, UH: the SYN, then the cookie's ACK, which takes the
 * instance's place; the tenant's SYN takes the tenant's), or a segment
 * from the server to either (TS, US), with the verdict wanted and the
 * counts after it.
 */
struct istep {
	int who;		/* IT, IU, ITS, IUS, IUH, ITH; 0 ends */
	__u8 flags;
	__u16 sport;		/* SPORT + this */
	__u32 verdict;		/* client side */
	__s64 inst, tenant;	/* in flight after it */
	int new_epoch;		/* instead of a segment: the instance is
				 * set anew (del and set) */
};

#define IT	1
#define IU	2
#define ITS	3
#define IUS	4
#define IUH	5	/* the stranger's handshake (handshake_from()) */
#define ITH	6	/* the tenant's client's handshake */
#define IS(w, f, p, v, i, t)	{ (w), (f), (p), (v), (i), (t), 0 }

struct iscen {
	const char *name;
	__s64 inst_cap, tenant_cap;	/* tenant_cap 0: the tenant has none */
	__u64 rate_burst;		/* 0: no instance rate; else 1/h with
					 * this burst */
	struct istep steps[16];
	__u64 full, rate;		/* RL_CNT_INST_FULL, RL_CNT_INST_RATE */
};

static const struct iscen iscens[] = {
	{ "instance: unmatched and matched SYNs share the instance's cap; a "
	  "close of either frees a place for the other", 2, 10, 0,
	  { IS(ITH, TH_SYN, 1, XDP_PASS, 1, 1), IS(IUH, TH_SYN, 2, XDP_PASS, 2, 1),
	    IS(ITH, TH_SYN, 3, XDP_DROP, 2, 1), IS(IUH, TH_SYN, 4, XDP_DROP, 2, 1),
	    IS(IUS, TH_RST | TH_ACK, 2, 0, 1, 1),
	    IS(ITH, TH_SYN, 3, XDP_PASS, 2, 2), IS(IUH, TH_SYN, 4, XDP_DROP, 2, 2),
	    { 0 } },
	  .full = 3 },
	{ "instance: a tenant without a cap of its own is held by the "
	  "instance's", 1, 0, 0,
	  { IS(IT, TH_SYN, 1, XDP_PASS, 0, 0), IS(ITH, TH_SYN, 1, XDP_PASS, 1, 0),
	    IS(IT, TH_SYN, 2, XDP_DROP, 1, 0),
	    IS(IT, TH_RST, 1, XDP_PASS, 0, 0), IS(ITH, TH_SYN, 2, XDP_PASS, 1, 0),
	    { 0 } },
	  .full = 1 },
	{ "instance: a close (both FINs) gives back to the tenant and the "
	  "instance once; a RST after gives nothing more", 3, 3, 0,
	  { IS(ITH, TH_SYN, 1, XDP_PASS, 1, 1), IS(IUH, TH_SYN, 2, XDP_PASS, 2, 1),
	    IS(IT, TH_FIN | TH_ACK, 1, XDP_PASS, 2, 1),
	    IS(ITS, TH_FIN | TH_ACK, 1, 0, 1, 0),
	    IS(IT, TH_RST, 1, XDP_PASS, 1, 0),
	    IS(IUS, TH_FIN | TH_ACK, 2, 0, 1, 0),
	    IS(IU, TH_FIN | TH_ACK, 2, XDP_PASS, 0, 0), { 0 } },
	  .full = 0 },
	{ "instance: the tenant's SYN takes its tenant's place alone, its "
	  "handshake's ACK the instance's; the tenant's cap refusing takes "
	  "none", 5, 1, 0,
	  { IS(IT, TH_SYN, 1, XDP_PASS, 0, 1), IS(ITH, TH_SYN, 1, XDP_PASS, 1, 1),
	    IS(IT, TH_SYN, 2, XDP_DROP, 1, 1),
	    IS(IT, TH_SYN, 3, XDP_DROP, 1, 1), IS(IUH, TH_SYN, 4, XDP_PASS, 2, 1),
	    { 0 } },
	  .full = 0 },
	{ "instance: an entry of an older instance epoch gives nothing back "
	  "to the instance set since", 2, 0, 0,
	  { IS(IUH, TH_SYN, 1, XDP_PASS, 1, 0), IS(ITH, TH_SYN, 2, XDP_PASS, 2, 0),
	    { .new_epoch = 1, .inst = 0 },
	    IS(IUH, TH_SYN, 3, XDP_PASS, 1, 0),
	    IS(IU, TH_RST, 1, XDP_PASS, 1, 0), IS(IT, TH_RST, 2, XDP_PASS, 1, 0),
	    IS(IU, TH_RST, 3, XDP_PASS, 0, 0), { 0 } },
	  .full = 0 },
	{ "instance: the rate refuses past its burst, matched or not, and gives "
	  "the tenant's place back", 10, 10, 2,
	  { IS(IUH, TH_SYN, 1, XDP_PASS, 1, 0), IS(ITH, TH_SYN, 2, XDP_PASS, 2, 1),
	    IS(IUH, TH_SYN, 3, XDP_DROP, 2, 1), IS(IT, TH_SYN, 4, XDP_DROP, 2, 1),
	    { 0 } },
	  .rate = 2 },
};

static __u64 counter(struct cinst *in, __u32 idx)
{
	__u64 per[256], sum = 0;

	if (in->w.ncpus > 256 ||
	    bpf_map_lookup_elem(bpf_map__fd(in->skel->maps.counters), &idx, per))
		return 0;
	for (int c = 0; c < in->w.ncpus; c++)
		sum += per[c];
	return sum;
}

/* Checks the instance's refusals at its cap (RL_CNT_INST_FULL). */
static void expect_inst_full(struct cinst *in, __u64 want)
{
	__u64 got = counter(in, RL_CNT_INST_FULL);

	CHECK(got == want, "refused at the cap %llu, want %llu",
	      (unsigned long long)got, (unsigned long long)want);
}

static int run_iscen(const void *arg)
{
	const struct iscen *sc = arg;
	struct rl_instance_limit il = { .max_conns = sc->inst_cap };
	struct cinst in;
	int failed = failures;

	if (cinst_open(&in, sc->tenant_cap, RL_ACT_DROP, 0))
		return -1;
	if (!sc->tenant_cap)
		in.t->flags &= ~RL_F_CONNCAP;
	if (sc->rate_burst) {
		il.rate = (struct policy_rate){ 1, 3600 };
		il.burst = sc->rate_burst;
	}
	inst_on(&in, &il);
	for (int i = 0; sc->steps[i].who || sc->steps[i].new_epoch; i++) {
		const struct istep *st = &sc->steps[i];
		bool server = st->who == ITS || st->who == IUS;
		__u32 v = 0;

		if (st->new_epoch) {
			instance_clear(in.instance);
			instance_configure(in.instance, &il);
		} else if (st->who == IUH || st->who == ITH) {
			if (handshake_from(&in, st->who == IUH ? STRANGER :
					   CLIENT, SPORT + st->sport,
					   100 + st->sport, &v))
				CHECK(0, "step %d: the handshake could not be "
				      "run", i);
		} else if (seg_from(&in, st->who == IT || st->who == ITS ?
				    CLIENT : STRANGER, server, st->flags,
				    SPORT + st->sport, st->flags & TH_SYN ?
				    100 + st->sport : 0, &v)) {
			CHECK(0, "step %d: the segment could not be run", i);
		}
		if (!st->new_epoch && !server)
			CHECK(v == st->verdict, "step %d (who %d flags 0x%02x "
			      "conn %u): verdict %u, want %u", i, st->who,
			      st->flags, st->sport, v, st->verdict);
		CHECK(in.instance->conns == st->inst &&
		      (!sc->tenant_cap || in.t->conns == st->tenant),
		      "step %d (who %d flags 0x%02x conn %u): instance %lld, "
		      "tenant %lld in flight; want %lld, %lld", i, st->who,
		      st->flags, st->sport, (long long)in.instance->conns,
		      (long long)in.t->conns, (long long)st->inst,
		      (long long)st->tenant);
		if (failures != failed)
			break;
	}
	CHECK(counter(&in, RL_CNT_INST_FULL) == sc->full &&
	      counter(&in, RL_CNT_INST_RATE) == sc->rate,
	      "refused at the cap %llu, by the rate %llu; want %llu, %llu",
	      (unsigned long long)counter(&in, RL_CNT_INST_FULL),
	      (unsigned long long)counter(&in, RL_CNT_INST_RATE),
	      (unsigned long long)sc->full, (unsigned long long)sc->rate);
	cinst_close(&in);
	return 0;
}

/*
 * Forged SYNs from sources no rule matches (30, with an instance cap of 3)
 * take no place: the server's kernel makes request sockets or cookies of
 * them, never connections, so the tenant's handshake after them passes.  A
 * stranger's place is taken by the ACK that completes its handshake on the
 * server (here a cookie's, with only the listener), once for it and its
 * data; never by an ACK of no handshake, nor by a segment of an open
 * connection whose numbers pass the cookie check.  At the cap the SYN of a
 * stranger is dropped, and so is a handshake's ACK whose SYN came before.
 */
static int scen_inst_forged(const void *arg)
{
	struct rl_instance_limit il = { .max_conns = 3 };
	__u32 v, cookie, pass = 0;
	struct real *rc;
	struct cinst in;

	(void)arg;
	if (cinst_open(&in, 0, RL_ACT_DROP, 0))
		return -1;
	in.t->flags &= ~RL_F_CONNCAP;
	inst_on(&in, &il);
	for (__u16 i = 1; i <= 30; i++) {
		if (seg_from(&in, STRANGER, false, TH_SYN, SPORT + i, 1000 * i,
			     &v))
			goto fail;
		pass += v == XDP_PASS;
	}
	CHECK(pass == 30 && in.instance->conns == 0 && entries(&in) == 0,
	      "30 forged SYNs: %u passed, instance %lld, %u entries; want 30, "
	      "0, 0", pass, (long long)in.instance->conns, entries(&in));
	if (handshake_from(&in, CLIENT, SPORT + 1, 1, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 1, "the tenant's "
	      "handshake after them: verdict %u, instance %lld; want pass, 1",
	      v, (long long)in.instance->conns);

	/* no handshake: numbers no socket expects, and an open connection's
	 * segment whose numbers are a valid cookie */
	if (ack_from(&in, STRANGER, SPORT + 40, 777, 888, 0, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 1, "an ACK of no "
	      "handshake: verdict %u, instance %lld; want pass, 1", v,
	      (long long)in.instance->conns);
	rc = real_conn(&in, STRANGER, SPORT + 50);
	if (!rc || syn_cookie(STRANGER, SPORT + 50, 5000, &cookie) ||
	    ack_from(&in, STRANGER, SPORT + 50, 5001, cookie + 1, 10, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 1, "an open "
	      "connection's segment with a cookie's numbers: verdict %u, "
	      "instance %lld; want pass, 1", v, (long long)in.instance->conns);

	/* a handshake, and its data with the same numbers: one place */
	if (handshake_from(&in, STRANGER, SPORT + 60, 6000, &v) ||
	    syn_cookie(STRANGER, SPORT + 60, 6000, &cookie))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 2, "a stranger's "
	      "handshake: verdict %u, instance %lld; want pass, 2", v,
	      (long long)in.instance->conns);
	if (ack_from(&in, STRANGER, SPORT + 60, 6001, cookie + 1, 100, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 2 && entries(&in) == 2,
	      "its data: verdict %u, instance %lld, %u entries; want pass, 2, "
	      "2", v, (long long)in.instance->conns, entries(&in));
	if (handshake_from(&in, STRANGER, SPORT + 61, 6100, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 3, "a second handshake: "
	      "verdict %u, instance %lld; want pass, 3", v,
	      (long long)in.instance->conns);

	/* full: a stranger's SYN, the ACK of a forged SYN's cookie (its SYN
	 * passed before), the tenant's SYN */
	if (seg_from(&in, STRANGER, false, TH_SYN, SPORT + 62, 6200, &v))
		goto fail;
	CHECK(v == XDP_DROP, "a stranger's SYN at the cap: verdict %u", v);
	if (syn_cookie(STRANGER, SPORT + 5, 5000, &cookie) ||
	    ack_from(&in, STRANGER, SPORT + 5, 5001, cookie + 1, 0, &v))
		goto fail;
	CHECK(v == XDP_DROP, "a handshake's ACK at the cap: verdict %u", v);
	if (seg(&in, false, TH_SYN, SPORT + 2, 2, &v))
		goto fail;
	CHECK(v == XDP_DROP && in.instance->conns == 3 && entries(&in) == 3,
	      "the tenant's SYN at the cap: verdict %u, instance %lld, %u "
	      "entries; want drop, 3, 3", v, (long long)in.instance->conns,
	      entries(&in));
	expect_inst_full(&in, 3);
	cinst_close(&in);
	return 0;
fail:
	CHECK(0, "a segment could not be run");
	cinst_close(&in);
	return 0;
}

/*
 * One tenant's forged SYNs (30, within its generous rate and its own cap of
 * 50) against an instance cap of 10: they take their tenant's places, as
 * its cap always counted, and none of the instance's, so another tenant's
 * client (STRANGER, made tenant 2 here) still connects.  A tenant's
 * connection takes its instance place at its handshake's ACK, into the
 * entry its SYN made (one entry, given back whole at its end); an ACK of
 * no handshake on a forged SYN's 4-tuple takes none.  At the full cap the
 * tenant's SYN is refused before its own cap is asked, and a handshake's
 * ACK is dropped, its tenant's place kept for the client's next segment.
 */
static int scen_inst_tenant_forged(const void *arg)
{
	struct rl_instance_limit il = { .max_conns = 10 };
	__u32 v, cookie, pass = 0;
	struct rl_flow k;
	struct rl_conn c;
	struct cinst in;

	(void)arg;
	if (cinst_open(&in, 50, RL_ACT_DROP, 0))
		return -1;
	if (rule_add(&in.w, "10.9.0.0/16", 0, 2)) {
		CHECK(0, "couldn't add tenant 2");
		cinst_close(&in);
		return 0;
	}
	tenant_standalone(&in.w.tenants[2], RL_ACT_DROP, 0, SEC_NS, 100);
	inst_on(&in, &il);
	for (__u16 i = 1; i <= 30; i++) {
		if (seg(&in, false, TH_SYN, SPORT + i, 1000 * i, &v))
			goto fail;
		pass += v == XDP_PASS;
	}
	CHECK(pass == 30 && in.t->conns == 30 && in.instance->conns == 0 &&
	      entries(&in) == 30, "30 forged SYNs of tenant 1: %u passed, "
	      "tenant %lld, instance %lld, %u entries; want 30, 30, 0, 30",
	      pass, (long long)in.t->conns, (long long)in.instance->conns,
	      entries(&in));
	if (handshake_from(&in, STRANGER, SPORT + 1, 1, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 1, "tenant 2's handshake "
	      "after them: verdict %u, instance %lld; want pass, 1", v,
	      (long long)in.instance->conns);

	/* tenant 1's real client: one entry, both places */
	if (handshake_from(&in, CLIENT, SPORT + 40, 4000, &v) ||
	    syn_cookie(CLIENT, SPORT + 40, 4000, &cookie) ||
	    ack_from(&in, CLIENT, SPORT + 40, 4001, cookie + 1, 100, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.t->conns == 31 && in.instance->conns == 2 &&
	      entries(&in) == 32, "tenant 1's handshake and data: verdict %u, "
	      "tenant %lld, instance %lld, %u entries; want pass, 31, 2, 32",
	      v, (long long)in.t->conns, (long long)in.instance->conns,
	      entries(&in));
	/* numbers no socket expects, on a forged SYN's 4-tuple */
	if (ack_from(&in, CLIENT, SPORT + 3, 777, 888, 0, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 2, "an ACK of no "
	      "handshake: verdict %u, instance %lld; want pass, 2", v,
	      (long long)in.instance->conns);

	/* the cap full */
	in.instance->conn_slots = 2;
	if (seg(&in, false, TH_SYN, SPORT + 41, 4100, &v))
		goto fail;
	CHECK(v == XDP_DROP && in.t->conns == 31 && entries(&in) == 32,
	      "tenant 1's SYN at the full cap: verdict %u, tenant %lld, %u "
	      "entries; want drop, 31, 32", v, (long long)in.t->conns,
	      entries(&in));
	if (syn_cookie(CLIENT, SPORT + 2, 2000, &cookie) ||
	    ack_from(&in, CLIENT, SPORT + 2, 2001, cookie + 1, 0, &v))
		goto fail;
	CHECK(v == XDP_DROP && in.t->conns == 31 && in.instance->conns == 2,
	      "a handshake's ACK at the full cap: verdict %u, tenant %lld, "
	      "instance %lld; want drop, 31, 2", v, (long long)in.t->conns,
	      (long long)in.instance->conns);
	in.instance->conn_slots = 10;
	if (ack_from(&in, CLIENT, SPORT + 2, 2001, cookie + 1, 0, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.t->conns == 31 && in.instance->conns == 3 &&
	      entries(&in) == 32, "its next segment once there is room: "
	      "verdict %u, tenant %lld, instance %lld, %u entries; want pass, "
	      "31, 3, 32", v, (long long)in.t->conns,
	      (long long)in.instance->conns, entries(&in));

	/* the sweep read an entry before its handshake's ACK took the
	 * instance's place: forgetting it gives back both */
	k = (struct rl_flow){ .family = 4 };
	inet_pton(AF_INET, CLIENT, k.saddr);
	inet_pton(AF_INET, SERVER, k.daddr);
	k.sport = htons(SPORT + 4);
	k.dport = htons(443);
	if (bpf_map_lookup_elem(in.conns_fd, &k, &c) ||
	    syn_cookie(CLIENT, SPORT + 4, 4000, &cookie) ||
	    ack_from(&in, CLIENT, SPORT + 4, 4001, cookie + 1, 0, &v))
		goto fail;
	CHECK(v == XDP_PASS && in.instance->conns == 4 &&
	      !(c.flags & RL_CONN_F_INSTANCE), "a forged SYN's 4-tuple "
	      "completed later: verdict %u, instance %lld, flags read before "
	      "%u; want pass, 4, no instance flag", v,
	      (long long)in.instance->conns, c.flags);
	CHECK(rl_conn_forget(in.conns_fd, in.w.tenants, RL_MAX_TENANTS,
			     in.instance, &k, &c) == 1 &&
	      in.t->conns == 30 && in.instance->conns == 3,
	      "swept with the entry read before: tenant %lld, instance %lld; "
	      "want 30, 3", (long long)in.t->conns,
	      (long long)in.instance->conns);

	/* the server's RST gives both places back, once */
	if (seg(&in, true, TH_RST | TH_ACK, SPORT + 40, 0, NULL) ||
	    seg(&in, true, TH_RST | TH_ACK, SPORT + 40, 0, NULL))
		goto fail;
	CHECK(in.t->conns == 29 && in.instance->conns == 2 && entries(&in) == 30,
	      "the server's RST: tenant %lld, instance %lld, %u entries; want "
	      "29, 2, 30", (long long)in.t->conns,
	      (long long)in.instance->conns, entries(&in));
	expect_inst_full(&in, 2);
	cinst_close(&in);
	return 0;
fail:
	CHECK(0, "a segment could not be run");
	cinst_close(&in);
	return 0;
}

/*
 * A verifying tenant's handshake completed by a FIN with data (the
 * server's kernel takes the cookie from it, makes the connection and takes
 * the FIN in order): the connection is charged once, and the client's FIN
 * is its half of the close, judged on the numbers the FIN came with, not
 * those verification keys the connection by; the server's FIN then ends
 * it.  The same for a tenant that does not verify, whose place in the
 * instance's cap the same FIN takes.
 */
static int scen_fin_handshake(const void *arg)
{
	struct rl_instance_limit il = { .max_conns = 4 };
	bool verify = arg != NULL;
	__u32 v, cookie;
	struct cinst in;

	if (cinst_open(&in, 2, RL_ACT_DROP, verify ? RL_F_VERIFY : 0))
		return -1;
	if (verify)
		in.skel->bss->verify_tenants = 1;
	else
		inst_on(&in, &il);
	if (seg(&in, false, TH_SYN, SPORT + 1, 100, &v) ||
	    syn_cookie(CLIENT, SPORT + 1, 100, &cookie) ||
	    acks_from(&in, CLIENT, SPORT + 1, TH_FIN | TH_PSH, 101, cookie + 1,
		      20, &v)) {
		CHECK(0, "a segment could not be run");
		cinst_close(&in);
		return 0;
	}
	CHECK(v == XDP_PASS && in.t->conns == 1 && entries(&in) == 1 &&
	      (verify || in.instance->conns == 1), "the handshake's FIN: "
	      "verdict %u, %lld in flight, %u entries, instance %lld; want "
	      "pass, 1, 1, %d", v, (long long)in.t->conns, entries(&in),
	      (long long)in.instance->conns, verify ? 0 : 1);
	if (seg(&in, true, TH_FIN | TH_ACK, SPORT + 1, 0, NULL))
		CHECK(0, "the server's FIN could not be run");
	CHECK(in.t->conns == 0 && entries(&in) == 0 && in.instance->conns == 0,
	      "the server's FIN after it: %lld in flight, %u entries, instance "
	      "%lld; want 0, 0, 0", (long long)in.t->conns, entries(&in),
	      (long long)in.instance->conns);
	cinst_close(&in);
	return 0;
}

/* The sweep forgets an unmatched connection (no tenant) and gives it back
 * to the instance, once. */
static int scen_inst_sweep(const void *arg)
{
	struct rl_instance_limit il = { .max_conns = 2 };
	struct rl_flow k, next;
	struct rl_conn c;
	struct cinst in;
	__u32 v;
	int r;

	(void)arg;
	if (cinst_open(&in, 2, RL_ACT_DROP, 0))
		return -1;
	instance_configure(in.instance, &il);
	in.skel->bss->inst_capped = 1;
	if (handshake_from(&in, STRANGER, SPORT + 1, 1, &v) ||
	    bpf_map_get_next_key(in.conns_fd, NULL, &next) ||
	    bpf_map_lookup_elem(in.conns_fd, &next, &c)) {
		CHECK(0, "no entry for the unmatched SYN");
		cinst_close(&in);
		return 0;
	}
	k = next;
	CHECK(c.tenant == RL_CONN_NO_TENANT && (c.flags & RL_CONN_F_INSTANCE),
	      "entry: tenant %u flags %u", c.tenant, c.flags);
	r = rl_conn_forget(in.conns_fd, in.w.tenants, RL_MAX_TENANTS,
			   in.instance, &k, &c);
	CHECK(r == 1 && in.instance->conns == 0 && in.t->conns == 0,
	      "forget: %d, instance %lld, tenant %lld", r,
	      (long long)in.instance->conns, (long long)in.t->conns);
	r = rl_conn_forget(in.conns_fd, in.w.tenants, RL_MAX_TENANTS,
			   in.instance, &k, &c);
	CHECK(r == 0 && in.instance->conns == 0, "second forget: %d, instance "
	      "%lld", r, (long long)in.instance->conns);
	cinst_close(&in);
	return 0;
}

static struct scenario conn_scenarios[2 * ARRAY_SIZE(cscens) +
				      ARRAY_SIZE(stale_rows) +
				      ARRAY_SIZE(iscens) + 11];
static char stale_names[ARRAY_SIZE(stale_rows)][160];
static char verifying_names[ARRAY_SIZE(cscens)][240];

void conn_tests(void)
{
	size_t n = 0;

	for (size_t i = 0; i < ARRAY_SIZE(cscens); i++)
		conn_scenarios[n++] = (struct scenario){ cscens[i].name,
							 run_cscen, &cscens[i] };
	for (size_t i = 0; i < ARRAY_SIZE(cscens); i++) {
		snprintf(verifying_names[i], sizeof(verifying_names[i]),
			 "%s (ACKs read: another tenant verifies)", cscens[i].name);
		conn_scenarios[n++] = (struct scenario){ verifying_names[i],
							 run_cscen_verifying,
							 &cscens[i] };
	}
	for (size_t i = 0; i < ARRAY_SIZE(stale_rows); i++) {
		snprintf(stale_names[i], sizeof(stale_names[i]), "%s: %s",
			 stale_rows[i].cap != LEASED ? "caps, standalone" :
			 "caps, leased, agent dead or Redis away",
			 stale_rows[i].what);
		conn_scenarios[n++] = (struct scenario){ stale_names[i],
							 run_stale_row,
							 &stale_rows[i] };
	}
	conn_scenarios[n++] = (struct scenario){
		"caps: a SYN the bucket refuses gives its place back; a SYN "
		"the cap refuses costs no token", scen_cap_and_rate, NULL };
	conn_scenarios[n++] = (struct scenario){
		"caps: a new ISN on an open counted 4-tuple takes no second "
		"place, and refused frees the first neither (tenant cap, "
		"instance limit)", scen_new_isn, NULL };
	conn_scenarios[n++] = (struct scenario){
		"caps: an entry of the slot's earlier tenant (epoch) never "
		"lowers the count of the tenant there now", scen_epoch, NULL };
	conn_scenarios[n++] = (struct scenario){
		"caps: with no tenant capped, RST and FIN are not looked up",
		scen_gate, NULL };
	conn_scenarios[n++] = (struct scenario){
		"caps: the sweep keeps local connections with a socket, "
		"forgets those without past the grace, idle ones past the "
		"TTL, and stale epochs", scen_judge, NULL };
	conn_scenarios[n++] = (struct scenario){
		"caps: two CPUs opening and ending the same connections at once: "
		"in flight never below 0 nor above the cap (but for a reservation "
		"being undone), and equal to the entries and to opened - closed",
		scen_race, NULL };
	for (size_t i = 0; i < ARRAY_SIZE(iscens); i++)
		conn_scenarios[n++] = (struct scenario){ iscens[i].name,
							 run_iscen, &iscens[i] };
	conn_scenarios[n++] = (struct scenario){
		"instance: the sweep forgets an unmatched connection and gives "
		"it back to the instance once", scen_inst_sweep, NULL };
	conn_scenarios[n++] = (struct scenario){
		"instance: forged SYNs of sources no rule matches take no place "
		"(the tenant's handshake after 30 passes); a stranger's place is taken "
		"by the ACK that completes its handshake, once, never by an ACK "
		"of no handshake or of an open connection", scen_inst_forged,
		NULL };
	conn_scenarios[n++] = (struct scenario){
		"instance: one tenant's 30 forged SYNs take its own places and "
		"none of the instance cap of 10, so another tenant connects; its "
		"handshake's ACK takes the instance place into its SYN's entry",
		scen_inst_tenant_forged, NULL };
	conn_scenarios[n++] = (struct scenario){
		"caps: a verifying tenant's handshake completed by a FIN is "
		"counted once, and ended by the server's FIN after it",
		scen_fin_handshake, "verify" };
	conn_scenarios[n++] = (struct scenario){
		"instance: a handshake completed by a FIN takes the instance's "
		"place once, and the server's FIN after it ends it",
		scen_fin_handshake, NULL };
	run_scenarios(conn_scenarios, n);
}
