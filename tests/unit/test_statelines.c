/* test_statelines: a state file written whole again from the lines of the
 * one before is byte for byte the file encoded anew, whatever happened in
 * between: records changed, moved to other keys, reordered, gone and back;
 * the old file replaced, changed in place or damaged behind its mtime.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "state.h"
#include "statelines.h"
#include "check.h"

static char dir[] = "/tmp/rl-test-statelines.XXXXXX";

#define NKEYS	256
#define LINE_MAX_TEST	64

struct rec {
	uint32_t key;
	uint64_t hash, version;
	char text[LINE_MAX_TEST];
};

struct set {
	struct rec r[NKEYS];
	size_t n;
	size_t encodes;		/* encode() calls so far */
	int fail_at;		/* the record encode() fails, or -1 */
};

static void rec_id(void *ctx, size_t i, uint32_t *key, uint64_t *hash,
		   uint64_t *version)
{
	const struct set *s = ctx;

	*key = s->r[i].key;
	if (hash) {
		*hash = s->r[i].hash;
		*version = s->r[i].version;
	}
}

static size_t rec_encode(void *ctx, size_t i, char *buf)
{
	struct set *s = ctx;

	s->encodes++;
	if ((int)i == s->fail_at)
		return 0;
	memcpy(buf, s->r[i].text, strlen(s->r[i].text) + 1);
	return strlen(s->r[i].text);
}

/* Record i of key k: its text follows from what it is made of, as a
 * tenant's line follows from its policy and version. */
static void rec_make(struct rec *r, uint32_t key, uint64_t hash,
		     uint64_t version)
{
	r->key = key;
	r->hash = hash;
	r->version = version;
	snprintf(r->text, sizeof(r->text), "{\"id\":%u,\"h\":%llu,\"v\":%llu}",
		 key, (unsigned long long)hash, (unsigned long long)version);
}

static void set_init(struct set *s, size_t n)
{
	memset(s, 0, sizeof(*s));
	s->fail_at = -1;
	s->n = n;
	for (size_t i = 0; i < n; i++)
		rec_make(&s->r[i], (uint32_t)(i * 2 + 1), 1000 + i, 1);
}

/* The text every record encoded gives. */
static char *expected(const struct set *s)
{
	size_t cap = 64 + s->n * (LINE_MAX_TEST + 2), len;
	char *t = malloc(cap);

	len = (size_t)snprintf(t, cap, "{\"head\":[%s", s->n ? "\n" : "");
	for (size_t i = 0; i < s->n; i++)
		len += (size_t)snprintf(t + len, cap - len, "%s%s", i ? ",\n" : "",
					s->r[i].text);
	snprintf(t + len, cap - len, "\n]}");
	return t;
}

/* s built from c into the state file (kept in c when keep), checked
 * against the text encoded anew; the lines copied, or -1. */
static long build(struct state_lines *c, struct set *s, bool keep)
{
	const struct state_lines_src src = { s, rec_id, rec_encode, LINE_MAX_TEST };
	const char *head = s->n ? "{\"head\":[\n" : "{\"head\":[";
	struct state_lines_out out;
	char *want = expected(s);
	int e, fd = -1;
	long copied;

	e = state_lines_build(c, NKEYS, head, strlen(head), s->n, &src, "\n]}", 3,
			      &out);
	CHECK(e == 0, "build: %d", e);
	if (e) {
		free(want);
		return -1;
	}
	CHECK(out.len == strlen(out.text) && strcmp(out.text, want) == 0,
	      "built:\n%s\nexpected:\n%s", out.text, want);
	copied = (long)out.copied;
	if (keep) {
		e = state_save_text_fd(dir, "f.json", out.text, out.len, &fd);
		CHECK(e == 0 && fd >= 0, "save: %d", e);
		if (!e)
			state_lines_keep(c, &out, fd);
	}
	state_lines_out_free(&out);
	free(want);
	return copied;
}

/* Every line is copied when nothing changed, and only a changed record
 * is encoded: a new version, or the same version made of something else. */
static void test_copies_unchanged(void)
{
	struct state_lines c = { 0 };
	struct set s;
	long n;

	set_init(&s, 100);
	CHECK(build(&c, &s, true) == 0, "first build copies nothing");
	CHECK(s.encodes == 100, "first build encodes all: %zu", s.encodes);
	s.encodes = 0;
	n = build(&c, &s, true);
	CHECK(n == 100 && s.encodes == 0, "unchanged: %ld copied, %zu encoded",
	      n, s.encodes);
	rec_make(&s.r[50], s.r[50].key, s.r[50].hash, 2);
	rec_make(&s.r[70], s.r[70].key, 7, s.r[70].version);
	s.encodes = 0;
	n = build(&c, &s, true);
	CHECK(n == 98 && s.encodes == 2, "two changed: %ld copied, %zu encoded",
	      n, s.encodes);
	/* and again from the file those two are in now */
	s.encodes = 0;
	n = build(&c, &s, true);
	CHECK(n == 100 && s.encodes == 0, "after: %ld copied", n);
	state_lines_drop(&c);
}

/* Records reordered, swapped between keys, removed, added, and one gone
 * from a file and back in the next with what it was made of before. */
