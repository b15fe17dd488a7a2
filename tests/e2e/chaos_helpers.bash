# chaos_helpers.bash: what the fleet failure suite (chaos.bats) adds to the
# fleet lab of fleet_helpers.bash - three servers listening on three ports,
# redis-server killed and frozen, Redis cut off from one host, broker state
# awaited, stats snapshots over a time window, the kernel's own counters
# read from the pins while an agent is dead, and a teardown that puts every
# piece back (Redis up, agents up, routes gone) even when a test failed
# halfway.
#
# Use from a suite with `load helpers`, `load agent_helpers`,
# `load fleet_helpers`, then `load chaos_helpers`, and
#     setup_file()    { chaos_setup_file; }
#     teardown_file() { fleet_teardown_file; }
#     setup()         { chaos_setup; }
#     teardown()      { chaos_teardown; }
# shellcheck disable=SC2034 # CH_MS is for the suite, FLEET_* for fleet_helpers

FLEET_SERVERS=3			# s1..s3, each with an agent
FLEET_PORTS=(8080 8081 8082)	# one per fail policy a test compares

# ch_calc EXPR: awk arithmetic, rounded to 3 decimals.
ch_calc() { calc "$1" %.3f; }

# --- processes -------------------------------------------------------------------------

# ch_stopped PID: the process is stopped (SIGSTOP).
ch_stopped() {
	[[ $(ps -o stat= -p "$1" 2>/dev/null) == T* ]]
}

# ch_redis_kill: SIGKILL, as in a crash: the agents see their connections
# close.  Prints the time it was sent (ms).
ch_redis_kill() {
	local pid

	pid=$(redis_pid)
	proc_running "$pid" || { echo "redis-server is not running" >&2; return 1; }
	now_ms
	proc_stop "$pid" KILL
}

# --- broker state ---------------------------------------------------------------------

# ch_broker I: agent I's broker state (healthy, degraded), "?" without answer.
ch_broker() {
	local b

	b=$(rls "$1" --json status 2>/dev/null | jq -r .broker 2>/dev/null)
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
				CH_MS[$h]=$(($(now_ms) - t0))
			else
				left+=" s$h"
			fi
		done
		[[ -z $left ]] && return 0
		if (($(now_ms) - t0 > limit)); then
			echo "broker not $want after $3 s on:$left" >&2
			return 1
		fi
		sleep 0.05
	done
}

# --- cutting one host off Redis --------------------------------------------------------

# A blackhole route to the Redis address in the server's namespace: its
# packets to Redis vanish (the TCP connection stays open, calls go
# unanswered), while client traffic to and from the server is untouched.
ch_cut() { ip -n "$(lab_ns "s$1")" route add blackhole "${REDIS_ADDR%:*}/32"; }
ch_uncut() { ip -n "$(lab_ns "s$1")" route del blackhole "${REDIS_ADDR%:*}/32" 2>/dev/null; }

# --- stats ----------------------------------------------------------------------------

