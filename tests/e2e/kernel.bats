#!/usr/bin/env bats
# The kernel path alone, on a real interface: xdp_rlgate attached natively to
# a server's veth by the minimal test loader, real SYNs from a client host to a
# real listening server.  A tenant with burst 5 and a negligible refill rate
# admits exactly 5 connections, then refuses the rest, by drop or by RST.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers

PORT=8080

setup() {
	e2e_setup
	e2e_require_build loadgen tests/rlload
	lab_up --servers 1 --clients 1
	serve_start s1 "$PORT"
}

teardown() {
	if [[ -n ${LOADER_PID:-} ]] && kill "$LOADER_PID" 2>/dev/null; then
		wait "$LOADER_PID" 2>/dev/null || true
	fi
	e2e_teardown
}

# loader_start ARGS...: runs rlload on s1's eth0 and waits for "ready".
loader_start() {
	local out=$BATS_TEST_TMPDIR/rlload.out i

	ip netns exec "$(lab_ns s1)" "$RLGATE_BUILD/tests/rlload" --iface eth0 "$@" \
		>"$out" 2>&1 3>&- &
	LOADER_PID=$!
	for ((i = 0; i < 100; i++)); do
		grep -q '^ready' "$out" && return 0
		kill -0 "$LOADER_PID" 2>/dev/null || break
		sleep 0.05
	done
	echo "rlload did not attach:" >&2
	cat "$out" >&2
	return 1
}

# burst_then_refuse FAMILY ACTION: 20 SYNs in one second against burst 5.
burst_then_refuse() {
	local fam=$1 action=$2 client prefix

	client=$(lab_addr c1 "$fam")
	if [[ $fam == 4 ]]; then prefix=$client/32; else prefix=$client/128; fi
	loader_start --match "$prefix" --rate 1/h --burst 5 --action "$action"
	# the attach is native, not generic: the test is about the real path
	ip -n "$(lab_ns s1)" -d link show dev eth0 | grep -q 'xdp ' ||
		{ echo "xdp_rlgate is not attached in native mode" >&2; return 1; }

	run_loadgen_json c1 --rate 20 --duration 1 --timeout 500 "$(lab_target s1 "$PORT" "$fam")"
	expect_eq attempts "$(json_get .total.attempts)" 20
	expect_eq connected "$(json_get .total.connected)" 5
	if [[ $action == drop ]]; then
		expect_eq timed_out "$(json_get .total.timed_out)" 15
		expect_eq refused "$(json_get .total.refused)" 0
	else
		expect_eq refused "$(json_get .total.refused)" 15
		expect_eq timed_out "$(json_get .total.timed_out)" 0
	fi
	# the server saw exactly the admitted connections
	kill "$LOADER_PID"; wait "$LOADER_PID" || true; LOADER_PID=
	# (on a veth a client's last ACK and its RST can overtake each other, so
	# the server may miss one; it must never see more than were admitted)
	expect_between accepted "$(serve_stop)" 4 5
}

@test "IPv4: burst of 5 admitted, further SYNs dropped (client times out)" {
	burst_then_refuse 4 drop
}

@test "IPv4: burst of 5 admitted, further SYNs answered with RST (client refused at once)" {
	burst_then_refuse 4 rst
}

@test "IPv6: burst of 5 admitted, further SYNs dropped (client times out)" {
	burst_then_refuse 6 drop
}

@test "IPv6: burst of 5 admitted, further SYNs answered with RST (client refused at once)" {
	burst_then_refuse 6 rst
}

@test "a client outside the tenant's prefix is not limited" {
	loader_start --match 198.51.100.0/24 --rate 1/h --burst 1 --action rst
	run_loadgen_json c1 --rate 20 --duration 1 "$(lab_target s1 "$PORT" 4)"
	expect_eq connected "$(json_get .total.connected)" 20
}
