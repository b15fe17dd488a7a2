# fleet_helpers.bash: the fleet lab the fleet-mode suites (fleet.bats,
# chaos.bats) share on top of helpers.bash and agent_helpers.bash - one lab
# for the file (servers s1..s$FLEET_SERVERS, clients c1-c2, a Redis host),
# redis-server in it, accept-and-close servers on every server host, rlagent
# in fleet mode on s1..s$FLEET_AGENTS (the hosts beyond are left for agents a
# test starts itself), rlctl against any of them, fleet-wide tenants and
# stats, and cleanup by PID even on failure.
#
# Use from a suite with `load helpers`, `load agent_helpers`, then
# `load fleet_helpers`, and
#     setup_file()    { fleet_setup_file; }
#     teardown_file() { fleet_teardown_file; }
#     setup()         { fleet_setup; }
#     teardown()      { fleet_teardown; }
# Tests create their tenants with fleet_tenant_set, which also deletes them
# fleet-wide at teardown, so tenants with the same match never meet.
# shellcheck disable=SC2034 # FLEET_RC is for the suites

REDIS_ADDR=192.0.2.250:6379
FLEET_SERVERS=4		# server hosts in the lab
FLEET_AGENTS=3		# agents started for the whole file, on s1..s3
FLEET_PORTS=("$PORT")	# every server host listens on all of them
FLEET_AGENT_OPTS=()	# options every agent gets (e.g. how to reach Redis)
FLEET_REDIS_OPTS=()	# redis-server's options beyond the defaults (they win)
FLEET_RCLI_OPTS=()	# what redis-cli then needs to reach it

# --- per host paths -----------------------------------------------------------------

# Everything of agent I lives in $FLEET_DIR/sI; its pins in a dir unique to
# the lab (bpffs is not per network namespace).
fleet_dir() { echo "$FLEET_DIR/s$1"; }
fleet_ctl() { echo "$FLEET_DIR/s$1/sock"; }
fleet_log() { echo "$FLEET_DIR/s$1/log"; }
fleet_pin_dir() { echo "/sys/fs/bpf/rlgate-$LAB-s$1"; }

# fleet_pid I: the PID of agent I, empty when it does not run.
fleet_pid() {
	local f=$FLEET_DIR/s$1/pid pid

	[[ -s $f ]] || return 0
	pid=$(<"$f")
	if proc_running "$pid"; then
		echo "$pid"
	fi
}

# rls I ARGS...: rlctl against agent I.
rls() {
	local i=$1

	shift
	"$RLGATE_BUILD/rlctl" --socket "$(fleet_ctl "$i")" "$@"
}

# --- small things --------------------------------------------------------------------

# now_ms: monotonic enough for measuring a second.
now_ms() {
	echo $(($(date +%s%N) / 1000000))
}

# calc EXPR [FORMAT]: awk arithmetic, printed with the printf FORMAT
# (default: as awk prints numbers, whole ones whole).
calc() {
	awk "BEGIN { printf \"${2:-%s}\\n\", $1 }"
}

# sleep_until T_MS: sleeps until now_ms reaches T_MS (at once if past).
sleep_until() {
	local left=$(($1 - $(now_ms)))

	((left <= 0)) || sleep "$(calc "$left / 1000" %.3f)"
}

# fleet_bg_track PID: a background job killed at teardown if still running.
fleet_bg_track() { echo "$1" >>"$BATS_TEST_TMPDIR/bg.pids"; }

# --- Redis -------------------------------------------------------------------------

# rcli ARGS...: redis-cli against the lab's Redis, from inside its host.
rcli() {
	in_ns redis redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" \
		"${FLEET_RCLI_OPTS[@]}" "$@"
}

redis_pid() { cat "$FLEET_DIR/redis.pid" 2>/dev/null || true; }

