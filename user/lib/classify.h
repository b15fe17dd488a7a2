/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The rule compiler: turns the rules (prefix, port or any, tenant) into the
 * multibit trie the kernel walks (see "Classification" in rlgate.h), and
 * publishes it into the pinned `cls` map without the kernel ever seeing a
 * half-written table.
 */
#ifndef RL_CLASSIFY_H
#define RL_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "rlgate.h"

struct rl_cls_rule {
	int family;		/* AF_INET or AF_INET6 */
	uint8_t addr[16];	/* network order; bits past plen are ignored */
	unsigned int plen;
	uint16_t port;		/* host order; 0: any port */
	uint32_t tenant;
};

/* One half of `cls`, as the compiler built it: groups[0..n_groups). */
struct rl_cls_image {
	struct rl_cls_group *groups;
	uint32_t n_groups;
	uint32_t n_columns;	/* distinct ports named by rules that matter */
	uint32_t n_rows;	/* address ranges whose tenant depends on the port */
	uint32_t row_entries;	/* what their rows take, entries */
};

/*
 * Compiles n rules into at most `half` groups (0: RL_CLS_GROUPS).  Two rules
 * for the same prefix and port (or both any port) must name the same tenant.
 * 0, or -EINVAL (a bad rule) / -EEXIST (a conflict) / -ENOSPC (the table is
 * full) / -ENOMEM with a message in err.
 */
int rl_cls_compile(const struct rl_cls_rule *rules, size_t n, uint32_t half,
		   struct rl_cls_image *img, char *err, size_t errlen);
void rl_cls_image_free(struct rl_cls_image *img);

struct policy_tenant;

/*
 * Appends tenant t's rules (each prefix, times each port if it names any)
 * for tenant slot `slot` to *rules, growing it; *n and *cap count entries.
 * 0 or -ENOMEM.
 */
int rl_cls_rules_add(struct rl_cls_rule **rules, size_t *n, size_t *cap,
		     const struct policy_tenant *t, uint32_t slot);

/* The kernel's walk over a compiled image, in user space: the tenant, or
 * -1. */
int rl_cls_lookup(const struct rl_cls_image *img, int family,
		  const uint8_t *addr, uint16_t port);

/* The walk itself, over groups[0..n_groups) (a half as the compiler wrote
 * it): an index at or past n_groups reads as no rule, so even a table that
 * changes under the walk cannot send it out of bounds.  AF_INET addresses
 * are 4 bytes, others 16.  Inline for librlpreload.so, which links nothing
 * else of this file. */
static inline uint32_t rl_cls_entry(const struct rl_cls_group *groups,
				    uint32_t n_groups, uint32_t group,
				    uint32_t idx)
{
	return group < n_groups ?
	       __atomic_load_n(&groups[group].e[idx & 0xff], __ATOMIC_RELAXED) :
	       RL_CLS_NONE;
}

/* A port row's answer for a port (see rlgate.h), as the kernel finds it. */
static inline uint32_t rl_cls_row(const struct rl_cls_group *groups,
				  uint32_t n_groups, uint32_t row, uint16_t port)
{
	uint32_t hdr = rl_cls_entry(groups, n_groups, row >> 8, row);
	uint32_t i = RL_CLS_ROW_SLOT(row, hdr, port);

	if (rl_cls_entry(groups, n_groups, i >> 8, i) == (uint32_t)port + 1)
		return rl_cls_entry(groups, n_groups, (i + 1) >> 8, i + 1);
	return RL_CLS_ROW_ANY(hdr);
}

