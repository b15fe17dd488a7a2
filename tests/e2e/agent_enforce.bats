#!/usr/bin/env bats
# rlagent enforcing tenant limits set with rlctl on a real interface: the
# server's veth in a lab, real connections from client hosts, counted on the
# client side (loadgen) and compared with the agent's own stats.
#
# e2e: parallel - one agent, no Redis: what it admits follows the kernel's
# token bucket and the client's clock, so it may run beside another file
# (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

# limit_holds FAMILY: rate 50/s burst 10 offered 150/s for 4 s from c1; the
# client sees rate x duration + burst admitted (within 5 %), the rest
# refused by RST, and the agent's counters agree with the client.
limit_holds() {
	local fam=$1 want connected refused

	agent_start
	rl tenant set web --rate 50/s --burst 10 --match "$(prefixes c1)" --action rst
	run_loadgen_json c1 --rate 150 --duration 4 "$(lab_target s1 "$PORT" "$fam")"
	expect_eq attempts "$(json_get .total.attempts)" 600
	want=$(expected 50 4 10)
	connected=$(json_get .total.connected)
	refused=$(json_get .total.refused)
	expect_near "admitted (client: connected)" "$connected" "$want" 5
	expect_eq "refused + connected" $((refused + connected)) 600
	expect_eq timed_out "$(json_get .total.timed_out)" 0
	# the agent counted what the client saw
	expect_between "rlctl stats admitted" "$(stat_get web admitted)" \
		$((connected - 2)) $((connected + 2))
	expect_between "rlctl stats denied" "$(stat_get web denied)" \
		$((refused - 2)) $((refused + 2))
}

@test "IPv4: 50/s burst 10 offered 150/s for 4 s admits rate x duration + burst (5 %); stats agree" {
	limit_holds 4
}

@test "IPv6: 50/s burst 10 offered 150/s for 4 s admits rate x duration + burst (5 %); stats agree" {
	limit_holds 6
}

@test "action drop: refused clients time out; switched to rst: refused at once" {
	agent_start
	rl tenant set act --rate 1/h --burst 5 --match "$(prefixes c1)" --action drop
	run_loadgen_json c1 --rate 20 --duration 1 --timeout 500 "$(lab_target s1 "$PORT" 4)"
	expect_eq "drop: connected" "$(json_get .total.connected)" 5
	expect_eq "drop: timed_out" "$(json_get .total.timed_out)" 15
	expect_eq "drop: refused" "$(json_get .total.refused)" 0

	rl tenant set act --action rst
	run_loadgen_json c1 --rate 20 --duration 1 --timeout 500 "$(lab_target s1 "$PORT" 4)"
	expect_eq "rst: connected" "$(json_get .total.connected)" 0
	expect_eq "rst: refused" "$(json_get .total.refused)" 20
	expect_eq "rst: timed_out" "$(json_get .total.timed_out)" 0

	expect_eq "stats admitted" "$(stat_get act admitted)" 5
	expect_eq "stats denied" "$(stat_get act denied)" 35
}

@test "shadow mode admits every connection and counts would-deny in stats and metrics" {
	local want

	agent_start
	rl tenant set sh --rate 10/s --burst 5 --match "$(prefixes c1)" --action rst --shadow
	run_loadgen_json c1 --rate 100 --duration 2 "$(lab_target s1 "$PORT" 4)"
	expect_eq "connected (every attempt)" "$(json_get .total.connected)" 200
	expect_eq refused "$(json_get .total.refused)" 0
	expect_eq timed_out "$(json_get .total.timed_out)" 0

	want=$((200 - $(expected 10 2 5)))
	expect_near "stats shadow_denied" "$(stat_get sh shadow_denied)" "$want" 5
	expect_eq "stats denied" "$(stat_get sh denied)" 0
	expect_eq "metric rlgate_shadow_denied_total" \
		"$(metric_get rlgate_shadow_denied_total sh)" "$(stat_get sh shadow_denied)"
}

@test "tenant set on a running agent: a raised limit admits within 1 s, a lowered one refuses within 1 s" {
	agent_start
	# all but shut: one connection an hour
	rl tenant set live --rate 1/h --burst 1 --match "$(prefixes c1)" --action rst
	run_loadgen_json c1 --rate 50 --duration 1 "$(lab_target s1 "$PORT" 4)"
	expect_between "1/h burst 1: connected" "$(json_get .total.connected)" 0 1

	# raised: every connection from the second second on (at the latest)
	# must be admitted
	rl tenant set live --rate 1000/s --burst 100
	run_loadgen_json c1 --rate 100 --duration 2 "$(lab_target s1 "$PORT" 4)"
	expect_between "raised to 1000/s: connected of 200" "$(json_get .total.connected)" 100 200

	# lowered again: after one second nothing more gets through
	rl tenant set live --rate 1/h --burst 1
	run_loadgen_json c1 --rate 100 --duration 2 "$(lab_target s1 "$PORT" 4)"
	expect_between "lowered to 1/h: connected of 200" "$(json_get .total.connected)" 0 101
}

@test "two tenants on c1's and c2's prefixes are limited independently (IPv4 and IPv6 at once)" {
	local out1=$BATS_TEST_TMPDIR/c1.json out2=$BATS_TEST_TMPDIR/c2.json pid1 pid2 c1n c2n lim

	agent_start
	rl tenant set slow --rate 20/s --burst 5 --match "$(prefixes c1)" --action rst
	rl tenant set fast --rate 60/s --burst 10 --match "$(prefixes c2)" --action rst
	loadgen_bg c1 "$out1" --rate 100 --duration 3 "$(lab_target s1 "$PORT" 4)"
	pid1=$LOADGEN_BG_PID
	loadgen_bg c2 "$out2" --rate 100 --duration 3 "$(lab_target s1 "$PORT" 6)"
	pid2=$LOADGEN_BG_PID

	# What each bucket may admit over the load's real duration: never more;
	# at least 90 % of it (a client the loaded machine stalls offers less).
	loadgen_wait "$pid1" "$out1"
	c1n=$(json_get .total.connected)
	expect_offered 300
	lim=$(awk -v e="$(json_get .elapsed_s)" 'BEGIN { print int(20 * e + 5) + 1 }')
	expect_between "c1 (tenant slow, 20/s burst 5) connected" "$c1n" \
		"$(awk -v l="$lim" 'BEGIN { print int(0.9 * (l - 1)) }')" "$lim"
	loadgen_wait "$pid2" "$out2"
	c2n=$(json_get .total.connected)
	expect_offered 300
	lim=$(awk -v e="$(json_get .elapsed_s)" 'BEGIN { print int(60 * e + 10) + 1 }')
	expect_between "c2 (tenant fast, 60/s burst 10) connected" "$c2n" \
		"$(awk -v l="$lim" 'BEGIN { print int(0.9 * (l - 1)) }')" "$lim"

	expect_between "stats slow admitted" "$(stat_get slow admitted)" $((c1n - 2)) $((c1n + 2))
	expect_between "stats fast admitted" "$(stat_get fast admitted)" $((c2n - 2)) $((c2n + 2))
}
