/* test_ctl_proto: the control protocol's error codes - every code's name
 * reads back as that code, unknown names are internal failures, and a
 * client exits 2 on exactly the codes that mean its request was wrong.
 */
#include <string.h>

#include "ctl_proto.h"
#include "check.h"

/* Every code: its name, the name parsed back, rlctl's exit status. */
static void test_known_codes(void)
{
	static const struct {
		enum ctl_code code;
		const char *name;
		int exit;
	} want[] = {
		{ CTL_OK, "ok", 0 },
		{ CTL_INVALID, "invalid", 2 },
		{ CTL_NOT_FOUND, "not_found", 2 },
		{ CTL_CONFLICT, "conflict", 2 },
		{ CTL_INTERNAL, "internal", 1 },
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		CHECK(strcmp(ctl_code_name(want[i].code), want[i].name) == 0,
		      "code %d is named '%s', want '%s'", want[i].code,
		      ctl_code_name(want[i].code), want[i].name);
		CHECK(ctl_code_parse(want[i].name) == want[i].code,
		      "'%s' parses as %d, want %d", want[i].name,
		      ctl_code_parse(want[i].name), want[i].code);
		CHECK(ctl_code_exit(want[i].code) == want[i].exit,
		      "'%s' exits %d, want %d", want[i].name,
		      ctl_code_exit(want[i].code), want[i].exit);
	}
}

/* Names no code has parse as internal; a code out of range is named so. */
static void test_unknown_codes(void)
{
	static const char *const unknown[] = { "", "Invalid", "notfound",
					       "conflict ", "busy", NULL };

	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
		CHECK(ctl_code_parse(unknown[i]) == CTL_INTERNAL,
		      "unknown code '%s' is not internal",
		      unknown[i] ? unknown[i] : "(null)");
	CHECK(strcmp(ctl_code_name((enum ctl_code)99), "internal") == 0,
	      "an out-of-range code is not named internal");
}

int main(void)
{
	CHECK_RUN(test_known_codes);
	CHECK_RUN(test_unknown_codes);
	return check_exit();
}
