#!/usr/bin/env bats
# Fleet mode on a Redis Cluster that speaks only TLS (clients, cluster bus
# and replication), with a password: three agents learn the cluster over
# TLS and lease a tenant on each of two masters within its limit; an agent
# given another CA is degraded on every shard, naming the certificate error;
# a master killed under load is followed to its promoted replica over TLS.
# shellcheck disable=SC2046 # fleet_targets' output is meant to split into targets

load helpers
load agent_helpers
load fleet_helpers
load chaos_helpers
load cluster_helpers
load tls_helpers

FLEET_PORTS=(8080 8081)

# Set here, not in setup_file: the tests and teardowns need them too.
TLS_DIR=$BATS_FILE_TMPDIR/tls
CLUSTER_NODE_TLS=(--tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key"
	--tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no
	--requirepass tls-secret --masterauth tls-secret)
CLUSTER_CLI_TLS=(--tls --cacert "$TLS_DIR/ca.pem" -a tls-secret --no-auth-warning)
# A call unanswered for a second has failed (not 50 ms): a loaded machine's
# slow TLS round trips are then no failures, so what the kill of a master
# does to each tenant is judged in every run; the kill itself is seen at
# once (the connection closes).
FLEET_AGENT_OPTS=(--redis-tls --redis-ca "$TLS_DIR/ca.pem"
	--redis-password-file "$TLS_DIR/password" --redis-timeout 1000)

setup_file() {
	e2e_require_root || return 0
	tls_certs "$TLS_DIR"
	cluster_setup_file
}
teardown_file() { cluster_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown cluster_restore; }

@test "the cluster has no plain port: three agents learn it over TLS, are healthy and count 3 live agents" {
	run in_ns redis redis-cli -h "$CLUSTER_IP" -p 7001 -a tls-secret --no-auth-warning PING
	[[ $output != PONG ]]
	local i
	for i in 1 2 3; do
		[[ $(rls "$i" --json status | jq -r '"\(.broker)/\(.live_agents)"') == healthy/3 ]]
	done
}

@test "two tenants on two masters over TLS, 1.5x over their limits from three hosts: each admits its limit" {
	local a b ma mb

	ma=$(cluster_master_of t:acme)
	mb=$(cluster_master_of t:beta)
	[[ $ma != "$mb" ]] || { echo "acme and beta on one master ($ma)" >&2; return 1; }
	fleet_tenant_set 1 acme --rate 100/s --burst 10 --match 192.0.2.64/28 --port 8080 \
		--action rst
	fleet_tenant_set 2 beta --rate 100/s --burst 10 --match 192.0.2.64/28 --port 8081 \
		--action rst
	fleet_wait_tenant acme "$FLEET_WAIT_S" >/dev/null
	fleet_wait_tenant beta "$FLEET_WAIT_S" >/dev/null
	sleep 1.5
	run_loadgen_json c1 --rate 300 --duration 5 $(fleet_targets 8080 1 1 1) \
		$(fleet_targets 8081 1 1 1)
	a=$(json_get '[.targets[] | select(.target | endswith(":8080")) | .connected] | add')
	b=$(json_get '[.targets[] | select(.target | endswith(":8081")) | .connected] | add')
	echo "acme (master $ma) admitted $a, beta (master $mb) $b"
	fleet_admitted_check "acme admitted" "$a" 100 10 "$(fleet_stat 1 acme overshoot_bound)"
	fleet_admitted_check "beta admitted" "$b" 100 10 "$(fleet_stat 1 beta overshoot_bound)"
	expect_between "acme refused" "$(fleet_sum acme denied)" 1 1000000
	expect_between "beta refused" "$(fleet_sum beta denied)" 1 1000000
	expect_eq "acme's bucket on master $ma" "$(ccli "$ma" EXISTS 'rl:{t:acme}:bucket')" 1
	expect_eq "beta's bucket on master $mb" "$(ccli "$mb" EXISTS 'rl:{t:beta}:bucket')" 1
}

