/* Unit test of user/lib/jsonflat.c: every line it reads is what jansson's reader makes of it (values and key order), and what it leaves to jansson - white space, escapes, reals, nesting, duplicate keys, bad JSON - it refuses; then thousands of mutated tenant lines, the same. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonflat.h"
#include "check.h"

/* The same values with the keys in the same order. */
static bool same_tree(json_t *a, json_t *b)
{
	void *ia, *ib;

	if (!json_equal(a, b))
		return false;
	for (ia = json_object_iter(a), ib = json_object_iter(b); ia && ib;
	     ia = json_object_iter_next(a, ia), ib = json_object_iter_next(b, ib))
		if (strcmp(json_object_iter_key(ia), json_object_iter_key(ib)))
			return false;
	return !ia && !ib;
}

/* jsonflat_load(s) is NULL or what json_loadb makes of s. */
static bool agrees(const char *s, size_t len, bool *read)
{
	json_t *fast = jsonflat_load(s, len), *slow;
	bool ok;

	*read = fast != NULL;
	if (!fast)
		return true;
	slow = json_loadb(s, len, JSON_REJECT_DUPLICATES, NULL);
	ok = slow && same_tree(fast, slow);
	json_decref(fast);
	json_decref(slow);
	return ok;
}

static const char tenant_line[] =
	"{\"action\":\"drop\",\"burst\":100,\"fail\":\"static\",\"id\":0,"
	"\"match\":[\"10.0.0.0/28\",\"2001:db8::/32\"],\"name\":\"t0\","
	"\"ports\":[80,443],\"rate\":\"100/s\",\"shadow\":false,"
	"\"version\":1796079010086}";

static void test_table(void)
{
	static const struct {
		const char *text;
		bool read;	/* by jsonflat, not left to jansson */
	} cases[] = {
		{ tenant_line, true },
		{ "{}", true },
		{ "{\"a\":null,\"b\":true,\"c\":false}", true },
		{ "{\"n\":0,\"m\":-0,\"k\":-12,\"big\":999999999999999999}", true },
		{ "{\"a\":[],\"b\":[\"x\",1,-2],\"\":\"\"}", true },
		{ "{\"z\":1,\"a\":2,\"m\":3}", true },
		/* left to jansson, valid or not */
		{ "", false },
		{ "[]", false },
		{ "{ }", false },
		{ "{\"a\": 1}", false },
		{ "{\"a\":1} ", false },
		{ "{\"a\":1}x", false },
		{ "{\"a\":1}{}", false },
		{ "{\"a\":\"\\n\"}", false },
		{ "{\"a\":\"\\\"\"}", false },
		{ "{\"a\":\"caf\xc3\xa9\"}", false },
		{ "{\"a\":\"\x01\"}", false },
		{ "{\"a\":1.5}", false },
		{ "{\"a\":1e3}", false },
		{ "{\"a\":01}", false },
		{ "{\"a\":-}", false },
		{ "{\"a\":1000000000000000000}", false },
		{ "{\"a\":{}}", false },
		{ "{\"a\":[[]]}", false },
		{ "{\"a\":[null]}", false },
		{ "{\"a\":[true]}", false },
		{ "{\"a\":1,\"a\":2}", false },
		{ "{\"a\":1,}", false },
		{ "{\"a\":[1,]}", false },
		{ "{\"a\"}", false },
		{ "{\"a\":}", false },
		{ "{\"a\":tru}", false },
		{ "{\"a\":truex}", false },
		{ "{\"a\":nul}", false },
		{ "{\"a\":1", false },
		{ "{\"a\":\"x", false },
		{ "{\"a\":[1", false },
		{ "{a:1}", false },
	};
	json_t *cut;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *s = cases[i].text;
		bool read;

		CHECK(agrees(s, strlen(s), &read), "'%s': not what jansson reads", s);
		CHECK(read == cases[i].read, "'%s': %s", s,
		      read ? "read, expected to be left to jansson" :
			     "left to jansson, expected to be read");
	}
	/* the length given is the end, whatever follows */
	cut = jsonflat_load("{\"a\":1},", 7);
	CHECK(cut != NULL, "a line cut before its comma is not read");
	json_decref(cut);
}

/* Reproducible: the same mutations every run. */
static size_t rnd(void)
{
	return (size_t)rand();
}

/* A tenant line with a few bytes changed, dropped or doubled: whatever
 * jsonflat reads of it, jansson reads the same. */
static void test_mutated(void)
{
	static const char alphabet[] = "{}[]\":,-0123456789 truefalsnl\\x.e\n\x7f\x80";
	size_t base = strlen(tenant_line), read = 0, n = 20000;
	char buf[512];

	srand(19);
	for (size_t k = 0; k < n; k++) {
		size_t len = base;
		size_t m = 1 + rnd() % 3;
		bool r;

		memcpy(buf, tenant_line, base);
		while (m--) {
			size_t at = rnd() % len;

			switch (rnd() % 3) {
			case 0:
				buf[at] = alphabet[rnd() % (sizeof(alphabet) - 1)];
				break;
			case 1:
				memmove(buf + at, buf + at + 1, len - at - 1);
				len--;
				break;
			default:
				if (len + 1 < sizeof(buf)) {
					memmove(buf + at + 1, buf + at, len - at);
					len++;
				}
			}
		}
		if (!agrees(buf, len, &r)) {
			CHECK(false, "mutation %zu: '%.*s' read otherwise than "
			      "jansson reads it", k, (int)len, buf);
			return;
		}
		read += r;
	}
	/* some mutations keep a line in the subset (a digit for a digit) */
	CHECK(read > 0 && read < n, "%zu of %zu mutated lines read", read, n);
	diag("%zu of %zu mutated lines read, the rest left to jansson", read, n);
}

int main(void)
{
	CHECK_RUN(test_table);
	CHECK_RUN(test_mutated);
	return check_exit();
}
