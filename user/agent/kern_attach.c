// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Attaching rlgate's program to an interface and detaching it: XDP by
 * netlink (native, else generic) or a tc clsact filter, and the tc egress
 * program that sees the server's side of capped connections end.  A
 * program already there is replaced in one step, and only if it is
 * rlgate's own on these pins: enforcement never has a gap, and nobody
 * else's program is touched.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "kern_int.h"
#include "log.h"

/* Our tc filter's identity on the clsact ingress hook. */
#define KERN_TC_HANDLE	0x524c	/* "RL" */
#define KERN_TC_PRIO	1

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
 * rlgate's program want and works on our pinned map uses (the tenant table
 * for the admission program, conn_ctl for tc egress: not `conns`, which an
 * upgrade from layout 3 makes anew while the old egress program runs).  An
 * rlgate program with other maps belongs to an agent with another pin dir;
 * anything else is someone else's.  0 if ours, -EEXIST (logged) if not, other -errno.
 */
static int check_ours(struct kern *k, const char *ifname, __u32 id,
		      const char *want, struct bpf_map *uses)
{
	/* every map the program uses, with room to spare: one past the
	 * array would make our own program look like someone else's (the
	 * program uses 16 with .rodata and .bss) */
	__u32 ids[64], n = 64, ours;
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
	/* the kernel keeps 15 characters of a program's name */
	if (strncmp(name, want, sizeof(name) - 1) != 0) {
		log_error("couldn't attach on '%s': it already runs program '%s' "
			  "(id %u), which is not rlgate's %s; refusing to replace "
			  "it", ifname, name, id, want);
		return -EEXIST;
	}
	ours = map_id(bpf_map__fd(uses));
	for (__u32 i = 0; i < n; i++)
		if (ids[i] == ours)
			return 0;
	log_error("couldn't attach on '%s': it runs an rlgate program (id %u) "
		  "whose maps are not pinned under '%s' (another agent's "
		  "--pin-dir?); detach it there first", ifname, id, k->pin_dir);
	return -EEXIST;
}

/* Where variable var lies in the data section value_type of btf: 0, or
 * -ENOENT. */
static int btf_var_at(const struct btf *btf, __u32 value_type, const char *var,
		      __u32 *off, __u32 *size)
{
	const struct btf_type *t = btf__type_by_id(btf, value_type);
	const struct btf_var_secinfo *vs;

	if (!t || !btf_is_datasec(t))
		return -ENOENT;
	vs = btf_var_secinfos(t);
	for (__u16 i = 0; i < btf_vlen(t); i++, vs++) {
		const struct btf_type *v = btf__type_by_id(btf, vs->type);

		if (v && strcmp(btf__name_by_offset(btf, v->name_off), var) == 0) {
			*off = vs->offset;
			*size = vs->size;
			return 0;
		}
	}
	return -ENOENT;
}

/* The old program's flow_ends, from its data section (map fd, described
 * by info), into ours.  0, or -errno when they cannot be taken. */
static int ends_from(struct kern *k, int fd, const struct bpf_map_info *info)
{
	__u32 off, size, zero = 0;
	struct btf *btf;
	char *val;
	int err;

	btf = btf__load_from_kernel_by_id(info->btf_id);
	if (!btf)
		return -errno;
	err = btf_var_at(btf, info->btf_value_type_id, "flow_ends", &off, &size);
	btf__free(btf);
	if (err)
		return err;
	/* another number of places: their words do not map onto ours */
	if (size != sizeof(k->skel->bss->flow_ends) || off + size > info->value_size)
		return -EMEDIUMTYPE;
	val = malloc(info->value_size);
	if (!val)
		return -ENOMEM;
	err = bpf_map_lookup_elem(fd, &zero, val) ? -errno : 0;
	if (!err)
		memcpy(k->skel->bss->flow_ends, val + off, size);
	free(val);
	return err;
}

/*
 * The ends of flows the program old_id marked (flow_ends, in its data
 * section, which is the program's own and not pinned) copied into ours
 * before ours replaces it: a copy of an admitted SYN whose flow ended on
 * another CPU in the seconds before a restart is still charged after it.
 * Ends marked between the copy and the replace (a few milliseconds) are
 * lost, as counters of that moment are.  Once per start; a failure is
 * logged, and the new program starts with no end marked.
 */
