/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* rlagent's side of the kernel (see kern.h): load with pinned maps, attach
 * by netlink (XDP) or tc, write tenants in place through the mmap'ed array
 * and rules by compiling them into the classifier and publishing it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kern.h"
#include "log.h"
#include "loop.h"
#include "preload.h"
#include "slot.h"
#include "state.h"
#include "rlgate.skel.h"

#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC	0xcafe4a11
#endif

/* Our tc filter's identity on the clsact ingress hook. */
#define KERN_TC_HANDLE	0x524c	/* "RL" */
#define KERN_TC_PRIO	1

#define VERIFIER_LOG_SIZE	(1U << 20)
#define VERIFIER_TAIL_LINES	40

static const char *const mode_names[] = {
	[KERN_MODE_AUTO] = "auto",
	[KERN_MODE_NATIVE] = "native",
	[KERN_MODE_SKB] = "skb",
	[KERN_MODE_TC] = "tc",
};

const char *kern_mode_name(enum kern_mode m)
{
	return (unsigned int)m <= KERN_MODE_TC ? mode_names[m] : "?";
}

int kern_parse_mode(const char *s, enum kern_mode *out)
{
	for (unsigned int i = 0; i <= KERN_MODE_TC; i++) {
		if (strcmp(s, mode_names[i]) == 0) {
			*out = (enum kern_mode)i;
			return 0;
		}
	}
	return -EINVAL;
}

static const char *prog_name(const struct kern *k)
{
	return k->use_tc ? "tc_rlgate" : "xdp_rlgate";
}

static struct bpf_program *our_prog(const struct kern *k)
{
	return k->use_tc ? k->skel->progs.tc_rlgate : k->skel->progs.xdp_rlgate;
}

/* Logs the last lines of a verifier log at error level: the reason for a
 * rejection is at the end, and the whole log can be megabytes. */
static void log_verifier_tail(const char *name, const char *buf)
{
	const char *p = buf + strlen(buf);
	int lines = 0;

	if (p == buf)
		return;
	while (p > buf && lines <= VERIFIER_TAIL_LINES) {
		p--;
		if (*p == '\n')
			lines++;
	}
	if (*p == '\n')
		p++;
	log_error("verifier log of '%s' (last %d lines):\n%s", name,
		  VERIFIER_TAIL_LINES, p);
}

/* Creates the pin dir on bpffs and takes an exclusive lock on it for the
 * life of the process: a second agent on the same pin dir would fight over
 * the attachments and the tenant table. */
static int lock_pin_dir(struct kern *k)
{
	struct statfs sfs;
	int err;

	/* Missing parents first (--pin-dir /sys/fs/bpf/site/rlgate): bpffs
	 * takes mkdir like any file system.  A failure is logged there, and
	 * the mkdir below says what it means for the pin dir. */
	state_mkdir_parents(k->pin_dir);
	if (mkdir(k->pin_dir, 0700) < 0 && errno != EEXIST) {
		err = -errno;
		log_error("couldn't create pin dir on '%s': %s%s", k->pin_dir,
			  strerror(-err), err == -ENOENT ?
			  " (is bpffs mounted? mount -t bpf bpf /sys/fs/bpf)" : "");
		return err;
	}
	if (statfs(k->pin_dir, &sfs) < 0) {
		err = -errno;
		log_error("couldn't stat pin dir on '%s': %s", k->pin_dir,
			  strerror(-err));
		return err;
	}
	if ((unsigned long)sfs.f_type != BPF_FS_MAGIC) {
		log_error("couldn't use pin dir on '%s': not on a bpf filesystem "
			  "(mount -t bpf bpf /sys/fs/bpf, or choose a --pin-dir "
			  "under a bpffs mount; inside a network namespace start "
			  "rlagent with nsenter --net=/run/netns/NAME, not ip netns "
			  "exec, which hides /sys/fs/bpf)", k->pin_dir);
		/* We may just have created it on the wrong filesystem. */
		rmdir(k->pin_dir);
		return -ENOTSUP;
	}
	k->lock_fd = open(k->pin_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (k->lock_fd < 0) {
		err = -errno;
		log_error("couldn't open pin dir on '%s': %s", k->pin_dir,
			  strerror(-err));
		return err;
	}
	if (flock(k->lock_fd, LOCK_EX | LOCK_NB) < 0) {
		err = -errno;
		if (err == -EWOULDBLOCK)
			log_error("couldn't lock pin dir on '%s': another rlagent "
				  "is running on it (one agent per pin dir; use "
				  "--pin-dir for a second one)", k->pin_dir);
		else
			log_error("couldn't lock pin dir on '%s': %s",
				  k->pin_dir, strerror(-err));
		close(k->lock_fd);
		k->lock_fd = -1;
		return err == -EWOULDBLOCK ? -EBUSY : err;
	}
	return 0;
}

/* Pins the loaded program under the pin dir, replacing an older pin in
 * one step (bpffs supports rename): the pin always names a live program. */
static int pin_prog(struct kern *k)
{
	char path[PATH_MAX + 64], tmp[PATH_MAX + 64];
	int err;

	snprintf(path, sizeof(path), "%s/%s", k->pin_dir, prog_name(k));
	/* bpffs refuses names with a dot in them. */
	snprintf(tmp, sizeof(tmp), "%s/%s_new", k->pin_dir, prog_name(k));
	unlink(tmp);
	if (bpf_obj_pin(k->prog_fd, tmp) < 0) {
		err = -errno;
		log_error("couldn't pin program on '%s': %s", tmp, strerror(-err));
		return err;
	}
	if (rename(tmp, path) < 0) {
		err = -errno;
		log_error("couldn't rename pin on '%s': %s", path, strerror(-err));
		unlink(tmp);
		return err;
	}
	return 0;
}

/*
 * A pinned map left by another rlgate build whose layout differs: libbpf
 * would only say "Invalid argument".  Names the map, what differs, and what
 * to do.  0 if compatible (or not pinned), -EINVAL otherwise.
 */
static int check_pinned(const struct kern *k, const struct bpf_map *map,
			const char *path)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	int fd = bpf_obj_get(path), err = 0;

	if (fd < 0)
		return 0;	/* libbpf will say what is wrong with it */
	if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
	    map == k->skel->maps.cls && info.type == bpf_map__type(map) &&
	    info.value_size == bpf_map__value_size(map) &&
	    info.max_entries != bpf_map__max_entries(map)) {
		log_error("couldn't adopt pinned map on '%s': the rules there "
			  "have %u MiB and this agent was asked for %u MiB "
			  "(--rule-memory). Start it with --rule-memory %u, or "
			  "detach (rlctl detach IF) and start it again to resize",
			  path, info.max_entries / 1024,
			  bpf_map__max_entries(map) / 1024,
			  info.max_entries / 1024);
		err = -EINVAL;
	} else if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
	    (info.type != bpf_map__type(map) ||
	     info.key_size != bpf_map__key_size(map) ||
	     info.value_size != bpf_map__value_size(map) ||
	     info.max_entries != bpf_map__max_entries(map))) {
		log_error("couldn't adopt pinned map on '%s': it was made by an "
			  "incompatible rlgate build (type %u, key %u, value %u, "
			  "%u entries; this build needs %u, %u, %u, %u). The old "
			  "program keeps enforcing; to switch, detach it with the "
			  "rlctl of its own build (rlctl detach IF) or remove '%s', "
			  "then start this agent", path, info.type, info.key_size,
			  info.value_size, info.max_entries, bpf_map__type(map),
			  bpf_map__key_size(map), bpf_map__value_size(map),
			  bpf_map__max_entries(map), k->pin_dir);
		err = -EINVAL;
	}
	close(fd);
	return err;
}

