// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* libFuzzer target for rlagent's policy state file: the bytes of a
 * policy.json go through the strict JSON reader and the agent's own
 * document parser (parse_doc in user/agent/agent_state.c, included here
 * with the tenant set's other files that its writer calls, so that static
 * functions are reachable; the kernel calls are stubs).
 * Invariants: no crash or sanitizer report; a document that parses
 * survives a round trip through the agent's writer, agent_save_policy, into a
 * private directory under /dev/shm and back (same tenants, slots, versions
 * and policies), and the file written is read the same line by line
 * (parse_lines, the reader of a start); every tenant parsed passes
 * policy_validate; whatever parse_lines takes, parse_doc takes the same.
 *
 *   clang -fsanitize=fuzzer,address,undefined -Ibpf -Iuser/lib -Iuser/agent \
 *       tests/fuzz/fuzz_state.c user/lib/policy*.c user/lib/hot.c user/lib/state.c \
 *       user/lib/statelines.c \
 *       user/lib/log.c -ljansson -lbpf -o fuzz_state
 *   ./fuzz_state -max_total_time=60 tests/fuzz/corpus/state
 */
#include "../../user/agent/agent.c"
#include "../../user/agent/agent_state.c"
#include "../../user/agent/agent_tombs.c"
#include "../../user/agent/agent_index.c"
#include "../../user/lib/jsonflat.c"

#include <assert.h>
#include <unistd.h>

/* --- stubs: no kernel, no Redis ---------------------------------------- */
void kern_tenant_configure(struct kern *k, uint32_t slot,
			   const struct policy_tenant *t, bool fresh)
{
	(void)k; (void)slot; (void)t; (void)fresh;
}

/* no loop here (a->loop NULL): a full journal is written whole at once */
int loop_timer_add(struct loop *l, uint64_t delay_ms, uint64_t period_ms,
		   loop_timer_fn fn, void *arg, struct loop_timer **out)
{
	(void)l; (void)delay_ms; (void)period_ms; (void)fn; (void)arg; (void)out;
	return -ENOSYS;
}

void kern_preload_configure(struct kern *k, uint32_t slot,
			    const struct policy_tenant *t)
{
	(void)k; (void)slot; (void)t;
}

int kern_preload_rules(struct kern *k, const struct kern_binding *bs, size_t n)
{
	(void)k; (void)bs; (void)n;
	return 0;
}

void kern_tenant_clear(struct kern *k, uint32_t slot)
{
	(void)k; (void)slot;
}

bool kern_slot_live(const struct kern *k, uint32_t slot)
{
	(void)k; (void)slot;
	return false;
}

void kern_conn_gate(struct kern *k, uint32_t capped)
{
	(void)k; (void)capped;
}

void kern_verify_gate(struct kern *k, uint32_t verifying)
{
	(void)k; (void)verifying;
}

int kern_rules_sync(struct kern *k, const struct kern_binding *bs, size_t n)
{
	(void)k; (void)bs; (void)n;
	return 0;
}

int kern_rules_compile(struct kern *k, const struct kern_binding *bs, size_t n,
		       struct kern_rules *r)
{
	(void)k; (void)bs; (void)n;
	memset(r, 0, sizeof(*r));
	return 0;
}

int kern_rules_publish(struct kern *k, struct kern_rules *r)
{
	(void)k; (void)r;
	return 0;
}

void kern_rules_free(struct kern_rules *r)
{
	(void)r;
}

int kern_rules_edit(struct kern *k, const struct rl_cls_rule *ps, size_t n,
		    rl_cls_rule_fn rule, void *ctx)
{
	(void)k; (void)ps; (void)n; (void)rule; (void)ctx;
	return 0;
}

int kern_tenant_stats(struct kern *k, uint32_t slot, struct rl_stats *out)
{
	(void)k; (void)slot;
	memset(out, 0, sizeof(*out));
	return 0;
}

uint64_t kern_tenant_tokens(const struct kern *k, uint32_t slot, uint64_t now_ns)
{
	(void)k; (void)slot; (void)now_ns;
	return 0;
}

