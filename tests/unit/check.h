/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* What every unit test shares: CHECK() records a failed expectation with its
 * place and a message, and the test goes on; main returns check_result(). */
#ifndef RL_TEST_CHECK_H
#define RL_TEST_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);	\
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
		failures++;						\
	}								\
} while (0)

#endif /* RL_TEST_CHECK_H */
