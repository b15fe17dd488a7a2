/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The control protocol's commands (docs/control-protocol.md): a request
 * object in, checked field by field, one of the agent's all-or-nothing
 * operations, a reply object out.  ctl.c frames them on the socket.
 */
#include <errno.h>
#include <fnmatch.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "agent_shed.h"
#include "broker.h"
#include "ctl_cmd.h"
#include "ctl_sources.h"
#include "jsonflat.h"
#include "log.h"
#include "mem.h"
#include "metrics.h"
#include "preload.h"

json_t *ctl_error(enum agent_code code, const char *msg)
{
	char clean[POLICY_ERR_MAX * 2];

	/* Every message gets an answer: one quoting a cut-off character of
	 * the client's input would not be a JSON string otherwise. */
	snprintf(clean, sizeof(clean), "%s", msg);
	policy_clean_utf8(clean);
	return json_pack("{s:b,s:s,s:s}", "ok", 0, "error", clean, "code",
			 agent_code_name(code));
}

/* Reads a tenant object from a request.  "id" is read-only: a client may
 * send back what tenant.get returned, so it is ignored rather than
 * refused. */
static int tenant_arg(const json_t *j, struct policy_tenant *t, char *err)
{
	json_t *copy;
	int r;

	if (!json_is_object(j)) {
		snprintf(err, POLICY_ERR_MAX, "a tenant must be a JSON object");
		return -EINVAL;
	}
	copy = json_copy((json_t *)j);
	if (!copy) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return -ENOMEM;
	}
	json_object_del(copy, "id");
	r = policy_tenant_from_json(copy, t, err);
	json_decref(copy);
	return r;
}

/* The request's "name", or NULL with the error reply in *r. */
static const char *name_arg(const json_t *req, json_t **r)
{
	json_t *v = json_object_get(req, "name");

	if (!json_is_string(v)) {
		*r = ctl_error(AGENT_INVALID, "field 'name' is missing or not a "
			       "string");
		return NULL;
	}
	return json_string_value(v);
}

/* The instance limit as instance.get, status and stats show it: its
 * settings, connections in flight and refusals; null when none is set. */
/* Why an instance limit holds nothing on an agent attached nowhere (a
 * preload pool alone): docs/operations.md, "The instance limit". */
#define INSTANCE_UNENFORCED	"no interface attached: only the kernel program " \
				"enforces the instance limit; the preload library " \
				"does not"

static json_t *instance_json(struct agent *a)
{
	struct kern_instance ki;
	json_t *j;

	if (!a->instance_on)
		return json_null();
	j = instance_to_json(&a->instance);
	kern_instance_read(&a->kern, &ki);
	if (j) {
		json_object_set_new(j, "conns", json_integer((json_int_t)ki.in_flight));
		json_object_set_new(j, "denied_cap",
				    json_integer((json_int_t)ki.denied_cap));
		json_object_set_new(j, "denied_rate",
				    json_integer((json_int_t)ki.denied_rate));
		json_object_set_new(j, "conns_forgotten",
				    json_integer((json_int_t)ki.forgotten));
		json_object_set_new(j, "enforced",
				    json_boolean(a->kern.n_ifaces > 0));
		if (!a->kern.n_ifaces)
			json_object_set_new(j, "not_enforced",
					    json_string(INSTANCE_UNENFORCED));
	}
	return j;
}

static json_t *cmd_version(struct ctl_call *call, const json_t *req)
{
	(void)call;
	(void)req;
	return json_pack("{s:b,s:s}", "ok", 1, "version", RLGATE_VERSION);
}

/* The agent's resident set and its own part of it (mem_statm()), in
 * bytes; both 0 if /proc cannot say. */
static void agent_rss(uint64_t *rss, uint64_t *anon)
{
	char buf[256];
	ssize_t n;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);

	*rss = *anon = 0;
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	if (mem_statm(buf, sysconf(_SC_PAGESIZE), rss, anon))
		*rss = *anon = 0;
}

/* Kernel map bytes, the agent's resident set and its own memory (the
 * resident set less the kernel's maps it maps and the files of its
 * program and libraries), in all and per tenant in the policy, and the
 * classifier's fill. */
/* Seconds of the loop's turns status shows, latest first */
#define STATUS_TURN_SECONDS	60

/* How long the loop's turns ran, by the second they began in (latest
 * first, the current one partly): whatever ran in them - a scrape's
 * slice, a sweep of the counters, a request, a lease - nothing else on the
 * loop ran meanwhile.  And how many sweeps of the tenants' counters were
 * whole. */
