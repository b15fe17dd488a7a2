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

# A check that a holding is still live at a later call runs through
# retry_stalled: when the machine stalled longer than the TTL before that
# call, it starts again with a longer TTL.

# skey N: this test's slots (1) or slot_exp (2) key.
skey() { skeys | cut -d' ' -f"$1"; }

# take CAP HOLDER WANT TTL_MS: slots, with the holder's expiry read in the
# same transaction and checked to be TTL_MS after the call; sets OUT ("held
# free") and SCORE (the expiry).
take() {
	local t0 o

	t0=$(redis_now_us)
	mapfile -t o < <(atomically "EVALSHA $SHA_slots 2 $(skeys) $*" "ZSCORE $(skey 2) $2")
	OUT="${o[0]} ${o[1]}" SCORE=${o[2]}
	expiry_within "$2" "$SCORE" "$4" "$t0" "${o[3]}"
}

# stops_calling TTL: a/1 calls once; b/1 gets nothing while a/1 is live and
# all it wants once TTL has passed.
stops_calling() {
	local score out t1

	r DEL $(skeys) >/dev/null
	take 50 a/1 50 "$1" && [ "$OUT" = "50 0" ] || return 1
	score=$SCORE
	out=$(slots 50 b/1 10 10000)
	t1=$(redis_now_us)
	if [ "$out" != "0 0" ]; then
		live_until a/1 "$score" "$t1" || return
		echo "b/1 got '$out' while a/1 held all 50"
		return 1
	fi
	sleep_ms $(($1 + 100))
	[ "$(slots 50 b/1 10 10000)" = "10 40" ] || return 1
	[ "$(r HEXISTS "$(skey 1)" a/1)" = 0 ]
}

@test "a holder that stops calling loses its slots after its TTL, with no other action" {
	retry_stalled stops_calling 200
}

# restarted TTL: host1/aaaa holds 30 of 40 with TTL and is restarted as
# host1/bbbb, which gets the 10 left while the old holding is live, and all
# 30 once it is not.
restarted() {
	local score out t1

	r DEL $(skeys) >/dev/null
	take 40 host1/aaaa 30 "$1" && [ "$OUT" = "30 10" ] || return 1
	score=$SCORE
	# restarted: same host, new nonce; the old holding still counts
	out=$(slots 40 host1/bbbb 30 10000)
	t1=$(redis_now_us)
	if [ "$out" != "10 0" ]; then
		live_until host1/aaaa "$score" "$t1" || return
		echo "host1/bbbb got '$out' while host1/aaaa held 30 of 40"
		return 1
	fi
	sleep_ms $(($1 + 100))
	[ "$(slots 40 host1/bbbb 30 10000)" = "30 10" ]
}

@test "a restarted agent (a new holder) is never counted twice: it gets what its old self left only once that expires" {
	retry_stalled restarted 300
}

# renewing TTL: a/1 holds 5 of 10 and renews after 2/3 of its TTL; b/1,
# calling once the first expiry has passed, still finds a/1's 5 held.
renewing() {
	local old new out t1

	r DEL $(skeys) >/dev/null
	take 10 a/1 5 "$1" && [ "$OUT" = "5 5" ] || return 1
	old=$SCORE
	sleep_ms $(($1 * 2 / 3))
	# the renewal's expiry is TTL after it: later than the first
	take 10 a/1 5 "$1" && [ "$OUT" = "5 5" ] || return 1
	new=$SCORE
	# renewed while live (else a stall made it a new holding)
	live_until "a/1's first holding" "$old" $(((new - $1) * 1000)) || return
	while (($(redis_now_us) / 1000 < old)); do
		sleep 0.01
	done
	out=$(slots 10 b/1 10 10000)
	t1=$(redis_now_us)
	if [ "$out" != "5 0" ]; then
		live_until "a/1's renewed holding" "$new" "$t1" || return
		echo "b/1 got '$out' after a/1's first expiry, before its renewed one"
		return 1
	fi
}

@test "renewing with the same want keeps the holding and moves its expiry" {
	retry_stalled renewing 300
}

@test "a lowered cap takes slots back from the next holder that calls" {
	[ "$(slots 50 a/1 30 10000)" = "30 20" ]
	[ "$(slots 50 b/1 20 10000)" = "20 0" ]
	[ "$(slots 40 a/1 30 10000)" = "20 0" ]
	[ "$(slots 10 a/1 30 10000)" = "0 0" ]
}

@test "the keys expire a second after the last holding" {
	# (read in the call's transaction: the keys are still there however
	# long the machine stalls)
	t0=$(redis_now_us)
	mapfile -t o < <(atomically "EVALSHA $SHA_slots 2 $(skeys) 10 a/1 5 500" \
		"PEXPIRETIME $(skey 1)" "PEXPIRETIME $(skey 2)")
	[ "${o[*]:0:2}" = "5 5" ]
	expiry_within "$(skey 1)" "${o[2]}" 1500 "$t0" "${o[4]}"
	expiry_within "$(skey 2)" "${o[3]}" 1500 "$t0" "${o[4]}"
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
