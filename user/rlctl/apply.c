/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlctl apply FILE: make the agent's policy exactly the tenants in a JSON
 * file, as one change.  The whole file is checked here first and every
 * problem reported, so an invalid file changes nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "rlctl.h"

struct apply_args {
	const char *file;
	bool dry_run;
};

static const struct opts_spec apply_spec = {
	RLCTL_CMD("apply"),
	.doc =
"Make the policy exactly the tenants in FILE ('-' for stdin), as one change:\n"
"tenants not in FILE are deleted.  FILE is JSON:\n"
"\n"
"  {\"tenants\": [\n"
"    {\"name\": \"web\", \"rate\": \"100/s\", \"burst\": 200,\n"
"     \"match\": [\"192.0.2.0/24\", \"2001:db8::/32\"], \"ports\": [80, 443],\n"
"     \"action\": \"rst\", \"shadow\": false}\n"
"  ]}\n"
"\n"
"name, rate and match are required; burst defaults to one second of the\n"
"rate, ports to [] (any port), action to drop, shadow to false.  The whole\n"
"file is checked before anything is sent; every problem is reported and\n"
"nothing is changed if there is one.\n",
	.opts = (const struct opt[]){
		{ "FILE", 0, OPT_STRING, OPT_POS, OPT_AT(struct apply_args, file),
		  .expect = "a FILE ('-' for stdin)" },
		{ "dry-run", 'n', OPT_FLAG, OPT_AT(struct apply_args, dry_run),
		  .help = "only check FILE; do not contact rlagent" },
		{ .kind = OPT_END },
	},
};

struct problems {
	const char *file;
	json_t *list;		/* [{"index","tenant","error"}] */
	const json_t *arr;	/* the file's tenants array */
	const size_t *orig;	/* index in arr of each parsed tenant */
};

static void add_problem(struct problems *p, size_t index, const char *msg)
{
	const char *name = json_string_value(
		json_object_get(json_array_get(p->arr, index), "name"));
	json_t *o = json_pack("{s:I, s:s?, s:s}", "index", (json_int_t)index,
			      "tenant", name, "error", msg);

	if (!rlctl.json) {
		if (name)
			fprintf(stderr, "Error: %s: tenants[%zu] '%.63s': %s\n",
				p->file, index, name, msg);
		else
			fprintf(stderr, "Error: %s: tenants[%zu]: %s\n", p->file,
				index, msg);
	}
	json_array_append_new(p->list, o);
}

static void set_problem(void *ctx, size_t index, const char *msg)
{
	struct problems *p = ctx;

	add_problem(p, p->orig[index], msg);
}

/* A dry run's overlap (policy_find_overlaps()): every one, said and kept
 * for --json (the agent shows the first few of a real apply). */
static void add_warning(void *ctx, size_t wide, size_t narrow, const char *msg)
{
	(void)wide;
	(void)narrow;
	rlctl_warn("%s", msg);
	json_array_append_new(ctx, json_string(msg));
}

static json_t *load_file(const char *file)
{
	json_error_t jerr;
	json_t *j;

	if (!strcmp(file, "-"))
		j = json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr);
	else
		j = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		/* jansson reports a missing file as a parse error at line -1 */
		if (jerr.line < 0)
			rlctl_error("couldn't read '%s': %s", file, jerr.text);
		else
			rlctl_error("couldn't parse '%s': %s at line %d column %d",
				    file, jerr.text, jerr.line, jerr.column);
	}
	return j;
}

/* The apply request for ts, written as text: a million prefixes made into
 * JSON objects first would take seconds.  NULL when out of memory. */
static char *request_text(const struct policy_tenant *ts, size_t n)
{
	static const char head[] = "{\"cmd\":\"apply\",\"tenants\":[";
	size_t len = sizeof(head) - 1, cap = 1 << 20;
	char *buf = malloc(cap), *p;

	if (!buf)
		return NULL;
	memcpy(buf, head, len);
	for (size_t i = 0; i < n; i++) {
		/* room for this tenant, a comma and the closing "]}" */
		if (len + POLICY_TEXT_MAX + 4 > cap) {
			cap *= 2;
			p = realloc(buf, cap);
			if (!p) {
				free(buf);
				return NULL;
			}
			buf = p;
		}
		if (i)
			buf[len++] = ',';
		len += policy_tenant_text(&ts[i], NULL, buf + len);
	}
	memcpy(buf + len, "]}", 3);
	return buf;
}

