#!/usr/bin/env bats
# Fleet mode behind Redis Sentinel, end to end: three hosts each with its
# own rlagent (--redis sentinel:NAME@SENTINELS), a master and a replica and
# three sentinels on the Redis host.  The agents find the master through the
# sentinels; when it is killed they are degraded until the sentinels have
# promoted the replica, then follow the new master and lease again.
# shellcheck disable=SC2046 # fleet_targets' output is meant to split into targets

load helpers
load agent_helpers
load fleet_helpers
load chaos_helpers
load sentinel_helpers

setup_file() { fleet_setup_file; }
teardown_file() { sentinel_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown; }

RATE=150
BURST=20
C1=192.0.2.64/28	# client c1's prefix (docs/lab.md)

# sentinel_conns: connections the sentinels have accepted, summed.
sentinel_conns() {
	local p n=0 v

	for p in "${SEN_PORTS[@]}"; do
		v=$(scli "$p" INFO stats | tr -d '\r' | sed -n 's/^total_connections_received://p')
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

@test "the master killed under load: every agent degraded, then on the promoted replica within 10 s, leasing again with nothing refused (fail allow); the limit holds there" {
	sentinel_kill_check acme "$RATE" "$BURST" "$C1"
}

@test "a manual failover (SENTINEL FAILOVER) leaves the old master up as a replica: every agent leaves it for the new master within 5 s and leases there" {
	local old new t0 i n ok

	# the killed master of the test before is back, as a replica
	sentinel_restore
	fleet_tenant_set 1 mf --rate 100/s --burst 20 --match "$C1" --port 8080 --action rst
	fleet_wait_tenant mf 2 >/dev/null
	old=$(master_port)
	# the replica synced, and the sentinel asked to fail over sees it so
	for ((n = 0; n < 100; n++)); do
		[[ $(ncli "$old" INFO replication | grep -c 'state=online') == 1 ]] &&
			[[ $(scli "${SEN_PORTS[0]}" --json SENTINEL REPLICAS rlmaster |
				jq -r '.[] | "\(.flags)/\(."master-link-status")"') == slave/ok ]] && break
		sleep 0.1
	done
	t0=$(now_ms)
	[[ $(scli "${SEN_PORTS[0]}" SENTINEL FAILOVER rlmaster) == OK ]]
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
	run_loadgen_json c1 --rate 150 --duration 3 $(fleet_targets 8080 1 1 1)
	expect_between "admitted at 150/s for 3 s (limit 100/s + 20)" \
		"$(json_get .total.connected)" 290 "$(calc "320 + $(fleet_stat 1 mf overshoot_bound)")"
	# the sentinels turn the old master into a replica of the new one (when
	# they next ask it: up to 10 s; the load above ran meanwhile)
	for ((n = 0; n < 200; n++)); do
		[[ $(ncli "$old" ROLE | head -1) == slave ]] && break
		sleep 0.05
	done
	[[ $(ncli "$old" ROLE | head -1) == slave ]] ||
		{ echo "the old master is not a replica: $(ncli "$old" ROLE | head -1)" >&2; return 1; }
	expect_eq "agents in the new master's registry" "$(ncli "$new" ZCARD rl:agents)" 3
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
