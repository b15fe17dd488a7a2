/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The verdict tables: the world every table row starts from (tenants that
 * admit, drop, answer with RST, shadow, lease, and the rules that route
 * sources to them), the outcomes a row may expect, and the one check of a
 * frame against a fresh copy of that world.
 */
#ifndef RL_TEST_XDP_TABLE_H
#define RL_TEST_XDP_TABLE_H

#include "xdp_test.h"

/* The world's tenants; T_Lnn and the port ones are what the rules of
 * xdp_rules.c tell apart. */
enum {
	T_ADMIT = 1,		/* standalone, full bucket */
	T_DROP = 2,		/* standalone, empty, drop */
	T_SHADOW = 4,		/* standalone, empty, drop, shadow */
	T_LEASED = 5,		/* leased, 3 tokens */
	T_LEASED_EMPTY = 6,	/* leased, no token, drop */
	T_PORT_ANY = 7,		/* 10.7/16 any port */
	T_PORT_443 = 8,		/* 10.7/16 port 443 */
	T_LONG_ANY = 9,		/* 10.8.0/24 any port */
	T_SHORT_PORT = 10,	/* 10.8/16 port 443 */
	T_L16 = 11,
	T_L24 = 12,
	T_L25 = 13,
	T_UNUSED = 14,		/* a rule points here, the slot is free */
	/* The last slot, to catch an off-by-one in the mmap'd layout. */
	T_RST = RL_MAX_TENANTS - 1,
};

enum outcome {
	O_IGNORED,	/* not a SYN: nothing counted, nothing spent */
	O_FRAGMENT,	/* a non-first fragment: counted as such only */
	O_UNPARSED,	/* could not be judged, no tenant's: passed, counted
			 * as unparsed only */
	O_UNPARSED_DROP, /* could not be judged, a tenant's source: dropped,
			 * counted globally and in the tenant's stats */
	O_UNPARSED_SHADOW, /* ... of a shadow tenant: passed, counted as
			 * unparsed and in the tenant's stats */
	O_NOMATCH,	/* a SYN no rule matched */
	O_NO_TENANT,	/* a SYN whose rule points at a free slot */
	O_ADMIT,	/* a token spent, admitted */
	O_DENY,		/* refused, dropped */
	O_RST,		/* refused, answered with RST|ACK */
	O_SHADOW,	/* would be refused, admitted */
};

/* One row: a frame, its verdict, what it counts and whose bucket moves. */
struct xdp_case {
	const char *name;
	struct pkt pkt;
	__u32 verdict;
	enum outcome out;
	__u32 tenant;	/* the tenant whose bucket and stats move */
};

/*
 * Runs the first in_len bytes of a frame against a fresh world and checks
 * the verdict, the bytes that come out (`reply`, the expected RST, or the
 * frame untouched when NULL), the global counters, and every tenant's stats
 * and bucket.  0, or -1 when it could not run.
 */
int check_frame(const __u8 *in, int in_len, __u32 verdict, enum outcome out,
		__u32 tenant, const __u8 *reply, int reply_len, int l3_off);

/* Each row a test of its own. */
void run_cases(const struct xdp_case *c, size_t n);

#endif /* RL_TEST_XDP_TABLE_H */
