#!/usr/bin/env bats
# preload.bats: librlpreload.so limits unmodified servers on a host without
# XDP - nginx (several workers, multi_accept on and off, a SO_REUSEPORT
# group), redis-server (one thread, epoll), python3 blocking accept loops
# (threaded and forking, dual-stack) - from a pool written without an agent
# (tests/rlpool).  Clients open connections faster than the limit: at most
# burst + rate x time get an answer, every other one is reset, none hangs,
# and the servers log no error.

load helpers

PRELOAD=$RLGATE_BUILD/librlpreload.so
RLPOOL=$RLGATE_BUILD/tests/rlpool
CLIENT=$RLGATE_ROOT/tests/e2e/preload_client.py
SERVER=$RLGATE_ROOT/tests/e2e/preload_server.py
PY=/usr/bin/python3
RATE=5
BURST=10

setup_file() {
	e2e_require_root || return 0
	e2e_require_build librlpreload.so tests/rlpool || return 1
	lab_up --servers 1 --clients 2
}

setup() {
	e2e_setup
	SRV_PID=
	POOL=$BATS_TEST_TMPDIR/pool
	# client 1's prefixes are the tenant; client 2 matches no rule
	"$RLPOOL" "$POOL" "$(lab_addr c1 4 | sed 's/\.[0-9]*$/.64/')/28,$(lab_addr c1 6 | sed 's/::1$/::/')/80@$RATE/s@$BURST"
}

teardown() {
	if [[ -n $SRV_PID ]]; then
		kill -TERM "$SRV_PID" 2>/dev/null || true
		wait "$SRV_PID" 2>/dev/null || true
	fi
	e2e_teardown
}

# preloaded CMD...: runs CMD in s1 under the library, in the background
# (SRV_PID), output in $BATS_TEST_TMPDIR/srv.{out,err}.
preloaded() {
	ip netns exec "$(lab_ns s1)" env LD_PRELOAD="$PRELOAD" RLGATE_POOL="$POOL" "$@" \
		>"$BATS_TEST_TMPDIR/srv.out" 2>"$BATS_TEST_TMPDIR/srv.err" 3>&- &
	SRV_PID=$!
}

# wait_listen PORT: until s1 listens on PORT (5 s at most).
wait_listen() {
	local i

	for ((i = 0; i < 100; i++)); do
		[[ -n $(in_ns s1 ss -Hltn "sport = :$1") ]] && return 0
		sleep 0.05
	done
	echo "nothing listens on port $1 of s1:" >&2
	cat "$BATS_TEST_TMPDIR/srv.err" >&2
	return 1
}

# client HOST ADDR PORT COUNT [REQUEST]: COUNT connections at 10/s from
# HOST (twice the limit), the report in CLIENT_JSON.
client() {
	CLIENT_JSON=$(in_ns "$1" "$PY" "$CLIENT" "$2" "$3" 10 "$4" "${5:-}")
	echo "client $*: $CLIENT_JSON"
}

# pool_count SLOT admitted|denied: the pool's count for tenant SLOT.
pool_count() {
	"$RLPOOL" "$POOL" --stats | awk -v s="$1" -v f="$2" \
		'$1 == "tenant" && $2 == s { print (f == "admitted" ? $3 : $4) }'
}

# expect_limited COUNT: of COUNT connections over the limit, between the
# burst and burst + rate x the run's seconds (+1, a token refilling as the
# run ends) were answered, every other one was reset, none timed out or
# failed otherwise, and the pool counted exactly that.
expect_limited() {
	local ok reset secs hi

	ok=$(json_get .ok "$CLIENT_JSON") && reset=$(json_get .reset "$CLIENT_JSON") &&
		secs=$(json_get .seconds "$CLIENT_JSON") || return 1
	hi=$(awk -v b=$BURST -v r=$RATE -v t="$secs" 'BEGIN { printf "%d", b + r * t + 1 }')
	expect_eq "timed out" "$(json_get .timeout "$CLIENT_JSON")" 0 &&
		expect_eq "failed otherwise" "$(json_get .error "$CLIENT_JSON")" 0 &&
		expect_eq "closed without an answer" "$(json_get .empty "$CLIENT_JSON")" 0 &&
		expect_eq "answered + reset" $((ok + reset)) "$1" &&
		expect_between "answered" "$ok" "$BURST" "$hi" &&
		expect_eq "admitted in the pool" "$(pool_count 1 admitted)" "$ok" &&
		expect_eq "refused in the pool" "$(pool_count 1 denied)" "$reset"
}

# expect_no_errors FILE...: no line of the logs tells of an error.
expect_no_errors() {
	if grep -iE 'error|traceback|exception|\[(alert|crit|emerg)\]' "$@" >&2; then
		echo "the server logged errors (above)" >&2
		return 1
	fi
}

