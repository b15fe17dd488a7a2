/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tenant policy: the parsers of rlctl's arguments (name, rate, burst,
 * prefixes, ports, action, fail policy), each refusing bad input with a
 * message that names the value and says what would be accepted.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "parse.h"
#include "policy_int.h"

static bool name_char(char c, bool first)
{
	if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	    (c >= '0' && c <= '9'))
		return true;
	return !first && (c == '_' || c == '.' || c == '-');
}

int policy_parse_name(const char *s, char *out, char *err)
{
	size_t n = strlen(s);

	if (n == 0)
		return fail(err, "invalid tenant name '': expected 1-%d characters "
			    "from A-Z a-z 0-9 _ . -, starting with a letter or digit",
			    POLICY_NAME_MAX);
	if (n > POLICY_NAME_MAX)
		return fail(err, "invalid tenant name '" ECHO "...': %zu characters, "
			    "at most %d allowed", s, n, POLICY_NAME_MAX);
	for (size_t i = 0; i < n; i++)
		if (!name_char(s[i], i == 0))
			return fail(err, "invalid tenant name '" ECHO "': expected "
				    "characters from A-Z a-z 0-9 _ . -, starting "
				    "with a letter or digit", s);
	memcpy(out, s, n + 1);
	return 0;
}

int policy_parse_rate(const char *s, struct policy_rate *out, char *err)
{
	const char *slash = strchr(s, '/');
	uint64_t count, period;
	int ret;

	if (!slash || strlen(slash) != 2)
		goto bad;
	switch (slash[1]) {
	case 's': period = 1; break;
	case 'm': period = 60; break;
	case 'h': period = 3600; break;
	default: goto bad;
	}
	ret = parse_u64n(s, (size_t)(slash - s), UINT64_MAX, &count);
	if (ret == -ERANGE || (ret == 0 && count > POLICY_RATE_MAX * period))
		return fail(err, "invalid rate '" ECHO "': at most %llu per second "
			    "(%llu/m, %llu/h) allowed", s, POLICY_RATE_MAX,
			    POLICY_RATE_MAX * 60, POLICY_RATE_MAX * 3600);
	if (ret < 0)
		goto bad;
	if (count == 0)
		return fail(err, "invalid rate '" ECHO "': the count must be at "
			    "least 1 (e.g. 1/s, 10/m, 1/h)", s);
	out->count = count;
	out->period_s = period;
	return 0;
bad:
	return fail(err, "invalid rate '" ECHO "': expected N/s, N/m or N/h with N "
		    "a whole number from 1 (e.g. 100/s, 500/m)", s);
}

int policy_parse_burst(const char *s, uint64_t *out, char *err)
{
	uint64_t v;
	int ret = parse_u64n(s, strlen(s), POLICY_BURST_MAX, &v);

	if (ret < 0 || v == 0)
		return fail(err, "invalid burst '" ECHO "': expected a whole number "
			    "from 1 to %llu", s, POLICY_BURST_MAX);
	*out = v;
	return 0;
}

int policy_parse_rate_burst(const char *s, struct policy_rate *rate,
			    uint64_t *burst, char *err)
{
	char word[64];
	const char *comma = strchr(s, ',');
	size_t n = comma ? (size_t)(comma - s) : strlen(s);

	if (n >= sizeof(word))
		return fail(err, "invalid rate '" ECHO "': expected N/s, N/m or "
			    "N/h, optionally ,BURST", s);
	memcpy(word, s, n);
	word[n] = '\0';
	if (policy_parse_rate(word, rate, err))
		return -EINVAL;
	if (!comma) {
		*burst = policy_default_burst(rate);
		return 0;
	}
	return policy_parse_burst(comma + 1, burst, err) ? -EINVAL : 0;
}

/* One length of --source-mask: "/N" or "N", 1 to max. */
static int mask_len(const char *s, size_t n, uint64_t max, uint8_t *out)
{
	uint64_t v;

	if (n && s[0] == '/') {
		s++;
		n--;
	}
	if (parse_u64n(s, n, max, &v) < 0 || v == 0)
		return -EINVAL;
	*out = (uint8_t)v;
	return 0;
}

