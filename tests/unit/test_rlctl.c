/* Tests build/rlctl against a fake rlagent on a temporary socket: exit codes, output, --json, and the exact requests sent. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include "check.h"

static char rlctl_path[PATH_MAX];
static char dir[64], sock_path[128], req_path[128];


/* What the fake agent answers to each cmd. */
struct canned {
	const char *cmd;
	const char *reply;	/* sent as is, one line */
};

static pid_t fake_pid;

static const char *lookup(const struct canned *c, const char *cmd)
{
	for (; c && c->cmd; c++)
		if (cmd && !strcmp(c->cmd, cmd))
			return c->reply;
	return "{\"ok\":false,\"error\":\"fake agent: no canned reply\","
	       "\"code\":\"internal\"}";
}

/* The fake agent: serves connections one after another, appends
 * "<connection number>\t<request line>" to req_path for each request. */
static void fake_agent(const struct canned *replies)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int lfd, conn = 0;

	strcpy(sa.sun_path, sock_path);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(lfd, 8) < 0)
		_exit(3);
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		FILE *in, *rec;
		char *line = NULL;
		size_t cap = 0;
		ssize_t n;

		if (fd < 0)
			continue;
		conn++;
		in = fdopen(fd, "r");
		while ((n = getline(&line, &cap, in)) > 0) {
			json_t *j;
			const char *reply;

			if (line[n - 1] == '\n')
				line[--n] = '\0';
			rec = fopen(req_path, "a");
			if (rec) {
				fprintf(rec, "%d\t%s\n", conn, line);
				fclose(rec);
			}
			j = json_loads(line, 0, NULL);
			reply = lookup(replies, json_string_value(
					json_object_get(j, "cmd")));
			json_decref(j);
			if (write(fd, reply, strlen(reply)) < 0 ||
			    write(fd, "\n", 1) < 0)
				break;
		}
		free(line);
		fclose(in);
	}
}

static void start_fake(const struct canned *replies)
{
	unlink(sock_path);
	unlink(req_path);
	fake_pid = fork();
	if (fake_pid == 0)
		fake_agent(replies);
	for (int i = 0; i < 200; i++) {
		struct stat st;

		if (stat(sock_path, &st) == 0)
			return;
		usleep(10000);
	}
	printf("FAIL: fake agent did not start\n");
	exit(1);
}

static void stop_fake(void)
{
	if (fake_pid > 0) {
		kill(fake_pid, SIGKILL);
		waitpid(fake_pid, NULL, 0);
	}
	fake_pid = 0;
	unlink(sock_path);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;

	if (!f)
		return strdup("");
	if (getdelim(&buf, &len, '\0', f) < 0) {
		free(buf);
		buf = strdup("");
	}
	fclose(f);
	return buf;
}

struct result {
	int rc;
	char *out, *err;
};

static void free_result(struct result *r)
{
	free(r->out);
	free(r->err);
}

/* Runs rlctl with the given arguments (NULL-terminated), stdin from
 * stdin_path or /dev/null; kills it after 10 seconds. */
static struct result run_v(const char *stdin_path, const char *const *args)
{
	char out_path[128], err_path[128];
	struct result r = { .rc = -1 };
	const char *argv[64];
	int n = 0, status;
	pid_t pid;

	snprintf(out_path, sizeof(out_path), "%s/out", dir);
	snprintf(err_path, sizeof(err_path), "%s/err", dir);
	argv[n++] = rlctl_path;
	while (*args && n < 63)
		argv[n++] = *args++;
	argv[n] = NULL;
	pid = fork();
	if (pid == 0) {
		int in = open(stdin_path ? stdin_path : "/dev/null", O_RDONLY);
		int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(in, 0);
		dup2(out, 1);
		dup2(err, 2);
		unsetenv("RLCTL_SOCKET");
		execv(rlctl_path, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 1000; i++) {
		if (waitpid(pid, &status, WNOHANG) == pid) {
			r.rc = WIFEXITED(status) ? WEXITSTATUS(status) :
			       128 + WTERMSIG(status);
			break;
		}
		usleep(10000);
	}
	CHECK(r.rc != -1, "rlctl timed out");
	if (r.rc == -1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	r.out = slurp(out_path);
	r.err = slurp(err_path);
	return r;
}

#define RUN(...) run_v(NULL, (const char *const[]){ "--socket", sock_path, \
						     __VA_ARGS__, NULL })
#define RUN_STDIN(path, ...) run_v(path, (const char *const[]){ "--socket", \
						sock_path, __VA_ARGS__, NULL })

/* The requests the fake agent received, as a JSON array of
 * [connection, request] pairs. */
static json_t *requests(void)
{
	char *all = slurp(req_path), *save = NULL, *line;
	json_t *arr = json_array();

	for (line = strtok_r(all, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char *tab = strchr(line, '\t');
		json_t *req = tab ? json_loads(tab + 1, 0, NULL) : NULL;

		json_array_append_new(arr, json_pack("[i, o]", atoi(line),
						     req ? req : json_null()));
	}
	free(all);
	return arr;
}

static bool request_is(json_t *reqs, size_t i, const char *want)
{
	json_t *w = json_loads(want, 0, NULL);
	json_t *got = json_array_get(json_array_get(reqs, i), 1);
	bool eq = w && got && json_equal(w, got);

	if (!eq) {
		char *s = got ? json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS) : NULL;

		printf("  request %zu: got  %s\n  request %zu: want %s\n", i,
		       s ? s : "(none)", i, want);
		free(s);
	}
	json_decref(w);
	return eq;
}

static const char tenant_web[] =
	"{\"name\":\"web\",\"rate\":\"100/s\",\"burst\":100,"
	"\"match\":[\"192.0.2.0/24\"],\"ports\":[80],\"action\":\"rst\","
	"\"shadow\":true,\"id\":4}";

