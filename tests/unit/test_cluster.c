/* test_cluster: the Redis Cluster layer as tables - CRC16 and hash slots
 * (the specification's vector, hash tags, empty tags; slots as redis-server
 * 7.0's CLUSTER KEYSLOT gives them), slot maps from CLUSTER SLOTS replies
 * (RESP text as Redis sends it), the error replies that redirect a call,
 * and the steps a call takes through a run of them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <hiredis/hiredis.h>

#include "cluster.h"
#include "check.h"

/* The reply hiredis' reader makes of RESP text; NULL if incomplete. */
static redisReply *resp(const char *text)
{
	redisReader *rd = redisReaderCreate();
	void *reply = NULL;

	if (!rd)
		return NULL;
	if (redisReaderFeed(rd, text, strlen(text)) != REDIS_OK ||
	    redisReaderGetReply(rd, &reply) != REDIS_OK)
		reply = NULL;
	redisReaderFree(rd);
	return reply;
}

/* The map as text: "first-last=host:port" for each run of slots with one
 * owner, runs without one left out, separated by spaces. */
static void map_text(const struct cluster_map *m, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (unsigned int s = 0; s < CLUSTER_SLOTS;) {
		int n = cluster_map_owner(m, s);
		unsigned int e = s;

		while (e + 1 < CLUSTER_SLOTS && cluster_map_owner(m, e + 1) == n)
			e++;
		if (n != CLUSTER_NO_NODE && off < len)
			off += (size_t)snprintf(buf + off, len - off, "%s%u-%u=%s:%u",
						off ? " " : "", s, e, m->node[n].host,
						m->node[n].port);
		s = e + 1;
	}
}

/* A node of CLUSTER SLOTS in 7.0: host (hlen bytes), port, id, metadata. */
#define NODE(hlen, h, p, id)	"*4\r\n$" #hlen "\r\n" h "\r\n:" #p "\r\n$2\r\n" id "\r\n*0\r\n"

static void test_slots(void)
{
	static const struct {
		const char *key;
		unsigned int slot;
	} k[] = {
		{ "123456789", 12739 },
		{ "foo", 12182 },
		{ "bar", 5061 },
		{ "hello", 866 },
		{ "somekey", 11058 },
		{ "", 0 },
		/* the tag alone is hashed */
		{ "foo{hash_tag}", 2515 },
		{ "{user1000}.following", 3443 },
		{ "foo{bar}{zap}", 5061 },
		/* the first '{', then the first '}' after it */
		{ "foo{{bar}}zap", 4015 },
		/* an empty tag, or none closed: the whole key */
		{ "foo{}{bar}", 8363 },
		{ "{}", 15257 },
		{ "{", 4092 },
		{ "}", 12090 },
		{ "a{b", 13340 },
		/* rlgate's keys: a tenant's in the slot of "t:<tenant>" */
		{ "rl:{t:acme}:bucket", 9557 },
		{ "rl:{t:acme}:policy", 9557 },
		{ "t:acme", 9557 },
		{ "rl:{t:beta}:bucket", 13638 },
		{ "rl:agents", 4180 },
		{ "rl:agent_ids", 4979 },
		{ "rl:tenants", 12593 },
		{ "rl:{registry}:agents", 3850 },
		{ "rl:{registry}:agent_ids", 3850 },
	};

	CHECK(cluster_crc16("123456789", 9) == 0x31C3,
	      "crc16 of \"123456789\": 0x%04x, want 0x31C3",
	      cluster_crc16("123456789", 9));
	CHECK(cluster_crc16("", 0) == 0, "crc16 of \"\": 0x%04x",
	      cluster_crc16("", 0));
	for (size_t i = 0; i < sizeof(k) / sizeof(k[0]); i++) {
		unsigned int s = cluster_key_slot(k[i].key, strlen(k[i].key));

		CHECK(s == k[i].slot, "slot of '%s': %u, want %u", k[i].key, s,
		      k[i].slot);
	}
	/* Only len bytes count: a tag closed past the end is no tag. */
	CHECK(cluster_key_slot("a{b}", 3) == 13340, "slot of 'a{b' within 'a{b}': %u",
	      cluster_key_slot("a{b}", 3));
}

