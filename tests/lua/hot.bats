#!/usr/bin/env bats
# A hot tenant split into k sub-buckets (rl:{t:NAME#i}:bucket, rate and burst
# shared out as user/lib/hot.c does): leasers that start at their own
# sub-bucket and fall back to the others get the whole burst, and together
# the k sub-buckets grant at most the tenant's rate x T + burst.  That the
# sub-buckets' keys are on different slots is tests/unit/test_hot.c's.

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }

# share TOTAL K I -> sub-bucket I's share: TOTAL / K, plus 1 for I < TOTAL % K
share() { echo $(($1 / $2 + ($3 < $1 % $2 ? 1 : 0))); }

# sub I -> this test's sub-bucket I
sub() { echo "rl:{t:test$BATS_TEST_NUMBER#$1}:bucket"; }

@test "shares: 100/s burst 20 over 3 are 34+33+33 and 7+7+6" {
	[ "$(share 100 3 0) $(share 100 3 1) $(share 100 3 2)" = "34 33 33" ]
	[ "$(share 20 3 0) $(share 20 3 1) $(share 20 3 2)" = "7 7 6" ]
}

@test "a leaser whose own sub-bucket is empty falls back in turn and gets the whole burst" {
	# 100 an hour: nothing refills while the test runs.
	rate=100 burst=20 k=3 home=1 want=20 got=0
	for ((n = 0; n < k && got < want; n++)); do
		i=$(((home + n) % k))
		read -r g _ _ <<<"$(lease "$(sub $i)" "$(share $rate $k $i)" 3600 \
			"$(share $burst $k $i)" $((want - got)) 1)"
		echo "sub-bucket $i granted $g"
		got=$((got + g))
	done
	[ "$got" = $burst ]
	# All three are empty now: nothing more from any of them.
	for i in 0 1 2; do
		read -r g _ _ <<<"$(lease "$(sub $i)" "$(share $rate $k $i)" 3600 \
			"$(share $burst $k $i)" 5 1)"
		[ "$g" = 0 ]
	done
}

# fleet K: 6 leasers on K sub-buckets of a 30/s burst 30 tenant for 2 s;
# checks that no sub-bucket mints a token, and the sum against rate x T + burst,
# and prints each leaser's tokens, calls and short answers (all K together
# gave less than it wanted): the fairness and refusals the split costs.
fleet() {
	rate=30 burst=30 k=$1 want=5
	declare -a ts0 rt bt
	g0=0
	# Drain each sub-bucket first so none is ever full (and clamped).
	for ((i = 0; i < k; i++)); do
		rt[i]=$(share $rate $k $i) bt[i]=$(share $burst $k $i)
		read -r g _ _ <<<"$(lease "$(sub $i)" ${rt[i]} 1 ${bt[i]} ${bt[i]} 1)"
		[ "$g" = "${bt[i]}" ]
		g0=$((g0 + g))
		ts0[i]=$(field "$(sub $i)" ts)
	done
	end=$((ts0[0] + 2000000))
	# Worker w's own sub-bucket is w mod k; what it lacks it asks of the
	# next ones in turn.  One line per attempt: "agent sub-bucket granted",
	# and "short agent" when all k together fell short of want.
	worker() {
		local w=$1 home=$(($1 % k)) n i g got
		while (($(redis_now_us) < end)); do
			got=0
			for ((n = 0; n < k && got < want; n++)); do
				i=$(((home + n) % k))
				read -r g _ _ <<<"$(lease "$(sub $i)" ${rt[i]} 1 ${bt[i]} \
					$((want - got)) 1)"
				echo "$w $i $g"
				got=$((got + g))
			done
			if ((got < want)); then echo "short $w"; fi
		done >"$BATS_TEST_TMPDIR/w$w"
	}
	pids=()
	for w in 0 1 2 3 4 5; do
		worker $w &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done
	total=$g0 span0=${ts0[0]} span1=0
	for ((i = 0; i < k; i++)); do
		lease "$(sub $i)" ${rt[i]} 1 ${bt[i]} 0 1 >/dev/null
		ts1=$(field "$(sub $i)" ts) left=$(field "$(sub $i)" tokens)
		got=$(cat "$BATS_TEST_TMPDIR"/w* |
			awk -v i=$i '$1 != "short" && $2 == i { s += $3 } END { print s + 0 }')
		own=$((bt[i] + (ts1 - ts0[i]) * rt[i] / 1000000))
		echo "sub-bucket $i: granted ${bt[i]} + $got, left $left, refilled to $own"
		# Nothing minted in any sub-bucket (a sub-bucket nobody asked for a
		# while fills up and stops there, so the sum can be less).
		((bt[i] + got + left <= own))
		total=$((total + got))
		((ts0[i] < span0)) && span0=${ts0[i]}
		((ts1 > span1)) && span1=$ts1
	done
	bound=$((burst + (span1 - span0) * rate / 1000000))
	echo "granted $total, bound $bound over $((span1 - span0)) us"
	for w in 0 1 2 3 4 5; do
		awk -v w=$w -v k=$k '$1 == w { s += $3; c++ } $1 == "short" { n++ }
			END { printf "agent %d (home %d): %d tokens, %d calls, %d short\n",
			      w, w % k, s, c, n }' "$BATS_TEST_TMPDIR/w$w"
	done
	# How much the leasers got is how fast this machine runs them (each
	# call is a redis-cli): only the bound is checked.
	((total <= bound))
}

@test "6 leasers on 3 sub-buckets for 2 s: together at most rate x T + burst, none minting a token" {
	fleet 3
}

@test "the same on one bucket, to compare: at most rate x T + burst" {
	fleet 1
}