/*
 * The layout version (RL_ABI_VERSION) of the pins under the pin dir: 0 when
 * there are none, 1 when there are pins but no `abi` record (the first
 * release wrote none).  0 or -errno (logged).
 */
static int pinned_abi(const struct kern *k, __u32 *version)
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
 * Whether a pinned map of an older layout can be brought forward by copying
 * it into a new map of this build's layout: an array of the same type and
 * entry size that only grew or shrank.  (Layout 1 to 2: `counters`.)  The
 * classifier is never resized this way: its size is --rule-memory's.
 */
static bool migratable(const struct kern *k, const struct bpf_map *map,
		       const char *path)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	int fd = bpf_obj_get(path);
	bool ok;

	if (fd < 0)
		return false;
	ok = bpf_obj_get_info_by_fd(fd, &info, &len) == 0 &&
	     map != k->skel->maps.cls &&
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
static int migrate_map(struct bpf_map *map, const char *path,
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
	log_info("migrated pinned map '%s' from layout %u (%u entries) to "
		 "layout %u (%u entries)", path, from, info.max_entries,
		 RL_ABI_VERSION, bpf_map__max_entries(map));
cleanup:
	if (old_fd >= 0)
		close(old_fd);
	return err;
}

int kern_open(struct kern *k, const char *pin_dir, bool use_tc,
	      uint32_t rule_memory_mib)
{
	uint32_t half = rule_memory_mib ? rule_memory_mib * 512 : RL_CLS_GROUPS;
	uint32_t flow_bits;
	struct bpf_map *map, *migrate[8];
	unsigned int n_migrate = 0;
	struct rl_abi abi = { RL_ABI_MAGIC, RL_ABI_VERSION };
	__u32 pinned_version, zero = 0;
	char path[PATH_MAX + 64];
	char *vlog = NULL;
	long page;
	int err, fd;

	memset(k, 0, sizeof(*k));
	k->lock_fd = -1;
	k->prog_fd = -1;
	k->use_tc = use_tc;
	/* Room for the longest pin name after it. */
	if (snprintf(k->pin_dir, sizeof(k->pin_dir), "%s", pin_dir) >=
	    (int)sizeof(k->pin_dir) - 64)
		return -ENAMETOOLONG;
	while (strlen(k->pin_dir) > 1 && k->pin_dir[strlen(k->pin_dir) - 1] == '/')
		k->pin_dir[strlen(k->pin_dir) - 1] = '\0';

	err = lock_pin_dir(k);
	if (err)
		goto cleanup;
	err = pinned_abi(k, &pinned_version);
	if (err)
		goto cleanup;
	if (pinned_version > RL_ABI_VERSION) {
		log_error("couldn't adopt pins on '%s': they were made by a newer "
			  "rlgate (map layout %u; this build knows up to %u). The "
			  "program there keeps enforcing; run the newer build's "
			  "rlagent, or detach with its rlctl (rlctl detach IF) "
			  "before starting this one", k->pin_dir, pinned_version,
			  RL_ABI_VERSION);
		err = -EPROTO;
		goto cleanup;
	}

	k->skel = rlgate_bpf__open();
	if (!k->skel) {
		err = -errno;
		log_error("couldn't open BPF object on '%s': %s", k->pin_dir,
			  strerror(-err));
		goto cleanup;
	}
	/* 1 KiB a group, two halves */
	k->skel->rodata->cls_half = half;
	err = bpf_map__set_max_entries(k->skel->maps.cls, 2 * half);
	if (err) {
		log_error("couldn't size map on '%s/cls': %s", k->pin_dir,
			  strerror(-err));
		goto cleanup;
	}
	/* The same for every start until reboot, as the pins are. */
	flow_bits = rl_flow_bits(libbpf_num_possible_cpus());
	k->skel->rodata->flow_bits = flow_bits;
	err = bpf_map__set_max_entries(k->skel->maps.flow_cache_cpu,
				       1u << flow_bits);
	if (err) {
		log_error("couldn't size map on '%s/flow_cache_cpu': %s",
			  k->pin_dir, strerror(-err));
		goto cleanup;
	}
	/* Every map by its name under the pin dir: libbpf reuses a pinned map
	 * (after checking it is compatible) instead of creating a new one, so
	 * buckets, counters and rules survive a restart. */
	bpf_object__for_each_map(map, k->skel->obj) {
		if (bpf_map__is_internal(map))
			continue;
		snprintf(path, sizeof(path), "%s/%s", k->pin_dir,
			 bpf_map__name(map));
		if (access(path, F_OK) == 0) {
			k->maps_adopted = true;
			/* an older layout's map this build reshaped: filled
			 * and pinned in its place once loaded */
			if (pinned_version < RL_ABI_VERSION &&
			    n_migrate < sizeof(migrate) / sizeof(migrate[0]) &&
			    migratable(k, map, path)) {
				migrate[n_migrate++] = map;
				continue;
			}
			err = check_pinned(k, map, path);
			if (err)
				goto cleanup;
		}
		err = bpf_map__set_pin_path(map, path);
		if (err) {
			log_error("couldn't set pin path on '%s': %s", path,
				  strerror(-err));
			goto cleanup;
		}
	}
	bpf_program__set_autoload(k->skel->progs.xdp_rlgate, !use_tc);
	bpf_program__set_autoload(k->skel->progs.tc_rlgate, use_tc);

	vlog = calloc(1, VERIFIER_LOG_SIZE);
	if (vlog)
		bpf_program__set_log_buf(our_prog(k), vlog, VERIFIER_LOG_SIZE);

	err = rlgate_bpf__load(k->skel);
	if (err) {
		log_error("couldn't load BPF program on '%s': %s%s", k->pin_dir,
			  strerror(-err), err == -EPERM ?
			  " (needs root, or CAP_BPF, CAP_NET_ADMIN and "
			  "CAP_PERFMON)" : "");
		if (vlog)
			log_verifier_tail(prog_name(k), vlog);
		goto cleanup;
	}
	k->prog_fd = bpf_program__fd(our_prog(k));
	for (unsigned int i = 0; i < n_migrate; i++) {
		snprintf(path, sizeof(path), "%s/%s", k->pin_dir,
			 bpf_map__name(migrate[i]));
		err = migrate_map(migrate[i], path, pinned_version);
		if (err)
			goto cleanup;
	}
	if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.abi), &zero, &abi,
				0) < 0) {
		err = -errno;
		log_error("couldn't record the map layout on '%s/abi': %s",
			  k->pin_dir, strerror(-err));
		goto cleanup;
	}
	err = pin_prog(k);
	if (err)
		goto cleanup;

	page = sysconf(_SC_PAGESIZE);
	k->tenants_len = (RL_MAX_TENANTS * sizeof(struct rl_tenant) +
			  (size_t)page - 1) & ~((size_t)page - 1);
	fd = bpf_map__fd(k->skel->maps.tenants);
	k->tenants = mmap(NULL, k->tenants_len, PROT_READ | PROT_WRITE,
			  MAP_SHARED, fd, 0);
	if (k->tenants == MAP_FAILED) {
		err = -errno;
		k->tenants = NULL;
		log_error("couldn't mmap map on '%s/tenants': %s", k->pin_dir,
			  strerror(-err));
		goto cleanup;
	}
	k->agent = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED,
			bpf_map__fd(k->skel->maps.agent_state), 0);
	if (k->agent == MAP_FAILED) {
		err = -errno;
		k->agent = NULL;
		log_error("couldn't mmap map on '%s/agent_state': %s", k->pin_dir,
			  strerror(-err));
		goto cleanup;
	}
	k->agent_len = (size_t)page;
	err = rl_cls_map_open(&k->cls, bpf_map__fd(k->skel->maps.cls),
			      bpf_map__fd(k->skel->maps.cls_state),
			      bpf_map__fd(k->skel->maps.cls_sync), half);
	if (err) {
		log_error("couldn't mmap map on '%s/cls': %s", k->pin_dir,
			  strerror(-err));
		goto cleanup;
	}
	if (!k->fail_agents)
		k->fail_agents = 1;
	k->ncpus = libbpf_num_possible_cpus();
	if (k->ncpus <= 0) {
		err = k->ncpus < 0 ? k->ncpus : -EINVAL;
		log_error("couldn't count CPUs on 'sysfs': %s", strerror(-err));
		goto cleanup;
	}
	log_info("loaded %s (pin dir %s, %s maps)", prog_name(k), k->pin_dir,
		 k->maps_adopted ? "adopted pinned" : "new");
	free(vlog);
	return 0;