# redis_start: a new, empty redis-server on the Redis host (no
# persistence); returns once it answers.  Its PID goes to
# $FLEET_DIR/redis.pid.
redis_start() {
	local n

	ip netns exec "$(lab_ns redis)" redis-server --bind "${REDIS_ADDR%:*}" \
		--port "${REDIS_ADDR##*:}" --save '' --appendonly no --protected-mode no \
		--daemonize no "${FLEET_REDIS_OPTS[@]}" >>"$FLEET_DIR/redis.log" 2>&1 3>&- &
	echo $! >"$FLEET_DIR/redis.pid"
	# not a job of this shell: no "Killed" notice when a test kills it
	disown $!
	for ((n = 0; n < 100; n++)); do
		[[ $(rcli PING 2>/dev/null) == PONG ]] && return 0
		proc_running "$(redis_pid)" || break
		sleep 0.05
	done
	echo "redis-server does not answer on $REDIS_ADDR:" >&2
	tail -n 20 "$FLEET_DIR/redis.log" >&2
	return 1
}

# --- agents ------------------------------------------------------------------------

# fleet_agent_start I [rlagent options]: rlagent in fleet mode on sI's eth0,
# agent id sI, its own pins, socket, state and metrics, in the background;
# returns once it answers on its control socket.
fleet_agent_start() {
	fleet_agent_launch "$@"
	rlagent_ready "s$1" "$(fleet_ctl "$1")" "$(fleet_log "$1")" "$RLAGENT_PID"
}

# fleet_agent_launch I [rlagent options]: the start of fleet_agent_start,
# without waiting for the agent to answer (rlagent_ready).
fleet_agent_launch() {
	local i=$1 dir redis=(--redis "$REDIS_ADDR")

	shift
	# a test's own --redis instead of the lab's (rlagent takes one)
	[[ " $* " != *" --redis "* ]] || redis=()
	dir=$(fleet_dir "$i")
	mkdir -p "$dir/state"
	rlagent_launch "s$i" "$(fleet_ctl "$i")" "$dir/state" "$(fleet_pin_dir "$i")" \
		"$(fleet_log "$i")" "${redis[@]}" --agent-id "s$i" \
		"${FLEET_AGENT_OPTS[@]}" "$@"
	# kept even when it does not answer: the teardown kills it
	echo "$RLAGENT_PID" >"$dir/pid"
}

# fleet_agent_start_counted I [rlagent options]: a new agent on sI (its
# pins and state wiped first), and waits (4 s at most) until agents s1..sI
# all count I live agents.
fleet_agent_start_counted() {
	local i=$1 h n

	shift
	fleet_agent_wipe "$i"
	fleet_agent_start "$i" "$@"
	for ((h = 1; h <= i; h++)); do
		for ((n = 0; n < 40; n++)); do
			[[ $(rls "$h" --json status | jq .live_agents) == "$i" ]] && break
			sleep 0.1
		done
	done
}

# fleet_agent_stop I SIGNAL: sends SIGNAL to agent I and waits for it to
# exit (proc_stop: RLAGENT_STOP_S at most), failing unless it exits as
# rlagent_exit_check says; its exit status is left in FLEET_RC.  An agent
# that exited already (say, on a SIGNAL the test sent every agent at once)
# is checked all the same.
fleet_agent_stop() {
	local f=$FLEET_DIR/s$1/pid pid err=0

	[[ -s $f ]] || return 0
	pid=$(<"$f")
	# gone already, and not an agent whose exit is to be checked
	[[ -n $(fleet_pid "$1") || -n $(rlagent_log_of "$pid") ]] || { rm -f "$f"; return 0; }
	proc_stop "$pid" "$2" || err=1
	proc_running "$pid" && return 1
	FLEET_RC=$PROC_RC
	rm -f "$(fleet_dir "$1")/pid"
	return $err
}

# fleet_agents_start: agents s1..s$FLEET_AGENTS started all at once (each
# spends a second or more having its program verified); returns once each
# answers.
fleet_agents_start() {
	local i

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		fleet_agent_launch "$i"
		# Tests kill them from their own processes: not jobs of this
		# shell, which would print a "Killed" notice into the TAP output.
		disown "$RLAGENT_JOB"
	done
	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		rlagent_ready "s$i" "$(fleet_ctl "$i")" "$(fleet_log "$i")" \
			"$(<"$(fleet_dir "$i")/pid")" || return 1
	done
}

