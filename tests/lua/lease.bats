#!/usr/bin/env bats
# lease.lua against a real redis-server: whole-token grants, exact refill from
# Redis's clock, burst bounds, wait_ms, expiry, argument checks, and the total
# a crowd of concurrent leasers can get.

load helpers

setup_file() { redis_start; }
teardown_file() { redis_stop; }

@test "a missing bucket starts full, and grants stop at the burst" {
	k=$(bucket)
	[ "$(lease "$k" 7 60 10 4 2)" = "4 6 0" ]
	run lease "$k" 7 60 10 8 2
	read -r g rem w <<<"$output"
	[ "$g" = 6 ]
	[ "$rem" = 0 ]
	(( w > 0 ))
	[ "$(field "$k" tokens)" = 0 ]
}

@test "want=0 only reports the count and takes nothing" {
	k=$(bucket)
	[ "$(lease "$k" 5 1 9 0 1)" = "0 9 0" ]
	[ "$(lease "$k" 5 1 9 0 1)" = "0 9 0" ]
}

@test "refill matches an exact integer model for 300 cases (no fraction lost or minted)" {
	# Each case stores a state, lets an exactly known time pass (the script
	# writes its own TIME into ts, so elapsed = new ts - stored ts) and
	# compares tokens and the fractional remainder with the model.  All cases
	# run in one pipeline; the model is applied to the replies afterwards.
	RANDOM=4242
	k=$(bucket)
	periods=(1 60 3600)
	now=$(redis_now_us)
	cases=()
	for ((i = 0; i < 300; i++)); do
		p=${periods[RANDOM % 3]}
		case $((RANDOM % 4)) in
		0) c=$((RANDOM % 20 + 1)) ;;
		1) c=$(((RANDOM * 32768 + RANDOM) % (1000000000 * p) + 1)) ;;
		2) c=$((1000000000 * p - RANDOM)) ;;             # near the top rate
		3) c=$(((RANDOM * 32768 + RANDOM) * 97 % (1000000000 * p) + 1)) ;;
		esac
		kk=$((c * (3600 / p)))
		b=$(((RANDOM * 32768 + RANDOM) % 100000000 + 1))
		((RANDOM % 3 == 0)) && b=$((RANDOM % 50 + 1))
		t0=$(((RANDOM * 32768 + RANDOM) % b))
		f0=$((((RANDOM * 32768 + RANDOM) * 32768 + RANDOM) % U))
		# Elapsed up to ~1.5x the time to fill, before the pipeline runs:
		# however late it runs, the model takes any elapsed time.
		fill=$((((b - t0) * U - f0) / kk + 1))
		lim=$((fill + fill / 2 + 1))
		((lim > 900000000000)) && lim=900000000000
		d=$((((RANDOM * 32768 + RANDOM) * 32768 + RANDOM) % lim))
		ts0=$((now - d))
		cases+=("$c $p $kk $b $t0 $f0 $ts0")
		echo "HSET $k tokens $t0 frac $f0 ts $ts0"
		echo "EVALSHA $SHA_lease 1 $k $c $p $b 0 1"
		echo "HMGET $k tokens frac ts"
	done >"$BATS_TEST_TMPDIR/cmds"
	r <"$BATS_TEST_TMPDIR/cmds" | paste -d' ' - - - - - - - >"$BATS_TEST_TMPDIR/out"
	i=0
	while read -r _ g rem w tok fr ts1; do
		read -r c p kk b t0 f0 ts0 <<<"${cases[i]}"
		want=$(refill_model "$t0" "$f0" $((ts1 - ts0)) "$kk" "$b")
		if [ "$tok $fr" != "$want" ] || [ "$g $rem $w" != "0 $tok 0" ]; then
			echo "case $i: $c/$p burst $b from $t0+$f0/U over $((ts1 - ts0)) us"
			echo "script: $tok $fr (reply $g $rem $w)  model: $want"
			return 1
		fi
		i=$((i + 1))
	done <"$BATS_TEST_TMPDIR/out"
	[ "$i" = 300 ]
}

