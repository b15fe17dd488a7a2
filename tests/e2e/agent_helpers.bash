# agent_helpers.bash: what every suite that runs rlagent shares on top of
# helpers.bash - processes stopped and awaited by PID, rlagent started in a
# lab host and awaited on its control socket, its stats and metrics read
# back, loadgen in the background; and the single-agent lab of the
# agent_*.bats suites (one server s1, rlagent on its eth0, rlctl against it).
# fleet_helpers.bash builds its several agents on the same functions.
#
# Use from a suite with `load helpers` then `load agent_helpers`, and
#     setup()    { agent_setup; }
#     teardown() { agent_teardown; }
# shellcheck disable=SC2034 # AGENT_RC, LOADGEN_BG_PID, ... are for the suites

PORT=8080
METRICS_ADDR=127.0.0.1:9464	# every agent's, inside its own namespace

# --- processes by PID ----------------------------------------------------------------

# proc_running PID: the process exists and is not a zombie (a child killed
# from a subshell stays one until this shell reaps it, and kill -0 still
# succeeds on it).
proc_running() {
	local st

	[[ -n $1 ]] || return 1
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $st != Z* ]]
}

# proc_wait_exit PID SECONDS [WHAT]: waits until PID is gone; fails after
# SECONDS.  Its exit status is left in PROC_RC when PID is this shell's
# child or an agent rlagent_launch started (otherwise 127: the status went
# to its parent).
proc_wait_exit() {
	local n

	for ((n = 0; n < $2 * 20; n++)); do
		proc_running "$1" || break
		sleep 0.05
	done
	if proc_running "$1"; then
		echo "process $1 still runs ${3:-after $2 s}" >&2
		return 1
	fi
	PROC_RC=0
	rlagent_exit_status "$1" && return 0
	wait "$1" 2>/dev/null || PROC_RC=$?
}

# proc_stop PID SIGNAL: sends SIGNAL and waits (5 s at most) until PID is
# gone; PROC_RC as for proc_wait_exit.  Nothing to do without a PID.  An
# agent rlagent_launch started is given RLAGENT_STOP_S and checked as
# rlagent_exit_check says: how every test that stops an agent sees how it
# went.
proc_stop() {
	local log

	[[ -n $1 ]] || return 0
	log=$(rlagent_log_of "$1")
	# an agent whose exit is recorded is gone: its PID may be another's
	[[ -n $log && -e $RLAGENT_DIR/$1.rc ]] || kill "-$2" "$1" 2>/dev/null || true
	if [[ -n $log ]]; then
		proc_wait_exit "$1" "$RLAGENT_STOP_S" "$RLAGENT_STOP_S s after SIG$2" ||
			return 1
		rlagent_exit_check "$1" "$2" "$PROC_RC" "$log"
		return
	fi
	proc_wait_exit "$1" 5 "5 s after SIG$2"
}

# --- how an agent exited -------------------------------------------------------------
#
# rlagent_launch runs each agent under a small shell of its own that waits
# for it and writes down its exit status (RLAGENT_DIR/PID.rc), beside the
# log it writes to (RLAGENT_DIR/PID.log): so the status of an agent started
# in setup_file, or by another test's shell, is known to whoever stops it.

RLAGENT_DIR=${BATS_RUN_TMPDIR:-${TMPDIR:-/tmp}}/rlagents
# How long a stopped agent may take: its own deadline for Redis's last
# answers is 1 s; a loaded machine and a sanitizer build take more.
RLAGENT_STOP_S=${RLAGENT_STOP_S:-10}
# What a sanitizer (ASan, LSan, UBSan) writes when it finds something.
RLAGENT_SAN_RE='ERROR: (Address|Leak|Memory|Thread)Sanitizer|runtime error: |^SUMMARY: [A-Za-z]+Sanitizer'

# rlagent_log_of PID: the log of agent PID if rlagent_launch started it,
# nothing otherwise.
rlagent_log_of() {
	if [[ -n $1 && -s $RLAGENT_DIR/$1.log ]]; then
		cat "$RLAGENT_DIR/$1.log"
	fi
}

