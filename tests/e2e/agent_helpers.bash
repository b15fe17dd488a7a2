# agent_helpers.bash: what the rlagent end-to-end suites (agent_*.bats)
# share on top of helpers.bash - a lab per test with an accept-and-close
# server on s1, rlagent on s1's eth0 with its own pin dir, control socket and
# state dir, rlctl against it, metrics read from inside s1, loadgen in the
# background.
#
# Use from a suite with `load helpers` then `load agent_helpers`, and
#     setup()    { agent_setup; }
#     teardown() { agent_teardown; }
# shellcheck disable=SC2034 # AGENT_RC, LOADGEN_BG_PID, ... are for the suites

PORT=8080
METRICS_ADDR=127.0.0.1:9464

# agent_setup: a fresh lab (1 server, 2 clients) for the test, the paths of
# this test's agent, and a server on s1:$PORT (IPv4 and IPv6).
agent_setup() {
	e2e_setup
	e2e_require_build rlagent rlctl loadgen pass.bpf.o
	lab_up --servers 1 --clients 2
	# Unique per lab: bpffs is not per network namespace.
	PIN_DIR=/sys/fs/bpf/rlgate-$LAB
	CTL=$BATS_TEST_TMPDIR/rlagent.sock
	STATE_DIR=$BATS_TEST_TMPDIR/state
	AGENT_LOG=$BATS_TEST_TMPDIR/rlagent.log
	AGENT_PID=
	serve_start s1 "$PORT"
}

# agent_teardown: kills this test's agent by its PID, removes the lab and
# this test's pin dir, then fails if any of them is still there.
agent_teardown() {
	local lab=${LAB:-} rc=0

	if [[ -n ${AGENT_PID:-} ]]; then
		kill -KILL "$AGENT_PID" 2>/dev/null || true
		wait "$AGENT_PID" 2>/dev/null || true
	fi
	e2e_teardown
	if [[ -n ${PIN_DIR:-} && -e $PIN_DIR ]]; then
		rm -rf "$PIN_DIR" || true
	fi
	if [[ -n ${PIN_DIR:-} && -e $PIN_DIR ]]; then
		echo "teardown: couldn't remove $PIN_DIR" >&2
		rc=1
	fi
	if [[ -n $lab ]] && ip netns list | awk '{ print $1 }' | grep -q "^$lab-"; then
		echo "teardown: namespaces of lab $lab are still there" >&2
		rc=1
	fi
	if ((rc)) || [[ -n ${AGENT_LOG:-} && $BATS_TEST_COMPLETED != 1 && -s $AGENT_LOG ]]; then
		echo "--- rlagent log ---" >&2
		cat "$AGENT_LOG" >&2 2>/dev/null || true
	fi
	return $rc
}

# rl ARGS...: rlctl against this test's agent.
rl() {
	"$RLGATE_BUILD/rlctl" --socket "$CTL" "$@"
}

# agent_exec ARGS...: rlagent in s1's network namespace, in the foreground,
# killed after 10 s.
# nsenter rather than `ip netns exec`: the latter mounts a fresh /sys in a
# mount namespace of its own, which hides the bpffs at /sys/fs/bpf, so pins
# would not outlive the process and a restarted agent could not adopt them.
agent_exec() {
	timeout 10 nsenter --net="/run/netns/$(lab_ns s1)" "$RLGATE_BUILD/rlagent" "$@"
}

# agent_start [rlagent options]: rlagent on s1's eth0 with this test's
# paths, in the background (AGENT_PID); returns once it answers on its
# control socket.  (Not through agent_exec: AGENT_PID must be rlagent's.)
agent_start() {
	local i

	nsenter --net="/run/netns/$(lab_ns s1)" "$RLGATE_BUILD/rlagent" --iface eth0 \
		--control "$CTL" --state-dir "$STATE_DIR" --pin-dir "$PIN_DIR" \
		--metrics "$METRICS_ADDR" "$@" >>"$AGENT_LOG" 2>&1 3>&- &
	AGENT_PID=$!
	for ((i = 0; i < 100; i++)); do
		rl status >/dev/null 2>&1 && return 0
		if ! kill -0 "$AGENT_PID" 2>/dev/null; then
			wait "$AGENT_PID"
			echo "rlagent exited with status $? before answering:" >&2
			cat "$AGENT_LOG" >&2
			AGENT_PID=
			return 1
		fi
		sleep 0.1
	done
	echo "rlagent does not answer on $CTL after 10 s:" >&2
	cat "$AGENT_LOG" >&2
	return 1
}

