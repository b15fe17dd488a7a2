// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Unsigned integers and HOST:PORT, for the agent, rlctl and loadgen alike
 * (see parse.h). */
#include <errno.h>
#include <string.h>

#include "parse.h"

int parse_u64n(const char *s, size_t n, uint64_t hi, uint64_t *out)
{
	uint64_t v = 0;

	if (n == 0)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		uint64_t d = (uint64_t)(s[i] - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (v > hi)
		return -ERANGE;
	*out = v;
	return 0;
}

int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	uint64_t v;
	int err = parse_u64n(s, strlen(s), hi, &v);

	if (err)
		return err;
	if (v < lo)
		return -ERANGE;
	*out = v;
	return 0;
}

int parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port)
{
	const char *h = s, *colon;
	uint64_t p = 0;
	size_t hl;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		h = s + 1;
		hl = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strchr(s, ':');
		if (!colon || strchr(colon + 1, ':'))
			return -EINVAL;
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || hl >= hostlen ||
	    parse_u64(colon + 1, 1, 65535, &p) < 0)
		return -EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (uint16_t)p;
	return 0;
}
