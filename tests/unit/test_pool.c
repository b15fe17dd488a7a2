/* test_pool: the preload pool as the library and the agent see it - the
 * layout checks (another version, a damaged header, a missing file), rules
 * classified as the kernel classifies them (IPv4, IPv6, ports), tokens
 * spent as the kernel spends them (standalone buckets, leased tokens, the
 * fail policies once the agent is silent, shadow), adoption keeping the
 * buckets, the process table, a host's lease shared between the kernel
 * and the pool, and the rules' switch under a writer and readers at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"
#include "classify.h"
#include "policy.h"
#include "pool.h"
#include "pool_write.h"
#include "slot.h"

#define MS	1000000ULL
#define T0	(1000ULL * RL_NSEC_PER_SEC)	/* a monotonic time well past 0 */

static char dir[] = "/tmp/test_pool.XXXXXX";
static char path[256];
/* One pool as the agent maps it (w) and as a process of the library maps
 * it (r): made by test_create, used by the tests after it. */
static struct rl_pool pool_w, pool_r, *w = &pool_w, *r = &pool_r;

static struct policy_tenant tenant(const char *rate, uint64_t burst)
{
	struct policy_tenant t;
	char err[POLICY_ERR_MAX];

	memset(&t, 0, sizeof(t));
	snprintf(t.name, sizeof(t.name), "t");
	if (policy_parse_rate(rate, &t.rate, err))
		fprintf(stderr, "bad rate %s: %s\n", rate, err);
	t.burst = burst;
	return t;
}

/* Admissions of n tries at time now. */
static int takes(struct rl_pool *p, uint32_t slot, int n, uint64_t now)
{
	int ok = 0;

	for (int i = 0; i < n; i++)
		ok += rl_pool_take(p, slot, now) == RL_POOL_ADMIT;
	return ok;
}

static void test_layout(void)
{
	struct rl_pool_hdr h;

	CHECK(rl_pool_layout(16, RL_CLS_GROUPS_MIN, 8, &h) == 0, "a small pool");
	CHECK(h.off_tenants == RL_POOL_HDR_BYTES && h.off_stats == h.off_tenants +
	      16 * sizeof(struct rl_tenant) && h.off_cls[0] % 4096 == 0 &&
	      h.off_cls[1] == h.off_cls[0] + 2ULL * RL_CLS_GROUPS_MIN * 1024 &&
	      h.pre.size == h.off_cls[1] + 2ULL * RL_CLS_GROUPS_MIN * 1024,
	      "parts follow the header in order, the classifiers on pages of "
	      "their own");
	CHECK(rl_pool_layout(0, RL_CLS_GROUPS_MIN, 8, &h) == -EINVAL &&
	      rl_pool_layout(RL_TENANTS_LIMIT + 1, RL_CLS_GROUPS_MIN, 8, &h) == -EINVAL &&
	      rl_pool_layout(16, RL_CLS_GROUPS_MIN - 1, 8, &h) == -EINVAL &&
	      rl_pool_layout(16, RL_CLS_GROUPS_MIN, 0, &h) == -EINVAL,
	      "counts no pool may have are refused");
}

static void test_refused_files(void)
{
	struct rl_pool w, r;
	bool adopted;
	char other[300];
	int fd;

	CHECK(rl_pool_map(&r, "/nonexistent/pool") == -ENOENT, "a missing pool");
	snprintf(other, sizeof(other), "%s/other", dir);
	CHECK(rl_pool_create(&w, other, 4, RL_CLS_GROUPS_MIN, (gid_t)-1,
			     &adopted) == 0 && !adopted, "made");
	/* a pool of another layout: refused, and the refusal counted there */
	w.hdr->pre.version = RL_POOL_VERSION + 1;
	CHECK(rl_pool_map(&r, other) == -EPROTO, "another version is refused");
	CHECK(rl_pool_map(&r, other) == -EPROTO, "and again");
	CHECK(w.hdr->pre.foreign == 2, "each refusal counted: %u",
	      w.hdr->pre.foreign);
	w.hdr->pre.foreign = 0;
	w.hdr->pre.version = RL_POOL_VERSION;
	w.hdr->pre.abi = RL_ABI_VERSION - 1;
	CHECK(rl_pool_map(&r, other) == -EPROTO,
	      "tenant slots of another kernel layout are refused");
	w.hdr->pre.abi = RL_ABI_VERSION;
	CHECK(rl_pool_map(&r, other) == 0, "the right version maps");
	rl_pool_unmap(&r);
	/* a header whose offsets do not follow from its counts */
	w.hdr->off_cls[1] += 4096;
	CHECK(rl_pool_map(&r, other) == -EBADMSG, "a damaged header is refused");
	w.hdr->off_cls[1] -= 4096;
	w.hdr->pre.magic = 0;
	CHECK(rl_pool_map(&r, other) == -EBADMSG, "no magic is refused");
	w.hdr->pre.magic = RL_POOL_MAGIC;
	/* a file cut short */
	fd = open(other, O_RDWR);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)w.hdr->pre.size - 4096) == 0,
	      "truncated");
	close(fd);
	CHECK(rl_pool_map(&r, other) == -EBADMSG, "a short file is refused");
	rl_pool_unmap(&w);
	unlink(other);
}

