#!/usr/bin/env bats
# tools/fleet-sim: simulated agents sizing leases with user/lib/lease.c against
# lua/lease.lua never admit more than the bucket can grant (rate x T + burst,
# within the overshoot bound), and spend few calls per admitted connection.

load helpers

BUILD=${RLGATE_BUILD:-$TOP/build}

setup_file() { redis_start; }
teardown_file() { redis_stop; }

# Runs fleet-sim for N agents, 1 s at a limit of 1000/s offered twice over
# (on SHARDS sub-buckets, 1 by default), and sets fig[name] from its
# `name value unit` lines.
sim() {
	[[ -x $BUILD/fleet-sim ]] || skip "$BUILD/fleet-sim not built"
	out=$("$BUILD/fleet-sim" "$RSOCK" "$TOP/lua/lease.lua" "$1" 1 1000 2 "$2" s "${3:-1}") || return 1
	declare -gA fig=()
	while read -r name value _; do fig[${name#s_}]=$value; done <<<"$out"
	echo "$out"
}

# admitted + what hosts still hold never exceeds what the bucket granted,
# which never exceeds rate x T + burst; the overshoot bound is the formula's.
check_within_limit() {
	(( fig[admitted] + fig[held_at_end] <= fig[limit] + 1 ))
	(( fig[overshoot_observed] <= fig[overshoot_bound] ))
	(( fig[admitted] >= 250 ))	# at least a quarter of the burst got through
}

@test "3 agents, even load: within rate x T + burst, under 0.05 calls per admitted" {
	sim 3 even
	check_within_limit
	awk -v c="${fig[calls_per_admitted]}" 'BEGIN { exit !(c < 0.05) }'
	[ "${fig[overshoot_bound]}" = 999 ]	# 3 x (1000 / 3), no static debt
}

@test "30 agents, skewed load: within rate x T + burst, under 0.5 calls per admitted" {
	sim 30 skew
	check_within_limit
	awk -v c="${fig[calls_per_admitted]}" 'BEGIN { exit !(c < 0.5) }'
	[ "${fig[overshoot_bound]}" = 990 ]	# 30 x (1000 / 30)
}

@test "30 agents, skewed load, the tenant split into 3 sub-buckets: within rate x T + burst" {
	sim 30 skew 3
	[ "${fig[shards]}" = 3 ]
	check_within_limit
	[ "${fig[overshoot_bound]}" = 990 ]	# the same hosts, the same caps
}
