// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Pinned maps of an older layout: the layout version the pins record (in
 * the `abi` map; none at all is layout 1), which of them this build can
 * bring forward, and the copy into a map of the new layout pinned in the
 * old one's place, while the old program keeps enforcing on its own.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kern_int.h"
#include "log.h"

/*
 * The layout version (RL_ABI_VERSION) of the pins under the pin dir: 0 when
 * there are none, 1 when there are pins but no `abi` record (the first
 * release wrote none).  0 or -errno (logged).
 */
int kern_pinned_abi(const struct kern *k, __u32 *version)
{
	char path[PATH_MAX + 64];
	struct rl_abi a = { 0 };
	__u32 zero = 0;
	int fd, err = 0;

	snprintf(path, sizeof(path), "%s/abi", k->pin_dir);
	fd = bpf_obj_get(path);
	if (fd < 0) {
		snprintf(path, sizeof(path), "%s/tenants", k->pin_dir);
		*version = access(path, F_OK) == 0 ? 1 : 0;
		return 0;
	}
	if (bpf_map_lookup_elem(fd, &zero, &a) < 0 || a.magic != RL_ABI_MAGIC) {
		log_error("couldn't read layout version on '%s': not a record "
			  "rlgate wrote; remove the pin dir or pick another "
			  "--pin-dir", path);
		err = -EINVAL;
	}
	*version = a.version;
	close(fd);
	return err;
}

/*
 * The classifier of a layout before 5 (port rows of another shape), made
 * anew and empty: the agent publishes the rules into it before it attaches,
 * and the old program keeps walking its own until the new one replaces it.
 */
static bool cls_made_anew(const struct kern *k, const struct bpf_map *map,
			  __u32 from)
{
	return from < 5 && (map == k->skel->maps.cls ||
			    map == k->skel->maps.cls_state);
}

/*
 * Whether a pinned map of an older layout can be brought forward by copying
 * it into a new map of this build's layout: an array of the same type and
 * entry size that only grew or shrank (layout 1 to 2: `counters`), or
 * `conns`, whose entries grew (layout 3 to 4): it is created anew, empty,
 * and kern_conns_upgraded() then restarts every count.  The classifier and
 * the tenant maps are never resized this way: their sizes are
 * --rule-memory's and --max-tenants' (except a classifier made anew, see
 * cls_made_anew()).
 */
bool kern_migratable(const struct kern *k, const struct bpf_map *map,
		     const char *path, __u32 from)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	int fd = bpf_obj_get(path);
	bool ok;

	if (fd < 0)
		return false;
	if (cls_made_anew(k, map, from)) {
		close(fd);
		return true;
	}
	if (map == k->skel->maps.conns) {
		ok = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
		     info.type == bpf_map__type(map) &&
		     info.value_size != bpf_map__value_size(map);
		close(fd);
		return ok;
	}
	ok = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
	     map != k->skel->maps.cls && !kern_tenant_sized(k, map) &&
	     (info.type == BPF_MAP_TYPE_ARRAY ||
	      info.type == BPF_MAP_TYPE_PERCPU_ARRAY) &&
	     info.type == bpf_map__type(map) &&
	     info.key_size == bpf_map__key_size(map) &&
	     info.value_size == bpf_map__value_size(map) &&
	     info.max_entries != bpf_map__max_entries(map);
	close(fd);
	return ok;
}

/*
 * Copies a pinned map of the older layout into its new map (the entries
 * both have), then pins the new one in its place.  The old program keeps
 * its own reference to the old map until the new program replaces it, so
 * enforcement never stops; what the old program counts in between is lost
 * (counters only: buckets live in maps both layouts share).
 */
int kern_migrate_map(struct kern *k, struct bpf_map *map, const char *path,
		     __u32 from)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info), n, i;
	int old_fd, err = 0;
	size_t vsz;
	void *buf;

	old_fd = bpf_obj_get(path);
	if (old_fd < 0 || bpf_obj_get_info_by_fd(old_fd, &info, &len) < 0) {
		err = -errno;
		log_error("couldn't open pinned map on '%s': %s", path,
			  strerror(-err));
		goto cleanup;
	}
	vsz = ((size_t)info.value_size + 7) & ~(size_t)7;
	if (info.type == BPF_MAP_TYPE_PERCPU_ARRAY)
		vsz *= (size_t)libbpf_num_possible_cpus();
	buf = calloc(1, vsz);
	if (!buf) {
		err = -ENOMEM;
		goto cleanup;
	}
	n = info.max_entries < bpf_map__max_entries(map) ?
	    info.max_entries : bpf_map__max_entries(map);
	/* entries of another size: not copied (`conns`, see above) */
	if (info.value_size != bpf_map__value_size(map)) {
		n = 0;
		k->conns_reset_pending = true;
	}
	if (cls_made_anew(k, map, from))
		n = 0;
	for (i = 0; i < n && !err; i++) {
		if (bpf_map_lookup_elem(old_fd, &i, buf) < 0 ||
		    bpf_map_update_elem(bpf_map__fd(map), &i, buf, 0) < 0) {
			err = -errno;
			log_error("couldn't copy entry %u on '%s': %s", i, path,
				  strerror(-err));
		}
	}
	free(buf);
	if (err)
		goto cleanup;
	if (unlink(path) < 0 || bpf_map__pin(map, path) < 0) {
		err = -errno;
		log_error("couldn't pin map on '%s': %s", path, strerror(-err));
		goto cleanup;
	}
	if (cls_made_anew(k, map, from))
		log_info("'%s' was made anew for map layout %u (port rows of "
			 "another shape): the rules are published into it "
			 "before the program is replaced", path, RL_ABI_VERSION);
	else
		log_info("migrated pinned map '%s' from layout %u (%u entries) "
			 "to layout %u (%u entries)", path, from,
			 info.max_entries, RL_ABI_VERSION,
			 bpf_map__max_entries(map));
cleanup:
	if (old_fd >= 0)
		close(old_fd);
	return err;
}

/*
 * After `conns` was created anew (layout 3 to 4) and the new program
 * attached: the entries the counts stood for are gone with the old map, so
 * every capped tenant's epoch moves on and its count restarts at zero, as
 * does the instance's.  Connections open across the upgrade are not
 * counted (their ends give nothing back: their entries are gone).  Done
 * after attaching, so that the old program, which still counts into the old
 * map until then, cannot leave counts no entry stands for.
 */
void kern_conns_upgraded(struct kern *k)
{
	uint32_t n = 0;

	if (!k->conns_reset_pending)
		return;
	k->conns_reset_pending = false;
	for (uint32_t i = 0; i < k->max_tenants; i++) {
		struct rl_tenant *t = &k->tenants[i];

		if (t->mode == RL_MODE_NONE || !(t->flags & RL_F_CONNCAP))
			continue;
		__atomic_fetch_add(&t->conn_epoch, 1, __ATOMIC_RELEASE);
		__atomic_store_n(&t->conns, 0, __ATOMIC_RELEASE);
		k->conns_forgotten[i] = 0;
		n++;
	}
	__atomic_fetch_add(&k->instance->conn_epoch, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&k->instance->conns, 0, __ATOMIC_RELEASE);
	log_info("'%s/conns' was made anew for map layout %u: the counts of %u "
		 "capped tenant(s) restart at zero (connections open across "
		 "the upgrade are not counted)", k->pin_dir, RL_ABI_VERSION, n);
}
