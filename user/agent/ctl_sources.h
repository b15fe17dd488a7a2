/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-source limits on the control socket (ctl_sources.c). */
#ifndef RL_CTL_SOURCES_H
#define RL_CTL_SOURCES_H

#include <stdint.h>
#include <jansson.h>

#include "ctl_cmd.h"

/* status's "per_source_table": {"size","used","reclaimed"}. */
json_t *ctl_src_table_json(struct agent *a);

/* Adds to a tenant's stats j, when it has a per-source limit, its
 * refusals by reason: denied_source (its sources' buckets), denied_tenant
 * (the rest of `denied`), shadow_denied_source, source_overflow and
 * source_overflow_denied. */
void ctl_src_stats_add(json_t *j, struct agent *a, const struct agent_tenant *t,
		       uint64_t denied);

/* {"cmd":"sources","name"?:NAME,"limit"?:N (1-1024, default 10)}: the
 * sources refused most, of one tenant or all, heaviest first:
 * {"ok":true,"sources":[{"tenant","source","denied"}...],"table":{...}}. */
json_t *ctl_cmd_sources(struct ctl_call *call, const json_t *req);

#endif /* RL_CTL_SOURCES_H */
