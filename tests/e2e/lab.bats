#!/usr/bin/env bats
# Tests of the test bench itself: the netns lab (tools/lab.sh) and the load
# generator (build/loadgen).  Every other e2e suite trusts both; if these
# fail, fix them first.  They check counts, and times only against bounds
# that hold however slow the machine is: a client that must connect is
# given a --timeout of T_LONG (a SYN the loaded lab dropped is retransmitted
# within it), and the schedule is checked against the clock read around
# the run.
#
# e2e: solo - not for its own sake: its 2,000 connections a second would
# load the files that time fleet leasing beside it (tools/run-tests.sh).

load helpers

setup_file() {
	e2e_require_root || return 0
	e2e_require_build loadgen pass.bpf.o
	lab_up --servers 2 --clients 2
	serve_start s1 8080
	export FILE_SERVE_PID=$SERVE_PID FILE_SERVE_OUT=$SERVE_OUT
}

T_LONG=10000	# ms: a connection that must succeed has this long

# expect_dead PID: the process is gone (a zombie counts as gone), once the
# kill it was sent has been delivered: 10 s at most.
expect_dead() {
	local state i

	for ((i = 0; i < 100; i++)); do
		state=$(ps -o stat= -p "$1" 2>/dev/null) || return 0
		[[ $state == Z* ]] && return 0
		sleep 0.1
	done
	echo "process $1 still running (state $state)" >&2
	return 1
}

# mono_ns: CLOCK_MONOTONIC in ns, the clock of loadgen --times.
mono_ns() { python3 -c 'import time; print(time.monotonic_ns())'; }

teardown() {
	local ns

	# namespaces a test made by hand, outside any lab
	for ns in ${STRAY_NS:-}; do
		ip netns del "$ns" 2>/dev/null || true
	done
	e2e_teardown
}

@test "loadgen rejects bad arguments with exit 2, naming the value (else scripts run nonsense loads)" {
	run "$LOADGEN" --rate abc --duration 1 192.0.2.11:8080
	[ "$status" -eq 2 ]
	[[ $output == *"'abc'"* ]]

	run "$LOADGEN" --rate 10 --duration 1 192.0.2.11
	[ "$status" -eq 2 ]
	[[ $output == *"'192.0.2.11'"* ]]

	run "$LOADGEN" --rate 10 --duration 1 192.0.2.11:8080@0
	[ "$status" -eq 2 ]
	[[ $output == *"weight"* ]]

	run "$LOADGEN" --rate 10 --duration 1 --timeout 0 192.0.2.11:8080
	[ "$status" -eq 2 ]

	run "$LOADGEN" --rate 10 192.0.2.11:8080
	[ "$status" -eq 2 ]
	[[ $output == *"--duration"* ]]

	# JSON mode: stdout is still a JSON document, with the error
	rc=0
	out=$("$LOADGEN" --json --rate 10 --duration 1 '[2001:db8::1:80' 2>/dev/null) || rc=$?
	[ "$rc" -eq 2 ]
	[[ $(jq -r .error <<<"$out") == *"2001:db8::1:80"* ]]

	run "$LOADGEN" --help
	[ "$status" -eq 0 ]
	[[ $output == *"--serve"* ]]
}

@test "client reaches a server over IPv4 (bridge, veth or IPv4 addressing broken)" {
	run_loadgen_json c1 --rate 200 --duration 0.5 --timeout $T_LONG "$(lab_target s1 8080 4)"
	expect_eq attempts "$(json_get .total.attempts)" 100
	expect_eq connected "$(json_get .total.connected)" 100
	expect_eq "refused+timed_out+errors" \
		"$(json_get '.total.refused + .total.timed_out + .total.errors')" 0
	# measured, and within the timeout that let them connect
	expect_between "connect p50 us" "$(json_get .total.connect_p50_us)" 1 $((T_LONG * 1000))
	expect_eq target "$(json_get '.targets[0].target')" 192.0.2.11:8080
}

@test "client reaches a server over IPv6 (nodad, IPv6 addressing or bridge ND broken)" {
	run_loadgen_json c2 --rate 200 --duration 0.5 --timeout $T_LONG "$(lab_target s1 8080 6)"
	expect_eq target "$(json_get '.targets[0].target')" "[2001:db8:1::a:1]:8080"
	expect_eq attempts "$(json_get .total.attempts)" 100
	expect_eq connected "$(json_get .total.connected)" 100
}

@test "loadgen counts a RST answer as refused, not as an error (no listener on the port)" {
	run_loadgen_json c1 --rate 200 --duration 0.5 --timeout $T_LONG \
		"$(lab_target s1 9 4)" "$(lab_target s1 9 6)"
	expect_eq attempts "$(json_get .total.attempts)" 100
	expect_eq refused "$(json_get .total.refused)" 100
	expect_eq connected "$(json_get .total.connected)" 0
	expect_eq errors "$(json_get .total.errors)" 0
	expect_eq "p50 without successes" "$(jq -r .total.connect_p50_us <<<"$LOADGEN_JSON")" null
}