static void test_standalone(void)
{
	struct policy_tenant t = tenant("10/s", 5);
	struct rl_stats st;

	CHECK(rl_pool_take(r, 3, T0) == RL_POOL_PASS, "a slot out of service passes");
	rl_pool_tenant_set(w, 3, &t, true, false, 1, T0);
	CHECK(takes(r, 3, 8, T0) == 5, "a full bucket admits the burst");
	CHECK(takes(r, 3, 3, T0 + 100 * MS) == 1, "one token per 100 ms");
	CHECK(takes(r, 3, 20, T0 + 1100 * MS) == 5, "refilled to the burst, no more");
	rl_pool_tenant_stats(w, 3, &st);
	CHECK(st.admitted == 11 && st.denied == 20, "counted: %llu admitted, %llu denied",
	      (unsigned long long)st.admitted, (unsigned long long)st.denied);
	/* a new limit keeps the bucket's state: it is empty now */
	t = tenant("100/s", 5);
	rl_pool_tenant_set(w, 3, &t, false, false, 1, T0 + 1100 * MS);
	CHECK(takes(r, 3, 5, T0 + 1100 * MS) == 0, "a limit change refills nothing");
	CHECK(takes(r, 3, 5, T0 + 1110 * MS) == 1, "and refills at the new rate");
	rl_pool_tenant_set(w, 3, &t, true, false, 1, T0 + 1110 * MS);
	rl_pool_tenant_stats(w, 3, &st);
	CHECK(st.admitted == 0 && st.denied == 0, "a fresh slot counts from zero");
	t.shadow = true;
	rl_pool_tenant_set(w, 3, &t, true, false, 1, T0);
	CHECK(takes(r, 3, 9, T0) == 9, "a shadow tenant admits");
	rl_pool_tenant_stats(w, 3, &st);
	CHECK(st.shadow_denied == 4 && st.denied == 0,
	      "and counts what it would have refused: %llu",
	      (unsigned long long)st.shadow_denied);
	rl_pool_tenant_clear(w, 3);
	CHECK(rl_pool_take(r, 3, T0) == RL_POOL_PASS, "a cleared slot passes");
}

static void test_leased(void)
{
	struct policy_tenant t = tenant("10/s", 20);
	uint64_t now = T0;
	struct rl_stats st;

	rl_pool_heartbeat(w, now, 2000 * MS, false);
	rl_pool_tenant_set(w, 5, &t, true, true, 2, now);
	CHECK(takes(r, 5, 3, now) == 0, "a leased slot starts empty");
	__atomic_fetch_add(&w->tenants[5].tokens, 3, __ATOMIC_RELAXED);
	w->tenants[5].lowwater = 1;
	w->tenants[5].lowwater_armed = 1;	/* the agent re-arms on a refill */
	CHECK(takes(r, 5, 1, now) == 1 && w->tenants[5].lowwater_armed == 1,
	      "leased tokens are spent; above low water stays armed");
	CHECK(takes(r, 5, 4, now) == 2 && w->tenants[5].lowwater_armed == 0,
	      "the rest, and low water disarms for the agent to see");
	CHECK(w->tenants[5].tokens == 0, "no token minted or lost: %lld",
	      (long long)w->tenants[5].tokens);
	/* the agent silent past stale_ns: the static share (20 / 2 agents) */
	now += 2001 * MS;
	CHECK(rl_pool_degraded(r, now), "a stale heartbeat is degraded");
	CHECK(takes(r, 5, 30, now) == 10, "the static fail share of 2 agents");
	rl_pool_tenant_stats(w, 5, &st);
	CHECK(st.degraded == 30, "decided by the fail policy: %llu",
	      (unsigned long long)st.degraded);
	t.fail = POLICY_FAIL_DENY;
	rl_pool_tenant_set(w, 5, &t, false, true, 2, now);
	CHECK(takes(r, 5, 3, now) == 0, "fail deny refuses");
	t.fail = POLICY_FAIL_ALLOW;
	rl_pool_tenant_set(w, 5, &t, false, true, 2, now);
	CHECK(takes(r, 5, 3, now) == 3, "fail allow admits");
	/* the agent back: leased tokens only again */
	rl_pool_heartbeat(w, now, 2000 * MS, false);
	CHECK(!rl_pool_degraded(r, now) && takes(r, 5, 3, now) == 0,
	      "a fresh heartbeat: no tokens, no admission");
	rl_pool_heartbeat(w, now, 2000 * MS, true);
	CHECK(rl_pool_degraded(r, now) && takes(r, 5, 3, now) == 3,
	      "degraded by the agent's word: the fail policy");
	/* the tenant's own Redis shard out of reach, the fleet's fine */
	rl_pool_heartbeat(w, now, 2000 * MS, false);
	__atomic_fetch_or(&w->tenants[5].flags, RL_F_DEGRADED, __ATOMIC_RELAXED);
	CHECK(!rl_pool_degraded(r, now) && takes(r, 5, 3, now) == 3,
	      "a tenant whose shard is degraded: its fail policy");
	rl_pool_tenant_set(w, 5, &t, false, true, 2, now);
	CHECK(takes(r, 5, 3, now) == 3, "a new limit keeps the shard's word");
	rl_pool_tenant_set(w, 5, &t, true, true, 2, now);
	CHECK(takes(r, 5, 3, now) == 0, "a new tenant in the slot starts without it");
	rl_pool_heartbeat(w, now, 0, false);
	CHECK(!rl_pool_degraded(r, now + 3600 * RL_NSEC_PER_SEC),
	      "no heartbeat expected: never stale");
	rl_pool_tenant_clear(w, 5);
}