static json_t *loop_json(const struct agent *a)
{
	json_t *wall = json_array(), *cpu = json_array();
	uint64_t now = loop_now_ns(), w, c, wmax = 0, cmax = 0;

	for (unsigned int i = 0; i < STATUS_TURN_SECONDS && wall && cpu; i++) {
		/* the second i back, alone */
		loop_longest_turn(a->loop, 1, now - i * 1000000000ULL, &w, &c);
		json_array_append_new(wall, json_integer((json_int_t)(w / 1000)));
		json_array_append_new(cpu, json_integer((json_int_t)(c / 1000)));
		wmax = w > wmax ? w : wmax;
		cmax = c > cmax ? c : cmax;
	}
	return json_pack("{s:I,s:I,s:I,s:o*,s:o*}",
			 "sample_sweeps", (json_int_t)agent_sweeps(a),
			 "longest_turn_us", (json_int_t)(wmax / 1000),
			 "longest_turn_cpu_us", (json_int_t)(cmax / 1000),
			 "turn_us_by_s", wall, "turn_cpu_us_by_s", cpu);
}

static json_t *memory_json(struct agent *a)
{
	uint64_t kernel = kern_map_bytes(&a->kern), rss, anon;
	uint64_t n = a->n_tenants;
	json_t *m;

	agent_rss(&rss, &anon);
	/* the classifier's fill: tables of 256 entries in use, of one half */
	m = json_pack("{s:I,s:I,s:I,s:I,s:I}",
		      "kernel_map_bytes", (json_int_t)kernel,
		      "agent_rss_bytes", (json_int_t)rss,
		      "agent_anon_bytes", (json_int_t)anon,
		      "rule_tables", (json_int_t)a->kern.cls_used,
		      "rule_tables_max", (json_int_t)a->kern.cls.half);
	/* nothing to divide by without tenants */
	if (m && n) {
		json_object_set_new(m, "kernel_bytes_per_tenant",
				    json_integer((json_int_t)(kernel / n)));
		json_object_set_new(m, "agent_bytes_per_tenant",
				    json_integer((json_int_t)(rss / n)));
		json_object_set_new(m, "agent_anon_bytes_per_tenant",
				    json_integer((json_int_t)(anon / n)));
	}
	return m;
}

static json_t *cmd_status(struct ctl_call *call, const json_t *req)
{
	struct agent *a = call->a;
	json_t *ifs = json_array();

	(void)req;
	for (unsigned int i = 0; i < a->kern.n_ifaces; i++) {
		enum kern_rst_reach reach = kern_rst_reach(&a->kern.ifaces[i]);
		json_t *ifc = json_pack("{s:s,s:s,s:s}", "name",
			a->kern.ifaces[i].name, "attach",
			kern_mode_name(a->kern.ifaces[i].mode),
			"rst", kern_rst_reach_name(reach));

		if (ifc && kern_rst_advice(reach))
			json_object_set_new(ifc, "rst_warning",
					    json_string(kern_rst_advice(reach)));
		json_array_append_new(ifs, ifc);
	}
	json_t *r = json_pack("{s:b,s:s,s:I,s:s,s:o,s:I,s:s,s:s,s:I}",
			      "ok", 1, "version", RLGATE_VERSION,
			      "uptime_s", (json_int_t)((loop_now_ns() -
						       a->start_mono_ns) / 1000000000ULL),
			      "mode", a->broker ? "fleet" : "standalone",
			      "interfaces", ifs,
			      "tenants", (json_int_t)a->n_tenants,
			      "pin_dir", a->kern.pin_dir,
			      "state_dir", a->opts.state_dir,
			      "policy_version", (json_int_t)a->policy_version);

	if (r && a->broker) {
		struct broker_stats bs;

		broker_stats(a->broker, &bs);
		json_object_set_new(r, "redis", json_pack("{s:s,s:s,s:I,s:I}",
				    "address", bs.address, "state", bs.state,
				    "calls", (json_int_t)bs.redis_calls,
				    "errors", (json_int_t)bs.redis_errors));
		json_object_set_new(r, "live_agents", json_integer((json_int_t)bs.live_agents));
		json_object_set_new(r, "agent_id", json_string(bs.agent_id));
		json_object_set_new(r, "agent_instance", json_string(bs.nonce));
		json_object_set_new(r, "agent_id_conflict", json_boolean(bs.agent_id_conflict));
		json_object_set_new(r, "broker", json_string(bs.healthy ? "healthy" :
							     "degraded"));
		json_object_set_new(r, "broker_transitions",
				    json_integer((json_int_t)bs.transitions));
		if (!bs.healthy) {
			json_object_set_new(r, "degraded_since",
					    json_integer((json_int_t)bs.degraded_since));
			json_object_set_new(r, "degraded_reason", json_string(bs.reason));
		}
	}
	if (r && a->kern.preload)
		json_object_set_new(r, "preload", preload_status_json(a->kern.preload,
								      loop_now_ns()));
	if (r)
		json_object_set_new(r, "instance", instance_json(a));
	/* only while some tenant verifies */
	json_t *verify = r ? agent_verify_json(a) : NULL;

	if (verify)
		json_object_set_new(r, "verify", verify);
	/* only while shedding is on (rlagent --shed-at) */
	json_t *shed = r ? agent_shed_json(a) : NULL;

	if (shed)
		json_object_set_new(r, "shed", shed);
	if (r)
		json_object_set_new(r, "memory", memory_json(a));
	if (r)
		json_object_set_new(r, "per_source_table", ctl_src_table_json(a));
	if (r && a->metrics)
		json_object_set_new(r, "metrics", metrics_status_json(a->metrics));
	if (r)
		json_object_set_new(r, "loop", loop_json(a));
	return r;
}

