/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The control protocol's contract, shared by rlagent and its clients (rlctl,
 * tests): where the socket lives, how long a line may be, and the error
 * codes a failed reply carries (docs/control-protocol.md).  One source, so
 * the two ends cannot drift apart.
 */
#ifndef RL_CTL_PROTO_H
#define RL_CTL_PROTO_H

#define CTL_DEFAULT_SOCKET	"/run/rlgate/rlagent.sock"
/* a request, newline included: `apply` of 100,000 tenants of ten prefixes */
#define CTL_LINE_MAX		(64 << 20)
#define CTL_REPLY_MAX		(64 << 20)	/* a reply: `tenant list` of every tenant */

/* The "code" of a reply with "ok": false. */
enum ctl_code {
	CTL_OK = 0,
	CTL_INVALID,		/* a bad argument */
	CTL_NOT_FOUND,		/* no such tenant or interface */
	CTL_CONFLICT,		/* rules that overlap another tenant's */
	CTL_INTERNAL,		/* the agent failed; anything unknown */
};

/* The code's name on the wire ("invalid", ...). */
const char *ctl_code_name(enum ctl_code c);

/* The code a name stands for; NULL or an unknown name is CTL_INTERNAL. */
enum ctl_code ctl_code_parse(const char *name);

/* How a client exits on it: 0 for CTL_OK, 2 for the codes that mean the
 * request was wrong (as a usage error is), 1 for the rest. */
int ctl_code_exit(enum ctl_code c);

#endif /* RL_CTL_PROTO_H */
