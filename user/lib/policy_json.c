/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Tenant policy: the JSON form of a tenant, as the control protocol, the
 * state file and the fleet's policy store carry it; decoding validates.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>

#include "policy_int.h"

json_t *policy_tenant_to_json(const struct policy_tenant *t)
{
	char buf[INET6_ADDRSTRLEN + 8];
	json_t *j, *match, *ports;

	policy_format_rate(&t->rate, buf, sizeof(buf));
	match = json_array();
	ports = json_array();
	j = json_pack("{s:s%, s:s, s:I, s:o, s:o, s:s, s:b}",
		      "name", t->name, strnlen(t->name, sizeof(t->name)),
		      "rate", buf, "burst", (json_int_t)t->burst,
		      "match", match, "ports", ports,
		      "action", policy_action_name(t->action),
		      "shadow", t->shadow);
	if (j && t->overshoot)
		json_object_set_new(j, "overshoot", json_integer((json_int_t)t->overshoot));
	if (j)
		json_object_set_new(j, "fail", json_string(policy_fail_name(t->fail)));
	/* only when not the default: tenants of before read the same */
	if (j && t->direction != POLICY_DIR_IN)
		json_object_set_new(j, "direction",
				    json_string(policy_direction_name(t->direction)));
	if (j && t->max_conns)
		json_object_set_new(j, "max_conns", json_integer((json_int_t)t->max_conns));
	if (j && t->verify != POLICY_VERIFY_NONE)
		json_object_set_new(j, "verify",
				    json_string(policy_verify_name(t->verify)));
	if (j && t->src_rate.count) {
		policy_format_rate(&t->src_rate, buf, sizeof(buf));
		json_object_set_new(j, "per_source", json_string(buf));
		json_object_set_new(j, "per_source_burst",
				    json_integer((json_int_t)t->src_burst));
		snprintf(buf, sizeof(buf), "/%u,/%u", t->src_len4, t->src_len6);
		json_object_set_new(j, "source_mask", json_string(buf));
	}
	if (j && t->shards > 1)
		json_object_set_new(j, "shards", json_integer((json_int_t)t->shards));
	if (j && t->weight > 1)
		json_object_set_new(j, "weight", json_integer((json_int_t)t->weight));
	if (!j)
		return NULL;
	for (unsigned int i = 0; i < t->n_match && i < POLICY_MAX_PREFIXES; i++) {
		policy_format_prefix(&t->match[i], buf, sizeof(buf));
		if (json_array_append_new(match, json_string(buf)) < 0)
			goto fail;
	}
	for (unsigned int i = 0; i < t->n_ports && i < POLICY_MAX_PORTS; i++)
		if (json_array_append_new(ports, json_integer(t->ports[i])) < 0)
			goto fail;
	return j;
fail:
	json_decref(j);
	return NULL;
}

/* The same text of a rate (policy_format_rate()): its count, and its
 * period's unit. */
static bool rate_same(const struct policy_rate *x, const struct policy_rate *y)
{
	char ux = x->period_s == 3600 ? 'h' : x->period_s == 60 ? 'm' : 's';
	char uy = y->period_s == 3600 ? 'h' : y->period_s == 60 ? 'm' : 's';

	return x->count == y->count && ux == uy;
}

/* The same text of a prefix (policy_format_prefix()): the address bytes
 * of its family only. */
static bool prefix_same(const struct policy_prefix *x, const struct policy_prefix *y)
{
	return x->family == y->family && x->len == y->len &&
	       memcmp(x->addr, y->addr, x->family == AF_INET ? 4 : 16) == 0;
}

