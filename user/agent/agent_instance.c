// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The host-wide instance limit: its state file (AGENT_INSTANCE_FILE,
 * {"instance": {...}} or {"instance": null}) and the kernel's `instance`
 * map.  Purely local: the fleet never hears of it, and it holds while
 * Redis is away.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "log.h"
#include "state.h"

int agent_instance_start(struct agent *a)
{
	char err[POLICY_ERR_MAX + STATE_ERR_MAX];
	struct rl_instance_limit il;
	json_t *doc = NULL, *v;
	int e;

	e = state_load(a->opts.state_dir, AGENT_INSTANCE_FILE, &doc, err,
		       sizeof(err));
	if (e == -ENOENT) {
		kern_instance_set(&a->kern, NULL);
		return 0;
	}
	if (e) {
		log_error("couldn't read instance limit on '%s/%s': %s; the "
			  "kernel's is left as it is", a->opts.state_dir,
			  AGENT_INSTANCE_FILE, err);
		return e == -EBADMSG ? 0 : e;
	}
	v = json_is_object(doc) ? json_object_get(doc, "instance") : NULL;
	if (!v || json_is_null(v)) {
		kern_instance_set(&a->kern, NULL);
	} else if (instance_from_json(v, &il, err)) {
		log_error("couldn't read instance limit on '%s/%s': %s; the "
			  "kernel's is left as it is", a->opts.state_dir,
			  AGENT_INSTANCE_FILE, err);
	} else {
		kern_instance_set(&a->kern, &il);
		a->instance = il;
		a->instance_on = true;
		log_info("instance limit: max-conns %llu%s",
			 (unsigned long long)il.max_conns,
			 il.rate.count ? ", with a rate" : "");
	}
	json_decref(doc);
	return 0;
}

static int save(struct agent *a, const struct rl_instance_limit *il)
{
	json_t *doc = json_pack("{s:o}", "instance",
				il ? instance_to_json(il) : json_null());
	int e;

	if (!doc)
		return -ENOMEM;
	e = state_save(a->opts.state_dir, AGENT_INSTANCE_FILE, doc);
	json_decref(doc);
	return e;
}

enum agent_code agent_instance_set(struct agent *a,
				   const struct rl_instance_limit *il, char *err)
{
	int e;

	if (instance_validate(il, err))
		return AGENT_INVALID;
	e = save(a, il);
	if (e) {
		snprintf(err, POLICY_ERR_MAX, "couldn't write '%s/%s': %s",
			 a->opts.state_dir, AGENT_INSTANCE_FILE, strerror(-e));
		return AGENT_INTERNAL;
	}
	kern_instance_set(&a->kern, il);
	a->instance = *il;
	a->instance_on = true;
	return AGENT_OK;
}

enum agent_code agent_instance_del(struct agent *a, char *err)
{
	int e;

	if (!a->instance_on) {
		snprintf(err, POLICY_ERR_MAX, "no instance limit is set");
		return AGENT_NOT_FOUND;
	}
	e = save(a, NULL);
	if (e) {
		snprintf(err, POLICY_ERR_MAX, "couldn't write '%s/%s': %s",
			 a->opts.state_dir, AGENT_INSTANCE_FILE, strerror(-e));
		return AGENT_INTERNAL;
	}
	kern_instance_set(&a->kern, NULL);
	memset(&a->instance, 0, sizeof(a->instance));
	a->instance_on = false;
	return AGENT_OK;
}