static const struct canned agent[] = {
	{ "version", "{\"ok\":true,\"version\":\"9.9.9\"}" },
	{ "status", "{\"ok\":true,\"version\":\"9.9.9\",\"uptime_s\":3725,"
		    "\"mode\":\"standalone\",\"interfaces\":[{\"name\":\"eth0\","
		    "\"attach\":\"native\"}],\"tenants\":2,\"pin_dir\":"
		    "\"/sys/fs/bpf/rlgate\",\"state_dir\":\"/var/lib/rlgate\"}" },
	{ "tenant.list", "{\"ok\":true,\"tenants\":[{\"name\":\"web\",\"rate\":"
			 "\"100/s\",\"burst\":100,\"match\":[\"192.0.2.0/24\"],"
			 "\"ports\":[80],\"action\":\"rst\",\"shadow\":true,\"id\":4},"
			 "{\"name\":\"api\",\"rate\":\"5/m\",\"burst\":1,\"match\":"
			 "[\"2001:db8::/32\"],\"ports\":[],\"action\":\"drop\","
			 "\"shadow\":false,\"id\":5}]}" },
	{ "tenant.get", "{\"ok\":false,\"error\":\"no tenant 'web'\","
			"\"code\":\"not_found\"}" },
	{ "tenant.set", "{\"ok\":true}" },
	{ "tenant.del", "{\"ok\":true}" },
	{ "apply", "{\"ok\":true,\"added\":1,\"updated\":1,\"removed\":3}" },
	{ "stats", "{\"ok\":true,\"stats\":[{\"tenant\":\"web\",\"admitted\":10,"
		   "\"denied\":2,\"shadow_denied\":0,\"retransmits\":1,\"tokens\":"
		   "40,\"admit_rate\":5.5,\"deny_rate\":0.5},{\"tenant\":\"api\","
		   "\"admitted\":7,\"denied\":0,\"shadow_denied\":3,\"retransmits\":"
		   "0,\"tokens\":1,\"admit_rate\":9,\"deny_rate\":0}]}" },
	{ "detach", "{\"ok\":true,\"remaining\":0}" },
	{ NULL, NULL },
};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f || fputs(text, f) < 0) {
		printf("FAIL: couldn't write %s\n", path);
		exit(1);
	}
	fclose(f);
}

static void test_bad_input_sends_nothing(void)
{
	static const char *const cases[][8] = {
		{ "frobnicate" },
		{ "tenant", "set", "web", "--rate", "0/s", "--match", "10.0.0.0/8" },
		{ "tenant", "set", "web", "--rate", "10", "--match", "10.0.0.0/8" },
		{ "tenant", "set", "web", "--rate", "1e3/s", "--match", "10.0.0.0/8" },
		{ "tenant", "set", "web", "--rate", "10/s", "--match", "10.0.0.1/8" },
		{ "tenant", "set", "web", "--rate", "10/s", "--match", "10.0.0.0/33" },
		{ "tenant", "set", "web", "--rate", "10/s", "--match", "a,b" },
		{ "tenant", "set", "web", "--rate", "10/s", "--port", "80,80" },
		{ "tenant", "set", "web", "--rate", "10/s", "--port", "65536" },
		{ "tenant", "set", "web", "--rate", "10/s", "--burst", "0" },
		{ "tenant", "set", "web", "--action", "reject" },
		{ "tenant", "set", "web", "--max-conns", "131073" },
		{ "tenant", "set", "web", "--max-conns", "-1" },
		{ "tenant", "set", "web", "--max-conns", "lots" },
		{ "tenant", "set", "web", "--shadow", "--enforce" },
		{ "tenant", "set", "-bad", "--rate", "1/s" },
		{ "tenant", "set", "web", "--rate", "1/s", "--bogus" },
		{ "tenant", "set", "web", "extra", "--rate", "1/s" },
		{ "tenant", "set", "--rate", "1/s" },
		{ "tenant", "get", "we b" },
		{ "tenant", "del" },
		{ "tenant", "nope" },
		{ "tenant" },
		{ "stats", "x/y" },
		{ "detach", "eth0/1" },
		{ "detach" },
		{ "top", "--interval", "0" },
		{ "top", "--iterations", "-1" },
		{ "status", "extra" },
		{ "apply" },
	};
	json_t *reqs;

	start_fake(agent);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[12] = { "--socket", sock_path };
		struct result r;
		json_t *j;

		for (int k = 0; k < 8 && cases[i][k]; k++)
			args[2 + k] = cases[i][k];
		r = run_v(NULL, args);
		CHECK(r.rc == 2, "case %zu (%s %s): exit %d, want 2", i,
		      cases[i][0], cases[i][1] ?: "", r.rc);
		/* one error line, nothing on stdout */
		CHECK(!strncmp(r.err, "Error: ", 7) &&
		      strchr(r.err, '\n') == r.err + strlen(r.err) - 1 &&
		      r.out[0] == '\0', "case %zu: stderr '%s' stdout '%s'",
		      i, r.err, r.out);
		free_result(&r);

		/* the same with --json: only a JSON error object, on stdout */
		memmove(args + 1, args, sizeof(args) - sizeof(args[0]));
		args[0] = "--json";
		r = run_v(NULL, args);
		j = json_loads(r.out, 0, NULL);
		CHECK(r.rc == 2 && json_is_string(json_object_get(j, "error")) &&
		      r.err[0] == '\0', "case %zu --json: exit %d stdout '%s' "
		      "stderr '%s'", i, r.rc, r.out, r.err);
		json_decref(j);
		free_result(&r);
	}
	reqs = requests();
	CHECK(json_array_size(reqs) == 0, "bad input sent %zu request(s)",
	      json_array_size(reqs));
	json_decref(reqs);
	stop_fake();
}

