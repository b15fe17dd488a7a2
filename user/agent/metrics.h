/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent's Prometheus endpoint: a tiny HTTP/1.0 server on the event loop
 * answering GET /metrics with the text exposition format.
 */
#ifndef RL_METRICS_H
#define RL_METRICS_H

#include <stdint.h>
#include <jansson.h>

#define METRICS_REQ_MAX		8192
#define METRICS_MAX_CLIENTS	32
#define METRICS_STALL_NS	(10ULL * 1000000000ULL)
/* With every place taken, a new client takes that of one that made no
 * progress for this long (server_ops.evict_ns) */
#define METRICS_EVICT_NS	(1ULL * 1000000000ULL)

struct agent;
struct metrics;

/* Parses "HOST:PORT" or "[V6]:PORT".  0 or -EINVAL. */
int metrics_parse_addr(const char *s, char *host, size_t hostlen,
		       char *port, size_t portlen);

/* Listens on addr ("127.0.0.1:9464", "[::1]:9464").  0 or -errno
 * (logged). */
int metrics_open(struct agent *a, const char *addr, struct metrics **out);
void metrics_close(struct metrics *m);

/* For rlctl status: {"scrapes": answered since the start, "scraping":
 * whether one runs now, "last_scrape_us": the last one's time from its
 * start to its answer, "last_scrape_turns": the turns of the event loop
 * it took, "longest_hold_us": the longest any turn of a scrape held the
 * loop, "longest_hold_cpu_us": the most CPU time one took (the same less
 * the time other processes had the CPU meanwhile)}. */
json_t *metrics_status_json(const struct metrics *m);

/* Disconnects clients that stalled for METRICS_STALL_NS. */
void metrics_tick(struct metrics *m, uint64_t now_ns);

#endif /* RL_METRICS_H */
