// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* synflood: sends TCP SYNs from spoofed IPv4 sources inside one prefix to one
 * address and port, as fast as the machine allows (or at a given rate),
 * through an AF_PACKET socket that bypasses the qdisc, in batches of
 * sendmmsg(), or with --xdp as XDP frames that an XDP program built in the
 * kernel redirects out of the interface (BPF_PROG_RUN's live frames, see
 * synflood.bpf.c).  For rlgate's SYN-flood benchmark, in its own lab only. */
#include <errno.h>
#include <limits.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_packet.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "csum.h"
#include "opts.h"
#include "synflood.skel.h"

#define MAX_BATCH	1024
#define FRAME_LEN	(14 + 20 + 24)	/* Ethernet, IPv4, TCP with MSS */
#define XDP_BATCH_MAX	256		/* the kernel's cap on a live-frame batch */
/* Each BPF_PROG_RUN in live-frame mode sets up and tears down a page pool,
 * which waits for an RCU grace period: tens of milliseconds on a busy
 * machine.  So each call is sized to last about this long. */
#define XDP_RUN_S	0.1

struct cfg {
	const char *iface;
	const char *dst;
	const char *dst_mac;
	const char *src;
	uint64_t count;
	double duration_s;
	double rate;
	unsigned int batch;
	int cpu;
	bool json;
	bool xdp;
};

#define CFG(field)	OPT_AT(struct cfg, field)

static const struct opts_spec spec = {
	.prog = "synflood",
	.synopsis = "synflood --iface IF --dst A.B.C.D:PORT --dst-mac MAC "
		    "--src A.B.C.D/LEN [OPTIONS]",
	.doc =
"Sends TCP SYNs (with an MSS option) from every address of the prefix --src\n"
"in turn, each with its own source port and sequence number, to --dst,\n"
"framed for --dst-mac, out of interface IF through an AF_PACKET socket that\n"
"bypasses the qdisc, --batch frames per sendmmsg().  With --xdp, the frames\n"
"are XDP frames instead: an XDP program run by BPF_PROG_RUN in live-frame\n"
"mode rewrites one template SYN's source, port and sequence number (both\n"
"checksums updated) and redirects it out of IF, --batch frames (at most 256)\n"
"per flush, so a veth's peer receives it as a NIC's driver would, in its XDP\n"
"path before any socket buffer exists.  Stops after --count frames,\n"
"--duration seconds or SIGINT/SIGTERM, whichever comes first, and reports\n"
"the frames the interface took (with --xdp, the frames redirected to it: the\n"
"receiver's counters say which it took), the time, the packets per second\n"
"and its own CPU time (with the kernel's work done in its context).  Never\n"
"answers anything: the SYN-ACKs go nowhere.\n",
	.epilog = "Exit status: 0 done, 1 failure, 2 bad arguments.\n",
	.opts = (const struct opt[]){
		{ "iface", 'i', OPT_STRING, CFG(iface), .arg = "IF",
		  .min = 1, .max = IFNAMSIZ - 1,
		  .help = "the interface to send on" },
		{ "dst", 'd', OPT_STRING, CFG(dst), .arg = "A.B.C.D:PORT",
		  .help = "the destination address and port" },
		{ "dst-mac", 'm', OPT_STRING, CFG(dst_mac), .arg = "MAC",
		  .help = "the destination's Ethernet address "
			  "(xx:xx:xx:xx:xx:xx)" },
		{ "src", 's', OPT_STRING, CFG(src), .arg = "A.B.C.D/LEN",
		  .help = "the prefix the sources are taken from, each address "
			  "in turn (LEN 8 to 32)" },
		{ "count", 'c', OPT_U64, CFG(count), .arg = "N", .min = 0,
		  .max = UINT64_MAX / 2, .def = "0", .expect = "frames",
		  .help = "frames to send, 0 for no limit" },
		{ "duration", 't', OPT_NUMBER, OPT_ABOVE, CFG(duration_s),
		  .arg = "S", .lo = 0, .hi = 86400, .def = "10",
		  .expect = "seconds", .help = "the longest it sends for" },
		{ "rate", 'r', OPT_NUMBER, CFG(rate), .arg = "PPS", .lo = 0,
		  .hi = 1e9, .def = "0", .expect = "frames per second",
		  .help = "frames per second, 0 for as fast as it can" },
		{ "batch", 'b', OPT_U64, CFG(batch), .arg = "N", .min = 1,
		  .max = MAX_BATCH, .def = "64", .expect = "frames",
		  .help = "frames per sendmmsg() call" },
		{ "cpu", 0, OPT_U64, CFG(cpu), .arg = "N", .min = 0,
		  .max = CPU_SETSIZE - 1, .def_doc = "any",
		  .expect = "a CPU number", .help = "pin the sender to CPU N" },
		{ "xdp", 'x', OPT_FLAG, CFG(xdp),
		  .help = "send XDP frames (BPF_PROG_RUN live frames) rather "
			  "than through a packet socket" },
		{ "json", 'j', OPT_FLAG, CFG(json),
		  .help = "print only JSON on stdout" },
		{ "help", 'h', OPT_HELP, .help = "this help" },
		{ .kind = OPT_END },
	},
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void __attribute__((format(printf, 1, 2))) fail_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("Error: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'synflood --help'.\n", stderr);
	exit(2);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

struct flood {
	uint8_t src_mac[6], dst_mac[6];
	uint32_t src_base, src_hosts;	/* host order */
	uint32_t dst;			/* host order */
	uint16_t dport;
	uint64_t n;			/* frames built so far */
	uint32_t rnd;
};

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = v >> 8;
	p[1] = v & 0xff;
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, v >> 16);
	put16(p + 2, v & 0xffff);
}

