// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Option and command tables: parsing argv by them (on getopt_long) and
 * printing the usage from them (see opts.h).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "opts.h"
#include "parse.h"

#define WIDTH		79	/* of the usage text */
#define DEFAULT_COL	23
#define VAL		"'%.64s'"	/* a value quoted in a message */

static int fail(struct opts_result *res, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(struct opts_result *res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(res->err, sizeof(res->err), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* "a, b or c" from the names at base, base + stride, ... up to a NULL name;
 * names for which skip() is true are left out. */
static void join_or(const void *base, size_t stride,
		    bool (*skip)(const void *row), char *buf, size_t len)
{
	const char *p, *names[OPTS_MAX];
	size_t n = 0, off = 0;

	for (p = base; *(const char *const *)p && n < OPTS_MAX; p += stride)
		if (!skip || !skip(p))
			names[n++] = *(const char *const *)p;
	buf[0] = '\0';
	for (size_t i = 0; i < n && off < len; i++) {
		int w = snprintf(buf + off, len - off, "%s%s",
				 i == 0 ? "" : i + 1 == n ? " or " : ", ",
				 names[i]);

		if (w < 0)
			break;
		off += (size_t)w;
	}
}

static size_t rows(const struct opt *t)
{
	size_t n = 0;

	while (t && t[n].kind != OPT_END)
		n++;
	return n;
}

/* Stores v in an unsigned field of size bytes. */
static void store_unsigned(void *dest, size_t size, uint64_t v)
{
	switch (size) {
	case 1: *(uint8_t *)dest = (uint8_t)v; break;
	case 2: *(uint16_t *)dest = (uint16_t)v; break;
	case 4: *(uint32_t *)dest = (uint32_t)v; break;
	default: *(uint64_t *)dest = v; break;
	}
}

/* The largest value a field of size bytes holds. */
static uint64_t size_max(size_t size)
{
	return size >= 8 ? UINT64_MAX : (1ULL << (size * 8)) - 1;
}

static int append_list(char **list, const char *item)
{
	size_t old = *list ? strlen(*list) : 0, n = strlen(item);
	char *s = realloc(*list, old + n + 2);

	if (!s)
		return -ENOMEM;
	if (old)
		s[old++] = ',';
	memcpy(s + old, item, n + 1);
	*list = s;
	return 0;
}

/* Checks arg against row o and stores it in base + o->off.  The option is
 * named as the user knows it: "--name", or the positional's NAME. */
static int set_value(const struct opt *o, const char *arg, void *base,
		     struct opts_result *res)
{
	void *dest = (char *)base + o->off;
	char dash[72];
	const char *name = dash;

	if (o->flags & OPT_POS)
		name = o->name;
	else
		snprintf(dash, sizeof(dash), "--%s", o->name);

	switch (o->kind) {
	case OPT_FLAG:
		*(bool *)dest = true;
		return 0;
	case OPT_U64: {
		uint64_t v, hi = o->max ? o->max : UINT64_MAX;

		if (parse_u64(arg, o->min, hi, &v) < 0)
			return fail(res, "invalid %s " VAL ": expected %s from "
				    "%llu to %llu", name, arg,
				    o->expect ? o->expect : "a whole number",
				    (unsigned long long)o->min,
				    (unsigned long long)hi);
		if (o->scale)
			v *= o->scale;
		if (v > size_max(o->size))
			return fail(res, "invalid %s " VAL ": too large", name, arg);
		store_unsigned(dest, o->size, v);
		return 0;
	}
	case OPT_NUMBER: {
		bool above = o->flags & OPT_ABOVE;
		char *end;
		double v;

		errno = 0;
		v = strtod(arg, &end);
		if (errno || end == arg || *end || !isfinite(v) ||
		    v < o->lo || (above && v == o->lo) || v > o->hi) {
			const char *what = o->expect ? o->expect : "a number";

			if (above)
				return fail(res, "invalid %s " VAL ": expected %s "
					    "above %g, at most %g", name, arg,
					    what, o->lo, o->hi);
			return fail(res, "invalid %s " VAL ": expected %s from %g "
				    "to %g", name, arg, what, o->lo, o->hi);
		}
		*(double *)dest = v;
		return 0;
	}
	case OPT_ENUM: {
		char list[256];

		for (const struct opt_value *v = o->values; v && v->name; v++) {
			if (!strcmp(arg, v->name)) {
				*(int *)dest = v->value;
				return 0;
			}
		}
		join_or(o->values, sizeof(*o->values), NULL, list, sizeof(list));
		return fail(res, "invalid %s " VAL ": expected %s", name, arg, list);
	}
	case OPT_HOSTPORT: {
		char host[256];
		uint16_t port;

		if (parse_hostport(arg, host, sizeof(host), &port) < 0)
			return fail(res, "invalid %s " VAL ": expected HOST:PORT "
				    "or [IPV6]:PORT%s%s", name, arg,
				    o->def ? ", e.g. " : "", o->def ? o->def : "");
		*(const char **)dest = arg;
		return 0;
	}
	case OPT_STRING: {
		size_t n = strlen(arg);

		if (o->max && (n < o->min || n > o->max))
			return fail(res, "invalid %s " VAL ": expected %llu to "
				    "%llu characters", name, arg,
				    (unsigned long long)o->min,
				    (unsigned long long)o->max);
		*(const char **)dest = arg;
		return 0;
	}
	case OPT_LIST:
		if (append_list(dest, arg) < 0) {
			fail(res, "out of memory");
			return -ENOMEM;
		}
		return 0;
	case OPT_CUSTOM:
		if (o->parse(arg, dest, res->err, sizeof(res->err)) < 0) {
			if (!res->err[0])
				fail(res, "invalid %s " VAL, name, arg);
			return -EINVAL;
		}
		return 0;
	default:
		return fail(res, "option %s has no value kind", name);
	}
}

static bool takes_value(const struct opt *o)
{
	return o->kind >= OPT_U64;
}

/* Row i of the two tables as one list. */
struct table {
	const struct opt *row[OPTS_MAX];
	void *base[OPTS_MAX];
	size_t n;
};

static int gather(const struct opts_spec *spec, void *cfg, struct table *t,
		  struct opts_result *res)
{
	size_t a = rows(spec->opts), b = rows(spec->common);

	if (a + b > OPTS_MAX)
		return fail(res, "too many options (at most %d)", OPTS_MAX);
	t->n = 0;
	for (size_t i = 0; i < a; i++) {
		t->row[t->n] = &spec->opts[i];
		t->base[t->n++] = cfg;
	}
	for (size_t i = 0; i < b; i++) {
		t->row[t->n] = &spec->common[i];
		t->base[t->n++] = spec->common_cfg;
	}
	return 0;
}

static bool is_option(const struct opt *o)
{
	return o->kind != OPT_SECTION && !(o->flags & OPT_POS);
}

/* The command line's spelling of the option getopt stopped at. */
static void bad_option(const struct table *t, char **argv, char *buf,
		       size_t len)
{
	if (optopt >= 256 && (size_t)(optopt - 256) < t->n)
		snprintf(buf, len, "--%s", t->row[optopt - 256]->name);
	else if (optopt > 0 && optopt < 256)
		snprintf(buf, len, "-%c", optopt);
	else
		snprintf(buf, len, "%.64s", argv[optind - 1]);
}

/* The error for an unknown option bad, with the option it is most likely
 * a typo of ("--brust": did you mean '--burst'?). */
static int unknown_option(const struct table *t, const struct opts_spec *spec,
			  const char *bad, struct opts_result *res)
{
	const char *names[OPTS_MAX], *near = NULL;
	char mean[96] = "";
	size_t n = 0;

	if (!strncmp(bad, "--", 2)) {
		for (size_t i = 0; i < t->n; i++)
			if (is_option(t->row[i]) && !(t->row[i]->flags & OPT_HIDDEN))
				names[n++] = t->row[i]->name;
		near = opts_suggest(bad + 2, names, n);
	}
	if (near)
		snprintf(mean, sizeof(mean), "; did you mean '--%s'?", near);
	return spec->cmd ?
		fail(res, "unknown option '%s' for '%s'%s", bad, spec->cmd, mean) :
		fail(res, "unknown option '%s'%s", bad, mean);
}

static int positionals(const struct table *t, int argc, char **argv,
		       struct opts_result *res)
{
	const struct opts_spec *spec = res->spec;
	int k = optind;

	for (size_t i = 0; i < t->n; i++) {
		const struct opt *o = t->row[i];
		int err;

		if (!(o->flags & OPT_POS))
			continue;
		if (o->flags & OPT_REST)
			break;
		if (k >= argc) {
			if (o->flags & OPT_OPTIONAL)
				break;
			if (spec->cmd)
				return fail(res, "'%s' needs %s", spec->cmd,
					    o->expect ? o->expect : o->name);
			return fail(res, "missing %s", o->expect ? o->expect : o->name);
		}
		err = set_value(o, argv[k], t->base[i], res);
		if (err)
			return err;
		k++;
	}
	res->rest = argv + k;
	res->n_rest = argc - k;
	for (size_t i = 0; i < t->n; i++)
		if ((t->row[i]->flags & OPT_REST) || spec->stop_at_arg)
			return 0;
	if (k < argc) {
		if (spec->cmd)
			return fail(res, "unexpected argument '%.64s' for '%s'",
				    argv[k], spec->cmd);
		return fail(res, "unexpected argument '%.64s'", argv[k]);
	}
	return 0;
}

int opts_parse(const struct opts_spec *spec, int argc, char **argv, void *cfg,
	       struct opts_result *res)
{
	struct option longopts[OPTS_MAX + 1];
	char shorts[OPTS_MAX * 2 + 3], *sp = shorts;
	struct table t = { .n = 0 };
	size_t nl = 0;
	int c, err;

	memset(res, 0, sizeof(*res));
	res->spec = spec;
	err = gather(spec, cfg, &t, res);
	if (err)
		return err;
	if (spec->stop_at_arg)
		*sp++ = '+';
	*sp++ = ':';
	for (size_t i = 0; i < t.n; i++) {
		const struct opt *o = t.row[i];

		if (o->def) {
			err = set_value(o, o->def, t.base[i], res);
			if (err)
				return err;
		}
		if (!is_option(o))
			continue;
		longopts[nl++] = (struct option){
			.name = o->name,
			.has_arg = takes_value(o) ? required_argument : no_argument,
			.val = 256 + (int)i,
		};
		if (o->short_opt) {
			*sp++ = o->short_opt;
			if (takes_value(o))
				*sp++ = ':';
		}
	}
	longopts[nl] = (struct option){ 0 };
	*sp = '\0';

	/* A fresh getopt for every table: rlctl parses its global options and
	 * then the command's. */
	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, longopts, NULL)) != -1) {
		const struct opt *o = NULL;
		size_t i = 0;
		char bad[72];

		if (c >= 256) {
			i = (size_t)c - 256;
			o = t.row[i];
		} else if (c != '?' && c != ':') {
			for (i = 0; i < t.n; i++)
				if (is_option(t.row[i]) && t.row[i]->short_opt == c)
					break;
			o = i < t.n ? t.row[i] : NULL;
		}
		if (!o) {
			bad_option(&t, argv, bad, sizeof(bad));
			if (c == '?' && optopt >= 256)
				return fail(res, "option '%s' takes no value", bad);
			if (c == ':')
				return spec->cmd ?
					fail(res, "option '%s' of '%s' needs a value",
					     bad, spec->cmd) :
					fail(res, "option '%s' needs a value", bad);
			return unknown_option(&t, spec, bad, res);
		}
		if ((o->flags & OPT_ONCE) && (res->seen & (1ULL << i)))
			return spec->cmd ?
				fail(res, "option '--%s' of '%s' given twice: it takes "
				     "one value", o->name, spec->cmd) :
				fail(res, "option '--%s' given twice: it takes one "
				     "value", o->name);
		res->seen |= 1ULL << i;
		if (o->kind == OPT_HELP)
			return OPTS_HELP;
		if (o->kind == OPT_VERSION)
			return OPTS_VERSION;
		err = set_value(o, optarg, t.base[i], res);
		if (err)
			return err;
	}
	return positionals(&t, argc, argv, res);
}

