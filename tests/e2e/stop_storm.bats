#!/usr/bin/env bats
# A stop storm: three fleet agents stopped with SIGTERM while their Redis
# goes down under them (frozen with every call in flight, killed before
# the stop, or killed during it), right after an apply of 2,000 changed
# tenants on s1 (2,000 publishes queued), with leases and refunds of a
# loaded tenant in flight; 20 rounds.  Every agent exits 0 with no
# sanitizer report (proc_stop checks how each exited); the program stays
# attached in between; the next start adopts its pins (its counters go on)
# with nothing lost: once a new, empty Redis is there, every agent holds
# the tenants of the last apply, as s1 set them.

load helpers
load agent_helpers
load fleet_helpers

N=2000
ROUNDS=${STOP_STORM_ROUNDS:-20}
FLEET_SERVERS=3
FLEET_AGENTS=3

setup_file() { fleet_setup_file; }
teardown_file() { fleet_teardown_file; }
setup() { fleet_setup; }
teardown() { fleet_teardown; }

# tenant_file FILE R: N tenants t0..t$((N - 1)) on /28s of 10.0.0.0/8 at
# 100+R/s, and "storm" on c1's prefix at 50+R/s: each round changes every
# tenant, so s1 has N+1 changes to publish.
tenant_file() {
	jq -n --argjson n "$N" --argjson r "$2" --arg c1 "$(client_prefix c1)" \
		'{tenants: ([range($n) as $i | ($i * 16) as $k |
		{name: "t\($i)", rate: "\(100 + $r)/s", match: ["10.\($k / 65536 |
		floor).\(($k / 256 | floor) % 256).\($k % 256)/28"]}] +
		[{name: "storm", rate: "\(50 + $r)/s", burst: 20, action: "rst",
		match: [$c1]}])}' >"$1"
}

# prog_id I: the id of the XDP program on sI's eth0 (empty: none).
prog_id() {
	ip -n "$(lab_ns "s$1")" -j link show dev eth0 | jq -r '.[0].xdp.prog.id // empty'
}

# redis_freeze: Redis stops answering, its connections stay open: every
# call in flight stays in flight (a host going down under its clients).
redis_freeze() { kill -STOP "$(redis_pid)"; }

# redis_kill: Redis gone, its connections reset.
redis_kill() {
	local pid

	pid=$(redis_pid)
	kill -KILL "$pid" 2>/dev/null || true
	kill -CONT "$pid" 2>/dev/null || true
	proc_wait_exit "$pid" 5 "5 s after SIGKILL"
}

# same_as_s1 I: agent I holds exactly s1's tenants, each as s1 has it.
same_as_s1() {
	[[ $(fleet_policy "$1" | md5sum) == $(fleet_policy 1 | md5sum) ]]
}

# wait_all_hold R SECONDS: every agent holds the N+1 tenants of round R's
# apply as s1 set them, within SECONDS.
wait_all_hold() {
	local r=$1 n i ok

	for ((n = 0; n < $2 * 5; n++)); do
		ok=1
		[[ $(rls 1 --json tenant list | jq -r --arg r "$((100 + r))" \
			'[.[] | select(.name | startswith("t")) | select(.rate |
			startswith($r + "/"))] | length') == "$N" ]] || ok=0
		for ((i = 1; i <= FLEET_AGENTS && ok; i++)); do
			[[ $(rls "$i" --json status | jq .tenants) == $((N + 1)) ]] || ok=0
			((i == 1)) || same_as_s1 "$i" || ok=0
		done
		((ok)) && return 0
		sleep 0.2
	done
	echo "round $r: not every agent holds the $((N + 1)) tenants of the apply after $2 s:" >&2
	for ((i = 1; i <= FLEET_AGENTS; i++)); do
		echo "  s$i: $(rls "$i" --json status | jq .tenants) tenants, $(rls "$i" --json \
			tenant list | jq -r '.[] | select(.name == "t0") | .rate') for t0" >&2
	done
	return 1
}

@test "20 rounds of three fleet agents stopped with SIGTERM while Redis dies, an apply of 2,000 tenants being published and leases in flight: every agent exits 0 with no sanitizer report, and the next start adopts its pins and holds every tenant of the last apply" {
	local r i out seen=() v started

	out=$BATS_TEST_TMPDIR/load.json
	tenant_file "$BATS_TEST_TMPDIR/set.json" 0
	rls 1 apply "$BATS_TEST_TMPDIR/set.json" >/dev/null
	wait_all_hold 0 60
	for ((r = 1; r <= ROUNDS; r++)); do
		fleet_loadgen_bg c1 "$out" --rate 100 --duration 10 --timeout 500 \
			$(fleet_targets "$PORT" 1 1 1)
		# every lease of storm's is answered before the apply
		fleet_wait_stat 1 storm leases 1 10
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			seen[i]=$(fleet_stat "$i" storm admitted)
		done
		tenant_file "$BATS_TEST_TMPDIR/set.json" "$r"
		rls 1 apply "$BATS_TEST_TMPDIR/set.json" >/dev/null
		# Redis goes down three ways: frozen (every call stays in
		# flight until the agents' deadline frees it), killed before
		# the stop, or killed while the agents give back their tokens.
		case $((r % 3)) in
		0) redis_freeze ;;
		1) redis_kill ;;
		esac
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			kill -TERM "$(fleet_pid "$i")"
		done
		((r % 3 == 1)) || redis_kill
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			fleet_agent_stop "$i" TERM || {
				echo "round $r: s$i did not stop cleanly after SIGTERM" >&2
				return 1
			}
			expect_eq "round $r: s$i's exit status" "$FLEET_RC" 0
		done
		loadgen_stop "$LOADGEN_BG_PID" "$out" >/dev/null || true
		# enforcement outlives the agents
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			[[ -n $(prog_id "$i") ]] || {
				echo "round $r: no XDP program on s$i once its agent stopped" >&2
				return 1
			}
		done
		redis_start
		started=$(now_ms)
		fleet_agents_start || { echo "round $r: the agents did not start again" >&2; return 1; }
		for ((i = 1; i <= FLEET_AGENTS; i++)); do
			[[ $(grep -c 'adopted pinned maps' "$(fleet_log "$i")") == "$r" ]] || {
				echo "round $r: s$i's start $r did not adopt its pins" >&2
				return 1
			}
			# the counters are the pinned maps': they go on
			v=$(fleet_stat "$i" storm admitted)
			((v >= seen[i])) || {
				echo "round $r: s$i counts $v admitted for storm, ${seen[i]} before" >&2
				return 1
			}
		done
		wait_all_hold "$r" 60
		fleet_wait_steady 20
		echo "round $r: stopped and back in $(($(now_ms) - started)) ms"
	done
}