bool policy_same(const struct policy_tenant *x, const struct policy_tenant *y)
{
	unsigned int nx = x->n_match < POLICY_MAX_PREFIXES ? x->n_match : POLICY_MAX_PREFIXES;
	unsigned int ny = y->n_match < POLICY_MAX_PREFIXES ? y->n_match : POLICY_MAX_PREFIXES;
	unsigned int px = x->n_ports < POLICY_MAX_PORTS ? x->n_ports : POLICY_MAX_PORTS;
	unsigned int py = y->n_ports < POLICY_MAX_PORTS ? y->n_ports : POLICY_MAX_PORTS;

	/* each field as policy_tenant_to_json() writes it, or leaves it out */
	if (strncmp(x->name, y->name, sizeof(x->name)) != 0 ||
	    !rate_same(&x->rate, &y->rate) || x->burst != y->burst ||
	    x->action != y->action || x->shadow != y->shadow ||
	    x->overshoot != y->overshoot || x->fail != y->fail ||
	    x->direction != y->direction || x->max_conns != y->max_conns ||
	    x->verify != y->verify || (x->src_rate.count != 0) != (y->src_rate.count != 0) ||
	    (x->shards > 1 ? x->shards : 1) != (y->shards > 1 ? y->shards : 1) ||
	    (x->weight > 1 ? x->weight : 1) != (y->weight > 1 ? y->weight : 1) ||
	    nx != ny || px != py)
		return false;
	if (x->src_rate.count &&
	    (!rate_same(&x->src_rate, &y->src_rate) || x->src_burst != y->src_burst ||
	     x->src_len4 != y->src_len4 || x->src_len6 != y->src_len6))
		return false;
	for (unsigned int i = 0; i < nx; i++)
		if (!prefix_same(&x->match[i], &y->match[i]))
			return false;
	return memcmp(x->ports, y->ports, px * sizeof(x->ports[0])) == 0;
}

/* A cursor writing into a buffer of POLICY_TEXT_MAX bytes, which the
 * longest tenant cannot fill (64 prefixes of at most 49 bytes, 16 ports). */
struct text {
	char *p;
	const char *end;
};

