#!/usr/bin/env bats
# Whether the RSTs rlgate sends back reach clients: a veth in native mode
# delivers a frame sent with XDP_TX only while its peer runs an XDP program
# (or has GRO on).  The agent warns once at attach and `rlctl status` says
# so for as long as it holds, and the traffic shows the warning is true.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers

setup() { agent_setup; }
teardown() { agent_teardown; }

# fail MESSAGE: fails the test, saying why.
fail() {
	echo "$*" >&2
	return 1
}

WARNING='do not reach clients: a veth whose peer runs no XDP program'

# peer_xdp on|off: the pass-all program on s1's peer, the switch's port s1
# (tools/lab.sh attaches it; a plain veth pair has none).
peer_xdp() {
	if [[ $1 == on ]]; then
		ip -n "$(lab_ns sw)" link set dev s1 xdpdrv obj "$RLGATE_BUILD/pass.bpf.o" sec xdp
	else
		ip -n "$(lab_ns sw)" link set dev s1 xdpdrv off
	fi
}

# refuse_ten: a tenant for c1 with a burst of 2 and a negligible refill,
# ten SYNs from c1 in one second: 2 admitted, 8 refused by RST.
refuse_ten() {
	rl tenant set r --rate 1/h --burst 2 --match "$(prefixes c1)" --action rst
	run_loadgen_json c1 --rate 10 --duration 1 --timeout 500 \
		"$(lab_target s1 "$PORT" 4)"
	expect_eq attempts "$(json_get .total.attempts)" 10
	expect_eq "rlctl stats denied" "$(stat_get r denied)" 8
	# the program counts every RST it hands to the driver, delivered or not
	expect_eq "rlctl stats rst_sent" "$(stat_get r rst_sent)" 8
}

@test "a veth whose peer runs no XDP program: one warning at attach, rlctl status says RSTs are lost, and clients time out" {
	peer_xdp off
	agent_start
	expect_eq "warnings in the log" "$(grep -c "warn: RSTs sent on 'eth0' $WARNING" "$AGENT_LOG")" 1
	expect_eq "status rst" "$(rl --json status | jq -r '.interfaces[0].rst')" lost
	run rl status
	[[ $status -eq 0 ]] || fail "rlctl status exited $status"
	[[ $output == *"warning:     RSTs sent on eth0 $WARNING"* ]] ||
		fail "no warning in rlctl status: $output"
	[[ $output == *"--mode skb"* ]] || fail "the warning does not say what to do: $output"
	refuse_ten
	expect_eq "refused by a RST at the client" "$(json_get .total.refused)" 0
	expect_eq "timed out" "$(json_get .total.timed_out)" 8
}

@test "the peer gains an XDP program: rlctl status says RSTs are delivered without a restart, and they arrive" {
	peer_xdp off
	agent_start
	expect_eq "status rst before" "$(rl --json status | jq -r '.interfaces[0].rst')" lost
	peer_xdp on
	expect_eq "status rst after" "$(rl --json status | jq -r '.interfaces[0].rst')" delivered
	expect_eq "status rst_warning after" \
		"$(rl --json status | jq -r '.interfaces[0].rst_warning // "none"')" none
	run rl status
	[[ $output != *warning:* ]] || fail "rlctl status still warns: $output"
	refuse_ten
	expect_eq "refused by a RST at the client" "$(json_get .total.refused)" 8
}

@test "the lab's veth, whose peer runs XDP: no warning at attach or in rlctl status" {
	agent_start
	expect_eq "warnings in the log" "$(grep -c 'RSTs sent on' "$AGENT_LOG")" 0
	expect_eq "status rst" "$(rl --json status | jq -r '.interfaces[0].rst')" delivered
}

@test "generic XDP (--mode skb) on a veth whose peer runs no XDP program: no warning, and RSTs arrive" {
	peer_xdp off
	agent_start --mode skb
	expect_eq "warnings in the log" "$(grep -c 'RSTs sent on' "$AGENT_LOG")" 0
	expect_eq "status rst" "$(rl --json status | jq -r '.interfaces[0].rst')" delivered
	refuse_ten
	expect_eq "refused by a RST at the client" "$(json_get .total.refused)" 8
}