bool opts_given(const struct opts_result *res, const char *name)
{
	const struct opts_spec *spec = res->spec;
	size_t a = rows(spec->opts), b = rows(spec->common);

	for (size_t i = 0; i < a + b; i++) {
		const struct opt *o = i < a ? &spec->opts[i] : &spec->common[i - a];

		if (is_option(o) && !strcmp(o->name, name))
			return res->seen & (1ULL << i);
	}
	return false;
}

void opts_free(const struct opts_spec *spec, void *cfg)
{
	for (size_t i = 0; i < rows(spec->opts); i++) {
		char **p = (char **)((char *)cfg + spec->opts[i].off);

		if (spec->opts[i].kind == OPT_LIST) {
			free(*p);
			*p = NULL;
		}
	}
}

/* --- usage --------------------------------------------------------------- */

/* Prints text starting at column `at` (where the cursor is), wrapped before
 * WIDTH with following lines indented to col; '\n' in text breaks the line
 * there.  Ends the line. */
static void wrap(FILE *f, const char *text, int at, int col)
{
	const char *p = text;
	bool space = false;	/* owed before the next word */

	while (*p) {
		size_t word = strcspn(p, " \n");

		if (at > col && at + 1 + (int)word >= WIDTH) {
			fprintf(f, "\n%*s", col, "");
			at = col;
			space = false;
		}
		if (space && word) {
			fputc(' ', f);
			at++;
		}
		fprintf(f, "%.*s", (int)word, p);
		at += (int)word;
		p += word;
		space = false;
		if (*p == '\n') {
			fprintf(f, "\n%*s", col, "");
			at = col;
			p++;
		} else if (*p == ' ') {
			while (*p == ' ')
				p++;
			space = true;
		}
	}
	fputc('\n', f);
}