/* The overlaps a change leaves (policy_find_overlaps()) that the reply
 * shows and the log keeps, at most: an apply of a wide default over
 * thousands of tenants would otherwise fill both. */
#define OVERLAPS_SHOWN	8

static void on_overlap(void *ctx, size_t wide, size_t narrow, const char *msg)
{
	json_t *arr = ctx;

	(void)wide;
	(void)narrow;
	if (json_array_size(arr) >= OVERLAPS_SHOWN)
		return;
	log_warn("%s", msg);
	json_array_append_new(arr, json_string(msg));
}

/* Warns of the prefixes of the policy in force that hold another tenant's
 * (only those tenant focus is part of, when focus < a->n_tenants): each
 * logged and in reply r's "warnings".  Allowed, so never a refusal. */
static void warn_overlaps(struct agent *a, size_t focus, json_t *r)
{
	json_t *arr;
	long n;

	if (!r || a->n_tenants == 0)
		return;
	arr = json_array();
	if (!arr)
		return;
	n = policy_find_overlaps(&a->tenants[0].pol, sizeof(a->tenants[0]),
				 a->n_tenants, focus, on_overlap, arr);
	if (n < 0)
		log_warn("couldn't look for overlapping prefixes: out of memory");
	if (n > OVERLAPS_SHOWN) {
		char more[128];

		snprintf(more, sizeof(more), "overlap: and %ld more ('rlctl "
			 "apply --dry-run' of the policy lists them all)",
			 n - OVERLAPS_SHOWN);
		log_warn("%s", more);
		json_array_append_new(arr, json_string(more));
	}
	if (json_array_size(arr))
		json_object_set_new(r, "warnings", arr);
	else
		json_decref(arr);
}

static json_t *cmd_tenant_set(struct ctl_call *call, const json_t *req)
{
	struct agent *a = call->a;
	char err[POLICY_ERR_MAX];
	struct policy_tenant t;
	enum agent_code c;
	json_t *r;

	if (!json_object_get(req, "tenant"))
		return ctl_error(AGENT_INVALID, "field 'tenant' is missing");
	if (tenant_arg(json_object_get(req, "tenant"), &t, err))
		return ctl_error(AGENT_INVALID, err);
	c = agent_tenant_set(a, &t, err);
	policy_tenant_free(&t);
	if (c != AGENT_OK)
		return ctl_error(c, err);
	log_info("tenant %s set (slot %u)", t.name, agent_find(a, t.name)->slot);
	r = json_pack("{s:b,s:o}", "ok", 1, "tenant",
		      agent_tenant_json(agent_find(a, t.name)));
	warn_overlaps(a, (size_t)(agent_find(a, t.name) - a->tenants), r);
	return r;
}

/* A capped tenant's bound on connections in flight above its cap across
 * the fleet (policy_conn_bound()): null with fail allow, which has none. */
static void set_conn_bound(json_t *j, uint64_t bound)
{
	json_object_set_new(j, "conn_overshoot_bound", bound == UINT64_MAX ?
			    json_null() : json_integer((json_int_t)bound));
}

/* A tenant as tenant.get and tenant.list return it: with its connections
 * in flight when it has a cap ("conns", read-only), and in fleet mode their
 * bound above the cap. */
static json_t *tenant_json(struct agent *a, const struct agent_tenant *t)
{
	json_t *j = agent_tenant_json(t);
	struct broker_tenant_stats bt;
	struct kern_conns kc;

	if (j && t->pol.max_conns && !kern_tenant_conns(&a->kern, t->slot, &kc))
		json_object_set_new(j, "conns", json_integer(kc.in_flight > 0 ?
							     kc.in_flight : 0));
	if (j && t->pol.max_conns && a->broker) {
		broker_tenant_stats(a->broker, t->slot, &t->pol, &bt);
		set_conn_bound(j, bt.conn_bound);
	}
	return j;
}

