// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Whether the RSTs the program sends back with XDP_TX reach the clients on
 * an interface.  A veth in native mode hands such a frame to its peer's XDP
 * ring, which exists only while the peer runs an XDP program or has GRO
 * on; otherwise the kernel drops it and --action rst acts as drop.  The
 * kernel says which through the NDO_XMIT bit of the veth's xdp_features
 * (the netdev generic netlink family, Linux 6.3 and later).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <linux/ethtool.h>
#include <linux/genetlink.h>
#include <linux/netlink.h>
#include <linux/sockios.h>
#include <net/if.h>

#include "kern.h"

/* From linux/netdev.h (Linux 6.3), which older distributions' headers lack. */
#define NETDEV_FAMILY_NAME		"netdev"
#define NETDEV_CMD_DEV_GET		1
#define NETDEV_A_DEV_IFINDEX		1
#define NETDEV_A_DEV_XDP_FEATURES	3
#define NETDEV_XDP_ACT_NDO_XMIT		(1ULL << 2)

/* The driver of ifname ("veth", "mlx5_core", ...) into drv; 0 or -errno. */
static int iface_driver(const char *ifname, char *drv, size_t len)
{
	struct ethtool_drvinfo info = { .cmd = ETHTOOL_GDRVINFO };
	struct ifreq ifr = { 0 };
	int fd, err = 0;

	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	ifr.ifr_data = (void *)&info;
	if (ioctl(fd, SIOCETHTOOL, &ifr) < 0)
		err = -errno;
	close(fd);
	if (!err)
		snprintf(drv, len, "%.*s", (int)sizeof(info.driver) - 1, info.driver);
	return err;
}

/*
 * One generic netlink request of family/cmd carrying one attribute
 * (atype, of alen bytes), and from its answer the attribute want copied
 * into out (outlen bytes at most, zero-filled first).  0, -ENOENT when
 * the answer lacks want, or the kernel's -errno (-ENOENT too for a
 * family it does not know).
 */
static int genl_ask(int fd, __u16 family, __u8 cmd, __u16 atype,
		    const void *attr, size_t alen, __u16 want, void *out,
		    size_t outlen)
{
	struct {
		struct nlmsghdr nh;
		struct genlmsghdr gh;
		char attrs[64];
	} req = { 0 };
	char buf[8192] __attribute__((aligned(NLMSG_ALIGNTO)));
	struct nlattr *na = (struct nlattr *)req.attrs;
	struct nlmsghdr *nh = (struct nlmsghdr *)buf;
	ssize_t n;
	int left;

	if (NLA_HDRLEN + alen > sizeof(req.attrs))
		return -EINVAL;
	na->nla_type = atype;
	na->nla_len = (__u16)(NLA_HDRLEN + alen);
	memcpy((char *)na + NLA_HDRLEN, attr, alen);
	req.nh.nlmsg_len = NLMSG_LENGTH(GENL_HDRLEN + NLA_ALIGN(na->nla_len));
	req.nh.nlmsg_type = family;
	req.nh.nlmsg_flags = NLM_F_REQUEST;
	req.nh.nlmsg_seq = 1;
	req.gh.cmd = cmd;
	req.gh.version = 1;
	if (send(fd, &req, req.nh.nlmsg_len, 0) < 0)
		return -errno;
	n = recv(fd, buf, sizeof(buf), 0);
	if (n < 0)
		return -errno;
	if (!NLMSG_OK(nh, (size_t)n))
		return -EBADMSG;
	if (nh->nlmsg_type == NLMSG_ERROR) {
		const struct nlmsgerr *e = NLMSG_DATA(nh);

		return e->error ? e->error : -ENOENT;
	}
	left = (int)nh->nlmsg_len - NLMSG_LENGTH(GENL_HDRLEN);
	na = (struct nlattr *)((char *)NLMSG_DATA(nh) + GENL_HDRLEN);
	memset(out, 0, outlen);
	while (left >= NLA_HDRLEN && na->nla_len >= NLA_HDRLEN &&
	       na->nla_len <= left) {
		if ((na->nla_type & NLA_TYPE_MASK) == want) {
			size_t len = na->nla_len - NLA_HDRLEN;

			memcpy(out, (char *)na + NLA_HDRLEN,
			       len < outlen ? len : outlen);
			return 0;
		}
		left -= NLA_ALIGN(na->nla_len);
		na = (struct nlattr *)((char *)na + NLA_ALIGN(na->nla_len));
	}
	return -ENOENT;
}

/* The xdp_features of ifindex as the kernel reports them; 0 or -errno
 * (-ENOENT on a kernel before 6.3). */
static int xdp_features(int ifindex, __u64 *features)
{
	struct timeval tv = { .tv_sec = 1 };
	__u32 idx = (__u32)ifindex;
	__u16 family;
	int fd, err;

	fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC);
	if (fd < 0)
		return -errno;
	/* the agent's loop must not wait on a kernel that never answers */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	err = genl_ask(fd, GENL_ID_CTRL, CTRL_CMD_GETFAMILY, CTRL_ATTR_FAMILY_NAME,
		       NETDEV_FAMILY_NAME, sizeof(NETDEV_FAMILY_NAME),
		       CTRL_ATTR_FAMILY_ID, &family, sizeof(family));
	if (!err)
		err = genl_ask(fd, family, NETDEV_CMD_DEV_GET, NETDEV_A_DEV_IFINDEX,
			       &idx, sizeof(idx), NETDEV_A_DEV_XDP_FEATURES,
			       features, sizeof(*features));
	close(fd);
	return err;
}

enum kern_rst_reach kern_rst_reach(const struct kern_iface *ifc)
{
	char drv[sizeof(((struct ethtool_drvinfo *)0)->driver)];
	__u64 features;

	/* Generic XDP sends an XDP_TX frame out through the device's own
	 * transmit path, tc redirects to egress: both reach a veth's peer. */
	if (ifc->mode != KERN_MODE_NATIVE)
		return KERN_RST_DELIVERED;
	if (iface_driver(ifc->name, drv, sizeof(drv)) || strcmp(drv, "veth") != 0)
		return KERN_RST_DELIVERED;
	if (xdp_features(ifc->ifindex, &features))
		return KERN_RST_UNKNOWN;
	return features & NETDEV_XDP_ACT_NDO_XMIT ? KERN_RST_DELIVERED :
						    KERN_RST_LOST;
}

const char *kern_rst_reach_name(enum kern_rst_reach r)
{
	switch (r) {
	case KERN_RST_DELIVERED:
		return "delivered";
	case KERN_RST_LOST:
		return "lost";
	default:
		return "unknown";
	}
}

const char *kern_rst_advice(enum kern_rst_reach r)
{
	switch (r) {
	case KERN_RST_LOST:
		return "a veth whose peer runs no XDP program and has GRO off: "
		       "the kernel drops the RSTs rlgate sends back, so tenants "
		       "with --action rst are refused as with drop (clients time "
		       "out) while rst_sent still counts them; attach an XDP "
		       "program to the peer (ip link set dev PEER xdpdrv obj "
		       "pass.bpf.o sec xdp), turn GRO on at the peer (ethtool -K "
		       "PEER gro on) or run rlagent with --mode skb";
	case KERN_RST_UNKNOWN:
		return "a veth in native mode, and this kernel (before 6.3) "
		       "does not say whether its peer accepts frames sent back "
		       "with XDP_TX: unless the peer runs an XDP program or has "
		       "GRO on, RSTs are dropped and --action rst acts as drop; "
		       "--mode skb always delivers them";
	default:
		return NULL;
	}
}
