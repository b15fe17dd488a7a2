#!/usr/bin/env bats
# verify syncookie judged against the server's socket table: a handshake
# the server completes without a cookie (a SYN that meets the TIME_WAIT
# socket of the port's last connection gets a request socket) is charged
# all the same, and a segment of an open connection whose numbers happen
# to pass the cookie check (equal-length requests and answers keep ack -
# seq where the handshake left it) is never charged nor reset.  What the
# tenant is charged is what the server accepted.
#
# e2e: parallel - one agent, no Redis, a bucket that never refills during
# a test: every count is exact.

load helpers
load agent_helpers

ECHO_PORT=8082

setup() {
	agent_setup
	in_ns s1 sysctl -qw net.ipv4.tcp_syncookies=2
	ECHO_LOG=$BATS_TEST_TMPDIR/echo.log
	: >"$ECHO_LOG"
	in_ns s1 /usr/bin/python3 "$BATS_TEST_DIRNAME/verify_conns.py" echo "$ECHO_PORT" \
		"$ECHO_LOG" 2>"$BATS_TEST_TMPDIR/echo.err" 3>&- &
	ECHO_PID=$!
	wait_line "$BATS_TEST_TMPDIR/echo.err" listening "verify_conns.py echo on s1"
}

teardown() {
	if [[ -n ${ECHO_PID:-} ]]; then
		kill "$ECHO_PID" 2>/dev/null
		wait "$ECHO_PID" 2>/dev/null
	fi
	agent_teardown
}

# conns FAMILY MODE ARGS...: verify_conns.py MODE from c1 to s1's echo port.
conns() {
	local fam=$1 mode=$2

	shift 2
	in_ns c1 /usr/bin/python3 "$BATS_TEST_DIRNAME/verify_conns.py" "$mode" \
		"$(lab_addr s1 "$fam")" "$ECHO_PORT" "$@"
}

# reuse_charged FAMILY: 8 connections from one client port, the server
# closing each first, against a verifying tenant with 3 tokens that never
# refill.
reuse_charged() {
	local out accepted

	agent_start
	rl tenant set web --rate 1/h --burst 3 --match "$(prefixes c1)" --port "$ECHO_PORT" \
		--action rst --verify syncookie
	out=$(conns "$1" reuse 41000 8)
	echo "client: $out"
	accepted=$(wc -l <"$ECHO_LOG")
	# the first from a cookie, the next two through TIME_WAIT
	expect_eq "connections answered" "$(jq -r .ok <<<"$out")" 3
	expect_eq "connections the server accepted" "$accepted" 3
	expect_eq "connections charged" "$(stat_get web admitted)" "$accepted"
}

@test "IPv4: under verify, a client that reuses its port while the server's socket is in TIME_WAIT is charged once per connection the server accepts: 3 of 8 with 3 tokens" {
	reuse_charged 4
}

@test "IPv6: under verify, a client that reuses its port while the server's socket is in TIME_WAIT is charged once per connection the server accepts: 3 of 8 with 3 tokens" {
	reuse_charged 6
}

# exchanges FAMILY: one connection that makes 12 exchanges of 100 bytes
# each way, against a verifying tenant with 2 tokens and --action rst.
exchanges() {
	local out

	agent_start
	rl tenant set web --rate 1/h --burst 2 --match "$(prefixes c1)" --port "$ECHO_PORT" \
		--action rst --verify syncookie
	out=$(conns "$1" exchange 100 12)
	echo "client: $out"
	expect_eq "exchanges answered" "$(jq -r .exchanges <<<"$out")" 12
	expect_eq "reset" "$(jq -r .reset <<<"$out")" false
	expect_eq "connections the server accepted" "$(wc -l <"$ECHO_LOG")" 1
	expect_eq "connections charged" "$(stat_get web admitted)" 1
	expect_eq "refused" "$(stat_get web denied)" 0
	expect_eq "resets sent" "$(stat_get web rst_sent)" 0
}

@test "IPv4: under verify, a connection whose equal-length requests and answers pass the cookie check again is charged once and never reset" {
	exchanges 4
}

@test "IPv6: under verify, a connection whose equal-length requests and answers pass the cookie check again is charged once and never reset" {
	exchanges 6
}