static json_t *cmd_tenant_get(struct ctl_call *call, const json_t *req)
{
	json_t *r = NULL;
	const char *name = name_arg(req, &r);
	struct agent_tenant *t;
	char err[POLICY_ERR_MAX];

	if (!name)
		return r;
	t = agent_find(call->a, name);
	if (!t) {
		agent_no_tenant(call->a, name, err);
		return ctl_error(AGENT_NOT_FOUND, err);
	}
	return json_pack("{s:b,s:o}", "ok", 1, "tenant", tenant_json(call->a, t));
}

/* The request's "match", a shell pattern of names (fnmatch), into *glob
 * (NULL: every name).  NULL, or the error to reply. */
static json_t *match_arg(const json_t *req, const char **glob)
{
	json_t *v = json_object_get(req, "match");

	*glob = NULL;
	if (!v || json_is_null(v))
		return NULL;
	if (!json_is_string(v))
		return ctl_error(AGENT_INVALID, "field 'match' is not a string");
	*glob = json_string_value(v);
	return NULL;
}

/* The request's count `key` into *n, 0 when absent (no limit).  NULL, or
 * the error to reply. */
static json_t *count_arg(const json_t *req, const char *key, size_t *n)
{
	json_t *v = json_object_get(req, key);
	char msg[96];

	*n = 0;
	if (!v || json_is_null(v))
		return NULL;
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		snprintf(msg, sizeof(msg), "field '%s' is not a non-negative "
			 "integer (0: no limit)", key);
		return ctl_error(AGENT_INVALID, msg);
	}
	*n = (size_t)json_integer_value(v);
	return NULL;
}

/* Which tenants a list or stats request asks for: the request's "match"
 * (NULL: every name) and "after" (NULL: from the first name). */
struct selection {
	const char *glob;
	const char *after;
};

/* The request's "match" and "after" into *sel.  NULL, or the error to
 * reply. */
static json_t *selection_arg(const json_t *req, struct selection *sel)
{
	json_t *v = json_object_get(req, "after"), *r;
	char name[POLICY_NAME_MAX + 1], err[POLICY_ERR_MAX], msg[POLICY_ERR_MAX + 32];

	sel->after = NULL;
	r = match_arg(req, &sel->glob);
	if (r || !v || json_is_null(v))
		return r;
	if (!json_is_string(v))
		return ctl_error(AGENT_INVALID, "field 'after' is not a string");
	if (policy_parse_name(json_string_value(v), name, err) < 0) {
		snprintf(msg, sizeof(msg), "field 'after': %s", err);
		return ctl_error(AGENT_INVALID, msg);
	}
	sel->after = json_string_value(v);
	return NULL;
}

static bool selected(const struct selection *sel, const char *name)
{
	return (!sel->glob || fnmatch(sel->glob, name, 0) == 0) &&
	       (!sel->after || strcmp(name, sel->after) > 0);
}

/* A tenant's name and place in the set, to list them by name. */
struct named {
	const char *name;
	size_t i;
};

static int named_cmp(const void *pa, const void *pb)
{
	const struct named *a = pa, *b = pb;

	return strcmp(a->name, b->name);
}

/* The selected tenants by name (strcmp order), not in the set's own
 * order, which a deletion, an apply or a restart reshuffles: a list, and
 * the first "limit" of it after a name, stay the same while the tenants
 * do, so that "after" the last name of one page is the next page.  Only
 * the first "limit" (0: all) are encoded, each by encode: a page of a few
 * among 100,000 costs a few.  The array, or the error to reply. */
static json_t *page_by_name(struct agent *a, const struct selection *sel,
			    size_t limit,
			    json_t *(*encode)(struct agent *,
					      const struct agent_tenant *))
{
	struct named *ns = malloc((a->n_tenants + 1) * sizeof(*ns));
	json_t *arr;
	size_t n = 0;

	if (!ns)
		return ctl_error(AGENT_INTERNAL, "out of memory");
	for (size_t i = 0; i < a->n_tenants; i++)
		if (selected(sel, a->tenants[i].pol.name))
			ns[n++] = (struct named){ a->tenants[i].pol.name, i };
	if (n)
		qsort(ns, n, sizeof(*ns), named_cmp);
	if (limit && n > limit)
		n = limit;
	arr = json_array();
	for (size_t k = 0; k < n; k++)
		json_array_append_new(arr, encode(a, &a->tenants[ns[k].i]));
	free(ns);
	return arr;
}