static void test_maps(void)
{
	static const struct {
		const char *name, *resp, *from;
		int ret;
		const char *map;
		unsigned int covered;
	} t[] = {
		{ "three masters, as redis-server 7.0 answers",
		  "*3\r\n"
		  "*3\r\n:0\r\n:5460\r\n" NODE(9, "127.0.0.1", 7101, "aa")
		  "*3\r\n:5461\r\n:10922\r\n" NODE(9, "127.0.0.1", 7102, "bb")
		  "*3\r\n:10923\r\n:16383\r\n" NODE(9, "127.0.0.1", 7103, "cc"),
		  "127.0.0.1", 0,
		  "0-5460=127.0.0.1:7101 5461-10922=127.0.0.1:7102 "
		  "10923-16383=127.0.0.1:7103", 16384 },
		{ "replicas after the master are not owners",
		  "*2\r\n"
		  "*4\r\n:0\r\n:8191\r\n" NODE(8, "10.0.0.1", 6379, "aa")
		  NODE(8, "10.0.0.4", 6379, "dd")
		  "*4\r\n:8192\r\n:16383\r\n" NODE(8, "10.0.0.2", 6379, "bb")
		  NODE(8, "10.0.0.5", 6379, "ee"),
		  "10.0.0.9", 0, "0-8191=10.0.0.1:6379 8192-16383=10.0.0.2:6379",
		  16384 },
		{ "one master with two ranges is one node",
		  "*3\r\n"
		  "*3\r\n:0\r\n:99\r\n" NODE(9, "a.example", 7000, "aa")
		  "*3\r\n:100\r\n:16283\r\n" NODE(9, "b.example", 7000, "bb")
		  "*3\r\n:16284\r\n:16383\r\n" NODE(9, "a.example", 7000, "aa"),
		  "x", 0,
		  "0-99=a.example:7000 100-16283=b.example:7000 "
		  "16284-16383=a.example:7000", 16384 },
		{ "an empty host is the node asked",
		  "*1\r\n*3\r\n:0\r\n:16383\r\n"
		  "*3\r\n$0\r\n\r\n:7000\r\n$2\r\naa\r\n",
		  "192.0.2.7", 0, "0-16383=192.0.2.7:7000", 16384 },
		{ "a nil host is the node asked",
		  "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$-1\r\n:7000\r\n$2\r\naa\r\n",
		  "192.0.2.7", 0, "0-16383=192.0.2.7:7000", 16384 },
		{ "an IPv6 host",
		  "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$11\r\n2001:db8::1\r\n:7000\r\n",
		  "x", 0, "0-16383=2001:db8::1:7000", 16384 },
		{ "a '?' host is unknown: its slots are unserved",
		  "*2\r\n"
		  "*3\r\n:0\r\n:99\r\n*2\r\n$1\r\n?\r\n:7000\r\n"
		  "*3\r\n:100\r\n:16383\r\n" NODE(9, "a.example", 7000, "aa"),
		  "x", 0, "100-16383=a.example:7000", 16284 },
		{ "slots nobody serves stay unserved",
		  "*2\r\n"
		  "*3\r\n:0\r\n:0\r\n" NODE(9, "a.example", 7000, "aa")
		  "*3\r\n:16383\r\n:16383\r\n" NODE(9, "b.example", 7000, "bb"),
		  "x", 0, "0-0=a.example:7000 16383-16383=b.example:7000", 2 },
		{ "a node with no slots yet", "*0\r\n", "x", 0, "", 0 },
		{ "cluster support disabled (an error reply)",
		  "-ERR This instance has cluster support disabled\r\n", "x",
		  -EBADMSG, NULL, 0 },
		{ "overlapping ranges",
		  "*2\r\n"
		  "*3\r\n:0\r\n:100\r\n" NODE(9, "a.example", 7000, "aa")
		  "*3\r\n:100\r\n:200\r\n" NODE(9, "b.example", 7000, "bb"),
		  "x", -EBADMSG, NULL, 0 },
		{ "a range backwards",
		  "*1\r\n*3\r\n:10\r\n:9\r\n" NODE(9, "a.example", 7000, "aa"),
		  "x", -EBADMSG, NULL, 0 },
		{ "a slot past the last",
		  "*1\r\n*3\r\n:0\r\n:16384\r\n" NODE(9, "a.example", 7000, "aa"),
		  "x", -EBADMSG, NULL, 0 },
		{ "a slot as a string",
		  "*1\r\n*3\r\n$1\r\n0\r\n:10\r\n" NODE(9, "a.example", 7000, "aa"),
		  "x", -EBADMSG, NULL, 0 },
		{ "port 0",
		  "*1\r\n*3\r\n:0\r\n:10\r\n*2\r\n$1\r\na\r\n:0\r\n",
		  "x", -EBADMSG, NULL, 0 },
		{ "port 65536",
		  "*1\r\n*3\r\n:0\r\n:10\r\n*2\r\n$1\r\na\r\n:65536\r\n",
		  "x", -EBADMSG, NULL, 0 },
		{ "a master without a port",
		  "*1\r\n*3\r\n:0\r\n:10\r\n*1\r\n$1\r\na\r\n",
		  "x", -EBADMSG, NULL, 0 },
		{ "an entry without a master", "*1\r\n*2\r\n:0\r\n:10\r\n",
		  "x", -EBADMSG, NULL, 0 },
		{ "an entry that is no array", "*1\r\n:0\r\n", "x", -EBADMSG, NULL, 0 },
	};
	struct cluster_map *m = malloc(sizeof(*m));
	char *buf = malloc(4096);

	if (!m || !buf) {
		CHECK(0, "out of memory");
		free(m);
		free(buf);
		return;
	}
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		redisReply *r = resp(t[i].resp);
		int ret;

		/* A known map that a failure must leave alone. */
		cluster_map_init(m);
		cluster_map_move(m, 42, "old.example", 1);
		CHECK(r, "%s: the RESP text does not parse", t[i].name);
		ret = cluster_map_from_slots(m, r, t[i].from);
		CHECK(ret == t[i].ret, "%s: %d, want %d", t[i].name, ret, t[i].ret);
		map_text(m, buf, 4096);
		if (!t[i].ret) {
			CHECK(!strcmp(buf, t[i].map), "%s: map '%s', want '%s'",
			      t[i].name, buf, t[i].map);
			CHECK(cluster_map_covered(m) == t[i].covered,
			      "%s: %u slots covered, want %u", t[i].name,
			      cluster_map_covered(m), t[i].covered);
		} else {
			CHECK(!strcmp(buf, "42-42=old.example:1"),
			      "%s: the map changed on failure: '%s'", t[i].name, buf);
		}
		if (r)
			freeReplyObject(r);
	}

	/* More masters than a map holds: -E2BIG, the map unchanged. */
	{
		size_t n = CLUSTER_NODES_MAX + 1, off;
		char *big = malloc(n * 64 + 16);
		redisReply *r;

		if (big) {
			off = (size_t)sprintf(big, "*%zu\r\n", n);
			for (size_t i = 0; i < n; i++)
				off += (size_t)sprintf(big + off,
					"*3\r\n:%zu\r\n:%zu\r\n*2\r\n$1\r\nh\r\n:%zu\r\n",
					i, i, i + 1);
			r = resp(big);
			cluster_map_init(m);
			CHECK(r && cluster_map_from_slots(m, r, "x") == -E2BIG &&
			      cluster_map_covered(m) == 0,
			      "%zu masters: not -E2BIG, or the map changed", n);
			if (r)
				freeReplyObject(r);
			free(big);
		}
	}

	/* MOVED updates one slot, adding the node once. */
	cluster_map_init(m);
	CHECK(cluster_map_move(m, 7, "a.example", 7000) == 0 &&
	      cluster_map_move(m, 8, "a.example", 7000) == 0 && m->n_nodes == 1 &&
	      cluster_map_owner(m, 7) == 0 && cluster_map_owner(m, 8) == 0,
	      "moves to one node: %u nodes", m->n_nodes);
	CHECK(cluster_map_move(m, 7, "b.example", 7000) == 0 && m->n_nodes == 2 &&
	      cluster_map_owner(m, 7) == 1 && cluster_map_owner(m, 8) == 0,
	      "a slot moved on: owner %d", cluster_map_owner(m, 7));
	CHECK(cluster_map_move(m, CLUSTER_SLOTS, "a.example", 7000) == -EINVAL,
	      "a move past the last slot is refused");
	CHECK(cluster_map_move(m, 1, "", 7000) == -EINVAL &&
	      cluster_map_move(m, 1, "a.example", 0) == -EINVAL &&
	      cluster_map_owner(m, 1) == CLUSTER_NO_NODE,
	      "a move to no host or port 0 is refused");
	CHECK(cluster_map_owner(m, CLUSTER_SLOTS) == CLUSTER_NO_NODE,
	      "no owner past the last slot");
	free(m);
	free(buf);
}

