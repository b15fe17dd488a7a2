// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The host-wide instance limit: parsing, JSON, the kernel's slot (see
 * instance.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "instance.h"

int instance_parse_rate(const char *s, struct rl_instance_limit *il, char *err)
{
	return policy_parse_rate_burst(s, &il->rate, &il->burst, err);
}

int instance_validate(const struct rl_instance_limit *il, char *err)
{
	if (!il->max_conns && !il->rate.count) {
		snprintf(err, POLICY_ERR_MAX, "an instance limit needs "
			 "--max-conns N (1 to %u) or --rate R, or both",
			 (unsigned int)POLICY_CONNS_MAX);
		return -EINVAL;
	}
	if (il->max_conns > POLICY_CONNS_MAX) {
		snprintf(err, POLICY_ERR_MAX, "bad max-conns '%llu': expected 0 "
			 "to %u", (unsigned long long)il->max_conns,
			 (unsigned int)POLICY_CONNS_MAX);
		return -EINVAL;
	}
	if (il->rate.count && (il->burst < 1 ||
			       il->burst > policy_burst_max(&il->rate))) {
		snprintf(err, POLICY_ERR_MAX, "bad burst '%llu': expected 1 to "
			 "%llu for this rate", (unsigned long long)il->burst,
			 (unsigned long long)policy_burst_max(&il->rate));
		return -EINVAL;
	}
	return 0;
}

json_t *instance_to_json(const struct rl_instance_limit *il)
{
	json_t *j = json_pack("{s:I}", "max_conns", (json_int_t)il->max_conns);
	char rate[64];

	if (j && il->rate.count) {
		policy_format_rate(&il->rate, rate, sizeof(rate));
		json_object_set_new(j, "rate", json_string(rate));
		json_object_set_new(j, "burst", json_integer((json_int_t)il->burst));
	}
	return j;
}

int instance_from_json(const json_t *j, struct rl_instance_limit *il,
		       char *err)
{
	json_t *v;

	memset(il, 0, sizeof(*il));
	if (!json_is_object(j)) {
		snprintf(err, POLICY_ERR_MAX, "field 'instance' is not an "
			 "object");
		return -EINVAL;
	}
	v = json_object_get(j, "max_conns");
	if (v && (!json_is_integer(v) || json_integer_value(v) < 0)) {
		snprintf(err, POLICY_ERR_MAX, "field 'max_conns' is not a "
			 "count");
		return -EINVAL;
	}
	il->max_conns = v ? (uint64_t)json_integer_value(v) : 0;
	v = json_object_get(j, "rate");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v)) {
			snprintf(err, POLICY_ERR_MAX, "field 'rate' is not a "
				 "string");
			return -EINVAL;
		}
		if (policy_parse_rate(json_string_value(v), &il->rate, err))
			return -EINVAL;
		il->burst = policy_default_burst(&il->rate);
		v = json_object_get(j, "burst");
		if (v && (!json_is_integer(v) || json_integer_value(v) < 1)) {
			snprintf(err, POLICY_ERR_MAX, "field 'burst' is not a "
				 "count of 1 or more");
			return -EINVAL;
		}
		if (v)
			il->burst = (uint64_t)json_integer_value(v);
	}
	return instance_validate(il, err);
}

void instance_configure(struct rl_tenant *in, const struct rl_instance_limit *il)
{
	bool on = __atomic_load_n(&in->mode, __ATOMIC_ACQUIRE) != RL_MODE_NONE;
	bool was_cap = on && (in->flags & RL_F_CONNCAP);
	uint64_t interval = il->rate.count ? policy_interval_ns(&il->rate) : 0;

	if (!il->max_conns)
		__atomic_store_n(&in->flags, 0, __ATOMIC_RELEASE);
	if (il->max_conns && !was_cap) {
		__atomic_fetch_add(&in->conn_epoch, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&in->conns, 0, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&in->conn_slots, (int64_t)il->max_conns,
			 __ATOMIC_RELEASE);
	if (!on || in->interval_ns != interval || in->burst != il->burst) {
		/* a new rate starts with a full bucket */
		__atomic_store_n(&in->interval_ns, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&in->tat, 0, __ATOMIC_RELEASE);
		in->burst = il->rate.count ? il->burst : 0;
		/* policy_burst_max keeps burst x interval within 64 bits */
		in->tolerance_ns = in->burst * interval;
		__atomic_store_n(&in->interval_ns, interval, __ATOMIC_RELEASE);
	}
	in->action = RL_ACT_DROP;
	__atomic_store_n(&in->flags, il->max_conns ? RL_F_CONNCAP : 0,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&in->mode, RL_MODE_STANDALONE, __ATOMIC_RELEASE);
}

void instance_clear(struct rl_tenant *in)
{
	__atomic_store_n(&in->mode, RL_MODE_NONE, __ATOMIC_RELEASE);
	__atomic_store_n(&in->flags, 0, __ATOMIC_RELEASE);
	__atomic_fetch_add(&in->conn_epoch, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&in->conns, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&in->conn_slots, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&in->interval_ns, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&in->tat, 0, __ATOMIC_RELEASE);
}
