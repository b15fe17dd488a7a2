#!/usr/bin/env bats
# slots.lua: a tenant's connection slots held by the fleet's agents - never
# more than the cap in all, given back on request, lost by a holder that
# stops calling, never counted twice for an agent that restarts as a new
# holder, taken back when the cap is lowered.

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }

# skeys: the two keys of this test's tenant, one hash slot.
skeys() { echo "rl:{t:slots$BATS_TEST_NUMBER}:slots rl:{t:slots$BATS_TEST_NUMBER}:slot_exp"; }

# slots CAP HOLDER WANT TTL_MS: "held free".
slots() {
	# shellcheck disable=SC2046 # two keys
	r EVALSHA "$SHA_slots" 2 $(skeys) "$@" | paste -sd' '
}

@test "two holders share a cap of 50: the second gets what the first leaves, never more in all" {
	[ "$(slots 50 a/1 30 10000)" = "30 20" ]
	[ "$(slots 50 b/1 30 10000)" = "20 0" ]
	[ "$(slots 50 b/1 40 10000)" = "20 0" ]
	[ "$(r HGET rl:{t:slots1}:slots a/1)" = 30 ]
	[ "$(r HGET rl:{t:slots1}:slots b/1)" = 20 ]
}

@test "giving back always succeeds; what is given back goes to the next who asks" {
	[ "$(slots 50 a/1 30 10000)" = "30 20" ]
	[ "$(slots 50 b/1 20 10000)" = "20 0" ]
	[ "$(slots 50 a/1 10 10000)" = "10 20" ]
	[ "$(slots 50 b/1 40 10000)" = "40 0" ]
	[ "$(slots 50 a/1 0 10000)" = "0 10" ]
	[ "$(r HEXISTS rl:{t:slots2}:slots a/1)" = 0 ]
	[ "$(r ZSCORE rl:{t:slots2}:slot_exp a/1)" = "" ]
}

@test "a holder that stops calling loses its slots after its TTL, with no other action" {
	[ "$(slots 50 a/1 50 200)" = "50 0" ]
	[ "$(slots 50 b/1 10 10000)" = "0 0" ]
	sleep 0.3
	[ "$(slots 50 b/1 10 10000)" = "10 40" ]
	[ "$(r HEXISTS rl:{t:slots3}:slots a/1)" = 0 ]
}

@test "a restarted agent (a new holder) is never counted twice: it gets what its old self left only once that expires" {
	[ "$(slots 40 host1/aaaa 30 300)" = "30 10" ]
	# restarted: same host, new nonce; the old holding still counts
	[ "$(slots 40 host1/bbbb 30 10000)" = "10 0" ]
	sleep 0.4
	[ "$(slots 40 host1/bbbb 30 10000)" = "30 10" ]
}

@test "renewing with the same want keeps the holding and moves its expiry" {
	[ "$(slots 10 a/1 5 300)" = "5 5" ]
	sleep 0.2
	[ "$(slots 10 a/1 5 300)" = "5 5" ]
	sleep 0.2
	[ "$(slots 10 b/1 10 10000)" = "5 0" ]
}

@test "a lowered cap takes slots back from the next holder that calls" {
	[ "$(slots 50 a/1 30 10000)" = "30 20" ]
	[ "$(slots 50 b/1 20 10000)" = "20 0" ]
	[ "$(slots 40 a/1 30 10000)" = "20 0" ]
	[ "$(slots 10 a/1 30 10000)" = "0 0" ]
}

@test "the keys expire a second after the last holding" {
	slots 10 a/1 5 500 >/dev/null
	ttl=$(r PTTL rl:{t:slots7}:slots)
	((ttl > 1000 && ttl <= 1500))
	ttl=$(r PTTL rl:{t:slots7}:slot_exp)
	((ttl > 1000 && ttl <= 1500))
}

@test "bad arguments are refused before anything is written" {
	run slots 131073 a/1 1 1000
	[[ $output == *"bad cap '131073'"* ]]
	run slots 10 "" 1 1000
	[[ $output == *"bad holder"* ]]
	run slots 10 a/1 -1 1000
	[[ $output == *"bad want '-1'"* ]]
	run slots 10 a/1 1 0
	[[ $output == *"bad ttl_ms '0'"* ]]
	[ "$(r EXISTS rl:{t:slots8}:slots)" = 0 ]
}
