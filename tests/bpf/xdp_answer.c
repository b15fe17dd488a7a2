// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Verification answered here (RL_F_ANSWER): a verifying tenant's SYN comes
 * back as a SYN-ACK carrying the kernel's own cookie, and the server's
 * kernel - a real listener, in a network namespace of the test's own with
 * net.ipv4.tcp_syncookies=2 - opens the connection from the client's ACK
 * with the options the cookie carries: window scale and SACK in the
 * timestamp where net.ipv4.tcp_timestamps=2, the MSS alone without
 * timestamps.  A listener that has sent no cookie of its own lately gets
 * the SYN to answer itself, which keeps it taking cookie ACKs.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "sockets.h"
#include "xdp_test.h"

#define ANSWER_SPORT	41000

/* The namespace every scenario runs in, made once. */
static int answer_ns = -1, answer_home = -1;

static int write_sysctl(const char *path, const char *value)
{
	FILE *f = fopen(path, "we");
	int err = 0;

	if (!f || fputs(value, f) < 0)
		err = -1;
	if (f && fclose(f))
		err = -1;
	if (err)
		diag("couldn't write sysctl on '%s': %s", path, strerror(errno));
	return err;
}

/* The largest number a sysctl holds, or -1. */
static long read_sysctl_max(const char *path)
{
	FILE *f = fopen(path, "re");
	long v, max = -1;

	if (!f)
		return -1;
	while (fscanf(f, "%ld", &v) == 1)
		max = v > max ? v : max;
	fclose(f);
	return max;
}

static int answer_enter(int timestamps)
{
	static const char *const addrs[] = { NULL };

	if (answer_home < 0)
		answer_home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (answer_home < 0)
		return -1;
	if (answer_ns >= 0 ? setns(answer_ns, CLONE_NEWNET) :
			     (answer_ns = lab_netns(addrs)) < 0)
		return -1;
	return write_sysctl("/proc/sys/net/ipv4/tcp_syncookies", "2") ||
	       write_sysctl("/proc/sys/net/ipv4/tcp_timestamps",
			    timestamps ? "2" : "1") ? -1 : 0;
}

static void answer_leave(void)
{
	if (answer_home >= 0 && setns(answer_home, CLONE_NEWNET))
		diag("couldn't return to netns on 'test_xdp': %s",
		     strerror(errno));
}

/* The window scale the kernel gives a cookie connection
 * (tcp_select_initial_window()): the largest receive buffer, in 32 KiB
 * steps above 15 bits. */
static int server_wscale(void)
{
	long rmem = read_sysctl_max("/proc/sys/net/ipv4/tcp_rmem");
	long core = read_sysctl_max("/proc/sys/net/core/rmem_max");
	int log = 0;

	rmem = core > rmem ? core : rmem;
	while (rmem >> (log + 1))
		log++;
	return log - 15 < 0 ? 0 : log - 15 > 14 ? 14 : log - 15;
}

struct answer_case {
	int family;
	int timestamps;	/* the client offers them and tcp_timestamps=2 */
	int vlans;	/* tags on the client's frames (pkt.vlans) */
};

/* The answer's world, in the namespace (answer_enter()): tenant 1 takes
 * the loopback sources, verifies and answers, its bucket of 10 never
 * refilled; the SYN-ACK offers what the server allows, timestamps where
 * asked.  0, or -1 with nothing left open. */
static int answer_open(struct inst *in, int timestamps)
{
	if (answer_enter(timestamps) ||
	    inst_open(in, RL_DEFAULT_RETRANS_WINDOW_NS)) {
		answer_leave();
		return -1;
	}
	if (rule_add(&in->w, "127.0.0.0/8", 0, 1) ||
	    rule_add(&in->w, "::1/128", 0, 1)) {
		inst_close(in);
		answer_leave();
		return -1;
	}
	tenant_standalone(&in->w.tenants[1], RL_ACT_DROP,
			  RL_F_VERIFY | RL_F_ANSWER, 3600ull * SEC_NS, 10);
	in->skel->bss->verify_tenants = 1;
	in->skel->bss->cookie_opts = RL_COOKIE_SACK | RL_COOKIE_WSCALE |
				     (timestamps ? RL_COOKIE_TS : 0);
	return 0;
}