static void add_rule(struct rl_cls_rule *r, int family, const char *a,
		     unsigned int plen, uint16_t port, uint32_t tenant)
{
	memset(r, 0, sizeof(*r));
	r->family = family;
	inet_pton(family, a, r->addr);
	r->plen = plen;
	r->port = port;
	r->tenant = tenant;
}

static int cls_dir(struct rl_pool *r, enum rl_pool_dir dir, int family,
		   const char *a, uint16_t port)
{
	uint8_t addr[16] = { 0 };

	inet_pton(family, a, addr);
	return rl_pool_classify(r, dir, family, addr, port);
}

static int cls(struct rl_pool *r, int family, const char *a, uint16_t port)
{
	return cls_dir(r, RL_POOL_IN, family, a, port);
}

/* A leased slot's overdraft: past the last token while the agent is
 * healthy, down to -overdraft and no further; while degraded, the fail
 * policy instead. */
static void test_overdraft(void)
{
	struct policy_tenant t = tenant("10/s", 20);
	uint64_t now = T0;

	t.fail = POLICY_FAIL_DENY;
	rl_pool_heartbeat(w, now, 2000 * MS, false);
	rl_pool_tenant_set(w, 10, &t, true, true, 1, now);
	__atomic_store_n(&w->tenants[10].tokens, 2, __ATOMIC_RELAXED);
	CHECK(takes(r, 10, 3, now) == 2, "no overdraft: refused at the last token");
	__atomic_store_n(&w->tenants[10].overdraft, 3, __ATOMIC_RELAXED);
	CHECK(takes(r, 10, 5, now) == 3 && w->tenants[10].tokens == -3,
	      "an overdraft of 3: three more, the count at -3 (%lld)",
	      (long long)w->tenants[10].tokens);
	rl_slot_tokens_add(&w->tenants[10], 4, 0);
	CHECK(takes(r, 10, 5, now) == 4 && w->tenants[10].tokens == -3,
	      "a lease of 4 pays the 3 back first: one token left, then the "
	      "overdraft again");
	__atomic_store_n(&w->tenants[10].tokens, 0, __ATOMIC_RELAXED);
	rl_pool_heartbeat(w, now, 2000 * MS, true);
	CHECK(takes(r, 10, 3, now) == 0, "degraded: the fail policy (deny), "
	      "not the overdraft");
	rl_pool_heartbeat(w, now, 0, false);
	rl_pool_tenant_clear(w, 10);
}

/* Places in flight of n tries at now (each kept). */
static int opens(struct rl_pool *p, uint32_t slot, int n, uint64_t now)
{
	uint32_t epoch;
	int ok = 0;

	for (int i = 0; i < n; i++)
		ok += rl_pool_conn_open(p, slot, now, &epoch) == RL_POOL_ADMIT;
	return ok;
}

/* A standalone cap shared with the kernel: the pool's part while the agent
 * lives; once its heartbeat is stale, the fail policy - static keeps the
 * part, allow lifts the cap, deny admits nothing new.  A cap the pool holds
 * alone needs no agent. */