static json_t *cmd_tenant_list(struct ctl_call *call, const json_t *req)
{
	struct selection sel;
	json_t *arr, *r;
	size_t limit;

	r = selection_arg(req, &sel);
	if (!r)
		r = count_arg(req, "limit", &limit);
	if (r)
		return r;
	arr = page_by_name(call->a, &sel, limit, tenant_json);
	if (!json_is_array(arr))
		return arr;
	return json_pack("{s:b,s:o}", "ok", 1, "tenants", arr);
}

static json_t *cmd_tenant_del(struct ctl_call *call, const json_t *req)
{
	json_t *r = NULL;
	const char *name = name_arg(req, &r);
	char err[POLICY_ERR_MAX];
	enum agent_code c;

	if (!name)
		return r;
	c = agent_tenant_del(call->a, name, err);
	if (c != AGENT_OK)
		return ctl_error(c, err);
	log_info("tenant %s deleted", name);
	return json_pack("{s:b}", "ok", 1);
}

/* Applies ts[0..n) (freed here) and answers. */
static json_t *apply_tenants(struct ctl_call *call, struct policy_tenant *ts,
			     size_t n)
{
	char err[POLICY_ERR_MAX];
	unsigned int counts[3] = { 0 };
	enum agent_code c;
	json_t *r;

	c = agent_apply(call->a, ts, n, counts, err);
	policy_tenants_free(ts, n);
	if (c != AGENT_OK)
		return ctl_error(c, err);
	log_info("policy applied: %u added, %u updated, %u removed", counts[0],
		 counts[1], counts[2]);
	r = json_pack("{s:b,s:i,s:i,s:i}", "ok", 1, "added", counts[0],
		      "updated", counts[1], "removed", counts[2]);
	warn_overlaps(call->a, SIZE_MAX, r);
	return r;
}

static json_t *cmd_apply(struct ctl_call *call, const json_t *req)
{
	json_t *arr = json_object_get(req, "tenants"), *item;
	char err[POLICY_ERR_MAX], msg[POLICY_ERR_MAX + 32];
	struct policy_tenant *ts;
	size_t i;

	if (!json_is_array(arr))
		return ctl_error(AGENT_INVALID, "field 'tenants' is missing or "
				 "not an array");
	ts = calloc(json_array_size(arr) + 1, sizeof(*ts));
	if (!ts)
		return ctl_error(AGENT_INTERNAL, "out of memory");
	json_array_foreach(arr, i, item) {
		if (tenant_arg(item, &ts[i], err)) {
			policy_tenants_free(ts, i);
			snprintf(msg, sizeof(msg), "tenant #%zu: %s", i, err);
			return ctl_error(AGENT_INVALID, msg);
		}
	}
	return apply_tenants(call, ts, json_array_size(arr));
}

/*
 * The tenants of an apply request as rlctl writes it,
 * {"cmd":"apply","tenants":[T,...]} with every T a flat object
 * (jsonflat.h), decoded one at a time: a tree of the whole request, a
 * million prefixes, takes seconds to build and to free.  NULL when the line
 * is of another form or a tenant is not valid: the line is then read whole
 * like any other request, and answered the same.
 */
static struct policy_tenant *flat_apply(const char *line, size_t len,
					size_t *n_out)
{
	static const char head[] = "{\"cmd\":\"apply\",\"tenants\":[";
	const char *p = line + sizeof(head) - 1, *end = line + len, *q;
	struct policy_tenant *ts = NULL, *grown;
	size_t cap = 0, n = 0;
	bool in_str = false;

	if (len < sizeof(head) + 2 || memcmp(line, head, sizeof(head) - 1) ||
	    memcmp(end - 2, "]}", 2) || *p != '{')
		return NULL;
	while (p < end - 2) {
		json_t *j;
		int r;

		/* grown with the tenants read, not sized from the line's
		 * braces: a line of braces in strings asks for nothing */
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			grown = reallocarray(ts, cap, sizeof(*ts));
			if (!grown)
				break;
			ts = grown;
		}
		memset(&ts[n], 0, sizeof(ts[n]));

		/* a flat object ends at its first brace outside a string;
		 * jsonflat_load turns down whatever else is in it */
		for (q = p + 1; q < end - 2 && (in_str || *q != '}'); q++)
			if (*q == '"')
				in_str = !in_str;
		j = q < end - 2 ? jsonflat_load(p, (size_t)(q - p) + 1) : NULL;
		if (!j)
			break;
		json_object_del(j, "id");
		r = policy_tenant_from_json(j, &ts[n++], NULL);
		json_decref(j);
		if (r)
			break;
		p = q + 1;
		if (p == end - 2) {
			*n_out = n;
			return ts;
		}
		if (*p != ',' || p[1] != '{')
			break;
		p++;
	}
	policy_tenants_free(ts, n);
	return NULL;
}

