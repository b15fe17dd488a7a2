/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What the kernel's maps and the agent take in memory, as rlctl status and
 * make bench report it.  Pure.
 */
#ifndef RL_MEM_H
#define RL_MEM_H

#include <stdint.h>

enum mem_map_kind {
	MEM_MAP_PLAIN,		/* one value per entry */
	MEM_MAP_PERCPU,		/* one value per entry and possible CPU */
	MEM_MAP_RINGBUF,	/* max_entries is the ring's size in bytes */
};

/*
 * A map's keys and values: (key + value) x max_entries; a per-CPU map's
 * values, rounded up to 8 bytes as the kernel stores them, once per
 * possible CPU.  The kernel's own overhead per map and per entry is not
 * counted.
 */
uint64_t mem_map_bytes(enum mem_map_kind kind, uint32_t key_size,
		       uint32_t value_size, uint32_t max_entries, int ncpus);

/* From the text of /proc/PID/statm (in pages of page_size bytes): the
 * resident set in bytes in *rss (its second field), and in *anon the part
 * of it that is the process's own, its heap and anonymous mappings (the
 * second less the third, the pages mapped from files and the kernel:
 * libraries, the program, BPF maps).  0 or -EINVAL. */
int mem_statm(const char *statm, long page_size, uint64_t *rss,
	      uint64_t *anon);

#endif /* RL_MEM_H */
