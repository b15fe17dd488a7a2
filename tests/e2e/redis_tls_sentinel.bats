#!/usr/bin/env bats
# Fleet mode behind Redis Sentinel over TLS, with passwords: the master, its
# replica and three sentinels speak only TLS (also between themselves), the
# data nodes and the sentinels each require their own password.  Agents
# given the sentinels' password find the master over TLS; one without it,
# or with a wrong one, stays degraded and says why.  The master killed under
# load: the agents follow the promoted replica over TLS, refuse nothing
# under fail allow, and the limit holds on the new master.

load helpers
load agent_helpers
load fleet_helpers
load chaos_helpers
load sentinel_helpers
load tls_helpers

FLEET_SERVERS=4		# s4 for the odd agents
# Set here, not in setup_file: the tests and teardowns need them too.
TLS_DIR=$BATS_FILE_TMPDIR/tls
SEN_TLS=(--tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key"
	--tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no)
SEN_DATA_OPTS=(--requirepass tls-secret --masterauth tls-secret)
SEN_SENTINEL_OPTS=(--requirepass sen-secret)
SEN_CONF=("sentinel auth-pass rlmaster tls-secret" "sentinel sentinel-pass sen-secret")
SEN_CLI=(--tls --cacert "$TLS_DIR/ca.pem" -a tls-secret --no-auth-warning)
SEN_SCLI=(--tls --cacert "$TLS_DIR/ca.pem" -a sen-secret --no-auth-warning)
FLEET_AGENT_OPTS=(--redis-tls --redis-ca "$TLS_DIR/ca.pem"
	--redis-password-file "$TLS_DIR/password"
	--redis-sentinel-password-file "$TLS_DIR/sen-password")

setup_file() {
	e2e_require_root || return 0
	CLUSTER_IP=$SEN_IP tls_certs "$TLS_DIR"
	printf 'sen-secret\n' >"$TLS_DIR/sen-password"
	printf 'wrong\n' >"$TLS_DIR/wrong-password"
	fleet_setup_file openssl
}
teardown_file() { sentinel_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown; }

# odd_agent [rlagent options]: an agent on s4 with TLS and the master's
# password, the sentinels' password as the test says.
odd_agent() {
	local saved=("${FLEET_AGENT_OPTS[@]}") rc=0

	FLEET_AGENT_OPTS=(--redis-tls --redis-ca "$TLS_DIR/ca.pem"
		--redis-password-file "$TLS_DIR/password")
	fleet_agent_start 4 "$@" || rc=$?
	FLEET_AGENT_OPTS=("${saved[@]}")
	return $rc
}

@test "the sentinels have no plain port and want a password: agents with --redis-sentinel-password-file find the master over TLS and lease; without it, or with a wrong one, an agent is degraded and logs the sentinel's refusal" {
	run in_ns redis redis-cli -h "$SEN_IP" -p "${SEN_PORTS[0]}" -a sen-secret --no-auth-warning PING
	[[ $output != PONG ]]
	[[ $(scli "${SEN_PORTS[0]}" SENTINEL get-master-addr-by-name rlmaster | sed -n 2p) == "${DATA_PORTS[0]}" ]]
	run in_ns redis redis-cli -h "$SEN_IP" -p "${SEN_PORTS[0]}" --tls --cacert "$TLS_DIR/ca.pem" \
		SENTINEL get-master-addr-by-name rlmaster
	[[ $output == *NOAUTH* ]]
	for i in 1 2 3; do
		[[ $(rls "$i" --json status | jq -r '"\(.broker)/\(.live_agents)"') == healthy/3 ]]
	done
	odd_agent
	fleet_broker_within 4 2 degraded
	sleep 1
	[[ $(rls 4 --json status | jq -r .broker) == degraded ]]
	grep -q "NOAUTH" "$(fleet_log 4)" ||
		{ echo "s4 does not say the sentinel wants a password" >&2; return 1; }
	fleet_agent_stop 4 TERM
	odd_agent --redis-sentinel-password-file "$TLS_DIR/wrong-password"
	sleep 1.5
	[[ $(rls 4 --json status | jq -r .broker) == degraded ]]
	grep -q "couldn't authenticate to Sentinel on '$SEN_IP'" "$(fleet_log 4)" ||
		{ echo "s4 does not say its password was refused" >&2; return 1; }
}

@test "the master killed under load over TLS: every agent degraded, then on the promoted replica over TLS, nothing refused (fail allow), the limit holds there" {
	sentinel_kill_check acme 150 20 192.0.2.64/28
}