static void test_shared_cap_dead_agent(void)
{
	struct policy_tenant t = tenant("1000/s", 1000);
	uint64_t now = T0;

	t.max_conns = 3;
	rl_pool_heartbeat(w, now, 500 * MS, false);
	rl_pool_points(w, 2);
	rl_pool_tenant_set(w, 9, &t, true, false, 1, now);
	/* the agent's split: one place here, two at the kernel */
	__atomic_store_n(&w->tenants[9].conn_slots, 1, __ATOMIC_RELAXED);
	CHECK(opens(r, 9, 3, now + 100 * MS) == 1, "alive: the pool's part of 1");
	now += 501 * MS;
	CHECK(opens(r, 9, 3, now) == 0,
	      "stale, fail static: the part it holds, no more");
	__atomic_store_n(&w->tenants[9].conns, 0, __ATOMIC_RELAXED);
	CHECK(opens(r, 9, 3, now) == 1, "static: the part again once free");
	t.fail = POLICY_FAIL_ALLOW;
	rl_pool_tenant_set(w, 9, &t, false, false, 1, now);
	__atomic_store_n(&w->tenants[9].conn_slots, 1, __ATOMIC_RELAXED);
	CHECK(opens(r, 9, 5, now) == 5, "fail allow: no cap");
	t.fail = POLICY_FAIL_DENY;
	rl_pool_tenant_set(w, 9, &t, false, false, 1, now);
	__atomic_store_n(&w->tenants[9].conns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&w->tenants[9].conn_slots, 1, __ATOMIC_RELAXED);
	CHECK(opens(r, 9, 3, now) == 0, "fail deny: nothing new");
	rl_pool_heartbeat(w, now, 500 * MS, false);
	CHECK(opens(r, 9, 3, now) == 1, "the agent back: its split again");
	/* the pool alone holds the cap: a silent agent changes nothing */
	rl_pool_points(w, 1);
	__atomic_store_n(&w->tenants[9].conns, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&w->tenants[9].conn_slots, 3, __ATOMIC_RELAXED);
	CHECK(opens(r, 9, 4, now + 10 * RL_NSEC_PER_SEC) == 3,
	      "one point, stale: the whole cap, fail deny or not");
	rl_pool_points(w, 0);
	rl_pool_heartbeat(w, now, 0, false);
	rl_pool_tenant_clear(w, 9);
}

static void test_classify(void)
{
	struct rl_cls_rule rules[3];
	struct rl_cls_image img;
	char err[256];

	CHECK(cls(r, AF_INET, "192.0.2.1", 80) == -1, "no rules: no tenant");
	add_rule(&rules[0], AF_INET, "192.0.2.0", 24, 0, 1);
	add_rule(&rules[1], AF_INET6, "2001:db8:1::", 48, 0, 2);
	CHECK(rl_cls_compile(rules, 2, RL_CLS_GROUPS_MIN, &img, err,
			     sizeof(err)) == 0, "compiled: %s", err);
	CHECK(rl_pool_publish(w, RL_POOL_IN, &img, 2) == 0, "published");
	rl_cls_image_free(&img);
	CHECK(!rl_pool_needs_port(r, RL_POOL_IN),
	      "no port rules: the local port is not needed");
	CHECK(rl_pool_has_rules(r, RL_POOL_IN) && !rl_pool_has_rules(r, RL_POOL_OUT),
	      "inbound rules, no outbound ones");
	CHECK(cls(r, AF_INET, "192.0.2.77", 0) == 1, "IPv4 in the /24");
	CHECK(cls(r, AF_INET, "192.0.3.1", 0) == -1, "IPv4 outside it");
	CHECK(cls(r, AF_INET6, "2001:db8:1:5::9", 0) == 2, "IPv6 in the /48");
	CHECK(cls(r, AF_INET6, "2001:db8:2::1", 0) == -1, "IPv6 outside it");

	/* a port rule: a longer prefix for port 443 only */
	add_rule(&rules[2], AF_INET, "192.0.2.128", 25, 443, 3);
	CHECK(rl_cls_compile(rules, 3, RL_CLS_GROUPS_MIN, &img, err,
			     sizeof(err)) == 0, "compiled: %s", err);
	CHECK(rl_pool_publish(w, RL_POOL_IN, &img, 3) == 0, "published again");
	CHECK(rl_pool_publish(w, RL_POOL_IN, &img, 3) == 0,
	      "and into the other half");
	rl_cls_image_free(&img);
	CHECK(rl_pool_needs_port(r, RL_POOL_IN), "port rules: the local port matters");
	CHECK(cls(r, AF_INET, "192.0.2.200", 443) == 3, "the port rule wins");
	CHECK(cls(r, AF_INET, "192.0.2.200", 80) == 1, "other ports: the /24");
	CHECK(cls(r, AF_INET, "192.0.2.1", 443) == 1, "outside the /25: the /24");
	CHECK(w->hdr->cls[RL_POOL_IN].seq == 6,
	      "each publish moved the count by two: %u", w->hdr->cls[RL_POOL_IN].seq);
	CHECK(cls_dir(r, RL_POOL_OUT, AF_INET, "192.0.2.200", 443) == -1,
	      "inbound rules are not outbound ones");

	/* outbound rules: destinations, apart from the inbound ones */
	add_rule(&rules[0], AF_INET, "198.51.100.0", 24, 8443, 4);
	CHECK(rl_cls_compile(rules, 1, RL_CLS_GROUPS_MIN, &img, err,
			     sizeof(err)) == 0, "compiled: %s", err);
	CHECK(rl_pool_publish(w, RL_POOL_OUT, &img, 1) == 0, "outbound published");
	rl_cls_image_free(&img);
	CHECK(rl_pool_has_rules(r, RL_POOL_OUT) && rl_pool_needs_port(r, RL_POOL_OUT),
	      "outbound rules, by port");
	CHECK(cls_dir(r, RL_POOL_OUT, AF_INET, "198.51.100.9", 8443) == 4,
	      "a destination and port of the outbound rule");
	CHECK(cls_dir(r, RL_POOL_OUT, AF_INET, "198.51.100.9", 80) == -1,
	      "another port: no outbound tenant");
	CHECK(cls(r, AF_INET, "198.51.100.9", 8443) == -1,
	      "outbound rules are not inbound ones");
	CHECK(cls(r, AF_INET, "192.0.2.200", 443) == 3, "the inbound rules stay");

	/* rules that do not fit a half are refused, the old ones stay */
	img.groups = calloc(RL_CLS_GROUPS_MIN + 1, sizeof(*img.groups));
	img.n_groups = RL_CLS_GROUPS_MIN + 1;
	CHECK(rl_pool_publish(w, RL_POOL_IN, &img, 1) == -ENOSPC,
	      "too big for a half");
	free(img.groups);
	CHECK(cls(r, AF_INET, "192.0.2.200", 443) == 3, "the rules in force stay");
}

