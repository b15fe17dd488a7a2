/* loadgen's reports: a table for people, JSON (jansson) for scripts.  In
 * JSON mode stdout carries nothing but the one JSON document. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen.h"

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of an ascending array; @n must be > 0. */
uint32_t lat_percentile(uint32_t *sorted, size_t n, double p)
{
	size_t rank = (size_t)ceil(p / 100.0 * (double)n);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

struct summary {
	struct lg_counters c;
	bool have_lat;
	uint32_t p50, p99;
};

static void summarize_target(struct lg_target *t, struct summary *s)
{
	s->c = t->c;
	s->have_lat = t->lat_len > 0;
	if (!s->have_lat)
		return;
	qsort(t->lat_us, t->lat_len, sizeof(*t->lat_us), cmp_u32);
	s->p50 = lat_percentile(t->lat_us, t->lat_len, 50);
	s->p99 = lat_percentile(t->lat_us, t->lat_len, 99);
}

/* The total's percentiles come from all samples merged, not from an average
 * of per-target percentiles (which means nothing). */
static void summarize_total(struct lg_target *t, size_t n, struct summary *s)
{
	size_t len = 0, k = 0;
	uint32_t *all;

	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < n; i++) {
		s->c.attempts += t[i].c.attempts;
		s->c.connected += t[i].c.connected;
		s->c.retried += t[i].c.retried;
		s->c.refused += t[i].c.refused;
		s->c.timed_out += t[i].c.timed_out;
		s->c.errors += t[i].c.errors;
		len += t[i].lat_len;
	}
	if (!len)
		return;
	all = malloc(len * sizeof(*all));
	if (!all)
		return;
	for (size_t i = 0; i < n; i++) {
		if (!t[i].lat_len)
			continue;
		memcpy(all + k, t[i].lat_us, t[i].lat_len * sizeof(*all));
		k += t[i].lat_len;
	}
	qsort(all, len, sizeof(*all), cmp_u32);
	s->have_lat = true;
	s->p50 = lat_percentile(all, len, 50);
	s->p99 = lat_percentile(all, len, 99);
	free(all);
}

static void table_row(const char *label, int width, const char *weight,
		      const struct summary *s)
{
	char p50[16] = "-", p99[16] = "-";

	if (s->have_lat) {
		snprintf(p50, sizeof(p50), "%u", s->p50);
		snprintf(p99, sizeof(p99), "%u", s->p99);
	}
	printf("%-*s %6s %9llu %9llu %8llu %9llu %7llu %8s %8s\n", width, label,
	       weight, (unsigned long long)s->c.attempts,
	       (unsigned long long)s->c.connected,
	       (unsigned long long)s->c.refused,
	       (unsigned long long)s->c.timed_out,
	       (unsigned long long)s->c.errors, p50, p99);
}

void report_table(const struct lg_client_opts *o, struct lg_target *t, size_t n,
		  const struct lg_client_result *res)
{
	struct summary s;
	int width = 6;

	for (size_t i = 0; i < n; i++) {
		int l = (int)strlen(t[i].addr.label);

		if (l > width)
			width = l;
	}
	printf("%-*s %6s %9s %9s %8s %9s %7s %8s %8s\n", width, "TARGET",
	       "WEIGHT", "ATTEMPTS", "CONNECTED", "REFUSED", "TIMED_OUT",
	       "ERRORS", "P50_US", "P99_US");
	for (size_t i = 0; i < n; i++) {
		char w[16];

		snprintf(w, sizeof(w), "%u", t[i].weight);
		summarize_target(&t[i], &s);
		table_row(t[i].addr.label, width, w, &s);
	}
	summarize_total(t, n, &s);
	table_row("total", width, "", &s);
	printf("\nrate %g/s for %g s: offered %.1f/s, elapsed %.3f s, timeout %u ms, max in flight %u",
	       o->rate, o->duration_s, res->offered_rate, res->elapsed_s,
	       o->timeout_ms, o->max_inflight);
	if (res->skipped)
		printf(", %llu scheduled attempts not made",
		       (unsigned long long)res->skipped);
	if (res->interrupted)
		printf(", interrupted");
	printf("\n");
	for (size_t i = 0; i < n; i++)
		if (t[i].c.errors)
			printf("%s: last error: %s\n", t[i].addr.label,
			       strerror(t[i].last_errno));
}

