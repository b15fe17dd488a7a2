/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Which of a host's tenant slots a periodic check visits: those listed for
 * the next check, those due at a known time, and a queue of those waiting
 * their turn for a paced call.  A slot in none of them costs a check
 * nothing, so the check's work follows activity, not the tenant count.
 * Pure (no I/O).
 */
#ifndef RL_WAKE_H
#define RL_WAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct wake_due {
	uint64_t ns;
	uint32_t slot;
};

struct wake {
	uint32_t max;			/* slots 0 .. max-1 */
	uint8_t *flags;			/* per slot: listed, queued */
	uint64_t *due;			/* per slot: when due (0: not) */
	uint32_t *list, *taken;		/* the next check's; the last taken */
	size_t n_list, cap_list, cap_taken;
	uint32_t *queue;		/* a ring of q_n from q_head */
	size_t q_head, q_n, q_cap;
	struct wake_due *heap;		/* by ns; entries whose slot is due at
					 * another time are stale, skipped */
	size_t n_heap, cap_heap;
	/* Out of memory once: the caller visits every slot at its next
	 * check (and so sets each again), then clears this. */
	bool all;
};

/* A wake for slots 0 .. max-1, none listed, due or queued.  0, -ENOMEM. */
int wake_init(struct wake *w, uint32_t max);
void wake_free(struct wake *w);

/* Slot is visited at the next check (once, however often listed). */
void wake_list(struct wake *w, uint32_t slot);

/* Slot is visited at the first check at or after ns, instead of at the
 * time it was due before; ns 0: at no time. */
void wake_at(struct wake *w, uint32_t slot, uint64_t ns);

/* Slot waits its turn in the queue (once, however often queued). */
void wake_queue(struct wake *w, uint32_t slot);

/*
 * The slots to visit at a check at time now: every listed one and every
 * one due by now, each once, in *slots (valid until the next call).  They
 * are listed and due no more: a visit lists or schedules again what still
 * needs it.  Returns how many.
 */
size_t wake_take(struct wake *w, uint64_t now, const uint32_t **slots);

/* The queue's first slot, taken out of it: false when it is empty. */
bool wake_next_queued(struct wake *w, uint32_t *slot);

/* Forgets every slot: none listed, due or queued (say, after a walk of
 * them all, which sets each again). */
void wake_clear(struct wake *w);

#endif /* RL_WAKE_H */
