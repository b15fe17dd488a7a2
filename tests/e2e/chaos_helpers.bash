# chaos_helpers.bash: what the fleet failure suite (chaos.bats) shares on
# top of helpers.bash - one lab for the file (servers s1-s3 each with a
# fleet agent, clients c1-c2, a Redis host), redis-server and the agents
# killed, stopped and started again by PID, Redis cut off from one host,
# stats snapshots over a time window, the kernel's own counters read from
# the pins while an agent is dead, and a teardown that puts every piece
# back (Redis up, agents up, routes gone) even when a test failed halfway.
#
# Use from a suite with `load helpers` then `load chaos_helpers`, and
#     setup_file()    { chaos_setup_file; }
#     teardown_file() { chaos_teardown_file; }
#     setup()         { chaos_setup; }
#     teardown()      { chaos_teardown; }
# Tests create their tenants with ch_tenant_set, which deletes them
# fleet-wide at teardown.
# shellcheck disable=SC2034 # CH_MS is for the suites

CH_PORTS=(8080 8081 8082)	# every server host listens on all of them
CH_REDIS=192.0.2.250:6379
CH_AGENTS=3			# agents s1..s3
CH_METRICS=127.0.0.1:9464	# each agent's, inside its own namespace

# --- small things --------------------------------------------------------------------

ch_now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ch_calc EXPR: awk arithmetic, rounded to 3 decimals.
ch_calc() { awk "BEGIN { printf \"%.3f\\n\", $1 }"; }

# ch_sleep_until T_MS: sleeps until ch_now_ms reaches T_MS (at once if past).
ch_sleep_until() {
	local left=$(($1 - $(ch_now_ms)))

	((left <= 0)) || sleep "$(ch_calc "$left / 1000")"
}

# ch_bg_track PID: a background job killed at teardown if still running.
ch_bg_track() { echo "$1" >>"$BATS_TEST_TMPDIR/bg.pids"; }

# --- per host paths -------------------------------------------------------------------

ch_dir() { echo "$CHAOS_DIR/s$1"; }
ch_ctl() { echo "$CHAOS_DIR/s$1/sock"; }
ch_log() { echo "$CHAOS_DIR/s$1/log"; }
ch_pin_dir() { echo "/sys/fs/bpf/rlgate-$LAB-s$1"; }

# rlc I ARGS...: rlctl against agent I.
rlc() {
	local i=$1

	shift
	"$RLGATE_BUILD/rlctl" --socket "$(ch_ctl "$i")" "$@"
}

# --- processes by PID -----------------------------------------------------------------

# ch_running PID: the process exists and is not a zombie (a killed child of
# this shell stays one until waited for, and kill -0 still succeeds on it).
ch_running() {
	local st

	[[ -n $1 ]] || return 1
	st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
	[[ $st != Z* ]]
}

# ch_stopped PID: the process is stopped (SIGSTOP).
ch_stopped() {
	[[ $(ps -o stat= -p "$1" 2>/dev/null) == T* ]]
}

# ch_kill PID SIGNAL: sends SIGNAL and waits (5 s at most) until PID is gone.
ch_kill() {
	local n

	kill "-$2" "$1" 2>/dev/null || true
	for ((n = 0; n < 100; n++)); do
		ch_running "$1" || break
		sleep 0.05
	done
	wait "$1" 2>/dev/null || true
	if ch_running "$1"; then
		echo "process $1 still runs 5 s after SIG$2" >&2
		return 1
	fi
}

# --- Redis ---------------------------------------------------------------------------

# rcli ARGS...: redis-cli against the lab's Redis, from inside its host.
ch_rcli() {
	in_ns redis redis-cli -h "${CH_REDIS%:*}" -p "${CH_REDIS##*:}" "$@"
}

ch_redis_pid() { cat "$CHAOS_DIR/redis.pid" 2>/dev/null || true; }