/* The value's name in the usage: arg, or an enum's values "a|b" (always in
 * the synopsis: values). */
static void value_name(const struct opt *o, bool values, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	if (o->kind != OPT_ENUM || (o->arg && !values)) {
		snprintf(buf, len, "%s", o->arg ? o->arg : "VALUE");
		return;
	}
	for (const struct opt_value *v = o->values; v && v->name; v++) {
		int w = snprintf(buf + off, len - off, "%s%s", off ? "|" : "",
				 v->name);

		if (w < 0 || (size_t)w >= len - off)
			break;
		off += (size_t)w;
	}
}

/* The help line of a row: its sentence, then what the table knows (range,
 * values, default) in parentheses. */
static void help_text(const struct opt *o, char *buf, size_t len)
{
	char range[256] = "", def[160] = "";

	if (o->kind == OPT_U64)
		snprintf(range, sizeof(range), "%llu to %llu",
			 (unsigned long long)o->min,
			 (unsigned long long)(o->max ? o->max : UINT64_MAX));
	else if (o->kind == OPT_NUMBER && (o->flags & OPT_ABOVE))
		snprintf(range, sizeof(range), "above %g, at most %g", o->lo, o->hi);
	else if (o->kind == OPT_NUMBER)
		snprintf(range, sizeof(range), "%g to %g", o->lo, o->hi);
	else if (o->kind == OPT_ENUM)
		join_or(o->values, sizeof(*o->values), NULL, range, sizeof(range));
	if (o->def || o->def_doc)
		snprintf(def, sizeof(def), "%sdefault%s%s",
			 !range[0] ? "" : o->kind == OPT_ENUM ? "; " : ", ",
			 o->def ? " " : ": ", o->def ? o->def : o->def_doc);
	snprintf(buf, len, "%s%s%s%s%s", o->help, range[0] || def[0] ? " (" : "",
		 range, def, range[0] || def[0] ? ")" : "");
}

