#!/usr/bin/env bats
# verify syncookie against a real server: a flood of SYNs from forged
# sources inside a tenant's prefix, at 50 times its rate, while a real
# client of the same tenant makes HTTP requests at half the rate.  Charged
# at the SYN, the flood locks the client out; verified, the flood costs
# nothing, the client gets its answers and the server no more connections
# than the limit allows, with the options its client negotiated.  With
# syncookie-answer rlgate sends the cookie SYN-ACKs itself: the flood
# costs the server's kernel nothing either.
#
# e2e: parallel - one agent, no Redis: what it admits follows the kernel's
# token bucket and the client's clock, so it may run beside another file
# (tools/run-tests.sh).

load helpers
load agent_helpers
load verify_helpers

setup() {
	agent_setup
	in_ns s1 sysctl -qw net.ipv4.tcp_syncookies=2
	verify_http_start s1
	HTTP_LOG=$BATS_TEST_TMPDIR/http-s1.log
}

teardown() {
	flood_stop
	verify_http_stop s1
	agent_teardown
}

# flood_round FAMILY: 1,000 forged SYNs a second for 5 s, the real client
# at 10 requests a second for 4 s from the second half second on.
flood_round() {
	flood_bg s1 "$1" 1000 5
	sleep 0.5
	client_run s1 "$1" 10 4
	wait "$FLOOD_PID"
	FLOOD_PID=
	echo "flood: $(cat "$FLOOD_OUT")"
	expect_between "forged SYNs sent" "$(jq -r .sent "$FLOOD_OUT")" 4500 5001
	[[ $1 == 4 ]] || expect_few_neighbours s1
}

# expect_verified_round BEFORE DENIED: after a flood_round of a verifying
# tenant (the server had accepted BEFORE connections, the tenant refused
# DENIED), nothing refused, every request of the real client answered, and
# the server accepted those alone.
expect_verified_round() {
	expect_eq "refused with verify" $(($(stat_get web denied) - $2)) 0
	# >= 99 % of 40: all of them
	expect_eq "real requests answered with verify (of 40)" "$(jq -r .ok <<<"$CLIENT_JSON")" 40
	# the limit allows 20/s x 5 s + 5; only the real client got through
	expect_eq "connections the server accepted" $(($(server_conns s1) - $1)) 40
}

# lock_out_then_verify FAMILY
lock_out_then_verify() {
	local fam=$1 ok before denied

	agent_start
	rl tenant set web --rate 20/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT"

	# Charged at the SYN: the flood takes the tokens.  Not all of them:
	# the client's retransmitted SYNs leave on a timer tick, just after the
	# bucket's coarse clock has moved on and a token has come due, so they
	# win more often than their share (about half the requests get
	# through here, against 1 in 50 by numbers alone; 36 of 40 once, on a
	# loaded machine that sent the flood slower).  Some are lost: the
	# contrast is with all 40 under verify below.
	denied=$(stat_get web denied)
	flood_round "$fam"
	ok=$(jq -r .ok <<<"$CLIENT_JSON")
	expect_between "real requests answered without verify (of 40)" "$ok" 0 39
	expect_between "SYNs refused without verify" $(($(stat_get web denied) - denied)) 4000 5100

	rl tenant set web --verify syncookie
	before=$(server_conns s1)
	denied=$(stat_get web denied)
	flood_round "$fam"
	expect_verified_round "$before" "$denied"
	expect_between "SYNs passed to cookies" \
		"$(metric_value rlgate_verify_syn_total "$(metrics s1)")" 4540 5100
}

@test "IPv4: forged SYNs at 50x the rate lock a real client out when charged at the SYN; with --verify syncookie all 40 of its requests are answered and the server accepts only those" {
	lock_out_then_verify 4
}

@test "IPv6: forged SYNs at 50x the rate lock a real client out when charged at the SYN; with --verify syncookie all 40 of its requests are answered and the server accepts only those" {
	lock_out_then_verify 6
}

@test "over the limit with --action rst: a verified client above the rate is reset, the server accepts at most rate x T + burst, and curl's connection keeps timestamps, SACK and window scaling" {
	local ok before after

	agent_start
	rl tenant set web --rate 10/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--action rst --verify syncookie
	run in_ns c1 curl -s --max-time 5 "http://$(lab_addr s1 4):$HTTP_PORT/"
	[[ $status == 0 && $output == ok ]] || { echo "curl: $status $output" >&2; return 1; }
	# what the server's side of curl's connection negotiated
	expect_eq "timestamps" "$(tail -n 1 "$HTTP_LOG" | jq -r .ts)" true
	expect_eq "SACK" "$(tail -n 1 "$HTTP_LOG" | jq -r .sack)" true
	expect_eq "window scaling" "$(tail -n 1 "$HTTP_LOG" | jq -r .wscale)" true
	expect_eq "MSS (1460, less 12 of timestamps)" "$(tail -n 1 "$HTTP_LOG" | jq -r .snd_mss)" 1448
	sleep 1

	before=$(server_conns s1)
	client_run s1 4 30 3
	after=$(server_conns s1)
	ok=$(jq -r .ok <<<"$CLIENT_JSON")
	# 90 requests in 3 s at 10/s with a burst of 5
	expect_between "answered" "$ok" 30 45
	# a request can be accepted and its answer come after the client gave
	# up on it: the server accepts every answered one, and no more than the
	# bucket gives out
	expect_between "connections the server accepted" $((after - before)) "$ok" 45
	expect_between "resets sent" "$(stat_get web rst_sent)" $((90 - ok - 5)) $((90 - ok + 5))
}