/* Counters a stats reply adds by case, each a uint64_t at its offset in
 * the stats struct it is read from. */
struct stat_field {
	const char *key;
	size_t off;
};

#define ST(f)	{ #f, offsetof(struct agent_tenant_stats, f) }
static const struct stat_field conn_fields[] = {
	ST(max_conns), ST(conns), ST(conn_slots), ST(conn_denied),
	ST(conns_opened), ST(conns_closed), ST(conns_forgotten),
};
#undef ST

#define BT(k, f)	{ k, offsetof(struct broker_tenant_stats, f) }
static const struct stat_field lease_fields[] = {
	BT("leases", leases), BT("tokens_leased", tokens_leased),
	BT("tokens_refunded", tokens_refunded), BT("redis_calls", redis_calls),
	BT("lease_size", lease_size), BT("overshoot_bound", overshoot_bound),
	BT("tokens_owed", owed), BT("static_charged", static_charged),
};
#undef BT

static void set_fields(json_t *j, const void *stats,
		       const struct stat_field *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t v;

		memcpy(&v, (const char *)stats + f[i].off, sizeof(v));
		json_object_set_new(j, f[i].key, json_integer((json_int_t)v));
	}
}

/* One enforcement point's share of a tenant's stats. */
static json_t *point_json(const char *point, const struct rl_stats *s,
			  uint64_t tokens)
{
	return json_pack("{s:s,s:I,s:I,s:I,s:I,s:I}", "point", point,
			 "admitted", (json_int_t)s->admitted,
			 "denied", (json_int_t)s->denied,
			 "shadow_denied", (json_int_t)s->shadow_denied,
			 "degraded", (json_int_t)s->degraded,
			 "tokens", (json_int_t)tokens);
}

static json_t *stats_json(struct agent *a, const struct agent_tenant *t)
{
	struct agent_tenant_stats st;
	json_t *j;

	agent_tenant_stats(a, t, &st);
	j = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f}",
			 "tenant", t->pol.name,
			 "admitted", (json_int_t)st.s.admitted,
			 "denied", (json_int_t)st.s.denied,
			 "shadow_denied", (json_int_t)st.s.shadow_denied,
			 "retransmits", (json_int_t)st.s.retransmits,
			 "unparsed", (json_int_t)st.s.unparsed,
			 "rst_sent", (json_int_t)st.s.rst_sent,
			 "tokens", (json_int_t)st.tokens,
			 "admit_rate", st.admit_rate,
			 "deny_rate", st.deny_rate);
	/* the limit beside the rates, and the window they are over */
	if (j) {
		char rate[32];

		policy_format_rate(&t->pol.rate, rate, sizeof(rate));
		/* a cap alone has the highest rate there is: no rate limit */
		json_object_set_new(j, "rate", t->pol.rate.count &&
				    t->pol.rate.count < POLICY_RATE_MAX *
				    t->pol.rate.period_s ?
				    json_string(rate) : json_null());
		json_object_set_new(j, "burst", json_integer((json_int_t)t->pol.burst));
		json_object_set_new(j, "rate_window_s",
				    json_real(st.rate_window_s));
	}
	if (j && st.points) {
		json_t *kp = point_json("kernel", &st.kernel, st.kernel_tokens);
		json_t *pp = point_json("preload", &st.preload, st.preload_tokens);

		if (kp && pp && t->pol.max_conns) {
			json_object_set_new(kp, "conns", json_integer(
				st.kernel_conns > 0 ? st.kernel_conns : 0));
			json_object_set_new(kp, "conn_slots", json_integer(
				st.kernel_slots > 0 ? st.kernel_slots : 0));
			json_object_set_new(pp, "conns", json_integer(
				st.preload_conns > 0 ? st.preload_conns : 0));
			json_object_set_new(pp, "conn_slots", json_integer(
				st.preload_slots > 0 ? st.preload_slots : 0));
		}
		json_object_set_new(j, "points", json_pack("[o,o]", kp, pp));
	}
	ctl_src_stats_add(j, a, t, st.s.denied);
	agent_shed_tenant_json(a, t, j);
	if (j && t->pol.max_conns)
		set_fields(j, &st, conn_fields,
			   sizeof(conn_fields) / sizeof(conn_fields[0]));
	if (j && a->broker) {
		struct broker_tenant_stats bt;

		broker_tenant_stats(a->broker, t->slot, &t->pol, &bt);
		json_object_set_new(j, "degraded",
				    json_integer((json_int_t)st.s.degraded));
		set_fields(j, &bt, lease_fields,
			   sizeof(lease_fields) / sizeof(lease_fields[0]));
		if (t->pol.max_conns) {
			set_conn_bound(j, bt.conn_bound);
			json_object_set_new(j, "conn_held",
					    json_integer((json_int_t)bt.conn_held));
		}
	}
	return j;
}

