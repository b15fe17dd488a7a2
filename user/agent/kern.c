/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Loading rlgate's program (see kern.h): the pin dir locked on bpffs, every
 * map adopted from its pin or pinned new (pins of an older layout brought
 * forward by kern_migrate.c), the program loaded and pinned, the shared
 * tables mapped; and the pins removed after the last detach.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "kern_int.h"
#include "log.h"
#include "mem.h"
#include "preload.h"
#include "state.h"

#ifndef BPF_FS_MAGIC
#define BPF_FS_MAGIC	0xcafe4a11
#endif

#define VERIFIER_LOG_SIZE	(1U << 20)
#define VERIFIER_TAIL_LINES	40

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
	if (mkdir(k->pin_dir, 0700) == 0)
		k->pin_dir_made = true;
	else if (errno != EEXIST) {
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
		if (k->pin_dir_made)
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

bool kern_tenant_sized(const struct kern *k, const struct bpf_map *map)
{
	return map == k->skel->maps.tenants ||
	       map == k->skel->maps.tenant_stats ||
	       map == k->skel->maps.conn_stats ||
	       map == k->skel->maps.src_conf ||
	       map == k->skel->maps.src_stats;
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
	__u32 len = sizeof(info), div;
	int fd = bpf_obj_get(path), err = 0;
	const char *opt, *unit;
	bool cls;

	if (fd < 0)
		return 0;	/* libbpf will say what is wrong with it */
	/* the maps an option sizes: the size in its unit */
	cls = map == k->skel->maps.cls;
	opt = cls ? "--rule-memory" :
	      kern_tenant_sized(k, map) ? "--max-tenants" :
	      map == k->skel->maps.sources ? "--per-source-table" : NULL;
	unit = cls ? "MiB of rules" :
	       map == k->skel->maps.sources ? "sources" : "tenants";
	div = cls ? 1024 : 1;
	if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && opt &&
	    info.type == bpf_map__type(map) &&
	    info.value_size == bpf_map__value_size(map) &&
	    info.max_entries != bpf_map__max_entries(map)) {
		log_error("couldn't adopt pinned map on '%s': it holds %u %s "
			  "and this agent was asked for %u %s (%s). Start it "
			  "with %s %u, or detach (rlctl detach IF) and start it "
			  "again to resize", path, info.max_entries / div, unit,
			  bpf_map__max_entries(map) / div, unit, opt, opt,
			  info.max_entries / div);
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
 * Groups per half of `cls` when --rule-memory is not given: the size the
 * pins have (a restart adopts them, whatever the default was when they
 * were made), else rl_cls_default_half(--max-tenants).
 */
static uint32_t default_half(const struct kern *k, __u32 pinned_version,
			     uint32_t max_tenants)
{
	char path[PATH_MAX + 64];
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	uint64_t half;
	int fd;

	snprintf(path, sizeof(path), "%s/cls", k->pin_dir);
	fd = pinned_version >= 5 ? bpf_obj_get(path) : -1;
	if (fd >= 0) {
		int err = bpf_obj_get_info_by_fd(fd, &info, &len);

		close(fd);
		if (!err && info.max_entries / 2 >= RL_CLS_GROUPS_MIN &&
		    info.max_entries / 2 <= RL_CLS_GROUPS_MAX)
			return info.max_entries / 2;
	}
	half = rl_cls_default_half(max_tenants ? max_tenants : RL_MAX_TENANTS);
	return (uint32_t)half;
}

int kern_open(struct kern *k, const char *pin_dir, bool use_tc,
	      uint32_t rule_memory_mib, uint32_t max_tenants,
	      uint32_t src_table)
{
	uint32_t half = rule_memory_mib * 512;
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
	k->syncookies = KERN_SYNCOOKIES_UNREAD;
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
	err = kern_pinned_abi(k, &pinned_version);
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

	if (!half)
		half = default_half(k, pinned_version, max_tenants);

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
	k->max_tenants = max_tenants ? max_tenants : RL_MAX_TENANTS;
	k->conns_forgotten = calloc(k->max_tenants, sizeof(*k->conns_forgotten));
	k->conn_refused = calloc(k->max_tenants, sizeof(*k->conn_refused));
	if (!k->conns_forgotten || !k->conn_refused) {
		err = -ENOMEM;
		goto cleanup;
	}
	bpf_object__for_each_map(map, k->skel->obj) {
		if (!kern_tenant_sized(k, map))
			continue;
		err = bpf_map__set_max_entries(map, k->max_tenants);
		if (err) {
			log_error("couldn't size map on '%s/%s': %s", k->pin_dir,
				  bpf_map__name(map), strerror(-err));
			goto cleanup;
		}
	}
	k->src_table = src_table ? src_table : RL_SRC_TABLE;
	err = bpf_map__set_max_entries(k->skel->maps.sources, k->src_table);
	if (err) {
		log_error("couldn't size map on '%s/sources': %s", k->pin_dir,
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
	err = bpf_map__set_max_entries(k->skel->maps.flow_tags_cpu,
				       (1u << flow_bits) / RL_FLOW_TAG_LINE);
	if (err) {
		log_error("couldn't size map on '%s/flow_tags_cpu': %s",
			  k->pin_dir, strerror(-err));
		goto cleanup;
	}
	/* Every map by its name under the pin dir: libbpf reuses a pinned map
	 * (after checking it is compatible) instead of creating a new one, so
	 * buckets, counters and rules survive a restart. */
	bpf_object__for_each_map(map, k->skel->obj) {
		/* The flow cache's tags start unknown with each program, so
		 * that none can hide a flow the pinned slots hold from the
		 * program before (see struct rl_flow_tags). */
		if (bpf_map__is_internal(map) ||
		    map == k->skel->maps.flow_tags_cpu)
			continue;
		snprintf(path, sizeof(path), "%s/%s", k->pin_dir,
			 bpf_map__name(map));
		if (access(path, F_OK) == 0) {
			k->maps_adopted = true;
			/* an older layout's map this build reshaped: filled
			 * and pinned in its place once loaded */
			if (pinned_version < RL_ABI_VERSION &&
			    n_migrate < sizeof(migrate) / sizeof(migrate[0]) &&
			    kern_migratable(k, map, path,
					    pinned_version)) {
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
		err = kern_migrate_map(k, migrate[i], path, pinned_version);
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
	k->tenants_len = ((size_t)k->max_tenants * sizeof(struct rl_tenant) +
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
	k->instance = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE,
			   MAP_SHARED, bpf_map__fd(k->skel->maps.instance), 0);
	if (k->instance == MAP_FAILED) {
		err = -errno;
		k->instance = NULL;
		log_error("couldn't mmap map on '%s/instance': %s", k->pin_dir,
			  strerror(-err));
		goto cleanup;
	}
	err = kern_src_open(k);
	if (err)
		goto cleanup;
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
	k->pristine_from = k->maps_adopted ? k->max_tenants : 0;
	log_info("loaded %s (pin dir %s, %s maps)", prog_name(k), k->pin_dir,
		 k->maps_adopted ? "adopted pinned" : "new");
	free(vlog);
	return 0;
cleanup:
	free(vlog);
	/* Pins we just created would only confuse the next start. */
	if (k->skel && !k->maps_adopted)
		kern_unpin_failed(k);
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
	if (k->instance)
		munmap(k->instance, k->agent_len);
	k->instance = NULL;
	kern_src_close(k);
	free(k->conns_forgotten);
	k->conns_forgotten = NULL;
	free(k->conn_refused);
	k->conn_refused = NULL;
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

uint64_t kern_map_bytes(const struct kern *k)
{
	struct bpf_map *map;
	uint64_t sum = 0;

	bpf_object__for_each_map(map, k->skel->obj) {
		enum mem_map_kind kind = MEM_MAP_PLAIN;

		/* the pinned maps, and the flow cache's tags and the ends of
		 * flows (.bss), which are the program's own */
		if (map != k->skel->maps.bss &&
		    (bpf_map__is_internal(map) ||
		     (!bpf_map__is_pinned(map) &&
		      map != k->skel->maps.flow_tags_cpu)))
			continue;
		switch (bpf_map__type(map)) {
		case BPF_MAP_TYPE_PERCPU_ARRAY:
		case BPF_MAP_TYPE_PERCPU_HASH:
		case BPF_MAP_TYPE_LRU_PERCPU_HASH:
			kind = MEM_MAP_PERCPU;
			break;
		case BPF_MAP_TYPE_RINGBUF:
			kind = MEM_MAP_RINGBUF;
			break;
		default:
			break;
		}
		sum += mem_map_bytes(kind, bpf_map__key_size(map),
				     bpf_map__value_size(map),
				     bpf_map__max_entries(map), k->ncpus);
	}
	return sum;
}

static int unpin(struct kern *k, bool dir);

int kern_unpin(struct kern *k)
{
	return unpin(k, true);
}

int kern_unpin_failed(struct kern *k)
{
	return unpin(k, k->pin_dir_made);
}

/* The pins, and the pin dir with dir; 0 or the -errno of the rmdir. */
static int unpin(struct kern *k, bool dir)
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
	if (dir && rmdir(k->pin_dir) < 0) {
		err = -errno;
		log_warn("couldn't remove pin dir on '%s': %s", k->pin_dir,
			 strerror(-err));
	}
	return err;
}