/* Frame number f->n: the next source of the prefix, a source port and a
 * sequence number of its own; both checksums computed whole. */
static void build(struct flood *f, uint8_t *fr)
{
	uint8_t *ip = fr + 14, *tcp = ip + 20, pseudo[12];
	uint32_t src = f->src_base + (uint32_t)(f->n % f->src_hosts);
	uint16_t sport = 1024 + (uint16_t)((f->n / f->src_hosts) % 64000);

	f->rnd ^= f->rnd << 13;
	f->rnd ^= f->rnd >> 17;
	f->rnd ^= f->rnd << 5;
	memcpy(fr, f->dst_mac, 6);
	memcpy(fr + 6, f->src_mac, 6);
	put16(fr + 12, ETHERTYPE_IP);

	memset(ip, 0, 20);
	ip[0] = 0x45;
	put16(ip + 2, 20 + 24);
	put16(ip + 4, (uint16_t)f->n);
	ip[6] = 0x40;			/* DF */
	ip[8] = 64;
	ip[9] = IPPROTO_TCP;
	put32(ip + 12, src);
	put32(ip + 16, f->dst);
	put16(ip + 10, csum_fold16(csum_add(0, ip, 20)));

	memset(tcp, 0, 24);
	put16(tcp, sport);
	put16(tcp + 2, f->dport);
	put32(tcp + 4, f->rnd);
	tcp[12] = 6 << 4;		/* 24 bytes */
	tcp[13] = 0x02;			/* SYN */
	put16(tcp + 14, 64240);
	tcp[20] = 2;			/* MSS 1460 */
	tcp[21] = 4;
	put16(tcp + 22, 1460);
	memcpy(pseudo, ip + 12, 8);
	pseudo[8] = 0;
	pseudo[9] = IPPROTO_TCP;
	put16(pseudo + 10, 24);
	put16(tcp + 16, csum_fold16(csum_add(csum_add(0, pseudo, 12), tcp, 24)));
	f->n++;
}

static int parse_mac(const char *s, uint8_t *mac)
{
	unsigned int b[6];
	char tail;
	int i;

	if (sscanf(s, "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3],
		   &b[4], &b[5], &tail) != 6)
		return -EINVAL;
	for (i = 0; i < 6; i++)
		mac[i] = (uint8_t)b[i];
	return 0;
}

static void parse_args(const struct cfg *c, struct flood *f)
{
	char buf[64], *colon, *slash, *end;
	struct in_addr a;
	unsigned long v;

	if (!c->iface || !c->dst || !c->dst_mac || !c->src)
		fail_usage("missing %s", !c->iface ? "--iface IF" :
			   !c->dst ? "--dst A.B.C.D:PORT" :
			   !c->dst_mac ? "--dst-mac MAC" : "--src A.B.C.D/LEN");
	snprintf(buf, sizeof(buf), "%s", c->dst);
	colon = strchr(buf, ':');
	if (colon)
		*colon = 0;
	errno = 0;
	v = colon ? strtoul(colon + 1, &end, 10) : 0;
	if (!colon || inet_pton(AF_INET, buf, &a) != 1 || errno || *end ||
	    v < 1 || v > 65535)
		fail_usage("invalid --dst '%s': expected A.B.C.D:PORT", c->dst);
	f->dst = ntohl(a.s_addr);
	f->dport = (uint16_t)v;
	if (parse_mac(c->dst_mac, f->dst_mac))
		fail_usage("invalid --dst-mac '%s': expected xx:xx:xx:xx:xx:xx",
			   c->dst_mac);
	snprintf(buf, sizeof(buf), "%s", c->src);
	slash = strchr(buf, '/');
	if (slash)
		*slash = 0;
	errno = 0;
	v = slash ? strtoul(slash + 1, &end, 10) : 0;
	if (!slash || inet_pton(AF_INET, buf, &a) != 1 || errno || *end ||
	    v < 8 || v > 32)
		fail_usage("invalid --src '%s': expected A.B.C.D/LEN, LEN 8 to 32",
			   c->src);
	f->src_hosts = v == 32 ? 1 : 1u << (32 - v);
	f->src_base = ntohl(a.s_addr) & (v == 32 ? ~0u : ~(f->src_hosts - 1));
	/* a locally administered address no host of the lab has */
	memcpy(f->src_mac, (uint8_t[]){ 0x02, 0x53, 0x59, 0x4e, 0x00, 0x01 }, 6);
	f->rnd = 0x2545f491;
}