int policy_parse_source_mask(const char *s, uint8_t *len4, uint8_t *len6,
			     char *err)
{
	const char *comma = strchr(s, ',');

	if (!comma || mask_len(s, (size_t)(comma - s), 32, len4) ||
	    mask_len(comma + 1, strlen(comma + 1), 128, len6))
		return fail(err, "invalid source mask '" ECHO "': expected "
			    "/N4,/N6, the IPv4 prefix length 1-32 and the IPv6 "
			    "one 1-128 (e.g. /32,/64)", s);
	return 0;
}

int policy_parse_max_conns(const char *s, uint64_t *out, char *err)
{
	uint64_t v;

	if (parse_u64n(s, strlen(s), POLICY_CONNS_MAX, &v) < 0)
		return fail(err, "invalid max-conns '" ECHO "': expected a whole "
			    "number of connections from 0 (no cap) to %d", s,
			    POLICY_CONNS_MAX);
	*out = v;
	return 0;
}

int policy_parse_prefix(const char *s, struct policy_prefix *out, char *err)
{
	char addr[INET6_ADDRSTRLEN + 1];
	const char *slash = strchr(s, '/');
	size_t alen = slash ? (size_t)(slash - s) : strlen(s);
	struct policy_prefix p = { 0 };
	unsigned int maxlen;
	uint64_t len;

	if (alen == 0 || alen >= sizeof(addr))
		goto bad;
	memcpy(addr, s, alen);
	addr[alen] = '\0';
	/* inet_pton, unlike inet_aton, refuses the shorthand forms ("10.1",
	 * "0x0a.0.0.1") that would be read as an address nobody meant. */
	if (inet_pton(AF_INET, addr, p.addr) == 1) {
		p.family = AF_INET;
		maxlen = 32;
	} else if (inet_pton(AF_INET6, addr, p.addr) == 1) {
		p.family = AF_INET6;
		maxlen = 128;
	} else {
		goto bad;
	}
	if (!slash) {
		len = maxlen;
	} else if (parse_u64n(slash + 1, strlen(slash + 1), maxlen, &len) < 0) {
		return fail(err, "invalid prefix '" ECHO "': the length must be a "
			    "whole number from 0 to %u for an IPv%d address", s,
			    maxlen, p.family == AF_INET ? 4 : 6);
	}
	p.len = (uint8_t)len;
	if (clear_host_bits(p.addr, maxlen / 8, p.len)) {
		char net[INET6_ADDRSTRLEN + 8];

		policy_format_prefix(&p, net, sizeof(net));
		return fail(err, "invalid prefix '" ECHO "': host bits are set "
			    "beyond /%u; did you mean %s?", s, p.len, net);
	}
	*out = p;
	return 0;
bad:
	return fail(err, "invalid prefix '" ECHO "': expected an IPv4 or IPv6 "
		    "address or CIDR (e.g. 192.0.2.0/24, 2001:db8::/32, "
		    "198.51.100.7)", s);
}

/* A comma list being parsed into scratch room, which is kept only if
 * every item is good: a bad list leaves the tenant as it was. */
struct item_list {
	const char *text;		/* the whole list, for messages */
	struct policy_prefix match[POLICY_MAX_PREFIXES];
	unsigned int n_match;
	uint16_t ports[POLICY_MAX_PORTS];
	unsigned int n_ports;
};

typedef int (*item_fn)(const char *item, struct item_list *l, char *err);

/*
 * Calls fn on each item of l's text, in order, on a scratch copy of the
 * text, and stops at the first error fn returns.  Items may be empty
 * ("80,,443", a trailing comma): fn reports them rather than have them
 * silently skipped.
 */
static int each_item(struct item_list *l, item_fn fn, char *err)
{
	char *copy = strdup(l->text), *cur = copy;
	int ret = 0;

	if (!copy)
		return fail(err, "out of memory");
	while (cur && !ret) {
		char *item = cur, *comma = strchr(cur, ',');

		if (comma)
			*comma = '\0';
		cur = comma ? comma + 1 : NULL;
		ret = fn(item, l, err);
	}
	free(copy);
	return ret;
}

