#!/usr/bin/env bats
# Fleet mode over TLS: a TLS-only Redis (no plain port) with a password and
# certificates from a throwaway CA.  Agents that trust the CA lease and hold
# the global limit; an agent given another CA, or a name the certificate
# does not carry, stays up and degraded and says which check failed; when
# Redis asks for client certificates, only an agent that has one leases; a
# TLS-only sentinel is asked over TLS too.

# shellcheck disable=SC2046 # $(fleet_targets ...) is several loadgen targets

load helpers
load agent_helpers
load fleet_helpers
load tls_helpers

FLEET_SERVERS=3		# s1, s2 lease for the file; s3 for the odd agents
FLEET_AGENTS=2
# Set here, not in setup_file: the tests and teardowns need them too.
TLS_DIR=$BATS_FILE_TMPDIR/tls
# TLS only: no plain port.
FLEET_REDIS_OPTS=(--port 0 --tls-port "${REDIS_ADDR##*:}"
	--tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key"
	--tls-ca-cert-file "$TLS_DIR/ca.pem" --tls-auth-clients no
	--requirepass tls-secret)
FLEET_RCLI_OPTS=(--tls --cacert "$TLS_DIR/ca.pem" --cert "$TLS_DIR/client.pem"
	--key "$TLS_DIR/client.key" -a tls-secret --no-auth-warning)
FLEET_AGENT_OPTS=(--redis-tls --redis-ca "$TLS_DIR/ca.pem"
	--redis-password-file "$TLS_DIR/password")

setup_file() {
	e2e_require_root || return 0
	tls_certs "$TLS_DIR"
	fleet_setup_file openssl
}
teardown_file() { fleet_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown redis_no_client_certs; }

redis_no_client_certs() {
	[[ $(rcli CONFIG SET tls-auth-clients no) == OK ]]
}

# odd_agent [rlagent options]: an agent on s3 with the password, the
# file's agents' options replaced by the test's.
odd_agent() {
	local saved=("${FLEET_AGENT_OPTS[@]}") rc=0

	FLEET_AGENT_OPTS=(--redis-password-file "$TLS_DIR/password")
	fleet_agent_start 3 "$@" || rc=$?
	FLEET_AGENT_OPTS=("${saved[@]}")
	return $rc
}

# s3_within SECONDS STATE: agent s3's broker reaches STATE in time.
s3_within() { fleet_broker_within 3 "$1" "$2"; }

# s3_says TEXT: agent s3 logged TEXT and gives it as the degraded reason.
s3_says() {
	grep -qF "$1" "$(fleet_log 3)" ||
		{ echo "s3's log does not say '$1'" >&2; return 1; }
	rls 3 --json status | jq -e --arg t "$1" '.degraded_reason | contains($t)' >/dev/null ||
		{ echo "s3's degraded reason: $(rls 3 --json status | jq -r .degraded_reason)" >&2; return 1; }
}

@test "Redis has no plain port: the agents reach it only over TLS, and lease" {
	run in_ns redis redis-cli -h "${REDIS_ADDR%:*}" -p "${REDIS_ADDR##*:}" -a tls-secret \
		--no-auth-warning PING
	[[ $output != PONG ]]
	[[ $(rls 1 --json status | jq -r .broker) == healthy ]]
	[[ $(rls 2 --json status | jq -r .live_agents) == 2 ]]
}

@test "two agents leasing over TLS: the fleet admits the global limit, within the overshoot bound" {
	local admitted lim bound

	fleet_tenant_set 1 tls --rate 100/s --burst 10 --match "$(client_prefix c1)" --action rst
	fleet_wait_tenant tls 2 >/dev/null
	sleep 2
	run_loadgen_json c1 --rate 200 --duration 5 $(fleet_targets "$PORT" 1 1)
	expect_offered 1000
	admitted=$(json_get .total.connected)
	bound=$(fleet_stat 1 tls overshoot_bound)
	lim=$(calc "100 * 5 + 10")
	expect_between "admitted over the fleet (limit x T + burst = $lim, bound $bound)" \
		"$admitted" "$(calc "0.9 * $lim")" "$(calc "$lim + $bound")"
	(($(fleet_stat 1 tls leases) > 0 && $(fleet_stat 2 tls leases) > 0))
}

@test "an agent given another CA stays up and degraded, naming the certificate error" {
	odd_agent --redis-tls --redis-ca "$TLS_DIR/other.pem"
	sleep 1
	s3_within 2 degraded
	s3_says "certificate verify failed"
	proc_running "$(fleet_pid 3)"
}

