// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The tenant set on disk: the state file written whole (one tenant a line,
 * the lines of tenants unchanged since copied from the file before) or,
 * for a change of one tenant, a line appended to its journal; read and
 * checked at start-up with the journal, and the kernel made to match it.
 * A damaged file is quarantined and the kernel left as it is.
 */
#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_int.h"
#include "jsonflat.h"
#include "log.h"
#include "state.h"

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	uint64_t w;

	for (; n >= 8; n -= 8, b += 8) {
		memcpy(&w, b, 8);
		h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 32;
	}
	for (; n; n--, b++)
		h = (h ^ *b) * 0x100000001b3ULL;
	return h;
}

/* The policy's bytes, its prefixes' rather than where they are. */
static uint64_t pol_hash(const struct policy_tenant *p)
{
	struct policy_tenant q = *p;
	uint64_t h;

	q.match = NULL;
	h = hash_bytes(0xcbf29ce484222325ULL, &q, sizeof(q));
	return hash_bytes(h, p->match, p->n_match * sizeof(p->match[0]));
}

/* The state file's line of tenant t into buf (POLICY_TEXT_MAX bytes); its
 * length. */
static size_t tenant_text(const struct agent_tenant *t, char *buf)
{
	return policy_tenant_text(&t->pol, &(struct policy_text_ids){
					  true, t->slot, t->version }, buf);
}

/* The tenants of a state file being written, as state_lines_build asks
 * for them: a line is keyed by the slot it names, and stays as it was
 * while the tenant's version and a hash of its policy do.  Bytes equal
 * means fields equal; a difference in padding only costs an encoding.
 * Every change of a tenant gets a new version as well, so the hash only
 * has to catch what a change without one might be. */
static void line_id(void *ctx, size_t i, uint32_t *key, uint64_t *hash,
		    uint64_t *version)
{
	const struct agent_tenant *t = (const struct agent_tenant *)ctx + i;

	*key = t->slot;
	if (hash) {
		*hash = pol_hash(&t->pol);
		*version = t->version;
	}
}

static size_t line_encode(void *ctx, size_t i, char *buf)
{
	return tenant_text((const struct agent_tenant *)ctx + i, buf);
}

/* The journal's changes are all in the state file just written: its
 * version is above theirs, so a journal left behind is read and skipped. */
static void drop_journal(struct agent *a)
{
	char path[PATH_MAX];

	a->journal_bytes = 0;
	snprintf(path, sizeof(path), "%s/%s", a->opts.state_dir,
		 AGENT_JOURNAL_FILE);
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("couldn't remove '%s': %s", path, strerror(errno));
}

/*
 * Writes the state file: {"version":N,"deleted":[...],"tenants":[...]}, one
 * tenant a line.  A tenant whose line is in the state file written before,
 * unchanged, has it copied from there (a->lines), so that a change of one
 * tenant among thousands does not encode them all again.
 */
int agent_save_policy(struct agent *a, const struct agent_tenant *ts,
		      size_t n, const struct agent_tomb *tombs, size_t n_tombs,
		      uint64_t version)
{
	const struct state_lines_src src = {
		(void *)ts, line_id, line_encode, POLICY_TEXT_MAX
	};
	struct state_lines_out out = { 0 };
	json_t *del = json_array();
	char *head = NULL, *start = NULL;
	int err = -ENOMEM, fd = -1, len;

	for (size_t i = 0; del && i < n_tombs; i++)
		json_array_append_new(del, json_pack("{s:s,s:I}", "name",
				      tombs[i].name, "version",
				      (json_int_t)tombs[i].version));
	head = del ? json_dumps(del, JSON_COMPACT) : NULL;
	len = head ? asprintf(&start, "{\"version\":%" PRIu64 ",\"deleted\":%s,"
			      "\"tenants\":[%s", version, head, n ? "\n" : "")
		   : -1;
	if (len < 0) {
		start = NULL;
		goto cleanup;
	}
	err = state_lines_build(&a->lines, a->kern.max_tenants, start,
				(size_t)len, n, &src, "\n]}", 3, &out);
	if (err)
		goto cleanup;
	err = state_save_text_fd(a->opts.state_dir, AGENT_POLICY_FILE, out.text,
				 out.len, &fd);
	if (!err) {
		log_debug("policy: wrote '%s/%s', %zu tenants (%zu lines copied "
			  "from the file before)", a->opts.state_dir,
			  AGENT_POLICY_FILE, n, out.copied);
		state_lines_keep(&a->lines, &out, fd);
		drop_journal(a);
	}
cleanup:
	state_lines_out_free(&out);
	json_decref(del);
	free(head);
	free(start);
	return err;
}