static int open_socket(const char *iface)
{
	struct sockaddr_ll sll = { .sll_family = AF_PACKET,
				   .sll_protocol = htons(ETH_P_IP) };
	int fd, one = 1, err;

	sll.sll_ifindex = (int)if_nametoindex(iface);
	if (!sll.sll_ifindex) {
		err = errno;
		fprintf(stderr, "Error: couldn't find interface on '%s': %s\n",
			iface, strerror(err));
		return -err;
	}
	/* protocol 0: this socket receives nothing */
	fd = socket(AF_PACKET, SOCK_RAW, 0);
	if (fd < 0) {
		err = errno;
		fprintf(stderr, "Error: couldn't open packet socket on '%s': %s\n",
			iface, strerror(err));
		return -err;
	}
	/* Straight to the driver: no qdisc lock or queue per frame. */
	if (setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&sll, sizeof(sll))) {
		err = errno;
		fprintf(stderr, "Error: couldn't bind packet socket on '%s': %s\n",
			iface, strerror(err));
		close(fd);
		return -err;
	}
	return fd;
}

/* The XDP sender, loaded for the prefix of f and interface iface; its
 * program's descriptor or -errno, *skel to destroy at the end. */
static int xdp_open(const char *iface, const struct flood *f,
		    struct synflood_bpf **skel)
{
	unsigned int ifindex = if_nametoindex(iface);
	int err;

	if (!ifindex) {
		err = errno;
		fprintf(stderr, "Error: couldn't find interface on '%s': %s\n",
			iface, strerror(err));
		return -err;
	}
	*skel = synflood_bpf__open();
	if (!*skel) {
		err = errno;
		fprintf(stderr, "Error: couldn't open the XDP sender on '%s': %s\n",
			iface, strerror(err));
		return -err;
	}
	(*skel)->rodata->src_base = f->src_base;
	(*skel)->rodata->src_hosts = f->src_hosts;
	(*skel)->rodata->out_ifindex = ifindex;
	err = synflood_bpf__load(*skel);
	if (err) {
		fprintf(stderr, "Error: couldn't load the XDP sender on '%s': %s\n",
			iface, strerror(-err));
		return err;
	}
	return bpf_program__fd((*skel)->progs.xdp_flood);
}

/* n frames from the template through the XDP sender, batch of them per
 * flush to the interface: 0 or -errno.  The kernel says nothing of frames
 * the interface refused: its peer's counters do. */
static int xdp_send(int prog_fd, const uint8_t *tmpl, unsigned int n,
		    unsigned int batch)
{
	LIBBPF_OPTS(bpf_test_run_opts, opts,
		.data_in = tmpl,
		.data_size_in = FRAME_LEN,
		.repeat = n,
		.flags = BPF_F_TEST_XDP_LIVE_FRAMES,
		.batch_size = batch);

	return bpf_prog_test_run_opts(prog_fd, &opts) ? -errno : 0;
}

