#!/usr/bin/env bats
# refund.lua: unspent tokens go back to the bucket, never above the burst, and
# never into a bucket that does not exist (a missing bucket is full).

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }

@test "refunded tokens are added back exactly and can be leased again" {
	k=$(bucket)
	lease "$k" 1 3600 10 8 1 >/dev/null
	[ "$(refund "$k" 1 3600 10 5)" = 7 ]
	[ "$(lease "$k" 1 3600 10 10 1 | cut -d' ' -f1-2)" = "7 0" ]
}

@test "a refund never lifts the bucket above the burst" {
	k=$(bucket)
	lease "$k" 1 3600 10 3 1 >/dev/null
	[ "$(refund "$k" 1 3600 10 50)" = 10 ]
	[ "$(field "$k" tokens)" = 10 ]
	[ "$(field "$k" frac)" = 0 ]
	[ "$(lease "$k" 1 3600 10 100 1 | cut -d' ' -f1)" = 10 ]
}

@test "a refund to a bucket lowered below its tokens clamps to the new burst" {
	k=$(bucket)
	lease "$k" 1 3600 10 2 1 >/dev/null
	[ "$(refund "$k" 1 3600 5 1)" = 5 ]
}

@test "a refund to a missing (expired) bucket creates nothing and reports it full" {
	k=$(bucket)
	[ "$(refund "$k" 7 60 10 4)" = 10 ]
	[ "$(r EXISTS "$k")" = 0 ]
	[ "$(lease "$k" 7 60 10 100 1 | cut -d' ' -f1)" = 10 ]
}

@test "a refund applies the refill first: time elapsed and tokens returned add up, capped" {
	k=$(bucket)
	now=$(redis_now_us)
	# 1/s, last updated 2 s ago at 1.5 tokens: 3.5 now, plus 3 refunded.
	r HSET "$k" tokens 1 frac $((U / 2)) ts $((now - 2000000)) >/dev/null
	[ "$(refund "$k" 1 1 100 3)" = 6 ]
	t1=$(redis_now_us)
	fr=$(field "$k" frac)
	# Half a token stays; only the refill of the microseconds since the
	# bucket was written added (U / 1,000,000 a microsecond at 1/s), however
	# long a loaded machine took between the two.
	((fr >= U / 2 && fr <= U / 2 + (t1 - now) * (U / 1000000)))
	r HSET "$k" tokens 1 frac $((U / 2)) ts $((now - 2000000)) >/dev/null
	[ "$(refund "$k" 1 1 5 3)" = 5 ]
}

@test "a refund keeps the fractional remainder and resets the expiry" {
	k=$(bucket)
	far=$(($(redis_now_us) + 3600000000))
	r HSET "$k" tokens 0 frac 123 ts $far >/dev/null
	t0=$(redis_now_us)
	[ "$(refund "$k" 7 60 10 2)" = 2 ]
	t1=$(redis_now_us)
	[ "$(field "$k" frac)" = 123 ]
	full=$(ms_model 8 123 420)
	expires_in "$k" $((full + 1000)) "$t0" "$t1"
}

@test "refund of 0 tokens changes no count" {
	k=$(bucket)
	lease "$k" 1 3600 10 4 1 >/dev/null
	[ "$(refund "$k" 1 3600 10 0)" = 6 ]
}

@test "bad refund ARGV is rejected with an error and writes nothing" {
	k=$(bucket)
	lease "$k" 1 3600 10 4 1 >/dev/null
	bad=("1 3600 10 -1" "1 3600 10 x" "1 3600 10 1.5" "1 3600 10 100000001"
		"1 3600 0 1" "1 7 10 1" "0 3600 10 1" "1 3600 10" "")
	for a in "${bad[@]}"; do
		# shellcheck disable=SC2086
		out=$(r EVALSHA "$SHA_refund" 1 "$k" $a 2>&1)
		[[ $out == *"ERR rlgate: bad "* ]] || { echo "ARGV '$a' gave: $out"; return 1; }
	done
	[ "$(field "$k" tokens)" = 6 ]
}
