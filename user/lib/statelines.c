// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* A state file written whole again from the lines of the one before: see
 * statelines.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statelines.h"

_Static_assert(sizeof(struct state_line) == 24, "a line's place is 24 bytes");

/* A build in progress: the text so far, and the run of old lines waiting
 * to be read into it at text + len. */
struct build {
	struct state_lines *c;		/* NULL once the old file is not used */
	const struct state_lines_src *src;
	struct state_lines_out *out;
	size_t cap;
	char *line;			/* src->max bytes for one encoding */
	uint64_t run_off, run_end;	/* the run in the old file */
	size_t run_first, run_n;	/* its records */
};

/* Room for len more bytes and a NUL.  0 or -ENOMEM. */
static int reserve(struct build *b, size_t len)
{
	struct state_lines_out *o = b->out;
	size_t c = b->cap ? b->cap : 4096;
	char *p;

	if (o->len + len + 1 <= b->cap)
		return 0;
	while (c < o->len + len + 1)
		c *= 2;
	p = realloc(o->text, c);
	if (!p)
		return -ENOMEM;
	o->text = p;
	b->cap = c;
	return 0;
}

static int append(struct build *b, const char *s, size_t len)
{
	if (reserve(b, len))
		return -ENOMEM;
	memcpy(b->out->text + b->out->len, s, len);
	b->out->len += len;
	b->out->text[b->out->len] = '\0';
	return 0;
}

/* Where key's line goes in the new file, if it is to be kept. */
static void place(struct build *b, uint32_t key, uint64_t hash,
		  uint64_t version, size_t off, size_t len)
{
	struct state_line *l;

	if (!b->out->at)
		return;
	l = &b->out->at[key];
	if (off > STATE_LINE_OFF_MAX || len > STATE_LINE_LEN_MAX) {
		memset(l, 0, sizeof(*l));	/* not kept: encoded next time */
		return;
	}
	*l = (struct state_line){ hash, version, off, len };
}

/* Record i (key, made from hash and version) encoded onto the text, after
 * sep (sep_len bytes). */
static int encode(struct build *b, size_t i, uint32_t key, uint64_t hash,
		  uint64_t version, const char *sep, size_t sep_len)
{
	size_t len = b->src->encode(b->src->ctx, i, b->line);

	if (!len || len > b->src->max)
		return -EINVAL;
	if (append(b, sep, sep_len))
		return -ENOMEM;
	place(b, key, hash, version, b->out->len, len);
	return append(b, b->line, len);
}

/* Whether the run read into the text at start holds, for each of its
 * records, exactly one line of the length placed for it: "{...}", joined
 * by ",\n" and no newline within. */
static bool run_intact(struct build *b, size_t start)
{
	const char *t = b->out->text, *p = t + start;
	const char *end = t + start + (b->run_end - b->run_off);

	for (size_t i = b->run_first; i < b->run_first + b->run_n; i++) {
		struct state_line *l;
		uint32_t key;

		b->src->id(b->src->ctx, i, &key, NULL, NULL);
		l = &b->out->at[key];
		if (!l->len || p != t + l->off || (size_t)(end - p) < l->len ||
		    p[0] != '{' || p[l->len - 1] != '}' ||
		    memchr(p, '\n', l->len))
			return false;
		p += l->len;
		if (i + 1 < b->run_first + b->run_n) {
			if (end - p < 2 || p[0] != ',' || p[1] != '\n')
				return false;
			p += 2;
		}
	}
	return p == end;
}

/* The pending run read from the old file into the text; or, when it
 * cannot be read whole or is not what was placed, its records encoded
 * and the old file no longer used.  0 or -errno. */
