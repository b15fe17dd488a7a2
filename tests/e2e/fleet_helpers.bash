# fleet_helpers.bash: what the fleet-mode end-to-end suite shares on top of
# helpers.bash - one lab for the file (servers s1-s4, clients c1-c2, a Redis
# host), redis-server in it, an accept-and-close server on every server host,
# rlagent in fleet mode on s1-s3 (s4 is left for agents a test starts
# itself), rlctl against any of them, and cleanup by PID even on failure.
#
# Use from a suite with `load helpers` then `load fleet_helpers`, and
#     setup_file()    { fleet_setup_file; }
#     teardown_file() { fleet_teardown_file; }
#     setup()         { fleet_setup; }
#     teardown()      { fleet_teardown; }
# Tests create their tenants with fleet_tenant_set, which also deletes them
# fleet-wide at teardown, so tenants with the same match never meet.
# shellcheck disable=SC2034 # FLEET_RC is for the suites

PORT=8080
REDIS_ADDR=192.0.2.250:6379
FLEET_AGENTS=3		# agents started for the whole file, on s1..s3

# --- per host paths -----------------------------------------------------------------

# Everything of agent I lives in $FLEET_DIR/sI; its pins in a dir unique to
# the lab (bpffs is not per network namespace).
_fa_dir() { echo "$FLEET_DIR/s$1"; }
fleet_ctl() { echo "$FLEET_DIR/s$1/sock"; }
fleet_log() { echo "$FLEET_DIR/s$1/log"; }
fleet_pin_dir() { echo "/sys/fs/bpf/rlgate-$LAB-s$1"; }

# fleet_pid I: the PID of agent I, empty when it does not run.
fleet_pid() {
	local f=$FLEET_DIR/s$1/pid pid

	[[ -s $f ]] || return 0
	pid=$(<"$f")
	kill -0 "$pid" 2>/dev/null && echo "$pid"
	return 0
}

# rls I ARGS...: rlctl against agent I.
rls() {
	local i=$1

	shift
	"$RLGATE_BUILD/rlctl" --socket "$(fleet_ctl "$i")" "$@"
}

# --- Redis -------------------------------------------------------------------------

# rcli ARGS...: redis-cli against the lab's Redis, from inside its host.
rcli() {
	in_ns redis redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" "$@"
}

# redis_start: redis-server on the Redis host, no persistence; returns when
# it answers.  Its PID goes to $FLEET_DIR/redis.pid.
redis_start() {
	local i

	ip netns exec "$(lab_ns redis)" redis-server --bind "${REDIS_ADDR%:*}" \
		--port "${REDIS_ADDR##*:}" --save '' --appendonly no --protected-mode no \
		--daemonize no >"$FLEET_DIR/redis.log" 2>&1 3>&- &
	echo $! >"$FLEET_DIR/redis.pid"
	for ((i = 0; i < 100; i++)); do
		[[ $(rcli PING 2>/dev/null) == PONG ]] && return 0
		kill -0 "$(<"$FLEET_DIR/redis.pid")" 2>/dev/null || break
		sleep 0.05
	done
	echo "redis-server does not answer on $REDIS_ADDR:" >&2
	cat "$FLEET_DIR/redis.log" >&2
	return 1
}

# --- agents ------------------------------------------------------------------------

# fleet_agent_start I [rlagent options]: rlagent in fleet mode on sI's eth0,
# agent id sI, in the background; returns once it answers on its control
# socket.  nsenter rather than `ip netns exec`, which would hide /sys/fs/bpf.
fleet_agent_start() {
	local i=$1 dir pid n

	shift
	dir=$(_fa_dir "$i")
	mkdir -p "$dir/state"
	nsenter --net="/run/netns/$(lab_ns "s$i")" "$RLGATE_BUILD/rlagent" --iface eth0 \
		--redis "$REDIS_ADDR" --agent-id "s$i" --control "$(fleet_ctl "$i")" \
		--state-dir "$dir/state" --pin-dir "$(fleet_pin_dir "$i")" \
		--metrics 127.0.0.1:9464 "$@" >>"$(fleet_log "$i")" 2>&1 3>&- &
	pid=$!
	echo "$pid" >"$dir/pid"
	for ((n = 0; n < 100; n++)); do
		rls "$i" status >/dev/null 2>&1 && return 0
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "rlagent on s$i exited before answering:" >&2
			cat "$(fleet_log "$i")" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "rlagent on s$i does not answer after 10 s:" >&2
	cat "$(fleet_log "$i")" >&2
	return 1
}