static void synopsis(const struct opts_spec *spec, FILE *f)
{
	int at = 7 + (int)strlen(spec->prog), col = at + 1;
	char tok[160], val[128];

	fprintf(f, "Usage: %s", spec->prog);
	if (col > 30)
		col = 30;
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < rows(spec->opts); i++) {
			const struct opt *o = &spec->opts[i];

			if (o->kind == OPT_SECTION || (o->flags & OPT_HIDDEN) ||
			    o->kind == OPT_HELP || o->kind == OPT_VERSION)
				continue;
			if (pass == 0 && (o->flags & OPT_POS))
				snprintf(tok, sizeof(tok), (o->flags & OPT_OPTIONAL) ?
					 "[%s%s]" : "%s%s", o->name,
					 (o->flags & OPT_REST) ? "..." : "");
			else if (pass == 1 && !(o->flags & OPT_POS) &&
				 takes_value(o)) {
				value_name(o, true, val, sizeof(val));
				snprintf(tok, sizeof(tok), "[--%s %s]", o->name, val);
			} else if (pass == 1 && !(o->flags & OPT_POS))
				snprintf(tok, sizeof(tok), "[--%s]", o->name);
			else
				continue;
			if (at + 1 + (int)strlen(tok) >= WIDTH) {
				fprintf(f, "\n%*s", col - 1, "");
				at = col - 1;
			}
			at += fprintf(f, " %s", tok);
		}
	}
	fputc('\n', f);
}

