# sentinel_helpers.bash: the fleet lab of fleet_helpers.bash behind Redis
# Sentinel instead of one Redis - a master and its replica (ports 6379,
# 6380) and three sentinels (26379-26381) on the Redis host, the agents
# started with --redis sentinel:rlmaster@SENTINELS, which node the sentinels
# name, and cleanup of every node by PID.  A suite may put every node under
# TLS and passwords (SEN_TLS, SEN_DATA_OPTS, SEN_SENTINEL_OPTS, SEN_CONF,
# with what redis-cli then needs in SEN_CLI and SEN_SCLI).
#
# Use from a suite with `load helpers`, `load agent_helpers`,
# `load fleet_helpers`, `load chaos_helpers`, then `load sentinel_helpers`, and
#     setup_file()    { fleet_setup_file; }
#     teardown_file() { sentinel_teardown_file; }
#     setup()         { fleet_setup; }
#     teardown()      { fleet_teardown; }
# shellcheck disable=SC2034 # REDIS_ADDR and FLEET_* are fleet_helpers'
# shellcheck disable=SC2046 # fleet_targets' output is meant to split into targets

SEN_IP=192.0.2.250
SEN_PORTS=(26379 26380 26381)
DATA_PORTS=(6379 6380)		# the first master, its replica
REDIS_ADDR="sentinel:rlmaster@$SEN_IP:26379,$SEN_IP:26380,$SEN_IP:26381"
FLEET_SERVERS=3
FLEET_PORTS=(8080)
SEN_TLS=()		# redis-server's TLS options: every node then speaks only TLS
SEN_DATA_OPTS=()	# the master's and replica's options beyond the defaults
SEN_SENTINEL_OPTS=()	# the sentinels' (e.g. --requirepass)
SEN_CONF=()		# lines added to every sentinel.conf (e.g. auth-pass)
SEN_CLI=()		# what redis-cli needs to reach the master and replica
SEN_SCLI=()		# ...and the sentinels

node_dir() { echo "$FLEET_DIR/redis-$1"; }
node_pid() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }

# ncli PORT ARGS...: redis-cli against the data node on PORT; scli: a sentinel.
ncli() {
	local port=$1

	shift
	in_ns redis redis-cli -h "$SEN_IP" -p "$port" "${SEN_CLI[@]}" "$@"
}
scli() {
	local port=$1

	shift
	in_ns redis redis-cli -h "$SEN_IP" -p "$port" "${SEN_SCLI[@]}" "$@"
}

