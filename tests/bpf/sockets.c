// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Real TCP sockets for the program's socket lookup (see sockets.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "sockets.h"

int lab_netns(const char *const *addrs)
{
	char cmd[256];
	int fd;

	if (unshare(CLONE_NEWNET)) {
		fprintf(stderr, "couldn't unshare netns on 'test_xdp': %s\n",
			strerror(errno));
		return -1;
	}
	if (system("ip link set lo up")) {
		fprintf(stderr, "couldn't set up link on 'lo'\n");
		return -1;
	}
	for (; *addrs; addrs++) {
		snprintf(cmd, sizeof(cmd), "ip addr add %s/32 dev lo", *addrs);
		if (system(cmd)) {
			fprintf(stderr, "couldn't add address on 'lo': %s\n",
				*addrs);
			return -1;
		}
	}
	fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fprintf(stderr, "couldn't open netns on '/proc/self/ns/net': "
			"%s\n", strerror(errno));
	return fd;
}

/* addr:port as a sockaddr_in.  0 or -1. */
static int sin_of(const char *addr, __u16 port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(port);
	return inet_pton(AF_INET, addr, &sa->sin_addr) == 1 ? 0 : -1;
}

int tcp_listen(const char *addr, __u16 port)
{
	struct sockaddr_in sa;
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || sin_of(addr, port, &sa) ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 256)) {
		fprintf(stderr, "couldn't listen on '%s:%u': %s\n", addr, port,
			strerror(errno));
		close_rst(fd);
		return -1;
	}
	return fd;
}

int tcp_pair(const char *client, __u16 sport, const char *server,
	     __u16 port, int lfd, int *cfd, int *sfd)
{
	struct sockaddr_in ca, sa;
	int one = 1;

	*sfd = -1;
	*cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*cfd < 0 || sin_of(client, sport, &ca) ||
	    sin_of(server, port, &sa) ||
	    setsockopt(*cfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(*cfd, (struct sockaddr *)&ca, sizeof(ca)) ||
	    connect(*cfd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    (*sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) < 0) {
		fprintf(stderr, "couldn't connect on '%s:%u': %s\n", client,
			sport, strerror(errno));
		close_rst(*cfd);
		*cfd = -1;
		return -1;
	}
	return 0;
}

int tcp_rcv_nxt(int fd, __u32 *out)
{
	int on = 1, off = TCP_REPAIR_OFF_NO_WP, q = TCP_RECV_QUEUE, err = 0;
	socklen_t len = sizeof(*out);

	if (setsockopt(fd, SOL_TCP, TCP_REPAIR, &on, sizeof(on)))
		return -errno;
	if (setsockopt(fd, SOL_TCP, TCP_REPAIR_QUEUE, &q, sizeof(q)) ||
	    getsockopt(fd, SOL_TCP, TCP_QUEUE_SEQ, out, &len))
		err = -errno;
	setsockopt(fd, SOL_TCP, TCP_REPAIR, &off, sizeof(off));
	return err;
}

void close_rst(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };

	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}