static void test_adopt(void)
{
	struct policy_tenant t = tenant("1/s", 2);
	struct rl_pool again, other;
	bool adopted;
	char p2[300];

	rl_pool_tenant_set(w, 7, &t, true, false, 1, T0);
	CHECK(takes(w, 7, 1, T0) == 1, "one token of two spent");
	CHECK(rl_pool_create(&again, path, 16, RL_CLS_GROUPS_MIN, (gid_t)-1,
			     &adopted) == 0 && adopted, "the same layout is adopted");
	CHECK(takes(&again, 7, 3, T0) == 1, "with its bucket as it was");
	CHECK(cls(&again, AF_INET, "192.0.2.200", 443) == 3, "and its rules");
	rl_pool_unmap(&again);
	/* another size: a new file in its place, which a reader notices */
	snprintf(p2, sizeof(p2), "%s", path);
	CHECK(rl_pool_create(&other, p2, 32, RL_CLS_GROUPS_MIN, (gid_t)-1,
			     &adopted) == 0 && !adopted, "another size: made anew");
	CHECK(other.ino != w->ino, "a new file (inode %lu, was %lu)",
	      (unsigned long)other.ino, (unsigned long)w->ino);
	CHECK(takes(&other, 7, 1, T0) == 0, "with nothing of the old one");
	rl_pool_unmap(&other);
}