struct busy {
	double rate;		/* admit + deny */
	const char *name;
	size_t i;
};

/* The busiest first, then by name: as rlctl orders what it shows. */
static int busy_cmp(const void *pa, const void *pb)
{
	const struct busy *a = pa, *b = pb;

	if (a->rate != b->rate)
		return a->rate < b->rate ? 1 : -1;
	return strcmp(a->name, b->name);
}

/* The stats of the tenants the request selects ("match", "after"): by
 * name, the first "limit" of them, or with "top" N only the N busiest of
 * them, busiest first.  Only those are read from the kernel and encoded.
 * The array, or the error to reply. */
static json_t *stats_matching(struct agent *a, const json_t *req)
{
	struct selection sel;
	struct busy *b = NULL;
	json_t *arr, *r;
	size_t top, limit, n = 0;

	r = selection_arg(req, &sel);
	if (!r)
		r = count_arg(req, "top", &top);
	if (!r)
		r = count_arg(req, "limit", &limit);
	if (!r && top && limit)
		r = ctl_error(AGENT_INVALID, "fields 'top' and 'limit' exclude "
			      "each other: the busiest or the first by name");
	if (r)
		return r;
	if (!top)
		return page_by_name(a, &sel, limit, stats_json);
	b = malloc((a->n_tenants + 1) * sizeof(*b));
	if (!b)
		return ctl_error(AGENT_INTERNAL, "out of memory");
	for (size_t i = 0; i < a->n_tenants; i++) {
		double ad, de;

		if (!selected(&sel, a->tenants[i].pol.name))
			continue;
		agent_tenant_rates(&a->tenants[i], &ad, &de);
		b[n++] = (struct busy){ ad + de, a->tenants[i].pol.name, i };
	}
	if (n)
		qsort(b, n, sizeof(*b), busy_cmp);
	arr = json_array();
	for (size_t k = 0; k < n && k < top; k++)
		json_array_append_new(arr, stats_json(a, &a->tenants[b[k].i]));
	free(b);
	return arr;
}

json_t *ctl_optional_tenant(struct agent *a, const json_t *req,
			    struct agent_tenant **t)
{
	json_t *v = json_object_get(req, "name");
	char err[POLICY_ERR_MAX];

	*t = NULL;
	if (!v || json_is_null(v))
		return NULL;
	if (!json_is_string(v))
		return ctl_error(AGENT_INVALID, "field 'name' is not a string");
	*t = agent_find(a, json_string_value(v));
	if (*t)
		return NULL;
	agent_no_tenant(a, json_string_value(v), err);
	return ctl_error(AGENT_NOT_FOUND, err);
}

static json_t *cmd_stats(struct ctl_call *call, const json_t *req)
{
	struct agent *a = call->a;
	struct agent_tenant *t;
	json_t *arr, *r = ctl_optional_tenant(a, req, &t);

	if (r)
		return r;
	if (t) {
		arr = json_array();
		json_array_append_new(arr, stats_json(a, t));
	} else {
		arr = stats_matching(a, req);
		if (!json_is_array(arr))
			return arr;
	}
	return json_pack("{s:b,s:o,s:o}", "ok", 1, "stats", arr, "instance",
			 instance_json(a));
}

static json_t *cmd_instance_set(struct ctl_call *call, const json_t *req)
{
	struct rl_instance_limit il;
	char err[POLICY_ERR_MAX];
	enum agent_code c;

	if (!json_object_get(req, "instance"))
		return ctl_error(AGENT_INVALID, "field 'instance' is missing");
	if (instance_from_json(json_object_get(req, "instance"), &il, err))
		return ctl_error(AGENT_INVALID, err);
	c = agent_instance_set(call->a, &il, err);
	if (c != AGENT_OK)
		return ctl_error(c, err);
	log_info("instance limit set (max-conns %llu)",
		 (unsigned long long)il.max_conns);
	if (!call->a->kern.n_ifaces)
		log_warn("the instance limit is kept but not enforced: %s",
			 INSTANCE_UNENFORCED);
	return json_pack("{s:b,s:o}", "ok", 1, "instance",
			 instance_json(call->a));
}

static json_t *cmd_instance_get(struct ctl_call *call, const json_t *req)
{
	(void)req;
	return json_pack("{s:b,s:o}", "ok", 1, "instance",
			 instance_json(call->a));
}

static json_t *cmd_instance_del(struct ctl_call *call, const json_t *req)
{
	char err[POLICY_ERR_MAX];
	enum agent_code c;

	(void)req;
	c = agent_instance_del(call->a, err);
	if (c != AGENT_OK)
		return ctl_error(c, err);
	log_info("instance limit deleted");
	return json_pack("{s:b}", "ok", 1);
}