static double tv_s(struct timeval tv)
{
	return tv.tv_sec + tv.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	static uint8_t frames[MAX_BATCH][FRAME_LEN];
	static struct mmsghdr msgs[MAX_BATCH];
	static struct iovec iov[MAX_BATCH];
	struct synflood_bpf *skel = NULL;
	uint8_t tmpl[FRAME_LEN];
	struct cfg c = { .cpu = -1 };
	struct opts_result args;
	struct flood f = { 0 };
	uint64_t sent = 0, full = 0, want;
	double xdp_pps = 100000;	/* frames a second a call sends */
	double t0, t1, deadline;
	struct timespec cpu;
	struct rusage ru;
	unsigned int i, n;
	int fd = -1, prog_fd = -1, r, ret;

	ret = opts_parse(&spec, argc, argv, &c, &args);
	if (ret == OPTS_HELP) {
		opts_usage(&spec, stdout);
		return 0;
	}
	if (ret < 0)
		fail_usage("%s", args.err);
	if (args.n_rest)
		fail_usage("unexpected argument '%s'", args.rest[0]);
	parse_args(&c, &f);
	if (c.xdp && c.batch > XDP_BATCH_MAX)
		fail_usage("invalid --batch '%u' with --xdp: expected 1 to %d",
			   c.batch, XDP_BATCH_MAX);
	if (opts_given(&args, "cpu")) {
		cpu_set_t set;

		CPU_ZERO(&set);
		CPU_SET(c.cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set)) {
			fprintf(stderr, "Error: couldn't pin to CPU on '%d': %s\n",
				c.cpu, strerror(errno));
			return 1;
		}
	}
	if (c.xdp) {
		/* frame 0 is the template; the program numbers its own */
		build(&f, tmpl);
		prog_fd = xdp_open(c.iface, &f, &skel);
		if (prog_fd < 0) {
			synflood_bpf__destroy(skel);
			return 1;
		}
	} else {
		fd = open_socket(c.iface);
		if (fd < 0)
			return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);

	for (i = 0; i < c.batch; i++) {
		iov[i].iov_base = frames[i];
		iov[i].iov_len = FRAME_LEN;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	t0 = now_s();
	deadline = t0 + c.duration_s;
	while (!stop && (!c.count || sent < c.count)) {
		t1 = now_s();
		if (t1 >= deadline)
			break;
		n = c.batch;
		if (c.xdp) {
			double s = deadline - t1 < XDP_RUN_S ?
				   deadline - t1 : XDP_RUN_S;

			n = (unsigned int)(xdp_pps * s) / c.batch * c.batch;
			if (n < c.batch)
				n = c.batch;
		}
		if (c.count && c.count - sent < n)
			n = (unsigned int)(c.count - sent);
		if (c.rate > 0) {
			/* paced: never ahead of rate x elapsed */
			want = (uint64_t)((t1 - t0) * c.rate) + 1;
			if (want <= sent) {
				struct timespec ts = { 0, 50000 };

				nanosleep(&ts, NULL);
				continue;
			}
			if (want - sent < n)
				n = (unsigned int)(want - sent);
		}
		if (c.xdp) {
			r = xdp_send(prog_fd, tmpl, n, c.batch);
			if (now_s() > t1)
				xdp_pps = n / (now_s() - t1);
			if (r == -EINTR)
				break;
			if (r < 0) {
				fprintf(stderr, "Error: couldn't run the XDP "
					"sender on '%s': %s\n", c.iface,
					strerror(-r));
				synflood_bpf__destroy(skel);
				return 1;
			}
			sent += n;
			continue;
		}
		for (i = 0; i < n; i++)
			build(&f, frames[i]);
		r = sendmmsg(fd, msgs, n, 0);
		if (r < 0) {
			if (errno == ENOBUFS || errno == EAGAIN || errno == EINTR) {
				/* the device is full: these frames were not
				 * sent; the next batch takes their numbers */
				f.n -= n;
				full++;
				continue;
			}
			fprintf(stderr, "Error: couldn't send on '%s': %s\n",
				c.iface, strerror(errno));
			close(fd);
			return 1;
		}
		f.n -= n - (unsigned int)r;
		sent += (uint64_t)r;
	}
	t1 = now_s();
	if (fd >= 0)
		close(fd);
	synflood_bpf__destroy(skel);
	getrusage(RUSAGE_SELF, &ru);
	/* The time on CPU, which also holds the softirq work the kernel did
	 * in this process's context (a veth delivers to its peer there). */
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	if (c.json)
		printf("{\"mode\":\"%s\",\"sent\":%llu,\"elapsed_s\":%.3f,\"pps\":%.0f,"
		       "\"device_full\":%llu,\"utime_s\":%.3f,\"stime_s\":%.3f,"
		       "\"cpu_s\":%.3f}\n",
		       c.xdp ? "xdp" : "packet", (unsigned long long)sent,
		       t1 - t0, t1 > t0 ? sent / (t1 - t0) : 0,
		       (unsigned long long)full, tv_s(ru.ru_utime),
		       tv_s(ru.ru_stime), cpu.tv_sec + cpu.tv_nsec / 1e9);
	else
		printf("sent %llu SYNs in %.3f s: %.0f packets/s (device full "
		       "%llu times; CPU %.3f s: user %.3f s, system %.3f s)\n",
		       (unsigned long long)sent, t1 - t0,
		       t1 > t0 ? sent / (t1 - t0) : 0,
		       (unsigned long long)full, cpu.tv_sec + cpu.tv_nsec / 1e9,
		       tv_s(ru.ru_utime), tv_s(ru.ru_stime));
	return 0;
}
