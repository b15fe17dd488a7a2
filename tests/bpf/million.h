/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A policy at SaaS scale for the classifier's tests and the benchmark: a
 * million IPv4 and IPv6 prefixes over 100,000 tenants of ten each, placed as
 * providers hand out address space (see million.c), with addresses inside
 * each prefix and between them to check or to send from.
 */
#ifndef RL_TEST_MILLION_H
#define RL_TEST_MILLION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "classify.h"

#define MILLION_TENANTS		100000
#define MILLION_PER_TENANT	10
#define MILLION_PREFIXES	(MILLION_TENANTS * MILLION_PER_TENANT)
/* Every MILLION_PORTED_EVERY-th tenant limits only ports 443 and 8443: its
 * prefixes are a rule per port, and other ports of its sources match no
 * rule. */
#define MILLION_PORTED_EVERY	100
/* Classifier tables per half that hold the policy with room to spare (it
 * takes about 52,000): `rlagent --rule-memory 128`. */
#define MILLION_CLS_HALF	(64 * 1024)

/* How the prefixes are shaped (million.c says where each lives). */
enum million_shape { MS_V4_24, MS_V4_28, MS_V4_30, MS_V4_32, MS_V6_48,
		     MS_V6_56, MS_V6_64, MS_MAX };

struct million_pool;

struct million {
	/* The prefixes, port 0; tenant t's are [t * 10, t * 10 + 10), and
	 * its slot is first_slot + t. */
	struct rl_cls_rule *prefixes;
	/* What the classifier gets: the prefixes, a ported tenant's once per
	 * port. */
	struct rl_cls_rule *rules;
	size_t n_rules;
	uint32_t first_slot;
	struct million_pool *pools;	/* MS_MAX of them */
	uint64_t rng;
};

/* Makes the policy, the same every time.  0 or -ENOMEM. */
int million_make(struct million *m, uint32_t first_slot);
void million_free(struct million *m);

/* A random number from the policy's own generator (repeatable). */
uint32_t million_rand(struct million *m);

/* Whether the tenant in slot `slot` limits only ports 443 and 8443. */
bool million_ported(const struct million *m, uint32_t slot);

/* An address inside prefix i (random host bits) into a[16] (an IPv4 one
 * in its first 4 bytes); its family (AF_INET, AF_INET6). */
int million_inside(struct million *m, size_t i, uint8_t a[16]);

/* An address in the providers' ranges that no prefix covers: a block of
 * some shape's range that no tenant holds.  Its family. */
int million_gap(struct million *m, uint8_t a[16]);

#endif /* RL_TEST_MILLION_H */