/* Closes the listener lfd (if >= 0) and the world, and leaves the
 * namespace. */
static void answer_close(struct inst *in, int lfd)
{
	if (lfd >= 0)
		close(lfd);
	inst_close(in);
	answer_leave();
}

/* A listener on family's loopback address, non-blocking; its port in
 * *port.  The fd or -1. */
static int answer_listen(int family, __u16 *port)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6,
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in a4 = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr *sa = family == 4 ? (void *)&a4 : (void *)&a6;
	socklen_t len = family == 4 ? sizeof(a4) : sizeof(a6);
	int fd = socket(family == 4 ? AF_INET : AF_INET6,
			SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, sa, len) || listen(fd, 16) ||
	    getsockname(fd, sa, &len)) {
		diag("couldn't listen on loopback: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(family == 4 ? a4.sin_port : a6.sin6_port);
	return fd;
}

/* A real connection to the listener, accepted and reset: the kernel
 * answers its SYN with a cookie (tcp_syncookies=2), which has the listener
 * take cookie ACKs for two minutes.  0 or -1. */
static int warm_listener(int family, int lfd, __u16 port)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6,
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT,
				   .sin6_port = htons(port) };
	struct sockaddr_in a4 = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				  .sin_port = htons(port) };
	int cfd = socket(family == 4 ? AF_INET : AF_INET6,
			 SOCK_STREAM | SOCK_CLOEXEC, 0), sfd = -1;
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	if (cfd >= 0 && !connect(cfd, family == 4 ? (void *)&a4 : (void *)&a6,
				 family == 4 ? sizeof(a4) : sizeof(a6)) &&
	    poll(&p, 1, 2000) == 1)
		sfd = accept(lfd, NULL, NULL);
	close_rst(cfd);
	close_rst(sfd);
	return sfd >= 0 ? 0 : -1;
}

/* The options of the SYN-ACK at tcp (hlen bytes of header). */
struct synack_opts {
	int mss, wscale, sack, ts;
	__u32 tsval;
};

static void read_opts(const __u8 *tcp, int hlen, struct synack_opts *o)
{
	int i = 20;

	memset(o, 0, sizeof(*o));
	o->wscale = -1;
	while (i < hlen) {
		if (tcp[i] == 0)
			break;
		if (tcp[i] == 1 || i + 1 >= hlen || tcp[i + 1] < 2) {
			i++;
			continue;
		}
		if (tcp[i] == 2)
			o->mss = tcp[i + 2] << 8 | tcp[i + 3];
		else if (tcp[i] == 3)
			o->wscale = tcp[i + 2];
		else if (tcp[i] == 4)
			o->sack = 1;
		else if (tcp[i] == 8) {
			o->ts = 1;
			memcpy(&o->tsval, tcp + i + 2, 4);
			o->tsval = ntohl(o->tsval);
		}
		i += tcp[i + 1];
	}
}

/* Sends the IP packet of frame (at l3, past its Ethernet header and tags)
 * into the namespace's stack, as if it came from the wire.  0 or -1. */
static int inject(int family, const __u8 *frame, int len, int l3)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6,
				   .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in a4 = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(family == 4 ? AF_INET : AF_INET6,
			SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW), err = 0;

	if (fd < 0 || sendto(fd, frame + l3, len - l3, 0,
			     family == 4 ? (void *)&a4 : (void *)&a6,
			     family == 4 ? sizeof(a4) : sizeof(a6)) != len - l3)
		err = -1;
	if (err)
		diag("couldn't inject the ACK: %s", strerror(errno));
	if (fd >= 0)
		close(fd);
	return err;
}

static __u64 answer_counter(struct inst *in, int idx)
{
	__u64 c[RL_CNT_MAX];

	counters_sum(&in->w, c);
	return c[idx];
}

/* The SYN of client port sport with ISN isn to the listener's port, and
 * the frame that came out. */