@test "7/m over 600 simulated seconds in 1 s steps yields exactly 70 tokens (fractions carried)" {
	k=$(bucket)
	# One pipeline: create and drain the bucket, then each step moves the
	# stored timestamp 1 s into the past and leases one token.
	{
		echo "EVALSHA $SHA_lease 1 $k 7 60 1000 1000 1"
		for ((i = 0; i < 600; i++)); do
			echo "HINCRBY $k ts -1000000"
			echo "EVALSHA $SHA_lease 1 $k 7 60 1000 1 1"
		done
	} >"$BATS_TEST_TMPDIR/cmds"
	r <"$BATS_TEST_TMPDIR/cmds" >"$BATS_TEST_TMPDIR/out"
	[ "$(head -1 "$BATS_TEST_TMPDIR/out")" = 1000 ]
	# Replies: granted / remaining / wait_ms, then ts, granted, ... per step.
	total=$(awk 'NR > 3 && NR % 4 == 1 { s += $1 } END { print s }' "$BATS_TEST_TMPDIR/out")
	echo "granted $total"
	[ "$total" = 70 ]
}

@test "1/h in 10 s steps grants its token after exactly 3600 simulated seconds, not before" {
	k=$(bucket)
	{
		echo "EVALSHA $SHA_lease 1 $k 1 3600 5 5 1"
		for ((i = 0; i < 359; i++)); do
			echo "HINCRBY $k ts -10000000"
			echo "EVALSHA $SHA_lease 1 $k 1 3600 5 1 1"
		done
	} >"$BATS_TEST_TMPDIR/cmds"
	{
		echo "HINCRBY $k ts -10000000"
		echo "EVALSHA $SHA_lease 1 $k 1 3600 5 1 1"
	} >"$BATS_TEST_TMPDIR/last"
	r <"$BATS_TEST_TMPDIR/cmds" >"$BATS_TEST_TMPDIR/out"
	r <"$BATS_TEST_TMPDIR/last" >"$BATS_TEST_TMPDIR/out2"
	[ "$(head -1 "$BATS_TEST_TMPDIR/out")" = 5 ]
	before=$(awk 'NR > 3 && NR % 4 == 1 { s += $1 } END { print s }' "$BATS_TEST_TMPDIR/out")
	echo "granted $before in 359 steps"
	[ "$before" = 0 ]
	[ "$(sed -n 2p "$BATS_TEST_TMPDIR/out2")" = 1 ]
}

@test "3/s leased one at a time for ~1.5 s of real time: burst + floor(3 x elapsed), within 1" {
	# The bucket holds 2 and the test takes a token every 20 ms, so it is
	# normally below one token after each call.  A stall of the test itself
	# (a loaded machine) longer than 1/3 s lets it reach the burst, and the
	# refill past that is rightly lost: no count can hold across it.  A call
	# that finds the bucket full (granted + remaining = burst; refill() sets
	# frac to 0 there) sees the state a new bucket starts in, so the count
	# starts again from that call; every clamp is seen so.  Between two
	# such calls nothing is lost or minted: granted + remaining at the last
	# call is exactly burst + floor(3 x elapsed), remaining at most 1.
	k=$(bucket)
	total=0 restarts=0 rem=0
	while :; do
		read -r g rem _ <<<"$(lease "$k" 3 1 2 1 1)"
		# the Redis time of the latest call
		stop=$(field "$k" ts)
		if ((g + rem == 2)); then
			# the first call (a bucket created full), or a stall
			[[ -n ${start:-} ]] && restarts=$((restarts + 1))
			start=$stop total=0
		fi
		total=$((total + g))
		((stop < start + 1500000)) || break
		((restarts < 20)) || break
		sleep 0.02
	done
	max=$((2 + (stop - start) * 3 / 1000000))
	echo "granted $total and $rem left over $(((stop - start) / 1000)) ms, at most $max; counted afresh $restarts times after a stall"
	((stop >= start + 1500000))
	((total + rem == max))
	((total <= max && total >= max - 1))
}

@test "a stored timestamp in the future (Redis clock stepped back) refills nothing and keeps the fraction" {
	k=$(bucket)
	now=$(redis_now_us)
	r HSET "$k" tokens 2 frac 123456789 ts $((now + 3600000000)) >/dev/null
	[ "$(lease "$k" 1000 1 50 0 1)" = "0 2 0" ]
	[ "$(field "$k" frac)" = 123456789 ]
	# Counting restarts from the earlier clock: ts no longer in the future.
	(($(field "$k" ts) <= $(redis_now_us)))
	[ "$(lease "$k" 1 3600 50 5 1 | cut -d' ' -f1-2)" = "2 0" ]
	(($(field "$k" tokens) == 0))
}