/* Lists the rows of t that have help. */
static void list_rows(const struct opt *t, int col, bool listed, FILE *f)
{
	for (size_t i = 0; i < rows(t); i++) {
		const struct opt *o = &t[i];
		char left[160], val[128], help[1024];
		int at;

		if ((o->flags & OPT_HIDDEN) || !o->help)
			continue;
		if (o->kind == OPT_SECTION) {
			fprintf(f, "\n%s\n", o->help);
			listed = true;
			continue;
		}
		if (!listed)
			fputc('\n', f);
		listed = true;
		if (o->flags & OPT_POS) {
			snprintf(left, sizeof(left), "  %s", o->name);
		} else {
			value_name(o, false, val, sizeof(val));
			snprintf(left, sizeof(left), "  %c%c%c --%s%s%s",
				 o->short_opt ? '-' : ' ',
				 o->short_opt ? o->short_opt : ' ',
				 o->short_opt ? ',' : ' ', o->name,
				 takes_value(o) ? " " : "",
				 takes_value(o) ? val : "");
		}
		help_text(o, help, sizeof(help));
		at = fprintf(f, "%s", left);
		if (at >= col)
			fprintf(f, "\n%*s", col, "");
		else
			fprintf(f, "%*s", col - at, "");
		wrap(f, help, col, col);
	}
}

static void list(const struct opts_command *cmds, const char *group, int col,
		 FILE *f);

void opts_usage(const struct opts_spec *spec, FILE *f)
{
	int col = spec->col ? spec->col : DEFAULT_COL;

	if (spec->synopsis)
		fprintf(f, "Usage: %s\n", spec->synopsis);
	else
		synopsis(spec, f);
	if (spec->doc)
		fprintf(f, "\n%s", spec->doc);
	if (spec->commands) {
		fprintf(f, "\nCommands:\n");
		list(spec->commands, NULL, col, f);
	}
	list_rows(spec->opts, col, false, f);
	if (spec->list_common)
		list_rows(spec->common, col, true, f);
	if (spec->epilog)
		fprintf(f, "\n%s", spec->epilog);
}

/* --- commands ------------------------------------------------------------ */

const struct opts_command *opts_command_find(const struct opts_command *cmds,
					     const char *name)
{
	for (; cmds && cmds->name; cmds++)
		if (!strcmp(cmds->name, name))
			return cmds;
	return NULL;
}