# ch_redis_start: a new, empty redis-server on the Redis host (no
# persistence); returns once it answers.
ch_redis_start() {
	local n

	ip netns exec "$(lab_ns redis)" redis-server --bind "${CH_REDIS%:*}" \
		--port "${CH_REDIS##*:}" --save '' --appendonly no --protected-mode no \
		--daemonize no >>"$CHAOS_DIR/redis.log" 2>&1 3>&- &
	echo $! >"$CHAOS_DIR/redis.pid"
	# not a job of this shell: no "Killed" notice when a test kills it
	disown $!
	for ((n = 0; n < 100; n++)); do
		[[ $(ch_rcli PING 2>/dev/null) == PONG ]] && return 0
		ch_running "$(ch_redis_pid)" || break
		sleep 0.05
	done
	echo "redis-server does not answer on $CH_REDIS:" >&2
	tail -n 20 "$CHAOS_DIR/redis.log" >&2
	return 1
}

# ch_redis_kill: SIGKILL, as in a crash: the agents see their connections
# close.  Prints the time it was sent (ms).
ch_redis_kill() {
	local pid

	pid=$(ch_redis_pid)
	ch_running "$pid" || { echo "redis-server is not running" >&2; return 1; }
	ch_now_ms
	ch_kill "$pid" KILL
}

# --- agents --------------------------------------------------------------------------

ch_agent_pid() { cat "$(ch_dir "$1")/pid" 2>/dev/null || true; }

# ch_agent_start I [rlagent options]: rlagent in fleet mode on sI's eth0,
# agent id sI, its own pins, socket, state and metrics; returns once it
# answers on its control socket.  nsenter rather than `ip netns exec`, which
# would hide /sys/fs/bpf (and so the pins a restarted agent adopts).
ch_agent_start() {
	local i=$1 pid n

	shift
	mkdir -p "$(ch_dir "$i")/state"
	nsenter --net="/run/netns/$(lab_ns "s$i")" "$RLGATE_BUILD/rlagent" --iface eth0 \
		--redis "$CH_REDIS" --agent-id "s$i" --control "$(ch_ctl "$i")" \
		--state-dir "$(ch_dir "$i")/state" --pin-dir "$(ch_pin_dir "$i")" \
		--metrics "$CH_METRICS" "$@" >>"$(ch_log "$i")" 2>&1 3>&- &
	pid=$!
	disown "$pid"
	echo "$pid" >"$(ch_dir "$i")/pid"
	for ((n = 0; n < 100; n++)); do
		rlc "$i" status >/dev/null 2>&1 && return 0
		if ! ch_running "$pid"; then
			echo "rlagent on s$i exited before answering:" >&2
			tail -n 20 "$(ch_log "$i")" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "rlagent on s$i does not answer after 10 s:" >&2
	tail -n 20 "$(ch_log "$i")" >&2
	return 1
}

# --- broker state ---------------------------------------------------------------------

# ch_broker I: agent I's broker state (healthy, degraded), "?" without answer.
ch_broker() {
	local b

	b=$(rlc "$1" --json status 2>/dev/null | jq -r .broker 2>/dev/null)
	echo "${b:-?}"
}

# ch_wait_broker T0_MS STATE SECONDS HOST...: polls every 50 ms until each
# HOST's broker is STATE and leaves in CH_MS[HOST] when it was first seen so,
# in ms since T0_MS.  Fails (naming the stragglers) after SECONDS.
declare -gA CH_MS
ch_wait_broker() {
	local t0=$1 want=$2 limit=$(($3 * 1000)) h left

	shift 3
	CH_MS=()
	while :; do
		left=
		for h in "$@"; do
			[[ -n ${CH_MS[$h]:-} ]] && continue
			if [[ $(ch_broker "$h") == "$want" ]]; then
				CH_MS[$h]=$(($(ch_now_ms) - t0))
			else
				left+=" s$h"
			fi
		done
		[[ -z $left ]] && return 0
		if (($(ch_now_ms) - t0 > limit)); then
			echo "broker not $want after $3 s on:$left" >&2
			return 1
		fi
		sleep 0.05
	done
}

