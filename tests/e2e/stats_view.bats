#!/usr/bin/env bats
# What `rlctl stats` and `detach` tell an operator: the configured limit
# beside the rates, and rates that are what was admitted and denied over
# the window they state - the latest second included - so a burst that just
# happened is in them at once; a detach of the wrong interface names the
# right ones.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

@test "rlctl stats: the limit beside the rates, and a burst just admitted is in the rate over the stated window at once" {
	local start end st admitted denied window rate drate try

	agent_start
	for try in 1 2 3; do
		# a tenant anew each try: its burst whole again
		[[ $try -eq 1 ]] || rl tenant del web
		rl tenant set web --rate 1/h --burst 12 --match "$(prefixes c1)" --port "$PORT"
		# quiet for longer than the window: the oldest sample kept
		# is older than any connection below
		sleep 5
		start=$(date +%s%N)
		run_loadgen_json c1 --rate 100 --duration 0.2 --timeout 500 \
			"$(lab_target s1 "$PORT" 4)"
		st=$(rl --json stats web)
		end=$(date +%s%N)
		# a window of 3 s and more holds the whole burst unless the
		# machine took that long between its start and the answer
		((end - start < 2500000000)) && break
		echo "try $try took $(((end - start) / 1000000)) ms: again" >&2
	done
	echo "$st"
	admitted=$(jq '.[0].admitted' <<<"$st")
	denied=$(jq '.[0].denied' <<<"$st")
	window=$(jq '.[0].rate_window_s' <<<"$st")
	rate=$(jq '.[0].admit_rate' <<<"$st")
	drate=$(jq '.[0].deny_rate' <<<"$st")
	expect_eq "limit in stats" "$(jq -r '.[0].rate + "," + (.[0].burst | tostring)' <<<"$st")" "1/h,12"
	expect_eq "admitted" "$admitted" 12
	expect_eq "denied" "$denied" $(($(json_get .total.attempts) - 12))
	expect_between "rate window (s)" "$window" 3 4.5
	# admitted over the window, this burst whole: rate x window
	expect_between "admit_rate x window" "$(awk -v r="$rate" -v w="$window" 'BEGIN { print r * w }')" 11.99 12.01
	expect_between "deny_rate x window" "$(awk -v r="$drate" -v w="$window" 'BEGIN { print r * w }')" \
		"$(awk -v d="$(json_get .total.attempts)" 'BEGIN { print d - 12 - 0.01 }')" \
		"$(awk -v d="$(json_get .total.attempts)" 'BEGIN { print d - 12 + 0.01 }')"
	run rl stats web
	[[ $status -eq 0 ]] || { echo "rlctl stats exited $status" >&2; return 1; }
	[[ ${lines[0]} == "TENANT"*"LIMIT"*"ADMIT/S"* && ${lines[1]} == "web "*" 1/h,12 "* ]] ||
		{ echo "no limit beside the rates: $output" >&2; return 1; }
	[[ $output == *"per second over the last "[34].?" s"* ]] || { echo "no window stated: $output" >&2; return 1; }
}

@test "rlctl detach of an interface the agent is not on exits 2 naming the interfaces it is on, and detaches nothing" {
	agent_start
	run rl detach eth9
	[[ $status -eq 2 && $output == *"interface 'eth9' is not attached; attached: eth0 (native)"* ]] ||
		{ echo "rlctl detach eth9: exit $status, '$output'" >&2; return 1; }
	xdp_attached || { echo "eth0 lost its program" >&2; return 1; }
}
