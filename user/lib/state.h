/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Durable JSON state files: written atomically (temporary file, fsync,
 * rename, fsync of the directory), read back strictly, and a damaged file
 * moved aside rather than overwritten.
 */
#ifndef RL_STATE_H
#define RL_STATE_H

#include <stddef.h>
#include <jansson.h>

#define STATE_ERR_MAX	512

#include <sys/types.h>

/* Creates dir (and missing parents, mode 0755) if it does not exist.
 * 0 or -errno. */
int state_mkdir(const char *dir);

/* Creates the missing parents of path (mode 0755), not path itself.
 * 0 or -errno (logged). */
int state_mkdir_parents(const char *path);

/*
 * A directory the agent writes in, safe from other users: creates dir's
 * missing parents (0755) and dir itself with mode exactly (group gid unless
 * it is -1).  An existing dir must be a directory owned by this user (root)
 * that neither its group nor others may write in: whoever can write there
 * can swap the files the agent writes for links of their own.  0, or -errno
 * (-EPERM for an unsafe directory) with a message naming dir in err.
 */
int state_secure_dir(const char *dir, mode_t mode, gid_t gid, char *err,
		     size_t errlen);

/* Replaces dir/name with doc.  Readers see the old or the new content,
 * never a mix, even across a crash or power loss.  The temporary file is
 * created anew (O_EXCL), never through a link: a link planted under its name
 * is removed, not followed.  0 or -errno (logged). */
int state_save(const char *dir, const char *name, const json_t *doc);

/* The same for a document already encoded: len bytes of text (a newline is
 * added). */
int state_save_text(const char *dir, const char *name, const char *text,
		    size_t len);
/* The same, and the file left open for reading and writing in *keep
 * (on success only): the file renamed into place, whatever later takes its
 * name. */
int state_save_text_fd(const char *dir, const char *name, const char *text,
		       size_t len, int *keep);

/* Appends len bytes of text to dir/name (created 0640 when missing, never
 * through a link) and flushes them to disk; on failure the file is cut back
 * to its size before.  0 or -errno. */
int state_append_text(const char *dir, const char *name, const char *text,
		      size_t len);

/* The whole of dir/name into *text (malloc'd, *len bytes).  0 or -errno
 * (-ENOENT: no such file). */
int state_read_text(const char *dir, const char *name, char **text,
		    size_t *len);

/*
 * Reads dir/name.  Returns 0 with *doc set (the caller owns it), -ENOENT if
 * there is no such file, -EBADMSG if it is not valid JSON (err says where
 * and what), another -errno if it cannot be read (err says why).  A
 * damaged file is left in place: the caller decides whether to quarantine
 * it.
 */
int state_load(const char *dir, const char *name, json_t **doc, char *err,
	       size_t errlen);

/* state_load's two halves: the bytes of dir/name into *text (malloc'd,
 * *len bytes; errors as state_load's), and text parsed as strictly as
 * state_load parses (-EBADMSG with where and what in err). */
int state_read(const char *dir, const char *name, char **text, size_t *len,
	       char *err, size_t errlen);
int state_parse(const char *text, size_t len, json_t **doc, char *err,
		size_t errlen);
/* state_read, and the file left open in *keep (on success only). */
int state_read_fd(const char *dir, const char *name, char **text, size_t *len,
		  char *err, size_t errlen, int *keep);

/* Moves dir/name aside to dir/name.bad.<unix time> so that the next
 * state_save does not destroy the evidence.  The new path goes to newpath
 * (if not NULL).  0 or -errno. */
int state_quarantine(const char *dir, const char *name, char *newpath,
		     size_t len);

#endif /* RL_STATE_H */