static bool is_alias(const void *row)
{
	return !((const struct opts_command *)row)->summary;
}

void opts_command_names(const struct opts_command *cmds, char *buf, size_t len)
{
	join_or(cmds, sizeof(*cmds), is_alias, buf, len);
}

/* The optimal string alignment distance of a and b, case ignored, or
 * limit + 1 once it is certainly above limit: once a whole row of the
 * table is past it, so that a miss among 100,000 tenant names costs a few
 * rows each (names are short: 64 characters at most are compared). */
static size_t typo_distance(const char *a, const char *b, size_t limit)
{
	enum { MAXW = 64 };
	size_t la = strnlen(a, MAXW), lb = strnlen(b, MAXW);
	size_t d[MAXW + 1][MAXW + 1];

	if ((la > lb ? la - lb : lb - la) > limit)
		return limit + 1;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t row_min = d[i][0];

		for (size_t j = 1; j <= lb; j++) {
			int x = tolower((unsigned char)a[i - 1]);
			int y = tolower((unsigned char)b[j - 1]);
			size_t v = d[i - 1][j - 1] + (x != y);

			if (d[i - 1][j] + 1 < v)
				v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && x == tolower((unsigned char)b[j - 2]) &&
			    tolower((unsigned char)a[i - 2]) == y &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
			row_min = v < row_min ? v : row_min;
		}
		/* a swap reaches back two rows: stop only when two are past */
		if (row_min > limit && i > 1) {
			size_t prev_min = d[i - 1][0];

			for (size_t j = 1; j <= lb; j++)
				prev_min = d[i - 1][j] < prev_min ? d[i - 1][j] :
					   prev_min;
			if (prev_min > limit)
				return limit + 1;
		}
	}
	return d[la][lb];
}

void opts_near_init(struct opts_near *n, const char *word)
{
	*n = (struct opts_near){ .word = word,
				 .limit = strlen(word) <= 4 ? 1 : 2 };
	n->best = n->limit + 1;
}

void opts_near_offer(struct opts_near *n, const char *name)
{
	size_t d;

	if (!name)
		return;
	d = typo_distance(n->word, name, n->limit);
	if (d < n->best) {
		n->best = d;
		n->found = name;
		n->tie = false;
	} else if (d == n->best && n->found && strcmp(n->found, name) != 0) {
		n->tie = true;
	}
}

const char *opts_near_best(const struct opts_near *n)
{
	return n->tie ? NULL : n->found;
}

const char *opts_suggest(const char *word, const char *const *names, size_t n)
{
	struct opts_near near;

	opts_near_init(&near, word);
	for (size_t i = 0; i < n; i++)
		opts_near_offer(&near, names[i]);
	return opts_near_best(&near);
}

const char *opts_command_suggest(const struct opts_command *cmds,
				 const char *word)
{
	const char *names[OPTS_MAX];
	size_t n = 0;

	for (; cmds->name && n < OPTS_MAX; cmds++)
		if (!is_alias(cmds))
			names[n++] = cmds->name;
	return opts_suggest(word, names, n);
}

static void list(const struct opts_command *cmds, const char *group, int col,
		 FILE *f)
{
	for (; cmds->name; cmds++) {
		char left[256];
		int at;

		if (!cmds->summary)
			continue;
		if (cmds->subs) {
			list(cmds->subs, cmds->name, col, f);
			continue;
		}
		snprintf(left, sizeof(left), "  %s%s%s%s%s", group ? group : "",
			 group ? " " : "", cmds->name, cmds->args ? " " : "",
			 cmds->args ? cmds->args : "");
		at = fprintf(f, "%s", left);
		if (at >= col)
			fprintf(f, "\n%*s", col, "");
		else
			fprintf(f, "%*s", col - at, "");
		wrap(f, cmds->summary, col, col);
	}
}

void opts_command_list(const struct opts_command *cmds, int col, FILE *f)
{
	list(cmds, NULL, col ? col : DEFAULT_COL, f);
}