# ch_wait_steady SECONDS: every agent healthy and counting $CH_AGENTS live
# agents (after a Redis restart the registry fills within a heartbeat).
ch_wait_steady() {
	local n i s

	for ((n = 0; n < $1 * 10; n++)); do
		s=
		for ((i = 1; i <= CH_AGENTS; i++)); do
			s+=$(rlc "$i" --json status 2>/dev/null | jq -r '"\(.broker)/\(.live_agents)"')" "
		done
		[[ $s == "$(printf "healthy/$CH_AGENTS %.0s" $(seq "$CH_AGENTS"))" ]] && return 0
		sleep 0.1
	done
	echo "agents not steady after $1 s (broker/live agents of s1..s$CH_AGENTS): $s" >&2
	return 1
}

# --- cutting one host off Redis --------------------------------------------------------

# A blackhole route to the Redis address in the server's namespace: its
# packets to Redis vanish (the TCP connection stays open, calls go
# unanswered), while client traffic to and from the server is untouched.
ch_cut() { ip -n "$(lab_ns "s$1")" route add blackhole "${CH_REDIS%:*}/32"; }
ch_uncut() { ip -n "$(lab_ns "s$1")" route del blackhole "${CH_REDIS%:*}/32" 2>/dev/null; }

# --- stats ----------------------------------------------------------------------------

# ch_snap TENANT: one snapshot of TENANT's stats on every agent, as a JSON
# object {"1": {"ms": ..., "admitted": ..., "denied": ..., "degraded": ...,
# "broker": ...}, ...}; ms is taken right before each host's query.
ch_snap() {
	local i ms st b out='{}'

	for ((i = 1; i <= CH_AGENTS; i++)); do
		ms=$(ch_now_ms)
		st=$(rlc "$i" --json stats "$1") || { echo "rlctl stats $1 on s$i failed" >&2; return 1; }
		b=$(ch_broker "$i")
		out=$(jq -c --arg i "$i" --argjson ms "$ms" --arg b "$b" --argjson st "$st" \
			'. + {($i): ($st[0] | {admitted, denied, degraded} + {ms: $ms, broker: $b})}' \
			<<<"$out")
	done
	echo "$out"
}

# ch_delta A B HOST FIELD: FIELD on HOST from snapshot A to snapshot B.
ch_delta() {
	jq -rn --argjson a "$1" --argjson b "$2" --arg h "$3" --arg f "$4" \
		'$b[$h][$f] - $a[$h][$f]'
}

# ch_sum_delta A B FIELD: FIELD from A to B summed over the hosts.
ch_sum_delta() {
	jq -rn --argjson a "$1" --argjson b "$2" --arg f "$3" \
		'[$b | keys[] as $h | $b[$h][$f] - $a[$h][$f]] | add'
}

# ch_secs A B HOST: seconds from snapshot A to snapshot B on HOST.
ch_secs() {
	jq -rn --argjson a "$1" --argjson b "$2" --arg h "$3" \
		'($b[$h].ms - $a[$h].ms) / 1000'
}

# ch_id I TENANT: TENANT's kernel slot on agent I.
ch_id() {
	rlc "$1" --json tenant get "$2" | jq -er .id
}

# ch_kstat I ID FIELD: FIELD of slot ID summed over the CPUs, read by bpftool
# from agent I's pinned tenant_stats: the kernel's own count, there whether
# the agent runs or not.
ch_kstat() {
	bpftool -j map lookup pinned "$(ch_pin_dir "$1")/tenant_stats" \
		key $(($2 & 255)) $(($2 >> 8 & 255)) 0 0 |
		jq -er --arg f "$3" '[.formatted.values[].value[$f]] | add'
}