static int answer_syn(struct inst *in, const struct answer_case *k,
		      __u16 sport, __u16 port, __u32 isn, __u8 *out,
		      struct run_result *r)
{
	/* MSS 1460, SACK permitted, timestamp 12345, window scale 7 */
	static const __u8 with_ts[20] = {
		2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0x30, 0x39, 0, 0, 0, 0,
		1, 3, 3, 7 };
	/* MSS 1460, SACK permitted, window scale 7: no timestamps */
	static const __u8 no_ts[12] = {
		2, 4, 0x05, 0xb4, 1, 1, 4, 2, 1, 3, 3, 7 };
	const char *lo = k->family == 4 ? "127.0.0.1" : "::1";
	struct pkt p = { .family = k->family, .vlans = k->vlans,
			 .flags = TH_SYN, .src = lo,
			 .dst = lo, .sport = sport, .dport = port, .seq = isn,
			 .tcp_opts = k->timestamps ? 20 : 12,
			 .opt_bytes = k->timestamps ? with_ts : no_ts };
	__u8 buf[PKT_MAX];
	int len = pkt_build(&p, buf, NULL);

	return xdp_run(in->prog_fd, buf, len, out, PKT_MAX, 1, r);
}

/* The client's ACK of the SYN-ACK s (cookie c), judged by the program and
 * then sent into the server's stack: the program's verdict. */
static __u32 answer_ack(struct inst *in, const struct answer_case *k,
			__u16 sport, __u16 port, __u32 isn, __u32 c,
			const struct synack_opts *s)
{
	__u8 ts[12] = { 1, 1, 8, 10, 0, 0, 0x30, 0x40 };
	const char *lo = k->family == 4 ? "127.0.0.1" : "::1";
	__u32 ecr = htonl(s->tsval);
	struct pkt p = { .family = k->family, .vlans = k->vlans,
			 .flags = TH_ACK, .src = lo,
			 .dst = lo, .sport = sport, .dport = port,
			 .seq = isn + 1, .ack = c + 1,
			 .tcp_opts = s->ts ? 12 : 0, .opt_bytes = ts };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len;

	memcpy(ts + 8, &ecr, 4);
	len = pkt_build(&p, buf, NULL);
	if (xdp_run(in->prog_fd, buf, len, out, PKT_MAX, 1, &r))
		return ~0u;
	if (r.retval == XDP_PASS &&
	    inject(k->family, buf, len, pkt_l3_off(&p)))
		return ~0u;
	return r.retval;
}

/* The connection the server's kernel opened from the ACK, accepted: fd
 * or -1 when none came within two seconds. */
static int accept_one(int lfd)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	if (poll(&p, 1, 2000) != 1)
		return -1;
	return accept(lfd, NULL, NULL);
}

