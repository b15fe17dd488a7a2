#!/usr/bin/env bats
# verify syncookie in fleet mode: two hosts leasing one tenant's budget from
# Redis, a flood of forged SYNs from the tenant's prefix at 50 times its rate
# on one of them, a real client at half the rate spread over both.  The flood
# spends none of the fleet's tokens: every request is answered, on either
# host, and the hosts together accept no more than the limit allows.

load helpers
load agent_helpers
load fleet_helpers
load verify_helpers

FLEET_SERVERS=2
FLEET_AGENTS=2

setup_file() {
	fleet_setup_file || return
	[[ -n ${E2E_SKIP:-} ]] && return 0
	for h in s1 s2; do
		in_ns "$h" sysctl -qw net.ipv4.tcp_syncookies=2
		verify_http_start "$h"
	done
}

teardown_file() {
	verify_http_stop s1
	verify_http_stop s2
	fleet_teardown_file
}

setup() { fleet_setup; }
teardown() {
	flood_stop
	fleet_teardown
}

# verified_fleet FAMILY: the tenant on both hosts, the flood at s1, the
# real client at 5/s to each host for 3 s (half the limit in all).
verified_fleet() {
	local fam=$1 b1 b2 a1 a2 ok1 ok2 syns pid out=$BATS_TEST_TMPDIR/c2.json

	fleet_tenant_set 1 web --rate 20/s --burst 5 --match "$(prefixes c1)" \
		--port "$HTTP_PORT" --verify syncookie
	fleet_wait_tenant web 2 >/dev/null
	sleep 1
	b1=$(server_conns s1 "$BATS_FILE_TMPDIR")
	b2=$(server_conns s2 "$BATS_FILE_TMPDIR")
	syns=$(fleet_metric 1 rlgate_verify_syn_total)

	flood_bg s1 "$fam" 1000 4
	sleep 0.5
	# 5 requests a second to each host for 3 s: half the limit in all
	in_ns c1 /usr/bin/python3 "$BATS_TEST_DIRNAME/verify_client.py" \
		"$(lab_addr s2 "$fam")" "$HTTP_PORT" 5 3 >"$out" &
	pid=$!
	client_run s1 "$fam" 5 3
	wait "$pid"
	wait "$FLOOD_PID"
	FLOOD_PID=
	echo "client to s2: $(cat "$out")"
	ok1=$(jq -r .ok <<<"$CLIENT_JSON")
	ok2=$(jq -r .ok "$out")
	expect_eq "requests answered by s1 (of 15)" "$ok1" 15
	expect_eq "requests answered by s2 (of 15)" "$ok2" 15
	a1=$(server_conns s1 "$BATS_FILE_TMPDIR")
	a2=$(server_conns s2 "$BATS_FILE_TMPDIR")
	expect_eq "connections the servers accepted" $((a1 - b1 + a2 - b2)) 30
	expect_eq "refused on the fleet" "$(fleet_sum web denied)" 0
	expect_between "forged SYNs passed to cookies on s1" \
		$(($(fleet_metric 1 rlgate_verify_syn_total) - syns)) 3500 4100
}

@test "fleet, IPv4: forged SYNs at 50x the rate on one host spend none of the fleet's tokens; a real client on both hosts gets every answer" {
	verified_fleet 4
}

@test "fleet, IPv6: forged SYNs at 50x the rate on one host spend none of the fleet's tokens; a real client on both hosts gets every answer" {
	verified_fleet 6
}
