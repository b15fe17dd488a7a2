#!/usr/bin/env bats
# Fleet mode behind Redis Sentinel, end to end: three hosts each with its
# own rlagent (--redis sentinel:NAME@SENTINELS), a master and a replica and
# three sentinels on the Redis host.  The agents find the master through the
# sentinels; when it is killed they are degraded until the sentinels have
# promoted the replica, then follow the new master and lease again.
# shellcheck disable=SC2046 # fleet_targets' output is meant to split into targets
# shellcheck disable=SC2034 # REDIS_ADDR and FLEET_* are fleet_helpers'

load helpers
load agent_helpers
load fleet_helpers
load chaos_helpers

SEN_IP=192.0.2.250
SEN_PORTS=(26379 26380 26381)
DATA_PORTS=(6379 6380)		# the first master, its replica
REDIS_ADDR="sentinel:rlmaster@$SEN_IP:26379,$SEN_IP:26380,$SEN_IP:26381"
FLEET_SERVERS=3
FLEET_PORTS=(8080)

setup_file() { fleet_setup_file; }
teardown_file() {
	local p

	if [[ -n ${FLEET_DIR:-} ]]; then
		for p in "${DATA_PORTS[@]}" "${SEN_PORTS[@]}"; do
			proc_stop "$(node_pid "$p")" KILL 2>/dev/null || true
		done
	fi
	fleet_teardown_file
}
setup() { fleet_setup; }
teardown() { fleet_teardown; }

RATE=150
BURST=20
C1=192.0.2.64/28	# client c1's prefix (docs/lab.md)

node_dir() { echo "$FLEET_DIR/redis-$1"; }
node_pid() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }
ncli() {
	local port=$1

	shift
	in_ns redis redis-cli -h "$SEN_IP" -p "$port" "$@"
}

# node_start PORT ARGS...: a redis-server (or, with --sentinel, a sentinel)
# in the background; returns once it answers PING.
node_start() {
	local port=$1 dir n

	shift
	dir=$(node_dir "$port")
	mkdir -p "$dir"
	ip netns exec "$(lab_ns redis)" redis-server "$@" --bind "$SEN_IP" --port "$port" \
		--dir "$dir" --protected-mode no --daemonize no >>"$dir/log" 2>&1 3>&- &
	echo $! >"$dir/pid"
	disown $!
	for ((n = 0; n < 100; n++)); do
		[[ $(ncli "$port" PING 2>/dev/null) == PONG ]] && return 0
		sleep 0.05
	done
	echo "redis-server does not answer on $SEN_IP:$port:" >&2
	tail -n 20 "$dir/log" >&2
	return 1
}

# master_port: the port the sentinels name for rlmaster.
master_port() {
	ncli "${SEN_PORTS[0]}" SENTINEL get-master-addr-by-name rlmaster 2>/dev/null | sed -n 2p
}

# redis_start (fleet_helpers' is replaced): a master, its replica, and three
# sentinels that agree on it (quorum 2, a master silent for 1 s is down).
redis_start() {
	local p conf n

	node_start "${DATA_PORTS[0]}" --save '' --appendonly no || return 1
	node_start "${DATA_PORTS[1]}" --save '' --appendonly no \
		--replicaof "$SEN_IP" "${DATA_PORTS[0]}" || return 1
	for p in "${SEN_PORTS[@]}"; do
		conf=$(node_dir "$p")/sentinel.conf
		mkdir -p "$(node_dir "$p")"
		cat >"$conf" <<-EOF
			sentinel monitor rlmaster $SEN_IP ${DATA_PORTS[0]} 2
			sentinel down-after-milliseconds rlmaster 1000
			sentinel failover-timeout rlmaster 4000
			sentinel parallel-syncs rlmaster 1
		EOF
		node_start "$p" "$conf" --sentinel || return 1
	done
	for ((n = 0; n < 200; n++)); do
		[[ $(ncli "${DATA_PORTS[0]}" INFO replication | grep -c 'state=online') == 1 ]] &&
			[[ $(ncli "${SEN_PORTS[0]}" SENTINEL master rlmaster |
				sed -n '/^num-other-sentinels$/{n;p}') == 2 ]] && return 0
		sleep 0.05
	done
	echo "replica or sentinels not ready" >&2
	return 1
}