@test "a burst lowered below the stored tokens clamps them; a raised burst adds none" {
	k=$(bucket)
	lease "$k" 1 60 10 0 1 >/dev/null
	[ "$(lease "$k" 1 60 4 0 1)" = "0 4 0" ]
	[ "$(lease "$k" 1 60 20 0 1)" = "0 4 0" ]
	[ "$(lease "$k" 1 60 20 6 1 | cut -d' ' -f1-2)" = "4 0" ]
}

@test "a rate change keeps the fractional remainder (stored in rate-independent units)" {
	k=$(bucket)
	# Half a token, then 1/s for 0.5 s: exactly one token.
	now=$(redis_now_us)
	r HSET "$k" tokens 0 frac $((U / 2)) ts $((now - 500000)) >/dev/null
	[ "$(lease "$k" 1 1 10 1 1 | cut -d' ' -f1)" = 1 ]
}

@test "wait_ms is the exact time until min(want, min chunk, burst) tokens, rounded up" {
	k=$(bucket)
	far=$(($(redis_now_us) + 3600000000))
	empty() { r HSET "$k" tokens 0 frac "${1:-0}" ts $far >/dev/null; }
	# 7/m: one token every 60000/7 = 8571.43 ms.
	empty; [ "$(lease "$k" 7 60 10 1 1)" = "0 0 8572" ]
	empty; [ "$(lease "$k" 7 60 10 5 3)" = "0 0 25715" ]        # chunk 3
	empty; [ "$(lease "$k" 7 60 10 2 3)" = "0 0 17143" ]        # want 2
	empty; [ "$(lease "$k" 7 60 1 5 3)" = "0 0 8572" ]          # burst 1
	empty $((U / 2)); [ "$(lease "$k" 7 60 10 1 1)" = "0 0 4286" ]
	# Partial grant: the rest is counted from an empty bucket.
	r HSET "$k" tokens 2 frac 0 ts $far >/dev/null
	[ "$(lease "$k" 7 60 10 5 3)" = "2 0 25715" ]
	# Top rate: 1e9/s, two tokens are 2 ns away: 1 ms.
	empty; [ "$(lease "$k" 1000000000 1 100000000 5 2)" = "0 0 1" ]
	# Slowest rate and largest target: 1e8 hours.
	empty; [ "$(lease "$k" 1 3600 100000000 100000000 100000000)" = "0 0 360000000000000" ]
}

@test "after wait_ms the chunk is there, one millisecond earlier it is not" {
	# 7/m is 420 units per us; with frac 390000 the next token is exactly
	# (U - 390000) / 420 = 8570500 us away, so wait_ms must be 8571.  Each
	# pipeline empties the bucket (ts in the future: no refill, ts becomes
	# now), moves ts back by wait_ms, or by a millisecond less, and leases.
	# The time that really passes between the two leases is not up to the
	# test (a loaded machine adds to it), but Redis records both: the second
	# lease must grant exactly when the elapsed time it saw reaches the
	# token, whatever that time turned out to be.
	k=$(bucket)
	far=$(($(redis_now_us) + 3600000000))
	token_us=$(((U - 390000) / 420))
	[ $((token_us * 420)) = $((U - 390000)) ]
	for shift in 8571 8570; do
		{
			echo "HSET $k tokens 0 frac 390000 ts $far"
			echo "EVALSHA $SHA_lease 1 $k 7 60 10 1 1"
			echo "HINCRBY $k ts -${shift}000"
			echo "EVALSHA $SHA_lease 1 $k 7 60 10 1 1"
			echo "HGET $k ts"
		} | r >"$BATS_TEST_TMPDIR/$shift"
		wait_ms=$(sed -n 4p "$BATS_TEST_TMPDIR/$shift")
		[ "$wait_ms" = 8571 ]
		# wait_ms is the first whole millisecond at which the token is there
		((token_us <= wait_ms * 1000 && token_us > (wait_ms - 1) * 1000))
		granted=$(sed -n 6p "$BATS_TEST_TMPDIR/$shift")
		# ts before the second lease, and the Redis time it ran at
		elapsed=$(($(sed -n 9p "$BATS_TEST_TMPDIR/$shift") - $(sed -n 5p "$BATS_TEST_TMPDIR/$shift")))
		echo "ts moved back ${shift} ms: elapsed $elapsed us, granted $granted"
		((elapsed >= shift * 1000))
		if ((elapsed >= token_us)); then
			[ "$granted" = 1 ]
		else
			[ "$granted" = 0 ]
		fi
	done
	# after wait_ms it is there, however the machine was loaded
	[ "$(sed -n 6p "$BATS_TEST_TMPDIR/8571")" = 1 ]
}

