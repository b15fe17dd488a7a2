/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Between the control socket's framing (ctl.c) and its commands
 * (ctl_cmd.c): one request line in, one reply object out.
 */
#ifndef RL_CTL_CMD_H
#define RL_CTL_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "agent.h"

/* What a command may ask of the connection it came on. */
struct ctl_call {
	struct agent *a;
	bool exit_after;	/* stop the agent once the reply is sent */
};

/* Answers one request (a line without its newline, not empty).  The
 * reply, or NULL if jansson could not build it. */
json_t *ctl_answer(struct ctl_call *call, const char *line, size_t len);

/* {"ok":false,"error":msg,"code":name}, msg made valid UTF-8. */
json_t *ctl_error(enum agent_code code, const char *msg);

/* The tenant that req's optional field "name" names: NULL with *t set
 * (NULL when req names none), or the error reply to return. */
json_t *ctl_optional_tenant(struct agent *a, const json_t *req,
			    struct agent_tenant **t);

#endif /* RL_CTL_CMD_H */