@test "over the limit with --action drop: a verified client's handshake ACK is dropped (its request stalls, no RST), and the server accepts no more than the bucket gives out" {
	local ok before after t0 t1 charged

	agent_start
	rl tenant set web --rate 10/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--action drop --verify syncookie
	t0=$(date +%s%N)
	before=$(server_conns s1)
	client_run s1 4 30 3
	# a client that gave up has its kernel still retransmit the request
	# (FIN_WAIT1): each copy that finds a token opens a connection
	sleep 3
	after=$(server_conns s1)
	t1=$(date +%s%N)
	ok=$(jq -r .ok <<<"$CLIENT_JSON")
	# 90 requests over 3 s, each retried for up to 3 s: at least 10/s for
	# 3 s + 5 are answered
	expect_between "answered" "$ok" 35 90
	charged=$(($(stat_get web admitted) - $(stat_get web retransmits)))
	expect_between "connections the server accepted" $((after - before)) "$ok" "$charged"
	expect_between "handshakes charged (10/s + 5)" "$charged" "$ok" \
		$(((t1 - t0) / 100000000 + 5 + 1))
	expect_eq "resets sent" "$(stat_get web rst_sent)" 0
	expect_between "handshake ACKs and their copies refused" \
		"$(stat_get web denied)" $((90 - ok)) 100000
}

@test "shadow with --verify syncookie: every request answered under a forged flood, would-deny counted at the handshake only" {
	local shadow

	agent_start
	rl tenant set web --rate 5/s --burst 1 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--shadow --verify syncookie
	flood_bg s1 4 1000 3
	sleep 0.5
	client_run s1 4 20 2
	wait "$FLOOD_PID"
	FLOOD_PID=
	expect_eq "answered (of 40)" "$(jq -r .ok <<<"$CLIENT_JSON")" 40
	shadow=$(stat_get web shadow_denied)
	# 40 handshakes over 2 s at 5/s + 1: about 29 would be refused; the
	# 3,000 forged SYNs would-deny nothing
	expect_between "shadow_denied" "$shadow" 20 35
	expect_eq "denied" "$(stat_get web denied)" 0
}

@test "without net.ipv4.tcp_syncookies=2 the agent warns and charges a verifying tenant's SYNs; set to 2, it verifies again within 2 s" {
	local denied n t0 set=$BATS_TEST_TMPDIR/set.json

	in_ns s1 sysctl -qw net.ipv4.tcp_syncookies=1
	agent_start
	rl tenant set web --rate 20/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--verify syncookie
	grep -q "verify syncookie needs net.ipv4.tcp_syncookies=2 on this host (it is 1)" "$AGENT_LOG"
	expect_eq "metric rlgate_verify_in_force" \
		"$(metric_value rlgate_verify_in_force "$(metrics s1)")" 0
	rl status | grep -qx "verify: *1 tenant(s) with syncookie, net.ipv4.tcp_syncookies 1: not verified, their SYNs are charged"
	flood_bg s1 4 1000 1
	wait "$FLOOD_PID"
	FLOOD_PID=
	denied=$(stat_get web denied)
	expect_between "forged SYNs refused" "$denied" 900 1000
	# 200 more in one apply: one more line, not 200 (or a few, should the
	# machine take more than a tenth of a second to configure them)
	n=$(grep -c "verify syncookie needs" "$AGENT_LOG")
	jq -n --arg c1 "$(prefixes c1)" --argjson port "$HTTP_PORT" '{tenants: ([
		{name: "web", rate: "20/s", burst: 5, match: ($c1 | split(",")),
		 ports: [$port], verify: "syncookie"}] + [range(200) | {name: "v\(.)",
		 rate: "10/s", match: ["198.51.100.\(.)/32"], verify: "syncookie"}])}' >"$set"
	rl apply "$set" >/dev/null
	jq '.tenants |= .[:1]' "$set" >"$set.web"
	rl apply "$set.web" >/dev/null
	expect_between "warnings for 200 more verifying tenants" \
		"$(($(grep -c "verify syncookie needs" "$AGENT_LOG") - n))" 1 5
	expect_eq "web's refusals, the tenant unchanged by both applies" \
		"$(stat_get web denied)" "$denied"

	in_ns s1 sysctl -qw net.ipv4.tcp_syncookies=2
	t0=$(date +%s%N)
	until grep -q "tcp_syncookies is 2 (was 1): tenants with verify syncookie are verified again" \
		"$AGENT_LOG"; do
		(($(date +%s%N) - t0 < 2000000000)) ||
			{ echo "no word of tcp_syncookies 2 in the log after 2 s" >&2; return 1; }
		sleep 0.05
	done
	expect_eq "status: verified" "$(rl --json status | jq -c .verify)" \
		'{"tenants":1,"tcp_syncookies":2,"verified":true}'
	expect_eq "metric rlgate_verify_in_force" \
		"$(metric_value rlgate_verify_in_force "$(metrics s1)")" 1
	flood_bg s1 4 1000 1
	wait "$FLOOD_PID"
	FLOOD_PID=
	expect_eq "forged SYNs refused once verified" "$(stat_get web denied)" "$denied"
}

