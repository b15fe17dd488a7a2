/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* A state file of one record a line, written whole again from the lines of
 * the file written before: a line whose record did not change is copied
 * from that file (kept open, read back through the page cache), and only
 * the others are encoded.  What is kept per record is where its line is.
 */
#ifndef RL_STATELINES_H
#define RL_STATELINES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>

/* Where record key's line is in the file, and what it was made from: a
 * hash of the record (the caller's) and its version.  len 0: none. */
struct state_line {
	uint64_t hash;
	uint64_t version;
	uint64_t off : 40;
	uint64_t len : 24;
};

#define STATE_LINE_OFF_MAX	((1ULL << 40) - 1)
#define STATE_LINE_LEN_MAX	((1U << 24) - 1)

/*
 * The file last written and its lines, one entry per key (0 to n - 1).
 * All zero is a valid empty set (nothing kept).  The file is held open, so
 * that a rename over its name, or its removal, does not take it away; it is
 * used only while its size, mtime and inode are the ones it had when it was
 * kept: a file changed in place since is not trusted.
 */
struct state_lines {
	struct state_line *at;	/* NULL: no file kept */
	uint32_t n;
	int fd;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
};

/* What state_lines_build asks of the caller for record i. */
struct state_lines_src {
	void *ctx;
	/* record i's key (below n), and the hash and version of what its
	 * line would be made from now (hash and version NULL: the key only) */
	void (*id)(void *ctx, size_t i, uint32_t *key, uint64_t *hash,
		   uint64_t *version);
	/* record i's line into buf (at least max bytes), no newline in it;
	 * its length, or 0 when it cannot be made */
	size_t (*encode)(void *ctx, size_t i, char *buf);
	size_t max;
};

/* The text of a new file being built, and the lines it will hold. */
struct state_lines_out {
	char *text;		/* malloc'd, NUL-terminated */
	size_t len;
	struct state_line *at;	/* the new file's lines, n keys; may be NULL */
	uint32_t n;
	size_t copied;		/* lines taken from the file before */
};

/*
 * head, then the n records' lines joined by ",\n", then tail, into out:
 * each line copied from c's file when c holds it for the record's key made
 * from the same hash and version, else encoded.  Runs of lines that follow
 * each other in the old file are read with one pread; a run that cannot be
 * read whole, or whose bytes are not the lines expected, is encoded
 * instead (and nothing more is copied).  0 or -errno (-ENOMEM; -EINVAL when
 * a record cannot be encoded or a key is out of range).  out->at is NULL
 * when there was no memory for it: the file then is written but not kept.
 */
int state_lines_build(struct state_lines *c, uint32_t n, const char *head,
		      size_t head_len, size_t n_rec,
		      const struct state_lines_src *src, const char *tail,
		      size_t tail_len, struct state_lines_out *out);

/* The file built into out, now written and open on fd (the file's
 * offsets are the text's), kept in c with out's lines in place of what c
 * held.  out->at is taken (or fd closed when it is NULL). */
void state_lines_keep(struct state_lines *c, struct state_lines_out *out,
		      int fd);

/* c made to keep the file open on fd, of which size bytes were read just
 * now, for n keys of no line yet: a file read rather than written, whose
 * lines state_lines_put() places.  0, or -errno with fd closed: -ESTALE
 * when the file is no longer size bytes long. */
int state_lines_open(struct state_lines *c, uint32_t n, int fd, size_t size);

/* key's line in c's file: len bytes at off, made from hash and version. */
void state_lines_put(struct state_lines *c, uint32_t key, uint64_t hash,
		     uint64_t version, size_t off, size_t len);

/* Frees what out holds that state_lines_keep did not take. */
void state_lines_out_free(struct state_lines_out *out);

/* Closes the file and forgets its lines. */
void state_lines_drop(struct state_lines *c);

#endif /* RL_STATELINES_H */
