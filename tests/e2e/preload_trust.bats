#!/usr/bin/env bats
# preload_trust.bats: what a process of the preload pool's group can do to
# a host's limits and to its agent by writing the pool.  The host enforces
# at both points: XDP on eth0 (clients of c1) and a preloaded server on
# loopback, one tenant.  A process running as nobody in the pool's group
# (tests/rlpool --forge, --hostile) writes the pool as it likes.  In fleet
# mode the agent believes none of its counts beyond its own ledger: the
# kernel and Redis never get a token it did not lease, nor a connection
# slot the processes still fill.  Standalone, the same process rewrites
# the header's sizes, truncates the file and fills the process table with
# foreign pid namespaces: the agent stays up and answers, keeps its
# heartbeat, makes the pool anew and says so, XDP keeps its share of the
# cap and the cap holds, and the agent exits 0 on SIGTERM; a preloaded
# server whose close touches the pages of a pool cut short under it lives
# on (the library's SIGBUS handler) and limits by the new pool.  With
# RLGATE_SAN_BUILD=build-san (make SANITIZE=1) that agent is the
# sanitized one, and its log must hold no sanitizer report.
#
# e2e: parallel - its checks hold however busy the machine is, so it may
# run beside another file (tools/run-tests.sh).

load helpers
load agent_helpers
load fleet_helpers
load preload_helpers

setup() {
	local dir

	e2e_setup
	e2e_require_build rlagent rlctl loadgen librlpreload.so tests/rlpool || return 1
	PRELOAD_ENV=()
	AGENT_PID=
	BG_PIDS=()
	PIN=
	# a directory the unprivileged forger can reach (the test's is not)
	dir=$(mktemp -d /tmp/rlpool.XXXXXX)
	chmod 0755 "$dir"
	TMP_DIR=$dir
	POOL=$dir/pool
	LOG=$BATS_TEST_TMPDIR/a.log
	SOCK=$BATS_TEST_TMPDIR/a.sock
	AGENT_BUILD=${RLGATE_SAN_BUILD:-$RLGATE_BUILD}
}

teardown() {
	local pid

	release_all_conns
	preload_teardown
	for pid in "${BG_PIDS[@]}" $AGENT_PID; do
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ -n ${FLEET_DIR:-} ]]; then
		proc_stop "$(redis_pid)" KILL 2>/dev/null || true
	fi
	e2e_teardown
	if [[ -n $PIN ]]; then
		rm -rf "$PIN"
	fi
	rm -rf "$TMP_DIR"
	if [[ $BATS_TEST_COMPLETED != 1 && -s $LOG ]]; then
		echo "--- agent log ---" >&2
		tail -n 30 "$LOG" >&2
	fi
}

# rla ARGS...: rlctl against the agent.
rla() {
	"$RLGATE_BUILD/rlctl" --socket "$SOCK" "$@"
}

# agent_up: the agent on s1, fleet mode, XDP on eth0 and the pool.
agent_up() {
	local rc=0

	rlagent_start s1 "$SOCK" "$BATS_TEST_TMPDIR/a.state" "$PIN" "$LOG" \
		--redis "$REDIS_ADDR" --agent-id a --preload-pool "$POOL" \
		--preload-group nogroup || rc=$?
	AGENT_PID=$RLAGENT_PID
	return $rc
}

# two_points TENANT-OPTIONS...: a lab of one server and one client, Redis,
# an agent in fleet mode on s1 with XDP on eth0 and the pool (group
# nogroup), and tenant web on c1's prefixes and loopback.
two_points() {
	lab_up --servers 1 --clients 1 --redis
	FLEET_DIR=$BATS_TEST_TMPDIR/fleet
	mkdir -p "$FLEET_DIR" "$BATS_TEST_TMPDIR/a.state"
	redis_start
	PIN=/sys/fs/bpf/rlgate-$LAB-a
	agent_up || return 1
	rla tenant set web --match "$(prefixes c1),127.0.0.0/8" --action rst "$@" >/dev/null
}

