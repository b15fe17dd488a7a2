/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A quick reader for the flat JSON objects that jansson writes compactly
 * (the state file's tenant lines): jansson's own reader takes a few
 * microseconds a line, which at 100,000 tenants is most of a restart.
 */
#ifndef RL_JSONFLAT_H
#define RL_JSONFLAT_H

#include <stddef.h>
#include <jansson.h>

/*
 * Reads text[0..len) when it is one object in the subset this reader
 * knows: no white space; keys and strings of printable ASCII without
 * escapes; values strings, whole numbers of up to 18 digits, true, false,
 * null, or arrays of strings and whole numbers.  What it returns is what
 * json_loadb(text, len, JSON_REJECT_DUPLICATES, ...) would (json_equal,
 * keys in the same order).  NULL for anything else, valid JSON or not, and
 * when out of memory: the caller then reads it with json_loadb, which also
 * says what is wrong with it.
 */
json_t *jsonflat_load(const char *text, size_t len);

#endif