@test "wait_ms matches the model for random states and rates" {
	RANDOM=777
	k=$(bucket)
	far=$(($(redis_now_us) + 3600000000))
	periods=(1 60 3600)
	exp=()
	for ((i = 0; i < 100; i++)); do
		p=${periods[RANDOM % 3]}
		c=$(((RANDOM * 32768 + RANDOM) % (1000000000 * p) + 1))
		((i % 2)) && c=$((RANDOM % 100 + 1))
		kk=$((c * (3600 / p)))
		b=$((RANDOM % 1000 + 1))
		want=$((RANDOM % 1500 + 1))
		chunk=$((RANDOM % 1500 + 1))
		f=$((((RANDOM * 32768 + RANDOM) * 32768 + RANDOM) % U))
		n=$want; ((chunk < n)) && n=$chunk; ((b < n)) && n=$b
		exp+=("0 0 $(ms_model "$n" "$f" "$kk") ($c/$p b=$b want=$want chunk=$chunk f=$f)")
		# An empty bucket whose ts is in the future: no refill at all.
		echo "HSET $k tokens 0 frac $f ts $far"
		echo "EVALSHA $SHA_lease 1 $k $c $p $b $want $chunk"
	done >"$BATS_TEST_TMPDIR/cmds"
	r <"$BATS_TEST_TMPDIR/cmds" | paste -d' ' - - - - >"$BATS_TEST_TMPDIR/out"
	i=0
	while read -r _ g rem w; do
		[ "$g $rem $w" = "${exp[i]%% (*}" ] ||
			{ echo "case $i ${exp[i]#* (}: got $g $rem $w, model ${exp[i]%% (*}"; return 1; }
		i=$((i + 1))
	done <"$BATS_TEST_TMPDIR/out"
	[ "$i" = 100 ]
}

@test "an idle bucket expires when it would be full again (plus 1 s), and reappears full" {
	k=$(bucket)
	t0=$(redis_now_us)
	lease "$k" 7 60 10 10 1 >/dev/null
	t1=$(redis_now_us)
	full=$(ms_model 10 "$(field "$k" frac)" 420)
	echo "full in $full ms"
	expires_in "$k" $((full + 1000)) "$t0" "$t1"
	# A full bucket needs no state: it goes after the margin alone.  (The
	# expiry is read in the lease's transaction: the key is still there
	# however long the machine stalls.)
	k2=$(bucket b)
	t0=$(redis_now_us)
	mapfile -t o < <(atomically "EVALSHA $SHA_lease 1 $k2 7 60 10 0 1" "PEXPIRETIME $k2")
	[ "${o[*]:0:3}" = "0 10 0" ]
	expiry_within "$k2" "${o[3]}" 1000 "$t0" "${o[4]}"
	k3=$(bucket c)
	t0=$(redis_now_us)
	mapfile -t o < <(atomically "EVALSHA $SHA_lease 1 $k3 1000 1 5 5 1" "HGET $k3 frac" \
		"PEXPIRETIME $k3")
	[ "${o[*]:0:3}" = "5 0 0" ]
	full=$(ms_model 5 "${o[3]}" 3600000)
	[ "$full" = 5 ]
	expiry_within "$k3" "${o[4]}" $((full + 1000)) "$t0" "${o[5]}"
	sleep 1.1
	[ "$(r EXISTS "$k3")" = 0 ]
	[ "$(lease "$k3" 1000 1 5 5 1)" = "5 0 0" ]
}