/* The journal past its size: policy.json written whole, after the reply of
 * the change that filled it (whose line the journal holds).  When that
 * fails the journal stays as it is, and the next change tries again. */
static void on_compact(struct loop_timer *t, void *arg)
{
	struct agent *a = arg;

	(void)t;
	a->compact = NULL;
	if (a->journal_bytes < AGENT_JOURNAL_MAX)
		return;	/* written whole since */
	if (agent_save_policy(a, a->tenants, a->n_tenants, a->tombs,
			      a->n_tombs, a->policy_version))
		log_warn("couldn't write the state file in '%s'; its journal "
			 "(%zu bytes) stays", a->opts.state_dir,
			 a->journal_bytes);
}

/* Appends line (len bytes; owned and freed here; NULL when out of
 * memory).  A journal that reaches its size has the state file written
 * whole once the change is answered (on_compact), so that the change that
 * happens to fill it answers as fast as any.  One that must not be
 * appended to (a->journal_whole) has it written whole at once instead.
 * 0 or -errno. */
static int journal_append(struct agent *a, uint64_t version, char *line,
			  int len)
{
	int e;

	if (a->journal_whole || (!a->loop && a->journal_bytes >= AGENT_JOURNAL_MAX)) {
		free(line);
		e = agent_save_policy(a, a->tenants, a->n_tenants, a->tombs,
				      a->n_tombs, version);
		if (!e)
			a->journal_whole = false;
		return e;
	}
	if (len < 0)
		return -ENOMEM;
	e = state_append_text(a->opts.state_dir, AGENT_JOURNAL_FILE, line,
			      (size_t)len);
	free(line);
	if (e)
		return e;
	a->journal_bytes += (size_t)len;
	if (a->journal_bytes >= AGENT_JOURNAL_MAX && a->loop && !a->compact &&
	    loop_timer_add(a->loop, 0, 0, on_compact, a, &a->compact))
		log_warn("couldn't schedule the rewrite of the state file: "
			 "the journal (%zu bytes) stays until it can be",
			 a->journal_bytes);
	return 0;
}

int agent_journal_tenant(struct agent *a, const struct agent_tenant *t,
			 uint64_t version)
{
	char text[POLICY_TEXT_MAX], *line = NULL;
	int len;

	tenant_text(t, text);
	len = asprintf(&line, "{\"version\":%" PRIu64 ",\"tenant\":%s}\n",
		       version, text);
	return journal_append(a, version, len < 0 ? NULL : line, len);
}

int agent_journal_del(struct agent *a, const char *name, uint64_t tomb_version,
		      uint64_t version)
{
	char *line = NULL;
	int len;

	/* names are [A-Za-z0-9._-]: nothing to escape */
	len = asprintf(&line, "{\"version\":%" PRIu64 ",\"deleted\":{\"name\":"
		       "\"%s\",\"version\":%" PRIu64 "}}\n", version, name,
		       tomb_version);
	return journal_append(a, version, len < 0 ? NULL : line, len);
}

/* One line of the journal onto the set (a->tenants and its indexes): a
 * tenant, new or changed, or a deletion.  0, 1 when the line's version is
 * not above *version (skipped), or -EINVAL. */
