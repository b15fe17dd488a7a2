#!/usr/bin/env bats
# policy_set.lua / policy_get.lua: the versioned per-tenant policy store
# (newest version wins, change announced on rl:policy, the index names live
# tenants only, tombstones expire).

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }

# pset NAME VERSION JSON [TOMB_TTL_MS]: the tombstone ttl defaults to a day.
pset() {
	r EVALSHA "$SHA_policy_set" 2 "rl:{t:$1}:policy" rl:tenants "$1" "$2" "$3" \
		"${4:-86400000}" | paste -sd' '
}
pget() { r EVALSHA "$SHA_policy_get" 1 "rl:{t:$1}:policy" | paste -sd' '; }

@test "a missing policy reads as version 0" {
	[ "$(pget nobody)" = "0 " ]
}

@test "a stored policy reads back with its version and the tenant is indexed" {
	[ "$(pset web 3 '{"rate":"100/s"}')" = "1 3" ]
	[ "$(pget web)" = '3 {"rate":"100/s"}' ]
	[ "$(r SISMEMBER rl:tenants web)" = 1 ]
}

@test "policy_get reads many tenants in one call, a pair per key in their order, missing and deleted ones included" {
	pset many1 7 '{"v":1}' >/dev/null
	pset many2 8 '{"v":2}' >/dev/null
	pset many2 9 '' >/dev/null
	[ "$(r EVALSHA "$SHA_policy_get" 4 'rl:{t:many1}:policy' 'rl:{t:none}:policy' \
		'rl:{t:many2}:policy' 'rl:{t:many1}:policy' | paste -sd' ')" = \
		'7 {"v":1} 0  9  7 {"v":1}' ]
	# a sync's chunk of 500 keys
	keys=()
	for i in {1..500}; do keys+=("rl:{t:many$i}:policy"); done
	[ "$(r EVALSHA "$SHA_policy_get" 500 "${keys[@]}" | wc -l)" = 1000 ]
}

@test "policy_get without a key is refused" {
	run r EVALSHA "$SHA_policy_get" 0
	[[ $output == *"policy_get takes 1 or more keys"* ]]
}

@test "an older or equal version never overwrites a newer one (re-seeding keeps the newest)" {
	pset api 5 '{"v":5}' >/dev/null
	[ "$(pset api 4 '{"v":4}')" = "0 5" ]
	[ "$(pset api 5 '{"v":"5b"}')" = "0 5" ]
	[ "$(pget api)" = '5 {"v":5}' ]
	[ "$(pset api 6 '{"v":6}')" = "1 6" ]
	[ "$(pget api)" = '6 {"v":6}' ]
}

@test "a deletion is a tombstone: an older copy cannot bring the tenant back" {
	pset gone 2 '{"v":2}' >/dev/null
	[ "$(pset gone 3 '')" = "1 3" ]
	[ "$(pget gone)" = "3 " ]
	[ "$(pset gone 2 '{"v":2}')" = "0 3" ]
}

@test "a tombstone leaves the index at once and its key expires after tomb_ttl_ms; a policy never expires" {
	pset tomb 2 '{"v":2}' 100 >/dev/null
	[ "$(r SISMEMBER rl:tenants tomb)" = 1 ]
	[ "$(r PTTL 'rl:{t:tomb}:policy')" = -1 ]
	t0=$(redis_now_us)
	[ "$(pset tomb 3 '' 60000)" = "1 3" ]
	t1=$(redis_now_us)
	[ "$(r SISMEMBER rl:tenants tomb)" = 0 ]
	expires_in 'rl:{t:tomb}:policy' 60000 "$t0" "$t1"
	# brought back: indexed again, and kept for good
	[ "$(pset tomb 4 '{"v":4}' 60000)" = "1 4" ]
	[ "$(r SISMEMBER rl:tenants tomb)" = 1 ]
	[ "$(r PTTL 'rl:{t:tomb}:policy')" = -1 ]
	# deleted for 200 ms: gone after it, and the name is free again
	[ "$(pset tomb 5 '' 200)" = "1 5" ]
	sleep 0.3
	[ "$(r EXISTS 'rl:{t:tomb}:policy')" = 0 ]
	[ "$(pget tomb)" = "0 " ]
	[ "$(pset tomb 1 '{"v":1}')" = "1 1" ]
}

