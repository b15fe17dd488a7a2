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
#include <unistd.h>

#include "log.h"
#include "state.h"
#include "check.h"



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

int main(void)
{
	char dir[] = "/tmp/rl-test-state.XXXXXX";
	char sub[256], path[512], bad[512], err[STATE_ERR_MAX];
	json_t *doc, *back = NULL;
	int r;

	log_set_ident("test_state");
	log_set_level(LOG_LVL_ERROR);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 77;
	}
	snprintf(sub, sizeof(sub), "%s/a/b", dir);
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
	back = NULL;

	/* Damaged: truncated mid-document, as a crash without the rename
	 * discipline would leave it. */
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
	{
		char cmd[600];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "couldn't remove %s\n", dir);
	}
	if (failures)
		return 1;
	printf("ok test_state\n");
	return 0;
}