uint64_t loop_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* --- the target ----------------------------------------------------------- */
/* The agent whose writer the round trip goes through: only its state dir
 * and the lines of the file it wrote last (copied into the next file when
 * a tenant is the same) are used. */
static struct agent writer;
static char writer_dir[] = "/dev/shm/fuzz_state.XXXXXX";

static void writer_cleanup(void)
{
	char path[sizeof(writer_dir) + sizeof(AGENT_POLICY_FILE) + 1];

	snprintf(path, sizeof(path), "%s/%s", writer_dir, AGENT_POLICY_FILE);
	unlink(path);
	rmdir(writer_dir);
	agent_free(&writer);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	log_set_level(LOG_LVL_ERROR);
	if (!mkdtemp(writer_dir))
		abort();
	writer.opts.state_dir = writer_dir;
	writer.kern.max_tenants = RL_MAX_TENANTS;
	atexit(writer_cleanup);
	return 0;
}

/* Two readings of one file: the same tenants, slots, versions, policies. */
static void same_tenants(const struct agent_tenant *a, size_t n, uint64_t va,
			 const struct agent_tenant *b, size_t m, uint64_t vb)
{
	assert(n == m && va == vb);
	for (size_t i = 0; i < n; i++) {
		assert(b[i].slot == a[i].slot);
		assert(b[i].version == a[i].version);
		assert(policy_same(&b[i].pol, &a[i].pol));
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[POLICY_ERR_MAX];
	struct agent_tenant *ts = NULL, *ts2 = NULL;
	size_t n = 0, n2 = 0;
	uint64_t version = 0, version2 = 0;
	json_error_t jerr;
	json_t *doc, *again, *head;
	struct pfx_store p1 = { 0 }, p2 = { 0 };
	struct state_lines none = { 0 };	/* where the lines are: not kept */
	char *text = NULL;
	size_t len = 0;

	/* Line by line first, as a start reads it. */
	if (parse_lines((const char *)data, size, RL_MAX_TENANTS, &ts2, &n2,
			&version2, &head, &p2, &none) == 0)
		json_decref(head);
	else
		ts2 = NULL;
	/* What state_load does with the file's bytes. */
	doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
	if (!doc) {
		assert(!ts2);
		pfx_store_free(&p2);
		return 0;
	}
	err[0] = '\0';
	if (parse_doc(doc, RL_MAX_TENANTS, &ts, &n, &version, &p1, err)) {
		/* Refused: the message must say why. */
		assert(err[0] != '\0');
		assert(!ts2);
		json_decref(doc);
		pfx_store_free(&p1);
		pfx_store_free(&p2);
		return 0;
	}
	json_decref(doc);
	if (ts2)
		same_tenants(ts, n, version, ts2, n2, version2);
	free(ts2);
	pfx_store_free(&p2);
	ts2 = NULL;

	for (size_t i = 0; i < n; i++) {
		assert(policy_validate(&ts[i].pol, err) == 0);
		assert(ts[i].slot < RL_MAX_TENANTS);
		assert(ts[i].version >= 1);
	}
	/* What the agent writes back must read back the same. */
	assert(agent_save_policy(&writer, ts, n, NULL, 0, version) == 0);
	assert(state_load(writer_dir, AGENT_POLICY_FILE, &again, err,
			  sizeof(err)) == 0);
	assert(parse_doc(again, RL_MAX_TENANTS, &ts2, &n2, &version2, &p2,
			 err) == 0);
	same_tenants(ts, n, version, ts2, n2, version2);
	json_decref(again);
	free(ts2);
	pfx_store_free(&p2);
	/* the writer's layout is the one a start reads line by line */
	assert(state_read(writer_dir, AGENT_POLICY_FILE, &text, &len, err,
			  sizeof(err)) == 0);
	assert(parse_lines(text, len, RL_MAX_TENANTS, &ts2, &n2, &version2,
			   &head, &p2, &none) == 0);
	json_decref(head);
	free(text);
	same_tenants(ts, n, version, ts2, n2, version2);
	free(ts);
	free(ts2);
	pfx_store_free(&p1);
	pfx_store_free(&p2);
	return 0;
}