static int replay_line(struct agent *a, const char *line, size_t len,
		       uint64_t *version)
{
	char terr[POLICY_ERR_MAX];
	struct agent_tenant nt = { 0 };
	json_t *j, *t, *v, *d;
	json_int_t id;
	int e = -EINVAL;

	j = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	v = json_object_get(j, "version");
	t = json_object_get(j, "tenant");
	d = json_object_get(j, "deleted");
	if (!json_is_integer(v) || (!json_is_object(t) && !json_is_object(d)))
		goto out;
	if ((uint64_t)json_integer_value(v) <= *version) {
		e = 1;
		goto out;
	}
	if (d) {
		json_t *name = json_object_get(d, "name");
		json_t *tv = json_object_get(d, "version");

		if (!json_is_string(name) || !json_is_integer(tv) ||
		    json_integer_value(tv) < 1 ||
		    agent_table_del(a, json_string_value(name),
				    (uint64_t)json_integer_value(tv)))
			goto out;
		*version = (uint64_t)json_integer_value(v);
		e = 0;
		goto out;
	}
	id = json_integer_value(json_object_get(t, "id"));
	nt.version = (uint64_t)json_integer_value(json_object_get(t, "version"));
	/* "id" and "version" are fields from_json accepts and leaves alone */
	e = policy_tenant_from_json(t, &nt.pol, terr) ? -EINVAL : 0;
	if (e || nt.version == 0 || id < 0 || id >= a->kern.max_tenants) {
		e = -EINVAL;
		goto out;
	}
	nt.slot = (uint32_t)id;
	if (agent_table_put(a, &nt, terr)) {
		log_warn("'%s/%s': %s", a->opts.state_dir, AGENT_JOURNAL_FILE, terr);
		e = -EINVAL;
		goto out;
	}
	*version = (uint64_t)json_integer_value(v);
out:
	policy_tenant_free(&nt.pol);
	json_decref(j);
	return e;
}

/* The journal's changes newer than the state file's version onto the set
 * (a->tenants, indexed), in order; a last line cut short by a crash (no
 * newline) was never answered and is left out.  Returns whether the state
 * file must be written anew: the journal ends in such a line or in one
 * that is not ours, and the next change must not be appended after it.
 * Else the journal stays, and a->journal_bytes is its size. */
static bool replay_journal(struct agent *a, uint64_t *version)
{
	char *buf = NULL, *p, *nl;
	size_t len = 0, taken = 0, lineno = 0;
	bool rewrite = false;
	int e;

	e = state_read_text(a->opts.state_dir, AGENT_JOURNAL_FILE, &buf, &len);
	if (e) {
		if (e != -ENOENT)
			log_warn("couldn't read '%s/%s': %s", a->opts.state_dir,
				 AGENT_JOURNAL_FILE, strerror(-e));
		return false;
	}
	for (p = buf; (nl = memchr(p, '\n', len - (size_t)(p - buf))); p = nl + 1) {
		lineno++;
		e = replay_line(a, p, (size_t)(nl - p), version);
		if (e < 0) {
			log_warn("'%s/%s' line %zu: not a change the policy "
				 "takes; the rest of the file is left out",
				 a->opts.state_dir, AGENT_JOURNAL_FILE, lineno);
			rewrite = true;
			break;
		}
		taken += e == 0;
	}
	if (!rewrite && p != buf + len)
		rewrite = true;		/* a line cut short */
	a->journal_bytes = len;
	free(buf);
	log_info("policy: %zu changes of '%s/%s' taken", taken,
		 a->opts.state_dir, AGENT_JOURNAL_FILE);
	return rewrite;
}

/* The state document's version and its tenants array.  0, or -EINVAL with
 * the problem in err. */
static int parse_head(const json_t *doc, uint64_t *version, json_t **arr,
		      char *err)
{
	json_t *v;

	if (!json_is_object(doc)) {
		snprintf(err, POLICY_ERR_MAX, "not a JSON object");
		return -EINVAL;
	}
	v = json_object_get(doc, "version");
	if (!json_is_integer(v) || json_integer_value(v) < 0) {
		snprintf(err, POLICY_ERR_MAX, "'version' missing or not a "
			 "non-negative integer");
		return -EINVAL;
	}
	*version = (uint64_t)json_integer_value(v);
	*arr = json_object_get(doc, "tenants");
	if (!json_is_array(*arr)) {
		snprintf(err, POLICY_ERR_MAX, "'tenants' missing or not an array");
		return -EINVAL;
	}
	return 0;
}

