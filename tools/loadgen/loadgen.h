/* loadgen: opens new TCP connections at a paced rate and counts how each one
 * ended; also an accept-and-close server.  Types shared by its modules. */
#ifndef LOADGEN_H
#define LOADGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

/* A label holds "[IPv6%scope]:port" at most. */
#define LG_LABEL_MAX 80

struct lg_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	char label[LG_LABEL_MAX];
};

struct lg_counters {
	uint64_t attempts;
	uint64_t connected;
	uint64_t retried;	/* of connected: only after the kernel
				 * retransmitted the SYN */
	uint64_t refused;	/* ECONNREFUSED: the SYN was answered with a RST */
	uint64_t timed_out;	/* no answer within the connect timeout */
	uint64_t errors;	/* any other errno */
};

struct lg_target {
	struct lg_addr addr;
	unsigned int weight;
	struct lg_counters c;
	int last_errno;		/* of the last attempt counted in errors */
	/* connect latencies of successful connects, microseconds */
	uint32_t *lat_us;
	size_t lat_len;
	size_t lat_cap;
	int64_t wrr_current;	/* smooth weighted round-robin state */
};

struct lg_client_opts {
	double rate;		/* connections per second, over all targets */
	double duration_s;
	unsigned int timeout_ms;
	unsigned int max_inflight;
	bool have_bind;
	struct lg_addr bind;
	FILE *times;		/* NULL, or where each attempt's start goes */
};

struct lg_client_result {
	double elapsed_s;
	double offered_rate;	/* attempts made / time it took to make them */
	uint64_t skipped;	/* scheduled attempts not made (behind or stopped) */
	bool interrupted;
};

struct lg_serve_opts {
	struct lg_addr *listen;
	size_t n_listen;
	double duration_s;	/* 0: until SIGINT/SIGTERM */
	int backlog;
};

struct lg_serve_result {
	uint64_t accepted;
	double elapsed_s;
};

/* addr.c */
int addr_parse(const char *s, bool need_port, struct lg_addr *out);

/* client.c */
extern volatile int lg_stop;
int client_run(const struct lg_client_opts *o, struct lg_target *t, size_t n,
	       struct lg_client_result *res);
int raise_nofile(unsigned long need);

/* serve.c */
int serve_run(const struct lg_serve_opts *o, struct lg_serve_result *res);

/* report.c */
void report_table(const struct lg_client_opts *o, struct lg_target *t, size_t n,
		  const struct lg_client_result *res);
int report_json(const struct lg_client_opts *o, struct lg_target *t, size_t n,
		const struct lg_client_result *res);
void report_serve(const struct lg_serve_result *res, bool json);
void report_error_json(const char *msg);
uint32_t lat_percentile(uint32_t *sorted, size_t n, double p);

#endif