@test "the index holds only live tenants however many were created and deleted" {
	for i in {1..50}; do
		pset "churn$i" 1 '{}' >/dev/null
		pset "churn$i" 2 '' >/dev/null
	done
	pset churn-live 1 '{}' >/dev/null
	[ "$(r SMEMBERS rl:tenants | grep -c '^churn')" = 1 ]
	[ "$(r SISMEMBER rl:tenants churn-live)" = 1 ]
}

@test "a stored change is published on rl:policy with the tenant name, a refused one is not" {
	redis-cli -s "$RSOCK" SUBSCRIBE rl:policy >"$BATS_TEST_TMPDIR/sub" &
	sub=$!
	for ((i = 0; i < 100; i++)); do
		[ "$(r PUBSUB NUMSUB rl:policy | sed -n 2p)" = 1 ] && break
		sleep 0.02
	done
	pset pub 1 '{}' >/dev/null
	pset pub 1 '{"again":1}' >/dev/null
	pset pub2 1 '{}' >/dev/null
	for ((i = 0; i < 100; i++)); do
		grep -q pub2 "$BATS_TEST_TMPDIR/sub" && break
		sleep 0.02
	done
	kill "$sub"
	wait "$sub" 2>/dev/null || true
	cat "$BATS_TEST_TMPDIR/sub"
	[ "$(grep -c '^pub$' "$BATS_TEST_TMPDIR/sub")" = 1 ]
	[ "$(grep -c '^pub2$' "$BATS_TEST_TMPDIR/sub")" = 1 ]
}

@test "policy_set with the policy key alone (Redis Cluster form) stores without indexing" {
	[ "$(r EVALSHA "$SHA_policy_set" 1 'rl:{t:solo}:policy' solo 1 '{}' 1000 | paste -sd' ')" = "1 1" ]
	[ "$(r SISMEMBER rl:tenants solo)" = 0 ]
	[ "$(pget solo)" = "1 {}" ]
}

@test "bad policy_set input is rejected: wrong key for the name, bad name, bad version" {
	run r EVALSHA "$SHA_policy_set" 1 'rl:{t:a}:policy' b 1 '{}'
	[[ $output == *"ERR rlgate: bad key"* ]]
	for a in "-x 1" "a} 1" "ok 0" "ok -1" "ok 1.5" "ok x" "ok 1000000000000000"; do
		read -r n v <<<"$a"
		out=$(r EVALSHA "$SHA_policy_set" 1 "rl:{t:$n}:policy" "$n" "$v" '{}' 1000 2>&1)
		[[ $out == *"ERR rlgate: bad "* ]] || { echo "'$a' gave: $out"; return 1; }
	done
	run r EVALSHA "$SHA_policy_set" 1 'rl:{t:ok}:policy' ok 1
	[[ $output == *"ERR rlgate: bad json"* ]]
	for t in 0 -1 1.5 x 1000000000000 ''; do
		out=$(r EVALSHA "$SHA_policy_set" 1 'rl:{t:ok}:policy' ok 1 '' "$t" 2>&1)
		[[ $out == *"ERR rlgate: bad tomb_ttl_ms"* ]] || { echo "ttl '$t' gave: $out"; return 1; }
	done
	run r EVALSHA "$SHA_policy_set" 1 'rl:{t:ok}:policy' ok 1 '{}'
	[[ $output == *"ERR rlgate: bad tomb_ttl_ms"* ]]
	[ "$(r EXISTS 'rl:{t:ok}:policy')" = 0 ]
}