@test "loadgen counts unanswered SYNs as timed_out after --timeout, and stops by then" {
	# s2 can no longer answer c2: its replies go into a blackhole.
	in_ns s2 ip route add blackhole "$(lab_addr c2 4)/32"
	in_ns s2 ip -6 route add blackhole "$(lab_addr c2 6)/128"
	local before after attempts
	before=$(mono_ns)
	run_loadgen_json c2 --rate 100 --duration 0.5 --timeout 300 \
		"$(lab_target s2 9 4)" "$(lab_target s2 9 6)"
	after=$(mono_ns)
	# (a sender that a loaded machine kept 0.3 s behind at the end skips
	# the rest)
	attempts=$(json_get .total.attempts)
	expect_eq "attempts and skipped" $((attempts + $(json_get .skipped))) 50
	expect_between attempts "$attempts" 1 50
	expect_eq timed_out "$(json_get .total.timed_out)" "$attempts"
	expect_eq "connected+refused+errors" \
		"$(json_get '.total.connected + .total.refused + .total.errors')" 0
	# the last SYN leaves at its slot, (attempts - 1) x 10 ms, or later
	# and is given up 0.3 s after it; the run ends by then, not when the
	# kernel would give up (over a minute later): within the time the
	# test saw it take
	expect_between elapsed_s "$(json_get .elapsed_s)" \
		"$(awk -v n="$attempts" 'BEGIN { print (n - 1) / 100 + 0.3 }')" \
		"$(awk -v a="$after" -v b="$before" 'BEGIN { print (a - b) / 1e9 }')"
}

@test "loadgen makes exactly rate x duration attempts, split by weight, never ahead of its schedule" {
	local times=$BATS_TEST_TMPDIR/times before after n wall

	before=$(mono_ns)
	# (as many in flight as the default 500 ms timeout would allow)
	run_loadgen_json c1 --rate 2000 --duration 2 --timeout $T_LONG --max-inflight 1000 \
		--times "$times" "$(lab_target s1 8080 4)@3" "$(lab_target s1 8080 6)@1"
	after=$(mono_ns)
	# every slot of the schedule is made, late ones caught up: only a
	# sender still behind by the timeout (10 s) at the end skips the rest
	n=$(json_get .total.attempts)
	expect_eq "attempts and skipped" $((n + $(json_get .skipped))) 4000
	expect_eq "attempt starts written" "$(wc -l <"$times")" "$n"
	# smooth weighted round-robin: each target within one of its share
	expect_between "attempts of weight 3" "$(json_get '.targets[0].attempts')" \
		$((3 * n / 4 - 1)) $((3 * n / 4 + 1))
	expect_eq "attempts of both weights" \
		"$(json_get '.targets[0].attempts + .targets[1].attempts')" "$n"
	# attempt k is due k / 2,000 s after the start, which came after
	# "before": none starts earlier, however late others were
	expect_eq "attempts started ahead of their slot" "$(awk -v b="$before" \
		'$1 < b + (NR - 1) * 500000 { n++ } END { print n + 0 }' "$times")" 0
	# never more than the rate, and at least the attempts over the time
	# the run took as the test saw it
	wall=$(awk -v a="$after" -v b="$before" 'BEGIN { print (a - b) / 1e9 }')
	expect_between offered_rate "$(json_get .offered_rate)" \
		"$(awk -v n="$n" -v w="$wall" 'BEGIN { print n / w }')" 2000
	expect_between elapsed_s "$(json_get .elapsed_s)" \
		"$(awk -v n="$n" 'BEGIN { print (n - 1) / 2000 }')" "$wall"
	expect_eq connected "$(json_get .total.connected)" "$n"
	expect_eq "counters add up" \
		"$(json_get '.total | .connected + .refused + .timed_out + .errors')" "$n"
}

@test "loadgen --times writes each attempt's start, in order, on the clock of every namespace (fleet_limit.bats replays it)" {
	local times=$BATS_TEST_TMPDIR/times before after

	before=$(python3 -c 'import time; print(time.monotonic_ns())')
	run_loadgen_json c1 --rate 400 --duration 0.5 --times "$times" "$(lab_target s1 8080 4)"
	after=$(python3 -c 'import time; print(time.monotonic_ns())')
	expect_eq "lines" "$(wc -l <"$times")" "$(json_get .total.attempts)"
	expect_eq "lines out of order" "$(sort -n -c "$times" 2>&1 | wc -l)" 0
	# CLOCK_MONOTONIC: what a process outside the lab reads around the run
	expect_between "first start" "$(head -1 "$times")" "$before" "$after"
	expect_between "last start" "$(tail -1 "$times")" "$(head -1 "$times")" "$after"

	run "$LOADGEN" --rate 10 --duration 0.1 --times /nonexistent/dir/t 192.0.2.11:8080
	[ "$status" -eq 1 ]
	[[ $output == *"'/nonexistent/dir/t'"* ]]
}

