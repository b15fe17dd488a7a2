/* test_flow_bits: the flow cache's size per CPU (rl_flow_bits in rlgate.h)
 * keeps the whole cache near RL_FLOW_SLOTS_TOTAL slots on any machine:
 * 16,384 per CPU on small ones, fewer on large ones, never below 2,048.
 */
#include <stdio.h>

#include "rlgate.h"
#include "check.h"

static void test_bits_by_cpus(void)
{
	static const struct { int cpus; unsigned int bits; } want[] = {
		{ 1, 14 }, { 2, 14 }, { 8, 14 }, { 9, 13 }, { 16, 13 },
		{ 32, 12 }, { 64, 11 }, { 65, 11 }, { 1024, 11 }, { 0, 14 },
	};

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		unsigned int bits = rl_flow_bits(want[i].cpus);

		CHECK(bits == want[i].bits, "%d CPUs: %u bits, want %u",
		      want[i].cpus, bits, want[i].bits);
	}
}

/* Above the floor, never more than RL_FLOW_SLOTS_TOTAL slots in all. */
static void test_total_bounded(void)
{
	for (int cpus = 1; cpus <= 4096; cpus++) {
		unsigned long long total =
			(unsigned long long)cpus << rl_flow_bits(cpus);

		if (rl_flow_bits(cpus) > RL_FLOW_BITS_MIN)
			CHECK(total <= RL_FLOW_SLOTS_TOTAL, "%d CPUs: %llu "
			      "slots in all", cpus, total);
	}
}

int main(void)
{
	CHECK_RUN(test_bits_by_cpus);
	CHECK_RUN(test_total_bounded);
	return check_exit();
}