static void test_procs(void)
{
	uint64_t ns = rl_pool_pidns(), now = rl_pool_now_ns();
	struct rl_pool_proc list[4];
	struct rl_pool_proc *a, *b, *c;
	pid_t child;
	int status;

	CHECK(ns != 0, "this process's pid namespace is known");
	a = rl_pool_proc_claim(r, (uint32_t)getpid(), ns, "tester");
	b = rl_pool_proc_claim(r, (uint32_t)getpid(), ns, "tester");
	CHECK(a && a == b, "one line per process");
	CHECK(strcmp(a->comm, "tester") == 0, "named: %s", a->comm);
	c = rl_pool_proc_claim(r, (uint32_t)getpid(), ns + 1, "boxed");
	CHECK(c && c != a, "the same pid in another pid namespace: another line");
	/* a process that died: its line goes, but not one of another
	 * namespace whose pid means nothing here */
	child = fork();
	if (child == 0)
		_exit(0);
	waitpid(child, &status, 0);
	CHECK(rl_pool_proc_claim(r, (uint32_t)child, ns, "gone") != NULL, "claimed");
	c->pid = (uint32_t)child;
	CHECK(rl_pool_procs(w, ns, list, 4) == 2 && list[0].pid == (uint32_t)getpid() &&
	      list[1].pid == (uint32_t)child && list[1].pidns == ns + 1,
	      "the live process is listed, and the other namespace's");
	c->pid = 0;
	/* a full table reclaims lines of the dead, else counts the miss */
	for (uint32_t i = 0; i < w->n_procs; i++) {
		if (w->procs[i].pid == (uint32_t)getpid())
			continue;
		w->procs[i].pid = (uint32_t)child;	/* dead */
		w->procs[i].pidns = ns + 1;		/* ...elsewhere */
		w->procs[i].start_ns = w->procs[i].seen_ns = now;
	}
	CHECK(rl_pool_proc_claim(r, 1, ns, "init") == NULL,
	      "lines of another namespace, recently active: not reclaimed");
	w->procs[3].pidns = ns;
	CHECK(rl_pool_proc_claim(r, 1, ns, "init") == &r->procs[3],
	      "a dead line of this namespace is reused");
	if (now > RL_POOL_PROC_IDLE_NS + 2) {
		w->procs[5].seen_ns = 1;
		CHECK(rl_pool_proc_claim(r, 2, ns, "kthreadd") == &r->procs[5],
		      "a line of another namespace idle past an hour is reused");
	}
	for (uint32_t i = 0; i < w->n_procs; i++) {
		w->procs[i].pid = 1;
		w->procs[i].pidns = ns;
	}
	CHECK(rl_pool_proc_claim(r, (uint32_t)getpid() + 1, ns, "y") == NULL &&
	      w->hdr->procs_full == 2, "a full table of the living: counted");
	memset(w->procs, 0, w->n_procs * sizeof(*w->procs));
}

/* Shared memory any process of the group can write: whatever is in the
 * tenant slots and the rules past the header's checks, a reader answers
 * with a tenant in range or none, and never reads out of the pool (ASan
 * would tell, under make SANITIZE=1). */
static void test_garbage(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	size_t from = (size_t)w->hdr->off_tenants, words;
	uint64_t *mem = (uint64_t *)((char *)w->base + from);
	int bad = 0;

	words = (w->hdr->pre.size - from) / sizeof(uint64_t);
	for (size_t k = 0; k < words; k++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		mem[k] = x;
	}
	/* the rules' switches too: any half, any count of groups */
	for (int d = 0; d < 2; d++) {
		w->hdr->cls[d].active = (uint32_t)x;
		w->hdr->cls[d].groups[0] = w->hdr->cls[d].groups[1] = UINT32_MAX;
		w->hdr->cls[d].rules[0] = w->hdr->cls[d].rules[1] = 1;
	}
	for (int k = 0; k < 200000; k++) {
		uint8_t a[16];
		int t;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(a, &x, 8);
		memcpy(a + 8, &x, 8);
		t = rl_pool_classify(r, (enum rl_pool_dir)(k & 1),
				     k & 2 ? AF_INET6 : AF_INET, a, (uint16_t)x);
		if (t >= (int)r->n_tenants)
			bad++;
		rl_pool_take(r, (uint32_t)(x % (r->n_tenants + 2)),
			     T0 + (uint64_t)k);
	}
	CHECK(bad == 0, "%d answers named a slot past the table", bad);
	memset(mem, 0, words * sizeof(uint64_t));
	memset(w->hdr->cls, 0, sizeof(w->hdr->cls));
}

static void test_create(void)
{
	struct stat st;
	bool adopted;

	CHECK(rl_pool_create(w, path, 16, RL_CLS_GROUPS_MIN, (gid_t)-1,
			     &adopted) == 0 && !adopted, "a pool made");
	CHECK(rl_pool_map(r, path) == 0, "and mapped by a reader");
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0660,
	      "group read-write: %o", st.st_mode & 0777);
}

/* A grant split by demand, and tokens moved to a point that ran dry: the
 * sum is never more than was granted. */