static void put(struct text *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void put(struct text *x, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(x->p, (size_t)(x->end - x->p), fmt, ap);
	va_end(ap);
	if (n > 0)
		x->p = n < x->end - x->p ? x->p + n : (char *)x->end - 1;
}

/* An IPv4 prefix as inet_ntop and "/%u" write it, without their printf:
 * a million of them are most of a large set's text. */
static void put_prefix4(struct text *x, const struct policy_prefix *p,
			bool comma)
{
	unsigned int v[5] = { p->addr[0], p->addr[1], p->addr[2], p->addr[3],
			      p->len };
	char *q = x->p;

	if (comma)
		*q++ = ',';
	*q++ = '"';
	for (int i = 0; i < 5; i++) {
		if (v[i] >= 100)
			*q++ = (char)('0' + v[i] / 100);
		if (v[i] >= 10)
			*q++ = (char)('0' + v[i] / 10 % 10);
		*q++ = (char)('0' + v[i] % 10);
		*q++ = i < 3 ? '.' : i == 3 ? '/' : '"';
	}
	*q = '\0';
	x->p = q;
}

size_t policy_tenant_text(const struct policy_tenant *t,
			  const struct policy_text_ids *ids, char *buf)
{
	struct text x = { buf, buf + POLICY_TEXT_MAX };
	char rb[INET6_ADDRSTRLEN + 8];

	/* the keys in sorted order, each optional one only when
	 * policy_tenant_to_json() has it */
	put(&x, "{\"action\":\"%s\",\"burst\":%llu", policy_action_name(t->action),
	    (unsigned long long)t->burst);
	if (t->direction != POLICY_DIR_IN)
		put(&x, ",\"direction\":\"%s\"", policy_direction_name(t->direction));
	put(&x, ",\"fail\":\"%s\"", policy_fail_name(t->fail));
	if (ids && ids->has_ids)
		put(&x, ",\"id\":%llu", (unsigned long long)ids->id);
	put(&x, ",\"match\":[");
	for (unsigned int i = 0; i < t->n_match && i < POLICY_MAX_PREFIXES; i++) {
		/* 22 bytes: ,"255.255.255.255/32" and the NUL */
		if (t->match[i].family == AF_INET && t->match[i].len <= 32 &&
		    x.end - x.p > 22) {
			put_prefix4(&x, &t->match[i], i > 0);
			continue;
		}
		policy_format_prefix(&t->match[i], rb, sizeof(rb));
		put(&x, "%s\"%s\"", i ? "," : "", rb);
	}
	put(&x, "]");
	if (t->max_conns)
		put(&x, ",\"max_conns\":%llu", (unsigned long long)t->max_conns);
	/* names are of A-Z a-z 0-9 _ . - only: nothing to escape */
	put(&x, ",\"name\":\"%.*s\"", (int)strnlen(t->name, sizeof(t->name)),
	    t->name);
	if (t->overshoot)
		put(&x, ",\"overshoot\":%llu", (unsigned long long)t->overshoot);
	if (t->src_rate.count) {
		policy_format_rate(&t->src_rate, rb, sizeof(rb));
		put(&x, ",\"per_source\":\"%s\",\"per_source_burst\":%llu", rb,
		    (unsigned long long)t->src_burst);
	}
	put(&x, ",\"ports\":[");
	for (unsigned int i = 0; i < t->n_ports && i < POLICY_MAX_PORTS; i++)
		put(&x, "%s%u", i ? "," : "", t->ports[i]);
	policy_format_rate(&t->rate, rb, sizeof(rb));
	put(&x, "],\"rate\":\"%s\",\"shadow\":%s", rb,
	    t->shadow ? "true" : "false");
	if (t->shards > 1)
		put(&x, ",\"shards\":%llu", (unsigned long long)t->shards);
	if (t->src_rate.count)
		put(&x, ",\"source_mask\":\"/%u,/%u\"", t->src_len4, t->src_len6);
	if (t->verify != POLICY_VERIFY_NONE)
		put(&x, ",\"verify\":\"%s\"", policy_verify_name(t->verify));
	if (ids && ids->has_ids)
		put(&x, ",\"version\":%llu", (unsigned long long)ids->version);
	if (t->weight > 1)
		put(&x, ",\"weight\":%llu", (unsigned long long)t->weight);
	put(&x, "}");
	return (size_t)(x.p - buf);
}

/* Fields the agent adds to what it returns; accepted (and ignored) on input
 * so that `rlctl --json tenant list` output can be fed back to `apply`. */
static const char *const read_only_keys[] = { "id", "version", "conns" };

static bool known_key(const char *k)
{
	static const char *const keys[] = {
		"name", "rate", "burst", "match", "ports", "action", "shadow",
		"overshoot", "fail", "direction", "max_conns", "per_source",
		"per_source_burst", "source_mask", "verify", "shards", "weight",
	};

	/* the first letters tell most keys apart: a start reads 100,000
	 * tenants of ten keys each */
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (k[0] == keys[i][0] && strcmp(k, keys[i]) == 0)
			return true;
	for (size_t i = 0; i < sizeof(read_only_keys) / sizeof(read_only_keys[0]); i++)
		if (k[0] == read_only_keys[i][0] && strcmp(k, read_only_keys[i]) == 0)
			return true;
	return false;
}

/* The optional fields given as a word, parsed as rlctl parses them. */
#define WORD_FIELD(field, parser)					\
static int parse_##field(const char *s, struct policy_tenant *t, char *err) \
{									\
	return parser(s, &t->field, err);				\
}

WORD_FIELD(action, policy_parse_action)
WORD_FIELD(fail, policy_parse_fail)
WORD_FIELD(direction, policy_parse_direction)
WORD_FIELD(verify, policy_parse_verify)

static const struct {
	const char *key, *expected;
	int (*parse)(const char *s, struct policy_tenant *t, char *err);
} word_fields[] = {
	{ "action", "\"drop\" or \"rst\"", parse_action },
	{ "fail", "\"static\", \"allow\" or \"deny\"", parse_fail },
	{ "direction", "\"in\" or \"out\"", parse_direction },
	{ "verify", "\"none\", \"syncookie\" or \"syncookie-answer\"",
	  parse_verify },
};

/* "per_source": "RATE", "per_source_burst": N (default: one second of
 * the rate), "source_mask": "/N4,/N6" (default /32,/64). */
static int source_from_json(const json_t *j, struct policy_tenant *t,
			    char *err)
{
	const json_t *v = json_object_get(j, "per_source");
	json_int_t b;

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return fail(err, "field 'per_source' must be a rate (e.g. "
			    "\"10/s\")");
	if (policy_parse_rate(json_string_value(v), &t->src_rate, err))
		return -EINVAL;
	t->src_burst = policy_default_burst(&t->src_rate);
	v = json_object_get(j, "per_source_burst");
	if (v && !json_is_null(v)) {
		b = json_integer_value(v);
		if (!json_is_integer(v) || b < 1 || b > (json_int_t)POLICY_BURST_MAX)
			return fail(err, "field 'per_source_burst' must be a whole "
				    "number from 1 to %llu", POLICY_BURST_MAX);
		t->src_burst = (uint64_t)b;
	}
	t->src_len4 = POLICY_SRC_LEN4;
	t->src_len6 = POLICY_SRC_LEN6;
	v = json_object_get(j, "source_mask");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v))
			return fail(err, "field 'source_mask' must be a string "
				    "(e.g. \"/32,/64\")");
		if (policy_parse_source_mask(json_string_value(v), &t->src_len4,
					     &t->src_len6, err))
			return -EINVAL;
	}
	return 0;
}