static int prefix_item(const char *item, struct item_list *l, char *err)
{
	struct policy_prefix *v = l->match;
	unsigned int n = l->n_match;

	if (*item == '\0')
		return fail(err, "invalid prefix list '" ECHO "': empty item; "
			    "expected PREFIX[,PREFIX...]", l->text);
	if (n == POLICY_MAX_PREFIXES)
		return fail(err, "too many prefixes: at most %d per tenant",
			    POLICY_MAX_PREFIXES);
	if (policy_parse_prefix(item, &v[n], err) < 0)
		return -EINVAL;
	for (unsigned int j = 0; j < n; j++) {
		if (prefix_equal(&v[j], &v[n])) {
			char buf[INET6_ADDRSTRLEN + 8];

			policy_format_prefix(&v[n], buf, sizeof(buf));
			return fail(err, "duplicate prefix %s in '" ECHO "'", buf,
				    l->text);
		}
	}
	l->n_match++;
	return 0;
}

int policy_parse_prefixes(const char *list, struct policy_tenant *t, char *err)
{
	struct item_list l = { .text = list };

	if (each_item(&l, prefix_item, err))
		return -EINVAL;
	if (policy_set_prefixes(t, l.match, l.n_match))
		return fail(err, "out of memory");
	return 0;
}

static int port_item(const char *item, struct item_list *l, char *err)
{
	unsigned int n = l->n_ports;
	uint64_t v;

	if (parse_u64n(item, strlen(item), 65535, &v) < 0 || v == 0)
		return fail(err, "invalid port '" ECHO "': expected a whole number "
			    "from 1 to 65535 (list: PORT[,PORT...])", item);
	if (n == POLICY_MAX_PORTS)
		return fail(err, "too many ports in '" ECHO "': at most %d per "
			    "tenant", l->text, POLICY_MAX_PORTS);
	for (unsigned int j = 0; j < n; j++)
		if (l->ports[j] == v)
			return fail(err, "duplicate port %" PRIu64 " in '" ECHO
				    "'", v, l->text);
	l->ports[l->n_ports++] = (uint16_t)v;
	return 0;
}

int policy_parse_ports(const char *list, struct policy_tenant *t, char *err)
{
	struct item_list l = { .text = list };

	if (each_item(&l, port_item, err))
		return -EINVAL;
	memcpy(t->ports, l.ports, sizeof(t->ports));
	t->n_ports = l.n_ports;
	return 0;
}

int policy_parse_action(const char *s, enum policy_action *out, char *err)
{
	if (strcmp(s, "drop") == 0)
		*out = POLICY_ACT_DROP;
	else if (strcmp(s, "rst") == 0)
		*out = POLICY_ACT_RST;
	else
		return fail(err, "invalid action '" ECHO "': expected drop or rst", s);
	return 0;
}

int policy_parse_direction(const char *s, enum policy_direction *out, char *err)
{
	if (!strcmp(s, "in"))
		*out = POLICY_DIR_IN;
	else if (!strcmp(s, "out"))
		*out = POLICY_DIR_OUT;
	else
		return fail(err, "invalid direction '" ECHO "': expected in "
			    "(connections to this host, by source) or out "
			    "(preloaded programs' connections, by destination)", s);
	return 0;
}

int policy_parse_verify(const char *s, enum policy_verify *out, char *err)
{
	if (!strcmp(s, "none"))
		*out = POLICY_VERIFY_NONE;
	else if (!strcmp(s, "syncookie"))
		*out = POLICY_VERIFY_SYNCOOKIE;
	else if (!strcmp(s, "syncookie-answer"))
		*out = POLICY_VERIFY_ANSWER;
	else
		return fail(err, "invalid verify '" ECHO "': expected none "
			    "(every SYN is charged), syncookie (only a "
			    "handshake completed with a valid SYN cookie) or "
			    "syncookie-answer (the same, rlgate sending the "
			    "cookie)", s);
	return 0;
}

int policy_parse_fail(const char *s, enum policy_fail *out, char *err)
{
	if (!strcmp(s, "static"))
		*out = POLICY_FAIL_STATIC;
	else if (!strcmp(s, "allow"))
		*out = POLICY_FAIL_ALLOW;
	else if (!strcmp(s, "deny"))
		*out = POLICY_FAIL_DENY;
	else
		return fail(err, "invalid fail policy '" ECHO "': expected static "
			    "(a local share of the rate), allow or deny", s);
	return 0;
}