int cmd_apply(int argc, char **argv)
{
	struct apply_args args = { 0 };
	struct policy_tenant *ts = NULL;
	struct problems p = { 0 };
	struct opts_result res;
	size_t *orig = NULL, n = 0, i;
	json_t *doc = NULL, *arr, *item, *reply = NULL;
	const char *file, *key;
	char *line = NULL;
	char err[POLICY_ERR_MAX];
	int ret;

	ret = rlctl_parse(&apply_spec, argc, argv, &args, &res);
	if (ret != RLCTL_CONTINUE)
		return ret;
	file = args.file;
	ret = RLCTL_EXIT_USAGE;
	doc = load_file(file);
	if (!doc)
		goto out;
	arr = json_object_get(doc, "tenants");
	if (!json_is_object(doc) || !json_is_array(arr)) {
		rlctl_error("'%s' is not a tenant file: expected a JSON object "
			    "{\"tenants\": [...]}", file);
		goto out;
	}
	json_object_foreach(doc, key, item) {
		if (strcmp(key, "tenants")) {
			rlctl_error("'%s': unknown top-level field '%.64s': "
				    "expected only \"tenants\"", file, key);
			goto out;
		}
	}

	p.file = file;
	p.arr = arr;
	p.list = json_array();
	ts = calloc(json_array_size(arr) + 1, sizeof(*ts));
	orig = calloc(json_array_size(arr) + 1, sizeof(*orig));
	if (!p.list || !ts || !orig) {
		rlctl_error("out of memory");
		ret = RLCTL_EXIT_FAIL;
		goto out;
	}
	json_array_foreach(arr, i, item) {
		if (policy_tenant_from_json(item, &ts[n], err) < 0) {
			add_problem(&p, i, err);
			continue;
		}
		orig[n++] = i;
	}
	/* Names and overlaps are checked among the tenants that parsed, so
	 * one typo does not hide a conflict elsewhere in the file. */
	p.orig = orig;
	policy_check_set(ts, n, set_problem, &p);
	if (json_array_size(p.list)) {
		size_t np = json_array_size(p.list);

		char msg[512];

		snprintf(msg, sizeof(msg), "%s: %zu problem%s; nothing was "
			 "applied", file, np, np == 1 ? "" : "s");
		if (rlctl.json) {
			json_t *e = json_pack("{s:s, s:O}", "error", msg,
					      "problems", p.list);

			json_dumpf(e, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			fputc('\n', stdout);
			json_decref(e);
		} else {
			fprintf(stderr, "Error: %s\n", msg);
		}
		goto out;
	}

	if (args.dry_run) {
		json_t *warnings = json_array();

		policy_find_overlaps(ts, sizeof(*ts), n, SIZE_MAX, add_warning,
				     warnings);
		if (rlctl.json) {
			rlctl_print_json(json_pack("{s:s, s:I, s:b, s:o}", "file",
						   file, "tenants", (json_int_t)n,
						   "valid", 1, "warnings",
						   warnings));
		} else {
			json_decref(warnings);
			printf("%s: %zu tenant%s, valid\n", file, n,
			       n == 1 ? "" : "s");
		}
		ret = RLCTL_EXIT_OK;
		goto out;
	}
	line = request_text(ts, n);
	if (!line) {
		rlctl_error("out of memory");
		ret = RLCTL_EXIT_FAIL;
		goto out;
	}
	ret = rlctl_send(line);
	if (ret != RLCTL_EXIT_OK)
		goto out;
	/* freed while the agent applies, not after */
	free(line);
	line = NULL;
	json_decref(doc);
	doc = NULL;
	policy_tenants_free(ts, n);
	ts = NULL;
	ret = rlctl_reply(&reply);
	if (ret != RLCTL_EXIT_OK)
		goto out;
	rlctl_print_warnings(reply);
	if (rlctl.json) {
		rlctl_print_json(json_incref(reply));
	} else {
		printf("applied '%s': %" JSON_INTEGER_FORMAT " added, %"
		       JSON_INTEGER_FORMAT " updated, %" JSON_INTEGER_FORMAT
		       " removed\n", file,
		       json_integer_value(json_object_get(reply, "added")),
		       json_integer_value(json_object_get(reply, "updated")),
		       json_integer_value(json_object_get(reply, "removed")));
	}
out:
	free(line);
	json_decref(reply);
	json_decref(p.list);
	json_decref(doc);
	policy_tenants_free(ts, n);
	free(orig);
	return ret;
}