static void test_moved_and_back(void)
{
	struct state_lines c = { 0 };
	struct set s, t;
	struct rec gone;
	long n;

	set_init(&s, 40);
	build(&c, &s, true);
	/* reversed: every line still copied, one run each */
	t = s;
	for (size_t i = 0; i < s.n; i++)
		t.r[i] = s.r[s.n - 1 - i];
	t.encodes = 0;
	n = build(&c, &t, true);
	CHECK(n == 40 && t.encodes == 0, "reversed: %ld copied", n);
	/* two records swap keys: the same hash and version at another key
	 * is another line */
	{
		uint32_t k = t.r[3].key;

		rec_make(&t.r[3], t.r[9].key, t.r[3].hash, t.r[3].version);
		rec_make(&t.r[9], k, t.r[9].hash, t.r[9].version);
	}
	t.encodes = 0;
	n = build(&c, &t, true);
	CHECK(n == 38 && t.encodes == 2, "swapped: %ld copied, %zu encoded", n,
	      t.encodes);
	/* one removed, then back as it was (a put back after a refusal) */
	gone = t.r[20];
	memmove(&t.r[20], &t.r[21], (t.n - 21) * sizeof(t.r[0]));
	t.n--;
	rec_make(&t.r[t.n++], 200, 5, 5);
	t.encodes = 0;
	n = build(&c, &t, true);
	CHECK(n == 39 && t.encodes == 1, "removed and added: %ld copied", n);
	t.r[t.n++] = gone;
	t.encodes = 0;
	n = build(&c, &t, true);
	CHECK(n == 40 && t.encodes == 1, "back: %ld copied, %zu encoded", n,
	      t.encodes);
	/* none at all, then some */
	t.n = 0;
	CHECK(build(&c, &t, true) == 0, "empty");
	t.n = 3;
	t.encodes = 0;
	n = build(&c, &t, true);
	CHECK(n == 0 && t.encodes == 3, "after empty: %ld copied", n);
	state_lines_drop(&c);
}

/* The file kept is the one written, whatever takes its name since; one
 * changed in place is not used, nor one damaged behind its mtime. */
static void test_old_file(void)
{
	char path[512], other[512];
	struct state_lines c = { 0 };
	struct timespec ts[2];
	struct set s;
	long n;
	int fd;

	snprintf(path, sizeof(path), "%s/f.json", dir);
	snprintf(other, sizeof(other), "%s/other", dir);
	set_init(&s, 30);
	build(&c, &s, true);
	/* replaced and removed: still read through the open file */
	fd = open(other, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, "{}\n", 3) == 3, "other file");
	close(fd);
	CHECK(rename(other, path) == 0 && unlink(path) == 0, "replace");
	s.encodes = 0;
	n = build(&c, &s, true);
	CHECK(n == 30 && s.encodes == 0, "replaced: %ld copied", n);

	/* written to in place (its mtime set apart: a write in the clock
	 * tick of the save leaves it as it was): nothing copied */
	fd = open(path, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, "9", 1, 40) == 1, "write in place");
	ts[0] = ts[1] = (struct timespec){ 1, 0 };
	CHECK(futimens(fd, ts) == 0, "mtime");
	close(fd);
	s.encodes = 0;
	n = build(&c, &s, true);
	CHECK(n == 0 && s.encodes == 30, "changed in place: %ld copied", n);

	/* cut short: nothing copied */
	CHECK(truncate(path, 100) == 0, "truncate");
	s.encodes = 0;
	n = build(&c, &s, true);
	CHECK(n == 0 && s.encodes == 30, "cut short: %ld copied", n);

	/* a line broken with its mtime put back: what does not hold
	 * the lines placed there is encoded */
	fd = open(path, O_RDWR);
	CHECK(fd >= 0, "open");
	{
		struct stat st;

		CHECK(fstat(fd, &st) == 0, "fstat");
		ts[0] = st.st_atim;
		ts[1] = st.st_mtim;
	}
	CHECK(pwrite(fd, "\n", 1, 200) == 1, "break a line");
	CHECK(futimens(fd, ts) == 0, "mtime back");
	close(fd);
	s.encodes = 0;
	n = build(&c, &s, false);
	CHECK(n < 30 && s.encodes > 0, "damaged: %ld copied, %zu encoded", n,
	      s.encodes);
	state_lines_drop(&c);
}

/* A build whose file was never written (a failed save) leaves the file
 * before in use; a record that cannot be encoded or a key out of range
 * fails the build. */
static void test_not_kept_and_errors(void)
{
	static struct set s;
	const struct state_lines_src src = { &s, rec_id, rec_encode,
					     LINE_MAX_TEST };
	struct state_lines c = { 0 };
	struct state_lines_out out;
	long n;

	set_init(&s, 10);
	build(&c, &s, true);
	rec_make(&s.r[2], s.r[2].key, s.r[2].hash, 9);
	CHECK(build(&c, &s, false) == 9, "first of two");
	s.encodes = 0;
	n = build(&c, &s, false);
	CHECK(n == 9 && s.encodes == 1, "not kept: %ld copied", n);

	s.fail_at = 2;
	CHECK(state_lines_build(&c, NKEYS, "[", 1, s.n, &src, "]", 1, &out) ==
	      -EINVAL && !out.text && !out.at, "an encoding that fails");
	s.fail_at = -1;
	s.r[4].key = NKEYS;
	CHECK(state_lines_build(&c, NKEYS, "[", 1, s.n, &src, "]", 1, &out) ==
	      -EINVAL, "a key out of range");
	state_lines_drop(&c);
}

int main(void)
{
	char cmd[600];
	int status;

	log_set_ident("test_statelines");
	log_set_level(LOG_LVL_ERROR);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 77;
	}
	CHECK_RUN(test_copies_unchanged);
	CHECK_RUN(test_moved_and_back);
	CHECK_RUN(test_old_file);
	CHECK_RUN(test_not_kept_and_errors);
	status = check_exit();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "couldn't remove %s\n", dir);
	return status;
}