static void test_share(void)
{
	static const struct {
		uint64_t n, kd, pd;
		bool prefer_pool;
		uint64_t pool;
		const char *what;
	} split[] = {
		{ 100, 0, 0, false, 0, "no demand anywhere: the kernel, by default" },
		{ 100, 0, 0, true, 100, "no demand, nothing attached: the pool" },
		{ 100, 30, 10, false, 25, "in proportion to demand" },
		{ 100, 0, 7, false, 100, "only the pool wants: all of it" },
		{ 100, 7, 0, true, 0, "only the kernel wants: none" },
		{ 3, 1, 2, false, 2, "a token left over goes to the larger demand" },
		{ 3, 2, 1, false, 1, "...either way" },
		{ 1, 1, 1, false, 0, "an even split of one: the kernel" },
		{ UINT64_MAX, UINT64_MAX / 2, UINT64_MAX / 2, false, UINT64_MAX / 2,
		  "no overflow on huge numbers" },
	};
	static const struct {
		int64_t kt, pt;
		bool kw, pw;
		int64_t move;
		const char *what;
	} bal[] = {
		{ 10, 0, false, true, 5, "the pool dry with demand: half the kernel's" },
		{ 1, 0, false, true, 1, "rounded up: the last token moves" },
		{ 0, 9, true, false, -5, "the kernel dry with demand: half the pool's" },
		{ 10, 0, false, false, 0, "a dry point without demand gets nothing" },
		{ 0, 0, true, true, 0, "both dry: nothing to move" },
		{ 4, 4, true, true, 0, "neither dry: nothing moves" },
		{ 5, -1, false, true, 3, "a transient -1 (a spend put back) is dry" },
	};

	for (size_t i = 0; i < sizeof(split) / sizeof(split[0]); i++) {
		uint64_t got = rl_share_split(split[i].n, split[i].kd, split[i].pd,
					      split[i].prefer_pool);

		CHECK(got == split[i].pool, "split %zu (%s): %llu to the pool, "
		      "expected %llu", i, split[i].what, (unsigned long long)got,
		      (unsigned long long)split[i].pool);
	}
	for (size_t i = 0; i < sizeof(bal) / sizeof(bal[0]); i++) {
		int64_t got = rl_share_balance(bal[i].kt, bal[i].pt, bal[i].kw,
					       bal[i].pw);

		CHECK(got == bal[i].move, "balance %zu (%s): %lld, expected %lld",
		      i, bal[i].what, (long long)got, (long long)bal[i].move);
	}
}

/* --- the rules' switch with a writer and readers in threads ------------- */

/* What each probe classifies to under the two rule sets the writer
 * switches between; -1 is also what a reader answers when it found no
 * quiet moment (eight walks overtaken), counted apart. */
static const struct probe {
	int family;
	const char *addr;
	uint16_t port;
	int a, b;
} probes[] = {
	{ AF_INET, "192.0.2.200", 80, 1, 4 },
	{ AF_INET, "192.0.2.1", 80, 1, 5 },
	{ AF_INET, "198.51.100.9", 443, 2, 6 },
	{ AF_INET, "198.51.100.9", 80, -1, 6 },
	{ AF_INET6, "2001:db8:1::5", 0, 3, 7 },
	{ AF_INET6, "2001:db8:2::1", 0, -1, 7 },
};

#define N_PROBES	(sizeof(probes) / sizeof(probes[0]))
#define PUBLISHES	1000
#define READERS		2

struct hammer {
	struct rl_pool *w;
	struct rl_pool rd[READERS];
	struct rl_cls_image img[2];
	int done;
	/* per reader: walks, answers of neither set, gave up */
	uint64_t walks[READERS], torn[READERS], gaveup[READERS];
	int first_bad[READERS][3];	/* probe, answer, set in force */
};

struct reader_arg {
	struct hammer *h;
	int id;
};

static void *hammer_read(void *arg)
{
	struct reader_arg *ra = arg;
	struct hammer *h = ra->h;
	struct rl_pool *p = &h->rd[ra->id];
	uint8_t addr[N_PROBES][16];

	for (size_t i = 0; i < N_PROBES; i++) {
		memset(addr[i], 0, 16);
		inet_pton(probes[i].family, probes[i].addr, addr[i]);
	}
	while (!__atomic_load_n(&h->done, __ATOMIC_ACQUIRE)) {
		for (size_t i = 0; i < N_PROBES; i++) {
			const struct probe *q = &probes[i];
			int t = rl_pool_classify(p, RL_POOL_IN, q->family,
						 addr[i], q->port);

			h->walks[ra->id]++;
			if (t == q->a || t == q->b)
				continue;
			if (t == -1) {
				h->gaveup[ra->id]++;
				continue;
			}
			if (!h->torn[ra->id]++) {
				h->first_bad[ra->id][0] = (int)i;
				h->first_bad[ra->id][1] = t;
			}
		}
	}
	return NULL;
}

