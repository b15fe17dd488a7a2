/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Logging for rlgate's user-space programs: four levels, one line per
 * message on stderr, libbpf's own output routed through the same filter.
 */
#ifndef RL_LOG_H
#define RL_LOG_H

#include <stdarg.h>

enum log_level {
	LOG_LVL_ERROR = 0,
	LOG_LVL_WARN,
	LOG_LVL_INFO,
	LOG_LVL_DEBUG,
};

/* Program name printed in front of every line ("rlagent"); the pointer is
 * kept, so pass a string that lives as long as the program. */
void log_set_ident(const char *ident);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* "error", "warn", "info" or "debug" to a level: 0, or -EINVAL. */
int log_parse_level(const char *s, enum log_level *out);
const char *log_level_name(enum log_level level);

/* Writes one line if level is enabled.  A trailing newline in fmt is
 * optional; exactly one is printed.  errno is preserved, so a caller may log
 * between a failing call and its use of errno. */
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void log_vmsg(enum log_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

#define log_error(...)	log_msg(LOG_LVL_ERROR, __VA_ARGS__)
#define log_warn(...)	log_msg(LOG_LVL_WARN, __VA_ARGS__)
#define log_info(...)	log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...)	log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

/* Routes libbpf's messages through log_msg: its warnings at warn, its info
 * and debug output at debug (libbpf's "info" is chatter an operator does not
 * need by default). */
void log_libbpf_init(void);

#endif /* RL_LOG_H */
