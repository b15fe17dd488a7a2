#!/usr/bin/env bats
# Fleet mode against a Redis that wants a password: the agent authenticates
# with --redis-password-file (and --redis-user for an ACL user) and leases;
# with a wrong password it says so, stays up and runs degraded.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers

REDIS_ADDR=192.0.2.250:6379

setup_file() {
	e2e_require_root || return 0
	e2e_require_build rlagent rlctl
	lab_up --servers 1 --clients 0 --redis
	AUTH_DIR=$BATS_FILE_TMPDIR/auth
	mkdir -p "$AUTH_DIR"
	export AUTH_DIR
	ip netns exec "$(lab_ns redis)" redis-server --bind "${REDIS_ADDR%:*}" \
		--port "${REDIS_ADDR##*:}" --save '' --appendonly no \
		--requirepass default-secret \
		--user rlgate on '>acl-secret' '~*' '&*' '+@all' \
		>"$AUTH_DIR/redis.log" 2>&1 3>&- &
	echo $! >"$AUTH_DIR/redis.pid"
	for ((i = 0; i < 100; i++)); do
		[[ $(in_ns redis redis-cli -h "${REDIS_ADDR%:*}" -a default-secret \
			--no-auth-warning PING 2>/dev/null) == PONG ]] && return 0
		sleep 0.05
	done
	cat "$AUTH_DIR/redis.log" >&2
	return 1
}

teardown_file() {
	if [[ -s ${AUTH_DIR:-}/redis.pid ]]; then
		kill "$(<"$AUTH_DIR/redis.pid")" 2>/dev/null || true
	fi
	e2e_teardown_file
}

teardown() {
	proc_stop "${RLAGENT_PID:-}" TERM || proc_stop "$RLAGENT_PID" KILL
	ip -n "$(lab_ns s1)" link set dev eth0 xdp off 2>/dev/null
	rm -rf "/sys/fs/bpf/rlgate-$LAB-auth"
	e2e_teardown
}

# auth_agent_start PASSWORD [rlagent options]: a fleet agent on s1 whose
# password file holds PASSWORD.
auth_agent_start() {
	local pw=$1 dir=$BATS_TEST_TMPDIR/agent

	shift
	mkdir -p "$dir"
	printf '%s\n' "$pw" >"$dir/password"
	chmod 600 "$dir/password"
	AGENT_DIR=$dir
	rlagent_start s1 "$dir/sock" "$dir/state" "/sys/fs/bpf/rlgate-$LAB-auth" \
		"$dir/log" --redis "$REDIS_ADDR" --redis-password-file "$dir/password" "$@"
}

# broker_within SECONDS STATE: the agent's broker reaches STATE in time.
broker_within() {
	local i state

	for ((i = 0; i < $1 * 20; i++)); do
		state=$("$RLGATE_BUILD/rlctl" --socket "$AGENT_DIR/sock" --json status |
			jq -r .broker)
		[[ $state == "$2" ]] && return 0
		sleep 0.05
	done
	echo "broker is '$state' after $1 s, expected '$2'; agent log:" >&2
	cat "$AGENT_DIR/log" >&2
	return 1
}

@test "the default user's password from --redis-password-file: the agent authenticates and leases" {
	auth_agent_start default-secret
	broker_within 3 healthy
}

@test "an ACL user (--redis-user) with its password: the agent authenticates and leases" {
	auth_agent_start acl-secret --redis-user rlgate
	broker_within 3 healthy
}

@test "a wrong password: the agent logs the refusal, keeps running and stays degraded" {
	auth_agent_start not-the-password
	sleep 1.5
	proc_running "$RLAGENT_PID"
	broker_within 1 degraded
	grep -q "couldn't authenticate to Redis" "$AGENT_DIR/log" ||
		{ cat "$AGENT_DIR/log" >&2; return 1; }
}