# ch_metric I NAME: the value of the metric line starting with NAME (give
# the labels too, e.g. 'rlgate_degraded_total{tenant="x"}') on agent I.
ch_metric() {
	local page v

	page=$(in_ns "s$1" curl -sf --max-time 5 "http://$CH_METRICS/metrics") ||
		{ echo "couldn't fetch s$1's metrics" >&2; return 1; }
	v=$(awk -v k="$2" '$1 == k { print $2; exit }' <<<"$page")
	[[ -n $v ]] || { echo "metric $2 missing on s$1" >&2; return 1; }
	echo "$v"
}

# --- policy ---------------------------------------------------------------------------

# ch_tenant_set HOST NAME ARGS...: `rlctl tenant set NAME ARGS` on agent
# HOST; NAME is deleted fleet-wide at teardown.
ch_tenant_set() {
	local i=$1 name=$2

	shift 2
	grep -qx "$name" "$BATS_TEST_TMPDIR/tenants" || echo "$name" >>"$BATS_TEST_TMPDIR/tenants"
	rlc "$i" tenant set "$name" "$@" >/dev/null
}

# ch_lists I NAME: whether agent I lists tenant NAME.
ch_lists() {
	[[ $(rlc "$1" --json tenant list 2>/dev/null |
		jq --arg n "$2" '[.[] | select(.name == $n)] | length') == 1 ]]
}

# ch_wait_tenant NAME SECONDS: waits until every agent lists NAME.
ch_wait_tenant() {
	local n i ok

	for ((n = 0; n < $2 * 20; n++)); do
		ok=1
		for ((i = 1; i <= CH_AGENTS; i++)); do
			ch_lists "$i" "$1" || { ok=0; break; }
		done
		((ok)) && return 0
		sleep 0.05
	done
	echo "tenant '$1' not on every agent after $2 s" >&2
	return 1
}

# ch_policy I: agent I's policy, comparable across hosts (no kernel slot).
ch_policy() {
	rlc "$1" --json tenant list | jq -cS 'map(del(.id)) | sort_by(.name)'
}

# --- load -----------------------------------------------------------------------------

# ch_targets PORT W1 W2 W3: loadgen targets PORT on s1..s3 with weights
# (a weight 0 leaves the host out).
ch_targets() {
	local port=$1 i out=

	shift
	for ((i = 1; i <= 3; i++)); do
		(($1)) || { shift; continue; }
		out+=" $(lab_target "s$i" "$port")@$1"
		shift
	done
	echo "$out"
}

# ch_load_bg HOST OUT ARGS...: loadgen --json ARGS in HOST in the
# background, report to OUT; its PID in CH_LOAD_PID (killed at teardown).
ch_load_bg() {
	local host=$1 out=$2

	shift 2
	ip netns exec "$(lab_ns "$host")" "$LOADGEN" --json "$@" >"$out" 2>"$out.err" 3>&- &
	CH_LOAD_PID=$!
	ch_bg_track "$CH_LOAD_PID"
}

# ch_load_wait PID OUT: waits for a ch_load_bg run and checks its report.
ch_load_wait() {
	local rc=0

	wait "$1" || rc=$?
	if ((rc)) || ! jq -e . "$2" >/dev/null 2>&1; then
		echo "background loadgen failed (exit $rc):" >&2
		cat "$2.err" "$2" >&2
		return 1
	fi
	echo "loadgen: $(jq -c .total "$2")"
}

# ch_target_get OUT TARGET FIELD: FIELD of one target in a loadgen report.
ch_target_get() {
	jq -er --arg t "$2" --arg f "$3" '.targets[] | select(.target == $t) | .[$f]' "$1"
}

# --- file and test scope ----------------------------------------------------------------

