/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The kernel side's insides, shared by some of its files and by nothing
 * else; which file holds what is docs/architecture.md's source map's to
 * say.
 */
#ifndef RL_KERN_INT_H
#define RL_KERN_INT_H

#include <stdbool.h>
#include <bpf/libbpf.h>

#include "kern.h"
#include "rlgate.skel.h"

/* The program this agent runs: the XDP one, or the tc one. */
static inline const char *prog_name(const struct kern *k)
{
	return k->use_tc ? "tc_rlgate" : "xdp_rlgate";
}

static inline struct bpf_program *our_prog(const struct kern *k)
{
	return k->use_tc ? k->skel->progs.tc_rlgate : k->skel->progs.xdp_rlgate;
}

/* kern.c */

/* Whether map has one entry per tenant slot (sized by --max-tenants). */
bool kern_tenant_sized(const struct kern *k, const struct bpf_map *map);

/* kern_sources.c: maps `src_conf`, `src_ctl` and `src_top` (0 or -errno,
 * logged), and unmaps them. */
int kern_src_open(struct kern *k);
void kern_src_close(struct kern *k);

/* kern_migrate.c */

/* The layout version (RL_ABI_VERSION) of the pins under k's pin dir: 0
 * when there are none, 1 when there are pins but no `abi` record.  0 or
 * -errno (logged). */
int kern_pinned_abi(const struct kern *k, __u32 *version);

/* Whether the map pinned at path, of an older layout (from), can be
 * brought forward into map by kern_migrate_map(). */
bool kern_migratable(const struct kern *k, const struct bpf_map *map,
		     const char *path, __u32 from);

/* Copies the map pinned at path (layout from) into map, loaded, and pins
 * map in its place.  0 or -errno (logged). */
int kern_migrate_map(struct kern *k, struct bpf_map *map, const char *path,
		     __u32 from);

#endif /* RL_KERN_INT_H */
