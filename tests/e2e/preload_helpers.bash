# preload_helpers.bash: what the suites of librlpreload.so share on top of
# helpers.bash - an unmodified server started under the library in a lab
# host, real clients that tell an answer from a reset, and the checks of
# what a limit lets through.
#
# Use from a suite with `load helpers` then `load preload_helpers`; set POOL
# (the pool's path) before starting servers, and stop them in teardown with
# preload_teardown.

PRELOAD=$RLGATE_BUILD/librlpreload.so
PRELOAD_CLIENT=$RLGATE_ROOT/tests/e2e/preload_client.py
PRELOAD_SERVER=$RLGATE_ROOT/tests/e2e/preload_server.py
PRELOAD_HOLD=$RLGATE_ROOT/tests/e2e/preload_hold.py
declare -gA HOLD_FDS=() HOLD_PIDS=()
PY=/usr/bin/python3

# preloaded HOST CMD...: runs CMD in HOST under the library (pool $POOL),
# in the background (SRV_PID, also remembered for preload_teardown), output
# in $BATS_TEST_TMPDIR/srv.{out,err}.
preloaded() {
	local host=$1

	shift
	ip netns exec "$(lab_ns "$host")" env LD_PRELOAD="$PRELOAD" RLGATE_POOL="$POOL" \
		"${PRELOAD_ENV[@]}" "$@" \
		>"$BATS_TEST_TMPDIR/srv.out" 2>"$BATS_TEST_TMPDIR/srv.err" 3>&- &
	SRV_PID=$!
	echo "$SRV_PID" >>"$BATS_TEST_TMPDIR/srv.pids"
}

# preload_teardown: stops every server preloaded() started in this test.
preload_teardown() {
	local pid

	[[ -f $BATS_TEST_TMPDIR/srv.pids ]] || return 0
	while read -r pid; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done <"$BATS_TEST_TMPDIR/srv.pids"
	rm -f "$BATS_TEST_TMPDIR/srv.pids"
}

# wait_listen HOST PORT: until HOST listens on PORT (5 s at most).
wait_listen() {
	local i

	for ((i = 0; i < 100; i++)); do
		[[ -n $(in_ns "$1" ss -Hltn "sport = :$2") ]] && return 0
		sleep 0.05
	done
	echo "nothing listens on port $2 of $1:" >&2
	cat "$BATS_TEST_TMPDIR/srv.err" >&2
	return 1
}

# client HOST ADDR PORT COUNT [REQUEST [RATE]]: COUNT connections at RATE
# per second (default 10) from HOST, each a request read to its answer;
# the report in CLIENT_JSON (ok, reset, timeout, error, empty, seconds).
client() {
	CLIENT_JSON=$(in_ns "$1" "$PY" "$PRELOAD_CLIENT" "$2" "$3" "${6:-10}" "$4" "${5:-}")
	echo "client $*: $CLIENT_JSON"
}

# expect_limited COUNT RATE BURST: of COUNT connections over the limit,
# between the burst and burst + rate x the run's seconds (+1, a token
# refilling as the run ends) were answered, every other one was reset, and
# none timed out, failed otherwise or was closed without an answer.  Sets
# OK and RESET.
expect_limited() {
	local secs hi

	OK=$(json_get .ok "$CLIENT_JSON") && RESET=$(json_get .reset "$CLIENT_JSON") &&
		secs=$(json_get .seconds "$CLIENT_JSON") || return 1
	hi=$(awk -v b="$3" -v r="$2" -v t="$secs" 'BEGIN { printf "%d", b + r * t + 1 }')
	expect_eq "timed out" "$(json_get .timeout "$CLIENT_JSON")" 0 &&
		expect_eq "failed otherwise" "$(json_get .error "$CLIENT_JSON")" 0 &&
		expect_eq "closed without an answer" "$(json_get .empty "$CLIENT_JSON")" 0 &&
		expect_eq "answered + reset" $((OK + RESET)) "$1" &&
		expect_between "answered" "$OK" "$3" "$hi"
}

# expect_no_errors FILE...: no line of the logs tells of an error.
expect_no_errors() {
	if grep -iE 'error|traceback|exception|\[(alert|crit|emerg)\]' "$@" >&2; then
		echo "the server logged errors (above)" >&2
		return 1
	fi
}

# hold_conns NAME HOST ADDR PORT N: N connections opened from HOST, one
# after the other, and held open (until release_conns NAME); the report
# ({"ok": greeted, "reset": ..., "other": ...}) in HOLD_JSON.
hold_conns() {
	local name=$1 fifo=$BATS_TEST_TMPDIR/hold.$1 i fd

	mkfifo "$fifo"
	# without the other holders' ends of their fifos: each is released
	# alone
	(
		for fd in "${HOLD_FDS[@]}"; do
			exec {fd}>&-
		done
		exec ip netns exec "$(lab_ns "$2")" "$PY" "$PRELOAD_HOLD" hold \
			"$3" "$4" "$5" <"$fifo" >"$fifo.out" 2>"$fifo.err" 3>&-
	) &
	HOLD_PIDS[$name]=$!
	exec {fd}>"$fifo"
	HOLD_FDS[$name]=$fd
	for ((i = 0; i < 200; i++)); do
		[[ -s $fifo.out ]] && break
		sleep 0.05
	done
	HOLD_JSON=$(head -n 1 "$fifo.out")
	echo "hold_conns $*: $HOLD_JSON"
	[[ -n $HOLD_JSON ]] || { cat "$fifo.err" >&2; return 1; }
}

# release_conns NAME: closes the connections hold_conns NAME holds.
release_conns() {
	local fd=${HOLD_FDS[$1]:-}

	[[ -n $fd ]] || return 0
	exec {fd}>&-
	wait "${HOLD_PIDS[$1]}" 2>/dev/null || true
	unset "HOLD_FDS[$1]" "HOLD_PIDS[$1]"
}

# release_all_conns: release_conns for every holder left (teardown).
release_all_conns() {
	local n

	for n in "${!HOLD_FDS[@]}"; do
		release_conns "$n"
	done
}

# wait_for SECONDS CMD...: until CMD succeeds, at most SECONDS.
wait_for() {
	local end=$((SECONDS + $1))

	shift
	until "$@"; do
		((SECONDS < end)) || return 1
		sleep 0.1
	done
}
