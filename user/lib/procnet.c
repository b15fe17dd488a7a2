// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* /proc/net/tcp and /proc/PID/maps lines (procnet.h).  Addresses there are the kernel's 32-bit
 * words printed in hex as the host holds them: stored back as words, they
 * are the address bytes in network order again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "procnet.h"

/* n hex words of 32 bits at *s into out, then ':' and the port. */
static bool addr_port(const char **s, unsigned int words, uint8_t *out,
		      uint16_t *port)
{
	const char *p = *s;

	while (*p == ' ')
		p++;
	for (unsigned int i = 0; i < words; i++) {
		char buf[9], *end;
		uint32_t w;

		memcpy(buf, p, 8);
		buf[8] = '\0';
		if (strlen(buf) != 8)
			return false;
		w = (uint32_t)strtoul(buf, &end, 16);
		if (*end)
			return false;
		memcpy(out + 4 * i, &w, 4);
		p += 8;
	}
	if (*p++ != ':')
		return false;
	{
		char *end;
		unsigned long v = strtoul(p, &end, 16);

		if (end == p || end - p != 4 || v > 0xffff)
			return false;
		*port = (uint16_t)v;
		p = end;
	}
	*s = p;
	return true;
}

static bool v4_mapped(const uint8_t *a)
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(a, pre, 12) == 0;
}

bool rl_procnet_parse(const char *line, bool v6, struct rl_procnet_sock *out)
{
	unsigned int words = v6 ? 4 : 1;
	const char *p = line;
	char *end;
	unsigned long st;

	memset(out, 0, sizeof(*out));
	while (*p == ' ')
		p++;
	strtoul(p, &end, 10);		/* sl */
	if (end == p || *end != ':')
		return false;
	p = end + 1;
	if (!addr_port(&p, words, out->local, &out->lport) ||
	    !addr_port(&p, words, out->remote, &out->rport))
		return false;
	st = strtoul(p, &end, 16);
	if (end == p || st > 0xff)
		return false;
	out->state = (uint8_t)st;
	p = end;
	/* tx:rx  tr:when  retrnsmt  uid  timeout  inode */
	for (int f = 0; f < 5; f++) {
		while (*p == ' ')
			p++;
		if (!*p)
			return false;
		while (*p && *p != ' ')
			p++;
	}
	out->inode = strtoull(p, &end, 10);
	if (end == p)
		return false;
	out->family = v6 ? AF_INET6 : AF_INET;
	if (v6 && v4_mapped(out->remote)) {
		out->family = AF_INET;
		memmove(out->local, out->local + 12, 4);
		memmove(out->remote, out->remote + 12, 4);
	}
	return true;
}

bool rl_procmaps_maps(const char *line, unsigned int major, unsigned int minor,
		      uint64_t ino)
{
	unsigned int ma, mi;
	unsigned long long in;

	/* start-end perms offset major:minor inode [path]; an anonymous
	 * mapping has device 00:00 and inode 0 */
	if (sscanf(line, "%*s %*s %*s %x:%x %llu", &ma, &mi, &in) != 3)
		return false;
	return ino && in == ino && ma == major && mi == minor;
}