static void test_messages_name_the_value(void)
{
	struct result r;

	r = RUN("tenant", "set", "web", "--rate", "10/x", "--match", "10.0.0.0/8");
	CHECK(strstr(r.err, "'10/x'") && strstr(r.err, "N/s, N/m or N/h"),
	      "rate message: %s", r.err);
	free_result(&r);
	r = RUN("tenant", "set", "web", "--rate", "1/s", "--match", "192.0.2.5/24");
	CHECK(strstr(r.err, "did you mean 192.0.2.0/24?"), "prefix message: %s",
	      r.err);
	free_result(&r);
	r = RUN("nope");
	CHECK(r.rc == 2 && strstr(r.err, "unknown command 'nope'"),
	      "unknown command: %s", r.err);
	free_result(&r);
	/* typos: what was most likely meant */
	r = RUN("stat");
	CHECK(r.rc == 2 && strstr(r.err, "unknown command 'stat'; did you mean "
				  "'stats'?"), "stat: %s", r.err);
	free_result(&r);
	r = RUN("tenant", "lsit");
	CHECK(r.rc == 2 && strstr(r.err, "did you mean 'list'?"), "tenant lsit: %s",
	      r.err);
	free_result(&r);
	r = RUN("tenant", "set", "web", "--rate", "1/s", "--brust", "5");
	CHECK(r.rc == 2 && strstr(r.err, "unknown option '--brust' for 'tenant "
				  "set'; did you mean '--burst'?"), "--brust: %s",
	      r.err);
	free_result(&r);
}

static void test_no_agent(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char want[512];
	struct result r;
	struct stat st;
	int fd;

	stop_fake();
	r = RUN("status");
	snprintf(want, sizeof(want), "Error: couldn't connect to rlagent on '%s': "
		 "No such file or directory (is rlagent running?)\n", sock_path);
	CHECK(r.rc == 1 && !strcmp(r.err, want) && !r.out[0],
	      "no agent: exit %d, stderr '%s'", r.rc, r.err);
	free_result(&r);

	r = run_v(NULL, (const char *const[]){ "--json", "--socket", sock_path,
					       "tenant", "list", NULL });
	CHECK(r.rc == 1 && strstr(r.out, "{\"error\":") && !r.err[0],
	      "no agent --json: exit %d, stdout '%s'", r.rc, r.out);
	free_result(&r);

	/* the default socket, as long as this host has no agent there */
	if (stat("/run/rlgate/rlagent.sock", &st) < 0) {
		r = run_v(NULL, (const char *const[]){ "status", NULL });
		CHECK(r.rc == 1 && !strcmp(r.err, "Error: couldn't connect to rlagent "
					   "on '/run/rlgate/rlagent.sock': No such "
					   "file or directory (is rlagent running?)\n"),
		      "default socket: exit %d stderr '%s'", r.rc, r.err);
		free_result(&r);
	}

	/* a socket left behind by a dead agent */
	strcpy(sa.sun_path, sock_path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	r = RUN("stats");
	CHECK(r.rc == 1 && strstr(r.err, "Connection refused (is rlagent running?)"),
	      "stale socket: exit %d stderr '%s'", r.rc, r.err);
	free_result(&r);
	unlink(sock_path);

	/* an agent that takes the request and never answers: rlctl waits
	 * --timeout, then says the change may still be made */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 4) == 0) {
		r = RUN("--timeout", "1", "tenant", "del", "a");
		CHECK(r.rc == 1 && strstr(r.err, "did not answer within 1.000 s: a change "
					  "it was sent may still be made"),
		      "silent agent: exit %d stderr '%s'", r.rc, r.err);
		free_result(&r);
		r = RUN("tenant", "list", "--timeout", "1");
		CHECK(r.rc == 1 && strstr(r.err, "within 1.000 s"),
		      "--timeout after the command: exit %d stderr '%s'", r.rc, r.err);
		free_result(&r);
	} else {
		CHECK(0, "couldn't listen on %s", sock_path);
	}
	close(fd);
	unlink(sock_path);

	/* version works without an agent */
	r = RUN("version");
	CHECK(r.rc == 0 && !strncmp(r.out, "rlctl ", 6), "version without agent: "
	      "exit %d out '%s'", r.rc, r.out);
	free_result(&r);
}

static void test_tenant_set_create(void)
{
	struct result r;
	json_t *reqs;

	start_fake(agent);
	r = RUN("tenant", "set", "web", "--rate", "100/s", "--match",
		"192.0.2.0/24,2001:db8::/32", "--port", "80", "--port", "443",
		"--action", "rst");
	CHECK(r.rc == 0 && strstr(r.out, "tenant 'web' created"),
	      "create: exit %d out '%s' err '%s'", r.rc, r.out, r.err);
	reqs = requests();
	CHECK(json_array_size(reqs) == 2, "create sent %zu requests",
	      json_array_size(reqs));
	CHECK(request_is(reqs, 0, "{\"cmd\":\"tenant.get\",\"name\":\"web\"}"),
	      "create: first request");
	CHECK(request_is(reqs, 1, "{\"cmd\":\"tenant.set\",\"tenant\":{\"name\":"
			 "\"web\",\"rate\":\"100/s\",\"burst\":100,\"match\":"
			 "[\"192.0.2.0/24\",\"2001:db8::/32\"],\"ports\":[80,443],"
			 "\"action\":\"rst\",\"shadow\":false,\"fail\":\"static\"}}"),
	      "create: tenant.set request");
	json_decref(reqs);
	free_result(&r);

	/* creating needs --rate and --match; only the lookup is sent */
	unlink(req_path);
	r = RUN("tenant", "set", "web", "--rate", "100/s");
	reqs = requests();
	CHECK(r.rc == 2 && strstr(r.err, "--match") && json_array_size(reqs) == 1,
	      "create without --match: exit %d err '%s' requests %zu", r.rc,
	      r.err, json_array_size(reqs));
	json_decref(reqs);
	free_result(&r);

	/* --json prints the tenant */
	unlink(req_path);
	r = RUN("--json", "tenant", "set", "web", "--rate", "5/m", "--match",
		"10.0.0.0/8", "--shadow", "--burst", "7");
	{
		json_t *j = json_loads(r.out, 0, NULL);

		CHECK(r.rc == 0 && json_is_object(j) &&
		      !strcmp(json_string_value(json_object_get(j, "rate")) ?: "",
			      "5/m") &&
		      json_integer_value(json_object_get(j, "burst")) == 7 &&
		      json_is_true(json_object_get(j, "shadow")),
		      "create --json: out '%s'", r.out);
		json_decref(j);
	}
	free_result(&r);
	stop_fake();
}