static void test_errors(void)
{
	static const struct {
		const char *s, *from;
		int ret;
		enum cluster_error kind;
		unsigned int slot;
		const char *host;
		uint16_t port;
	} t[] = {
		{ "MOVED 3999 127.0.0.1:6381", "x", 0, CLUSTER_ERR_MOVED, 3999,
		  "127.0.0.1", 6381 },
		{ "ASK 3999 127.0.0.1:6381", "x", 0, CLUSTER_ERR_ASK, 3999,
		  "127.0.0.1", 6381 },
		{ "MOVED 0 redis-2.example:7000", "x", 0, CLUSTER_ERR_MOVED, 0,
		  "redis-2.example", 7000 },
		{ "MOVED 16383 ::1:6381", "x", 0, CLUSTER_ERR_MOVED, 16383, "::1",
		  6381 },
		{ "MOVED 12182 :7003", "192.0.2.1", 0, CLUSTER_ERR_MOVED, 12182,
		  "192.0.2.1", 7003 },
		{ "ASK 1 :7003", "192.0.2.1", 0, CLUSTER_ERR_ASK, 1, "192.0.2.1",
		  7003 },
		{ "TRYAGAIN Multiple keys request during rehashing of slot", "x", 0,
		  CLUSTER_ERR_TRYAGAIN, 0, "", 0 },
		{ "TRYAGAIN", "x", 0, CLUSTER_ERR_TRYAGAIN, 0, "", 0 },
		{ "CLUSTERDOWN The cluster is down", "x", 0, CLUSTER_ERR_DOWN, 0,
		  "", 0 },
		{ "CLUSTERDOWN Hash slot not served", "x", 0, CLUSTER_ERR_DOWN, 0,
		  "", 0 },
		/* the caller's own errors */
		{ "NOSCRIPT No matching script. Please use EVAL.", "x", 0,
		  CLUSTER_ERR_NONE, 0, "", 0 },
		{ "ERR rlgate: bad want '-1'", "x", 0, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "READONLY You can't write against a read only replica.", "x", 0,
		  CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVEDX 1 a:1", "x", 0, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "ASKING", "x", 0, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "", "x", 0, CLUSTER_ERR_NONE, 0, "", 0 },
		/* redirections that name no slot or no node */
		{ "MOVED", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED ", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 1", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 16384 a:1", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED -1 a:1", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED  1 a:1", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 1 a", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 1 a:", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 1 a:0", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 1 a:65536", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 1 a:7000x", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "MOVED 1 a b:7000", "x", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
		{ "ASK 1 :7000", "", -EBADMSG, CLUSTER_ERR_NONE, 0, "", 0 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct cluster_redirect r;
		int ret = cluster_parse_error(t[i].s, strlen(t[i].s), t[i].from, &r);

		CHECK(ret == t[i].ret, "'%s': %d, want %d", t[i].s, ret, t[i].ret);
		CHECK(r.kind == t[i].kind, "'%s': kind %d, want %d", t[i].s, r.kind,
		      t[i].kind);
		CHECK(r.slot == t[i].slot && !strcmp(r.host, t[i].host) &&
		      r.port == t[i].port, "'%s': slot %u '%s':%u, want %u '%s':%u",
		      t[i].s, r.slot, r.host, r.port, t[i].slot, t[i].host,
		      t[i].port);
	}
	/* Only len bytes are read. */
	{
		struct cluster_redirect r;

		CHECK(cluster_parse_error("MOVED 1 a:70001", 14, "x", &r) == 0 &&
		      r.port == 7000, "the first 14 bytes: port %u", r.port);
	}
}

static void test_steps(void)
{
	/* Replies: M MOVED, A ASK, T TRYAGAIN, D CLUSTERDOWN, N another.
	 * Steps: R resend, K ASKING, W wait, G give up, D done; refreshes:
	 * r for each step that reads the map again, - otherwise; and the
	 * waits, in ms, summed. */
	static const struct {
		const char *name, *replies, *steps, *refresh;
		uint64_t waited_ms;
	} t[] = {
		{ "an answer is the answer", "N", "D", "-", 0 },
		{ "MOVED: refresh and resend", "M", "R", "r", 0 },
		{ "five MOVED are followed, the sixth fails the call", "MMMMMM",
		  "RRRRRG", "rrrrrr", 0 },
		{ "ASK: ASKING, no refresh", "A", "K", "-", 0 },
		{ "ASK is followed once per call", "AA", "KG", "--", 0 },
		{ "ASK, then the new owner's MOVED", "AM", "KR", "-r", 0 },
		{ "MOVED to a slot in migration, then ASK", "MA", "RK", "r-", 0 },
		{ "ASK counts as a redirection", "MMMMMA", "RRRRRG", "rrrrr-", 0 },
		{ "TRYAGAIN waits 50, 100, 200, 400 ms, then fails", "TTTTT",
		  "WWWWG", "-----", 750 },
		{ "CLUSTERDOWN waits and refreshes", "D", "W", "r", 50 },
		{ "CLUSTERDOWN waits twice (a failover takes longer)", "DDD", "WWG",
		  "rrr", 150 },
		{ "TRYAGAIN, then CLUSTERDOWN past two waits", "TTD", "WWG", "--r",
		  150 },
		{ "a promotion: CLUSTERDOWN, then MOVED to the new master", "DDM",
		  "WWR", "rrr", 150 },
		{ "waits and redirections are counted apart", "TMTMTMTMT",
		  "WRWRWRWRG", "-r-r-r-r-", 750 },
	};

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct cluster_attempt at = { 0 };
		char steps[16] = "", refresh[16] = "";
		uint64_t waited = 0;
		size_t k;

		for (k = 0; t[i].replies[k]; k++) {
			struct cluster_redirect r = { .kind = CLUSTER_ERR_NONE };
			struct cluster_step st;

			switch (t[i].replies[k]) {
			case 'M': r.kind = CLUSTER_ERR_MOVED; break;
			case 'A': r.kind = CLUSTER_ERR_ASK; break;
			case 'T': r.kind = CLUSTER_ERR_TRYAGAIN; break;
			case 'D': r.kind = CLUSTER_ERR_DOWN; break;
			}
			st = cluster_next(&r, &at);
			steps[k] = "RKWGD"[st.action == CLUSTER_RESEND ? 0 :
					   st.action == CLUSTER_ASKING ? 1 :
					   st.action == CLUSTER_WAIT ? 2 :
					   st.action == CLUSTER_GIVE_UP ? 3 : 4];
			refresh[k] = st.refresh ? 'r' : '-';
			if (st.action == CLUSTER_WAIT)
				waited += st.delay_ms;
			CHECK(st.action == CLUSTER_WAIT || st.delay_ms == 0,
			      "%s: a delay without a wait", t[i].name);
		}
		CHECK(!strcmp(steps, t[i].steps), "%s: steps %s, want %s",
		      t[i].name, steps, t[i].steps);
		CHECK(!strcmp(refresh, t[i].refresh), "%s: refreshes %s, want %s",
		      t[i].name, refresh, t[i].refresh);
		CHECK(waited == t[i].waited_ms, "%s: waited %llu ms, want %llu",
		      t[i].name, (unsigned long long)waited,
		      (unsigned long long)t[i].waited_ms);
	}
}

int main(void)
{
	CHECK_RUN(test_slots);
	CHECK_RUN(test_maps);
	CHECK_RUN(test_errors);
	CHECK_RUN(test_steps);
	return check_exit();
}
