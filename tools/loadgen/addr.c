/* Parsing of loadgen's addresses: "A.B.C.D:PORT", "[IPV6]:PORT" and, for
 * --bind, a bare address.  Numeric only: a load generator must not stall on
 * a resolver in the middle of a run. */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"
#include "parse.h"

static int parse_port(const char *s, uint16_t *port)
{
	uint64_t v;

	if (parse_u64(s, 1, 65535, &v) < 0)
		return -EINVAL;
	*port = (uint16_t)v;
	return 0;
}

static int parse_v6(const char *host, struct sockaddr_in6 *sin6)
{
	char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
	char *scope;

	if (strlen(host) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, host);
	/* Link-local addresses need a scope to be reachable at all. */
	scope = strchr(buf, '%');
	if (scope) {
		*scope++ = '\0';
		sin6->sin6_scope_id = if_nametoindex(scope);
		if (!sin6->sin6_scope_id)
			return -EINVAL;
	}
	if (inet_pton(AF_INET6, buf, &sin6->sin6_addr) != 1)
		return -EINVAL;
	sin6->sin6_family = AF_INET6;
	return 0;
}

/* Fills @out from @s; the label is the canonical spelling (inet_ntop), so
 * reports match whatever way the user wrote the address.  Returns 0 or
 * -EINVAL. */
int addr_parse(const char *s, bool need_port, struct lg_addr *out)
{
	char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
	char txt[INET6_ADDRSTRLEN];
	const char *port_s = NULL;
	uint16_t port = 0;
	size_t hlen;

	memset(out, 0, sizeof(*out));
	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close)
			return -EINVAL;
		hlen = (size_t)(close - s - 1);
		if (close[1] == ':')
			port_s = close + 2;
		else if (close[1])
			return -EINVAL;
		if (hlen >= sizeof(host))
			return -EINVAL;
		memcpy(host, s + 1, hlen);
		host[hlen] = '\0';
	} else {
		const char *colon = strrchr(s, ':');

		/* More than one colon without brackets: a bare IPv6 address. */
		if (colon && strchr(s, ':') == colon) {
			hlen = (size_t)(colon - s);
			port_s = colon + 1;
		} else {
			hlen = strlen(s);
		}
		if (hlen >= sizeof(host))
			return -EINVAL;
		memcpy(host, s, hlen);
		host[hlen] = '\0';
	}

	if (port_s && parse_port(port_s, &port))
		return -EINVAL;
	if (need_port && !port_s)
		return -EINVAL;

	if (strchr(host, ':')) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->ss;

		if (parse_v6(host, sin6))
			return -EINVAL;
		sin6->sin6_port = htons(port);
		out->len = sizeof(*sin6);
		inet_ntop(AF_INET6, &sin6->sin6_addr, txt, sizeof(txt));
		if (sin6->sin6_scope_id) {
			char ifname[IF_NAMESIZE];

			if (!if_indextoname(sin6->sin6_scope_id, ifname))
				return -EINVAL;
			snprintf(out->label, sizeof(out->label), "[%s%%%s]:%u",
				 txt, ifname, port);
		} else {
			snprintf(out->label, sizeof(out->label), "[%s]:%u", txt, port);
		}
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&out->ss;

		if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
			return -EINVAL;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(port);
		out->len = sizeof(*sin);
		inet_ntop(AF_INET, &sin->sin_addr, txt, sizeof(txt));
		snprintf(out->label, sizeof(out->label), "%s:%u", txt, port);
	}
	if (!port_s) {
		/* a bare address has no port to show */
		char *colon = strrchr(out->label, ':');

		if (out->label[0] == '[') {
			memmove(out->label, out->label + 1, strlen(out->label));
			colon = strrchr(out->label, ']');
		}
		*colon = '\0';
	}
	return 0;
}
