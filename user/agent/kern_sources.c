// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Per-source limits, the agent's side: each tenant's entry of `src_conf`,
 * the sweep that reclaims entries of `sources` whose bucket is full again
 * (the only way an entry ever leaves: see RL_SRC_TABLE), the table's fill,
 * and the sources refused most from `src_top`.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>

#include "kern_int.h"
#include "log.h"
#include "persource.h"

#define SRC_SWEEP_BUSY_NS	(1000ULL * 1000 * 1000)
#define SRC_SWEEP_IDLE_NS	(10 * SRC_SWEEP_BUSY_NS)
#define SRC_BATCH		1024

static void *map_shared(struct kern *k, struct bpf_map *map, size_t len,
			const char *name)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		       bpf_map__fd(map), 0);

	if (p == MAP_FAILED) {
		log_error("couldn't mmap map on '%s/%s': %s", k->pin_dir, name,
			  strerror(errno));
		return NULL;
	}
	return p;
}

int kern_src_open(struct kern *k)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	k->src_conf_len = ((size_t)k->max_tenants * sizeof(struct rl_src_conf) +
			   page - 1) & ~(page - 1);
	k->src_top_len = (RL_SRC_TOP * sizeof(struct rl_src_top) + page - 1) &
			 ~(page - 1);
	k->src_conf = map_shared(k, k->skel->maps.src_conf, k->src_conf_len,
				 "src_conf");
	k->src_ctl = map_shared(k, k->skel->maps.src_ctl, page, "src_ctl");
	k->src_top = map_shared(k, k->skel->maps.src_top, k->src_top_len,
				"src_top");
	k->src_on = calloc(k->max_tenants ? k->max_tenants : 1,
			   sizeof(*k->src_on));
	k->src_tenants = 0;
	if (!k->src_conf || !k->src_ctl || !k->src_top || !k->src_on)
		return -ENOMEM;
	return 0;
}

void kern_src_close(struct kern *k)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (k->src_conf)
		munmap(k->src_conf, k->src_conf_len);
	if (k->src_ctl)
		munmap(k->src_ctl, page);
	if (k->src_top)
		munmap(k->src_top, k->src_top_len);
	free(k->src_on);
	k->src_on = NULL;
	k->src_conf = NULL;
	k->src_ctl = NULL;
	k->src_top = NULL;
}

void kern_src_configure(struct kern *k, uint32_t slot,
			const struct policy_tenant *t, bool fresh)
{
	bool on = t->src_rate.count != 0;

	if (!k->src_conf || slot >= k->max_tenants)
		return;
	if (on != k->src_on[slot]) {
		k->src_on[slot] = on;
		if (on)
			k->src_tenants++;
		else
			k->src_tenants--;
		/* before the new tenant's limit is on: its first new source
		 * already meets the share that counts it */
		__atomic_store_n(&k->src_ctl->share,
				 src_share(k->src_table, k->src_tenants),
				 __ATOMIC_RELAXED);
	}
	src_conf_write(&k->src_conf[slot], t, fresh);
}

/* Lowers a tenant's count of entries by the one just deleted, never
 * below 0: entries a program of before inserted were never counted
 * (layout 4 in rlgate.h). */
static void tenant_entry_gone(struct kern *k, uint32_t tenant)
{
	__s64 *used, n;

	if (tenant >= k->max_tenants)
		return;
	used = &k->src_conf[tenant].used;
	n = __atomic_load_n(used, __ATOMIC_RELAXED);
	while (n > 0 && !__atomic_compare_exchange_n(used, &n, n - 1, false,
						     __ATOMIC_RELAXED,
						     __ATOMIC_RELAXED))
		;
}

/* Whether the entry (key, s) may go at now: its bucket is full again, or
 * its slot has no per-source limit any more. */
static bool reclaimable(const struct kern *k, const struct rl_src_key *key,
			const struct rl_src *s, uint64_t now)
{
	if (key->tenant >= k->max_tenants ||
	    !__atomic_load_n(&k->src_conf[key->tenant].interval_ns,
			     __ATOMIC_ACQUIRE))
		return true;
	return src_reclaimable(s, now);
}

/* An entry in debt beyond what its tenant's bucket holds now: the limit
 * was lowered, or its rate raised, since (a debt of two hours at 1/h
 * would keep the source out for two hours at 1000/s too).  Its tat comes
 * back to an empty bucket of the new limit.  A SYN spending from it at the
 * same moment may be overwritten: that only ever takes a token away. */
static void rebase(struct kern *k, int fd, const struct rl_src_key *key,
		   struct rl_src *s, uint64_t now)
{
	uint64_t tol = __atomic_load_n(&k->src_conf[key->tenant].tolerance_ns,
				       __ATOMIC_RELAXED);