static void test_tenant_set_update(void)
{
	char get_reply[512];
	struct canned c[] = {
		{ "tenant.get", get_reply },
		{ "tenant.set", "{\"ok\":true}" },
		{ NULL, NULL },
	};
	struct result r;
	json_t *reqs;

	snprintf(get_reply, sizeof(get_reply), "{\"ok\":true,\"tenant\":%s}",
		 tenant_web);
	start_fake(c);
	/* options not given keep their values; burst follows the new rate */
	r = RUN("tenant", "set", "web", "--rate", "10/m");
	reqs = requests();
	CHECK(r.rc == 0 && strstr(r.out, "updated"), "update: exit %d err '%s'",
	      r.rc, r.err);
	CHECK(request_is(reqs, 1, "{\"cmd\":\"tenant.set\",\"tenant\":{\"name\":"
			 "\"web\",\"rate\":\"10/m\",\"burst\":1,\"match\":"
			 "[\"192.0.2.0/24\"],\"ports\":[80],\"action\":\"rst\","
			 "\"shadow\":true,\"fail\":\"static\"}}"), "update: tenant.set request");
	CHECK(json_integer_value(json_array_get(json_array_get(reqs, 0), 0)) ==
	      json_integer_value(json_array_get(json_array_get(reqs, 1), 0)),
	      "update used two connections");
	json_decref(reqs);
	free_result(&r);

	unlink(req_path);
	r = RUN("tenant", "set", "web", "--enforce", "--port", "any", "--burst",
		"9", "--action", "drop");
	reqs = requests();
	CHECK(r.rc == 0 && request_is(reqs, 1, "{\"cmd\":\"tenant.set\",\"tenant\":"
				      "{\"name\":\"web\",\"rate\":\"100/s\",\"burst\":9,"
				      "\"match\":[\"192.0.2.0/24\"],\"ports\":[],"
				      "\"action\":\"drop\",\"shadow\":false,\"fail\":\"static\"}}"),
	      "update --enforce --port any: exit %d err '%s'", r.rc, r.err);
	json_decref(reqs);
	free_result(&r);
	stop_fake();
}

static void test_agent_refusals(void)
{
	static const struct canned c[] = {
		{ "tenant.get", "{\"ok\":false,\"error\":\"no tenant 'x'\","
				"\"code\":\"not_found\"}" },
		{ "tenant.set", "{\"ok\":false,\"error\":\"conflict: 'x' and 'web' "
				"both claim 10.0.0.0/8 on any port\",\"code\":"
				"\"conflict\"}" },
		{ "tenant.del", "{\"ok\":false,\"error\":\"no tenant 'x'\","
				"\"code\":\"not_found\"}" },
		{ "stats", "{\"ok\":false,\"error\":\"couldn't read map\","
			   "\"code\":\"internal\"}" },
		{ "status", "this is not json" },
		{ NULL, NULL },
	};
	struct result r;

	start_fake(c);
	r = RUN("tenant", "set", "x", "--rate", "1/s", "--match", "10.0.0.0/8");
	CHECK(r.rc == 2 && !strcmp(r.err, "Error: conflict: 'x' and 'web' both "
				   "claim 10.0.0.0/8 on any port\n"),
	      "conflict: exit %d err '%s'", r.rc, r.err);
	free_result(&r);
	r = RUN("tenant", "get", "x");
	CHECK(r.rc == 2 && strstr(r.err, "no tenant 'x'"), "get unknown: exit %d "
	      "err '%s'", r.rc, r.err);
	free_result(&r);
	r = RUN("tenant", "del", "x");
	CHECK(r.rc == 2, "del unknown: exit %d", r.rc);
	free_result(&r);
	r = RUN("--json", "stats");
	CHECK(r.rc == 1 && !strcmp(r.out, "{\"error\":\"couldn't read map\"}\n"),
	      "internal: exit %d out '%s'", r.rc, r.out);
	free_result(&r);
	r = RUN("status");
	CHECK(r.rc == 1 && strstr(r.err, "not a JSON object"),
	      "garbage reply: exit %d err '%s'", r.rc, r.err);
	free_result(&r);
	stop_fake();
}

/* What the agent warns of comes out on stderr as "Warning: ..." lines,
 * after a change that was made (exit 0), in text and --json alike; the
 * agent's "did you mean" for a tenant set that cannot create. */