/* An optional whole-number field from lo (lo_doc says what it means) to
 * hi; absent or null leaves *out as it is. */
static int count_field(const json_t *j, const char *key, json_int_t lo,
		       const char *lo_doc, unsigned long long hi, uint64_t *out,
		       char *err)
{
	const json_t *v = json_object_get(j, key);
	json_int_t n = json_integer_value(v);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || n < lo || (unsigned long long)n > hi)
		return fail(err, "field '%s' must be a whole number from %s to %llu",
			    key, lo_doc, hi);
	*out = (uint64_t)n;
	return 0;
}

/* from_json's work, the prefixes read into match (room for
 * POLICY_MAX_PREFIXES) and left for the caller to give t. */
static int tenant_from_json(const json_t *j, struct policy_tenant *t,
			    struct policy_prefix *match, char *err)
{
	const json_t *v, *item;
	const char *key;
	bool cap_only = false;
	size_t i;

	memset(t, 0, sizeof(*t));
	t->match = match;
	if (!json_is_object(j))
		return fail(err, "a tenant must be a JSON object");
	json_object_foreach((json_t *)j, key, v)
		if (!known_key(key))
			return fail(err, "unknown field '" ECHO "': expected name, "
				    "rate, burst, match, ports, action, shadow, "
				    "overshoot, fail, direction, max_conns, per_source, "
				    "per_source_burst, source_mask, verify, shards, weight", key);

	v = json_object_get(j, "name");
	if (!json_is_string(v))
		return fail(err, "field 'name' is missing or not a string");
	if (strlen(json_string_value(v)) != json_string_length(v))
		return fail(err, "field 'name' contains a NUL character");
	if (policy_parse_name(json_string_value(v), t->name, err) < 0)
		return -EINVAL;

	v = json_object_get(j, "rate");
	if (!v && json_integer_value(json_object_get(j, "max_conns")) > 0) {
		/* A cap alone, as `rlctl tenant set NAME --max-conns N`
		 * makes it: the highest rate there is, which no host
		 * reaches, so that only the cap refuses. */
		t->rate = (struct policy_rate){ POLICY_RATE_MAX, 1 };
		cap_only = true;
	} else if (!json_is_string(v)) {
		return fail(err, "field 'rate' is missing or not a string "
			    "(e.g. \"100/s\"; only a tenant with max_conns may "
			    "leave it out)");
	} else if (policy_parse_rate(json_string_value(v), &t->rate, err) < 0) {
		return -EINVAL;
	}