	if (s->tat <= now + tol)
		return;
	s->tat = now + tol;
	bpf_map_update_elem(fd, key, s, BPF_EXIST);
}

/* One pass over `sources` in batches; deletes what reclaimable() allows. */
static uint64_t sweep_table(struct kern *k, uint64_t now)
{
	int fd = bpf_map__fd(k->skel->maps.sources);
	struct rl_src_key *keys = calloc(SRC_BATCH, sizeof(*keys));
	struct rl_src *vals = calloc(SRC_BATCH, sizeof(*vals));
	uint64_t in_batch = 0, out_batch = 0, deleted = 0;
	bool first = true, done = false;

	while (keys && vals && !done) {
		__u32 n = SRC_BATCH;
		int err = bpf_map_lookup_batch(fd, first ? NULL : &in_batch,
					       &out_batch, keys, vals, &n, NULL);

		if (err < 0 && errno != ENOENT) {
			log_warn("couldn't read map on '%s/sources': %s",
				 k->pin_dir, strerror(errno));
			break;
		}
		done = err < 0;
		first = false;
		in_batch = out_batch;
		for (__u32 i = 0; i < n; i++) {
			if (!reclaimable(k, &keys[i], &vals[i], now)) {
				rebase(k, fd, &keys[i], &vals[i], now);
				continue;
			}
			if (bpf_map_delete_elem(fd, &keys[i]) < 0)
				continue;
			__atomic_fetch_sub(&k->src_ctl->used, 1, __ATOMIC_RELAXED);
			tenant_entry_gone(k, keys[i].tenant);
			deleted++;
		}
	}
	free(keys);
	free(vals);
	return deleted;
}

/* Clears the slots of `src_top` whose source has no entry left: it has
 * not been refused since its bucket refilled. */
static void sweep_top(struct kern *k)
{
	int fd = bpf_map__fd(k->skel->maps.sources);
	struct rl_src s;

	for (size_t i = 0; i < RL_SRC_TOP; i++) {
		struct rl_src_top *t = &k->src_top[i];
		struct rl_src_key key;

		if (!__atomic_load_n(&t->denied, __ATOMIC_RELAXED))
			continue;
		memcpy(&key, &t->key, sizeof(key));
		if (bpf_map_lookup_elem(fd, &key, &s) < 0)
			__atomic_store_n(&t->denied, 0, __ATOMIC_RELAXED);
	}
}

uint64_t kern_src_sweep(struct kern *k, uint64_t now_ns)
{
	uint64_t used, deleted;
	struct timespec ts;

	if (!k->src_ctl || now_ns < k->src_next_sweep_ns)
		return 0;
	used = (uint64_t)__atomic_load_n(&k->src_ctl->used, __ATOMIC_RELAXED);
	k->src_next_sweep_ns = now_ns + (used * 4 >= k->src_table ?
					 SRC_SWEEP_BUSY_NS : SRC_SWEEP_IDLE_NS);
	if (!used)
		return 0;
	/* the buckets' clock (RL_FINE_CLOCK_NS): a tat at or before it is
	 * at or before the precise clock too */
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	deleted = sweep_table(k, (uint64_t)ts.tv_sec * 1000000000ULL +
			      (uint64_t)ts.tv_nsec);
	sweep_top(k);
	k->src_reclaimed += deleted;
	return deleted;
}

void kern_src_fill(const struct kern *k, uint64_t *size, uint64_t *used,
		   uint64_t *reclaimed)
{
	int64_t u = k->src_ctl ? __atomic_load_n(&k->src_ctl->used,
						 __ATOMIC_RELAXED) : 0;

	*size = k->src_table;
	*used = u > 0 ? (uint64_t)u : 0;
	*reclaimed = k->src_reclaimed;
}

int kern_src_stats(struct kern *k, uint32_t slot, struct rl_src_stats *out)
{
	struct rl_src_stats *per = calloc((size_t)k->ncpus, sizeof(*per));
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (!per)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(k->skel->maps.src_stats), &slot,
				per) < 0) {
		err = -errno;
	} else {
		for (int c = 0; c < k->ncpus; c++) {
			out->denied += per[c].denied;
			out->shadow_denied += per[c].shadow_denied;
			out->overflow += per[c].overflow;
			out->overflow_denied += per[c].overflow_denied;
			out->inserted += per[c].inserted;
		}
	}
	free(per);
	return err;
}

size_t kern_src_top(const struct kern *k, uint32_t slot,
		    struct src_top_row *rows, size_t max)
{
	if (!k->src_top)
		return 0;
	return src_top_pick(k->src_top, RL_SRC_TOP, slot, rows, max);
}