# fleet_agent_stop I SIGNAL: sends SIGNAL to agent I and waits (5 s at most)
# for it to exit.  When the agent is this shell's child its exit status is
# left in FLEET_RC.
fleet_agent_stop() {
	local pid n

	pid=$(fleet_pid "$1")
	[[ -n $pid ]] || return 0
	kill "-$2" "$pid" 2>/dev/null || true
	for ((n = 0; n < 100; n++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "rlagent on s$1 ($pid) still runs 5 s after SIG$2" >&2
		return 1
	fi
	FLEET_RC=0
	wait "$pid" 2>/dev/null || FLEET_RC=$?
	rm -f "$(_fa_dir "$1")/pid"
}

# fleet_agent_wipe I: after agent I stopped, removes what it leaves behind
# on purpose (XDP program, pins, state), so the next agent there is new.
fleet_agent_wipe() {
	ip -n "$(lab_ns "s$1")" link set dev eth0 xdp off 2>/dev/null || true
	rm -rf "$(fleet_pin_dir "$1")" "$(_fa_dir "$1")/state"
}

# --- file and test scope -------------------------------------------------------------

fleet_setup_file() {
	local i

	e2e_require_root || return 0
	e2e_require_build rlagent rlctl loadgen pass.bpf.o
	if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
		echo "redis-server and redis-cli are needed (tools/deps.sh)" >&2
		return 1
	fi
	lab_up --servers 4 --clients 2 --redis
	export FLEET_DIR=$BATS_FILE_TMPDIR/fleet
	mkdir -p "$FLEET_DIR"
	redis_start
	for i in 1 2 3 4; do
		serve_start "s$i" "$PORT"
	done
	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		fleet_agent_start "$i"
	done
	fleet_wait_live "$FLEET_AGENTS"
}

# Agents and Redis by PID, then the lab, then the pins; never fails.
fleet_teardown_file() {
	local i pid

	if [[ -n ${FLEET_DIR:-} ]]; then
		for i in 1 2 3 4; do
			fleet_agent_stop "$i" KILL || true
		done
		if [[ -s $FLEET_DIR/redis.pid ]]; then
			pid=$(<"$FLEET_DIR/redis.pid")
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	e2e_teardown_file
	if [[ -n ${LAB:-} ]]; then
		for i in 1 2 3 4; do
			rm -rf "$(fleet_pin_dir "$i")" || true
		done
	fi
}

fleet_setup() {
	e2e_setup
	: >"$BATS_TEST_TMPDIR/tenants"
	: >"$BATS_TEST_TMPDIR/bg.pids"
}

# Stops this test's loads, deletes its tenants on the whole fleet (and waits
# until every running agent has dropped them), stops an agent it started on
# s4; shows the agents' logs when the test failed.
fleet_teardown() {
	local pid name i n

	while read -r pid; do
		[[ -n $pid ]] || continue
		kill -KILL "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	done <"$BATS_TEST_TMPDIR/bg.pids"
	# SIGTERM: deregistered at once, the others count 3 again
	if [[ -n $(fleet_pid 4) ]]; then
		fleet_agent_stop 4 TERM || fleet_agent_stop 4 KILL || true
	fi
	[[ -n ${LAB:-} ]] && fleet_agent_wipe 4
	while read -r name; do
		[[ -n $name ]] || continue
		rls 1 tenant del "$name" >/dev/null 2>&1 || true
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			for ((n = 0; n < 60; n++)); do
				rls "$i" tenant get "$name" >/dev/null 2>&1 || break
				sleep 0.05
			done
		done
	done <"$BATS_TEST_TMPDIR/tenants"
	if [[ ${BATS_TEST_COMPLETED:-} != 1 && -n ${FLEET_DIR:-} ]]; then
		for i in 1 2 3 4; do
			[[ -s $(fleet_log "$i") ]] || continue
			echo "--- rlagent s$i log (last 30 lines) ---" >&2
			tail -n 30 "$(fleet_log "$i")" >&2
		done
	fi
	return 0
}

# --- policy and stats ---------------------------------------------------------------

# fleet_tenant_set HOST NAME ARGS...: `rlctl tenant set NAME ARGS` on agent
# HOST; NAME is deleted fleet-wide at teardown.
fleet_tenant_set() {
	local i=$1 name=$2

	shift 2
	grep -qx "$name" "$BATS_TEST_TMPDIR/tenants" || echo "$name" >>"$BATS_TEST_TMPDIR/tenants"
	rls "$i" tenant set "$name" "$@" >/dev/null
}

# now_ms: monotonic enough for measuring a second.
now_ms() {
	echo $(($(date +%s%N) / 1000000))
}

# wait_tenant HOST NAME SECONDS: waits until agent HOST lists NAME; prints
# how many ms that took.  Fails after SECONDS.
wait_tenant() {
	local t0 n

	t0=$(now_ms)
	while :; do
		n=$(rls "$1" --json tenant list 2>/dev/null |
			jq --arg n "$2" '[.[] | select(.name == $n)] | length' 2>/dev/null)
		if [[ $n == 1 ]]; then
			echo $(($(now_ms) - t0))
			return 0
		fi
		if (($(now_ms) - t0 > $3 * 1000)); then
			echo "tenant '$2' not on s$1 after $3 s" >&2
			return 1
		fi
		sleep 0.02
	done
}

# wait_stat HOST TENANT FIELD MIN SECONDS: waits until FIELD of agent
# HOST's stats of TENANT is at least MIN.
wait_stat() {
	local n v

	for ((n = 0; n < $5 * 20; n++)); do
		v=$(fleet_stat "$1" "$2" "$3" 2>/dev/null) && ((v >= $4)) && return 0
		sleep 0.05
	done
	echo "s$1's $3 of '$2' is '$v' after $5 s, expected at least $4" >&2
	return 1
}

# fleet_stat HOST TENANT FIELD: one field of agent HOST's stats of TENANT.
fleet_stat() {
	local out

	out=$(rls "$1" --json stats "$2") || { echo "rlctl stats $2 on s$1 failed: $out" >&2; return 1; }
	json_get ".[] | select(.tenant == \"$2\") | .$3" "$out"
}

# fleet_sum TENANT FIELD: FIELD of TENANT summed over agents s1..s3.
fleet_sum() {
	local i v sum=0

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		v=$(fleet_stat "$i" "$1" "$2") || return 1
		sum=$((sum + v))
	done
	echo "$sum"
}

# fleet_wait_live N: waits (5 s at most) until every agent s1..s3 counts N
# live agents (the count follows heartbeats, once a second).
fleet_wait_live() {
	local i n live

	for ((n = 0; n < 100; n++)); do
		live=
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			live+=$(rls "$i" --json status 2>/dev/null | jq -r .live_agents)" "
		done
		[[ $live == "$(printf "$1 %.0s" $(seq "$FLEET_AGENTS"))" ]] && return 0
		sleep 0.05
	done
	echo "live agents seen by s1..s$FLEET_AGENTS: $live(expected $1 each)" >&2
	return 1
}

# tenants_canon HOST: agent HOST's policy in a form comparable across hosts
# (without the per-host kernel slot).
tenants_canon() {
	rls "$1" --json tenant list | jq -cS 'map(del(.id)) | sort_by(.name)'
}

# --- load --------------------------------------------------------------------------

# load_bg HOST OUT ARGS...: loadgen --json ARGS in HOST in the background,
# report to OUT; its PID in LOAD_PID (and killed at teardown).
load_bg() {
	local host=$1 out=$2

	shift 2
	ip netns exec "$(lab_ns "$host")" "$LOADGEN" --json "$@" >"$out" 2>"$out.err" 3>&- &
	LOAD_PID=$!
	echo "$LOAD_PID" >>"$BATS_TEST_TMPDIR/bg.pids"
}

# load_wait PID OUT: waits for a load_bg run; prints its report.
load_wait() {
	local rc=0

	wait "$1" || rc=$?
	if ((rc)) || ! jq -e . "$2" >/dev/null 2>&1; then
		echo "background loadgen failed (exit $rc):" >&2
		cat "$2.err" "$2" >&2
		return 1
	fi
	cat "$2"
}

# targets WEIGHT1 WEIGHT2 WEIGHT3: loadgen targets s1..s3 with weights.
targets() {
	echo "$(lab_target s1 "$PORT")@$1 $(lab_target s2 "$PORT")@$2 $(lab_target s3 "$PORT")@$3"
}

# calc EXPR: awk arithmetic.
calc() {
	awk "BEGIN { print $1 }"
}

# client_prefix cN: the IPv4 prefix client N owns alone (see docs/lab.md).
client_prefix() {
	echo "192.0.2.$((64 + 16 * (${1#c} - 1)))/28"
}
