#!/usr/bin/env bats
# The attach modes other than native XDP, for drivers where it cannot run:
# generic XDP (--mode skb) and tc ingress (--mode tc) enforce the same limit,
# refuse by drop and by RST, over IPv4 and IPv6, and say how they attached.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

# burst_then_refuse MODE FAMILY ACTION: burst 5 and a negligible refill,
# 20 SYNs in one second: 5 connect, 15 are refused as ACTION says.
burst_then_refuse() {
	local mode=$1 fam=$2 action=$3

	agent_start --mode "$mode"
	expect_eq "attach mode in rlctl status" \
		"$(rl --json status | jq -r '.interfaces[0].attach')" "$mode"
	rl tenant set m --rate 1/h --burst 5 --match "$(prefixes c1)" --action "$action"
	run_loadgen_json c1 --rate 20 --duration 1 --timeout 500 \
		"$(lab_target s1 "$PORT" "$fam")"
	expect_eq attempts "$(json_get .total.attempts)" 20
	# the program admits exactly the burst; on a loaded machine one of the
	# admitted handshakes can outlast the client's 500 ms (the server's
	# neighbour lookup, a slow accept), so the client may see one fewer
	expect_eq "rlctl stats admitted" "$(stat_get m admitted)" 5
	expect_between connected "$(json_get .total.connected)" 4 5
	if [[ $action == rst ]]; then
		expect_eq "refused (RST at the client)" "$(json_get .total.refused)" 15
		expect_eq "rlctl stats rst_sent" "$(stat_get m rst_sent)" 15
	else
		expect_eq refused "$(json_get .total.refused)" 0
	fi
	expect_eq "timed out" "$(json_get .total.timed_out)" \
		$((20 - $(json_get .total.connected) - $(json_get .total.refused)))
	expect_eq "rlctl stats denied" "$(stat_get m denied)" 15
}

@test "generic XDP (--mode skb), IPv4: burst admitted, then RST" {
	burst_then_refuse skb 4 rst
}

@test "generic XDP (--mode skb), IPv6: burst admitted, then dropped" {
	burst_then_refuse skb 6 drop
}

@test "tc ingress (--mode tc), IPv4: burst admitted, then RST" {
	burst_then_refuse tc 4 rst
}

@test "tc ingress (--mode tc), IPv6: burst admitted, then RST" {
	burst_then_refuse tc 6 rst
}

@test "tc ingress (--mode tc), IPv4: burst admitted, then dropped" {
	burst_then_refuse tc 4 drop
}
