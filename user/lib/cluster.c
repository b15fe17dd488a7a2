// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* Redis Cluster without I/O: hash slots, the slot map from CLUSTER SLOTS,
 * and the redirections (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) turned into the
 * next step of a call.  Follows the Redis Cluster specification.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "parse.h"

uint16_t cluster_crc16(const char *buf, size_t len)
{
	uint16_t crc = 0;

	for (size_t i = 0; i < len; i++) {
		crc ^= (uint16_t)((uint8_t)buf[i] << 8);
		for (int b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1) ^ 0x1021 :
					     (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned int cluster_key_slot(const char *key, size_t len)
{
	const char *open = memchr(key, '{', len);

	if (open) {
		size_t rest = len - (size_t)(open - key) - 1;
		const char *close = memchr(open + 1, '}', rest);

		/* "{}" is no tag: the whole key is hashed. */
		if (close && close > open + 1)
			return cluster_crc16(open + 1, (size_t)(close - open - 1)) &
			       (CLUSTER_SLOTS - 1);
	}
	return cluster_crc16(key, len) & (CLUSTER_SLOTS - 1);
}

void cluster_map_init(struct cluster_map *m)
{
	m->n_nodes = 0;
	for (unsigned int i = 0; i < CLUSTER_SLOTS; i++)
		m->slot[i] = CLUSTER_NO_NODE;
}

int cluster_map_node(struct cluster_map *m, const char *host, uint16_t port)
{
	size_t len = strlen(host);

	if (!len || len >= CLUSTER_HOST_MAX || !port)
		return -EINVAL;
	for (unsigned int i = 0; i < m->n_nodes; i++)
		if (m->node[i].port == port && !strcmp(m->node[i].host, host))
			return (int)i;
	if (m->n_nodes == CLUSTER_NODES_MAX)
		return -E2BIG;
	memcpy(m->node[m->n_nodes].host, host, len + 1);
	m->node[m->n_nodes].port = port;
	return (int)m->n_nodes++;
}

int cluster_map_move(struct cluster_map *m, unsigned int slot, const char *host,
		     uint16_t port)
{
	int n;

	if (slot >= CLUSTER_SLOTS)
		return -EINVAL;
	n = cluster_map_node(m, host, port);
	if (n < 0)
		return n;
	m->slot[slot] = (int16_t)n;
	return 0;
}

int cluster_map_owner(const struct cluster_map *m, unsigned int slot)
{
	return slot < CLUSTER_SLOTS ? m->slot[slot] : CLUSTER_NO_NODE;
}

unsigned int cluster_map_covered(const struct cluster_map *m)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < CLUSTER_SLOTS; i++)
		n += m->slot[i] != CLUSTER_NO_NODE;
	return n;
}

static bool slot_int(const redisReply *r, long long *v)
{
	if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < 0 ||
	    r->integer >= CLUSTER_SLOTS)
		return false;
	*v = r->integer;
	return true;
}

/* One entry of CLUSTER SLOTS into t.  0, 1 (its master is unknown: "?"),
 * or -errno. */
static int slots_entry(struct cluster_map *t, const redisReply *e,
		       const char *from_host)
{
	const redisReply *master, *h, *p;
	long long first, last;
	const char *host;
	int n;

	if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
	    !slot_int(e->element[0], &first) || !slot_int(e->element[1], &last) ||
	    first > last)
		return -EBADMSG;
	master = e->element[2];
	if (master->type != REDIS_REPLY_ARRAY || master->elements < 2)
		return -EBADMSG;
	h = master->element[0];
	p = master->element[1];
	if ((h->type != REDIS_REPLY_STRING && h->type != REDIS_REPLY_NIL) ||
	    p->type != REDIS_REPLY_INTEGER || p->integer < 1 || p->integer > 65535)
		return -EBADMSG;
	if (h->type == REDIS_REPLY_STRING && strlen(h->str) != h->len)
		return -EBADMSG;
	host = h->type == REDIS_REPLY_NIL || !h->len ? from_host : h->str;
	for (long long s = first; s <= last; s++)
		if (t->slot[s] != CLUSTER_NO_NODE)
			return -EBADMSG;
	if (!strcmp(host, "?"))
		return 1;
	n = cluster_map_node(t, host, (uint16_t)p->integer);
	if (n == -EINVAL)
		return -EBADMSG;
	if (n < 0)
		return n;
	for (long long s = first; s <= last; s++)
		t->slot[s] = (int16_t)n;
	return 0;
}

