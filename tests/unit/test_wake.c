/* Unit test of user/lib/wake.c: a check takes each listed or due slot once, a slot due later waits for its time, a slot due again at another time only at that one, the queue gives slots in turn; against a brute-force reference over random schedules. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wake.h"
#include "check.h"

/* The taken slots as a set of max flags; false if one came twice. */
static bool taken_set(const uint32_t *s, size_t n, bool *set, uint32_t max)
{
	bool once = true;

	memset(set, 0, max * sizeof(*set));
	for (size_t i = 0; i < n; i++) {
		once = once && !set[s[i]];
		set[s[i]] = true;
	}
	return once;
}

static void test_list_and_due(void)
{
	struct wake w;
	const uint32_t *s;
	bool set[8];
	size_t n;
	uint32_t q;

	CHECK(wake_init(&w, 8) == 0, "init");
	n = wake_take(&w, 100, &s);
	CHECK(n == 0, "nothing listed: %zu taken", n);

	wake_list(&w, 3);
	wake_list(&w, 3);
	wake_list(&w, 5);
	wake_list(&w, 8);	/* past max: ignored */
	n = wake_take(&w, 100, &s);
	CHECK(taken_set(s, n, set, 8) && n == 2 && set[3] && set[5],
	      "listed twice, taken once: %zu taken", n);
	n = wake_take(&w, 100, &s);
	CHECK(n == 0, "taken slots are listed no more: %zu", n);

	wake_at(&w, 1, 200);
	wake_at(&w, 2, 300);
	wake_at(&w, 4, 250);
	n = wake_take(&w, 199, &s);
	CHECK(n == 0, "none due before 200: %zu", n);
	n = wake_take(&w, 250, &s);
	CHECK(taken_set(s, n, set, 8) && n == 2 && set[1] && set[4],
	      "due by 250: 1 and 4, %zu taken", n);

	/* due again later: only then; and a slot both listed and due, once */
	wake_at(&w, 2, 400);
	n = wake_take(&w, 350, &s);
	CHECK(n == 0, "moved from 300 to 400: not at 350 (%zu)", n);
	wake_list(&w, 2);
	n = wake_take(&w, 500, &s);
	CHECK(taken_set(s, n, set, 8) && n == 1 && set[2],
	      "listed and due: once, %zu taken", n);

	/* due at no time any more */
	wake_at(&w, 6, 600);
	wake_at(&w, 6, 0);
	n = wake_take(&w, 1000, &s);
	CHECK(n == 0, "cancelled: %zu", n);

	/* listing while visiting the taken ones: the next check's */
	wake_list(&w, 7);
	n = wake_take(&w, 1000, &s);
	wake_list(&w, s[0]);
	CHECK(n == 1 && s[0] == 7, "7 taken");
	n = wake_take(&w, 1000, &s);
	CHECK(n == 1 && s[0] == 7, "listed again during its visit: taken next");

	/* the queue: in turn, once each */
	wake_queue(&w, 4);
	wake_queue(&w, 2);
	wake_queue(&w, 4);
	CHECK(wake_next_queued(&w, &q) && q == 4, "first queued first");
	wake_queue(&w, 4);
	CHECK(wake_next_queued(&w, &q) && q == 2, "then 2");
	CHECK(wake_next_queued(&w, &q) && q == 4, "4 again, queued after");
	CHECK(!wake_next_queued(&w, &q), "empty");

	wake_list(&w, 1);
	wake_at(&w, 2, 5000);
	wake_queue(&w, 3);
	wake_clear(&w);
	n = wake_take(&w, 10000, &s);
	CHECK(n == 0 && !wake_next_queued(&w, &q), "cleared: %zu", n);
	CHECK(!w.all, "no allocation failed");
	wake_free(&w);
}

/* Random lists, times and queue entries over 300 slots and 2,000 checks
 * (the ring and the heap grow past their first sizes): each check takes
 * exactly the slots a reference of per-slot flags and times says. */
static void test_matches_reference(void)
{
	enum { MAX = 300, CHECKS = 2000 };
	static bool listed[MAX], set[MAX], queued[MAX];
	static uint64_t due[MAX];
	static uint32_t fifo[MAX];
	size_t f_head = 0, f_n = 0;
	unsigned int seed = 4242;
	struct wake w;
	bool ok = true;

	CHECK(wake_init(&w, MAX) == 0, "init");
	for (uint64_t now = 1; ok && now <= CHECKS; now++) {
		const uint32_t *s;
		size_t n;
		uint32_t q;

		for (int k = 0; k < 40; k++) {
			uint32_t slot;
			unsigned int op;

			seed = seed * 1103515245 + 12345;
			slot = (seed >> 8) % MAX;
			op = (seed >> 20) % 4;
			if (op == 0) {
				wake_list(&w, slot);
				listed[slot] = true;
			} else if (op == 1 || op == 2) {
				uint64_t at = op == 2 && (seed & 1) ? 0 :
					      now + (seed >> 24) % 50;

				wake_at(&w, slot, at);
				due[slot] = at;
			} else {
				wake_queue(&w, slot);
				if (!queued[slot]) {
					queued[slot] = true;
					fifo[(f_head + f_n++) % MAX] = slot;
				}
			}
		}
		n = wake_take(&w, now, &s);
		ok = taken_set(s, n, set, MAX);
		for (uint32_t i = 0; ok && i < MAX; i++) {
			bool want = listed[i] || (due[i] && due[i] <= now);

			ok = set[i] == want;
			if (!ok)
				diag("check %llu: slot %u taken %d, expected %d",
				     (unsigned long long)now, i, set[i], want);
			if (want) {
				listed[i] = false;
				if (due[i] <= now)
					due[i] = 0;
			}
		}
		/* a few from the queue, in the reference's order */
		for (int k = 0; ok && k < 7 && f_n; k++) {
			ok = wake_next_queued(&w, &q) && q == fifo[f_head];
			queued[fifo[f_head]] = false;
			f_head = (f_head + 1) % MAX;
			f_n--;
		}
	}
	CHECK(ok, "a check took other slots than the reference's");
	CHECK(!w.all, "no allocation failed");
	wake_free(&w);
}

int main(void)
{
	CHECK_RUN(test_list_and_due);
	CHECK_RUN(test_matches_reference);
	return check_exit();
}