cleanup:
	free(vlog);
	/* Pins we just created would only confuse the next start. */
	if (k->skel && !k->maps_adopted)
		kern_unpin(k);
	kern_close(k);
	return err;
}

void kern_close(struct kern *k)
{
	if (k->rb)
		ring_buffer__free(k->rb);
	k->rb = NULL;
	if (k->tenants)
		munmap(k->tenants, k->tenants_len);
	k->tenants = NULL;
	if (k->agent)
		munmap(k->agent, k->agent_len);
	k->agent = NULL;
	rl_cls_map_close(&k->cls);
	preload_close(k->preload);
	k->preload = NULL;
	if (k->skel)
		rlgate_bpf__destroy(k->skel);
	k->skel = NULL;
	if (k->lock_fd >= 0)
		close(k->lock_fd);
	k->lock_fd = -1;
}

/* Fetches name and map ids of a program; 0 or -errno. */
static int prog_info(int fd, char *name, size_t len, __u32 *map_ids,
		     __u32 *n_maps)
{
	struct bpf_prog_info info = {};
	__u32 info_len = sizeof(info);

	info.nr_map_ids = *n_maps;
	info.map_ids = (__u64)(uintptr_t)map_ids;
	if (bpf_obj_get_info_by_fd(fd, &info, &info_len) < 0)
		return -errno;
	snprintf(name, len, "%s", info.name);
	if (info.nr_map_ids < *n_maps)
		*n_maps = info.nr_map_ids;
	return 0;
}

