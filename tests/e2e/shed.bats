#!/usr/bin/env bats
# Overload shedding (rlagent --shed-at): a deliberately slow server - a
# backlog of 8, one accept every 20 ms - offered about eight times what it
# accepts by two tenants of weights 3 and 1 (twelve times by three of
# weights 1, 1 and 2).  Without shedding its kernel overflows the accept
# queue; with it, the queue stays below the backlog (bounded overflows: the
# agent samples every 10 ms) and what the server accepts splits by weight.
# Counts only, never times.

load helpers
load agent_helpers

SLOW_PORT=8090
# Overflows allowed with shedding on: the SYNs of 100 ms of the flood (600/s
# at most) that reach a full queue before the agent, late on a loaded
# machine, holds them.  Without shedding there are some 2,000.
OVERFLOW_MAX=60

setup() {
	agent_setup 3
	command -v python3 >/dev/null || skip "python3 is not installed"
}
teardown() {
	[[ -z ${SLOW_PID:-} ]] || kill "$SLOW_PID" 2>/dev/null || true
	agent_teardown
}

# slow_start: the slow server on s1's IPv4 address (SLOW_PID, SLOW_OUT).
slow_start() {
	SLOW_OUT=$BATS_TEST_TMPDIR/slow.json
	# a plain command, so that $! is the server itself
	ip netns exec "$(lab_ns s1)" python3 "$BATS_TEST_DIRNAME/slow_server.py" \
		"$(lab_addr s1)" "$SLOW_PORT" 8 0.02 >"$SLOW_OUT" 2>"$SLOW_OUT.log" 3>&- &
	SLOW_PID=$!
	wait_line "$SLOW_OUT.log" listening "the slow server"
}

# slow_stop: stops it and waits for its counts.
slow_stop() {
	kill -TERM "$SLOW_PID"
	proc_wait_exit "$SLOW_PID" 5 "the slow server" || return 1
	SLOW_PID=
	[[ -s $SLOW_OUT ]] && jq -e . "$SLOW_OUT" >/dev/null || { cat "$SLOW_OUT" "$SLOW_OUT.log" >&2; return 1; }
}

# overflows: s1's ListenOverflows + ListenDrops so far.
overflows() {
	in_ns s1 cat /proc/net/netstat | awk '
		$1 == "TcpExt:" && !h { for (i = 2; i <= NF; i++) k[i] = $i; h = 1; next }
		$1 == "TcpExt:" { for (i = 2; i <= NF; i++)
			if (k[i] == "ListenOverflows" || k[i] == "ListenDrops") s += $i }
		END { print s + 0 }'
}

# offer HOST RATE: HOST opens RATE connections a second for 3 s to the slow
# server, in the background (its PID in OFFER_PID[HOST]).
declare -gA OFFER_PID=()
offer() {
	loadgen_bg "$1" "$BATS_TEST_TMPDIR/$1.json" --rate "$2" --duration 3 \
		"$(lab_target s1 "$SLOW_PORT")"
	OFFER_PID[$1]=$LOADGEN_BG_PID
}

# offer_wait HOST: waits for HOST's offer; its report in LOADGEN_JSON.
offer_wait() {
	loadgen_wait "${OFFER_PID[$1]}" "$BATS_TEST_TMPDIR/$1.json"
}

# flood: c1 and c2 each offer 200 connections a second for 3 s (1,200 in
# all) to the slow server, side by side; waits for both.
flood() {
	offer c1 200
	offer c2 200
	offer_wait c1
	offer_wait c2
}

# kern_limits SLOT: the kernel's interval_ns and burst of tenant slot SLOT,
# read from the pinned map, as [interval, burst].
kern_limits() {
	bpftool -j map lookup pinned "$PIN_DIR/tenants" key "$1" 0 0 0 |
		jq -c '.formatted.value | [.interval_ns, .burst]'
}

# accepted HOST: what the slow server accepted from HOST.
accepted() {
	jq --arg a "$(lab_addr "$1")" '.[$a] // 0' "$SLOW_OUT"
}

# tenant_of NAME HOST [options]: tenant NAME for HOST's clients to the slow
# server, far above what it accepts, refused with a RST.
tenant_of() {
	rl tenant set "$1" --rate 100000/s --action rst --match "$(client_prefix "$2")" \
		--port "$SLOW_PORT" "${@:3}"
}

# tenants: heavy (c1, weight 3) and light (c2, weight 1).
tenants() {
	tenant_of heavy c1 --weight 3
	tenant_of light c2
}

@test "without shedding, two tenants within their rates overflow a slow server's accept queue" {
	local before after

	agent_start
	tenants
	slow_start
	before=$(overflows)
	flood
	slow_stop
	after=$(overflows)
	echo "overflows: $((after - before)); accepted: $(cat "$SLOW_OUT")" >&3
	expect_between "the kernel's listen overflows" "$((after - before))" 100 1000000
}