static void *hammer_write(void *arg)
{
	struct hammer *h = arg;

	for (int i = 0; i < PUBLISHES; i++)
		if (rl_pool_publish(h->w, RL_POOL_IN, &h->img[i & 1], 3)) {
			CHECK(0, "publish %d failed", i);
			break;
		}
	__atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/*
 * A writer switches between two rule sets of different shapes as fast as
 * it can while readers classify probes in a loop: every answer must be the
 * probe's tenant under one set or the other (or "no quiet moment").  Run
 * on x86 this cannot show that the orderings hold on a weakly ordered CPU
 * (x86 keeps stores and loads in order whatever the code asks); it does
 * catch a logic error of the protocol - a writer writing the half in use,
 * a reader that does not walk again after a switch.
 */
static void test_switch_threads(void)
{
	struct rl_cls_rule a[3], b[4];
	struct hammer *h = calloc(1, sizeof(*h));
	struct reader_arg ra[READERS];
	pthread_t wt, rt[READERS];
	struct rl_pool pw;
	char p3[300], err[256];
	uint64_t walks = 0, torn = 0, gaveup = 0;
	int failed = failures;
	bool adopted;

	if (!h) {
		CHECK(0, "out of memory");
		return;
	}
	add_rule(&a[0], AF_INET, "192.0.2.0", 24, 0, 1);
	add_rule(&a[1], AF_INET, "198.51.100.0", 24, 443, 2);
	add_rule(&a[2], AF_INET6, "2001:db8:1::", 48, 0, 3);
	add_rule(&b[0], AF_INET, "192.0.2.128", 25, 0, 4);
	add_rule(&b[1], AF_INET, "192.0.2.0", 24, 0, 5);
	add_rule(&b[2], AF_INET, "198.51.100.0", 24, 0, 6);
	add_rule(&b[3], AF_INET6, "2001:db8::", 32, 0, 7);
	snprintf(p3, sizeof(p3), "%s/switch", dir);
	CHECK(rl_cls_compile(a, 3, RL_CLS_GROUPS_MIN, &h->img[0], err,
			     sizeof(err)) == 0, "set a compiled: %s", err);
	CHECK(rl_cls_compile(b, 4, RL_CLS_GROUPS_MIN, &h->img[1], err,
			     sizeof(err)) == 0, "set b compiled: %s", err);
	CHECK(rl_pool_create(&pw, p3, 16, RL_CLS_GROUPS_MIN, (gid_t)-1,
			     &adopted) == 0, "a pool made");
	h->w = &pw;
	CHECK(rl_pool_publish(&pw, RL_POOL_IN, &h->img[1], 4) == 0, "set b");
	for (int i = 0; i < READERS; i++)
		CHECK(rl_pool_map(&h->rd[i], p3) == 0, "reader %d mapped", i);
	if (failures != failed)
		goto out;
	for (int i = 0; i < READERS; i++) {
		ra[i] = (struct reader_arg){ .h = h, .id = i };
		if (pthread_create(&rt[i], NULL, hammer_read, &ra[i])) {
			CHECK(0, "reader thread %d", i);
			__atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
			for (int j = 0; j < i; j++)
				pthread_join(rt[j], NULL);
			goto out;
		}
	}
	if (pthread_create(&wt, NULL, hammer_write, h)) {
		CHECK(0, "writer thread");
		__atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
	} else {
		pthread_join(wt, NULL);
	}
	for (int i = 0; i < READERS; i++)
		pthread_join(rt[i], NULL);
	for (int i = 0; i < READERS; i++) {
		walks += h->walks[i];
		torn += h->torn[i];
		gaveup += h->gaveup[i];
		CHECK(!h->torn[i], "reader %d: %llu answer(s) of neither set, "
		      "the first %d for probe %d", i,
		      (unsigned long long)h->torn[i], h->first_bad[i][1],
		      h->first_bad[i][0]);
	}
	diag("%d switches, %llu walks, %llu of neither set, %llu without a "
	     "quiet moment", PUBLISHES, (unsigned long long)walks,
	     (unsigned long long)torn, (unsigned long long)gaveup);
	CHECK(walks > 0, "the readers walked");
out:
	for (int i = 0; i < READERS; i++)
		rl_pool_unmap(&h->rd[i]);
	rl_pool_unmap(&pw);
	rl_cls_image_free(&h->img[0]);
	rl_cls_image_free(&h->img[1]);
	unlink(p3);
	free(h);
}

int main(void)
{
	int status;

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(path, sizeof(path), "%s/pool", dir);
	CHECK_RUN(test_layout);
	CHECK_RUN(test_share);
	CHECK_RUN(test_refused_files);
	if (!CHECK_RUN(test_create)) {
		CHECK_RUN(test_standalone);
		CHECK_RUN(test_leased);
		CHECK_RUN(test_shared_cap_dead_agent);
		CHECK_RUN(test_overdraft);
		CHECK_RUN(test_classify);
		CHECK_RUN(test_procs);
		CHECK_RUN(test_adopt);
		CHECK_RUN(test_garbage);
	}
	CHECK_RUN(test_switch_threads);
	status = check_exit();
	rl_pool_unmap(r);
	rl_pool_unmap(w);
	unlink(path);
	rmdir(dir);
	return status;
}
