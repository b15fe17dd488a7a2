// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The control socket's view of per-source limits: the table's fill for
 * status, a tenant's refusals by reason for stats, and the command
 * `sources`, the sources refused most (from `src_top`, never a scan of the
 * table).
 */
#include <stdio.h>
#include <string.h>

#include "ctl_sources.h"
#include "kern.h"
#include "persource.h"

#define SOURCES_MAX	RL_SRC_TOP

json_t *ctl_src_table_json(struct agent *a)
{
	uint64_t size, used, reclaimed;

	kern_src_fill(&a->kern, &size, &used, &reclaimed);
	return json_pack("{s:I,s:I,s:I}", "size", (json_int_t)size,
			 "used", (json_int_t)used,
			 "reclaimed", (json_int_t)reclaimed);
}

void ctl_src_stats_add(json_t *j, struct agent *a, const struct agent_tenant *t,
		       uint64_t denied)
{
	struct rl_src_stats ss;

	if (!j || !t->pol.src_rate.count ||
	    kern_src_stats(&a->kern, t->slot, &ss))
		return;
	json_object_set_new(j, "denied_source", json_integer((json_int_t)ss.denied));
	json_object_set_new(j, "denied_tenant", json_integer(
		(json_int_t)(denied > ss.denied ? denied - ss.denied : 0)));
	json_object_set_new(j, "shadow_denied_source",
			    json_integer((json_int_t)ss.shadow_denied));
	json_object_set_new(j, "source_overflow",
			    json_integer((json_int_t)ss.overflow));
	json_object_set_new(j, "source_overflow_denied",
			    json_integer((json_int_t)ss.overflow_denied));
}

/* {"tenant","source","denied"} for each row. */
static json_t *rows_json(struct agent *a, const struct src_top_row *rows,
			 size_t n)
{
	json_t *arr = json_array();

	for (size_t i = 0; i < n && arr; i++) {
		const struct agent_tenant *t = agent_find_slot(a, rows[i].key.tenant);
		char src[64];

		if (!t)
			continue;	/* a slot deleted since */
		src_key_format(&rows[i].key, t->pol.src_len4, t->pol.src_len6,
			       src, sizeof(src));
		json_array_append_new(arr, json_pack("{s:s,s:s,s:I}", "tenant",
						     t->pol.name, "source", src,
						     "denied",
						     (json_int_t)rows[i].denied));
	}
	return arr;
}

json_t *ctl_cmd_sources(struct ctl_call *call, const json_t *req)
{
	static struct src_top_row rows[SOURCES_MAX];
	struct agent *a = call->a;
	json_t *lim = json_object_get(req, "limit");
	struct agent_tenant *t;
	json_t *r = ctl_optional_tenant(a, req, &t);
	uint32_t slot = t ? t->slot : UINT32_MAX;
	json_int_t limit = 10;
	char err[128];
	size_t n;

	if (r)
		return r;
	if (lim && !json_is_null(lim)) {
		limit = json_integer_value(lim);
		if (!json_is_integer(lim) || limit < 1 || limit > SOURCES_MAX) {
			snprintf(err, sizeof(err), "field 'limit' must be a whole "
				 "number from 1 to %d", SOURCES_MAX);
			return ctl_error(AGENT_INVALID, err);
		}
	}
	n = kern_src_top(&a->kern, slot, rows, (size_t)limit);
	return json_pack("{s:b,s:o,s:o}", "ok", 1, "sources", rows_json(a, rows, n),
			 "table", ctl_src_table_json(a));
}