static void test_agent_warnings(void)
{
	static const struct canned c[] = {
		{ "tenant.get", "{\"ok\":false,\"error\":\"no tenant named 'Web'; did "
				"you mean 'web'?\",\"code\":\"not_found\"}" },
		{ "tenant.set", "{\"ok\":true,\"warnings\":[\"overlap: tenant 'all' "
				"claims 10.0.0.0/8, but connections from 10.1.0.0/16 "
				"go to tenant 'b' (the longest prefix wins)\"]}" },
		{ NULL, NULL },
	};
	struct result r;
	json_t *j;

	start_fake(c);
	r = RUN("tenant", "set", "all", "--rate", "1/s", "--match", "10.0.0.0/8");
	CHECK(r.rc == 0 && !strcmp(r.err, "Warning: overlap: tenant 'all' claims "
				   "10.0.0.0/8, but connections from 10.1.0.0/16 "
				   "go to tenant 'b' (the longest prefix wins)\n") &&
	      strstr(r.out, "tenant 'all' created"),
	      "warning: exit %d out '%s' err '%s'", r.rc, r.out, r.err);
	free_result(&r);
	r = RUN("--json", "tenant", "set", "all", "--rate", "1/s", "--match",
		"10.0.0.0/8");
	j = json_loads(r.out, 0, NULL);
	CHECK(r.rc == 0 && json_is_object(j) &&
	      !strncmp(r.err, "Warning: overlap: tenant 'all'", 30),
	      "warning --json: exit %d out '%s' err '%s'", r.rc, r.out, r.err);
	json_decref(j);
	free_result(&r);
	r = RUN("tenant", "set", "Web", "--rate", "1/s");
	CHECK(r.rc == 2 && strstr(r.err, "Error: no tenant named 'Web'; did you "
				  "mean 'web'?; creating tenant 'Web' needs --match"),
	      "set Web: exit %d err '%s'", r.rc, r.err);
	free_result(&r);
	stop_fake();
}

static void test_read_commands(void)
{
	struct result r;
	json_t *j, *reqs;

	start_fake(agent);
	r = RUN("--json", "tenant", "list");
	j = json_loads(r.out, 0, NULL);
	CHECK(r.rc == 0 && json_array_size(j) == 2, "list --json: '%s'", r.out);
	for (size_t i = 0; i < json_array_size(j); i++) {
		static const char *keys[] = { "name", "rate", "burst", "match",
					      "ports", "action", "shadow" };

		for (size_t k = 0; k < 7; k++)
			CHECK(json_object_get(json_array_get(j, i), keys[k]),
			      "list --json: tenant %zu lacks %s", i, keys[k]);
	}
	json_decref(j);
	free_result(&r);

	r = RUN("tenant", "list");
	CHECK(r.rc == 0 && strstr(r.out, "NAME") && strstr(r.out, "web") &&
	      strstr(r.out, "2001:db8::/32") && strstr(r.out, "shadow"),
	      "list: '%s'", r.out);
	free_result(&r);

	r = RUN("tenant", "list", "--json");
	j = json_loads(r.out, 0, NULL);
	CHECK(r.rc == 0 && json_is_array(j), "--json after the command: '%s'",
	      r.out);
	json_decref(j);
	free_result(&r);

	r = RUN("--json", "status");
	j = json_loads(r.out, 0, NULL);
	CHECK(r.rc == 0 && json_is_object(j) &&
	      !strcmp(json_string_value(json_object_get(j, "mode")) ?: "",
		      "standalone") &&
	      json_is_array(json_object_get(j, "interfaces")) &&
	      json_integer_value(json_object_get(j, "tenants")) == 2 &&
	      !json_object_get(j, "ok"), "status --json: '%s'", r.out);
	json_decref(j);
	free_result(&r);

	r = RUN("status");
	CHECK(r.rc == 0 && strstr(r.out, "9.9.9, up 1h 2m 5s") &&
	      strstr(r.out, "eth0 (native)") && strstr(r.out, "standalone"),
	      "status: '%s'", r.out);
	free_result(&r);

	r = RUN("--json", "stats");
	j = json_loads(r.out, 0, NULL);
	CHECK(r.rc == 0 && json_array_size(j) == 2 &&
	      json_is_string(json_object_get(json_array_get(j, 0), "tenant")) &&
	      json_is_integer(json_object_get(json_array_get(j, 0), "admitted")) &&
	      json_is_integer(json_object_get(json_array_get(j, 0), "denied")),
	      "stats --json: '%s'", r.out);
	json_decref(j);
	free_result(&r);

	unlink(req_path);
	r = RUN("stats", "web");
	reqs = requests();
	CHECK(r.rc == 0 && strstr(r.out, "WOULD-DENY") &&
	      request_is(reqs, 0, "{\"cmd\":\"stats\",\"name\":\"web\"}"),
	      "stats web: exit %d out '%s'", r.rc, r.out);
	json_decref(reqs);
	free_result(&r);

	unlink(req_path);
	r = RUN("tenant", "del", "web");
	reqs = requests();
	CHECK(r.rc == 0 && request_is(reqs, 0, "{\"cmd\":\"tenant.del\","
				      "\"name\":\"web\"}"), "del: exit %d", r.rc);
	json_decref(reqs);
	free_result(&r);

	unlink(req_path);
	r = RUN("detach", "eth0");
	reqs = requests();
	CHECK(r.rc == 0 && strstr(r.out, "detached from eth0") &&
	      request_is(reqs, 0, "{\"cmd\":\"detach\",\"iface\":\"eth0\"}"),
	      "detach: exit %d out '%s'", r.rc, r.out);
	json_decref(reqs);
	free_result(&r);

	r = RUN("version");
	CHECK(r.rc == 0 && strstr(r.out, "rlctl ") && strstr(r.out, "rlagent 9.9.9"),
	      "version: '%s'", r.out);
	free_result(&r);
	stop_fake();
}