/* Adds the counters to @o (new when NULL), after whatever keys it has. */
static json_t *counters_json(json_t *o, const struct summary *s)
{
	if (!o)
		o = json_object();

	json_object_set_new(o, "attempts", json_integer((json_int_t)s->c.attempts));
	json_object_set_new(o, "connected", json_integer((json_int_t)s->c.connected));
	json_object_set_new(o, "retried", json_integer((json_int_t)s->c.retried));
	json_object_set_new(o, "refused", json_integer((json_int_t)s->c.refused));
	json_object_set_new(o, "timed_out", json_integer((json_int_t)s->c.timed_out));
	json_object_set_new(o, "errors", json_integer((json_int_t)s->c.errors));
	json_object_set_new(o, "connect_p50_us",
			    s->have_lat ? json_integer(s->p50) : json_null());
	json_object_set_new(o, "connect_p99_us",
			    s->have_lat ? json_integer(s->p99) : json_null());
	return o;
}

int report_json(const struct lg_client_opts *o, struct lg_target *t, size_t n,
		const struct lg_client_result *res)
{
	json_t *root = json_object(), *arr = json_array();
	struct summary s;
	int ret;

	if (!root || !arr)
		return -ENOMEM;
	json_object_set_new(root, "duration_s", json_real(o->duration_s));
	json_object_set_new(root, "rate", json_real(o->rate));
	json_object_set_new(root, "timeout_ms", json_integer(o->timeout_ms));
	json_object_set_new(root, "max_inflight", json_integer(o->max_inflight));
	json_object_set_new(root, "offered_rate", json_real(res->offered_rate));
	json_object_set_new(root, "elapsed_s", json_real(res->elapsed_s));
	json_object_set_new(root, "skipped", json_integer((json_int_t)res->skipped));
	json_object_set_new(root, "interrupted", json_boolean(res->interrupted));
	for (size_t i = 0; i < n; i++) {
		json_t *tj = json_object();

		summarize_target(&t[i], &s);
		json_object_set_new(tj, "target", json_string(t[i].addr.label));
		json_object_set_new(tj, "weight", json_integer(t[i].weight));
		counters_json(tj, &s);
		if (t[i].c.errors)
			json_object_set_new(tj, "last_error",
					    json_string(strerror(t[i].last_errno)));
		json_array_append_new(arr, tj);
	}
	json_object_set_new(root, "targets", arr);
	summarize_total(t, n, &s);
	json_object_set_new(root, "total", counters_json(NULL, &s));

	ret = json_dumpf(root, stdout, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
	json_decref(root);
	if (ret)
		return -EIO;
	putchar('\n');
	return 0;
}

void report_serve(const struct lg_serve_result *res, bool json)
{
	if (json) {
		json_t *root = json_object();

		json_object_set_new(root, "accepted", json_integer((json_int_t)res->accepted));
		json_object_set_new(root, "elapsed_s", json_real(res->elapsed_s));
		json_dumpf(root, stdout, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
		putchar('\n');
		json_decref(root);
		return;
	}
	printf("accepted %llu in %.3f s\n", (unsigned long long)res->accepted,
	       res->elapsed_s);
}

/* STYLE: in JSON mode an error is also a JSON document on stdout, so a
 * script reading stdout always gets something it can parse. */
void report_error_json(const char *msg)
{
	json_t *root = json_pack("{s:s}", "error", msg);

	if (!root)
		return;
	json_dumpf(root, stdout, 0);
	putchar('\n');
	json_decref(root);
}
