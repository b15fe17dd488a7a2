#!/usr/bin/env bats
# Fleet mode on a Redis Cluster that speaks only TLS (clients, cluster bus
# and replication), with a password: three agents learn the cluster over
# TLS and lease a tenant on each of two masters within its limit; an agent
# given another CA is degraded on every shard, naming the certificate error.
# shellcheck disable=SC2046 # fleet_targets' output is meant to split into targets

load helpers
load agent_helpers
load fleet_helpers
load cluster_helpers
load tls_helpers

FLEET_PORTS=(8080 8081)

# Set here, not in setup_file: the tests and teardowns need them too.
TLS_DIR=$BATS_FILE_TMPDIR/tls
CLUSTER_NODE_TLS=(--tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key"
	--tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no
	--requirepass tls-secret --masterauth tls-secret)
CLUSTER_CLI_TLS=(--tls --cacert "$TLS_DIR/ca.pem" -a tls-secret --no-auth-warning)
FLEET_AGENT_OPTS=(--redis-tls --redis-ca "$TLS_DIR/ca.pem"
	--redis-password-file "$TLS_DIR/password")

setup_file() {
	e2e_require_root || return 0
	tls_certs "$TLS_DIR"
	cluster_setup_file
}
teardown_file() { cluster_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown; }

@test "the cluster has no plain port: three agents learn it over TLS, are healthy and count 3 live agents" {
	run in_ns redis redis-cli -h "$CLUSTER_IP" -p 7001 -a tls-secret --no-auth-warning PING
	[[ $output != PONG ]]
	local i
	for i in 1 2 3; do
		[[ $(rls "$i" --json status | jq -r '"\(.broker)/\(.live_agents)"') == healthy/3 ]]
	done
}

@test "two tenants on two masters over TLS, 1.5x over their limits from three hosts: each admits its limit" {
	local lim a b ma mb

	ma=$(cluster_master_of t:acme)
	mb=$(cluster_master_of t:beta)
	[[ $ma != "$mb" ]] || { echo "acme and beta on one master ($ma)" >&2; return 1; }
	fleet_tenant_set 1 acme --rate 100/s --burst 10 --match 192.0.2.64/28 --port 8080 \
		--action rst
	fleet_tenant_set 2 beta --rate 100/s --burst 10 --match 192.0.2.64/28 --port 8081 \
		--action rst
	fleet_wait_tenant acme 2 >/dev/null
	fleet_wait_tenant beta 2 >/dev/null
	sleep 1.5
	run_loadgen_json c1 --rate 300 --duration 5 $(fleet_targets 8080 1 1 1) \
		$(fleet_targets 8081 1 1 1)
	lim=$(calc "100 * 5 + 10")
	a=$(json_get '[.targets[] | select(.target | endswith(":8080")) | .connected] | add')
	b=$(json_get '[.targets[] | select(.target | endswith(":8081")) | .connected] | add')
	echo "acme (master $ma) admitted $a, beta (master $mb) $b, of $lim each"
	expect_between "acme admitted" "$a" "$(calc "0.9 * $lim")" \
		"$(calc "$lim + $(fleet_stat 1 acme overshoot_bound)")"
	expect_between "beta admitted" "$b" "$(calc "0.9 * $lim")" \
		"$(calc "$lim + $(fleet_stat 1 beta overshoot_bound)")"
	expect_eq "acme's bucket on master $ma" "$(ccli "$ma" EXISTS 'rl:{t:acme}:bucket')" 1
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