	v = json_object_get(j, "burst");
	if (!v || json_is_null(v)) {
		t->burst = cap_only ? POLICY_BURST_MAX :
				      policy_default_burst(&t->rate);
	} else if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		   (uint64_t)json_integer_value(v) > POLICY_BURST_MAX) {
		return fail(err, "field 'burst' must be a whole number from 1 "
			    "to %llu", POLICY_BURST_MAX);
	} else {
		t->burst = (uint64_t)json_integer_value(v);
	}

	v = json_object_get(j, "match");
	if (!json_is_array(v) || json_array_size(v) == 0)
		return fail(err, "field 'match' must be a non-empty array of "
			    "prefixes (e.g. [\"192.0.2.0/24\"])");
	if (json_array_size(v) > POLICY_MAX_PREFIXES)
		return fail(err, "field 'match' has %zu prefixes, at most %d "
			    "allowed", json_array_size(v), POLICY_MAX_PREFIXES);
	json_array_foreach(v, i, item) {
		if (!json_is_string(item))
			return fail(err, "field 'match' item %zu is not a string",
				    i);
		if (policy_parse_prefix(json_string_value(item),
					&t->match[i], err) < 0)
			return -EINVAL;
		t->n_match = (unsigned int)i + 1;
	}

	v = json_object_get(j, "ports");
	if (v && !json_is_null(v)) {
		if (!json_is_array(v))
			return fail(err, "field 'ports' must be an array of port "
				    "numbers ([] for any port)");
		if (json_array_size(v) > POLICY_MAX_PORTS)
			return fail(err, "field 'ports' has %zu ports, at most %d "
				    "allowed", json_array_size(v),
				    POLICY_MAX_PORTS);
		json_array_foreach(v, i, item) {
			json_int_t p = json_integer_value(item);

			if (!json_is_integer(item) || p < 1 || p > 65535)
				return fail(err, "field 'ports' item %zu: expected "
					    "a whole number from 1 to 65535", i);
			t->ports[i] = (uint16_t)p;
			t->n_ports = (unsigned int)i + 1;
		}
	}

	v = json_object_get(j, "shadow");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return fail(err, "field 'shadow' must be true or false");
		t->shadow = json_is_true(v);
	}

	if (count_field(j, "overshoot", 0, "0 (automatic)", POLICY_BURST_MAX,
			&t->overshoot, err) < 0 ||
	    count_field(j, "max_conns", 0, "0 (no cap)", POLICY_CONNS_MAX,
			&t->max_conns, err) < 0 ||
	    count_field(j, "shards", 1, "1", POLICY_SHARDS_MAX, &t->shards,
			err) < 0 ||
	    count_field(j, "weight", 1, "1", POLICY_WEIGHT_MAX, &t->weight,
			err) < 0)
		return -EINVAL;

	if (source_from_json(j, t, err))
		return -EINVAL;

	for (size_t k = 0; k < sizeof(word_fields) / sizeof(word_fields[0]); k++) {
		v = json_object_get(j, word_fields[k].key);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_string(v))
			return fail(err, "field '%s' must be %s", word_fields[k].key,
				    word_fields[k].expected);
		if (word_fields[k].parse(json_string_value(v), t, err) < 0)
			return -EINVAL;
	}
	return policy_validate(t, err);
}

int policy_tenant_from_json(const json_t *j, struct policy_tenant *t, char *err)
{
	struct policy_prefix match[POLICY_MAX_PREFIXES];
	unsigned int n;
	int e = tenant_from_json(j, t, match, err);

	n = e ? 0 : t->n_match;
	t->match = NULL;
	t->n_match = 0;
	if (!e && policy_set_prefixes(t, match, n))
		e = fail(err, "out of memory");
	return e;
}