/* Tenant i of the state document into *t, its slot marked in used.  The
 * agent's own fields ("id", "version") are among those
 * policy_tenant_from_json accepts and leaves alone.  0, or -EINVAL with
 * the problem in err. */
static int parse_tenant(const json_t *item, size_t i, uint32_t max,
			struct agent_tenant *t, struct slot_map *used,
			struct pfx_store *prefixes, char *err)
{
	char terr[POLICY_ERR_MAX];
	json_t *v = json_object_get(item, "id");
	struct policy_tenant own;
	json_int_t id;

	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) >= max) {
		snprintf(err, POLICY_ERR_MAX, "tenant %zu: 'id' missing or not a "
			 "slot number from 0 to %u (--max-tenants)", i, max - 1);
		return -EINVAL;
	}
	id = json_integer_value(v);
	v = json_object_get(item, "version");
	t->version = json_is_integer(v) && json_integer_value(v) > 0 ?
		     (uint64_t)json_integer_value(v) : 1;
	if (policy_tenant_from_json(item, &t->pol, terr)) {
		snprintf(err, POLICY_ERR_MAX, "tenant %zu: %.200s", i, terr);
		return -EINVAL;
	}
	own = t->pol;
	if (pfx_store_put(prefixes, &t->pol)) {
		policy_tenant_free(&own);
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		return -ENOMEM;
	}
	policy_tenant_free(&own);
	if (slot_in(used, (uint32_t)id)) {
		snprintf(err, POLICY_ERR_MAX, "tenant %zu: slot %lld used twice",
			 i, (long long)id);
		return -EINVAL;
	}
	t->slot = (uint32_t)id;
	used->bits[id / 64] |= 1ULL << (id % 64);
	return 0;
}

/* Turns the state document into tenants with slots.  0, or -EINVAL with
 * the problem in err. */
static int parse_doc(json_t *doc, uint32_t max, struct agent_tenant **out,
		     size_t *n_out, uint64_t *version, struct pfx_store *prefixes,
		     char *err)
{
	struct agent_tenant *ts = NULL;
	struct slot_map *used;
	json_t *arr, *item;
	size_t i, n;
	int e;

	e = parse_head(doc, version, &arr, err);
	if (e)
		return e;
	n = json_array_size(arr);
	if (n > max) {
		snprintf(err, POLICY_ERR_MAX, "%zu tenants, at most %u "
			 "(--max-tenants)", n, max);
		return -EINVAL;
	}
	ts = calloc(n ? n : 1, sizeof(*ts));
	used = calloc(1, sizeof(*used));
	if (!ts || !used) {
		snprintf(err, POLICY_ERR_MAX, "out of memory");
		e = -ENOMEM;
		goto cleanup;
	}
	json_array_foreach(arr, i, item)
		if ((e = parse_tenant(item, i, max, &ts[i], used, prefixes, err)))
			goto cleanup;
	e = policy_validate_set_at(&ts->pol, sizeof(*ts), n, err) ? -EINVAL : 0;
	if (!e) {
		*out = ts;
		*n_out = n;
		ts = NULL;
	}
cleanup:
	free(used);
	free(ts);
	return e;
}

/*
 * The state file as agent_save_policy() writes it, read a line at a time:
 * a head line `{"version":N,"deleted":[...],"tenants":[`, one tenant a
 * line, each but the last followed by a comma, and `]}`.  Each line is
 * parsed, taken and freed before the next, instead of a tree of the whole
 * file built first: at 100,000 tenants that tree's allocations cost more
 * than the tenants themselves.  The head line closed with `]}` is a
 * document of no tenants, and every line a strict document of its own, so
 * what this reads is exactly what the whole file would give.  0 with the
 * head in *head (the caller's; its "deleted" list is the file's) and
 * where each tenant's line is in lines (when it keeps the file), or -1:
 * not laid out so, or a problem anywhere, and the whole file is to be
 * read as one document (parse_doc), which says what is wrong.
 */