static void test_top(void)
{
	struct result r;
	json_t *reqs;
	size_t i;
	char *line;

	start_fake(agent);
	r = RUN("top", "--iterations", "3", "--interval", "0.1");
	reqs = requests();
	CHECK(r.rc == 0 && json_array_size(reqs) == 3, "top: exit %d, %zu "
	      "requests, err '%s'", r.rc, json_array_size(reqs), r.err);
	for (i = 0; i < json_array_size(reqs); i++) {
		CHECK(request_is(reqs, i, "{\"cmd\":\"stats\"}"), "top request %zu", i);
		CHECK(json_integer_value(json_array_get(json_array_get(reqs, i), 0)) ==
		      1, "top request %zu not on the first connection", i);
	}
	/* busiest first: api (9/s) above web (6/s) */
	line = strstr(r.out, "api");
	CHECK(line && strstr(r.out, "web") && line < strstr(r.out, "web"),
	      "top order: '%s'", r.out);
	json_decref(reqs);
	free_result(&r);

	r = RUN("--json", "top", "-n", "2", "-i", "0.1");
	{
		char *nl = strchr(r.out, '\n');
		json_t *j;

		CHECK(nl != NULL, "top --json: no line");
		if (nl)
			*nl = '\0';
		j = json_loads(r.out, 0, NULL);
		CHECK(r.rc == 0 && json_is_array(json_object_get(j, "stats")),
		      "top --json: '%s'", r.out);
		json_decref(j);
	}
	free_result(&r);
	stop_fake();
}


/* The widest line of text, in bytes (the tables are ASCII). */
static size_t widest_line(const char *text)
{
	size_t w = 0;

	while (*text) {
		size_t n = strcspn(text, "\n");

		if (n > w)
			w = n;
		text += n + (text[n] == '\n');
	}
	return w;
}

/* A fleet agent with a capped, a per-source and a cap-only tenant: every
 * optional column has something to show. */
static const struct canned busy_fleet[] = {
	{ "stats", "{\"ok\":true,\"stats\":["
		   "{\"tenant\":\"web\",\"admitted\":1200345,\"denied\":2,"
		   "\"shadow_denied\":0,\"retransmits\":0,\"unparsed\":0,"
		   "\"rst_sent\":2,\"tokens\":40,\"admit_rate\":20.04,"
		   "\"deny_rate\":0.5,\"rate\":\"20/s\",\"burst\":5,"
		   "\"rate_window_s\":3.42,\"tokens_leased\":1200400,"
		   "\"tokens_refunded\":55,\"redis_calls\":60123,"
		   "\"overshoot_bound\":10,\"max_conns\":500,\"conns\":12,"
		   "\"conn_denied\":7,\"conn_overshoot_bound\":20,"
		   "\"denied_source\":1,\"source_overflow\":0},"
		   "{\"tenant\":\"capped-only\",\"admitted\":3,\"denied\":0,"
		   "\"shadow_denied\":0,\"retransmits\":0,\"unparsed\":0,"
		   "\"rst_sent\":0,\"tokens\":1000000000,\"admit_rate\":0.3,"
		   "\"deny_rate\":0,\"rate\":null,\"burst\":1000000000,"
		   "\"rate_window_s\":3.42,\"tokens_leased\":0,"
		   "\"tokens_refunded\":0,\"redis_calls\":0,"
		   "\"overshoot_bound\":0,\"max_conns\":100,\"conns\":3,"
		   "\"conn_denied\":0,\"conn_overshoot_bound\":4}]}" },
	{ "status", "{\"ok\":true,\"version\":\"9.9.9\",\"uptime_s\":5,"
		    "\"mode\":\"standalone\",\"interfaces\":[{\"name\":\"veth0\","
		    "\"attach\":\"native\",\"rst\":\"lost\",\"rst_warning\":"
		    "\"a veth whose peer runs no XDP program\"}],\"tenants\":0,"
		    "\"memory\":{\"kernel_map_bytes\":37312080,\"agent_rss_bytes\":"
		    "24506368,\"agent_anon_bytes\":1556480}}" },
	{ NULL, NULL },
};

/* Many tenants: the memory per tenant means something. */
static const struct canned many_tenants[] = {
	{ "status", "{\"ok\":true,\"version\":\"9.9.9\",\"uptime_s\":5,"
		    "\"mode\":\"standalone\",\"interfaces\":[{\"name\":\"eth0\","
		    "\"attach\":\"native\",\"rst\":\"delivered\"}],\"tenants\":5000,"
		    "\"memory\":{\"kernel_map_bytes\":52428800,\"agent_rss_bytes\":"
		    "10485760,\"agent_anon_bytes\":4194304,"
		    "\"kernel_bytes_per_tenant\":10485,\"agent_bytes_per_tenant\":2097,"
		    "\"agent_anon_bytes_per_tenant\":838}}" },
	{ NULL, NULL },
};

