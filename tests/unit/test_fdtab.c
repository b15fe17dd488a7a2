/* test_fdtab: the preload library's table of counted connections - which
 * close gives a connection back (the last of its fds: close, dup2 over it,
 * shutdown once), a forked child's copies, the table's bounds - as tables
 * of steps; the /proc/net/tcp and /proc/PID/maps lines the agent's check
 * reads; the pool's connection cap as the library spends it; and a host's
 * slots shared between the kernel and the pool.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"
#include "fdtab.h"
#include "pool.h"
#include "procnet.h"
#include "slot.h"

static struct rl_fdtab tab;

enum op { OPEN, CLOSE, DUP, END };

struct step {
	enum op op;
	int fd, fd2;		/* DUP: fd2 becomes a copy of fd */
	uint32_t slot;		/* OPEN: the connection's slot */
	int ret;		/* OPEN's return */
	int gives;		/* the slot given back (+1), 0 for none */
};

static void run(const char *name, const struct step *s, size_t n)
{
	memset(&tab, 0, sizeof(tab));
	for (size_t i = 0; i < n; i++) {
		struct rl_fdconn c = { 0 };
		int ret = 0, gives = 0;

		switch (s[i].op) {
		case OPEN:
			ret = rl_fdtab_open(&tab, s[i].fd, 0, s[i].slot, 7, &c);
			if (ret == 1)
				gives = (int)c.slot + 1;
			break;
		case CLOSE:
			if (rl_fdtab_close(&tab, s[i].fd, &c))
				gives = (int)c.slot + 1;
			break;
		case DUP:
			if (rl_fdtab_dup(&tab, s[i].fd, s[i].fd2, &c))
				gives = (int)c.slot + 1;
			break;
		case END:
			if (rl_fdtab_end(&tab, s[i].fd, &c))
				gives = (int)c.slot + 1;
			break;
		}
		CHECK(ret == s[i].ret && gives == s[i].gives,
		      "%s, step %zu: returned %d, gave back %d; want %d, %d", name,
		      i, ret, gives, s[i].ret, s[i].gives);
		if (gives)
			CHECK(c.epoch == 7 && c.view == 0, "%s, step %zu: epoch %u "
			      "view %u", name, i, c.epoch, c.view);
	}
}

#define RUN(name, ...) do {						\
	static const struct step steps[] = { __VA_ARGS__ };		\
	run(name, steps, sizeof(steps) / sizeof(steps[0]));		\
} while (0)

static void test_closes(void)
{
	RUN("close gives back once",
	    { OPEN, 5, 0, 2, 0, 0 }, { CLOSE, 5, 0, 0, 0, 3 },
	    { CLOSE, 5, 0, 0, 0, 0 });
	RUN("an fd never counted gives nothing",
	    { CLOSE, 9, 0, 0, 0, 0 }, { DUP, 9, 10, 0, 0, 0 },
	    { CLOSE, 10, 0, 0, 0, 0 });
	RUN("dup: the last copy gives back",
	    { OPEN, 5, 0, 1, 0, 0 }, { DUP, 5, 6, 0, 0, 0 },
	    { CLOSE, 5, 0, 0, 0, 0 }, { CLOSE, 6, 0, 0, 0, 2 });
	RUN("dup: the original closed last",
	    { OPEN, 5, 0, 1, 0, 0 }, { DUP, 5, 6, 0, 0, 0 },
	    { DUP, 6, 7, 0, 0, 0 }, { CLOSE, 6, 0, 0, 0, 0 },
	    { CLOSE, 7, 0, 0, 0, 0 }, { CLOSE, 5, 0, 0, 0, 2 });
	RUN("dup2 over a counted fd closes its connection",
	    { OPEN, 5, 0, 1, 0, 0 }, { OPEN, 6, 0, 3, 0, 0 },
	    { DUP, 5, 6, 0, 0, 4 }, { CLOSE, 5, 0, 0, 0, 0 },
	    { CLOSE, 6, 0, 0, 0, 2 });
	RUN("dup2 of an uncounted fd over a counted one",
	    { OPEN, 6, 0, 3, 0, 0 }, { DUP, 9, 6, 0, 0, 4 },
	    { CLOSE, 6, 0, 0, 0, 0 });
	RUN("dup2 onto itself changes nothing",
	    { OPEN, 5, 0, 1, 0, 0 }, { DUP, 5, 5, 0, 0, 0 },
	    { CLOSE, 5, 0, 0, 0, 2 });
	RUN("shutdown gives back once, its closes nothing more",
	    { OPEN, 5, 0, 1, 0, 0 }, { DUP, 5, 6, 0, 0, 0 },
	    { END, 5, 0, 0, 0, 2 }, { END, 6, 0, 0, 0, 0 },
	    { CLOSE, 5, 0, 0, 0, 0 }, { CLOSE, 6, 0, 0, 0, 0 });
	RUN("an fd accepted while still in the table: closed unseen",
	    { OPEN, 5, 0, 1, 0, 0 }, { OPEN, 5, 0, 4, 1, 2 },
	    { CLOSE, 5, 0, 0, 0, 5 });
	RUN("a record freed is used again",
	    { OPEN, 5, 0, 1, 0, 0 }, { CLOSE, 5, 0, 0, 0, 2 },
	    { OPEN, 5, 0, 3, 0, 0 }, { CLOSE, 5, 0, 0, 0, 4 });
	RUN("fds past the table are never counted",
	    { OPEN, RL_FDTAB_FDS, 0, 1, -EMFILE, 0 }, { OPEN, -1, 0, 1, -EMFILE, 0 },
	    { OPEN, RL_FDTAB_FDS - 1, 0, 1, 0, 0 },
	    { DUP, RL_FDTAB_FDS - 1, RL_FDTAB_FDS, 0, 0, 0 },
	    { CLOSE, RL_FDTAB_FDS - 1, 0, 0, 0, 2 });
	CHECK(tab.untracked == 2, "untracked %llu, want 2",
	      (unsigned long long)tab.untracked);
}