@test "an agent given another CA: degraded, naming the certificate error" {
	local saved=("${FLEET_AGENT_OPTS[@]}")

	FLEET_AGENT_OPTS=(--redis-tls --redis-ca "$TLS_DIR/other.pem"
		--redis-password-file "$TLS_DIR/password")
	fleet_agent_start 4
	FLEET_AGENT_OPTS=("${saved[@]}")
	sleep 1.5
	[[ $(rls 4 --json status | jq -r .broker) == degraded ]]
	grep -q "certificate verify failed" "$(fleet_log 4)"
}

@test "a master killed under load over TLS: its tenant (fail allow) refuses nothing and leases from the promoted replica over TLS within seconds, at its limit; the other tenant's shard never notices" {
	local out=$BATS_TEST_TMPDIR/load.json ma mb t0 a0 a1 b0 b1 b2 to0 to1 to2 i lost \
		seen=()

	ma=$(cluster_master_of t:acme)
	mb=$(cluster_master_of t:beta)
	fleet_tenant_set 1 acme --rate 100/s --burst 10 --match 192.0.2.64/28 --port 8080 \
		--action rst --fail deny
	fleet_tenant_set 2 beta --rate 100/s --burst 10 --match 192.0.2.64/28 --port 8081 \
		--action rst --fail allow
	fleet_wait_tenant acme "$FLEET_WAIT_S" >/dev/null
	fleet_wait_tenant beta "$FLEET_WAIT_S" >/dev/null
	sleep 1.5
	# 80/s each, and then 150/s of beta on its new master
	fleet_loadgen_bg c1 "$out" --rate 160 --duration 12 $(fleet_targets 8080 1 1 1) \
		$(fleet_targets 8081 1 1 1)
	sleep 2
	a0=$(fleet_snap acme) b0=$(fleet_snap beta) to0=$(fleet_timeouts)
	for i in 1 2 3; do
		seen[i]=$(wc -l <"$(fleet_log "$i")")
	done
	t0=$(now_ms)
	proc_stop "$(cluster_node_pid "$mb")" KILL
	ch_wait_broker "$t0" degraded 5 1 2 3
	fleet_wait_steady 15
	echo "beta's master $mb killed; every agent healthy over TLS $(($(now_ms) - t0)) ms later"
	a1=$(fleet_snap acme) b1=$(fleet_snap beta) to1=$(fleet_timeouts)
	[[ $(cluster_master_of t:beta "$ma") != "$mb" ]] ||
		{ echo "beta still on $mb" >&2; return 1; }
	[[ $(fleet_delta "$b0" "$b1" degraded) -gt 0 ]] ||
		{ echo "beta: no SYN met its fail policy during the outage" >&2; return 1; }
	# Only the killed master's connections went, none to another node
	# (even one whose tenants' tokens lasted until it was back)
	for i in 1 2 3; do
		lost=$(tail -n +"$((seen[i] + 1))" "$(fleet_log "$i")" |
			grep -E "Redis Cluster node '[^']*': .*\(retrying\)" |
			grep -vF "'$CLUSTER_IP:$mb'" || true)
		[[ -z $lost ]] || { echo "s$i lost another node than $mb: $lost" >&2; return 1; }
	done
	echo "Redis calls unanswered past --redis-timeout (1 s) around the kill: $((to1 - to0))"
	expect_eq "beta refused (fail allow)" "$(fleet_delta "$b0" "$b1" denied)" 0
	expect_eq "acme SYNs decided by its fail policy (deny)" \
		"$(fleet_delta "$a0" "$a1" degraded)" 0
	expect_eq "acme refused" "$(fleet_delta "$a0" "$a1" denied)" 0
	# 12 s covers the slowest promotion; the load ends here after a quicker one
	loadgen_stop "$LOADGEN_BG_PID" "$out"
	b1=$(fleet_snap beta) to1=$(fleet_timeouts)
	run_loadgen_json c1 --rate 150 --duration 3 $(fleet_targets 8081 1 1 1)
	b2=$(fleet_snap beta) to2=$(fleet_timeouts)
	echo "Redis calls unanswered past --redis-timeout (1 s) on the new master: $((to2 - to1))"
	expect_eq "beta SYNs decided by its fail policy on the new master" \
		"$(fleet_delta "$b1" "$b2" degraded)" 0
	fleet_admitted_check "beta admitted 1.5x over its limit on the new master" \
		"$(json_get .total.connected)" 100 10 "$(fleet_stat 1 beta overshoot_bound)"
}