static int parse_lines(const char *text, size_t len, uint32_t max,
		       struct agent_tenant **out, size_t *n_out,
		       uint64_t *version, json_t **head, struct pfx_store *prefixes,
		       struct state_lines *lines)
{
	static const char open_tenants[] = "\"tenants\":[", close[] = "]}";
	const size_t n_open = sizeof(open_tenants) - 1, n_close = sizeof(close) - 1;
	const char *nl, *p, *end = text + len;
	char err[POLICY_ERR_MAX], *h = NULL;
	struct agent_tenant *ts = NULL;
	struct slot_map *used = NULL;
	json_t *doc = NULL, *arr;
	size_t hlen, n = 0;
	int e = -1;

	if (len && end[-1] == '\n')
		end--;	/* state_save_text ends the file with one */
	nl = memchr(text, '\n', (size_t)(end - text));
	if (!nl || (size_t)(end - text) < n_close ||
	    memcmp(end - n_close, close, n_close) != 0)
		return -1;
	hlen = (size_t)(nl - text);
	if (hlen < n_open || memcmp(nl - n_open, open_tenants, n_open) != 0)
		return -1;
	h = malloc(hlen + n_close);
	if (!h)
		return -1;
	memcpy(h, text, hlen);
	memcpy(h + hlen, close, n_close);
	doc = json_loadb(h, hlen + n_close, JSON_REJECT_DUPLICATES, NULL);
	free(h);
	if (!doc || parse_head(doc, version, &arr, err) || json_array_size(arr))
		goto cleanup;
	/* a tenant a line between the head and "]}" (alone on the last) */
	for (p = nl + 1; p < end - n_close; p = (const char *)memchr(p, '\n',
		     (size_t)(end - n_close - p)) + 1)
		if (++n > max || !memchr(p, '\n', (size_t)(end - n_close - p)))
			goto cleanup;
	if (p != end - n_close)
		goto cleanup;
	ts = calloc(n ? n : 1, sizeof(*ts));
	used = calloc(1, sizeof(*used));
	if (!ts || !used)
		goto cleanup;
	p = nl + 1;
	for (size_t i = 0; i < n; i++) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		size_t l = (size_t)(eol - p);
		json_t *item;
		int r;

		/* the comma between two tenants ends the line of the first */
		if (i + 1 < n ? !l || p[l - 1] != ',' : l && p[l - 1] == ',')
			goto cleanup;
		if (i + 1 < n)
			l--;
		item = jsonflat_load(p, l);
		if (!item)
			item = json_loadb(p, l, JSON_REJECT_DUPLICATES, NULL);
		r = !json_is_object(item) ||
		    parse_tenant(item, i, max, &ts[i], used, prefixes, err);
		json_decref(item);
		if (r)
			goto cleanup;
		/* the line read is the tenant's, as good as one encoded */
		state_lines_put(lines, ts[i].slot, pol_hash(&ts[i].pol),
				ts[i].version, (size_t)(p - text), l);
		p = eol + 1;
	}
	if (policy_validate_set_at(&ts->pol, sizeof(*ts), n, err))
		goto cleanup;
	*out = ts;
	*n_out = n;
	*head = doc;
	ts = NULL;
	doc = NULL;
	e = 0;
cleanup:
	json_decref(doc);
	free(used);
	free(ts);
	return e;
}

/* The "deleted" list of the state document (absent in older files).
 * 0, or -EINVAL with the problem in err. */
static int parse_tombs(json_t *doc, struct agent_tomb **out, size_t *n_out,
		       char *err)
{
	json_t *arr = json_object_get(doc, "deleted"), *item;
	struct agent_tomb *ts;
	size_t i, n;

	*out = NULL;
	*n_out = 0;
	if (!arr)
		return 0;
	n = json_array_size(arr);
	if (!json_is_array(arr) || n > AGENT_MAX_TOMBS) {
		snprintf(err, POLICY_ERR_MAX, "'deleted' is not an array of at "
			 "most %d entries", AGENT_MAX_TOMBS);
		return -EINVAL;
	}
	ts = calloc(n + 1, sizeof(*ts));
	if (!ts)
		return -ENOMEM;
	json_array_foreach(arr, i, item) {
		json_t *name = json_object_get(item, "name");
		json_t *v = json_object_get(item, "version");
		char perr[POLICY_ERR_MAX];

		if (!json_is_string(name) || !json_is_integer(v) ||
		    json_integer_value(v) < 1 ||
		    policy_parse_name(json_string_value(name), ts[i].name, perr)) {
			snprintf(err, POLICY_ERR_MAX, "deleted tenant %zu: expected "
				 "a valid name and a version", i);
			free(ts);
			return -EINVAL;
		}
		ts[i].version = (uint64_t)json_integer_value(v);
	}
	*out = ts;
	*n_out = n;
	return 0;
}