static __u32 map_id(int fd)
{
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);

	if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
		return 0;
	return info.id;
}

/*
 * Decides whether the program with this id may be replaced by ours: it is
 * rlgate's and works on our pinned tenant table.  An rlgate program with
 * other maps belongs to an agent with another pin dir; anything else is
 * someone else's.  0 if ours, -EEXIST (logged) if not, other -errno.
 */
static int check_ours(struct kern *k, const char *ifname, __u32 id)
{
	__u32 ids[16], n = 16, tenants_id;
	char name[BPF_OBJ_NAME_LEN];
	int fd, err;

	fd = bpf_prog_get_fd_by_id(id);
	if (fd < 0) {
		err = -errno;
		log_error("couldn't inspect program %u on '%s': %s", id, ifname,
			  strerror(-err));
		return err;
	}
	err = prog_info(fd, name, sizeof(name), ids, &n);
	close(fd);
	if (err) {
		log_error("couldn't inspect program %u on '%s': %s", id, ifname,
			  strerror(-err));
		return err;
	}
	if (strcmp(name, prog_name(k)) != 0) {
		log_error("couldn't attach on '%s': it already runs program '%s' "
			  "(id %u), which is not rlgate's %s; refusing to replace "
			  "it", ifname, name, id, prog_name(k));
		return -EEXIST;
	}
	tenants_id = map_id(bpf_map__fd(k->skel->maps.tenants));
	for (__u32 i = 0; i < n; i++)
		if (ids[i] == tenants_id)
			return 0;
	log_error("couldn't attach on '%s': it runs an rlgate program (id %u) "
		  "whose maps are not pinned under '%s' (another agent's "
		  "--pin-dir?); detach it there first", ifname, id, k->pin_dir);
	return -EEXIST;
}

static __u32 xdp_flags(enum kern_mode m)
{
	return m == KERN_MODE_SKB ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
}

static int attach_xdp(struct kern *k, const char *ifname, int ifindex,
		      enum kern_mode want, enum kern_mode *got)
{
	LIBBPF_OPTS(bpf_xdp_query_opts, q);
	LIBBPF_OPTS(bpf_xdp_attach_opts, ao);
	enum kern_mode cur;
	__u32 cur_id;
	int err, old_fd;

	err = bpf_xdp_query(ifindex, 0, &q);
	if (err) {
		log_error("couldn't query XDP on '%s': %s", ifname, strerror(-err));
		return err;
	}
	if (q.hw_prog_id) {
		log_error("couldn't attach on '%s': an offloaded XDP program "
			  "(id %u) is attached", ifname, q.hw_prog_id);
		return -EEXIST;
	}
	cur_id = q.drv_prog_id ? q.drv_prog_id : q.skb_prog_id;
	cur = q.drv_prog_id ? KERN_MODE_NATIVE : KERN_MODE_SKB;
	if (cur_id) {
		err = check_ours(k, ifname, cur_id);
		if (err)
			return err;
		if (want != KERN_MODE_AUTO && want != cur)
			log_warn("'%s' runs rlgate in %s mode; keeping %s mode so "
				 "the program is replaced without a gap (detach "
				 "first to change the mode)", ifname,
				 kern_mode_name(cur), kern_mode_name(cur));
		old_fd = bpf_prog_get_fd_by_id(cur_id);
		if (old_fd < 0) {
			err = -errno;
			log_error("couldn't open program %u on '%s': %s", cur_id,
				  ifname, strerror(-err));
			return err;
		}
		/* REPLACE swaps the program in one step, and fails rather
		 * than clobber a program attached in the meantime. */
		ao.old_prog_fd = old_fd;
		err = bpf_xdp_attach(ifindex, k->prog_fd,
				     xdp_flags(cur) | XDP_FLAGS_REPLACE, &ao);
		close(old_fd);
		if (err) {
			log_error("couldn't replace XDP program on '%s': %s",
				  ifname, strerror(-err));
			return err;
		}
		log_info("replaced rlgate program %u on %s (%s mode)", cur_id,
			 ifname, kern_mode_name(cur));
		*got = cur;
		return 0;
	}

	if (want == KERN_MODE_AUTO || want == KERN_MODE_NATIVE) {
		err = bpf_xdp_attach(ifindex, k->prog_fd,
				     XDP_FLAGS_DRV_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST,
				     NULL);
		if (!err) {
			*got = KERN_MODE_NATIVE;
			return 0;
		}
		if (want == KERN_MODE_NATIVE || err == -EPERM || err == -EEXIST ||
		    err == -EBUSY) {
			log_error("couldn't attach native XDP on '%s': %s",
				  ifname, strerror(-err));
			return err;
		}
		log_warn("couldn't attach native XDP on '%s': %s; falling back "
			 "to generic (skb) XDP, which works but is slower",
			 ifname, strerror(-err));
	}
	err = bpf_xdp_attach(ifindex, k->prog_fd,
			     XDP_FLAGS_SKB_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST, NULL);
	if (err) {
		log_error("couldn't attach generic XDP on '%s': %s", ifname,
			  strerror(-err));
		return err;
	}
	*got = KERN_MODE_SKB;
	return 0;
}