@test "bad ARGV is rejected with an error and never grants or writes" {
	k=$(bucket)
	bad=(
		"x 1 10 1 1" "-1 1 10 1 1" "0 1 10 1 1" "1.5 1 10 1 1" "1e3 1 10 1 1"
		"0x10 1 10 1 1" "1000000001 1 10 1 1" "3600000000001 3600 10 1 1"
		"10 2 10 1 1" "10 0 10 1 1" "10 s 10 1 1"
		"10 1 0 1 1" "10 1 100000001 1 1" "10 1 ten 1 1"
		"10 1 10 -1 1" "10 1 10 100000001 1" "10 1 10 abc 1" "10 1 10 2.0 1"
		"10 1 10 1 0" "10 1 10 1 -5" "10 1 10 1 z"
		"10 1 10 1" "10 1 10" ""
	)
	for a in "${bad[@]}"; do
		# shellcheck disable=SC2086
		out=$(r EVALSHA "$SHA_lease" 1 "$k" $a 2>&1)
		[[ $out == *"ERR rlgate: bad "* ]] || { echo "ARGV '$a' gave: $out"; return 1; }
	done
	[ "$(r EXISTS "$k")" = 0 ]
	run r EVALSHA "$SHA_lease" 1 "$k" 10 1 10 " 1" 1
	[[ $output == *"bad want"* ]]
	run r EVALSHA "$SHA_lease" 0 10 1 10 1 1
	[[ $output == *"ERR rlgate: lease takes 1 key"* ]]
	# The top of each range is accepted.
	[ "$(lease "$k" 3600000000000 3600 100000000 100000000 100000000)" = "100000000 0 0" ]
}

@test "8 concurrent leasers for 3 s get exactly what refilled over Redis's elapsed time, never more" {
	k=$(bucket)
	# A burst no run refills (about 6 days at 200/s): the bucket is never
	# full, so no refill is clamped away, however late the workers run.
	rate=200 burst=100000000
	read -r g0 _ _ <<<"$(lease "$k" $rate 1 $burst $burst 5)"
	[ "$g0" = $burst ]
	[ "$(field "$k" tokens) $(field "$k" frac)" = "0 0" ]
	ts0=$(field "$k" ts)
	end=$((ts0 + 3000000))
	worker() {
		local i
		# at least one round of 20 calls each, whenever it gets to run
		while :; do
			for ((i = 0; i < 20; i++)); do
				echo "EVALSHA $SHA_lease 1 $k $rate 1 $burst 5 5"
			done | r | awk 'NR % 3 == 1' >>"$BATS_TEST_TMPDIR/w$1"
			(($(redis_now_us) < end)) || break
		done
	}
	pids=()
	for w in 1 2 3 4 5 6 7 8; do
		worker $w &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done
	lease "$k" $rate 1 $burst 0 5 >/dev/null
	ts1=$(field "$k" ts)
	left=$(field "$k" tokens)
	got=$(cat "$BATS_TEST_TMPDIR"/w* | awk '{ s += $1 } END { print s }')
	added=$(((ts1 - ts0) * rate / 1000000))
	calls=$(cat "$BATS_TEST_TMPDIR"/w* | wc -l)
	echo "granted $got + left $left, refilled $added over $((ts1 - ts0)) us, $calls calls"
	((calls >= 8 * 20))
	((got > 0 && got <= added))
	# Conservation: nothing lost or minted across $calls interleaved calls.
	((got + left == added))
}

@test "a leaser that sleeps wait_ms finds its chunk after each sleep: one or two calls per chunk, not one per token" {
	k=$(bucket)
	# A burst no run refills: nothing is clamped away, however late the
	# loop runs (the wait is for min(want, chunk, burst) = 10 all the same).
	burst=100000000
	lease "$k" 100 1 $burst $burst 10 >/dev/null
	ts0=$(field "$k" ts)
	calls=0 total=0 slept=0
	# ~1 s of Redis time, and at least until a chunk came
	while (($(redis_now_us) < ts0 + 1000000 || total < 10)); do
		read -r g _ w <<<"$(lease "$k" 100 1 $burst 10 10)"
		calls=$((calls + 1)) total=$((total + g))
		# after a sleep of wait_ms the chunk is there, however late the
		# sleep ends (nobody else leases from this bucket)
		if ((slept)) && [ "$g" != 10 ]; then
			echo "call $calls after a sleep of wait_ms: granted $g, not the chunk of 10"
			return 1
		fi
		slept=0
		((w > 0)) && { sleep "$(printf '%d.%03d' $((w / 1000)) $((w % 1000)))"; slept=1; }
	done
	lease "$k" 100 1 $burst 0 10 >/dev/null
	ts1=$(field "$k" ts)
	left=$(field "$k" tokens)
	added=$(((ts1 - ts0) * 100 / 1000000))
	echo "$calls calls for $total tokens, left $left, refilled $added"
	((total + left == added))
	# a call that finds less than a chunk sleeps, and the next one gets a
	# whole chunk: at most two calls per chunk granted, and one more
	((calls <= 2 * (total / 10) + 1))
}