static json_t *cmd_detach(struct ctl_call *call, const json_t *req)
{
	struct agent *a = call->a;
	json_t *v = json_object_get(req, "iface");
	char err[POLICY_ERR_MAX];
	int e;

	if (!json_is_string(v))
		return ctl_error(AGENT_INVALID, "field 'iface' is missing or not "
				 "a string");
	e = kern_detach(&a->kern, json_string_value(v));
	if (e == -ENOENT) {
		/* and what is, so the operator sees the right name */
		int at = snprintf(err, sizeof(err), "interface '%.32s' is not "
				  "attached; %s", json_string_value(v),
				  a->kern.n_ifaces ? "attached:" :
				  "no interface is attached");

		for (unsigned int i = 0; i < a->kern.n_ifaces &&
		     at > 0 && (size_t)at < sizeof(err); i++)
			at += snprintf(err + at, sizeof(err) - (size_t)at,
				       "%s %s (%s)", i ? "," : "",
				       a->kern.ifaces[i].name,
				       kern_mode_name(a->kern.ifaces[i].mode));
		return ctl_error(AGENT_NOT_FOUND, err);
	}
	if (e) {
		snprintf(err, sizeof(err), "couldn't detach from '%.32s': %s",
			 json_string_value(v), strerror(-e));
		return ctl_error(AGENT_INTERNAL, err);
	}
	if (a->kern.n_ifaces == 0 && a->kern.preload) {
		/* The pool alone enforces from now on: the host's overdraft
		 * and whole static fail shares go to it, and (standalone)
		 * every slot of each cap, which nothing shares any more. */
		for (size_t i = 0; i < a->n_tenants; i++) {
			const struct agent_tenant *t = &a->tenants[i];

			kern_tenant_fail(&a->kern, t->slot, &t->pol);
			if (!a->kern.leased && t->pol.max_conns)
				kern_conn_slots(&a->kern, t->slot,
						(int64_t)t->pol.max_conns);
		}
	}
	if (a->kern.n_ifaces == 0 && !a->kern.preload) {
		/* Nothing enforces any more: the pins would only keep dead
		 * state alive.  The policy file stays for the next start.
		 * (Preloaded programs still spend from the pool.) */
		kern_unpin(&a->kern);
		log_info("last interface detached; pins removed, exiting");
		call->exit_after = true;
	}
	return json_pack("{s:b,s:i}", "ok", 1, "remaining",
			 (int)a->kern.n_ifaces);
}

static const struct {
	const char *name;
	json_t *(*fn)(struct ctl_call *call, const json_t *req);
} commands[] = {
	{ "version", cmd_version },
	{ "status", cmd_status },
	{ "tenant.set", cmd_tenant_set },
	{ "tenant.get", cmd_tenant_get },
	{ "tenant.list", cmd_tenant_list },
	{ "tenant.del", cmd_tenant_del },
	{ "apply", cmd_apply },
	{ "stats", cmd_stats },
	{ "detach", cmd_detach },
	{ "instance.set", cmd_instance_set },
	{ "instance.get", cmd_instance_get },
	{ "instance.del", cmd_instance_del },
	{ "sources", ctl_cmd_sources },
};

json_t *ctl_answer(struct ctl_call *call, const char *line, size_t len)
{
	struct policy_tenant *ts;
	json_error_t jerr;
	json_t *req, *cmd, *r;
	char msg[256];
	size_t n;

	ts = flat_apply(line, len, &n);
	if (ts) {
		log_debug("control: apply");
		return apply_tenants(call, ts, n);
	}
	req = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!req || !json_is_object(req)) {
		snprintf(msg, sizeof(msg), "request is not a JSON object%s%s",
			 req ? "" : ": ", req ? "" : jerr.text);
		json_decref(req);
		return ctl_error(AGENT_INVALID, msg);
	}
	cmd = json_object_get(req, "cmd");
	if (!json_is_string(cmd)) {
		json_decref(req);
		return ctl_error(AGENT_INVALID, "field 'cmd' is missing or not a "
				 "string");
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(commands[i].name, json_string_value(cmd)) == 0) {
			log_debug("control: %s", commands[i].name);
			r = commands[i].fn(call, req);
			json_decref(req);
			return r;
		}
	}
	snprintf(msg, sizeof(msg), "unknown command '%.64s': expected version, "
		 "status, tenant.set, tenant.get, tenant.list, tenant.del, "
		 "apply, stats, detach, instance.set, instance.get, "
		 "instance.del or sources", json_string_value(cmd));
	json_decref(req);
	return ctl_error(AGENT_INVALID, msg);
}