static int scen_answer(const void *arg)
{
	const struct answer_case *k = arg;
	int lfd = -1, sfd = -1, l3 = 14 + 4 * k->vlans, hlen, ws = 0;
	struct synack_opts so;
	struct tcp_info ti;
	socklen_t til = sizeof(ti);
	__u8 out[PKT_MAX];
	struct run_result r;
	struct inst in;
	const char *bad;
	__u32 c, ack, isn = 1000;
	__u16 port = 0;
	int rc = -1;
	__u8 *tcp;

	if (answer_open(&in, k->timestamps))
		return -1;
	ws = server_wscale();
	in.skel->bss->cookie_opts |= RL_COOKIE_RCV_WSCALE_SET(ws);
	lfd = answer_listen(k->family, &port);
	if (lfd < 0)
		goto close;

	/* a listener that sent no cookie lately answers itself */
	CHECK(!answer_syn(&in, k, ANSWER_SPORT, port, isn, out, &r) &&
	      r.retval == XDP_PASS, "the SYN to a listener without a recent "
	      "cookie: verdict %u, want XDP_PASS", r.retval);
	CHECK(answer_counter(&in, RL_CNT_COOKIE_SENT) == 0, "a SYN answered "
	      "for a listener that takes no cookie ACK");
	if (warm_listener(k->family, lfd, port)) {
		diag("couldn't connect to the listener on loopback");
		goto close;
	}
	rc = 0;

	CHECK(!answer_syn(&in, k, ANSWER_SPORT + 1, port, isn, out, &r) &&
	      r.retval == XDP_TX, "the SYN: verdict %u, want XDP_TX",
	      r.retval);
	if (r.retval != XDP_TX)
		goto close;
	bad = pkt_check_csums(out, r.out_len, l3);
	CHECK(!bad, "the SYN-ACK's %s checksum is wrong", bad);
	/* the tag as it came: 802.1Q, VLAN 100 (pkt.c) */
	CHECK(!k->vlans || (out[12] == 0x81 && out[13] == 0x00 &&
			    out[14] == 0x00 && out[15] == 0x64),
	      "the SYN-ACK lost its VLAN tag: %02x%02x %02x%02x", out[12],
	      out[13], out[14], out[15]);
	tcp = out + l3 + (k->family == 4 ? 20 : 40);
	hlen = (tcp[12] >> 4) * 4;
	memcpy(&c, tcp + 4, 4);
	memcpy(&ack, tcp + 8, 4);
	c = ntohl(c);
	CHECK(tcp[13] == (TH_SYN | TH_ACK) && ntohl(ack) == isn + 1,
	      "the reply: flags %#x ack %u, want SYN|ACK and %u", tcp[13],
	      ntohl(ack), isn + 1);
	read_opts(tcp, hlen, &so);
	CHECK(so.mss > 0 && so.ts == k->timestamps && so.sack == so.ts &&
	      so.wscale == (so.ts ? ws : -1), "the SYN-ACK offers mss %d ts %d "
	      "sack %d wscale %d, want an MSS%s", so.mss, so.ts, so.sack,
	      so.wscale, k->timestamps ? ", timestamps, SACK and the server's "
	      "scale" : " alone");
	CHECK(answer_counter(&in, RL_CNT_COOKIE_SENT) == 1, "%llu SYNs "
	      "counted answered, want 1",
	      (unsigned long long)answer_counter(&in, RL_CNT_COOKIE_SENT));
	EXPECT_STATS(&in.w, 1, "admitted=0 denied=0");

	CHECK(answer_ack(&in, k, ANSWER_SPORT + 1, port, isn, c, &so) ==
	      XDP_PASS, "the cookie ACK refused");
	EXPECT_STATS(&in.w, 1, "admitted=1 denied=0");
	sfd = accept_one(lfd);
	CHECK(sfd >= 0, "the server's kernel opened no connection from the "
	      "cookie ACK");
	if (sfd < 0)
		goto close;
	CHECK(!getsockopt(sfd, IPPROTO_TCP, TCP_INFO, &ti, &til),
	      "couldn't read TCP_INFO: %s", strerror(errno));
	if (k->timestamps)
		CHECK((ti.tcpi_options & (TCPI_OPT_TIMESTAMPS | TCPI_OPT_SACK |
					  TCPI_OPT_WSCALE)) ==
		      (TCPI_OPT_TIMESTAMPS | TCPI_OPT_SACK | TCPI_OPT_WSCALE) &&
		      ti.tcpi_snd_wscale == 7 && ti.tcpi_rcv_wscale == ws,
		      "the connection: options %#x, scales %u/%u, want "
		      "timestamps, SACK, 7 and %d", ti.tcpi_options,
		      ti.tcpi_snd_wscale, ti.tcpi_rcv_wscale, ws);
	else
		CHECK(!(ti.tcpi_options & (TCPI_OPT_TIMESTAMPS | TCPI_OPT_SACK |
					   TCPI_OPT_WSCALE)),
		      "the connection without timestamps: options %#x, want "
		      "none of timestamps, SACK, window scale",
		      ti.tcpi_options);
close:
	close_rst(sfd);
	answer_close(&in, lfd);
	return rc;
}

/* The verdict on a SYN from ::1 port sport to port with extension headers
 * ext (NULL: none). */
