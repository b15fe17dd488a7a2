/* test_state: atomic state files round-trip, a missing file is -ENOENT, a
 * damaged file is reported (not parsed into nonsense) and quarantined
 * under a new name instead of being overwritten.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "state.h"
#include "check.h"

/* The tests' folder, and the state folder inside it. */
static char top[] = "/tmp/rl-test-state.XXXXXX";
static char sub[256];

static int count_entries(const char *dir, const char *prefix)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, prefix, strlen(prefix)) == 0)
			n++;
	closedir(d);
	return n;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return;
	fputs(text, f);
	fclose(f);
}

/* The temporary of a save is created anew: a link planted under its name
 * is removed, not followed (the file it points to stays as it was), and a
 * temporary a crash left behind does not stop the next save. */
static void test_save_no_follow(void)
{
	const char *dir = sub;
	char tmp[512], victim[512], text[64] = "";
	json_t *doc = json_pack("{s:i}", "version", 1), *back = NULL;
	char err[STATE_ERR_MAX];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/.policy.json.tmp", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	write_file(victim, "precious\n");
	CHECK(symlink(victim, tmp) == 0, "couldn't plant a link");
	CHECK(state_save(dir, "policy.json", doc) == 0, "save with a link planted "
	      "at its temporary failed");
	f = fopen(victim, "r");
	CHECK(f && fgets(text, sizeof(text), f) && !strcmp(text, "precious\n"),
	      "the save wrote through the planted link: '%s'", text);
	if (f)
		fclose(f);
	CHECK(state_load(dir, "policy.json", &back, err, sizeof(err)) == 0 &&
	      json_equal(doc, back), "the save did not land in policy.json");
	json_decref(back);
	CHECK(access(tmp, F_OK) < 0 && errno == ENOENT, "temporary left behind");

	write_file(tmp, "left by a crash");
	CHECK(state_save(dir, "policy.json", doc) == 0, "save with a stale "
	      "temporary failed");
	json_decref(doc);
}

/* state_secure_dir: created with exactly its mode (and group) whatever the
 * umask, parents too; an existing directory that others could write in, or
 * owned by someone else, or not a directory, is refused with a message
 * naming it. */
static void test_secure_dir(void)
{
	const char *base = top;
	char d[512], err[STATE_ERR_MAX];
	struct stat st;
	mode_t old = umask(0);
	int r;

	snprintf(d, sizeof(d), "%s/sec/a/state", base);
	r = state_secure_dir(d, 0700, (gid_t)-1, err, sizeof(err));
	CHECK(r == 0, "new dir with parents: %d %s", r, err);
	CHECK(stat(d, &st) == 0 && (st.st_mode & 07777) == 0700,
	      "new dir mode %04o, want 0700", (unsigned int)(st.st_mode & 07777));
	CHECK(state_secure_dir(d, 0700, (gid_t)-1, err, sizeof(err)) == 0,
	      "existing safe dir refused: %s", err);

	snprintf(d, sizeof(d), "%s/sec/ctl", base);
	r = state_secure_dir(d, 0750, 65534, err, sizeof(err));
	CHECK(r == 0 && stat(d, &st) == 0 && (st.st_mode & 07777) == 0750 &&
	      st.st_gid == 65534, "control dir: %d mode %04o gid %u %s", r,
	      (unsigned int)(st.st_mode & 07777), (unsigned int)st.st_gid, err);

	chmod(d, 0777);
	r = state_secure_dir(d, 0750, (gid_t)-1, err, sizeof(err));
	CHECK(r == -EPERM && strstr(err, d) && strstr(err, "0777") &&
	      strstr(err, "everyone"), "world-writable dir: %d '%s'", r, err);
	chmod(d, 0770);
	r = state_secure_dir(d, 0750, (gid_t)-1, err, sizeof(err));
	CHECK(r == -EPERM && strstr(err, d) && strstr(err, "its group"),
	      "group-writable dir: %d '%s'", r, err);
	chmod(d, 01777);
	r = state_secure_dir(d, 0750, (gid_t)-1, err, sizeof(err));
	CHECK(r == -EPERM, "sticky world-writable dir accepted");
	chmod(d, 0755);
	if (geteuid() == 0) {
		CHECK(chown(d, 65534, (gid_t)-1) == 0, "chown");
		r = state_secure_dir(d, 0750, (gid_t)-1, err, sizeof(err));
		CHECK(r == -EPERM && strstr(err, d) && strstr(err, "uid 65534"),
		      "dir of another user: %d '%s'", r, err);
	}

	snprintf(d, sizeof(d), "%s/sec/file", base);
	write_file(d, "x");
	r = state_secure_dir(d, 0700, (gid_t)-1, err, sizeof(err));
	CHECK(r == -ENOTDIR && strstr(err, d), "a file as the dir: %d '%s'", r,
	      err);
	umask(old);
}

