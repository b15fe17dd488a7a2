#!/usr/bin/env bats
# preload.bats: librlpreload.so limits unmodified servers on a host without
# XDP - nginx (several workers, multi_accept on and off, a SO_REUSEPORT
# group), redis-server (one thread, epoll), python3 blocking accept loops
# (threaded and forking, dual-stack) - from a pool written without an agent
# (tests/rlpool).  Clients open connections faster than the limit: at most
# burst + rate x time get an answer, every other one is reset, none hangs,
# and the servers log no error.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load preload_helpers

RLPOOL=$RLGATE_BUILD/tests/rlpool
RATE=5
BURST=10

setup_file() {
	e2e_require_root || return 0
	e2e_require_build librlpreload.so tests/rlpool || return 1
	lab_up --servers 1 --clients 2
}

setup() {
	e2e_setup
	POOL=$BATS_TEST_TMPDIR/pool
	PRELOAD_ENV=()
	# client 1's prefixes are the tenant; client 2 matches no rule
	"$RLPOOL" "$POOL" "$(lab_addr c1 4 | sed 's/\.[0-9]*$/.64/')/28,$(lab_addr c1 6 | sed 's/::1$/::/')/80@$RATE/s@$BURST"
}

teardown() {
	preload_teardown
	e2e_teardown
}

# pool_count SLOT admitted|denied: the pool's count for tenant SLOT.
pool_count() {
	"$RLPOOL" "$POOL" --stats | awk -v s="$1" -v f="$2" \
		'$1 == "tenant" && $2 == s { print (f == "admitted" ? $3 : $4) }'
}

# expect_pool_limited COUNT: expect_limited at the pool's limit, and the
# pool counted exactly what the client saw.
expect_pool_limited() {
	expect_limited "$1" $RATE $BURST &&
		expect_eq "admitted in the pool" "$(pool_count 1 admitted)" "$OK" &&
		expect_eq "refused in the pool" "$(pool_count 1 denied)" "$RESET"
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
	preloaded s1 nginx -p "$BATS_TEST_TMPDIR" -c "$BATS_TEST_TMPDIR/nginx.conf" \
		-e "$BATS_TEST_TMPDIR/error.log"
	wait_listen s1 8080
}

@test "python3 threaded blocking accept loop on a dual-stack socket: IPv4 clients (v4-mapped) are limited, reset over the limit" {
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread :: 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_pool_limited 30
	expect_eq "connections the server served" "$(grep -c '^served' "$BATS_TEST_TMPDIR/srv.out")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "python3 forking blocking accept loop over IPv6: limited, reset over the limit, children never see a refused connection" {
	preloaded s1 "$PY" "$PRELOAD_SERVER" fork "$(lab_addr s1 6)" 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 6)" 8080 30
	expect_pool_limited 30
	expect_eq "connections the children served" "$(grep -c '^served' "$BATS_TEST_TMPDIR/srv.out")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "a client no rule matches is never limited" {
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	client c2 "$(lab_addr s1 4)" 8080 30
	expect_eq "answered" "$(json_get .ok "$CLIENT_JSON")" 30
	expect_eq "admitted in the pool" "$(pool_count 1 admitted)" 0
}

@test "redis-server (one thread, epoll, accept): limited, refused clients reset, redis logs no error" {
	preloaded s1 redis-server --bind "$(lab_addr s1 4)" --port 6390 --save "" \
		--appendonly no --protected-mode no --logfile "$BATS_TEST_TMPDIR/redis.log"
	wait_listen s1 6390
	client c1 "$(lab_addr s1 4)" 6390 30 PING
	expect_pool_limited 30
	expect_no_errors "$BATS_TEST_TMPDIR/redis.log" "$BATS_TEST_TMPDIR/srv.err"
}

@test "nginx, 3 workers, accept4 with multi_accept on: limited, refused clients reset, no error logged" {
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
	nginx_run 3 on
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_pool_limited 30
	expect_eq "requests nginx logged" "$(wc -l <"$BATS_TEST_TMPDIR/access.log")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/error.log" "$BATS_TEST_TMPDIR/srv.err"
}

@test "nginx, 2 workers in a SO_REUSEPORT group with multi_accept off, over IPv6: limited, no error logged" {
	command -v nginx >/dev/null || skip "nginx is not installed (tools/deps.sh)"
	nginx_run 2 off reuseport
	client c1 "$(lab_addr s1 6)" 8080 30
	expect_pool_limited 30
	expect_eq "requests nginx logged" "$(wc -l <"$BATS_TEST_TMPDIR/access.log")" \
		"$(json_get .ok "$CLIENT_JSON")"
	expect_no_errors "$BATS_TEST_TMPDIR/error.log" "$BATS_TEST_TMPDIR/srv.err"
}

@test "the processes that accepted are listed in the pool" {
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
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
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 4)" 8080 5
	expect_eq "reset" "$(json_get .reset "$CLIENT_JSON")" 5
	expect_eq "lines on stderr" "$(grep -c "rlpreload: couldn't use pool '$POOL': it does not exist" \
		"$BATS_TEST_TMPDIR/srv.err")" 1
	preload_teardown
	PRELOAD_ENV=(RLGATE_POOL_FAIL=allow)
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 4)" 8080 5
	expect_eq "answered" "$(json_get .ok "$CLIENT_JSON")" 5
}

@test "a pool that appears later is used within a second, without a restart" {
	rm -f "$POOL"
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	"$RLPOOL" "$POOL" "$(lab_addr c1 4)/32@$RATE/s@$BURST"
	sleep 1.2
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_pool_limited 30
	grep -q "rlpreload: limiting by pool '$POOL'" "$BATS_TEST_TMPDIR/srv.err"
}

@test "a pool of another layout: the library says so once, refuses every connection and counts itself in the pool's preamble" {
	# the layout version (offset 4) of a later release
	printf '\x63' | dd of="$POOL" bs=1 seek=4 conv=notrunc status=none
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 4)" 8080 5
	expect_eq "reset" "$(json_get .reset "$CLIENT_JSON")" 5
	expect_eq "lines on stderr" "$(grep -c "rlpreload: couldn't use pool '$POOL': it has another layout" \
		"$BATS_TEST_TMPDIR/srv.err")" 1
	# struct rl_pool_preamble: foreign at offset 16
	expect_eq "processes of another layout counted" \
		"$(od -An -tu4 -j16 -N4 "$POOL" | tr -d ' ')" 1
}
