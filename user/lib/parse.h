/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The small parsers every rlgate program needs, one of each: unsigned
 * decimal integers and HOST:PORT.  Pure; each says exactly what it accepts.
 */
#ifndef RL_PARSE_H
#define RL_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* The first n bytes of s as an unsigned decimal integer: digits only (no
 * sign, space, hex or empty string).  0; -EINVAL when it is not such a
 * number; -ERANGE when it is above hi (or above 2^64 - 1). */
int parse_u64n(const char *s, size_t n, uint64_t hi, uint64_t *out);

/* The whole string s, as parse_u64n, within [lo, hi] (-ERANGE below lo). */
int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* "HOST:PORT" or "[IPV6]:PORT": host (without brackets, 1 to hostlen - 1
 * bytes; an unbracketed host has no ':') and port 1..65535.  The host is not
 * resolved or checked further.  0 or -EINVAL; host and port are left alone
 * on failure. */
int parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port);

#endif /* RL_PARSE_H */