# fleet_agent_wipe I: after agent I stopped, removes what it leaves behind
# on purpose (XDP program, pins, state), so the next agent there is new.
fleet_agent_wipe() {
	ip -n "$(lab_ns "s$1")" link set dev eth0 xdp off 2>/dev/null || true
	rm -rf "$(fleet_pin_dir "$1")" "$(fleet_dir "$1")/state"
}

# fleet_broker_within I SECONDS STATE: agent I's broker reaches STATE
# (healthy, degraded) within SECONDS.
fleet_broker_within() {
	local n state

	for ((n = 0; n < $2 * 20; n++)); do
		state=$(rls "$1" --json status 2>/dev/null | jq -r .broker)
		[[ $state == "$3" ]] && return 0
		sleep 0.05
	done
	echo "s$1's broker is '$state' after $2 s, expected '$3'" >&2
	return 1
}

# fleet_wait_steady SECONDS: every agent s1..s$FLEET_AGENTS healthy and
# counting $FLEET_AGENTS live agents (the count follows heartbeats, once a
# second; after a Redis restart the registry fills within a heartbeat).
fleet_wait_steady() {
	local n i s

	for ((n = 0; n < $1 * 10; n++)); do
		s=
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			s+=$(rls "$i" --json status 2>/dev/null | jq -r '"\(.broker)/\(.live_agents)"')" "
		done
		[[ $s == "$(printf "healthy/$FLEET_AGENTS %.0s" $(seq "$FLEET_AGENTS"))" ]] && return 0
		sleep 0.1
	done
	echo "agents not steady after $1 s (broker/live agents of s1..s$FLEET_AGENTS): $s" >&2
	return 1
}

# --- file and test scope -------------------------------------------------------------

# fleet_setup_file [TOOL...]: the lab, Redis, the servers and the agents;
# TOOLs are commands the suite needs besides Redis's and jq.
fleet_setup_file() {
	local i p t

	e2e_require_root || return 0
	e2e_require_build rlagent rlctl loadgen pass.bpf.o
	for t in redis-server redis-cli jq "$@"; do
		command -v "$t" >/dev/null || { echo "$t is needed (tools/deps.sh)" >&2; return 1; }
	done
	lab_up --servers "$FLEET_SERVERS" --clients 2 --redis
	export FLEET_DIR=$BATS_FILE_TMPDIR/fleet
	mkdir -p "$FLEET_DIR"
	redis_start
	for ((i = 1; i <= FLEET_SERVERS; i++)); do
		for p in "${FLEET_PORTS[@]}"; do
			serve_start "s$i" "$p"
		done
	done
	fleet_agents_start
	fleet_wait_steady 10
}

# Agents and Redis by PID, then the lab, then the pins.  The agents are
# stopped as an operator stops them, with SIGTERM, and fail the file when
# one does not exit cleanly (rlagent_exit_check); the cleanup goes on.
fleet_teardown_file() {
	local i rc=0

	if [[ -n ${FLEET_DIR:-} ]]; then
		for ((i = 1; i <= FLEET_SERVERS; i++)); do
			[[ -n $(fleet_pid "$i") ]] || continue
			fleet_agent_stop "$i" TERM || rc=1
			fleet_agent_stop "$i" KILL 2>/dev/null || true
		done
		proc_stop "$(redis_pid)" KILL 2>/dev/null || true
	fi
	e2e_teardown_file
	if [[ -n ${LAB:-} ]]; then
		for ((i = 1; i <= FLEET_SERVERS; i++)); do
			rm -rf "$(fleet_pin_dir "$i")" || true
		done
	fi
	return $rc
}

fleet_setup() {
	e2e_setup
	: >"$BATS_TEST_TMPDIR/tenants"
	: >"$BATS_TEST_TMPDIR/bg.pids"
}