@test "tc ingress (--mode tc): with --verify syncookie a forged flood costs nothing, a real client over the limit is reset" {
	local ok before after

	agent_start --mode tc
	rl tenant set web --rate 10/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--action rst --verify syncookie
	before=$(server_conns s1)
	flood_bg s1 6 1000 3
	sleep 0.5
	# 60 requests in 2 s at 10/s with a burst of 5
	client_run s1 6 30 2
	wait "$FLOOD_PID"
	FLOOD_PID=
	expect_few_neighbours s1
	after=$(server_conns s1)
	ok=$(jq -r .ok <<<"$CLIENT_JSON")
	expect_between "answered" "$ok" 20 30
	# as with XDP: the server accepts every answered one, and no more than
	# the bucket gives out (a request can be accepted after its client
	# gave up on it)
	expect_between "connections the server accepted" $((after - before)) "$ok" 30
	expect_between "resets sent" "$(stat_get web rst_sent)" $((60 - ok - 5)) $((60 - ok + 5))
}

@test "a restarted agent verifies from its first packet: the program it loads is told before it is attached, while a forged flood and a real client run across the restart" {
	local charged conns cpid out=$BATS_TEST_TMPDIR/client.out

	agent_start
	rl tenant set web --rate 20/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--verify syncookie
	charged=$(($(stat_get web admitted) - $(stat_get web retransmits)))
	conns=$(server_conns s1)
	# the load starts before the old agent stops and the new one loads,
	# configures and attaches its program, and ends after
	flood_bg s1 4 1000 10
	client_run s1 4 10 8 >"$out" 3>&- &
	cpid=$!
	sleep 0.5
	agent_stop TERM
	agent_start
	proc_running "$FLOOD_PID" ||
		{ echo "the flood ended before the new agent had attached its program" >&2; return 1; }
	proc_running "$cpid" ||
		{ echo "the client ended before the new agent had attached its program" >&2; return 1; }
	wait "$cpid"
	wait "$FLOOD_PID"
	FLOOD_PID=
	cat "$out"
	CLIENT_JSON=$(sed -n 's/^client to s1: //p' "$out")
	expect_eq "SYNs refused across the restart" "$(stat_get web denied)" 0
	expect_eq "answered (of 80)" "$(jq -r .ok <<<"$CLIENT_JSON")" 80
	expect_eq "connections the server accepted" $(($(server_conns s1) - conns)) 80
	# Each handshake charged, by the old program or the new one, and no
	# forged SYN: a program attached before it is told that a tenant
	# verifies lets handshakes through uncharged (fewer than 80).  Its data
	# segment is a free copy, except that a handshake in flight when the
	# program is replaced may be charged again by the new one, whose flow
	# cache starts empty: 81 in 2 of 3 runs here.
	expect_between "handshakes charged" \
		$(($(stat_get web admitted) - $(stat_get web retransmits) - charged)) 80 82
}

# kernel_cookies_sent HOST: the SYN cookies HOST's kernel sent so far.
kernel_cookies_sent() {
	in_ns "$1" nstat -saz TcpExtSyncookiesSent | awk '$1 == "TcpExtSyncookiesSent" { print $2 }'
}

# answer_curl FAMILY: one request from c1; fails unless answered.
answer_curl() {
	local addr

	addr=$(lab_addr s1 "$1")
	[[ $1 == 4 ]] || addr="[$addr]"
	run in_ns c1 curl -s --max-time 5 "http://$addr:$HTTP_PORT/"
	[[ $status == 0 && $output == ok ]] || { echo "curl: $status $output" >&2; return 1; }
}

