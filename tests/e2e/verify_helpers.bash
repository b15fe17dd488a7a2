# verify_helpers.bash: what the verify suites (verify.bats, verify_fleet.bats)
# share on top of helpers.bash: an HTTP server that logs what each of its
# connections negotiated, a flood of SYNs from forged sources of c1's
# prefix, and a real client in c1 making HTTP requests at a steady rate.

HTTP_PORT=8081

# verify_http_start HOST: the HTTP server on HOST's port $HTTP_PORT (IPv4 and
# IPv6), logging a JSON line per connection to $BATS_TEST_TMPDIR/http-HOST.log
# (or the file's tmpdir from setup_file); returns once it listens.  Killed by
# its PID in verify_http_stop, and with the lab at the latest.
verify_http_start() {
	local dir=${BATS_TEST_TMPDIR:-$BATS_FILE_TMPDIR} pid

	: >"$dir/http-$1.log"
	in_ns "$1" /usr/bin/python3 "$BATS_TEST_DIRNAME/verify_server.py" "$HTTP_PORT" \
		"$dir/http-$1.log" 2>"$dir/http-$1.err" 3>&- &
	pid=$!
	echo "$pid" >"$dir/http-$1.pid"
	wait_line "$dir/http-$1.err" listening "verify_server.py on $1"
}

# verify_http_stop HOST
verify_http_stop() {
	local dir=${BATS_TEST_TMPDIR:-$BATS_FILE_TMPDIR} pid

	pid=$(cat "$dir/http-$1.pid" 2>/dev/null) || return 0
	if kill "$pid" 2>/dev/null; then
		wait "$pid" 2>/dev/null || true
	fi
	rm -f "$dir/http-$1.pid"
	return 0
}

# server_conns HOST [DIR]: connections HOST's HTTP server accepted so far.
server_conns() {
	wc -l <"${2:-${BATS_TEST_TMPDIR:-$BATS_FILE_TMPDIR}}/http-$1.log"
}

# flood_bg HOST FAMILY RATE SECONDS: forged SYNs from c1's prefix (never
# c1's own address) to HOST's HTTP port, in the background (FLOOD_PID,
# report in FLOOD_OUT).
# Over IPv6, HOST first sends what it answers to c1's /80 to c1's MAC, by a
# route through one permanent neighbour entry.  Otherwise its SYN-ACK to
# each forged source takes a neighbour entry of its own, unresolved for
# seconds, and the IPv6 neighbour table is the machine's, not the
# namespace's (1,024 entries in all, net.ipv6.neigh.default.gc_thresh3):
# full, it leaves every other lab's IPv6 unable to reach a new neighbour,
# and a test running beside this one sees all its connections time out.
flood_bg() {
	local net mac ns

	net=$(client_prefix c1)
	ns=$(lab_ns "$1")
	if [[ $2 == 6 ]]; then
		net=2001:db8:1:0:1::/80
		mac=$(ip -n "$(lab_ns c1)" -j link show dev eth0 | jq -r '.[0].address')
		ip -n "$ns" -6 neigh replace fe80::c1 lladdr "$mac" dev eth0 nud permanent
		ip -n "$ns" -6 route replace "$net" via fe80::c1 dev eth0
	fi
	mac=$(ip -n "$ns" -j link show dev eth0 | jq -r '.[0].address')
	FLOOD_OUT=$BATS_TEST_TMPDIR/flood.json
	in_ns c1 /usr/bin/python3 "$BATS_TEST_DIRNAME/syn_flood.py" eth0 "$mac" \
		"$(lab_addr "$1" "$2")" "$HTTP_PORT" "$net" "$(lab_addr c1 "$2")" "$3" "$4" \
		>"$FLOOD_OUT" 3>&- &
	FLOOD_PID=$!
}

# expect_few_neighbours HOST: after an IPv6 flood, HOST holds no neighbour
# entry per forged source (flood_bg): the permanent one, and at most a
# couple of real ones.
expect_few_neighbours() {
	expect_between "IPv6 neighbour entries on $1 after the flood" \
		"$(ip -n "$(lab_ns "$1")" -6 neigh show dev eth0 | wc -l)" 1 3
}

# flood_stop: kills a flood still running (teardown).
flood_stop() {
	[[ -n ${FLOOD_PID:-} ]] || return 0
	kill "$FLOOD_PID" 2>/dev/null
	wait "$FLOOD_PID" 2>/dev/null
	FLOOD_PID=
}

# client_run HOST FAMILY RATE SECONDS: the real client in c1 against HOST;
# its report (attempts, ok, failed) in CLIENT_JSON.
client_run() {
	CLIENT_JSON=$(in_ns c1 /usr/bin/python3 "$BATS_TEST_DIRNAME/verify_client.py" \
		"$(lab_addr "$1" "$2")" "$HTTP_PORT" "$3" "$4")
	echo "client to $1: $CLIENT_JSON"
}
