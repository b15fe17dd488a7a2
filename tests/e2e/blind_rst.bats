#!/usr/bin/env bats
# A blind RST flood against real retransmissions: RSTs from forged
# addresses and ports of a tenant's prefix, to the server's port, none of
# them a socket of the server's, while a real client's SYN is lost past the
# limiter and retransmitted by its kernel.  Among them are forged 4-tuples
# whose end lands at the client's own place of flow_ends, as a flood of
# about 130,000 RSTs a second puts some at every place.  The server ignores
# them all; so must the limiter: the retransmission stays free.
#
# e2e: parallel - one agent, no Redis, a bucket that never refills: exact
# counts.

load helpers
load agent_helpers

PYTHON=/usr/bin/python3

setup() {
	agent_setup
	e2e_require_build drop_alternate_syn.bpf.o
	agent_start
	# One CPU for every frame from c1, as in hostile.bats: the flow cache is
	# per CPU, and a retransmission must meet its SYN's slot.
	ip netns exec "$(lab_ns sw)" sh -c 'echo 1 >/sys/class/net/c1/queues/rx-0/rps_cpus'
	# After XDP, before the server's stack: every second SYN is lost.
	in_ns s1 tc qdisc show dev eth0 | grep -q clsact ||
		in_ns s1 tc qdisc add dev eth0 clsact
	in_ns s1 tc filter add dev eth0 ingress bpf direct-action \
		obj "$RLGATE_BUILD/drop_alternate_syn.bpf.o" sec tc
}

teardown() { agent_teardown; }

# flood_against_retransmission FAMILY
flood_against_retransmission() {
	local fam=$1 mac net out

	# two tokens that never come back: the first connection's and the
	# second's; a retransmission charged finds none
	rl tenant set real --rate 1/h --burst 2 --match "$(prefixes c1)" --port "$PORT" \
		--action drop
	# the first connection: its SYN is the one the path lets through
	in_ns c1 "$PYTHON" -c 'import socket, sys
socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()' \
		"$(lab_addr s1 "$fam")" "$PORT"
	if [[ $fam == 4 ]]; then net=$(client_prefix c1); else net=2001:db8:1:0:1::/80; fi
	mac=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].address')
	out=$(in_ns c1 "$PYTHON" "$BATS_TEST_DIRNAME/blind_rst.py" eth0 "$mac" \
		"$(lab_addr s1 "$fam")" "$PORT" "$net" 41000 5000)
	echo "client and flood: $out"
	rl --json stats real
	expect_between "forged RSTs at the client's place" "$(jq -r .at_place <<<"$out")" 2 1000
	expect_eq "forged RSTs" "$(jq -r .forged <<<"$out")" 5000
	expect_eq "the second connection" "$(jq -r .connected <<<"$out")" true
	expect_eq "stats retransmits" "$(stat_get real retransmits)" 1
	expect_eq "stats admitted (2 connections + 1 retransmission)" "$(stat_get real admitted)" 3
	expect_eq "stats denied" "$(stat_get real denied)" 0
}

@test "IPv4: a blind RST flood with forged 4-tuples, some at the client's own place of flow_ends, leaves a real SYN retransmission free" {
	flood_against_retransmission 4
}

@test "IPv6: a blind RST flood with forged 4-tuples, some at the client's own place of flow_ends, leaves a real SYN retransmission free" {
	flood_against_retransmission 6
}
