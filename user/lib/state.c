/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Durable JSON state files for rlagent (the policy), see state.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "state.h"

int state_mkdir(const char *dir)
{
	char path[PATH_MAX];
	size_t n = strlen(dir);

	if (n == 0 || n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, n + 1);
	for (char *p = path + 1; ; p++) {
		if (*p == '/' || *p == '\0') {
			char c = *p;

			*p = '\0';
			if (mkdir(path, 0755) < 0 && errno != EEXIST) {
				int err = -errno;

				log_error("couldn't create directory on '%s': %s",
					  path, strerror(-err));
				return err;
			}
			*p = c;
			if (c == '\0')
				break;
		}
	}
	return 0;
}

int state_mkdir_parents(const char *path)
{
	char parent[PATH_MAX];
	char *slash;

	if (snprintf(parent, sizeof(parent), "%s", path) >= (int)sizeof(parent))
		return -ENAMETOOLONG;
	slash = strrchr(parent, '/');
	if (!slash || slash == parent)
		return 0;
	*slash = '\0';
	return access(parent, F_OK) == 0 ? 0 : state_mkdir(parent);
}

int state_secure_dir(const char *dir, mode_t mode, gid_t gid, char *err,
		     size_t errlen)
{
	struct stat st;
	int e;

	e = state_mkdir_parents(dir);
	if (e) {
		snprintf(err, errlen, "couldn't create the parents of directory "
			 "'%s': %s", dir, strerror(-e));
		return e;
	}
	if (mkdir(dir, mode) == 0) {
		/* exactly mode, whatever the umask; the group before anyone
		 * of it can reach in */
		if ((gid != (gid_t)-1 && chown(dir, (uid_t)-1, gid) < 0) ||
		    chmod(dir, mode) < 0) {
			e = -errno;
			snprintf(err, errlen, "couldn't set up directory '%s': %s",
				 dir, strerror(-e));
			return e;
		}
		return 0;
	}
	if (errno != EEXIST) {
		e = -errno;
		snprintf(err, errlen, "couldn't create directory '%s': %s", dir,
			 strerror(-e));
		return e;
	}
	if (stat(dir, &st) < 0) {
		e = -errno;
		snprintf(err, errlen, "couldn't stat directory '%s': %s", dir,
			 strerror(-e));
		return e;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "couldn't use directory '%s': it is not a "
			 "directory", dir);
		return -ENOTDIR;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, errlen, "refusing directory '%s': owned by uid %u, "
			 "not by uid %u (root), so its owner could swap the "
			 "agent's files; chown it or choose another directory",
			 dir, (unsigned int)st.st_uid, (unsigned int)geteuid());
		return -EPERM;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(err, errlen, "refusing directory '%s': mode %04o lets "
			 "%s write in it and swap the agent's files; chmod go-w "
			 "it (%04o for a new one) or choose another directory",
			 dir, (unsigned int)(st.st_mode & 07777),
			 st.st_mode & S_IWOTH ? "everyone" : "its group",
			 (unsigned int)mode);
		return -EPERM;
	}
	return 0;
}