static void count_each(const struct rl_fdconn *c, void *arg)
{
	*(uint64_t *)arg += c->slot;
}

static void test_full_and_each(void)
{
	struct rl_fdconn c;
	uint64_t sum = 0;
	int fd;

	memset(&tab, 0, sizeof(tab));
	for (fd = 0; fd < RL_FDTAB_CONNS; fd++)
		CHECK(rl_fdtab_open(&tab, fd, 0, 1, 0, &c) == 0, "fd %d", fd);
	CHECK(rl_fdtab_open(&tab, fd, 0, 1, 0, &c) == -EMFILE,
	      "a connection past RL_FDTAB_CONNS was recorded");
	CHECK(rl_fdtab_close(&tab, 100, &c), "close of fd 100");
	CHECK(rl_fdtab_open(&tab, fd, 0, 1, 0, &c) == 0,
	      "the record freed by a close was not used again");
	/* a dup shares its record: each counts once */
	CHECK(!rl_fdtab_dup(&tab, 5, RL_FDTAB_CONNS + 1, &c), "dup");
	rl_fdtab_each(&tab, false, count_each, &sum);
	CHECK(sum == RL_FDTAB_CONNS, "each saw %llu connections, want %d",
	      (unsigned long long)sum, RL_FDTAB_CONNS);
	CHECK(rl_fdtab_end(&tab, 7, &c), "shutdown");
	sum = 0;
	rl_fdtab_each(&tab, true, count_each, &sum);
	CHECK(sum == RL_FDTAB_CONNS - 1, "each skips a connection shut down: "
	      "%llu", (unsigned long long)sum);
	CHECK(!rl_fdtab_get(&tab, 5, &c) && !rl_fdtab_close(&tab, 5, &c),
	      "dropped: fd 5 still counted");
	sum = 0;
	rl_fdtab_each(&tab, false, count_each, &sum);
	CHECK(sum == 0, "dropped: %llu left", (unsigned long long)sum);
}