# snap TENANT: admitted, denied and degraded of TENANT summed over hosts.
snap() {
	local i st out='{"admitted":0,"denied":0,"degraded":0}'

	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		st=$(rls "$i" --json stats "$1") || return 1
		out=$(jq -c --argjson st "$st" \
			'{admitted: (.admitted + $st[0].admitted), denied: (.denied + $st[0].denied),
			  degraded: (.degraded + $st[0].degraded)}' <<<"$out")
	done
	echo "$out"
}

delta() { jq -rn --argjson a "$1" --argjson b "$2" --arg f "$3" '$b[$f] - $a[$f]'; }

# sentinel_conns: connections the sentinels have accepted, summed.
sentinel_conns() {
	local p n=0 v

	for p in "${SEN_PORTS[@]}"; do
		v=$(ncli "$p" INFO stats | tr -d '\r' | sed -n 's/^total_connections_received://p')
		n=$((n + v))
	done
	echo "$n"
}

@test "every agent finds the master through the sentinels and keeps asking on one connection: healthy, connected, 3 live agents in the master's registry" {
	local i j c0

	for i in 1 2 3; do
		j=$(rls "$i" --json status)
		expect_eq "s$i broker" "$(json_get .broker "$j")" healthy
		expect_eq "s$i redis.state" "$(json_get .redis.state "$j")" connected
		expect_eq "s$i redis.address" "$(json_get .redis.address "$j")" "$REDIS_ADDR"
		grep -q "Sentinel: master 'rlmaster' is $SEN_IP:${DATA_PORTS[0]}" "$(fleet_log "$i")" ||
			{ echo "s$i did not log the master it was told" >&2; return 1; }
	done
	expect_eq "agents in the master's registry" "$(ncli "$(master_port)" ZCARD rl:agents)" 3
	# each agent asks every second on a connection it keeps: 3 s of
	# questions open (almost) no new connections on the sentinels
	c0=$(sentinel_conns)
	sleep 3
	# (3 of them are this count's own redis-cli; a new connection per
	# question would add 9)
	expect_between "connections the sentinels accepted in 3 s" $(($(sentinel_conns) - c0)) 3 5
}

@test "the master killed under load: every agent degraded, then on the promoted replica within 10 s, leasing again" {
	local out=$BATS_TEST_TMPDIR/load.json old new t0 i a0 a1 a2

	fleet_tenant_set 1 acme --rate "$RATE/s" --burst "$BURST" --match "$C1" --port 8080 \
		--action rst --fail allow
	fleet_wait_tenant acme 2 >/dev/null
	sleep 1.5
	old=$(master_port)
	fleet_loadgen_bg c1 "$out" --rate 120 --duration 16 $(fleet_targets 8080 1 1 1)
	sleep 2
	a0=$(snap acme)
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
	a1=$(snap acme)
	[[ $(delta "$a0" "$a1" degraded) -gt 0 ]] ||
		{ echo "no SYN met the fail policy during the failover" >&2; return 1; }
	# fail allow: nothing refused, also between the breaker closing and
	# the first lease's reply (the leased tokens expired during the
	# outage, and the fail policy holds until that lease is back)
	expect_eq "refused during the failover (fail allow)" "$(delta "$a0" "$a1" denied)" 0
	sleep 1
	a1=$(snap acme)
	sleep 3
	a2=$(snap acme)
	expect_eq "SYNs decided by the fail policy after the failover" "$(delta "$a1" "$a2" degraded)" 0
	[[ $(delta "$a1" "$a2" admitted) -gt 100 ]] ||
		{ echo "admitted $(delta "$a1" "$a2" admitted) in 3 s after the failover" >&2; return 1; }
	expect_eq "agents in the new master's registry" "$(ncli "$new" ZCARD rl:agents)" 3
	expect_eq "acme's policy on the new master" \
		"$(ncli "$new" HGET 'rl:{t:acme}:policy' version | grep -c .)" 1
	loadgen_wait "$LOADGEN_BG_PID" "$out"
	expect_eq "connections timed out" "$(json_get .total.timed_out)" 0
}