static int flush(struct build *b)
{
	size_t len = b->run_end - b->run_off, start = b->out->len, got = 0;
	int e;

	if (!b->run_n)
		return 0;
	if (reserve(b, len))
		return -ENOMEM;
	while (got < len) {
		ssize_t r = pread(b->c->fd, b->out->text + start + got, len - got,
				  (off_t)(b->run_off + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got == len) {
		b->out->len += len;
		b->out->text[b->out->len] = '\0';
		if (run_intact(b, start)) {
			b->out->copied += b->run_n;
			b->run_n = 0;
			return 0;
		}
		b->out->len = start;
		b->out->text[start] = '\0';
	}
	b->c = NULL;
	for (size_t i = b->run_first; i < b->run_first + b->run_n; i++) {
		uint64_t hash, version;
		uint32_t key;

		b->src->id(b->src->ctx, i, &key, &hash, &version);
		e = encode(b, i, key, hash, version, ",\n", i > b->run_first ? 2 : 0);
		if (e)
			return e;
	}
	b->run_n = 0;
	return 0;
}

/* Record i's line (key, made from hash and version) from the old file,
 * joined to the run pending if it follows it there.  1 when the old file
 * holds it, 0 when not, or -errno. */
static int copy(struct build *b, size_t i, uint32_t key, uint64_t hash,
		uint64_t version)
{
	const struct state_line *l;
	int e;

	if (!b->c || key >= b->c->n)
		return 0;
	l = &b->c->at[key];
	if (!l->len || l->hash != hash || l->version != version ||
	    l->off + l->len > (uint64_t)b->c->size)
		return 0;
	if (b->run_n && l->off == b->run_end + 2) {
		place(b, key, hash, version,
		      b->out->len + (size_t)(l->off - b->run_off), l->len);
		b->run_end = l->off + l->len;
		b->run_n++;
		return 1;
	}
	if ((e = flush(b)))
		return e;
	if (!b->c)
		return 0;	/* the run before was not as placed */
	if (i && (e = append(b, ",\n", 2)))
		return e;
	place(b, key, hash, version, b->out->len, l->len);
	b->run_off = l->off;
	b->run_end = l->off + l->len;
	b->run_first = i;
	b->run_n = 1;
	return 1;
}

/* Whether c's file is still the one it kept: not replaced in place,
 * written to or cut since. */
static bool unchanged(const struct state_lines *c)
{
	struct stat st;

	return c->at && fstat(c->fd, &st) == 0 && st.st_dev == c->dev &&
	       st.st_ino == c->ino && st.st_size == c->size &&
	       st.st_mtim.tv_sec == c->mtime.tv_sec &&
	       st.st_mtim.tv_nsec == c->mtime.tv_nsec;
}

/* c's file noted as it is now: what it must still be when read again. */
static int note(struct state_lines *c, int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	c->fd = fd;
	c->dev = st.st_dev;
	c->ino = st.st_ino;
	c->size = st.st_size;
	c->mtime = st.st_mtim;
	return 0;
}

int state_lines_build(struct state_lines *c, uint32_t n, const char *head,
		      size_t head_len, size_t n_rec,
		      const struct state_lines_src *src, const char *tail,
		      size_t tail_len, struct state_lines_out *out)
{
	struct build b = { .c = c, .src = src, .out = out };
	int e = -ENOMEM;

	memset(out, 0, sizeof(*out));
	if (c->at && !unchanged(c))
		state_lines_drop(c);
	out->n = n;
	out->at = n ? calloc(n, sizeof(*out->at)) : NULL;
	/* a copied line is checked against where it was placed */
	if (!c->at || !out->at)
		b.c = NULL;
	b.line = malloc(src->max + 1);
	if (!b.line || append(&b, head, head_len))
		goto cleanup;
	for (size_t i = 0; i < n_rec; i++) {
		uint64_t hash, version;
		uint32_t key;

		src->id(src->ctx, i, &key, &hash, &version);
		if (key >= n) {
			e = -EINVAL;
			goto cleanup;
		}
		e = copy(&b, i, key, hash, version);
		if (e < 0)
			goto cleanup;
		if (!e && ((e = flush(&b)) ||
			   (e = encode(&b, i, key, hash, version, ",\n", i ? 2 : 0))))
			goto cleanup;
	}
	if ((e = flush(&b)) || (e = append(&b, tail, tail_len)))
		goto cleanup;
	e = 0;
cleanup:
	free(b.line);
	if (e)
		state_lines_out_free(out);
	return e;
}

void state_lines_keep(struct state_lines *c, struct state_lines_out *out,
		      int fd)
{
	state_lines_drop(c);
	if (!out->at || note(c, fd)) {
		close(fd);
		memset(c, 0, sizeof(*c));
		return;
	}
	c->at = out->at;
	c->n = out->n;
	out->at = NULL;
}

int state_lines_open(struct state_lines *c, uint32_t n, int fd, size_t size)
{
	int e;

	state_lines_drop(c);
	c->at = n ? calloc(n, sizeof(*c->at)) : NULL;
	e = !c->at ? -ENOMEM : note(c, fd);
	if (!e && (uint64_t)c->size != size)
		e = -ESTALE;
	if (e) {
		free(c->at);
		c->at = NULL;
		close(fd);
		return e;
	}
	c->n = n;
	return 0;
}

void state_lines_put(struct state_lines *c, uint32_t key, uint64_t hash,
		     uint64_t version, size_t off, size_t len)
{
	if (c->at && key < c->n && off <= STATE_LINE_OFF_MAX &&
	    len <= STATE_LINE_LEN_MAX)
		c->at[key] = (struct state_line){ hash, version, off, len };
}

void state_lines_out_free(struct state_lines_out *out)
{
	free(out->text);
	free(out->at);
	out->text = NULL;
	out->at = NULL;
}

void state_lines_drop(struct state_lines *c)
{
	if (c->at)
		close(c->fd);
	free(c->at);
	memset(c, 0, sizeof(*c));
}