static void test_stats_table(void)
{
	struct result r;

	start_fake(busy_fleet);
	r = RUN("stats");
	CHECK(r.rc == 0 && widest_line(r.out) <= 100,
	      "stats: %zu columns, want at most 100: '%s'", widest_line(r.out), r.out);
	/* the limit beside the rates, and the window they are over */
	CHECK(strstr(r.out, "LIMIT") && strstr(r.out, "20/s,5") &&
	      strstr(r.out, "20.0") && strstr(r.out, "over the last 3.4 s"),
	      "stats: no limit, rate or window: '%s'", r.out);
	CHECK(strstr(r.out, "12/500") && strstr(r.out, "3/100"),
	      "stats: connections in flight not beside their cap: '%s'", r.out);
	/* a cap alone has no rate limit and no tokens to show */
	CHECK(!strstr(r.out, "1000000000"), "stats: the cap-only tenant's "
	      "sentinel rate shown: '%s'", r.out);
	/* would-deny is 0 everywhere: left out, not hidden */
	CHECK(!strstr(r.out, "WOULD-DENY"), "stats: an all-0 column: '%s'", r.out);
	CHECK(strstr(r.out, "not shown, to fit 100 columns (--wide shows them): ") &&
	      strstr(r.out, "REFUNDED,"), "stats: hidden columns not named: '%s'", r.out);
	free_result(&r);

	r = RUN("stats", "--wide");
	CHECK(r.rc == 0 && strstr(r.out, "REFUNDED") && strstr(r.out, "WOULD-DENY") &&
	      strstr(r.out, "REDIS-CALLS") && !strstr(r.out, "not shown"),
	      "stats --wide: '%s'", r.out);
	free_result(&r);

	r = RUN("top", "-n", "1");
	CHECK(r.rc == 0 && widest_line(r.out) <= 100 && strstr(r.out, "20/s,5"),
	      "top: %zu columns: '%s'", widest_line(r.out), r.out);
	free_result(&r);

	/* no tenants: no memory per tenant; the RST warning */
	r = RUN("status");
	CHECK(r.rc == 0 && strstr(r.out, "kernel maps 35.6 MiB, agent 23.4 MiB "
				  "resident, 1.5 MiB of it its own\n") &&
	      !strstr(r.out, "per tenant"), "status, 0 tenants: '%s'", r.out);
	CHECK(strstr(r.out, "warning:     RSTs sent on veth0 do not reach clients: "
			    "a veth whose peer runs no XDP program\n") != NULL,
	      "status: no RST warning: '%s'", r.out);
	free_result(&r);
	stop_fake();

	start_fake(many_tenants);
	r = RUN("status");
	CHECK(r.rc == 0 && strstr(r.out, "kernel maps 50.0 MiB (10485 bytes per "
				  "tenant), agent 10.0 MiB resident (2097 bytes "
				  "per tenant), 4.0 MiB of it its own (838 bytes "
				  "per tenant)") && !strstr(r.out, "warning:"),
	      "status, 5000 tenants: '%s'", r.out);
	free_result(&r);
	stop_fake();
}

/* The filters travel in the request: the agent keeps the tenants asked
 * for, and encodes only those. */
static void test_filters_in_request(void)
{
	struct result r;
	json_t *reqs;

	start_fake(agent);
	r = RUN("tenant", "list", "--name", "w*", "--limit", "2");
	free_result(&r);
	r = RUN("stats", "--name", "w*", "--top", "3");
	free_result(&r);
	r = RUN("top", "-n", "1", "-i", "0.1", "--name", "a*", "--top", "1");
	CHECK(r.rc == 0 && strstr(r.out, "api") && !strstr(r.out, "web"),
	      "top --name 'a*' --top 1: exit %d, '%s'", r.rc, r.out);
	free_result(&r);
	r = RUN("tenant", "list");
	free_result(&r);
	r = RUN("tenant", "list", "--after", "api", "--limit", "5");
	free_result(&r);
	r = RUN("stats", "--after", "api", "--limit", "4");
	free_result(&r);
	reqs = requests();
	CHECK(request_is(reqs, 0, "{\"cmd\":\"tenant.list\",\"match\":\"w*\","
			 "\"limit\":2}"), "tenant list --name --limit request");
	CHECK(request_is(reqs, 1, "{\"cmd\":\"stats\",\"match\":\"w*\","
			 "\"top\":3}"), "stats --name --top request");
	CHECK(request_is(reqs, 2, "{\"cmd\":\"stats\",\"match\":\"a*\","
			 "\"top\":1}"), "top --name --top request");
	CHECK(request_is(reqs, 3, "{\"cmd\":\"tenant.list\"}"),
	      "tenant list request without filters");
	CHECK(request_is(reqs, 4, "{\"cmd\":\"tenant.list\",\"after\":\"api\","
			 "\"limit\":5}"), "tenant list --after --limit request");
	CHECK(request_is(reqs, 5, "{\"cmd\":\"stats\",\"after\":\"api\","
			 "\"limit\":4}"), "stats --after --limit request");
	json_decref(reqs);
	stop_fake();
}