static int fsync_dir(const char *dir)
{
	int fd, err = 0;

	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int state_save(const char *dir, const char *name, const json_t *doc)
{
	char *text = json_dumps(doc, JSON_INDENT(1) | JSON_SORT_KEYS);
	int err;

	if (!text) {
		log_error("couldn't encode state on '%s/%s': out of memory", dir,
			  name);
		return -ENOMEM;
	}
	err = state_save_text(dir, name, text, strlen(text));
	free(text);
	return err;
}

int state_save_text(const char *dir, const char *name, const char *text,
		    size_t len)
{
	return state_save_text_fd(dir, name, text, len, NULL);
}

int state_save_text_fd(const char *dir, const char *name, const char *text,
		       size_t len, int *keep)
{
	int flags = (keep ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_NOFOLLOW |
		    O_CLOEXEC;
	char path[PATH_MAX], tmp[PATH_MAX];
	int fd = -1, kept = -1, err;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;

	/* Created anew, never opened through a link: one planted under the
	 * temporary's name (or a file left by a crash) is removed first; the
	 * unlink removes a link itself, not what it points to. */
	fd = open(tmp, flags, 0640);
	if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
		fd = open(tmp, flags, 0640);
	if (fd < 0) {
		err = -errno;
		log_error("couldn't create file on '%s': %s", tmp, strerror(-err));
		goto cleanup;
	}
	err = write_all(fd, text, len);
	if (!err)
		err = write_all(fd, "\n", 1);
	if (err) {
		log_error("couldn't write file on '%s': %s", tmp, strerror(-err));
		goto cleanup;
	}
	/* The data must be on disk before the rename makes it the state, or
	 * a crash could leave an empty policy under the real name. */
	if (fsync(fd) < 0) {
		err = -errno;
		log_error("couldn't fsync file on '%s': %s", tmp, strerror(-err));
		goto cleanup;
	}
	/* A file kept open had its errors reported by the fsync. */
	if (keep) {
		kept = fd;
	} else if (close(fd) < 0) {
		fd = -1;
		err = -errno;
		log_error("couldn't close file on '%s': %s", tmp, strerror(-err));
		goto cleanup;
	}
	fd = -1;
	if (rename(tmp, path) < 0) {
		err = -errno;
		log_error("couldn't rename file on '%s': %s", path, strerror(-err));
		goto cleanup;
	}
	err = fsync_dir(dir);
	if (err)
		log_warn("couldn't fsync directory on '%s': %s", dir,
			 strerror(-err));
	err = 0;
	if (keep) {
		*keep = kept;
		kept = -1;
	}
cleanup:
	if (kept >= 0)
		close(kept);
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	}
	return err;
}

/* Reads what is left of fd into *buf (malloc'd, *len bytes).  0 or
 * -errno.  json_loadfd() would read it a few bytes a system call: a state
 * file of 100,000 tenants took seconds. */
static int read_all(int fd, char **buf, size_t *len)
{
	struct stat st;
	size_t cap, n = 0;
	char *b, *nb;
	ssize_t r;

	cap = fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
	b = malloc(cap);
	if (!b)
		return -ENOMEM;
	for (;;) {
		if (n == cap) {
			nb = realloc(b, cap * 2);
			if (!nb) {
				free(b);
				return -ENOMEM;
			}
			b = nb;
			cap *= 2;
		}
		r = read(fd, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			r = -errno;
			free(b);
			return (int)r;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	*buf = b;
	*len = n;
	return 0;
}

int state_read_text(const char *dir, const char *name, char **text,
		    size_t *len)
{
	char path[PATH_MAX];
	int fd, e;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	e = read_all(fd, text, len);
	close(fd);
	return e;
}

int state_append_text(const char *dir, const char *name, const char *text,
		      size_t len)
{
	char path[PATH_MAX];
	struct stat st;
	int fd, err;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
		  0640);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	err = write_all(fd, text, len);
	if (!err && fdatasync(fd) < 0)
		err = -errno;
	/* a line half written is taken back: the next one must not follow
	 * it on the same line */
	if (err && ftruncate(fd, st.st_size) < 0)
		log_warn("couldn't truncate file on '%s': %s", path,
			 strerror(errno));
	close(fd);
	/* a new file's name must be on disk too */
	if (!err && st.st_size == 0)
		fsync_dir(dir);
	return err;
}

int state_read(const char *dir, const char *name, char **text, size_t *len,
	       char *err, size_t errlen)
{
	return state_read_fd(dir, name, text, len, err, errlen, NULL);
}

int state_read_fd(const char *dir, const char *name, char **text, size_t *len,
		  char *err, size_t errlen, int *keep)
{
	char path[PATH_MAX];
	int fd, e;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path)) {
		snprintf(err, errlen, "path too long");
		return -ENAMETOOLONG;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = -errno;
		snprintf(err, errlen, "%s", strerror(-e));
		return e;
	}
	e = read_all(fd, text, len);
	if (!e && keep)
		*keep = fd;
	else
		close(fd);
	if (e)
		snprintf(err, errlen, "%s", strerror(-e));
	return e;
}

int state_parse(const char *text, size_t len, json_t **doc, char *err,
		size_t errlen)
{
	json_error_t jerr;
	json_t *j;

	/* Strict: a second document or trailing garbage means the file is
	 * not what we wrote. */
	j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		snprintf(err, errlen, "line %d, column %d: %s", jerr.line,
			 jerr.column, jerr.text);
		return -EBADMSG;
	}
	*doc = j;
	return 0;
}

int state_load(const char *dir, const char *name, json_t **doc, char *err,
	       size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	int e;

	e = state_read(dir, name, &buf, &len, err, errlen);
	if (e)
		return e;
	e = state_parse(buf, len, doc, err, errlen);
	free(buf);
	return e;
}

int state_quarantine(const char *dir, const char *name, char *newpath,
		     size_t len)
{
	char path[PATH_MAX], bad[PATH_MAX];
	time_t now = time(NULL);
	int err;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	/* Two quarantines in one second must not clobber each other. */
	for (int i = 0; i < 100; i++) {
		int n = i ? snprintf(bad, sizeof(bad), "%s.bad.%lld.%d", path,
				     (long long)now, i)
			  : snprintf(bad, sizeof(bad), "%s.bad.%lld", path,
				     (long long)now);

		if (n >= (int)sizeof(bad))
			return -ENAMETOOLONG;
		if (access(bad, F_OK) < 0 && errno == ENOENT)
			break;
	}
	if (rename(path, bad) < 0) {
		err = -errno;
		log_error("couldn't rename file on '%s': %s", path, strerror(-err));
		return err;
	}
	fsync_dir(dir);
	if (newpath)
		snprintf(newpath, len, "%s", bad);
	return 0;
}
