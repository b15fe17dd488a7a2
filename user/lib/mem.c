/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Memory figures of the kernel's maps and of a process (see mem.h). */
#include <errno.h>
#include <stdio.h>

#include "mem.h"

uint64_t mem_map_bytes(enum mem_map_kind kind, uint32_t key_size,
		       uint32_t value_size, uint32_t max_entries, int ncpus)
{
	uint64_t value = value_size;

	if (kind == MEM_MAP_RINGBUF)
		return max_entries;
	if (kind == MEM_MAP_PERCPU)
		value = ((value + 7) & ~7ULL) * (uint64_t)(ncpus > 0 ? ncpus : 1);
	return ((uint64_t)key_size + value) * max_entries;
}

int mem_statm(const char *statm, long page_size, uint64_t *rss,
	      uint64_t *anon)
{
	unsigned long long size, resident, shared;

	if (page_size <= 0 ||
	    sscanf(statm, "%llu %llu %llu", &size, &resident, &shared) != 3 ||
	    shared > resident)
		return -EINVAL;
	*rss = (uint64_t)resident * (uint64_t)page_size;
	*anon = (uint64_t)(resident - shared) * (uint64_t)page_size;
	return 0;
}