static void take_ends(struct kern *k, __u32 old_id)
{
	__u32 ids[64], n = 64;
	char name[BPF_OBJ_NAME_LEN];
	int fd, err = -ENOENT;

	if (k->ends_taken)
		return;
	k->ends_taken = true;
	fd = bpf_prog_get_fd_by_id(old_id);
	if (fd < 0) {
		err = -errno;
		n = 0;
	} else {
		if (prog_info(fd, name, sizeof(name), ids, &n)) {
			err = -errno;
			n = 0;
		}
		close(fd);
	}
	for (__u32 i = 0; i < n; i++) {
		struct bpf_map_info info = {};
		__u32 len = sizeof(info);
		int mfd = bpf_map_get_fd_by_id(ids[i]);
		size_t nl;

		if (mfd < 0)
			continue;
		if (bpf_obj_get_info_by_fd(mfd, &info, &len) == 0 &&
		    (nl = strlen(info.name)) >= 4 &&
		    strcmp(info.name + nl - 4, ".bss") == 0 &&
		    info.type == BPF_MAP_TYPE_ARRAY && info.btf_id) {
			err = ends_from(k, mfd, &info);
			close(mfd);
			break;
		}
		close(mfd);
	}
	if (err == -ENOENT || err == -EMEDIUMTYPE)
		/* a build before them, or with another number of places */
		log_info("program %u keeps no ends of flows this one can take "
			 "(another build): the new program starts with none",
			 old_id);
	else if (err)
		log_warn("couldn't take the ends of flows program %u marked: %s; "
			 "a copy of a SYN whose flow ended in the last seconds on "
			 "another CPU passes free once", old_id, strerror(-err));
	else
		log_debug("took the ends of flows program %u marked", old_id);
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
		err = check_ours(k, ifname, cur_id, prog_name(k),
				 k->skel->maps.tenants);
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
		take_ends(k, cur_id);
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

/*
 * The program prog_fd (named want) on the clsact hook at point, at our
 * handle and priority.  With REPLACE the filter there swaps programs in
 * place: no packet sees the hook empty; a filter there that is not ours is
 * never replaced.
 */
static int attach_clsact(struct kern *k, const char *ifname, int ifindex,
			 enum bpf_tc_attach_point point,
			 int prog_fd, const char *want,
			 struct bpf_map *uses)
{
	LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = ifindex, .attach_point = point);
	LIBBPF_OPTS(bpf_tc_opts, q, .handle = KERN_TC_HANDLE,
		    .priority = KERN_TC_PRIO);
	LIBBPF_OPTS(bpf_tc_opts, o, .handle = KERN_TC_HANDLE,
		    .priority = KERN_TC_PRIO, .flags = BPF_TC_F_REPLACE);
	const char *side = point == BPF_TC_EGRESS ? "tc egress" : "tc";
	int err;

	err = bpf_tc_hook_create(&hook);
	if (err && err != -EEXIST) {
		log_error("couldn't create clsact qdisc on '%s': %s", ifname,
			  strerror(-err));
		return err;
	}
	if (bpf_tc_query(&hook, &q) == 0) {
		err = check_ours(k, ifname, q.prog_id, want, uses);
		if (err)
			return err;
		if (point == BPF_TC_INGRESS)
			take_ends(k, q.prog_id);
	}
	o.prog_fd = prog_fd;
	err = bpf_tc_attach(&hook, &o);
	if (err)
		log_error("couldn't attach %s program on '%s': %s", side, ifname,
			  strerror(-err));
	return err;
}

static int attach_tc(struct kern *k, const char *ifname, int ifindex)
{
	return attach_clsact(k, ifname, ifindex, BPF_TC_INGRESS,
			     k->prog_fd, prog_name(k), k->skel->maps.tenants);
}

/*
 * The server's side of capped connections: tc_rlgate_egress on the clsact
 * egress hook, replacing our own earlier program there in place (never
 * someone else's, nor another pin dir's).  In every mode: XDP sees only
 * what arrives.
 */
static int attach_egress(struct kern *k, const char *ifname, int ifindex)
{
	return attach_clsact(k, ifname, ifindex, BPF_TC_EGRESS,
			     bpf_program__fd(k->skel->progs.tc_rlgate_egress),
			     "tc_rlgate_egress", k->skel->maps.conn_ctl);
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
	enum kern_rst_reach reach;
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
	/* once, here: `rlctl status` asks again each time */
	reach = kern_rst_reach(ifc);
	if (reach != KERN_RST_DELIVERED)
		log_warn("RSTs sent on '%s' %s reach clients: %s", ifname,
			 reach == KERN_RST_LOST ? "do not" : "may not",
			 kern_rst_advice(reach));
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