static void test_apply(void)
{
	char good[128], bad[128], syntax[128];
	struct result r;
	json_t *reqs;

	snprintf(good, sizeof(good), "%s/good.json", dir);
	snprintf(bad, sizeof(bad), "%s/bad.json", dir);
	snprintf(syntax, sizeof(syntax), "%s/syntax.json", dir);
	write_file(good, "{\"tenants\":[{\"name\":\"web\",\"rate\":\"100/s\","
		   "\"match\":[\"192.0.2.0/24\"],\"ports\":[443]},"
		   "{\"name\":\"api\",\"rate\":\"1/m\",\"match\":[\"2001:DB8::/32\"],"
		   "\"action\":\"rst\",\"shadow\":true,\"burst\":5}]}");
	write_file(bad, "{\"tenants\":[{\"name\":\"a\",\"rate\":\"0/s\",\"match\":"
		   "[\"10.0.0.0/8\"]},{\"name\":\"b\",\"rate\":\"1/s\",\"match\":"
		   "[\"10.0.0.0/8\"]},{\"name\":\"c\",\"rate\":\"1/s\",\"match\":"
		   "[\"10.0.0.0/8\"]},{\"name\":\"b\",\"rate\":\"1/s\",\"match\":"
		   "[\"10.1.0.0/16\"]}]}");
	write_file(syntax, "{\"tenants\":[\n{\"name\":}]}");

	start_fake(agent);
	r = RUN("apply", good);
	reqs = requests();
	CHECK(r.rc == 0 && strstr(r.out, "1 added, 1 updated, 3 removed"),
	      "apply: exit %d out '%s' err '%s'", r.rc, r.out, r.err);
	CHECK(json_array_size(reqs) == 1 &&
	      request_is(reqs, 0, "{\"cmd\":\"apply\",\"tenants\":[{\"name\":\"web\","
			 "\"rate\":\"100/s\",\"burst\":100,\"match\":[\"192.0.2.0/24\"],"
			 "\"ports\":[443],\"action\":\"drop\",\"shadow\":false,\"fail\":\"static\"},"
			 "{\"name\":\"api\",\"rate\":\"1/m\",\"burst\":5,\"match\":"
			 "[\"2001:db8::/32\"],\"ports\":[],\"action\":\"rst\","
			 "\"shadow\":true,\"fail\":\"static\"}]}"), "apply request");
	json_decref(reqs);
	free_result(&r);

	unlink(req_path);
	r = RUN_STDIN(good, "--json", "apply", "-");
	reqs = requests();
	CHECK(r.rc == 0 && strstr(r.out, "\"removed\": 3") &&
	      json_array_size(reqs) == 1, "apply -: exit %d out '%s'", r.rc, r.out);
	json_decref(reqs);
	free_result(&r);

	unlink(req_path);
	r = RUN("apply", bad);
	reqs = requests();
	CHECK(r.rc == 2 && json_array_size(reqs) == 0, "apply bad: exit %d, %zu "
	      "requests", r.rc, json_array_size(reqs));
	CHECK(strstr(r.err, "tenants[0] 'a': invalid rate '0/s'") &&
	      strstr(r.err, "tenants[2] 'c': conflict") &&
	      strstr(r.err, "tenants[3] 'b': duplicate tenant name") &&
	      strstr(r.err, "3 problems; nothing was applied"),
	      "apply bad: every problem not reported: '%s'", r.err);
	json_decref(reqs);
	free_result(&r);

	r = RUN("--json", "apply", bad);
	{
		json_t *j = json_loads(r.out, 0, NULL);

		CHECK(r.rc == 2 && json_array_size(json_object_get(j, "problems")) == 3 &&
		      json_is_string(json_object_get(j, "error")) && !r.err[0],
		      "apply bad --json: '%s'", r.out);
		json_decref(j);
	}
	free_result(&r);

	r = RUN("apply", syntax);
	CHECK(r.rc == 2 && strstr(r.err, "line 2"), "apply syntax: exit %d err '%s'",
	      r.rc, r.err);
	free_result(&r);

	r = RUN("apply", "/nonexistent/file.json");
	CHECK(r.rc == 2 && strstr(r.err, "couldn't read '/nonexistent/file.json'"),
	      "apply missing file: exit %d err '%s'", r.rc, r.err);
	free_result(&r);

	unlink(req_path);
	stop_fake();	/* --dry-run needs no agent */
	r = RUN("apply", "--dry-run", good);
	CHECK(r.rc == 0 && strstr(r.out, "2 tenants, valid"), "dry run: exit %d "
	      "out '%s' err '%s'", r.rc, r.out, r.err);
	free_result(&r);
}

static void test_help(void)
{
	static const char *const cases[][4] = {
		{ "--help" }, { "help" }, { "tenant", "--help" },
		{ "tenant", "set", "--help" }, { "tenant", "get", "--help" },
		{ "tenant", "list", "--help" }, { "tenant", "del", "--help" },
		{ "apply", "--help" }, { "status", "--help" }, { "stats", "--help" },
		{ "top", "--help" }, { "detach", "--help" }, { "version", "--help" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *args[8] = { "--socket", sock_path };
		struct result r;

		for (int k = 0; k < 4 && cases[i][k]; k++)
			args[2 + k] = cases[i][k];
		r = run_v(NULL, args);
		CHECK(r.rc == 0 && strstr(r.out, "Usage: rlctl") && !r.err[0],
		      "%s %s: exit %d", cases[i][0], cases[i][1] ?: "", r.rc);
		free_result(&r);
	}
}

static int find_rlctl(const char *argv0)
{
	const char *env = getenv("RLCTL");
	char self[PATH_MAX];
	ssize_t n;

	(void)argv0;
	if (env && *env) {
		snprintf(rlctl_path, sizeof(rlctl_path), "%s", env);
	} else {
		/* build/tests/unit/test_rlctl -> build/rlctl, wherever run from */
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0)
			return -1;
		self[n] = '\0';
		snprintf(rlctl_path, sizeof(rlctl_path), "%s/../../rlctl",
			 dirname(self));
	}
	return access(rlctl_path, X_OK);
}

int main(int argc, char **argv)
{
	(void)argc;
	if (find_rlctl(argv[0]) < 0) {
		printf("skip: no rlctl at '%s' (build it, or set RLCTL)\n",
		       rlctl_path);
		return 77;
	}
	snprintf(dir, sizeof(dir), "/tmp/test_rlctl.XXXXXX");
	if (!mkdtemp(dir)) {
		printf("FAIL: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", dir);
	snprintf(req_path, sizeof(req_path), "%s/requests", dir);

	CHECK_RUN(test_bad_input_sends_nothing);
	CHECK_RUN(test_messages_name_the_value);
	CHECK_RUN(test_no_agent);
	CHECK_RUN(test_tenant_set_create);
	CHECK_RUN(test_tenant_set_update);
	CHECK_RUN(test_agent_refusals);
	CHECK_RUN(test_agent_warnings);
	CHECK_RUN(test_read_commands);
	CHECK_RUN(test_top);
	CHECK_RUN(test_stats_table);
	CHECK_RUN(test_filters_in_request);
	CHECK_RUN(test_apply);
	CHECK_RUN(test_help);

	stop_fake();
	{
		char cmd[128];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			printf("note: couldn't remove %s\n", dir);
	}
	return check_exit();
}