# fleet_teardown [REPAIR...]: stops this test's loads; runs the command
# REPAIR when given (what the suite puts back after a test broke it: its
# failure fails the teardown, after the cleanup); stops the agents the test
# started beyond s$FLEET_AGENTS and wipes them; deletes the test's tenants on
# the whole fleet (and waits until every agent has dropped them); shows the
# agents' logs when the test or the repair failed.
fleet_teardown() {
	local pid name i n rc=0

	while read -r pid; do
		[[ -n $pid ]] || continue
		if kill -KILL "$pid" 2>/dev/null; then
			wait "$pid" 2>/dev/null || true
		fi
	done <"$BATS_TEST_TMPDIR/bg.pids"
	if (($#)); then
		"$@" || rc=1
	fi
	for ((i = FLEET_AGENTS + 1; i <= FLEET_SERVERS; i++)); do
		# SIGTERM: deregistered at once, the others count $FLEET_AGENTS again
		if [[ -n $(fleet_pid "$i") ]]; then
			fleet_agent_stop "$i" TERM || fleet_agent_stop "$i" KILL || true
		fi
		if [[ -n ${LAB:-} ]]; then
			fleet_agent_wipe "$i"
		fi
	done
	while read -r name; do
		[[ -n $name ]] || continue
		rls 1 tenant del "$name" >/dev/null 2>&1 || true
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			for ((n = 0; n < 60; n++)); do
				fleet_lists "$i" "$name" || break
				# a copy that came back (a lost delete): delete it here too
				if ((n % 20 == 19)); then
					rls "$i" tenant del "$name" >/dev/null 2>&1 || true
				fi
				sleep 0.05
			done
		done
	done <"$BATS_TEST_TMPDIR/tenants"
	if [[ ${BATS_TEST_COMPLETED:-} != 1 || $rc != 0 ]] && [[ -n ${FLEET_DIR:-} ]]; then
		for ((i = 1; i <= FLEET_SERVERS; i++)); do
			[[ -s $(fleet_log "$i") ]] || continue
			echo "--- rlagent s$i log (last 30 lines) ---" >&2
			tail -n 30 "$(fleet_log "$i")" >&2
		done
	fi
	return $rc
}

# --- policy --------------------------------------------------------------------------

# fleet_tenant_set HOST NAME ARGS...: `rlctl tenant set NAME ARGS` on agent
# HOST; NAME is deleted fleet-wide at teardown.
fleet_tenant_set() {
	local i=$1 name=$2

	shift 2
	grep -qx "$name" "$BATS_TEST_TMPDIR/tenants" || echo "$name" >>"$BATS_TEST_TMPDIR/tenants"
	rls "$i" tenant set "$name" "$@" >/dev/null
}

# fleet_lists I NAME: whether agent I lists tenant NAME.
fleet_lists() {
	[[ $(rls "$1" --json tenant list 2>/dev/null |
		jq --arg n "$2" '[.[] | select(.name == $n)] | length' 2>/dev/null) == 1 ]]
}

# How long a test waits for a change to reach every host: a deadline for a
# loaded machine, not a measure (make bench's fleet_change_ms measures how
# fast a change travels).
FLEET_WAIT_S=10

# fleet_wait_value SECONDS WANT CMD...: polls until CMD prints WANT; prints
# how many ms that took.  Fails after SECONDS, with what CMD printed last.
fleet_wait_value() {
	local limit=$(($1 * 1000)) want=$2 t0 v

	shift 2
	t0=$(now_ms)
	until v=$("$@" 2>/dev/null) && [[ $v == "$want" ]]; do
		if (($(now_ms) - t0 > limit)); then
			echo "$*: '$v' after $((limit / 1000)) s, expected '$want'" >&2
			return 1
		fi
		sleep 0.02
	done
	echo $(($(now_ms) - t0))
}

# fleet_wait_tenant NAME SECONDS [HOST...]: waits until every HOST (default:
# every agent s1..s$FLEET_AGENTS) lists NAME; prints how many ms that took.
# Fails after SECONDS.
fleet_wait_tenant() {
	local name=$1 limit=$(($2 * 1000)) hosts=("${@:3}") t0 h left

	((${#hosts[@]})) || mapfile -t hosts < <(seq "$FLEET_AGENTS")
	t0=$(now_ms)
	while :; do
		left=
		for h in "${hosts[@]}"; do
			fleet_lists "$h" "$name" || left+=" s$h"
		done
		if [[ -z $left ]]; then
			echo $(($(now_ms) - t0))
			return 0
		fi
		if (($(now_ms) - t0 > limit)); then
			echo "tenant '$name' not on$left after $((limit / 1000)) s" >&2
			return 1
		fi
		sleep 0.02
	done
}

# fleet_policy I: agent I's policy, comparable across hosts (without the
# per-host kernel slot).
fleet_policy() {
	rls "$1" --json tenant list | jq -cS 'map(del(.id)) | sort_by(.name)'
}

# --- stats ---------------------------------------------------------------------------

# fleet_stat HOST TENANT FIELD: one field of agent HOST's stats of TENANT.
fleet_stat() {
	rlctl_stat "$(fleet_ctl "$1")" "$2" "$3"
}

# fleet_wait_stat HOST TENANT FIELD MIN SECONDS: waits until FIELD of agent
# HOST's stats of TENANT is at least MIN.
fleet_wait_stat() {
	local n v

	for ((n = 0; n < $5 * 20; n++)); do
		v=$(fleet_stat "$1" "$2" "$3" 2>/dev/null) && ((v >= $4)) && return 0
		sleep 0.05
	done
	echo "s$1's $3 of '$2' is '$v' after $5 s, expected at least $4" >&2
	return 1
}

# fleet_sum TENANT FIELD: FIELD of TENANT summed over agents s1..s$FLEET_AGENTS.
fleet_sum() {
	local i v sum=0

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		v=$(fleet_stat "$i" "$1" "$2") || return 1
		sum=$((sum + v))
	done
	echo "$sum"
}

# fleet_snap TENANT: admitted, denied and degraded of TENANT per agent, as
# {"1": {...}, "2": {...}, ...}.
fleet_snap() {
	local i st out='{}'

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		st=$(rls "$i" --json stats "$1") || return 1
		out=$(jq -c --arg i "$i" --argjson st "$st" \
			'. + {($i): ($st[0] | {admitted, denied, degraded})}' <<<"$out")
	done
	echo "$out"
}

# fleet_delta A B FIELD: FIELD's growth from fleet_snap A to B, summed over
# the agents.
fleet_delta() {
	jq -rn --argjson a "$1" --argjson b "$2" --arg f "$3" \
		'[$b | keys[] as $h | $b[$h][$f] - $a[$h][$f]] | add'
}

# fleet_metric I KEY: the value of the metric line KEY (labels included,
# e.g. 'rlgate_degraded_total{tenant="x"}') on agent I.
fleet_metric() {
	local page

	page=$(metrics "s$1") || { echo "couldn't fetch s$1's metrics" >&2; return 1; }
	metric_value "$2" "$page"
}

# fleet_timeouts: the checks that found a Redis call unanswered past the
# agents' --redis-timeout (rlgate_redis_timeouts_total), summed over
# s1..s$FLEET_AGENTS.
fleet_timeouts() {
	local i v sum=0

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		v=$(fleet_metric "$i" rlgate_redis_timeouts_total) || return 1
		sum=$((sum + v))
	done
	echo "$sum"
}

# fleet_transitions: every agent's count of broker transitions so far, as
# one line.
fleet_transitions() {
	local i out=

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		out+="$(rls "$i" --json status | jq .broker_transitions) "
	done
	echo "$out"
}

# fleet_raise_check NAME TRIES AGAIN...: NAME is a 1/m tenant saturated by
# 150/s over the three hosts (each agent has been told by Redis to wait, up
# to a minute); raised to 100/s, the fleet admits 100/s from 1 s after the
# change on, over a window of 2 s.  The load must outlast TRIES such
# attempts (LOADGEN_BG_PID still runs at the end of the one judged).
#
# An attempt is judged only when no agent's breaker opened or closed from
# before the raise to the end of the window: the end of a degraded spell
# forgets Redis's advice as the change does, so an attempt with a spell in it
# says nothing about the change (and its degraded SYNs meet the fail policy,
# not the lease).  On a machine so loaded that Redis misses the agents'
# --redis-timeout the attempt is made again: the command AGAIN... (run
# before every attempt after the first) puts NAME back at 1/m and saturated
# with the advice in force.  The admitted count is judged against the
# SYNs that came, when a loaded machine sent fewer than the new rate, and
# over the window's bounds: at least the time between the end of the
# first snapshot and the start of the second (what the agents surely
# counted in), at most from the start of the first to the end of the second.
fleet_raise_check() {
	local name=$1 tries=$2 k t0 tr0 tr1 m0 m1 m2 m3 s0 s1 lo hi
	local admitted judged degraded bound want

	shift 2
	for ((k = 1; k <= tries; k++)); do
		((k == 1)) || "$@" || return 1
		tr0=$(fleet_transitions)
		t0=$(now_ms)
		rls 1 tenant set "$name" --rate 100/s >/dev/null
		sleep_until $((t0 + 1000))
		m0=$(now_ms) s0=$(fleet_snap "$name") m1=$(now_ms)
		sleep 2
		m2=$(now_ms) s1=$(fleet_snap "$name") m3=$(now_ms)
		tr1=$(fleet_transitions)
		admitted=$(fleet_delta "$s0" "$s1" admitted)
		judged=$((admitted + $(fleet_delta "$s0" "$s1" denied)))
		degraded=$(fleet_delta "$s0" "$s1" degraded)
		lo=$(calc "($m2 - $m1) / 1000") hi=$(calc "($m3 - $m0) / 1000")
		echo "attempt $k: admitted $admitted of $judged SYNs ($degraded degraded)" \
			"in $lo..$hi s from 1 s after the raise to 100/s;" \
			"broker transitions from before the raise: $tr0-> $tr1"
		[[ $tr0 == "$tr1" && $degraded == 0 ]] && break
		((k < tries)) || {
			echo "a broker transition or a degraded SYN in each of $tries attempts" >&2
			return 1
		}
	done
	proc_running "$LOADGEN_BG_PID" ||
		{ echo "the load ended before the window did" >&2; return 1; }
	bound=$(fleet_stat 1 "$name" overshoot_bound)
	# 0.85 of the new rate; of what came, when a machine too loaded to
	# send 150/s sent less than the rate
	want=$(calc "0.85 * ($judged < 100 * $lo ? $judged : 100 * $lo)")
	expect_between "admitted in the $lo..$hi s from 1 s after the raise to 100/s (bound $bound)" \
		"$admitted" "$want" "$(calc "100 * $hi + 100 + $bound")"
}

# --- load ----------------------------------------------------------------------------

# fleet_admitted_check WHAT N RATE BURST BOUND [JSON]: N, what a limit of
# RATE (BURST, overshoot BOUND) admitted of the load whose report is JSON
# (run_loadgen_json's by default), is at most RATE over the load's elapsed
# time and its connect timeout (a late SYN is still judged then) + BURST +
# BOUND, and at least half of RATE over the load's duration.  The loads
# offer 1.5x or more; a generator that a loaded machine stalls and that
# then catches up has its catch-up refused past the burst (a CI run gave a
# static share 78% of its rate), so half tells a working limit from a
# broken one without measuring the machine.  Upper bounds are the test.
fleet_admitted_check() {
	local json=${6-$LOADGEN_JSON} t d to

	t=$(json_get .elapsed_s "$json") || return 1
	d=$(json_get .duration_s "$json") || return 1
	to=$(json_get .timeout_ms "$json") || return 1
	expect_between "$1 in $t s (limit $3/s, burst $4, bound $5)" "$2" \
		"$(calc "$3 * $d / 2")" "$(calc "$3 * ($t + $to / 1000) + $4 + $5")"
}

# fleet_targets PORT W1 W2 ...: loadgen targets PORT on s1, s2, ... with
# weights (a weight 0 leaves the host out).
fleet_targets() {
	local port=$1 i=0 w out=

	shift
	for w in "$@"; do
		((++i))
		((w)) || continue
		out+=" $(lab_target "s$i" "$port")@$w"
	done
	echo "$out"
}

# fleet_loadgen_bg HOST OUT ARGS...: loadgen_bg, and the run killed at
# teardown if still running.
fleet_loadgen_bg() {
	loadgen_bg "$@"
	fleet_bg_track "$LOADGEN_BG_PID"
}