static int attach_tc(struct kern *k, const char *ifname, int ifindex)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
		    .attach_point = BPF_TC_INGRESS);
	LIBBPF_OPTS(bpf_tc_opts, q, .handle = KERN_TC_HANDLE,
		    .priority = KERN_TC_PRIO);
	LIBBPF_OPTS(bpf_tc_opts, o, .handle = KERN_TC_HANDLE,
		    .priority = KERN_TC_PRIO, .flags = BPF_TC_F_REPLACE);
	int err;

	err = bpf_tc_hook_create(&hook);
	if (err && err != -EEXIST) {
		log_error("couldn't create clsact qdisc on '%s': %s", ifname,
			  strerror(-err));
		return err;
	}
	err = bpf_tc_query(&hook, &q);
	if (err == 0) {
		err = check_ours(k, ifname, q.prog_id);
		if (err)
			return err;
	}
	/* With REPLACE the filter at our handle and priority swaps programs
	 * in place: no packet sees the hook empty. */
	o.prog_fd = k->prog_fd;
	err = bpf_tc_attach(&hook, &o);
	if (err) {
		log_error("couldn't attach tc program on '%s': %s", ifname,
			  strerror(-err));
		return err;
	}
	return 0;
}

/*
 * The server's side of capped connections: tc_rlgate_egress on the clsact
 * egress hook, at our handle and priority, replacing our own earlier
 * program there in place (never someone else's).  In every mode: XDP sees
 * only what arrives.
 */
static int attach_egress(struct kern *k, const char *ifname, int ifindex)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
		    .attach_point = BPF_TC_EGRESS);
	LIBBPF_OPTS(bpf_tc_opts, q, .handle = KERN_TC_HANDLE,
		    .priority = KERN_TC_PRIO);
	LIBBPF_OPTS(bpf_tc_opts, o, .handle = KERN_TC_HANDLE,
		    .priority = KERN_TC_PRIO, .flags = BPF_TC_F_REPLACE);
	char name[BPF_OBJ_NAME_LEN] = "";
	__u32 ids[16], n = 16;
	int err, fd;

	err = bpf_tc_hook_create(&hook);
	if (err && err != -EEXIST) {
		log_error("couldn't create clsact qdisc on '%s': %s", ifname,
			  strerror(-err));
		return err;
	}
	if (bpf_tc_query(&hook, &q) == 0) {
		fd = bpf_prog_get_fd_by_id(q.prog_id);
		if (fd >= 0) {
			prog_info(fd, name, sizeof(name), ids, &n);
			close(fd);
		}
		/* the kernel keeps 15 characters of a program's name */
		if (strncmp(name, "tc_rlgate_egress", sizeof(name) - 1) != 0) {
			log_error("couldn't attach on '%s': its tc egress hook "
				  "runs program '%s' (id %u) at rlgate's handle; "
				  "refusing to replace it", ifname, name,
				  q.prog_id);
			return -EEXIST;
		}
	}
	o.prog_fd = bpf_program__fd(k->skel->progs.tc_rlgate_egress);
	err = bpf_tc_attach(&hook, &o);
	if (err)
		log_error("couldn't attach tc egress program on '%s': %s",
			  ifname, strerror(-err));
	return err;
}

static void detach_egress(int ifindex)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex,
		    .attach_point = BPF_TC_EGRESS);
	LIBBPF_OPTS(bpf_tc_opts, o, .handle = KERN_TC_HANDLE,
		    .priority = KERN_TC_PRIO);

	bpf_tc_detach(&hook, &o);
}

int kern_attach(struct kern *k, const char *ifname, enum kern_mode mode)
{
	enum kern_mode got = mode;
	struct kern_iface *ifc;
	int ifindex, err;

	for (unsigned int i = 0; i < k->n_ifaces; i++)
		if (strcmp(k->ifaces[i].name, ifname) == 0)
			return 0;
	if (k->n_ifaces >= KERN_MAX_IFACES) {
		log_error("couldn't attach on '%s': at most %d interfaces",
			  ifname, KERN_MAX_IFACES);
		return -E2BIG;
	}
	if (strlen(ifname) >= IF_NAMESIZE) {
		log_error("couldn't find interface on '%s': name too long", ifname);
		return -ENODEV;
	}
	ifindex = (int)if_nametoindex(ifname);
	if (!ifindex) {
		err = -errno;
		log_error("couldn't find interface on '%s': %s", ifname,
			  err == -ENODEV ? "no such interface" : strerror(-err));
		return err;
	}
	if (k->use_tc) {
		err = attach_tc(k, ifname, ifindex);
		got = KERN_MODE_TC;
	} else {
		err = attach_xdp(k, ifname, ifindex, mode, &got);
	}
	if (err)
		return err;
	/* Without it, connection caps still hold: what the server ends is
	 * found by the agent's sweep instead, a second or two later. */
	if (attach_egress(k, ifname, ifindex))
		log_warn("connection caps on '%s' see the server's FIN and RST "
			 "only through the sweep", ifname);
	ifc = &k->ifaces[k->n_ifaces++];
	snprintf(ifc->name, sizeof(ifc->name), "%s", ifname);
	ifc->ifindex = ifindex;
	ifc->mode = got;
	log_info("attached %s to %s (%s)", prog_name(k), ifname,
		 kern_mode_name(got));
	return 0;
}

int kern_detach(struct kern *k, const char *ifname)
{
	struct kern_iface *ifc = NULL;
	unsigned int i;
	int err;

	for (i = 0; i < k->n_ifaces; i++) {
		if (strcmp(k->ifaces[i].name, ifname) == 0) {
			ifc = &k->ifaces[i];
			break;
		}
	}
	if (!ifc)
		return -ENOENT;
	if (ifc->mode == KERN_MODE_TC) {
		LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifc->ifindex,
			    .attach_point = BPF_TC_INGRESS);
		LIBBPF_OPTS(bpf_tc_opts, o, .handle = KERN_TC_HANDLE,
			    .priority = KERN_TC_PRIO);

		err = bpf_tc_detach(&hook, &o);
	} else {
		LIBBPF_OPTS(bpf_xdp_attach_opts, ao, .old_prog_fd = k->prog_fd);

		/* REPLACE with our fd: never detach a program someone put
		 * there after us. */
		err = bpf_xdp_detach(ifc->ifindex,
				     xdp_flags(ifc->mode) | XDP_FLAGS_REPLACE, &ao);
	}
	if (err && err != -ENOENT && err != -ENODEV) {
		log_error("couldn't detach program on '%s': %s", ifname,
			  strerror(-err));
		return err;
	}
	detach_egress(ifc->ifindex);
	log_info("detached %s from %s", prog_name(k), ifname);
	memmove(ifc, ifc + 1, (k->n_ifaces - i - 1) * sizeof(*ifc));
	k->n_ifaces--;
	return 0;
}