# forge tokens|conns N [MS SECONDS]: what a process of the pool's group
# writes into every leased slot (in the background with MS and SECONDS).
forge() {
	if (($# > 2)); then
		setpriv --reuid nobody --regid nogroup --clear-groups \
			"$RLGATE_BUILD/tests/rlpool" "$POOL" --forge "$@" 3>&- &
		BG_PIDS+=($!)
	else
		setpriv --reuid nobody --regid nogroup --clear-groups \
			"$RLGATE_BUILD/tests/rlpool" "$POOL" --forge "$@"
	fi
}

# web_metric NAME: NAME{tenant="web"} on the agent's page.
web_metric() {
	metric_value "$1{tenant=\"web\"}" "$(metrics s1)"
}

forged_at_least() {
	(($(web_metric rlgate_preload_forged_tokens_total) >= $1))
}

# expect_no_mint: nothing went back to Redis beyond what was leased.
expect_no_mint() {
	local leased refunded

	leased=$(web_metric rlgate_tokens_leased_total) &&
		refunded=$(web_metric rlgate_tokens_refunded_total) || return 1
	echo "leased $leased, refunded $refunded"
	((refunded <= leased)) || {
		echo "refunded $refunded tokens of $leased leased" >&2
		return 1
	}
}

@test "fleet: tokens written into the pool by a process of its group reach neither the kernel nor Redis; XDP and the library together admit at most rate x T + burst, no refund exceeds the leases, and the forgery is counted and logged once naming the tenant" {
	local t=4 rate=10 burst=10 bound lim adm_x adm_p leased refunded

	two_points --rate $rate/s --burst $burst
	serve_start s1 8080
	preloaded s1 setpriv --reuid nobody --regid nogroup --clear-groups \
		"$PY" "$PRELOAD_SERVER" thread 127.0.0.1 8081
	wait_listen s1 8081
	bound=$(rlctl_stat "$SOCK" web overshoot_bound)
	lim=$((rate * (t + 1) + burst + bound))

	# once, before any traffic: a million tokens the agent never gave
	forge tokens 1000000
	wait_for 5 forged_at_least 999000 || {
		echo "forged tokens counted: $(web_metric rlgate_preload_forged_tokens_total)" >&2
		return 1
	}
	expect_no_mint
	# both points at four times the limit each
	loadgen_bg c1 "$BATS_TEST_TMPDIR/lg.json" --rate 40 --duration $t "$(lab_target s1 8080)"
	client s1 127.0.0.1 8081 $((40 * t)) "" 40
	loadgen_wait "$LOADGEN_BG_PID" "$BATS_TEST_TMPDIR/lg.json"
	adm_x=$(json_get '.total.connected' "$LOADGEN_JSON")
	adm_p=$(json_get .ok "$CLIENT_JSON")
	echo "admitted: XDP $adm_x, library $adm_p; rate x T + burst + bound $lim"
	expect_eq "library: answered + reset" \
		$((adm_p + $(json_get .reset "$CLIENT_JSON"))) $((40 * t))
	expect_between "admitted at both points" $((adm_x + adm_p)) $((rate * t / 2)) "$lim"

	# a forger that keeps writing while the kernel alone is flooded: the
	# agent moves the pool's tokens to a kernel that ran dry, but only
	# those it gave the pool
	forge tokens 1000000 5 $t
	loadgen_bg c1 "$BATS_TEST_TMPDIR/lg2.json" --rate 40 --duration $t "$(lab_target s1 8080)"
	loadgen_wait "$LOADGEN_BG_PID" "$BATS_TEST_TMPDIR/lg2.json"
	adm_x=$(json_get '.total.connected' "$LOADGEN_JSON")
	echo "admitted by XDP under a forger: $adm_x"
	expect_between "admitted by XDP" "$adm_x" 1 "$lim"
	wait "${BG_PIDS[@]}"
	forged_at_least 2000000
	expect_no_mint
	expect_eq "warnings naming the tenant (one a minute)" \
		"$(grep -c "preload: tenant 'web': .* never gave it" "$LOG")" 1
	expect_eq "forged tokens in status" \
		"$(json_get .preload.forged_tokens "$(rla --json status)")" \
		"$(web_metric rlgate_preload_forged_tokens_total)"
	rla status | grep -E "^ +[0-9]+ leased token\(s\) written into the pool by a process of its group"

	# written while no agent runs: the next one gave none of them, so the
	# preloaded programs may spend what a host may hold of the tenant and
	# nothing goes back to Redis
	proc_stop "$AGENT_PID" KILL
	forge tokens 1000000
	agent_up
	grep "preload pool '$POOL': 1000000 leased token(s) left in it, spent there and never refunded" "$LOG"
	wait_for 5 forged_at_least $((1000000 - bound)) || {
		echo "forged tokens counted: $(web_metric rlgate_preload_forged_tokens_total)" >&2
		return 1
	}
	# past the lease TTL: what sat idle has gone back
	sleep 2
	leased=$(web_metric rlgate_tokens_leased_total)
	refunded=$(web_metric rlgate_tokens_refunded_total)
	echo "after the restart: leased $leased, refunded $refunded"
	# beyond its own leases, the kernel's tokens left by the agent before
	# (at most what a host holds)
	expect_between "refunded" "$refunded" 0 $((leased + bound))
}

# pool_holds N: the pool has N tokens and slots for N connections.
pool_holds() {
	local st

	st=$(rla --json stats web) || return 1
	(($(json_get '.[] | select(.tenant == "web") | .points[] | select(.point == "preload") | .tokens' "$st") >= $1)) &&
		(($(json_get '.[] | select(.tenant == "web") | .points[] | select(.point == "preload") | .conn_slots' "$st") >= $1))
}

@test "fleet, connection caps: a release forged in the pool (its count written 0, over and over) gives the kernel no slot the library's connections fill: what XDP admits and the library holds stay within the cap" {
	local held=5 cap=40 admitted=0 i

	two_points --rate 1000/s --burst 1000 --max-conns $cap
	# XDP's connections held by a server without the library, the pool's
	# by a preloaded one on loopback
	in_ns s1 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s1 4)" 8080 3>&- &
	BG_PIDS+=($!)
	wait_listen s1 8080
	preloaded s1 setpriv --reuid nobody --regid nogroup --clear-groups \
		"$PY" "$PRELOAD_HOLD" serve thread 127.0.0.1 8081
	wait_listen s1 8081
	# the pool's first connection is its first demand: tokens and slots
	# come with the next checks
	hold_conns w s1 127.0.0.1 8081 1
	release_conns w
	wait_for 5 pool_holds $held || {
		rla --json stats web >&2
		return 1
	}
	hold_conns p s1 127.0.0.1 8081 $held
	expect_eq "held through the library" "$(json_get .ok "$HOLD_JSON")" $held
	forge conns 0 5 15
	# past two of the agent's checks: they find the connections held
	sleep 2.5
	# XDP's clients, a few at a time while the slots are shared again
	for ((i = 0; i < 10; i++)); do
		hold_conns "k$i" c1 "$(lab_addr s1 4)" 8080 5
		admitted=$((admitted + $(json_get .ok "$HOLD_JSON")))
		sleep 0.3
	done
	echo "held: $held through the library (its count forged to 0), $admitted through XDP"
	expect_between "admitted by XDP" "$admitted" 1 $((cap - held))
}

# --- the pool's file itself ----------------------------------------------------------

# point_stat POINT FIELD: FIELD of web's enforcement point POINT.
point_stat() {
	json_get ".[] | select(.tenant == \"web\") | .points[] | select(.point == \"$1\") | .$2" \
		"$(rla --json stats web)"
}

# kernel_has_slots N: the kernel's part of web's cap is N or more.
kernel_has_slots() {
	(($(point_stat kernel conn_slots) >= $1))
}

# member CMD...: CMD as nobody, whose only group is the pool's.
member() {
	setpriv --reuid nobody --regid nogroup --groups nogroup "$@"
}

# status_answers: rlctl status answers (within 5 s) and names the pool.
status_answers() {
	timeout 5 "$RLGATE_BUILD/rlctl" --socket "$SOCK" --json status |
		jq -e '.preload.pool' >/dev/null
}

# no_sanitizer_report: the agent's log holds no ASan or UBSan report.
no_sanitizer_report() {
	if grep -E 'ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer' "$LOG" >&2; then
		echo "the agent's log holds a sanitizer report (above)" >&2
		return 1
	fi
}

# pool_sound: the pool at $POOL maps (as the library maps it: its layout
# whole, owned by root) and the agent says it is not lost.
pool_sound() {
	member "$RLGATE_BUILD/tests/rlpool" "$POOL" --stats >/dev/null 2>&1 &&
		(($(metric_value rlgate_preload_pool_lost "$(metrics s1)") == 0))
}

# library_admits: a connection through the library is greeted (it mapped
# the pool the agent made anew, and its count of web's connections is
# below the cap again).
LIB_TRIES=0
library_admits() {
	LIB_TRIES=$((LIB_TRIES + 1))
	hold_conns "w$LIB_TRIES" s1 127.0.0.1 8081 1 >/dev/null
	release_conns "w$LIB_TRIES"
	(($(json_get .ok "$HOLD_JSON") == 1))
}

# ask_status SECONDS FILE: once a second, whether rlctl status answered
# (ok) or not (no), and whether the agent still runs, into FILE.
ask_status() {
	local i

	for ((i = 0; i < $1; i++)); do
		if status_answers; then echo ok; else echo no; fi
		proc_running "$AGENT_PID" || echo dead
		sleep 1
	done >"$2"
}

@test "standalone: a member of the pool's group rewrites the header's sizes, truncates the file, forges every count and fills the process table with foreign pid namespaces while XDP and a preloaded server carry traffic: the agent stays up and answers, keeps its heartbeat, makes the pool anew and says so, XDP keeps its share of the cap, the cap holds, and the agent exits 0 on SIGTERM" {
	local cap=6 secs=8 held remade asker writer

	lab_up --servers 1 --clients 1
	PIN=/sys/fs/bpf/rlgate-$LAB-a
	mkdir -p "$BATS_TEST_TMPDIR/a.state"
	RLGATE_BUILD=$AGENT_BUILD rlagent_start s1 "$SOCK" "$BATS_TEST_TMPDIR/a.state" \
		"$PIN" "$LOG" --preload-pool "$POOL" --preload-group nogroup \
		--heartbeat-stale 1000
	AGENT_PID=$RLAGENT_PID
	# deny: a heartbeat gone stale would refuse every new connection at
	# both points
	rla tenant set web --rate 1000/s --burst 1000 --max-conns $cap --action rst \
		--fail deny --match "$(prefixes c1),127.0.0.0/8" >/dev/null
	in_ns s1 "$PY" "$PRELOAD_HOLD" serve thread "$(lab_addr s1 4)" 8080 \
		>/dev/null 2>&1 3>&- &
	echo $! >>"$BATS_TEST_TMPDIR/srv.pids"
	preloaded s1 setpriv --reuid nobody --regid nogroup --groups nogroup \
		"$PY" "$PRELOAD_HOLD" serve thread 127.0.0.1 8081
	wait_listen s1 8080
	wait_listen s1 8081
	# both points carry traffic before the attack
	wait_for 10 library_admits

	writer=$BATS_TEST_TMPDIR/writer.out
	member "$RLGATE_BUILD/tests/rlpool" "$POOL" --hostile 100 $secs \
		>"$writer" 2>&1 3>&- &
	BG_PIDS+=($!)
	asker=$BATS_TEST_TMPDIR/asked
	ask_status $((secs + 2)) "$asker" 3>&- &
	BG_PIDS+=($!)
	# while it writes: XDP gets at least half the cap whatever the pool's
	# counts say (nobody holds a connection in the pool), and holds it;
	# the tenant's fail policy being deny, nothing would be held had the
	# heartbeat gone stale
	sleep 2
	wait_for 5 kernel_has_slots $((cap / 2)) || {
		rla --json stats web >&2
		return 1
	}
	hold_conns k c1 "$(lab_addr s1 4)" 8080 $((cap + 2))
	held=$(json_get .ok "$HOLD_JSON")
	echo "XDP: $held of $((cap + 2)) held under the attack"
	expect_between "held through XDP (its share, never past the cap)" "$held" $((cap / 2)) $cap
	expect_eq "refused past what XDP may hold" "$(json_get .reset "$HOLD_JSON")" $((cap + 2 - held))
	expect_eq "in flight at the kernel" "$(point_stat kernel conns)" "$held"
	wait "${BG_PIDS[@]}"
	cat "$writer"
	grep -E ' [1-9][0-9]* headers rewritten, [1-9][0-9]* truncations' "$writer"
	expect_eq "rlctl status answered, once a second through the attack" \
		"$(grep -c '^ok$' "$asker")" $((secs + 2))
	release_conns k

	# the agent lived through it, said what happened, and made the pool
	# anew: the library maps it and limits again
	proc_running "$AGENT_PID"
	grep -E "preload: pool '$POOL': (truncated|its layout rewritten)" "$LOG"
	wait_for 5 pool_sound
	remade=$(metric_value rlgate_preload_pool_remade_total "$(metrics s1)")
	((remade >= 2)) || { echo "made anew $remade time(s)" >&2; return 1; }
	expect_eq "status: made anew" "$(json_get .preload.remade "$(rla --json status)")" "$remade"
	rla status | grep -E "pool (truncated|its layout rewritten|replaced|removed).* made anew [0-9]+ time"
	proc_running "$SRV_PID" || { echo "the preloaded server died" >&2; return 1; }
	wait_for 10 library_admits
	hold_conns p s1 127.0.0.1 8081 $((cap + 2))
	expect_between "held through the library after the attack (never past the cap)" \
		"$(json_get .ok "$HOLD_JSON")" 1 $cap
	release_conns p

	proc_stop "$AGENT_PID" TERM
	expect_eq "the agent's exit status on SIGTERM" "$PROC_RC" 0
	AGENT_PID=
	no_sanitizer_report
}

@test "standalone: the pool truncated by a member of its group under a preloaded server that holds a connection: its close touches the cut pages and the server lives; the agent makes the pool anew, and the server limits by it again" {
	lab_up --servers 1 --clients 1
	PIN=/sys/fs/bpf/rlgate-$LAB-a
	mkdir -p "$BATS_TEST_TMPDIR/a.state"
	# attached nowhere: the pool holds the whole cap
	RLAGENT_IFACE='' RLGATE_BUILD=$AGENT_BUILD rlagent_start s1 "$SOCK" \
		"$BATS_TEST_TMPDIR/a.state" "$PIN" "$LOG" --preload-pool "$POOL" \
		--preload-group nogroup
	AGENT_PID=$RLAGENT_PID
	rla tenant set web --rate 1000/s --burst 1000 --max-conns 4 --action rst \
		--match "$(prefixes c1),127.0.0.0/8" >/dev/null
	preloaded s1 setpriv --reuid nobody --regid nogroup --groups nogroup \
		"$PY" "$PRELOAD_HOLD" serve thread 127.0.0.1 8081
	wait_listen s1 8081
	wait_for 10 library_admits
	# a connection counted in the pool the server mapped
	hold_conns p s1 127.0.0.1 8081 1
	expect_eq "held through the library" "$(json_get .ok "$HOLD_JSON")" 1
	member truncate -s 4096 "$POOL"
	# its close gives its place back in the pool's pages cut off
	release_conns p
	sleep 0.5
	proc_running "$SRV_PID" || {
		cat "$BATS_TEST_TMPDIR/srv.err" >&2
		echo "the preloaded server died" >&2
		return 1
	}
	wait_for 5 pool_sound
	grep -E "preload: pool '$POOL': truncated" "$LOG"
	wait_for 10 library_admits
	hold_conns q s1 127.0.0.1 8081 6
	expect_eq "held through the library in the new pool (its cap)" \
		"$(json_get .ok "$HOLD_JSON")" 4
	release_conns q
	proc_running "$SRV_PID"
	proc_stop "$AGENT_PID" TERM
	expect_eq "the agent's exit status on SIGTERM" "$PROC_RC" 0
	AGENT_PID=
	no_sanitizer_report
}
