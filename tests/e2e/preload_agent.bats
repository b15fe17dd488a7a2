#!/usr/bin/env bats
# preload_agent.bats: rlagent keeps the preload pool (--preload-pool).
# Standalone on a host with no XDP attached: limits set with rlctl reach a
# running preloaded server, rlctl stats, status and the metrics name the
# enforcement point, and the pool keeps limiting while the agent is gone.
# Fleet mode: an XDP host and a preload host spend from one global limit.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers
load fleet_helpers
load preload_helpers

setup() {
	e2e_setup
	e2e_require_build rlagent rlctl loadgen librlpreload.so pass.bpf.o
	PRELOAD_ENV=()
	PIN_DIRS=()
	AGENT_PIDS=()
	TMP_DIRS=()
	POOL=$BATS_TEST_TMPDIR/pool
}

teardown() {
	local pid d rc=0

	release_all_conns
	preload_teardown
	# killed and awaited, and their logs checked for sanitizer reports
	for pid in "${AGENT_PIDS[@]}"; do
		proc_stop "$pid" KILL || rc=1
	done
	if [[ -n ${FLEET_DIR:-} ]]; then
		proc_stop "$(redis_pid)" KILL 2>/dev/null || true
	fi
	e2e_teardown
	for d in "${PIN_DIRS[@]}" "${TMP_DIRS[@]}"; do
		rm -rf "$d" || true
	done
	if [[ $BATS_TEST_COMPLETED != 1 ]]; then
		for d in "$BATS_TEST_TMPDIR"/*.log; do
			[[ -s $d ]] || continue
			echo "--- $d ---" >&2
			tail -n 30 "$d" >&2
		done
	fi
	return $rc
}

# preload_agent HOST NAME [rlagent options]: rlagent on HOST attached to no
# interface, keeping $POOL; its socket is $BATS_TEST_TMPDIR/NAME.sock.
preload_agent() {
	local host=$1 name=$2 rc=0 pin=/sys/fs/bpf/rlgate-$LAB-$2

	shift 2
	PIN_DIRS+=("$pin")
	mkdir -p "$BATS_TEST_TMPDIR/$name.state"
	RLAGENT_IFACE='' rlagent_start "$host" "$BATS_TEST_TMPDIR/$name.sock" \
		"$BATS_TEST_TMPDIR/$name.state" "$pin" "$BATS_TEST_TMPDIR/$name.log" \
		--preload-pool "$POOL" "$@" || rc=$?
	AGENT_PIDS+=("$RLAGENT_PID")
	return $rc
}

# fleet_lab SERVERS CLIENTS: a lab of that many servers and clients and a
# Redis host, redis-server running there.
fleet_lab() {
	lab_up --servers "$1" --clients "$2" --redis
	FLEET_DIR=$BATS_TEST_TMPDIR/fleet
	mkdir -p "$FLEET_DIR"
	redis_start
}

# rla NAME ARGS...: rlctl against agent NAME.
rla() {
	local name=$1

	shift
	"$RLGATE_BUILD/rlctl" --socket "$BATS_TEST_TMPDIR/$name.sock" "$@"
}

# point_stat NAME TENANT POINT FIELD: FIELD of POINT in agent NAME's stats.
point_stat() {
	json_get ".[] | select(.tenant == \"$2\") | .points[] | select(.point == \"$3\") | .$4" \
		"$(rla "$1" --json stats "$2")"
}

# standalone_web 4|::: a lab of one server and one client, an agent on s1
# attached nowhere, tenant web (5/s, burst 10) on c1's prefixes, and a
# preloaded threaded server on s1:8080 - its IPv4 address, or :: (dual-stack).
standalone_web() {
	local addr=$1

	lab_up --servers 1 --clients 1
	[[ $addr == 4 ]] && addr=$(lab_addr s1 4)
	preload_agent s1 a
	rla a tenant set web --rate 5/s --burst 10 --match "$(prefixes c1)" >/dev/null
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$addr" 8080
	wait_listen s1 8080
}

@test "standalone, no XDP attached: rlctl's limit holds in a preloaded server, counted as the preload point in stats, status and metrics" {
	local st page

	standalone_web ::
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_limited 30 5 10
	if ip -n "$(lab_ns s1)" link show dev eth0 | grep -q prog/; then
		echo "an XDP program is attached on s1" >&2
		return 1
	fi
	expect_eq "preload admitted" "$(point_stat a web preload admitted)" "$OK"
	expect_eq "preload denied" "$(point_stat a web preload denied)" "$RESET"
	expect_eq "kernel admitted" "$(point_stat a web kernel admitted)" 0
	expect_eq "tenant admitted (both points)" "$(rlctl_stat "$BATS_TEST_TMPDIR/a.sock" web admitted)" "$OK"
	st=$(rla a --json status)
	expect_eq "the server's state in status" \
		"$(json_get ".preload.processes[] | select(.pid == $SRV_PID) | .state" "$st")" governed
	expect_eq "its refusals in status" \
		"$(json_get ".preload.processes[] | select(.pid == $SRV_PID) | .denied" "$st")" "$RESET"
	rla a status | grep -E "^ +$SRV_PID +python3 +governed"
	page=$(metrics s1)
	expect_eq "metric, preload point" \
		"$(metric_value 'rlgate_point_admitted_total{tenant="web",point="preload"}' "$page")" "$OK"
	expect_eq "metric, kernel point" \
		"$(metric_value 'rlgate_point_denied_total{tenant="web",point="kernel"}' "$page")" 0
}

@test "an instance limit on an agent attached nowhere is kept but not enforced, and says so (reply, status, log): a preloaded server's connections meet only their tenant's limit" {
	local out st

	standalone_web 4
	out=$(rla a instance set --max-conns 2 --rate 1/s,1)
	echo "$out"
	[[ $out == *"not enforced: no interface attached"*"preload library does not"* ]] ||
		{ echo "rlctl instance set does not say the limit is not enforced" >&2; return 1; }
	st=$(rla a --json status)
	expect_eq "instance.enforced" "$(json_get .instance.enforced "$st")" false
	expect_eq "instance.max_conns kept" "$(json_get .instance.max_conns "$st")" 2
	grep -qF "instance limit is kept but not enforced" "$BATS_TEST_TMPDIR/a.log" ||
		{ echo "the agent's log does not say the limit is not enforced" >&2; return 1; }
	# the tenant's 5/s burst 10 alone: the instance's 1/s burst 1 would
	# have reset all but a few
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_limited 30 5 10
	expect_eq "instance denied by the rate" "$(json_get .instance.denied_rate "$(rla a --json status)")" 0
}

@test "a limit changed with rlctl reaches a running preloaded server; with the agent stopped, its last limits still hold" {
	standalone_web 4
	rla a tenant set web --rate 1000/s --burst 100 >/dev/null
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_eq "answered under a raised limit" "$(json_get .ok "$CLIENT_JSON")" 30
	rla a tenant set web --rate 2/s --burst 4 >/dev/null
	proc_stop "${AGENT_PIDS[0]}" TERM
	client c1 "$(lab_addr s1 4)" 8080 20
	# the bucket was full (100 tokens, at most the new burst: 4) when the
	# limit came down
	expect_limited 20 2 4
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "a restarted agent adopts the pool: counts carry on and the server needs no restart" {
	standalone_web 4
	client c1 "$(lab_addr s1 4)" 8080 5
	proc_stop "${AGENT_PIDS[0]}" KILL
	preload_agent s1 a
	grep -q "preload pool '$POOL' adopted" "$BATS_TEST_TMPDIR/a.log"
	client c1 "$(lab_addr s1 4)" 8080 5
	expect_eq "admitted over both runs" "$(point_stat a web preload admitted)" 10
}

@test "fleet: an XDP host and a preload host share one global limit (rate x T + burst, within the overshoot bound)" {
	local lim bound adm_x adm_p t=6 rate=20 burst=20

	fleet_lab 2 2
	# s1: XDP (rst), an accept-and-close server; s2: no XDP, a preloaded one
	serve_start s1 8080
	mkdir -p "$BATS_TEST_TMPDIR/x.state"
	PIN_DIRS+=("/sys/fs/bpf/rlgate-$LAB-x")
	rlagent_start s1 "$BATS_TEST_TMPDIR/x.sock" "$BATS_TEST_TMPDIR/x.state" \
		"/sys/fs/bpf/rlgate-$LAB-x" "$BATS_TEST_TMPDIR/x.log" \
		--redis "$REDIS_ADDR" --agent-id x
	AGENT_PIDS+=("$RLAGENT_PID")
	preload_agent s2 p --redis "$REDIS_ADDR" --agent-id p
	rla x tenant set shared --rate $rate/s --burst $burst --match "$(prefixes c1 c2)" \
		--action rst >/dev/null
	for ((i = 0; i < 50; i++)); do
		rla p --json tenant list | jq -e '.[] | select(.name == "shared")' >/dev/null && break
		sleep 0.1
	done
	preloaded s2 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s2 4)" 8080
	wait_listen s2 8080
	# 40/s at each host for t seconds: four times the limit in all
	loadgen_bg c1 "$BATS_TEST_TMPDIR/lg.json" --rate 40 --duration $t "$(lab_target s1 8080)"
	client c2 "$(lab_addr s2 4)" 8080 $((40 * t)) "" 40
	loadgen_wait "$LOADGEN_BG_PID" "$BATS_TEST_TMPDIR/lg.json"
	adm_x=$(json_get '.total.connected' "$LOADGEN_JSON")
	adm_p=$(json_get .ok "$CLIENT_JSON")
	expect_eq "preload host: answered + reset" \
		$((adm_p + $(json_get .reset "$CLIENT_JSON"))) $((40 * t))
	expect_eq "preload host: timed out" "$(json_get .timeout "$CLIENT_JSON")" 0
	bound=$(rlctl_stat "$BATS_TEST_TMPDIR/x.sock" shared overshoot_bound)
	lim=$((rate * (t + 1) + burst))
	echo "admitted: XDP host $adm_x, preload host $adm_p; limit x T + burst $lim, bound $bound"
	expect_between "admitted over both hosts" $((adm_x + adm_p)) $((rate * t / 2)) $((lim + bound))
	((adm_p > 0)) || { echo "the preload host admitted nothing" >&2; return 1; }
	((adm_x > 0)) || { echo "the XDP host admitted nothing" >&2; return 1; }
	expect_eq "preload point of the preload host" "$(point_stat p shared preload admitted)" "$adm_p"
}

@test "outbound (--direction out): preloaded curl and a python client connect to a limited destination at most rate x T + burst; over it connect fails at once (ECONNREFUSED), other destinations are untouched" {
	local ok=0 refused=0 other=0 rc i secs hi t0 t1

	lab_up --servers 2 --clients 1
	# the clients' host runs the agent and the limited programs
	preload_agent c1 a
	rla a tenant set down --direction out --rate 2/s --burst 3 \
		--match "$(lab_addr s1 4)/32" --port 8080 >/dev/null
	rla a tenant get down | grep -qx 'direction: out'
	ip netns exec "$(lab_ns s1)" "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080 \
		>/dev/null 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/srv.pids"
	ip netns exec "$(lab_ns s2)" "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s2 4)" 8080 \
		>/dev/null 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/srv.pids"
	wait_listen s1 8080
	wait_listen s2 8080
	# ten curls one after another: the burst gets through, and what the
	# rate refills meanwhile (however long a loaded machine takes to start
	# ten curls); the rest fail at connect
	t0=$(now_ms)
	for ((i = 0; i < 10; i++)); do
		rc=0
		in_ns c1 env LD_PRELOAD="$PRELOAD" RLGATE_POOL="$POOL" curl -s -o /dev/null \
			--max-time 5 "http://$(lab_addr s1 4):8080/" 2>/dev/null || rc=$?
		case $rc in
		0) ok=$((ok + 1)) ;;
		7) refused=$((refused + 1)) ;;	# curl: couldn't connect
		*) other=$((other + 1)); echo "curl exit $rc" >&2 ;;
		esac
	done
	t1=$(now_ms)
	echo "curl: $ok answered, $refused refused, $other other in $((t1 - t0)) ms"
	expect_eq "curls that failed otherwise" $other 0
	expect_eq "answered + refused" $((ok + refused)) 10
	expect_between "answered in $((t1 - t0)) ms (burst 3 + 2/s)" $ok 3 \
		$((3 + 2 * (t1 - t0) / 1000 + 1))
	# another destination: no limit
	for ((i = 0; i < 5; i++)); do
		in_ns c1 env LD_PRELOAD="$PRELOAD" RLGATE_POOL="$POOL" curl -sf -o /dev/null \
			--max-time 5 "http://$(lab_addr s2 4):8080/"
	done
	# a steady client at twice the limit
	sleep 1.5
	CLIENT_JSON=$(in_ns c1 env LD_PRELOAD="$PRELOAD" RLGATE_POOL="$POOL" \
		"$PY" "$PRELOAD_CLIENT" "$(lab_addr s1 4)" 8080 4 16)
	echo "client: $CLIENT_JSON"
	secs=$(json_get .seconds "$CLIENT_JSON")
	hi=$(awk -v t="$secs" 'BEGIN { printf "%d", 3 + 2 * t + 1 }')
	expect_eq "refused + answered" \
		$(($(json_get .ok "$CLIENT_JSON") + $(json_get .refused "$CLIENT_JSON"))) 16
	expect_between "answered" "$(json_get .ok "$CLIENT_JSON")" 3 "$hi"
	expect_eq "refused at connect in the pool" \
		"$(point_stat a down preload denied)" $((refused + $(json_get .refused "$CLIENT_JSON")))
}

@test "rlctl status names what listens without the library: a program started without it, and a statically linked one" {
	local st plain static

	command -v gcc >/dev/null || skip "gcc is needed to build a static listener"
	lab_up --servers 1 --clients 1
	preload_agent s1 a
	cat >"$BATS_TEST_TMPDIR/listen.c" <<'C'
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(8082) };
	int s = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof(sa)) || listen(s, 8))
		return 1;
	pause();
	return 0;
}
C
	gcc -static -O1 -o "$BATS_TEST_TMPDIR/static-listen" "$BATS_TEST_TMPDIR/listen.c"
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	ip netns exec "$(lab_ns s1)" "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8081 \
		>/dev/null 2>&1 3>&- &
	plain=$!
	echo "$plain" >>"$BATS_TEST_TMPDIR/srv.pids"
	# LD_PRELOAD set, and still out of its reach
	preloaded s1 "$BATS_TEST_TMPDIR/static-listen"
	static=$SRV_PID
	wait_listen s1 8080
	wait_listen s1 8081
	wait_listen s1 8082
	st=$(rla a --json status)
	echo "$st" | jq .preload
	expect_eq "a program started without the library" \
		"$(json_get ".preload.ungoverned[] | select(.pid == $plain) | .state" "$st")" \
		"not preloaded"
	expect_eq "a statically linked one" \
		"$(json_get ".preload.ungoverned[] | select(.pid == $static) | .state" "$st")" static
	expect_eq "the preloaded server is not among them" \
		"$(jq "[.preload.ungoverned[] | select(.pid == $(head -1 "$BATS_TEST_TMPDIR/srv.pids"))] | length" <<<"$st")" 0
	rla a status | grep -E "^ +$static +static-listen +static$"
}

@test "fleet: with the agent killed, preloaded programs spend what was leased, then each tenant's fail policy (allow, deny) applies once its heartbeat is stale" {
	local bound

	fleet_lab 1 2
	preload_agent s1 a --redis "$REDIS_ADDR" --agent-id a --heartbeat-stale 500
	rla a tenant set open --rate 5/s --burst 5 --match "$(prefixes c1)" --fail allow >/dev/null
	rla a tenant set shut --rate 5/s --burst 5 --match "$(prefixes c2)" --fail deny >/dev/null
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	# leases in place on both
	client c1 "$(lab_addr s1 4)" 8080 3
	client c2 "$(lab_addr s1 4)" 8080 3
	bound=$(rlctl_stat "$BATS_TEST_TMPDIR/a.sock" shut overshoot_bound)
	proc_stop "${AGENT_PIDS[0]}" KILL
	sleep 1
	client c1 "$(lab_addr s1 4)" 8080 20 "" 20
	expect_eq "fail allow: answered" "$(json_get .ok "$CLIENT_JSON")" 20
	client c2 "$(lab_addr s1 4)" 8080 20 "" 20
	expect_eq "fail deny: answered + reset" \
		$(($(json_get .ok "$CLIENT_JSON") + $(json_get .reset "$CLIENT_JSON"))) 20
	expect_between "fail deny: answered (what the host held, at most the bound $bound)" \
		"$(json_get .ok "$CLIENT_JSON")" 0 "$bound"
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

# pool_tenant FIELD: the pool's TOKENS or OVERDRAFT of its one tenant, as
# rlpool reads it (the agent may be stopped).
pool_tenant() {
	"$RLGATE_BUILD/tests/rlpool" "$POOL" --stats |
		awk -v f="$1" '$1 == "tenant" { print (f == "tokens" ? $6 : $7) }'
}

# stopped PID: PID is stopped (SIGSTOP delivered).
stopped() {
	[[ $(awk '{ print $3 }' "/proc/$1/stat") == T ]]
}

@test "fleet, a preload host attached nowhere: past its last leased token the library admits on the host's overdraft while the next lease is on its way, exactly the overdraft and no more, and the next lease pays it back" {
	local od tokens n

	fleet_lab 1 1
	# a heartbeat that outlives the stop below: no fail policy meanwhile
	preload_agent s1 a --redis "$REDIS_ADDR" --agent-id a --heartbeat-stale 60000
	rla a tenant set web --rate 10/s --burst 20 --match "$(prefixes c1)" --fail deny >/dev/null
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 4)" 8080 3
	# a quarter of the host's lease cap (the burst of 20 on one host)
	od=$(pool_tenant overdraft)
	expect_eq "the pool's overdraft" "$od" 5
	# the agent stopped: no lease comes until it runs again
	kill -STOP "${AGENT_PIDS[0]}"
	wait_for 5 stopped "${AGENT_PIDS[0]}"
	tokens=$(pool_tenant tokens)
	expect_between "the pool's tokens while the agent is stopped" "$tokens" 0 1000000
	n=$((tokens + od + 5))
	client c1 "$(lab_addr s1 4)" 8080 "$n" "" 50
	expect_eq "answered: the tokens held, then the overdraft" \
		"$(json_get .ok "$CLIENT_JSON")" $((tokens + od))
	expect_eq "reset" "$(json_get .reset "$CLIENT_JSON")" 5
	expect_eq "the pool's count" "$(pool_tenant tokens)" "-$od"
	kill -CONT "${AGENT_PIDS[0]}"
	wait_for 10 pool_tenant_paid || {
		echo "the pool's count: $(pool_tenant tokens)" >&2
		return 1
	}
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

# pool_tenant_paid: the pool owes nothing on its overdraft.
pool_tenant_paid() {
	(($(pool_tenant tokens) >= 0))
}

@test "an unprivileged server in the pool's group is limited; one outside it is told 'permission denied' once and refuses (RLGATE_POOL_FAIL=deny)" {
	local dir

	lab_up --servers 1 --clients 1
	# a directory the unprivileged user can reach (the test's own is not)
	dir=$(mktemp -d /tmp/rlpool.XXXXXX)
	TMP_DIRS+=("$dir")
	chmod 0755 "$dir"
	POOL=$dir/pool
	preload_agent s1 a --preload-group nogroup
	rla a tenant set web --rate 5/s --burst 10 --match "$(prefixes c1)" >/dev/null
	expect_eq "the pool's mode and group" "$(stat -c '%a %G' "$POOL")" "660 nogroup"
	preloaded s1 setpriv --reuid nobody --regid nogroup --clear-groups \
		"$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 4)" 8080 30
	expect_limited 30 5 10
	preload_teardown
	# in no group of the pool: nobody with its own group only
	preloaded s1 setpriv --reuid nobody --regid 65533 --clear-groups \
		"$PY" "$PRELOAD_SERVER" thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	client c1 "$(lab_addr s1 4)" 8080 3
	expect_eq "reset" "$(json_get .reset "$CLIENT_JSON")" 3
	expect_eq "lines on stderr" "$(grep -c "couldn't use pool '$POOL': permission denied" \
		"$BATS_TEST_TMPDIR/srv.err")" 1
}

# has_tenant NAME TENANT: agent NAME has TENANT.
has_tenant() {
	rla "$1" --json tenant list | jq -e ".[] | select(.name == \"$2\")" >/dev/null
}

# capped_tenant: a lab of one server and one client, an agent on s1
# attached nowhere, and tenant web capped at 5 connections in flight (its
# rate far above what the tests open).
capped_tenant() {
	lab_up --servers 1 --clients 1
	preload_agent s1 a
	rla a tenant set web --rate 1000/s --burst 1000 --max-conns 5 \
		--match "$(prefixes c1)" >/dev/null
}

# capped_web MODE: capped_tenant, and a preloaded socketserver on s1:8080
# holding each connection until the client closes it (preload_hold.py
# serve MODE).
capped_web() {
	capped_tenant
	preloaded s1 "$PY" "$PRELOAD_HOLD" serve "$1" "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
}

# preload_conns_are N: the pool counts N connections of web in flight.
preload_conns_are() {
	[[ $(point_stat a web preload conns) == "$1" ]]
}

# expect_held OK RESET: what the last hold_conns saw.
expect_held() {
	expect_eq "greeted" "$(json_get .ok "$HOLD_JSON")" "$1" &&
		expect_eq "reset" "$(json_get .reset "$HOLD_JSON")" "$2" &&
		expect_eq "failed otherwise" "$(json_get .other "$HOLD_JSON")" 0
}

# cap_holds: 8 connections held against the cap of 5: 5 greeted, 3 reset,
# 5 in flight at the preload point (none at the kernel's); released, the
# count falls to 0 and 5 new ones are all greeted.
cap_holds() {
	hold_conns h1 c1 "$(lab_addr s1 4)" 8080 8
	expect_held 5 3
	expect_eq "in flight at the preload point" "$(point_stat a web preload conns)" 5
	expect_eq "slots at the preload point" "$(point_stat a web preload conn_slots)" 5
	expect_eq "in flight at the kernel" "$(point_stat a web kernel conns)" 0
	# past two of the agent's checks: what the server holds stays counted
	sleep 2.5
	expect_eq "in flight after the agent's checks" "$(point_stat a web preload conns)" 5
	release_conns h1
	wait_for 5 preload_conns_are 0 || {
		echo "still in flight after the close: $(point_stat a web preload conns)" >&2
		return 1
	}
	hold_conns h2 c1 "$(lab_addr s1 4)" 8080 5
	expect_held 5 0
	hold_conns h3 c1 "$(lab_addr s1 4)" 8080 2
	expect_held 0 2
	release_conns h2
	release_conns h3
	wait_for 5 preload_conns_are 0 || {
		echo "still in flight after the close: $(point_stat a web preload conns)" >&2
		return 1
	}
	# the library saw every close: nothing was left to the agent's check
	! grep "given back" "$BATS_TEST_TMPDIR/a.log"
}

@test "connection caps in a preloaded threaded server: never more than --max-conns in flight (the rest reset), closes free the slots, rlctl stats shows in flight at the preload point" {
	capped_web thread
	cap_holds
	rla a stats | grep -E "^web +preload .* 0/5$"
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "connection caps in a preloaded forking server whose children dup each connection: the parent's close, the child's dup and its exit count each connection once" {
	capped_web dupfork
	cap_holds
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "connection caps: a preloaded server killed with SIGKILL has its slots back within 2 s (the agent's check against its fds), and a new server gets them" {
	local t0

	capped_web thread
	hold_conns h1 c1 "$(lab_addr s1 4)" 8080 5
	expect_held 5 0
	proc_stop "$SRV_PID" KILL
	t0=$SECONDS
	wait_for 4 preload_conns_are 0 || {
		echo "still in flight: $(point_stat a web preload conns)" >&2
		return 1
	}
	echo "given back after $((SECONDS - t0)) s"
	grep -q "given back" "$BATS_TEST_TMPDIR/a.log"
	release_conns h1
	preloaded s1 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	hold_conns h2 c1 "$(lab_addr s1 4)" 8080 6
	expect_held 5 1
}

@test "connection caps with the process table full: a preloaded server left out of it is found by the agent's check through the pool it maps; its connections stay counted while it holds them, and come back within 2 s of a SIGKILL" {
	local st

	capped_tenant
	# every line of the table taken by this test's shell
	"$RLGATE_BUILD/tests/rlpool" "$POOL" --fill-procs $$
	preloaded s1 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	hold_conns h1 c1 "$(lab_addr s1 4)" 8080 3
	expect_held 3 0
	st=$(rla a --json status)
	expect_eq "the server in the process table" \
		"$(jq "[.preload.processes[] | select(.pid == $SRV_PID)] | length" <<<"$st")" 0
	((  $(json_get .preload.table_full "$st") > 0 ))
	# past two of the agent's checks: what the server holds stays counted
	sleep 2.5
	expect_eq "in flight after the agent's checks" "$(point_stat a web preload conns)" 3
	if grep "given back" "$BATS_TEST_TMPDIR/a.log"; then
		echo "the agent gave back a connection the server holds (above)" >&2
		return 1
	fi
	proc_stop "$SRV_PID" KILL
	wait_for 4 preload_conns_are 0 || {
		echo "still in flight: $(point_stat a web preload conns)" >&2
		return 1
	}
	grep "preload: 3 connection(s) of slot .* given back" "$BATS_TEST_TMPDIR/a.log"
}

# conn_bound_is AGENT N: AGENT's conn_overshoot_bound of tenant web is N.
conn_bound_is() {
	[[ $(rla "$1" --json stats web | jq .[0].conn_overshoot_bound) == "$2" ]]
}

@test "fleet: two preload hosts share one connection cap through the slots their agents hold in Redis; in flight never exceeds the cap + the bound (2 - 1 agents x the cap), and Redis never holds more than the cap" {
	local round ok1=0 ok2=0 total slots1 slots2 in1 in2 held bound

	fleet_lab 2 1
	preload_agent s1 a --redis "$REDIS_ADDR" --agent-id a
	POOL=$BATS_TEST_TMPDIR/pool2
	preload_agent s2 b --redis "$REDIS_ADDR" --agent-id b
	rla a tenant set web --rate 1000/s --burst 1000 --max-conns 6 \
		--match "$(prefixes c1)" >/dev/null
	wait_for 5 has_tenant b web
	POOL=$BATS_TEST_TMPDIR/pool
	preloaded s1 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s1 4)" 8080
	POOL=$BATS_TEST_TMPDIR/pool2
	preloaded s2 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s2 4)" 8080
	wait_listen s1 8080
	wait_listen s2 8080
	# the bound counts the live agents, which a's agent learns from b's
	# heartbeat (once a second)
	wait_for 5 conn_bound_is a 6 || true
	bound=$(rla a --json stats web | jq .[0].conn_overshoot_bound)
	expect_eq "the bound above the cap" "$bound" 6
	# a few connections at a time to each host, held: the hosts admit
	# into the slots they hold and those they last saw free, and claim
	# them; Redis never holds more than the cap in all
	for round in 1 2 3 4; do
		hold_conns a$round c1 "$(lab_addr s1 4)" 8080 3
		ok1=$((ok1 + $(json_get .ok "$HOLD_JSON")))
		hold_conns b$round c1 "$(lab_addr s2 4)" 8080 3
		ok2=$((ok2 + $(json_get .ok "$HOLD_JSON")))
		total=$((ok1 + ok2))
		in1=$(point_stat a web preload conns) in2=$(point_stat b web preload conns)
		slots1=$(point_stat a web preload conn_slots)
		slots2=$(point_stat b web preload conn_slots)
		held=$(rcli HVALS "rl:{t:web}:slots" | awk '{ s += $1 } END { print s + 0 }')
		echo "round $round: held s1 $ok1 (in flight $in1 of $slots1), s2 $ok2 (in flight $in2 of $slots2); Redis holds $held"
		expect_between "connections held under a cap of 6" "$total" 0 $((6 + bound))
		expect_between "slots Redis holds" "$held" 0 6
		expect_eq "s1 in flight, as held" "$in1" "$ok1"
		expect_eq "s2 in flight, as held" "$in2" "$ok2"
		sleep 1.2
	done
	((ok1 > 0 && ok2 > 0)) || { echo "a host held nothing" >&2; return 1; }
	# the kernels attach nowhere: every slot is the pools'
	expect_eq "s1's kernel slots" "$(point_stat a web kernel conn_slots)" 0
	expect_eq "s2's kernel slots" "$(point_stat b web kernel conn_slots)" 0
}

@test "connection caps in a server in its own pid namespace (unshare --pid, pid 1 there): the cap holds, closes free the slots, and after a SIGKILL the agent's check finds its slots by the process's pid namespace and gives them back" {
	local child

	capped_tenant
	preloaded s1 unshare --pid --fork --kill-child "$PY" "$PRELOAD_HOLD" \
		serve thread "$(lab_addr s1 4)" 8080
	wait_listen s1 8080
	hold_conns h1 c1 "$(lab_addr s1 4)" 8080 8
	expect_held 5 3
	sleep 2.5
	expect_eq "in flight after the agent's checks" "$(point_stat a web preload conns)" 5
	release_conns h1
	wait_for 5 preload_conns_are 0
	if grep "given back" "$BATS_TEST_TMPDIR/a.log"; then
		echo "the agent gave back a connection the server held (above)" >&2
		return 1
	fi
	hold_conns h2 c1 "$(lab_addr s1 4)" 8080 5
	expect_held 5 0
	# pid 1 of its namespace: SIGKILL from outside, by its pid here
	child=$(pgrep -P "$SRV_PID")
	[[ -n $child ]]
	grep -q "^NSpid:.*[[:space:]]1$" "/proc/$child/status"
	kill -KILL "$child"
	wait_for 4 preload_conns_are 0 || {
		echo "still in flight: $(point_stat a web preload conns)" >&2
		return 1
	}
	grep -q "given back" "$BATS_TEST_TMPDIR/a.log"
}

# both_points_web [rlagent options]: a lab of one server and one client, an
# agent on s1 with XDP on eth0 and the pool, tenant web capped at 3 (its
# SYNs over the cap dropped, so a client sends them again) on c1's prefixes
# and loopback; a server without the library on s1:8080 (XDP's point) and a
# preloaded one on 127.0.0.1:8081 (the pool's).
both_points_web() {
	local pin=/sys/fs/bpf/rlgate-$LAB-a

	PIN_DIRS+=("$pin")
	mkdir -p "$BATS_TEST_TMPDIR/a.state"
	rlagent_start s1 "$BATS_TEST_TMPDIR/a.sock" "$BATS_TEST_TMPDIR/a.state" \
		"$pin" "$BATS_TEST_TMPDIR/a.log" --preload-pool "$POOL" "$@" || return 1
	AGENT_PIDS+=("$RLAGENT_PID")
	rla a tenant set web --rate 1000/s --burst 1000 --max-conns 3 --action drop \
		--match "$(prefixes c1),127.0.0.0/8" >/dev/null
	in_ns s1 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s1 4)" 8080 \
		>/dev/null 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/srv.pids"
	preloaded s1 "$PY" "$PRELOAD_HOLD" serve thread 127.0.0.1 8081
	wait_listen s1 8080 && wait_listen s1 8081
}

# points_are KC PC: in flight at the kernel and at the pool; both within
# the cap of 3 together, in flight and in slots, and the tenant's figures
# the sum of the two.
points_are() {
	local st kc pc ks ps

	st=$(rla a --json stats web) || return 1
	kc=$(json_get '.[0].points[] | select(.point == "kernel") | .conns' "$st")
	pc=$(json_get '.[0].points[] | select(.point == "preload") | .conns' "$st")
	ks=$(json_get '.[0].points[] | select(.point == "kernel") | .conn_slots' "$st")
	ps=$(json_get '.[0].points[] | select(.point == "preload") | .conn_slots' "$st")
	echo "in flight: kernel $kc of $ks, pool $pc of $ps"
	((kc + pc <= 3 && ks + ps <= 3)) || { echo "past the cap of 3" >&2; return 1; }
	expect_eq "the host's in flight" "$(json_get '.[0].conns' "$st")" $((kc + pc)) &&
		expect_eq "the host's slots" "$(json_get '.[0].conn_slots' "$st")" $((ks + ps)) || return 1
	expect_eq "in flight at the kernel" "$kc" "$1" &&
		expect_eq "in flight at the pool" "$pc" "$2"
}

# each_point_free: the kernel and the pool each have a free slot.
each_point_free() {
	local st

	st=$(rla a --json stats web) || return 1
	jq -e '[.[0].points[] | select(.conn_slots > .conns)] | length == 2' \
		<<<"$st" >/dev/null
}

# pool_has_tokens: the pool holds leased tokens of web.
pool_has_tokens() {
	(($(point_stat a web preload tokens) > 0))
}

# xdp_conn NAME / lib_conn NAME: one connection held, through XDP (from c1)
# or through the library (on s1's loopback); HOLD_JSON says how it went.
xdp_conn() {
	hold_conns "$1" c1 "$(lab_addr s1 4)" 8080 1
}
lib_conn() {
	hold_conns "$1" s1 127.0.0.1 8081 1
}

# shared_cap: connections one after the other at both points up to the cap
# of 3 are all admitted, past it refused, and the two never hold more.
shared_cap() {
	# idle: neither point is left without a slot
	wait_for 5 each_point_free || { rla a --json stats web >&2; return 1; }
	lib_conn p1
	expect_held 1 0
	wait_for 5 each_point_free
	xdp_conn k1
	expect_held 1 0
	# the last free slot stayed with the pool
	lib_conn p2
	expect_held 1 0
	points_are 1 2
	# at the cap: refused at both points
	lib_conn p3
	expect_held 0 1
	xdp_conn k2
	expect_eq "XDP's past the cap" "$(json_get .ok "$HOLD_JSON")" 0
	points_are 1 2
	# the pool's closed: the kernel gets its slots as it needs them -
	# the last one too, while the pool holds it idle, in time for the
	# client's SYN sent again after the first was dropped
	release_conns p1
	release_conns p2
	wait_for 5 each_point_free
	xdp_conn k3
	expect_held 1 0
	xdp_conn k4
	expect_held 1 0
	points_are 3 0
	lib_conn p4
	expect_held 0 1
	points_are 3 0
	# and back to the pool once the kernel's are closed
	release_conns k1
	release_conns k3
	release_conns k4
	wait_for 5 each_point_free
	lib_conn p5
	expect_held 1 0
	wait_for 5 each_point_free
	lib_conn p6
	expect_held 1 0
	points_are 0 2
}

@test "standalone at both points (XDP and the pool), cap 3: below the cap neither point is refused - each has a slot while two are free, the last goes where a connection waits - and the two never hold more than 3" {
	lab_up --servers 1 --clients 1
	both_points_web
	shared_cap
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "standalone at both points, cap 3: once the last interface is detached, the pool alone holds the whole cap" {
	lab_up --servers 1 --clients 1
	both_points_web
	wait_for 5 each_point_free || { rla a --json stats web >&2; return 1; }
	rla a detach eth0 >/dev/null
	expect_eq "the pool's slots" "$(point_stat a web preload conn_slots)" 3
	hold_conns p s1 127.0.0.1 8081 4
	expect_held 3 1
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

# listening_twice PORT: s1 has two listeners on PORT (the lab address and
# loopback).
listening_twice() {
	(($(in_ns s1 ss -Hltn "sport = :$1" | wc -l) == 2))
}

@test "standalone at both points, the agent killed: once its heartbeat is stale, each capped tenant's fail policy decides at both points alike - static keeps each point's part of the cap (never more than the cap between them), allow lifts the cap at both, deny admits nothing new at either; a restarted agent shares each cap again from what is in flight" {
	local pin=/sys/fs/bpf/rlgate-$LAB-a name port fail ps ks fd closes=

	lab_up --servers 1 --clients 1
	PIN_DIRS+=("$pin")
	mkdir -p "$BATS_TEST_TMPDIR/a.state"
	rlagent_start s1 "$BATS_TEST_TMPDIR/a.sock" "$BATS_TEST_TMPDIR/a.state" \
		"$pin" "$BATS_TEST_TMPDIR/a.log" --preload-pool "$POOL" \
		--heartbeat-stale 500
	AGENT_PIDS+=("$RLAGENT_PID")
	# one tenant per local port of s1, each capped at 3: c1's connections
	# through XDP to a server without the library on the lab address,
	# loopback's through the library; refused SYNs answered by a RST
	for name in keep:8081:static open:8082:allow shut:8083:deny; do
		IFS=: read -r name port fail <<<"$name"
		rla a tenant set "$name" --rate 1000/s --burst 1000 --max-conns 3 \
			--action rst --match "$(prefixes c1),127.0.0.0/8" \
			--port "$port" --fail "$fail" >/dev/null
		in_ns s1 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s1 4)" \
			"$port" >/dev/null 2>&1 3>&- &
		echo $! >>"$BATS_TEST_TMPDIR/srv.pids"
		preloaded s1 "$PY" "$PRELOAD_HOLD" serve thread 127.0.0.1 "$port"
		wait_for 5 listening_twice "$port"
	done
	# idle: the kernel holds part of each cap, the pool the rest
	ps=$(point_stat a keep preload conn_slots)
	ks=$(point_stat a keep kernel conn_slots)
	expect_between "the pool's part of keep's cap" "$ps" 1 2
	expect_eq "the kernel's part of keep's cap" "$ks" $((3 - ps))
	for name in open shut; do
		expect_eq "the pool's part of $name's cap" \
			"$(point_stat a "$name" preload conn_slots)" "$ps"
		expect_eq "the kernel's part of $name's cap" \
			"$(point_stat a "$name" kernel conn_slots)" "$ks"
	done
	proc_stop "${AGENT_PIDS[0]}" KILL
	sleep 1
	hold_conns k s1 127.0.0.1 8081 3
	expect_held "$ps" $((3 - ps))
	hold_conns kx c1 "$(lab_addr s1 4)" 8081 3
	expect_held "$ks" $((3 - ks))
	hold_conns o s1 127.0.0.1 8082 5
	expect_held 5 0
	hold_conns ox c1 "$(lab_addr s1 4)" 8082 5
	expect_held 5 0
	hold_conns d s1 127.0.0.1 8083 2
	expect_held 0 2
	hold_conns dx c1 "$(lab_addr s1 4)" 8083 2
	expect_held 0 2
	# back: keep's 3 and open's 10 in flight fill their caps, nothing new
	# at either point until they end; shut has its cap free again.  The
	# agent without the holders' ends of their fifos, which it would keep
	# open past their release.
	for fd in "${HOLD_FDS[@]}"; do
		closes+=" $fd>&-"
	done
	eval 'rlagent_start s1 "$BATS_TEST_TMPDIR/a.sock" "$BATS_TEST_TMPDIR/a.state" \
		"$pin" "$BATS_TEST_TMPDIR/a.log" --preload-pool "$POOL" \
		--heartbeat-stale 500'"$closes"
	AGENT_PIDS+=("$RLAGENT_PID")
	expect_eq "open's connections in flight" \
		"$(json_get '.[0].conns' "$(rla a --json stats open)")" 10
	hold_conns o2 s1 127.0.0.1 8082 1
	expect_held 0 1
	hold_conns ox2 c1 "$(lab_addr s1 4)" 8082 1
	expect_held 0 1
	hold_conns k2 c1 "$(lab_addr s1 4)" 8081 1
	expect_held 0 1
	hold_conns d2 c1 "$(lab_addr s1 4)" 8083 1
	expect_held 1 0
	hold_conns d3 s1 127.0.0.1 8083 1
	expect_held 1 0
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "a standalone agent on the pins a fleet agent left degraded (its last word on a clean stop) caps its tenants at the whole cap whatever their fail policy: a deny tenant admits up to its cap through XDP" {
	local pin=/sys/fs/bpf/rlgate-$LAB-a

	fleet_lab 1 1
	PIN_DIRS+=("$pin")
	mkdir -p "$BATS_TEST_TMPDIR/a.state"
	rlagent_start s1 "$BATS_TEST_TMPDIR/a.sock" "$BATS_TEST_TMPDIR/a.state" \
		"$pin" "$BATS_TEST_TMPDIR/a.log" --redis "$REDIS_ADDR" --agent-id a
	AGENT_PIDS+=("$RLAGENT_PID")
	proc_stop "${AGENT_PIDS[0]}" TERM
	rlagent_start s1 "$BATS_TEST_TMPDIR/a.sock" "$BATS_TEST_TMPDIR/a.state" \
		"$pin" "$BATS_TEST_TMPDIR/a.log"
	AGENT_PIDS+=("$RLAGENT_PID")
	rla a tenant set web --rate 1000/s --burst 1000 --max-conns 3 --action rst \
		--fail deny --match "$(prefixes c1)" >/dev/null
	ip netns exec "$(lab_ns s1)" "$PY" "$PRELOAD_HOLD" serve thread \
		"$(lab_addr s1 4)" 8080 >/dev/null 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/srv.pids"
	wait_listen s1 8080
	hold_conns h c1 "$(lab_addr s1 4)" 8080 4
	expect_held 3 1
}

@test "fleet at both points, the agent killed: once its heartbeat is stale, the pool's static fail share is half the host's (the kernel has the other half), so that the host does not admit two shares" {
	local pin=/sys/fs/bpf/rlgate-$LAB-a tokens hi secs

	fleet_lab 1 1
	PIN_DIRS+=("$pin")
	mkdir -p "$BATS_TEST_TMPDIR/a.state"
	rlagent_start s1 "$BATS_TEST_TMPDIR/a.sock" "$BATS_TEST_TMPDIR/a.state" \
		"$pin" "$BATS_TEST_TMPDIR/a.log" --preload-pool "$POOL" \
		--redis "$REDIS_ADDR" --agent-id a --heartbeat-stale 500
	AGENT_PIDS+=("$RLAGENT_PID")
	# one host: the host's static share is the whole limit, 2/s and 20
	rla a tenant set web --rate 2/s --burst 20 --action rst \
		--match "$(prefixes c1),127.0.0.0/8" >/dev/null
	preloaded s1 "$PY" "$PRELOAD_SERVER" thread 127.0.0.1 8081
	wait_listen s1 8081
	client s1 127.0.0.1 8081 3
	proc_stop "${AGENT_PIDS[0]}" KILL
	# what the pool still holds is spent first
	tokens=$(pool_tenant tokens)
	sleep 1
	client s1 127.0.0.1 8081 40 "" 50
	secs=$(json_get .seconds "$CLIENT_JSON")
	# half the share: a burst of 10 at 1/s (and a token refilling as the
	# run ends)
	hi=$(awk -v t="$tokens" -v s="$secs" 'BEGIN { printf "%d", t + 10 + s + 1 }')
	expect_eq "answered + reset" \
		$(($(json_get .ok "$CLIENT_JSON") + $(json_get .reset "$CLIENT_JSON"))) 40
	expect_between "answered: the $tokens token(s) held, then half the share" \
		"$(json_get .ok "$CLIENT_JSON")" $((tokens + 10)) "$hi"
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}

@test "fleet at both points (XDP and the pool), cap 3: the host holds a free slot for each point, below the cap neither is refused, and the two never hold more than 3" {
	fleet_lab 1 1
	both_points_web --redis "$REDIS_ADDR" --agent-id a
	# leased tokens go where connections were seen: the pool's first
	# connection is its first demand, its tokens come with the next checks
	lib_conn w
	release_conns w
	wait_for 5 pool_has_tokens || { rla a --json stats web >&2; return 1; }
	shared_cap
	expect_no_errors "$BATS_TEST_TMPDIR/srv.err"
}