static const char *const legacy_pins[] = {
	"flows",	/* LRU hash, replaced by flow_cache */
	"flow_cache",	/* shared array, replaced by flow_cache_cpu */
	"rules4",	/* LPM tries, replaced by cls */
	"rules4_port",
	"rules6",
	"rules6_port",
	"tc_rlgate",	/* a tc-mode program pin when this run is XDP, or... */
	"xdp_rlgate",	/* ...the other way round */
};

int kern_unpin(struct kern *k)
{
	struct bpf_map *map;
	char path[PATH_MAX + 64];
	int err = 0;

	bpf_object__for_each_map(map, k->skel->obj) {
		if (bpf_map__is_internal(map) || !bpf_map__is_pinned(map))
			continue;
		if (bpf_map__unpin(map, NULL) < 0)
			log_warn("couldn't unpin map on '%s'",
				 bpf_map__pin_path(map));
	}
	snprintf(path, sizeof(path), "%s/%s", k->pin_dir, prog_name(k));
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("couldn't unpin program on '%s': %s", path,
			 strerror(errno));
	/* Maps that earlier builds pinned and this one no longer has. */
	for (size_t i = 0; i < sizeof(legacy_pins) / sizeof(legacy_pins[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", k->pin_dir, legacy_pins[i]);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warn("couldn't unpin old map on '%s': %s", path,
				 strerror(errno));
	}
	if (rmdir(k->pin_dir) < 0) {
		err = -errno;
		log_warn("couldn't remove pin dir on '%s': %s", k->pin_dir,
			 strerror(-err));
	}
	return err;
}

/* --- tenants ------------------------------------------------------------- */

void kern_tenant_configure(struct kern *k, uint32_t slot,
			   const struct policy_tenant *t, bool fresh)
{
	struct rl_tenant *rt = &k->tenants[slot];

	if (fresh) {
		size_t sz = (size_t)k->ncpus * sizeof(struct rl_stats);
		void *zero = calloc(1, sz);

		/* Out of service while the counters are reset (and the bucket,
		 * by rl_slot_configure): no SYN counts for a half-reset slot. */
		__atomic_store_n(&rt->mode, RL_MODE_NONE, __ATOMIC_RELEASE);
		if (zero) {
			if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.tenant_stats),
						&slot, zero, BPF_ANY) < 0)
				log_warn("couldn't reset counters on 'tenant_stats' "
					 "slot %u: %s", slot, strerror(errno));
			/* rl_conn_stats is no larger than rl_stats */
			if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.conn_stats),
						&slot, zero, BPF_ANY) < 0)
				log_warn("couldn't reset counters on 'conn_stats' "
					 "slot %u: %s", slot, strerror(errno));
			free(zero);
		}
		k->conns_forgotten[slot] = 0;
	}
	rl_slot_configure(rt, t, fresh, k->leased, k->fail_agents, loop_now_ns());
	if (k->preload) {
		if (fresh)
			preload_slot_fresh(k->preload, slot);
		rl_slot_configure(preload_slot(k->preload, slot), t, fresh,
				  k->leased, k->fail_agents, loop_now_ns());
		preload_changed(k->preload);
	}
}

void kern_tenant_fail(struct kern *k, uint32_t slot, const struct policy_tenant *t)
{
	rl_slot_fail(&k->tenants[slot], t, k->fail_agents);
	if (k->preload)
		rl_slot_fail(preload_slot(k->preload, slot), t, k->fail_agents);
}

static void tokens_balance(struct kern *k);

void kern_fleet_state(struct kern *k, uint64_t now_ns, uint64_t stale_ns,
		      bool degraded)
{
	if (!k->agent)
		return;
	__atomic_store_n(&k->agent->stale_ns, stale_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&k->agent->degraded, degraded ? 1 : 0, __ATOMIC_RELAXED);
	__atomic_store_n(&k->agent->heartbeat_ns, now_ns, __ATOMIC_RELEASE);
	if (k->preload) {
		preload_heartbeat(k->preload, now_ns, stale_ns, degraded);
		tokens_balance(k);
	}
}

static void flag_degraded(struct rl_tenant *rt, bool on)
{
	if (on)
		__atomic_fetch_or(&rt->flags, RL_F_DEGRADED, __ATOMIC_RELAXED);
	else
		__atomic_fetch_and(&rt->flags, ~RL_F_DEGRADED, __ATOMIC_RELAXED);
}

void kern_tenant_degraded(struct kern *k, uint32_t slot, bool on)
{
	flag_degraded(&k->tenants[slot], on);
	if (k->preload)
		flag_degraded(preload_slot(k->preload, slot), on);
}

uint64_t kern_fleet_agents(struct kern *k, uint64_t n)
{
	if (!k->agent)
		return 0;
	if (n)
		__atomic_store_n(&k->agent->live_agents,
				 (uint32_t)(n < UINT32_MAX ? n : UINT32_MAX),
				 __ATOMIC_RELAXED);
	return __atomic_load_n(&k->agent->live_agents, __ATOMIC_RELAXED);
}

/* The kernel's own counts of slot (without the pool's).  0 or -errno. */
static int kern_own_stats(struct kern *k, uint32_t slot, struct rl_stats *out);