# rlagent_exit_status PID: for an agent rlagent_launch started, waits (5 s
# at most: its shell writes it once the agent is reaped) for its exit status
# and leaves it in PROC_RC; fails for any other PID.
rlagent_exit_status() {
	local f=$RLAGENT_DIR/$1.rc n

	[[ -n $(rlagent_log_of "$1") ]] || return 1
	for ((n = 0; n < 100; n++)); do
		[[ -s $f ]] && break
		sleep 0.05
	done
	PROC_RC=$(cat "$f" 2>/dev/null) || PROC_RC=127
	[[ -n $PROC_RC ]] || PROC_RC=127
	return 0
}

# rlagent_log_clean LOG [WHO]: LOG holds no sanitizer report (shown when
# it does).
rlagent_log_clean() {
	[[ -s $1 ]] || return 0
	grep -Eq "$RLAGENT_SAN_RE" "$1" || return 0
	echo "${2:-rlagent} left a sanitizer report in $1:" >&2
	grep -E -A 30 "$RLAGENT_SAN_RE" "$1" | head -n 60 >&2
	return 1
}

# rlagent_exit_check PID SIGNAL STATUS LOG: agent PID, sent SIGNAL, exited
# as it must: 0 after SIGTERM or SIGINT (refunds done or given up, state
# written), never by a signal other than the one sent (a crash: SIGSEGV,
# SIGABRT), and without a sanitizer report in LOG.  Forgets PID's record.
rlagent_exit_check() {
	local pid=$1 sig=${2#SIG} rc=$3 log=$4 signum err=0

	rm -f "$RLAGENT_DIR/$pid.rc" "$RLAGENT_DIR/$pid.log"
	signum=$(kill -l "$sig" 2>/dev/null) || signum=
	if [[ $sig == TERM || $sig == INT ]] && ((rc != 0)); then
		echo "rlagent $pid exited with status $rc after SIG$sig, not 0" >&2
		err=1
	elif ((rc > 128)) && [[ $((rc - 128)) != "$signum" ]]; then
		echo "rlagent $pid died by signal $(kill -l $((rc - 128)) 2>/dev/null ||
			echo $((rc - 128))) after SIG$sig" >&2
		err=1
	fi
	rlagent_log_clean "$log" "rlagent $pid" || err=1
	((err == 0)) || { tail -n 30 "$log" >&2; return 1; }
}

# --- rlagent -------------------------------------------------------------------------

# rlagent_start HOST SOCKET STATE_DIR PIN_DIR LOG [rlagent options]: rlagent
# on HOST's eth0 (on no interface when RLAGENT_IFACE is set empty: a preload
# host) in the background (RLAGENT_PID), its output appended to LOG;
# returns once it answers on its control SOCKET.  proc_stop reads its exit
# status and checks it (rlagent_exit_check).
rlagent_start() {
	rlagent_launch "$@"
	rlagent_ready "$1" "$2" "$5" "$RLAGENT_PID"
}

