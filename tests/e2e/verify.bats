#!/usr/bin/env bats
# verify syncookie against a real server: a flood of SYNs from forged
# sources inside a tenant's prefix, at 50 times its rate, while a real
# client of the same tenant makes HTTP requests at half the rate.  Charged
# at the SYN, the flood locks the client out; verified, the flood costs
# nothing, the client gets its answers and the server no more connections
# than the limit allows, with the options its client negotiated.

load helpers
load agent_helpers

HTTP_PORT=8081

setup() {
	agent_setup
	in_ns s1 sysctl -qw net.ipv4.tcp_syncookies=2
	HTTP_LOG=$BATS_TEST_TMPDIR/http.log
	: >"$HTTP_LOG"
	in_ns s1 /usr/bin/python3 "$BATS_TEST_DIRNAME/verify_server.py" "$HTTP_PORT" "$HTTP_LOG" \
		2>"$BATS_TEST_TMPDIR/http.err" 3>&- &
	HTTP_PID=$!
	for ((i = 0; i < 100; i++)); do
		grep -q listening "$BATS_TEST_TMPDIR/http.err" && break
		sleep 0.05
	done
	grep -q listening "$BATS_TEST_TMPDIR/http.err"
	S1_MAC=$(ip -n "$(lab_ns s1)" -j link show dev eth0 | jq -r '.[0].address')
}

teardown() {
	[[ -n ${FLOOD_PID:-} ]] && { kill "$FLOOD_PID" 2>/dev/null; wait "$FLOOD_PID" 2>/dev/null; }
	[[ -n ${HTTP_PID:-} ]] && { kill "$HTTP_PID" 2>/dev/null; wait "$HTTP_PID" 2>/dev/null; }
	agent_teardown
}

# flood_bg FAMILY RATE SECONDS: forged SYNs from c1's prefix (never c1's own
# address) to s1's HTTP port, in the background (FLOOD_PID, report in
# FLOOD_OUT).
flood_bg() {
	local net=$(client_prefix c1)

	[[ $1 == 6 ]] && net=2001:db8:1:0:1::/80
	FLOOD_OUT=$BATS_TEST_TMPDIR/flood.json
	in_ns c1 /usr/bin/python3 "$BATS_TEST_DIRNAME/syn_flood.py" eth0 "$S1_MAC" \
		"$(lab_addr s1 "$1")" "$HTTP_PORT" "$net" "$(lab_addr c1 "$1")" "$2" "$3" \
		>"$FLOOD_OUT" 3>&- &
	FLOOD_PID=$!
}

# client_run FAMILY RATE SECONDS: the real client in c1; its report in
# CLIENT_JSON.
client_run() {
	local host

	host=$(lab_addr s1 "$1")
	CLIENT_JSON=$(in_ns c1 /usr/bin/python3 "$BATS_TEST_DIRNAME/verify_client.py" \
		"$host" "$HTTP_PORT" "$2" "$3")
	echo "client: $CLIENT_JSON"
}

# server_conns: connections the HTTP server accepted so far.
server_conns() {
	wc -l <"$HTTP_LOG"
}

# flood_round FAMILY: 1,000 forged SYNs a second for 5 s, the real client
# at 10 requests a second for 4 s from the second half second on.
flood_round() {
	flood_bg "$1" 1000 5
	sleep 0.5
	client_run "$1" 10 4
	wait "$FLOOD_PID"
	FLOOD_PID=
	echo "flood: $(cat "$FLOOD_OUT")"
	expect_between "forged SYNs sent" "$(jq -r .sent "$FLOOD_OUT")" 4500 5001
}

# lock_out_then_verify FAMILY
lock_out_then_verify() {
	local fam=$1 ok before after denied

	agent_start
	rl tenant set web --rate 20/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT"

	# Charged at the SYN: the flood takes the tokens.  Not all of them:
	# the client's retransmitted SYNs leave on a timer tick, just after the
	# bucket's coarse clock has moved on and a token has come due, so they
	# win more often than their share (about half the requests get
	# through here, against 1 in 50 by numbers alone).
	denied=$(stat_get web denied)
	flood_round "$fam"
	ok=$(jq -r .ok <<<"$CLIENT_JSON")
	expect_between "real requests answered without verify (of 40)" "$ok" 0 30
	expect_between "SYNs refused without verify" $(($(stat_get web denied) - denied)) 4000 5100

	rl tenant set web --verify syncookie
	before=$(server_conns)
	denied=$(stat_get web denied)
	flood_round "$fam"
	after=$(server_conns)
	expect_eq "refused with verify" $(($(stat_get web denied) - denied)) 0
	ok=$(jq -r .ok <<<"$CLIENT_JSON")
	# >= 99 % of 40: all of them
	expect_eq "real requests answered with verify (of 40)" "$ok" 40
	# the limit allows 20/s x 5 s + 5; only the real client got through
	expect_eq "connections the server accepted" $((after - before)) 40
	expect_between "SYNs passed to cookies" \
		"$(metric_value rlgate_verify_syn_total "$(metrics s1)")" 4540 5100
}

@test "IPv4: forged SYNs at 50x the rate lock a real client out when charged at the SYN; with --verify syncookie all 40 of its requests are answered and the server accepts only those" {
	lock_out_then_verify 4
}

@test "IPv6: forged SYNs at 50x the rate lock a real client out when charged at the SYN; with --verify syncookie all 40 of its requests are answered and the server accepts only those" {
	lock_out_then_verify 6
}