void kern_tokens_add(struct kern *k, uint32_t slot, uint64_t n, int64_t lowwater)
{
	if (k->preload && n) {
		struct rl_stats st;
		uint64_t count = 0, give;

		if (kern_own_stats(k, slot, &st) == 0)
			count = st.admitted + st.denied;
		/* a host that attaches nowhere enforces only in the pool */
		give = preload_split(k->preload, slot, n, count, k->n_ifaces == 0);
		rl_slot_tokens_add(preload_slot(k->preload, slot), give, lowwater);
		n -= give;
	} else if (k->preload) {
		rl_slot_tokens_add(preload_slot(k->preload, slot), 0, lowwater);
	}
	rl_slot_tokens_add(&k->tenants[slot], n, lowwater);
}

uint64_t kern_tokens_take(struct kern *k, uint32_t slot, uint64_t max)
{
	uint64_t got = 0;

	if (k->preload)
		got = rl_slot_tokens_take(preload_slot(k->preload, slot), max);
	if (!max || got < max)
		got += rl_slot_tokens_take(&k->tenants[slot], max ? max - got : 0);
	return got;
}

/* Every fleet check: tokens move to the point that ran dry with demand
 * from the one that holds them (see rl_share_balance).  Whether a point
 * had demand is what its low-water flag says: spending down to the mark
 * disarms it, and a grant re-arms it. */
static void tokens_balance(struct kern *k)
{
	for (uint32_t slot = 0; slot < RL_MAX_TENANTS; slot++) {
		struct rl_tenant *kt = &k->tenants[slot];
		struct rl_tenant *pt = preload_slot(k->preload, slot);
		int64_t kn, pn, move;

		if (__atomic_load_n(&kt->mode, __ATOMIC_ACQUIRE) != RL_MODE_LEASED)
			continue;
		kn = __atomic_load_n(&kt->tokens, __ATOMIC_ACQUIRE);
		pn = __atomic_load_n(&pt->tokens, __ATOMIC_ACQUIRE);
		move = rl_share_balance(kn, pn,
					!__atomic_load_n(&kt->lowwater_armed,
							 __ATOMIC_RELAXED),
					!__atomic_load_n(&pt->lowwater_armed,
							 __ATOMIC_RELAXED));
		if (move > 0)
			rl_slot_tokens_add(pt, rl_slot_tokens_take(kt, (uint64_t)move),
					   __atomic_load_n(&pt->lowwater,
							   __ATOMIC_RELAXED));
		else if (move < 0)
			rl_slot_tokens_add(kt, rl_slot_tokens_take(pt, (uint64_t)-move),
					   __atomic_load_n(&kt->lowwater,
							   __ATOMIC_RELAXED));
	}
}

void kern_conn_slots(struct kern *k, uint32_t slot, int64_t n)
{
	__atomic_store_n(&k->tenants[slot].conn_slots, n, __ATOMIC_RELEASE);
}

int64_t kern_conns_in_flight(const struct kern *k, uint32_t slot)
{
	int64_t n = __atomic_load_n(&k->tenants[slot].conns, __ATOMIC_RELAXED);

	return n > 0 ? n : 0;
}

void kern_conn_gate(struct kern *k, uint32_t capped)
{
	struct rl_conn_ctl c = { .capped = capped };
	__u32 zero = 0;

	if (bpf_map_update_elem(bpf_map__fd(k->skel->maps.conn_ctl), &zero,
				&c, BPF_ANY) < 0)
		log_warn("couldn't write map on '%s/conn_ctl': %s", k->pin_dir,
			 strerror(errno));
}

int kern_tenant_conns(struct kern *k, uint32_t slot, struct kern_conns *out)
{
	const struct rl_tenant *rt = &k->tenants[slot];
	struct rl_conn_stats *per;
	int err = 0;

	memset(out, 0, sizeof(*out));
	out->in_flight = __atomic_load_n(&rt->conns, __ATOMIC_RELAXED);
	out->slots = __atomic_load_n(&rt->conn_slots, __ATOMIC_RELAXED);
	out->forgotten = k->conns_forgotten[slot];
	per = calloc((size_t)k->ncpus, sizeof(*per));
	if (!per)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(k->skel->maps.conn_stats), &slot,
				per) < 0)
		err = -errno;
	for (int c = 0; !err && c < k->ncpus; c++) {
		out->s.opened += per[c].opened;
		out->s.closed += per[c].closed;
		out->s.denied += per[c].denied;
		out->s.shadow_denied += per[c].shadow_denied;
		out->s.repeats += per[c].repeats;
		out->s.reused += per[c].reused;
		out->s.full += per[c].full;
	}
	free(per);
	return err;
}

void kern_tenant_clear(struct kern *k, uint32_t slot)
{
	struct rl_tenant *rt = &k->tenants[slot];

	__atomic_store_n(&rt->mode, RL_MODE_NONE, __ATOMIC_RELEASE);
	__atomic_fetch_add(&rt->generation, 1, __ATOMIC_RELEASE);
	if (k->preload) {
		__atomic_store_n(&preload_slot(k->preload, slot)->mode,
				 RL_MODE_NONE, __ATOMIC_RELEASE);
		preload_changed(k->preload);
	}
}

bool kern_slot_live(const struct kern *k, uint32_t slot)
{
	return __atomic_load_n(&k->tenants[slot].mode, __ATOMIC_ACQUIRE) !=
	       RL_MODE_NONE;
}

uint64_t kern_tenant_tokens(const struct kern *k, uint32_t slot,
			    uint64_t now_ns)
{
	uint64_t n = rl_slot_tokens(&k->tenants[slot], now_ns);

	/* leased tokens are one lease wherever they lie; standalone, the
	 * bucket that counts is the pool's when nothing is attached */
	if (k->preload && k->leased)
		n += rl_slot_tokens(preload_slot(k->preload, slot), now_ns);
	else if (k->preload && !k->n_ifaces)
		n = rl_slot_tokens(preload_slot(k->preload, slot), now_ns);
	return n;
}

