/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A quick reader for flat, compact JSON objects (see jsonflat.h): a
 * pointer walked once over the text, jansson's values built from it.
 * Anything outside its subset is left to jansson's reader.
 */
#include <stdbool.h>
#include <string.h>

#include "jsonflat.h"

/* Whole numbers of up to 18 digits fit a json_int_t (64 bits). */
#define MAX_DIGITS	18

struct cursor {
	const char *p, *end;
};

/* Printable ASCII but the quote and the backslash: a string of these is
 * valid UTF-8 and means itself. */
static bool plain(char c)
{
	return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
}

static bool next_is(const struct cursor *c, char ch)
{
	return c->p < c->end && *c->p == ch;
}

/* A string of plain characters: its bytes in [*s, *s + *n). */
static bool read_string(struct cursor *c, const char **s, size_t *n)
{
	const char *q;

	if (!next_is(c, '"'))
		return false;
	q = ++c->p;
	while (q < c->end && plain(*q))
		q++;
	if (q >= c->end || *q != '"')
		return false;
	*s = c->p;
	*n = (size_t)(q - c->p);
	c->p = q + 1;
	return true;
}

/* -?(0|[1-9][0-9]*), at most MAX_DIGITS digits, not followed by a
 * fraction or an exponent (what follows is checked by the caller, which
 * wants a ',', ']' or '}'). */
static json_t *read_integer(struct cursor *c)
{
	bool neg = next_is(c, '-');
	json_int_t v = 0;
	int digits = 0;

	if (neg)
		c->p++;
	if (c->p >= c->end || *c->p < '0' || *c->p > '9')
		return NULL;
	if (*c->p == '0' && c->p + 1 < c->end && c->p[1] >= '0' && c->p[1] <= '9')
		return NULL;
	for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++)
		if (++digits > MAX_DIGITS)
			return NULL;
		else
			v = v * 10 + (*c->p - '0');
	return json_integer(neg ? -v : v);
}

static bool read_word(struct cursor *c, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
		return false;
	c->p += n;
	return true;
}

/* A string or a whole number: what an array here may hold. */
static json_t *read_item(struct cursor *c)
{
	const char *s;
	size_t n;

	if (next_is(c, '"'))
		return read_string(c, &s, &n) ? json_stringn_nocheck(s, n) : NULL;
	return read_integer(c);
}

static json_t *read_array(struct cursor *c)
{
	json_t *a = json_array(), *v;

	if (!a)
		return NULL;
	c->p++;		/* '[' */
	if (next_is(c, ']')) {
		c->p++;
		return a;
	}
	for (;;) {
		v = read_item(c);
		if (!v || json_array_append_new(a, v) < 0)
			break;
		if (next_is(c, ']')) {
			c->p++;
			return a;
		}
		if (!next_is(c, ','))
			break;
		c->p++;
	}
	json_decref(a);
	return NULL;
}

static json_t *read_value(struct cursor *c)
{
	if (next_is(c, '['))
		return read_array(c);
	if (next_is(c, 't'))
		return read_word(c, "true") ? json_true() : NULL;
	if (next_is(c, 'f'))
		return read_word(c, "false") ? json_false() : NULL;
	if (next_is(c, 'n'))
		return read_word(c, "null") ? json_null() : NULL;
	return read_item(c);
}

json_t *jsonflat_load(const char *text, size_t len)
{
	struct cursor c = { text, text + len };
	json_t *o, *v;
	const char *k;
	size_t kn;

	if (!next_is(&c, '{') || !(o = json_object()))
		return NULL;
	c.p++;
	if (next_is(&c, '}') && c.p + 1 == c.end)
		return o;
	for (;;) {
		if (!read_string(&c, &k, &kn) || !next_is(&c, ':'))
			break;
		c.p++;
		/* a second value of a key is an error to jansson's reader
		 * (JSON_REJECT_DUPLICATES), which then says so */
		if (json_object_getn(o, k, kn))
			break;
		v = read_value(&c);
		if (!v || json_object_setn_new_nocheck(o, k, kn, v) < 0)
			break;
		if (next_is(&c, '}'))
			return c.p + 1 == c.end ? o : (json_decref(o), NULL);
		if (!next_is(&c, ','))
			break;
		c.p++;
	}
	json_decref(o);
	return NULL;
}
