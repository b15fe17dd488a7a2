/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Logging: level filter and one-line formatting to stderr, plus the libbpf
 * print callback.  Single-threaded programs; no locking.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <bpf/libbpf.h>

#include "log.h"

static enum log_level cur_level = LOG_LVL_INFO;
static const char *cur_ident;

static const char *const level_names[] = {
	[LOG_LVL_ERROR] = "error",
	[LOG_LVL_WARN] = "warn",
	[LOG_LVL_INFO] = "info",
	[LOG_LVL_DEBUG] = "debug",
};

void log_set_ident(const char *ident)
{
	cur_ident = ident;
}

void log_set_level(enum log_level level)
{
	cur_level = level;
}

enum log_level log_get_level(void)
{
	return cur_level;
}

int log_parse_level(const char *s, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *log_level_name(enum log_level level)
{
	if ((unsigned int)level > LOG_LVL_DEBUG)
		return "?";
	return level_names[level];
}

/* The message is formatted into one buffer and written with one fputs, so
 * that lines from a libbpf callback and our own never interleave mid-line
 * in the journal. */
void log_vmsg(enum log_level level, const char *fmt, va_list ap)
{
	char line[4096];
	int saved = errno;
	size_t n = 0;
	int r;

	if (level > cur_level)
		goto out;
	if (cur_ident) {
		r = snprintf(line, sizeof(line), "%s: ", cur_ident);
		n = r > 0 ? (size_t)r : 0;
	}
	r = snprintf(line + n, sizeof(line) - n, "%s: ", log_level_name(level));
	n += r > 0 ? (size_t)r : 0;
	r = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
	if (r > 0)
		n += (size_t)r;
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	while (n > 0 && line[n - 1] == '\n')
		n--;
	line[n++] = '\n';
	line[n] = '\0';
	fputs(line, stderr);
out:
	errno = saved;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, fmt, ap);
	va_end(ap);
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt,
			va_list ap)
{
	static const char extack[] = "libbpf: Kernel error message";
	enum log_level l = level == LIBBPF_WARN ? LOG_LVL_WARN : LOG_LVL_DEBUG;

	/* Netlink's extended ack for a failed request: the caller learns of
	 * the failure from the return value and logs it with context;
	 * probing queries (is our tc filter there?) fail this way normally. */
	if (strncmp(fmt, extack, sizeof(extack) - 1) == 0)
		l = LOG_LVL_DEBUG;

	log_vmsg(l, fmt, ap);
	return 0;
}

void log_libbpf_init(void)
{
	libbpf_set_print(libbpf_print);
}