int kern_tenant_stats(struct kern *k, uint32_t slot, struct rl_stats *out)
{
	struct rl_stats pool;
	int err = kern_point_stats(k, slot, out, &pool);

	rl_stats_add(out, &pool);
	return err;
}

int kern_point_stats(struct kern *k, uint32_t slot, struct rl_stats *kernel,
		     struct rl_stats *preload)
{
	memset(preload, 0, sizeof(*preload));
	if (k->preload)
		preload_stats(k->preload, slot, preload);
	return kern_own_stats(k, slot, kernel);
}

void kern_point_tokens(const struct kern *k, uint32_t slot, uint64_t now_ns,
		       uint64_t *kernel, uint64_t *preload)
{
	*kernel = rl_slot_tokens(&k->tenants[slot], now_ns);
	*preload = k->preload ? rl_slot_tokens(preload_slot(k->preload, slot),
					       now_ns) : 0;
}

static int kern_own_stats(struct kern *k, uint32_t slot, struct rl_stats *out)
{
	struct rl_stats *per;
	int err = 0;

	memset(out, 0, sizeof(*out));
	per = calloc((size_t)k->ncpus, sizeof(*per));
	if (!per)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(k->skel->maps.tenant_stats), &slot,
				per) < 0) {
		err = -errno;
		goto cleanup;
	}
	for (int c = 0; c < k->ncpus; c++)
		rl_stats_add(out, &per[c]);
cleanup:
	free(per);
	return err;
}

int kern_counters(struct kern *k, uint64_t *out)
{
	int fd = bpf_map__fd(k->skel->maps.counters);
	uint64_t *per;

	per = calloc((size_t)k->ncpus, sizeof(*per));
	if (!per)
		return -ENOMEM;
	for (__u32 i = 0; i < RL_CNT_MAX; i++) {
		out[i] = 0;
		if (bpf_map_lookup_elem(fd, &i, per) < 0)
			continue;
		for (int c = 0; c < k->ncpus; c++)
			out[i] += per[c];
	}
	free(per);
	return 0;
}

/* --- rules --------------------------------------------------------------- */

/* Compiles the rules of the tenants of direction dir among bs[0..n) into
 * img.  0 or -errno, worded for the operator in k->rules_err. */
static int compile_dir(struct kern *k, const struct kern_binding *bs, size_t n,
		       enum policy_direction dir, struct rl_cls_image *img,
		       size_t *n_rules)
{
	struct rl_cls_rule *rules = NULL;
	char *msg = k->rules_err;
	size_t msg_len = sizeof(k->rules_err), cap = 0;
	int err = 0;

	*n_rules = 0;
	for (size_t b = 0; b < n && !err; b++)
		if (bs[b].t->direction == dir)
			err = rl_cls_rules_add(&rules, n_rules, &cap, bs[b].t,
					       bs[b].slot);
	if (!err)
		err = rl_cls_compile(rules, *n_rules, k->cls.half, img, msg,
				     msg_len);
	else
		snprintf(msg, msg_len, "out of memory");
	free(rules);
	if (err == -ENOSPC) {
		size_t len = strlen(msg);

		snprintf(msg + len, msg_len - len, "; the agent's --rule-memory "
			 "sets the size");
	}
	if (err)
		log_error("couldn't compile %zu %s rules for '%s/cls': %s", *n_rules,
			  dir == POLICY_DIR_OUT ? "outbound" : "inbound",
			  k->pin_dir, msg);
	return err;
}

int kern_rules_sync(struct kern *k, const struct kern_binding *bs, size_t n)
{
	struct rl_cls_image img, out = { 0 };
	char *msg = k->rules_err;
	size_t msg_len = sizeof(k->rules_err), n_rules, n_out = 0;
	int err;

	/* Outbound tenants only ever apply in preloaded programs: the kernel
	 * judges SYNs by their source, so their rules never reach it. */
	err = compile_dir(k, bs, n, POLICY_DIR_IN, &img, &n_rules);
	if (err)
		return err;
	if (k->preload) {
		err = compile_dir(k, bs, n, POLICY_DIR_OUT, &out, &n_out);
		if (err) {
			rl_cls_image_free(&img);
			return err;
		}
	}
	err = rl_cls_publish(&k->cls, &img);
	if (err) {
		snprintf(msg, msg_len, "couldn't publish the rules: %s",
			 strerror(-err));
		log_error("couldn't publish rules on '%s/cls': %s", k->pin_dir,
			  strerror(-err));
	}
	else {
		k->cls_used = img.n_groups;
		log_debug("published %zu rules (%u tables, %u port columns, %u "
			  "port rows)", n_rules, img.n_groups, img.n_columns,
			  img.n_rows);
		/* The pool has the kernel's size, so it takes whatever the
		 * kernel took; a failure is logged there. */
		if (k->preload) {
			preload_rules(k->preload, RL_POOL_IN, &img, n_rules);
			preload_rules(k->preload, RL_POOL_OUT, &out, n_out);
			log_debug("published %zu outbound rules to the preload "
				  "pool", n_out);
		}
	}
	rl_cls_image_free(&out);
	rl_cls_image_free(&img);
	return err;
}

/* --- events -------------------------------------------------------------- */

int kern_events_open(struct kern *k, int (*fn)(void *ctx, void *data,
					       size_t size), void *ctx)
{
	k->rb = ring_buffer__new(bpf_map__fd(k->skel->maps.events), fn, ctx,
				 NULL);
	if (!k->rb) {
		int err = -errno;

		log_error("couldn't open ring buffer on '%s/events': %s",
			  k->pin_dir, strerror(-err));
		return err;
	}
	return 0;
}

int kern_events_fd(const struct kern *k)
{
	return k->rb ? ring_buffer__epoll_fd(k->rb) : -1;
}

int kern_events_consume(struct kern *k)
{
	return k->rb ? ring_buffer__consume(k->rb) : 0;
}