@test "shedding at 50% keeps a slow server's accept queue from overflowing and splits what it accepts 3:1 by weight; status, stats show it; the policy's limits come back once the flood ends" {
	local before after c1 c2 share status page i

	agent_start --shed-at 50 --shed-port "$SLOW_PORT"
	tenants
	slow_start
	before=$(overflows)
	flood
	status=$(rl --json status)
	expect_eq "status: the mark" "$(jq .shed.mark_pct <<<"$status")" 50
	expect_eq "status: the listener watched" "$(jq .shed.listener.port <<<"$status")" \
		"$SLOW_PORT"
	expect_eq "status: its backlog" "$(jq .shed.listener.backlog <<<"$status")" 8
	expect_between "status: times shedding started" "$(jq .shed.starts <<<"$status")" \
		1 1000000
	rl status | grep -q "^shed: .*at 50% of the accept queue; port $SLOW_PORT at" ||
		{ rl status >&2; echo "status does not show the listener shedding watches" >&2; return 1; }
	page=$(metrics s1)
	expect_eq "rlgate_shed_listen_backlog" \
		"$(metric_value rlgate_shed_listen_backlog "$page")" 8
	expect_between "rlgate_shed_starts_total" \
		"$(metric_value rlgate_shed_starts_total "$page")" 1 1000000
	slow_stop
	after=$(overflows)
	c1=$(accepted c1)
	c2=$(accepted c2)
	echo "overflows: $((after - before)); accepted: c1 $c1, c2 $c2" >&3
	# the agent samples every 10 ms: the SYNs of a few samples may slip
	# past the mark before it holds them (OVERFLOW_MAX), never the
	# flood's thousands
	expect_between "the kernel's listen overflows" "$((after - before))" 0 "$OVERFLOW_MAX"
	expect_between "connections accepted" "$((c1 + c2))" 60 1000000
	share=$((100 * c1 / (c1 + c2)))
	expect_between "heavy's share of what was accepted (%)" "$share" 70 80
	expect_between "heavy's SYNs refused while held" "$(stat_get heavy shed)" 100 1000000
	expect_between "light's SYNs refused while held" "$(stat_get light shed)" 100 1000000

	# the listener gone, shedding ends: the policy's limits are back
	for ((i = 0; i < 50; i++)); do
		[[ $(rl --json status | jq .shed.shedding) == false ]] && break
		sleep 0.1
	done
	expect_eq "status: shedding after the server left" \
		"$(rl --json status | jq .shed.shedding)" false
	expect_eq "heavy held to" "$(rl --json stats heavy | jq '.[0].shed_limit')" null
	expect_eq "heavy's weight" "$(stat_get heavy weight)" 3
	rl stats | grep -qE "^heavy .* SHED|^TENANT .*SHED" ||
		{ rl stats >&2; echo "stats has no SHED column" >&2; return 1; }
	# held, its bucket held a few tokens; given back, it refills to its
	# policy's burst of 100,000 at 100,000/s
	for ((i = 0; i < 50; i++)); do
		(($(stat_get heavy tokens) >= 10000)) && break
		sleep 0.1
	done
	expect_between "heavy's tokens once given back its limits" \
		"$(stat_get heavy tokens)" 10000 100000
}

@test "shedding refuses nothing of a tenant that asks a fifth of its share while another floods" {
	local before after

	agent_start --shed-at 50 --shed-port "$SLOW_PORT"
	tenant_of heavy c1
	tenant_of light c2
	slow_start
	before=$(overflows)
	# the server accepts about 50/s: light's share of it is 25/s, it asks 5/s
	offer c1 400
	offer c2 5
	offer_wait c2
	expect_eq "light's attempts" "$(jq .total.attempts <<<"$LOADGEN_JSON")" 15
	expect_eq "light's connections" "$(jq .total.connected <<<"$LOADGEN_JSON")" 15
	offer_wait c1
	expect_between "heavy refused" "$(jq .total.refused <<<"$LOADGEN_JSON")" 100 1200
	slow_stop
	after=$(overflows)
	expect_between "the kernel's listen overflows" "$((after - before))" 0 "$OVERFLOW_MAX"
	expect_eq "light's SYNs refused while held" "$(stat_get light shed)" 0
}

@test "an agent stopped while shedding leaves the kernel with the tenants' own limits, not the held ones" {
	local i slot

	agent_start --shed-at 50 --shed-port "$SLOW_PORT"
	tenants
	slot=$(rl --json tenant get heavy | jq .id)
	expect_eq "heavy's limits in the kernel before" "$(kern_limits "$slot")" "[10000,100000]"
	slow_start
	offer c1 400
	for ((i = 0; i < 50; i++)); do
		[[ $(rl --json status | jq .shed.shedding) == true ]] && break
		sleep 0.1
	done
	expect_eq "status: shedding under the flood" "$(rl --json status | jq .shed.shedding)" true
	# held: a burst of a few, an interval of tens of milliseconds
	run kern_limits "$slot"
	[[ $output != "[10000,100000]" ]] ||
		{ echo "heavy is not held in the kernel while shedding: $output" >&2; return 1; }
	agent_stop TERM
	expect_eq "heavy's limits in the kernel once the agent is gone" \
		"$(kern_limits "$slot")" "[10000,100000]"
	offer_wait c1
	slow_stop
}

@test "three tenants of weights 1, 1 and 2, each offering four times what the server accepts, get 25, 25 and 50% of it within 5 points, the queue overflowing a few times at most" {
	local h before after a1 a2 a3 sum

	agent_start --shed-at 50 --shed-port "$SLOW_PORT"
	tenant_of one c1
	tenant_of two c2
	tenant_of four c3 --weight 2
	slow_start
	before=$(overflows)
	for h in c1 c2 c3; do offer "$h" 200; done
	for h in c1 c2 c3; do offer_wait "$h"; done
	slow_stop
	after=$(overflows)
	a1=$(accepted c1)
	a2=$(accepted c2)
	a3=$(accepted c3)
	sum=$((a1 + a2 + a3))
	echo "overflows: $((after - before)); accepted: $a1, $a2, $a3" >&3
	expect_between "the kernel's listen overflows" "$((after - before))" 0 "$OVERFLOW_MAX"
	expect_between "connections accepted" "$sum" 60 1000000
	expect_between "one's share (%)" "$((100 * a1 / sum))" 20 30
	expect_between "two's share (%)" "$((100 * a2 / sum))" 20 30
	expect_between "four's share (%)" "$((100 * a3 / sum))" 45 55
}