# rlagent_launch HOST SOCKET STATE_DIR PIN_DIR LOG [rlagent options]: the
# start of rlagent_start, without waiting (several agents load their
# programs at once); rlagent_ready then waits for each.  RLAGENT_PID is the
# agent's, RLAGENT_JOB the job of the shell that waits for it (what a suite
# disowns).
# nsenter rather than `ip netns exec`: the latter mounts a fresh /sys in a
# mount namespace of its own, which hides the bpffs at /sys/fs/bpf, so pins
# would not outlive the process and a restarted agent could not adopt them.
rlagent_launch() {
	local host=$1 sock=$2 log=$5 iface=() n

	[[ -n ${RLAGENT_IFACE-eth0} ]] && iface=(--iface "${RLAGENT_IFACE-eth0}")
	mkdir -p "$RLAGENT_DIR"
	(
		rc=0

		# None of the test's descriptors above 2 stays open in the
		# agent (bats' fd 3, the write ends of fifos a connection holder
		# of the test reads: an agent restarted inside a test would keep
		# them open, and the holder's teardown would wait for it).
		for fd in /proc/self/fd/*; do
			fd=${fd##*/}
			((fd > 2)) && exec {fd}>&-
		done 2>/dev/null
		# at nice -10, as the systemd unit runs it (Nice=-10)
		nice -n -10 nsenter --net="/run/netns/$(lab_ns "$host")" \
			"$RLGATE_BUILD/rlagent" "${iface[@]}" --control "$sock" --state-dir "$3" \
			--pin-dir "$4" --metrics "$METRICS_ADDR" "${@:6}" >>"$log" 2>&1 &
		pid=$!
		exec >/dev/null 2>&1 </dev/null
		echo "$log" >"$RLAGENT_DIR/$pid.log"
		echo "$pid" >"$RLAGENT_DIR/job.$BASHPID.tmp"
		mv "$RLAGENT_DIR/job.$BASHPID.tmp" "$RLAGENT_DIR/job.$BASHPID"
		wait "$pid" || rc=$?
		echo "$rc" >"$RLAGENT_DIR/$pid.rc.tmp"
		mv "$RLAGENT_DIR/$pid.rc.tmp" "$RLAGENT_DIR/$pid.rc"
	) &
	RLAGENT_JOB=$!
	RLAGENT_PID=
	for ((n = 0; n < 200; n++)); do
		if [[ -s $RLAGENT_DIR/job.$RLAGENT_JOB ]]; then
			RLAGENT_PID=$(<"$RLAGENT_DIR/job.$RLAGENT_JOB")
			rm -f "$RLAGENT_DIR/job.$RLAGENT_JOB"
			return 0
		fi
		sleep 0.05
	done
	echo "rlagent on $host was not started within 10 s" >&2
	return 1
}

# rlagent_ready HOST SOCKET LOG PID: waits (10 s at most) until the agent
# PID launched on HOST answers on SOCKET; fails showing LOG when it exits
# first or does not answer.
rlagent_ready() {
	local host=$1 sock=$2 log=$3 pid=$4 n rc

	for ((n = 0; n < 100; n++)); do
		"$RLGATE_BUILD/rlctl" --socket "$sock" status >/dev/null 2>&1 && return 0
		if ! proc_running "$pid"; then
			rc=0
			rlagent_exit_status "$pid" && rc=$PROC_RC ||
				{ wait "$pid" 2>/dev/null || rc=$?; }
			echo "rlagent on $host exited with status $rc before answering:" >&2
			tail -n 30 "$log" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "rlagent on $host does not answer on $sock after 10 s:" >&2
	tail -n 30 "$log" >&2
	return 1
}

# rlctl_stat SOCKET TENANT FIELD: one field of `rlctl --json stats TENANT`
# from the agent on SOCKET.
rlctl_stat() {
	local out

	out=$("$RLGATE_BUILD/rlctl" --socket "$1" --json stats "$2") ||
		{ echo "rlctl stats $2 on $1 failed: $out" >&2; return 1; }
	json_get ".[] | select(.tenant == \"$2\") | .$3" "$out"
}

# metrics HOST: the Prometheus page of the agent in HOST, fetched from
# inside HOST.
metrics() {
	in_ns "$1" curl -sf --max-time 5 "http://$METRICS_ADDR/metrics"
}

# metric_value KEY PAGE: the value of the metric line whose name, labels
# included, is KEY (e.g. 'rlgate_degraded_total{tenant="x"}') on PAGE.
metric_value() {
	local v

	v=$(awk -v k="$1" '$1 == k { print $2; exit }' <<<"$2")
	[[ -n $v ]] || { echo "metric $1 missing" >&2; return 1; }
	echo "$v"
}

# --- load ----------------------------------------------------------------------------

