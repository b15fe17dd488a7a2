// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The sources refused most (per-source limits), as `stats --sources`,
 * `top` and `status` show them: read from the agent's `sources` command,
 * which reads the kernel's slots of the heaviest, never the whole table.
 */
#include <stdio.h>

#include "rlctl.h"

int rlctl_sources(const char *name, uint64_t limit, json_t **reply,
		  json_t **rows)
{
	json_t *req = json_pack("{s:s,s:I}", "cmd", "sources", "limit",
				(json_int_t)limit);

	if (name && name[0])
		json_object_set_new(req, "name", json_string(name));
	return rlctl_call_get(req, "sources", true, reply, rows);
}

void rlctl_print_sources(const json_t *rows)
{
	const json_t *r;
	size_t i;

	if (!json_array_size(rows)) {
		printf("\nno source refused by its per-source limit\n");
		return;
	}
	printf("\n%-20s  %-42s  %12s\n", "TENANT", "SOURCE", "DENIED");
	json_array_foreach(rows, i, r)
		printf("%-20s  %-42s  %12" JSON_INTEGER_FORMAT "\n",
		       json_string_value(json_object_get(r, "tenant")) ?: "?",
		       json_string_value(json_object_get(r, "source")) ?: "?",
		       json_integer_value(json_object_get(r, "denied")));
}

void rlctl_print_src_table(const json_t *t)
{
	if (!json_is_object(t))
		return;
	printf("per-source:  %" JSON_INTEGER_FORMAT " of %" JSON_INTEGER_FORMAT
	       " sources held (%" JSON_INTEGER_FORMAT " reclaimed)\n",
	       json_integer_value(json_object_get(t, "used")),
	       json_integer_value(json_object_get(t, "size")),
	       json_integer_value(json_object_get(t, "reclaimed")));
}
