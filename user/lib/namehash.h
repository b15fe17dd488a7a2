/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Names to positions in an array of records (tenants, tombstones, the
 * fleet's updates): an open-addressed hash of positions whose names are
 * read from the records themselves, so that a lookup among 100,000 names
 * takes time that does not grow with them.  The array is the caller's and
 * may move (realloc): each call says where its names are, `stride` bytes
 * apart from `first` (a member of an array of structs).  Pure (no I/O).
 */
#ifndef RL_NAMEHASH_H
#define RL_NAMEHASH_H

#include <stddef.h>
#include <stdint.h>

struct name_hash {
	uint32_t *slots;	/* positions + 1; 0 free */
	size_t cap;		/* a power of two; 0: nothing built */
	size_t n;		/* names held */
};

/* Where the records' names are: record i's at first + i * stride. */
struct name_recs {
	const char *first;
	size_t stride;
};

/* *h made anew for records [0, n) of r, with room for `room` names (at
 * least n) before it must grow; a name that repeats keeps its first
 * position.  0, or -ENOMEM (h then empty: cap 0). */
int name_hash_build(struct name_hash *h, struct name_recs r, size_t n,
		    size_t room);

/* The position of name, or SIZE_MAX (also when nothing is built). */
size_t name_hash_find(const struct name_hash *h, struct name_recs r,
		      const char *name);

/* Adds record pos, whose name h does not hold (it would be held twice),
 * growing past half full.  0, or -ENOMEM (nothing changed). */
int name_hash_put(struct name_hash *h, struct name_recs r, size_t pos);

/* Removes record pos's name, if h holds it at pos. */
void name_hash_del(struct name_hash *h, struct name_recs r, size_t pos);

/* The record now at `to` is a copy of the one at `from`, which still holds
 * it: its name points at `to`, if h held it at `from`. */
void name_hash_moved(struct name_hash *h, struct name_recs r, size_t from,
		     size_t to);

/* Record pos is about to be cut out of the array and those after it
 * moved down one (memmove): its name goes, and theirs point one lower.
 * Called before the move (names are read where they are), in time that
 * does not depend on how many records move. */
void name_hash_cut(struct name_hash *h, struct name_recs r, size_t pos);

void name_hash_free(struct name_hash *h);

#endif /* RL_NAMEHASH_H */