/* One reading of the state file: in its own dir for max slots, what it
 * holds, or why not. */
struct agent_policy_read {
	const char *dir;
	uint32_t max;
	pthread_t thread;
	int secure;		/* state_secure_dir's result */
	int e;			/* read_policy's */
	char err[POLICY_ERR_MAX + STATE_ERR_MAX];
	struct agent_tenant *ts;
	size_t n;
	struct pfx_store prefixes;	/* of ts */
	uint64_t version;
	struct agent_tomb *tombs;
	size_t n_tombs;
	struct state_lines lines;	/* of the file, laid out as written */
};

/* The state file into r->ts[0..r->n), its version and its tombstones:
 * line by line when it is laid out as written (parse_lines), else as one
 * document.  r->e is 0, -ENOENT (no file), -EBADMSG (damaged: r->err says
 * how), -ENOMEM, or another -errno (unreadable: r->err says why). */
static void read_policy(struct agent_policy_read *r)
{
	json_t *doc = NULL;
	char *text = NULL;
	size_t len = 0;
	int e, fd = -1;

	e = state_read_fd(r->dir, AGENT_POLICY_FILE, &text, &len, r->err,
			  sizeof(r->err), &fd);
	if (e) {
		r->e = e;
		return;
	}
	/* without room for where the lines are, the file is read all the same */
	state_lines_open(&r->lines, r->max, fd, len);
	if (parse_lines(text, len, r->max, &r->ts, &r->n, &r->version, &doc,
			&r->prefixes, &r->lines)) {
		state_lines_drop(&r->lines);
		pfx_store_free(&r->prefixes);
		e = state_parse(text, len, &doc, r->err, sizeof(r->err));
		if (!e)
			e = parse_doc(doc, r->max, &r->ts, &r->n, &r->version,
				      &r->prefixes, r->err);
	}
	free(text);
	if (!e) {
		e = parse_tombs(doc, &r->tombs, &r->n_tombs, r->err);
		if (e) {
			free(r->ts);
			r->ts = NULL;
			r->n = 0;
		}
	}
	if (e) {
		pfx_store_free(&r->prefixes);
		state_lines_drop(&r->lines);
	}
	json_decref(doc);
	if (e == -ENOMEM)
		snprintf(r->err, sizeof(r->err), "out of memory");
	r->e = e && e != -ENOMEM ? -EBADMSG : e;
}

/* The state dir made safe (or found unsafe), then the file read. */
static void read_run(struct agent_policy_read *r)
{
	r->secure = state_secure_dir(r->dir, 0700, (gid_t)-1, r->err,
				     sizeof(r->err));
	if (!r->secure)
		read_policy(r);
}

static void *read_thread(void *arg)
{
	read_run(arg);
	return NULL;
}

void agent_policy_read(struct agent *a, uint32_t max_tenants)
{
	struct agent_policy_read *r = calloc(1, sizeof(*r));

	if (!r)
		return;
	r->dir = a->opts.state_dir;
	r->max = max_tenants;
	/* the set a start reads is its own until taken; the thread shares
	 * nothing else with the loading of the kernel's program */
	if (pthread_create(&r->thread, NULL, read_thread, r)) {
		free(r);
		return;
	}
	a->policy_read = r;
}

/* The reading agent_policy_read started, once it is done; NULL if none. */
static struct agent_policy_read *read_wait(struct agent *a)
{
	struct agent_policy_read *r = a->policy_read;

	if (r) {
		pthread_join(r->thread, NULL);
		a->policy_read = NULL;
	}
	return r;
}

static void read_free(struct agent_policy_read *r)
{
	if (!r)
		return;
	free(r->ts);
	pfx_store_free(&r->prefixes);
	free(r->tombs);
	state_lines_drop(&r->lines);
	free(r);
}

