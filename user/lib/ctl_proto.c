// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* The control protocol's error codes: names and exit statuses. */
#include <string.h>

#include "ctl_proto.h"

static const char *const names[] = {
	[CTL_OK] = "ok",
	[CTL_INVALID] = "invalid",
	[CTL_NOT_FOUND] = "not_found",
	[CTL_CONFLICT] = "conflict",
	[CTL_INTERNAL] = "internal",
};

const char *ctl_code_name(enum ctl_code c)
{
	if ((unsigned int)c >= sizeof(names) / sizeof(names[0]))
		c = CTL_INTERNAL;
	return names[c];
}

enum ctl_code ctl_code_parse(const char *name)
{
	for (unsigned int c = 0; name && c < sizeof(names) / sizeof(names[0]); c++)
		if (strcmp(name, names[c]) == 0)
			return (enum ctl_code)c;
	return CTL_INTERNAL;
}

int ctl_code_exit(enum ctl_code c)
{
	switch (c) {
	case CTL_OK:
		return 0;
	case CTL_INVALID:
	case CTL_NOT_FOUND:
	case CTL_CONFLICT:
		return 2;
	default:
		return 1;
	}
}