@test "loadgen --serve accepts what clients connect (server-side count for e2e tests)" {
	serve_start s2 8081
	run_loadgen_json c1 --rate 500 --duration 1 --timeout $T_LONG \
		"$(lab_target s2 8081 4)" "$(lab_target s2 8081 6)"
	connected=$(json_get .total.connected)
	expect_eq connected "$connected" 500
	accepted=$(serve_stop)
	# A client's ACK and its RST can be reordered across CPUs on veth; the
	# server then never sees the connection.  Rare at this rate.
	expect_between accepted "$accepted" $((connected * 98 / 100)) "$connected"
}

@test "loadgen --serve stopped counts the connections still queued for it (a loaded server behind on its accepts)" {
	local accepted

	serve_start s2 8082
	# stopped: the kernel completes every handshake, none is accepted yet
	kill -STOP "$SERVE_PID"
	run_loadgen_json c1 --rate 100 --duration 0.2 --timeout $T_LONG "$(lab_target s2 8082 4)"
	expect_eq connected "$(json_get .total.connected)" 20
	kill -TERM "$SERVE_PID"
	kill -CONT "$SERVE_PID"
	accepted=$(serve_stop)
	expect_eq "accepted, counted at the stop" "$accepted" 20
}

@test "clients sit alone in distinct /28 and /80 prefixes (two-tenant tests rely on it)" {
	expect_eq "c1 IPv4" "$(lab_addr c1 4)" 192.0.2.65
	expect_eq "c2 IPv4" "$(lab_addr c2 4)" 192.0.2.81
	expect_eq "c1 IPv6" "$(lab_addr c1 6)" 2001:db8:1:0:1::1
	expect_eq "c2 IPv6" "$(lab_addr c2 6)" 2001:db8:1:0:2::1
	expect_eq "s2 IPv4" "$(lab_addr s2 4)" 192.0.2.12
	expect_eq "s2 IPv6" "$(lab_addr s2 6)" 2001:db8:1::a:2
}

@test "lab hosts have no route out of the machine (no default route anywhere)" {
	for h in s1 s2 c1 c2; do
		expect_eq "$h IPv4 default route" "$(in_ns "$h" ip -4 route show default)" ""
		expect_eq "$h IPv6 default route" "$(in_ns "$h" ip -6 route show default)" ""
	done
}

@test "every server's switch port runs the pass XDP program (XDP_TX replies would vanish)" {
	ip -n "$LAB-sw" link show dev s1 | grep -q 'prog/xdp'
	ip -n "$LAB-sw" link show dev s2 | grep -q 'prog/xdp'
	if ip -n "$LAB-sw" link show dev c1 | grep -q 'prog/xdp'; then
		echo "client port c1 has an XDP program" >&2
		false
	fi
	run "$LAB_SH" status "$LAB"
	[ "$status" -eq 0 ]
	[[ $output == *"s1: pass-all XDP attached"* ]]
}

@test "lab.sh up of an existing lab fails and leaves that lab working" {
	run "$LAB_SH" up "$LAB" --servers 1
	[ "$status" -eq 1 ]
	[[ $output == *"exists already"* ]]
	run_loadgen_json c1 --rate 100 --duration 0.2 --timeout $T_LONG "$(lab_target s1 8080 4)"
	expect_eq connected "$(json_get .total.connected)" 20
}

@test "lab.sh down removes every namespace and kills what still runs in them" {
	local file_lab=$LAB
	lab_up --servers 1 --clients 1 --redis
	[ "$LAB" != "$file_lab" ]
	ip netns exec "$LAB-c1" sleep 60 >/dev/null 2>&1 3>&- &
	pid=$!
	"$LAB_SH" down "$LAB"
	expect_eq "namespaces left" "$(ip netns list | awk '{ print $1 }' | grep -c "^$LAB-")" 0
	expect_dead "$pid"
}

@test "lab.sh down cleans up a partial up and touches no other NAME-* namespace" {
	name=rl${BASHPID}p
	export STRAY_NS="$name-sw $name-s1 $name-keep"
	ip netns add "$name-sw"
	ip netns add "$name-s1"
	ip netns add "$name-keep"
	ip netns exec "$name-s1" sleep 60 >/dev/null 2>&1 3>&- &
	pid=$!
	"$LAB_SH" down "$name"
	expect_eq "lab namespaces left" "$(ip netns list | awk '{ print $1 }' | grep -cE "^$name-(sw|s1)\$")" 0
	ip netns list | awk '{ print $1 }' | grep -qx "$name-keep"
	expect_dead "$pid"
}