static inline int rl_cls_walk(const struct rl_cls_group *groups,
			      uint32_t n_groups, int family, const uint8_t *a,
			      uint16_t port)
{
	int v4 = family == AF_INET, bytes = v4 ? 4 : 16;
	uint32_t e;

	e = rl_cls_entry(groups, n_groups,
			 (v4 ? RL_CLS_ROOT4 : RL_CLS_ROOT6) + a[0], a[1]);
	for (int i = 2; i < bytes && RL_CLS_TYPE(e) == RL_CLS_T_GROUP; i++)
		e = rl_cls_entry(groups, n_groups, RL_CLS_VAL(e), a[i]);
	if (RL_CLS_TYPE(e) == RL_CLS_T_PORTS)
		e = rl_cls_row(groups, n_groups, RL_CLS_VAL(e), port);
	return RL_CLS_TYPE(e) == RL_CLS_T_TENANT ? (int)RL_CLS_VAL(e) : -1;
}

/* The `cls` and `cls_state` maps, mapped into this process, and what waits
 * for a grace period: `cls_sync` and an inner map to store into it. */
struct rl_cls_map {
	struct rl_cls_group *groups;	/* both halves */
	struct rl_cls_state *state;
	uint32_t half;			/* groups per half */
	int sync_fd, inner_fd;
	bool unsynced;			/* a switch whose grace period failed */
	bool mirrored;			/* both halves hold the same table */
};

/* Maps `cls` (2 x half groups, half as the program was loaded with; 0:
 * RL_CLS_GROUPS) and `cls_state`; sync_fd is `cls_sync`.  0 or -errno. */
int rl_cls_map_open(struct rl_cls_map *m, int cls_fd, int state_fd,
		    int sync_fd, uint32_t half);
void rl_cls_map_close(struct rl_cls_map *m);

/*
 * Writes img into the half the kernel does not read, makes it the one it
 * reads, and waits until no program can still be walking the old one (an
 * RCU grace period), so that the next publish may overwrite it.  One
 * publisher at a time per map.  0 once the kernel reads img, or -errno
 * with nothing changed.  A wait that failed after the switch is owed: the
 * next publish pays it before writing, or fails with nothing changed.
 */
int rl_cls_publish(struct rl_cls_map *m, const struct rl_cls_image *img);

/*
 * Edits in place, for a change of a few prefixes among a million: the
 * entries a prefix covers are recomputed from the rules as they are now,
 * asked through `rule`: the tenant slot of the any-port rule of exactly
 * that prefix (address bits past plen zero), -1 for none, or
 * RL_CLS_PORTED when a rule of that prefix names a port.  Only where no
 * port rule decides: a port row in the way, or a port rule met on the way
 * up from an entry before an any-port rule, gives up.
 */
#define RL_CLS_PORTED	(-2)
typedef int64_t (*rl_cls_rule_fn)(void *ctx, int family, const uint8_t *addr,
				  unsigned int plen);

/* Entries one repaint may visit before it gives up (a short prefix over
 * many groups is cheaper to compile whole). */
#define RL_CLS_REPAINT_BUDGET	(64u * 1024)

/*
 * Makes the entries the prefix (family, addr, plen) covers in groups[]
 * (one half, *n_groups of max_groups in use) answer as the rules now do,
 * taking new groups at *n_groups.  0; -EAGAIN when it met a port row or
 * ran out of budget, -ENOSPC out of groups, -EINVAL: the table is then
 * partly repainted and must be compiled anew.
 */
int rl_cls_repaint(struct rl_cls_group *groups, uint32_t *n_groups,
		   uint32_t max_groups, int family, const uint8_t *addr,
		   unsigned int plen, rl_cls_rule_fn rule, void *ctx);

/*
 * Repaints the prefixes of ps[0..n) (their port ignored) in the half the
 * kernel does not read (a copy of the one it reads, unless both are the
 * same already), switches to it, waits for the grace period and repaints
 * the old half too.  *n_groups: the groups in use, before and after.  0
 * once the kernel reads the edited table; -errno as rl_cls_repaint, with
 * the kernel's table unchanged (it must then be compiled anew).
 */
int rl_cls_map_edit(struct rl_cls_map *m, uint32_t *n_groups,
		    const struct rl_cls_rule *ps, size_t n, rl_cls_rule_fn rule,
		    void *ctx);

#endif /* RL_CLASSIFY_H */
