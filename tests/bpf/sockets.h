/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Real TCP sockets for the program's socket lookup: a network namespace of
 * the test's own with the test's addresses on lo, and connections between
 * them whose server side the program finds as a server on this host would.
 */
#ifndef RL_TEST_SOCKETS_H
#define RL_TEST_SOCKETS_H

#include <linux/types.h>

/* Makes a new network namespace, enters it (the calling thread, and the
 * threads it starts after), brings lo up and gives it each IPv4 address of
 * the NULL-terminated addrs (as /32).  Returns an fd of the namespace to
 * enter it again with setns(), or -1 (said). */
int lab_netns(const char *const *addrs);

/* A TCP listener on addr:port.  The fd, or -1 (said). */
int tcp_listen(const char *addr, __u16 port);

/* Connects client:sport to the listener lfd at server:port and accepts
 * it: *cfd the client's socket, *sfd the server's.  0 or -1 (said). */
int tcp_pair(const char *client, __u16 sport, const char *server,
	     __u16 port, int lfd, int *cfd, int *sfd);

/* The sequence number socket fd expects next from its peer (rcv_nxt),
 * read in repair mode (needs CAP_NET_ADMIN).  0 or -errno. */
int tcp_rcv_nxt(int fd, __u32 *out);

/* Closes fd (if >= 0) with a RST, so that no TIME_WAIT holds its
 * 4-tuple. */
void close_rst(int fd);

#endif /* RL_TEST_SOCKETS_H */
