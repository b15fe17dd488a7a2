// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* rlload: the smallest loader of the XDP program, for end-to-end tests of the
 * kernel path alone.  Attaches to one interface, configures one standalone
 * tenant, stays until SIGINT/SIGTERM, then detaches.  Not for production:
 * rlagent is.
 */
#include <errno.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/if_link.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "rlgate.h"
#include "rlgate.skel.h"
#include "policy_opts.h"
#include "classify.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

struct cli {
	const char *iface;
	struct policy_tenant t;
	int action;
	bool skb;
};

static const struct opts_spec spec = {
	.prog = "rlload",
	.doc = "Attaches xdp_rlgate to IF with one tenant, prints 'ready', waits "
	       "for\nSIGINT/SIGTERM and detaches.\n",
	.opts = (const struct opt[]){
		{ "iface", 0, OPT_STRING, OPT_AT(struct cli, iface),
		  .arg = "IF", .help = "the interface (required)" },
		{ "match", 0, OPT_CUSTOM, OPT_AT(struct cli, t),
		  .arg = "PREFIX[,...]", .parse = policy_opt_prefixes,
		  .help = "the tenant's prefixes (required)" },
		{ "rate", 0, OPT_CUSTOM, OPT_AT(struct cli, t.rate),
		  .arg = "RATE", .parse = policy_opt_rate,
		  .help = "N/s, N/m or N/h (required)" },
		{ "burst", 0, OPT_U64, OPT_AT(struct cli, t.burst),
		  .arg = "N", .min = 1, .max = POLICY_BURST_MAX,
		  .def_doc = "one second of the rate", .help = "bucket size" },
		{ "port", 0, OPT_CUSTOM, OPT_AT(struct cli, t),
		  .arg = "PORT[,...]", .parse = policy_opt_ports,
		  .help = "destination ports (default: any)" },
		{ "action", 0, OPT_ENUM, OPT_AT(struct cli, action),
		  .values = policy_action_values, .def = "drop",
		  .help = "over the limit" },
		{ "shadow", 0, OPT_FLAG, OPT_AT(struct cli, t.shadow),
		  .help = "admit everything" },
		{ "skb", 0, OPT_FLAG, OPT_AT(struct cli, skb),
		  .help = "generic XDP" },
		{ "help", 'h', OPT_HELP, .help = "this help" },
		{ .kind = OPT_END },
	},
};

/* Compiles the tenant's rules (each prefix, times each port) into the
 * classifier and publishes them. */
static int add_rules(struct rlgate_bpf *skel, const struct policy_tenant *t,
		     __u32 slot)
{
	struct rl_cls_rule *rules = NULL;
	struct rl_cls_map cls = { 0 };
	struct rl_cls_image img;
	size_t n = 0, cap = 0;
	char msg[256];
	int err;

	err = rl_cls_rules_add(&rules, &n, &cap, t, slot);
	if (err) {
		fprintf(stderr, "Error: couldn't add rules: %s\n", strerror(-err));
		return err;
	}
	err = rl_cls_compile(rules, n, 0, &img, msg, sizeof(msg));
	free(rules);
	if (err) {
		fprintf(stderr, "Error: couldn't compile rules: %s\n", msg);
		return err;
	}
	err = rl_cls_map_open(&cls, bpf_map__fd(skel->maps.cls),
			      bpf_map__fd(skel->maps.cls_state),
			      bpf_map__fd(skel->maps.cls_sync), 0);
	if (!err)
		err = rl_cls_publish(&cls, &img);
	if (err)
		fprintf(stderr, "Error: couldn't publish rules: %s\n",
			strerror(-err));
	rl_cls_map_close(&cls);
	rl_cls_image_free(&img);
	return err;
}

int main(int argc, char **argv)
{
	struct cli c = { .t = { .name = "test" } };
	struct policy_tenant *t = &c.t;
	struct opts_result res;
	const char *iface;
	__u32 xdp_flags;
	struct rlgate_bpf *skel = NULL;
	struct rl_tenant *tenants = MAP_FAILED;
	size_t map_len = 0;
	int ifindex = 0, ret = 1;

	ret = opts_parse(&spec, argc, argv, &c, &res);
	if (ret == OPTS_HELP) {
		opts_usage(&spec, stdout);
		return 0;
	}
	if (ret < 0) {
		fprintf(stderr, "Error: %s\n", res.err);
		return 2;
	}
	if (!c.iface || !t->n_match || !opts_given(&res, "rate")) {
		fprintf(stderr, "Error: rlload needs --iface, --match and --rate\n");
		return 2;
	}
	ret = 1;
	iface = c.iface;
	t->action = (enum policy_action)c.action;
	xdp_flags = c.skb ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
	if (!opts_given(&res, "burst"))
		t->burst = policy_default_burst(&t->rate);
	ifindex = if_nametoindex(iface);
	if (!ifindex) {
		fprintf(stderr, "Error: couldn't find interface '%s': %s\n", iface,
			strerror(errno));
		return 1;
	}

	skel = rlgate_bpf__open_and_load();
	if (!skel) {
		fprintf(stderr, "Error: couldn't load xdp_rlgate: %s\n", strerror(errno));
		goto cleanup;
	}
	map_len = bpf_map__max_entries(skel->maps.tenants) * sizeof(struct rl_tenant);
	map_len = (map_len + getpagesize() - 1) & ~((size_t)getpagesize() - 1);
	tenants = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		       bpf_map__fd(skel->maps.tenants), 0);
	if (tenants == MAP_FAILED) {
		fprintf(stderr, "Error: couldn't map tenants: %s\n", strerror(errno));
		goto cleanup;
	}

	/* Slot 1: configure before any rule points at it. */
	tenants[1].action = t->action == POLICY_ACT_RST ? RL_ACT_RST : RL_ACT_DROP;
	tenants[1].flags = t->shadow ? RL_F_SHADOW : 0;
	tenants[1].interval_ns = policy_interval_ns(&t->rate);
	tenants[1].burst = t->burst;
	tenants[1].tolerance_ns = t->burst * tenants[1].interval_ns;
	tenants[1].tat = 0;
	__atomic_store_n(&tenants[1].mode, RL_MODE_STANDALONE, __ATOMIC_RELEASE);
	if (add_rules(skel, t, 1))
		goto cleanup;

	if (bpf_xdp_attach(ifindex, bpf_program__fd(skel->progs.xdp_rlgate),
			   xdp_flags, NULL)) {
		fprintf(stderr, "Error: couldn't attach xdp_rlgate on '%s': %s\n",
			iface, strerror(errno));
		goto cleanup;
	}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("ready\n");
	fflush(stdout);
	while (!stop)
		pause();
	ret = 0;
	bpf_xdp_detach(ifindex, xdp_flags, NULL);
cleanup:
	if (tenants != MAP_FAILED)
		munmap(tenants, map_len);
	rlgate_bpf__destroy(skel);
	return ret;
}
