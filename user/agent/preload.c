// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * rlagent's side of the preload pool: the file made or adopted at start,
 * and what kern.c mirrors into it.  Everything here is a thin layer over
 * user/lib/pool_write.c; the decisions live in user/lib.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "classify.h"
#include "log.h"
#include "pool_write.h"
#include "preload.h"
#include "slot.h"

int preload_open(struct preload **out, const char *path, gid_t gid,
		 uint32_t cls_half)
{
	struct preload *p = calloc(1, sizeof(*p));
	int err;

	if (!p)
		return -ENOMEM;
	snprintf(p->path, sizeof(p->path), "%s", path);
	err = rl_pool_create(&p->pool, path, RL_MAX_TENANTS, cls_half, gid,
			     &p->adopted);
	if (err) {
		log_error("couldn't make the preload pool on '%s': %s", path,
			  strerror(-err));
		free(p);
		return err;
	}
	log_info("preload pool '%s' %s (%u tenant slots)", path,
		 p->adopted ? "adopted" : "made", RL_MAX_TENANTS);
	/* the counts already there are where the next split starts from */
	for (uint32_t s = 0; s < RL_MAX_TENANTS; s++) {
		struct rl_stats st;

		rl_pool_tenant_stats(&p->pool, s, &st);
		p->pool_seen[s] = st.admitted + st.denied;
	}
	*out = p;
	return 0;
}

void preload_close(struct preload *p)
{
	if (!p)
		return;
	/* The file stays: preloaded processes keep the rules and buckets
	 * they have, and a restarted agent adopts it. */
	rl_pool_unmap(&p->pool);
	free(p);
}

struct rl_tenant *preload_slot(struct preload *p, uint32_t slot)
{
	return &p->pool.tenants[slot];
}

void preload_slot_fresh(struct preload *p, uint32_t slot)
{
	__atomic_store_n(&p->pool.tenants[slot].mode, RL_MODE_NONE,
			 __ATOMIC_RELEASE);
	memset(&p->pool.stats[slot], 0, sizeof(p->pool.stats[slot]));
	p->pool_seen[slot] = 0;
}

void preload_changed(struct preload *p)
{
	__atomic_fetch_add(&p->pool.hdr->generation, 1, __ATOMIC_RELEASE);
}

int preload_rules(struct preload *p, enum rl_pool_dir dir,
		  const struct rl_cls_image *img, size_t n_rules)
{
	int err = rl_pool_publish(&p->pool, dir, img, n_rules);

	if (err)
		log_error("couldn't publish %s rules on preload pool '%s': %s",
			  dir == RL_POOL_OUT ? "outbound" : "inbound", p->path,
			  strerror(-err));
	return err;
}

void preload_heartbeat(struct preload *p, uint64_t now_ns, uint64_t stale_ns,
		       bool degraded)
{
	rl_pool_heartbeat(&p->pool, now_ns, stale_ns, degraded);
}

void preload_stats(const struct preload *p, uint32_t slot, struct rl_stats *out)
{
	rl_pool_tenant_stats(&p->pool, slot, out);
}

uint64_t preload_split(struct preload *p, uint32_t slot, uint64_t n,
		       uint64_t kern_count, bool prefer_pool)
{
	struct rl_stats st;
	uint64_t pool_count, kd, pd;

	rl_pool_tenant_stats(&p->pool, slot, &st);
	pool_count = st.admitted + st.denied;
	/* counts reset by a fresh slot start again from zero */
	kd = kern_count >= p->kern_seen[slot] ? kern_count - p->kern_seen[slot] :
						kern_count;
	pd = pool_count >= p->pool_seen[slot] ? pool_count - p->pool_seen[slot] :
						pool_count;
	p->kern_seen[slot] = kern_count;
	p->pool_seen[slot] = pool_count;
	return rl_share_split(n, kd, pd, prefer_pool);
}

size_t preload_procs(struct preload *p, struct rl_pool_proc *out, size_t max)
{
	return rl_pool_procs(&p->pool, out, max);
}

/* A process's state as the operator reads it. */
static const char *proc_state(uint32_t flags)
{
	if (flags & (RL_POOL_P_ACCEPT | RL_POOL_P_CONNECT))
		return "governed";
	/* listened through the library, but no accept came through it:
	 * not yet, or its accepts bypass libc (io_uring, raw syscalls) */
	if (flags & RL_POOL_P_LISTEN)
		return "listening";
	return "loaded";
}

json_t *preload_status_json(struct preload *p, uint64_t now)
{
	struct rl_pool_proc *procs = calloc(RL_POOL_PROCS, sizeof(*procs));
	json_t *arr = json_array(), *r;
	size_t n = procs ? preload_procs(p, procs, RL_POOL_PROCS) : 0;

	for (size_t i = 0; i < n && i < RL_POOL_PROCS; i++) {
		const struct rl_pool_proc *s = &procs[i];
		char comm[sizeof(s->comm) + 1];

		memcpy(comm, s->comm, sizeof(s->comm));
		comm[sizeof(s->comm)] = '\0';
		json_array_append_new(arr, json_pack(
			"{s:I,s:s,s:s,s:I,s:I,s:I}",
			"pid", (json_int_t)s->pid, "name", comm,
			"state", proc_state(s->flags),
			"admitted", (json_int_t)s->admitted,
			"denied", (json_int_t)s->denied,
			"idle_s", s->seen_ns && now > s->seen_ns ?
				  (json_int_t)((now - s->seen_ns) / 1000000000ULL) :
				  (json_int_t)-1));
	}
	free(procs);
	r = json_pack("{s:s,s:o,s:I,s:I}", "pool", p->path, "processes", arr,
		      "other_layout", (json_int_t)__atomic_load_n(
			      &p->pool.hdr->pre.foreign, __ATOMIC_RELAXED),
		      "table_full", (json_int_t)__atomic_load_n(
			      &p->pool.hdr->procs_full, __ATOMIC_RELAXED));
	return r;
}
