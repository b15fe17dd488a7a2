/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* malloc that fails (ENOMEM) while malloc_fails is set, for the unit tests
 * linked with -Wl,--wrap=malloc (AGENT_TESTS in the Makefile): every call
 * of malloc in the files linked in comes here.  Included by one file of
 * such a test. */
#ifndef RL_TEST_MALLOC_FAIL_H
#define RL_TEST_MALLOC_FAIL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);

static bool malloc_fails;

void *__wrap_malloc(size_t n)
{
	if (malloc_fails) {
		errno = ENOMEM;
		return NULL;
	}
	return __real_malloc(n);
}

#endif /* RL_TEST_MALLOC_FAIL_H */