int cluster_map_from_slots(struct cluster_map *m, const redisReply *r,
			   const char *from_host)
{
	struct cluster_map *t;
	int err = 0;

	if (!r || r->type != REDIS_REPLY_ARRAY)
		return -EBADMSG;
	t = malloc(sizeof(*t));
	if (!t)
		return -ENOMEM;
	cluster_map_init(t);
	for (size_t i = 0; i < r->elements && !err; i++) {
		err = slots_entry(t, r->element[i], from_host);
		if (err == 1)
			err = 0;
	}
	if (!err)
		memcpy(m, t, sizeof(*t));
	free(t);
	return err;
}

/* "<slot> <host>:<port>" after MOVED or ASK. */
static int parse_target(const char *s, size_t len, const char *from_host,
			struct cluster_redirect *out)
{
	const char *sp = memchr(s, ' ', len), *a, *colon = NULL, *host;
	uint64_t slot, port;
	size_t alen, hlen;

	if (!sp || parse_u64n(s, (size_t)(sp - s), CLUSTER_SLOTS - 1, &slot))
		return -EBADMSG;
	a = sp + 1;
	alen = len - (size_t)(a - s);
	for (size_t i = 0; i < alen; i++)
		if (a[i] == ':')
			colon = a + i;
	if (!colon ||
	    parse_u64n(colon + 1, alen - (size_t)(colon + 1 - a), 65535, &port) ||
	    !port)
		return -EBADMSG;
	host = a;
	hlen = (size_t)(colon - a);
	if (!hlen) {
		host = from_host;
		hlen = strlen(from_host);
	}
	if (!hlen || hlen >= CLUSTER_HOST_MAX || memchr(host, ' ', hlen) ||
	    memchr(host, '\0', hlen))
		return -EBADMSG;
	out->slot = (unsigned int)slot;
	memcpy(out->host, host, hlen);
	out->host[hlen] = '\0';
	out->port = (uint16_t)port;
	return 0;
}

static bool starts(const char *s, size_t len, const char *word)
{
	size_t n = strlen(word);

	return len >= n && !memcmp(s, word, n) && (len == n || s[n] == ' ');
}

int cluster_parse_error(const char *s, size_t len, const char *from_host,
			struct cluster_redirect *out)
{
	int err;

	memset(out, 0, sizeof(*out));
	if (starts(s, len, "MOVED") || starts(s, len, "ASK")) {
		size_t skip = s[0] == 'M' ? 6 : 4;

		if (len <= skip)
			return -EBADMSG;
		err = parse_target(s + skip, len - skip, from_host, out);
		if (err) {
			memset(out, 0, sizeof(*out));
			return err;
		}
		out->kind = s[0] == 'M' ? CLUSTER_ERR_MOVED : CLUSTER_ERR_ASK;
	} else if (starts(s, len, "TRYAGAIN")) {
		out->kind = CLUSTER_ERR_TRYAGAIN;
	} else if (starts(s, len, "CLUSTERDOWN")) {
		out->kind = CLUSTER_ERR_DOWN;
	}
	return 0;
}

struct cluster_step cluster_next(const struct cluster_redirect *r,
				 struct cluster_attempt *at)
{
	struct cluster_step st = { .action = CLUSTER_DONE };

	switch (r->kind) {
	case CLUSTER_ERR_NONE:
		break;
	case CLUSTER_ERR_MOVED:
		st.refresh = true;
		st.action = at->redirects < CLUSTER_REDIRECTS_MAX ?
			    CLUSTER_RESEND : CLUSTER_GIVE_UP;
		at->redirects++;
		break;
	case CLUSTER_ERR_ASK:
		st.action = at->redirects < CLUSTER_REDIRECTS_MAX && !at->asked ?
			    CLUSTER_ASKING : CLUSTER_GIVE_UP;
		at->redirects++;
		at->asked = true;
		break;
	case CLUSTER_ERR_TRYAGAIN:
	case CLUSTER_ERR_DOWN:
		st.refresh = r->kind == CLUSTER_ERR_DOWN;
		if (at->waits >= (r->kind == CLUSTER_ERR_DOWN ? CLUSTER_DOWN_WAITS :
							      CLUSTER_WAITS)) {
			st.action = CLUSTER_GIVE_UP;
			break;
		}
		st.action = CLUSTER_WAIT;
		st.delay_ms = (uint64_t)CLUSTER_WAIT_MIN_MS << at->waits;
		if (st.delay_ms > CLUSTER_WAIT_MAX_MS)
			st.delay_ms = CLUSTER_WAIT_MAX_MS;
		at->waits++;
		break;
	}
	return st;
}