/* Saved and loaded back; a missing file; a second save replaces. */
static void test_round_trip(void)
{
	char err[STATE_ERR_MAX];
	json_t *doc, *back = NULL;
	int r;

	CHECK(state_mkdir(sub) == 0, "state_mkdir of nested dirs failed");
	CHECK(state_mkdir(sub) == 0, "state_mkdir of an existing dir failed");

	r = state_load(sub, "policy.json", &back, err, sizeof(err));
	CHECK(r == -ENOENT, "missing file: expected -ENOENT, got %d", r);

	doc = json_pack("{s:i,s:[{s:s,s:i}]}", "version", 7, "tenants",
			"name", "web", "id", 3);
	CHECK(state_save(sub, "policy.json", doc) == 0, "state_save failed");
	r = state_load(sub, "policy.json", &back, err, sizeof(err));
	CHECK(r == 0, "round trip load failed: %d %s", r, err);
	CHECK(r == 0 && json_equal(doc, back), "round trip changed the document");
	CHECK(count_entries(sub, ".policy.json") == 0,
	      "temporary file left behind");
	json_decref(back);
	back = NULL;

	/* A second save replaces, not appends. */
	json_object_set_new(doc, "version", json_integer(8));
	CHECK(state_save(sub, "policy.json", doc) == 0, "second save failed");
	r = state_load(sub, "policy.json", &back, err, sizeof(err));
	CHECK(r == 0 && json_integer_value(json_object_get(back, "version")) == 8,
	      "second save not visible");
	json_decref(back);
	json_decref(doc);
}

/* Damaged: truncated mid-document, as a crash without the rename
 * discipline would leave it, then trailing garbage; each quarantined under
 * a name of its own. */
static void test_damaged(void)
{
	char path[512], bad[512], err[STATE_ERR_MAX];
	json_t *doc = json_pack("{s:i}", "version", 8), *back = NULL;
	int r;

	snprintf(path, sizeof(path), "%s/policy.json", sub);
	write_file(path, "{\"version\":9,\"tenants\":[{\"name\":\"we");
	r = state_load(sub, "policy.json", &back, err, sizeof(err));
	CHECK(r == -EBADMSG, "damaged file: expected -EBADMSG, got %d", r);
	CHECK(strstr(err, "line") != NULL, "error does not say where: '%s'", err);
	CHECK(state_quarantine(sub, "policy.json", bad, sizeof(bad)) == 0,
	      "quarantine failed");
	CHECK(strstr(bad, "policy.json.bad.") != NULL, "odd quarantine name '%s'",
	      bad);
	CHECK(access(path, F_OK) < 0, "damaged file still under its name");
	CHECK(access(bad, F_OK) == 0, "quarantined file missing");

	/* A save after the quarantine keeps the damaged copy. */
	CHECK(state_save(sub, "policy.json", doc) == 0, "save after quarantine");
	write_file(path, "[] trailing");
	r = state_load(sub, "policy.json", &back, err, sizeof(err));
	CHECK(r == -EBADMSG, "trailing garbage: expected -EBADMSG, got %d", r);
	CHECK(state_quarantine(sub, "policy.json", path, sizeof(path)) == 0,
	      "second quarantine failed");
	CHECK(count_entries(sub, "policy.json.bad.") == 2,
	      "second quarantine clobbered the first");
	json_decref(doc);
}

/* A document of 20,000 tenants (about 1 MiB, far past any read buffer)
 * reads back equal, and a NUL inside one is refused as damage. */
static void test_large(void)
{
	char err[STATE_ERR_MAX], path[512];
	json_t *doc = json_pack("{s:i,s:[]}", "version", 3, "tenants"), *back = NULL;
	int r;

	for (int i = 0; i < 20000; i++) {
		char name[32];

		snprintf(name, sizeof(name), "tenant-%d", i);
		json_array_append_new(json_object_get(doc, "tenants"),
				      json_pack("{s:s,s:i,s:s}", "name", name,
						"id", i, "rate", "100/s"));
	}
	CHECK(state_save(sub, "large.json", doc) == 0, "state_save failed");
	r = state_load(sub, "large.json", &back, err, sizeof(err));
	CHECK(r == 0, "large load failed: %d %s", r, err);
	CHECK(r == 0 && json_equal(doc, back), "large round trip changed the document");
	json_decref(back);
	json_decref(doc);

	snprintf(path, sizeof(path), "%s/nul.json", sub);
	{
		FILE *f = fopen(path, "w");

		CHECK(f && fwrite("{\"version\":1}\0{}", 1, 16, f) == 16 &&
		      fclose(f) == 0, "couldn't write %s", path);
	}
	r = state_load(sub, "nul.json", &back, err, sizeof(err));
	CHECK(r == -EBADMSG, "a NUL inside: expected -EBADMSG, got %d", r);
}

int main(void)
{
	char cmd[600];
	int status;

	log_set_ident("test_state");
	log_set_level(LOG_LVL_ERROR);
	if (!mkdtemp(top)) {
		perror("mkdtemp");
		return 77;
	}
	snprintf(sub, sizeof(sub), "%s/a/b", top);
	CHECK_RUN(test_round_trip);
	CHECK_RUN(test_damaged);
	CHECK_RUN(test_save_no_follow);
	CHECK_RUN(test_secure_dir);
	CHECK_RUN(test_large);
	status = check_exit();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	if (system(cmd) != 0)
		fprintf(stderr, "couldn't remove %s\n", top);
	return status;
}