# nginx_conf WORKERS MULTI_ACCEPT [reuseport]: a configuration in the test's
# folder, serving "ok" on s1's addresses, port 8080.
nginx_conf() {
	local d=$BATS_TEST_TMPDIR v4 v6

	v4=$(lab_addr s1 4) v6=$(lab_addr s1 6)
	cat >"$d/nginx.conf" <<EOF
worker_processes $1;
daemon off;
user root;
pid $d/nginx.pid;
error_log $d/error.log info;
events { worker_connections 256; multi_accept $2; accept_mutex off; }
http {
	access_log $d/access.log;
	client_body_temp_path $d;
	server {
		listen $v4:8080 ${3:-};
		listen [$v6]:8080 ${3:-};
		location / { return 200 "ok\n"; }
	}
}
EOF
}

nginx_run() {
	nginx_conf "$@"
	preloaded nginx -p "$BATS_TEST_TMPDIR" -c "$BATS_TEST_TMPDIR/nginx.conf" \
		-e "$BATS_TEST_TMPDIR/error.log"
	wait_listen 8080
}

@test "python3 threaded blocking accept loop on a dual-stack socket: IPv4 clients (v4-mapped) are limited, reset over the limit" {
	preloaded "$PY" "$SERVER" thread :: 8080
	wait_listen 8080
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_limited 30
	expect_eq "connections the server served" "$(grep -c '^served' "$BATS_TEST_TMPDIR/srv.out")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "python3 forking blocking accept loop over IPv6: limited, reset over the limit, children never see a refused connection" {
	preloaded "$PY" "$SERVER" fork "$(lab_addr s1 6)" 8080
	wait_listen 8080
	client c1 "$(lab_addr s1 6)" 8080 30
	expect_limited 30
	expect_eq "connections the children served" "$(grep -c '^served' "$BATS_TEST_TMPDIR/srv.out")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "a client no rule matches is never limited" {
	preloaded "$PY" "$SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen 8080
	client c2 "$(lab_addr s1 4)" 8080 30
	expect_eq "answered" "$(json_get .ok "$CLIENT_JSON")" 30
	expect_eq "admitted in the pool" "$(pool_count 1 admitted)" 0
}

@test "redis-server (one thread, epoll, accept): limited, refused clients reset, redis logs no error" {
	preloaded redis-server --bind "$(lab_addr s1 4)" --port 6390 --save "" \
		--appendonly no --protected-mode no --logfile "$BATS_TEST_TMPDIR/redis.log"
	wait_listen 6390
	client c1 "$(lab_addr s1 4)" 6390 30 PING
	expect_limited 30
	expect_no_errors "$BATS_TEST_TMPDIR/redis.log" "$BATS_TEST_TMPDIR/srv.err"
}

@test "nginx, 3 workers, accept4 with multi_accept on: limited, refused clients reset, no error logged" {
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
	nginx_run 3 on
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_limited 30
	expect_eq "requests nginx logged" "$(wc -l <"$BATS_TEST_TMPDIR/access.log")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/error.log" "$BATS_TEST_TMPDIR/srv.err"
}

@test "nginx, 2 workers in a SO_REUSEPORT group with multi_accept off, over IPv6: limited, no error logged" {
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
	nginx_run 2 off reuseport
	client c1 "$(lab_addr s1 6)" 8080 30
	expect_limited 30
	expect_eq "requests nginx logged" "$(wc -l <"$BATS_TEST_TMPDIR/access.log")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/error.log" "$BATS_TEST_TMPDIR/srv.err"
}

@test "the processes that accepted are listed in the pool" {
	preloaded "$PY" "$SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen 8080
	client c1 "$(lab_addr s1 4)" 8080 12
	run "$RLPOOL" "$POOL" --stats
	echo "$output"
	[[ $output == *"proc $SRV_PID python3 3 "* ]] || {
		echo "no line for pid $SRV_PID, listening and accepting (flags 3)" >&2
		return 1
	}
}

@test "without a pool the library refuses every connection and says why once; RLGATE_POOL_FAIL=allow admits" {
	rm -f "$POOL"
	preloaded "$PY" "$SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen 8080
	client c1 "$(lab_addr s1 4)" 8080 5
	expect_eq "reset" "$(json_get .reset "$CLIENT_JSON")" 5
	expect_eq "lines on stderr" "$(grep -c "rlpreload: couldn't use pool '$POOL': it does not exist" \
		"$BATS_TEST_TMPDIR/srv.err")" 1
	kill -TERM "$SRV_PID"
	wait "$SRV_PID" || true
	ip netns exec "$(lab_ns s1)" env LD_PRELOAD="$PRELOAD" RLGATE_POOL="$POOL" \
		RLGATE_POOL_FAIL=allow "$PY" "$SERVER" thread "$(lab_addr s1 4)" 8080 \
		>/dev/null 2>&1 3>&- &
	SRV_PID=$!
	wait_listen 8080
	client c1 "$(lab_addr s1 4)" 8080 5
	expect_eq "answered" "$(json_get .ok "$CLIENT_JSON")" 5
}

@test "a pool that appears later is used within a second, without a restart" {
	rm -f "$POOL"
	preloaded "$PY" "$SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen 8080
	"$RLPOOL" "$POOL" "$(lab_addr c1 4)/32@$RATE/s@$BURST"
	sleep 1.2
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_limited 30
	grep -q "rlpreload: limiting by pool '$POOL'" "$BATS_TEST_TMPDIR/srv.err"
}