# loadgen_bg HOST OUT ARGS...: loadgen --json ARGS in HOST in the
# background, report to OUT; LOADGEN_BG_PID is the job to pass to
# loadgen_wait (loadgen itself: `ip netns exec` execs it).
loadgen_bg() {
	local host=$1 out=$2

	shift 2
	ip netns exec "$(lab_ns "$host")" "$LOADGEN" --json "$@" >"$out" 2>"$out.err" 3>&- &
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

# loadgen_stop PID OUT: ends a loadgen_bg run before its duration, once what
# needed the load is checked: it sends no more, waits for the connections in
# flight, and reports (marked interrupted) as loadgen_wait reads it.
loadgen_stop() {
	kill -INT "$1" 2>/dev/null || true
	loadgen_wait "$1" "$2"
}

# client_prefix cN: the IPv4 prefix client N owns alone (see docs/lab.md).
client_prefix() {
	echo "192.0.2.$((64 + 16 * (${1#c} - 1)))/28"
}

# --- one agent on s1 (agent_*.bats) --------------------------------------------------

# agent_setup [CLIENTS]: a fresh lab (1 server, CLIENTS clients, 2 unless
# given) for the test, the paths of this test's agent, and a server on
# s1:$PORT (IPv4 and IPv6).
agent_setup() {
	e2e_setup
	e2e_require_build rlagent rlctl loadgen pass.bpf.o
	lab_up --servers 1 --clients "${1:-2}"
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

	# killed, and its log checked for sanitizer reports: a test that
	# passed with an agent that crashed or leaked behind it fails here
	if [[ -n ${AGENT_PID:-} ]]; then
		proc_stop "$AGENT_PID" KILL || rc=1
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
# killed after 10 s (nsenter for the reason given at rlagent_start).
agent_exec() {
	timeout 10 nsenter --net="/run/netns/$(lab_ns s1)" "$RLGATE_BUILD/rlagent" "$@"
}

# agent_start [rlagent options]: rlagent on s1's eth0 with this test's
# paths, in the background (AGENT_PID); returns once it answers on its
# control socket.
agent_start() {
	local rc=0

	rlagent_start s1 "$CTL" "$STATE_DIR" "$PIN_DIR" "$AGENT_LOG" "$@" || rc=$?
	# kept even when it did not answer: the teardown kills it
	AGENT_PID=$RLAGENT_PID
	return $rc
}

# agent_stop SIGNAL: sends SIGNAL to the agent, waits for it to exit and
# leaves its exit status in AGENT_RC; fails unless it exited as
# rlagent_exit_check says (0 after SIGTERM, no crash, no sanitizer report).
agent_stop() {
	local err=0

	proc_running "$AGENT_PID" || { echo "rlagent ${AGENT_PID:-(none)} does not run" >&2; return 1; }
	proc_stop "$AGENT_PID" "$1" || err=1
	proc_running "$AGENT_PID" && return 1
	AGENT_RC=$PROC_RC
	AGENT_PID=
	return $err
}

# agent_wait_exit SECONDS: waits for the agent to exit on its own; its
# status in AGENT_RC.
agent_wait_exit() {
	proc_wait_exit "$AGENT_PID" "$1" || return 1
	AGENT_RC=$PROC_RC
	rlagent_log_clean "$AGENT_LOG" || return 1
	AGENT_PID=
}

# prefixes HOST...: the client prefixes of HOSTs (their /28 and /80), as
# one comma list for --match.
prefixes() {
	local h out=

	for h in "$@"; do
		out+=${out:+,}$(client_prefix "$h"),2001:db8:1:0:${h#c}::/80
	done
	echo "$out"
}

# stat_get TENANT FIELD: one field of `rlctl --json stats TENANT`.
stat_get() {
	rlctl_stat "$CTL" "$@"
}

# metric_get NAME TENANT [PAGE]: the value of NAME{tenant="TENANT"} on PAGE
# (default: fetched now).
metric_get() {
	local page=${3-}

	[[ -n $page ]] || page=$(metrics s1) || { echo "couldn't fetch metrics" >&2; return 1; }
	metric_value "$1{tenant=\"$2\"}" "$page"
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