static void test_procnet(void)
{
	static const struct {
		const char *line;
		bool v6, ok;
		int family;
		uint8_t remote[4];
		uint16_t lport;
		uint8_t state;
		uint64_t inode;
	} cases[] = {
		{ "  sl  local_address rem_address   st tx_queue rx_queue tr "
		  "tm->when retrnsmt   uid  timeout inode", false, false, 0, { 0 }, 0, 0, 0 },
		{ "   0: 0B0200C0:1F90 410200C0:0E2C 01 00000000:00000000 "
		  "00:00000000 00000000     0        0 11960805 1 0000 20 4 30 10 -1",
		  false, true, AF_INET, { 192, 0, 2, 65 }, 8080, 1, 11960805 },
		{ "   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 "
		  "00:00000000 00000000     0        0 1124 1 0000 100 0 0 10 0",
		  false, true, AF_INET, { 0, 0, 0, 0 }, 8080, 10, 1124 },
		/* a v4-mapped client of a dual-stack socket: IPv4 */
		{ "   2: 0000000000000000FFFF00000B0200C0:1F90 "
		  "0000000000000000FFFF0000410200C0:D431 01 00000000:00000000 "
		  "00:00000000 00000000     0        0 4242 1 0000 20 4 30 10 -1",
		  true, true, AF_INET, { 192, 0, 2, 65 }, 8080, 1, 4242 },
		{ "   3: 0B0200C0:1F90 410200C0 01", false, false, 0, { 0 }, 0, 0, 0 },
		{ "   4: 0B0200C0:1F90 410200C0:0E2C 01 00000000:00000000", false,
		  false, 0, { 0 }, 0, 0, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rl_procnet_sock s;
		bool ok = rl_procnet_parse(cases[i].line, cases[i].v6, &s);

		CHECK(ok == cases[i].ok, "case %zu: parsed %d", i, ok);
		if (!ok || !cases[i].ok)
			continue;
		CHECK(s.family == cases[i].family &&
		      memcmp(s.remote, cases[i].remote, 4) == 0 &&
		      s.lport == cases[i].lport && s.state == cases[i].state &&
		      s.inode == cases[i].inode,
		      "case %zu: family %d remote %u.%u.%u.%u lport %u state %u "
		      "inode %llu", i, s.family, s.remote[0], s.remote[1],
		      s.remote[2], s.remote[3], s.lport, s.state,
		      (unsigned long long)s.inode);
	}
}

static void test_procmaps(void)
{
	static const struct {
		const char *what, *line;
		bool maps;
	} cases[] = {
		{ "the pool", "7f3c2a000000-7f3c2b100000 rw-s 00000000 00:1a 4242"
		  "                      /run/rlgate.pool", true },
		{ "the pool, replaced since", "7f3c2a000000-7f3c2b100000 rw-s "
		  "00000000 00:1a 4242 /run/rlgate.pool (deleted)", true },
		{ "another inode", "7f3c2a000000-7f3c2b100000 rw-s 00000000 00:1a "
		  "4243 /run/rlgate.pool", false },
		{ "another device", "7f3c2a000000-7f3c2b100000 rw-s 00000000 "
		  "103:02 4242 /usr/lib/x.so", false },
		{ "anonymous", "7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0"
		  "                          [stack]", false },
		{ "cut short", "7f3c2a000000-7f3c2b100000 rw-s 00000000 00:1a", false },
		{ "empty", "", false },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		CHECK(rl_procmaps_maps(cases[i].line, 0, 0x1a, 4242) == cases[i].maps,
		      "%s: want %d", cases[i].what, cases[i].maps);
	CHECK(rl_procmaps_maps("7f3c2a000000-7f3c2b100000 r--p 00000000 103:02 "
			       "99 /usr/lib/x.so", 0x103, 2, 99),
	      "a major number of three digits");
}

static void test_pool_cap(void)
{
	static struct rl_pool_hdr hdr;
	static struct rl_tenant t[2];
	static struct rl_stats st[2];
	struct rl_pool p = { .hdr = &hdr, .tenants = t, .stats = st };
	uint32_t e = 99;

	p.n_tenants = 2;
	t[0].mode = RL_MODE_STANDALONE;
	t[0].flags = RL_F_CONNCAP;
	t[0].conn_slots = 2;
	t[0].conn_epoch = 3;
	t[1].mode = RL_MODE_STANDALONE;
	CHECK(rl_pool_conn_open(&p, 1, 0, &e) == RL_POOL_PASS, "uncapped");
	CHECK(rl_pool_conn_open(&p, 5, 0, &e) == RL_POOL_PASS, "past the table");
	CHECK(rl_pool_conn_open(&p, 0, 0, &e) == RL_POOL_ADMIT && e == 3, "1st");
	CHECK(rl_pool_conn_open(&p, 0, 0, &e) == RL_POOL_ADMIT, "2nd");
	CHECK(rl_pool_conn_open(&p, 0, 0, &e) == RL_POOL_REFUSE && t[0].conns == 2 &&
	      st[0].denied == 1, "3rd: conns %lld denied %llu",
	      (long long)t[0].conns, (unsigned long long)st[0].denied);
	rl_pool_conn_close(&p, 0, 3);
	CHECK(t[0].conns == 1, "closed: %lld", (long long)t[0].conns);
	CHECK(rl_pool_conn_hold(&p, 0, 3) && t[0].conns == 2,
	      "a forked copy is counted past nothing");
	CHECK(!rl_pool_conn_hold(&p, 0, 2), "held in an old epoch");
	rl_pool_conn_close(&p, 0, 2);
	CHECK(t[0].conns == 2, "an old epoch's close counted");
	t[0].conns = 0;
	rl_pool_conn_close(&p, 0, 3);
	CHECK(t[0].conns == 0, "below zero: %lld", (long long)t[0].conns);
	/* leased while the agent is silent: the fail policy's limit */
	t[0].mode = RL_MODE_LEASED;
	t[0].conn_slots = 10;
	t[0].conn_fail_slots = 1;
	t[0].conns = 1;
	t[0].fail = RL_FAIL_STATIC;
	hdr.agent.heartbeat_ns = 1000;
	hdr.agent.stale_ns = 100;
	CHECK(rl_pool_conn_open(&p, 0, 1050, &e) == RL_POOL_ADMIT,
	      "leased, heartbeat fresh: the slots held");
	CHECK(rl_pool_conn_open(&p, 0, 2000, &e) == RL_POOL_REFUSE,
	      "leased, heartbeat stale: past the static share");
	t[0].fail = RL_FAIL_ALLOW;
	CHECK(rl_pool_conn_open(&p, 0, 2000, &e) == RL_POOL_ADMIT,
	      "stale, fail allow: no cap");
	t[0].fail = RL_FAIL_DENY;
	t[0].conns = 0;
	CHECK(rl_pool_conn_open(&p, 0, 2000, &e) == RL_POOL_REFUSE,
	      "stale, fail deny: nothing new");
	t[0].mode = RL_MODE_STANDALONE;
	t[0].conn_slots = 2;
	t[0].flags |= RL_F_SHADOW;
	t[0].conns = 2;
	CHECK(rl_pool_conn_open(&p, 0, 0, &e) == RL_POOL_ADMIT && t[0].conns == 3 &&
	      st[0].shadow_denied == 1, "shadow: admitted past the cap, counted");
}

static void test_share_slots(void)
{
	/* pool_slots: the pool's slots before; kw, pw: each point refused
	 * since the last share */
	static const struct {
		int64_t n, kern, pool, pool_slots;
		bool kw, pw, prefer_pool;
		int64_t want;
	} cases[] = {
		{ 10, 0, 0, 0, false, false, true, 10 },	/* attached nowhere: all */
		{ 10, 0, 0, 0, false, false, false, 5 },	/* free ones halved */
		{ 11, 0, 0, 0, false, false, false, 5 },
		{ 11, 0, 0, 0, false, true, false, 6 },		/* odd one to demand */
		{ 11, 0, 0, 0, true, false, false, 5 },
		{ 10, 4, 2, 0, false, false, false, 4 },	/* 2 in flight + half of 4 */
		{ 10, 0, 7, 0, false, false, false, 8 },
		{ 2, 0, 0, 0, false, false, false, 1 },		/* idle, 2 free: one each */
		{ 2, 0, 0, 2, true, false, false, 1 },
		{ 3, 0, 0, 3, false, true, false, 2 },		/* the kernel keeps one */
		{ 3, 0, 0, 0, true, false, false, 1 },		/* the pool keeps one */
		{ 6, 5, 0, 0, false, false, false, 0 },		/* at the last free one: */
		{ 6, 5, 0, 1, false, false, false, 1 },		/* it stays where it is */
		{ 6, 5, 0, 0, false, true, false, 1 },		/* to the one refused */
		{ 6, 4, 1, 2, true, false, false, 1 },
		{ 6, 4, 1, 2, true, true, false, 1 },		/* both: it flips */
		{ 6, 4, 1, 1, true, true, false, 2 },
		{ 1, 0, 0, 0, false, true, false, 1 },		/* a host holding one */
		{ 1, 0, 0, 1, true, false, false, 0 },
		{ 6, 4, 2, 2, true, true, false, 2 },		/* full: each keeps its own */
		{ 3, 4, 2, 2, false, false, false, 1 },		/* giving back: in proportion */
		{ 0, 4, 2, 2, false, true, false, 0 },
		{ -1, 0, 0, 0, false, true, false, 0 },
		{ 5, -1, 0, 0, false, false, false, 2 },	/* a transient -1 is none */
		{ 2, -1, 0, 0, false, true, false, 1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t got = rl_share_slots(cases[i].n, cases[i].kern,
					     cases[i].pool, cases[i].pool_slots,
					     cases[i].kw, cases[i].pw,
					     cases[i].prefer_pool);

		CHECK(got == cases[i].want, "case %zu: n %lld kern %lld pool %lld "
		      "pool_slots %lld wants %d/%d: %lld, want %lld", i,
		      (long long)cases[i].n, (long long)cases[i].kern,
		      (long long)cases[i].pool, (long long)cases[i].pool_slots,
		      cases[i].kw, cases[i].pw, (long long)got,
		      (long long)cases[i].want);
	}
}

/* Storing a share: the point that loses is lowered first, and what it
 * reserved meanwhile (its count read after: kc, pc) is taken out of what
 * the other gains, never beyond its old slots. */
static void test_share_store(void)
{
	static const struct {
		int64_t ks, kc, ps, pc, n, pn;
		int64_t want_ks, want_ps;
		const char *what;
	} rows[] = {
		{ 3, 0, 0, 0, 3, 1, 2, 1, "the pool gains one" },
		{ 3, 1, 0, 0, 3, 1, 2, 1, "the kernel's one in flight stays" },
		{ 3, 3, 0, 0, 3, 1, 2, 0, "the kernel filled its old slots: none to give" },
		{ 3, 4, 0, 0, 3, 1, 2, 0, "a CPU refusing at that moment: no more" },
		{ 0, 0, 3, 0, 3, 2, 1, 2, "the kernel gains one" },
		{ 0, 0, 3, 3, 3, 2, 0, 2, "the pool filled its old slots: none to give" },
		{ 0, 0, 3, 99, 3, 2, 0, 2, "a count forged in the pool: its old slots" },
		{ 1, 2, 0, 0, 4, 1, 3, 1, "both gain (n grew): a refusing CPU "
					    "takes nothing from the pool" },
		{ 1, 3, 0, 0, 4, 1, 3, 1, "...nor a place taken under the new slots" },
		{ 1, 4, 0, 0, 4, 1, 3, 1, "past the new slots: counted up to them" },
		{ 2, 0, 2, 0, 2, 1, 1, 1, "giving back: each loses one" },
		{ 0, 0, 0, 0, 3, 3, 0, 3, "attached nowhere: all to the pool" },
		{ 2, 0, 2, 0, -1, 1, 0, 0, "nothing held" },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct rl_tenant kt = { .conn_slots = rows[i].ks, .conns = rows[i].kc };
		struct rl_tenant pt = { .conn_slots = rows[i].ps, .conns = rows[i].pc };

		rl_share_store(&kt, &pt, rows[i].n, rows[i].pn);
		CHECK(kt.conn_slots == rows[i].want_ks && pt.conn_slots == rows[i].want_ps,
		      "%s: kernel %lld pool %lld, want %lld %lld", rows[i].what,
		      (long long)kt.conn_slots, (long long)pt.conn_slots,
		      (long long)rows[i].want_ks, (long long)rows[i].want_ps);
		CHECK(kt.conn_slots + pt.conn_slots <= (rows[i].n > 0 ? rows[i].n : 0),
		      "%s: more than n", rows[i].what);
	}
}

/* Every state of a small cap: the two parts never hold more than n, each
 * point keeps what it has in flight, and neither point is left without a
 * free slot while the other has two or more. */
static void test_share_slots_bounds(void)
{
	for (int64_t n = 0; n <= 8; n++)
		for (int64_t k = 0; k <= 9; k++)
			for (int64_t p = 0; p <= 9; p++)
				for (int64_t ps = 0; ps <= n; ps++)
					for (int w = 0; w < 4; w++) {
		int64_t pn = rl_share_slots(n, k, p, ps, w & 1, w & 2, false);
		int64_t kn = n - pn;

		CHECK(pn >= 0 && pn <= n, "n %lld: pool %lld", (long long)n,
		      (long long)pn);
		if (k + p > n)
			continue;
		CHECK(pn >= p && kn >= k, "n %lld k %lld p %lld: pool %lld",
		      (long long)n, (long long)k, (long long)p, (long long)pn);
		if (n - k - p >= 2)
			CHECK(pn > p && kn > k, "n %lld k %lld p %lld: pool %lld "
			      "leaves a point without", (long long)n, (long long)k,
			      (long long)p, (long long)pn);
		if (n - k - p == 1 && (w == 1 || w == 2))
			CHECK((w == 2) == (pn > p), "n %lld k %lld p %lld w %d: "
			      "pool %lld", (long long)n, (long long)k,
			      (long long)p, w, (long long)pn);
	}
}

int main(void)
{
	CHECK_RUN(test_closes);
	CHECK_RUN(test_full_and_each);
	CHECK_RUN(test_procnet);
	CHECK_RUN(test_procmaps);
	CHECK_RUN(test_pool_cap);
	CHECK_RUN(test_share_slots);
	CHECK_RUN(test_share_slots_bounds);
	CHECK_RUN(test_share_store);
	return check_exit();
}