# agent_stop SIGNAL: sends SIGNAL to the agent, waits for it to exit and
# leaves its exit status in AGENT_RC.
agent_stop() {
	local i

	kill "-$1" "$AGENT_PID"
	for ((i = 0; i < 100; i++)); do
		kill -0 "$AGENT_PID" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$AGENT_PID" 2>/dev/null; then
		echo "rlagent $AGENT_PID still runs 5 s after SIG$1" >&2
		return 1
	fi
	AGENT_RC=0
	wait "$AGENT_PID" || AGENT_RC=$?
	AGENT_PID=
}

# agent_wait_exit SECONDS: waits for the agent to exit on its own; its
# status in AGENT_RC.
agent_wait_exit() {
	local i

	for ((i = 0; i < $1 * 20; i++)); do
		kill -0 "$AGENT_PID" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$AGENT_PID" 2>/dev/null; then
		echo "rlagent $AGENT_PID still runs after $1 s" >&2
		return 1
	fi
	AGENT_RC=0
	wait "$AGENT_PID" || AGENT_RC=$?
	AGENT_PID=
}

# prefixes HOST...: the client prefixes of HOSTs (their /28 and /80), as
# one comma list for --match.
prefixes() {
	local h n out=

	for h in "$@"; do
		n=${h#c}
		out+=${out:+,}192.0.2.$((64 + 16 * (n - 1)))/28,2001:db8:1:0:$n::/80
	done
	echo "$out"
}

# stat_get TENANT FIELD: one field of `rlctl --json stats TENANT`.
stat_get() {
	local out

	out=$(rl --json stats "$1") || { echo "rlctl stats $1 failed: $out" >&2; return 1; }
	json_get ".[] | select(.tenant == \"$1\") | .$2" "$out"
}

# metrics: the agent's Prometheus page, fetched from inside s1.
metrics() {
	in_ns s1 curl -sf --max-time 5 "http://$METRICS_ADDR/metrics"
}

# metric_get NAME TENANT [PAGE]: the value of NAME{tenant="TENANT"}.
metric_get() {
	local page=${3-} v

	[[ -n $page ]] || page=$(metrics) || { echo "couldn't fetch metrics" >&2; return 1; }
	v=$(awk -v k="$1{tenant=\"$2\"}" '$1 == k { print $2; exit }' <<<"$page")
	[[ -n $v ]] || { echo "metric $1{tenant=\"$2\"} missing" >&2; return 1; }
	echo "$v"
}

# loadgen_bg HOST OUT ARGS...: loadgen --json ARGS in HOST in the
# background, report to OUT; LOADGEN_BG_PID is the job to pass to
# loadgen_wait.
loadgen_bg() {
	local host=$1 out=$2

	shift 2
	in_ns "$host" "$LOADGEN" --json "$@" >"$out" 2>"$out.err" 3>&- &
	LOADGEN_BG_PID=$!
}

# loadgen_wait PID OUT: waits for a loadgen_bg run; its report lands in
# LOADGEN_JSON.
loadgen_wait() {
	local rc=0

	wait "$1" || rc=$?
	LOADGEN_JSON=$(cat "$2")
	if ((rc)) || ! jq -e . >/dev/null 2>&1 <<<"$LOADGEN_JSON"; then
		echo "background loadgen failed (exit $rc):" >&2
		cat "$2.err" >&2
		echo "stdout: $LOADGEN_JSON" >&2
		return 1
	fi
	echo "loadgen (background) -> $LOADGEN_JSON"
}

# expected RATE DURATION BURST: what a token bucket admits from an offer
# well above RATE: rate x duration + burst.
expected() {
	awk -v r="$1" -v d="$2" -v b="$3" 'BEGIN { print r * d + b }'
}

# tenants_json: the policy as the agent lists it, in a canonical form.
tenants_json() {
	rl --json tenant list | jq -cS .
}

# xdp_attached: whether s1's eth0 runs an XDP program.
xdp_attached() {
	ip -n "$(lab_ns s1)" link show dev eth0 | grep -q 'prog/xdp'
}
