/* test_circuit: the broker's health decisions as tables - the circuit
 * breaker's transitions from event sequences (threshold 3), and the count of
 * live agents believed as the registry's answers come in.
 */
#include <string.h>

#include "circuit.h"
#include "check.h"

#define MS	1000000ULL

static void test_breaker_sequences(void)
{
	/* S success, F failure, L lost; r/n: Redis ready or not for a
	 * success.  Then the state after each step: o open, c closed; and the
	 * transitions counted at the end. */
	static const struct {
		const char *name, *events, *states;
		unsigned long long transitions;
	} seq[] = {
		{ "starts open; a success on a half-set-up connection proves nothing",
		  "Sn", "o", 0 },
		{ "the first ready success closes it, uncounted", "SnSr", "oc", 0 },
		{ "two failures do not open it, the third does", "SrFFF", "ccco", 1 },
		{ "a success between failures starts the count again",
		  "SrFFSrFF", "cccccc", 0 },
		{ "a lost connection opens it at once", "SrL", "co", 1 },
		{ "failures while open change nothing", "SrLFFFF", "cooooo", 1 },
		{ "open, then healthy again: two transitions", "SrLSr", "coc", 2 },
		{ "failures before the first close are not transitions",
		  "FFFLSr", "ooooc", 0 },
		{ "a success while open but not ready keeps it open",
		  "SrLSnSnSr", "coooc", 2 },
	};

	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		struct circuit c;
		const char *e = seq[i].events;
		size_t k = 0;
		char got[32] = "";

		circuit_init(&c);
		while (*e) {
			enum circuit_event ev = *e == 'S' ? CIRCUIT_SUCCESS :
						*e == 'F' ? CIRCUIT_FAILURE :
							    CIRCUIT_LOST;
			bool ready = false;

			if (*e == 'S')
				ready = *++e == 'r';
			circuit_step(&c, ev, ready, 3);
			got[k++] = c.open ? 'o' : 'c';
			e++;
		}
		got[k] = '\0';
		CHECK(!strcmp(got, seq[i].states), "%s: states %s, want %s",
		      seq[i].name, got, seq[i].states);
		CHECK(c.transitions == seq[i].transitions,
		      "%s: %llu transitions, want %llu", seq[i].name,
		      (unsigned long long)c.transitions, seq[i].transitions);
	}
}

/* What circuit_step says it did. */
static void test_step_reports(void)
{
	struct circuit c;

	circuit_init(&c);
	CHECK(circuit_step(&c, CIRCUIT_SUCCESS, true, 3) == CIRCUIT_CLOSED,
	      "first close not reported");
	CHECK(circuit_step(&c, CIRCUIT_SUCCESS, true, 3) == CIRCUIT_SAME,
	      "a success while closed reported as a change");
	CHECK(circuit_step(&c, CIRCUIT_LOST, false, 3) == CIRCUIT_OPENED,
	      "opening not reported");
	CHECK(circuit_step(&c, CIRCUIT_LOST, false, 3) == CIRCUIT_SAME,
	      "a loss while open reported as a change");
}

/* Live agents: in use, seen, at (ms); the count believed.  A rise at
 * once, a fall only after 3,000 ms of the lower count. */
static void test_live_agents(void)
{
	static const struct {
		unsigned long long seen, at_ms, want;
	} steps[] = {
		{ 3, 0, 3 },		/* the first count */
		{ 4, 100, 4 },		/* a new agent: at once */
		{ 3, 1000, 4 },		/* one missed heartbeat */
		{ 3, 2000, 4 },
		{ 4, 2500, 4 },		/* it was back: start again */
		{ 3, 3000, 4 },
		{ 3, 5999, 4 },		/* 2,999 ms of 3 */
		{ 3, 6000, 3 },		/* 3,000 ms: gone */
		{ 2, 6100, 3 },
		{ 5, 6200, 5 },		/* rises cut the wait short */
		{ 1, 6300, 5 },
		{ 1, 9300, 1 },
	};
	uint64_t in_use = 1, low = 0;

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		/* the clock starts at 1 s: 0 means "no low count" */
		in_use = circuit_live_agents(in_use, steps[i].seen,
					     (1000 + steps[i].at_ms) * MS,
					     3000 * MS, &low);
		CHECK(in_use == steps[i].want, "step %zu (seen %llu at "
		      "%llu ms): believe %llu, want %llu", i,
		      steps[i].seen, steps[i].at_ms,
		      (unsigned long long)in_use, steps[i].want);
	}
}

int main(void)
{
	CHECK_RUN(test_breaker_sequences);
	CHECK_RUN(test_step_reports);
	CHECK_RUN(test_live_agents);
	return check_exit();
}