void agent_policy_read_drop(struct agent *a)
{
	read_free(read_wait(a));
}

int agent_policy_start(struct agent *a)
{
	char bad[4200];
	struct agent_policy_read *r = read_wait(a);
	struct agent_tenant *ts = NULL;
	struct slot_map used;
	uint64_t version = 0;
	bool rewrite;
	size_t n = 0;
	int e;

	/* read for another size of the kernel's tables: read again */
	if (r && r->max != a->kern.max_tenants) {
		read_free(r);
		r = NULL;
	}
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return -ENOMEM;
		r->dir = a->opts.state_dir;
		r->max = a->kern.max_tenants;
		read_run(r);
	}
	if (r->secure) {
		log_error("%s", r->err);
		e = r->secure;
		read_free(r);
		return e;
	}
	e = r->e;
	ts = r->ts;
	n = r->n;
	version = r->version;
	agent_tombs_take(a, r->tombs, r->n_tombs);
	pfx_store_free(&a->prefixes);
	a->prefixes = r->prefixes;
	a->prefixes_live = r->prefixes.n;
	memset(&r->prefixes, 0, sizeof(r->prefixes));
	r->ts = NULL;
	r->tombs = NULL;
	state_lines_drop(&a->lines);
	a->lines = r->lines;
	memset(&r->lines, 0, sizeof(r->lines));
	if (e == -EBADMSG) {
		log_error("couldn't read policy on '%s/%s': %s", a->opts.state_dir,
			  AGENT_POLICY_FILE, r->err);
		read_free(r);
		if (state_quarantine(a->opts.state_dir, AGENT_POLICY_FILE, bad,
				     sizeof(bad)) == 0)
			log_error("moved the damaged policy to '%s'; starting with "
				  "an empty policy and leaving the kernel's rules "
				  "in force until the next change", bad);
		a->policy_damaged = true;
		return 0;
	}
	if (e && e != -ENOENT)
		log_error("couldn't read policy on '%s/%s': %s", a->opts.state_dir,
			  AGENT_POLICY_FILE, r->err);
	read_free(r);
	if (e && e != -ENOENT)
		return e;

	a->tenants = ts;
	a->n_tenants = a->cap_tenants = n;
	if (agent_index_build(a))
		log_warn("couldn't index %zu tenants: out of memory; every "
			 "change rebuilds the set", n);
	if (!a->ix) {
		log_error("couldn't replay '%s/%s' without the set's indexes",
			  a->opts.state_dir, AGENT_JOURNAL_FILE);
		a->tenants = NULL;
		a->n_tenants = a->cap_tenants = 0;
		free(ts);
		return -ENOMEM;
	}
	/* Without policy.json, the journal holds every change since an
	 * empty set. */
	rewrite = replay_journal(a, &version);
	ts = a->tenants;
	n = a->n_tenants;

	/* The file is the truth; the kernel may have adopted maps from an
	 * older run.  A slot that is live keeps its bucket: passing the set
	 * as its own predecessor makes only dead slots fresh. */
	e = agent_kern_apply(a, ts, n, ts, n);
	if (e) {
		agent_index_free(a);
		a->tenants = NULL;
		a->n_tenants = a->cap_tenants = 0;
		free(ts);
		return e;
	}
	slots_of(ts, n, &used);
	for (uint32_t s = 0; s < a->kern.max_tenants; s++)
		if (kern_slot_live(&a->kern, s) && !slot_in(&used, s)) {
			log_info("cleared kernel slot %u: not in the policy", s);
			kern_tenant_clear(&a->kern, s);
		}
	a->policy_version = version;
	log_info("policy: %zu tenants (version %llu)", n,
		 (unsigned long long)version);
	if (rewrite && agent_save_policy(a, ts, n, a->tombs, a->n_tombs, version)) {
		log_warn("couldn't write the state file in '%s'; its journal "
			 "stays", a->opts.state_dir);
		/* the next change writes it whole, not after that line */
		a->journal_whole = true;
	}
	agent_prune_tombs(a);
	agent_prefixes_tidy(a);
	return 0;
}