# ch_snap TENANT: one snapshot of TENANT's stats on every agent, as a JSON
# object {"1": {"ms": ..., "ms1": ..., "admitted": ..., "denied": ...,
# "degraded": ..., "broker": ...}, ...}; ms is taken right before each
# host's query and ms1 right after it: the counts were read in between.
ch_snap() {
	local i ms ms1 st b out='{}'

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		ms=$(now_ms)
		st=$(rls "$i" --json stats "$1") || { echo "rlctl stats $1 on s$i failed" >&2; return 1; }
		ms1=$(now_ms)
		b=$(ch_broker "$i")
		out=$(jq -c --arg i "$i" --argjson ms "$ms" --argjson ms1 "$ms1" --arg b "$b" \
			--argjson st "$st" \
			'. + {($i): ($st[0] | {admitted, denied, degraded} + {ms: $ms, ms1: $ms1, broker: $b})}' \
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

# ch_window A B in|out [HOST]: the window between snapshots A and B on HOST
# (every host's, without HOST), in seconds.  A count read in A and again
# in B covers at least the inner window (from the end of A's reads to the
# start of B's) and at most the outer one (from the start of A's reads to
# the end of B's): a rate's lower bound takes the first, an upper bound the
# second, so that however slowly a loaded machine answers the reads, the
# bounds stay true.
ch_window() {
	jq -rn --argjson a "$1" --argjson b "$2" --arg w "$3" --arg h "${4-}" '
		(if $h == "" then [$b | keys[]] else [$h] end) as $hs
		| if $w == "in" then ([$hs[] | $b[.].ms] | min) - ([$hs[] | $a[.].ms1] | max)
		  else ([$hs[] | $b[.].ms1] | max) - ([$hs[] | $a[.].ms] | min) end
		| . / 1000'
}

# ch_rate_check WHAT N PER_S A B [HOST] [SLACK]: N counted between snapshots A
# and B is at least half of PER_S over the inner window (the loads offer
# twice what they expect to see counted, and a generator on a loaded
# machine has fallen a fifth behind: half tells a working policy from a
# broken one without measuring the machine) and, given SLACK, at most
# PER_S over the outer window + SLACK (the bucket: its refill and what it
# held).
ch_rate_check() {
	local wi wo hi=1000000000

	wi=$(ch_window "$4" "$5" in "${6-}")
	wo=$(ch_window "$4" "$5" out "${6-}")
	[[ -n ${7-} ]] && hi=$(ch_calc "$3 * $wo + $7")
	echo "$1: $2 in $wi to $wo s (expected $3/s)"
	expect_between "$1 (in $wi to $wo s at $3/s${7:+, + $7})" "$2" "$(ch_calc "$3 * $wi / 2")" "$hi"
}

# ch_id I TENANT: TENANT's kernel slot on agent I.
ch_id() {
	rls "$1" --json tenant get "$2" | jq -er .id
}

# ch_kstat I ID FIELD: FIELD of slot ID summed over the CPUs, read by bpftool
# from agent I's pinned tenant_stats: the kernel's own count, there whether
# the agent runs or not.
ch_kstat() {
	bpftool -j map lookup pinned "$(fleet_pin_dir "$1")/tenant_stats" \
		key $(($2 & 255)) $(($2 >> 8 & 255)) 0 0 |
		jq -er --arg f "$3" '[.formatted.values[].value[$f]] | add'
}

# ch_target_get OUT TARGET FIELD: FIELD of one target in a loadgen report.
ch_target_get() {
	jq -er --arg t "$2" --arg f "$3" '.targets[] | select(.target == $t) | .[$f]' "$1"
}

# --- file and test scope ----------------------------------------------------------------

chaos_setup_file() { fleet_setup_file bpftool curl; }

chaos_setup() {
	fleet_setup
	fleet_wait_steady 10
}

# ch_restore: whatever a test broke, put back - routes removed, Redis
# continued or started (empty), agents started on their pins - and wait
# until the fleet is steady again (a reconnect after a long outage waits
# for the agent's backoff, up to 5 s).
ch_restore() {
	local i pid rc=0

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		ch_uncut "$i" || true
	done
	pid=$(redis_pid)
	if proc_running "$pid" && ch_stopped "$pid"; then
		kill -CONT "$pid"
	elif ! proc_running "$pid"; then
		redis_start || rc=1
	fi
	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		[[ -n $(fleet_pid "$i") ]] || fleet_agent_start "$i" || rc=1
	done
	fleet_wait_steady 12 || rc=1
	return $rc
}

# Stops this test's loads, repairs the fleet, deletes this test's tenants
# on every agent; shows the agents' logs when the test failed.
chaos_teardown() { fleet_teardown ch_restore; }

# --- the overshoot bound ----------------------------------------------------------------

# ch_serve_start PORT: a server of its own on PORT on every host, for
# counting what the fleet let through on the servers' side; stopped by
# ch_serve_stop, or killed at teardown.
declare -gA CH_SERVE_PID CH_SERVE_OUT
ch_serve_start() {
	local i

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		serve_start "s$i" "$1" || return 1
		CH_SERVE_PID[$i]=$SERVE_PID
		CH_SERVE_OUT[$i]=$SERVE_OUT
		fleet_bg_track "$SERVE_PID"
	done
}

# ch_serve_stop: stops the servers of ch_serve_start and prints how many
# connections they accepted in all.
ch_serve_stop() {
	local i n sum=0

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		n=$(serve_stop "${CH_SERVE_PID[$i]}" "${CH_SERVE_OUT[$i]}") || return 1
		sum=$((sum + n))
	done
	echo "$sum"
}

# ch_snaps_start TENANT FILE: a snapshot (ch_snap) of TENANT every 0.5 s,
# one JSON line each, into FILE until ch_snaps_stop.
ch_snaps_start() {
	(
		while :; do
			ch_snap "$1" >>"$2" || true
			sleep 0.5
		done
	) 3>&- &
	CH_SNAPS_PID=$!
	# not a job of this shell: no "Killed" notice when it is stopped
	disown "$CH_SNAPS_PID"
	fleet_bg_track "$CH_SNAPS_PID"
}

ch_snaps_stop() {
	local n

	kill -KILL "$CH_SNAPS_PID" 2>/dev/null
	for ((n = 0; n < 50; n++)); do
		proc_running "$CH_SNAPS_PID" || return 0
		sleep 0.02
	done
}

# ch_check_windows FILE RATE BURST BOUND: for every pair of snapshots in
# FILE, what the kernels admitted in between is at most RATE x the window
# + BURST + BOUND; the window runs from the earliest host's time in the
# first snapshot to the latest host's in the second, so it is never
# shorter than the truth.  Prints the pair that came closest.
ch_check_windows() {
	jq -sr --argjson r "$2" --argjson b "$3" --argjson x "$4" '
		[.[] | {ms0: ([.[].ms] | min), ms1: ([.[].ms] | max),
			adm: ([.[].admitted] | add)}] as $s
		| [range(0; $s | length) as $i | range($i + 1; $s | length) as $j
		   | (($s[$j].ms1 - $s[$i].ms0) / 1000) as $t
		   | {t: $t, admitted: ($s[$j].adm - $s[$i].adm),
		      limit: ($r * $t + $b + $x)}
		   | . + {slack: (.limit - .admitted)}]
		| sort_by(.slack) | .[0] as $w
		| "\(length) windows; closest: \($w.admitted) admitted in \($w.t) s, " +
		  "limit \($w.limit)", (if $w.slack < 0 then "VIOLATED" else empty end)
	' "$1"
}

# ch_flap PID STOP_S RUN_S CYCLES: stops PID (SIGSTOP) for STOP_S seconds
# and lets it run for RUN_S, CYCLES times, in the background; the PID of
# the loop is left in CH_FLAP_PID.  The loop leaves PID running.
ch_flap() {
	(
		for ((n = 0; n < $4; n++)); do
			sleep "$3"
			kill -STOP "$1"
			sleep "$2"
			kill -CONT "$1"
		done
	) 3>&- &
	CH_FLAP_PID=$!
	fleet_bg_track "$CH_FLAP_PID"
}