# sen_spawn PORT CLI ARGS...: a redis-server with ARGS (a sentinel with
# --sentinel) in the background, TLS-only on PORT under SEN_TLS; returns
# once it answers CLI's PING.
sen_spawn() {
	local port=$1 cli=$2 dir n net=(--port "$1")

	shift 2
	((${#SEN_TLS[@]})) && net=(--port 0 --tls-port "$port" --tls-replication yes "${SEN_TLS[@]}")
	dir=$(node_dir "$port")
	mkdir -p "$dir"
	ip netns exec "$(lab_ns redis)" redis-server "$@" --bind "$SEN_IP" "${net[@]}" \
		--dir "$dir" --protected-mode no --daemonize no >>"$dir/log" 2>&1 3>&- &
	echo $! >"$dir/pid"
	disown $!
	for ((n = 0; n < 100; n++)); do
		[[ $("$cli" "$port" PING 2>/dev/null) == PONG ]] && return 0
		sleep 0.05
	done
	echo "redis-server does not answer on $SEN_IP:$port:" >&2
	tail -n 20 "$dir/log" >&2
	return 1
}

# node_start PORT ARGS...: a master or replica (no persistence; a replica's
# full sync starts at once rather than after the default 5 s).
node_start() {
	local port=$1

	shift
	sen_spawn "$port" ncli --save '' --appendonly no --repl-diskless-sync-delay 0 \
		"${SEN_DATA_OPTS[@]}" "$@"
}

# master_port: the port the sentinels name for rlmaster.
master_port() {
	scli "${SEN_PORTS[0]}" SENTINEL get-master-addr-by-name rlmaster 2>/dev/null | sed -n 2p
}

# redis_start (fleet_helpers' is replaced): a master, its replica, and three
# sentinels that agree on it (quorum 2, a master silent for 1 s is down).
redis_start() {
	local p conf n

	node_start "${DATA_PORTS[0]}" || return 1
	node_start "${DATA_PORTS[1]}" --replicaof "$SEN_IP" "${DATA_PORTS[0]}" || return 1
	for p in "${SEN_PORTS[@]}"; do
		conf=$(node_dir "$p")/sentinel.conf
		mkdir -p "$(node_dir "$p")"
		{
			echo "sentinel monitor rlmaster $SEN_IP ${DATA_PORTS[0]} 2"
			echo "sentinel down-after-milliseconds rlmaster 1000"
			echo "sentinel failover-timeout rlmaster 4000"
			echo "sentinel parallel-syncs rlmaster 1"
			printf '%s\n' "${SEN_CONF[@]}"
		} >"$conf"
		sen_spawn "$p" scli "$conf" --sentinel "${SEN_SENTINEL_OPTS[@]}" || return 1
	done
	for ((n = 0; n < 200; n++)); do
		[[ $(ncli "${DATA_PORTS[0]}" INFO replication | grep -c 'state=online') == 1 ]] &&
			[[ $(scli "${SEN_PORTS[0]}" SENTINEL master rlmaster |
				sed -n '/^num-other-sentinels$/{n;p}') == 2 ]] && return 0
		sleep 0.05
	done
	echo "replica or sentinels not ready" >&2
	return 1
}

sentinel_teardown_file() {
	local p

	if [[ -n ${FLEET_DIR:-} ]]; then
		for p in "${DATA_PORTS[@]}" "${SEN_PORTS[@]}"; do
			proc_stop "$(node_pid "$p")" KILL 2>/dev/null || true
		done
	fi
	fleet_teardown_file
}

# sentinel_restore: the nodes a test killed are started again, as replicas
# of the master the sentinels name (as an operator would; the sentinels
# would turn an old master into one too, but only once they next ask it,
# up to 10 s later), and the agents are steady.
sentinel_restore() {
	local p m

	m=$(master_port)
	for p in "${DATA_PORTS[@]}"; do
		proc_running "$(node_pid "$p")" && continue
		if [[ -n $m && $m != "$p" ]]; then
			node_start "$p" --replicaof "$SEN_IP" "$m" || return 1
		else
			node_start "$p" || return 1
		fi
	done
	fleet_wait_steady 15
}

# sentinel_kill_check TENANT RATE BURST PREFIX: the master killed under
# load (below TENANT's limit, fail allow): every agent degraded, then on the
# promoted replica, nothing refused, leasing again; then 1.5x over the
# limit on the new master, the limit holds.
sentinel_kill_check() {
	local t=$1 rate=$2 burst=$3 pfx=$4 out=$BATS_TEST_TMPDIR/load.json old new t0 i a0 a1 a2 lim

	fleet_tenant_set 1 "$t" --rate "$rate/s" --burst "$burst" --match "$pfx" --port 8080 \
		--action rst --fail allow
	fleet_wait_tenant "$t" 2 >/dev/null
	sleep 1.5
	old=$(master_port)
	fleet_loadgen_bg c1 "$out" --rate "$(calc "0.8 * $rate" %.0f)" --duration 16 \
		$(fleet_targets 8080 1 1 1)
	sleep 2
	a0=$(fleet_snap "$t")
	t0=$(now_ms)
	proc_stop "$(node_pid "$old")" KILL
	ch_wait_broker "$t0" degraded 2 1 2 3
	fleet_wait_steady 15
	new=$(master_port)
	echo "master $old killed; $new promoted; agents healthy $(($(now_ms) - t0)) ms after the kill"
	[[ $new != "$old" ]] || { echo "the sentinels still name $old" >&2; return 1; }
	for i in 1 2 3; do
		grep -q "Sentinel: master 'rlmaster' is now $SEN_IP:$new" "$(fleet_log "$i")" ||
			{ echo "s$i did not log the failover" >&2; return 1; }
	done
	a1=$(fleet_snap "$t")
	[[ $(fleet_delta "$a0" "$a1" degraded) -gt 0 ]] ||
		{ echo "no SYN met the fail policy during the failover" >&2; return 1; }
	# fail allow: nothing refused, also between the breaker closing and
	# the first lease's reply (the leased tokens expired during the
	# outage, and the fail policy holds until that lease is back)
	expect_eq "refused during the failover (fail allow)" "$(fleet_delta "$a0" "$a1" denied)" 0
	sleep 1
	a1=$(fleet_snap "$t")
	sleep 3
	a2=$(fleet_snap "$t")
	expect_eq "SYNs decided by the fail policy after the failover" "$(fleet_delta "$a1" "$a2" degraded)" 0
	[[ $(fleet_delta "$a1" "$a2" admitted) -gt $((2 * rate / 3)) ]] ||
		{ echo "admitted $(fleet_delta "$a1" "$a2" admitted) in 3 s after the failover" >&2; return 1; }
	expect_eq "agents in the new master's registry" "$(ncli "$new" ZCARD rl:agents)" 3
	expect_eq "$t's policy on the new master" \
		"$(ncli "$new" HGET "rl:{t:$t}:policy" version | grep -c .)" 1
	# 16 s covers the slowest failover; the load ends here after a quicker one
	loadgen_stop "$LOADGEN_BG_PID" "$out"
	expect_eq "connections timed out" "$(json_get .total.timed_out)" 0
	# the limit on the new master
	run_loadgen_json c1 --rate "$(calc "1.5 * $rate" %.0f)" --duration 3 $(fleet_targets 8080 1 1 1)
	lim=$(calc "$rate * 3 + $burst")
	expect_between "admitted 1.5x over the limit for 3 s on the new master" \
		"$(json_get .total.connected)" "$(calc "0.9 * $lim")" \
		"$(calc "$lim + $(fleet_stat 1 "$t" overshoot_bound)")"
}
