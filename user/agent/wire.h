/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* How main.c joins rlagent's modules in fleet mode: the agent (its kernel
 * and tenant set) becomes the broker's host, and the broker the listener of
 * the agent's policy changes.  Only this file and main.c know both sides;
 * the agent and the broker know nothing of each other.
 */
#ifndef RL_WIRE_H
#define RL_WIRE_H

#include "agent.h"
#include "broker.h"

/* Fills h with hooks onto a, its kernel maps and its tenant set.  a must
 * outlive the broker opened with h. */
void wire_broker_host(struct agent *a, struct broker_host *h);

/* Points a's hooks at broker b: from here on b hears of every change of
 * the tenant set. */
void wire_agent_hooks(struct agent *a, struct broker *b);

#endif /* RL_WIRE_H */
