/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A line of /proc/PID/net/tcp or tcp6: the socket table of a process's
 * network namespace as the agent reads it for processes it cannot reach
 * through sock_diag (another namespace) and to match sockets to fds; and
 * a line of /proc/PID/maps, to find the processes that map a file. */
#ifndef RL_PROCNET_H
#define RL_PROCNET_H

#include <stdbool.h>
#include <stdint.h>

struct rl_procnet_sock {
	int family;		/* AF_INET (a v4-mapped tcp6 address too) or
				 * AF_INET6 */
	uint8_t local[16], remote[16];	/* 4 bytes for IPv4 */
	uint16_t lport, rport;
	uint8_t state;		/* TCP_ESTABLISHED..., 10: listening */
	uint64_t inode;		/* 0: no fd holds it any more */
};

/* Parses one line of tcp (v6 false) or tcp6 (v6 true); false for the
 * header and anything malformed. */
bool rl_procnet_parse(const char *line, bool v6, struct rl_procnet_sock *out);

/* Whether a line of /proc/PID/maps maps the file of device (major, minor)
 * and inode ino. */
bool rl_procmaps_maps(const char *line, unsigned int major, unsigned int minor,
		      uint64_t ino);

#endif /* RL_PROCNET_H */