@test "a manual failover (SENTINEL FAILOVER) leaves the old master up as a replica: every agent leaves it for the new master within 5 s and leases there" {
	local old new t0 i n ok

	# the killed master of the test before is back, as a replica
	for p in "${DATA_PORTS[@]}"; do
		proc_running "$(node_pid "$p")" || node_start "$p" --save '' --appendonly no || return 1
	done
	fleet_wait_steady 15
	fleet_tenant_set 1 mf --rate 100/s --burst 20 --match "$C1" --port 8080 --action rst
	fleet_wait_tenant mf 2 >/dev/null
	old=$(master_port)
	for ((n = 0; n < 100; n++)); do
		[[ $(ncli "$old" INFO replication | grep -c 'state=online') == 1 ]] && break
		sleep 0.1
	done
	t0=$(now_ms)
	[[ $(ncli "${SEN_PORTS[0]}" SENTINEL FAILOVER rlmaster) == OK ]]
	for ((n = 0; n < 200; n++)); do
		new=$(master_port)
		[[ -n $new && $new != "$old" ]] && break
		sleep 0.05
	done
	[[ $new != "$old" ]] || { echo "no failover within 10 s" >&2; return 1; }
	# every agent logs the move and is healthy on the new master
	for ((n = 0; n < 100; n++)); do
		ok=0
		for i in 1 2 3; do
			grep -q "Sentinel: master 'rlmaster' is now $SEN_IP:$new" "$(fleet_log "$i")" &&
				[[ $(rls "$i" --json status | jq -r .broker) == healthy ]] && ok=$((ok + 1))
		done
		((ok == 3)) && break
		sleep 0.05
	done
	echo "failover to $new: every agent healthy there $(($(now_ms) - t0)) ms after SENTINEL FAILOVER"
	expect_eq "agents healthy on the new master" "$ok" 3
	expect_between "ms from SENTINEL FAILOVER to every agent on the new master" \
		$(($(now_ms) - t0)) 0 5000
	# the sentinels turn the old master into a replica of the new one
	for ((n = 0; n < 200; n++)); do
		[[ $(ncli "$old" ROLE | head -1) == slave ]] && break
		sleep 0.05
	done
	[[ $(ncli "$old" ROLE | head -1) == slave ]] ||
		{ echo "the old master is not a replica: $(ncli "$old" ROLE | head -1)" >&2; return 1; }
	expect_eq "agents in the new master's registry" "$(ncli "$new" ZCARD rl:agents)" 3
	run_loadgen_json c1 --rate 150 --duration 3 $(fleet_targets 8080 1 1 1)
	expect_between "admitted at 150/s for 3 s (limit 100/s + 20)" \
		"$(json_get .total.connected)" 290 "$(calc "320 + $(fleet_stat 1 mf overshoot_bound)")"
}

@test "rlagent refuses a bad cluster: or sentinel: address with a usage error naming it" {
	local bad

	for bad in "sentinel:" "sentinel:rlmaster" "sentinel:@$SEN_IP:26379" \
		"sentinel:rl master@$SEN_IP:26379" "sentinel:rlmaster@$SEN_IP" \
		"cluster:" "cluster:$SEN_IP" "cluster:$SEN_IP:0" "cluster:$SEN_IP:7001,"; do
		run "$RLGATE_BUILD/rlagent" --iface lo --redis "$bad"
		expect_eq "exit status for --redis '$bad'" "$status" 2
		[[ $output == *"invalid --redis '$bad'"* ]] ||
			{ echo "no message naming '$bad': $output" >&2; return 1; }
	done
}