@test "a TLS connect that fails is never told as connected: a handshake refused and a port that refuses the TCP connect leave the agent connecting or down, and its log says no connection came up" {
	local st
	odd_agent --redis-tls --redis-ca "$TLS_DIR/other.pem"
	s3_within 3 degraded
	s3_says "certificate verify failed"
	# a few failed tries later
	sleep 2
	st=$(rls 3 --json status | jq -r .redis.state)
	[[ $st == connecting || $st == down ]] || { echo "redis state after refused handshakes: $st" >&2; return 1; }
	expect_eq "connections told up" "$(grep -cF "connection up" "$(fleet_log 3)")" 0
	fleet_agent_stop 3 TERM
	fleet_agent_wipe 3
	# nothing listens on this port of the lab's Redis host
	odd_agent --redis "${REDIS_ADDR%:*}:1" --redis-tls --redis-ca "$TLS_DIR/ca.pem"
	s3_within 3 degraded
	sleep 2
	st=$(rls 3 --json status | jq -r .redis.state)
	[[ $st == connecting || $st == down ]] || { echo "redis state after refused connects: $st" >&2; return 1; }
	expect_eq "connections told up" "$(grep -cF "connection up" "$(fleet_log 3)")" 0
	s3_says "couldn't connect"
}

@test "a server name the certificate does not carry: degraded, naming the mismatch; the name it carries: healthy" {
	odd_agent --redis-tls --redis-ca "$TLS_DIR/ca.pem" --redis-server-name redis.example
	sleep 1
	s3_within 2 degraded
	s3_says "hostname mismatch"
	fleet_agent_stop 3 TERM
	fleet_agent_wipe 3
	odd_agent --redis-tls --redis-ca "$TLS_DIR/ca.pem" --redis-server-name redis.lab
	s3_within 3 healthy
}

@test "Redis asking for client certificates: an agent without one is degraded, one with --redis-cert and --redis-key leases" {
	[[ $(rcli CONFIG SET tls-auth-clients yes) == OK ]]
	odd_agent --redis-tls --redis-ca "$TLS_DIR/ca.pem"
	sleep 1
	s3_within 2 degraded
	fleet_agent_stop 3 TERM
	fleet_agent_wipe 3
	odd_agent --redis-tls --redis-ca "$TLS_DIR/ca.pem" \
		--redis-cert "$TLS_DIR/client.pem" --redis-key "$TLS_DIR/client.key"
	s3_within 3 healthy
}

@test "TLS options are checked before anything starts: --redis-ca without --redis-tls, a certificate without its key" {
	run "$RLGATE_BUILD/rlagent" --iface lo --redis "$REDIS_ADDR" --redis-ca "$TLS_DIR/ca.pem"
	[[ $status == 2 && $output == *"--redis-ca needs --redis-tls"* ]]
	run "$RLGATE_BUILD/rlagent" --iface lo --redis "$REDIS_ADDR" --redis-tls \
		--redis-cert "$TLS_DIR/client.pem"
	[[ $status == 2 && $output == *"--redis-cert and --redis-key go together"* ]]
}

@test "a TLS-only sentinel naming the TLS-only Redis: an agent asks it over TLS, finds the master and leases" {
	local dir=$BATS_TEST_TMPDIR/sentinel n

	mkdir -p "$dir"
	cat >"$dir/sentinel.conf" <<-CONF
		port 0
		tls-port 26379
		tls-cert-file $TLS_DIR/server.pem
		tls-key-file $TLS_DIR/server.key
		tls-ca-cert-file $TLS_DIR/ca.pem
		tls-auth-clients no
		tls-replication yes
		bind ${REDIS_ADDR%:*}
		dir $dir
		sentinel monitor rlmaster ${REDIS_ADDR%:*} ${REDIS_ADDR##*:} 1
		sentinel auth-pass rlmaster tls-secret
	CONF
	ip netns exec "$(lab_ns redis)" redis-server "$dir/sentinel.conf" --sentinel \
		>"$dir/log" 2>&1 3>&- &
	echo $! >"$dir/pid"
	fleet_bg_track "$(<"$dir/pid")"
	for ((n = 0; n < 100; n++)); do
		[[ $(in_ns redis redis-cli -h "${REDIS_ADDR%:*}" -p 26379 --tls \
			--cacert "$TLS_DIR/ca.pem" SENTINEL get-master-addr-by-name rlmaster \
			2>/dev/null | sed -n 2p) == "${REDIS_ADDR##*:}" ]] && break
		sleep 0.05
	done
	FLEET_AGENT_OPTS=()
	fleet_agent_start 3 --redis "sentinel:rlmaster@${REDIS_ADDR%:*}:26379" --redis-tls \
		--redis-ca "$TLS_DIR/ca.pem" --redis-password-file "$TLS_DIR/password"
	s3_within 5 healthy || { cat "$dir/log" >&2; return 1; }
	grep -q "Redis on 'sentinel:rlmaster@" "$(fleet_log 3)"
}