chaos_setup_file() {
	local i p t

	e2e_require_root || return 0
	e2e_require_build rlagent rlctl loadgen pass.bpf.o
	for t in redis-server redis-cli bpftool jq curl; do
		command -v "$t" >/dev/null || { echo "$t is needed (tools/deps.sh)" >&2; return 1; }
	done
	lab_up --servers 3 --clients 2 --redis
	export CHAOS_DIR=$BATS_FILE_TMPDIR/chaos
	mkdir -p "$CHAOS_DIR"
	ch_redis_start
	for ((i = 1; i <= 3; i++)); do
		for p in "${CH_PORTS[@]}"; do
			serve_start "s$i" "$p"
		done
	done
	for ((i = 1; i <= CH_AGENTS; i++)); do
		ch_agent_start "$i"
	done
	ch_wait_steady 10
}

# Agents and Redis by PID, then the lab, then the pins; never fails.
chaos_teardown_file() {
	local i pid

	if [[ -n ${CHAOS_DIR:-} ]]; then
		for ((i = 1; i <= CH_AGENTS; i++)); do
			pid=$(ch_agent_pid "$i")
			[[ -n $pid ]] && ch_kill "$pid" KILL 2>/dev/null
		done
		pid=$(ch_redis_pid)
		[[ -n $pid ]] && ch_kill "$pid" KILL 2>/dev/null
	fi
	e2e_teardown_file
	if [[ -n ${LAB:-} ]]; then
		for ((i = 1; i <= CH_AGENTS; i++)); do
			rm -rf "$(ch_pin_dir "$i")" || true
		done
	fi
	return 0
}

chaos_setup() {
	e2e_setup
	: >"$BATS_TEST_TMPDIR/tenants"
	: >"$BATS_TEST_TMPDIR/bg.pids"
	ch_wait_steady 10
}

# ch_restore: whatever a test broke, put back - routes removed, Redis
# continued or started (empty), agents started on their pins - and wait
# until the fleet is steady again (a reconnect after a long outage waits
# for the agent's backoff, up to 5 s).
ch_restore() {
	local i pid rc=0

	for ((i = 1; i <= CH_AGENTS; i++)); do
		ch_uncut "$i" || true
	done
	pid=$(ch_redis_pid)
	if ch_running "$pid" && ch_stopped "$pid"; then
		kill -CONT "$pid"
	elif ! ch_running "$pid"; then
		ch_redis_start || rc=1
	fi
	for ((i = 1; i <= CH_AGENTS; i++)); do
		ch_running "$(ch_agent_pid "$i")" || ch_agent_start "$i" || rc=1
	done
	ch_wait_steady 12 || rc=1
	return $rc
}

# Stops this test's loads, repairs the fleet, deletes this test's tenants
# on every agent; shows the agents' logs when the test failed.
chaos_teardown() {
	local pid name i n rc=0

	while read -r pid; do
		[[ -n $pid ]] || continue
		kill -KILL "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done <"$BATS_TEST_TMPDIR/bg.pids"
	ch_restore || rc=1
	while read -r name; do
		[[ -n $name ]] || continue
		rlc 1 tenant del "$name" >/dev/null 2>&1 || true
		for ((i = 1; i <= CH_AGENTS; i++)); do
			for ((n = 0; n < 60; n++)); do
				ch_lists "$i" "$name" || break
				# a copy that came back (a lost delete): delete it here too
				((n % 20 == 19)) && rlc "$i" tenant del "$name" >/dev/null 2>&1
				sleep 0.05
			done
		done
	done <"$BATS_TEST_TMPDIR/tenants"
	if [[ ${BATS_TEST_COMPLETED:-} != 1 || $rc != 0 ]] && [[ -n ${CHAOS_DIR:-} ]]; then
		for ((i = 1; i <= CH_AGENTS; i++)); do
			[[ -s $(ch_log "$i") ]] || continue
			echo "--- rlagent s$i log (last 25 lines) ---" >&2
			tail -n 25 "$(ch_log "$i")" >&2
		done
	fi
	return $rc
}