static __u32 syn_verdict(struct inst *in, __u16 sport, __u16 port,
			 const char *ext)
{
	struct pkt p = { .family = 6, .flags = TH_SYN, .src = "::1",
			 .dst = "::1", .sport = sport, .dport = port,
			 .seq = 1000, .ext = ext };
	__u8 buf[PKT_MAX], out[PKT_MAX];
	struct run_result r;
	int len = pkt_build(&p, buf, NULL);

	if (xdp_run(in->prog_fd, buf, len, out, PKT_MAX, 1, &r))
		return ~0u;
	return r.retval;
}

/* What is left to the server's kernel, its listener taking cookie ACKs:
 * a SYN behind extension headers, one to a port without a listener, a
 * shadow tenant's, and one of a tenant that verifies without answering.
 * Each passes uncharged, as with verify syncookie. */
static int scen_answer_left(const void *arg)
{
	const struct answer_case k = { 6, 1, 0 };
	struct rl_tenant *t;
	struct inst in;
	__u16 port = 0;
	int lfd = -1, rc = -1;

	(void)arg;
	if (answer_open(&in, 1))
		return -1;
	t = &in.w.tenants[1];
	lfd = answer_listen(k.family, &port);
	if (lfd < 0 || warm_listener(k.family, lfd, port))
		goto close;
	rc = 0;
	CHECK(syn_verdict(&in, ANSWER_SPORT, port, "D") == XDP_PASS,
	      "a SYN behind a destination options header not passed");
	CHECK(syn_verdict(&in, ANSWER_SPORT, port == 9 ? 10 : 9, NULL) ==
	      XDP_PASS, "a SYN to a port without a listener not passed");
	t->flags |= RL_F_SHADOW;
	CHECK(syn_verdict(&in, ANSWER_SPORT, port, NULL) == XDP_PASS,
	      "a shadow tenant's SYN not passed");
	t->flags &= ~(RL_F_SHADOW | RL_F_ANSWER);
	CHECK(syn_verdict(&in, ANSWER_SPORT, port, NULL) == XDP_PASS,
	      "the SYN of a tenant with verify syncookie not passed");
	CHECK(answer_counter(&in, RL_CNT_COOKIE_SENT) == 0 &&
	      answer_counter(&in, RL_CNT_VERIFY_SYN) == 4, "%llu of %llu "
	      "SYNs answered, want none of 4",
	      (unsigned long long)answer_counter(&in, RL_CNT_COOKIE_SENT),
	      (unsigned long long)answer_counter(&in, RL_CNT_VERIFY_SYN));
	EXPECT_STATS(&in.w, 1, "admitted=0 denied=0");
	/* the control: the same SYN, answering again */
	t->flags |= RL_F_ANSWER;
	CHECK(syn_verdict(&in, ANSWER_SPORT, port, NULL) == XDP_TX,
	      "the control SYN not answered");
close:
	answer_close(&in, lfd);
	return rc;
}

static const struct answer_case a4 = { 4, 0, 0 }, a4ts = { 4, 1, 0 },
				  a6 = { 6, 0, 0 }, a6ts = { 6, 1, 0 },
				  a6vlan = { 6, 1, 1 };

static const struct scenario answer_scenarios[] = {
	{ "answer: the server's kernel opens the connection from the ACK of a SYN-ACK sent here, MSS alone (IPv4)", scen_answer, &a4 },
	{ "answer: the server's kernel opens the connection from the ACK of a SYN-ACK sent here, timestamps, SACK, window scale (IPv4)", scen_answer, &a4ts },
	{ "answer: the server's kernel opens the connection from the ACK of a SYN-ACK sent here, MSS alone (IPv6)", scen_answer, &a6 },
	{ "answer: the server's kernel opens the connection from the ACK of a SYN-ACK sent here, timestamps, SACK, window scale (IPv6)", scen_answer, &a6ts },
	{ "answer: a SYN behind a VLAN tag is answered with the tag kept, and its ACK opens the connection (IPv6)", scen_answer, &a6vlan },
	{ "answer: SYNs behind extension headers, to a port without a listener, of a shadow tenant or of one that verifies without answering pass to the kernel uncharged", scen_answer_left, NULL },
};

void answer_tests(void)
{
	run_scenarios(answer_scenarios, ARRAY_SIZE(answer_scenarios));
}