# answer_options FAMILY [AGENT OPTIONS]: with --verify syncookie-answer and
# net.ipv4.tcp_timestamps=2 on the server, a client with timestamps keeps
# them, SACK and window scaling; one without gets the MSS alone, as from
# the kernel's own cookie.  Each SYN-ACK is rlgate's, not the kernel's.
answer_options() {
	local fam=$1 mss answered kernel

	in_ns s1 sysctl -qw net.ipv4.tcp_timestamps=2
	agent_start "${@:2}"
	rl tenant set web --rate 20/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--verify syncookie-answer
	# the listener has sent no cookie of its own yet: its kernel answers
	# the first SYN, which has it take cookie ACKs from then on
	answer_curl "$fam" || return 1
	answered=$(metric_value rlgate_verify_answered_total "$(metrics s1)")
	kernel=$(kernel_cookies_sent s1)

	answer_curl "$fam" || return 1
	[[ $fam == 4 ]] && mss=1460 || mss=1440
	expect_eq "timestamps" "$(tail -n 1 "$HTTP_LOG" | jq -r .ts)" true
	expect_eq "SACK" "$(tail -n 1 "$HTTP_LOG" | jq -r .sack)" true
	expect_eq "window scaling" "$(tail -n 1 "$HTTP_LOG" | jq -r .wscale)" true
	expect_eq "MSS (less 12 of timestamps)" "$(tail -n 1 "$HTTP_LOG" | jq -r .snd_mss)" $((mss - 12))

	in_ns c1 sysctl -qw net.ipv4.tcp_timestamps=0
	answer_curl "$fam" || return 1
	expect_eq "timestamps without" "$(tail -n 1 "$HTTP_LOG" | jq -r .ts)" false
	expect_eq "SACK without timestamps" "$(tail -n 1 "$HTTP_LOG" | jq -r .sack)" false
	expect_eq "window scaling without timestamps" "$(tail -n 1 "$HTTP_LOG" | jq -r .wscale)" false
	expect_eq "MSS without timestamps" "$(tail -n 1 "$HTTP_LOG" | jq -r .snd_mss)" "$mss"

	# read before the scrape of the metrics, whose own connection on the
	# server's loopback takes a cookie of the kernel's
	expect_eq "cookies the server's kernel sent" "$(kernel_cookies_sent s1)" "$kernel"
	expect_eq "SYNs answered by rlgate" \
		"$(metric_value rlgate_verify_answered_total "$(metrics s1)")" $((answered + 2))
	expect_eq "handshakes charged" "$(stat_get web admitted)" 3
}

@test "IPv4 --verify syncookie-answer: rlgate sends the SYN-ACK with the kernel's cookie; a client with timestamps keeps them, SACK and window scaling, one without gets the MSS" {
	answer_options 4
}

@test "IPv6 --verify syncookie-answer: rlgate sends the SYN-ACK with the kernel's cookie; a client with timestamps keeps them, SACK and window scaling, one without gets the MSS" {
	answer_options 6
}

@test "tc ingress (--mode tc): --verify syncookie-answer sends the SYN-ACK from tc, with the same options for clients with and without timestamps" {
	answer_options 4 --mode tc
}

# answer_flood FAMILY: a flood of forged SYNs inside the tenant, answered
# by rlgate: the real client gets all its answers, the server accepts
# only its connections and its kernel sends almost none of the cookies.
answer_flood() {
	local fam=$1 before kernel denied answered

	agent_start
	rl tenant set web --rate 20/s --burst 5 --match "$(prefixes c1)" --port "$HTTP_PORT" \
		--verify syncookie-answer
	answer_curl "$fam" || return 1
	before=$(server_conns s1)
	denied=$(stat_get web denied)
	answered=$(metric_value rlgate_verify_answered_total "$(metrics s1)")
	kernel=$(kernel_cookies_sent s1)
	flood_round "$fam"
	kernel=$(($(kernel_cookies_sent s1) - kernel))
	expect_verified_round "$before" "$denied"
	expect_between "SYNs answered by rlgate" \
		$(($(metric_value rlgate_verify_answered_total "$(metrics s1)") - answered)) 4490 5100
	# a SYN a listener every 6 to 60 s (by the kernel's HZ) keeps the
	# listener taking cookie ACKs, and a client's SYN may come just then
	expect_between "cookies the server's kernel sent during the flood" "$kernel" 0 10
}

@test "IPv4 --verify syncookie-answer: under forged SYNs at 50x the rate inside the tenant, all 40 of a real client's requests are answered, the server accepts only those and its kernel sends almost no cookie" {
	answer_flood 4
}

@test "IPv6 --verify syncookie-answer: under forged SYNs at 50x the rate inside the tenant, all 40 of a real client's requests are answered, the server accepts only those and its kernel sends almost no cookie" {
	answer_flood 6
}
